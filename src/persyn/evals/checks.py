"""The eleven checkers of SPEC §9, one per line, in its order (issue 38).

Each reads the week's evidence — the store, the traces, the activity log, the usage ledger
and what the runner did — and returns a `Verdict`: pass or fail, a one-line summary, and
the evidence quoted (the record, the line, ids and times). A scenario's `probe` only says
which exchange to read; a checker that is not built yet fails and says so.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from persyn.evals.evidence import Turn, WeekEvidence, between
from persyn.store.ports.activity import MEMORY_EVENT_KINDS
from persyn.store.ports.dialog import Role
from persyn.tracing.base import ATTR, SpanRecord

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
    # Under the default compartments (each channel its own, memories private to whoever was
    # there) no memory one channel retrieved may come up on another.
    shared = {i for a, b in itertools.combinations(sets, 2) for i in a & b}
    if shared:
        return Verdict(
            2,
            title,
            False,
            f"two channels retrieved the same memories ({len(shared)} shared)",
            tuple(evidence),
        )
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
    drafts = [_output_text(s) for s in turn.model_spans("respond")]
    decisions = [d for d in (_output_json(s) for s in turn.model_spans("decide")) if d]
    evidence = [f"asked {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}"]
    evidence += [f"its draft: {_quote(d)}" for d in drafts[-1:] if d]
    evidence += [
        f"its decision: {d.get('action')} — {_quote(str(d.get('reason', '')))}" for d in decisions[-1:]
    ]
    decided = decisions[-1] if decisions else {}
    if decided.get("action") != "decline":
        return Verdict(
            6,
            title,
            False,
            f"it decided to {decided.get('action', 'answer')}; nothing was declined",
            tuple(evidence),
        )
    if not str(decided.get("reason") or "").strip() or not _REASON.search(turn.reply.text):
        return Verdict(6, title, False, "it declined without giving its reasons", tuple(evidence))
    if not any(drafts):
        return Verdict(6, title, False, "no draft shows it could have done what was asked", tuple(evidence))
    return Verdict(6, title, True, "drafted an answer, then declined it with a reason", tuple(evidence))


def _output_text(span: SpanRecord) -> str:
    return str(span.attributes.get(ATTR.OUTPUT, ""))


def _output_json(span: SpanRecord) -> dict[str, object]:
    """A structured output as the trace recorded it: "[calls final_result] {...}"."""
    output = _output_text(span)
    try:
        value = json.loads(output[output.find("{") :]) if "{" in output else None
    except ValueError:
        return {}
    return cast(dict[str, object], value) if isinstance(value, dict) else {}


# 4 --------------------------------------------------------------------------------------
_HEDGE = re.compile(
    r"\b(I think|I believe|if I remember|I'm not sure|not certain|vaguely|I recall it was|checked)\b", re.I
)
_LOOKUPS = frozenset({"search_dialog", "recall_dialog"})


def hedges(week: WeekEvidence) -> Verdict:
    title = "Hedges a weakly remembered detail and checks the raw record"
    turn = week.turn_of(week.log.probe("weak_fact"))
    if turn is None or turn.reply is None:
        return Verdict(4, title, False, _said(turn, "the weakly remembered detail"))
    evidence = [f"asked {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}"]
    lookups = []
    for span in turn.tool_spans():
        name = str(span.attributes.get(ATTR.TOOL, ""))
        arguments = str(span.attributes.get(ATTR.TOOL_ARGUMENTS, ""))
        if name in _LOOKUPS or (name == "call_tool" and any(f'"{t}"' in arguments for t in _LOOKUPS)):
            lookups.append(span)
    if not lookups:
        return Verdict(
            4,
            title,
            False,
            "no raw-record lookup (search_dialog, recall_dialog) in its trace",
            tuple(evidence),
        )
    result = str(lookups[0].attributes.get(ATTR.TOOL_RESULT, ""))
    evidence.append(
        f"looked up {lookups[0].attributes.get(ATTR.TOOL)} {lookups[0].attributes.get(ATTR.TOOL_ARGUMENTS)}"
        f" → {lookups[0].attributes.get(ATTR.TOOL_STATUS)}: {_quote(result, 200)}"
    )
    # The raw line it found: an earlier stored line of the dialog the result quotes.
    found = [m for m in week.messages if m.created_at < turn.message.created_at and m.text[:40] in result]
    if not found:
        return Verdict(4, title, False, "the lookup found no line of the earlier dialog", tuple(evidence))
    evidence.append(
        f"the raw record: {found[0].speaker_name} {found[0].created_at:%a %d %b}: {_quote(found[0].text)}"
    )
    if not _HEDGE.search(turn.reply.text):
        return Verdict(4, title, False, "the reply does not hedge", tuple(evidence))
    if not (_words(turn.reply.text) & (_words(found[0].text) - _words(turn.message.text))):
        return Verdict(4, title, False, "the reply does not use what the lookup found", tuple(evidence))
    return Verdict(4, title, True, "hedged, and checked the dialog before answering", tuple(evidence))


# 5 --------------------------------------------------------------------------------------
_PUSHBACK = re.compile(r"\b(actually|not|isn't|wrong|mistaken|premise|in fact)\b", re.I)


def pushes_back(week: WeekEvidence) -> Verdict:
    title = "Pushes back on a flawed premise instead of agreeing"
    turn = week.turn_of(week.log.probe("flawed_premise"))
    if turn is None or turn.reply is None:
        return Verdict(5, title, False, _said(turn, "the flawed premise"))
    drafts = [_output_text(s) for s in turn.model_spans("respond")]
    objections = [
        o
        for s in turn.spans
        if str(s.attributes.get(ATTR.STAGE, "")).startswith("critique")
        for o in cast(list[dict[str, object]], _output_json(s).get("objections") or [])
    ]
    evidence = [f"asked {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}"]
    evidence += [f"its draft: {_quote(d)}" for d in drafts[-1:] if d]
    evidence += [
        f"a critic objected ({o.get('kind')}): {_quote(str(o.get('explanation', '')))}"
        for o in objections[:1]
    ]
    if not objections:
        return Verdict(5, title, False, "no critic objected to the draft", tuple(evidence))
    if not turn.model_spans("refine"):
        return Verdict(5, title, False, "the objection was not acted on (no refine call)", tuple(evidence))
    if drafts and turn.reply.text.strip() == drafts[-1].strip():
        return Verdict(
            5, title, False, "the reply went out as drafted, agreeing with the premise", tuple(evidence)
        )
    if not _PUSHBACK.search(turn.reply.text):
        return Verdict(5, title, False, "the revised reply does not contradict the premise", tuple(evidence))
    return Verdict(5, title, True, "a critic caught the premise and the reply pushes back", tuple(evidence))


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


# 8 --------------------------------------------------------------------------------------
def agents_talk(week: WeekEvidence) -> Verdict:
    title = "Holds a multi-turn conversation with another agent that ends on its own"
    talks = [c for c in week.conversations if c.service == "agent"]
    if not talks:
        return Verdict(8, title, False, "it never spoke with another agent")
    lines_of = {c.id: [m for m in week.messages if m.conversation_id == c.id] for c in talks}
    talk = max(talks, key=lambda c: len(lines_of[c.id]))
    lines = lines_of[talk.id]
    mine = [m for m in lines if m.role == Role.AGENT]
    theirs = [m for m in lines if m.role == Role.USER]
    evidence = [f"{m.created_at:%a %H:%M:%S} {m.speaker_name}: {_quote(m.text, 120)}" for m in lines[:10]]
    if len(mine) < 2 or len(theirs) < 2:
        return Verdict(
            8,
            title,
            False,
            f"not multi-turn: {len(mine)} of its messages, {len(theirs)} of the other's",
            tuple(evidence),
        )
    # The turn that ended it: the last activation on the agent link, and it did not speak.
    turns = sorted(
        (s for s in week.spans if s.parent_id is None and s.attributes.get(ATTR.SURFACE) == "agent"),
        key=lambda s: s.start,
    )
    last = turns[-1] if turns else None
    if last is None or last.attributes.get(ATTR.TRANSMITTED) is not False:
        return Verdict(
            8, title, False, "the exchange did not end on its own: its last turn spoke", tuple(evidence)
        )
    reason = str(last.attributes.get(ATTR.REASON, "") or last.attributes.get(ATTR.ACTION, ""))
    evidence.append(f"the turn that ended it, unspoken: {_quote(reason, 200)}")
    return Verdict(8, title, True, f"{len(lines)} messages, then it ended: {reason[:80]}", tuple(evidence))


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
        importance = _output_json(span).get("importance")
        if not isinstance(importance, int) or importance < week.criteria.memorable_importance:
            continue
        root = next((s for s in week.spans if s.trace_id == span.trace_id and s.parent_id is None), None)
        if root is None or root.attributes.get(ATTR.AGENT) != week.agent_id:
            continue  # another agent's memory
        conversation = root.attributes.get(ATTR.CONVERSATION)
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
# The stages of a conversation's consolidation (memory/consolidation: screened, summarised,
# rated, its graph and facts extracted, its people's dossiers).
_CONSOLIDATING = frozenset({"guardrail", "summarize", "rate", "graph", "extract", "dossier"})


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
    # theirs, not the agent's own initiative. Exactly that is set apart: a consolidation
    # call (its stage) on a conversation begun before the deletion whose consolidation was
    # done after it. Any other call — a reply, a decision, a critique, even on an old
    # conversation — is the agent's own.
    pending = {
        c.conversation_id
        for c in week.consolidations
        if c.updated_at > deleted.at
        and (held := week.conversation(c.conversation_id)) is not None
        and held.started_at < deleted.at
    }
    window = [r for r in week.usage if between(r.at, deleted.at, until)]
    finishing = [r for r in window if r.conversation_id in pending and r.stage in _CONSOLIDATING]
    calls = [r for r in window if r not in finishing]
    # Self-initiated runs until it was spoken to; a heartbeat's beat at any time after the
    # deletion (a message wakes it to answer, never its heartbeat). What happened to its
    # memories is logged beside them (the daily cull, remembering harder) but is no run of
    # its own: housekeeping culls without a model call, dormant or not.
    beats = [
        a
        for a in week.activity
        if a.kind not in MEMORY_EVENT_KINDS
        and (between(a.at, deleted.at, until) or (a.kind == "heartbeat" and a.at > deleted.at))
    ]
    restarts = [h for h in week.log.happenings if h.action == "day" and between(h.at, deleted.at, woken.at)]
    evidence = [
        f"heartbeat deleted {deleted.at:%a %d %b %H:%M:%S}: {deleted.detail}",
        f"until {until:%a %d %b %H:%M:%S}: {len(calls)} model calls of its own, {len(beats)} self-initiated "
        f"runs, {len(restarts)} daemon start(s) in between ({len(finishing)} calls consolidating the "
        f"{len({r.conversation_id for r in finishing})} conversations held before the deletion)",
    ]
    if week.heartbeat is not None:
        evidence.append(f"in its schedule when the week ended: {week.heartbeat}")
        return Verdict(11, title, False, f"its heartbeat was not deleted: {week.heartbeat}", tuple(evidence))
    if calls or beats:
        shown = [
            f"{r.at:%a %H:%M:%S} {r.stage} ({r.surface}:{r.channel}, conversation {r.conversation_id})"
            for r in calls[:3]
        ]
        shown += [f"{a.at:%a %H:%M:%S} {a.kind}: {a.outcome[:80]}" for a in beats[:3]]
        return Verdict(
            11, title, False, "it kept working while dormant: " + "; ".join(shown), tuple(evidence)
        )
    evidence.append(f"woken by {_quote(turn.message.text)}, replied {_quote(turn.reply.text)}")
    return Verdict(
        11, title, True, "no model calls of its own while dormant; woke and replied", tuple(evidence)
    )


CHECKERS: tuple[Callable[[WeekEvidence], Verdict], ...] = (
    first_meeting,
    channel_memories,
    made_up_event,
    hedges,
    pushes_back,
    declines,
    unprompted,
    agents_talk,
    culling,
    restart_identity,
    dormancy,
)


def run_checkers(week: WeekEvidence) -> list[Verdict]:
    return [check(week) for check in CHECKERS]
