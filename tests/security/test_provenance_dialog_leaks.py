"""Earlier conversations reach the prompt only as memories, through the access rules
(issue 13, item 5): neither deliberation's parked second thoughts nor a tool that opens a
memory's dialog carries an earlier conversation's words to someone else.

Adversarial scenarios through the real runtime (DBOS, SQLite, deferred deliberation, the tool
loop) with scripted models; each asserts on the whole request the respond model received, or
on every tool result it was handed.
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

from persyn.testing import ADA, consolidation_reply, registered_double, run_runtime
from persyn.testing.models import DoubleReply
from persyn.testing.requests import last_input, request_text, tool_returns


class Mind:
    """Keeps every respond request and tool result, by who said the input it answers."""

    def __init__(self) -> None:
        self.requests: dict[str, list[str]] = {}
        self.results: dict[str, list[str]] = {}
        self.speaking = ""

    def heard(self, messages: list[ModelMessage], info: AgentInfo) -> str:
        if not tool_returns(messages):  # a new input (a continuation repeats no input)
            self.speaking = last_input(messages).split(":")[0]
        self.requests.setdefault(self.speaking, []).append(request_text(messages, info))
        self.results.setdefault(self.speaking, []).extend(
            f"{r.tool_name}: {r.content}" for r in tool_returns(messages)
        )
        return self.speaking


class SecondThoughts(Mind):
    """The draft repeats Ann's PIN; the deferred critique objects and parks a revision."""

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "critique":
            objection = {
                "kind": "confabulation",
                "span": "your PIN 4711",
                "explanation": "repeating Ann's PIN",
            }
            return DoubleReply(output={"objections": [objection]})
        if task == "refine":
            return DoubleReply(text="Ann, I will keep your PIN 4711 to myself from now on, I promise.")
        if task == "decide":
            return DoubleReply(output={"action": "speak", "reason": "it is for me"})
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        if self.heard(messages, info) == "mallory":
            return DoubleReply(text="Hello Mallory.")
        return DoubleReply(
            text="Ann, I will remember your PIN 4711 for the bank and never forget it, I promise."
        )


@pytest.fixture
def second_thoughts() -> Iterator[SecondThoughts]:
    instance = SecondThoughts()
    with registered_double("second-thoughts", instance):
        yield instance


async def test_second_thoughts_parked_in_one_conversation_never_reach_the_next_one_on_the_channel(
    tmp_path: Path, second_thoughts: SecondThoughts
) -> None:
    async with run_runtime(
        tmp_path / "home",
        model="test:second-thoughts",
        config='[deliberation]\nenabled = true\nmode = "deferred"\n',
    ) as pilot:
        await pilot.say(
            "ann: my bank PIN is 4711, please remember it", channel="room", speaker="ann", transmitted=True
        )
        await pilot.settle()  # the deferred critique runs after the reply was sent
        assert await pilot.store.flags_with_prefix(ADA.id, "parked:test:room:"), "nothing was parked"
        pilot.advance(timedelta(hours=2))
        assert await pilot.close_idle() == 1  # Ann's conversation is over

        await pilot.say("mallory: hi, I'm new here", channel="room", speaker="mallory", transmitted=True)
        (mallory,) = second_thoughts.requests["mallory"]
        assert "Second thoughts" not in mallory
        assert "4711" not in mallory


class Remembering(Mind):
    """Ann and Bo plan a picnic (Bo lets slip a password); later Mallory, in a new
    conversation on that channel, finds the picnic memory and asks to recall its dialog."""

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "summarize":
            return DoubleReply(output={"summary": "We planned the team picnic.", "tags": ["picnic"]})
        if task == "rate":
            return consolidation_reply(task, importance=6, sensitivity="public")
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        if self.heard(messages, info) != "mallory":
            return DoubleReply(text="Noted.")
        results = tool_returns(messages)
        if not results:
            search = [
                {"name": "search_memories", "args": {"keyword": "picnic"}},
                {"name": "search_dialog", "args": {"keyword": "password"}},
            ]
            return DoubleReply(tool_calls=search)
        found = [str(r.content) for r in results if r.tool_name == "search_memories"]
        ids = re.findall(r'"id":\s*"([0-9A-Z]{26})"', found[0]) if found else []
        if ids:
            return DoubleReply(tool_calls=[{"name": "recall_dialog", "args": {"memory_id": ids[0]}}])
        return DoubleReply(text="That is all I can say.")


@pytest.fixture
def remembering() -> Iterator[Remembering]:
    instance = Remembering()
    with registered_double("remembering", instance):
        yield instance


async def test_recall_dialog_withholds_the_words_search_dialog_withholds(
    tmp_path: Path, remembering: Remembering
) -> None:
    async with run_runtime(
        tmp_path / "home",
        model="test:remembering",
        config='[memory]\ndefault_sensitivity = { test = "public" }\n[deliberation]\nenabled = false\n',
    ) as pilot:
        await pilot.say("ann: let's plan the picnic", channel="room", speaker="ann", transmitted=True)
        await pilot.say(
            "bo: sure. btw Ann, the vault password is hunter2", channel="room", speaker="bo", transmitted=True
        )
        pilot.advance(timedelta(hours=2))
        assert await pilot.close_idle() == 1
        (record,) = await pilot.full_store.list_records(ADA.id)  # consolidated before close_idle returned
        assert record.summary == "We planned the team picnic."  # public: Mallory may hear it

        await pilot.say(
            "mallory: what did you all talk about?", channel="room", speaker="mallory", transmitted=True
        )
        results = remembering.results["mallory"]
        tools = [result.split(":")[0] for result in results]
        assert tools == ["search_memories", "search_dialog", "recall_dialog"]
        assert record.id in results[0]  # the memory surfaces ...
        assert "hunter2" not in results[1]  # ... its dialog does not, by search ...
        assert "hunter2" not in results[2]  # ... nor by recall, which refuses
        assert f"the words behind memory {record.id} may not be repeated here" in results[2]
        for request in remembering.requests["mallory"]:
            assert "hunter2" not in request
