"""Row mapping between the shared tables (`schema/tables.py`) and the port's row types, for every
backend over those tables: `x_values(row type) -> dict` for writing, `x_from_row(row) -> row
type` for reading back, and `load_person` (a person spans two tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection, Row

from persyn.core.events import Attachment, CompletionMarker, Event, EventKind, Speaker
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.store.base import (
    ActivityEntry,
    AgentRow,
    Conversation,
    Goal,
    GoalStatus,
    Identity,
    Message,
    Person,
    Provenance,
    QuickFact,
    Reminder,
    ReminderAction,
    ReminderStatus,
    Role,
)
from persyn.store.schema.tables import identities, persons, provenance_values

__all__ = [
    "activity_from_row",
    "activity_values",
    "agent_from_row",
    "conversation_from_row",
    "event_from_row",
    "event_values",
    "fact_from_row",
    "goal_from_row",
    "identities_by_person",
    "load_person",
    "marker_from_row",
    "message_from_row",
    "person_from_row",
    "provenance_from_row",
    "provenance_values",
    "record_from_row",
    "record_values",
    "reminder_from_row",
    "reminder_values",
]


def provenance_from_row(row: Row[Any]) -> Provenance:
    return Provenance(
        channel=row.channel,
        participant_ids=tuple(row.participant_ids),
        sensitivity=Sensitivity(row.sensitivity),
    )


def agent_from_row(row: Row[Any]) -> AgentRow:
    return AgentRow(id=row.id, name=row.name, created_at=row.created_at)


def event_values(event: Event) -> dict[str, Any]:
    """The `events` row for `event`; `event_from_row` reads it back."""
    speaker = None if event.speaker is None else event.speaker.model_dump(mode="json")
    return {
        **event.model_dump(
            include={"id", "agent_id", "service", "channel", "text", "received_at", "addressed"}
        ),
        "kind": event.kind.value,
        "speaker": speaker,
        "meta": dict(event.meta),
        "attachments": [attachment.model_dump(mode="json") for attachment in event.attachments],
    }


def event_from_row(row: Row[Any]) -> Event:
    return Event(
        id=row.id,
        agent_id=row.agent_id,
        kind=EventKind(row.kind),
        service=row.service,
        channel=row.channel,
        speaker=None if row.speaker is None else Speaker.model_validate(row.speaker),
        text=row.text,
        received_at=row.received_at,
        addressed=row.addressed,
        meta=dict(row.meta),
        attachments=tuple(Attachment.model_validate(item) for item in row.attachments or ()),
    )


def marker_from_row(row: Row[Any]) -> CompletionMarker:
    return CompletionMarker(
        event_id=row.event_id,
        transmitted=row.transmitted,
        text=row.text,
        reason=row.reason,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def person_from_row(row: Row[Any], person_identities: Sequence[Identity]) -> Person:
    return Person.model_construct(  # validated on the way in
        id=row.id,
        agent_id=row.agent_id,
        display_name=row.display_name,
        kind=row.kind,
        created_at=row.created_at,
        last_interaction_at=row.last_interaction_at,
        identities=tuple(person_identities),
    )


def conversation_from_row(row: Row[Any]) -> Conversation:
    return Conversation.model_construct(  # validated on the way in
        id=row.id,
        agent_id=row.agent_id,
        service=row.service,
        channel=row.channel,
        participant_ids=tuple(row.participants),
        started_at=row.started_at,
        last_activity_at=row.last_activity_at,
        closed_at=row.closed_at,
        kind=row.kind,
    )


def message_from_row(row: Row[Any]) -> Message:
    return Message.model_construct(  # validated on the way in
        id=row.id,
        agent_id=row.agent_id,
        conversation_id=row.conversation_id,
        role=Role(row.role),
        person_id=row.person_id,
        speaker_name=row.speaker_name,
        text=row.text,
        created_at=row.created_at,
        event_id=row.event_id,
    )


def load_person(connection: Connection, agent_id: str, person_id: str) -> Person:
    row = connection.execute(
        select(persons).where(persons.c.agent_id == agent_id, persons.c.id == person_id)
    ).one()
    return person_from_row(row, identities_by_person(connection, agent_id, person_id).get(person_id, ()))


def identities_by_person(
    connection: Connection, agent_id: str, person_id: str | None = None
) -> dict[str, tuple[Identity, ...]]:
    statement = select(identities).where(identities.c.agent_id == agent_id)
    if person_id is not None:
        statement = statement.where(identities.c.person_id == person_id)
    grouped: dict[str, list[Identity]] = {}
    for row in connection.execute(statement.order_by(identities.c.created_at, identities.c.id)):
        identity = Identity(service=row.service, channel=row.channel, speaker_id=row.speaker_id)
        grouped.setdefault(row.person_id, []).append(identity)
    return {key: tuple(value) for key, value in grouped.items()}


def record_values(record: MemoryRecord) -> dict[str, Any]:
    """The `memory_records` row for `record` (without its vector); `record_from_row` reads it."""
    values = record.model_dump()
    values["participant_ids"] = list(record.participant_ids)
    values["tags"] = list(record.tags)
    values["message_ids"] = list(record.message_ids)
    values["sensitivity"] = record.sensitivity.value
    return values


def record_from_row(row: Row[Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row.id,
        agent_id=row.agent_id,
        created_at=row.created_at,
        channel=row.channel,
        participant_ids=tuple(row.participant_ids),
        summary=row.summary,
        importance=row.importance,
        tags=tuple(row.tags),
        emotion=row.emotion,
        sensitivity=Sensitivity(row.sensitivity),
        conversation_id=row.conversation_id,
        message_ids=tuple(row.message_ids),
        ref=row.ref,
        kind=row.kind,
    )


def reminder_values(reminder: Reminder) -> dict[str, Any]:
    """The `reminders` row for `reminder`; `reminder_from_row` reads it back."""
    values = reminder.model_dump(exclude={"trigger", "action", "status", "provenance"})
    values.update(provenance_values(reminder.provenance))
    values["trigger"] = reminder.trigger.model_dump(mode="json")
    values["action"] = reminder.action.model_dump(mode="json", exclude_none=True)
    values["status"] = reminder.status.value
    return values


def reminder_from_row(row: Row[Any]) -> Reminder:
    return Reminder.model_validate(
        {
            "id": row.id,
            "agent_id": row.agent_id,
            "kind": row.kind,
            "objective": row.objective,
            "trigger": row.trigger,
            "action": ReminderAction.model_validate(row.action),
            "status": ReminderStatus(row.status),
            "next_fire_at": row.next_fire_at,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "last_fired_at": row.last_fired_at,
            "fire_count": row.fire_count,
            "provenance": provenance_from_row(row),
        }
    )


def goal_from_row(row: Row[Any]) -> Goal:
    return Goal(
        id=row.id,
        agent_id=row.agent_id,
        description=row.description,
        status=GoalStatus(row.status),
        created_at=row.created_at,
        updated_at=row.updated_at,
        outcome=row.outcome,
        provenance=provenance_from_row(row),
    )


def fact_from_row(row: Row[Any]) -> QuickFact:
    return QuickFact(
        subject_id=row.subject_id,
        key=row.key,
        value=row.value,
        updated_at=row.updated_at,
        provenance=provenance_from_row(row),
    )


def activity_values(entry: ActivityEntry) -> dict[str, Any]:
    """The `activity_runs` row for `entry` (without its own key); `activity_from_row` reads it."""
    return {
        "agent_id": entry.agent_id,
        "run_id": entry.id,
        "at": entry.at,
        "kind": entry.kind,
        "reminder_id": entry.reminder_id,
        "objective": entry.objective,
        "outcome": entry.outcome,
        "tokens": entry.tokens,
        "conversation_id": entry.conversation_id,
        **provenance_values(entry.provenance),
    }


def activity_from_row(row: Row[Any]) -> ActivityEntry:
    """Built without re-validating: the autonomy budget reads up to 500 rows per run, each
    validated when it was logged."""
    return ActivityEntry.model_construct(
        id=row.run_id,
        agent_id=row.agent_id,
        at=row.at,
        kind=row.kind,
        reminder_id=row.reminder_id,
        objective=row.objective,
        outcome=row.outcome,
        tokens=row.tokens,
        conversation_id=row.conversation_id,
        provenance=provenance_from_row(row),
    )
