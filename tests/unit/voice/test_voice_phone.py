"""The phone path end to end (issue 36 item 2): Twilio's side is the wire-faithful fake of
`persyn.testing.twilio` (the signed webhook, the TwiML read back, a Media Streams caller over a
real WebSocket to uvicorn on loopback); the caller's speech is piper's, made here, as 8 kHz μ-law;
the agent's audio is decoded and transcribed by the real local STT and checked for what the
model double (`test:echo`: "You said: …") answered. Twilio itself cannot run here."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
import websockets
from starlette.applications import Starlette
from voice_samples import piper_phone, words

from persyn.channels.registry import network_web_routes
from persyn.channels.voice.channel import PhoneChannel
from persyn.channels.voice.routes import voice_routes
from persyn.core.clock import ManualClock
from persyn.core.errors import ModelError
from persyn.core.events import Speaker
from persyn.senses.hearing import LocalWhisper, Transcriber, Transcript, local_whisper_available
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime, until
from persyn.testing.twilio import MediaStreamCaller, ring
from persyn.voice.audio import LISTEN_RATE, PHONE_RATE, mulaw_decode, resample, wav_bytes
from persyn.voice.speak import PiperSpeaker, local_piper_available

pytestmark = [
    pytest.mark.local_llm,
    pytest.mark.skipif(
        not (local_whisper_available() and local_piper_available()),
        reason="needs the 'local' extra (uv sync --extra local)",
    ),
]

TOKEN = "twilio-auth-token-for-tests"
ACCOUNT = "AC" + "1" * 32
FRIEND = "+15550001111"
STRANGER = "+15550002222"
WAIT = 120.0


@pytest.fixture(scope="session")
def whisper() -> LocalWhisper:
    engine = LocalWhisper()
    asyncio.run(engine.load())
    return engine


@pytest.fixture(scope="session")
def question() -> bytes:
    return piper_phone("What colour is the sky on Tuesdays?")


@dataclass
class Line:
    pilot: Pilot
    channel: PhoneChannel
    server: str  # where the fake reaches the server
    public: str  # the public URL Twilio signs (the same here)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def line(
    home: Path,
    whisper: Transcriber,
    monkeypatch: pytest.MonkeyPatch,
    extra: str = "",
    models: str = "",
) -> AsyncIterator[Line]:
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", TOKEN)
    port = _free_port()
    public = f"http://127.0.0.1:{port}"
    config = (
        f'[voice]\nenabled = true\nallow = ["{FRIEND}"]\n{extra}'
        f'[voice.twilio]\naccount_sid = "{ACCOUNT}"\npublic_url = "{public}"\n'
        "[pacing.channels.phone]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
        f"{models}"
    )
    settings = harness_settings(home, config=config)
    async with run_runtime(settings, clock=ManualClock(START)) as pilot:
        channel = PhoneChannel(settings, pilot.runtime, transcriber=whisper, mouth=PiperSpeaker(steady=True))
        app = Starlette(routes=list(voice_routes(settings, pilot.runtime, channel)))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        )
        task = asyncio.ensure_future(server.serve())
        try:
            await until(lambda: server.started, "the server to listen")
            yield Line(pilot, channel, public, public)
        finally:
            server.should_exit = True
            await task
            pilot.runtime.detach_channel(channel)


def _transcribable(mulaw: bytes) -> bytes:
    return wav_bytes(resample(mulaw_decode(mulaw), PHONE_RATE, LISTEN_RATE), LISTEN_RATE)


async def test_a_caller_speaks_and_hears_the_agent_answer(
    tmp_path: Path, whisper: LocalWhisper, question: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        sid, answer = await ring(phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT)
        assert (
            answer.status == 200
            and answer.stream_url == phone.public.replace("http", "ws") + "/voice/twilio/stream"
        )
        assert answer.parameters == {"caller": FRIEND, "callSid": sid}
        assert answer.stream_url is not None
        caller = MediaStreamCaller(sid, account_sid=ACCOUNT)
        await caller.connect(answer.stream_url, TOKEN)
        await caller.start(answer.parameters)
        # The agent speaks first: the direction cue is its first turn (echoed by the double).
        await caller.wait_marks(1, WAIT)
        greeting = len(caller.heard)
        await caller.send_silence(0.3)
        await caller.send_audio(question)
        await caller.send_silence(1.0)
        call = phone.channel.calls[sid]
        await caller.wait_marks(len(call.said) + 1, WAIT)
        while any(piece.startswith("You said") for piece in call.said[1:]) is False:
            await caller.wait_marks(len(caller.marks) + 1, WAIT)
        await asyncio.sleep(0)  # the last mark's frames are already in
        reply = await whisper.transcribe(_transcribable(bytes(caller.heard[greeting:])), "audio/wav")
        assert {"said", "sky"} <= words(reply.text), reply.text
        assert call.said[0].startswith("You said") and "phone call" not in " ".join(call.said).lower()
        await caller.hang_up()
        await phone.pilot.wait_for(_no_calls(phone.channel), "the call to end")


def _no_calls(channel: PhoneChannel):
    async def check() -> bool:
        return not channel.calls

    return check


async def test_unsigned_or_badly_signed_requests_are_refused(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        _, unsigned = await ring(
            phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT, sign=False
        )
        _, forged = await ring(
            phone.server, phone.public, "not-the-token", caller=FRIEND, account_sid=ACCOUNT
        )
        _, elsewhere = await ring(
            phone.server, "https://evil.example", TOKEN, caller=FRIEND, account_sid=ACCOUNT
        )
        _, other_account = await ring(
            phone.server, phone.public, TOKEN, caller=FRIEND, account_sid="AC" + "9" * 32
        )
        assert [a.status for a in (unsigned, forged, elsewhere, other_account)] == [403, 403, 403, 403]
        stream = phone.public.replace("http", "ws") + "/voice/twilio/stream"
        for kwargs in ({"sign": False}, {"signed_url": "wss://elsewhere.example/voice/twilio/stream"}):
            caller = MediaStreamCaller("CA" + "2" * 32)
            with pytest.raises(websockets.InvalidStatus) as refused:
                await caller.connect(stream, TOKEN, **kwargs)  # type: ignore[arg-type]
            assert refused.value.response.status_code == 403
        assert not phone.channel.calls


async def test_a_huge_webhook_body_is_refused_before_it_is_read(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call webhook is a stranger's to reach: 10 MB, with a Content-Length or without one,
    is 413 before the signature is even checked, and the next honest call is answered."""

    async def pieces() -> AsyncIterator[bytes]:
        for _ in range(160):
            yield b"From=%2B1&" + b"z" * 65526

    form = {"Content-Type": "application/x-www-form-urlencoded"}
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        url = phone.server + "/voice/twilio/incoming"
        async with httpx.AsyncClient(timeout=WAIT) as http:
            declared = await http.post(url, content=b"From=" + b"1" * 10_000_000, headers=form)
            undeclared = await http.post(url, content=pieces(), headers=form)
            not_a_form = await http.post(url, content=b"\xff\xfe=\xff", headers=form)
        for refused in (declared, undeclared):
            assert refused.status_code == 413 and "[web] max_body_bytes" in refused.text
        assert not_a_form.status_code == 400 and "not a form" in not_a_form.text
        assert not phone.channel.calls
        _, answer = await ring(phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT)
        assert answer.status == 200 and answer.stream_url is not None


