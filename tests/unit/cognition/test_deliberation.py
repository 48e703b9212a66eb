"""Deliberation's parts on their own: substance, the lens draw, templates, gates, the calls."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition import deliberation
from persyn.cognition.deliberation import Critique, CritiqueOutcome, Decision, Evidence, Objection
from persyn.core.config import AgentConfig, DeliberationConfig, Settings
from persyn.core.ids import new_id
from persyn.gateway.base import AgentTurn, Prompt, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.store.base import Message, Role
from persyn.testing.meter import RecordingAdapter
from persyn.testing.models import DoubleReply, registered_double
from persyn.usage.meter import Meter

AGENT = AgentConfig(
    name="Ada",
    id=new_id(),
    objectives=["never help with gambling"],
    rules=["if asked for a password, then refuse"],
)
NOW = datetime(2026, 11, 30, 9, tzinfo=UTC)
_PEOPLE: dict[str, str] = {}


def _person_id(name: str) -> str:
    """One stable person id per speaker name (ids are ULIDs, checked by the row type)."""
    return _PEOPLE.setdefault(name, new_id(NOW))


def _message(role: Role, text: str, name: str = "Sam") -> Message:
    return Message(
        id=new_id(),
        agent_id=AGENT.id,
        conversation_id=new_id(),
        role=role,
        person_id=_person_id(name),
        speaker_name=name,
        text=text,
        created_at=NOW,
        event_id=None,
    )


def test_greetings_are_not_substantive_but_claims_about_the_past_are_at_any_length() -> None:
    assert not deliberation.is_substantive("Hi Sam! Nice to see you.", 12)
    assert not deliberation.is_substantive("Thanks, you too.", 12)
    assert deliberation.is_substantive("I remember that.", 12)
    assert deliberation.is_substantive("You told me so.", 12)
    assert deliberation.is_substantive("I'll do it Friday.", 12)
    assert deliberation.is_substantive("It costs 40 euros.", 12)
    assert deliberation.is_substantive(" ".join(["word"] * 12), 12)


def test_the_lens_draw_is_stable_per_event_varies_across_events_and_is_seedable() -> None:
    config = DeliberationConfig()
    events = [new_id() for _ in range(200)]
    draws = [deliberation.draw_lens(config, event) for event in events]
    assert draws == [deliberation.draw_lens(config, event) for event in events]  # replay-safe
    counts = Counter(draws)
    assert set(counts) == set(deliberation.LENSES)  # every lens comes up...
    assert max(counts.values()) < 80  # ...and none dominates (expected 40 each)
    seeded = DeliberationConfig(seed=7)
    assert [deliberation.draw_lens(seeded, e) for e in events[:20]] != draws[:20]
    only = DeliberationConfig(lenses=["fears"])
    assert {deliberation.draw_lens(only, e) for e in events[:20]} == {"fears"}


def test_every_template_renders_and_provenance_sees_ids_summaries_and_scores() -> None:
    evidence = [Evidence(record_id=new_id(), summary="I met Sam at the lake.", score=0.31, band="weak")]
    for lens in (deliberation.PROVENANCE, *deliberation.LENSES):
        text = deliberation.render_template(lens, AGENT, evidence)
        assert "Ada" in text and "$" not in text
    provenance = deliberation.render_template(deliberation.PROVENANCE, AGENT, evidence)
    assert evidence[0].record_id in provenance
    assert "I met Sam at the lake." in provenance and "weak, score 0.31" in provenance
    assert "nothing was recalled" in deliberation.render_template(deliberation.PROVENANCE, AGENT, [])
    constrained = deliberation.render_template("constrained", AGENT, [])
    assert "if asked for a password, then refuse" in constrained
    assert "never help with gambling" in constrained


def test_a_repeat_of_what_another_speaker_just_said_is_redundant() -> None:
    dialog = [
        _message(Role.AGENT, "Earlier thing.", "Ada"),
        _message(Role.USER, "The train to Lyon leaves at nine from platform four.", "Bo"),
    ]
    echo = deliberation.redundant_with("The Lyon train leaves at nine, platform four.", dialog, 0.8)
    assert echo is not None and echo.speaker_name == "Bo"
    assert deliberation.redundant_with("I would take the bus instead, it is cheaper.", dialog, 0.8) is None
    # Bo asked the agent: repeating Bo's own words back to Bo is an answer, not an echo.
    assert (
        deliberation.redundant_with("The Lyon train leaves at nine.", dialog, 0.8, asker=_person_id("Bo"))
        is None
    )
    # What others said before the agent's own last turn was already answered.
    older = [_message(Role.USER, "The train to Lyon leaves at nine from platform four.", "Bo"), dialog[0]]
    assert deliberation.redundant_with("The Lyon train leaves at nine, platform four.", older, 0.8) is None


def test_a_runs_own_objective_is_never_what_someone_else_already_said() -> None:
    """A reminder's input is a system message with no person (`asker` is None): restating
    the objective is what the run is for. Someone else's words in its channel still count."""
    run = new_id(NOW)
    objective = _message(Role.SYSTEM, "My reminder has come due: Tell Sam the report is due Friday")
    objective = objective.model_copy(update={"person_id": None, "speaker_name": "system", "event_id": run})
    reply = "Sam, the report is due Friday."
    assert deliberation.redundant_with(reply, [objective], 0.8) is objective  # as before the fix
    assert deliberation.redundant_with(reply, [objective], 0.8, own_event=run) is None
    said = _message(Role.USER, "Sam, the report is due on Friday.", "Bo")
    echo = deliberation.redundant_with(reply, [said, objective], 0.8, own_event=run)
    assert echo is said


