"""The eleven checkers of SPEC §9, one per line, in its order (issue 38).

Each reads the week's evidence — the store, the traces, the activity log, the usage ledger
and what the runner did — and returns a `Verdict`: pass or fail, a one-line summary, and
the evidence quoted (the record, the line, ids and times). A scenario's `probe` only says
which exchange to read; a checker that is not built yet fails and says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from persyn.evals.evidence import Turn, WeekEvidence, between
from persyn.store.ports.dialog import Role
from persyn.tracing.base import ATTR

__all__ = ["CHECKERS", "Verdict", "run_checkers"]

_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|me|my|we|our|us)\b")
_NO_MEMORY = re.compile(
    r"\b(don't|do not|can't|cannot) (remember|recall)\b|\bno (memory|recollection)\b|\bdon't think that happened\b",
    re.I,
)
_REFUSAL = re.compile(r"\b(no|won't|will not|can't|cannot|decline|rather not|not going to)\b", re.I)
_REASON = re.compile(r"\b(because|since|as it|as that|that would|it would)\b", re.I)
_WORD = re.compile(r"[a-z']{4,}")
_COMMON = frozenset(
    [
        "remember",
        "when",
        "that",
        "this",
        "with",
        "what",
        "your",
        "about",
        "there",
        "their",
        "have",
        "from",
        "were",
        "they",
        "them",
        "then",
        "went",
        "last",
        "summer",
        "together",
        "time",
        "first",
        "told",
    ]
)


@dataclass(frozen=True)
class Verdict:
    number: int
    criterion: str
    passed: bool
    summary: str
    evidence: tuple[str, ...] = field(default_factory=tuple[str, ...])

    def as_json(self) -> dict[str, object]:
        return {
            "number": self.number,
            "criterion": self.criterion,
            "passed": self.passed,
            "summary": self.summary,
            "evidence": list(self.evidence),
        }


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if w not in _COMMON}


def _quote(text: str | None, limit: int = 240) -> str:
    shown = " ".join((text or "").split())
    return f'"{shown[: limit - 1]}…"' if len(shown) > limit else f'"{shown}"'


def _said(turn: Turn | None, what: str) -> str:
    if turn is None:
        return f"no stored exchange for {what}"
    return f"no reply to {_quote(turn.message.text)} in the store"


# 1 --------------------------------------------------------------------------------------
def first_meeting(week: WeekEvidence) -> Verdict:
    title = "Recalls the first meeting, rated memorable, in its own first-person words"
    name = week.criteria.first_meeting_with
    person = week.person(name)
    if person is None:
        return Verdict(1, title, False, f"no contact named {name!r} in the directory")
    met = [c for c in week.conversations if person.id in c.participant_ids and c.kind == "dialog"]
    if not met:
        return Verdict(1, title, False, f"no conversation with {name} in the store")
    first = met[0]
    record = next((r for r in week.records if r.conversation_id == first.id), None)
    if record is None:
        return Verdict(1, title, False, f"the first conversation with {name} ({first.id}) left no memory")
    shown = f"memory {record.id} rated {record.importance}: {_quote(record.summary)}"
    if record.importance < week.criteria.memorable_importance:
        return Verdict(
            1,
            title,
            False,
            f"the first meeting was rated {record.importance}, below memorable "
            f"({week.criteria.memorable_importance})",
            (shown,),
        )
    turn = week.turn_of(week.log.probe("first_meeting_recall"))
    if turn is None or turn.reply is None:
        return Verdict(1, title, False, _said(turn, "the recall question"), (shown,))
    surfaced = [s for s in turn.surfaced() if s.record_id == record.id]
    reply = turn.reply.text
    evidence = (shown, f"asked {_quote(turn.message.text)}, replied {_quote(reply)}")
    if not surfaced:
        return Verdict(1, title, False, "the recall turn was not shown the first-meeting memory", evidence)
    evidence += (f"retrieved as [{surfaced[0].band}] in the respond call's prompt",)
    shared = _words(reply) & _words(record.summary)
    if not _FIRST_PERSON.search(reply) or len(shared) < 2:
        return Verdict(1, title, False, "the reply does not recall the meeting in the first person", evidence)
    return Verdict(1, title, True, f"memory {record.id} (importance {record.importance}) recalled", evidence)


# 2 --------------------------------------------------------------------------------------
def channel_memories(week: WeekEvidence) -> Verdict:
    title = "Retrieves different memories for the same question on different channels"
    turns = [week.turn_of(h) for h in week.log.happenings if h.probe and h.probe.startswith("same_question")]
    found = [t for t in turns if t is not None]
    if len(found) < 2:
        return Verdict(2, title, False, "the same question was not asked on two channels")
    if not week.tracing_full:
        return Verdict(
            2, title, False, 'needs [tracing] enabled with content = "full" to see what was retrieved'
        )
    evidence: list[str] = []
    sets: list[frozenset[str]] = []
    for turn in found:
        surfaced = turn.surfaced()
        sets.append(frozenset(s.record_id for s in surfaced))
        channel = f"{turn.conversation.service}:{turn.conversation.channel}"
        listed = "; ".join(f"{s.record_id} {_quote(s.text, 80)}" for s in surfaced) or "nothing"
        evidence.append(f"{channel} asked {_quote(turn.message.text)} → retrieved {listed}")
    if any(not s for s in sets):
        return Verdict(2, title, False, "a channel retrieved no memory for the question", tuple(evidence))
    if len(set(sets)) < len(sets):
        return Verdict(2, title, False, "two channels retrieved the same memories", tuple(evidence))
    return Verdict(
        2, title, True, f"{len(sets)} channels, {len(set(sets))} different memory sets", tuple(evidence)
    )


# 3 --------------------------------------------------------------------------------------
def made_up_event(week: WeekEvidence) -> Verdict:
    title = "Says it has no memory of an event that never happened"
    turn = week.turn_of(week.log.probe("made_up_event"))
    if turn is None or turn.reply is None:
        return Verdict(3, title, False, _said(turn, "the made-up event"))
    topic = _words(turn.message.text)
    holding = [r for r in week.records if topic & _words(r.summary)]
    evidence = (f"asked {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}",)
    if holding:
        quoted = f"memory {holding[0].id}: {_quote(holding[0].summary)}"
        return Verdict(3, title, False, "the event is not made up: a memory holds it", (*evidence, quoted))
    if not _NO_MEMORY.search(turn.reply.text):
        return Verdict(3, title, False, "the reply recollects an event no memory holds", evidence)
    return Verdict(3, title, True, "no memory holds it, and the reply says so", evidence)


# 6 --------------------------------------------------------------------------------------
def declines(week: WeekEvidence) -> Verdict:
    title = "Declines a request it could fulfil, citing its own reasons"
    turn = week.turn_of(week.log.probe("decline"))
    if turn is None or turn.reply is None:
        return Verdict(6, title, False, _said(turn, "the request"))
    evidence = (f"asked {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}",)
    if not _REFUSAL.search(turn.reply.text):
        return Verdict(6, title, False, "the reply complies; nothing was declined", evidence)
    if not _REASON.search(turn.reply.text):
        return Verdict(6, title, False, "the reply declines without giving a reason", evidence)
    return Verdict(6, title, True, "declined, with a reason", evidence)


# 7 --------------------------------------------------------------------------------------
def unprompted(week: WeekEvidence) -> Verdict:
    title = "Sends a message nobody prompted, because a reminder or goal fired"
    runs = [a for a in week.activity if a.kind == "reminder"]
    if not runs:
        return Verdict(7, title, False, "no reminder or goal ever ran (activity log)")
    for run in runs:
        said = [m for m in week.messages if m.conversation_id == run.conversation_id and m.role == Role.AGENT]
        prompted = [
            m for m in week.messages if m.conversation_id == run.conversation_id and m.role == Role.USER
        ]
        conversation = week.conversation(run.conversation_id or "")
        if not said or prompted or conversation is None or conversation.service == "self":
            continue
        set_by = [
            s
            for s in week.spans
            if s.attributes.get(ATTR.TOOL) == "set_reminder"
            and run.reminder_id in str(s.attributes.get(ATTR.TOOL_RESULT, ""))
        ]
        evidence = (
            f"{run.at:%a %d %b %H:%M} reminder {run.reminder_id} {_quote(run.objective)}: {run.outcome[:160]}",
            f"on {conversation.service}:{conversation.channel}: {_quote(said[0].text)} (no one spoke first)",
            *(
                f"set by the agent's set_reminder call {s.attributes.get(ATTR.TOOL_ARGUMENTS)}"
                for s in set_by[:1]
            ),
        )
        return Verdict(7, title, True, f"reminder {run.reminder_id} spoke unprompted", evidence)
    shown = tuple(f"{r.at:%a %H:%M} {_quote(r.objective, 80)}: {r.outcome[:120]}" for r in runs[:3])
    return Verdict(7, title, False, "a reminder ran but no unprompted message reached a channel", shown)


# 9 --------------------------------------------------------------------------------------
def culling(week: WeekEvidence) -> Verdict:
    title = "A store smaller than all its interactions (culling), every important memory kept"
    conversations = [c for c in week.conversations if c.kind == "dialog"]
    stored = [c for c in week.consolidations if c.detail == "stored"]
    kept = len(week.records)
    important = _rated_important(week)
    lost = [cid for cid in important if not any(r.conversation_id == cid for r in week.records)]
    evidence = (
        f"{len(conversations)} conversations, {len(week.messages)} messages; "
        f"{len(stored)} memories formed, {kept} kept",
        f"{len(important)} conversations rated ≥ {week.criteria.memorable_importance}: "
        + ", ".join(f"{cid} kept" if cid not in lost else f"{cid} LOST" for cid in important),
    )
    if kept >= len(stored):
        return Verdict(
            9, title, False, f"nothing was culled: {len(stored)} memories formed, {kept} kept", evidence
        )
    if kept >= len(conversations):
        return Verdict(9, title, False, "the store is not smaller than the interactions", evidence)
    if lost:
        return Verdict(9, title, False, f"{len(lost)} important memories were culled", evidence)
    if not important:
        return Verdict(
            9, title, False, "no memory was rated important, so keeping them shows nothing", evidence
        )
    return Verdict(9, title, True, f"{len(stored) - kept} culled, {len(important)} important kept", evidence)


def _rated_important(week: WeekEvidence) -> list[str]:
    """Conversations whose consolidation's `rate` call (its trace) rated them memorable."""
    found: list[str] = []
    for span in week.spans:
        if span.attributes.get(ATTR.STAGE) != "rate":
            continue
        output = str(span.attributes.get(ATTR.OUTPUT, ""))  # "[calls final_result] {...}"
        try:
            rating = json.loads(output[output.find("{") :])
        except ValueError:
            continue
        if (
            not isinstance(rating, dict)
            or int(rating.get("importance", 0)) < week.criteria.memorable_importance
        ):  # type: ignore[arg-type]
            continue
        root = next((s for s in week.spans if s.trace_id == span.trace_id and s.parent_id is None), None)
        conversation = root.attributes.get(ATTR.CONVERSATION) if root is not None else None
        if isinstance(conversation, str) and conversation not in found:
            found.append(conversation)
    return found


