"""The agent's emotional state (SPEC §4.9) and what the decision weighs besides its rules
(SPEC §4 step 6: objectives and accumulated preferences).

- `classify`: after each exchange one model call (stage `emotion`) gives a probability for
  every configured category; the output model has one bounded field per category, and what
  comes back is normalised. A failed call or an unusable answer (every probability 0) gives
  no reading: the turn it follows was already sent and nothing else depends on it.
- `worth_feeling` and `covered_by_later`: what keeps the reading cheap enough to be on by
  default. A trivially short exchange ("hi" / "hello!") moves nothing worth a call, and when
  several exchanges of a conversation queued up before the first reading ran, only the last
  is read (its window holds the earlier ones).
- `EmotionSource`: the recent trajectory (the last readings' top categories, with their
  time) as a context source, so replies carry their mood across conversations. It shows the
  agent's own states only, never what caused them.
- `decision_preferences`: quick facts about itself, open goals (both as they may surface
  here, `memory.access`) and the current state, for the decide step's brief.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from functools import cache

from pydantic import BaseModel, ConfigDict, Field, create_model

from persyn.cognition.goals import OpenGoals, visible_goals
from persyn.cognition.pipeline import TurnSetup
from persyn.cognition.prompt import ContextSection
from persyn.core.config import AgentConfig, EmotionConfig, Task
from persyn.core.errors import ModelError
from persyn.core.records import channel_key
from persyn.gateway.base import Prompt, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.memory.access import may_surface
from persyn.store.base import Goal, Message, Role, Store
from persyn.store.capabilities import ScheduleStore, capability
from persyn.store.ports.emotions import EmotionReading, EmotionsPort
from persyn.store.ports.memory import MemoryPort, QuickFact

__all__ = [
    "EMOTION_STAGE",
    "EmotionSource",
    "TurnReadings",
    "classify",
    "covered_by_later",
    "decision_preferences",
    "emotion_prompt",
    "feelings_model",
    "normalised",
    "shown_distribution",
    "worth_feeling",
]

log = logging.getLogger(__name__)

EMOTION_STAGE = "emotion"
_SELF_FACTS = 12  # quick facts about itself the decision sees
_GOALS = 8
_EXCHANGE_MESSAGES = 6  # the exchange and a little before it


@cache
def feelings_model(categories: tuple[str, ...]) -> type[BaseModel]:
    """The classifier's output: one probability per category (0 to 1)."""
    fields: dict[str, object] = {
        category: (float, Field(default=0.0, ge=0, le=1, description=f"probability that I feel {category}"))
        for category in categories
    }
    model = create_model("Feelings", __config__=ConfigDict(frozen=True), **fields)  # pyright: ignore[reportCallIssue, reportArgumentType, reportUnknownVariableType]
    return model  # pyright: ignore[reportUnknownVariableType]


def normalised(raw: Mapping[str, float], categories: Sequence[str]) -> dict[str, float] | None:
    """`raw` over exactly `categories`, summing to 1 (rounded to 4 places); None when
    nothing in it is usable."""
    values = {c: max(0.0, min(1.0, float(raw.get(c, 0.0) or 0.0))) for c in categories}
    total = sum(values.values())
    if total <= 0:
        return None
    return {c: round(v / total, 4) for c, v in values.items()}


def worth_feeling(exchange: str, min_words: int) -> bool:
    """Whether an exchange (the message and the reply) is long enough to classify: at least
    `min_words` words."""
    return len(exchange.split()) >= min_words


def covered_by_later(dialog: Sequence[Message], event_id: str) -> bool:
    """Whether the agent has answered again in the conversation since `event_id`'s reply
    (`dialog`: its latest messages, oldest first): the later exchange has a reading of its
    own coming, over a window that ends after this one."""
    own = [m for m in dialog if m.role is Role.AGENT]
    return bool(own) and own[-1].event_id != event_id


def emotion_prompt(agent: AgentConfig, dialog: Sequence[Message], categories: Sequence[str]) -> Prompt:
    system = (
        f"You are {agent.name}. Your disposition: {agent.disposition}\n"
        "Reading the exchange you just had, say how you feel now: give a probability from 0 to 1 "
        f"for each of these states: {', '.join(categories)}. They should sum to about 1."
    )
    lines: list[str] = []
    for message in dialog[-_EXCHANGE_MESSAGES:]:
        who = f"{agent.name} (me)" if message.role is Role.AGENT else message.speaker_name
        lines.append(f"{who}: {message.text[:800]}")
    return Prompt(system=system, items=(UserTurn(text="The exchange:\n" + "\n".join(lines)),))


