"""The speech layer on real audio (issue 36 item 1): speech made here by piper and espeak-ng, put
through telephone μ-law, endpointed by Silero and heard by the packaged tiny.en; piper's output
transcribed back. The models load once per test session."""

from __future__ import annotations

import asyncio
import io

import av
import numpy as np
import pytest
from voice_samples import espeak_phone, heard, piper_phone, words

from persyn.core.errors import ConfigError, ModelError
from persyn.senses.hearing import LocalWhisper, Transcript, local_whisper_available, streaming
from persyn.voice.audio import LISTEN_RATE, PHONE_RATE, mulaw_decode, mulaw_encode, resample, wav_bytes
from persyn.voice.listen import Listener, Utterance
from persyn.voice.sentences import SentenceSplitter, speakable
from persyn.voice.speak import PiperSpeaker, build_speaker, local_piper_available
from persyn.voice.vad import Endpointer

pytestmark = [
    pytest.mark.local_llm,
    pytest.mark.skipif(
        not (local_whisper_available() and local_piper_available()),
        reason="needs the 'local' extra (uv sync --extra local)",
    ),
]


@pytest.fixture(scope="session")
def whisper() -> LocalWhisper:
    engine = LocalWhisper()
    asyncio.run(engine.load())
    return engine


@pytest.fixture(scope="session")
def sky_phone() -> bytes:
    return piper_phone("What colour is the sky on Tuesdays?")


async def _listen(listener: Listener, audio: np.ndarray, chunk: int = 320) -> None:
    for start in range(0, audio.size, chunk):  # 20 ms at a time, as a call delivers it
        await listener.feed(audio[start : start + chunk])


def test_mulaw_matches_ffmpegs_encoder() -> None:
    """Our G.711 encoder against FFmpeg's pcm_mulaw (PyAV's wheel), on a real voice's samples."""
    speech = PiperSpeaker(steady=True).speak_blocking("Testing one two three.")
    samples = resample(speech.samples, speech.rate, PHONE_RATE)
    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
    ours = mulaw_encode(pcm.astype(np.float32) / 32768.0)
    codec = av.CodecContext.create("pcm_mulaw", "w")
    codec.sample_rate, codec.layout, codec.format = PHONE_RATE, "mono", "s16"  # type: ignore[attr-defined]
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = PHONE_RATE
    theirs = b"".join(bytes(packet) for packet in codec.encode(frame))  # type: ignore[attr-defined]
    assert len(ours) == len(theirs) == samples.size
    # FFmpeg truncates to 14 bits before encoding (G.711's reference C does), so a sample on a
    # step's edge may land one code over; never further.
    a, b = np.frombuffer(ours, np.uint8).astype(int), np.frombuffer(theirs, np.uint8).astype(int)
    assert np.max(np.abs(a - b)) <= 1
    assert np.mean(a == b) > 0.9
    # And decoding is the inverse to within μ-law's step.
    assert np.max(np.abs(mulaw_decode(ours) - pcm / 32768.0)) < 0.04


async def test_phone_speech_is_endpointed_and_heard(whisper: LocalWhisper, sky_phone: bytes) -> None:
    listener = Listener(whisper)
    await _listen(listener, heard(sky_phone))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    # tiny.en on μ-law hears "What colour" as "colors" and "Tuesdays" as "two states" at times:
    # two robust words ("colo…" for colour, color, colors).
    heard_words = words(utterance.text)
    assert "sky" in heard_words and any(w.startswith("colo") for w in heard_words), utterance.text
    assert not utterance.failed
    assert 1.5 < utterance.seconds < 4.0
    assert listener.utterances.empty()


async def test_a_second_voice_is_heard_too(whisper: LocalWhisper) -> None:
    listener = Listener(whisper)
    await _listen(listener, heard(espeak_phone("the weather is lovely")))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    # espeak-ng on a phone line costs tiny.en words ("But when very lovely."): one robust word.
    assert "lovely" in words(utterance.text), utterance.text


async def test_two_utterances_come_out_in_order(whisper: LocalWhisper) -> None:
    first, second = piper_phone("Hello there."), piper_phone("Goodbye now.")
    listener = Listener(whisper)
    await _listen(listener, np.concatenate([heard(first), heard(second)]))
    one = await asyncio.wait_for(listener.utterances.get(), 60)
    two = await asyncio.wait_for(listener.utterances.get(), 60)
    assert "hello" in words(one.text) and "goodbye" in words(two.text), (one, two)


async def test_silence_and_line_noise_are_not_speech(whisper: LocalWhisper) -> None:
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(LISTEN_RATE * 2) * 0.01).astype(np.float32)
    hiss = resample(mulaw_decode(mulaw_encode(noise)), PHONE_RATE, PHONE_RATE)
    listener = Listener(whisper)
    await _listen(listener, np.concatenate([np.zeros(LISTEN_RATE, dtype=np.float32), hiss]))
    await listener.close()
    assert listener.utterances.empty()
    assert not listener.speaking


