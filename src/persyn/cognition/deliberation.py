"""Deliberation (SPEC §4 steps 4–6, §4.2): critique the draft, refine it, decide to speak.

**Critique.** Every *substantive* draft (see `is_substantive`) is checked by the provenance
critic — a correctness gate that sees the ids, summaries and scores of the memories recalled
for the turn — and by one more lens drawn at random from the configured library
(`templates/*.md`). The draw is seeded by the event id (and `[deliberation] seed`), so it
varies from turn to turn yet a replayed step draws the same lens. Objections are structured
output (`Critique`), never parsed from free text; a critic whose output is still malformed
after the gateway's one corrective retry is skipped and the skip is recorded.

**Refine.** Only when there are objections: the agent's own prompt, its draft as its turn,
then the objections, with the instruction to remediate each (modify, remove, acknowledge) and
keep everything unflagged. Record ids and band tags are stripped from whatever is sent.

**Decide.** A structured decision with a stated reason: speak, stay silent, decline (with its
own reasons), or redirect to another channel. Inline deliberation decides on the refined
draft (`decide`). Deferred deliberation, where a person is waiting, decides on the input
while the draft is written (`decide_on_input`, its own template): the decision then costs no
time of its own, and a silence or a refusal still replaces the draft at transmit. Two checks need no model: a candidate that only
repeats what another speaker just said is suppressed, and on a multi-speaker channel traffic
that is not addressed to the agent first gets an engagement decision before any draft is
written (so chatter costs one cheap call, not a whole turn).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config import AgentConfig, DeliberationConfig, Task
from persyn.core.errors import ModelError
from persyn.gateway.base import AgentTurn, Completion, Prompt, SinkCallable, UserTurn
from persyn.store.base import Message, Role

__all__ = [
    "LENSES",
    "PROVENANCE",
    "Critique",
    "CritiqueOutcome",
    "Decision",
    "Evidence",
    "Objection",
    "Parked",
    "Responder",
    "clean_for_transmit",
    "critique",
    "decide",
    "decide_on_input",
    "decide_on_input_prompt",
    "draw_lens",
    "engage",
    "is_substantive",
    "may_be_redundant",
    "redundant_with",
    "refine",
    "render_template",
]

log = logging.getLogger(__name__)

PROVENANCE = "provenance"
LENSES = ("adversarial", "predictive", "constrained", "hopes", "fears")


class Responder(Protocol):
    """What deliberation needs of the gateway (`ModelGateway` is one)."""

    async def complete(
        self,
        task: Task,
        prompt: Prompt,
        *,
        output: type[BaseModel] | None = None,
        sink: SinkCallable | None = None,
        phase: str = "draft",
        stage: str | None = None,
    ) -> Completion: ...


# structured outputs ------------------------------------------------------------------------
class Objection(BaseModel):
    """One deviation from a critic's criterion (SPEC §4.2)."""

    model_config = ConfigDict(frozen=True)

    kind: str = Field(description="the type label the critic's instructions name, e.g. 'confabulation'")
    span: str = Field(description="the offending text, quoted exactly from the draft")
    explanation: str = Field(description="why this is a problem, in one or two sentences")
    severity: int | None = Field(default=None, ge=1, le=10, description="1 (minor) to 10 (fatal)")
    correction: str | None = Field(default=None, description="a suggested replacement, if any")


class Critique(BaseModel):
    """A critic's whole answer: an empty list when it finds nothing to object to."""

    model_config = ConfigDict(frozen=True)

    objections: tuple[Objection, ...] = ()


class Decision(BaseModel):
    """Whether the agent speaks, and why (SPEC §4 step 6)."""

    model_config = ConfigDict(frozen=True)

    action: Literal["speak", "silent", "decline", "redirect"] = Field(
        description=(
            "speak: send the reply; silent: say nothing; decline: refuse the request (you could do "
            "it, but it conflicts with your objectives or preferences) and say why; redirect: "
            "answer on another channel"
        )
    )
    reason: str = Field(description="your reason, in the first person, one sentence")
    message: str | None = Field(
        default=None, description="for decline: what you say to the person, including your reasons"
    )
    redirect_to: str | None = Field(default=None, description="for redirect: 'service:channel'")


