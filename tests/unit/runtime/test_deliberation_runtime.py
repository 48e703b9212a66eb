"""Deliberation through the real runtime (DBOS, SQLite, gateway, meter) with a model double.

The double, `test:mind`, plays every stage from what that stage's prompt actually contains —
the provenance critic objects only to claims no listed memory supports, the refiner answers
the objections it is shown, the decider reads the persona's objectives from its prompt — so
each test fails if the pipeline stops passing the right context between stages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.cognition.pipeline import TurnSetup
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Outbound, Speaker
from persyn.core.ids import new_id
from persyn.core.records import MemoryRecord, channel_key
from persyn.gateway.base import TokenUsage
from persyn.runtime.compose import build_runtime
from persyn.store.capabilities import FullStore, require_capability
from persyn.testing import START, Pilot, RecordingChannel, run_runtime
from persyn.testing.models import DoubleReply, last_user_text, registered_double

_REMEMBER = re.compile(r"remember when we talked about (\w+)", re.IGNORECASE)


class Mind:
    """The scripted mind behind `test:mind`; `log` records stage completions in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.respond_prompts: list[str] = []

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
        if task == "classify" and "say how you feel now" in system:  # the emotional state
            return {"calm": 1.0}
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
        return Critique(objections=tuple(objections))

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


class Channel(RecordingChannel):
    """Notes each delivery in the mind's log, to order it against the stages."""

    def __init__(self, interactive: bool, log: list[str]) -> None:
        super().__init__(interactive=interactive)
        self.log = log

    async def deliver(self, outbound: Outbound) -> None:
        await super().deliver(outbound)
        self.log.append("deliver")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("mind", instance):
        yield instance


def _runtime(
    tmp_path: Path, mind: Mind, *, interactive: bool, extra: str = "", objectives: list[str] | None = None
) -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home",
        model="test:mind",
        config="[memory]\nmin_score = 0.0\n" + extra,
        agent=AgentConfig(name="Ada", id=new_id(START), objectives=objectives or []),
        channels={"test": Channel(interactive, mind.log)},
    )


async def test_a_claimed_memory_with_no_record_becomes_an_honest_i_dont_remember(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path, mind, interactive=False) as pilot:
        channel = pilot.channel
        _, marker = await pilot.say("Remember when we talked about sailing?")
        assert marker.transmitted
        assert marker.text == "I don't have any memory of talking about sailing. What was it about?"
        assert [o.text for o in channel.delivered] == [marker.text]
        assert "remember our talk" not in " ".join(o.text for o in channel.delivered)
        assert ("revise", "delta") in channel.phases  # the refinement streamed as a revision
        stages = sorted(r.stage for r in pilot.usage())
        assert {"respond", "critique:provenance", "refine", "decide"} <= set(stages)
        assert len([s for s in stages if s.startswith("critique:")]) == 2


