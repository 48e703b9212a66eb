"""What a turn costs in work, counted (issue 33, item 15): store round trips, DBOS steps and the
layers each model call passes through, per turn, each held to a fixed ceiling.

Not a timing (those live in `bench/turn.py`): counts that do not move with machine load. A
feature that puts work on every turn (another read, another step, another wrapper around every
model call) fails here and has to raise a ceiling on purpose, with its reason. Through the real
runtime (DBOS, SQLite, gateway, meter) with a model double; the store is the real SQLite store,
counting each hop to its threads.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from dbos import DBOS
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from sqlalchemy.engine import Connection

from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.core.config import AgentConfig
from persyn.core.config.models import Task
from persyn.core.ids import new_id
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing import START, RecordingChannel, run_runtime
from persyn.testing.models import DoubleReply, feelings, registered_double

T = TypeVar("T")

TURNS = 3
DRAFT = "Surely the garden plan will work out well, as we discussed last week."
REFINED = "I think the garden plan could work, though I am not certain."

# Store round trips per turn, everything the turn causes included (its background critique,
# refinement and emotion reading), as measured on 7 Dec. Six of them are the gateway's
# checkpoint writes (one per model call) and four (inline) or six (deferred) its lookups (one per
# key sequence of a step execution: the draft, each critic, the decision made ahead, the refinement
# and the emotion reading in steps of their own); the emotion readings are read once per turn.
# 31 and 35 before the open goals were read once for the prompt and the decision (`GOAL_READS`).
# Deferred was 41 before its background work stopped reading the event again (the autonomy
# budget's look-ups of the background threads, twice for the concurrent critics, and refine's)
# and the dialog again (the critics'), and the emotion reading its conversation (the activation
# hands it the surface and channel); inline was 33. One trip each since for the raw dialog that
# recall ranks beside the memories (`rank_messages`, `[memory] dialog_recall`, issue 39).
STORE_TRIPS = {"inline": 31, "deferred": 35}
# What recall asks of the dialog per turn: one ranking, however many steps read the prompt.
DIALOG_RANKINGS = 1
# Reads per turn of the open goals and of the agent's facts about itself: once each, the goals
# shared by the prompt's goals section and the decision's preferences (`TurnCache.open_goals`).
GOAL_READS = 1
FACT_READS = 1
# Event reads per turn: none. The activation's event is handed over by `submit` in this process,
# the autonomy budget knows an activation's background threads as no run once it knows the
# activation (`Autonomy._run_of`), and the deferred deliberation finds the event and the dialog
# among the latest finished turns (`TurnCache.drop`).
EVENT_READS = 0  # nor conversation reads: the emotion reading is handed its surface and channel
# DBOS steps the activation records: the turn step, and the background workflow it enqueues
# (inline: the emotion reading; deferred: the deliberation, whose last step is the emotion
# reading — 3 before, when the reading was a workflow of its own).
DBOS_STEPS = {"inline": 2, "deferred": 2}
# What a model call passes through: checkpoints, the autonomy budget, metering, retries, the
# provider tools' filter, the provider's model (tracing off, no concurrency limit configured).
# Reads of the test's own waiting for a turn's end, not of the turn.
_WAITING = frozenset({"get_marker"})
MODEL_LAYERS = (
    "CheckpointedModel",
    "BudgetedModel",
    "MeteredModel",
    "RetryingModel",
    "ProviderToolsModel",
    "DoubleModel",
)


class _CountingStore(SQLiteStore):
    """The real SQLite store, counting each call that hops to its reader or writer threads."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.trips: Counter[str] = Counter()

    async def _read(self, what: str, work: Callable[[Connection], T]) -> T:
        self.trips[what] += 1
        return await super()._read(what, work)

    async def _search(self, what: str, work: Callable[[Connection], T]) -> T:
        self.trips[what] += 1
        return await super()._search(what, work)

    async def _write(self, what: str, work: Callable[[Connection], T]) -> T:
        self.trips[what] += 1
        return await super()._write(what, work)

    def _write_soon(self, what: str, work: Callable[[Connection], T]) -> asyncio.Future[T]:
        self.trips[what] += 1
        return super()._write_soon(what, work)


def _mind(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
    """Every reply substantive and objected to, so each turn is critiqued and refined."""
    if task == "critique":
        return Critique(objections=(Objection(kind="unsupported", span="Surely", explanation="no grounds"),))
    if task == "decide":
        return Decision(action="speak", reason="it answers the question")
    if task == "refine":
        return DoubleReply(text=REFINED)
    if task == "classify":
        return feelings(info)
    return DoubleReply(text=DRAFT)


@pytest.fixture
def mind() -> Iterator[None]:
    with registered_double("turn-cost", _mind):
        yield


@pytest.mark.parametrize("mode", ["inline", "deferred"])
async def test_a_turn_stays_within_its_counted_work(tmp_path: Path, mind: None, mode: str) -> None:
    store = _CountingStore(tmp_path / "home" / "data" / "persyn.db")
    async with run_runtime(
        tmp_path / "home",
        model="test:turn-cost",
        config=(
            f'[deliberation]\nmode = "{mode}"\n[conversation]\nextract_every_messages = 0\n'
            # the outbox poll (for rows other processes wrote) is not the turn's work
            "[dispatch]\noutbox_poll_seconds = 60\n"
        ),
        agent=AgentConfig(name="Ada", id=new_id(START)),
        channels={"test": RecordingChannel()},
        store=store,
        scheduler=False,
    ) as pilot:
        await pilot.say("What do you think about the garden plan?")  # warms caches up
        await pilot.settle()
        store.trips.clear()
        event = None
        for turn in range(TURNS):
            event, marker = await pilot.say(f"And the garden plan, part {turn}?")
            assert marker.transmitted and marker.text == (REFINED if mode == "inline" else DRAFT)
            await pilot.settle()
        assert event is not None
        steps = [step["function_name"] for step in await DBOS.list_workflow_steps_async(event.id)]
        layers = await pilot.runtime.gateways[pilot.agent.id].layers(Task.RESPOND)

    per_turn = sum(n for what, n in store.trips.items() if what not in _WAITING) / TURNS
    assert per_turn <= STORE_TRIPS[mode], (
        f"{per_turn:.1f} store round trips per {mode} turn (ceiling {STORE_TRIPS[mode]}): "
        f"{sorted(store.trips.items(), key=lambda kv: -kv[1])}"
    )
    # Read once per activation (`TurnCache`), however many of the turn's steps use them, its
    # deferred deliberation included.
    assert store.trips["recent_emotions"] <= TURNS and store.trips["turn_messages"] <= TURNS
    assert store.trips["list_goals"] == GOAL_READS * TURNS and store.trips["fact_rows"] == FACT_READS * TURNS
    assert store.trips["get_event"] == EVENT_READS and store.trips["get_conversation"] == 0
    assert store.trips["rank_messages"] == DIALOG_RANKINGS * TURNS
    assert len(steps) <= DBOS_STEPS[mode], f"DBOS steps of a {mode} turn: {steps}"
    assert store.trips["add_emotion_reading"] == TURNS  # every exchange still read
    assert layers == MODEL_LAYERS
