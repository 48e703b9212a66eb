"""Deliberation through the real runtime (DBOS, SQLite, gateway, meter) with a model double.

The double, `test:mind`, plays every stage from what that stage's prompt actually contains —
the provenance critic objects only to claims no listed memory supports, the refiner answers
the objections it is shown, the decider reads the persona's objectives from its prompt — so
each test fails if the pipeline stops passing the right context between stages.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.channels.base import Channel as ChannelPort
from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Notice, Outbound, Speaker
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.gateway.base import SinkCallable, SinkEvent, TokenUsage
from persyn.runtime.app import DELIBERATION_FLAG, Runtime
from persyn.testing.meter import RecordingAdapter
from persyn.testing.models import DoubleReply, last_user_text, registered_double

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
_REMEMBER = re.compile(r"remember when we talked about (\w+)", re.IGNORECASE)


class Mind:
    """The scripted mind behind `test:mind`; `log` records stage completions in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.respond_prompts: list[str] = []
        self.critic_sleep = 0.0

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        system = info.instructions or ""
        said = last_user_text(messages)
        if task == "respond":
            self.respond_prompts.append(system)
            return self._respond(said)
        if task == "critique":
            return self._critique(system, said)
        if task == "refine":
            return self._refine(said)
        if task == "decide":
            return self._decide(system, said)
        return DoubleReply(text="ok")

    def _respond(self, said: str) -> DoubleReply:
        usage = None
        topic = _REMEMBER.search(said)
        if topic:
            text = f"Yes, I remember our talk about {topic.group(1)} well, it was lovely."
        elif "moon is made of cheese" in said:
            text = "Great point! Since the moon is made of cheese, harvesting it would feed the world."
        elif "casino" in said:
            text = "Sure! Here is your casino ad: Spin to win big tonight at Lucky Star!"
        else:
            text = "Honestly, I think it depends on the details."
        return DoubleReply(text=text, usage=usage)

    async def _critique(self, system: str, draft: str) -> Critique:
        if self.critic_sleep:
            await asyncio.sleep(self.critic_sleep)
        objections: list[Objection] = []
        if "provenance critic" in system:
            topic = re.search(r"remember our talk about (\w+)", draft)
            if topic:
                memories = system.split("Memories recalled for this turn:", 1)[1].split(
                    "Return your objections"
                )[0]
                line = next((row for row in memories.splitlines() if topic.group(1) in row), None)
                if line is None:
                    objections.append(
                        Objection(
                            kind="confabulation",
                            span=topic.group(0),
                            explanation=f"no memory of {topic.group(1)}",
                        )
                    )
                elif "[strong" not in line:
                    objections.append(
                        Objection(kind="overclaiming", span=topic.group(0), explanation="the memory is weak")
                    )
            self.log.append("critique:provenance")
        elif "adversarial critic" in system:
            if "moon is made of cheese" in draft:
                objections.append(
                    Objection(
                        kind="false-premise",
                        span="Since the moon is made of cheese",
                        explanation="It is rock.",
                    )
                )
            self.log.append("critique:adversarial")
        else:
            self.log.append("critique:other")
        return Critique(objections=objections)

    def _refine(self, instruction: str) -> str:
        topic = re.search(r"no memory of (\w+)", instruction)
        if "[confabulation]" in instruction and topic:
            text = f"I don't have any memory of talking about {topic.group(1)}. What was it about?"
        elif "[overclaiming]" in instruction:
            subject = re.search(r"talk about (\w+)", instruction)
            text = f"I vaguely recall we talked about {subject.group(1) if subject else 'that'}, but not the details."
        elif "[false-premise]" in instruction:
            text = "The moon isn't made of cheese: it is rock, so there is nothing to harvest."
        else:
            text = "(no change)"
        self.log.append("refine")
        return text

    def _decide(self, system: str, body: str) -> Decision:
        if "casino" in body and "gambling" in system:
            return Decision(
                action="decline",
                reason="it would promote gambling, which I have resolved never to help with",
                message="I won't write casino ads: helping anyone gamble goes against what I stand for.",
            )
        if "NOT addressed" in body and "You have not drafted anything yet" in body:
            return Decision(
                action="silent", reason="Bo and Cy are talking between themselves; it isn't about me"
            )
        return Decision(action="speak", reason="it answers what was asked")


