"""`[models] default = "auto"` against the real llama.cpp server (issue 15 item 7).

The server is llama-cpp-python's own (`python -m llama_cpp.server`, from the `local` extra, as
an operator would start it) with the packaged Gemma GGUF, on a free port that the deployment
names in `[models] auto_probe` (the usual port, 8080, may be taken). `auto` must pick it, and
critique and tools, which are off only for the bundled tiny model, must then be on: a turn is
critiqued. `persyn doctor` and the chat banner say which model `auto` chose; with a key set,
doctor says the hosted model, without calling it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

import httpx
import pytest
from persyn_cli import Persyn

from persyn.core.config import Task
from persyn.gateway.local import ensure_default_weights, local_available
from persyn.gateway.registry import ModelSpec
from persyn.testing.harness import harness_settings, run_runtime

pytestmark = pytest.mark.e2e

P = ParamSpec("P")
R = TypeVar("R")

_without_llama = pytest.mark.skipif(
    not local_available(), reason="needs the 'local' extra (uv sync --extra local)"
)


def needs_llama(test: Callable[P, R]) -> Callable[P, R]:
    return pytest.mark.local_llm(pytest.mark.slow(_without_llama(test)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, model id) of a running `python -m llama_cpp.server`."""
    root = tmp_path_factory.mktemp("llama-cpp-server")
    weights = ensure_default_weights(root / "models")
    port = _free_port()
    with open(root / "server.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(weights), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (root / "server.log").read_text(errors="replace")
            try:
                models = httpx.get(f"{url}/models", timeout=2).json()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the llama.cpp server did not start"
                time.sleep(0.2)
        yield url, str(models["data"][0]["id"])
    finally:
        process.terminate()
        process.wait(timeout=30)


@needs_llama
async def test_auto_picks_a_running_llama_cpp_server_and_critique_and_tools_are_on(
    llama_cpp_server: tuple[str, str], tmp_path: Path
) -> None:
    url, model = llama_cpp_server
    config = (
        f'[models]\nauto_probe = ["{url}"]\nauto_probe_timeout_seconds = 10.0\nmax_output_tokens = 16\n'
        "[deliberation]\nsubstantive_min_words = 1\n"
    )
    settings = harness_settings(tmp_path / "home", model="auto", config=config)
    async with run_runtime(settings) as pilot:
        runtime, agent = pilot.runtime, pilot.agent
        for task in Task:
            assert runtime.gateways[agent.id].spec_for(task) == ModelSpec(
                provider="openai", name=model, base_url=url
            )
        assert not runtime.activation.tiny_deliberator(agent.id)
        assert runtime.tools.offered(agent.id), "the respond model is offered the agent's tools"
        assert runtime.offline_notice() == f"[models] auto: {model} on the server at {url}."
        await pilot.say("What did we talk about at the violin workshop last week?")
        stages = [record.stage for record in pilot.usage()]
    assert stages[0] == "respond"
    assert any(stage.startswith("critique:") for stage in stages), stages
    assert all(record.model == f"openai:{model}@{url}" for record in pilot.usage())


@needs_llama
def test_doctor_and_the_chat_banner_say_which_server_and_model_auto_chose(
    llama_cpp_server: tuple[str, str], tmp_path: Path
) -> None:
    url, model = llama_cpp_server
    persyn = Persyn(home=tmp_path / "home")
    assert persyn.run("init", "--name", "Ada").returncode == 0
    done = persyn.run(
        "doctor", PERSYN_MODELS__AUTO_PROBE=f'["{url}"]', PERSYN_MODELS__AUTO_PROBE_TIMEOUT_SECONDS="10"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"[ ok ] models auto: {model} on the server at {url}" in done.stdout
    assert f"[ ok ] model openai:{model}@{url}: server answers for Ada/respond" in done.stdout
    chat = persyn.run(
        "chat",
        input="/quit\n",
        PERSYN_MODELS__AUTO_PROBE=f'["{url}"]',
        PERSYN_MODELS__AUTO_PROBE_TIMEOUT_SECONDS="10",
    )
    assert chat.returncode == 0, chat.stderr
    assert f"[models] auto: {model} on the server at {url}." in chat.stdout
    assert "tiny offline model" not in chat.stdout


def test_doctor_with_a_key_says_auto_is_the_hosted_model_without_calling_it(tmp_path: Path) -> None:
    persyn = Persyn(home=tmp_path / "home")
    assert persyn.run("init", "--name", "Ada").returncode == 0
    # A fake key: a call to Anthropic would fail, and doctor passes.
    done = persyn.run("doctor", ANTHROPIC_API_KEY="sk-ant-not-a-real-key")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ ok ] models auto: ANTHROPIC_API_KEY is set: anthropic:claude-sonnet-4-6" in done.stdout
    assert "[ ok ] model anthropic:claude-haiku-4-5: ANTHROPIC_API_KEY is set for Ada/decide" in done.stdout


def test_doctor_with_nothing_to_find_says_auto_falls_back_to_the_bundled_model(tmp_path: Path) -> None:
    persyn = Persyn(home=tmp_path / "home")
    assert persyn.run("init", "--name", "Ada").returncode == 0
    nowhere = f"http://127.0.0.1:{_free_port()}/v1"
    done = persyn.run("doctor", PERSYN_MODELS__AUTO_PROBE=f'["{nowhere}"]')
    assert f"[note] models auto: no API key is set and no OpenAI-compatible server answered at {nowhere}" in (
        done.stdout
    )
    assert "the bundled Gemma 3 270M" in done.stdout


def test_doctor_checks_every_link_of_a_fallback_chain(tmp_path: Path) -> None:
    persyn = Persyn(home=tmp_path / "home")
    assert persyn.run("init", "--name", "Ada").returncode == 0
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    chain = f'["test:echo", "openai:llama3@{dead}"]'
    done = persyn.run("doctor", PERSYN_MODELS__DEFAULT="test:echo", PERSYN_MODELS__RESPOND=chain)
    assert done.returncode == 1, done.stdout
    assert (
        "[note] model test:echo: deterministic test double for Ada/respond (link 1 of 2), Ada/critique"
        in (done.stdout)
    )
    assert f"[FAIL] model openai:llama3@{dead}: unreachable for Ada/respond (link 2 of 2)" in done.stdout