async def test_a_long_utterance_is_transcribed_in_pieces_while_spoken(whisper: LocalWhisper) -> None:
    """Short pauses inside speech close pieces that are heard before the utterance ends."""
    heard_pieces: list[float] = []

    class Counting:
        model = "counting"

        async def transcribe(self, data: bytes, media_type: str) -> Transcript:
            heard_pieces.append(len(data) / 2 / LISTEN_RATE)
            return await whisper.transcribe(data, media_type)

    phrase = piper_phone("The red fox runs over the hill, and the brown dog sleeps by the door.")
    listener = Listener(Counting(), end_ms=600, pause_ms=100, piece_min_ms=600)
    await _listen(listener, heard(phrase))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    assert len(heard_pieces) >= 2, heard_pieces
    assert {"fox", "dog"} <= words(utterance.text), utterance.text


class Counting:
    """The live engine (the packaged whisper through `streaming`), counting what it is sent."""

    model = "counting"

    def __init__(self, whisper: LocalWhisper) -> None:
        self.engine = streaming(whisper)
        self.sent: list[float] = []  # seconds of audio per transcription

    async def transcribe(self, data: bytes, media_type: str) -> Transcript:
        self.sent.append((len(data) - 44) / 2 / LISTEN_RATE)
        return await self.engine.transcribe(data, media_type)


async def test_the_silence_after_the_last_piece_is_never_sent(whisper: LocalWhisper) -> None:
    """The pause after "Hello there." closes a piece; the end that follows has only silence
    since, which is dropped (whisper hears "you" in silence), so one transcription in all."""
    engine = Counting(whisper)
    listener = Listener(engine, piece_min_ms=300)
    await _listen(listener, heard(piper_phone("Hello there.")))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    assert "hello" in words(utterance.text), utterance.text
    assert len(engine.sent) == 1, engine.sent
    assert [piece.kind for piece in listener.trace] == ["piece"]


async def test_a_pause_is_a_guess_that_the_end_confirms(whisper: LocalWhisper) -> None:
    """Before `piece_min_ms` of audio a pause starts hearing the utterance at once; when the end
    comes that transcription is the utterance's last piece, and nothing more is sent."""
    engine = Counting(whisper)
    listener = Listener(engine, piece_min_ms=5000)
    await _listen(listener, heard(piper_phone("Hello there.")))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    assert "hello" in words(utterance.text), utterance.text
    assert len(engine.sent) == 1, engine.sent
    assert [piece.kind for piece in listener.trace] == ["guess"]
    # With guessing off the same utterance is heard once too, after the end.
    later = Listener(Counting(whisper), piece_min_ms=5000, guess=False)
    await _listen(later, heard(piper_phone("Hello there.")))
    assert "hello" in words((await asyncio.wait_for(later.utterances.get(), 60)).text)
    assert [piece.kind for piece in later.trace] == ["piece"]


def _with_a_pause(first: str, second: str, gap_ms: int) -> np.ndarray:
    return np.concatenate([heard(piper_phone(first), tail_ms=gap_ms), heard(piper_phone(second), lead_ms=0)])


async def test_speech_after_a_pause_drops_the_guess_and_keeps_every_word(whisper: LocalWhisper) -> None:
    engine = Counting(whisper)
    listener = Listener(engine, end_ms=900, piece_min_ms=8000)
    await _listen(listener, _with_a_pause("Hello there.", "Goodbye now.", 400))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    assert {"hello", "goodbye"} <= words(utterance.text), utterance.text
    kinds = [piece.kind for piece in listener.trace]
    assert kinds[0] == "dropped" and kinds[-1] == "guess", kinds
    assert max(engine.sent) > 2.0, engine.sent  # the last piece held the whole utterance
    await listener.close()
    assert listener.utterances.empty()


def test_the_endpointer_reports_speech_resuming_after_a_pause() -> None:
    kinds = [
        event.kind
        for event in Endpointer(end_ms=900).feed(_with_a_pause("Hello there.", "Goodbye now.", 400))
    ]
    assert kinds.count("start") == 1 and kinds.count("end") == 1, kinds
    assert "resume" in kinds and kinds.index("pause") < kinds.index("resume") < kinds.index("end"), kinds


async def test_short_answers_are_heard_once_through_the_short_window(whisper: LocalWhisper) -> None:
    """A live call's pieces go through a window cut to their length; cut too short, tiny.en
    repeats a one-word answer ("Yes. Yes. Yes."): the window and the decode's bound prevent it."""
    live = streaming(whisper)
    assert isinstance(live, LocalWhisper) and live.short_window and not whisper.short_window
    for text in ("Yes.", "No.", "Sure."):
        transcript = await live.transcribe(wav_bytes(heard(piper_phone(text)), LISTEN_RATE), "audio/wav")
        assert words(transcript.text) == words(text), transcript.text
        assert transcript.started_at is not None and transcript.cpu_seconds is not None


