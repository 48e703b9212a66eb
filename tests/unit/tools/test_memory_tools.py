"""Memory search and "remember harder" (SPEC §4.1, §4.6) through the registry, on a real
SQLite store — and that the tools withhold exactly what retrieval withholds."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from persyn.core.errors import ToolError
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, Sensitivity
from persyn.gateway.base import ToolCall
from persyn.store import Identity
from persyn.store.base import Conversation, Message, Role
from persyn.store.sqlite.store import SQLiteStore
from persyn.tools import ToolOutcome, ToolRegistry, ToolStatus
from persyn.tools.builtin import memory as memory_tools_module
from persyn.tools.builtin._regex import matching
from persyn.tools.builtin.memory import MemoryToolsContext, memory_tools

T0 = datetime(2026, 11, 2, 9, tzinfo=UTC)
AGENT = new_id(T0)
DM = "slack:D1"  # the agent and Ann
ROOM = "slack:general"  # the agent, Ann and Bo


class World:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.ann = ""
        self.bo = ""
        self.cy = ""
        self.records: dict[str, MemoryRecord] = {}
        self.dm_talk: Conversation | None = None
        self.dm_messages: list[Message] = []

    async def build(self) -> None:
        store = self.store
        self.ann = (
            await store.resolve_person(
                AGENT, Identity(service="slack", channel="D1", speaker_id="U1"), "Ann", "human", T0
            )
        ).id
        self.bo = (
            await store.resolve_person(
                AGENT, Identity(service="slack", channel="general", speaker_id="U2"), "Bo", "human", T0
            )
        ).id
        self.cy = (
            await store.resolve_person(
                AGENT, Identity(service="slack", channel="general", speaker_id="U3"), "Cy", "human", T0
            )
        ).id

        self.dm_talk = await store.open_conversation(AGENT, "slack", "D1", [self.ann], T0, 1800)
        self.dm_messages = [
            await self.say(self.dm_talk, "Ann", self.ann, "My exam is on Friday at 10, in room 4B.", 0),
            await self.say(self.dm_talk, "Persyn", None, "Good luck! Shall I remind you on Thursday?", 1),
            await self.say(self.dm_talk, "Ann", self.ann, "Yes please, and bring oolong tea.", 2),
        ]
        room = await store.open_conversation(
            AGENT, "slack", "general", [self.ann, self.bo], T0 + timedelta(hours=2), 1800
        )
        await self.say(room, "Bo", self.bo, "The exam party is a surprise for Cy, keep it quiet.", 120)
        later = await store.open_conversation(AGENT, "slack", "D1", [self.ann], T0 + timedelta(days=3), 1800)
        await self.say(later, "Ann", self.ann, "The exam went fine, thanks!", 3 * 24 * 60)

        self.records = {
            "exam": self.record(
                DM,
                [self.ann],
                "Ann told me her exam is on Friday at 10.",
                0,
                ("exam", "ann"),
                conversation=self.dm_talk,
            ),
            "tea": self.record(DM, [self.ann], "Ann likes oolong tea.", 1, ("tea",)),
            "result": self.record(DM, [self.ann], "Ann's exam went fine.", 3 * 24 * 60, ("exam",)),
            "party": self.record(
                ROOM, [self.ann, self.bo], "Bo plans an exam party for Cy.", 120, ("exam", "party")
            ),
            "secret": self.record(
                ROOM,
                [self.ann, self.bo],
                "Ann and Bo told me the exam date is a secret.",
                130,
                ("exam",),
                Sensitivity.CONFIDENTIAL,
            ),
            "public": self.record(
                ROOM, [self.bo], "The room agreed exams are stressful.", 140, ("exam",), Sensitivity.PUBLIC
            ),
        }
        for record in self.records.values():
            assert await store.add_record(record, None, None)

    async def say(
        self, conversation: Conversation, name: str, person: str | None, text: str, minutes: int
    ) -> Message:
        at = T0 + timedelta(minutes=minutes)
        message = Message(
            id=new_id(at),
            agent_id=AGENT,
            conversation_id=conversation.id,
            role=Role.AGENT if person is None else Role.USER,
            person_id=person,
            speaker_name=name,
            text=text,
            created_at=at,
            event_id=None,
        )
        assert await self.store.add_message(message)
        return message

    def record(
        self,
        channel: str,
        participants: Sequence[str],
        summary: str,
        minutes: int,
        tags: tuple[str, ...],
        sensitivity: Sensitivity = Sensitivity.PRIVATE,
        conversation: Conversation | None = None,
    ) -> MemoryRecord:
        at = T0 + timedelta(minutes=minutes, seconds=30)
        return MemoryRecord(
            id=new_id(at),
            agent_id=AGENT,
            created_at=at,
            channel=channel,
            participant_ids=tuple(participants),
            summary=summary,
            tags=tags,
            sensitivity=sensitivity,
            conversation_id=conversation.id if conversation else None,
            message_ids=tuple(m.id for m in self.dm_messages) if conversation else (),
        )

    def tools(
        self,
        channel: str,
        present: Sequence[str],
        groups: Sequence[Sequence[str]] = (),
        dialog: Sensitivity = Sensitivity.RESTRICTED,
    ) -> Caller:
        context = MemoryToolsContext(
            store=self.store,
            agent_id=AGENT,
            channel=channel,
            present=(AGENT, *present),
            channel_groups=groups,
            dialog_sensitivity=dialog,
        )
        return Caller(ToolRegistry(memory_tools(context)))


class Caller:
    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def call(self, name: str, **args: Any) -> ToolOutcome:
        return await self.registry.call(ToolCall(id="call_1", name=name, args=args))

    async def ok(self, name: str, **args: Any) -> dict[str, Any]:
        outcome = await self.call(name, **args)
        assert outcome.status is ToolStatus.OK, outcome.content
        result: dict[str, Any] = json.loads(outcome.content)
        return result

    async def summaries(self, **args: Any) -> list[str]:
        return [m["summary"] for m in (await self.ok("search_memories", **args))["memories"]]

    async def texts(self, **args: Any) -> list[str]:
        return [m["text"] for m in (await self.ok("search_dialog", **args))["messages"]]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    store = SQLiteStore(tmp_path / "persyn.db")
    await store.setup()
    built = World(store)
    await built.build()
    yield built
    await store.close()


async def test_searching_memories_by_keyword_tags_dates_and_regex(world: World) -> None:
    tools = world.tools(DM, [world.ann])
    exam = world.records["exam"]
    found = await tools.ok("search_memories", keyword="exam Friday")
    assert found["memories"][0] == {
        "id": exam.id,
        "at": "2026-11-02T09:00:30+00:00",
        "channel": DM,
        "kind": "exchange",
        "importance": 5,
        "tags": ["exam", "ann"],
        "summary": "Ann told me her exam is on Friday at 10.",
        "conversation_id": world.dm_talk.id if world.dm_talk else None,
    }
    assert found["note"] is None
    # No keyword: newest first, in this compartment only.
    assert await tools.summaries() == [
        "Ann's exam went fine.",
        "Ann likes oolong tea.",
        "Ann told me her exam is on Friday at 10.",
    ]
    assert await tools.summaries(tags=["EXAM"]) == [
        "Ann's exam went fine.",
        "Ann told me her exam is on Friday at 10.",
    ]
    assert await tools.summaries(tags=["exam", "ann"]) == ["Ann told me her exam is on Friday at 10."]
    assert await tools.summaries(since="2026-11-03") == ["Ann's exam went fine."]
    assert await tools.summaries(until="2026-11-02T09:01:00") == ["Ann told me her exam is on Friday at 10."]
    assert await tools.summaries(since="2026-11-02T09:01:00Z", until="2026-11-02T10:00:00Z") == [
        "Ann likes oolong tea."
    ]
    assert await tools.summaries(regex=r"\bat \d+") == ["Ann told me her exam is on Friday at 10."]
    assert await tools.summaries(regex="^ann", limit=1) == ["Ann's exam went fine."]
    assert await tools.summaries(keyword="exam", regex="fine") == ["Ann's exam went fine."]


@pytest.mark.parametrize(
    ("args", "status", "expected"),
    [
        (
            {"regex": "(unclosed"},
            ToolStatus.FAILED,
            "invalid regular expression '(unclosed': missing ), unterminated",
        ),
        ({"keyword": "?!"}, ToolStatus.FAILED, "the keyword '?!' has no words to search for"),
        (
            {"since": "2026-11-05", "until": "2026-11-01"},
            ToolStatus.INVALID_ARGUMENTS,
            "until is before since",
        ),
        ({"limit": 0}, ToolStatus.INVALID_ARGUMENTS, "limit: Input should be greater than or equal to 1"),
        (
            {"regex": "x" * 201},
            ToolStatus.INVALID_ARGUMENTS,
            "regex: String should have at most 200 characters",
        ),
    ],
)
async def test_searches_that_cannot_run_say_why(
    world: World, args: dict[str, Any], status: ToolStatus, expected: str
) -> None:
    for name in ("search_memories", "search_dialog"):
        outcome = await world.tools(DM, [world.ann]).call(name, **args)
        assert outcome.status is status
        assert expected in outcome.content


async def test_memory_search_withholds_what_retrieval_withholds(world: World) -> None:
    # In the room with Ann and Bo: the room's records, not the DM's (another compartment).
    room = world.tools(ROOM, [world.ann, world.bo])
    assert await room.summaries(keyword="exam") == [  # best match first
        "The room agreed exams are stressful.",
        "Bo plans an exam party for Cy.",
        "Ann and Bo told me the exam date is a secret.",
    ]
    # Cy joins: only the public record may be said in front of him.
    with_cy = world.tools(ROOM, [world.ann, world.bo, world.cy])
    assert await with_cy.summaries(keyword="exam party secret stressful") == [
        "The room agreed exams are stressful."
    ]
    assert await with_cy.summaries(tags=["party"]) == []
    # The DM grouped with the room: Ann alone sees the room's private and public records
    # from her DM, never the confidential one (a group never widens a confidence).
    grouped = world.tools(DM, [world.ann], groups=[[DM, ROOM]])
    shown = set(await grouped.summaries(tags=["exam"]))
    assert shown == {
        "Ann told me her exam is on Friday at 10.",
        "Ann's exam went fine.",
        "Bo plans an exam party for Cy.",
        "The room agreed exams are stressful.",
    }
    # recall_dialog refuses a withheld record exactly as it refuses one that does not exist.
    secret = world.records["secret"]
    refused = await grouped.call("recall_dialog", memory_id=secret.id)
    missing = await grouped.call("recall_dialog", memory_id=new_id(T0))
    assert refused.status is missing.status is ToolStatus.FAILED
    assert (
        refused.content
        == f"Tool 'recall_dialog' failed: you have no memory {secret.id!r} you can recall here"
    )
    assert missing.content.endswith(" you can recall here")


async def test_searching_dialog(world: World) -> None:
    dm = world.tools(DM, [world.ann])
    assert await dm.texts(keyword="exam") == [
        "The exam went fine, thanks!",
        "My exam is on Friday at 10, in room 4B.",
    ]
    hit = (await dm.ok("search_dialog", keyword="oolong"))["messages"][0]
    assert hit == {
        "id": world.dm_messages[2].id,
        "at": "2026-11-02T09:02:00+00:00",
        "channel": DM,
        "conversation_id": world.dm_talk.id if world.dm_talk else None,
        "speaker": "Ann",
        "text": "Yes please, and bring oolong tea.",
    }
    assert await dm.texts(keyword="exam Friday") == ["My exam is on Friday at 10, in room 4B."]  # every word
    # No keyword: the latest messages, newest first; by date and by regex.
    assert await dm.texts(limit=2) == ["The exam went fine, thanks!", "Yes please, and bring oolong tea."]
    assert await dm.texts(until="2026-11-02T09:01:30Z") == [
        "Good luck! Shall I remind you on Thursday?",
        "My exam is on Friday at 10, in room 4B.",
    ]
    assert await dm.texts(regex=r"room \d[a-z]") == ["My exam is on Friday at 10, in room 4B."]
    assert await dm.texts(keyword="exam", since="2026-11-04") == ["The exam went fine, thanks!"]


async def test_dialog_search_stays_in_its_compartment(world: World) -> None:
    # Restricted by default: even grouped with the room, Ann alone in her DM does not get
    # the room's dialog — a record formed from it might be confidential.
    grouped = world.tools(DM, [world.ann], groups=[[DM, ROOM]])
    assert "The exam party is a surprise for Cy, keep it quiet." not in await grouped.texts(keyword="exam")
    # In the room, with the same company, it is there; with Cy present it is not.
    assert await world.tools(ROOM, [world.ann, world.bo]).texts(keyword="party") == [
        "The exam party is a surprise for Cy, keep it quiet."
    ]
    assert await world.tools(ROOM, [world.ann, world.bo, world.cy]).texts(keyword="party") == []
    assert await world.tools(ROOM, [world.ann, world.bo, world.cy]).texts() == []
    # A deployment that treats dialog as private lets the channel group share it.
    private = world.tools(DM, [world.ann], groups=[[DM, ROOM]], dialog=Sensitivity.PRIVATE)
    assert "The exam party is a surprise for Cy, keep it quiet." in await private.texts(keyword="party")
    # Never another compartment's dialog, whatever the setting.
    assert await world.tools(DM, [world.ann], dialog=Sensitivity.PUBLIC).texts(keyword="party") == []


async def test_remembering_harder(world: World) -> None:
    dm = world.tools(DM, [world.ann])
    exam = world.records["exam"]
    recalled = await dm.ok("recall_dialog", memory_id=exam.id.lower(), limit=2)
    assert recalled == {
        "memory_id": exam.id,
        "summary": exam.summary,
        "channel": DM,
        "conversation_id": exam.conversation_id,
        "total": 3,
        "offset": 0,
        "messages": [
            {
                "id": world.dm_messages[0].id,
                "at": "2026-11-02T09:00:00+00:00",
                "speaker": "Ann",
                "text": "My exam is on Friday at 10, in room 4B.",
            },
            {
                "id": world.dm_messages[1].id,
                "at": "2026-11-02T09:01:00+00:00",
                "speaker": "Persyn",
                "text": "Good luck! Shall I remind you on Thursday?",
            },
        ],
    }
    rest = await dm.ok("recall_dialog", memory_id=exam.id, offset=2)
    assert [m["text"] for m in rest["messages"]] == ["Yes please, and bring oolong tea."]

    no_dialog = await dm.call("recall_dialog", memory_id=world.records["tea"].id)
    assert "has no dialog behind it" in no_dialog.content
    await world.store.close_idle_conversations(AGENT, T0 + timedelta(days=30), 1800)
    await world.store.purge_dialog(AGENT, T0 + timedelta(days=30))
    purged = await dm.call("recall_dialog", memory_id=exam.id)
    assert "is no longer kept" in purged.content
    garbage = await dm.call("recall_dialog", memory_id="the exam one")
    assert "you have no memory 'the exam one'" in garbage.content


async def test_a_search_says_when_it_hit_its_bound(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_tools_module, "_SCAN_RECORDS", 2)
    monkeypatch.setattr(memory_tools_module, "_SCAN_MESSAGES", 2)
    monkeypatch.setattr(memory_tools_module, "_CANDIDATES", 1)
    dm = world.tools(DM, [world.ann])
    newest = await dm.ok("search_memories")
    assert [m["summary"] for m in newest["memories"]] == ["Ann's exam went fine."]  # of the 2 newest
    assert newest["note"] == "only the 2 newest memories in the date range were searched; narrow it"
    assert (await dm.ok("search_memories", since="2026-11-03"))["note"] is None  # the range was covered
    assert (await dm.ok("search_memories", keyword="exam"))[
        "note"
    ] == "only the 1 best keyword matches were searched"
    latest = await dm.ok("search_dialog")
    assert [m["text"] for m in latest["messages"]] == [
        "The exam went fine, thanks!",
        "Yes please, and bring oolong tea.",
    ]
    assert latest["note"] == (
        "without a keyword only the latest 2 messages of each channel were searched; "
        "give a keyword to reach further back"
    )
    assert (await dm.ok("search_dialog", keyword="exam"))[
        "note"
    ] == "only the 1 best keyword matches were searched"

    monkeypatch.setattr(memory_tools_module, "_RECALL_SCAN", 1)
    assert world.dm_talk is not None
    await world.say(world.dm_talk, "Ann", world.ann, "One more thing.", 5)
    beyond = await dm.call("recall_dialog", memory_id=world.records["exam"].id)
    assert "lies before the latest 1 messages of its conversation" in beyond.content


async def test_a_runaway_regex_is_stopped() -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"took longer than 0\.5 seconds and was stopped; simplify it"):
        await matching("(a+)+$", ["a" * 40 + "!"], deadline=0.5)
    assert time.monotonic() - started < 5
    assert await matching("b+", ["abc", "xyz"]) == [True, False]


@pytest.mark.parametrize("pattern", ["a{4294967296}", "[z-a]"])
async def test_a_pattern_python_cannot_compile_is_a_tool_error_naming_it(pattern: str) -> None:
    with pytest.raises(ToolError, match="invalid regular expression"):
        await matching(pattern, ["abc"])
