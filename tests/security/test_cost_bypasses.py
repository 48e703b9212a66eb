"""Issue 13, items 8 and 9 (second review): two ways around the cost bounds, closed.

- `[autonomy] max_messages_per_run` counted a send by what it said (a hash of the person,
  channel and stripped text) so that a re-run tool-call step would count once; eight calls a
  round to one contact whose texts differed only in trailing spaces (or whose `to` differed in
  case) passed as re-runs, and one turn sent 48 messages under a cap of 2. A send is counted by
  the tool call that makes it (its durable step) now.
- The autonomy budget charged a run only for calls that returned: a structured call whose
  output was invalid twice spent (and metered) two round-trips, and the run was charged
  nothing for them. A call is charged what it used however it ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.errors import ToolError
from persyn.core.events import Speaker
from persyn.gateway.base import TokenUsage
from persyn.runtime.background.autonomy import recent_activity
from persyn.testing import ADA, registered_double, run_runtime, tool_returns
from persyn.testing.models import DoubleReply

CALL = TokenUsage(input_tokens=40, output_tokens=10)  # every model call costs 50 tokens
ROUNDS = 6

QUIET = "[deliberation]\nenabled = false\n"


class Model:
    """`spam`: the respond model writes to Pal eight times a round, texts differing only in
    trailing spaces and `to` in case, for `ROUNDS` rounds. `broken_reflection`: the
    heartbeat's self-assessment is never a valid one."""

    def __init__(self) -> None:
        self.spam = False
        self.broken_reflection = False
        self.results: list[list[str]] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "reflect" and self.broken_reflection:
            return DoubleReply(output={"nonsense": True}, usage=CALL)
        if task != "respond" or not self.spam:
            return DoubleReply(text="ok", usage=CALL)
        returns = tool_returns(messages)
        if returns:
            self.results.append([str(r.content) for r in returns])
        if len(self.results) >= ROUNDS:
            return DoubleReply(text="Done.")
        n = len(self.results)
        calls = [
            {
                "name": "message_contact",
                "args": {
                    "to": ("Pal", "pal", "PAL", "pAl")[i % 4],
                    "text": "Buy now!" + " " * (8 * n + i + 1),
                },
            }
            for i in range(8)
        ]
        return DoubleReply(tool_calls=calls)


@pytest.fixture
def model() -> Iterator[Model]:
    instance = Model()
    with registered_double("costbypass", instance):
        yield instance


async def test_eight_calls_a_round_to_one_contact_differing_in_spaces_stop_at_the_cap(
    tmp_path: Path, model: Model
) -> None:
    async with run_runtime(
        tmp_path / "home", model="test:costbypass", config=QUIET + "[autonomy]\nmax_messages_per_run = 2\n"
    ) as pilot:
        runtime, channel = pilot.runtime, pilot.channel
        pal, _ = await runtime.resolve_speaker(
            ADA.id, Speaker(service="test", channel="dm-pal", speaker_id="pal", display_name="Pal")
        )
        quiet, _ = await pilot.say("Good morning.")  # a turn that sent nothing
        model.spam = True
        event, marker = await pilot.say("Tell Pal about the sale. Often.")
        assert marker.transmitted and marker.text == "Done."
        sent = [(o.channel, o.text) for o in channel.delivered if o.channel == "dm-pal"]
        assert sent == [("dm-pal", "Buy now!")] * 2
        assert await runtime.outreach.messages_sent(ADA.id, event.id) == 2
        assert len(model.results) == ROUNDS
        results = [r for round_results in model.results for r in round_results]
        assert len(results) == 8 * ROUNDS  # every call ran (none was refused as a repeat)...
        assert sum("message cap reached" in r for r in results) == 8 * ROUNDS - 2  # ...and was counted
        # A send is counted by its tool call: the same call again (its step re-run after a
        # crash) counts once; another call with the very same text counts again.
        for _ in range(2):
            await runtime.outreach.send_to_contact(
                ADA.id, quiet.id, pal, "test", "dm-pal", "Hi", call_key="step-1"
            )
        assert await runtime.outreach.messages_sent(ADA.id, quiet.id) == 1
        await runtime.outreach.send_to_contact(
            ADA.id, quiet.id, pal, "test", "dm-pal", "Hi", call_key="step-2"
        )
        assert await runtime.outreach.messages_sent(ADA.id, quiet.id) == 2
        with pytest.raises(ToolError, match="message cap reached"):
            await runtime.outreach.send_to_contact(
                ADA.id, quiet.id, pal, "test", "dm-pal", "Hi", call_key="step-3"
            )


async def test_a_beat_whose_self_assessment_fails_is_charged_what_it_spent(
    tmp_path: Path, model: Model
) -> None:
    async with run_runtime(tmp_path / "home", model="test:costbypass", config=QUIET) as pilot:
        channel = pilot.channel
        model.broken_reflection = True
        assert await pilot.fire(timedelta(hours=1)) == 1  # the heartbeat
        (entry,) = await recent_activity(pilot.full_store, ADA.id)
        assert entry.kind == "heartbeat"
        metered = [r for r in pilot.usage() if r.thread_id == entry.id]
        # Invalid twice: two round-trips billed, the call raised, and the beat rested.
        assert [(r.stage, r.input_tokens + r.output_tokens) for r in metered] == [
            ("heartbeat:assess", 50)
        ] * 2
        assert entry.tokens == 100
        assert channel.delivered == []
