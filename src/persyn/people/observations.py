"""Observations about people and the dossier built from them (SPEC §4.4).

After a stretch of conversation (every `[graph] extract_every_messages` new messages, and
when it closes; a watermark means each message is read once), `Observer.observe` asks a model (task `extract`, structured
output) for specific facts about the people who spoke. Each new fact is judged (task
`classify`) against what is already known about that person:

- **new** / **supplements**: stored beside the existing ones;
- **duplicate**: nothing changes;
- **supersedes**: the old observation is deleted and the new one stored (the fact moved on:
  a new job, a new city);
- **contradicts**: the old observation's value is corrected to the new one (it was wrong).

Every change lands in the store's audit trail with the model's reason. A judgement that
fails degrades to *supplements*: nothing already known is lost on a bad model day.

`Dossiers` synthesises a briefing (task `dossier`) from all observations of a person,
cached under a flag keyed by a hash of those observations, so it is rewritten only when
they change.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from persyn.core.config import Task
from persyn.core.errors import ModelError
from persyn.core.ids import derived_id
from persyn.gateway.base import Completion, Prompt, UserTurn
from persyn.store.base import Conversation, Message, Observation, Role
from persyn.store.capabilities import MemoryStore
from persyn.store.unread import WatermarkReader

__all__ = ["DOSSIER_FLAG", "OBSERVE_READER", "Dossiers", "Extraction", "Judgement", "Noticed", "Observer"]

log = logging.getLogger(__name__)

DOSSIER_FLAG = "dossier:"
OBSERVE_READER = "observe"  # its watermarks (store/unread.py)


class _Gateway(Protocol):
    async def complete(
        self, task: Task, prompt: Prompt, *, output: type[BaseModel] | None = None
    ) -> Completion: ...


class Noticed(BaseModel):
    person: str = Field(description="the person's name exactly as the transcript shows it")
    kind: str = Field(description="a short type label: occupation, location, preference, relationship, ...")
    value: str = Field(description="the fact, in one plain sentence")


class Extraction(BaseModel):
    observations: list[Noticed] = Field(default_factory=list[Noticed])


class Judgement(BaseModel):
    relation: Literal["new", "duplicate", "supersedes", "contradicts", "supplements"]
    target: int | None = Field(
        default=None, description="the number of the existing observation it relates to"
    )
    reason: str = Field(description="why, in one sentence")


_EXTRACT = """\
You read a conversation that {agent} took part in and list specific, durable facts about the
other people in it (not about {agent}): what they do, where they live, what they like, who
they know, what they plan. Only what they said or clearly implied; no guesses, no small talk.
Return an empty list when there is nothing worth keeping."""

_JUDGE = """\
You compare a new observation about a person with what is already known about them.
Answer "duplicate" if it says nothing new; "supersedes" if it replaces an existing one that
was true but no longer is; "contradicts" if it shows an existing one was wrong; "supplements"
if it adds to an existing one; "new" if it relates to none. Give the number of the existing
observation it relates to (not for "new")."""


class Observer:
    """Extracts and reconciles observations for one agent's conversations."""

    def __init__(self, store: MemoryStore, gateway: _Gateway, agent_name: str) -> None:
        self.store = store
        self.gateway = gateway
        self.agent_name = agent_name
        self._reader = WatermarkReader(store, OBSERVE_READER)

    async def pending(self, agent_id: str, conversation: Conversation) -> int:
        """Messages of the conversation not yet read for observations."""
        return len((await self._reader.unread(agent_id, conversation)).fresh)

    async def observe(self, agent_id: str, conversation: Conversation) -> list[str]:
        """Observations from what was said since the last reading of this conversation (a
        watermark, moved once they are reconciled; a few earlier messages are shown as
        context). Returns what was done ("added occupation", ...), for logs and tests."""
        unread = await self._reader.unread(agent_id, conversation)
        fresh, context = unread.fresh, unread.context
        names = {m.speaker_name.lower(): m.person_id for m in fresh if m.role is Role.USER and m.person_id}
        if not names:
            if fresh:
                await self._reader.advance(agent_id, conversation.id, fresh[-1])
            return []
        transcript = self._lines(fresh)
        if context:
            transcript = f"(Earlier, already read:)\n{self._lines(context)}\n(New:)\n{transcript}"
        prompt = Prompt(
            system=_EXTRACT.format(agent=self.agent_name),
            items=(UserTurn(text=f"The conversation:\n{transcript}"),),
        )
        try:
            completion = await self.gateway.complete(Task.EXTRACT, prompt, output=Extraction)
        except ModelError as exc:
            log.warning("observation extraction for %s failed: %s", conversation.id, exc)
            return []
        extraction = completion.output
        if not isinstance(extraction, Extraction):  # pragma: no cover - the gateway validates
            return []
        done: list[str] = []
        for noticed in extraction.observations:
            subject = names.get(noticed.person.strip().lower())
            if subject is None or not noticed.value.strip():
                continue  # someone who did not speak here, or nothing said
            done.extend(await self._reconcile(agent_id, subject, noticed, conversation))
        await self._reader.advance(agent_id, conversation.id, fresh[-1])
        return done

    def _lines(self, messages: Sequence[Message]) -> str:
        return "\n".join(
            f"{self.agent_name if m.role is Role.AGENT else m.speaker_name}: {m.text}" for m in messages
        )

    async def _reconcile(
        self, agent_id: str, subject: str, noticed: Noticed, conversation: Conversation
    ) -> list[str]:
        at = conversation.last_activity_at
        observation = Observation(
            # Derived: observing the same conversation again stores nothing twice.
            id=derived_id(at, conversation.id, subject, noticed.kind, noticed.value),
            agent_id=agent_id,
            subject_id=subject,
            kind=noticed.kind.strip()[:100] or "fact",
            value=noticed.value.strip(),
            observed_at=at,
            conversation_id=conversation.id,
        )
        existing = await self.store.observations(agent_id, subject)
        if any(o.id == observation.id for o in existing):
            return []
        if not existing:
            await self.store.add_observation(observation, "added", "first observation of this kind")
            return [f"added {observation.kind}"]
        judgement = await self._judge(existing, observation)
        target = _target(existing, judgement.target)
        if judgement.relation == "duplicate":
            return []
        if judgement.relation == "supersedes" and target is not None:
            await self.store.revise_observation(agent_id, target.id, None, "superseded", judgement.reason, at)
            await self.store.add_observation(observation, "added", f"supersedes: {judgement.reason}")
            return [f"superseded {target.kind}"]
        if judgement.relation == "contradicts" and target is not None:
            await self.store.revise_observation(
                agent_id, target.id, observation.value, "contradicted", judgement.reason, at
            )
            return [f"contradicted {target.kind}"]
        action = "supplemented" if judgement.relation == "supplements" else "added"
        await self.store.add_observation(observation, action, judgement.reason)
        return [f"{action} {observation.kind}"]

    async def _judge(self, existing: Sequence[Observation], new: Observation) -> Judgement:
        listed = "\n".join(f"{n}. [{o.kind}] {o.value}" for n, o in enumerate(existing, start=1))
        prompt = Prompt(
            system=_JUDGE,
            items=(UserTurn(text=f"Known:\n{listed}\n\nNew: [{new.kind}] {new.value}"),),
        )
        try:
            completion = await self.gateway.complete(Task.CLASSIFY, prompt, output=Judgement)
        except ModelError as exc:
            return Judgement(relation="supplements", reason=f"could not judge ({exc}); kept both")
        judgement = completion.output
        if not isinstance(judgement, Judgement):  # pragma: no cover - the gateway validates
            return Judgement(relation="supplements", reason="no judgement; kept both")
        return judgement


