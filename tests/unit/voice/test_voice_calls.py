"""Calls the agent places (issue 36 item 4): `place_call` and `end_call` against Twilio's REST
side, faked at the wire (`persyn.testing.twilio.TwilioCloud`: basic auth, the call resource,
Twilio's JSON errors, the signed answer webhook, the callee's Media Stream). The model is a
tool-calling double; the callee hears the agent through the stream and what it said is checked
by transcribing that audio with the real local whisper. Twilio itself cannot run here."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from starlette.applications import Starlette
from voice_samples import piper_phone, words

from persyn.channels.voice.channel import PhoneChannel
from persyn.channels.voice.routes import voice_routes
from persyn.core.clock import ManualClock
from persyn.core.events import Speaker
from persyn.senses.hearing import LocalWhisper, local_whisper_available
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime, until
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.testing.requests import tool_returns
from persyn.testing.twilio import TwilioCloud
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
OURS = "+15550009999"
SAM = "+15550003333"
WAIT = 120.0


@dataclass
class Mind:
    """The agent's model: asked to call Sam, it does; told a call was answered, it greets and
    states the purpose; anything said on a call after that, it says goodbye and hangs up."""

    cues: list[str] = field(default_factory=lambda: [])
    results: list[str] = field(default_factory=lambda: [])
    tools: list[list[str]] = field(default_factory=lambda: [])
    purpose: str = "to ask about the book club"

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task == "voice":  # the fast half of a call (Appendix A): no tools, the cue in its prompt
            cue = re.search(r"\[phone call:[^\]]*\]", info.instructions or "")
            if cue is not None:
                self.cues.append(cue.group(0))
                return DoubleReply(text="Hello Sam, it is Ada. I am calling about the book club.")
            return DoubleReply(text="I see.")
        if task != "respond":
            return DoubleReply(text="ok")
        said = last_user_text(messages)
        self.tools.append(sorted(t.name for t in info.function_tools))
        results = tool_returns(messages)
        if results:
            self.results += [str(r.content) for r in results]
            return DoubleReply(text="Done.")
        if said.startswith("Remind me to"):
            objective = said.removeprefix("Remind me to").strip(" .")
            return DoubleReply(
                tool_calls=[{"name": "set_reminder", "args": {"objective": objective, "in_minutes": 10}}]
            )
        if said.startswith("Write to Bo, then call Sam"):
            return DoubleReply(
                tool_calls=[
                    {"name": "message_contact", "args": {"to": "Bo", "text": "Sam is getting a call."}},
                    {"name": "place_call", "args": {"contact": "Sam", "purpose": self.purpose}},
                ]
            )
        asked = re.search(r"\bcall (\w+)", said, re.IGNORECASE)
        if asked is not None:
            who = asked.group(1)
            return DoubleReply(
                tool_calls=[{"name": "place_call", "args": {"contact": who, "purpose": self.purpose}}]
            )
        return DoubleReply(tool_calls=[{"name": "end_call", "args": {"goodbye": "Goodbye, Sam."}}])


@pytest.fixture
def mind() -> Any:
    instance = Mind()
    with registered_double("caller", instance):
        yield instance


@pytest.fixture(scope="session")
def whisper() -> LocalWhisper:
    engine = LocalWhisper()
    asyncio.run(engine.load())
    return engine


@dataclass
class Office:
    pilot: Pilot
    channel: PhoneChannel
    cloud: TwilioCloud


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def office(
    home: Path,
    whisper: LocalWhisper,
    monkeypatch: pytest.MonkeyPatch,
    *,
    extra: str = "",
    answer: bool = True,
    token: str = TOKEN,
    lines: tuple[str, ...] = (SAM,),
    before: str = "",
) -> AsyncIterator[Office]:
    """The agent with a phone line (uvicorn on loopback) and Twilio's REST side (the fake)."""
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", token)
    port = _free_port()
    public = f"http://127.0.0.1:{port}"
    async with TwilioCloud(ACCOUNT, TOKEN, numbers=(OURS,), answer=answer) as cloud:
        config = (
            # Ann's room shares a compartment with these lines: she may have the agent call them.
            f"[memory]\nchannel_groups = {[['test:room', f'phone:{n}'] for n in lines]}\n"
            f"[deliberation]\nenabled = false\n{before}"
            f"[voice]\nenabled = true\n{extra}"
            f'[voice.twilio]\naccount_sid = "{ACCOUNT}"\npublic_url = "{public}"\n'
            f'from_number = "{OURS}"\napi_url = "{cloud.url}"\n'
            "[pacing.channels.phone]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
            "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
        )
        settings = harness_settings(home, model="test:caller", config=config)
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = PhoneChannel(
                settings, pilot.runtime, transcriber=whisper, mouth=PiperSpeaker(steady=True)
            )
            app = Starlette(routes=list(voice_routes(settings, pilot.runtime, channel)))
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
            )
            task = asyncio.ensure_future(server.serve())
            try:
                await until(lambda: server.started, "the server to listen")
                # With from_number set, the routes connect the line at once (not on a first call in).
                await until(lambda: channel._attached, "the phone line to connect")
                agent = pilot.agent.id
                for number, name in ((SAM, "Sam"), ("555-CALL-ME", "Bad")):
                    phone = Speaker(service="phone", channel="", speaker_id=number, display_name=name)
                    await pilot.runtime.resolve_speaker(agent, phone)
                bo = Speaker(service="test", channel="room", speaker_id="bo", display_name="Bo")
                await pilot.runtime.resolve_speaker(agent, bo)
                yield Office(pilot, channel, cloud)
            finally:
                server.should_exit = True
                await task
                pilot.runtime.detach_channel(channel)


