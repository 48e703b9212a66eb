"""The gateway's checkpoints of completed model calls inside a durable step
(`gateway/checkpoints.py`), over a real SQLite store: a re-run of the step (a new `step_run`
under the same `step_key`) gets each call's first response back — streamed ones too — with
no model call and no usage record; calls past what the first run made are made and metered
under call ids of their own; once a call of an execution was not stored, the calls after it
are made again, not looked up; outside a step nothing is stored."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import RecordingAdapter, make_agent
from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo

from persyn.core.clock import SystemClock
from persyn.core.config import ModelsConfig, Settings, Task
from persyn.gateway.base import Prompt, UserTurn
from persyn.gateway.checkpoints import CheckpointedModel, StepCalls
from persyn.gateway.gateway import ModelGateway
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing import registered_double
from persyn.testing.models import DoubleReply, last_user_text
from persyn.usage import context as usage_context
from persyn.usage.meter import Meter

STEP = "01KBWORKFLOW0000000000000:1"


class Verdict(BaseModel):
    """Whether to speak."""

    speak: bool
    why: str


class Counting:
    """A model whose every answer says how many calls it has served (a call made again
    answers differently from the first)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        self.calls += 1
        if task == "decide":
            return Verdict(speak=True, why=f"call {self.calls}")
        return DoubleReply(text=f"answer {self.calls} to {last_user_text(messages)}")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "persyn.db")
    await store.setup()
    yield store
    await store.close()


@contextmanager
def step_execution(step_key: str | None = STEP) -> Iterator[None]:
    """What `durable_step` binds around one execution of a step."""
    attribution = usage_context.Attribution(agent_id="a", thread_id=STEP.split(":")[0])
    with usage_context.bind(attribution), usage_context.rebind(step_key=step_key, step_run=uuid.uuid4().hex):
        yield


def _gateway(tmp_path: Path, meter: Meter, store: SQLiteStore, calls: StepCalls) -> ModelGateway:
    settings = Settings(home=tmp_path, models=ModelsConfig(default="test:counting"))
    return ModelGateway(
        settings,
        make_agent(),
        meter,
        wrappers=[
            lambda model: CheckpointedModel(model, checkpoints=store, calls=calls, clock=SystemClock())
        ],
    )


async def _settled(store: SQLiteStore) -> None:
    """Wait until the queued checkpoint writes have committed (a write queued after them
    commits after them)."""
    await store.purge_model_calls(SystemClock().now().replace(year=2000))


async def test_a_re_run_step_gets_its_calls_back_without_calling_or_billing_again(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter, store: SQLiteStore
) -> None:
    model = Counting()
    shown: list[str] = []
    prompt = Prompt(system="You are Ada.", items=(UserTurn(text="Hello?"),))
    with registered_double("counting", model):
        gateway = _gateway(tmp_path, meter, store, StepCalls())
        with step_execution():  # the first run: a streamed draft, then a structured decision
            draft = await gateway.complete(Task.RESPOND, prompt, sink=lambda e: None)
            verdict = await gateway.complete(Task.DECIDE, prompt, output=Verdict)
        await _settled(store)
        with step_execution():  # the step run again: both come back as they were
            again = await gateway.complete(
                Task.RESPOND, prompt, sink=lambda e: shown.append(e.text) if e.kind == "delta" else None
            )
            verdict_again = await gateway.complete(Task.DECIDE, prompt, output=Verdict)
            # A call the first run never made is made now.
            more = await gateway.complete(Task.RESPOND, prompt)
        await gateway.aclose()
    await _settled(store)  # the third call's checkpoint is queued, not yet committed
    meter.flush()
    assert model.calls == 3
    assert (draft.text, again.text) == ("answer 1 to Hello?", "answer 1 to Hello?")
    assert "".join(shown) == draft.text  # the replayed stream still reaches the sink
    assert verdict_again.output == verdict.output == Verdict(speak=True, why="call 2")
    assert again.usage_id == draft.usage_id and verdict_again.usage_id == verdict.usage_id
    assert more.text == "answer 3 to Hello?"
    # One usage record per call that was made, each under a call id of its own.
    assert [r.stage for r in recorder.records] == ["respond", "decide", "respond"]
    assert len({r.call_id for r in recorder.records}) == 3
    assert await store.model_call(f"{STEP}/0") is not None
    assert await store.model_call(f"{STEP}/2") is not None


async def test_concurrent_calls_of_one_step_are_kept_apart_by_their_step_keys(
    tmp_path: Path, meter: Meter, store: SQLiteStore
) -> None:
    """The deferred turn's draft and decision run at once in one step; each has its own key
    suffix, so a re-run gives each its own response back whichever finishes first."""
    model = Counting()
    prompt = Prompt(system="You are Ada.", items=(UserTurn(text="Hello?"),))

    async def turn() -> tuple[str, str]:
        async def decide() -> str:
            with usage_context.rebind(step_key=f"{STEP}:decide"):
                return (await gateway.complete(Task.DECIDE, prompt, output=Verdict)).output.why  # type: ignore[union-attr]

        deciding = asyncio.ensure_future(decide())
        draft = await gateway.complete(Task.RESPOND, prompt)
        return draft.text, await deciding

    with registered_double("counting", model):
        gateway = _gateway(tmp_path, meter, store, StepCalls())
        with step_execution():
            first = await turn()
        await _settled(store)
        with step_execution():
            second = await turn()
        await gateway.aclose()
    assert model.calls == 2
    assert second == first


async def test_after_a_call_that_was_not_stored_the_later_calls_are_made_again(
    tmp_path: Path, meter: Meter, store: SQLiteStore
) -> None:
    """A re-run that had to make its first call again asks the next one differently: a
    response the first run stored for that next call is not replayed (nor looked up)."""
    model = Counting()
    prompt = Prompt(system="You are Ada.", items=(UserTurn(text="Hello?"),))
    stale = ModelMessagesTypeAdapter.dump_json([ModelResponse(parts=[TextPart(content="stale")])]).decode()
    await store.save_model_call(f"{STEP}/1", STEP.split(":")[0], stale, SystemClock().now())
    with registered_double("counting", model):
        gateway = _gateway(tmp_path, meter, store, StepCalls())
        with step_execution():
            first = await gateway.complete(Task.RESPOND, prompt)
            second = await gateway.complete(Task.RESPOND, prompt)
        await gateway.aclose()
    assert model.calls == 2
    assert (first.text, second.text) == ("answer 1 to Hello?", "answer 2 to Hello?")


async def test_outside_a_step_and_with_the_store_down_calls_go_through(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter, store: SQLiteStore
) -> None:
    model = Counting()
    prompt = Prompt(system="You are Ada.", items=(UserTurn(text="Hello?"),))
    with registered_double("counting", model):
        gateway = _gateway(tmp_path, meter, store, StepCalls())
        with step_execution(None):
            await gateway.complete(Task.RESPOND, prompt)
            await gateway.complete(Task.RESPOND, prompt)
        await store.close()  # fail soft: nothing can be read or stored, the calls are made
        with step_execution():
            down = await gateway.complete(Task.RESPOND, prompt)
        with step_execution():
            again = await gateway.complete(Task.RESPOND, prompt)
        await gateway.aclose()
    meter.flush()
    assert model.calls == 4 and len(recorder.records) == 4
    assert (down.text, again.text) == ("answer 3 to Hello?", "answer 4 to Hello?")
