"""Provider-executed tools at the wire (issue 19 item 10): a fake Anthropic Messages endpoint on
loopback answers with `server_tool_use` / `web_search_tool_result` blocks, `pause_turn`, and
usage with `server_tool_use` counts; the real adapter (pydantic-ai's Anthropic model, the SDK,
HTTP) talks to it through the gateway."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import LoopbackServer, RecordingAdapter, ScriptedAPI, make_agent
from pydantic import SecretStr, ValidationError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters
from starlette.responses import JSONResponse, Response, StreamingResponse

from persyn.core.config import ModelsConfig, Price, Secrets, Settings, Task
from persyn.core.errors import ModelError
from persyn.gateway.base import Prompt, ToolSpec, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.provider_tools import provider_tool_specs
from persyn.gateway.wrappers import CallHooks, HookedModel
from persyn.usage.meter import Meter

PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="What happened in Lisbon today?"),))
LOCAL_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web (SearXNG).",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
SEARCH = ToolSpec(name="web_search", description="Search (provider).", parameters={}, provider=True)


def _message(content: list[dict[str, Any]], stop_reason: str, searches: int = 0) -> Callable[..., Response]:
    usage: dict[str, Any] = {"input_tokens": 100, "output_tokens": 20}
    if searches:
        usage["server_tool_use"] = {"web_search_requests": searches}

    def reply(_: dict[str, Any]) -> Response:
        return JSONResponse(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": usage,
            }
        )

    return reply


def _streamed(content: list[dict[str, Any]], stop_reason: str, searches: int = 0) -> Callable[..., Response]:
    """The same reply as server-sent events (what the tool loop's streamed calls get)."""
    usage: dict[str, Any] = {"input_tokens": 100, "output_tokens": 20}
    if searches:
        usage["server_tool_use"] = {"web_search_requests": searches}
    start = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6"}

    def frame(kind: str, payload: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n"

    events = [
        frame("message_start", {"message": {**start, "content": [], "stop_reason": None, "usage": usage}})
    ]
    for index, block in enumerate(content):
        if block["type"] == "text":
            events.append(
                frame("content_block_start", {"index": index, "content_block": {**block, "text": ""}})
            )
            delta = {"type": "text_delta", "text": block["text"]}
            events.append(frame("content_block_delta", {"index": index, "delta": delta}))
        elif block["type"] == "server_tool_use":
            events.append(
                frame("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append(frame("content_block_delta", {"index": index, "delta": delta}))
        else:
            events.append(frame("content_block_start", {"index": index, "content_block": block}))
        events.append(frame("content_block_stop", {"index": index}))
    end_usage = {"output_tokens": 20, **({"server_tool_use": usage["server_tool_use"]} if searches else {})}
    events.append(
        frame(
            "message_delta",
            {"delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": end_usage},
        )
    )
    events.append(frame("message_stop", {}))

    def reply(body: dict[str, Any]) -> Response:
        assert body.get("stream") is True

        async def stream() -> AsyncIterator[str]:
            for event in events:
                yield event

        return StreamingResponse(stream(), media_type="text/event-stream")

    return reply


def _search(n: int, query: str) -> list[dict[str, Any]]:
    """A `server_tool_use` block and its `web_search_tool_result`, as the Messages API sends them."""
    return [
        {"type": "server_tool_use", "id": f"srvtoolu_{n}", "name": "web_search", "input": {"query": query}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": f"srvtoolu_{n}",
            "content": [
                {
                    "type": "web_search_result",
                    "url": f"https://news.example/{n}",
                    "title": f"Lisbon news {n}",
                    "encrypted_content": "opaque",
                    "page_age": "1 hour ago",
                }
            ],
        },
    ]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@pytest.fixture
def api(serve: Callable[[Any], LoopbackServer]) -> tuple[ScriptedAPI, str]:
    api = ScriptedAPI("/v1/messages")
    server = serve(api.app)
    return api, f"anthropic:claude-sonnet-4-6@{server.url}"


def _settings(
    tmp_path: Path, model: str, *, tools: list[str] | None, resumes: int = 3, **tasks: Any
) -> Settings:
    return Settings(
        home=tmp_path,
        models=ModelsConfig(
            default=model,
            provider_tools={model: tools} if tools is not None else {},
            max_pause_resumes=resumes,
            max_retries=0,
            **tasks,
        ),
        prices={model: Price(input=3.0, output=15.0, per_request={"web_search": 0.01})},
        secrets=Secrets(anthropic_api_key=SecretStr("sk-ant-test")),
    )


@pytest.fixture
async def gateways(meter: Meter) -> AsyncIterator[Callable[[Settings], ModelGateway]]:
    opened: list[ModelGateway] = []

    def open_gateway(settings: Settings) -> ModelGateway:
        gateway = ModelGateway(settings, make_agent(), meter, retry_base_delay=0.01)
        opened.append(gateway)
        return gateway

    yield open_gateway
    for gateway in opened:
        await gateway.aclose()


async def test_a_server_search_is_read_inline_and_counted_on_the_usage_record(
    tmp_path: Path,
    api: tuple[ScriptedAPI, str],
    gateways: Callable[[Settings], ModelGateway],
    recorder: RecordingAdapter,
    meter: Meter,
) -> None:
    server, model = api
    settings = _settings(tmp_path, model, tools=["web_search"])
    server.then(_message([*_search(1, "Lisbon today"), _text("A festival opened in Lisbon.")], "end_turn", 1))
    completion = await gateways(settings).complete(
        Task.RESPOND, PROMPT, tools=provider_tool_specs(settings, make_agent())
    )
    assert completion.text == "A festival opened in Lisbon."
    assert completion.tool_calls == ()  # nothing for the tool loop to run
    assert not completion.paused
    (body,) = server.requests
    (offered,) = body["tools"]
    assert offered["name"] == "web_search"
    assert offered["type"].startswith("web_search_")
    assert offered["max_uses"] == 5
    meter.flush()
    (record,) = recorder.records
    assert record.tool_requests == {"web_search": 1}
    assert record.cost_usd == pytest.approx((100 * 3.0 + 20 * 15.0) / 1_000_000 + 0.01)


async def test_a_paused_turn_is_sent_back_as_it_is_and_finishes(
    tmp_path: Path,
    api: tuple[ScriptedAPI, str],
    gateways: Callable[[Settings], ModelGateway],
    recorder: RecordingAdapter,
    meter: Meter,
) -> None:
    server, model = api
    settings = _settings(tmp_path, model, tools=["web_search"])
    server.then(_message([_text("Let me look."), *_search(1, "Lisbon today")], "pause_turn", 1))
    server.then(_message([*_search(2, "Lisbon festival"), _text("A festival opened.")], "end_turn", 1))
    completion = await gateways(settings).complete(Task.RESPOND, PROMPT, tools=[SEARCH])
    assert completion.text.endswith("A festival opened.")
    assert completion.text.startswith("Let me look.")
    assert not completion.paused
    first, second = server.requests
    # The second request is the first one with the paused assistant turn appended, nothing more.
    assert second["messages"][: len(first["messages"])] == first["messages"]
    (resent,) = second["messages"][len(first["messages"]) :]
    assert resent["role"] == "assistant"
    assert [block["type"] for block in resent["content"]] == [
        "text",
        "server_tool_use",
        "web_search_tool_result",
    ]
    assert resent["content"][1]["id"] == "srvtoolu_1"
    assert second["tools"] == first["tools"]
    meter.flush()
    assert [r.tool_requests for r in recorder.records] == [{"web_search": 1}, {"web_search": 1}]
    assert completion.usage.input_tokens == 200  # both round-trips


async def test_a_turn_paused_forever_stops_at_the_bound_with_what_it_has(
    tmp_path: Path,
    api: tuple[ScriptedAPI, str],
    gateways: Callable[[Settings], ModelGateway],
    recorder: RecordingAdapter,
    meter: Meter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, model = api
    settings = _settings(tmp_path, model, tools=["web_search"], resumes=2)
    for n in range(4):
        server.then(_message([_text(f"Searching ({n})."), *_search(n, "Lisbon")], "pause_turn", 1))
    completion = await gateways(settings).complete(Task.RESPOND, PROMPT, tools=[SEARCH])
    assert len(server.requests) == 3  # the first call and two resumes, then no more
    assert completion.paused
    assert completion.text.split("\n\n")[0] == "Searching (0)."
    assert "Searching (2)." in completion.text
    assert "max_pause_resumes" in caplog.text
    meter.flush()
    assert len(recorder.records) == 3


async def test_a_model_without_the_tool_is_not_offered_it_and_gets_the_local_one(
    tmp_path: Path,
    api: tuple[ScriptedAPI, str],
    gateways: Callable[[Settings], ModelGateway],
) -> None:
    server, model = api
    server.then(_message([_text("Without search.")], "end_turn"))
    server.then(_message([_text("With search.")], "end_turn"))
    without = gateways(_settings(tmp_path, model, tools=None))
    with_it = gateways(_settings(tmp_path, model, tools=["web_search"]))
    await without.complete(Task.RESPOND, PROMPT, tools=[LOCAL_SEARCH, SEARCH])
    await with_it.complete(Task.RESPOND, PROMPT, tools=[LOCAL_SEARCH, SEARCH])
    plain, served = server.requests
    # Without: our own web_search as a function tool (it has an input schema), no server tool.
    assert [(t["name"], "input_schema" in t) for t in plain["tools"]] == [("web_search", True)]
    # With: only the provider's; the local tool of the same name is withheld from this model.
    assert [(t["name"], t.get("type", "").startswith("web_search_")) for t in served["tools"]] == [
        ("web_search", True)
    ]
    assert "input_schema" not in served["tools"][0]


def test_provider_tools_are_checked_when_the_configuration_loads() -> None:
    with pytest.raises(ValidationError, match="'web_serch'"):
        ModelsConfig(provider_tools={"anthropic:claude-sonnet-4-6": ["web_serch"]})
    with pytest.raises(ValidationError, match=re.escape("'openai:gpt-4.1'")):
        ModelsConfig(provider_tools={"openai:gpt-4.1": ["web_search"]})
    with pytest.raises(ValidationError, match=re.escape("-0.5")):
        Price(input=1, output=1, per_request={"web_search": -0.5})


def test_a_fallback_chain_lists_what_any_of_its_models_runs(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        models=ModelsConfig(
            respond=["anthropic:claude-sonnet-4-6", "anthropic:claude-haiku-4-5"],
            provider_tools={"anthropic:claude-haiku-4-5": ["web_fetch", "web_search"]},
        ),
    )
    specs = provider_tool_specs(settings, make_agent())
    assert [(s.name, s.provider, s.parameters) for s in specs] == [
        ("web_fetch", True, {}),
        ("web_search", True, {}),
    ]
    assert provider_tool_specs(settings, make_agent(), Task.SUMMARIZE) == ()
    assert json.loads(json.dumps(settings.models.provider_tools)) == {
        "anthropic:claude-haiku-4-5": ["web_fetch", "web_search"]
    }


async def test_a_streamed_paused_turn_streams_both_parts_to_the_sink(
    tmp_path: Path,
    api: tuple[ScriptedAPI, str],
    gateways: Callable[[Settings], ModelGateway],
    recorder: RecordingAdapter,
    meter: Meter,
) -> None:
    server, model = api
    settings = _settings(tmp_path, model, tools=["web_search"])
    server.then(_streamed([_text("Let me look. "), *_search(1, "Lisbon today")], "pause_turn", 1))
    server.then(_streamed([_text("A festival opened.")], "end_turn"))
    shown: list[str] = []
    completion = await gateways(settings).complete(
        Task.RESPOND, PROMPT, tools=[SEARCH], sink=lambda event: shown.append(event.text)
    )
    assert "".join(shown) == "Let me look. A festival opened."
    assert not completion.paused and completion.tool_calls == ()
    second = server.requests[1]
    assert [block["type"] for block in second["messages"][-1]["content"]] == [
        "text",
        "server_tool_use",
        "web_search_tool_result",
    ]
    meter.flush()
    assert [r.tool_requests for r in recorder.records] == [{"web_search": 1}, {}]


class _Allowance(HookedModel):
    """A budget around the task's whole model, as the runtime's `BudgetedModel` sits: each
    round-trip is admitted first, and refused once `calls` are spent."""

    def __init__(self, wrapped: Model, calls: int) -> None:
        super().__init__(wrapped)
        self.left = calls

    async def _hooks(self, messages: list[ModelMessage], params: ModelRequestParameters) -> CallHooks:
        if self.left == 0:
            raise ModelError("budget spent")
        self.left -= 1
        return CallHooks(params)


async def test_each_resume_is_admitted_by_the_budget_first(
    tmp_path: Path, api: tuple[ScriptedAPI, str], meter: Meter
) -> None:
    server, model = api
    for n in range(4):
        server.then(_message([_text(f"Searching ({n})."), *_search(n, "Lisbon")], "pause_turn", 1))
    gateway = ModelGateway(
        _settings(tmp_path, model, tools=["web_search"], resumes=3),
        make_agent(),
        meter,
        wrappers=[lambda inner: _Allowance(inner, calls=2)],
    )
    try:
        with pytest.raises(ModelError, match="budget spent"):
            await gateway.complete(Task.RESPOND, PROMPT, tools=[SEARCH])
    finally:
        await gateway.aclose()
    assert len(server.requests) == 2  # the third call was refused before it was sent
