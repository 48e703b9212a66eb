"""What a finished week left behind, read once for the checkers: the store (dialog, memory,
people, consolidations, activity), the trace spans, the usage ledger and the runner's own
log (`run.json`). A checker reads this, never the scenario's expectations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from persyn.core.config import load_settings
from persyn.core.records import MemoryRecord
from persyn.evals.runner import Happening, RunLog, run_log_path
from persyn.evals.scenario import Criteria
from persyn.store import open_store
from persyn.store.ports.activity import ActivityEntry, ActivityPort
from persyn.store.ports.dialog import Conversation, DialogHistoryPort, Message, Role
from persyn.store.ports.directory import DirectoryPort, Person
from persyn.store.ports.jobs import Consolidation, JobsPort
from persyn.store.ports.memory import MemoryPort
from persyn.store.ports.schedule import SchedulePort
from persyn.tracing.base import ATTR, SpanRecord
from persyn.tracing.local import read_spans
from persyn.usage.ledger import read_records
from persyn.usage.records import UsageRecord

__all__ = ["Surfaced", "Turn", "WeekEvidence", "load_evidence"]

# "[strong] (Tue 8 Dec 2026, 4 days ago; felt moved; ref 01M9...) I met Alice ..." in a prompt.
_SURFACED = re.compile(
    r"^\[(?P<band>strong|moderate|weak)\] \([^)]*\bref (?P<id>[0-9A-Z]{26})\) (?P<text>.*)$", re.M
)


# A daemon's moved clock starts when its process is up, so it runs a few seconds behind the
# runner's: a step's line is the one with its words on its channel within the hour.
_SAME_STEP = timedelta(hours=1)


@dataclass(frozen=True)
class Surfaced:
    band: str
    record_id: str
    text: str


@dataclass(frozen=True)
class Turn:
    """One inbound message, the agent's reply to it and the spans of its activation."""

    message: Message
    reply: Message | None
    conversation: Conversation
    spans: tuple[SpanRecord, ...]

    def model_spans(self, stage: str) -> list[SpanRecord]:
        return [s for s in self.spans if s.attributes.get(ATTR.STAGE) == stage]

    def tool_spans(self) -> list[SpanRecord]:
        return [s for s in self.spans if s.attributes.get(ATTR.KIND) == "tool"]

    def surfaced(self) -> list[Surfaced]:
        """The memories the respond call was shown (its prompt, recorded with full content)."""
        found: dict[str, Surfaced] = {}
        for span in self.model_spans("respond"):
            prompt = str(span.attributes.get(ATTR.INPUT, ""))
            for match in _SURFACED.finditer(prompt):
                found.setdefault(match["id"], Surfaced(match["band"], match["id"], match["text"]))
        return list(found.values())


@dataclass(frozen=True)
class WeekEvidence:
    log: RunLog
    criteria: Criteria
    agent_id: str
    conversations: tuple[Conversation, ...]
    messages: tuple[Message, ...]  # oldest first
    records: tuple[MemoryRecord, ...]
    people: tuple[Person, ...]
    consolidations: tuple[Consolidation, ...]
    activity: tuple[ActivityEntry, ...]  # oldest first
    spans: tuple[SpanRecord, ...]
    usage: tuple[UsageRecord, ...]
    tracing_full: bool
    # The agent's heartbeat in the schedule when the week ended ("next beat at ..."), or
    # None: it was deleted (or the store keeps no schedule).
    heartbeat: str | None = None

    def person(self, name: str) -> Person | None:
        return next((p for p in self.people if p.display_name.casefold() == name.casefold()), None)

    def conversation(self, conversation_id: str) -> Conversation | None:
        return next((c for c in self.conversations if c.id == conversation_id), None)

    def trace(self, event_id: str | None) -> tuple[SpanRecord, ...]:
        if event_id is None:
            return ()
        roots = {
            s.trace_id for s in self.spans if s.attributes.get(ATTR.EVENT) == event_id and s.parent_id is None
        }
        return tuple(s for s in self.spans if s.trace_id in roots)

    def turn_of(self, happening: Happening | None) -> Turn | None:
        """The stored turn of a `say` step: its inbound line (same words, where it was said,
        within the hour of the step's time), the agent's next line there, its trace."""
        if happening is None or happening.text is None:
            return None
        for message in self.messages:
            conversation = self.conversation(message.conversation_id)
            if (
                message.role == Role.USER
                and message.text == happening.text
                and conversation is not None
                and _said_where(happening, conversation)
                and abs(message.created_at - happening.at) < _SAME_STEP
            ):
                reply = next(
                    (
                        m
                        for m in self.messages
                        if m.conversation_id == message.conversation_id
                        and m.role == Role.AGENT
                        and m.created_at >= message.created_at
                    ),
                    None,
                )
                return Turn(message, reply, conversation, self.trace(message.event_id))
        return None


def _said_where(happening: Happening, conversation: Conversation) -> bool:
    """Whether `conversation` is where the step was said: its surface's own address (a web
    key's conversation), or — in a log written before addresses were kept — its channel."""
    if happening.address is not None:
        return f"{conversation.service}:{conversation.channel}" == happening.address
    return conversation.channel == happening.channel


async def load_evidence(work: Path, criteria: Criteria) -> WeekEvidence:
    """Everything the week at `work` left, read from its scratch deployment."""
    log = RunLog.load(run_log_path(work))
    settings = load_settings(Path(log.home), environ=log.environment)
    agent_id = log.agent_id
    store = open_store(settings.database_url)
    await store.setup()
    try:
        assert isinstance(store, DialogHistoryPort) and isinstance(store, MemoryPort)
        assert (
            isinstance(store, DirectoryPort)
            and isinstance(store, JobsPort)
            and isinstance(store, ActivityPort)
        )
        conversations = await store.list_conversations(agent_id, limit=10_000)
        messages: list[Message] = []
        for conversation in conversations:
            messages.extend(await store.recent_messages(agent_id, conversation.id, limit=10_000))
        records = await store.list_records(agent_id, limit=10_000)
        people = await store.list_persons(agent_id)
        consolidations: list[Consolidation] = []
        for conversation in conversations:
            state = await store.get_consolidation(agent_id, conversation.id)
            if state is not None:
                consolidations.append(state)
        activity = await store.recent_activity(agent_id, limit=10_000)
        beating = (
            await store.list_reminders(agent_id, kind="heartbeat") if isinstance(store, SchedulePort) else []
        )
    finally:
        await store.close()
    usage = [r for r in read_records(settings.usage_log_path) if r is not None and r.agent_id == agent_id]
    return WeekEvidence(
        log=log,
        criteria=criteria,
        agent_id=agent_id,
        conversations=tuple(sorted(conversations, key=lambda c: (c.started_at, c.id))),
        messages=tuple(sorted(messages, key=lambda m: (m.created_at, m.id))),
        records=tuple(records),
        people=tuple(people),
        consolidations=tuple(consolidations),
        activity=tuple(sorted(activity, key=lambda a: (a.at, a.id))),
        spans=tuple(read_spans(settings.traces_dir)),
        usage=tuple(sorted(usage, key=lambda r: (r.at, r.id))),
        tracing_full=settings.tracing.enabled and settings.tracing.content == "full",
        heartbeat=next(
            (f"heartbeat {r.id}, next beat at {r.next_fire_at:%a %d %b %H:%M}" for r in beating), None
        ),
    )


def between(at: datetime, after: datetime, before: datetime) -> bool:
    return after < at < before
