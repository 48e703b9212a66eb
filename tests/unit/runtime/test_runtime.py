"""The runtime end to end in-process: real SQLite files, real DBOS queues, model doubles."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from dbos import DBOS
from pydantic_ai.exceptions import ModelHTTPError

from persyn.core.errors import InputError
from persyn.core.events import CompletionMarker, Event
from persyn.core.ids import new_id
from persyn.store.base import Message
from persyn.store.ports.activity import CULL_KIND, UNATTRIBUTED_RUN
from persyn.store.ports.jobs import Consolidation, ConsolidationStatus
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing import START, Pilot, RecordingChannel, registered_double, run_runtime


class ObservedStore(SQLiteStore):
    """The real SQLite store, keeping a note of the reads a test is about. Handed to the
    runtime as its store (nothing is patched in): every call still goes to the file."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.event_reads: list[str] = []
        self.dialog_reads: list[str] = []
        self.marker_reads: list[float] = []
        self.warmed: list[str] = []

    async def get_event(self, agent_id: str, event_id: str) -> Event | None:
        self.event_reads.append(event_id)
        return await super().get_event(agent_id, event_id)

    async def turn_messages(
        self, agent_id: str, conversation_id: str, input_message_id: str, limit: int
    ) -> list[Message]:
        self.dialog_reads.append(conversation_id)
        return await super().turn_messages(agent_id, conversation_id, input_message_id, limit)

    async def warm_recall(self, agent_id: str) -> int:
        loaded = await super().warm_recall(agent_id)
        self.warmed.append(agent_id)
        return loaded

    async def get_marker(self, agent_id: str, event_id: str, now: datetime) -> CompletionMarker | None:
        self.marker_reads.append(asyncio.get_running_loop().time())
        return await super().get_marker(agent_id, event_id, now)


@pytest.fixture
async def pilot(tmp_path: Path) -> AsyncIterator[Pilot]:
    async with run_runtime(tmp_path / "home") as started:
        yield started


@pytest.fixture
async def observed(tmp_path: Path) -> AsyncIterator[tuple[Pilot, ObservedStore]]:
    store = ObservedStore(tmp_path / "home" / "data" / "persyn.db")
    async with run_runtime(tmp_path / "home", store=store) as started:
        yield started, store


async def test_an_event_is_answered_stored_and_metered(pilot: Pilot) -> None:
    agent, channel = pilot.agent, pilot.channel
    event, marker = await pilot.say("Hello Ada")
    assert marker.transmitted
    assert marker.text == "You said: Hello Ada"
    assert [o.text for o in channel.delivered] == ["You said: Hello Ada"]
    assert "".join(channel.streamed) == "You said: Hello Ada"
    conversation_id = channel.delivered[0].conversation_id
    dialog = await pilot.store.recent_messages(agent.id, conversation_id, 10)
    assert [(m.role.value, m.speaker_name, m.text) for m in dialog] == [
        ("user", "Sam", "Hello Ada"),
        ("agent", "Ada", "You said: Hello Ada"),
    ]
    records = pilot.usage()
    # "You said: ..." speaks about the past, so it is substantive: this channel is not
    # interactive, so deliberation ran inline (provenance + one lens), then the decision.
    stages = sorted(r.stage for r in records)
    assert stages[0].startswith("critique:") and stages[0] != "critique:provenance"
    assert stages[1] == "critique:provenance"
    assert stages[2:] == ["decide", "respond"]
    assert all(r.thread_id == event.id and r.conversation_id == conversation_id for r in records)
    assert {r.trigger for r in records} == {"message"}  # what set every one of them going
    record = next(r for r in records if r.stage == "respond")
    assert (record.stage, record.agent_id, record.surface, record.channel) == (
        "respond",
        agent.id,
        "test",
        "room",
    )
    assert record.conversation_id == conversation_id
    assert record.thread_id == event.id


