"""Emotional state (SPEC §4.9) and what the decision weighs (SPEC §4 step 6), through the real
runtime with a model double: a reading after each exchange (stage `emotion`, off the reply's
path), the trajectory in the next prompt, a frustrated agent declining an optional request it
grants when content, the conversation's state kept with its memory as the record's emotion
tag, and a malformed classifier answer that costs the turn nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.deliberation import Decision
from persyn.runtime.durable.dispatch import deliberation_workflow_id, emotion_workflow_id
from persyn.testing import Pilot, run_runtime
from persyn.testing.models import (
    DoubleReply,
    last_user_text,
    minimal_instance,
    output_schema,
    registered_double,
)

FEEL = "say how you feel now"  # in the emotion classifier's instruction only
FAVOUR = "Could you please write me a long poem about the sea and the sky, just for fun, whenever you like?"
LONG_REPLY = "Here is a long poem about the sea and the sky, with waves and clouds and gulls and wind in it."
ON = "[emotion]\nenabled = true\n"
HOW_WAS_IT = "Hello there, how has your day been so far?"
CURIOUS = {"curious": 0.7, "engaged": 0.3}
FRUSTRATED = {"frustrated": 0.6, "bored": 0.3, "calm": 0.1}


class Moody:
    """`test:moody`: frustrated after anything said 'again', curious otherwise; the decision
    declines an optional favour exactly when its brief says the agent feels frustrated."""

    def __init__(self) -> None:
        self.malformed = False
        self.systems: dict[str, list[str]] = {}

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        system = info.instructions or ""
        self.systems.setdefault(task or "", []).append(system)
        said = last_user_text(messages)
        if task == "classify" and FEEL in system:
            if self.malformed:
                return DoubleReply(text="I feel great, thanks for asking!")  # no structured answer
            return FRUSTRATED if "again" in said else CURIOUS
        if task == "decide":
            if "How I feel right now: frustrated" in system:
                return Decision(
                    action="decline",
                    reason="I am too frustrated for an optional favour right now",
                    message="Not now, I'm rather frustrated; ask me again later.",
                )
            return Decision(action="speak", reason="happy to")
        if task == "respond":
            return DoubleReply(text=LONG_REPLY if "poem" in said else f"Sure: {said}")
        if task == "summarize":
            return {"summary": "I talked with Sam about poems and repeated requests.", "tags": ["poems"]}
        schema = output_schema(info)
        return DoubleReply(output=minimal_instance(schema)) if schema is not None else DoubleReply(text="ok")


@pytest.fixture
def moody() -> Iterator[Moody]:
    double = Moody()
    with registered_double("moody", double):
        yield double


def _emotion_calls(pilot: Pilot) -> int:
    return sum(1 for r in pilot.usage() if r.stage == "emotion")


async def test_state_is_read_after_each_exchange_carried_into_prompts_and_weighed_by_the_decision(
    tmp_path: Path, moody: Moody
) -> None:
    async with run_runtime(tmp_path / "home", model="test:moody", config=ON) as pilot:
        agent = pilot.agent.id
        granted = await pilot.say(FAVOUR, transmitted=True)  # no state yet: the decision speaks
        assert granted.marker.text == LONG_REPLY
        await pilot.settle()
        (first,) = await pilot.full_store.recent_emotions(agent, 5)
        assert (first.event_id, first.top, dict(first.distribution)) == (granted.event.id, "curious", CURIOUS | {
            c: 0.0 for c in pilot.settings.emotion.categories if c not in CURIOUS
        })  # fmt: skip

        await pilot.say("Say hello again, and again.", transmitted=True)
        await pilot.settle()
        assert [r.top for r in await pilot.full_store.recent_emotions(agent, 5)] == ["frustrated", "curious"]
        assert _emotion_calls(pilot) == 2  # one per exchange

        declined = await pilot.say(FAVOUR, transmitted=True)
        assert declined.marker.text == "Not now, I'm rather frustrated; ask me again later."
        assert declined.marker.reason == "declined: I am too frustrated for an optional favour right now"
        # The trajectory was in the reply's prompt, newest first; the decision saw the state.
        respond = moody.systems["respond"][-1]
        trajectory = respond[respond.index("## My recent emotional state") :]
        assert trajectory.index(": frustrated (frustrated 60%") < trajectory.index(": curious (curious 70%")
        assert "Feeling frustrated, I may decline a request that is optional" in moody.systems["decide"][-1]
        assert "How I feel right now" not in moody.systems["decide"][0]  # before any reading

        # The conversation's state is kept with its memory; its top category is the tag.
        await pilot.settle()  # the last exchange's reading is written
        await pilot.close_idle(after=timedelta(hours=2))
        (record,) = await pilot.full_store.list_records(agent, limit=5)
        kept = await pilot.full_store.record_emotions(agent, [record.id])
        # The mean of curious, frustrated and frustrated (the refusal says "again" too).
        assert record.emotion == kept[record.id].top == "frustrated"
        assert kept[record.id].distribution["curious"] == pytest.approx(0.7 / 3, abs=1e-3)
        assert round(sum(kept[record.id].distribution.values()), 3) == 1.0


async def test_a_malformed_classifier_answer_keeps_no_reading_and_costs_the_turn_nothing(
    tmp_path: Path, moody: Moody
) -> None:
    moody.malformed = True
    async with run_runtime(tmp_path / "home", model="test:moody", config=ON) as pilot:
        turn = await pilot.say(HOW_WAS_IT, transmitted=True)
        assert turn.marker.text == f"Sure: {HOW_WAS_IT}"
        await pilot.settle()
        assert await pilot.full_store.recent_emotions(pilot.agent.id, 5) == []
        assert _emotion_calls(pilot) == 2  # the gateway's one corrective retry, then degraded
        moody.malformed = False
        await pilot.say(f"{HOW_WAS_IT} Tell me again.", transmitted=True)
        await pilot.settle()
        assert [r.top for r in await pilot.full_store.recent_emotions(pilot.agent.id, 5)] == ["frustrated"]


async def test_the_state_is_read_by_default_but_not_after_a_trivially_short_exchange(
    tmp_path: Path, moody: Moody
) -> None:
    async with run_runtime(tmp_path / "home", model="test:moody") as pilot:  # no [emotion] table
        await pilot.say("hi", transmitted=True)  # "Sure: hi": 3 words, under `min_words`
        await pilot.settle()
        assert (await pilot.full_store.recent_emotions(pilot.agent.id, 5), _emotion_calls(pilot)) == ([], 0)
        turn = await pilot.say(HOW_WAS_IT, transmitted=True)
        await pilot.settle()
        readings = await pilot.full_store.recent_emotions(pilot.agent.id, 5)
        assert [(r.event_id, r.top) for r in readings] == [(turn.event.id, "curious")]
        assert _emotion_calls(pilot) == 1


async def test_an_exchange_answered_past_before_its_reading_ran_is_left_to_the_later_one(
    tmp_path: Path, moody: Moody
) -> None:
    """A reading that runs only after the agent has answered again in the conversation (a
    burst, a busy background queue) makes no call: the later exchange's reading covers it."""
    async with run_runtime(tmp_path / "home", model="test:moody", config=ON) as pilot:
        first = await pilot.say(HOW_WAS_IT, transmitted=True)
        await pilot.say(f"{HOW_WAS_IT} Tell me again.", transmitted=True)
        await pilot.settle()
        calls = _emotion_calls(pilot)
        (latest, *_) = await pilot.full_store.recent_emotions(pilot.agent.id, 5)
        assert latest.conversation_id is not None
        await pilot.runtime.activation.feel(pilot.agent.id, first.event.id, latest.conversation_id)
        assert _emotion_calls(pilot) == calls


