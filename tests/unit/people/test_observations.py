"""Observation extraction, reconciliation and dossiers over the real SQLite store, with
model doubles that answer from what each prompt shows."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.config import AgentConfig, Settings
from persyn.core.ids import new_id
from persyn.gateway.gateway import ModelGateway
from persyn.people.observations import Dossiers, Extraction, Judgement, Noticed, Observer
from persyn.store import Identity, Message, Role, open_store
from persyn.store.capabilities import FullStore
from persyn.testing import run_runtime
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.usage.meter import Meter

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(T0))


class Mind:
    """Extracts "I work as a X" / "I live in Y"; judges a same-kind fact as superseding,
    "actually ... not" as contradicting, "also" as supplementing, the same value as a duplicate."""

    def __init__(self) -> None:
        self.calls: list[str | None] = []
        self.respond_prompts: list[str] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        self.calls.append(task)
        text = last_user_text(messages)
        if task == "respond":
            self.respond_prompts.append(info.instructions or "")
        if task == "extract":
            found: list[Noticed] = []
            for who, job in re.findall(r"^(\w+): .*?I work as an? (\w+)", text, re.MULTILINE):
                found.append(Noticed(person=who, kind="occupation", value=f"works as a {job}"))
            for who, city in re.findall(r"^(\w+): .*?I (?:also )?live in (\w+)", text, re.MULTILINE):
                found.append(Noticed(person=who, kind="location", value=f"lives in {city}"))
            for who, extra in re.findall(r"^(\w+): .*?I also (?:work|teach) (.+?)\.", text, re.MULTILINE):
                found.append(Noticed(person=who, kind="occupation", value=f"also {extra}"))
            return Extraction(observations=found)
        if task == "classify":
            known = re.findall(r"^(\d+)\. \[(\w+)\] (.+)$", text, re.MULTILINE)
            new_kind, new_value = re.search(r"New: \[(\w+)\] (.+)$", text, re.MULTILINE).groups()  # type: ignore[union-attr]
            for number, kind, value in known:
                if value == new_value:
                    return Judgement(relation="duplicate", target=int(number), reason="same fact")
                if kind == new_kind and new_value.startswith("also"):
                    return Judgement(relation="supplements", target=int(number), reason="adds to it")
                if kind == new_kind:
                    return Judgement(relation="supersedes", target=int(number), reason="moved on")
            return Judgement(relation="new", reason="unrelated")
        if task == "dossier":
            return DoubleReply(text="I know that Sam " + "; ".join(re.findall(r"\] (.+?) \(", text)) + ".")
        return DoubleReply(text="ok")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FullStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'persyn.db'}")
    await opened.setup()
    await opened.ensure_agent(AGENT.id, AGENT.name, T0)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def mind(tmp_path: Path) -> AsyncIterator[tuple[Mind, ModelGateway]]:
    double = Mind()
    with registered_double("observer", double):
        settings = Settings(home=tmp_path, agents=[AGENT])
        settings = settings.model_copy(
            update={"models": settings.models.model_copy(update={"default": "test:observer"})}
        )
        gateway = ModelGateway(settings, AGENT, Meter([]))
        yield double, gateway
        await gateway.aclose()


async def _conversation(store: FullStore, at: datetime, lines: list[tuple[str, str]]) -> Any:
    people = {}
    for who, _ in lines:
        if who != "Ada" and who not in people:
            identity = Identity(service="test", channel="room", speaker_id=who.lower())
            people[who] = await store.resolve_person(AGENT.id, identity, who, "human", at)
    conversation = await store.open_conversation(
        AGENT.id, "test", "room", [p.id for p in people.values()], at, 60
    )
    for offset, (who, text) in enumerate(lines):
        await store.add_message(
            Message(
                id=new_id(at + timedelta(seconds=offset)),
                agent_id=AGENT.id,
                conversation_id=conversation.id,
                role=Role.AGENT if who == "Ada" else Role.USER,
                person_id=None if who == "Ada" else people[who].id,
                speaker_name=who,
                text=text,
                created_at=at + timedelta(seconds=offset),
                event_id=None,
            )
        )
    return await store.get_conversation(AGENT.id, conversation.id), people


async def test_facts_are_extracted_then_superseded_supplemented_or_ignored_with_an_audit_trail(
    store: FullStore, mind: tuple[Mind, ModelGateway]
) -> None:
    _double, gateway = mind
    observer = Observer(store, gateway, "Ada")
    first, people = await _conversation(
        store, T0, [("Sam", "Hi! I work as a teacher and I live in Lyon."), ("Ada", "Nice to meet you.")]
    )
    assert sorted(await observer.observe(AGENT.id, first)) == ["added location", "added occupation"]
    sam = people["Sam"].id
    assert {(o.kind, o.value) for o in await store.observations(AGENT.id, sam)} == {
        ("occupation", "works as a teacher"),
        ("location", "lives in Lyon"),
    }
    assert await observer.observe(AGENT.id, first) == []  # observing again stores nothing twice

    later = T0 + timedelta(days=40)
    second, _ = await _conversation(
        store,
        later,
        [
            ("Sam", "News: I work as a nurse now. I also teach yoga on Sundays."),
            ("Sam", "I live in Lyon still."),
        ],
    )
    done = await observer.observe(AGENT.id, second)
    assert "superseded occupation" in done
    current = {(o.kind, o.value) for o in await store.observations(AGENT.id, sam)}
    assert ("occupation", "works as a nurse") in current
    assert ("occupation", "works as a teacher") not in current
    assert ("occupation", "also yoga on Sundays") in current  # supplemented, not replaced
    assert sum(1 for kind, _ in current if kind == "location") == 1  # the repeat was a duplicate
    history = [(h.action, h.before, h.after) for h in await store.observation_history(AGENT.id, sam)]
    assert ("superseded", "works as a teacher", None) in history
    assert any(action == "supplemented" for action, _, _ in history)


async def test_a_failed_extraction_changes_nothing(store: FullStore, tmp_path: Path) -> None:
    def broken(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        return DoubleReply(output={"observations": [{"person": "Sam"}]})  # invalid twice

    with registered_double("broken-observer", broken):
        settings = Settings(home=tmp_path, agents=[AGENT])
        settings = settings.model_copy(
            update={"models": settings.models.model_copy(update={"default": "test:broken-observer"})}
        )
        gateway = ModelGateway(settings, AGENT, Meter([]), retry_base_delay=0.0)
        conversation, people = await _conversation(store, T0, [("Sam", "I work as a teacher.")])
        assert await Observer(store, gateway, "Ada").observe(AGENT.id, conversation) == []
        await gateway.aclose()
    assert await store.observations(AGENT.id, people["Sam"].id) == []


async def test_the_dossier_is_cached_until_the_observations_change(
    store: FullStore, mind: tuple[Mind, ModelGateway]
) -> None:
    double, gateway = mind
    observer, dossiers = Observer(store, gateway, "Ada"), Dossiers(store, gateway, "Ada")
    conversation, people = await _conversation(store, T0, [("Sam", "I work as a teacher.")])
    await observer.observe(AGENT.id, conversation)
    sam = people["Sam"].id
    assert await dossiers.cached(AGENT.id, sam) is None
    first = await dossiers.dossier(AGENT.id, sam, "Sam", T0)
    assert first == "I know that Sam works as a teacher."
    calls = double.calls.count("dossier")
    assert (
        await dossiers.dossier(AGENT.id, sam, "Sam", T0) == first and double.calls.count("dossier") == calls
    )
    assert await dossiers.cached(AGENT.id, sam) == first
    later, _ = await _conversation(store, T0 + timedelta(days=1), [("Sam", "I live in Paris.")])
    await observer.observe(AGENT.id, later)
    assert await dossiers.cached(AGENT.id, sam) is None  # invalidated by the new observation
    assert (
        await dossiers.dossier(AGENT.id, sam, "Sam", T0)
        == "I know that Sam works as a teacher; lives in Paris."
    )
    assert double.calls.count("dossier") == calls + 1


async def test_the_runtime_observes_closed_conversations_and_briefs_itself_only_in_that_compartment(
    tmp_path: Path, mind: tuple[Mind, ModelGateway]
) -> None:
    double, _ = mind
    async with run_runtime(tmp_path / "home", model="test:observer", agent=AGENT, scheduler=False) as pilot:
        runtime = pilot.runtime
        assert "observe" in runtime.jobs.conversation_hook_names()

        await pilot.say("I work as a teacher.", channel="room")
        (closed,) = await pilot.end_conversations(after=timedelta(hours=2))
        await runtime.jobs.observe_conversation(AGENT.id, closed.id)
        sam = closed.participant_ids[0]
        assert [o.value for o in await pilot.full_store.observations(AGENT.id, sam)] == ["works as a teacher"]
        assert (
            await runtime.jobs.dossiers(AGENT.id).cached(AGENT.id, sam)
            == "I know that Sam works as a teacher."
        )

        await pilot.say("Hello again!", channel="room")
        assert "What I know about Sam" in double.respond_prompts[-1]
        assert "works as a teacher" in double.respond_prompts[-1]
        # The same person on another channel: the dossier was learned in "room" and stays there.
        await pilot.full_store.attach_identity(
            AGENT.id, sam, Identity(service="test", channel="lobby", speaker_id="sam")
        )
        await pilot.say("Hello from the lobby!", channel="lobby")
        assert "What I know about Sam" not in double.respond_prompts[-1]
        # Back in the room, but a stranger has joined: what Sam said alone stays unsaid.
        await pilot.say("Hi, I'm Cy.", channel="room", speaker="cy")
        await pilot.say("Hello again!", channel="room")
        assert "What I know about Sam" not in double.respond_prompts[-1]
