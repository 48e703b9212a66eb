"""`ModelGateway.complete` end to end against in-process doubles: structured output, the one
corrective retry, tool calls, streaming to a sink, transient-error retries and usage records."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import RecordingAdapter, make_agent, make_settings
from pydantic import BaseModel, Field
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo

from persyn.core.clock import ManualClock
from persyn.core.config import Price, Task
from persyn.core.errors import ModelError
from persyn.core.ids import derived_id, id_time, new_id
from persyn.gateway.base import AgentTurn, Prompt, SinkEvent, ToolCall, ToolResult, ToolSpec, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.testing import DoubleReply, registered_double
from persyn.testing.models import DoubleResult
from persyn.usage.context import Attribution, bind, rebind
from persyn.usage.meter import Meter

PROMPT = Prompt(
    system="You are Ada.\nIt is now Monday morning.",
    items=(UserTurn(text="How are you?", name="Bob"),),
    stable_prefix_chars=len("You are Ada.\n"),
)
LOOKUP = ToolSpec(
    name="lookup",
    description="Look a fact up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)


class Rating(BaseModel):
    """How important the exchange was."""

    score: int = Field(ge=1, le=10)
    reason: str


class Calls:
    """A double that answers from a list and remembers what it was sent."""

    def __init__(self, *replies: DoubleResult | Exception) -> None:
        self.replies: list[DoubleResult | Exception] = list(replies)
        self.seen: list[tuple[str | None, list[ModelMessage], AgentInfo]] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        self.seen.append((task, messages, info))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


@pytest.fixture
def double() -> Iterator[Calls]:
    calls = Calls()
    with registered_double("unit", calls):
        yield calls


@pytest.fixture
async def gateway(tmp_path: Path, meter: Meter) -> AsyncIterator[ModelGateway]:
    settings = make_settings(tmp_path, "test:unit", prices={"test:priced": Price(input=3.0, output=15.0)})
    gateway = ModelGateway(settings, make_agent(), meter, retry_base_delay=0.001)
    yield gateway
    await gateway.aclose()


async def test_plain_text_and_the_task_reaches_the_double(gateway: ModelGateway, double: Calls) -> None:
    double.replies = ["Fine, thanks."]
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    assert (completion.text, completion.output, completion.tool_calls) == ("Fine, thanks.", None, ())
    assert completion.model == "test:unit"
    task, messages, info = double.seen[0]
    assert task == "respond"
    assert info.instructions == "You are Ada.\n\nIt is now Monday morning."
    assert isinstance(messages[-1], ModelRequest)
    assert messages[-1].parts[0].content == "[Bob] How are you?"  # type: ignore[union-attr]


async def test_structured_output_returns_a_validated_model(gateway: ModelGateway, double: Calls) -> None:
    double.replies = [{"score": 7, "reason": "a decision was made"}]
    completion = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    assert completion.output == Rating(score=7, reason="a decision was made")
    _, _, info = double.seen[0]
    assert [tool.name for tool in info.output_tools] == ["final_result"]
    assert info.output_tools[0].parameters_json_schema["required"] == ["score", "reason"]
    assert not info.allow_text_output


async def test_invalid_output_is_retried_once_with_the_error(gateway: ModelGateway, double: Calls) -> None:
    double.replies = [{"score": 42, "reason": "too high"}, {"score": 4, "reason": "fixed"}]
    completion = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    assert completion.output == Rating(score=4, reason="fixed")
    _, retry_messages, _ = double.seen[1]
    feedback = retry_messages[-1]
    assert isinstance(feedback, ModelRequest)
    (part,) = feedback.parts
    assert isinstance(part, ToolReturnPart)
    assert part.outcome == "retried"
    assert "less than or equal to 10" in str(part.content)
    assert feedback.metadata == {"persyn_task": "rate"}


async def test_text_instead_of_the_output_tool_gets_feedback(gateway: ModelGateway, double: Calls) -> None:
    double.replies = ["I would say seven.", {"score": 7, "reason": "ok"}]
    completion = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    assert completion.output == Rating(score=7, reason="ok")
    feedback = double.seen[1][1][-1]
    assert isinstance(feedback, ModelRequest)
    # The gateway sends a RetryFeedbackPart; pydantic-ai renders it as fenced user-voice feedback.
    (part,) = feedback.parts
    assert isinstance(part, UserPromptPart)
    assert "calling the final_result tool" in str(part.content)


async def test_invalid_output_twice_raises_model_error(
    gateway: ModelGateway, double: Calls, recorder: RecordingAdapter, meter: Meter
) -> None:
    double.replies = [{"score": "high"}, {"score": 0, "reason": "still bad"}]
    with pytest.raises(ModelError, match=r"invalid Rating output twice.*'rate'"):
        await gateway.complete(Task.RATE, PROMPT, output=Rating)
    meter.flush()
    assert len(recorder.records) == 2  # both round-trips were paid for, so both are metered


async def test_tool_calls_round_trip(gateway: ModelGateway, double: Calls) -> None:
    double.replies = [
        DoubleReply(text="Let me check.", tool_calls=[{"name": "lookup", "args": {"q": "weather"}}]),
        "It is sunny.",
    ]
    first = await gateway.complete(Task.RESPOND, PROMPT, tools=[LOOKUP])
    assert first.text == "Let me check."
    assert first.tool_calls == (ToolCall(id="call_1", name="lookup", args={"q": "weather"}),)
    assert [tool.name for tool in double.seen[0][2].function_tools] == ["lookup"]

    follow_up = PROMPT.model_copy(
        update={
            "items": (
                *PROMPT.items,
                AgentTurn(text=first.text, tool_calls=first.tool_calls),
                ToolResult(call_id="call_1", name="lookup", content="sunny, 21°C"),
            )
        }
    )
    second = await gateway.complete(Task.RESPOND, follow_up, tools=[LOOKUP])
    assert second.text == "It is sunny."
    messages = double.seen[1][1]
    assert [message.kind for message in messages] == ["request", "response", "request"]
    returned = messages[-1].parts[0]
    assert isinstance(returned, ToolReturnPart)
    assert (returned.tool_call_id, returned.content, returned.outcome) == ("call_1", "sunny, 21°C", "success")


async def test_streaming_survives_a_raising_sink(gateway: ModelGateway, double: Calls) -> None:
    double.replies = ["The quick brown fox."]
    seen: list[SinkEvent] = []

    def sink(event: SinkEvent) -> None:
        seen.append(event)
        raise RuntimeError("the terminal went away")

    completion = await gateway.complete(Task.RESPOND, PROMPT, sink=sink, phase="draft")
    assert completion.text == "The quick brown fox."
    deltas = [event for event in seen if event.kind == "delta"]
    assert "".join(event.text for event in deltas) == "The quick brown fox."
    assert len(deltas) == 4
    assert {event.phase for event in seen} == {"draft"}
    assert seen[-1].kind == "end"


async def test_streaming_to_an_async_sink_that_raises(gateway: ModelGateway, double: Calls) -> None:
    double.replies = ["Hello there."]
    texts: list[str] = []

    async def sink(event: SinkEvent) -> None:
        texts.append(event.text)
        raise ValueError("broken sink")

    completion = await gateway.complete(Task.RESPOND, PROMPT, sink=sink, phase="revise")
    assert completion.text == "Hello there."
    assert "".join(texts) == "Hello there."


async def test_streamed_usage_keeps_the_reported_cache_reads(
    gateway: ModelGateway, double: Calls, recorder: RecordingAdapter, meter: Meter
) -> None:
    from persyn.gateway.base import TokenUsage

    usage = TokenUsage(input_tokens=120, output_tokens=8, cache_read_tokens=100)
    double.replies = [DoubleReply(text="Cached.", usage=usage)]
    completion = await gateway.complete(Task.RESPOND, PROMPT, sink=lambda event: None)
    assert completion.usage == usage
    meter.flush()
    assert recorder.records[0].cache_read_tokens == 100


async def test_transient_errors_are_retried_then_succeed(
    gateway: ModelGateway, double: Calls, recorder: RecordingAdapter, meter: Meter
) -> None:
    double.replies = [ModelHTTPError(429, "unit"), ModelHTTPError(503, "unit"), "third time lucky"]
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    assert completion.text == "third time lucky"
    meter.flush()
    assert len(recorder.records) == 1  # only the successful round-trip is a completed call


async def test_client_errors_are_not_retried(gateway: ModelGateway, double: Calls) -> None:
    double.replies = [ModelHTTPError(400, "unit", body={"error": "bad request"}), "never reached"]
    with pytest.raises(ModelError, match=r"'test:unit' failed after 1 attempt\(s\): HTTP 400"):
        await gateway.complete(Task.RESPOND, PROMPT)
    assert len(double.seen) == 1


async def test_retries_are_bounded_by_settings(tmp_path: Path, meter: Meter) -> None:
    calls = Calls(*[ModelHTTPError(500, "unit") for _ in range(3)])
    gateway = ModelGateway(
        make_settings(tmp_path, "test:unit", max_retries=2), make_agent(), meter, retry_base_delay=0.001
    )
    with registered_double("unit", calls), pytest.raises(ModelError) as caught:
        await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    assert len(calls.seen) == 3
    assert "'test:unit' failed after 3 attempt(s): HTTP 500" in str(caught.value)


# usage records ------------------------------------------------------------------------------
async def test_one_record_per_round_trip_with_ambient_attribution(
    gateway: ModelGateway, double: Calls, recorder: RecordingAdapter, meter: Meter
) -> None:
    double.replies = [DoubleReply(text="Checking.", tool_calls=[{"name": "lookup", "args": {}}]), "Done."]
    attribution = Attribution(
        agent_id="01J9Z3K4W5X6Y7Z8A9B0C1D2E3", surface="terminal", channel="tty1", thread_id="wf-1"
    )
    with bind(attribution), rebind(conversation_id="01J9Z3K4W5X6Y7Z8A9B0C1D2E4"):
        first = await gateway.complete(Task.RESPOND, PROMPT, tools=[LOOKUP])
        second = await gateway.complete(Task.RESPOND, PROMPT, tools=[LOOKUP])
    meter.flush()
    assert [record.id for record in recorder.records] == [first.usage_id, second.usage_id]
    record = recorder.records[0]
    assert record.model_dump(exclude={"id", "at", "input_tokens", "output_tokens"}) == {
        "agent_id": "01J9Z3K4W5X6Y7Z8A9B0C1D2E3",
        "stage": "respond",
        "model": "test:unit",
        "tier": "strong",
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "units": 0,
        "surface": "terminal",
        "channel": "tty1",
        "thread_id": "wf-1",
        "conversation_id": "01J9Z3K4W5X6Y7Z8A9B0C1D2E4",
        "cost_usd": None,
        "call_id": None,  # outside a durable step
    }
    assert (record.input_tokens, record.output_tokens) == (
        first.usage.input_tokens,
        first.usage.output_tokens,
    )


async def test_the_agent_is_attributed_even_without_a_bound_context(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    agent = make_agent()
    gateway = ModelGateway(make_settings(tmp_path, "test:instant"), agent, meter)
    await gateway.complete(Task.SUMMARIZE, PROMPT)
    await gateway.aclose()
    meter.flush()
    assert recorder.records[0].agent_id == agent.id
    assert recorder.records[0].stage == "summarize"


async def test_a_re_run_step_bills_new_ids_under_the_same_call_ids(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    """A step run again calls its models again: two bills, so two record ids; the shared
    call id is what shows the repeat (issue 13: one id hid the second bill)."""
    workflow = new_id()
    step_key = f"{workflow}:3"
    clock = ManualClock(id_time(workflow))
    gateway = ModelGateway(make_settings(tmp_path, "test:instant"), make_agent(), meter, clock=clock)

    async def run_step() -> list[str | None]:
        with bind(Attribution(agent_id="a", thread_id=workflow)), rebind(step_key=step_key):
            first = await gateway.complete(Task.RESPOND, PROMPT)
            second = await gateway.complete(Task.CRITIQUE, PROMPT)
        return [first.usage_id, second.usage_id]

    original = await run_step()
    from datetime import timedelta

    clock.advance(timedelta(hours=5))  # the re-run happens later; the call ids must not change
    replayed = await run_step()
    await gateway.aclose()
    meter.flush()
    assert [record.id for record in recorder.records] == original + replayed
    assert len(set(original + replayed)) == 4
    call_ids = [derived_id(id_time(workflow), step_key, str(n)) for n in range(2)]
    assert [record.call_id for record in recorder.records] == call_ids + call_ids


async def test_cost_comes_from_the_price_table(
    tmp_path: Path, meter: Meter, recorder: RecordingAdapter
) -> None:
    from persyn.gateway.base import TokenUsage

    reply = DoubleReply(
        text="ok", usage=TokenUsage(input_tokens=2_000, output_tokens=100, cache_read_tokens=1_000)
    )
    settings = make_settings(
        tmp_path,
        "test:priced",
        prices={"test:priced": Price(input=3.0, output=15.0, cache_read=0.3)},
    )
    gateway = ModelGateway(settings, make_agent(), meter)
    with registered_double("priced", lambda *_: reply), registered_double("free", lambda *_: reply):
        await gateway.complete(Task.RESPOND, PROMPT)
        other = ModelGateway(
            make_settings(tmp_path, "test:free", prices=settings.prices), make_agent(), meter
        )
        await other.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    await other.aclose()
    meter.flush()
    priced, unpriced = recorder.records
    # 1,000 uncached input at $3/M + 1,000 cached at $0.30/M + 100 output at $15/M
    assert priced.cost_usd == pytest.approx(0.003 + 0.0003 + 0.0015)
    assert unpriced.cost_usd is None


async def test_a_broken_meter_never_breaks_generation(tmp_path: Path, double: Calls) -> None:
    class Exploding(Meter):
        def emit(self, record: Any) -> None:
            raise RuntimeError("meter down")

    double.replies = ["still here"]
    gateway = ModelGateway(make_settings(tmp_path, "test:unit"), make_agent(), Exploding())
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
    assert completion.text == "still here"
    assert completion.usage_id is None


async def test_local_without_a_factory_is_a_clear_error(tmp_path: Path, meter: Meter) -> None:
    gateway = ModelGateway(make_settings(tmp_path, "local:"), make_agent(), meter)
    with pytest.raises(ModelError, match="local model server"):
        await gateway.complete(Task.RESPOND, PROMPT)


async def test_local_uses_the_injected_factory(tmp_path: Path, meter: Meter) -> None:
    from persyn.gateway.registry import ModelSpec
    from persyn.testing.models import build_double

    built: list[ModelSpec] = []

    def factory(spec: ModelSpec) -> Any:
        built.append(spec)
        return build_double(ModelSpec(provider="test", name="instant"))

    gateway = ModelGateway(make_settings(tmp_path, "local:"), make_agent(), meter, local_factory=factory)
    await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.complete(Task.SUMMARIZE, PROMPT)
    await gateway.aclose()
    assert built == [ModelSpec(provider="local", name="")]  # built once, cached