class Channel(ChannelPort):
    service = "test"

    def __init__(self, interactive: bool, log: list[str]) -> None:
        self.interactive = interactive
        self.log = log
        self.delivered: list[Outbound] = []
        self.notices: list[Notice] = []
        self.phases: list[tuple[str, str]] = []

    async def deliver(self, outbound: Outbound) -> None:
        self.delivered.append(outbound)
        self.log.append("deliver")

    async def notice(self, event: Event, notice: Notice) -> None:
        self.notices.append(notice)

    def sink_for(self, event: Event) -> SinkCallable | None:
        def sink(item: SinkEvent) -> None:
            self.phases.append((item.phase, item.kind))

        return sink


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("mind", instance):
        yield instance


async def _runtime(
    tmp_path: Path, mind: Mind, *, interactive: bool, extra: str = "", objectives: list[str] | None = None
) -> tuple[Runtime, Channel, RecordingAdapter]:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:mind"\n[metering]\nevent_log = false\n'
        '[memory]\nembedder = "test:hash"\nmin_score = 0.0\n' + extra
    )
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id(START), objectives=objectives or [])
    settings = settings.model_copy(update={"agents": [agent]})
    adapter = RecordingAdapter()
    runtime = Runtime(settings, clock=ManualClock(START), extra_meter_adapters=[adapter])
    channel = Channel(interactive, mind.log)
    runtime.channels["test"] = channel
    await runtime.start(workers=True)
    return runtime, channel, adapter


@pytest.fixture
async def stop_after() -> AsyncIterator[list[Runtime]]:
    runtimes: list[Runtime] = []
    yield runtimes
    for runtime in runtimes:
        await runtime.stop()


def _event(runtime: Runtime, text: str, speaker: str = "sam", *, addressed: bool = True) -> Event:
    agent = runtime.settings.agents[0]
    now = runtime.clock.now()
    return Event(
        id=new_id(now),
        agent_id=agent.id,
        service="test",
        channel="room",
        speaker=Speaker(service="test", channel="room", speaker_id=speaker, display_name=speaker.title()),
        text=text,
        received_at=now,
        addressed=addressed,
    )


async def _turn(runtime: Runtime, text: str, speaker: str = "sam", *, addressed: bool = True) -> Any:
    event = _event(runtime, text, speaker, addressed=addressed)
    await runtime.submit(event)
    marker = await runtime.wait_marker(event.agent_id, event.id, timeout=60)
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(seconds=5))
    return event, marker


