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

    uv run --extra local python bench/voice.py [--runs 8] [--endpoint-ms 400]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import tempfile
import time
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
from persyn.voice.speak import PiperSpeaker

TOKEN = "bench-token"
CALLER = "+15550001111"
QUESTION = "What time does the library open tomorrow?"


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main(runs: int, endpoint_ms: int, piece_min_ms: int) -> None:
    os.environ["TWILIO_AUTH_TOKEN"] = TOKEN
    speech = PiperSpeaker(steady=True).speak_blocking(QUESTION)
    question = mulaw_encode(resample(speech.samples, speech.rate, PHONE_RATE))
    whisper = LocalWhisper()
    await whisper.load()
    port = _port()
    public = f"http://127.0.0.1:{port}"
    config = (
        f'[voice]\nenabled = true\nallow = ["{CALLER}"]\nendpoint_ms = {endpoint_ms}\n'
        f'[voice.twilio]\npublic_url = "{public}"\n'
        "[pacing.channels.phone]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )
    with tempfile.TemporaryDirectory() as home:
        settings = harness_settings(Path(home), model="test:instant", config=config)
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = PhoneChannel(
                settings, pilot.runtime, transcriber=whisper, mouth=PiperSpeaker(), piece_min_ms=piece_min_ms
            )
            app = Starlette(routes=list(voice_routes(settings, pilot.runtime, channel)))
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
            )
            serving = asyncio.ensure_future(server.serve())
            while not server.started:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            sid, answer = await ring(public, public, TOKEN, caller=CALLER)
            assert answer.stream_url is not None
            caller = MediaStreamCaller(sid)
            await caller.connect(answer.stream_url, TOKEN)
            await caller.start(answer.parameters)
            await caller.wait_marks(1, 60)
            call = channel.calls[sid]
            parts: dict[str, list[float]] = {
                k: [] for k in ("endpointing", "stt", "debounce", "pipeline", "tts", "total")
            }
            for _ in range(runs + 1):  # the first is a warm-up
                await caller.send_silence(0.5)
                marks = len(caller.marks)
                call.timeline.clear()
                await caller.send_audio(question, pace=0.02)
                last_voiced = time.monotonic()
                heard_before = len(caller.media_times)
                silence = asyncio.ensure_future(caller.send_audio(b"\xff" * PHONE_RATE * 2, pace=0.02))
                await caller.wait_marks(marks + 1, 60)
                await silence
                first_out = caller.media_times[heard_before]
                at = dict(call.timeline)
                parts["endpointing"].append(at["ended"] - last_voiced)
                parts["stt"].append(at["heard"] - at["ended"])
                parts["debounce"].append(at["taken"] - at["heard"])
                parts["pipeline"].append(at["delivered"] - at["taken"])
                parts["tts"].append(first_out - at["delivered"])
                parts["total"].append(first_out - last_voiced)
            await caller.hang_up()
            server.should_exit = True
            await serving
    print(
        f"voice-to-voice, platform share (0 ms model), {runs} turns, endpoint_ms={endpoint_ms}, "
        f"piece_min_ms={piece_min_ms}, "
        f"{os.cpu_count()} cores; question {len(question) / PHONE_RATE:.2f} s"
    )
    print(f"{'part':<14}{'p50 ms':>9}{'p99 ms':>9}")
    for name, values in parts.items():
        values = values[1:]
        print(f"{name:<14}{statistics.median(values) * 1000:>9.0f}{_pct(values, 0.99) * 1000:>9.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--endpoint-ms", type=int, default=400)
    parser.add_argument(
        "--piece-min-ms", type=int, default=900, help="streaming STT piece; 100000 = one piece"
    )
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.endpoint_ms, args.piece_min_ms))