@dataclass(frozen=True)
class Evidence:
    """A memory recalled for the turn, as the provenance critic sees it."""

    record_id: str
    summary: str
    score: float
    band: str

    def line(self) -> str:
        return f"- {self.record_id} [{self.band}, score {self.score:.2f}] {self.summary}"


class CritiqueOutcome(BaseModel):
    """What one critic said, or why it said nothing."""

    model_config = ConfigDict(frozen=True)

    lens: str
    objections: tuple[Objection, ...] = ()
    skipped: str | None = None
    usage_id: str | None = None


class Parked(BaseModel):
    """A deferred conclusion waiting to be woven into the next turn of its conversation."""

    model_config = ConfigDict(frozen=True)

    event_id: str
    draft: str
    revised: str | None
    objections: tuple[Objection, ...]

    def section(self) -> str:
        lines = [
            "Since I sent my last reply I reconsidered it. What I found wrong with it:",
            *(f'- {o.kind}: "{_clip(o.span, 160)}" — {o.explanation}' for o in self.objections),
        ]
        if self.revised:
            lines.append(f"What I should have said: {self.revised}")
        lines.append(
            "If it still matters, I correct myself briefly in this reply, in my own words; "
            "I do not pretend the earlier reply was different."
        )
        return "\n".join(lines)


# what to critique ------------------------------------------------------------------------
_PAST_OR_FACT = re.compile(
    r"\b(remember|recall|recollect|last (time|week|month|year)|earlier|yesterday|ago|"
    r"you (said|told|mentioned|asked)|we (talked|discussed|agreed|said|met)|i (said|told|promised|"
    r"agreed)|promise[ds]?|will|i'll|going to)\b|\d",
    re.IGNORECASE,
)


def is_substantive(text: str, min_words: int) -> bool:
    """Substantive = worth critiquing: at least `min_words` words, or, at any length, a claim
    about the past, people or commitments, a promise about the future, or a number. Greetings,
    thanks and short acknowledgements are not."""
    if len(text.split()) >= min_words:
        return True
    return _PAST_OR_FACT.search(text) is not None


def draw_lens(config: DeliberationConfig, event_id: str) -> str:
    """One non-provenance lens, pseudo-random per event (replay-safe), seedable."""
    seed_material = f"{config.seed if config.seed is not None else ''}:{event_id}".encode()
    rng = random.Random(int.from_bytes(hashlib.sha256(seed_material).digest()[:8], "big"))
    return rng.choice(list(config.lenses))


# templates ---------------------------------------------------------------------------------
@cache
def _template(lens: str) -> Template:
    if lens != PROVENANCE and lens not in LENSES:
        raise ValueError(f"unknown lens {lens!r}; known: {', '.join((PROVENANCE, *LENSES))}")
    text = resources.files("persyn.cognition").joinpath("templates", f"{lens}.md").read_text("utf-8")
    return Template(text)


def render_template(lens: str, agent: AgentConfig, evidence: Sequence[Evidence]) -> str:
    rules = [f"- {rule}" for rule in agent.rules]
    rules += [f"- If a request works against this objective, then decline it: {o}" for o in agent.objectives]
    return _template(lens).safe_substitute(
        agent=agent.name,
        rules="\n".join(rules) or "(no rules are configured)",
        records="\n".join(e.line() for e in evidence) or "(none: nothing was recalled for this turn)",
    )


_CRITIC_TAIL = """
Return your objections as structured output. Quote each span exactly from the draft. Object
only to what the criteria above cover; if nothing violates them, return an empty list.
An objection-free draft is a good outcome, not a failure."""