async def classify(
    gateway: ModelGateway, agent: AgentConfig, dialog: Sequence[Message], config: EmotionConfig
) -> dict[str, float] | None:
    """The distribution after an exchange, or None (the call failed, or its answer was unusable)."""
    categories = tuple(config.categories)
    try:
        completion = await gateway.complete(
            Task.CLASSIFY,
            emotion_prompt(agent, dialog, categories),
            output=feelings_model(categories),
            stage=EMOTION_STAGE,
        )
    except ModelError as exc:  # already retried once by the gateway on invalid output
        log.info("emotion classifier failed; no reading for this exchange: %s", exc)
        return None
    output = completion.output
    if output is None:  # pragma: no cover - the gateway validates
        return None
    distribution = normalised(output.model_dump(), categories)
    if distribution is None:
        log.info("emotion classifier gave every state 0; no reading for this exchange")
    return distribution


def shown_distribution(distribution: Mapping[str, float], top: int = 3) -> str:
    """`frustrated 62%, bored 20%, calm 9%`: the strongest states first."""
    ranked = sorted(distribution.items(), key=lambda item: (-item[1], item[0]))[:top]
    return ", ".join(f"{category} {value:.0%}" for category, value in ranked)


# The agent's latest `limit` readings as a turn sees them (`runtime.turn.activation.TurnCache.emotions`
# reads them once per activation for all of its steps).
TurnReadings = Callable[[TurnSetup, int], Awaitable[list[EmotionReading]]]


class EmotionSource:
    """The recent emotional trajectory as context (SPEC §4.9); none without the store's
    emotion history (`store/capabilities.py`)."""

    def __init__(self, store: Store, config: EmotionConfig, *, readings: TurnReadings | None = None) -> None:
        self.store: EmotionsPort | None = capability(store, EmotionsPort)
        self.config = config
        self._readings = readings

    async def __call__(self, setup: TurnSetup, query: str) -> Sequence[ContextSection]:
        if not self.config.enabled or not self.config.trajectory or self.store is None:
            return []
        if self._readings is not None:
            readings = await self._readings(setup, self.config.trajectory)
        else:
            readings = await self.store.recent_emotions(setup.agent_id, self.config.trajectory)
        if not readings:
            return []
        lines = [
            f"- {r.created_at:%Y-%m-%d %H:%M}: {r.top} ({shown_distribution(r.distribution)})"
            for r in readings
        ]
        body = "How I have felt lately, newest first (let it colour how I answer):\n" + "\n".join(lines)
        return [ContextSection("My recent emotional state", body)]


async def decision_preferences(
    store: Store,
    setup: TurnSetup,
    groups: Sequence[Sequence[str]],
    config: EmotionConfig,
    now: datetime,
    *,
    readings: TurnReadings | None = None,
    goals: OpenGoals | None = None,
) -> str:
    """What the decision weighs besides the configured rules: what the agent knows of itself,
    its open goals (each only where it may surface) and its current emotional state (from
    `readings` and `goals` when given: the turn's own reads). The three are read together."""
    here = channel_key(setup.service, setup.channel)
    present = tuple(p for p in (setup.participant_ids or ((setup.person_id,) if setup.person_id else ())))
    # What the store does not keep (`store/capabilities.py`) is not weighed.
    memory, schedule = capability(store, MemoryPort), capability(store, ScheduleStore)

    async def own_facts() -> list[QuickFact]:
        return [] if memory is None else await memory.fact_rows(setup.agent_id, setup.agent_id)

    async def open_goals() -> list[Goal]:
        if schedule is None:
            return []
        return await visible_goals(schedule, setup, groups, _GOALS, present=present, listed=goals)

    async def current() -> list[EmotionReading]:
        if not config.enabled:
            return []
        if readings is not None:
            return await readings(setup, 1)
        history = capability(store, EmotionsPort)
        return [] if history is None else await history.recent_emotions(setup.agent_id, 1)

    stored_facts, shown_goals, latest = await asyncio.gather(own_facts(), open_goals(), current())
    facts = [
        f for f in stored_facts if may_surface(f.provenance, here, present, groups, agent_id=setup.agent_id)
    ]
    newest: dict[str, str] = {}
    for fact in facts:  # newest first within a key
        newest.setdefault(fact.key, fact.value)
    parts: list[str] = []
    if newest:
        shown = list(newest.items())[:_SELF_FACTS]
        parts.append("What I know about myself:\n" + "\n".join(f"- {k}: {v}" for k, v in shown))
    if shown_goals:
        parts.append("My open goals:\n" + "\n".join(f"- {g.description}" for g in shown_goals))
    if latest:
        state = latest[0]
        parts.append(
            f"How I feel right now: {state.top} ({shown_distribution(state.distribution)}), "
            f"since {state.created_at:%H:%M}."
        )
        if state.top in config.decline_when:
            parts.append(
                f"Feeling {state.top}, I may decline a request that is optional for me (a favour, "
                "a game, an extra task), saying honestly why; I still answer what I owe someone."
            )
    return "\n\n".join(parts)