async def test_a_redelivered_event_runs_once(pilot: Pilot) -> None:
    event = pilot.event("only once")
    await pilot.submit(event)
    await pilot.submit(event)  # the channel delivered it again
    assert len(pilot.channel.delivered) == 1
    stages = [r.stage for r in pilot.usage()]
    assert stages.count("respond") == 1 and stages.count("decide") == 1
    assert len(stages) == 4  # respond, two critics, decide: none of them twice


async def test_an_activation_reads_its_event_from_the_store_once(
    observed: tuple[Pilot, ObservedStore],
) -> None:
    pilot, store = observed
    # Submitted here: the activation takes the event from the submit, no read at all.
    first = await pilot.say("one")
    assert first.marker.transmitted
    assert store.event_reads == []
    # Submitted as the scheduler's step submits (as another process would: through a DBOS
    # client, the event not handed over): read once, by receive; respond and transmit reuse it.
    second = pilot.event("two")
    await pilot.runtime.submit(second, from_step=True)
    marker = await pilot.runtime.wait_marker(pilot.agent.id, second.id, timeout=120)
    assert marker.transmitted
    assert store.event_reads == [second.id]
    assert [o.text for o in pilot.channel.delivered] == ["You said: one", "You said: two"]


async def test_a_process_that_runs_turns_warms_each_agents_recall_at_start(
    observed: tuple[Pilot, ObservedStore],
) -> None:
    pilot, store = observed
    for _ in range(200):
        if store.warmed:
            break
        await asyncio.sleep(0.05)
    assert store.warmed == [pilot.agent.id]


async def test_a_process_that_runs_turns_loads_its_local_encoder_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """WordLlama's weights take ~0.3 s to load: loaded at start, not by the first recall."""
    caplog.set_level("INFO", logger="persyn.runtime.app")
    config = '[memory]\nembedder = "wordllama"\nembedder_dims = 64\n'
    async with run_runtime(tmp_path / "home", config=config):
        for _ in range(200):
            if any("encoder" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.05)
    assert [r.getMessage() for r in caplog.records if "encoder" in r.getMessage()] == [
        "encoder wordllama:l2_supercat-64 loaded"
    ]


async def test_an_activation_reads_the_dialog_once(observed: tuple[Pilot, ObservedStore]) -> None:
    """The prompt, both critics, the decision and the redundancy gate see the conversation's
    dialog from one read."""
    pilot, store = observed
    _, marker = await pilot.say("Do you remember what we said?")
    assert marker.transmitted
    assert [o.text for o in pilot.channel.delivered] == ["You said: Do you remember what we said?"]
    assert {r.stage for r in pilot.usage()} >= {"respond", "critique:provenance", "decide"}
    assert store.dialog_reads == [pilot.channel.delivered[0].conversation_id]


async def test_a_worker_waiting_for_a_marker_reads_the_store_at_most_ten_times_a_second(
    observed: tuple[Pilot, ObservedStore],
) -> None:
    """A marker this process puts wakes its waiter; the store is read only for one another
    worker put, ten times a second (a backoff from 5 ms would read it nine times in 0.45 s,
    taking CPU from the turn being waited for). Only bounds that a slow machine cannot break
    are asserted: at most so many reads, never closer together than the interval."""
    pilot, store = observed
    agent = pilot.agent
    # Put by another worker: found by the first read, before any wait.
    elsewhere = pilot.event("answered elsewhere")
    now = pilot.clock.now()
    put = CompletionMarker(
        event_id=elsewhere.id,
        transmitted=True,
        text="done",
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )
    await pilot.store.put_marker(agent.id, put)
    assert await pilot.runtime.wait_marker(agent.id, elsewhere.id, timeout=0) == put
    store.marker_reads.clear()
    with pytest.raises(TimeoutError):
        await pilot.runtime.wait_marker(agent.id, new_id(START), timeout=0.45)
    assert 1 <= len(store.marker_reads) <= 6
    gaps = [later - earlier for earlier, later in itertools.pairwise(store.marker_reads)]
    assert all(gap >= 0.09 for gap in gaps[:-1])  # the last read is at the deadline