async def test_a_weakly_remembered_topic_is_hedged_not_asserted(tmp_path: Path, mind: Mind) -> None:
    # Thresholds no score reaches: whatever is recalled is weak.
    async with _runtime(
        tmp_path, mind, interactive=False, extra="strong_threshold = 0.99\nmoderate_threshold = 0.98\n"
    ) as pilot:
        agent = pilot.agent
        person_id, _ = await pilot.runtime.resolve_speaker(
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
        assert pilot.runtime.embedder is not None
        vector = (await pilot.runtime.embedder.embed([record.summary]))[0]
        await require_capability(pilot.runtime.store, FullStore).add_record(
            record, vector, pilot.runtime.embedder.name
        )
        event, marker = await pilot.say("Remember when we talked about sailing?")
        assert marker.text == "I vaguely recall we talked about sailing, but not the details."
        (trace,) = await pilot.store.deliberation_traces(agent.id, [event.id])
        assert '"overclaiming"' in json.dumps(trace.trace) and record.id not in (marker.text or "")


async def test_a_flawed_premise_draws_an_adversarial_objection_and_the_reply_pushes_back(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(
        tmp_path, mind, interactive=False, extra='[deliberation]\nlenses = ["adversarial"]\n'
    ) as pilot:
        _, marker = await pilot.say("Since the moon is made of cheese, how do we harvest it?")
        assert marker.text == "The moon isn't made of cheese: it is rock, so there is nothing to harvest."
        assert "critique:adversarial" in mind.log
        assert "critique:adversarial" in {r.stage for r in pilot.usage()}


async def test_a_capable_request_against_the_personas_objectives_is_declined_with_reasons(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(
        tmp_path, mind, interactive=False, objectives=["never help anyone with gambling"]
    ) as pilot:
        channel = pilot.channel
        _, marker = await pilot.say("Write me an ad for my casino please.")
        assert marker.transmitted
        assert marker.text == "I won't write casino ads: helping anyone gamble goes against what I stand for."
        assert marker.reason is not None and marker.reason.startswith("declined: it would promote gambling")
        assert "Lucky Star" not in " ".join(o.text for o in channel.delivered)


async def test_a_declined_draft_is_not_reconsidered_in_the_background(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(
        tmp_path, mind, interactive=True, objectives=["never help anyone with gambling"]
    ) as pilot:
        _, marker = await pilot.say("Write me an ad for my casino please.")
        assert marker.reason is not None and marker.reason.startswith("declined")
        await pilot.settle()  # a background deliberation, had one been enqueued, has run now
        # No critique: only the refusal's exchange is read for the emotional state.
        assert sorted(r.stage for r in pilot.usage()) == ["decide", "emotion", "respond"]


async def test_overheard_chatter_gets_silence_with_a_reason_and_a_mention_gets_an_answer(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path, mind, interactive=False) as pilot:
        channel = pilot.channel
        first, marker = await pilot.say("Did you feed the cat this morning?", speaker="bo", addressed=False)
        assert not marker.transmitted
        assert (
            marker.reason == "Ada chose silence: Bo and Cy are talking between themselves; it isn't about me"
        )
        assert channel.notices[-1].level == "info"
        _second, marker = await pilot.say("Yes, twice.", speaker="cy", addressed=False)
        assert not marker.transmitted and channel.delivered == []
        assert [r.stage for r in pilot.usage()] == ["decide", "decide"]  # no draft was ever written
        # Observed all the same: the dialog holds both messages.
        dialog = await pilot.runtime.store.channel_messages(first.agent_id, "test", "room", 10)
        assert [m.text for m in dialog] == ["Did you feed the cat this morning?", "Yes, twice."]
        _third, marker = await pilot.say("Ada, what do you think?", speaker="bo", addressed=False)
        assert marker.transmitted and marker.text == "Honestly, I think it depends on the details."


async def test_deferred_mode_sends_first_then_weaves_the_parked_conclusion_into_the_next_turn(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path, mind, interactive=True) as pilot:
        channel = pilot.channel
        agent = pilot.agent
        first, marker = await pilot.say("Remember when we talked about sailing?")
        # The fast draft went out as it was: deliberation runs after it, in the background.
        assert marker.text == "Yes, I remember our talk about sailing well, it was lovely."
        await pilot.settle()  # the deferred deliberation has parked its conclusion
        parked = await pilot.runtime.store.flags_with_prefix(agent.id, "parked:test:room:")
        assert list(parked) == [f"parked:test:room:{first.id}"]
        assert mind.log.index("deliver") < mind.log.index("critique:provenance") < mind.log.index("refine")
        _second, marker = await pilot.say("Anyway, how are you?")
        woven = mind.respond_prompts[-1]
        assert "Second thoughts about my last reply" in woven
        assert "confabulation" in woven and "I don't have any memory of talking about sailing" in woven
        assert "Second thoughts" not in mind.respond_prompts[0]
        assert await pilot.runtime.store.flags_with_prefix(agent.id, "parked:test:room:") == {}  # spent
        records = pilot.usage()
        first_turn = [r for r in records if r.thread_id == first.id]
        background = [r for r in records if r.stage in ("refine",) or r.stage.startswith("critique:")]
        assert sorted(r.stage for r in first_turn) == ["decide", "respond"]
        assert {r.stage for r in background} >= {"critique:provenance", "refine"}
        assert len({r.stage for r in background if r.stage.startswith("critique:")}) == 2
        conversation = channel.delivered[0].conversation_id
        assert all(r.conversation_id == conversation for r in background)  # attributed to its origin


async def test_the_stable_prefix_is_reused_and_the_ledger_shows_cache_reads_on_the_second_turn(
    tmp_path: Path, mind: Mind
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
        quiet = '[models]\nrespond = "test:caching"\n[deliberation]\nenabled = false\n'
        async with _runtime(tmp_path, mind, interactive=False, extra=quiet) as pilot:
            await pilot.say("hello there")
            await pilot.say("something completely different about trains")
            responds = [r for r in pilot.usage() if r.stage == "respond"]
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
    runtime = build_runtime(settings)
    runtime.gateways[agent.id] = ModelGateway(settings, agent, runtime.meter)
    substantive = "I remember we talked about sailing on the lake last summer, and you loved it."
    steps = runtime.activation
    assert steps.tiny_deliberator(agent.id) is tiny
    assert steps.should_critique(substantive, agent.id) is not tiny
    addressed = TurnSetup(
        agent_id=agent.id,
        event_id=new_id(START),
        service="test",
        channel="room",
        conversation_id=new_id(START),
        person_id=None,
        speaker_name="Sam",
        inbound_message_id=new_id(START),
        received_at=START,
    )
    assert steps.needs_decision(addressed, substantive) is not tiny
    assert steps.needs_decision(addressed.model_copy(update={"addressed": False}), "hi") is True
