"""Voice activity and endpointing: Silero VAD v6 as faster-whisper ships it
(`faster_whisper/assets/silero_vad_v6.onnx`), run on onnxruntime window by window (512 samples
of 16 kHz, 32 ms, with the 64-sample context and the recurrent state carried between windows), so
a call's audio is judged as it arrives. No torch.

`Endpointer` turns those probabilities into what a turn needs: when speech started, a short pause
inside it (where the streaming transcriber may close a piece, or guess that the utterance is
over), speech resuming after such a pause (the guess was wrong), and its end — `end_ms` of
silence after voiced audio (the endpointing share of latency; `[voice] endpoint_ms`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from persyn.core.errors import ConfigError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["WINDOW", "Endpointer", "SileroVad", "VadEvent", "silero_path"]

WINDOW = 512  # samples of 16 kHz per judgement
_CONTEXT = 64
_SESSION: Any = None
_LOADING = threading.Lock()


def silero_path() -> Path:
    """The Silero model inside faster-whisper's wheel (the `local` extra)."""
    try:
        import faster_whisper  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as exc:
        raise ConfigError("voice activity detection needs the 'local' extra (faster-whisper)") from exc
    path = Path(faster_whisper.__file__).resolve().parent / "assets" / "silero_vad_v6.onnx"
    if not path.is_file():
        raise ConfigError(f"the Silero VAD model is missing from {path}")
    return path


def _session() -> Any:
    """One onnxruntime session per process (stateless: each stream carries its own state)."""
    global _SESSION
    with _LOADING:
        if _SESSION is None:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.inter_op_num_threads = 1
            options.intra_op_num_threads = 1
            options.log_severity_level = 4
            _SESSION = onnxruntime.InferenceSession(
                str(silero_path()), providers=["CPUExecutionProvider"], sess_options=options
            )
        return _SESSION


class SileroVad:
    """One stream's Silero state: `probabilities(samples)` takes 16 kHz float samples in any
    amounts and returns one speech probability per completed 32 ms window."""

    def __init__(self) -> None:
        self._session = _session()
        self._state_h = np.zeros((1, 1, 128), dtype=np.float32)
        self._state_c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def probabilities(self, samples: npt.NDArray[np.float32]) -> list[float]:
        self._pending = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        out: list[float] = []
        while self._pending.size >= WINDOW:
            window = self._pending[:WINDOW]
            self._pending = self._pending[WINDOW:]
            batch = np.concatenate([self._context, window]).reshape(1, -1)
            result = self._session.run(None, {"input": batch, "h": self._state_h, "c": self._state_c})
            probability, self._state_h, self._state_c = result
            self._context = window[-_CONTEXT:]
            out.append(float(np.asarray(probability).reshape(-1)[0]))
        return out


@dataclass(frozen=True)
class VadEvent:
    """`start`: speech began; `pause`: a short silence inside speech; `resume`: speech again after
    a pause; `end`: the utterance ended. `at` is the sample (16 kHz, from the stream's start)
    where it was decided."""

    kind: Literal["start", "pause", "resume", "end"]
    at: int


@dataclass
class Endpointer:
    """Silero's probabilities as utterance boundaries, with hysteresis (speech above `threshold`,
    silence below `threshold - 0.15`)."""

    end_ms: int = 400
    pause_ms: int = 160
    min_speech_ms: int = 160
    threshold: float = 0.5
    vad: SileroVad = field(default_factory=SileroVad)
    speaking: bool = False
    _position: int = 0
    _voiced: int = 0
    _silent: int = 0
    _paused: bool = False

    def feed(self, samples: npt.NDArray[np.float32]) -> list[VadEvent]:
        events: list[VadEvent] = []
        for probability in self.vad.probabilities(samples):
            self._position += WINDOW
            if probability >= self.threshold:
                self._voiced += WINDOW
                self._silent = 0
                if self._paused and self.speaking:
                    events.append(VadEvent("resume", self._position))
                self._paused = False
                if not self.speaking and self._voiced >= _samples(self.min_speech_ms):
                    self.speaking = True
                    events.append(VadEvent("start", self._position - self._voiced))
            elif probability < self.threshold - 0.15:
                self._silent += WINDOW
                if not self.speaking:
                    self._voiced = 0
                    continue
                if self._silent >= _samples(self.end_ms):
                    self.speaking = False
                    self._voiced = 0
                    events.append(VadEvent("end", self._position))
                elif self._silent >= _samples(self.pause_ms) and not self._paused:
                    self._paused = True
                    events.append(VadEvent("pause", self._position))
        return events


def _samples(ms: int) -> int:
    return ms * 16
