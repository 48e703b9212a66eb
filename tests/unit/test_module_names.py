"""No module of the package is named like a module of the standard library.

Inside the package, absolute imports keep `persyn.x.inspect` apart from `inspect`; but a script
run from that folder, a tool that puts it on `sys.path`, or a reader skimming an import block
meets two modules of one name, and the wrong one wins silently.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "persyn"


def _module_name(path: Path) -> str:
    return path.parent.name if path.name == "__init__.py" else path.stem


def _shadowing() -> set[str]:
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if _module_name(path) in sys.stdlib_module_names
    }


def test_no_module_is_named_like_a_standard_library_module() -> None:
    assert _shadowing() == set()


def test_the_check_sees_a_shadowing_name() -> None:
    """The rule itself: a module named like one of the standard library is caught."""
    assert _module_name(PACKAGE / "x" / "inspect.py") in sys.stdlib_module_names
    assert _module_name(PACKAGE / "copy" / "__init__.py") in sys.stdlib_module_names
