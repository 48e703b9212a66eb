"""The suite's test dependencies, imported before any contract module needs them: a backend's
test run without one is told what to install, not handed a bare ModuleNotFoundError."""

INSTALL = "pip install pytest pytest-asyncio hypothesis"

try:
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401
    import pytest_asyncio  # noqa: F401
except ImportError as exc:
    raise ImportError(
        f"persyn.testing.store_contract needs the test dependency {exc.name!r}: {INSTALL}"
    ) from exc