async def test_a_stranger_is_turned_away_politely(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        _, answer = await ring(phone.server, phone.public, TOKEN, caller=STRANGER, account_sid=ACCOUNT)
        assert answer.stream_url is None and answer.said is not None
        assert "does not take calls" in answer.said
        # Nor can a stranger skip the webhook: a signed stream whose start names them is closed.
        stream = phone.public.replace("http", "ws") + "/voice/twilio/stream"
        caller = MediaStreamCaller("CA" + "3" * 32)
        await caller.connect(stream, TOKEN)
        await caller.start({"caller": STRANGER, "callSid": caller.call_sid})
        assert caller._reader is not None
        await asyncio.wait_for(caller._reader, WAIT)  # the server closed the stream
        assert not phone.channel.calls and not caller.heard
        # Once their number is a contact's phone identity, they are answered.
        number = Speaker(service="phone", channel="", speaker_id=STRANGER, display_name="Sam")
        await phone.pilot.runtime.resolve_speaker(phone.pilot.agent.id, number)
        _, known = await ring(phone.server, phone.public, TOKEN, caller=STRANGER, account_sid=ACCOUNT)
        assert known.stream_url is not None and known.parameters["caller"] == STRANGER


async def test_malformed_messages_are_skipped_and_a_stream_without_start_is_closed(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        stream = phone.public.replace("http", "ws") + "/voice/twilio/stream"
        caller = MediaStreamCaller("CA" + "4" * 32)
        await caller.connect(stream, TOKEN)
        for junk in ("not json", "[1, 2]", '{"event": 7}', '{"event": "media", "media": {"payload": "%%%"}}'):
            await caller.send_raw(junk)
        await caller.send_audio(b"\xff" * 1600)  # media before start: no call to hear it
        assert caller._reader is not None
        await asyncio.wait_for(caller._reader, WAIT)  # closed after the start timeout
        assert not phone.channel.calls and not caller.heard


async def test_the_routes_are_mounted_only_when_voice_is_enabled(tmp_path: Path) -> None:
    off = harness_settings(tmp_path / "off")
    on = harness_settings(
        tmp_path / "on", config='[voice]\nenabled = true\n[voice.twilio]\npublic_url = "https://x.example"\n'
    )
    async with run_runtime(off) as pilot:
        assert not [r for r in network_web_routes(off, pilot.runtime) if "/voice/" in getattr(r, "path", "")]
        paths = {getattr(r, "path", "") for r in network_web_routes(on, pilot.runtime)}
        assert {"/voice/twilio/incoming", "/voice/twilio/stream"} <= paths


async def _greeted(phone: Line) -> tuple[str, str | None]:
    """A call from the friend, greeted and hung up: its sid and its conversation."""
    sid, answer = await ring(phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT)
    assert answer.stream_url is not None
    caller = MediaStreamCaller(sid, account_sid=ACCOUNT)
    await caller.connect(answer.stream_url, TOKEN)
    await caller.start(answer.parameters)
    await caller.wait_marks(1, WAIT)
    conversation = phone.channel.calls[sid].conversation_id
    await caller.hang_up()
    await until(lambda: sid not in phone.channel.calls, "the call to end")
    return sid, conversation


async def test_each_call_is_a_conversation_of_its_own(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        first_sid, first = await _greeted(phone)
        second_sid, second = await _greeted(phone)
        assert first_sid != second_sid
        assert first is not None and second is not None and first != second


async def _connected(phone: Line) -> MediaStreamCaller:
    sid, answer = await ring(phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT)
    assert answer.stream_url is not None
    caller = MediaStreamCaller(sid, account_sid=ACCOUNT)
    await caller.connect(answer.stream_url, TOKEN)
    await caller.start(answer.parameters)
    await caller.wait_marks(1, WAIT)  # greeted
    return caller


class DeafEars:
    """A transcriber whose engine fails on every piece (the port's `ModelError`)."""

    model = "test:deaf"

    async def transcribe(self, data: bytes, media_type: str) -> Transcript:
        raise ModelError("the speech engine fell over")


async def test_speech_the_engine_cannot_hear_gets_the_holding_phrase(
    tmp_path: Path, whisper: LocalWhisper, question: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", DeafEars(), monkeypatch) as phone:
        caller = await _connected(phone)
        call = phone.channel.calls[caller.call_sid]
        greeting = len(caller.heard)
        await caller.send_audio(question)
        await caller.send_silence(1.0)
        await caller.wait_marks(2, WAIT)
        assert call.said[1] == phone.channel.config.holding_phrase
        heard = await whisper.transcribe(_transcribable(bytes(caller.heard[greeting:])), "audio/wav")
        assert "moment" in words(heard.text), heard.text
        # The call goes on: hanging up still ends it cleanly.
        await caller.hang_up()
        await until(lambda: not phone.channel.calls, "the call to end")


async def test_a_dropped_line_ends_the_call(
    tmp_path: Path, whisper: LocalWhisper, question: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        caller = await _connected(phone)
        await caller.send_audio(question[: len(question) // 2])  # mid-sentence
        await caller.drop()
        await until(lambda: not phone.channel.calls, "the dropped call to end")
        # The line is free for the next call.
        again = await _connected(phone)
        assert again.call_sid in phone.channel.calls
        await again.hang_up()


async def test_a_call_past_max_call_minutes_is_ended(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch, extra="max_call_minutes = 0.1\n") as phone:
        caller = await _connected(phone)
        assert caller._reader is not None
        await asyncio.wait_for(caller._reader, WAIT)  # the server closed the stream
        await until(lambda: not phone.channel.calls, "the call to end")


async def test_doctor_reports_what_a_call_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from persyn.channels.voice.plugin import PLUGIN

    assert PLUGIN.probe is not None
    on = harness_settings(
        tmp_path / "on", config='[voice]\nenabled = true\n[voice.twilio]\npublic_url = "https://x.example"\n'
    )
    monkeypatch.delenv("TWILIO_AUTH_TOKEN", raising=False)
    missing = await PLUGIN.probe(on)
    assert not missing.ok and "TWILIO_AUTH_TOKEN" in missing.detail
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", TOKEN)
    ready = await PLUGIN.probe(on)
    assert ready.ok and "https://x.example/voice/twilio/incoming" in ready.detail
    nowhere = harness_settings(tmp_path / "nowhere", config="[voice]\nenabled = true\n")
    assert "public_url" in (await PLUGIN.probe(nowhere)).detail
    bad = harness_settings(
        tmp_path / "bad",
        config='[voice]\nenabled = true\nspeak = "acme:x"\n[voice.twilio]\npublic_url = "https://x.example"\n',
    )
    assert "unknown provider" in (await PLUGIN.probe(bad)).detail