async def test_the_speech_worker_hears_the_lightest_first(whisper: LocalWhisper, sky_phone: bytes) -> None:
    """One worker per process, the least audio first. The first clip is the lightest, so the
    worker takes it whenever it looks; on the full window it costs as much as any clip, and the
    other two, queued meanwhile, are heard shorter first though asked for longer first."""
    done: list[str] = []

    async def hear(name: str, audio: np.ndarray) -> Transcript:
        transcript = await whisper.transcribe(wav_bytes(audio, LISTEN_RATE), "audio/wav")
        done.append(name)
        return transcript

    first, longer, shorter = await asyncio.gather(
        hear("first", heard(piper_phone("No."), lead_ms=0, tail_ms=0)),
        hear("longer", heard(sky_phone)),
        hear("shorter", heard(piper_phone("Goodbye now."))),
    )
    assert done == ["first", "shorter", "longer"], done
    assert "no" in words(first.text) and "sky" in words(longer.text) and "goodbye" in words(shorter.text)


async def test_a_busy_engine_fails_the_utterance_softly(sky_phone: bytes) -> None:
    """Past its queue limit the local engine refuses with an error naming the problem; the call
    hears a failed utterance (and says its holding phrase), nothing crashes."""
    busy = LocalWhisper(queue_limit=0)
    with pytest.raises(ModelError, match="busy"):
        await busy.transcribe(wav_bytes(heard(sky_phone), LISTEN_RATE), "audio/wav")
    listener = Listener(busy)
    await _listen(listener, heard(sky_phone))
    utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    assert utterance.failed and utterance.text == ""


async def test_a_failing_transcriber_marks_the_utterance_failed(sky_phone: bytes) -> None:
    class Broken:
        model = "broken"

        async def transcribe(self, data: bytes, media_type: str) -> Transcript:
            raise ModelError("the engine fell over")

    listener = Listener(Broken())
    await _listen(listener, heard(sky_phone))
    utterance: Utterance = await asyncio.wait_for(listener.utterances.get(), 60)
    assert utterance.failed and utterance.text == ""


def test_the_endpointer_waits_for_the_configured_silence(sky_phone: bytes) -> None:
    audio = heard(sky_phone, tail_ms=300)
    short = Endpointer(end_ms=200)
    patient = Endpointer(end_ms=800)
    assert [e.kind for e in short.feed(audio) if e.kind != "pause"] == ["start", "end"]
    assert [e.kind for e in patient.feed(audio) if e.kind != "pause"] == ["start"]
    assert patient.speaking


async def test_piper_speaks_what_it_is_given(whisper: LocalWhisper) -> None:
    speaker = build_speaker()
    speech = await speaker.speak("The library opens at nine.")
    assert speech.model == "local:piper" and speech.seconds > 0.8
    phone = mulaw_encode(resample(speech.samples, speech.rate, PHONE_RATE))
    back = await whisper.transcribe(
        wav_bytes(resample(mulaw_decode(phone), PHONE_RATE, LISTEN_RATE), LISTEN_RATE), "audio/wav"
    )
    assert {"library", "nine"} <= words(back.text) or {"library", "9"} <= words(back.text), back.text


def test_streamed_text_becomes_speakable_pieces() -> None:
    splitter = SentenceSplitter()
    pieces: list[str] = []
    text = "Well, hello there Sam, good to hear you. *smiles warmly* The sky is (checks notes) blue! Bye"
    for token in text.split(" "):
        pieces += splitter.push(token + " ")
    pieces += splitter.flush()
    assert pieces == ["Well, hello there Sam,", "good to hear you.", "The sky is blue!", "Bye"]
    assert speakable("**Sure** [laughs] _why not_") == "Sure why not"
    assert SentenceSplitter().push("*nods* ") == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("piper", "PROVIDER:NAME"),
        ("local:espeak", "only local voice"),
        ("openai:", "name is missing"),
        ("openai:tts-1@ftp://x", "not an http"),
        ("acme:voice", "unknown provider"),
    ],
)
def test_a_bad_speaker_string_is_a_config_error_naming_it(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_speaker(spec, environ={})


def test_hosted_speech_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        build_speaker("openai:tts-1", environ={})
    assert build_speaker("openai:tts-1", environ={"OPENAI_API_KEY": "k"}).model == "openai:tts-1"


async def test_a_remote_speaker_gets_the_openai_body_and_its_wav_is_read() -> None:
    import httpx

    seen: list[httpx.Request] = []
    tone = (np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440) * 0.5).astype(np.float32)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=wav_bytes(tone, 8000), headers={"content-type": "audio/wav"})

    speaker = build_speaker(
        "openai:kokoro@http://tts.test/v1", voice="af", transport=httpx.MockTransport(handler)
    )
    speech = await speaker.speak("Hi.")
    assert speech.rate == 8000 and speech.samples.size == 8000
    import json

    assert json.loads(seen[0].content) == {
        "model": "kokoro",
        "input": "Hi.",
        "voice": "af",
        "response_format": "wav",
    }
    assert "authorization" not in seen[0].headers

    def bad(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"not audio")

    broken = build_speaker("openai:kokoro@http://tts.test/v1", transport=httpx.MockTransport(bad))
    with pytest.raises(ModelError, match="no WAV"):
        await broken.speak("Hi.")
    _ = io
