"""Introspecting autonomous activity and self-inspection (SPEC §4.6), through the registry."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from persyn.core.clock import ManualClock
from persyn.core.config import MemoryConfig, ToolsConfig
from persyn.core.ids import new_id
from persyn.gateway.base import ToolCall
from persyn.store.base import GLOBAL, Provenance
from persyn.tools import ToolRegistry, ToolStatus
from persyn.tools.builtin.activity import ActivityContext, ActivityEntry, ActivityKind, activity_tools
from persyn.tools.builtin.facts import fact_tools
from persyn.tools.builtin.inspection import SelfInspectionContext, inspection_tools, redact
from persyn.tools.builtin.memory import MemoryToolsContext, memory_tools
from persyn.tools.builtin.outreach import OutreachContext, outreach_tools
from persyn.tools.builtin.own import OwnToolsContext, goal_tools, reminder_tools

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = new_id(T0)


async def _ok(registry: ToolRegistry, name: str, **args: Any) -> dict[str, Any]:
    outcome = await registry.call(ToolCall(id="call_1", name=name, args=args))
    assert outcome.status is ToolStatus.OK, outcome.content
    result: dict[str, Any] = json.loads(outcome.content)
    return result


class Ledger:
    """An in-memory activity source (the runtime supplies the real one), which records what
    it was asked and, like a careless source, returns more than asked, oldest first."""

    def __init__(self, entries: Sequence[ActivityEntry]) -> None:
        self.entries = list(entries)
        self.asked: list[tuple[int, ActivityKind | None]] = []

    async def __call__(self, limit: int, kind: ActivityKind | None) -> Sequence[ActivityEntry]:
        self.asked.append((limit, kind))
        return self.entries


async def test_recent_autonomous_activity_newest_first_by_kind() -> None:
    reminder = new_id(T0)
    beat = ActivityEntry(
        at=T0,
        kind="heartbeat",
        objective="Reflect on the last day and act.",
        outcome="Created the goal 'Learn Go'.",
        conversation_id=new_id(T0),
        tokens=1830,
    )
    ledger = Ledger(
        [
            beat,
            ActivityEntry(
                at=T0 + timedelta(hours=1),
                kind="reminder",
                objective="Ask Sam how the exam went.",
                outcome="Messaged Sam on slack:D1.",
                reminder_id=reminder,
            ),
            ActivityEntry(
                at=datetime(2026, 11, 30, 11),  # naive: read as UTC
                kind="heartbeat",
                objective="Reflect.",
                outcome="Skipped: the agent was busy. " + "x" * 1000,
            ),
        ]
    )
    registry = ToolRegistry(activity_tools(ActivityContext(source=ledger)))
    everything = await _ok(registry, "recent_activity")
    assert [(r["at"], r["kind"]) for r in everything["runs"]] == [
        ("2026-11-30T11:00:00+00:00", "heartbeat"),
        ("2026-11-30T10:00:00+00:00", "reminder"),
        ("2026-11-30T09:00:00+00:00", "heartbeat"),
    ]
    assert len(everything["runs"][0]["outcome"]) == 600 and everything["runs"][0]["outcome"].endswith("…")
    assert everything["runs"][1]["reminder_id"] == reminder
    beats = await _ok(registry, "recent_activity", kind="heartbeat", limit=1)
    assert beats["runs"] == [
        {
            "at": "2026-11-30T11:00:00+00:00",
            "kind": "heartbeat",
            "objective": "Reflect.",
            "outcome": everything["runs"][0]["outcome"],
            "reminder_id": None,
            "conversation_id": None,
            "tokens": None,
        }
    ]
    reminders = await _ok(registry, "recent_activity", kind="reminder")
    assert [r["objective"] for r in reminders["runs"]] == ["Ask Sam how the exam went."]
    assert ledger.asked == [(10, None), (1, "heartbeat"), (10, "reminder")]
    wrong = await registry.call(ToolCall(id="c", name="recent_activity", args={"kind": "dream"}))
    assert wrong.status is ToolStatus.INVALID_ARGUMENTS


class RuntimeRow(BaseModel):
    """A row shaped like the runtime's own activity entry (richer, with plain `str` kinds)."""

    id: str
    agent_id: str
    at: datetime
    kind: str
    reminder_id: str
    objective: str
    outcome: str
    tokens: int = 0
    conversation_id: str | None = None
    provenance: Provenance = GLOBAL


async def test_the_runtime_rows_are_a_source_as_they_are() -> None:
    rows = [
        RuntimeRow(
            id=new_id(T0),
            agent_id=AGENT,
            at=T0,
            kind="reminder",
            reminder_id=new_id(T0),
            objective="Water the ferns.",
            outcome="Rested: nothing to do.",
            tokens=412,
        )
    ]

    async def recent_activity(limit: int, kind: str | None) -> list[RuntimeRow]:
        return [r for r in rows if kind is None or r.kind == kind][:limit]

    registry = ToolRegistry(activity_tools(ActivityContext(source=recent_activity)))
    (run,) = (await _ok(registry, "recent_activity", kind="reminder"))["runs"]
    assert (run["objective"], run["tokens"], run["reminder_id"]) == (
        "Water the ferns.",
        412,
        rows[0].reminder_id,
    )
    assert (await _ok(registry, "recent_activity", kind="heartbeat"))["runs"] == []


