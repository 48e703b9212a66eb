"""Local models: one llama.cpp server per distinct `local:` weights file a task is bound to."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import ModelError
from persyn.gateway.auto import AutoChoice
from persyn.gateway.local import OFFLINE_NOTICE, LlamaServer, resolve_weights
from persyn.gateway.registry import ModelSpec, parse_model_string

__all__ = ["LocalModels"]


class LocalModels:
    """The llama.cpp servers of this process, and the models the gateway builds on them.

    `auto` is what `[models] auto` was resolved to when this process started (None: no task
    uses it); the chat banner says what it chose when that is a server found on this machine."""

    def __init__(self, settings: Settings, auto: AutoChoice | None = None) -> None:
        self.settings = settings
        self.auto = auto
        self._servers: dict[str, LlamaServer] = {}
        self.in_use = False  # some task runs on a local model (the offline notice says so)

    def notice(self, *, critique_off: bool) -> str | None:
        """The chat banner's line about the models: which one `auto` found on a local server,
        or that the tiny offline model answers (and, with `critique_off`, that self-critique
        is off with it)."""
        found = self.auto.banner() if self.auto is not None else None
        if not self.in_use:
            return found
        offline = OFFLINE_NOTICE
        if critique_off:
            offline += " Self-critique is off with the tiny model ([deliberation] offline_model)."
        return offline if found is None else f"{found} {offline}"

    async def start(self, agents: Iterable[AgentConfig]) -> None:
        """Start llama.cpp for every distinct `local:` weights file some task is bound to.

        Done up front (and off the event loop) so the first reply does not stall."""
        settings = self.settings
        for agent in agents:
            for raw in {raw for task in Task for raw in settings.models_for(agent, task)}:
                spec = parse_model_string(raw, settings.secrets)
                if spec.provider != "local" or spec.name in self._servers:
                    continue
                weights = await asyncio.to_thread(resolve_weights, spec.name, settings.models_dir)
                server = LlamaServer(
                    weights,
                    context_window=settings.models.context_window or 4096,
                    log_path=settings.home / "logs" / "llama-server.log",
                )
                (settings.home / "logs").mkdir(parents=True, exist_ok=True)
                await server.start_async()
                self._servers[spec.name] = server
                self.in_use = True

    def model(self, spec: ModelSpec) -> Any:
        """The gateway's `local_factory`: an OpenAI-compatible model on the started server."""
        from persyn.gateway.openai import build_local_model

        server = self._servers.get(spec.name)
        if server is None:
            raise ModelError(f"the local model {spec.name or 'default'!r} was not started")
        models = self.settings.models
        return build_local_model(
            server.model_name, server.base_url, models.request_timeout_seconds, models.local_max_output_tokens
        )

    async def stop(self) -> None:
        for server in self._servers.values():
            await asyncio.to_thread(server.stop)
        self._servers.clear()
