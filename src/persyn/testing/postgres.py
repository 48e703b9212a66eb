"""A real PostgreSQL for tests (ARCHITECTURE §7.2): PyPI `pgserver` bundles PostgreSQL 16
with pgvector and runs it on a Unix socket in a directory of ours. One server per test
session; each test gets a database of its own (`fresh_database`), so tests never see each
other's rows. `pgserver` is a dev dependency: importing this module without it fails."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = ["PostgresForTests"]


class PostgresForTests:
    """A running server. `stop()` it at the end of the session."""

    def __init__(self, directory: Path | None = None) -> None:
        # pgserver runs the server as its own user when started by root: the data
        # directory's parents must be enterable by it, which pytest's tmp_path is not.
        self._owned = directory is None
        directory = Path(tempfile.mkdtemp(prefix="persyn-pg-")) if directory is None else directory
        with warnings.catch_warnings():
            # platformdirs warns at pgserver's import where XDG_RUNTIME_DIR is unset (CI,
            # containers); pgserver falls back to /tmp, which is all it needs.
            warnings.simplefilter("ignore")
            import pgserver

        self._server: Any = pgserver.get_server(directory, cleanup_mode="stop")  # pyright: ignore[reportPrivateImportUsage]
        self._names = itertools.count(1)
        # Durability buys nothing in a test server; skipping fsync keeps it fast on a busy
        # machine. pgvector lives in `public`, shared by every schema (`fresh_schema`).
        self._server.psql(
            "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off; "
            "ALTER SYSTEM SET full_page_writes = off; SELECT pg_reload_conf(); "
            "CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;"
        )

    def url(self, database: str = "postgres") -> str:
        """`postgresql://postgres:@/DATABASE?host=SOCKET_DIR`, as pgserver spells it."""
        return str(self._server.get_uri(database))

    def fresh_database(self, prefix: str = "t") -> str:
        """The URL of a new, empty database (a few seconds on a busy machine: for tests
        that need a database of their own, e.g. several processes or DBOS)."""
        name = f"{prefix}_{next(self._names)}"
        self._server.psql(f"CREATE DATABASE {name};")
        return self.url(name)

    def fresh_schema(self, prefix: str = "s") -> str:
        """The URL of a new, empty schema in the shared database, first on the search path
        (pgvector's types come from `public`, where the extension is created once): what a
        store sees is as empty as a new database, for a millisecond instead of seconds."""
        name = f"{prefix}_{next(self._names)}"
        self._server.psql(f"CREATE SCHEMA {name};")
        return f"{self.url()}&options=-csearch_path%3D{name},public"

    def stop(self) -> None:
        self._server.cleanup()
        if self._owned:
            shutil.rmtree(self._server.pgdata, ignore_errors=True)
