"""Streaming speech to text for a live call: audio in as it arrives, settled utterances out.

The endpointer (`vad.Endpointer`) finds where speech starts and ends. So that most of an utterance
is transcribed while it is still being spoken, the utterance is cut into pieces at its short
pauses (`pause_ms`, once a piece holds `piece_min_ms` of audio): each closed piece is transcribed
at once, in the background, and when the utterance ends only its last piece is left to hear (the
STT tail of the latency). A pause before that much audio is a guess that the utterance is over:
what is buffered is heard at once, while the endpointer waits out the rest of `end_ms`; when the
end comes the guess is the last piece, already heard or nearly, and when speech resumes it is
cancelled (the local engine skips it unless it already began) and the audio stays in the piece.
Silence after the last piece is never sent (whisper hears "you" in it). The pieces go through the
ordinary `senses.hearing.Transcriber` port as 16 kHz WAV, so the packaged whisper and a remote
`/audio/transcriptions` both serve (the local one through its short window:
`senses.hearing.streaming`). Silero runs in a thread and transcription in the
transcriber's own (the local engine's one worker): the event loop never waits on a model.

`Listener.trace` keeps the last pieces' timing (`Piece`: queued, begun by the engine, done, its
process CPU meanwhile): where the STT tail goes (bench/voice.py prints it)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from persyn.core.errors import ModelError
from persyn.senses.hearing import streaming
from persyn.voice.audio import LISTEN_RATE, wav_bytes
from persyn.voice.vad import Endpointer

if TYPE_CHECKING:
    import numpy.typing as npt

    from persyn.senses.hearing import Transcriber

__all__ = ["Listener", "Piece", "Utterance"]

_PREROLL = LISTEN_RATE * 300 // 1000  # audio kept from before the detected start


@dataclass(frozen=True)
class Utterance:
    """A settled spoken turn: its text (empty when nothing intelligible was heard), the seconds of
    audio transcribed (the metered units), when its end was detected (`time.monotonic()`),
    whether transcription failed (`failed`: the call says a holding phrase), the engine, and
    when its start was detected (`time.monotonic()`; what the call's debounce measures from)."""

    text: str
    seconds: float
    ended_at: float
    model: str
    failed: bool = False
    started_at: float = 0.0


@dataclass
class Piece:
    """One transcription of a piece of an utterance, timed (`time.monotonic()`): `kind` is
    `piece` (closed at a pause or the end), `guess` (heard at a pause, used when the end came)
    or `dropped` (a guess that speech resumed after: cancelled, or its text discarded). `started` and `cpu` are the engine's when
    it reports them (the local whisper does)."""

    kind: str
    seconds: float
    queued: float
    started: float | None = None
    done: float | None = None
    cpu: float | None = None


@dataclass
class Listener:
    """One call's ear. `await feed(samples)` with 16 kHz float samples as they arrive; settled
    utterances come out of `utterances` (an `asyncio.Queue`) in the order they were spoken."""

    transcriber: Transcriber
    end_ms: int = 400
    pause_ms: int = 160
    piece_min_ms: int = 900
    max_utterance_seconds: float = 30.0
    guess: bool = True  # hear the buffer at a pause before `piece_min_ms` (False: at the end)
    utterances: asyncio.Queue[Utterance] = field(default_factory=lambda: asyncio.Queue[Utterance]())
    endpointer: Endpointer | None = None
    _buffer: list[npt.NDArray[np.float32]] = field(default_factory=lambda: [])
    _buffered: int = 0
    _pieces: list[asyncio.Task[tuple[str, float, bool]]] = field(default_factory=lambda: [])
    _last: asyncio.Task[None] | None = None
    _utterance: int = 0  # samples of the utterance being spoken
    _voiced: bool = False  # speech in the buffer since the last piece closed
    _guess: asyncio.Task[tuple[str, float, bool]] | None = None
    _guess_piece: Piece | None = None
    _warming: asyncio.Task[None] | None = None
    trace: deque[Piece] = field(default_factory=lambda: deque[Piece](maxlen=64))
    _started: float = 0.0  # when it began (`time.monotonic()`)

    def __post_init__(self) -> None:
        self.transcriber = streaming(self.transcriber)
        if self.endpointer is None:
            self.endpointer = Endpointer(end_ms=self.end_ms, pause_ms=self.pause_ms)

    @property
    def speaking(self) -> bool:
        """Whether the caller is mid-utterance (barge-in and the holding phrase look at this)."""
        return self.endpointer is not None and self.endpointer.speaking

    @property
    def pending(self) -> bool:
        """Whether an utterance is being spoken or heard: one will settle that has not yet."""
        return self.speaking or (self._last is not None and not self._last.done())

    async def feed(self, samples: npt.NDArray[np.float32]) -> None:
        endpointer = self.endpointer
        assert endpointer is not None
        if self._warming is None:
            self._warming = asyncio.create_task(self._warm())
        events = await asyncio.to_thread(endpointer.feed, samples)
        self._buffer.append(samples)
        self._buffered += samples.size
        if endpointer.speaking or events:
            self._utterance += samples.size
        # The events were decided within this chunk; boundaries fall on chunk edges, close enough.
        for event in events:
            if event.kind == "start":
                self._started = time.monotonic()
                self._trim_to_preroll(samples.size)
                self._voiced = True
            elif event.kind == "pause":
                if self._buffered >= LISTEN_RATE * self.piece_min_ms // 1000:
                    self._close_piece()
                elif self._voiced and self.guess:
                    self._start_guess()
            elif event.kind == "resume":
                self._drop_guess()
                self._voiced = True
            else:
                self._finish(time.monotonic())
        if not endpointer.speaking and not events:
            self._trim_to_preroll(0)
        elif endpointer.speaking and self._utterance >= LISTEN_RATE * self.max_utterance_seconds:
            self._finish(time.monotonic())

    async def close(self) -> None:
        """The call ended: whatever was being said is settled, and pending work finishes."""
        if self.speaking and self._buffered:
            self._finish(time.monotonic())
        if self._last is not None:
            await self._last
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._warming

    async def _warm(self) -> None:
        """The engine loads (and warms) while the caller is still talking, not after."""
        load = getattr(self.transcriber, "load", None)
        if load is not None:
            with contextlib.suppress(Exception):  # the first piece will report a real failure
                await load()

    def _finish(self, ended_at: float) -> None:
        """The utterance ended: the guess, if one stands, is its last piece; otherwise what was
        said since the last piece; trailing silence is dropped."""
        if self._guess is not None:
            self._pieces.append(self._guess)
            self._guess = self._guess_piece = None
        elif self._voiced:
            self._close_piece()
        self._buffer, self._buffered, self._voiced = [], 0, False
        self._settle(ended_at)

    def _start_guess(self) -> None:
        self._drop_guess()
        self._guess, self._guess_piece = self._hear_soon(np.concatenate(self._buffer), "guess")

    def _drop_guess(self) -> None:
        if self._guess is not None and self._guess_piece is not None:
            self._guess.cancel()  # the local engine skips it unless it began
            self._guess_piece.kind = "dropped"
        self._guess = self._guess_piece = None

    def _trim_to_preroll(self, keep_extra: int) -> None:
        keep = _PREROLL + keep_extra
        if self._buffered <= keep:
            return
        joined = np.concatenate(self._buffer)[-keep:]
        self._buffer = [joined]
        self._buffered = joined.size

    def _close_piece(self) -> None:
        if not self._buffered:
            return
        audio = np.concatenate(self._buffer)
        self._buffer, self._buffered, self._voiced = [], 0, False
        self._pieces.append(self._hear_soon(audio, "piece")[0])

    def _hear_soon(
        self, audio: npt.NDArray[np.float32], kind: str
    ) -> tuple[asyncio.Task[tuple[str, float, bool]], Piece]:
        piece = Piece(kind=kind, seconds=audio.size / LISTEN_RATE, queued=time.monotonic())
        self.trace.append(piece)
        return asyncio.create_task(self._hear(audio, piece)), piece

    async def _hear(self, audio: npt.NDArray[np.float32], piece: Piece) -> tuple[str, float, bool]:
        seconds = piece.seconds
        try:
            transcript = await self.transcriber.transcribe(wav_bytes(audio, LISTEN_RATE), "audio/wav")
        except ModelError:
            return "", seconds, True
        finally:
            piece.done = time.monotonic()
        piece.started, piece.cpu = transcript.started_at, transcript.cpu_seconds
        return transcript.text, seconds, False

    def _settle(self, ended_at: float) -> None:
        pieces, self._pieces = self._pieces, []
        self._utterance = 0
        previous = self._last
        started_at, self._started = self._started, ended_at  # speech going on past it starts here

        async def settle() -> None:
            if previous is not None:
                await previous
            heard = await asyncio.gather(*pieces)
            text = " ".join(part for part, _, _ in heard if part).strip()
            failed = any(bad for _, _, bad in heard)
            seconds = sum(s for _, s, _ in heard)
            await self.utterances.put(
                Utterance(
                    text=text,
                    seconds=seconds,
                    ended_at=ended_at,
                    model=self.transcriber.model,
                    failed=failed,
                    started_at=started_at,
                )
            )

        self._last = asyncio.create_task(settle())
