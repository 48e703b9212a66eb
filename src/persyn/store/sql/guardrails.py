"""Guardrails and emotional-state readings on SQLite (`store/ports/guardrails.py`,
`store/ports/emotions.py`) over the tables of migrations 17, 18 and 23.

Mixed into `SQLiteStore`; plain SQLAlchemy core (the one `insert` of `dml.py`), so the
PostgreSQL store runs it unchanged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection, Row

from persyn.store.ports.emotions import EmotionReading, EmotionsPort
from persyn.store.ports.guardrails import GuardrailCheck, GuardrailEvent, GuardrailsPort, WindowMessage
from persyn.store.schema.tables import (
    conversations,
    emotion_readings,
    guardrail_checks,
    guardrail_events,
    guardrail_slots,
    messages,
)
from persyn.store.sql.dml import insert
from persyn.store.sql.work import p

__all__ = ["SqlGuardrails"]

T = TypeVar("T")
_e = guardrail_events.c
_c = guardrail_checks.c
_r = emotion_readings.c

# Read on every turn: built once (see `_sqlite_work.p`).
_SQL_BLOCKS = (
    select(guardrail_events)
    .where(_e.blocked_until > p("now", _e.blocked_until), _e.lifted_at.is_(None))
    .order_by(_e.detected_at.desc(), _e.id.desc())
)
_SQL_AGENT_BLOCKS = _SQL_BLOCKS.where(_e.agent_id == p("agent_id"))
_SQL_RECENT_EMOTIONS = (
    select(emotion_readings)
    .where(_r.agent_id == p("agent_id"), _r.record_id.is_(None))
    .order_by(_r.created_at.desc(), _r.id.desc())
    .limit(p("limit"))
)


def _event(row: Row[Any]) -> GuardrailEvent:
    return GuardrailEvent(
        id=row.id,
        agent_id=row.agent_id,
        guardrail=row.guardrail,
        subject_kind=row.subject_kind,
        subject=row.subject,
        person_id=row.person_id,
        service=row.service,
        channel=row.channel,
        conversation_id=row.conversation_id,
        reason=row.reason,
        score=row.score,
        actions=tuple(row.actions),
        detected_at=row.detected_at,
        blocked_until=row.blocked_until,
        lifted_at=row.lifted_at,
    )


def _check(row: Row[Any]) -> GuardrailCheck:
    return GuardrailCheck(
        id=row.id,
        agent_id=row.agent_id,
        guardrail=row.guardrail,
        subject=row.subject,
        window_end=row.window_end,
        checked_at=row.checked_at,
        tokens=row.tokens,
    )


def _reading(row: Row[Any]) -> EmotionReading:
    return EmotionReading(
        id=row.id,
        agent_id=row.agent_id,
        created_at=row.created_at,
        conversation_id=row.conversation_id,
        event_id=row.event_id,
        record_id=row.record_id,
        distribution=dict(row.distribution),
        top=row.top,
    )


class SqlGuardrails(GuardrailsPort, EmotionsPort):
    if TYPE_CHECKING:  # provided by SQLiteStore

        async def _read(self, what: str, work: Callable[[Connection], T]) -> T: ...

        async def _write(self, what: str, work: Callable[[Connection], T]) -> T: ...

    # guardrails ---------------------------------------------------------------------------
    async def add_guardrail_event(self, event: GuardrailEvent) -> bool:
        values = event.model_dump()
        values["actions"] = list(event.actions)
        statement = insert(guardrail_events).values(**values).on_conflict_do_nothing()
        return await self._write(
            "add_guardrail_event", lambda connection: connection.execute(statement).rowcount == 1
        )

    async def guardrail_events(
        self, agent_id: str | None, *, since: datetime | None = None, limit: int = 100
    ) -> list[GuardrailEvent]:
        statement = select(guardrail_events).order_by(_e.detected_at.desc(), _e.id.desc()).limit(limit)
        if agent_id is not None:
            statement = statement.where(_e.agent_id == agent_id)
        if since is not None:
            statement = statement.where(_e.detected_at >= since)
        return await self._read(
            "guardrail_events", lambda connection: [_event(r) for r in connection.execute(statement)]
        )

    async def guardrail_blocks(self, agent_id: str | None, now: datetime) -> list[GuardrailEvent]:
        statement = _SQL_BLOCKS if agent_id is None else _SQL_AGENT_BLOCKS
        params = {"p_now": now} if agent_id is None else {"p_now": now, "p_agent_id": agent_id}
        return await self._read(
            "guardrail_blocks", lambda connection: [_event(r) for r in connection.execute(statement, params)]
        )

    async def lift_guardrail_block(self, event_id: str, now: datetime) -> GuardrailEvent | None:
        def work(connection: Connection) -> GuardrailEvent | None:
            connection.execute(
                update(guardrail_events)
                .where(_e.id == event_id, _e.lifted_at.is_(None), _e.blocked_until.is_not(None))
                .values(lifted_at=now)
            )
            found = connection.execute(select(guardrail_events).where(_e.id == event_id)).first()
            return None if found is None else _event(found)

        return await self._write("lift_guardrail_block", work)

    async def add_guardrail_check(self, check: GuardrailCheck) -> None:
        statement = insert(guardrail_checks).values(**check.model_dump()).on_conflict_do_nothing()
        await self._write("add_guardrail_check", lambda connection: connection.execute(statement))

    async def last_guardrail_check(
        self, agent_id: str, guardrail: str, subject: str
    ) -> GuardrailCheck | None:
        statement = (
            select(guardrail_checks)
            .where(_c.agent_id == agent_id, _c.guardrail == guardrail, _c.subject == subject)
            .order_by(_c.window_end.desc(), _c.id.desc())
            .limit(1)
        )

        def work(connection: Connection) -> GuardrailCheck | None:
            found = connection.execute(statement).first()
            return None if found is None else _check(found)

        return await self._read("last_guardrail_check", work)

    async def guardrail_tokens(self, agent_id: str, since: datetime) -> int:
        statement = select(func.coalesce(func.sum(_c.tokens), 0)).where(
            _c.agent_id == agent_id, _c.checked_at >= since
        )
        return await self._read("guardrail_tokens", lambda connection: int(connection.scalar(statement) or 0))

    async def purge_guardrail_checks(self, before: datetime) -> int:
        checks = delete(guardrail_checks).where(_c.checked_at < before)
        slots = delete(guardrail_slots).where(guardrail_slots.c.claimed_at < before)

        def work(connection: Connection) -> int:
            purged: int = connection.execute(checks).rowcount
            connection.execute(slots)
            return purged

        return await self._write("purge_guardrail_checks", work)

    async def claim_guardrail_slot(
        self, agent_id: str, guardrail: str, slot_start: datetime, holder: str, now: datetime
    ) -> bool:
        statement = (
            insert(guardrail_slots)
            .values(
                agent_id=agent_id, guardrail=guardrail, slot_start=slot_start, holder=holder, claimed_at=now
            )
            .on_conflict_do_nothing()
        )
        return await self._write(
            "claim_guardrail_slot", lambda connection: connection.execute(statement).rowcount == 1
        )

    async def interaction_window(
        self, agent_id: str, since: datetime, *, limit: int = 2000
    ) -> list[WindowMessage]:
        m, c = messages.c, conversations.c
        statement = (
            select(
                m.id,
                m.conversation_id,
                c.service,
                c.channel,
                m.role,
                m.person_id,
                m.speaker_name,
                m.text,
                m.created_at,
                m.event_id,
            )
            .join(conversations, (c.agent_id == m.agent_id) & (c.id == m.conversation_id))
            .where(m.agent_id == agent_id, m.created_at >= since)
            .order_by(m.created_at.desc(), m.id.desc())
            .limit(limit)
        )

        def work(connection: Connection) -> list[WindowMessage]:
            rows = [
                WindowMessage(
                    id=r.id,
                    conversation_id=r.conversation_id,
                    service=r.service,
                    channel=r.channel,
                    role=r.role,
                    person_id=r.person_id,
                    speaker_name=r.speaker_name,
                    text=r.text,
                    created_at=r.created_at,
                    event_id=r.event_id,
                )
                for r in connection.execute(statement)
            ]
            rows.reverse()
            return rows

        return await self._read("interaction_window", work)

    # emotional state ----------------------------------------------------------------------
    async def add_emotion_reading(self, reading: EmotionReading) -> bool:
        values = reading.model_dump()
        values["distribution"] = dict(reading.distribution)
        statement = insert(emotion_readings).values(**values).on_conflict_do_nothing()
        return await self._write(
            "add_emotion_reading", lambda connection: connection.execute(statement).rowcount == 1
        )

    async def recent_emotions(self, agent_id: str, limit: int) -> list[EmotionReading]:
        params = {"p_agent_id": agent_id, "p_limit": limit}
        return await self._read(
            "recent_emotions",
            lambda connection: [_reading(r) for r in connection.execute(_SQL_RECENT_EMOTIONS, params)],
        )

    async def conversation_emotions(self, agent_id: str, conversation_id: str) -> list[EmotionReading]:
        statement = (
            select(emotion_readings)
            .where(_r.agent_id == agent_id, _r.conversation_id == conversation_id, _r.record_id.is_(None))
            .order_by(_r.created_at, _r.id)
        )
        return await self._read(
            "conversation_emotions", lambda connection: [_reading(r) for r in connection.execute(statement)]
        )

    async def record_emotions(self, agent_id: str, record_ids: Sequence[str]) -> dict[str, EmotionReading]:
        if not record_ids:
            return {}
        statement = select(emotion_readings).where(
            _r.agent_id == agent_id, _r.record_id.in_(list(record_ids))
        )

        def work(connection: Connection) -> dict[str, EmotionReading]:
            found = [_reading(r) for r in connection.execute(statement)]
            return {r.record_id: r for r in found if r.record_id is not None}

        return await self._read("record_emotions", work)