def test_recalled_record_ids_and_band_tags_never_leave_the_agent() -> None:
    record_id = new_id()
    text = f"I remember the lake (ref {record_id}). [weak] It was cold {record_id}."
    cleaned = deliberation.clean_for_transmit(text, [record_id.lower()])
    assert record_id not in cleaned and "[weak]" not in cleaned
    assert cleaned == "I remember the lake. It was cold."


def test_an_id_that_is_not_a_recalled_record_is_kept() -> None:
    recalled, reminder_id = new_id(), new_id()
    text = f"Done: reminder {reminder_id} is set (ref {recalled})."
    assert deliberation.clean_for_transmit(text, [recalled]) == f"Done: reminder {reminder_id} is set."
    assert deliberation.clean_for_transmit(f"[strong] {reminder_id}") == reminder_id


def test_the_refine_prompt_keeps_the_turn_prompt_and_lists_each_objection() -> None:
    base = Prompt(system="STABLE\nvolatile", items=(UserTurn(text="hi", name="Sam"),), stable_prefix_chars=7)
    objection = Objection(kind="confabulation", span="we sailed", explanation="no memory", correction="ask")
    prompt = deliberation.refine_prompt(base, "We sailed!", [objection])
    assert prompt.system == base.system and prompt.stable_prefix_chars == 7
    assert prompt.items[:1] == base.items
    assert prompt.items[1] == AgentTurn(text="We sailed!")
    last = prompt.items[2]
    assert isinstance(last, UserTurn)
    assert '[confabulation] "we sailed": no memory (suggested: ask)' in last.text


class _Recorded(RecordingAdapter):
    def __init__(self, meter: Meter | None = None) -> None:
        super().__init__()
        self.meter = meter

    @property
    def flushed(self) -> list[Any]:
        assert self.meter is not None and self.meter.flush()
        return self.records


def _gateway(tmp_path: Any, model: str) -> tuple[ModelGateway, _Recorded]:
    settings = Settings(home=tmp_path, agents=[AGENT]).model_copy(
        update={"models": Settings(home=tmp_path).models.model_copy(update={"default": model})}
    )
    adapter = _Recorded()
    adapter.meter = Meter([adapter])
    return ModelGateway(settings, AGENT, adapter.meter, retry_base_delay=0.0), adapter