def _target(existing: Sequence[Observation], number: int | None) -> Observation | None:
    if number is None or not 1 <= number <= len(existing):
        return None
    return existing[number - 1]


_DOSSIER = """\
Write {agent}'s private briefing about {name}: a short paragraph, in the first person, that
sums up what {agent} knows about them from the observations below, the most useful first.
Say nothing the observations do not support."""


class Dossiers:
    """Briefings about people, rewritten only when their observations change."""

    def __init__(self, store: MemoryStore, gateway: _Gateway, agent_name: str) -> None:
        self.store = store
        self.gateway = gateway
        self.agent_name = agent_name

    async def cached(self, agent_id: str, person_id: str) -> str | None:
        """The stored briefing if it is still current, without calling a model."""
        observations = await self.store.observations(agent_id, person_id)
        return await self._cached(agent_id, person_id, _version(observations)) if observations else None

    async def _cached(self, agent_id: str, person_id: str, version: str) -> str | None:
        raw = await self.store.get_flag(agent_id, DOSSIER_FLAG + person_id)
        if not raw:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        return str(data["text"]) if isinstance(data, dict) and data.get("version") == version else None

    async def dossier(self, agent_id: str, person_id: str, name: str, now: datetime) -> str | None:
        """The briefing (None when nothing is known); a model call only when it is stale."""
        observations = await self.store.observations(agent_id, person_id)
        if not observations:
            return None
        version = _version(observations)
        cached = await self._cached(agent_id, person_id, version)
        if cached is not None:
            return cached
        listed = "\n".join(f"- [{o.kind}] {o.value} ({o.observed_at:%Y-%m-%d})" for o in observations)
        prompt = Prompt(
            system=_DOSSIER.format(agent=self.agent_name, name=name), items=(UserTurn(text=listed),)
        )
        completion = await self.gateway.complete(Task.DOSSIER, prompt)
        text = completion.text.strip()
        if text:
            value = json.dumps({"version": version, "text": text, "at": now.isoformat()})
            await self.store.set_flag(agent_id, DOSSIER_FLAG + person_id, value)
        return text or None


def _version(observations: Sequence[Observation]) -> str:
    material = "\n".join(f"{o.id}:{o.kind}:{o.value}" for o in observations)
    return hashlib.sha256(material.encode()).hexdigest()[:16]