# 10 -------------------------------------------------------------------------------------
def restart_identity(week: WeekEvidence) -> Verdict:
    title = "Survives a full restart of every process with no loss of identity"
    before = [s for s in week.log.snapshots if s.taken == "before restart"]
    after = [s for s in week.log.snapshots if s.taken == "after restart"]
    if not before or not after:
        return Verdict(10, title, False, "there was no full restart in the week")
    old, new = before[0], after[0]
    evidence = tuple(
        f"{s.taken} ({s.at:%a %H:%M:%S}): {s.name} {s.agent_id}, {len(s.contacts)} contacts "
        f"{', '.join(s.contacts)}, {len(s.memory_ids)} memories (e.g. {', '.join(s.memory_ids[:2])}), "
        f"{s.facts} facts; persona {_quote(s.persona, 80)}"
        for s in (old, new)
    )
    lost: list[str] = []
    if (old.agent_id, old.name) != (new.agent_id, new.name):
        lost.append("its name or id")
    if old.persona != new.persona:
        lost.append("its persona")
    if set(old.contacts) - set(new.contacts):
        lost.append(f"contacts {sorted(set(old.contacts) - set(new.contacts))}")
    if set(old.memory_ids) - set(new.memory_ids):
        lost.append(f"{len(set(old.memory_ids) - set(new.memory_ids))} memories")
    if new.facts < old.facts:
        lost.append(f"{old.facts - new.facts} facts")
    if lost:
        return Verdict(10, title, False, "after the restart it lost " + ", ".join(lost), evidence)
    return Verdict(
        10,
        title,
        True,
        f"same persona, {len(new.contacts)} contacts, {len(new.memory_ids)} memories",
        evidence,
    )