def _transcript(dialog: Sequence[Message], limit: int = 12) -> str:
    lines: list[str] = []
    for message in dialog[-limit:]:
        who = "me" if message.role is Role.AGENT else message.speaker_name
        lines.append(f"{who}: {_clip(message.text, 600)}")
    return "\n".join(lines) or "(no earlier dialog)"


def critic_prompt(
    lens: str, agent: AgentConfig, evidence: Sequence[Evidence], dialog: Sequence[Message], draft: str
) -> Prompt:
    system = (
        render_template(lens, agent, evidence)
        + _CRITIC_TAIL
        + f"\n\nThe conversation so far (the draft answers its last message):\n{_transcript(dialog)}"
    )
    return Prompt(system=system, items=(UserTurn(text=f"The draft reply to evaluate:\n<<<\n{draft}\n>>>"),))


# the calls ---------------------------------------------------------------------------------
async def critique(
    gateway: Responder,
    lens: str,
    agent: AgentConfig,
    evidence: Sequence[Evidence],
    dialog: Sequence[Message],
    draft: str,
) -> CritiqueOutcome:
    """One critic. Malformed output was already retried once by the gateway; a second
    failure (or any model failure) skips this critic, and the outcome says so."""
    prompt = critic_prompt(lens, agent, evidence, dialog, draft)
    try:
        completion = await gateway.complete(Task.CRITIQUE, prompt, output=Critique, stage=f"critique:{lens}")
    except ModelError as exc:
        log.info("critic %s skipped: %s", lens, exc)
        return CritiqueOutcome(lens=lens, skipped=str(exc))
    result = completion.output
    if not isinstance(result, Critique):  # pragma: no cover - the gateway validates
        return CritiqueOutcome(lens=lens, skipped="the critic returned no critique")
    objections = [o for o in result.objections if o.span.strip() or o.explanation.strip()]
    return CritiqueOutcome(lens=lens, objections=tuple(objections), usage_id=completion.usage_id)


async def critique_all(
    gateway: Responder,
    lenses: Sequence[str],
    agent: AgentConfig,
    evidence: Sequence[Evidence],
    dialog: Sequence[Message],
    draft: str,
) -> list[CritiqueOutcome]:
    """The critics run concurrently; each is metered as its own stage."""
    return list(
        await asyncio.gather(*(critique(gateway, lens, agent, evidence, dialog, draft) for lens in lenses))
    )


_REFINE_INSTRUCTION = """\
[deliberation — not from the person] Critics objected to my draft above:
{objections}
I now write the reply I will actually send. For each objection I either fix the flagged part,
remove it, or acknowledge the limitation plainly; a claim about the past that no memory of
mine supports becomes "I don't remember that" or an explicit guess; a weakly supported one
is hedged. Everything not flagged stays as it was. I never mention critics, objections,
scores or record ids. Output only the reply itself."""


def refine_prompt(base: Prompt, draft: str, objections: Sequence[Objection]) -> Prompt:
    """The turn's own prompt (same cached prefix), the draft as my turn, then the objections."""
    listed = "\n".join(
        f'- [{o.kind}] "{_clip(o.span, 300)}": {o.explanation}'
        + (f" (suggested: {o.correction})" if o.correction else "")
        for o in objections
    )
    items = (*base.items, AgentTurn(text=draft), UserTurn(text=_REFINE_INSTRUCTION.format(objections=listed)))
    return Prompt(system=base.system, items=items, stable_prefix_chars=base.stable_prefix_chars)


async def refine(
    gateway: Responder,
    base: Prompt,
    draft: str,
    objections: Sequence[Objection],
    sink: SinkCallable | None = None,
) -> str | None:
    """The final response, or None when refinement failed (the caller keeps the draft)."""
    try:
        completion = await gateway.complete(
            Task.REFINE, refine_prompt(base, draft, objections), sink=sink, phase="revise"
        )
    except ModelError as exc:
        log.info("refinement failed, keeping the draft: %s", exc)
        return None
    text = clean_for_transmit(completion.text)
    return text or None


