"""Where a call's speech goes: one small port (`Outlet`: play samples at a rate, mark a point in
the playback, clear what has not played yet) and its two transports, so one voice session (`Call`)
serves a phone line and a browser alike.

- `TwilioOutlet`: Twilio Media Streams (twilio.com/docs/voice/media-streams/websocket-messages):
  `media` messages of 20 ms of base64 8 kHz μ-law, `mark` (echoed back by Twilio once the audio
  sent before it has played), `clear` (Twilio empties its buffer of unplayed audio).
- `BrowserOutlet`: the chat page's voice WebSocket (`web/voice.py`): each piece of speech is one
  binary message holding a 16-bit mono WAV, and JSON control messages — `{"type": "mark", "name"}`
  (the page answers `{"type": "played", "name"}` when the audio before it has played) and
  `{"type": "clear"}` (the page stops playback at once).

A mark's echo is how a call knows what the person actually heard: the dialog keeps only that when
a reply is cut off (`Call.cut_off`)."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, Protocol

from persyn.voice.audio import FRAME_BYTES, PHONE_RATE, mulaw_encode, resample, wav_bytes

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["BrowserOutlet", "BrowserSocket", "Outlet", "StreamSocket", "TwilioOutlet"]


class StreamSocket(Protocol):
    """The part of a Starlette WebSocket a call writes text to."""

    async def send_text(self, data: str) -> None: ...


class BrowserSocket(StreamSocket, Protocol):
    async def send_bytes(self, data: bytes) -> None: ...


class Outlet(Protocol):
    """A call's way out: what it plays, where a mark falls, and stopping playback."""

    @property
    def socket(self) -> object:
        """The connection it writes to (the routes find a call's by it)."""
        ...

    async def play(self, samples: npt.NDArray[np.float32], rate: int) -> None: ...

    async def mark(self, name: str) -> None: ...

    async def clear(self) -> None: ...

    async def control(self, message: dict[str, Any]) -> None:
        """A message for the person's side that is not audio (what was heard, what is said);
        a transport with no such channel ignores it."""
        ...


class TwilioOutlet:
    def __init__(self, socket: StreamSocket, stream_sid: str) -> None:
        self.socket = socket
        self.stream_sid = stream_sid

    async def play(self, samples: npt.NDArray[np.float32], rate: int) -> None:
        audio = mulaw_encode(resample(samples, rate, PHONE_RATE))
        for start in range(0, len(audio), FRAME_BYTES):
            frame = base64.b64encode(audio[start : start + FRAME_BYTES]).decode()
            await self._send({"event": "media", "streamSid": self.stream_sid, "media": {"payload": frame}})

    async def mark(self, name: str) -> None:
        await self._send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    async def clear(self) -> None:
        await self._send({"event": "clear", "streamSid": self.stream_sid})

    async def control(self, message: dict[str, Any]) -> None:
        return None  # a phone line carries nothing but audio and marks

    async def _send(self, message: dict[str, Any]) -> None:
        await self.socket.send_text(json.dumps(message))


class BrowserOutlet:
    def __init__(self, socket: BrowserSocket) -> None:
        self.socket = socket

    async def play(self, samples: npt.NDArray[np.float32], rate: int) -> None:
        await self.socket.send_bytes(wav_bytes(samples, rate))

    async def mark(self, name: str) -> None:
        await self.control({"type": "mark", "name": name})

    async def clear(self) -> None:
        await self.control({"type": "clear"})

    async def control(self, message: dict[str, Any]) -> None:
        await self.socket.send_text(json.dumps(message))
