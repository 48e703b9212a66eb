"""`open_store` picks the backend by the URL's scheme and names a wrong URL without its
password (the store's front door, ARCHITECTURE §4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from persyn.core.errors import ConfigError
from persyn.store import open_store


def test_open_store_rejects_unknown_schemes_naming_the_url() -> None:
    with pytest.raises(ConfigError, match=r"redis://localhost.*'sqlite'"):
        open_store("redis://localhost/0")
    with pytest.raises(ConfigError, match=r"'persyn\.db'"):
        open_store("persyn.db")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgres://alice:hunter2@db/persyn", "'postgres://***@db/persyn'"),
        ("alice:hunter2@db/persyn", "'***@db/persyn'"),
        ("mysql://db/persyn?password=hunter2", "'mysql://db/persyn?password=***'"),
    ],
)
def test_open_store_names_a_wrong_url_without_its_password(url: str, shown: str) -> None:
    with pytest.raises(ConfigError) as raised:
        open_store(url)
    assert shown in str(raised.value) and "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "sqlite://host/x.db"]
)
def test_open_store_rejects_unusable_sqlite_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="invalid SQLite store URL"):
        open_store(url)


async def test_open_store_creates_parent_directories(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "persyn.db"
    created = open_store(f"sqlite:///{target}")
    try:
        await created.setup()
        assert target.exists()
    finally:
        await created.close()
