"""Raw dialog in recall (issue 39) is withheld exactly as the `search_dialog` tool withholds it:
verbatim words reach a prompt only on the channel they were said on, before people who were
all there — never through recall on another channel or service, never to a stranger, never
through a channel group, and never once purged.

Adversarial scenario through the real runtime (DBOS, SQLite, `[memory] dialog_recall` on by
default) with a scripted respond model that keeps every request it receives: Ann tells the
agent a locker code in her direct messages and where the tickets are on the web chat; later
Mallory on another channel, Bo in the group room (grouped with Ann's DM), and Ann herself in the room ask
for them in the same words. Only Ann, back where she said each, is shown it, as what was
said.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.testing import ADA, consolidation_reply, registered_double, run_runtime
from persyn.testing.harness import RecordingChannel
from persyn.testing.models import DoubleReply
from persyn.testing.requests import last_input, request_text

LOCKER = "31-17-5"
TICKETS = "under the blue vase"
ASK_LOCKER = "what is the locker combination at the marina gym?"
ASK_TICKETS = "where are the zeppelin tickets hidden?"


class Mind:
    """The respond model: says "Noted." and keeps each request by the input it answers."""

    def __init__(self) -> None:
        self.requests: dict[str, str] = {}

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "decide":
            return DoubleReply(output={"action": "speak", "reason": "asked"})
        if task != "respond":
            return consolidation_reply(task) or DoubleReply(text="ok")
        self.requests[last_input(messages)] = request_text(messages, info)
        return DoubleReply(text="Noted.")

    def request(self, said: str) -> str:
        [found] = [text for heard, text in self.requests.items() if said in heard]
        return found


@pytest.fixture
def mind() -> Iterator[Mind]:
    instance = Mind()
    with registered_double("raw-dialog", instance):
        yield instance


async def test_raw_dialog_surfaces_only_where_it_was_said_among_those_who_were_there(
    tmp_path: Path, mind: Mind
) -> None:
    config = (
        "[deliberation]\nenabled = false\n"
        # A channel group widens memories, never verbatim dialog.
        '[memory]\nchannel_groups = [["test:dm-ann", "test:room"]]\n'
    )
    surfaces = {service: RecordingChannel(service) for service in ("test", "web")}
    async with run_runtime(
        tmp_path / "home", model="test:raw-dialog", config=config, channels=surfaces
    ) as pilot:
        await pilot.say(
            f"ann: my locker combination at the marina gym is {LOCKER}", channel="dm-ann", speaker="ann"
        )
        await pilot.say(
            f"ann: the zeppelin tickets are hidden {TICKETS}", service="web", channel="chat", speaker="ann"
        )
        await pilot.say("bo: hello room", channel="room", speaker="bo")
        pilot.advance(timedelta(hours=2))
        assert await pilot.close_idle() == 3
        await pilot.settle()

        # A stranger on another channel and service than the web's, asking in the very words.
        await pilot.say(f"mallory: {ASK_LOCKER} {ASK_TICKETS}", channel="lobby", speaker="mallory")
        # A stranger in the room grouped with Ann's DM.
        await pilot.say(f"bo: {ASK_LOCKER} {ASK_TICKETS}", channel="room", speaker="bo")
        # Ann herself in the group, with Bo present: a DM is not repeated in a group.
        await pilot.say(f"ann: {ASK_LOCKER} (in the room)", channel="room", speaker="ann")
        for asked in ("mallory:", f"bo: {ASK_LOCKER}", "(in the room)"):
            request = mind.request(asked)
            assert LOCKER not in request, asked
            assert TICKETS not in request, asked

        # Ann where she said each, in a new conversation: shown, as what was said.
        pilot.advance(timedelta(hours=2))
        await pilot.close_idle()
        await pilot.say(f"ann: {ASK_LOCKER} (in my DM)", channel="dm-ann", speaker="ann")
        await pilot.say(f"ann: {ASK_TICKETS} (on the web)", service="web", channel="chat", speaker="ann")
        in_dm, on_web = mind.request("(in my DM)"), mind.request("(on the web)")
        assert (
            "[said] (" in in_dm
            and f'Ann: "ann: my locker combination at the marina gym is {LOCKER}"' in in_dm
        )
        assert TICKETS not in in_dm  # the web's words stay on the web
        assert TICKETS in on_web and LOCKER not in on_web

        # Purged (the retention window): gone from recall too.
        pilot.advance(timedelta(hours=2))
        await pilot.close_idle()
        await pilot.settle()
        pilot.advance(timedelta(minutes=1))
        assert await pilot.full_store.purge_dialog(ADA.id, pilot.clock.now()) > 0
        await pilot.say(f"ann: {ASK_LOCKER} (after the purge)", channel="dm-ann", speaker="ann")
        assert LOCKER not in mind.request("(after the purge)")


async def test_a_forgotten_memory_takes_the_words_it_was_made_from_out_of_recall(
    tmp_path: Path, mind: Mind
) -> None:
    """`persyn memory forget` deletes the memory AND the verbatim dialog it names: otherwise
    raw-dialog recall would bring back, on its own channel, exactly what was forgotten."""
    from persyn.ops.memory import memory_ops

    config = "[deliberation]\nenabled = false\n"
    async with run_runtime(
        tmp_path / "home", model="test:raw-dialog", config=config, channels={"test": RecordingChannel("test")}
    ) as pilot:
        await pilot.say(
            f"ann: my locker combination at the marina gym is {LOCKER}", channel="dm-ann", speaker="ann"
        )
        pilot.advance(timedelta(hours=2))
        assert await pilot.close_idle() == 1
        await pilot.settle()
        [memory] = await pilot.full_store.list_records(ADA.id)
        assert memory.message_ids  # made from the dialog it names

        # Before forgetting, Ann in her DM is shown her words (the check below can fail).
        await pilot.say(f"ann: {ASK_LOCKER} (before)", channel="dm-ann", speaker="ann")
        assert LOCKER in mind.request("(before)")

        pilot.advance(timedelta(hours=2))
        await pilot.close_idle()
        await pilot.settle()
        async with memory_ops(pilot.settings, pilot.agent, pilot.clock) as ops:
            await ops.forget(memory.id)
        await pilot.say(f"ann: {ASK_LOCKER} (after forgetting)", channel="dm-ann", speaker="ann")
        assert LOCKER not in mind.request("(after forgetting)")
