"""The house rules a newcomer relies on to find their way (docs/architecture.md §2): no module over
700 lines, no folder holding more than 25 modules directly
(its `__init__.py` counted). A folder that grows past that holds
several ideas that want names of their own; a module past that, several parts that want a module each.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "persyn"
MAX_LINES = 700
MAX_MODULES_PER_FOLDER = 25


def test_no_module_is_over_700_lines() -> None:
    long = {
        str(path.relative_to(SOURCE)): lines
        for path in SOURCE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_folder_holds_more_than_25_modules() -> None:
    per_folder = Counter(str(path.parent.relative_to(SOURCE)) for path in SOURCE.rglob("*.py"))
    crowded = {folder: count for folder, count in per_folder.items() if count > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders with more than {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_the_rules_see_the_source() -> None:
    """The two checks above pass vacuously on an empty tree: make sure they read the real one."""
    assert len(list(SOURCE.rglob("*.py"))) > 100
