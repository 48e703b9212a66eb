"""Helpers for usage tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from persyn.core.ids import new_id
from persyn.usage.records import UsageRecord

AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def make_record(**changes: Any) -> UsageRecord:
    fields: dict[str, Any] = {
        "id": new_id(AT),
        "at": AT,
        "agent_id": "01J9Z3K4W5X6Y7Z8A9B0C1D2E3",
        "stage": "respond",
        "model": "test:echo",
        "tier": "test",
        "input_tokens": 100,
        "output_tokens": 10,
        "surface": "terminal",
        "channel": "tty",
        "thread_id": "01J9Z3K4W5X6Y7Z8A9B0C1D2E5",
        "conversation_id": "01J9Z3K4W5X6Y7Z8A9B0C1D2E6",
        "cost_usd": 0.001,
    }
    fields.update(changes)
    return UsageRecord(**fields)