async def test_a_worker_waiting_for_its_own_turn_reads_no_marker_before_its_first_poll(
    observed: tuple[Pilot, ObservedStore],
) -> None:
    """An event this process submitted most likely runs here, and its marker wakes the
    waiter: the store is not read for it at once, only by the polls (every 0.1 s), which
    still find a marker another worker put. A lower bound only: a slow turn just polls."""
    pilot, store = observed
    loop = asyncio.get_running_loop()
    event = pilot.event("mine")
    store.marker_reads.clear()
    await pilot.runtime.submit(event)
    waiting = loop.time()
    marker = await pilot.runtime.wait_marker(pilot.agent.id, event.id, timeout=120)
    assert marker.transmitted and marker.event_id == event.id
    assert all(read - waiting >= 0.09 for read in store.marker_reads)


async def test_the_dbos_executor_id_comes_from_the_config(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", config='[dispatch]\nexecutor_id = "worker-a"\n') as pilot:
        event, _ = await pilot.say("hello")
        status = await DBOS.get_workflow_status_async(event.id)
        assert status is not None and status.executor_id == "worker-a"


async def test_invalid_input_is_rejected_before_anything_is_stored(pilot: Pilot) -> None:
    runtime, agent = pilot.runtime, pilot.agent
    good = pilot.event("fine")
    with pytest.raises(InputError, match="invalid event id"):
        await runtime.submit(good.model_copy(update={"id": "not-an-id"}))
    with pytest.raises(InputError, match="unknown agent id"):
        await runtime.submit(good.model_copy(update={"agent_id": new_id()}))
    with pytest.raises(InputError, match="the limit is 32000"):
        await runtime.submit(good.model_copy(update={"text": "x" * 32_001}))
    assert await runtime.store.get_event(agent.id, good.id) is None
    assert await pilot.full_store.count_messages(agent.id) == 0


async def test_a_broken_sink_never_reaches_generation(tmp_path: Path) -> None:
    channel = RecordingChannel(sink_raises=True)
    async with run_runtime(tmp_path / "home", channels={"test": channel}) as pilot:
        _, marker = await pilot.say("still there?")
    assert marker.transmitted
    assert [o.text for o in channel.delivered] == ["You said: still there?"]


async def test_a_failing_model_degrades_to_a_notice_not_a_crash(tmp_path: Path) -> None:
    def broken(task: str | None, messages: object, info: object) -> str:
        raise ModelHTTPError(status_code=400, model_name="broken", body="bad request")

    with registered_double("broken", broken):
        async with run_runtime(tmp_path / "home", model="test:broken") as pilot:
            channel = pilot.channel
            _, marker = await pilot.say("hello?")
            # The agent keeps answering once the model works again.
            assert await pilot.full_store.count_messages(pilot.agent.id) == 1
    assert not marker.transmitted
    assert marker.reason is not None
    assert "could not produce a reply" in marker.reason
    assert "400" in marker.reason
    assert channel.delivered == []
    assert [n.level for n in channel.notices] == ["error"]


async def test_idle_conversations_close_and_run_their_hooks(pilot: Pilot) -> None:
    runtime, channel, agent = pilot.runtime, pilot.channel, pilot.agent
    seen: list[tuple[str, str]] = []

    async def hook(agent_id: str, conversation_id: str) -> None:
        seen.append((agent_id, conversation_id))

    runtime.jobs.add_conversation_hook("record", hook)
    await pilot.say("first conversation")
    conversation_id = channel.delivered[0].conversation_id

    assert await pilot.close_idle(after=timedelta(minutes=29)) == 0
    assert await pilot.close_idle(after=timedelta(minutes=2)) == 1
    assert seen == [(agent.id, conversation_id)]
    closed = await runtime.store.get_conversation(agent.id, conversation_id)
    assert closed is not None
    assert closed.closed_at is not None

    await pilot.say("a new day")
    assert channel.delivered[-1].conversation_id != conversation_id


async def test_culling_and_dialog_retention_on_a_moved_clock(pilot: Pilot) -> None:
    from persyn.core.records import MemoryRecord

    runtime, agent = pilot.runtime, pilot.agent
    await pilot.say("a passing remark")
    trivial = MemoryRecord(
        id=new_id(START),
        agent_id=agent.id,
        created_at=START,
        channel="test:room",
        summary="Small talk.",
        importance=2,
    )
    vital = MemoryRecord(
        id=new_id(START),
        agent_id=agent.id,
        created_at=START,
        channel="test:room",
        summary="Sam's wedding.",
        importance=9,
    )
    for record in (trivial, vital):
        await pilot.full_store.add_record(record, None, None)
    pilot.advance(timedelta(days=13))
    assert await runtime.housekeeping.cull_memories() == 0  # too young to cull
    pilot.advance(timedelta(days=2))
    assert await runtime.housekeeping.cull_memories() == 1
    assert [r.id for r in await pilot.full_store.list_records(agent.id)] == [vital.id]
    # The cull is an event the operator sees: what went, by which rule.
    (culled,) = await pilot.full_store.recent_activity(agent.id, limit=10, kind=CULL_KIND)
    assert culled.objective == "cull 1 memory (importance below 3, older than 14 days, by the daily cull)"
    assert culled.outcome == f"culled {trivial.id} “Small talk.”"
    assert culled.provenance == UNATTRIBUTED_RUN  # the agent's own: summaries from any channel
    # Verbatim dialog outlives the retention window only as the memories made from it.
    assert await pilot.close_idle() == 1
    assert await runtime.housekeeping.purge_old_dialog() == 0
    pilot.advance(timedelta(days=91))  # the window counts from when the conversation closed
    assert await runtime.housekeeping.purge_old_dialog() == 2
    assert await pilot.full_store.count_messages(agent.id) == 0
    assert pilot.channel.delivered


async def test_a_crash_between_close_and_consolidation_loses_nothing(pilot: Pilot) -> None:
    runtime = pilot.runtime
    consolidated: list[str] = []

    async def hook(agent_id: str, conversation_id: str) -> None:
        consolidated.append(conversation_id)
        await pilot.full_store.set_consolidation(
            Consolidation(
                agent_id=agent_id,
                conversation_id=conversation_id,
                status=ConsolidationStatus.DONE,
                detail="stored",
                updated_at=pilot.clock.now(),
            )
        )

    runtime.jobs.add_conversation_hook("consolidate", hook)
    await pilot.say("remember this evening")
    # The conversation is closed in the store, then the process dies before the hooks
    # are enqueued: nothing in the queue knows about it.
    closed = await pilot.end_conversations(after=timedelta(hours=1))
    assert [c.id for c in closed] == [pilot.channel.delivered[0].conversation_id]
    # After the restart the scheduler's sweep finds it and consolidation runs, once.
    pilot.advance(timedelta(minutes=5))
    assert await runtime.housekeeping.sweep_unconsolidated() == 1
    await pilot.settle()
    assert consolidated == [closed[0].id]
    assert await runtime.housekeeping.sweep_unconsolidated() == 0


async def test_the_channel_ledgers_are_purged_after_the_keeping_time(pilot: Pilot) -> None:
    """A reply counts against its channel's budget in a ledger that the housekeeping purges
    after `[autonomy] run_keep_days` (the flags it replaced were never purged)."""
    from persyn.store.ports.runs import SpendKind

    runtime, agent = pilot.runtime, pilot.agent
    turn = await pilot.say("hello there")
    assert turn.marker.transmitted
    since = runtime.clock.now() - timedelta(hours=24)
    spent = await runtime.store.channel_spent(agent.id, SpendKind.REPLIED, "test", "room", since)
    assert spent > 0
    keep = runtime.settings.autonomy.run_keep_days
    pilot.advance(timedelta(days=keep - 1))
    assert await runtime.housekeeping.purge_runs() == 0
    pilot.advance(timedelta(days=2))
    assert await runtime.housekeeping.purge_runs() == 1
    assert await runtime.store.channel_spent(agent.id, SpendKind.REPLIED, "test", "room", since) == 0
