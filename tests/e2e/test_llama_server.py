"""The real OpenAI-compatible path (issue 2): llama.cpp's server on loopback with the small
GGUF, an agent's tasks pointed at it as `openai:NAME@http://127.0.0.1:PORT/v1`, a streamed
turn and a structured-output call, and the recorded token counts compared with what the
server reported (read off the wire by a recording proxy in between)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.ids import new_id
from persyn.gateway.base import Prompt, SinkEvent, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.gateway.local import LlamaServer, ensure_default_weights, local_available
from persyn.testing.meter import RecordingAdapter
from persyn.usage.meter import Meter

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.local_llm,
    pytest.mark.skipif(not local_available(), reason="needs the 'local' extra (uv sync --extra local)"),
]


class RecordingProxy:
    """Forwards to the llama.cpp server and keeps the `usage` each response reported."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.reported: list[dict[str, int]] = []
        self.requests: list[dict[str, Any]] = []
        app = Starlette(routes=[Route("/v1/{path:path}", self._forward, methods=["GET", "POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        if body:
            self.requests.append(json.loads(body))
        async with httpx.AsyncClient(timeout=300) as client:
            upstream = await client.request(
                request.method,
                f"{self.upstream}/{request.path_params['path']}",
                content=body,
                headers={"content-type": "application/json"},
            )
        content_type = upstream.headers.get("content-type", "application/json")
        if "event-stream" in content_type:
            for line in upstream.text.splitlines():
                if line.startswith("data: {"):
                    chunk = json.loads(line.removeprefix("data: "))
                    if chunk.get("usage"):
                        self.reported.append(chunk["usage"])
        elif request.method == "POST" and upstream.status_code == 200:
            self.reported.append(upstream.json()["usage"])
        return Response(upstream.content, status_code=upstream.status_code, media_type=content_type)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "proxy did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    @property
    def base_url(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"


class Rating(BaseModel):
    """How important an event is."""

    importance: int = Field(ge=1, le=10)
    reason: str


class Note(BaseModel):
    """A note on an event (no value bounds: llama.cpp's grammar enforces types, not ranges)."""

    reason: str
    words: int


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    root = tmp_path_factory.mktemp("llama")
    server = LlamaServer(ensure_default_weights(root / "models"), log_path=root / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _gateway(base_url: str, adapter: RecordingAdapter, home: Path) -> tuple[ModelGateway, Meter]:
    agent = AgentConfig(name="Ada", id=new_id())
    settings = Settings(home=home, agents=[agent]).model_copy(
        update={
            "models": Settings(home=home).models.model_copy(update={"default": f"openai:gemma@{base_url}"})
        }
    )
    meter = Meter([adapter])
    return ModelGateway(settings, agent, meter), meter


def test_streamed_turn_and_structured_output_are_metered_as_the_server_reported(
    llama: LlamaServer, tmp_path: Path
) -> None:
    adapter = RecordingAdapter()
    with RecordingProxy(llama.base_url) as proxy:
        gateway, meter = _gateway(proxy.base_url, adapter, tmp_path)

        async def scenario() -> tuple[str, str, Rating]:
            deltas: list[str] = []

            def sink(event: SinkEvent) -> None:
                if event.kind == "delta":
                    deltas.append(event.text)

            prompt = Prompt(
                system="You are Ada, a friendly agent.", items=(UserTurn(text="Hello! Who are you?"),)
            )
            streamed = await gateway.complete(Task.RESPOND, prompt, sink=sink)
            rating_prompt = Prompt(
                system="Rate how important this event is for the person, from 1 to 10.",
                items=(UserTurn(text="Today I got married to the love of my life."),),
            )
            rated = await gateway.complete(Task.RATE, rating_prompt, output=Rating)
            await gateway.aclose()
            return "".join(deltas), streamed.text, rated.output

        deltas, text, rating = asyncio.run(scenario())
        assert meter.flush()
        meter.close()

    assert text, "the streamed turn produced text"
    assert deltas == text, "the sink saw exactly the generated text"
    assert isinstance(rating, Rating)
    assert 1 <= rating.importance <= 10
    assert proxy.requests[0]["stream"] is True
    # Every completed round-trip reported usage, and the ledger holds exactly those numbers
    # (a structured call may take a corrective second round-trip: it is metered too).
    assert [(r.input_tokens, r.output_tokens) for r in adapter.records] == [
        (u["prompt_tokens"], u["completion_tokens"]) for u in proxy.reported
    ]
    assert [r.stage for r in adapter.records][:2] == ["respond", "rate"]
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in adapter.records)


def test_the_local_provider_asks_the_server_for_json_objects_with_the_schema(
    llama: LlamaServer, tmp_path: Path
) -> None:
    """`local:` is built with the local profile (`build_local_model`): structured output as a
    `json_object` with the schema, which the server enforces, and the local reply bound."""
    from persyn.core.config import ModelsConfig
    from persyn.gateway.openai import build_local_model
    from persyn.gateway.registry import ModelSpec

    adapter = RecordingAdapter()
    with RecordingProxy(llama.base_url) as proxy:
        agent = AgentConfig(name="Ada", id=new_id())
        settings = Settings(home=tmp_path, agents=[agent], models=ModelsConfig(default="local:"))
        models = settings.models

        def local(spec: ModelSpec) -> Any:
            return build_local_model(
                llama.model_name,
                proxy.base_url,
                models.request_timeout_seconds,
                models.local_max_output_tokens,
            )

        meter = Meter([adapter])
        gateway = ModelGateway(settings, agent, meter, local_factory=local)

        async def scenario() -> Any:
            prompt = Prompt(
                system="Rate how important this event is for the person, from 1 to 10.",
                items=(UserTurn(text="Today I got married to the love of my life."),),
            )
            rated = await gateway.complete(Task.RATE, prompt, output=Note)
            await gateway.aclose()
            return rated.output

        note = asyncio.run(scenario())
        meter.close()

    # The tiny model's values are its own; that they fit the schema is the server's grammar.
    assert isinstance(note, Note)
    first = proxy.requests[0]
    assert first["response_format"]["type"] == "json_object"
    assert set(first["response_format"]["schema"]["required"]) == {"reason", "words"}
    assert first["max_tokens"] == models.local_max_output_tokens
    assert [r.stage for r in adapter.records][:1] == ["rate"]
