"""Knowledge-graph extraction and graph context over the real SQLite store and runtime, with a
model double that extracts "X works at Y" / "X lives in Y" from the transcript it is shown."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.context import GRAPH_FAILURE_FLAG
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.core.records import Sensitivity
from persyn.graph.extract import TRANSCRIPT_HEADING, Entity, GraphExtraction, Relation
from persyn.graph.recall import GraphContext, candidate_keys
from persyn.runtime.app import Runtime
from persyn.runtime.compose import build_runtime
from persyn.store.graph_rows import GraphRelation
from persyn.testing.models import DoubleReply, last_user_text, registered_double

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)
AGENT = AgentConfig(name="Ada", id=new_id(T0))
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


async def _runtime(tmp_path: Path, extra: str = "") -> Runtime:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:grapher"\n[metering]\nevent_log = false\n'
        '[memory]\nembedder = "test:hash"\n[deliberation]\nenabled = false\n' + extra
    )
    settings = load_settings(home, environ={}).model_copy(update={"agents": [AGENT]})
    runtime = build_runtime(settings, clock=ManualClock(T0))
    await runtime.start(workers=True, scheduler=False)
    return runtime


async def _say(runtime: Runtime, text: str, channel: str = "room", speaker: str = "sam") -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    now = clock.now()
    event = Event(
        id=new_id(now),
        agent_id=AGENT.id,
        service="test",
        channel=channel,
        speaker=Speaker(service="test", channel=channel, speaker_id=speaker, display_name=speaker.title()),
        text=text,
        received_at=now,
    )
    await runtime.submit(event)
    marker = await runtime.wait_marker(AGENT.id, event.id, timeout=60)
    assert marker.transmitted, marker
    clock.advance(timedelta(seconds=5))


async def _close_and_extract(runtime: Runtime) -> None:
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(hours=2))
    for conversation in await runtime.store.close_idle_conversations(AGENT.id, clock.now(), 1800):
        await runtime.graph_conversation(AGENT.id, conversation.id)


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
        id=new_id(T0),
        source_id=new_id(T0),
        source="Ann",
        relation="works_at",
        target_id=new_id(T0),
        target="Acme",
        channel="test:room",
        sensitivity=Sensitivity.PUBLIC,
        conversation_id=None,
        learned_at=T0,
    )
    found = GraphContext(mentioned=(), entities=(), relations=(relation,) * 3, paths=((relation,),))
    assert found.lines(1000) == ["Ann —works at→ Acme"]  # the path line, and the same line once
    assert found.lines(2) == []


async def test_a_closed_conversation_feeds_the_graph_which_informs_later_turns_in_its_compartment(
    tmp_path: Path, mind: Mind
) -> None:
    runtime = await _runtime(tmp_path)
    try:
        assert "graph" in runtime.conversation_hook_names()
        await _say(runtime, "My sister Ann works at Acme. Bo lives in Porto.")
        mind.sensitivity = Sensitivity.PUBLIC  # the channel default (private) must still win
        await _close_and_extract(runtime)
        assert await runtime.store.graph_stats(AGENT.id) == {"entities": 4, "mentions": 4, "relations": 2}
        ann = (await runtime.store.graph_entities(AGENT.id, ["ann"], None))[0]
        around = await runtime.store.graph_neighbourhood(AGENT.id, [ann.id], 1, None)
        (works,) = around.relations
        assert works.line() == "Ann —works at→ Acme"
        assert works.channel == "test:room" and works.sensitivity is Sensitivity.PRIVATE
        assert works.conversation_id is not None

        await _say(runtime, "What do you know about Ann?")
        prompt = mind.respond_prompts[-1]
        assert "How things relate" in prompt and "Ann —works at→ Acme" in prompt
        assert "Porto" not in prompt  # not mentioned, not within reach of what was

        # The same person elsewhere: the fact was learned in the room and stays there.
        await _say(runtime, "What do you know about Ann?", channel="lobby")
        assert "Acme" not in mind.respond_prompts[-1]
    finally:
        await runtime.stop()


async def test_a_confidential_extraction_raises_the_sensitivity(tmp_path: Path, mind: Mind) -> None:
    runtime = await _runtime(tmp_path)
    try:
        mind.sensitivity = Sensitivity.CONFIDENTIAL
        await _say(runtime, "Between us: Ann works at Acme.")
        await _close_and_extract(runtime)
        ann = (await runtime.store.graph_entities(AGENT.id, ["ann"], None))[0]
        (works,) = (await runtime.store.graph_neighbourhood(AGENT.id, [ann.id], 1, None)).relations
        assert works.sensitivity is Sensitivity.CONFIDENTIAL
        # A stranger joins the room: the confidence is withheld from the prompt.
        await _say(runtime, "Hi all, what about Ann?", speaker="cy")
        assert "Acme" not in mind.respond_prompts[-1]
    finally:
        await runtime.stop()


async def test_malformed_extraction_stores_nothing_and_is_reported(tmp_path: Path, mind: Mind) -> None:
    runtime = await _runtime(tmp_path)
    try:
        mind.garbage = True
        await _say(runtime, "Ann works at Acme.")
        await _close_and_extract(runtime)
        assert await runtime.store.graph_stats(AGENT.id) == {"entities": 0, "mentions": 0, "relations": 0}
        flag = await runtime.store.get_flag(AGENT.id, GRAPH_FAILURE_FLAG)
        assert flag is not None and "extraction" in json.loads(flag)["error"]
    finally:
        await runtime.stop()


async def test_a_failing_graph_store_costs_context_not_the_turn(tmp_path: Path, mind: Mind) -> None:
    runtime = await _runtime(tmp_path)
    try:
        await _say(runtime, "Ann works at Acme.")
        await _close_and_extract(runtime)
        # Break the graph for real: its traversal table is gone.
        with sqlite3.connect(tmp_path / "home" / "data" / "persyn.db") as broken:
            broken.execute("DROP TABLE graph_links")
        await _say(runtime, "Tell me about Ann.")  # asserts the reply was transmitted
        prompt = mind.respond_prompts[-1]
        assert "knowledge graph is unavailable" in prompt and "Acme" not in prompt
        flag = await runtime.store.get_flag(AGENT.id, GRAPH_FAILURE_FLAG)
        assert flag is not None and "graph_links" in json.loads(flag)["error"]
        # Repaired (the table is back, empty): the next turn clears the report.
        from sqlalchemy import create_engine

        from persyn.store.schema import graph_links

        engine = create_engine(f"sqlite:///{tmp_path / 'home' / 'data' / 'persyn.db'}")
        graph_links.create(engine)
        engine.dispose()
        await _say(runtime, "Tell me about Ann again.")
        assert "unavailable" not in mind.respond_prompts[-1]
        assert await runtime.store.get_flag(AGENT.id, GRAPH_FAILURE_FLAG) is None
    finally:
        await runtime.stop()


async def test_a_disabled_graph_is_neither_filled_nor_read(tmp_path: Path, mind: Mind) -> None:
    runtime = await _runtime(tmp_path, "[graph]\nenabled = false\n")
    try:
        assert "graph" not in runtime.conversation_hook_names()
        await _say(runtime, "Ann works at Acme.")
        assert "How things relate" not in mind.respond_prompts[-1]
    finally:
        await runtime.stop()


async def test_a_long_open_conversation_is_read_as_it_goes_each_message_once(
    tmp_path: Path, mind: Mind
) -> None:
    import asyncio

    runtime = await _runtime(tmp_path, "[conversation]\nextract_every_messages = 4\n")
    try:
        await _say(runtime, "Ann works at Acme.")  # 2 messages: not yet
        await asyncio.sleep(0.5)
        assert (await runtime.store.graph_stats(AGENT.id))["relations"] == 0
        await _say(runtime, "Bo lives in Porto.")  # 4 messages: read in the background
        for _ in range(100):
            if (await runtime.store.graph_stats(AGENT.id))["relations"] == 2:
                break
            await asyncio.sleep(0.1)
        assert (await runtime.store.graph_stats(AGENT.id))["relations"] == 2
        assert len(mind.extract_prompts) == 1 and "Ann works at Acme" in mind.extract_prompts[0]
        # The conversation is still open; the next facts arrive with their context only.
        await _say(runtime, "Cy lives in Braga.")
        await _close_and_extract(runtime)  # the rest, once closed
        assert (await runtime.store.graph_stats(AGENT.id))["relations"] == 3
        last = mind.extract_prompts[-1]
        assert "(New:)\nSam: Cy lives in Braga." in last and "Bo lives in Porto" in last.split("(New:)")[0]
        await _close_and_extract(runtime)  # nothing new: no model call
        assert len(mind.extract_prompts) == 2
    finally:
        await runtime.stop()


async def test_a_conversation_read_in_parts_never_gets_less_sensitive(tmp_path: Path, mind: Mind) -> None:
    import asyncio

    runtime = await _runtime(tmp_path, "[conversation]\nextract_every_messages = 2\n")
    try:
        mind.sensitivity = Sensitivity.CONFIDENTIAL
        await _say(runtime, "Between us: Ann works at Acme.")

        async def extracted(count: int) -> None:
            for _ in range(100):
                if len(mind.extract_prompts) >= count:
                    return
                await asyncio.sleep(0.1)
            raise AssertionError("no extraction")

        await extracted(1)
        mind.sensitivity = Sensitivity.PRIVATE  # the next part is small talk...
        await _say(runtime, "Nice weather today.")
        await extracted(2)
        await asyncio.sleep(0.3)
        # ...and this double, like a careless model, re-reads the context lines too.
        assert "(Earlier, already read:)" in mind.extract_prompts[1]
        ann = (await runtime.store.graph_entities(AGENT.id, ["ann"], None))[0]
        relations = (await runtime.store.graph_neighbourhood(AGENT.id, [ann.id], 1, None)).relations
        assert [(r.line(), r.sensitivity) for r in relations] == [
            ("Ann —works at→ Acme", Sensitivity.CONFIDENTIAL)
        ]
    finally:
        await runtime.stop()
