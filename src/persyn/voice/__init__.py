"""The speech layer of live voice (issue 36, SPEC Appendix A): telephone audio (`audio.py`: G.711
μ-law, resampling), voice activity and endpointing (`vad.py`: Silero on onnxruntime), streaming
speech to text (`listen.py`, over `senses.hearing`), text to speech sentence by sentence
(`speak.py`: piper with the packaged en_US voice, or an OpenAI-compatible `/audio/speech`) and the
splitting of streamed text into speakable pieces (`sentences.py`). Transport-free: the phone
channel (`channels/voice/`) feeds it frames and sends what it makes."""
