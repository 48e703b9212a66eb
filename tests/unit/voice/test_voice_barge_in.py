"""Barge-in and hang-up on the phone path (issue 36 items 2 and 5): a Media Streams caller whose
audio plays at its own pace (`MediaStreamCaller(realtime=True)`, as Twilio's does) speaks over a
long reply, or hangs up in the middle of it. The agent must stop (Twilio's `clear`), and the
dialog must keep only what the caller heard of the reply, marked cut off — checked against the
marks Twilio echoed and by transcribing what actually played."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_voice_phone import ACCOUNT, FRIEND, TOKEN, WAIT, Line, _transcribable, line, whisper
from voice_samples import piper_phone, words

from persyn.channels.voice.channel import CUT_OFF
from persyn.senses.hearing import LocalWhisper
from persyn.store.ports.dialog import Role
from persyn.testing.harness import until
from persyn.testing.twilio import MediaStreamCaller, ring
from persyn.voice.sentences import speakable

__all__ = ["whisper"]  # the session's whisper fixture, shared with the phone tests

STORY = (
    "I went to the market this morning. Then I walked along the river for an hour. "
    "Afterwards I had a long dinner with my friends."
)


async def _story_told(phone: Line) -> MediaStreamCaller:
    """A call whose caller told the story and is hearing the agent's reply to it: the first
    sentence of the reply has played (its mark came back)."""
    sid, answer = await ring(phone.server, phone.public, TOKEN, caller=FRIEND, account_sid=ACCOUNT)
    assert answer.stream_url is not None
    caller = MediaStreamCaller(sid, account_sid=ACCOUNT, realtime=True)
    await caller.connect(answer.stream_url, TOKEN)
    await caller.start(answer.parameters)
    await caller.wait_marks(1, WAIT)  # the greeting has played
    await caller.send_audio(piper_phone(STORY))
    await caller.send_silence(1.0)
    await caller.wait_marks(2, WAIT)  # the reply's first sentence has played
    return caller


async def _reply_line(phone: Line, sid: str) -> tuple[str, str]:
    """The story as the dialog heard it, and the agent's stored reply to it."""
    messages = await phone.pilot.store.channel_messages(phone.pilot.agent.id, "phone", sid, 20)
    story = next(m for m in messages if m.role is Role.USER and "market" in m.text.lower())
    reply = next(m for m in messages if m.role is Role.AGENT and m.event_id == story.event_id)
    return story.text, reply.text


def _check_cut_off(story: str, stored: str) -> str:
    """The stored line is a true beginning of the echo's reply, shorter than it, marked cut off."""
    full = speakable(f"You said: {story}")
    assert stored.endswith(CUT_OFF), stored
    heard = stored.removesuffix(CUT_OFF).strip()
    assert heard.startswith("You said") and full.startswith(heard) and len(heard) < len(full), (heard, full)
    return heard


async def test_speaking_over_a_long_reply_clears_it_and_keeps_what_was_heard(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        caller = await _story_told(phone)
        call = phone.channel.calls[caller.call_sid]
        await caller.send_audio(piper_phone("Wait, stop there please."))
        await until(lambda: caller.clears >= 1, "Twilio's clear")
        assert call.barge_ins >= 1
        await until(lambda: call.cut_offs >= 1, "the cut-off reply recorded")
        story, stored = await _reply_line(phone, caller.call_sid)
        heard = _check_cut_off(story, stored)
        # What the caller's line played holds the reply's start and not its end.
        played = await whisper.transcribe(_transcribable(bytes(caller.heard)), "audio/wav")
        assert "market" in words(played.text) and "dinner" not in words(played.text), played.text
        assert "dinner" not in heard.lower()
        await caller.hang_up()
        await until(lambda: not phone.channel.calls, "the call to end")


async def test_hanging_up_mid_reply_stores_the_reply_as_cut_off(
    tmp_path: Path, whisper: LocalWhisper, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with line(tmp_path / "home", whisper, monkeypatch) as phone:
        caller = await _story_told(phone)
        await caller.hang_up()
        await until(lambda: not phone.channel.calls, "the call to end")
        story, stored = await _reply_line(phone, caller.call_sid)
        heard = _check_cut_off(story, stored)
        assert "dinner" not in heard.lower()
        assert caller.clears == 0  # nobody to clear for: the line is gone
