"""Tool providers (SPEC §4.6): each tool group offers its tools through one `ToolProvider`,
registered in the `persyn.tools` entry-point group of its distribution (`core/plugins.py`), so
a new group is one folder plus one line in `pyproject.toml`. `runtime/turn/agent_tools.py`
binds a `ToolScope` to one activation and registers what every provider gives for it.

A provider reads only its scope: what the activation is (agent, channel, the people present, who
hears the answers, the provenance of what it writes) and the services the runtime holds (MCP
connections, the sandbox, the image renderer, the agent's skills). A service's type belongs to
the group that uses it, which looks it up by that type (`ToolScope.service`): the groups import
this module, never the reverse. A provider that gives no tool for a configuration (its section
off, its service absent) gives an empty list.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.plugins import loaded
from persyn.gateway.base import ToolSpec
from persyn.store.base import ReminderAction, Store
from persyn.tools.activation import Audience, RunProvenance
from persyn.tools.registry import Tool

__all__ = ["ENTRY_POINT_GROUP", "ToolProvider", "ToolScope", "tool_providers"]


ENTRY_POINT_GROUP = "persyn.tools"

_Service = TypeVar("_Service")


@dataclass(frozen=True)
class ToolScope:
    """One activation, as its tools see it (`runtime/turn/agent_tools.py` builds it)."""

    settings: Settings
    store: Store
    clock: Clock
    agent: AgentConfig
    agents: Mapping[str, AgentConfig]
    event_id: str
    kind: str  # the activation's: "message", "heartbeat", …
    where: str  # the channel, `service:channel`
    present: tuple[str, ...]  # the people present, the agent excluded
    here: ReminderAction  # whom and where a new reminder addresses by default
    audience: Audience
    run: RunProvenance
    send: Callable[[str, str, str, str], Awaitable[str]]  # a message to a contact, counted
    sent: Callable[[], Awaitable[int]]  # messages this run has sent
    activity: Callable[[int, str | None], Awaitable[list[Any]]]  # recent activity this audience sees
    advertised: Callable[[], tuple[str, ...]]  # every tool's name, once registered
    started_at: datetime
    services: tuple[object, ...] = ()  # the runtime's services for this activation, of the groups' types

    def service(self, kind: type[_Service]) -> _Service | None:
        """The service of type `kind` the runtime holds for this activation (`McpTools`, the
        `SandboxService`, …), or None when it holds none (not configured, not available)."""
        return next((service for service in self.services if isinstance(service, kind)), None)


@dataclass(frozen=True)
class ToolProvider:
    """A tool group: its tools for one scope, and the model provider's own tools it offers.
    `gives_way`: a tool of its whose name another provider already gave is left out (an MCP
    server's `server__tool` never meets a built-in name, but a server cannot shadow one)."""

    name: str
    tools: Callable[[ToolScope], Iterable[Tool[Any, Any]]]
    provider_specs: Callable[[ToolScope], Iterable[ToolSpec]] | None = None
    gives_way: bool = False


_loaded: tuple[ToolProvider, ...] | None = None


def tool_providers() -> tuple[ToolProvider, ...]:
    """Every registered provider (loaded once per process), those that give way last. One
    that fails to load is logged and skipped: the other groups still work."""
    global _loaded
    if _loaded is None:
        _loaded = tuple(
            sorted(loaded(ENTRY_POINT_GROUP, ToolProvider), key=lambda provider: provider.gives_way)
        )
    return _loaded
