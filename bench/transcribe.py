"""Local transcription with the packaged tiny.en (issue 35 figures).

A sentence of about five seconds is synthesized with espeak-ng (`-s 130`), then transcribed by
`senses.hearing.LocalWhisper` (faster-whisper, int8, 2 CPU threads) as a voice note would be.
Printed: the cold load (the model read from the package into CTranslate2, once per process), the
first transcription after it, then p50 / p90 over `--runs` transcriptions and the real-time
factor (p50 over the audio's length: below 1 is faster than speech) and the CPU seconds each
takes (all threads: the figure the machine's load moves least), per beam size, for the WAV
and for the same sound as MP3 (decoding included); and what `inspect_media` costs on each (the
gate every file passes first).

    uv run --extra local python bench/transcribe.py [--runs 10] [--beams 1,5] [--threads 2]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import av
from av.audio.stream import AudioStream

from persyn.core.config.senses import SensesConfig
from persyn.senses.hearing import LocalWhisper, local_whisper_available
from persyn.senses.media import inspect_media

SENTENCE = "please remind me to water the tomatoes in the garden tomorrow morning"


def synthesize(directory: Path) -> bytes:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise SystemExit("needs espeak-ng (apt-get install espeak-ng)")
    path = directory / "utterance.wav"
    subprocess.run([espeak, "-s", "130", "-w", str(path), SENTENCE], check=True, capture_output=True)
    return path.read_bytes()


def as_mp3(wav: bytes) -> bytes:
    out = io.BytesIO()
    with av.open(io.BytesIO(wav), mode="r") as source, av.open(out, mode="w", format="mp3") as target:
        stream = target.add_stream("libmp3lame", rate=22050, layout="mono")
        assert isinstance(stream, AudioStream)
        resampler = av.AudioResampler(format=stream.format, layout="mono", rate=22050)
        for frame in [*source.decode(audio=0), None]:
            for converted in resampler.resample(frame):
                for packet in stream.encode(converted):
                    target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10, help="transcriptions timed per row")
    parser.add_argument("--beams", default="1,5", help="beam sizes to compare (1: greedy, the default)")
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 CPU threads")
    args = parser.parse_args()
    if not local_whisper_available():
        raise SystemExit("needs the 'local' extra: uv sync --extra local")
    limits = SensesConfig()
    with tempfile.TemporaryDirectory() as tmp:
        wav = synthesize(Path(tmp))
    samples = {"audio/wav": wav, "audio/mpeg": as_mp3(wav)}
    seconds = inspect_media(wav, "audio/wav", None, limits).seconds or 0.0

    started = time.perf_counter()
    engine = LocalWhisper(cpu_threads=args.threads, beam_size=1)
    engine.load_blocking()
    cold = time.perf_counter() - started
    started = time.perf_counter()
    first = engine.transcribe_blocking(wav, "audio/wav")
    first_call = time.perf_counter() - started

    print(f"utterance: {seconds:.2f} s of espeak-ng speech; heard as {first.text!r}")
    print(f"cold model load {cold * 1000:.0f} ms; first transcription after it {first_call * 1000:.0f} ms")
    print()
    print(
        f"{'audio':>11} {'beam':>5} {'runs':>5} {'inspect ms':>11} {'p50 ms':>8} {'p90 ms':>8} {'RTF p50':>8} {'CPU s p50':>10}"
    )
    inspect_ms: dict[str, float] = {}
    for media_type, data in samples.items():
        started = time.perf_counter()
        for _ in range(20):
            inspect_media(data, media_type, None, limits)
        inspect_ms[media_type] = (time.perf_counter() - started) / 20 * 1000
    rows = [(media_type, int(beam)) for media_type in samples for beam in args.beams.split(",")]
    runners = {beam: LocalWhisper(cpu_threads=args.threads, beam_size=beam) for _, beam in rows}
    times: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    cpu: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    # Round-robin over the rows, so a change in the machine's load falls on every row alike.
    for _ in range(args.runs):
        for media_type, beam in rows:
            started, cpu_started = time.perf_counter(), time.process_time()
            runners[beam].transcribe_blocking(samples[media_type], media_type)
            times[(media_type, beam)].append(time.perf_counter() - started)
            cpu[(media_type, beam)].append(time.process_time() - cpu_started)
    for (media_type, beam), taken in times.items():
        p50, p90 = statistics.median(taken), percentile(taken, 0.9)
        print(
            f"{media_type:>11} {beam:>5} {args.runs:>5} {inspect_ms[media_type]:>11.2f} {p50 * 1000:>8.0f} "
            f"{p90 * 1000:>8.0f} {p50 / seconds:>8.3f} {statistics.median(cpu[(media_type, beam)]):>10.2f}"
        )
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\n{os.cpu_count()} CPUs, {args.threads} CTranslate2 threads, load average {load}.")


if __name__ == "__main__":
    main()
