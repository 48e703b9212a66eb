"""Self-inspection (SPEC §4.6): a read-only report of the agent's running configuration and
of the host it runs on.

The configuration comes from the context the runtime builds — the model bound to each
task, the memory and retrieval settings, the tool loop's limits, anything else it chooses
to show, and the names of the tools advertised (a callable, as the registry is assembled
after this tool). Host facts come from the standard library and `/proc` only: operating
system, Python, processors, load average, uptime, working directory. Nothing here reaches
the network. Credentials never appear: secrets are not in the context, and userinfo or key
parameters inside URLs (a model or embedder at `http://user:pass@host/...`) are masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.clock import Clock
from persyn.core.config import MemoryConfig, ToolsConfig
from persyn.tools.registry import Tool

__all__ = ["HostFacts", "SelfInspectionContext", "SelfReport", "host_facts", "inspection_tools", "redact"]

Setting = str | int | float | bool | None

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
_SECRET_PARAMETER = re.compile(
    r"(?P<name>[?&](?:api[_-]?key|key|token|access[_-]?token|secret|password|auth)=)[^&#\s]+", re.IGNORECASE
)


def redact(text: str) -> str:
    """`text` with credentials inside URLs masked."""
    return _SECRET_PARAMETER.sub(r"\g<name>***", _USERINFO.sub(r"\g<scheme>***@", text))


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {str(k): _redacted(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


@dataclass(frozen=True)
class SelfInspectionContext:
    agent_name: str
    agent_id: str
    clock: Clock
    models: Mapping[str, str]  # task -> the model string it is bound to
    memory: MemoryConfig
    advertised_tools: Callable[[], Sequence[str]]
    tools: ToolsConfig | None = None
    # Anything else of the running configuration worth showing (heartbeat interval, ...).
    settings: Mapping[str, Setting] = field(default_factory=dict[str, Setting])
    started_at: datetime | None = None  # when this process started serving the agent
    working_directory: Path | None = None  # default: the process's current directory


class HostFacts(BaseModel):
    model_config = ConfigDict(frozen=True)

    os: str = Field(description="Operating system, release and machine.")
    distribution: str | None = None
    python: str
    cpus: int | None = Field(default=None, description="Processors in the machine.")
    usable_cpus: int | None = Field(default=None, description="Processors this process may use.")
    load_average: list[float] | None = Field(default=None, description="Over 1, 5 and 15 minutes.")
    uptime: str | None = Field(default=None, description="How long the host has been up.")
    working_directory: str


class SelfReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    agent_name: str
    agent_id: str
    now: str
    running_since: str | None = None
    running_for: str | None = None
    models: dict[str, str] = Field(description="The model bound to each task.")
    memory: dict[str, Any] = Field(description="Memory and retrieval settings.")
    tool_loop: dict[str, Any] | None = None
    settings: dict[str, Setting] = {}
    tools: list[str] = Field(description="The tools you are offered.")
    host: HostFacts


class NoInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _duration(seconds: float) -> str:
    return str(timedelta(seconds=int(max(seconds, 0))))


def host_facts(working_directory: Path | None = None) -> HostFacts:
    """Facts about this host from the standard library and /proc (blocking; small reads)."""
    distribution = None
    with contextlib.suppress(OSError):
        distribution = platform.freedesktop_os_release().get("PRETTY_NAME")
    usable = None
    if hasattr(os, "sched_getaffinity"):
        usable = len(os.sched_getaffinity(0))
    load = None
    with contextlib.suppress(OSError, AttributeError):  # no load average on Windows
        load = [round(x, 2) for x in os.getloadavg()]
    uptime = None
    with contextlib.suppress(OSError, ValueError, IndexError):  # Linux only
        uptime = _duration(float(Path("/proc/uptime").read_text().split()[0]))
    return HostFacts(
        os=f"{platform.system()} {platform.release()} ({platform.machine()})",
        distribution=distribution,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        cpus=os.cpu_count(),
        usable_cpus=usable,
        load_average=load,
        uptime=uptime,
        working_directory=str(working_directory or Path.cwd()),
    )


def inspection_tools(context: SelfInspectionContext) -> list[Tool[Any, Any]]:
    """inspect_self, bound to `context`."""

    async def inspect(arguments: NoInput) -> SelfReport:
        now = context.clock.now()
        host = await asyncio.to_thread(host_facts, context.working_directory)
        started = context.started_at
        return SelfReport(
            agent_name=context.agent_name,
            agent_id=context.agent_id,
            now=now.isoformat(),
            running_since=None if started is None else started.isoformat(),
            running_for=None if started is None else _duration((now - started).total_seconds()),
            models={task: redact(model) for task, model in sorted(context.models.items())},
            memory=_redacted(context.memory.model_dump(mode="json")),
            tool_loop=None if context.tools is None else context.tools.model_dump(mode="json"),
            settings={k: _redacted(v) for k, v in sorted(context.settings.items())},
            tools=sorted(context.advertised_tools()),
            host=host,
        )

    tools: list[Tool[Any, Any]] = [
        Tool(
            name="inspect_self",
            description=(
                "Report how you are set up and where you run: the model behind each of your "
                "tasks, your memory and retrieval settings, the tools you have, and the host "
                "(operating system, Python, processors, load, uptime, working directory). "
                "Use it when asked about yourself or to check your own configuration."
            ),
            input_model=NoInput,
            output_model=SelfReport,
            handler=inspect,
        ),
    ]
    return tools