def test_credentials_in_urls_are_masked() -> None:
    assert (
        redact("openai:llama3@http://bob:hunter2@gpu.lan:8000/v1")
        == "openai:llama3@http://***@gpu.lan:8000/v1"
    )
    assert redact("openai:x@https://h/v1?api_key=abc&x=1") == "openai:x@https://h/v1?api_key=***&x=1"
    assert redact("anthropic:claude-sonnet") == "anthropic:claude-sonnet"


async def test_inspecting_itself(tmp_path: Path) -> None:
    clock = ManualClock(T0 + timedelta(days=1, hours=2, seconds=5))
    advertised: list[str] = []
    context = SelfInspectionContext(
        agent_name="Anna",
        agent_id=AGENT,
        clock=clock,
        models={
            "respond": "anthropic:claude-sonnet",
            "default": "openai:llama3@http://u:secret@gpu.lan:8000/v1",
        },
        memory=MemoryConfig(embedder="openai:e5@http://u:secret@emb.lan/v1", channel_groups=[["a:b", "c:d"]]),
        advertised_tools=lambda: advertised,
        tools=ToolsConfig(),
        settings={"heartbeat_minutes": 30},
        started_at=T0,
        working_directory=tmp_path,
    )
    registry = ToolRegistry(inspection_tools(context))
    advertised.extend(["search_memories", *registry.names])  # the registry is assembled afterwards
    report = await _ok(registry, "inspect_self")

    assert "secret" not in json.dumps(report)
    assert {k: report[k] for k in ("agent_name", "agent_id", "now", "running_since", "running_for")} == {
        "agent_name": "Anna",
        "agent_id": AGENT,
        "now": "2026-12-01T11:00:05+00:00",
        "running_since": "2026-11-30T09:00:00+00:00",
        "running_for": "1 day, 2:00:05",
    }
    assert report["models"] == {
        "default": "openai:llama3@http://***@gpu.lan:8000/v1",
        "respond": "anthropic:claude-sonnet",
    }
    assert report["memory"]["embedder"] == "openai:e5@http://***@emb.lan/v1"
    assert report["memory"]["channel_groups"] == [["a:b", "c:d"]]
    assert report["memory"]["half_life_days"] == MemoryConfig().half_life_days
    assert report["tool_loop"] == ToolsConfig().model_dump(mode="json")
    assert report["settings"] == {"heartbeat_minutes": 30}
    assert report["tools"] == ["inspect_self", "search_memories"]

    host = report["host"]
    assert host["os"] == f"{platform.system()} {platform.release()} ({platform.machine()})"
    assert host["python"] == f"{platform.python_implementation()} {platform.python_version()}"
    assert host["cpus"] == os.cpu_count()
    assert host["working_directory"] == str(tmp_path)
    if os.path.exists("/proc/uptime"):  # noqa: ASYNC240 (a stat of procfs)
        assert host["uptime"] is not None and ":" in host["uptime"]
    if hasattr(os, "getloadavg"):
        assert host["load_average"] is not None and len(host["load_average"]) == 3


def test_every_own_tool_is_advertised_under_a_stable_name() -> None:
    async def send(person_id: str, service: str, channel: str, text: str) -> str:
        return "sent"

    async def no_activity(limit: int, kind: ActivityKind | None) -> Sequence[ActivityEntry]:
        return []

    clock = ManualClock(T0)
    own: OwnToolsContext[Any] = OwnToolsContext(store=None, agent_id=AGENT, clock=clock)
    tools = [
        *reminder_tools(own),
        *goal_tools(own),
        *fact_tools(own, None),
        *memory_tools(
            MemoryToolsContext(store=None, agent_id=AGENT, channel="a:b", present=()),  # type: ignore[arg-type]
        ),
        *outreach_tools(OutreachContext(store=None, agent_id=AGENT, clock=clock, send=send)),  # type: ignore[arg-type]
        *activity_tools(ActivityContext(source=no_activity)),
        *inspection_tools(
            SelfInspectionContext(
                agent_name="Anna",
                agent_id=AGENT,
                clock=clock,
                models={},
                memory=MemoryConfig(),
                advertised_tools=list,
            )
        ),
    ]
    registry = ToolRegistry(tools)
    assert registry.names == (
        "cancel_reminder",
        "create_goal",
        "edit_reminder",
        "get_facts",
        "inspect_self",
        "list_goals",
        "list_reminders",
        "message_contact",
        "recall_dialog",
        "recent_activity",
        "search_dialog",
        "search_memories",
        "set_fact",
        "set_reminder",
        "update_goal",
    )
    assert registry.render() == ToolRegistry(reversed(tools)).render()  # the same bytes either way
    for spec in registry.specs():
        assert spec.parameters["type"] == "object"
    for tool in tools:  # not advertised (it costs tokens), but an unknown argument is refused
        assert tool.input_model.model_config.get("extra") == "forbid", tool.name
