"""The OpenAI path over real HTTP: a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import (
    LoopbackServer,
    RecordingAdapter,
    ScriptedAPI,
    make_agent,
    make_settings,
    openai_error,
    openai_message,
    openai_stream,
    openai_text,
    openai_usage,
)
from pydantic import BaseModel

from persyn.core.config import Price, Task
from persyn.core.errors import ModelError
from persyn.gateway.base import AgentTurn, Prompt, SinkEvent, ToolCall, ToolResult, ToolSpec, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.usage.meter import Meter

PROMPT = Prompt(
    system="You are Ada.\nIt is now Monday morning.",
    items=(UserTurn(text="Hello?"),),
    stable_prefix_chars=len("You are Ada.\n"),
)


@pytest.fixture
def api(serve: Callable[[Any], LoopbackServer]) -> tuple[ScriptedAPI, str]:
    api = ScriptedAPI("/v1/chat/completions")
    server = serve(api.app)
    return api, f"openai:fake-llama@{server.url}/v1"


@pytest.fixture
async def gateway(tmp_path: Path, api: tuple[ScriptedAPI, str], meter: Meter) -> AsyncIterator[ModelGateway]:
    model = api[1]
    settings = make_settings(tmp_path, model, prices={model: Price(input=1.0, output=2.0, cache_read=0.5)})
    gateway = ModelGateway(settings, make_agent(), meter, retry_base_delay=0.01)
    yield gateway
    await gateway.aclose()


async def test_429_then_500_then_success_is_recorded_once(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str], recorder: RecordingAdapter, meter: Meter
) -> None:
    server, model = api
    server.then(openai_error(429, "slow down")).then(openai_error(500)).then(
        openai_text("Hi there.", openai_usage(40, 4))
    )
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    assert completion.text == "Hi there."
    assert len(server.requests) == 3
    meter.flush()
    (record,) = recorder.records
    assert (record.model, record.tier, record.input_tokens, record.output_tokens) == (
        model,
        "strong",
        40,
        4,
    )  # an unknown model counts as strong
    assert record.cost_usd == pytest.approx((40 * 1.0 + 4 * 2.0) / 1_000_000)
    assert completion.usage_id == record.id


async def test_the_request_is_one_system_message_then_the_dialog(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str]
) -> None:
    server, _ = api
    server.then(openai_text("ok"))
    await gateway.complete(Task.RESPOND, PROMPT)
    (body,) = server.requests
    assert body["model"] == "fake-llama"
    # A custom server gets the bound as `max_tokens`: llama.cpp ignores `max_completion_tokens`.
    assert body["max_tokens"] == 2048 and "max_completion_tokens" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are Ada.\n\nIt is now Monday morning."},
        {"role": "user", "content": "Hello?"},
    ]


async def test_a_streamed_reply_reaches_the_sink_and_its_usage_the_record(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str], recorder: RecordingAdapter, meter: Meter
) -> None:
    server, _ = api
    server.then(openai_stream(["Good ", "morning", ", Bob."], openai_usage(120, 9, cached=64)))
    seen: list[SinkEvent] = []
    completion = await gateway.complete(Task.RESPOND, PROMPT, sink=seen.append)
    assert completion.text == "Good morning, Bob."
    assert [event.text for event in seen if event.kind == "delta"] == ["Good ", "morning", ", Bob."]
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    meter.flush()
    (record,) = recorder.records
    assert (record.input_tokens, record.output_tokens, record.cache_read_tokens) == (120, 9, 64)
    assert record.cost_usd == pytest.approx((56 * 1.0 + 64 * 0.5 + 9 * 2.0) / 1_000_000)


async def test_a_tool_call_round_trip(gateway: ModelGateway, api: tuple[ScriptedAPI, str]) -> None:
    server, _ = api
    call = {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "sky"}'}}
    server.then(
        openai_message({"role": "assistant", "content": None, "tool_calls": [call]}, openai_usage(30, 6))
    )
    server.then(openai_text("It is blue."))
    lookup = ToolSpec(
        name="lookup",
        description="Look up a fact.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
    )
    first = await gateway.complete(Task.RESPOND, PROMPT, tools=[lookup])
    assert first.tool_calls == (ToolCall(id="call_9", name="lookup", args={"q": "sky"}),)
    tool = server.requests[0]["tools"][0]
    assert (tool["type"], tool["function"]["name"], tool["function"]["description"]) == (
        "function",
        "lookup",
        "Look up a fact.",
    )

    follow_up = PROMPT.model_copy(
        update={
            "items": (
                *PROMPT.items,
                AgentTurn(tool_calls=first.tool_calls),
                ToolResult(call_id="call_9", name="lookup", content="blue"),
            )
        }
    )
    second = await gateway.complete(Task.RESPOND, follow_up, tools=[lookup])
    assert second.text == "It is blue."
    sent = server.requests[1]["messages"]
    assert sent[2]["role"] == "assistant"
    assert sent[2]["tool_calls"][0]["id"] == "call_9"
    assert sent[3] == {"role": "tool", "tool_call_id": "call_9", "content": "blue"}


async def test_structured_output_asks_for_a_json_schema(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str]
) -> None:
    class Rating(BaseModel):
        score: int

    server, _ = api
    server.then(openai_text('```json\n{"score": 8}\n```'))
    completion = await gateway.complete(Task.RATE, PROMPT, output=Rating)
    assert completion.output == Rating(score=8)
    response_format = server.requests[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "Rating"
    assert response_format["json_schema"]["schema"]["required"] == ["score"]


async def test_a_client_error_is_not_retried(gateway: ModelGateway, api: tuple[ScriptedAPI, str]) -> None:
    server, model = api
    server.then(openai_error(400, "bad request")).then(openai_text("never"))
    with pytest.raises(ModelError) as caught:
        await gateway.complete(Task.RESPOND, PROMPT)
    assert len(server.requests) == 1
    assert repr(model) in str(caught.value)
    assert "HTTP 400" in str(caught.value)


async def test_an_unreachable_server_is_a_model_unavailable_error(tmp_path: Path, meter: Meter) -> None:
    from persyn.core.errors import ModelUnavailableError

    # Port 9 (discard) on loopback: nothing listens there, so the connection is refused.
    settings = make_settings(tmp_path, "openai:ghost@http://127.0.0.1:9/v1", max_retries=1)
    gateway = ModelGateway(settings, make_agent(), meter, retry_base_delay=0.01)
    with pytest.raises(
        ModelUnavailableError, match=r"'openai:ghost@http://127.0.0.1:9/v1' failed after 2 attempt"
    ):
        await gateway.complete(Task.RESPOND, PROMPT)
    await gateway.aclose()
