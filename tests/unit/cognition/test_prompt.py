from datetime import UTC, datetime

from persyn.cognition.prompt import ContextSection, assemble_prompt
from persyn.core.config import AgentConfig
from persyn.core.ids import new_id
from persyn.gateway.base import AgentTurn, UserTurn
from persyn.store.base import Message, Role

AGENT = AgentConfig(
    name="Ada", id=new_id(), disposition="Candid.", objectives=["learn"], rules=["if x, then y"]
)


def _message(role: Role, text: str, name: str = "Sam") -> Message:
    return Message(
        id=new_id(),
        agent_id=AGENT.id,
        conversation_id=new_id(),
        role=role,
        person_id=None,
        speaker_name=name,
        text=text,
        created_at=datetime(2026, 11, 30, tzinfo=UTC),
        event_id=None,
    )


def test_stable_prefix_is_byte_identical_across_turns() -> None:
    first = assemble_prompt(
        AGENT,
        now=datetime(2026, 11, 30, 9, tzinfo=UTC),
        dialog=[_message(Role.USER, "hello")],
        sections=[ContextSection("Memories", "[strong] I met Sam.")],
    )
    second = assemble_prompt(
        AGENT,
        now=datetime(2026, 12, 1, 22, tzinfo=UTC),
        dialog=[_message(Role.USER, "hello"), _message(Role.AGENT, "hi", "Ada"), _message(Role.USER, "bye")],
        sections=[ContextSection("Memories", "[weak] Something else entirely.")],
        situation="You are talking with Sam.",
    )
    assert first.stable_prefix_chars == second.stable_prefix_chars > 0
    assert first.system[: first.stable_prefix_chars] == second.system[: second.stable_prefix_chars]
    assert first.system != second.system


def test_volatile_tail_carries_date_time_and_sections_after_the_stable_part() -> None:
    prompt = assemble_prompt(
        AGENT,
        now=datetime(2026, 11, 30, 18, 30, tzinfo=UTC),
        dialog=[_message(Role.USER, "hi")],
        sections=[ContextSection("Memories", "[strong] I met Sam.")],
    )
    stable, volatile = (
        prompt.system[: prompt.stable_prefix_chars],
        prompt.system[prompt.stable_prefix_chars :],
    )
    assert "You are Ada" in stable and "Epistemic calibration" in stable and "if x, then y" in stable
    assert "Monday 30 November 2026, 6:30 in the evening" in volatile
    assert volatile.index("It is now") < volatile.index("## Memories")
    assert "[strong] I met Sam." in volatile


def test_dialog_becomes_turns_and_always_ends_with_something_to_answer() -> None:
    prompt = assemble_prompt(
        AGENT,
        now=datetime(2026, 11, 30, tzinfo=UTC),
        dialog=[_message(Role.USER, "hi"), _message(Role.AGENT, "hello", "Ada")],
    )
    assert prompt.items[0] == UserTurn(text="hi", name="Sam")
    assert prompt.items[1] == AgentTurn(text="hello")
    assert isinstance(prompt.items[-1], UserTurn)
