"""The gateway, the test doubles and the embedders import no cycle (ARCHITECTURE §2): providers
and embedders outside their packages register through entry points, so no production module
names `persyn.testing` — not lazily, not under `TYPE_CHECKING`, not as a string to import."""

from __future__ import annotations

import ast
from pathlib import Path

import persyn

ROOT = Path(persyn.__file__).parent
FOCUS = ("persyn.gateway", "persyn.testing", "persyn.memory.embedder")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in ROOT.rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every persyn module `path` may import: statements anywhere (functions, `TYPE_CHECKING`
    blocks) and `importlib.import_module("persyn....")` calls."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            if called == "import_module" and isinstance(node.args[0].value, str):
                targets = [node.args[0].value]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != "persyn":
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(path, name, known) for name, path in modules.items()}
    # Importing a submodule runs its package's __init__ first; that edge is not a dependency.
    return {name: {t for t in targets if not name.startswith(f"{t}.")} for name, targets in graph.items()}


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(graph.get(current, ()))
    return seen


def test_no_module_of_the_gateway_testing_or_embedders_is_in_an_import_cycle() -> None:
    graph = _graph()
    focus = [name for name in graph if name.startswith(FOCUS)]
    assert focus, "no module found"
    in_cycles = sorted(name for name in focus if name in _reaches(graph, name))
    assert in_cycles == []


def test_no_production_module_names_the_test_doubles() -> None:
    graph = _graph()
    production = [name for name in graph if name.startswith(("persyn.gateway", "persyn.memory"))]
    offenders = {
        name: sorted(t for t in graph[name] if t.startswith("persyn.testing")) for name in production
    }
    assert {name: targets for name, targets in offenders.items() if targets} == {}
