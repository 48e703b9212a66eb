"""Quick facts and observations about people on SQLite (part of the memory sub-port, SPEC §4.4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    delete,
    select,
    update,
)
from sqlalchemy.engine import Connection

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.store.base import (
    GLOBAL,
    Observation,
    ObservationChange,
    Provenance,
    QuickFact,
)
from persyn.store.schema.tables import checked_id, observation_changes, observations, quick_facts
from persyn.store.sql.dml import insert
from persyn.store.sql.mapping import fact_from_row, provenance_values
from persyn.store.sql.work import SqlWork, p

__all__ = ["SqlFacts"]


class SqlFacts(SqlWork):
    """The quick facts and observations of `SQLiteStore`."""

    async def add_observation(self, observation: Observation, action: str, reason: str) -> None:
        agent_id = observation.agent_id  # the row type validated its ids

        def work(connection: Connection) -> None:
            connection.execute(
                insert(observations).values(
                    id=observation.id,
                    agent_id=agent_id,
                    subject_id=observation.subject_id,
                    kind=observation.kind,
                    value=observation.value,
                    observed_at=observation.observed_at,
                    conversation_id=observation.conversation_id,
                )
            )
            _audit(
                connection,
                agent_id,
                observation.subject_id,
                observation.id,
                action,
                None,
                observation.value,
                reason,
                observation.observed_at,
            )

        await self._write("add_observation", work)

    async def revise_observation(
        self, agent_id: str, observation_id: str, value: str | None, action: str, reason: str, now: datetime
    ) -> None:
        def work(connection: Connection) -> None:
            row = connection.execute(
                select(observations).where(
                    observations.c.agent_id == agent_id, observations.c.id == observation_id
                )
            ).first()
            if row is None:
                raise StoreError(f"no observation {observation_id!r} for agent {agent_id!r}")
            where = (observations.c.agent_id == agent_id, observations.c.id == observation_id)
            if value is None:
                connection.execute(delete(observations).where(*where))
            else:
                connection.execute(update(observations).where(*where).values(value=value, observed_at=now))
            _audit(
                connection, agent_id, row.subject_id, observation_id, action, row.value, value, reason, now
            )

        await self._write("revise_observation", work)

    async def observations(self, agent_id: str, subject_id: str) -> list[Observation]:
        params = {"p_agent_id": agent_id, "p_subject_id": subject_id}
        rows = await self._read("observations", lambda c: c.execute(_SQL_OBSERVATIONS, params).all())
        return [
            Observation(
                id=r.id,
                agent_id=r.agent_id,
                subject_id=r.subject_id,
                kind=r.kind,
                value=r.value,
                observed_at=r.observed_at,
                conversation_id=r.conversation_id,
            )
            for r in rows
        ]

    async def observation_history(self, agent_id: str, subject_id: str) -> list[ObservationChange]:
        changes = observation_changes.c
        statement = (
            select(observation_changes)
            .where(changes.agent_id == agent_id, changes.subject_id == subject_id)
            .order_by(changes.at, changes.id)
        )
        rows = await self._read("observation_history", lambda c: c.execute(statement).all())
        return [
            ObservationChange(
                id=r.id,
                subject_id=r.subject_id,
                observation_id=r.observation_id,
                action=r.action,
                before=r.before,
                after=r.after,
                reason=r.reason,
                at=r.at,
            )
            for r in rows
        ]

    async def set_fact(
        self,
        agent_id: str,
        subject_id: str,
        key: str,
        value: str | None,
        now: datetime,
        *,
        provenance: Provenance = GLOBAL,
    ) -> None:
        agent_id = checked_id(agent_id, "agent id")
        subject_id = checked_id(subject_id, "subject id")
        key = key.strip()
        if not key or len(key) > 200:
            raise StoreError(f"invalid fact key {key!r}: use 1 to 200 characters")
        facts = quick_facts.c
        scope = provenance.scope
        if value is None:
            statement: Any = delete(quick_facts).where(
                facts.agent_id == agent_id,
                facts.subject_id == subject_id,
                facts.key == key,
                facts.scope == scope,
            )
        else:
            statement = (
                insert(quick_facts)
                .values(
                    id=new_id(now),
                    agent_id=agent_id,
                    subject_id=subject_id,
                    key=key,
                    value=value,
                    updated_at=now,
                    scope=scope,
                    **provenance_values(provenance),
                )
                .on_conflict_do_update(
                    index_elements=[facts.agent_id, facts.subject_id, facts.key, facts.scope],
                    set_={"value": value, "updated_at": now},
                )
            )
        await self._write("set_fact", lambda connection: connection.execute(statement))

    async def facts(self, agent_id: str, subject_id: str) -> dict[str, str]:
        newest: dict[str, str] = {}
        for fact in await self.fact_rows(agent_id, subject_id):
            newest.setdefault(fact.key, fact.value)
        return newest

    async def fact_rows(self, agent_id: str, subject_id: str) -> list[QuickFact]:
        params = {"p_agent_id": agent_id, "p_subject_id": subject_id}
        rows = await self._read("fact_rows", lambda c: c.execute(_SQL_FACT_ROWS, params).all())
        return [fact_from_row(row) for row in rows]


def _audit(
    connection: Connection,
    agent_id: str,
    subject_id: str,
    observation_id: str,
    action: str,
    before: str | None,
    after: str | None,
    reason: str,
    at: datetime,
) -> None:
    connection.execute(
        insert(observation_changes).values(
            id=new_id(at),
            agent_id=agent_id,
            subject_id=subject_id,
            observation_id=observation_id,
            action=action,
            before=before,
            after=after,
            reason=reason,
            at=at,
        )
    )


# The decision reads the agent's facts about itself on every turn: built once.
_SQL_FACT_ROWS = (
    select(quick_facts)
    .where(quick_facts.c.agent_id == p("agent_id"), quick_facts.c.subject_id == p("subject_id"))
    .order_by(quick_facts.c.key, quick_facts.c.updated_at.desc(), quick_facts.c.id.desc())
)


_SQL_OBSERVATIONS = (
    select(observations)
    .where(observations.c.agent_id == p("agent_id"), observations.c.subject_id == p("subject_id"))
    .order_by(observations.c.observed_at, observations.c.id)
)
