"""`persyn init`: write the starter `persyn.toml` (`core/config/template.py`), or add an agent to one."""

from __future__ import annotations

import contextlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import tomlkit
from tomlkit.items import AoT, Table

from persyn.core.config import CONFIG_FILE, AgentConfig
from persyn.core.config.template import render_agent, starter_toml
from persyn.core.errors import ConfigError, InputError
from persyn.core.ids import new_id

__all__ = ["DEFAULT_DISPOSITION", "InitResult", "init_home"]

DEFAULT_DISPOSITION = (
    "Curious, candid and warm. I value being consistent with myself over being agreeable, "
    "I say so when I think someone is wrong, and I am honest about what I do not remember."
)


@dataclass(frozen=True)
class InitResult:
    path: Path
    agent: AgentConfig
    created_file: bool


def _agent_table(agent: AgentConfig) -> Table:
    """`agent` as a commented `[[agents]]` table (`core/config/template.py` writes it)."""
    agents = tomlkit.parse(render_agent(agent))["agents"]
    return cast(AoT, agents)[0]


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` all at once: a full disk or a crash mid-write leaves the old
    file as it was, never a truncated one (which would lose every agent's id)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if path.exists():
            os.chmod(temporary, path.stat().st_mode)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc


def init_home(home: Path, name: str | None) -> InitResult:
    """Create `home/persyn.toml` with one agent, or add an agent to an existing file."""
    agent_name = (name or "Persyn").strip()
    if not agent_name or len(agent_name) > 64:
        raise InputError(f"invalid agent name {name!r}: use 1 to 64 characters")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the deployment directory {str(home)!r}: {exc.strerror or exc}"
        ) from exc
    path = home / CONFIG_FILE
    agent = AgentConfig(name=agent_name, id=new_id(), disposition=DEFAULT_DISPOSITION)

    if path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {str(path)!r}: {exc}") from exc
        try:
            existing = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"invalid configuration in {path}: not valid TOML: {exc}") from exc
        names = [str(a.get("name", "")).lower() for a in existing.get("agents", [])]
        if agent_name.lower() in names:
            raise InputError(f"an agent named {agent_name!r} already exists in {path}")
        document = tomlkit.parse(text)
        agents = document.get("agents")
        if agents is None:
            agents = tomlkit.aot()
            document.append("agents", agents)
        agents.append(_agent_table(agent))
        _write_atomically(path, tomlkit.dumps(document))
        return InitResult(path=path, agent=agent, created_file=False)

    document = tomlkit.parse(starter_toml())
    agents = tomlkit.aot()
    agents.append(_agent_table(agent))
    document.append("agents", agents)
    _write_atomically(path, tomlkit.dumps(document))
    return InitResult(path=path, agent=agent, created_file=True)
