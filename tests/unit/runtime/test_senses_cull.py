"""Kept originals are culled with their memory (issue 35 item 3, SPEC §4.1), through the real
runtime, store and housekeeping: an original stays while its dialog or a memory made from it
does, goes (and frees the agent's storage cap) when the last of them goes, and one kept for an
event that was never stored is swept after the grace period, never before. A reference whose
file is gone reads as such."""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.errors import InputError
from persyn.core.events import Event, Upload
from persyn.core.ids import new_id
from persyn.ops.memory import memory_ops
from persyn.senses.library import ORIGINAL_GRACE, AttachmentLibrary
from persyn.senses.media import MediaRejected
from persyn.testing import Pilot, run_runtime
from persyn.testing.models import (
    DoubleReply,
    DoubleResult,
    echo_text,
    last_user_images,
    minimal_instance,
    output_schema,
    registered_double,
)
from persyn.testing.requests import consolidation_reply, request_text
from persyn.testing.vision import describe_image

NO_DELIBERATION = "[deliberation]\nenabled = false\n"
_THROWAWAY = re.compile(r"\bthrowaway\b")


def _rater(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    """Sees images; remembers a conversation that says "throwaway" as unimportant (culled after
    `cull_after_days`), any other as important (kept for good)."""
    if task == "caption":
        return describe_image(last_user_images(messages)[0].data)
    text = request_text(messages, info)
    if task == "summarize":
        said = "a throwaway photo" if _THROWAWAY.search(text) else "a photo of a ring"
        return DoubleReply(output={"summary": f"Sam showed me {said}.", "tags": ["photo"]})
    if task == "rate":
        return consolidation_reply(task, importance=1 if _THROWAWAY.search(text) else 8)
    schema = output_schema(info)
    return consolidation_reply(task) or (
        DoubleReply(output=minimal_instance(schema)) if schema else echo_text(messages)
    )


def red_square_png() -> bytes:
    image = Image.new("RGB", (200, 120), "white")
    ImageDraw.Draw(image).rectangle((60, 30, 130, 90), fill=(225, 25, 25))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


async def _send(pilot: Pilot, text: str, data: bytes, channel: str) -> Event:
    attachments = await pilot.runtime.keep_attachments(
        pilot.agent.id, "test", channel, "sam", [Upload(data=data, filename=f"{channel}.png")]
    )
    event = pilot.event(text, channel=channel).model_copy(update={"attachments": attachments})
    await pilot.idle()
    marker = await pilot.submit(event)
    assert marker.transmitted, marker
    return event


def _library(pilot: Pilot) -> AttachmentLibrary:
    return AttachmentLibrary(pilot.settings.data_dir / "attachments")


def _references(pilot: Pilot) -> set[str]:
    folder = pilot.settings.data_dir / "attachments" / pilot.agent.id
    return {path.stem for path in folder.glob("att-*.json")}


async def test_an_original_goes_with_the_last_dialog_and_memory_that_held_it(tmp_path: Path) -> None:
    size = len(red_square_png())
    cap = f"[senses]\nstorage_max_bytes = {2 * size + size // 2}\n"  # two photos fit, not three
    with registered_double("rater", _rater, sees=True):
        async with run_runtime(tmp_path / "home", model="test:rater", config=NO_DELIBERATION + cap) as pilot:
            agent_id, housekeeping, library = pilot.agent.id, pilot.runtime.housekeeping, _library(pilot)
            throwaway = await _send(pilot, "a throwaway snap", red_square_png(), "shed")
            ring = await _send(pilot, "my grandmother's ring", red_square_png(), "kitchen")
            assert await pilot.close_idle(timedelta(hours=3)) == 2  # consolidated: two memories
            records = await pilot.full_store.list_records(agent_id)
            assert sorted((r.importance, r.summary) for r in records) == [
                (1, "Sam showed me a throwaway photo."),
                (8, "Sam showed me a photo of a ring."),
            ]
            assert library.used_bytes(agent_id) == 2 * size
            with pytest.raises(MediaRejected, match="the limit is"):
                await _send(pilot, "one more", red_square_png(), "porch")

            pilot.advance(timedelta(days=15))
            assert await housekeeping.cull_memories() == 1  # the throwaway memory
            assert await housekeeping.sweep_originals() == 0  # its dialog still holds it
            assert _references(pilot) == {throwaway.attachments[0].reference, ring.attachments[0].reference}

            pilot.advance(timedelta(days=91))
            assert await housekeeping.purge_old_dialog() > 0
            assert await housekeeping.sweep_originals() == size  # the throwaway photo, nothing else
            assert _references(pilot) == {ring.attachments[0].reference}  # the kept memory holds it
            assert library.used_bytes(agent_id) == size
            # The cap it took is free again.
            porch = await _send(pilot, "one more", red_square_png(), "porch")
            assert library.get(agent_id, porch.attachments[0].reference, ["test:porch"]) is not None
            assert await housekeeping.sweep_originals() == 0  # its turn's dialog holds it


async def test_forgetting_a_memory_sweeps_its_original(tmp_path: Path) -> None:
    with registered_double("rater", _rater, sees=True):
        async with run_runtime(tmp_path / "home", model="test:rater", config=NO_DELIBERATION) as pilot:
            ring = await _send(pilot, "my grandmother's ring", red_square_png(), "kitchen")
            assert await pilot.close_idle(timedelta(hours=3)) == 1
            pilot.advance(timedelta(days=100))
            assert await pilot.runtime.housekeeping.purge_old_dialog() > 0
            assert await pilot.runtime.housekeeping.sweep_originals() == 0  # the memory holds it
            (record,) = await pilot.full_store.list_records(pilot.agent.id)
            async with memory_ops(pilot.settings, pilot.agent, pilot.clock) as ops:
                await ops.forget(record.id)  # `persyn memory forget`: the store first, then the file
            assert _references(pilot) == set()
            assert (
                _library(pilot).get(pilot.agent.id, ring.attachments[0].reference, ["test:kitchen"]) is None
            )


async def test_an_orphan_is_swept_after_the_grace_period_and_then_reads_as_gone(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", model="test:vision", config=NO_DELIBERATION) as pilot:
        housekeeping = pilot.runtime.housekeeping
        # Kept, but its event never stored (a crash, or a message refused after its files were kept).
        orphan = await pilot.runtime.keep_attachments(
            pilot.agent.id, "test", "room", "sam", [Upload(data=red_square_png())]
        )
        pilot.advance(ORIGINAL_GRACE - timedelta(minutes=1))
        assert await housekeeping.sweep_originals() == 0  # could still be on its way: kept
        assert _references(pilot) == {orphan[0].reference}
        pilot.advance(timedelta(minutes=2))
        assert await housekeeping.sweep_originals() == len(red_square_png())
        assert list((pilot.settings.data_dir / "attachments" / pilot.agent.id).iterdir()) == []
        # An event that names it after all (a late replay) reads that it is gone.
        event = pilot.event("what is this?").model_copy(update={"attachments": orphan})
        await pilot.idle()
        marker = await pilot.submit(event)
        assert marker.text == "You said: [a file that is no longer kept] what is this?"


# A process that dies between writing an original's temporary file and renaming it into place:
# the library's own writer, with `os.replace` ending the process as a kill would at that moment.
_CRASH = """
import os, sys
from datetime import UTC, datetime
from pathlib import Path
from persyn.core.events import AttachmentKind
from persyn.senses.library import AttachmentLibrary, KeptOriginal
agent, reference = sys.argv[2], sys.argv[3]
os.replace = lambda *args: os._exit(9)
kept = KeptOriginal(reference=reference, agent_id=agent, scope="test:room", service="test",
    channel="room", kind=AttachmentKind.DOCUMENT, media_type="text/plain", size=5, sha256="0",
    file=f"{reference}.txt", received_at=datetime.now(UTC))
AttachmentLibrary(Path(sys.argv[1])).put(kept, b"hello")
"""


async def test_a_half_written_file_a_crash_left_is_swept_after_the_configured_grace(tmp_path: Path) -> None:
    config = NO_DELIBERATION + "[senses]\noriginal_grace_hours = 2\n"
    async with run_runtime(tmp_path / "home", model="test:vision", config=config) as pilot:
        agent_id, housekeeping = pilot.agent.id, pilot.runtime.housekeeping
        reference = f"att-{new_id(pilot.clock.now())}"
        folder = pilot.settings.data_dir / "attachments"
        crashed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _CRASH, str(folder), agent_id, reference],
            check=False,
            capture_output=True,
        )
        assert crashed.returncode == 9, crashed.stderr.decode()
        (left,) = (folder / agent_id).iterdir()
        assert left.name.startswith(f".{reference}.txt.") and left.name.endswith(".tmp")
        assert _library(pilot).used_bytes(agent_id) == 0  # not an original: not counted, not readable

        pilot.advance(timedelta(hours=2) - timedelta(minutes=1))
        assert await housekeeping.sweep_originals() == 0  # could be a write in progress
        assert left.exists()
        pilot.advance(timedelta(minutes=2))
        assert await housekeeping.sweep_originals() == len(b"hello")
        assert list((folder / agent_id).iterdir()) == []


