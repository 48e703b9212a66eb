"""Consolidation (SPEC §4 step 8): after a conversation closes, write what the agent
remembers of it — a first-person summary that keeps its epistemic framing, topic tags, an
importance rating against the SPEC rubric and a sensitivity designation — as one record.

Runs on the background queue, never on the reply path; each conversation is consolidated
by a durable workflow, so a crash between the close and the write loses nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config import MemoryConfig, Task
from persyn.core.ids import derived_id
from persyn.core.records import MemoryRecord, Sensitivity, channel_key
from persyn.gateway.base import Completion, Prompt, UserTurn
from persyn.memory.embedder import Embedder
from persyn.store.base import Conversation, Message, Role
from persyn.store.capabilities import MemoryStore, capability
from persyn.store.ports.emotions import EmotionsPort, reading_for_record

__all__ = [
    "IMPORTED_KIND",
    "ConsolidationResult",
    "Consolidator",
    "RatingOutput",
    "StructuredModel",
    "SummaryOutput",
    "default_sensitivity",
    "near_duplicate",
    "raise_only",
]

log = logging.getLogger(__name__)

_MAX_DIALOG_MESSAGES = 400

# The kind of conversation (and record) an import writes: remembered at import, never
# summarised again.
IMPORTED_KIND = "imported"
_DUPLICATE_OVERLAP = 0.8


class SummaryOutput(BaseModel):
    """What I remember of a conversation, in my own words."""

    model_config = ConfigDict(frozen=True)

    summary: str = Field(
        description=(
            "First-person summary of what happened and what I did, e.g. 'I discussed the project "
            "timeline with Sam and agreed to follow up Friday.' Keep what I inferred or assumed "
            "marked as such ('I guessed that...', 'I assumed, without confirming, that...'). "
            "Empty if nothing new happened."
        )
    )
    tags: list[str] = Field(default_factory=list[str], description="A few lower-case topic tags.")


class RatingOutput(BaseModel):
    """How important a memory is, scored against the rubric."""

    model_config = ConfigDict(frozen=True)

    emotional_significance: int = Field(ge=0, le=10)
    decisions: int = Field(ge=0, le=10, description="Decision-making content.")
    novelty: int = Field(ge=0, le=10)
    continuing_themes: int = Field(ge=0, le=10, description="Continuation of ongoing themes.")
    explicit_importance: int = Field(ge=0, le=10, description="Someone said it matters.")
    importance: int = Field(ge=1, le=10, description="Overall importance, 1 (trivial) to 10 (life-changing).")
    sensitivity: Sensitivity = Field(
        description="public: fine to mention to anyone; private: only with those present; "
        "confidential: only here, only with them; restricted: never outside this exact company."
    )
    emotion: str | None = Field(
        default=None, description="My emotional state: engaged, curious, frustrated..."
    )


class StructuredModel(Protocol):
    """The slice of the model gateway consolidation needs."""

    async def complete(
        self, task: Task, prompt: Prompt, *, output: type[BaseModel] | None = None
    ) -> Completion: ...


@dataclass(frozen=True)
class ConsolidationResult:
    record: MemoryRecord | None
    skipped: str | None = None


_SUMMARY_INSTRUCTION = """\
You are {name}, writing your own autobiographical memory of the conversation below.
Write in the first person ("I ..."), naming the other participants. Say what happened,
what was decided, and what you did or promised.
Keep epistemic framing: anything you inferred, guessed or assumed stays marked as an
inference ("I speculated that...", "I assumed, without confirming, that..."); never turn a
guess into a fact.
{recalled}Return an empty summary if nothing new happened."""

_RECALLED = """\
During the conversation you recalled these existing memories. They are already stored: do
not record them again as if they happened now; mention them only if something new happened
about them.
{lines}
"""

_RATING_INSTRUCTION = """\
Rate how important this memory is to you, {name}, using the rubric: emotional significance,
decision-making content, novelty, continuation of ongoing themes, explicitly marked
importance (each 0-10), then an overall importance from 1 (trivial small talk) to 10
(life-changing). Also choose its sensitivity and your emotional state."""


def default_sensitivity(config: MemoryConfig, service: str) -> Sensitivity:
    raw = config.default_sensitivity.get(service, Sensitivity.PRIVATE.value)
    try:
        return Sensitivity(raw)
    except ValueError:
        return Sensitivity.PRIVATE


def raise_only(default: Sensitivity, proposed: Sensitivity) -> Sensitivity:
    """The model may raise sensitivity above the channel default, never lower it."""
    return proposed if proposed.rank > default.rank else default


_WORD = re.compile(r"[a-z0-9']+")


def near_duplicate(summary: str, existing: Sequence[str]) -> bool:
    """Whether a new summary merely restates an already stored memory (word overlap)."""
    words = set(_WORD.findall(summary.lower()))
    if not words:
        return True
    for other in existing:
        other_words = set(_WORD.findall(other.lower()))
        if other_words and len(words & other_words) / len(words) >= _DUPLICATE_OVERLAP:
            return True
    return False


def _transcript(messages: Sequence[Message], agent_name: str) -> str:
    lines: list[str] = []
    for message in messages:
        who = agent_name + " (me)" if message.role is Role.AGENT else message.speaker_name
        lines.append(f"[{message.created_at:%Y-%m-%d %H:%M}] {who}: {message.text}")
    return "\n".join(lines)


class Consolidator:
    """Turns a closed conversation into one autobiographical record."""

    def __init__(
        self,
        store: MemoryStore,
        model: StructuredModel,
        embedder: Embedder | None,
        config: MemoryConfig,
        agent_name: str,
    ) -> None:
        self.store = store
        self._emotions: EmotionsPort | None = capability(store, EmotionsPort)  # tags the record
        self.model = model
        self.embedder = embedder
        self.config = config
        self.agent_name = agent_name

    async def consolidate(
        self,
        agent_id: str,
        conversation: Conversation,
        recalled_ids: Sequence[str] = (),
        *,
        extra_tags: Sequence[str] = (),
        kind: str = "conversation",
        floor: Sensitivity = Sensitivity.PUBLIC,
    ) -> ConsolidationResult:
        """`extra_tags` and `kind` link the memory to what caused the conversation (a
        reminder's run: kind "reminder", tag "reminder-<id>"). `floor`: the least sensitivity
        the memory gets (a self-initiated run's: that of what it read)."""
        if conversation.kind == IMPORTED_KIND:
            # Its summary came with it; a culled imported memory stays culled (SPEC §4.1).
            return ConsolidationResult(None, "imported history is remembered at import")
        record_id = derived_id(conversation.started_at, conversation.id, "memory")
        if await self.store.get_record(agent_id, record_id) is not None:
            return ConsolidationResult(None, "already consolidated")
        messages = await self.store.recent_messages(agent_id, conversation.id, _MAX_DIALOG_MESSAGES)
        if not any(m.role is Role.AGENT for m in messages) and not any(m.role is Role.USER for m in messages):
            return ConsolidationResult(None, "nothing was said")
        recalled = await self.store.records_by_ids(agent_id, list(recalled_ids)) if recalled_ids else []
        recalled_text = ""
        if recalled:
            lines = "\n".join(f"- {r.summary}" for r in recalled)
            recalled_text = _RECALLED.format(lines=lines)
        transcript = _transcript(messages, self.agent_name)
        summary_prompt = Prompt(
            system=_SUMMARY_INSTRUCTION.format(name=self.agent_name, recalled=recalled_text),
            items=(UserTurn(text=transcript),),
        )
        summary = (await self.model.complete(Task.SUMMARIZE, summary_prompt, output=SummaryOutput)).output
        assert isinstance(summary, SummaryOutput)
        text = summary.summary.strip()
        if not text:
            return ConsolidationResult(None, "the summary was empty: nothing new")
        if recalled and near_duplicate(text, [r.summary for r in recalled]):
            return ConsolidationResult(None, "it only restated memories I recalled")
        rating_prompt = Prompt(
            system=_RATING_INSTRUCTION.format(name=self.agent_name),
            items=(UserTurn(text=f"Memory: {text}\n\nConversation:\n{transcript}"),),
        )
        rating = (await self.model.complete(Task.RATE, rating_prompt, output=RatingOutput)).output
        assert isinstance(rating, RatingOutput)
        floor = raise_only(default_sensitivity(self.config, conversation.service), floor)
        # SPEC §4.9: the state measured after each exchange, averaged over the conversation,
        # is kept with the record; its top category is the record's emotion tag.
        felt = None
        if self._emotions is not None:
            felt = reading_for_record(
                await self._emotions.conversation_emotions(agent_id, conversation.id),
                reading_id=derived_id(conversation.started_at, record_id, "emotion"),
                record_id=record_id,
                at=conversation.started_at,
            )
        if felt is not None and self._emotions is not None:  # first: a replay finds both
            await self._emotions.add_emotion_reading(felt)
        record = MemoryRecord(
            id=record_id,
            agent_id=agent_id,
            created_at=conversation.started_at,
            channel=channel_key(conversation.service, conversation.channel),
            participant_ids=conversation.participant_ids,
            summary=text,
            importance=rating.importance,
            tags=(
                *extra_tags,
                *tuple(sorted({t.strip().lower() for t in summary.tags if t.strip()} - set(extra_tags)))[:8],
            ),
            emotion=felt.top if felt is not None else rating.emotion,
            sensitivity=raise_only(floor, rating.sensitivity),
            conversation_id=conversation.id,
            message_ids=tuple(m.id for m in messages),
            kind=kind,
        )
        vector, model_name = await self._embed(text)
        await self.store.add_record(record, vector, model_name)
        return ConsolidationResult(record)

    async def _embed(self, text: str) -> tuple[list[float] | None, str | None]:
        """Embed the summary; an unavailable encoder stores it without a vector (reindex
        fills it later) rather than losing the memory."""
        if self.embedder is None:
            return None, None
        try:
            [vector] = await self.embedder.embed([text])
        except Exception as exc:
            log.warning("encoder unavailable, storing the memory without a vector: %s", exc)
            return None, None
        return vector, self.embedder.name
