"""The flags sub-port: small durable key/value state (cursors, once-only markers). A log or a
state machine gets a table of its own instead (ARCHITECTURE §4, turn 2)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

__all__ = ["FlagsPort"]


class FlagsPort(ABC):
    """Per-agent key/value flags with compare-and-set."""

    @abstractmethod
    async def get_flag(self, agent_id: str, key: str) -> str | None: ...

    @abstractmethod
    async def set_flag(self, agent_id: str, key: str, value: str | None) -> None:
        """None deletes the flag."""

    @abstractmethod
    async def flags_with_prefix(self, agent_id: str, prefix: str, limit: int = 100) -> dict[str, str]:
        """Flags whose key starts with `prefix`, in key order (at most `limit`)."""

    @abstractmethod
    async def set_flag_if_absent(self, agent_id: str, key: str, value: str) -> bool:
        """Compare-and-set: True if this call created the flag."""

    async def update_flag(
        self, agent_id: str, key: str, change: Callable[[str | None], str | None]
    ) -> str | None:
        """Set a flag to `change(its current value)` (None deletes it) and return the new
        value. A backend may read and write in one transaction, which also makes the change
        atomic against other writers; this default is a read, then a write."""
        value = change(await self.get_flag(agent_id, key))
        await self.set_flag(agent_id, key, value)
        return value
