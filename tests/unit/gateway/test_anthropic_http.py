"""The Anthropic path over real HTTP: a fake Messages endpoint on loopback that captures
each request, so prompt-cache breakpoints and cache-token accounting are checked on the wire."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from gateway_fakes import (
    LoopbackServer,
    RecordingAdapter,
    ScriptedAPI,
    anthropic_text,
    anthropic_tool_use,
    make_agent,
    make_settings,
)
from pydantic import BaseModel, SecretStr

from persyn.core.config import Price, Secrets, Task
from persyn.gateway.base import Prompt, SinkEvent, ToolSpec, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.usage.meter import Meter

STABLE = "You are Ada, curious and candid.\nStanding constraints: be honest.\n"
VOLATILE = "\nIt is now Monday 30 November 2026, 9:05 in the morning (UTC)."
PROMPT = Prompt(system=STABLE + VOLATILE, items=(UserTurn(text="Hi!"),), stable_prefix_chars=len(STABLE))
LOOKUP = ToolSpec(name="lookup", description="Look up.", parameters={"type": "object", "properties": {}})
EPHEMERAL = {"type": "ephemeral", "ttl": "5m"}


@pytest.fixture
def api(serve: Callable[[Any], LoopbackServer]) -> tuple[ScriptedAPI, str]:
    api = ScriptedAPI("/v1/messages")
    server = serve(api.app)
    return api, f"anthropic:claude-sonnet-4-6@{server.url}"


@pytest.fixture
async def gateway(tmp_path: Path, api: tuple[ScriptedAPI, str], meter: Meter) -> AsyncIterator[ModelGateway]:
    model = api[1]
    settings = make_settings(
        tmp_path,
        model,
        prices={model: Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)},
        secrets=Secrets(anthropic_api_key=SecretStr("sk-ant-test")),
    )
    gateway = ModelGateway(settings, make_agent(), meter, retry_base_delay=0.01)
    yield gateway
    await gateway.aclose()


async def test_cache_breakpoints_sit_on_the_stable_prefix_and_the_tools(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str]
) -> None:
    server, _ = api
    server.then(anthropic_text("Hello!"))
    await gateway.complete(Task.RESPOND, PROMPT, tools=[LOOKUP])
    (body,) = server.requests
    assert body["system"] == [
        {"type": "text", "text": STABLE.rstrip(), "cache_control": EPHEMERAL},
        {"type": "text", "text": VOLATILE.strip()},
    ]
    assert body["tools"][-1]["name"] == "lookup"
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi!"}]}]
    assert "persyn_task" not in str(body)  # request metadata never leaves the process


async def test_cache_read_tokens_reach_the_usage_record(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str], recorder: RecordingAdapter, meter: Meter
) -> None:
    server, model = api
    server.then(anthropic_text("Hello!", input_tokens=12, output_tokens=5, cache_read=2_000, cache_write=300))
    completion = await gateway.complete(Task.RESPOND, PROMPT)
    meter.flush()
    (record,) = recorder.records
    # pydantic-ai's convention: input_tokens includes the cached tokens, reported again separately
    assert (record.input_tokens, record.cache_read_tokens, record.cache_write_tokens) == (2_312, 2_000, 300)
    assert completion.usage.cache_read_tokens == 2_000
    assert (record.model, record.tier, record.stage) == (model, "strong", "respond")
    assert record.cost_usd == pytest.approx((12 * 3.0 + 2_000 * 0.3 + 300 * 3.75 + 5 * 15.0) / 1_000_000)


async def test_a_streamed_reply_reaches_the_sink(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str], recorder: RecordingAdapter, meter: Meter
) -> None:
    server, _ = api
    server.then(anthropic_text("Streaming works.", cache_read=500))
    seen: list[SinkEvent] = []
    completion = await gateway.complete(Task.RESPOND, PROMPT, sink=seen.append)
    assert completion.text == "Streaming works."
    assert "".join(event.text for event in seen if event.kind == "delta") == "Streaming works."
    assert server.requests[0]["stream"] is True
    meter.flush()
    assert recorder.records[0].cache_read_tokens == 500


async def test_structured_output_uses_an_output_tool(
    gateway: ModelGateway, api: tuple[ScriptedAPI, str]
) -> None:
    class Decision(BaseModel):
        speak: bool
        reason: str

    server, _ = api
    server.then(anthropic_tool_use("final_result", {"speak": True, "reason": "asked directly"}))
    completion = await gateway.complete(Task.DECIDE, PROMPT, output=Decision)
    assert completion.output == Decision(speak=True, reason="asked directly")
    (body,) = server.requests
    assert [tool["name"] for tool in body["tools"]] == ["final_result"]
    assert body["tools"][0]["input_schema"]["required"] == ["speak", "reason"]
    assert body["tool_choice"]["type"] in ("any", "tool")
