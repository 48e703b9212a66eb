"""The chat page's "talk" control against `persyn run` (issue 36 item 2, the browser): Debian's
headless Chromium with its fake microphone playing a WAV made here by piper
(`--use-file-for-fake-audio-capture`, once: `%noloop`) clicks "Talk"; the agent's answer (the
model double's echo, "You said: …") comes back as audio, which is transcribed here with the real
local whisper, and the page shows what was heard and said. The voice socket refuses a missing or
wrong key, a 10 MB frame and a flood, and the server goes on serving."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import websockets
from browser import logged_in
from web_daemon import WebDaemon, start

import needs
from persyn.senses.hearing import LocalWhisper, local_whisper_available
from persyn.voice.audio import LISTEN_RATE, resample, wav_bytes
from persyn.voice.speak import PiperSpeaker, local_piper_available

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.local_llm,
    pytest.mark.skipif(
        not (local_whisper_available() and local_piper_available()),
        reason="needs the 'local' extra (uv sync --extra local)",
    ),
]

QUESTION = "What colour is the sky on Tuesdays?"
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start(tmp_path_factory.mktemp("voice"), keys={"alice": False}, PERSYN_VOICE__ENABLED="true")
    yield daemon
    daemon.stop()


def _microphone(path: Path) -> Path:
    """The question said by piper, between a second of silence before and four after, as the
    16-bit mono WAV Chromium's fake microphone plays."""
    speech = PiperSpeaker(steady=True).speak_blocking(QUESTION)
    samples = resample(speech.samples, speech.rate, LISTEN_RATE)
    silence = np.zeros(LISTEN_RATE, dtype=np.float32)
    path.write_bytes(
        wav_bytes(np.concatenate([silence, samples, silence, silence, silence, silence]), LISTEN_RATE)
    )
    return path


def _joined(wavs: list[bytes]) -> bytes:
    """The agent's pieces of speech, each a WAV, as one 16 kHz WAV to transcribe."""
    parts: list[np.ndarray] = []
    for data in wavs:
        with wave.open(io.BytesIO(data), "rb") as reader:
            rate = reader.getframerate()
            pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
        parts.append(resample(pcm.astype(np.float32) / 32768.0, rate, LISTEN_RATE))
    return wav_bytes(np.concatenate(parts), LISTEN_RATE)


def _words(text: str) -> set[str]:
    return {word.strip(".,!?;:'\"").lower() for word in text.split()}


@pytest.mark.skipif(shutil.which("chromium") is None, reason=needs.reason("Debian's chromium"))
def test_talk_on_the_page_is_heard_and_answered_aloud(web: WebDaemon, tmp_path: Path) -> None:
    from playwright.sync_api import WebSocket, expect

    microphone = _microphone(tmp_path / "question.wav")
    flags = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]
    spoken: list[bytes] = []
    sent: list[str] = []

    def watch(socket: WebSocket) -> None:
        if socket.url.endswith("/v1/voice"):
            socket.on(
                "framereceived",
                lambda payload: spoken.append(payload) if isinstance(payload, bytes) else None,
            )
            socket.on("framesent", lambda payload: sent.append(payload) if isinstance(payload, str) else None)

    with logged_in(web.url, web.keys["alice"], args=flags) as page:
        page.on("websocket", watch)
        page.get_by_role("button", name="Talk").click()
        expect(page.locator("#status")).to_contain_text("talking with Ada")
        heard = page.locator(".msg.user.voice").first
        expect(heard).to_contain_text("sky", timeout=WAIT_MS)
        said = page.locator(".msg.agent.voice").first
        try:
            expect(said).to_contain_text("You said", timeout=WAIT_MS)
        except AssertionError:
            print(
                "page log:",
                page.locator("#log").inner_text(),
                "status:",
                page.locator("#status").inner_text(),
            )
            closed = page.get_attribute("body", "data-voice-closed")
            print("sent:", [m for m in sent if m.startswith("{")][:20], "socket closed:", closed)
            raise
        # The page played the speech and told the server so (a mark answered "played").
        page.wait_for_function("() => Number(document.body.dataset.played || 0) >= 1", timeout=WAIT_MS)
        expect(page.locator("body")).to_have_attribute("data-talking", "yes")
        page.get_by_role("button", name="Stop talking").click()
        expect(page.locator("body")).to_have_attribute("data-talking", "no")
    hello = json.loads(sent[0])
    assert hello["type"] == "hello" and hello["key"] == web.keys["alice"]  # in the message, not the URL
    assert any(json.loads(s).get("type") == "played" for s in sent[1:] if s.startswith("{"))
    assert spoken, "no speech came back"
    whisper = LocalWhisper()
    asyncio.run(whisper.load())
    reply = asyncio.run(whisper.transcribe(_joined(spoken), "audio/wav"))
    assert {"said", "sky"} <= _words(reply.text), reply.text


async def _refusal(url: str, *messages: str | bytes) -> tuple[int | None, list[str]]:
    """Open the voice socket, send `messages`, read until it closes: the close code and what
    the server said."""
    said: list[str] = []
    async with websockets.connect(url, max_size=2**24) as socket:
        try:
            for message in messages:
                await socket.send(message)
            async for answer in socket:
                if isinstance(answer, str):
                    said.append(answer)
        except websockets.ConnectionClosed:
            pass
        return socket.close_code, said


def test_the_voice_socket_refuses_bad_keys_huge_frames_and_floods(web: WebDaemon) -> None:
    import httpx

    url = web.url.replace("http://", "ws://").rstrip("/") + "/v1/voice"
    hello = json.dumps({"type": "hello", "key": web.keys["alice"]})

    async def scenario() -> None:
        code, said = await _refusal(url, json.dumps({"type": "hello"}))
        assert code == 1008 and "key" in json.loads(said[-1])["message"]
        code, said = await _refusal(url, json.dumps({"type": "hello", "key": "psk-" + "x" * 40}))
        assert code == 1008 and "unknown or revoked" in json.loads(said[-1])["message"]
        code, _ = await _refusal(url, b"\x00" * 640)  # audio before any hello
        assert code == 1008
        code, _ = await _refusal(url, hello, b"\x00" * 10_000_000)
        assert code == 1009  # refused by size before it was read
        code, said = await _refusal(url, hello, *([b"\x00\x00"] * 2_000))
        assert code == 1008 and "a second" in json.loads(said[-1])["message"]
        # The server goes on: a proper session opens.
        async with websockets.connect(url) as socket:
            await socket.send(hello)
            ready = json.loads(await asyncio.wait_for(socket.recv(), 60))
            assert ready["type"] == "ready" and ready["session"].startswith("web-")
            await socket.send(json.dumps({"type": "bye"}))

    asyncio.run(scenario())
    assert httpx.get(web.url + "healthz", timeout=30).status_code == 200
