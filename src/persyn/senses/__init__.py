"""The senses (SPEC §4 step 1): what people send — images, audio, documents — checked against the
`[senses]` limits before anything decodes it (`media.py`), heard (`hearing.py`) and read
(`documents.py`). Callers import from the modules; this package loads nothing heavy on import
(Pillow, PyAV, pypdf, trafilatura and faster-whisper are imported on first use)."""
