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
- The first turn is the direction cue (`Call.cue`): the agent is told who called whom — that it
  picked up a call from the caller, or that the person it called just answered, and why it
  called them.
- Outbound (`place_call`, `tools/builtin/calls.py`): the call is placed through Twilio's REST API
  (`twilio.TwilioCalls`) with the answer webhook `/voice/twilio/outbound?call=TOKEN`; the token
  names the placement kept here (`placed`: callee, name, purpose), which the webhook's TwiML and
  the stream's `start` carry back. `end_call` says a goodbye, waits for it to be played, then
  hangs up over REST (`Status=completed`).
- The agent's reply (`deliver`) is queued for the call's speaker, split into sentences, each
  synthesized and sent as 20 ms μ-law media frames followed by a mark.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import secrets
import time
import weakref
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from persyn.channels.registry import served_agent
from persyn.channels.voice.outlet import Outlet, StreamSocket, TwilioOutlet
from persyn.channels.voice.twilio import TOKEN_VARIABLE, TwilioCalls, TwilioRefused
from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import ModelError, ToolError
from persyn.core.events import LIVE_BACKGROUND, LIVE_HELD, LIVE_META, Event, Outbound, Speaker
from persyn.core.ids import derived_id
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Channel
from persyn.senses.hearing import Transcriber, Transcript, build_transcriber
from persyn.voice.audio import LISTEN_RATE, PHONE_RATE, mulaw_decode, resample
from persyn.voice.listen import Listener, Utterance
from persyn.voice.sentences import SentenceSplitter
from persyn.voice.speak import Speaker as Mouth
from persyn.voice.speak import Speech, build_speaker

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "CUT_OFF",
    "OUTBOUND_PATH",
    "PHONE_SERVICE",
    "Call",
    "PhoneChannel",
    "Placement",
    "StreamSocket",
    "shared_phone",
]

log = logging.getLogger(__name__)

PHONE_SERVICE = "phone"
CALL_SID_META = "call_sid"
_REPLY_WAIT_SECONDS = 120.0
CUT_OFF = "[cut off]"  # ends the stored line of a reply the person did not hear to its end
_GOODBYE_SECONDS = 20.0  # the longest end_call waits for its goodbye to be played
_PLACED_KEPT = 64  # placements awaiting their answer (unanswered ones age out)
OUTBOUND_PATH = "/voice/twilio/outbound"
_SPEAKING_ON: ContextVar[str] = ContextVar("persyn_phone_call", default="")


@dataclass
class Placement:
    """A call the agent placed, until it is answered: whom, and why."""

    number: str
    name: str
    purpose: str
    sid: str | None = None


@dataclass
class _Reply:
    """One text the call speaks (a reply, or the holding phrase: `event_id` None): the pieces
    sent, and those the person has heard (their marks echoed)."""

    text: str
    event_id: str | None
    sent: int = 0
    played: list[str] = field(default_factory=lambda: [])
    done: bool = False  # every piece sent
    cut: bool = False  # cut off: nothing more of it is said
    stored: bool = True  # its line is in the dialog (a streamed answer's is once the turn ends)

    @property
    def finished(self) -> bool:
        return self.done and len(self.played) == self.sent


