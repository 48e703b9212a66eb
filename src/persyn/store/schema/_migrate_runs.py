"""Migration 14 (`migrations.py`), and the flag helpers the migrations that turn flag prefixes
into tables share (11, 13, 14): kept apart so `migrations.py` stays a readable list.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from persyn.core.ids import is_id
from persyn.core.records import Sensitivity
from persyn.store.rows import Provenance
from persyn.store.schema import tables as schema

__all__ = ["delete_flags_with_prefix", "flags_with_prefix", "runs_become_tables"]


def flags_with_prefix(connection: Connection, prefix: str) -> list[tuple[str, str, str]]:
    """(agent_id, key suffix, value) of every flag under `prefix` (a range scan on the key)."""
    flags = schema.flags.c
    statement = select(flags.agent_id, flags.key, flags.value).where(
        flags.key >= prefix, flags.key < prefix + "\U0010ffff"
    )
    return [(row.agent_id, row.key[len(prefix) :], row.value) for row in connection.execute(statement)]


def delete_flags_with_prefix(connection: Connection, prefix: str) -> None:
    flags = schema.flags.c
    connection.execute(schema.flags.delete().where(flags.key >= prefix, flags.key < prefix + "\U0010ffff"))


# Migration 14: the flags that were a run's state, a conversation's cause and two channel
# ledgers become tables (`store/ports/runs.py`). `spend:<run>` (RunSpend JSON), `run-provenance:<run>`
# (Provenance JSON) and `sends:<run>` (a JSON list of call keys) merge into the run's row;
# `run:<conversation>` ({kind, reminder_id, sensitivity}) becomes its run conversation (the run
# id is the activity log's, when it has the conversation); `sent:<service>:<channel>` ([[at,
# tokens]]) and `replied:<service>:<channel>` ([[at, tokens, event]]) become ledger entries.
# A value that does not parse is dropped, as the flag readers ignored it. The flags go.
_RUN_FLAGS = ("spend:", "run-provenance:", "sends:")
_RUN_CONVERSATION_FLAG = "run:"
_LEDGER_FLAGS = {"sent:": "sent", "replied:": "replied"}
_SENSITIVITIES = {level.value for level in Sensitivity}


def _json(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _legacy_run_states(connection: Connection, now: datetime) -> list[dict[str, object]]:
    states: dict[tuple[str, str], dict[str, Any]] = {}
    for prefix in _RUN_FLAGS:
        for agent_id, run_id, raw in flags_with_prefix(connection, prefix):
            if not is_id(run_id):
                continue
            state = states.setdefault(
                (agent_id, run_id),
                {"agent_id": agent_id, "run_id": run_id, "tokens": 0, "stopped": None, "provenance": None,
                 "sends": [], "updated_at": now},
            )  # fmt: skip
            value = _json(raw)
            if prefix == "spend:" and isinstance(value, dict):
                tokens, stopped = value.get("tokens"), value.get("stopped")
                state["tokens"] = tokens if isinstance(tokens, int) and tokens >= 0 else 0
                state["stopped"] = stopped if isinstance(stopped, str) else None
            elif prefix == "run-provenance:" and isinstance(value, dict):
                with contextlib.suppress(ValueError):
                    state["provenance"] = Provenance.model_validate(value).model_dump(mode="json")
            elif prefix == "sends:" and isinstance(value, list):
                state["sends"] = [str(key) for key in value]
    return list(states.values())


def _legacy_run_conversations(connection: Connection, now: datetime) -> list[dict[str, object]]:
    runs = schema.activity_runs.c
    rows: list[dict[str, object]] = []
    for agent_id, conversation_id, raw in flags_with_prefix(connection, _RUN_CONVERSATION_FLAG):
        value = _json(raw)
        if (
            not is_id(conversation_id)
            or not isinstance(value, dict)
            or not isinstance(value.get("kind"), str)
        ):
            continue
        run_id = connection.execute(
            select(runs.run_id)
            .where(runs.agent_id == agent_id, runs.conversation_id == conversation_id)
            .limit(1)
        ).scalar()
        sensitivity = value.get("sensitivity")
        reminder_id = value.get("reminder_id")
        rows.append(
            {
                "agent_id": agent_id,
                "conversation_id": conversation_id,
                "run_id": run_id if isinstance(run_id, str) and is_id(run_id) else conversation_id,
                "kind": value["kind"][:32],
                "reminder_id": reminder_id if isinstance(reminder_id, str) and len(reminder_id) <= 26 else "",
                "sensitivity": sensitivity if sensitivity in _SENSITIVITIES else "private",
                "created_at": now,
            }
        )
    return rows


def _legacy_ledger(connection: Connection) -> list[dict[str, object]]:
    entries: dict[tuple[str, str, str, str, str], dict[str, object]] = {}
    for prefix, kind in _LEDGER_FLAGS.items():
        for agent_id, where, raw in flags_with_prefix(connection, prefix):
            service, _, channel = where.partition(":")
            value = _json(raw)
            if not service or not channel or not isinstance(value, list):
                continue
            for number, entry in enumerate(cast(list[Any], value)):
                try:
                    at = datetime.fromisoformat(str(entry[0]))
                    tokens = int(entry[1])
                    key = str(entry[2]) if kind == "replied" else f"migrated-{number}"
                except (ValueError, TypeError, IndexError, KeyError):
                    continue
                entries[(agent_id, kind, service, channel, key)] = {
                    "agent_id": agent_id, "kind": kind, "service": service, "channel": channel,
                    "key": key[:64], "at": at, "tokens": tokens,
                }  # fmt: skip
    return list(entries.values())


def runs_become_tables(connection: Connection, dialect_name: str) -> None:
    """Migration 14: `run_states`, `run_conversations` and `channel_spend`, filled from the
    flags they replace (see the note above), which are then deleted."""
    for table in (schema.run_states, schema.run_conversations, schema.channel_spend):
        table.create(connection, checkfirst=False)
    now = datetime.now(UTC)
    for table, rows in (
        (schema.run_states, _legacy_run_states(connection, now)),
        (schema.run_conversations, _legacy_run_conversations(connection, now)),
        (schema.channel_spend, _legacy_ledger(connection)),
    ):
        if rows:
            connection.execute(insert(table), rows)
    for prefix in (*_RUN_FLAGS, _RUN_CONVERSATION_FLAG, *_LEDGER_FLAGS):
        delete_flags_with_prefix(connection, prefix)