async def test_a_frustrated_agent_decides_even_on_a_short_reply_and_a_content_one_does_not(
    tmp_path: Path, moody: Moody
) -> None:
    """A short plain reply is sent on the gates alone, with no decision call, unless the
    agent's state is one in which it may decline optional requests: then the decision sees
    that state and may decline."""
    game = "Play a quick game with me?"  # "Sure: Play a quick game with me?": short and plain
    async with run_runtime(tmp_path / "home", model="test:moody", config=ON) as pilot:
        granted = await pilot.say(game, transmitted=True)
        assert granted.marker.text == f"Sure: {game}"
        await pilot.settle()
        assert "decide" not in moody.systems  # content (no reading yet): no decision call
        await pilot.say("Say hello again, and again, and again please.", transmitted=True)
        await pilot.settle()
        assert [r.top for r in await pilot.full_store.recent_emotions(pilot.agent.id, 1)] == ["frustrated"]
        declined = await pilot.say(game, transmitted=True)
        assert declined.marker.text == "Not now, I'm rather frustrated; ask me again later."
        assert "How I feel right now: frustrated" in moody.systems["decide"][-1]


async def test_a_deferred_turns_reading_is_the_last_step_of_its_deliberation(
    tmp_path: Path, moody: Moody
) -> None:
    """Deferred, a reply already sent is critiqued in a background workflow; the exchange's
    emotion reading is that workflow's last step, not a workflow of its own (one background
    workflow per turn: issue 33). It is still read, attributed as a reading, and carried into
    the next prompt."""
    config = ON + '[deliberation]\nmode = "deferred"\n'
    async with run_runtime(tmp_path / "home", model="test:moody", config=config) as pilot:
        turn = await pilot.say(FAVOUR, transmitted=True)
        assert turn.marker.text == LONG_REPLY  # substantive: critiqued after it was sent
        await pilot.settle()
        (reading,) = await pilot.full_store.recent_emotions(pilot.agent.id, 5)
        assert (reading.event_id, reading.top) == (turn.event.id, "curious")
        assert await DBOS.get_workflow_status_async(emotion_workflow_id(turn.event.id)) is None
        steps = await DBOS.list_workflow_steps_async(deliberation_workflow_id(turn.event.id))
        assert [step["function_name"] for step in steps][-1] == "persyn.feel_step"
        (feeling,) = [r for r in pilot.usage() if r.stage == "emotion"]
        assert feeling.trigger == "emotion"
        await pilot.say("And one more thing, please.", transmitted=True)
        assert "## My recent emotional state" in moody.systems["respond"][-1]
