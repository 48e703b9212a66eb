"""No route a stranger can reach reads a request body whole. Starlette's `request.body()`,
`request.form()` and `request.json()` read everything the client sends before any check, so a
10 MB (or 10 GB) body costs the server its memory; every route reads through
`runtime.channel.capped_body` instead (the web API's `WebContext.body`, the networks' webhooks).
The fakes in `persyn.testing` stand for the other side of a wire and are not routes of ours."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "persyn"
WHOLE = {"body", "form", "json"}


def _whole_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WHOLE
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "request"
        ):
            found.append(f"{path.relative_to(SOURCE)}:{node.lineno}: request.{node.func.attr}()")
    return found


def test_no_route_reads_a_request_body_whole() -> None:
    modules = [p for p in SOURCE.rglob("*.py") if "testing" not in p.relative_to(SOURCE).parts]
    assert len(modules) > 100  # the scan sees the real tree
    whole = [line for path in modules for line in _whole_reads(path)]
    assert not whole, "read the body through runtime.channel.capped_body:\n" + "\n".join(whole)
