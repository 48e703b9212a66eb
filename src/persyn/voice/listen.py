"""Streaming speech to text for a live call: audio in as it arrives, settled utterances out.

The endpointer (`vad.Endpointer`) finds where speech starts and ends. So that most of an utterance
is transcribed while it is still being spoken, the utterance is cut into pieces at its short
pauses (`pause_ms`, once a piece holds `piece_min_ms` of audio): each closed piece is transcribed
at once, in the background, and when the utterance ends only its last piece is left to hear (the
STT tail of the latency). The pieces go through the ordinary `senses.hearing.Transcriber` port as
16 kHz WAV, so the packaged whisper and a remote `/audio/transcriptions` both serve. Silero runs in
a thread and transcription in the transcriber's own (the local engine's `to_thread`): the event
loop never waits on a model."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from persyn.core.errors import ModelError
from persyn.voice.audio import LISTEN_RATE, wav_bytes
from persyn.voice.vad import Endpointer

if TYPE_CHECKING:
    import numpy.typing as npt

    from persyn.senses.hearing import Transcriber

__all__ = ["Listener", "Utterance"]

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
class Listener:
    """One call's ear. `await feed(samples)` with 16 kHz float samples as they arrive; settled
    utterances come out of `utterances` (an `asyncio.Queue`) in the order they were spoken."""

    transcriber: Transcriber
    end_ms: int = 400
    pause_ms: int = 160
    piece_min_ms: int = 900
    max_utterance_seconds: float = 30.0
    utterances: asyncio.Queue[Utterance] = field(default_factory=lambda: asyncio.Queue[Utterance]())
    endpointer: Endpointer | None = None
    _buffer: list[npt.NDArray[np.float32]] = field(default_factory=lambda: [])
    _buffered: int = 0
    _pieces: list[asyncio.Task[tuple[str, float, bool]]] = field(default_factory=lambda: [])
    _last: asyncio.Task[None] | None = None
    _utterance: int = 0  # samples of the utterance being spoken
    _started: float = 0.0  # when it began (`time.monotonic()`)

    def __post_init__(self) -> None:
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
            elif event.kind == "pause" and self._buffered >= LISTEN_RATE * self.piece_min_ms // 1000:
                self._close_piece()
            elif event.kind == "end":
                self._close_piece()
                self._settle(time.monotonic())
        if not endpointer.speaking and not events:
            self._trim_to_preroll(0)
        elif endpointer.speaking and self._utterance >= LISTEN_RATE * self.max_utterance_seconds:
            self._close_piece()
            self._settle(time.monotonic())

    async def close(self) -> None:
        """The call ended: whatever was being said is settled, and pending work finishes."""
        if self.speaking and self._buffered:
            self._close_piece()
            self._settle(time.monotonic())
        if self._last is not None:
            await self._last

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
        self._buffer, self._buffered = [], 0
        self._pieces.append(asyncio.create_task(self._hear(audio)))

    async def _hear(self, audio: npt.NDArray[np.float32]) -> tuple[str, float, bool]:
        seconds = audio.size / LISTEN_RATE
        try:
            transcript = await self.transcriber.transcribe(wav_bytes(audio, LISTEN_RATE), "audio/wav")
        except ModelError:
            return "", seconds, True
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
