"""Artifacts on SQLite (`store/ports/artifacts.py`) over the `artifact_versions` table (migration 19).

Mixed into `SQLiteStore` (and so into `PostgresStore`); plain SQLAlchemy core. The next version
number is read and written in one write transaction — on SQLite the single writer, on
PostgreSQL the store's serialised writes — and the unique (scope, name, version) key makes a
lost race an error rather than two versions with one number."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection, Row

from persyn.store.ports.artifacts import ArtifactsPort, ArtifactSummary, ArtifactVersion
from persyn.store.schema.tables import artifact_versions

__all__ = ["SqlArtifacts"]

T = TypeVar("T")
_a = artifact_versions.c


def _from_row(row: Row[Any]) -> ArtifactVersion:
    return ArtifactVersion(
        id=row.id,
        scope=row.scope,
        name=row.name,
        version=row.version,
        agent_id=row.agent_id,
        content=row.content,
        note=row.note,
        created_at=row.created_at,
    )


class SqlArtifacts(ArtifactsPort):
    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    async def add_artifact_version(
        self, version: ArtifactVersion, *, base: int | None
    ) -> ArtifactVersion | None:
        def work(connection: Connection) -> ArtifactVersion | None:
            latest = connection.scalar(
                select(func.coalesce(func.max(_a.version), 0)).where(
                    _a.scope == version.scope, _a.name == version.name
                )
            )
            latest = int(latest or 0)
            if base is not None and base != latest:
                return None
            stored = version.model_copy(update={"version": latest + 1})
            connection.execute(insert(artifact_versions).values(**stored.model_dump()))
            return stored

        return await self._write("add_artifact_version", work)

    async def artifact_versions(self, scope: str, name: str) -> list[ArtifactVersion]:
        statement = select(artifact_versions).where(_a.scope == scope, _a.name == name).order_by(_a.version)
        return await self._read(
            "artifact_versions", lambda connection: [_from_row(r) for r in connection.execute(statement)]
        )

    async def artifacts(self, scopes: Sequence[str]) -> list[ArtifactSummary]:
        if not scopes:
            return []
        statement = (
            select(_a.scope, _a.name, _a.version, _a.agent_id, _a.created_at)
            .where(_a.scope.in_(list(scopes)))
            .order_by(_a.scope, _a.name, _a.version)
        )

        def work(connection: Connection) -> list[ArtifactSummary]:
            grouped: dict[tuple[str, str], list[Any]] = {}
            for row in connection.execute(statement):
                grouped.setdefault((row.scope, row.name), []).append(row)
            summaries: list[ArtifactSummary] = []
            for (scope, name), rows in grouped.items():
                counts: dict[str, int] = {}
                for row in rows:
                    counts[row.agent_id] = counts.get(row.agent_id, 0) + 1
                last = rows[-1]
                summaries.append(
                    ArtifactSummary(
                        scope=scope,
                        name=name,
                        latest=last.version,
                        updated_at=last.created_at,
                        last_agent_id=last.agent_id,
                        versions_by_agent=counts,
                    )
                )
            summaries.sort(key=lambda s: (s.updated_at, s.scope, s.name), reverse=True)
            return summaries

        return await self._read("artifacts", work)
