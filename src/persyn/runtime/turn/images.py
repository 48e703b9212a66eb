"""Images in the runtime (ARCHITECTURE §21): the image tools bound to an activation, the
background render and its delivery.

`generate_image` / `edit_image` write a pending job (`ImageLibrary.put_job`) under a
reference derived from the tool call's durable step, and answer at once. The workflow that
ran the tool step then enqueues `persyn.render_image` on the background queue under an id
derived from the reference (DBOS starts no workflow from inside a step, and the tool loop's
closure runs in the workflow: a recovered activation enqueues the same id again, which
attaches). The render workflow has two steps:

- `render`: the autonomy budget admits it (a self-initiated run's), the provider renders,
  the image is kept in the library and one usage record is emitted on the runtime's meter
  (stage `image`, `units` 1, priced per image from `[prices.images]`, attributed to the
  conversation that asked). A failure emits no record and becomes the agent's news. An
  image already in the library under the reference is not rendered (nor billed) again;
- `deliver`: the news is said in the conversation of the channel that asked (a dialog
  message of the agent: the next turn reads "the image you asked for is ready: img-…"),
  through the outbox, whose row id is derived from the reference. The outbox attaches the
  image (`attachments`) for a channel that shows images.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict

from persyn.cognition.pipeline import TurnSetup
from persyn.core.clock import Clock
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ToolError
from persyn.core.events import ATTACHMENT_REFERENCE, AttachmentKind, ImageAttachment, Outbound
from persyn.core.ids import derived_id, id_time, new_id
from persyn.core.records import channel_key
from persyn.memory.access import eligible_channels
from persyn.runtime.background.autonomy import AUTONOMOUS_SERVICE
from persyn.runtime.delivery.outbox import Outbox
from persyn.runtime.turn.senses import AttachmentLibrary, KeptOriginal
from persyn.store import Store
from persyn.store.base import Message, Role
from persyn.store.ports.outbox import OutboxRow
from persyn.tools.images.generate import (
    IMAGE_REFERENCE,
    ImageJob,
    ImageLibrary,
    ImageProvider,
    ImageRenderError,
    ImagesContext,
)
from persyn.tools.images.openai_images import OpenAIImages
from persyn.tools.registry import ToolOutcome
from persyn.usage.meter import Meter
from persyn.usage.records import UsageRecord

__all__ = ["ImageNews", "ImageService", "image_price", "render_workflow_id"]

log = logging.getLogger(__name__)

IMAGE_STAGE = "image"
_DAY = timedelta(hours=24)

# Before a render, as before a model call: raises when the budget of the run that asked is
# used up (`Autonomy.admit_call`; outside a self-initiated run it admits).
Admit = Callable[[str, str], Awaitable[object]]


def render_workflow_id(reference: str) -> str:
    """The background render of one image (one per reference)."""
    return derived_id(id_time(reference.removeprefix("img-")), reference, "render")


def image_price(prices: Mapping[str, float], model: str, size: str) -> float | None:
    """Dollars per image of `model` at `size` (`MODEL@SIZE` first, then `MODEL`); None = unpriced."""
    for key in (f"{model}@{size}", model):
        if key in prices:
            return prices[key]
    return None


class ImageNews(BaseModel):
    """How a render ended: what `deliver` says, and where."""

    model_config = ConfigDict(frozen=True)

    job: ImageJob
    outcome: Literal["ready", "failed"]
    detail: str = ""  # failed: why
    usage_id: str | None = None


class ImageService:
    """The image tools' backend for one runtime (present only with `[images] base_url`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        clock: Clock,
        agents: Mapping[str, AgentConfig],
        outbox: Outbox | None,
        admit: Admit,
        meter: Meter,
        provider: ImageProvider | None = None,
        api_key: str | None = None,
    ) -> None:
        self.settings = settings
        self.config = settings.images
        self.library = ImageLibrary(settings.data_dir / "images")
        self.received = AttachmentLibrary(settings.data_dir / "attachments")  # `Senses.library`'s files
        self._store = store
        self._clock = clock
        self._agents = agents
        self._outbox = outbox
        self._admit = admit
        self._meter = meter
        self.provider = provider or OpenAIImages(settings.images, api_key)

    # the tools --------------------------------------------------------------------------------
    def context(self, setup: TurnSetup, event_id: str, call_key: str | None) -> ImagesContext:
        where = channel_key(setup.service, setup.channel)

        async def request(
            kind: Literal["generate", "edit"], prompt: str, size: str, references: tuple[str, ...]
        ) -> str:
            now = self._clock.now()
            # A re-run of the tool step asks for the same image: the reference is the call's.
            ulid = (
                new_id(now)
                if call_key is None
                else derived_id(id_time(event_id), event_id, "image", call_key)
            )
            reference = f"img-{ulid}"
            if self.library.job(reference) is None:  # a re-run's own job is not counted twice
                limit = self.config.max_per_day
                asked = await asyncio.to_thread(self.library.asked_since, setup.agent_id, now - _DAY)
                if asked >= limit:
                    raise ToolError(f"no image: {asked} asked for in the last 24 hours, the limit is {limit}")
            job = ImageJob(
                reference=reference,
                kind=kind,
                prompt=prompt,
                size=size,
                based_on=references[0] if references else None,
                references=references,
                agent_id=setup.agent_id,
                scope=where,
                service=setup.service,
                channel=setup.channel,
                person_id=setup.person_id,
                conversation_id=setup.conversation_id,
                thread_id=event_id,
                requested_at=now,
                trigger=setup.kind,
            )
            self.library.put_job(job)
            return job.reference

        return ImagesContext(
            library=self.library,
            eligible=eligible_channels(where, self.settings.memory.channel_groups),
            default_size=self.config.size,
            max_prompt_chars=self.config.max_prompt_chars,
            request=request,
            received=lambda reference, eligible: (
                self._received_image(setup.agent_id, reference, eligible) is not None
            ),
        )

    def _received_image(self, agent_id: str, reference: str, eligible: Sequence[str]) -> KeptOriginal | None:
        """A received original that is an image, kept on one of `eligible` (else None)."""
        kept = self.received.get(agent_id, reference, eligible)
        return kept if kept is not None and kept.kind is AttachmentKind.IMAGE else None

    async def _sources(self, job: ImageJob) -> list[tuple[bytes, str]]:
        """The images an edit composes from, checked again against the job's own channel (a
        culled or foreign one is the edit's failure, never read)."""
        sources: list[tuple[bytes, str]] = []
        for reference in job.references or (job.based_on or "",):
            if ATTACHMENT_REFERENCE.fullmatch(reference):
                kept = self._received_image(job.agent_id, reference, (job.scope,))
                if kept is None:
                    raise ImageRenderError(f"the image {reference!r} is gone")
                sources.append((await asyncio.to_thread(self.received.read, kept), kept.media_type))
                continue
            stored = self.library.get(reference, (job.scope,))
            if stored is None:
                raise ImageRenderError(f"the image {reference!r} is gone")
            sources.append((await asyncio.to_thread(self.library.read, stored), stored.mime))
        return sources

    def started(self, outcome: ToolOutcome) -> str | None:
        """The reference of a render `outcome` asked for. Decided from the outcome alone,
        which DBOS recorded: a recovered activation must enqueue exactly what its first run
        did, whatever became of the job since (a render already delivered removed its job;
        enqueueing it again attaches to the finished workflow)."""
        output = outcome.output if outcome.ok else None
        if not output or output.get("status") != "rendering":
            return None
        reference = output.get("reference")
        return reference if isinstance(reference, str) and IMAGE_REFERENCE.fullmatch(reference) else None

    # the background render --------------------------------------------------------------------
    async def render(self, reference: str) -> ImageNews | None:
        """The render step (module docstring); None when no such job waits."""
        job = self.library.job(reference)
        if job is None:
            return None
        done = self.library.get(reference, (job.scope,))
        if done is not None:  # rendered before a crash: not rendered (nor billed) again
            return ImageNews(job=job, outcome="ready")
        try:
            await self._admit(job.agent_id, job.thread_id)
            edited = job.kind == "edit"
            if edited:
                image = await self.provider.edit(await self._sources(job), job.prompt, job.size)
            else:
                image = await self.provider.generate(job.prompt, job.size)
            await asyncio.to_thread(
                self.library.store,
                reference,
                image.data,
                scope=job.scope,
                agent_id=job.agent_id,
                source="edited" if edited else "generated",
                created_at=self._clock.now(),
                prompt=job.prompt,
                revised_prompt=image.revised_prompt,
                based_on=job.based_on,
                model=self.config.model,
                size=job.size,
            )
        except Exception as exc:  # every failure is the agent's news, never a crash
            detail = str(exc) or type(exc).__name__
            log.warning("image %s (agent %s) failed: %s", reference, job.agent_id, detail)
            return ImageNews(job=job, outcome="failed", detail=detail[:500])
        return ImageNews(job=job, outcome="ready", usage_id=self._meter_render(job))

    def _meter_render(self, job: ImageJob) -> str | None:
        """One usage record for a finished render, on the same meter as model calls."""
        try:
            now = self._clock.now()
            record = UsageRecord(
                id=new_id(now),
                call_id=derived_id(id_time(job.reference.removeprefix("img-")), job.reference, "usage"),
                at=now,
                agent_id=job.agent_id,
                stage=IMAGE_STAGE,
                model=self.config.model,
                tier=IMAGE_STAGE,
                units=1,
                surface=job.service,
                channel=job.channel,
                thread_id=job.thread_id,
                conversation_id=job.conversation_id,
                cost_usd=image_price(self.settings.image_prices, self.config.model, job.size),
                trigger=job.trigger,
            )
            self._meter.emit(record)
        except Exception:  # metering is fail-soft (SPEC §7)
            log.warning("could not meter image %s", job.reference, exc_info=True)
            return None
        return record.id

    async def deliver(self, news: ImageNews) -> None:
        """The delivery step: the news in the conversation that asked, through the outbox."""
        job = news.job
        if news.outcome == "ready":
            text = f"(The image you asked for is ready: {job.reference} — {_quoted(job.prompt)}.)"
        else:
            text = f"(The image you asked for, {job.reference}, could not be made: {news.detail})"
        now = self._clock.now()
        participants = [job.person_id] if job.person_id else []
        conversation = await self._store.open_conversation(
            job.agent_id,
            job.service,
            job.channel,
            participants,
            now,
            self.settings.conversation.idle_timeout_minutes * 60,
        )
        at = id_time(job.reference.removeprefix("img-"))
        message = Message(
            id=derived_id(at, job.reference, "message"),
            agent_id=job.agent_id,
            conversation_id=conversation.id,
            role=Role.AGENT,
            person_id=None,
            speaker_name=self._agents[job.agent_id].name if job.agent_id in self._agents else job.agent_id,
            text=text,
            created_at=now,
            event_id=None,
        )
        await self._store.add_message(message)
        if self._outbox is not None and job.service != AUTONOMOUS_SERVICE:  # nobody reads `self`
            outbound = Outbound(
                event_id=job.thread_id,
                agent_id=job.agent_id,
                service=job.service,
                channel=job.channel,
                conversation_id=conversation.id,
                message_id=message.id,
                text=text,
            )
            await self._outbox.send(outbound, derived_id(at, job.reference, "outbox"), now)
        self.library.end_job(job.reference)

    def attachments(self, row: OutboxRow) -> tuple[ImageAttachment, ...]:
        """The images `row`'s text names that its channel may see (the outbox attaches them)."""
        eligible = eligible_channels(
            channel_key(row.service, row.channel), self.settings.memory.channel_groups
        )
        found: list[ImageAttachment] = []
        for reference in dict.fromkeys(IMAGE_REFERENCE.findall(row.text)):
            stored = self.library.get(reference, eligible)
            if stored is not None:
                found.append(
                    ImageAttachment(
                        reference=reference, path=str(self.library.path(stored)), mime=stored.mime
                    )
                )
        return tuple(found)


def _quoted(prompt: str, limit: int = 120) -> str:
    short = " ".join(prompt.split())
    return f'"{short if len(short) <= limit else short[: limit - 1] + "…"}"'