_DECIDE_BRIEF = """\
You are {name}, deciding whether to send the reply you drafted (SPEC: silence is an outcome,
not an error). Speak when the reply answers what was asked or adds something relevant. Stay
silent when the message was not for you and you have nothing worth adding, or when others
already said what you would say. Decline when the request conflicts with your objectives or
preferences, even if you could do it, and give your reasons. Redirect only if another channel
is clearly the right place.
Your objectives:
{objectives}
Your rules:
{rules}"""


def _persona_lists(agent: AgentConfig) -> tuple[str, str]:
    objectives = "\n".join(f"- {o}" for o in agent.objectives) or "(none stated)"
    rules = "\n".join(f"- {r}" for r in agent.rules) or "(none stated)"
    return objectives, rules


def _weighed(system: str, preferences: str) -> str:
    """The brief with the agent's accumulated preferences (self-knowledge, open goals, its
    current emotional state: `cognition.emotion.decision_preferences`), when it has any."""
    if not preferences.strip():
        return system
    return f"{system}\n\nBesides your rules, weigh what you have come to prefer and feel:\n{preferences}"


def decide_prompt(
    agent: AgentConfig,
    dialog: Sequence[Message],
    candidate: str | None,
    *,
    addressed: bool,
    preferences: str = "",
) -> Prompt:
    objectives, rules = _persona_lists(agent)
    system = _weighed(_DECIDE_BRIEF.format(name=agent.name, objectives=objectives, rules=rules), preferences)
    situation = (
        "The last message was addressed to you."
        if addressed
        else "The last message was NOT addressed to you; you are overhearing it."
    )
    body = f"{situation}\nThe conversation:\n{_transcript(dialog)}\n"
    if candidate is None:
        body += "\nYou have not drafted anything yet. Should you join in?"
    else:
        body += f"\nYour draft reply:\n<<<\n{candidate}\n>>>\nDo you send it?"
    return Prompt(system=system, items=(UserTurn(text=body),))


async def decide(
    gateway: Responder,
    agent: AgentConfig,
    dialog: Sequence[Message],
    candidate: str | None,
    *,
    addressed: bool,
    preferences: str = "",
) -> Decision:
    """The model's decision; a failed decision degrades to speaking when addressed (the
    person is waiting) and to silence when overheard (nobody is)."""
    prompt = decide_prompt(agent, dialog, candidate, addressed=addressed, preferences=preferences)
    return await _decision(gateway, prompt, addressed=addressed)


async def _decision(gateway: Responder, prompt: Prompt, *, addressed: bool) -> Decision:
    try:
        completion = await gateway.complete(Task.DECIDE, prompt, output=Decision)
    except ModelError as exc:
        action: Literal["speak", "silent"] = "speak" if addressed else "silent"
        return Decision(
            action=action, reason=f"I could not deliberate ({_clip(str(exc), 120)}), so I {action}"
        )
    decision = completion.output
    if not isinstance(decision, Decision):  # pragma: no cover - the gateway validates
        return Decision(action="speak" if addressed else "silent", reason="no decision was returned")
    if not decision.reason.strip():
        decision = decision.model_copy(update={"reason": f"I chose to {decision.action}"})
    return decision


@cache
def _input_brief() -> Template:
    path = resources.files("persyn.cognition").joinpath("templates", "decide_on_input.md")
    return Template(path.read_text("utf-8"))


