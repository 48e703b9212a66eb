"""Every module and source folder that `docs/architecture.md` and the README name in backticks
exists, so the living design cannot keep pointing at modules that moved.

A path is read from the repository root or from `src/persyn/` (`store/sql/work.py`); a shorter
one (`sql/search.py` in the store's section, a bare `_wake.py`) must end a path somewhere in the
tree. A folder counts when it starts at a package (`tools/`, `runtime/durable/`) or at one of the
repository's own folders; other folders (`data/traces/`, a skill's `assets/`) are a deployment's.
A placeholder (`channels/NAME/`, `sql/<concern>.py`, `_name.py`) is a pattern, not a path.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "docs" / "architecture.md", ROOT / "README.md")
PACKAGE = ROOT / "src" / "persyn"

_TICKED = re.compile(r"`([^`\s]+)`")
# A source path: words joined by `/`, ending in `.py` or `/` (a folder); no placeholder.
_PATH = re.compile(r"(?:[a-z0-9_-]+/)*(?:[a-z0-9_-]+\.py|[a-z0-9_-]+/)")
_PATTERNS = {"_name.py"}  # the naming rule for private modules, not a module
_SOURCE_ROOTS = {"src", "tests", "bench", "scripts", "docs"}


def _is_source(name: str) -> bool:
    if name.endswith(".py"):
        return name not in _PATTERNS
    first = name.split("/")[0]
    return first in _SOURCE_ROOTS or (PACKAGE / first).is_dir()


def _named_paths(text: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in _TICKED.finditer(line):
            name = match.group(1).split("::")[0]
            if _PATH.fullmatch(name) and _is_source(name):
                found.append((number, name))
    return found


def _exists(name: str, files: set[str]) -> bool:
    if (ROOT / name).exists() or (PACKAGE / name).exists():
        return True
    # Named within its section's package (`sql/search.py` under `store/`), or a bare module name.
    return any(path.endswith("/" + name.rstrip("/")) for path in files)


def _tree() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for top in ("src", "tests", "bench", "scripts", "docs")
        for path in (ROOT / top).rglob("*")
        if "__pycache__" not in path.parts
    }


def test_every_path_the_documents_name_exists() -> None:
    files = _tree()
    missing = [
        f"{document.relative_to(ROOT)}:{number}: `{name}`"
        for document in DOCUMENTS
        for number, name in _named_paths(document.read_text(encoding="utf-8"))
        if not _exists(name, files)
    ]
    assert not missing, "paths the documents name that do not exist:\n" + "\n".join(missing)


def test_the_path_reader_finds_paths_and_skips_placeholders() -> None:
    """The check above is only as good as this."""
    text = "`store/sql/work.py`, `channels/NAME/`, `sql/<concern>.py`, `_wake.py`, `a.b`, `tools/`, `data/x/`"
    assert [name for _, name in _named_paths(text)] == ["store/sql/work.py", "_wake.py", "tools/"]
    files = _tree()
    assert _exists("store/sql/work.py", files) and _exists("_wake.py", files)
    assert not _exists("store/copy.py", files) and not _exists("_dbos_wake.py", files)