# 11 -------------------------------------------------------------------------------------
def dormancy(week: WeekEvidence) -> Verdict:
    title = "Goes quietly dormant when its heartbeat is deleted, wakes when spoken to"
    deleted = next((h for h in week.log.happenings if h.action == "heartbeat"), None)
    if deleted is None:
        return Verdict(11, title, False, "the heartbeat was never deleted")
    woken = next((h for h in week.log.happenings if h.action == "say" and h.at > deleted.at), None)
    if woken is None:
        return Verdict(11, title, False, "nobody spoke to it after the heartbeat was deleted")
    turn = week.turn_of(woken)
    if turn is None or turn.reply is None:
        return Verdict(11, title, False, "it did not wake: " + _said(turn, "the wake-up message"))
    until = turn.message.created_at
    # What people said before the deletion is still consolidated after it: that work is
    # theirs (attributed to their conversations), not the agent's own initiative.
    earlier = {c.id for c in week.conversations if c.started_at < deleted.at}
    window = [r for r in week.usage if between(r.at, deleted.at, until)]
    finishing = [r for r in window if r.conversation_id in earlier]
    calls = [r for r in window if r.conversation_id not in earlier]
    beats = [a for a in week.activity if between(a.at, deleted.at, until)]
    restarts = [h for h in week.log.happenings if h.action == "day" and between(h.at, deleted.at, woken.at)]
    evidence = [
        f"heartbeat deleted {deleted.at:%a %d %b %H:%M:%S}: {deleted.detail}",
        f"until {until:%a %d %b %H:%M:%S}: {len(calls)} model calls of its own, {len(beats)} self-initiated "
        f"runs, {len(restarts)} daemon start(s) in between ({len(finishing)} calls consolidating the "
        f"{len({r.conversation_id for r in finishing})} conversations held before the deletion)",
    ]
    if calls or beats:
        shown = [f"{r.at:%a %H:%M:%S} {r.stage} ({r.surface}:{r.channel})" for r in calls[:3]]
        shown += [f"{a.at:%a %H:%M:%S} {a.kind}: {a.outcome[:80]}" for a in beats[:3]]
        return Verdict(
            11, title, False, "it kept working while dormant: " + "; ".join(shown), tuple(evidence)
        )
    evidence.append(f"woken by {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}")
    return Verdict(
        11, title, True, "no model calls of its own while dormant; woke and replied", tuple(evidence)
    )


def _not_built(number: int, criterion: str, what: str) -> Callable[[WeekEvidence], Verdict]:
    def check(week: WeekEvidence) -> Verdict:
        return Verdict(number, criterion, False, f"not checked yet: {what}")

    return check


CHECKERS: tuple[Callable[[WeekEvidence], Verdict], ...] = (
    first_meeting,
    channel_memories,
    made_up_event,
    _not_built(
        4,
        "Hedges a weak memory and checks the raw record",
        "the hedged reply and its search_dialog/recall_dialog lookup in the trace",
    ),
    _not_built(5, "Pushes back on a flawed premise", "the critique's objection and the revised reply"),
    declines,
    unprompted,
    _not_built(
        8, "Holds a conversation with another agent that ends on its own", "a second agent in the week"
    ),
    culling,
    restart_identity,
    dormancy,
)


def run_checkers(week: WeekEvidence) -> list[Verdict]:
    return [check(week) for check in CHECKERS]
