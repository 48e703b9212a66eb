"""`RuntimeAPI`: everything a channel may ask of the runtime (ARCHITECTURE §2: channels
import core and this protocol only, never the runtime's implementation).

It lives here, in a module that imports nothing of the runtime (only `core` and the channel
port it names), so `channels/` can depend on it without importing `runtime/app.py` and
everything behind it; `Runtime` satisfies it structurally.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from persyn.core.clock import Clock
from persyn.core.events import Attachment, CompletionMarker, Event, Speaker, Upload
from persyn.runtime.channel import Channel, ConnectionState
from persyn.senses.hearing import Transcriber, Transcript

__all__ = ["RuntimeAPI"]


class RuntimeAPI(Protocol):
    @property
    def clock(self) -> Clock: ...

    async def attach_channel(self, channel: Channel) -> int:
        """Connect `channel` here: from now on replies and messages for its service go to
        it. What waited for it in the outbox is delivered first (marked `while_away`);
        returns how many."""
        ...

    def detach_channel(self, channel: Channel) -> None: ...

    def channel_states(self) -> list[ConnectionState]:
        """The connection states of the channels attached in this process, by service."""
        ...

    async def deliver_pending(self, service: str) -> int:
        """Deliver now what the outbox holds for `service` (written by any process)."""
        ...

    async def deliver_reply(self, agent_id: str, event_id: str, timeout: float = 5.0) -> bool:
        """After a transmitted marker: show the reply here even if another process sent it."""
        ...

    async def resolve_speaker(self, agent_id: str, speaker: Speaker) -> tuple[str, str | None]: ...

    async def remember_display_name(self, agent_id: str, person_id: str, name: str) -> None: ...

    async def knows_speaker(self, agent_id: str, speaker: Speaker) -> bool:
        """Whether `speaker` is already in the agent's directory (a contact); creates nothing."""
        ...

    async def revise_reply(self, agent_id: str, event_id: str, text: str) -> bool:
        """Store `text` as the agent's reply to `event_id` in place of what was sent: a live
        voice channel records only what the person heard of a reply cut off. False when there
        is no such reply or the store keeps dialog it cannot rewrite."""
        ...

    def validate_text(self, text: str | bytes) -> str: ...

    def offline_notice(self) -> str | None: ...

    async def keep_attachments(
        self, agent_id: str, service: str, channel: str, speaker_id: str | None, uploads: Sequence[Upload]
    ) -> tuple[Attachment, ...]:
        """Inspect and keep what a person sent with a message, all of it or none (SPEC §4 step
        1): the `Attachment`s to put on its `Event`. A file over a `[senses]` limit, of a type
        the agent does not take, corrupt, or past the storage cap raises an `InputError`
        (`persyn.senses.media.MediaRejected`) whose message names the limit."""
        ...

    async def submit(self, event: Event, *, from_step: bool = False) -> str:
        """Store and enqueue `event`; one with attachments is read into text first."""
        ...

    async def get_event(self, agent_id: str, event_id: str) -> Event | None:
        """The stored event (its `meta` included): an adapter threads a reply to the message
        it answers with what it kept there."""
        ...

    async def wait_marker(self, agent_id: str, event_id: str, timeout: float = 300.0) -> CompletionMarker: ...

    # live calls (SPEC Appendix A) ------------------------------------------------------------
    async def open_live_call(self, event: Event) -> tuple[str, str]:
        """A call begins (`event`: its caller, its channel): the caller's person and the call's
        conversation, opened before the first turn. The conversation id and the caller's name
        as the directory knows them."""
        ...

    async def live_context(self, event: Event) -> str:
        """The part of a call's prompt the call caches: the persona, how to speak on a call, and
        what the context sources find for `event`'s words (memories, the person record, ...)."""
        ...

    async def live_reply(
        self,
        event: Event,
        *,
        system: str,
        sink: Callable[[str], Awaitable[None]],
        cue: bool = False,
        notes: Sequence[str] = (),
    ) -> tuple[str | None, str]:
        """One turn of a call, answered by the fast model (task `voice`, no tools), its text
        streamed to `sink` as it comes: what was said and stored as the agent's line (None:
        nothing; then why). The caller's words (`event.text`) are stored as their line; with
        `cue`, `event.text` is the direction cue instead, context and no one's line. `notes`:
        what the background found since the last answer."""
        ...

    async def hear(
        self,
        agent_id: str,
        transcriber: Transcriber,
        data: bytes,
        media_type: str,
        *,
        surface: str,
        channel: str,
    ) -> Transcript:
        """Speech to text through the gateway (`ModelGateway.transcribe`: traced, metered)."""
        ...

    def spoke(self, agent_id: str, model: str, seconds: float, *, surface: str, channel: str) -> None:
        """Meter `seconds` of speech synthesized by `model` (a usage record of stage `speak`)."""
        ...
