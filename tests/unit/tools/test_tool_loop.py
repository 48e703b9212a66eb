"""The tool loop through the real gateway and a model double: tool results reach the model,
failures are results, and a model that calls the same tool forever is stopped and recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo

from persyn.core.config import AgentConfig, ModelsConfig, Settings, Task, ToolsConfig
from persyn.core.ids import new_id
from persyn.gateway.base import AgentTurn, Completion, Prompt, ToolResult, ToolSpec, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.testing import DoubleReply, registered_double
from persyn.testing.meter import RecordingAdapter
from persyn.testing.models import DoubleResult
from persyn.tools import ToolRegistry, ToolStatus, run_tool_loop
from persyn.tools.builtin.arithmetic import calculator_tool
from persyn.usage.meter import Meter

PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="What is 0.1 + 0.2?", name="Sam"),))


class Script:
    """A double that answers from a list (the last entry forever) and keeps what it saw."""

    def __init__(self, *replies: DoubleResult) -> None:
        self.replies = list(replies)
        self.seen: list[tuple[list[ModelMessage], AgentInfo]] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        self.seen.append((messages, info))
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def returns(self, index: int) -> list[ToolReturnPart]:
        """The tool results the model was shown in its `index`-th request."""
        last = self.seen[index][0][-1]
        assert isinstance(last, ModelRequest)
        return [part for part in last.parts if isinstance(part, ToolReturnPart)]


@pytest.fixture
def recorder() -> RecordingAdapter:
    return RecordingAdapter()


@pytest.fixture
def meter(recorder: RecordingAdapter) -> Iterator[Meter]:
    meter = Meter([recorder])
    yield meter
    meter.close()


@pytest.fixture
async def gateway(tmp_path: Path, meter: Meter) -> AsyncIterator[ModelGateway]:
    settings = Settings(home=tmp_path, models=ModelsConfig(default="test:loop"))
    gateway = ModelGateway(settings, AgentConfig(name="Ada", id=new_id()), meter)
    yield gateway
    await gateway.aclose()


@pytest.fixture
def script() -> Iterator[Script]:
    double = Script("unused")
    with registered_double("loop", double):
        yield double


def _complete(gateway: ModelGateway):  # type: ignore[no-untyped-def]
    async def complete(prompt: Prompt, tools: Sequence[ToolSpec]) -> Completion:
        return await gateway.complete(Task.RESPOND, prompt, tools=tools)

    return complete


async def test_a_tool_result_reaches_the_model_and_it_answers(
    gateway: ModelGateway, script: Script, recorder: RecordingAdapter, meter: Meter
) -> None:
    script.replies = [
        DoubleReply(
            text="Let me work it out.",
            tool_calls=[{"name": "calculate", "args": {"expression": "0.1 + 0.2"}}],
        ),
        "It is exactly 0.3.",
    ]
    registry = ToolRegistry([calculator_tool()])
    result = await run_tool_loop(PROMPT, registry, _complete(gateway))

    assert result.text == "It is exactly 0.3."
    assert (result.model_calls, result.trips, result.stopped) == (2, (), False)
    (outcome,) = result.outcomes
    assert outcome.status is ToolStatus.OK and outcome.output is not None and outcome.output["value"] == "0.3"
    assert result.items == (
        AgentTurn(text="Let me work it out.", tool_calls=result.items[0].tool_calls),  # type: ignore[union-attr]
        ToolResult(call_id="call_1", name="calculate", content=outcome.content),
    )
    (returned,) = script.returns(1)
    assert returned.content == outcome.content and returned.outcome == "success"
    assert [tool.name for tool in script.seen[0][1].function_tools] == ["calculate"]
    meter.flush()
    assert len(recorder.records) == 2  # every round-trip metered
    assert result.usage.input_tokens == sum(r.input_tokens for r in recorder.records)


async def test_a_failing_tool_is_a_result_the_model_sees(gateway: ModelGateway, script: Script) -> None:
    script.replies = [
        DoubleReply(
            tool_calls=[{"name": "calculate", "args": {"expression": "1/0"}}, {"name": "nope", "args": {}}]
        ),
        "I cannot divide by zero.",
    ]
    result = await run_tool_loop(PROMPT, ToolRegistry([calculator_tool()]), _complete(gateway))
    assert result.text == "I cannot divide by zero."
    assert [o.status for o in result.outcomes] == [ToolStatus.FAILED, ToolStatus.UNKNOWN_TOOL]
    returned = script.returns(1)
    assert [(r.content, r.outcome) for r in returned] == [
        ("Tool 'calculate' failed: division by zero in '1/0'", "failed"),
        ("There is no tool named 'nope'. Available tools: calculate.", "failed"),
    ]


async def test_a_model_that_calls_the_same_tool_forever_is_stopped(
    gateway: ModelGateway, script: Script, recorder: RecordingAdapter, meter: Meter
) -> None:
    forever: list[DoubleResult] = [
        DoubleReply(tool_calls=[{"name": "calculate", "args": {"expression": "1 + 1"}}])
    ]
    script.replies = forever
    registry = ToolRegistry([calculator_tool()], config=ToolsConfig(max_round_trips=4, max_identical_calls=2))

    result = await run_tool_loop(PROMPT, registry, _complete(gateway))

    assert result.stopped
    meter.flush()
    # 4 admitted round-trips, 1 refused, then the loop ends: max_round_trips + 2 calls at most.
    assert result.model_calls == 6 == len(recorder.records)
    assert [o.status for o in result.outcomes] == [
        ToolStatus.OK,
        ToolStatus.OK,
        ToolStatus.BREAKER_TRIPPED,  # third identical call
        ToolStatus.BREAKER_TRIPPED,
        ToolStatus.BREAKER_TRIPPED,  # the fifth round-trip, refused whole
    ]
    assert [trip.reason for trip in result.trips] == [
        "repeated_call",
        "repeated_call",
        "max_round_trips",
        "max_round_trips",
    ]
    assert str(script.returns(3)[0].content).startswith("Not run: 'calculate' was already called 2 times")
    assert str(script.returns(5)[0].content).startswith("Tool use stopped: this turn already used 4 rounds")
    # Tools stay offered throughout: the cacheable prefix never changes.
    assert all([t.name for t in info.function_tools] == ["calculate"] for _, info in script.seen)


async def test_run_call_can_be_wrapped_and_the_breaker_is_counted_outside_it(
    gateway: ModelGateway, script: Script
) -> None:
    script.replies = [
        DoubleReply(tool_calls=[{"name": "calculate", "args": {"expression": "2 * 3"}}] * 3),
        "Six.",
    ]
    registry = ToolRegistry([calculator_tool()], config=ToolsConfig(max_identical_calls=1))
    ran: list[str] = []

    async def durable_step(call):  # type: ignore[no-untyped-def]  # what the runtime's DBOS step does
        ran.append(call.id)
        return await registry.call(call)

    result = await run_tool_loop(PROMPT, registry, _complete(gateway), run_call=durable_step)
    assert result.text == "Six."
    assert ran == ["call_1"]  # the repeats were refused before reaching the step
    assert [o.status for o in result.outcomes] == [ToolStatus.OK] + [ToolStatus.BREAKER_TRIPPED] * 2
