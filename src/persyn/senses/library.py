"""Kept originals (issue 35): what people sent, as files under `<data>/attachments/<agent>/`.

Each original is `<ref>.<ext>` with its metadata beside it (`<ref>.json`), scoped like the
images the agent makes: the channel key of the conversation it was sent in. `get` answers only
for a scope among the caller's eligible channels; from anywhere else a reference is answered
exactly like one that does not exist.

**Culled with their memory** (SPEC §4.1). `sweep` forgets every original that nothing holds
any more (`DialogHistoryPort.held_attachments`: its event's dialog, or a memory made from it)
and that is older than the grace period (`[senses] original_grace_hours`, `ORIGINAL_GRACE` by
default; its reference's time is when it was kept): a file kept for an event still being stored
or processed is never swept, and one kept for an event that never was (a crash in between, a
message refused after its files were kept, its text over `max_message_chars` once they were
read) is swept a grace period later, as is a half-written `.att-….tmp` a crash left behind. Callers commit the store first and sweep after (`Housekeeping`, `persyn memory
forget` / `cull`), so a kill between the two leaves only files the next sweep takes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from persyn.core.events import ATTACHMENT_REFERENCE, Attachment, AttachmentKind
from persyn.core.ids import id_time, is_id, parse_id

__all__ = ["GONE_ORIGINAL", "ORIGINAL_GRACE", "AttachmentLibrary", "KeptOriginal"]

# A kept original nothing holds is swept once it is this old (its event is stored and its
# turn has run long before).
ORIGINAL_GRACE = timedelta(days=1)
# What a reference reads as once its original is gone (swept, or never kept here).
GONE_ORIGINAL = "[a file that is no longer kept]"
# A write in progress (`_write`): `.<ref>.<ext>.<pid>.tmp`, `.<ref>.json.<pid>.tmp`.
_TEMPORARY = re.compile(r"\.(att-[0-9A-HJKMNP-TV-Z]{26})\.[^/]*\.tmp")


class KeptOriginal(BaseModel):
    """One kept original, as its metadata file holds it."""

    model_config = ConfigDict(frozen=True)

    reference: str
    agent_id: str
    scope: str  # the channel key it was sent on (its visibility)
    service: str
    channel: str
    speaker_id: str | None = None
    kind: AttachmentKind
    media_type: str
    size: int
    sha256: str
    filename: str | None = None
    file: str
    received_at: datetime
    meta: dict[str, str] = Field(default_factory=dict[str, str])

    def attachment(self) -> Attachment:
        return Attachment(
            kind=self.kind,
            media_type=self.media_type,
            size=self.size,
            reference=self.reference,
            filename=self.filename,
            meta=self.meta,
        )


class AttachmentLibrary:
    """Originals as files, one folder per agent: `<ref>.<ext>` and `<ref>.json`. Every write
    goes to a temporary file renamed into place, and the metadata last, so a reader never sees
    half a file and a file without its metadata is not an original."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _folder(self, agent_id: str) -> Path:
        return self.directory / parse_id(agent_id, what="agent id")

    def used_bytes(self, agent_id: str) -> int:
        """What the agent's kept originals take (their files; the metadata is negligible)."""
        folder = self._folder(agent_id)
        if not folder.is_dir():
            return 0
        return sum(path.stat().st_size for path in folder.glob("att-*") if path.suffix != ".json")

    def put(self, original: KeptOriginal, data: bytes) -> None:
        folder = self._folder(original.agent_id)
        _write(folder / original.file, data)
        _write(folder / f"{original.reference}.json", original.model_dump_json().encode())

    def get(self, agent_id: str, reference: str, eligible: Sequence[str]) -> KeptOriginal | None:
        """The original, if it exists and its scope is one of `eligible` (else None: a
        stranger cannot tell an original elsewhere from no original)."""
        if not ATTACHMENT_REFERENCE.fullmatch(reference) or not is_id(agent_id):
            return None
        try:
            kept = KeptOriginal.model_validate_json(
                (self._folder(agent_id) / f"{reference}.json").read_bytes()
            )
        except (OSError, ValidationError):
            return None
        return kept if kept.scope in eligible and kept.agent_id == agent_id else None

    def read(self, kept: KeptOriginal) -> bytes:
        return (self._folder(kept.agent_id) / kept.file).read_bytes()

    def forget(self, agent_id: str, reference: str) -> None:
        """Drop an original (its metadata first: it stops existing at once)."""
        if not ATTACHMENT_REFERENCE.fullmatch(reference):
            return
        folder = self._folder(agent_id)
        (folder / f"{reference}.json").unlink(missing_ok=True)
        for path in folder.glob(f"{reference}.*"):
            path.unlink(missing_ok=True)

    def sweep(
        self, agent_id: str, held: Collection[str], now: datetime, grace: timedelta = ORIGINAL_GRACE
    ) -> int:
        """Forget every original of the agent not in `held` and kept before `now - grace` (a
        data file whose metadata was never written among them), and every half-written
        temporary file that old (a crash mid-write: no write takes that long); returns the
        bytes freed."""
        folder = self._folder(agent_id)
        if not folder.is_dir():
            return 0
        cutoff = (now if now.tzinfo is not None else now.replace(tzinfo=UTC)) - grace
        freed = 0
        references: set[str] = set()
        for path in folder.iterdir():
            if match := ATTACHMENT_REFERENCE.match(path.name):
                references.add(match[0])
            elif (temporary := _TEMPORARY.fullmatch(path.name)) and id_time(
                temporary[1].removeprefix("att-")
            ) < cutoff:
                freed += path.stat().st_size
                path.unlink(missing_ok=True)
        for reference in sorted(references - set(held)):
            if id_time(reference.removeprefix("att-")) >= cutoff:
                continue
            freed += sum(p.stat().st_size for p in folder.glob(f"{reference}.*") if p.suffix != ".json")
            self.forget(agent_id, reference)
        return freed


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