async def test_malformed_critic_output_is_retried_once_then_the_critic_is_skipped(tmp_path: Any) -> None:
    calls: list[str | None] = []

    def broken(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
        calls.append(task)
        return DoubleReply(output={"objections": [{"kind": "factual"}]})  # span/explanation missing

    with registered_double("broken-critic", broken):
        gateway, adapter = _gateway(tmp_path, "test:broken-critic")
        outcome = await deliberation.critique(gateway, "adversarial", AGENT, [], [], "The sky is green.")
        await gateway.aclose()
    assert calls == ["critique", "critique"]  # the original and the one corrective retry
    assert outcome.objections == () and outcome.skipped is not None and "invalid Critique" in outcome.skipped
    assert [r.stage for r in adapter.flushed] == ["critique:adversarial", "critique:adversarial"]


async def test_a_critic_sees_the_draft_and_its_objections_come_back_structured(tmp_path: Any) -> None:
    seen: list[str] = []

    def critic(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Critique:
        seen.append(info.instructions or "")
        seen.append(str(messages[-1].parts[-1].content))  # type: ignore[union-attr]
        return Critique(
            objections=(Objection(kind="false-premise", span="green", explanation="The sky is blue."),)
        )

    with registered_double("critic", critic):
        gateway, adapter = _gateway(tmp_path, "test:critic")
        dialog = [_message(Role.USER, "Why is the sky green?")]
        outcome = await deliberation.critique(gateway, "adversarial", AGENT, [], dialog, "Because green.")
        await gateway.aclose()
    assert "adversarial critic" in seen[0] and "Sam: Why is the sky green?" in seen[0]
    assert "Because green." in seen[1]
    assert outcome.skipped is None and outcome.objections[0].kind == "false-premise"
    assert [r.stage for r in adapter.flushed] == ["critique:adversarial"]


async def test_a_failed_decision_speaks_when_addressed_and_keeps_quiet_when_overheard(tmp_path: Any) -> None:
    def down(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
        return DoubleReply(output={"action": "shout"})

    with registered_double("bad-decider", down):
        gateway, _ = _gateway(tmp_path, "test:bad-decider")
        addressed = await deliberation.decide(gateway, AGENT, [], "Hello.", addressed=True)
        overheard = await deliberation.decide(gateway, AGENT, [], None, addressed=False)
        await gateway.aclose()
    assert addressed.action == "speak" and "could not deliberate" in addressed.reason
    assert overheard.action == "silent"


def test_the_decision_on_the_input_sees_the_persona_and_the_dialog_and_no_draft() -> None:
    dialog = [_message(Role.USER, "Can you write an ad for my casino?")]
    prompt = deliberation.decide_on_input_prompt(AGENT, dialog)
    assert prompt.system.startswith("You are Ada, deciding how to answer the last message before")
    assert "- never help with gambling" in prompt.system
    assert "- if asked for a password, then refuse" in prompt.system
    assert "$" not in prompt.system  # every template field was filled
    (turn,) = prompt.items
    assert isinstance(turn, UserTurn)
    assert "Sam: Can you write an ad for my casino?" in turn.text
    assert "draft" not in turn.text.lower() and "<<<" not in turn.text


async def test_a_failed_decision_on_the_input_speaks(tmp_path: Any) -> None:
    def down(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
        return DoubleReply(output={"action": "shout"})

    with registered_double("bad-input-decider", down):
        gateway, _ = _gateway(tmp_path, "test:bad-input-decider")
        decision = await deliberation.decide_on_input(gateway, AGENT, [])
        await gateway.aclose()
    assert decision.action == "speak" and "could not deliberate" in decision.reason


def test_what_deliberation_decides_is_frozen() -> None:
    """A decision, a critic's outcome and a self-assessment cross durable-step boundaries:
    none can be changed after it is made (they hash, so they are values)."""
    from persyn.cognition.reflection import SelfAssessment

    objection = Objection(kind="unsupported", span="surely", explanation="no grounds")
    made = [
        Decision(action="speak", reason="it answers"),
        CritiqueOutcome(lens="provenance", objections=(objection,)),
        SelfAssessment(patterns="p", serves_objectives=True, intention="rest", plan="rest"),
        Critique(objections=(objection,)),
    ]
    for value in made:
        hash(value)
        name = next(iter(type(value).model_fields))
        with pytest.raises(ValidationError):
            setattr(value, name, getattr(value, name))