def decide_on_input_prompt(agent: AgentConfig, dialog: Sequence[Message], preferences: str = "") -> Prompt:
    """Whether and how to answer the dialog's last message (addressed to the agent), without
    a draft: what `decide_on_input` asks while the reply is being written."""
    objectives, rules = _persona_lists(agent)
    system = _weighed(
        _input_brief().safe_substitute(name=agent.name, objectives=objectives, rules=rules), preferences
    )
    body = (
        "The last message was addressed to you.\n"
        f"The conversation:\n{_transcript(dialog)}\n"
        "\nYou are writing your reply now. Do you answer it (speak), decline it, stay silent, "
        "or redirect?"
    )
    return Prompt(system=system, items=(UserTurn(text=body),))


async def decide_on_input(
    gateway: Responder, agent: AgentConfig, dialog: Sequence[Message], preferences: str = ""
) -> Decision:
    """The decision on an addressed input, made concurrently with the draft. A failed
    decision degrades to speaking: the person is waiting, and the draft still passes the
    deterministic gates."""
    return await _decision(gateway, decide_on_input_prompt(agent, dialog, preferences), addressed=True)


async def engage(gateway: Responder, agent: AgentConfig, dialog: Sequence[Message]) -> Decision:
    """The engagement decision for overheard traffic, made before any draft is written."""
    return await decide(gateway, agent, dialog, None, addressed=False)


# deterministic gates -----------------------------------------------------------------------
_WORD = re.compile(r"[a-z0-9']+")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "so",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "with",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "this",
        "that",
        "i",
        "you",
        "we",
        "he",
        "she",
        "they",
        "me",
        "my",
        "your",
        "our",
        "yes",
        "no",
        "ok",
        "okay",
        "just",
        "really",
        "very",
        "too",
        "also",
    ]
)


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def may_be_redundant(candidate: str) -> bool:
    """Whether `redundant_with` could find anything for the candidate: too few content words
    never make a redundancy, so the dialog need not even be read."""
    return len(_content_words(candidate)) >= 3


def redundant_with(
    candidate: str,
    dialog: Sequence[Message],
    threshold: float,
    *,
    asker: str | None = None,
    own_event: str | None = None,
) -> Message | None:
    """The message, since the agent last spoke, that already says what the candidate says
    (content-word overlap ≥ threshold), if any. `asker` is the person who addressed the
    agent: echoing their own words back to them is an answer (a confirmation, a quote), not
    a redundancy, so their messages are not counted. `own_event` is the event of a
    self-initiated run (a reminder, a beat): what it put in the dialog (the objective, the
    self-assessment) is the agent's own intent, never something another speaker already
    said (SPEC §4.7), so saying it is the run's point, not an echo."""
    if not may_be_redundant(candidate):
        return None
    mine = _content_words(candidate)
    for message in reversed(dialog):
        if message.role is Role.AGENT:
            break
        if asker is not None and message.person_id == asker:
            continue
        if own_event is not None and message.event_id == own_event:
            continue
        theirs = _content_words(message.text)
        if theirs and len(mine & theirs) / len(mine) >= threshold:
            return message
    return None


_RECORD_ID = re.compile(r"\s*\(?\b(?:ref\s+)?(?P<id>[0-9A-HJKMNP-TV-Z]{26})\b\)?", re.IGNORECASE)
_BAND_TAG = re.compile(r"\[(?:strong|moderate|weak)\]\s*", re.IGNORECASE)


def clean_for_transmit(text: str, recalled: Collection[str] = ()) -> str:
    """No band tags, per-claim citations or ids of the records recalled for the turn leave
    the agent (SPEC §4.2). Other ids stay: the id of a reminder the agent just set is
    something it may tell (stripping every ULID-shaped token made that impossible)."""
    strip = {record_id.upper() for record_id in recalled}
    if strip:
        text = _RECORD_ID.sub(lambda m: "" if m["id"].upper() in strip else m[0], text)
    text = _BAND_TAG.sub("", text)
    return text.strip()


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def objections_json(outcomes: Sequence[CritiqueOutcome]) -> str:
    return json.dumps([o.model_dump(mode="json") for o in outcomes])
