"""SPEC Appendix A's dual-model split on a phone call (issue 36 item 3), end to end as
`test_voice_phone.py` makes a call: Twilio's side is the wire-faithful fake, the caller's speech is
piper's made here as 8 kHz μ-law, and what the agent said is checked by transcribing its audio
with the real local STT. The models are doubles, registered here: the fast one (task `voice`)
and, for the background, a respond model that uses the exact-arithmetic tool."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo
from test_voice_phone import ACCOUNT, FRIEND, TOKEN, WAIT, Line, _transcribable, line
from voice_samples import piper_phone, words

from persyn.core.events import LIVE_HELD, Speaker
from persyn.senses.hearing import LocalWhisper, local_whisper_available
from persyn.store.base import Message, Role
from persyn.testing.harness import until
from persyn.testing.models import DoubleReply, DoubleResult, last_user_text, registered_double
from persyn.testing.twilio import MediaStreamCaller, ring
from persyn.usage.ledger import render_summary, summarize
from persyn.voice.speak import local_piper_available

pytestmark = [
    pytest.mark.local_llm,
    pytest.mark.skipif(
        not (local_whisper_available() and local_piper_available()),
        reason="needs the 'local' extra (uv sync --extra local)",
    ),
]


@pytest.fixture(scope="module")
def whisper() -> LocalWhisper:
    engine = LocalWhisper()
    asyncio.run(engine.load())
    return engine


async def _answered(phone: Line) -> MediaStreamCaller:
    sid, answer = await ring(phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT)
    assert answer.stream_url is not None
    caller = MediaStreamCaller(sid, account_sid=ACCOUNT)
    await caller.connect(answer.stream_url, TOKEN)
    await caller.start(answer.parameters)
    await caller.wait_marks(1, WAIT)  # greeted
    return caller


async def _dialog(phone: Line, conversation_id: str | None) -> list[Message]:
    assert conversation_id is not None
    found = await phone.pilot.store.recent_messages(phone.pilot.agent.id, conversation_id, 50)
    return sorted(found, key=lambda m: (m.created_at, m.id))


async def _said_until(caller: MediaStreamCaller, said: list[str], text: str) -> None:
    """Until the call's mouth has said a piece holding `text` (and its mark came back)."""
    while not any(text in piece for piece in said):
        await caller.wait_marks(len(caller.marks) + 1, WAIT)