def _transcribable(mulaw: bytes) -> bytes:
    return wav_bytes(resample(mulaw_decode(mulaw), PHONE_RATE, LISTEN_RATE), LISTEN_RATE)


async def test_asked_to_call_sam_the_agent_calls_greets_and_hangs_up(
    tmp_path: Path, whisper: LocalWhisper, mind: Mind, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with office(tmp_path / "home", whisper, monkeypatch) as line:
        turn = await line.pilot.say("Please call Sam.", speaker="ann", name="Ann")
        assert turn.marker.transmitted
        assert "place_call" in mind.tools[0] and "end_call" not in mind.tools[0]  # not on a call
        (placed,) = line.cloud.calls.values()
        assert (placed.to, placed.from_) == (SAM, OURS)
        assert placed.url is not None and placed.url.startswith(line.channel.config.twilio.public_url)
        assert "calling Sam" in mind.results[0] and placed.sid in mind.results[0]
        # Sam picks up: the signed webhook's TwiML connects the stream, naming the direction.
        await until(lambda: placed.callee is not None, "Sam's side to open the stream")
        assert placed.answer is not None
        assert placed.answer.parameters["direction"] == "outbound"
        assert (
            placed.answer.parameters["callee"] == SAM and placed.answer.parameters["purpose"] == mind.purpose
        )
        sam = placed.callee
        assert sam is not None
        await sam.wait_marks(1, WAIT)
        (cue,) = mind.cues
        assert "you (Ada) called Sam" in cue and "just answered" in cue and mind.purpose in cue
        call = line.channel.calls[placed.sid]
        assert call.direction == "outbound"
        while not any("book club" in piece for piece in call.said):
            await sam.wait_marks(len(sam.marks) + 1, WAIT)
        greeting = await whisper.transcribe(_transcribable(bytes(sam.heard)), "audio/wav")
        assert {"book", "club"} <= words(greeting.text), greeting.text
        # Sam says something; the agent says goodbye and hangs up over REST.
        heard_before = len(sam.heard)
        await sam.send_silence(0.3)
        await sam.send_audio(piper_phone("Thanks, that is all."))
        await sam.send_silence(1.0)
        await until(lambda: placed.status == "completed", "the hang-up to reach Twilio", WAIT)
        assert placed.statuses[-1] == "completed" and "end_call" in mind.tools[-1]
        assert any(path.endswith(f"/Calls/{placed.sid}.json") for _, path, _ in line.cloud.requests)
        bye = await whisper.transcribe(_transcribable(bytes(sam.heard[heard_before:])), "audio/wav")
        assert "goodbye" in words(bye.text), bye.text
        await until(lambda: not line.channel.calls, "the call to end")


async def test_a_stranger_elsewhere_cannot_have_the_agent_call_sam(
    tmp_path: Path, whisper: LocalWhisper, mind: Mind, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with office(tmp_path / "home", whisper, monkeypatch, answer=False) as line:
        turn = await line.pilot.say("Call Sam.", speaker="mallory", name="Mallory", channel="elsewhere")
        assert turn.marker.transmitted  # refused, the agent still answers
        assert "not called" in mind.results[0] and f"phone:{SAM}" in mind.results[0]
        assert not line.cloud.calls and not line.cloud.requests
        # A contact with no phone number is a clear tool error.
        await line.pilot.say("Call Bo.", speaker="ann", name="Ann")
        assert "Bo" in mind.results[1] and "no phone number" in mind.results[1]
        assert not line.cloud.calls


async def test_a_reminder_a_stranger_set_cannot_phone_sam_when_it_fires(
    tmp_path: Path, whisper: LocalWhisper, mind: Mind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A self-initiated run is weighed by what it read: the stranger's reminder, from their channel."""
    async with office(tmp_path / "home", whisper, monkeypatch, answer=False) as line:
        where = {"speaker": "mallory", "name": "Mallory", "channel": "elsewhere"}
        await line.pilot.say("Remind me to call Sam about the book club.", **where)  # type: ignore[arg-type]
        assert await line.pilot.fire(timedelta(minutes=11)) == 1
        await until(lambda: len(mind.results) >= 2, "the reminder's run to try the call")
        assert "not called" in mind.results[-1] and "test:elsewhere" in mind.results[-1], mind.results
        assert not line.cloud.calls


async def test_the_daily_cap_and_quiet_hours_refuse_with_a_reason(
    tmp_path: Path, whisper: LocalWhisper, mind: Mind, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with office(
        tmp_path / "home", whisper, monkeypatch, extra="max_calls_per_day = 1\n", answer=False
    ) as line:
        await line.pilot.say("Call Sam.", speaker="ann", name="Ann")
        await line.pilot.say("Call Sam again.", speaker="ann", name="Ann")
        assert "calling Sam" in mind.results[0]
        assert "not called" in mind.results[1] and "max_calls_per_day" in mind.results[1]
        assert len(line.cloud.calls) == 1
    hour = START.astimezone().hour
    quiet = f'quiet_hours = "{hour:02d}:00-{(hour + 1) % 24:02d}:00"\n'
    async with office(tmp_path / "quiet", whisper, monkeypatch, extra=quiet, answer=False) as line:
        await line.pilot.say("Call Sam.", speaker="ann", name="Ann")
        assert "quiet hours" in mind.results[-1] and not line.cloud.calls


async def test_a_call_counts_against_the_per_run_cap_of_messages(
    tmp_path: Path, whisper: LocalWhisper, mind: Mind, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = "[autonomy]\nmax_messages_per_run = 1\n"
    async with office(tmp_path / "home", whisper, monkeypatch, answer=False, before=cap) as line:
        turn = await line.pilot.say("Write to Bo, then call Sam.", speaker="ann", name="Ann")
        assert turn.marker.transmitted
        wrote, called = mind.results
        assert "Bo" in wrote and "cap reached" in called and not line.cloud.calls


async def test_rest_errors_are_tool_errors(
    tmp_path: Path, whisper: LocalWhisper, mind: Mind, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with office(tmp_path / "home", whisper, monkeypatch, token="not-the-token", answer=False) as line:
        turn = await line.pilot.say("Call Sam.", speaker="ann", name="Ann")
        assert turn.marker.transmitted
        assert "401" in mind.results[0] and "20003" in mind.results[0] and not line.cloud.calls
    # Ann's room is grouped with the bad number's line too, so only Twilio refuses it.
    async with office(tmp_path / "bad", whisper, monkeypatch, answer=False, lines=("555-CALL-ME",)) as line:
        await line.pilot.say("Call Bad.", speaker="ann", name="Ann")
        assert "21211" in mind.results[-1] and "555-CALL-ME" in mind.results[-1]
        assert not line.cloud.calls and line.cloud.requests[-1][2] == 400


async def test_doctor_checks_the_outbound_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from persyn.channels.voice.plugin import PLUGIN

    assert PLUGIN.probe is not None
    async with TwilioCloud(ACCOUNT, TOKEN, numbers=(OURS,)) as cloud:

        def settings(name: str, api_url: str) -> Any:
            return harness_settings(
                tmp_path / name,
                config=(
                    '[voice]\nenabled = true\n[voice.twilio]\npublic_url = "https://x.example"\n'
                    f'account_sid = "{ACCOUNT}"\nfrom_number = "{OURS}"\napi_url = "{api_url}"\n'
                ),
            )

        monkeypatch.setenv("TWILIO_AUTH_TOKEN", TOKEN)
        ready = await PLUGIN.probe(settings("ok", cloud.url))
        assert ready.ok and f"outbound calls from {OURS}" in ready.detail, ready.detail
        assert ("GET", f"/2010-04-01/Accounts/{ACCOUNT}.json", 200) in cloud.requests
        monkeypatch.setenv("TWILIO_AUTH_TOKEN", "not-the-token")
        refused = await PLUGIN.probe(settings("refused", cloud.url))
        assert not refused.ok and "401" in refused.detail and "20003" in refused.detail
        monkeypatch.setenv("TWILIO_AUTH_TOKEN", TOKEN)
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}"
        gone = await PLUGIN.probe(settings("gone", nowhere))
        assert not gone.ok and "could not be reached" in gone.detail
