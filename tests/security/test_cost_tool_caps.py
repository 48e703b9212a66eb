"""Issue 13 item 8: the caps on one run's tool use hold through the real runtime.

- `[autonomy] max_messages_per_run` was never enforced: the registry is rebuilt for every
  tool call (each is its own durable step), so its counter restarted and one turn sent 16
  messages to 8 contacts. The count now comes from what the run has sent (the store).
- One reply may ask for any number of tool calls: 40 ran in one round, and ten catastrophic
  regular expressions held one turn for 33 s. `[tools] max_calls_per_round` bounds them; the
  calls beyond it get an error result the model reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.errors import ToolError
from persyn.core.events import Speaker
from persyn.testing import ADA, registered_double, run_runtime, tool_returns
from persyn.testing.models import DoubleReply

CONTACTS = [f"Pal{n}" for n in range(8)]

QUIET = "[deliberation]\nenabled = false\n"


class Model:
    """The respond model: one reply of `calls`, a second one of `again`, then an answer."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.again: list[dict[str, Any]] = []
        self.results: list[list[str]] = []  # the tool results of each round-trip

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task != "respond":
            return DoubleReply(text="ok")
        returns = tool_returns(messages)
        if returns:
            self.results.append([str(r.content) for r in returns])
        if len(self.results) == 0 and self.calls:
            return DoubleReply(tool_calls=self.calls)
        if len(self.results) == 1 and self.again:
            return DoubleReply(tool_calls=self.again)
        return DoubleReply(text="Done.")


@pytest.fixture
def model() -> Iterator[Model]:
    instance = Model()
    with registered_double("costcaps", instance):
        yield instance


async def test_a_run_that_messages_eight_contacts_twice_stops_at_the_cap(
    tmp_path: Path, model: Model
) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:costcaps", config=QUIET + "[autonomy]\nmax_messages_per_run = 2\n"
    ) as pilot:
        runtime, channel = pilot.runtime, pilot.channel
        ids: list[str] = []
        for n, name in enumerate(CONTACTS):  # each reachable on a channel of their own
            person_id, _ = await runtime.resolve_speaker(
                ADA.id, Speaker(service="test", channel=f"dm-{n}", speaker_id=f"pal-{n}", display_name=name)
            )
            ids.append(person_id)
        model.calls = [
            {"name": "message_contact", "args": {"to": name, "text": f"Hello {name}!"}} for name in CONTACTS
        ]
        model.again = [
            {"name": "message_contact", "args": {"to": name, "text": f"Me again, {name}."}}
            for name in CONTACTS
        ]
        event, marker = await pilot.say("Write to all my friends, twice.")
        assert marker.transmitted and marker.text == "Done."
        sent = [(o.channel, o.text) for o in channel.delivered if o.channel.startswith("dm-")]
        assert sent == [("dm-0", "Hello Pal0!"), ("dm-1", "Hello Pal1!")]
        first, second = model.results
        assert ['"remaining_this_turn":0' in r for r in first[:2]] == [False, True]
        refusal = (
            "Tool 'message_contact' failed: message cap reached: you have already sent 2 messages "
            "this turn (the most allowed is 2); this one was not sent"
        )
        assert first[2:] == [refusal] * 6 and second == [refusal] * 8
        trace = (await pilot.store.deliberation_traces(ADA.id, [event.id]))[0].trace
        assert [t["status"] for t in trace["tools"]] == ["ok"] * 2 + ["failed"] * 14
        # Counted in the store, by tool call: another send is refused, even one repeating a
        # message already sent (test_cost_bypasses.py has the re-run step counting once).
        assert await runtime.outreach.messages_sent(ADA.id, event.id) == 2
        with pytest.raises(ToolError, match="message cap reached"):
            await runtime.outreach.send_to_contact(ADA.id, event.id, ids[0], "test", "dm-0", "Hello Pal0!")


async def test_forty_tool_calls_in_one_reply_run_only_up_to_the_cap(tmp_path: Path, model: Model) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:costcaps", config=QUIET + "[tools]\nmax_calls_per_round = 8\n"
    ) as pilot:
        model.calls = [{"name": "calculate", "args": {"expression": f"{n} + 1"}} for n in range(40)]
        event, marker = await pilot.say("Count to forty, one tool call each.")
        assert marker.transmitted and marker.text == "Done."
        (results,) = model.results
        assert len(results) == 40  # every call gets a result...
        assert [json.loads(r)["value"] for r in results[:8]] == [str(n + 1) for n in range(8)]
        refusal = (
            "Not run: this reply asked for more than 8 tool calls, the most run at once; only the "
            "first 8 ran. Use their results, and ask for fewer calls at a time."
        )
        assert results[8:] == [refusal] * 32  # ...but only the first eight ran
        trace = (await pilot.store.deliberation_traces(ADA.id, [event.id]))[0].trace
        assert {t["reason"] for t in trace["trips"]} == {"max_calls_per_round"}


async def test_ten_catastrophic_regexes_in_one_reply_are_capped_and_each_one_stopped(
    tmp_path: Path, model: Model
) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:costcaps", config=QUIET + "[tools]\nmax_calls_per_round = 2\n"
    ) as pilot:
        await pilot.say("a" * 40 + "!")  # dialog the pattern backtracks on
        model.calls = [{"name": "search_dialog", "args": {"regex": f"(a+)+$|x{n}"}} for n in range(10)]
        _, marker = await pilot.say("Search for that, ten ways.")
        assert marker.transmitted
        (results,) = model.results
        assert len(results) == 10
        stopped = "took longer than 3 seconds and was stopped"
        ran = [r for r in results if not r.startswith("Not run:")]
        assert len(ran) == 2 and all(stopped in r for r in ran), ran