async def test_files_of_a_message_too_long_once_read_are_swept_after_the_grace(tmp_path: Path) -> None:
    """A document read into the turn makes the message longer than `[conversation]
    max_message_chars`: the event is refused after its file was kept (nothing holds it), and
    the sweep takes the file once the grace period (`[senses] original_grace_hours`) is over."""
    config = NO_DELIBERATION + "[conversation]\nmax_message_chars = 300\n[senses]\noriginal_grace_hours = 1\n"
    async with run_runtime(tmp_path / "home", model="test:vision", config=config) as pilot:
        agent_id, housekeeping = pilot.agent.id, pilot.runtime.housekeeping
        notes = ("The plumber comes on Tuesday between nine and noon. " * 12).encode()  # 624 bytes
        attachments = await pilot.runtime.keep_attachments(
            agent_id, "test", "room", "sam", [Upload(data=notes, filename="notes.txt")]
        )
        event = pilot.event("see the notes").model_copy(update={"attachments": attachments})
        with pytest.raises(InputError, match="300"):
            await pilot.runtime.submit(event)
        assert await pilot.runtime.get_event(agent_id, event.id) is None  # nothing stored
        assert _references(pilot) == {attachments[0].reference}

        pilot.advance(timedelta(minutes=59))
        assert await housekeeping.sweep_originals() == 0
        pilot.advance(timedelta(minutes=2))
        assert await housekeeping.sweep_originals() == len(notes)
        assert _references(pilot) == set()
