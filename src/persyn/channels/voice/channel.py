"""The telephone channel (issue 36, SPEC Appendix A): calls arrive over Twilio's Media Streams on
the web server (`routes.py`), and each call is one `Call` — its ear (`voice.listen.Listener`:
Silero endpointing, streaming whisper), its mouth (`voice.speak`, sentence by sentence) and the
turns between them.

- A call is keyed by Twilio's stable `callSid`, never by conversation: every event of the call
  has the call sid as its channel, so each call is a conversation of its own; continuity comes
  from memory and the person record.
- The caller is the phone identity (`phone`, "", +1555…) of the directory.
- Every settled utterance is an ordinary inbound message, addressed (a live call is always
  answered); the channel is `interactive`, so deliberation defers. When the turn ends in
  silence, or the engines fail, the holding phrase is said instead of dead air.
- The first turn is the direction cue: the agent is told it picked up a call, from whom.
- The agent's reply (`deliver`) is queued for the call's speaker, split into sentences, each
  synthesized and sent as 20 ms μ-law media frames followed by a mark.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from persyn.channels.registry import served_agent
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ModelError
from persyn.core.events import LIVE_BACKGROUND, LIVE_HELD, LIVE_META, Event, Outbound, Speaker
from persyn.core.ids import derived_id
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Channel
from persyn.senses.hearing import Transcriber, Transcript, build_transcriber
from persyn.voice.audio import FRAME_BYTES, LISTEN_RATE, PHONE_RATE, mulaw_decode, mulaw_encode, resample
from persyn.voice.listen import Listener, Utterance
from persyn.voice.sentences import SentenceSplitter
from persyn.voice.speak import Speaker as Mouth
from persyn.voice.speak import Speech, build_speaker

__all__ = ["PHONE_SERVICE", "Call", "PhoneChannel", "StreamSocket"]

log = logging.getLogger(__name__)

PHONE_SERVICE = "phone"
CALL_SID_META = "call_sid"
_REPLY_WAIT_SECONDS = 120.0
_SPEAKING_ON: ContextVar[str] = ContextVar("persyn_phone_call", default="")


class StreamSocket(Protocol):
    """The part of a Starlette WebSocket a call writes to."""

    async def send_text(self, data: str) -> None: ...


@dataclass
class Call:
    """One live call's state, keyed by `sid` (Twilio's `callSid`)."""

    channel: PhoneChannel
    sid: str
    stream_sid: str
    caller: str
    socket: StreamSocket
    listener: Listener
    said: list[str] = field(default_factory=lambda: [])  # what reached the line, in order
    talk: asyncio.Queue[str] = field(default_factory=lambda: asyncio.Queue[str]())
    # The conversation of the call, cached from the first reply (Appendix A): the agent's state
    # for the call is keyed by `sid`, never by this.
    conversation_id: str | None = None
    marks_sent: int = 0
    # When each step of a turn happened (`time.monotonic()`): what bench/voice.py splits the
    # latency by — ("heard", the utterance settled), ("submitted", …), ("delivered", the reply
    # reached the call), ("spoken", its first frame was sent).
    timeline: list[tuple[str, float]] = field(default_factory=lambda: [])
    marks_played: int = 0
    # What the background found since the last answer, woven into the next one.
    findings: list[str] = field(default_factory=lambda: [])
    prompt_builds: int = 0  # the cached system prompt, built (and refreshed)
    answers: int = 0  # the fast model's turns, the cue's included
    _prompt: tuple[datetime, str] | None = None  # (built at, the system prompt)
    _cued: asyncio.Future[None] | None = None
    _carried: Utterance | None = None  # taken while debouncing, the start of the next turn
    _opened: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=lambda: [])

    @property
    def speaker(self) -> Speaker:
        return Speaker(service=PHONE_SERVICE, channel="", speaker_id=self.caller, display_name=self.caller)

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._turns()), asyncio.ensure_future(self._talker())]

    async def hear(self, payload: str) -> None:
        """One inbound media frame (base64 μ-law)."""
        samples = resample(mulaw_decode(base64.b64decode(payload, validate=True)), PHONE_RATE, LISTEN_RATE)
        await self.listener.feed(samples)

    async def end(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.listener.close(), 30)
        tasks = [*self._tasks, *([self._cued] if self._cued is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def cue(self) -> None:
        """The first turn: no transcript yet, so the agent is cued with who called whom — context
        for the fast model, never the caller's line. The call's conversation opens here, before
        any turn; the caller is named as the directory knows them."""
        agent = self.channel.agent.name
        self.conversation_id, caller = await self.channel.api.open_live_call(self._event(self.caller, "open"))
        text = f"[phone call: you ({agent}) picked up a call from {caller}; they are on the line]"
        self._cued = asyncio.ensure_future(self._turn(text, "cue", cue=True))
        self._opened.set()

    async def _turns(self) -> None:
        """The call's one worker: turn after turn, in order, each answered before the next is
        taken. Utterances that follow one another closer than `[voice] debounce_ms` (and any
        that queued while the last answer was made) are one turn."""
        await self._opened.wait()  # the cue opens the conversation first
        if self._cued is not None:
            await asyncio.shield(self._cued)
        count = 0
        while True:
            texts = await self._settled()
            if texts:
                count += 1
                await self._turn(" ".join(texts), f"turn-{count}")

    async def _settled(self) -> list[str]:
        """The next turn's words: an utterance and those that began within `[voice] debounce_ms`
        of the end of the one before (one still being spoken or heard is waited for)."""
        debounce = self.channel.config.debounce_ms / 1000
        utterance = self._carried or await self.listener.utterances.get()
        self._carried = None
        texts: list[str] = []
        while True:
            self.timeline.append(("ended", utterance.ended_at))
            self.timeline.append(("heard", time.monotonic()))
            if utterance.failed:
                self.talk.put_nowait(self.channel.config.holding_phrase)
            elif utterance.text:
                texts.append(utterance.text)
            following = await self._following(utterance, debounce)
            if following is None:
                return texts
            if following.started_at - utterance.ended_at >= debounce:  # a turn of its own
                self._carried = following
                return texts
            utterance = following

    async def _following(self, utterance: Utterance, debounce: float) -> Utterance | None:
        """The utterance after `utterance`, if it is queued, being spoken or heard, or begins
        before the debounce is over; None when the caller stayed silent through it."""
        queue = self.listener.utterances
        while True:
            if not queue.empty():
                return queue.get_nowait()
            if self.listener.pending:
                return await queue.get()
            remaining = utterance.ended_at + debounce - time.monotonic()
            if remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(queue.get(), min(remaining, 0.05))

    async def _turn(self, text: str, key: str, *, cue: bool = False) -> None:
        """One turn: the background activation set going (the unchanged pipeline, its words
        held for the call), and the fast model's answer streamed to the mouth as it comes,
        with what the background found since the last answer woven in."""
        api = self.channel.api
        background = not cue and self.channel.config.background
        event = self._event(text, key, background=background)
        self.timeline.append(("taken", time.monotonic()))
        if background:
            await api.submit(event)
            self._tasks.append(asyncio.ensure_future(self._background(event.id)))
        system = await self._system(event)
        notes, self.findings = self.findings, []
        splitter = SentenceSplitter()
        spoken = 0

        async def sink(delta: str) -> None:
            nonlocal spoken
            if not spoken:
                self.timeline.append(("delivered", time.monotonic()))
            for piece in splitter.push(delta):
                spoken += 1
                self.talk.put_nowait(piece)

        self.timeline.append(("submitted", time.monotonic()))
        self.answers += 1
        try:
            said, why = await api.live_reply(event, system=system, sink=sink, cue=cue, notes=notes)
        except Exception:  # the turn failed: the caller still hears something, the call goes on
            log.exception("phone: the answer to turn %s of call %s failed", key, self.sid)
            said, why = None, "the answer failed"
        for piece in splitter.flush():
            spoken += 1
            self.talk.put_nowait(piece)
        if said is None:
            self.findings[:0] = notes  # not told yet
            if not spoken:
                log.info("phone: turn %s of call %s: %s", key, self.sid, why)
                self.talk.put_nowait(self.channel.config.holding_phrase)

    async def _system(self, event: Event) -> str:
        """The call's cached system prompt, built again every `[voice] prompt_refresh_seconds`."""
        now = self.channel.api.clock.now()
        refresh = timedelta(seconds=self.channel.config.prompt_refresh_seconds)
        if self._prompt is None or now - self._prompt[0] >= refresh:
            self.prompt_builds += 1
            self._prompt = (now, await self.channel.api.live_context(event))
        return self._prompt[1]

    async def _background(self, event_id: str) -> None:
        """What the turn's background activation found, queued for the next answer."""
        try:
            marker = await self.channel.api.wait_marker(self.channel.agent.id, event_id, _REPLY_WAIT_SECONDS)
        except Exception:  # the background is an extra: its loss costs nothing said
            log.warning("phone: the background of %s on call %s ended unseen", event_id, self.sid)
            return
        if marker.reason == LIVE_HELD and marker.text:
            self.findings.append(marker.text)

    def _event(self, text: str, key: str, *, background: bool = False) -> Event:
        api = self.channel.api
        meta = {CALL_SID_META: self.sid}
        if background:
            meta[LIVE_META] = LIVE_BACKGROUND
        return Event(
            id=derived_id(api.clock.now(), self.sid, key),
            agent_id=self.channel.agent.id,
            service=PHONE_SERVICE,
            channel=self.sid,
            speaker=self.speaker,
            text=text,
            received_at=api.clock.now(),
            addressed=True,
            meta=meta,
        )

    async def _talker(self) -> None:
        _SPEAKING_ON.set(self.sid)  # what the mouth says from here is metered to this call
        while True:
            text = await self.talk.get()
            splitter = SentenceSplitter()
            for piece in [*splitter.push(text + " "), *splitter.flush()]:
                await self._say(piece)

    async def _say(self, piece: str) -> None:
        try:
            speech = await self.channel.mouth.speak(piece)
        except ModelError as exc:
            log.warning("phone: speech failed on call %s: %s", self.sid, exc)
            if piece == self.channel.config.holding_phrase:
                return
            try:
                speech = await self.channel.mouth.speak(self.channel.config.holding_phrase)
            except ModelError:
                return
        audio = mulaw_encode(resample(speech.samples, speech.rate, PHONE_RATE))
        self.timeline.append(("spoken", time.monotonic()))
        for start in range(0, len(audio), FRAME_BYTES):
            frame = base64.b64encode(audio[start : start + FRAME_BYTES]).decode()
            await self._send({"event": "media", "streamSid": self.stream_sid, "media": {"payload": frame}})
        self.marks_sent += 1
        await self._send(
            {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": f"said-{self.marks_sent}"}}
        )
        self.said.append(piece)

    async def _send(self, message: dict[str, Any]) -> None:
        await self.socket.send_text(json.dumps(message))


class _HeardThrough:
    """A call's ear through the gateway (`RuntimeAPI.hear`: traced, metered in seconds heard)."""

    def __init__(self, api: RuntimeAPI, agent_id: str, engine: Transcriber, sid: str) -> None:
        self.model = engine.model
        self._api, self._agent_id, self._engine, self._sid = api, agent_id, engine, sid

    async def transcribe(self, data: bytes, media_type: str) -> Transcript:
        return await self._api.hear(
            self._agent_id, self._engine, data, media_type, surface=PHONE_SERVICE, channel=self._sid
        )


class _MeteredMouth:
    """The mouth, each synthesis metered in seconds of speech to the call it was said on
    (`RuntimeAPI.spoke`; the call is the one whose talker asks, `_SPEAKING_ON`)."""

    def __init__(self, api: RuntimeAPI, agent_id: str, engine: Mouth) -> None:
        self.model = engine.model
        self.engine = engine
        self._api, self._agent_id = api, agent_id

    async def speak(self, text: str) -> Speech:
        speech = await self.engine.speak(text)
        self._api.spoke(
            self._agent_id, speech.model, speech.seconds, surface=PHONE_SERVICE, channel=_SPEAKING_ON.get()
        )
        return speech


class PhoneChannel(Channel):
    """The `phone` service: one agent answering the calls of `[voice]`."""

    service = PHONE_SERVICE
    interactive = True

    def __init__(
        self,
        settings: Settings,
        api: RuntimeAPI,
        *,
        transcriber: Transcriber | None = None,
        mouth: Mouth | None = None,
        piece_min_ms: int = 900,
    ) -> None:
        self.settings = settings
        self.config = settings.voice
        self.api = api
        self.agent: AgentConfig = served_agent(settings, self.config.agent)
        self.transcriber = transcriber or build_transcriber(self.config.transcribe)
        self.mouth = _MeteredMouth(
            api, self.agent.id, mouth or build_speaker(self.config.speak, voice=self.config.speak_voice)
        )
        self.calls: dict[str, Call] = {}
        self.piece_min_ms = piece_min_ms  # streaming STT's piece size (bench/voice.py compares)
        self._attached = False
        self._attaching = asyncio.Lock()

    async def attach(self) -> None:
        """Attached to the runtime on the first call (the web server builds the routes first)."""
        async with self._attaching:
            if not self._attached:
                await self.api.attach_channel(self)
                self._attached = True

    def serves(self, agent_id: str) -> bool:
        return agent_id == self.agent.id

    async def answers(self, caller: str) -> bool:
        """The inbound filter: an allowed number, or a known contact's phone identity."""
        if caller in self.config.allow:
            return True
        probe = Speaker(service=PHONE_SERVICE, channel="", speaker_id=caller, display_name=caller)
        return await self.api.knows_speaker(self.agent.id, probe)

    def open_call(self, sid: str, stream_sid: str, caller: str, socket: StreamSocket) -> Call:
        ear = _HeardThrough(self.api, self.agent.id, self.transcriber, sid)
        listener = Listener(ear, end_ms=self.config.endpoint_ms, piece_min_ms=self.piece_min_ms)
        call = Call(self, sid, stream_sid, caller, socket, listener)
        self.calls[sid] = call
        call.start()
        return call

    async def close_call(self, sid: str) -> None:
        call = self.calls.pop(sid, None)
        if call is not None:
            await call.end()

    async def deliver(self, outbound: Outbound) -> None:
        call = self.calls.get(outbound.channel)
        if call is None:  # the call has ended: the reply stays in the dialog, unsaid
            log.info("phone: a reply for call %s after it ended was not said", outbound.channel)
            return
        if call.conversation_id is None:
            call.conversation_id = outbound.conversation_id
        call.timeline.append(("delivered", time.monotonic()))
        call.talk.put_nowait(outbound.text)
