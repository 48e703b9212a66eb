"""Row types validate themselves: a bad value is an InputError naming the field when the row
is built, before any backend sees it (ARCHITECTURE §4, turn 2)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from persyn.core.errors import InputError
from persyn.core.ids import new_id
from persyn.store.base import AtTrigger, ContactAddress, Goal, Observation, Reminder, ReminderAction
from persyn.store.ports.activity import ActivityEntry

T0 = datetime(2026, 3, 2, 12, tzinfo=UTC)


def _reminder(**fields: object) -> Reminder:
    values: dict[str, object] = {
        "id": new_id(T0), "agent_id": new_id(T0), "objective": "stretch", "trigger": AtTrigger(at=T0),
        "next_fire_at": T0, "created_at": T0, "updated_at": T0,
    }  # fmt: skip
    return Reminder.model_validate(values | fields)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"id": "r1"}, "invalid reminder id 'r1'"),
        ({"agent_id": new_id(T0).lower()}, "agent id .* is not canonical"),
        ({"objective": "  "}, "reminder objective is empty"),
        ({"objective": "x" * 4001}, "is 4001 characters long; the limit is 4000"),
        ({"action": {"person_id": "sam"}}, "invalid person id 'sam'"),
    ],
)
def test_a_reminder_with_a_bad_field_cannot_be_built(fields: dict[str, object], complaint: str) -> None:
    with pytest.raises(InputError, match=complaint):
        _reminder(**fields)


def test_rows_keep_their_text_as_stored_and_name_the_field_they_refuse() -> None:
    assert _reminder(objective="  stretch  ").objective == "stretch"
    assert ReminderAction(person_id=None).person_id is None
    with pytest.raises(InputError, match="goal description is empty"):
        Goal(id=new_id(T0), agent_id=new_id(T0), description=" ", created_at=T0, updated_at=T0)
    with pytest.raises(InputError, match="invalid subject id"):
        Observation(
            id=new_id(T0), agent_id=new_id(T0), subject_id="ann", kind="job", value="x", observed_at=T0
        )
    with pytest.raises(InputError, match="invalid run id"):
        ActivityEntry(
            id="run-1",
            agent_id=new_id(T0),
            at=T0,
            kind="heartbeat",
            reminder_id="",
            objective="b",
            outcome="o",
        )
    address = ContactAddress(person_id=new_id(T0), label=" Email ", value=" sam@example.com ", created_at=T0)
    assert (address.label, address.value) == ("email", "sam@example.com")
    with pytest.raises(InputError, match="one line"):
        ContactAddress(person_id=new_id(T0), label="email", value="a\nBcc: b", created_at=T0)
