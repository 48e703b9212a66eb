"""The platform's share of voice-to-voice latency on the phone path (issue 36 figures).

A call over loopback exactly as the tests make one (the signed webhook, a Media Streams caller of
`persyn.testing.twilio`, uvicorn), to a runtime whose model is the 0 ms double (`test:instant`):
what is measured is the platform, not a model. The caller says a piper-made question as 8 kHz
μ-law, paced in real time (a 20 ms frame every 20 ms, as a phone sends it), then silence; the
clock runs from the moment its last voiced frame is sent to the first frame of the agent's answer.
Split by the call's timeline (`channels.voice.channel.Call.timeline`):

- endpointing: the last voiced frame → the end of the utterance decided (`[voice] endpoint_ms`
  of silence, in audio time, plus the VAD's lag);
- STT tail: → the utterance's text settled (the pieces closed at pauses were heard already);
- debounce: → the turn taken (`[voice] debounce_ms` from the utterance's end, less what the STT
  tail already spent: a fragment that begins within it is the same turn);
- pipeline: → the fast model's first words at the call (the cached prompt, the caller's line
  stored, the hard gates, task `voice` streamed; the full pipeline runs behind it, held);
- first-sentence TTS: → the first frame of the reply sent (piper on its first sentence).

`--calls N` puts N callers on the line at once, each asking the same question at the same moment
(one process, one speech worker: the figure is how many calls one worker holds before the p50
doubles). `--trace` prints, per turn of the first call, each transcription of the utterance's
pieces (`voice.listen.Piece`): its kind, its audio, and when it was queued, begun and done
relative to the end of the utterance, with its CPU. `--full-window` hears the pieces through
Whisper's padded 30 s window and `--no-guess` waits for the end before hearing the last piece:
the design before this bench's changes, for the before and after.

    uv run --extra local python bench/voice.py [--runs 8] [--endpoint-ms 400] [--calls 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from persyn.channels.voice.channel import PhoneChannel
from persyn.channels.voice.routes import voice_routes
from persyn.core.clock import ManualClock
from persyn.senses.hearing import LocalWhisper
from persyn.testing.harness import START, harness_settings, run_runtime
from persyn.testing.twilio import MediaStreamCaller, ring
from persyn.voice.audio import PHONE_RATE, mulaw_encode, resample
from persyn.voice.listen import Piece
from persyn.voice.speak import PiperSpeaker

TOKEN = "bench-token"
QUESTION = "What time does the library open tomorrow?"
PARTS = ("endpointing", "stt", "debounce", "pipeline", "tts", "total")


@dataclass
class Options:
    runs: int
    endpoint_ms: int
    piece_min_ms: int
    calls: int
    full_window: bool
    guess: bool
    trace: bool


@dataclass
class Turns:
    """One caller's measured turns (the warm-up left out) and its first call's piece traces."""

    parts: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in PARTS})
    traces: list[tuple[float, list[Piece]]] = field(default_factory=lambda: [])


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _caller_number(index: int) -> str:
    return f"+1555000{index:04d}"


async def _converse(
    options: Options, channel: PhoneChannel, public: str, question: bytes, index: int, go: asyncio.Barrier
) -> Turns:
    sid, answer = await ring(public, public, TOKEN, caller=_caller_number(index))
    assert answer.stream_url is not None
    caller = MediaStreamCaller(sid)
    await caller.connect(answer.stream_url, TOKEN)
    await caller.start(answer.parameters)
    await caller.wait_marks(1, 120)
    call = channel.calls[sid]
    call.listener.guess = options.guess
    turns = Turns()
    await go.wait()
    for turn in range(options.runs + 1):  # the first is a warm-up
        await caller.send_silence(0.5)
        marks = len(caller.marks)
        call.timeline.clear()
        await caller.send_audio(question, pace=0.02)
        last_voiced = time.monotonic()
        heard_before = len(caller.media_times)
        silence = asyncio.ensure_future(caller.send_audio(b"\xff" * PHONE_RATE * 2, pace=0.02))
        await caller.wait_marks(marks + 1, 120)
        await silence
        first_out = caller.media_times[heard_before]
        at = dict(call.timeline)
        if turn == 0:
            continue
        turns.parts["endpointing"].append(at["ended"] - last_voiced)
        turns.parts["stt"].append(at["heard"] - at["ended"])
        turns.parts["debounce"].append(at["taken"] - at["heard"])
        turns.parts["pipeline"].append(at["delivered"] - at["taken"])
        turns.parts["tts"].append(first_out - at["delivered"])
        turns.parts["total"].append(first_out - last_voiced)
        pieces = [piece for piece in call.listener.trace if piece.queued > last_voiced - 5]
        turns.traces.append((at["ended"], pieces))
    await caller.hang_up()
    return turns


async def main(options: Options) -> None:
    os.environ["TWILIO_AUTH_TOKEN"] = TOKEN
    speech = PiperSpeaker(steady=True).speak_blocking(QUESTION)
    question = mulaw_encode(resample(speech.samples, speech.rate, PHONE_RATE))
    whisper = LocalWhisper(short_window=False if options.full_window else None)
    await whisper.load()
    port = _port()
    public = f"http://127.0.0.1:{port}"
    allow = ", ".join(f'"{_caller_number(i)}"' for i in range(options.calls))
    config = (
        f"[voice]\nenabled = true\nallow = [{allow}]\nendpoint_ms = {options.endpoint_ms}\n"
        f'[voice.twilio]\npublic_url = "{public}"\n'
        "[pacing.channels.phone]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )
    with tempfile.TemporaryDirectory() as home:
        settings = harness_settings(Path(home), model="test:instant", config=config)
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = PhoneChannel(
                settings,
                pilot.runtime,
                transcriber=whisper,
                mouth=PiperSpeaker(),
                piece_min_ms=options.piece_min_ms,
            )
            app = Starlette(routes=list(voice_routes(settings, pilot.runtime, channel)))
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
            )
            serving = asyncio.ensure_future(server.serve())
            while not server.started:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            go = asyncio.Barrier(options.calls)  # every call greeted, then all speak at once
            callers = [_converse(options, channel, public, question, i, go) for i in range(options.calls)]
            cpu = time.process_time()
            results = await asyncio.gather(*callers)
            cpu = time.process_time() - cpu
            server.should_exit = True
            await serving
    _report(options, results, len(question) / PHONE_RATE, cpu)


def _report(options: Options, results: list[Turns], question_seconds: float, cpu: float) -> None:
    print(
        f"voice-to-voice, platform share (0 ms model), {options.runs} turns x {options.calls} "
        f"call(s), endpoint_ms={options.endpoint_ms}, piece_min_ms={options.piece_min_ms}, "
        f"window={'full 30 s' if options.full_window else 'short'}, "
        f"guess={'on' if options.guess else 'off'}, {os.cpu_count()} cores; "
        f"question {question_seconds:.2f} s; load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'part':<14}{'p50 ms':>9}{'p99 ms':>9}")
    for name in PARTS:
        values = [v for turns in results for v in turns.parts[name]]
        print(f"{name:<14}{statistics.median(values) * 1000:>9.0f}{_pct(values, 0.99) * 1000:>9.0f}")
    # CPU, unlike wall time, is little moved by the other work on the machine: the process's
    # seconds per turn (the callers' side included, so an upper bound) say how many turns a
    # second 2 cores could hear and answer at best.
    turns = options.calls * (options.runs + 1)
    print(f"process CPU per turn (warm-up included, callers' side too): {cpu / turns * 1000:.0f} ms")
    if not options.trace:
        return
    print("pieces of the first call's turns, ms from the end of the utterance: queued > begun > done (cpu)")
    for ended, pieces in results[0].traces:
        line = []
        for piece in pieces:
            begun = f"{(piece.started - ended) * 1000:.0f}" if piece.started is not None else "?"
            done = f"{(piece.done - ended) * 1000:.0f}" if piece.done is not None else "?"
            used = f"{piece.cpu * 1000:.0f}" if piece.cpu is not None else "?"
            line.append(
                f"{piece.kind} {piece.seconds:.2f}s: {(piece.queued - ended) * 1000:.0f}>{begun}>{done} ({used})"
            )
        print("  " + " | ".join(line))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--endpoint-ms", type=int, default=400)
    parser.add_argument(
        "--piece-min-ms", type=int, default=900, help="streaming STT piece; 100000 = one piece"
    )
    parser.add_argument("--calls", type=int, default=1, help="simultaneous callers")
    parser.add_argument("--full-window", action="store_true", help="Whisper's padded 30 s window")
    parser.add_argument("--no-guess", action="store_true", help="hear the last piece after the end")
    parser.add_argument("--trace", action="store_true", help="print each turn's pieces")
    args = parser.parse_args()
    asyncio.run(
        main(
            Options(
                runs=args.runs,
                endpoint_ms=args.endpoint_ms,
                piece_min_ms=args.piece_min_ms,
                calls=max(1, args.calls),
                full_window=args.full_window,
                guess=not args.no_guess,
                trace=args.trace,
            )
        )
    )
