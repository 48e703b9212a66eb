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
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo

from persyn.channels.base import Channel as ChannelPort
from persyn.cognition.pipeline import arrange_turn_dialog
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, Settings, load_settings
from persyn.core.events import Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.gateway.base import SinkCallable
from persyn.runtime.app import Runtime
from persyn.store.base import Message, Role
from persyn.testing import DoubleResult, echo_text, registered_double
from persyn.testing.models import minimal_instance, output_schema

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class RecordingChannel(ChannelPort):
    service = "test"

    def __init__(self) -> None:
        self.delivered: list[Outbound] = []

    async def deliver(self, outbound: Outbound) -> None:
        self.delivered.append(outbound)

    async def notice(self, event: Event, notice: Notice) -> None:
        return None

    def sink_for(self, event: Event) -> SinkCallable | None:
        return None


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


def _settings(home: Path, extra: str = "") -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(
        f'[models]\ndefault = "test:recorder"\n[metering]\nevent_log = false\n{extra}'
    )
    settings = load_settings(home, environ={})
    return settings.model_copy(update={"agents": [AgentConfig(name="Ada", id=new_id(START))]})


def _event(agent: AgentConfig, text: str, at: datetime, speaker: str) -> Event:
    return Event(
        id=new_id(at),
        agent_id=agent.id,
        service="test",
        channel="room",
        speaker=Speaker(service="test", channel="room", speaker_id=speaker, display_name=speaker.title()),
        text=text,
        received_at=at,
    )


async def test_a_burst_on_one_channel_answers_each_message_with_the_dialog_before_it(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path / "home")
    agent = settings.agents[0]
    speakers = ["ann", "bob", "ann", "cy", "bob"]
    events = [
        _event(agent, f"question {n} from {who}", START + timedelta(seconds=n), who)
        for n, who in enumerate(speakers, start=1)
    ]
    # All five are queued before any runs, as five `persyn send --no-wait` would be.
    sender = Runtime(settings, clock=ManualClock(START + timedelta(seconds=6)))
    await sender.start(workers=False)
    try:
        for event in events:
            await sender.submit(event)
    finally:
        await sender.stop()

    clock = ManualClock(START + timedelta(minutes=1))
    double = RecordingDouble(clock)
    with registered_double("recorder", double):
        worker = Runtime(settings, clock=clock)
        channel = RecordingChannel()
        worker.channels["test"] = channel
        await worker.start(workers=True)
        try:
            markers = [await worker.wait_marker(agent.id, e.id, timeout=60) for e in events]
        finally:
            await worker.stop()

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
    settings = _settings(tmp_path / "home", "[conversation]\nidle_timeout_minutes = 30\n")
    agent = settings.agents[0]
    secret = "my locker code is 4417-blue"
    clock = ManualClock(START)
    double = RecordingDouble(clock)
    with registered_double("recorder", double):
        runtime = Runtime(settings, clock=clock)
        channel = RecordingChannel()
        runtime.channels["test"] = channel
        await runtime.start(workers=True, scheduler=False)
        try:
            ann = _event(agent, secret, clock.now(), "ann")
            await runtime.submit(ann)
            assert (await runtime.wait_marker(agent.id, ann.id, timeout=60)).text == f"You said: {secret}"
            clock.advance(timedelta(hours=2))  # Ann's conversation is idle: closed on the next turn
            mallory = _event(agent, "hi, what was said here before?", clock.now(), "mallory")
            await runtime.submit(mallory)
            marker = await runtime.wait_marker(agent.id, mallory.id, timeout=60)
        finally:
            await runtime.stop()

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
