"""`auto` (issue 15 item 7): a hosted key first, then a running OpenAI-compatible server where
`[models] auto_probe` looks, then the bundled model; and the context window of a fallback chain
is its smallest link's. The servers here are real HTTP servers on loopback that answer
`GET /v1/models` as Ollama or LM Studio would (the real llama.cpp server: tests/e2e)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from persyn.core.config import AgentConfig, Settings, Task, parse_settings
from persyn.core.ids import new_id
from persyn.gateway.auto import chat_model, resolve_auto
from persyn.gateway.registry import ModelSpec, context_window_for, parse_model_string

ADA = AgentConfig(name="Ada", id=new_id())


class _Models:
    """A loopback server answering `GET /v1/models` with `body` (and `status`), counting requests."""

    def __init__(self, body: object, status: int = 200) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                payload = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status if self.path == "/v1/models" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @contextmanager
    def running(self) -> Iterator[_Models]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


def _listing(*names: str) -> dict[str, object]:
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "owned_by": "library"} for name in names],
    }


def _nothing_listens() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _settings(
    tmp_path: Path, probe: list[str], env: dict[str, str] | None = None, **models: object
) -> Settings:
    data = {"models": {"auto_probe": probe, "auto_probe_timeout_seconds": 5.0, **models}}
    return parse_settings(data, tmp_path, environ=env or {}).model_copy(update={"agents": [ADA]})


def test_with_an_api_key_auto_is_the_hosted_model_and_nothing_is_asked(tmp_path: Path) -> None:
    with _Models(_listing("qwen2.5:7b")).running() as server:
        settings = _settings(tmp_path, [server.url], {"ANTHROPIC_API_KEY": "sk-ant-fake"})
        resolved, choice = resolve_auto(settings)
    assert choice is not None and choice.source == "hosted"
    assert "ANTHROPIC_API_KEY is set" in choice.detail and choice.banner() is None
    assert server.requests == 0, "a key set: no server is probed"
    assert resolved == settings
    spec = parse_model_string(resolved.model_for(ADA, Task.RESPOND), resolved.secrets, Task.RESPOND)
    assert spec == ModelSpec(provider="anthropic", name="claude-sonnet-4-6")


def test_with_nothing_listening_auto_is_the_bundled_model(tmp_path: Path) -> None:
    dead = _nothing_listens()
    settings = _settings(tmp_path, [dead])
    resolved, choice = resolve_auto(settings)
    assert choice is not None and choice.source == "bundled" and dead in choice.detail
    assert resolved == settings
    spec = parse_model_string(resolved.model_for(ADA, Task.CRITIQUE), resolved.secrets, Task.CRITIQUE)
    assert spec.bundled


def test_auto_takes_the_first_chat_model_of_the_first_server_in_the_list_that_answers(tmp_path: Path) -> None:
    first = _Models(_listing("nomic-embed-text:latest", "qwen2.5:7b"))
    second = _Models(_listing("llama3"))
    with first.running(), second.running():
        agent = ADA.model_copy(update={"models": {"summarize": ["auto", "test:echo"]}})
        settings = _settings(tmp_path, [_nothing_listens(), first.url, second.url], decide="test:echo")
        resolved, choice = resolve_auto(settings.model_copy(update={"agents": [agent]}))
    found = f"openai:qwen2.5:7b@{first.url}"
    assert choice is not None and choice.source == "server" and choice.model == found
    assert choice.banner() == f"[models] auto: qwen2.5:7b on the server at {first.url}."
    agent = resolved.agents[0]
    assert resolved.models_for(agent, Task.RESPOND) == (found,)
    assert resolved.models_for(agent, Task.DECIDE) == ("test:echo",)
    assert resolved.models_for(agent, Task.SUMMARIZE) == (found, "test:echo")
    spec = parse_model_string(found, resolved.secrets, Task.CRITIQUE)
    assert spec == ModelSpec(provider="openai", name="qwen2.5:7b", base_url=first.url)
    assert not spec.bundled and spec.hosting == "local"


def test_a_server_that_lists_no_chat_model_is_passed_over(tmp_path: Path) -> None:
    servers = [
        _Models(_listing("text-embedding-nomic-embed-text-v1.5", "bge-m3")),
        _Models({"detail": "not found"}, status=404),
        _Models("<html>a router's login page</html>"),
        _Models(_listing("Qwen/Qwen2.5-7B-Instruct")),
    ]
    with servers[0].running(), servers[1].running(), servers[2].running(), servers[3].running():
        _, choice = resolve_auto(_settings(tmp_path, [server.url for server in servers]))
    assert choice is not None and choice.model == f"openai:Qwen/Qwen2.5-7B-Instruct@{servers[3].url}"
    assert all(server.requests == 1 for server in servers), "each address is asked once"


def test_nothing_is_probed_when_no_task_uses_auto(tmp_path: Path) -> None:
    with _Models(_listing("llama3")).running() as server:
        settings = _settings(tmp_path, [server.url], default="test:echo")
        assert resolve_auto(settings) == (settings, None)
    assert server.requests == 0


def test_chat_model_reads_only_an_openai_model_list() -> None:
    assert chat_model(_listing("all-minilm", "gte-small", "llama3:8b")) == "llama3:8b"
    assert chat_model(_listing("a@b", " ")) is None
    assert chat_model({"data": "x"}) is None
    assert chat_model([]) is None


def test_the_context_window_is_the_smallest_of_the_respond_chain(tmp_path: Path) -> None:
    chained = _settings(tmp_path, [], respond=["anthropic:claude-sonnet-4-6", "local:"])
    assert context_window_for(chained, ADA) == 4_096, "the bundled model may serve the turn"
    server = _settings(
        tmp_path, [], respond=["anthropic:claude-sonnet-4-6", "openai:q@http://127.0.0.1:1/v1"]
    )
    assert context_window_for(server, ADA) == 8_192
    assert context_window_for(_settings(tmp_path, [], respond="anthropic:claude-sonnet-4-6"), ADA) == 200_000
    explicit = _settings(
        tmp_path, [], respond=["anthropic:claude-sonnet-4-6", "local:"], context_window=32_000
    )
    assert context_window_for(explicit, ADA) == 32_000
