"""Knowledge-graph extraction and graph context over the real SQLite store and runtime, with a
model double that extracts "X works at Y" / "X lives in Y" from the transcript it is shown."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.context import GRAPH_FAILURE_FLAG
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.graph.extract import TRANSCRIPT_HEADING, Entity, GraphExtraction, Relation
from persyn.graph.recall import GraphContext, candidate_keys
from persyn.store.capabilities import require_capability
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.graph_rows import GraphRelation
from persyn.testing import ADA, START, Pilot, run_runtime
from persyn.testing.models import DoubleReply, last_user_text, registered_double

_FACT = re.compile(r"\b([A-Z]\w+) (works at|lives in) ([A-Z]\w+)")


class Mind:
    def __init__(self) -> None:
        self.respond_prompts: list[str] = []
        self.extract_prompts: list[str] = []
        self.sensitivity = Sensitivity.PUBLIC
        self.garbage = False

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        text = last_user_text(messages)
        if task == "respond":
            self.respond_prompts.append(info.instructions or "")
            return DoubleReply(text="Noted.")
        if task == "extract" and text.startswith(TRANSCRIPT_HEADING):
            self.extract_prompts.append(text)
            if self.garbage:
                return DoubleReply(output={"entities": "not a list"})
            entities: list[Entity] = []
            relations: list[Relation] = [Relation(source="Nobody", relation="???", target="Nowhere")]
            for who, verb, where in _FACT.findall(text):
                entities.append(Entity(name=who, kind="person"))
                relations.append(Relation(source=who, relation=verb, target=where))
            relations.append(
                Relation(source="Same Thing", relation="is", target="the same thing")
            )  # a loop: dropped
            return GraphExtraction(entities=entities, relations=relations, sensitivity=self.sensitivity)
        if task == "decide":
            return DoubleReply(output={"action": "speak", "reason": "asked"})
        return DoubleReply(text="ok")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("grapher", instance):
        yield instance


def _runtime(tmp_path: Path, extra: str = "") -> AbstractAsyncContextManager[Pilot]:
    return run_runtime(
        tmp_path / "home",
        model="test:grapher",
        config="[deliberation]\nenabled = false\n" + extra,
        agent=ADA,
        scheduler=False,
    )


async def _close_and_extract(pilot: Pilot) -> None:
    for conversation in await pilot.end_conversations(after=timedelta(hours=2)):
        await pilot.runtime.jobs.graph_conversation(ADA.id, conversation.id)


def test_candidate_keys_are_the_inputs_short_spans_in_order() -> None:
    keys = candidate_keys("Does the Acme Corp's office know Ann?")
    assert "acme corp" in keys and "ann" in keys and "corp's" not in keys  # possessive dropped
    assert keys.index("acme corp") < keys.index("acme") < keys.index("ann")  # longest first, then in order
    assert candidate_keys("") == []
    # A long input keeps its last words (the newest) and stays under the store's bound.
    long = candidate_keys(" ".join(["blah"] * 300 + ["Ann"]))
    assert "ann" in long and len(long) <= 500


def test_graph_lines_respect_the_budget() -> None:
    relation = GraphRelation(
        id=new_id(START),
        source_id=new_id(START),
        source="Ann",
        relation="works_at",
        target_id=new_id(START),
        target="Acme",
        channel="test:room",
        sensitivity=Sensitivity.PUBLIC,
        conversation_id=None,
        learned_at=START,
    )
    found = GraphContext(mentioned=(), entities=(), relations=(relation,) * 3, paths=((relation,),))
    assert found.lines(1000) == ["Ann —works at→ Acme"]  # the path line, and the same line once
    assert found.lines(2) == []


async def test_a_closed_conversation_feeds_the_graph_which_informs_later_turns_in_its_compartment(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path) as pilot:
        assert "graph" in pilot.runtime.jobs.conversation_hook_names()
        await pilot.say("My sister Ann works at Acme. Bo lives in Porto.", transmitted=True)
        mind.sensitivity = Sensitivity.PUBLIC  # the channel default (private) must still win
        await _close_and_extract(pilot)
        assert await require_capability(pilot.store, GraphPort).graph_stats(ADA.id) == {
            "entities": 4,
            "mentions": 4,
            "relations": 2,
        }
        ann = (await require_capability(pilot.store, GraphPort).graph_entities(ADA.id, ["ann"], None))[0]
        around = await require_capability(pilot.store, GraphPort).graph_neighbourhood(
            ADA.id, [ann.id], 1, None
        )
        (works,) = around.relations
        assert works.line() == "Ann —works at→ Acme"
        assert works.channel == "test:room" and works.sensitivity is Sensitivity.PRIVATE
        assert works.conversation_id is not None

        await pilot.say("What do you know about Ann?", transmitted=True)
        prompt = mind.respond_prompts[-1]
        assert "How things relate" in prompt and "Ann —works at→ Acme" in prompt
        # Not mentioned, not within reach of what was (the graph's lines; the raw dialog that
        # recall brings back on this channel may quote the sentence, `[memory] dialog_recall`).
        assert "—lives in→ Porto" not in prompt

        # The same person elsewhere: the fact was learned in the room and stays there.
        await pilot.say("What do you know about Ann?", channel="lobby", transmitted=True)
        assert "Acme" not in mind.respond_prompts[-1]


async def test_a_confidential_extraction_raises_the_sensitivity(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path) as pilot:
        mind.sensitivity = Sensitivity.CONFIDENTIAL
        await pilot.say("Between us: Ann works at Acme.", transmitted=True)
        await _close_and_extract(pilot)
        ann = (await require_capability(pilot.store, GraphPort).graph_entities(ADA.id, ["ann"], None))[0]
        (works,) = (
            await require_capability(pilot.store, GraphPort).graph_neighbourhood(ADA.id, [ann.id], 1, None)
        ).relations
        assert works.sensitivity is Sensitivity.CONFIDENTIAL
        # A stranger joins the room: the confidence is withheld from the prompt.
        await pilot.say("Hi all, what about Ann?", speaker="cy", transmitted=True)
        assert "Acme" not in mind.respond_prompts[-1]


async def test_malformed_extraction_stores_nothing_and_is_reported(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path) as pilot:
        mind.garbage = True
        await pilot.say("Ann works at Acme.", transmitted=True)
        await _close_and_extract(pilot)
        assert await require_capability(pilot.store, GraphPort).graph_stats(ADA.id) == {
            "entities": 0,
            "mentions": 0,
            "relations": 0,
        }
        flag = await pilot.store.get_flag(ADA.id, GRAPH_FAILURE_FLAG)
        assert flag is not None and "extraction" in json.loads(flag)["error"]


async def test_a_failing_graph_store_costs_context_not_the_turn(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path) as pilot:
        await pilot.say("Ann works at Acme.", transmitted=True)
        await _close_and_extract(pilot)
        # Break the graph for real: its traversal table is gone.
        with sqlite3.connect(tmp_path / "home" / "data" / "persyn.db") as broken:
            broken.execute("DROP TABLE graph_links")
        await pilot.say("Tell me about Ann.", transmitted=True)  # asserts the reply was transmitted
        prompt = mind.respond_prompts[-1]
        assert "knowledge graph is unavailable" in prompt and "—works at→ Acme" not in prompt
        flag = await pilot.store.get_flag(ADA.id, GRAPH_FAILURE_FLAG)
        assert flag is not None and "graph_links" in json.loads(flag)["error"]
        # Repaired (the table is back, empty): the next turn clears the report.
        from sqlalchemy import create_engine

        from persyn.store.schema.graph import graph_links

        engine = create_engine(f"sqlite:///{tmp_path / 'home' / 'data' / 'persyn.db'}")
        graph_links.create(engine)
        engine.dispose()
        await pilot.say("Tell me about Ann again.", transmitted=True)
        assert "unavailable" not in mind.respond_prompts[-1]
        assert await pilot.store.get_flag(ADA.id, GRAPH_FAILURE_FLAG) is None


async def test_a_disabled_graph_is_neither_filled_nor_read(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path, "[graph]\nenabled = false\n") as pilot:
        assert "graph" not in pilot.runtime.jobs.conversation_hook_names()
        await pilot.say("Ann works at Acme.", transmitted=True)
        assert "How things relate" not in mind.respond_prompts[-1]


async def test_a_long_open_conversation_is_read_as_it_goes_each_message_once(
    tmp_path: Path, mind: Mind
) -> None:
    async with _runtime(tmp_path, "[conversation]\nextract_every_messages = 4\n") as pilot:
        await pilot.say("Ann works at Acme.", transmitted=True)  # 2 messages: not yet
        await pilot.settle()
        assert (await require_capability(pilot.store, GraphPort).graph_stats(ADA.id))["relations"] == 0
        await pilot.say("Bo lives in Porto.", transmitted=True)  # 4 messages: read in the background
        await pilot.settle()
        assert (await require_capability(pilot.store, GraphPort).graph_stats(ADA.id))["relations"] == 2
        assert len(mind.extract_prompts) == 1 and "Ann works at Acme" in mind.extract_prompts[0]
        # The conversation is still open; the next facts arrive with their context only.
        await pilot.say("Cy lives in Braga.", transmitted=True)
        await _close_and_extract(pilot)  # the rest, once closed
        assert (await require_capability(pilot.store, GraphPort).graph_stats(ADA.id))["relations"] == 3
        last = mind.extract_prompts[-1]
        assert "(New:)\nSam: Cy lives in Braga." in last and "Bo lives in Porto" in last.split("(New:)")[0]
        await _close_and_extract(pilot)  # nothing new: no model call
        assert len(mind.extract_prompts) == 2


async def test_a_conversation_read_in_parts_never_gets_less_sensitive(tmp_path: Path, mind: Mind) -> None:
    async with _runtime(tmp_path, "[conversation]\nextract_every_messages = 2\n") as pilot:
        mind.sensitivity = Sensitivity.CONFIDENTIAL
        await pilot.say("Between us: Ann works at Acme.", transmitted=True)
        await pilot.settle()
        assert len(mind.extract_prompts) == 1
        mind.sensitivity = Sensitivity.PRIVATE  # the next part is small talk...
        await pilot.say("Nice weather today.", transmitted=True)
        await pilot.settle()
        assert len(mind.extract_prompts) == 2
        # ...and this double, like a careless model, re-reads the context lines too.
        assert "(Earlier, already read:)" in mind.extract_prompts[1]
        ann = (await require_capability(pilot.store, GraphPort).graph_entities(ADA.id, ["ann"], None))[0]
        relations = (
            await require_capability(pilot.store, GraphPort).graph_neighbourhood(ADA.id, [ann.id], 1, None)
        ).relations
        assert [(r.line(), r.sensitivity) for r in relations] == [
            ("Ann —works at→ Acme", Sensitivity.CONFIDENTIAL)
        ]
