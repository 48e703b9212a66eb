"""The dialog a turn answers (issue 13, items 1 and 5), in-process: real SQLite files, real
DBOS queues, a model double that records every respond request it is sent.

- A message that waited in the queue behind others on its channel is answered as itself,
  not as "(Continue.)" of the reply written meanwhile; the prompt shows what came before it
  in true order.
- Recent dialog is the current conversation only: a new conversation on a channel never
  carries an earlier, closed conversation's verbatim text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.pipeline import arrange_turn_dialog
from persyn.core.clock import ManualClock
from persyn.core.ids import new_id
from persyn.store.base import Message, Role
from persyn.testing import START, DoubleResult, echo_text, harness_settings, registered_double, run_runtime
from persyn.testing.models import minimal_instance, output_schema


class RecordingDouble:
    """Echoes like `test:echo`, keeps every request of `task` as a flat transcript, and
    moves the clock a second per respond call (a reply is written after some thinking)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.prompts: list[list[tuple[str, str]]] = []
        self.systems: list[str] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        schema = output_schema(info)
        if schema is not None:
            return minimal_instance(schema)
        if task == "respond":
            self.prompts.append(_transcript(messages))
            self.systems.append(
                "\n".join(i.content for i in info.model_request_parameters.instruction_parts or ())
            )
            self.clock.advance(timedelta(seconds=1))
        return echo_text(messages)


def _transcript(messages: Sequence[ModelMessage]) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            turns.extend(("user", str(p.content)) for p in message.parts if isinstance(p, UserPromptPart))
        elif isinstance(message, ModelResponse):
            turns.extend(("agent", p.content) for p in message.parts if isinstance(p, TextPart))
    return turns


async def test_a_burst_on_one_channel_answers_each_message_with_the_dialog_before_it(
    tmp_path: Path,
) -> None:
    settings = harness_settings(tmp_path / "home", model="test:recorder")
    speakers = ["ann", "bob", "ann", "cy", "bob"]
    # All five are queued before any runs, as five `persyn send --no-wait` would be.
    async with run_runtime(
        settings, clock=ManualClock(START + timedelta(seconds=6)), workers=False
    ) as sender:
        events = [
            sender.event(f"question {n} from {who}", speaker=who, at=START + timedelta(seconds=n))
            for n, who in enumerate(speakers, start=1)
        ]
        for event in events:
            await sender.runtime.submit(event)

    clock = ManualClock(START + timedelta(minutes=1))
    double = RecordingDouble(clock)
    with registered_double("recorder", double):
        async with run_runtime(settings, clock=clock) as worker:
            channel = worker.channel
            markers = [await worker.runtime.wait_marker(e.agent_id, e.id, timeout=120) for e in events]

    replies = [f"You said: question {n} from {who}" for n, who in enumerate(speakers, start=1)]
    assert [m.text for m in markers] == replies
    assert [o.text for o in channel.delivered] == replies
    # Each prompt: the earlier questions (they arrived first), the replies written since,
    # then its own question, last.
    expected: list[list[tuple[str, str]]] = []
    for k in range(len(events)):
        earlier = [("user", f"[{speakers[n].title()}] question {n + 1} from {speakers[n]}") for n in range(k)]
        said = [("agent", replies[n]) for n in range(k)]
        own = [("user", f"[{speakers[k].title()}] question {k + 1} from {speakers[k]}")]
        expected.append(earlier + said + own)
    assert double.prompts == expected
    assert "(Continue.)" not in str(double.prompts)
    # The prompt says the last message waited (rather than pretend it came first).
    assert "waited while you answered earlier ones" not in double.systems[0]
    assert all("waited while you answered earlier ones" in system for system in double.systems[1:])


async def test_a_new_conversation_on_a_channel_does_not_carry_the_closed_ones_words(tmp_path: Path) -> None:
    secret = "my locker code is 4417-blue"
    clock = ManualClock(START)
    double = RecordingDouble(clock)
    config = "[conversation]\nidle_timeout_minutes = 30\n"
    with registered_double("recorder", double):
        async with run_runtime(
            tmp_path / "home", model="test:recorder", config=config, clock=clock, scheduler=False
        ) as pilot:
            channel = pilot.channel
            _, said = await pilot.say(secret, speaker="ann")
            assert said.text == f"You said: {secret}"
            pilot.advance(timedelta(hours=2))  # Ann's conversation is idle: closed on the next turn
            _, marker = await pilot.say("hi, what was said here before?", speaker="mallory")

    assert marker.text == "You said: hi, what was said here before?"
    conversations = {o.conversation_id for o in channel.delivered}
    assert len(conversations) == 2
    assert double.prompts == [
        [("user", f"[Ann] {secret}")],
        [("user", "[Mallory] hi, what was said here before?")],
    ]
    assert "4417" not in double.systems[1]


def test_a_turns_dialog_is_what_came_before_then_its_input_then_what_it_added() -> None:
    conversation_id, agent_id = new_id(START), new_id(START)
    first, second = new_id(START), new_id(START + timedelta(seconds=1))

    def said(text: str, role: Role, event_id: str, seconds: int) -> Message:
        at = START + timedelta(seconds=seconds)
        return Message(
            id=new_id(at),
            agent_id=agent_id,
            conversation_id=conversation_id,
            role=role,
            person_id=None,
            speaker_name="Ada" if role is Role.AGENT else "Sam",
            text=text,
            created_at=at,
            event_id=event_id,
        )

    question_1 = said("question 1", Role.USER, first, 0)
    question_2 = said("question 2", Role.USER, second, 1)  # arrived while 1 was answered
    reply_1 = said("answer 1", Role.AGENT, first, 5)
    thought_2 = said("my self-assessment", Role.SYSTEM, second, 6)  # added by turn 2
    reply_2 = said("answer 2", Role.AGENT, second, 7)  # turn 2's own reply: not judged again
    stored = [question_1, question_2, reply_1, thought_2, reply_2]
    assert arrange_turn_dialog(stored, second) == [question_1, reply_1, question_2, thought_2]
    # Turn 1 judged later (a deferred critique): the dialog its reply answered, no more.
    assert arrange_turn_dialog(stored, first) == [question_2, question_1]
