"""Fakes for gateway tests: real HTTP servers on loopback, provider payloads, a recording
meter adapter, settings builders."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from persyn.core.config import AgentConfig, ModelsConfig, Price, Secrets, Settings
from persyn.core.ids import new_id
from persyn.testing.meter import RecordingAdapter as RecordingAdapter  # re-exported for the tests

Reply = Callable[[dict[str, Any]], Response]


class ScriptedAPI:
    """A fake provider endpoint: answers each POST with the next scripted reply and keeps
    every request body for assertions."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route(path, self._handle, methods=["POST"])])

    def then(self, reply: Reply) -> ScriptedAPI:
        self.replies.append(reply)
        return self

    async def _handle(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if not self.replies:
            return JSONResponse({"error": {"message": "no scripted reply left"}}, status_code=500)
        return self.replies.pop(0)(body)


class LoopbackServer:
    """uvicorn serving an ASGI app on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the loopback server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()


# OpenAI chat-completions payloads -----------------------------------------------------------
def openai_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_message(message: dict[str, Any], usage: dict[str, Any], finish: str = "stop") -> Reply:
    def reply(_: dict[str, Any]) -> Response:
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": "fake-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    return reply


def openai_text(text: str, usage: dict[str, Any] | None = None) -> Reply:
    return openai_message({"role": "assistant", "content": text}, usage or openai_usage(10, 5))


def openai_error(status: int, message: str = "try again") -> Reply:
    def reply(_: dict[str, Any]) -> Response:
        return JSONResponse({"error": {"message": message, "type": "server_error"}}, status_code=status)

    return reply


def openai_stream(chunks: list[str], usage: dict[str, Any]) -> Reply:
    """Server-sent events: one delta per chunk, then a final usage-only chunk, then [DONE]."""

    def frame(payload: dict[str, Any]) -> str:
        return f"data: {json.dumps(payload)}\n\n"

    def reply(_: dict[str, Any]) -> Response:
        base = {
            "id": "chatcmpl-2",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "fake",
        }
        events = [frame({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
        events += [
            frame({**base, "choices": [{"index": 0, "delta": {"content": chunk}, "finish_reason": None}]})
            for chunk in chunks
        ]
        events.append(frame({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        events.append(frame({**base, "choices": [], "usage": usage}))
        events.append("data: [DONE]\n\n")

        async def body() -> AsyncIterator[str]:
            for event in events:
                yield event

        return StreamingResponse(body(), media_type="text/event-stream")

    return reply


# meter and settings -------------------------------------------------------------------------
def make_settings(
    tmp_path: Path,
    default: str = "test:echo",
    *,
    prices: dict[str, Price] | None = None,
    secrets: Secrets | None = None,
    max_retries: int = 3,
    **tasks: str,
) -> Settings:
    return Settings(
        home=tmp_path,
        models=ModelsConfig(default=default, max_retries=max_retries, **tasks),  # type: ignore[arg-type]
        prices=prices or {},
        secrets=secrets or Secrets(),
    )


def make_agent(name: str = "Ada") -> AgentConfig:
    return AgentConfig(name=name, id=new_id())


# Anthropic Messages payloads ----------------------------------------------------------------
def anthropic_text(
    text: str, *, input_tokens: int = 10, output_tokens: int = 5, cache_read: int = 0, cache_write: int = 0
) -> Reply:
    """A text reply, as JSON or as server-sent events depending on what the client asked for."""
    block = {"type": "text", "text": text}
    delta = {"type": "text_delta", "text": text}
    return _anthropic_reply(block, delta, "end_turn", input_tokens, output_tokens, cache_read, cache_write)


def anthropic_tool_use(
    name: str, args: dict[str, Any], *, input_tokens: int = 10, output_tokens: int = 5
) -> Reply:
    block = {"type": "tool_use", "id": "toolu_1", "name": name, "input": args}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
    return _anthropic_reply(block, delta, "tool_use", input_tokens, output_tokens, 0, 0)


def _anthropic_reply(
    block: dict[str, Any],
    delta: dict[str, Any],
    stop_reason: str,
    input_tokens: int,
    output_tokens: int,
    cache_read: int,
    cache_write: int,
) -> Reply:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "stop_sequence": None,
    }

    def frame(kind: str, payload: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n"

    def reply(body: dict[str, Any]) -> Response:
        if not body.get("stream"):
            return JSONResponse({**message, "content": [block], "stop_reason": stop_reason, "usage": usage})
        empty = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
        events = [
            frame(
                "message_start", {"message": {**message, "content": [], "stop_reason": None, "usage": usage}}
            ),
            frame("content_block_start", {"index": 0, "content_block": empty}),
            frame("content_block_delta", {"index": 0, "delta": delta}),
            frame("content_block_stop", {"index": 0}),
            frame(
                "message_delta",
                {
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            ),
            frame("message_stop", {}),
        ]

        async def stream() -> AsyncIterator[str]:
            for event in events:
                yield event

        return StreamingResponse(stream(), media_type="text/event-stream")

    return reply
