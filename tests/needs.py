"""What a test needs from the machine beyond the project's Python packages, said one way.

`make test` runs `.ci/deps` first, which installs all of it as root; elsewhere a test whose
server or tool is missing skips with `missing(...)`, and the run ends with one line naming every
missing thing and the command that installs it (tests/conftest.py `pytest_terminal_summary`),
so a run is never silently green. In CI a missing thing is a broken CI, not a skip.
"""

from __future__ import annotations

import os

import pytest

INSTALL_HINT = "make test-deps installs it"


def reason(thing: str) -> str:
    """The skip reason for a missing `thing`; the run's last line collects these."""
    return f"needs {thing} — {INSTALL_HINT}"


def missing(thing: str) -> None:
    """Skip the test for lack of `thing` (fail in CI, where .ci/deps always installs it)."""
    if os.environ.get("CI"):
        pytest.fail(f"{thing} is missing in CI: .ci/deps should have installed it")
    pytest.skip(reason(thing))


def missing_things(reasons: list[str]) -> list[str]:
    """The things named by skip reasons made with `reason`, once each, in order."""
    things: list[str] = []
    for text in reasons:
        start = text.find("needs ")
        end = text.find(f" — {INSTALL_HINT}")
        if start != -1 and end > start and (thing := text[start + len("needs ") : end]) not in things:
            things.append(thing)
    return things
