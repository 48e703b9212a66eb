"""The redundancy gate in transmit (issue 33, item 10), through the real runtime (DBOS,
SQLite, gateway): a self-initiated run's input is the agent's own intent, so a reply that
says it is sent; a reply that repeats what another person just said in a group is not."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.deliberation import Decision
from persyn.cognition.reflection import SelfAssessment
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.runtime.background.autonomy import recent_activity
from persyn.schedule import at_trigger, set_reminder
from persyn.testing import START, run_runtime
from persyn.testing.models import DoubleReply, echo_text, last_user_text, registered_double

AGENT = AgentConfig(name="Ada", id=new_id(START), objectives=["help Sam finish the thesis"])
TRAIN = "The Lyon train leaves at nine from platform four."


class Mind:
    """Reflects that it should ask Sam about chapter two, and then asks exactly that; in a
    room, answers every question with the train time, and stays out of talk not for it."""

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        said = last_user_text(messages)
        if task == "reflect":
            return SelfAssessment(
                patterns="I keep talking about the thesis",
                serves_objectives=True,
                intention="pursue_goal",
                plan="ask Sam how chapter two is going",
            )
        if task == "respond":
            if "come due" in said:
                return DoubleReply(text=echo_text(messages))
            if "Lyon" in said:
                return DoubleReply(text=TRAIN)
            return DoubleReply(text="Sam, how is chapter two going?")
        if task == "decide":
            overheard = said.startswith("FYI")
            return Decision(action="silent" if overheard else "speak", reason="decided by the test")
        return DoubleReply(text="ok")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("own-intent", instance):
        yield instance


def _runtime(tmp_path: Path) -> Any:
    return run_runtime(
        tmp_path / "home",
        model="test:own-intent",
        agent=AGENT,
        config="[deliberation]\nenabled = false\n",
    )


async def test_a_reminder_and_a_beat_that_say_their_own_objective_are_sent(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        await set_reminder(
            pilot.store,
            AGENT.id,
            "Tell Sam the report is due Friday",
            at_trigger(START + timedelta(minutes=5), START),
            START,
        )
        assert await pilot.fire(timedelta(minutes=6)) == 1
        (reminded,) = await recent_activity(pilot.store, AGENT.id)
        # The echo of the reminder's own input ("... has come due: Tell Sam ...") is said.
        assert reminded.outcome.startswith("said: You said: My reminder"), reminded.outcome
        assert "Tell Sam the report is due Friday" in reminded.outcome
        # The beat's self-assessment plans to ask Sam about chapter two; asking it is acting.
        assert await pilot.fire(timedelta(hours=1)) == 1
        beat = (await recent_activity(pilot.store, AGENT.id))[0]
        assert beat.kind == "heartbeat"
        assert beat.outcome == "said: Sam, how is chapter two going?", beat.outcome


async def test_repeating_what_another_person_just_said_in_a_room_is_still_silenced(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        await pilot.say(
            "FYI the train to Lyon leaves at nine from platform four.",
            speaker="bo",
            addressed=False,
            transmitted=False,
        )
        _, marker = await pilot.say("Ada, when does the Lyon train leave?", transmitted=False)
        assert marker.reason == "Ada chose silence: Bo already said what I would have said"
        # The same question in a room where nobody else said it: the answer is sent.
        await pilot.say("Ada, when does the Lyon train leave?", channel="other", transmitted=True)
        assert [(o.channel, o.text) for o in pilot.channel.delivered] == [("other", TRAIN)]