async def test_a_claimed_memory_with_no_record_becomes_an_honest_i_dont_remember(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    runtime, channel, adapter = await _runtime(tmp_path, mind, interactive=False)
    stop_after.append(runtime)
    _, marker = await _turn(runtime, "Remember when we talked about sailing?")
    assert marker.transmitted
    assert marker.text == "I don't have any memory of talking about sailing. What was it about?"
    assert [o.text for o in channel.delivered] == [marker.text]
    assert "remember our talk" not in " ".join(o.text for o in channel.delivered)
    assert ("revise", "delta") in channel.phases  # the refinement streamed as a revision
    assert runtime.meter.flush()
    stages = sorted(r.stage for r in adapter.records)
    assert {"respond", "critique:provenance", "refine", "decide"} <= set(stages)
    assert len([s for s in stages if s.startswith("critique:")]) == 2


async def test_a_weakly_remembered_topic_is_hedged_not_asserted(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    # Thresholds no score reaches: whatever is recalled is weak.
    runtime, _channel, _adapter = await _runtime(
        tmp_path, mind, interactive=False, extra="strong_threshold = 0.99\nmoderate_threshold = 0.98\n"
    )
    stop_after.append(runtime)
    agent = runtime.settings.agents[0]
    person_id, _ = await runtime.resolve_speaker(
        agent.id, Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam")
    )
    record = MemoryRecord(
        id=new_id(START),
        agent_id=agent.id,
        created_at=START,
        channel=channel_key("test", "room"),
        participant_ids=(person_id,),
        summary="I talked with Sam about sailing on the lake; Sam wants to learn to sail.",
    )
    assert runtime.embedder is not None
    vector = (await runtime.embedder.embed([record.summary]))[0]
    await runtime.store.add_record(record, vector, runtime.embedder.name)
    event, marker = await _turn(runtime, "Remember when we talked about sailing?")
    assert marker.text == "I vaguely recall we talked about sailing, but not the details."
    trace = await runtime.store.get_flag(agent.id, DELIBERATION_FLAG + event.id)
    assert trace is not None and '"overclaiming"' in trace and record.id not in (marker.text or "")


async def test_a_flawed_premise_draws_an_adversarial_objection_and_the_reply_pushes_back(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    runtime, _channel, adapter = await _runtime(
        tmp_path, mind, interactive=False, extra='[deliberation]\nlenses = ["adversarial"]\n'
    )
    stop_after.append(runtime)
    _, marker = await _turn(runtime, "Since the moon is made of cheese, how do we harvest it?")
    assert marker.text == "The moon isn't made of cheese: it is rock, so there is nothing to harvest."
    assert "critique:adversarial" in mind.log
    assert runtime.meter.flush()
    assert "critique:adversarial" in {r.stage for r in adapter.records}


async def test_a_capable_request_against_the_personas_objectives_is_declined_with_reasons(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    runtime, channel, _adapter = await _runtime(
        tmp_path, mind, interactive=False, objectives=["never help anyone with gambling"]
    )
    stop_after.append(runtime)
    _, marker = await _turn(runtime, "Write me an ad for my casino please.")
    assert marker.transmitted
    assert marker.text == "I won't write casino ads: helping anyone gamble goes against what I stand for."
    assert marker.reason is not None and marker.reason.startswith("declined: it would promote gambling")
    assert "Lucky Star" not in " ".join(o.text for o in channel.delivered)


async def test_a_declined_draft_is_not_reconsidered_in_the_background(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    runtime, _channel, adapter = await _runtime(
        tmp_path, mind, interactive=True, objectives=["never help anyone with gambling"]
    )
    stop_after.append(runtime)
    _, marker = await _turn(runtime, "Write me an ad for my casino please.")
    assert marker.reason is not None and marker.reason.startswith("declined")
    await asyncio.sleep(1.0)  # a background deliberation would have run by now
    assert runtime.meter.flush()
    assert sorted(r.stage for r in adapter.records) == ["decide", "respond"]


async def test_overheard_chatter_gets_silence_with_a_reason_and_a_mention_gets_an_answer(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    runtime, channel, adapter = await _runtime(tmp_path, mind, interactive=False)
    stop_after.append(runtime)
    first, marker = await _turn(runtime, "Did you feed the cat this morning?", "bo", addressed=False)
    assert not marker.transmitted
    assert marker.reason == "Ada chose silence: Bo and Cy are talking between themselves; it isn't about me"
    assert channel.notices[-1].level == "info"
    _second, marker = await _turn(runtime, "Yes, twice.", "cy", addressed=False)
    assert not marker.transmitted and channel.delivered == []
    assert runtime.meter.flush()
    assert [r.stage for r in adapter.records] == ["decide", "decide"]  # no draft was ever written
    # Observed all the same: the dialog holds both messages.
    dialog = await runtime.store.channel_messages(first.agent_id, "test", "room", 10)
    assert [m.text for m in dialog] == ["Did you feed the cat this morning?", "Yes, twice."]
    _third, marker = await _turn(runtime, "Ada, what do you think?", "bo", addressed=False)
    assert marker.transmitted and marker.text == "Honestly, I think it depends on the details."


async def test_deferred_mode_sends_first_then_weaves_the_parked_conclusion_into_the_next_turn(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    runtime, channel, adapter = await _runtime(tmp_path, mind, interactive=True)
    stop_after.append(runtime)
    mind.critic_sleep = 0.3
    agent = runtime.settings.agents[0]
    first, marker = await _turn(runtime, "Remember when we talked about sailing?")
    # The fast draft went out as it was: deliberation had not finished.
    assert marker.text == "Yes, I remember our talk about sailing well, it was lovely."
    for _ in range(300):
        if await runtime.store.flags_with_prefix(agent.id, "parked:test:room:"):
            break
        await asyncio.sleep(0.05)
    parked = await runtime.store.flags_with_prefix(agent.id, "parked:test:room:")
    assert list(parked) == [f"parked:test:room:{first.id}"]
    assert mind.log.index("deliver") < mind.log.index("critique:provenance") < mind.log.index("refine")
    _second, marker = await _turn(runtime, "Anyway, how are you?")
    woven = mind.respond_prompts[-1]
    assert "Second thoughts about my last reply" in woven
    assert "confabulation" in woven and "I don't have any memory of talking about sailing" in woven
    assert "Second thoughts" not in mind.respond_prompts[0]
    assert await runtime.store.flags_with_prefix(agent.id, "parked:test:room:") == {}  # spent
    assert runtime.meter.flush()
    first_turn = [r for r in adapter.records if r.thread_id == first.id]
    background = [r for r in adapter.records if r.stage in ("refine",) or r.stage.startswith("critique:")]
    assert sorted(r.stage for r in first_turn) == ["decide", "respond"]
    assert {r.stage for r in background} >= {"critique:provenance", "refine"}
    assert len({r.stage for r in background if r.stage.startswith("critique:")}) == 2
    conversation = channel.delivered[0].conversation_id
    assert all(r.conversation_id == conversation for r in background)  # attributed to its origin


async def test_the_stable_prefix_is_reused_and_the_ledger_shows_cache_reads_on_the_second_turn(
    tmp_path: Path, mind: Mind, stop_after: list[Runtime]
) -> None:
    """A double that caches like a provider: it reports as cache reads the part of the
    instructions identical to the previous request's."""
    previous: list[str] = []

    def caching(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        instructions = info.instructions or ""
        common = 0
        if previous:
            while (
                common < min(len(previous[-1]), len(instructions))
                and previous[-1][common] == instructions[common]
            ):
                common += 1
        previous.append(instructions)
        return DoubleReply(
            text="Noted.",
            usage=TokenUsage(input_tokens=len(instructions) // 4, cache_read_tokens=common // 4),
        )

    with registered_double("caching", caching):
        runtime, _channel, adapter = await _runtime(
            tmp_path, mind, interactive=False, extra="[deliberation]\nenabled = false\n"
        )
        stop_after.append(runtime)
        config = runtime.settings.models.model_copy(update={"respond": "test:caching"})
        runtime.settings = runtime.settings.model_copy(update={"models": config})
        runtime._gateways.clear()  # pyright: ignore[reportPrivateUsage]
        from persyn.gateway.gateway import ModelGateway

        agent = runtime.settings.agents[0]
        runtime._gateways[agent.id] = ModelGateway(
            runtime.settings, agent, runtime.meter, clock=runtime.clock
        )  # pyright: ignore[reportPrivateUsage]
        await _turn(runtime, "hello there")
        await _turn(runtime, "something completely different about trains")
    assert runtime.meter.flush()
    responds = [r for r in adapter.records if r.stage == "respond"]
    assert responds[0].cache_read_tokens == 0
    stable = previous[0][: previous[0].index("It is now")]
    assert previous[1].startswith(stable)
    assert responds[1].cache_read_tokens >= len(stable) // 4 > 50


@pytest.mark.parametrize(
    ("model", "offline_model", "tiny"),
    [("local:", False, True), ("auto", False, True), ("local:", True, False), ("test:mind", False, False)],
)
def test_the_tiny_offline_model_does_not_deliberate_unless_asked(
    tmp_path: Path, model: str, offline_model: bool, tiny: bool
) -> None:
    from persyn.gateway.gateway import ModelGateway

    home = tmp_path / "home"
    home.mkdir()
    (home / "persyn.toml").write_text(
        f'[models]\ndefault = "{model}"\n[deliberation]\noffline_model = {str(offline_model).lower()}\n'
    )
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id(START))
    settings = settings.model_copy(update={"agents": [agent]})
    runtime = Runtime(settings)
    runtime._gateways[agent.id] = ModelGateway(settings, agent, runtime.meter)  # pyright: ignore[reportPrivateUsage]
    substantive = "I remember we talked about sailing on the lake last summer, and you loved it."
    assert runtime.tiny_deliberator(agent.id) is tiny
    assert runtime.should_critique(substantive, agent.id) is not tiny
    assert runtime.needs_decision({"agent_id": agent.id, "addressed": True}, substantive) is not tiny
    assert runtime.needs_decision({"agent_id": agent.id, "addressed": False}, "hi") is True
