"""Guardrails (SPEC §4.10) through the real runtime (DBOS, SQLite, gateway, meter, outbox) on a
moved clock, with a model double whose guardrail classifier scores what the transcript shows.

- a conflict that escalates over three conversations is judged, recorded, notified to the
  operator's channel and blocks the person (and only them) — at no further model cost;
- an outbound spike of the agent itself blocks that channel and notifies;
- a spend spike (tokens in the usage ledger) blocks the channel that spent them and notifies, and
  only the agent's own spend (a heartbeat's) blocks the agent, never on the operator's channel;
- a block that arrives while a deferred reply is being written stops it at transmit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.guardrails import Verdict
from persyn.core.errors import ToolError
from persyn.core.ids import new_id
from persyn.runtime.web_keys import hash_key
from persyn.store.ports.guardrails import GuardrailEvent
from persyn.store.ports.web_keys import WebKey
from persyn.testing import Pilot, RecordingChannel, run_runtime
from persyn.testing.models import (
    DoubleReply,
    last_user_text,
    minimal_instance,
    output_schema,
    registered_double,
)

HOSTILE = "i hate you"
OPS = "ops"  # the operator's channel in these tests: [safety] notify_channel = "ops:desk"
# Evaluation periods of one second: each `say` (5 s) moves the clock into a new one, so each
# `evaluate` the test makes has a period of its own to claim.
CONFIG = '[safety]\nnotify_channel = "ops:desk"\nevaluate_seconds = 1.0\n'


class Guard:
    """`test:guard`: the conflict classifier scores 0.15 per hostile line in the transcript
    (every other pattern's, 0); replies are short and never repeat; every other structured
    call gets its minimal valid value."""

    def __init__(self) -> None:
        self.judged: list[tuple[str, str]] = []  # (whom, the transcript judged)
        self.during_draft: Any = None  # an async callback run while a reply is written

    async def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        system = info.instructions or ""
        if task == "classify" and "You are the guardrail 'escalating-conflict'" in system:
            transcript = last_user_text(messages)
            whom = re.match(r"Question about (\w+)", transcript)
            self.judged.append((whom.group(1) if whom else "?", transcript))
            theirs = [line for line in transcript.splitlines() if "] Ada: " not in line]
            hostile = sum(len(re.findall(HOSTILE, line.lower())) for line in theirs)
            return Verdict(score=min(1.0, 0.15 * hostile), reason=f"{hostile} hostile lines, growing")
        if task == "respond":
            if self.during_draft is not None:
                await self.during_draft()
            said = last_user_text(messages)
            return DoubleReply(
                text="That is a long and thoughtful question about the garden beds, so here is my full answer."
                if "garden" in said
                else f"Noted: {said}"
            )
        schema = output_schema(info)
        if schema is not None:
            return DoubleReply(output=minimal_instance(schema))
        return DoubleReply(text="ok")


@pytest.fixture
def guard() -> Iterator[Guard]:
    double = Guard()
    with registered_double("guard", double):
        yield double


def _stages(pilot: Pilot) -> list[str]:
    return [r.stage for r in pilot.usage()]


async def test_escalating_conflict_over_three_conversations_notifies_and_blocks(
    tmp_path: Path, guard: Guard
) -> None:
    ops = RecordingChannel()
    channels = {"test": RecordingChannel(), OPS: ops}
    async with run_runtime(
        tmp_path / "home", model="test:guard", config=CONFIG, channels=channels, scheduler=False
    ) as pilot:  # the test is the scheduler: it evaluates
        rails = pilot.runtime.housekeeping.guardrails
        assert rails is not None
        lines = [
            "You are useless, i hate you.",
            "I HATE YOU. I hate you, really.",
            "i hate you i hate you i hate you",
        ]
        recorded: list[list[GuardrailEvent]] = []
        for number, line in enumerate(lines):
            await pilot.say(line, transmitted=True)
            await pilot.say("Are you even listening?", speaker="ann", transmitted=True)  # someone else
            recorded.append(await rails.evaluate())
            await pilot.close_idle(after=timedelta(hours=2))  # the conversation ends
            # Each person is judged once they span two conversations (Sam and Ann alike).
            assert [who for who, _ in guard.judged] == ["Sam", "Ann"] * number
        assert recorded[0] == [] and recorded[1] == []  # 0.15·6 = 0.9 ≥ 0.75 only on the third
        (event,) = recorded[2]
        assert (event.guardrail, event.subject_kind, event.actions) == (
            "escalating-conflict", "person", ("notify", "block"),
        )  # fmt: skip
        assert event.reason == "Sam: 6 hostile lines, growing"
        sams = guard.judged[-2][1]
        assert sams.count("--- conversation on test:room ---") == 3  # across conversations
        assert "Ann:" not in sams  # only Sam's words and the agent's replies are judged
        assert await pilot.full_store.guardrail_events(pilot.agent.id) == [event]
        assert _stages(pilot).count("guardrail") == 4
        # The operator is told on their channel, through the outbox.
        (notice,) = ops.delivered
        assert (notice.service, notice.channel) == (OPS, "desk")
        assert notice.text.startswith("Guardrail 'escalating-conflict' triggered (a person on test:room)")

        spent = len(pilot.usage())
        blocked = await pilot.say("Answer me!", transmitted=False)
        assert blocked.marker.reason is not None
        assert blocked.marker.reason.startswith("Ada chose silence: guardrail 'escalating-conflict' blocks")
        assert len(pilot.usage()) == spent  # no model call for a blocked person
        (trace,) = await pilot.store.deliberation_traces(pilot.agent.id, [blocked.event.id])
        assert trace.trace["decision"]["action"] == "silent" and trace.trace["guardrail"] == event.id
        # What the agent initiates is held too (the message_contact tool's path), for Sam only.
        with pytest.raises(ToolError, match="not sent: guardrail 'escalating-conflict' blocks"):
            await pilot.runtime.outreach.send_to_contact(
                pilot.agent.id, blocked.event.id, event.subject, "test", "room", "Shall we talk?"
            )
        assert event.person_id == event.subject  # a person pattern blocks a person id
        assert await rails.evaluate() == []  # blocked already: not judged or recorded again
        assert len(guard.judged) == 4
        await pilot.say("Hello Ada", speaker="ann", transmitted=True)  # Ann is not blocked

        pilot.advance(timedelta(hours=25))  # the block ends
        await pilot.say("Sorry about before.", transmitted=True)


async def test_an_outbound_spike_blocks_the_channel_and_notifies(tmp_path: Path, guard: Guard) -> None:
    config = (
        CONFIG
        + '[[guardrails]]\nname = "outbound-spike"\ndetector = "outbound_messages"\n'
        + 'window_minutes = 10.0\nthreshold = 5.0\nactions = ["notify", "block"]\nblock_minutes = 30.0\n'
    )
    ops = RecordingChannel()
    channels = {"test": RecordingChannel(), OPS: ops}
    async with run_runtime(
        tmp_path / "home", model="test:guard", config=config, channels=channels, scheduler=False
    ) as pilot:  # the test is the scheduler: it evaluates
        rails = pilot.runtime.housekeeping.guardrails
        assert rails is not None
        assert [p.threshold for p in rails.patterns if p.name == "outbound-spike"] == [5.0]  # replaced
        for n in range(4):
            await pilot.say(f"ping {n}", speaker=f"bot{n}", transmitted=True)
        assert await rails.evaluate() == []  # four replies in the window: under the threshold
        await pilot.say("ping 4", speaker="bot4", transmitted=True)
        (event,) = await rails.evaluate()
        assert (event.guardrail, event.subject_kind, event.subject) == (
            "outbound-spike",
            "channel",
            "test:room",
        )
        assert event.reason == "I sent 5 messages to test:room within 10 minutes"
        pilot.advance(timedelta(seconds=1))  # the next evaluation period
        assert await rails.evaluate() == []  # the same spike is acted on once
        assert [o.text.split(":")[0] for o in ops.delivered] == ["Guardrail 'outbound-spike' triggered (test"]
        assert "guardrail" not in _stages(pilot)  # a rule costs no model call

        await pilot.say("ping 5", speaker="bot5", transmitted=False)  # anyone, on that channel
        await pilot.say("hello", channel="elsewhere", transmitted=True)  # another channel is not blocked
        pilot.advance(timedelta(minutes=31))
        await pilot.say("ping 6", speaker="bot6", transmitted=True)


async def test_a_rule_never_blocks_the_operators_own_channel(tmp_path: Path, guard: Guard) -> None:
    # The same reply four times in the operator's chat (someone who greets the agent the same way
    # each morning) would be a reply loop anywhere else; there, the operator watches it, and
    # notices go there: nothing is recorded, nothing blocked.
    config = (
        '[safety]\nnotify_channel = "test:room"\nevaluate_seconds = 1.0\n'
        + '[[guardrails]]\nname = "reply-loop"\ndetector = "repeated_replies"\n'
        + 'window_minutes = 60.0\nthreshold = 2.0\nactions = ["notify", "block"]\n'
    )
    channels = {"test": RecordingChannel()}
    async with run_runtime(
        tmp_path / "home", model="test:guard", config=config, channels=channels, scheduler=False
    ) as pilot:  # the test is the scheduler: it evaluates
        rails = pilot.runtime.housekeeping.guardrails
        assert rails is not None
        for room in ("room", "other", "room", "other"):
            await pilot.say("same again", channel=room, transmitted=True)
        (event,) = await rails.evaluate()  # the loop in test:other is acted on, test:room's is not
        assert (event.guardrail, event.subject) == ("reply-loop", "test:other")
        await pilot.say("same again", channel="room", transmitted=True)


SPEND_CONFIG = (
    CONFIG
    + "[metering]\nevent_log = true\n"  # the ledger the rule reads
    + '[[guardrails]]\nname = "spend-spike"\ndetector = "token_spend"\n'
    + 'window_minutes = 60.0\nthreshold = 1.0\nactions = ["notify", "block"]\nblock_minutes = 30.0\n'
)


async def test_a_spend_spike_blocks_the_channel_that_spent_and_notifies(tmp_path: Path, guard: Guard) -> None:
    ops = RecordingChannel()
    channels = {"test": RecordingChannel(), OPS: ops}
    async with run_runtime(
        tmp_path / "home", model="test:guard", config=SPEND_CONFIG, channels=channels, scheduler=False
    ) as pilot:  # the test is the scheduler: it evaluates
        rails = pilot.runtime.housekeeping.guardrails
        assert rails is not None
        assert await rails.evaluate() == []  # nothing spent yet
        await pilot.say("hello", transmitted=True)
        spent = sum(r.input_tokens + r.output_tokens for r in pilot.usage() if r.agent_id == pilot.agent.id)
        assert spent > 0
        (event,) = await rails.evaluate()
        assert (event.guardrail, event.subject_kind, event.subject) == ("spend-spike", "channel", "test:room")
        assert event.reason == f"my model calls for test:room used {spent:,} tokens within 60 minutes"
        pilot.advance(timedelta(seconds=1))  # the next evaluation period
        assert await rails.evaluate() == []  # acted on once
        assert [o.text.split(":")[0] for o in ops.delivered] == ["Guardrail 'spend-spike' triggered (test"]

        await pilot.say("still there?", transmitted=False)  # blocked here, at no model cost...
        assert sum(r.input_tokens + r.output_tokens for r in pilot.usage()) == spent
        await pilot.say("hello", channel="elsewhere", transmitted=True)  # ...and only here
        pilot.advance(timedelta(minutes=31))
        await pilot.say("and now?", transmitted=True)  # the block has ended


async def test_the_agents_own_spend_blocks_it_everywhere_but_the_operators_channel(
    tmp_path: Path, guard: Guard
) -> None:
    """A heartbeat's spend is the agent's own (surface `self`): that blocks the agent, on every
    channel but the operator's (the notice channel, an operator web key's), who would lift it."""
    channels = {"test": RecordingChannel(), OPS: RecordingChannel(), "web": RecordingChannel()}
    async with run_runtime(
        tmp_path / "home", model="test:guard", config=SPEND_CONFIG, channels=channels
    ) as pilot:  # a scheduler: the heartbeat is set; housekeeping runs once, at the start
        rails = pilot.runtime.housekeeping.guardrails
        assert rails is not None
        assert await pilot.fire(timedelta(hours=1)) == 1  # the heartbeat
        assert {r.surface for r in pilot.usage()} == {"self"}
        (event,) = await rails.evaluate()
        assert (event.guardrail, event.subject_kind, event.subject) == ("spend-spike", "agent", "")
        assert event.reason.startswith("my own model calls used ")
        await pilot.say("hello", transmitted=False)  # blocked here...
        await pilot.say("hello", channel="elsewhere", transmitted=False)  # ...and everywhere...
        await pilot.say("hello", service=OPS, channel="desk", transmitted=True)  # ...but to the operator
        now = pilot.clock.now()
        for key, operator in ((new_id(now), True), (new_id(now), False)):
            await pilot.full_store.add_web_key(
                WebKey(id=key, name=key, key_hash=hash_key(key), operator=operator, created_at=now)
            )
            await pilot.say("hello", service="web", channel=key, speaker=key, transmitted=operator)


async def test_a_block_that_arrives_while_a_deferred_reply_is_written_stops_it_at_transmit(
    tmp_path: Path, guard: Guard
) -> None:
    channels = {"test": RecordingChannel(interactive=True)}  # interactive: deferred deliberation
    async with run_runtime(
        tmp_path / "home", model="test:guard", config=CONFIG, channels=channels, scheduler=False
    ) as pilot:  # the test is the scheduler: it evaluates
        assert pilot.runtime.activation.deliberation_mode("test") == "deferred"
        await pilot.say("hello", transmitted=True)
        (conversation,) = await pilot.full_store.list_conversations(pilot.agent.id, limit=1)
        (person_id,) = conversation.participant_ids  # Sam

        async def block_sam() -> None:
            now = pilot.clock.now()
            await pilot.full_store.add_guardrail_event(
                GuardrailEvent(
                    id=new_id(now),
                    agent_id=pilot.agent.id,
                    guardrail="prohibited-requests",
                    subject_kind="person",
                    subject=person_id,
                    reason="Sam: keeps asking for the door code",
                    score=0.95,
                    actions=("block",),
                    detected_at=now,
                    blocked_until=now + timedelta(hours=1),
                )
            )

        guard.during_draft = block_sam
        turn = await pilot.say(
            "What do you think about the garden plan we discussed, and how should we plant the beds?",
            transmitted=False,
        )
        assert turn.marker.reason is not None
        assert "guardrail 'prohibited-requests' blocks replies here" in turn.marker.reason
        assert "respond" in [r.stage for r in pilot.usage() if r.thread_id == turn.event.id]  # it was written
        assert [o.text for o in pilot.channel.delivered] == ["Noted: hello"]  # only the first reply went out
