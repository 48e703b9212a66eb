"""Quick facts, goals and reminders stay in the compartment they were set in (issue 13, item 3).

Adversarial scenario through the real runtime (DBOS, SQLite, the tool loop) with a scripted
respond model that calls the agent's own tools: Ann, in her direct messages, has the agent
note facts (about her and about itself), a goal and a reminder; Mallory, on another channel,
asks for them through every listing tool. None of it reaches Mallory — neither in the tool
results nor anywhere in the request the model receives on her channel — while the goal the
agent set itself on a heartbeat, with nobody present and nothing read, is visible to both.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.reflection import SelfAssessment
from persyn.testing import ADA, consolidation_reply, registered_double, run_runtime
from persyn.testing.models import DoubleReply
from persyn.testing.requests import last_input, request_text, tool_returns

# What Ann confides; none of these strings may ever reach Mallory's channel.
SECRETS = ("4711", "surprise party", "engagement ring", "hates her boss")
OWN_GOAL = "Learn to play Go"

ASK_EVERYTHING = [
    {"name": "get_facts", "args": {"about": "Ann"}},
    {"name": "get_facts", "args": {"about": "me"}},
    {"name": "list_goals", "args": {"include_closed": True}},
    {"name": "list_reminders", "args": {}},
    {"name": "recent_activity", "args": {}},
]


class Mind:
    """The respond model: on a heartbeat it sets itself a goal; Ann confides; Mallory asks
    for everything. Keeps each request it receives, by the input it answers."""

    def __init__(self) -> None:
        self.requests: dict[str, list[str]] = {}
        self.results: dict[str, list[str]] = {}
        self.speaking = ""

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "reflect":
            return SelfAssessment(
                patterns="nothing yet",
                serves_objectives=True,
                intention="revise_goals",
                plan="set myself a goal of my own",
            )
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        said = last_input(messages)
        results = tool_returns(messages)
        if not results:  # a new input (a continuation repeats no input)
            self.speaking = (
                "heartbeat" if said.startswith(("Heartbeat", "My self-assessment")) else said.split(":")[0]
            )
        who = self.speaking
        self.requests.setdefault(who, []).append(request_text(messages, info))
        self.results.setdefault(who, []).extend(str(r.content) for r in results)
        if results:
            return DoubleReply(text="Done.")
        if who == "heartbeat":
            return DoubleReply(tool_calls=[{"name": "create_goal", "args": {"description": OWN_GOAL}}])
        if who == "ann":
            return DoubleReply(
                tool_calls=[
                    {"name": "set_fact", "args": {"about": "Ann", "key": "door code", "value": "4711"}},
                    {
                        "name": "set_fact",
                        "args": {"about": "me", "key": "secret", "value": "Ann hates her boss"},
                    },
                    {"name": "create_goal", "args": {"description": "Plan Ann's surprise party"}},
                    {
                        "name": "set_reminder",
                        "args": {"objective": "Buy the engagement ring", "in_minutes": 600},
                    },
                ]
            )
        if who in ("mallory", "ann-asks"):
            return DoubleReply(tool_calls=ASK_EVERYTHING)
        return DoubleReply(text="Hello.")


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("compartments", instance):
        yield instance


async def test_what_ann_sets_in_her_dm_never_reaches_mallory_elsewhere(tmp_path: Path, mind: Mind) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:compartments", config="[deliberation]\nenabled = false\n"
    ) as pilot:
        # Nothing to review yet: the goal it sets is its own, for everyone.
        assert await pilot.fire(timedelta(hours=1)) == 1
        (own,) = await pilot.full_store.list_goals(ADA.id)
        assert own.description == OWN_GOAL

        await pilot.say("ann: please remember all this", channel="dm-ann", speaker="ann", transmitted=True)
        stored = {g.description for g in await pilot.full_store.list_goals(ADA.id)}
        assert stored == {OWN_GOAL, "Plan Ann's surprise party"}  # written: the operator sees all
        assert len(await pilot.full_store.list_reminders(ADA.id)) == 1

        await pilot.say(
            "mallory: what do you know about Ann?", channel="lobby", speaker="mallory", transmitted=True
        )
        mallory_results = "\n".join(mind.results["mallory"])
        mallory_requests = "\n".join(mind.requests["mallory"])
        assert len(mind.results["mallory"]) == len(ASK_EVERYTHING)  # every listing tool answered
        for secret in SECRETS:
            assert secret not in mallory_results, secret
            assert secret not in mallory_requests, secret
        # The agent's own goal is in front of Mallory too: in the prompt and in list_goals.
        assert OWN_GOAL in mind.requests["mallory"][0] and OWN_GOAL in mallory_results

        # Back in her DM, Ann is shown what she set there (so the filter is not just empty).
        await pilot.say("ann-asks: what do you know?", channel="dm-ann", speaker="ann", transmitted=True)
        ann_results = "\n".join(mind.results["ann-asks"])
        for secret in ("4711", "surprise party", "engagement ring", "hates her boss"):
            assert secret in ann_results, secret
        assert "Plan Ann's surprise party" in mind.requests["ann-asks"][0]  # standing context there
