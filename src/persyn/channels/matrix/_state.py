"""What a Matrix account keeps between runs (`AccountState`): one JSON file per account under the
data directory, the adapter's own cursor (no other process reads it, so it is not in the store).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AccountState"]

# The adapter's logger: a damaged state file is reported as the adapter's.
log = logging.getLogger("persyn.channels.matrix.channel")

_REMEMBERED = 4096  # answered events and own message ids kept in the state file


@dataclass
class AccountState:
    """What an account keeps between runs (a JSON file): the sync position, the Matrix event
    behind each event it submitted (to reply in place), its own message ids (a reply to one
    is addressed to it) and the direct chats it knows."""

    path: Path
    next_batch: str | None = None
    answered: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    mine: list[str] = field(default_factory=list[str])
    direct: dict[str, str] = field(default_factory=dict[str, str])

    @classmethod
    def load(cls, path: Path) -> AccountState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as exc:
            # A damaged cursor must not stop the agent: it starts from now, like a first start.
            log.warning("matrix: unreadable state %s (%s); starting from the current position", path, exc)
            return cls(path)
        return cls(
            path,
            next_batch=data.get("next_batch"),
            answered={str(k): [str(x) for x in v] for k, v in (data.get("answered") or {}).items()},
            mine=[str(x) for x in data.get("mine") or []],
            direct={str(k): str(v) for k, v in (data.get("direct") or {}).items()},
        )

    def snapshot(self) -> str:
        """The state as JSON, taken on the event loop (the dicts are not changed meanwhile)."""
        while len(self.answered) > _REMEMBERED:
            del self.answered[next(iter(self.answered))]
        del self.mine[:-_REMEMBERED]
        body = {
            "next_batch": self.next_batch,
            "answered": self.answered,
            "mine": self.mine,
            "direct": self.direct,
        }
        return json.dumps(body)

    def write(self, text: str) -> None:
        """`text` as the state file, atomically (a crash leaves the old file or the new one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
