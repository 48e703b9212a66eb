"""`persyn doctor` on a PostgreSQL store: the connection, pgvector and the migrations, each
with what to do about it (ARCHITECTURE §7.2)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["Check", "is_postgres", "postgres_checks", "shown_url"]


@dataclass(frozen=True)
class Check:
    """One line of `persyn doctor` (defined here, re-exported by `doctor`, so this module
    needs nothing from it)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False


def is_postgres(url: str) -> bool:
    try:
        return make_url(url).get_backend_name() == "postgresql"
    except ArgumentError:
        return False


def shown_url(url: str) -> str:
    """`url` as doctor prints it: a PostgreSQL password never reaches the terminal."""
    if not is_postgres(url):
        return url
    return make_url(url).render_as_string(hide_password=True)


async def postgres_checks(url: str) -> list[Check]:
    from persyn.store.postgres.store import probe  # psycopg only where PostgreSQL is used

    found = await asyncio.to_thread(probe, url)
    if found.error is not None:
        return [
            Check(
                "postgresql",
                False,
                f"{found.url}: {found.error}",
                "start the server, or correct host, port, user, password and database in storage_url "
                "(check with `pg_isready` or `psql` and the same URL)",
            )
        ]
    checks = [Check("postgresql", True, f"{found.url} (PostgreSQL {found.server_version})")]
    if found.vector_installed is not None:
        checks.append(Check("pgvector", True, f"pgvector {found.vector_installed} installed"))
    elif found.vector_available is not None:
        checks.append(
            Check(
                "pgvector",
                True,
                f"pgvector {found.vector_available} available, not yet enabled in this database: "
                "the first start enables it (CREATE EXTENSION vector needs a role allowed to)",
                warning=True,
            )
        )
    else:
        checks.append(
            Check(
                "pgvector",
                False,
                "the server has no pgvector extension: memory vectors cannot be stored",
                "install pgvector on the database server (e.g. Debian `postgresql-16-pgvector`, or the "
                "`pgvector/pgvector` image), then `CREATE EXTENSION vector;` in this database",
            )
        )
    if found.schema_version > found.latest_version:
        checks.append(
            Check(
                "migrations",
                False,
                f"schema version {found.schema_version} is newer than this Persyn knows ({found.latest_version})",
                "upgrade Persyn on this host to the version the other hosts run",
            )
        )
    elif found.schema_version < found.latest_version:
        checks.append(
            Check(
                "migrations",
                True,
                f"schema version {found.schema_version} of {found.latest_version}: the next start "
                f"applies migrations {found.schema_version + 1}..{found.latest_version}",
                warning=True,
            )
        )
    else:
        checks.append(Check("migrations", True, f"schema version {found.schema_version} (current)"))
    if found.missing_vector_indexes:
        tables = ", ".join(f"memory_vectors_{dims}" for dims in found.missing_vector_indexes)
        checks.append(
            Check(
                "vector index",
                True,
                f"{tables} without its HNSW index (a bulk load under way, or one interrupted): "
                "vector recall there is exact, and slow on a large table",
                "any Persyn command that opens the store rebuilds it when no bulk load holds it "
                "(minutes at a million vectors)",
                warning=True,
            )
        )
    if found.keyword_problem is not None:
        checks.append(
            Check(
                "keyword lists",
                False,
                f"{found.keyword_problem}: keyword recall misses records",
                "enable the triggers (`ALTER TABLE memory_records ENABLE TRIGGER ALL;`), then start "
                "Persyn once: the store rebuilds the lists at start (about a minute at a million records)"
                if found.keyword_problem.startswith("trigger")
                else "start Persyn once (any command that opens the store): it rebuilds the lists "
                "(about a minute at a million records)",
            )
        )
    return checks