async def test_the_fast_model_is_heard_as_it_writes_and_its_words_are_the_turn(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 1 (fast, streamed, only the words to say), rule 4 (the cue is context naming both
    parties, never the caller's line) and the speech's metering (STT and TTS in seconds)."""
    gate = asyncio.Event()
    systems: list[str] = []
    reply = "*clears throat* Sure thing, the sky is blue on Tuesdays. It stays blue on Wednesdays too."

    def fast(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        systems.append(info.instructions or "")
        if "greet" in last_user_text(messages):
            return "Hello there."
        # The stream stops after "…Tuesdays. " until the test has heard the start of it.
        return DoubleReply(text=reply, hold=(10, gate))

    config = '[models]\nvoice = "test:fastvoice"\n[metering]\nevent_log = true\n'
    with registered_double("fastvoice", fast):
        async with line(tmp_path / "home", whisper, monkeypatch, extra="", models=config) as phone:
            # The caller is a contact: the cue names them as the directory does.
            number = Speaker(service="phone", channel="", speaker_id=FRIEND, display_name="Sam")
            await phone.pilot.runtime.resolve_speaker(phone.pilot.agent.id, number)
            caller = await _answered(phone)
            call = phone.channel.calls[caller.call_sid]
            assert "picked up a call from Sam" in systems[0] and "(Ada)" in systems[0]
            greeting = len(caller.heard)
            marks = len(caller.marks)
            phone.pilot.advance(timedelta(seconds=1))  # the runtime's clock moves between turns
            await caller.send_audio(piper_phone("What colour is the sky on Tuesdays?"))
            await caller.send_silence(1.0)
            # The first clause is spoken while the model is still held mid-reply: streamed.
            await caller.wait_marks(marks + 1, WAIT)
            assert not gate.is_set() and any(piece.startswith("Sure thing") for piece in call.said)
            assert not any("Wednesdays" in piece for piece in call.said)
            gate.set()
            await _said_until(caller, call.said, "Wednesdays")
            heard = await whisper.transcribe(_transcribable(bytes(caller.heard[greeting:])), "audio/wav")
            assert {"sky", "blue"} <= words(heard.text), heard.text
            assert not any("clears" in piece or "*" in piece for piece in call.said), call.said
            # The background (the echo double) ran too; what it found is held, not said.
            await until(lambda: bool(call.findings), "the background's words", WAIT)
            assert not any("You said" in piece for piece in call.said)
            dialog = await _dialog(phone, call.conversation_id)
            caller_lines = [m.text for m in dialog if m.role is Role.USER]
            agent_lines = [m.text for m in dialog if m.role is Role.AGENT]
            assert len(caller_lines) == 1 and {"sky", "tuesdays"} <= words(caller_lines[0]), caller_lines
            assert agent_lines == ["Hello there.", reply.removeprefix("*clears throat* ")]
            assert not any("phone call" in m.text for m in dialog)
            await caller.hang_up()
            await until(lambda: not phone.channel.calls, "the call to end")
            records = [r for r in phone.pilot.usage() if r.channel == caller.call_sid]
            stages = {r.stage for r in records}
            assert {"voice", "transcribe", "speak"} <= stages, stages
            assert all(r.units >= 1 for r in records if r.stage in ("transcribe", "speak"))
            ledger = render_summary(summarize(phone.pilot.settings.usage_log_path, by="stage"))
            assert "speak" in ledger and "transcribe" in ledger and "voice" in ledger, ledger


def _tool_result(messages: Sequence[ModelMessage]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.tool_name == "calculate":
                    return part.model_response_str()
    return None


async def test_the_background_finding_is_woven_into_the_next_answer(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 2 (the background agent with tools, held and woven in, never spoken twice nor
    stored as a line) and rule 3 (the cached prompt, refreshed; a burst of fragments is one turn)."""

    def fast(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        if "greet" in last_user_text(messages):
            return "Hello."
        found = re.search(r"What I found since I last spoke[^\n]*\n- ([^\n]+)", info.instructions or "")
        return f"Here is what I found. {found.group(1)}" if found else "Let me check that."

    def background(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        result = _tool_result(messages)
        if result is not None:
            value = re.search(r'"value":\s*"([^"]+)"', result)  # the tool's `Calculation`
            return f"The result is {value.group(1) if value else result}."
        if any(tool.name == "calculate" for tool in info.function_tools):
            return DoubleReply(tool_calls=[{"name": "calculate", "args": {"expression": "6 * 7"}}])
        return "I cannot calculate here."

    models = '[models]\nvoice = "test:fastvoice"\nrespond = "test:toolful"\n'
    extra = "debounce_ms = 5000\nprompt_refresh_seconds = 60\n"
    with registered_double("fastvoice", fast), registered_double("toolful", background):
        async with line(tmp_path / "home", whisper, monkeypatch, extra=extra, models=models) as phone:
            caller = await _answered(phone)
            call = phone.channel.calls[caller.call_sid]
            phone.pilot.advance(timedelta(seconds=1))  # the runtime's clock moves between turns
            await caller.send_audio(piper_phone("What is six times seven?"))
            await caller.send_silence(1.0)
            await _said_until(caller, call.said, "check")
            await until(lambda: bool(call.findings), "the background's finding", WAIT)
            assert call.findings == ["The result is 42."]
            assert not any("42" in piece for piece in call.said)  # held, not said
            # A burst: two utterances closer than the debounce are one turn.
            before = len(caller.heard)
            phone.pilot.advance(timedelta(seconds=1))
            await caller.send_audio(piper_phone("Did you find it?"))
            await caller.send_silence(0.6)
            await caller.send_audio(piper_phone("Tell me now."))
            await caller.send_silence(1.0)
            await _said_until(caller, call.said, "42")
            heard = await whisper.transcribe(_transcribable(bytes(caller.heard[before:])), "audio/wav")
            assert "result" in words(heard.text) and words(heard.text) & {"42", "forty-two"}, heard.text
            assert call.answers == 3 and call.prompt_builds == 1  # cue, question, the burst
            # Past `prompt_refresh_seconds`, the next turn builds the prompt again.
            await until(lambda: bool(call.findings), "the burst's background finding", WAIT)
            phone.pilot.advance(timedelta(seconds=61))
            await caller.send_audio(piper_phone("Thank you."))
            await caller.send_silence(1.0)
            await until(lambda: call.answers == 4, "the fourth answer", WAIT)
            assert call.prompt_builds == 2
            while sum("42" in piece for piece in call.said) < 2:  # the burst's finding, told
                await caller.wait_marks(len(caller.marks) + 1, WAIT)
            dialog = await _dialog(phone, call.conversation_id)
            caller_lines = [m for m in dialog if m.role is Role.USER]
            agent_lines = [m.text for m in dialog if m.role is Role.AGENT]
            assert len(caller_lines) == 3 and {"find", "tell"} <= words(caller_lines[1].text)
            # One line per answer, each what the fast model said: the background stored none,
            # and every "42" said is in a line of the fast model's (none spoken twice).
            assert len(agent_lines) == call.answers and "The result is 42." not in agent_lines
            assert sum("42" in piece for piece in call.said) == sum("42" in text for text in agent_lines) == 2
            now = phone.pilot.clock.now()
            for message in caller_lines[:2]:
                assert message.event_id is not None
                marker = await phone.pilot.store.get_marker(phone.pilot.agent.id, message.event_id, now)
                assert marker is not None and marker.reason == LIVE_HELD and not marker.transmitted
            await caller.hang_up()
            await until(lambda: not phone.channel.calls, "the call to end")