@dataclass
class Call:
    """One live call's state, keyed by `sid` (Twilio's `callSid`)."""

    channel: PhoneChannel
    sid: str
    caller: str
    outlet: Outlet
    listener: Listener
    # Who is calling, when it is not the phone number `caller` (a web key's identity).
    identity: Speaker | None = None
    said: list[str] = field(default_factory=lambda: [])  # what was sent to the line, in order
    played: list[str] = field(default_factory=lambda: [])  # what the person heard (marks echoed)
    direction: str = "inbound"  # or "outbound": the agent placed it
    purpose: str = ""  # an outbound call's reason, from place_call
    party: str = ""  # the other party's name, when known
    # What to say, in order: (text, the reply it is part of — None for a line that is not
    # dialog, such as the holding phrase —, whether it is the reply's last part).
    talk: asyncio.Queue[tuple[str, _Reply | None, bool]] = field(
        default_factory=lambda: asyncio.Queue[tuple[str, _Reply | None, bool]]()
    )
    barge_ins: int = 0
    cut_offs: int = 0  # replies recorded as cut off (their stored line revised)
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
    _talking: asyncio.Task[None] | None = None
    _speaking: list[_Reply] = field(default_factory=lambda: [])  # begun, not yet heard to the end
    _marks: dict[str, tuple[_Reply, str]] = field(default_factory=lambda: {})  # unplayed marks
    _ended: bool = False
    _progress: asyncio.Event = field(default_factory=asyncio.Event)  # something said or played

    @property
    def speaker(self) -> Speaker:
        if self.identity is not None:
            return self.identity
        return Speaker(service=PHONE_SERVICE, channel="", speaker_id=self.caller, display_name=self.caller)

    @property
    def socket(self) -> object:
        return self.outlet.socket

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._turns())]
        self._talking = asyncio.ensure_future(self._talker())

    async def hear(self, payload: str) -> None:
        """One inbound media frame (base64 μ-law)."""
        samples = resample(mulaw_decode(base64.b64decode(payload, validate=True)), PHONE_RATE, LISTEN_RATE)
        await self.hear_samples(samples)

    async def hear_samples(self, samples: npt.NDArray[np.float32]) -> None:
        """Inbound audio as 16 kHz float samples. The person starting to speak while the agent
        is talking is a barge-in: playback is cleared and the reply is cut off."""
        await self.listener.feed(samples)
        if self.listener.speaking and self.talking:
            self.barge_ins += 1
            await self.cut_off(clear=True)

    @property
    def talking(self) -> bool:
        """Whether speech is being made, sent or played, or waits to be."""
        return bool(self._marks) or any(not r.finished for r in self._speaking) or not self.talk.empty()

    def heard_mark(self, name: str) -> None:
        """A mark came back: the piece before it has played."""
        entry = self._marks.pop(name, None)
        if entry is None:  # unknown, or echoed after a clear: nothing more was heard
            return
        reply, piece = entry
        reply.played.append(piece)
        self.played.append(piece)
        self.marks_played += 1
        self._progress.set()
        if reply.finished and reply in self._speaking:
            self._speaking.remove(reply)

    def say_aside(self, text: str) -> None:
        """`text` said on the line, not a line of the dialog (the holding phrase, a goodbye)."""
        self.talk.put_nowait((text, None, True))

    async def cut_off(self, *, clear: bool) -> None:
        """Stop talking now (`clear`: and tell the far side to drop what it has not played). Each
        reply not heard to its end is stored as what was heard of it, marked `CUT_OFF`."""
        talker, self._talking = self._talking, None
        if talker is not None:
            talker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await talker
        unheard = [r for r in self._speaking if not r.finished]
        while not self.talk.empty():
            _, waiting, _ = self.talk.get_nowait()
            if waiting is not None and waiting not in unheard:
                unheard.append(waiting)
        for reply in unheard:  # a streamed answer still being written stops being said
            reply.cut = reply.done = True
        self._progress.set()
        self._speaking, self._marks = [], {}
        if clear:
            with contextlib.suppress(Exception):  # a line already gone has nothing to clear
                await self.outlet.clear()
        if not self._ended:
            self._talking = asyncio.ensure_future(self._talker())
        for reply in unheard:
            if reply.stored:  # else its turn records the cut when the line is stored
                await self._record_cut_off(reply)

    async def _record_cut_off(self, reply: _Reply) -> None:
        if reply.event_id is None:  # the holding phrase: not a line of the dialog
            return
        heard = " ".join(reply.played)
        line = f"{heard} {CUT_OFF}" if heard else f"{CUT_OFF} (nothing of it was heard)"
        api = self.channel.api
        try:
            await api.revise_reply(self.channel.agent.id, reply.event_id, line)
        except Exception:  # the store is away: the full reply stays, and the log says so
            log.exception("phone: could not record the cut-off reply to %s", reply.event_id)
        self.cut_offs += 1
        with contextlib.suppress(Exception):
            await self.outlet.control({"type": "cut_off", "said": heard})

    async def end(self) -> None:
        """The line is gone: what was being said and not heard is recorded as cut off."""
        self._ended = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.listener.close(), 30)
        tasks = [*self._tasks, *([self._cued] if self._cued is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.cut_off(clear=False)

    async def open(self) -> None:
        """The call's conversation opened without a cue: the person speaks first (the browser's
        talk control, where the person pressed Talk and has something to say)."""
        self.conversation_id, _ = await self.channel.api.open_live_call(self._event(self.caller, "open"))
        self._opened.set()

    async def cue(self) -> None:
        """The first turn: no transcript yet, so the agent is cued with who called whom, by
        direction — context for the fast model, never the caller's line. The call's
        conversation opens here, before any turn; the other party is named as the placement or
        the directory knows them."""
        agent = self.channel.agent.name
        self.conversation_id, known = await self.channel.api.open_live_call(self._event(self.caller, "open"))
        name = self.party or known
        who = f"{name} ({self.caller})" if name and name != self.caller else self.caller
        if self.direction == "outbound":
            text = f"[phone call: you ({agent}) called {who} and they just answered"
            text += f"; why you called: {self.purpose}]" if self.purpose else "]"
        else:
            text = f"[phone call: you ({agent}) picked up a call from {who}; they are on the line]"
        self._cued = asyncio.ensure_future(self._turn(text, "cue", cue=True))
        self._opened.set()

    async def say_goodbye(self, goodbye: str) -> None:
        """`goodbye` said after what is queued, then waits (at most `_GOODBYE_SECONDS`) until the
        line has played all of it (its marks came back) or it was cut off."""
        reply = _Reply(goodbye, None)
        self.talk.put_nowait((goodbye, reply, True))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_GOODBYE_SECONDS):
                while not (reply.finished or reply.cut):
                    self._progress.clear()
                    await self._progress.wait()

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
                self.say_aside(self.channel.config.holding_phrase)
            elif utterance.text:
                texts.append(utterance.text)
                with contextlib.suppress(Exception):  # a line already gone hears nothing more
                    await self.outlet.control({"type": "heard", "text": utterance.text})
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
        reply = _Reply(text, event.id, stored=False)

        async def sink(delta: str) -> None:
            nonlocal spoken
            if not spoken:
                self.timeline.append(("delivered", time.monotonic()))
            for piece in splitter.push(delta):
                spoken += 1
                if not reply.cut:
                    self.talk.put_nowait((piece, reply, False))

        self.timeline.append(("submitted", time.monotonic()))
        self.answers += 1
        try:
            said, why = await api.live_reply(event, system=system, sink=sink, cue=cue, notes=notes)
        except Exception:  # the turn failed: the caller still hears something, the call goes on
            log.exception("phone: the answer to turn %s of call %s failed", key, self.sid)
            said, why = None, "the answer failed"
        for piece in splitter.flush():
            spoken += 1
            if not reply.cut:
                self.talk.put_nowait((piece, reply, False))
        self.talk.put_nowait(("", reply, True))  # the answer's end
        reply.stored = said is not None
        if reply.cut and reply.stored:  # cut off while it was being written: stored whole just now
            await self._record_cut_off(reply)
        if said is None:
            self.findings[:0] = notes  # not told yet
            if not spoken:
                log.info("phone: turn %s of call %s: %s", key, self.sid, why)
                self.say_aside(self.channel.config.holding_phrase)

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
            text, part_of, last = await self.talk.get()
            reply = part_of or _Reply(text, None)
            if reply.cut:
                continue
            if reply not in self._speaking:
                self._speaking.append(reply)
            splitter = SentenceSplitter()
            for piece in [*splitter.push(text + " "), *splitter.flush()]:
                await self._say(piece, reply)
            if last:
                reply.done = True
                self._progress.set()
                if reply.finished and reply in self._speaking:
                    self._speaking.remove(reply)

    async def _say(self, piece: str, reply: _Reply | None = None) -> None:
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
        self.timeline.append(("spoken", time.monotonic()))
        await self.outlet.control({"type": "saying", "text": piece})
        await self.outlet.play(speech.samples, speech.rate)
        self.marks_sent += 1
        name = f"said-{self.marks_sent}"
        if reply is not None:
            reply.sent += 1
            self._marks[name] = (reply, piece)
        await self.outlet.mark(name)
        self.said.append(piece)
        self._progress.set()


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
        self.placed: OrderedDict[str, Placement] = OrderedDict()  # by the webhook's token
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

    def open_call(
        self,
        sid: str,
        stream_sid: str,
        caller: str,
        socket: StreamSocket,
        *,
        outlet: Outlet | None = None,
        identity: Speaker | None = None,
        placement: Placement | None = None,
    ) -> Call:
        """A call on `socket` (Twilio's Media Streams unless another `outlet` is given)."""
        ear = _HeardThrough(self.api, self.agent.id, self.transcriber, sid)
        listener = Listener(ear, end_ms=self.config.endpoint_ms, piece_min_ms=self.piece_min_ms)
        outlet = outlet or TwilioOutlet(socket, stream_sid)
        call = Call(self, sid, caller, outlet, listener, identity=identity)
        if placement is not None:
            call.direction, call.purpose, call.party = "outbound", placement.purpose, placement.name
        self.calls[sid] = call
        call.start()
        return call

    async def close_call(self, sid: str) -> None:
        """The call is wound up (what it said recorded) before it leaves `calls`."""
        call = self.calls.get(sid)
        if call is not None:
            try:
                await call.end()
            finally:
                self.calls.pop(sid, None)

    def rest(self) -> TwilioCalls:
        twilio = self.config.twilio
        return TwilioCalls(twilio.api_url, twilio.account_sid, os.environ.get(TOKEN_VARIABLE, ""))

    async def place_call(self, number: str, name: str, purpose: str) -> str:
        """Calls `number` over the REST API; when they answer, the stream's first turn tells the
        agent it called `name` and why. What happened, for the tool's result; a refusal is a
        `ToolError` naming Twilio's answer."""
        twilio = self.config.twilio
        if not (twilio.from_number and twilio.public_url):
            raise ToolError("no calls can be placed: [voice.twilio] from_number and public_url must be set")
        await self.attach()
        token = secrets.token_urlsafe(18)
        placement = Placement(number, name, purpose)
        self.placed[token] = placement
        while len(self.placed) > _PLACED_KEPT:
            self.placed.popitem(last=False)
        try:
            call = await self.rest().place(
                number, twilio.from_number, f"{twilio.public_url}{OUTBOUND_PATH}?call={token}"
            )
        except TwilioRefused as exc:
            self.placed.pop(token, None)
            raise ToolError(f"the call to {name} ({number}) was not placed: Twilio answered {exc}") from exc
        placement.sid = str(call.get("sid", ""))
        return f"calling {name} at {number} (call {placement.sid}, {call.get('status', 'queued')}); the call begins when they answer"

    def answered(self, token: str, sid: str) -> Placement | None:
        """The placement the answer webhook's `token` names, if it is the call `sid`."""
        placement = self.placed.get(token)
        return placement if placement is not None and placement.sid in (None, sid) else None

    async def end_call(self, sid: str, goodbye: str) -> str:
        """Says `goodbye` on the call `sid`, then hangs it up over REST."""
        call = self.calls.get(sid)
        if call is None:
            raise ToolError("there is no call on the line to end")
        await call.say_goodbye(goodbye)
        try:
            await self.rest().hang_up(sid)
        except TwilioRefused as exc:
            log.warning("phone: hanging up call %s over REST failed: %s", sid, exc)
            with contextlib.suppress(Exception):
                await self.close_call(sid)
            return f"said goodbye; Twilio refused the hang-up ({exc}), so the line was closed here"
        return "said goodbye and hung up"

    async def deliver(self, outbound: Outbound) -> None:
        call = self.calls.get(outbound.channel)
        if call is None:  # the call has ended: the reply stays in the dialog, unsaid
            log.info("phone: a reply for call %s after it ended was not said", outbound.channel)
            return
        if call.conversation_id is None:
            call.conversation_id = outbound.conversation_id
        call.timeline.append(("delivered", time.monotonic()))
        call.talk.put_nowait((outbound.text, _Reply(outbound.text, outbound.event_id), True))


_PHONES: weakref.WeakKeyDictionary[RuntimeAPI, PhoneChannel] = weakref.WeakKeyDictionary()


def shared_phone(settings: Settings, api: RuntimeAPI) -> PhoneChannel:
    """The process's one voice channel over `api` (built on first use): the phone's routes and
    the browser's voice socket (`web/voice.py`) put their calls in the same one, since one
    channel is attached per service."""
    channel = _PHONES.get(api)
    if channel is None:
        channel = _PHONES[api] = PhoneChannel(settings, api)
    return channel
