"""`auto`: the best model at hand, chosen once when a process starts (README, Configuration).

In order: a hosted model when an API key is set; else the first chat model of an
OpenAI-compatible server already running where `[models] auto_probe` says (Ollama, the
llama.cpp server, vLLM, LM Studio on their usual loopback ports); else the bundled Gemma 3
270M (`local:`).

The choice is made by the composition root, before anything reads a model string, and
written into the settings it hands on: a found server replaces `auto` by its model string
(`openai:NAME@URL`) wherever `auto` is configured. So every consumer — the gateway, the local
model servers, the rule that the bundled tiny model gets no critique and no tools, the
context window — follows the resolved model without knowing `auto` was involved, and the
process never probes twice. With a key set, or nothing found, the settings are handed on
as they are: `parse_model_string` resolves `auto` from the keys (a strong or a cheap hosted
model per task) or to `local:`.

It fails soft and is cheap: every address is probed at once on its own daemon thread, and
each may take at most `auto_probe_timeout_seconds` (a closed loopback port refuses at once);
whatever does not answer in time, or answers with anything but a model list, is passed over.
The stdlib's `http.client` rather than httpx, so a process that only submits (`persyn send`)
does not import an HTTP stack for it.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from persyn.core.config import AgentConfig, ModelChoice, Settings, Task
from persyn.gateway.registry import AUTO_MODELS

__all__ = ["AutoChoice", "chat_model", "choose_auto", "probe_servers", "resolve_auto", "uses_auto"]

AutoSource = Literal["hosted", "server", "bundled"]

_KNOWN_PORTS = {11434: "Ollama", 8080: "llama.cpp server", 8000: "vLLM", 1234: "LM Studio"}
# Model lists mix chat models with encoders and speech models (Ollama lists every pulled model,
# LM Studio its embedding models too); a name is all /v1/models says about them.
_NOT_CHAT = re.compile(
    r"embed|rerank|whisper|tts|speech|minilm|(^|[/_:-])(bge|e5|gte)([/_:.-]|$)", re.IGNORECASE
)


@dataclass(frozen=True)
class AutoChoice:
    """What `auto` stands for in this process, and why (for the chat banner and doctor)."""

    source: AutoSource
    model: str  # "auto" (hosted: a strong or a cheap model per task), "openai:NAME@URL", "local:"
    detail: str

    def banner(self) -> str | None:
        """The chat banner's line about it: only a found server needs one (the bundled model
        has the offline notice; a hosted model is what an operator with a key expects)."""
        if self.source != "server":
            return None
        return f"[models] auto: {self.detail}."


def uses_auto(settings: Settings) -> bool:
    """Whether any task of any agent may run on `auto` (else nothing needs resolving)."""
    return any("auto" in settings.models_for(agent, task) for agent in _agents(settings) for task in Task)


def _agents(settings: Settings) -> list[AgentConfig]:
    # The deployment-wide [models] count even before an agent exists (`persyn doctor`).
    if settings.agents:
        return settings.agents
    return [AgentConfig(name="-", id="0" * 26)]


def resolve_auto(settings: Settings) -> tuple[Settings, AutoChoice | None]:
    """`settings` with `auto` resolved (see the module docstring), and the choice; None when
    no task uses `auto` (then nothing is probed)."""
    if not uses_auto(settings):
        return settings, None
    choice = choose_auto(settings)
    if choice.source != "server":
        return settings, choice
    return _replace_auto(settings, choice.model), choice


def choose_auto(settings: Settings) -> AutoChoice:
    secrets = settings.secrets
    hosted = (
        ("anthropic", "ANTHROPIC_API_KEY", secrets.anthropic_api_key),
        ("openai", "OPENAI_API_KEY", secrets.openai_api_key),
    )
    for provider, variable, key in hosted:
        if key is not None and key.get_secret_value():
            strong, cheap = AUTO_MODELS[cast(Literal["anthropic", "openai"], provider)]
            return AutoChoice(
                "hosted", "auto", f"{variable} is set: {provider}:{strong} (reasoning) and {provider}:{cheap}"
            )
    models = settings.models
    found = probe_servers(models.auto_probe, models.auto_probe_timeout_seconds)
    if found is not None:
        url, name = found
        port = urlsplit(url).port
        known = f" ({_KNOWN_PORTS[port]}'s port)" if port in _KNOWN_PORTS else ""
        return AutoChoice("server", f"openai:{name}@{url}", f"{name} on the server at {url}{known}")
    where = ", ".join(models.auto_probe) or "nowhere ([models] auto_probe = [])"
    return AutoChoice(
        "bundled",
        "local:",
        f"no API key is set and no OpenAI-compatible server answered at {where}: the bundled Gemma 3 270M",
    )


def _replace_auto(settings: Settings, model: str) -> Settings:
    def swap(choice: ModelChoice | None) -> ModelChoice | None:
        if choice == "auto":
            return model
        if isinstance(choice, list):
            return [model if raw == "auto" else raw for raw in choice]
        return choice

    names = ("default", *(task.value for task in Task))
    models = settings.models.model_copy(update={name: swap(getattr(settings.models, name)) for name in names})
    agents = [
        agent.model_copy(update={"models": {task: swap(choice) for task, choice in agent.models.items()}})
        for agent in settings.agents
    ]
    return settings.model_copy(update={"models": models, "agents": agents})


def probe_servers(urls: Sequence[str], timeout: float) -> tuple[str, str] | None:
    """(address, model) of the first of `urls` whose `GET /models` lists a chat model, all
    asked at once; None when none does within `timeout`."""
    if not urls:
        return None
    found: list[str | None] = [None] * len(urls)
    done = [threading.Event() for _ in urls]

    def probe(index: int) -> None:
        try:
            found[index] = chat_model(_get_json(f"{urls[index]}/models", timeout))
        except (OSError, ValueError, http.client.HTTPException):
            pass
        finally:
            done[index].set()

    for index in range(len(urls)):
        threading.Thread(target=probe, args=(index,), name=f"persyn-auto-probe-{index}", daemon=True).start()
    deadline = time.monotonic() + timeout
    for index, url in enumerate(urls):
        # In order of preference: an earlier address that answers wins over a later one.
        done[index].wait(max(0.0, deadline - time.monotonic()))
        name = found[index]
        if name is not None:
            return url, name
    return None


def _get_json(url: str, timeout: float) -> Any:
    parts = urlsplit(url)
    host = parts.hostname or ""
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(host, parts.port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/", headers={"Accept": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        return json.loads(response.read(1_000_000))
    finally:
        connection.close()


def chat_model(listing: Any) -> str | None:
    """The first chat model of an OpenAI `/v1/models` answer (None: not one, or none listed)."""
    if not isinstance(listing, dict):
        return None
    data = cast(dict[str, Any], listing).get("data")
    if not isinstance(data, list):
        return None
    for entry in cast(list[Any], data):
        name = cast(dict[str, Any], entry).get("id") if isinstance(entry, dict) else None
        # A name with "@" or blank could not be written as `openai:NAME@URL`.
        if isinstance(name, str) and name.strip() and "@" not in name and not _NOT_CHAT.search(name):
            return name.strip()
    return None
