"""A fake OpenAI-compatible speech-to-text server for tests (`senses.hearing.RemoteTranscriber`).

It speaks the wire format of https://platform.openai.com/docs/api-reference/audio/createTranscription:
`POST /v1/audio/transcriptions` takes multipart form data (a `file` part, `model`, and optionally
`language`, `response_format`) and answers `{"text": ...}`. It keeps every request (fields, the
uploaded file, its part's file name and type, the Authorization header) for the test to check,
and answers `text` (or a canned status and body, or nothing at all). Runs on 127.0.0.1 in a
thread, so a test talks to it over real HTTP.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

__all__ = ["FakeTranscriptionsApi", "TranscriptionRequest", "serve_fake_transcriptions"]

PATH = "/v1/audio/transcriptions"


@dataclass(frozen=True)
class TranscriptionRequest:
    """One request the fake received."""

    fields: dict[str, str]
    authorization: str | None
    audio: bytes | None  # the `file` part
    filename: str | None
    content_type: str | None  # the `file` part's own type


@dataclass
class FakeTranscriptionsApi:
    url: str  # the base URL to configure, ending in /v1
    text: str = "hello from the fake transcriber"
    canned: tuple[int, bytes] | None = None  # (status, body) answered instead of `text`
    hang: bool = False  # answer nothing until the server stops
    requests: list[TranscriptionRequest] = field(default_factory=list[TranscriptionRequest])


def _handler(api: FakeTranscriptionsApi, stop: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != PATH:
                self._answer(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())
                return
            api.requests.append(_request(self.headers.get("Content-Type", ""), body, self.headers))
            if api.hang:
                stop.wait()
                return
            if api.canned is not None:
                self._answer(*api.canned)
                return
            self._answer(200, json.dumps({"text": api.text}).encode())

    return Handler


def _request(content_type: str, body: bytes, headers: Message) -> TranscriptionRequest:
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, str] = {}
    audio: bytes | None = None
    filename: str | None = None
    part_type: str | None = None
    parts = cast(list[Message], list(message.iter_parts()) if message.is_multipart() else [])  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownArgumentType]
    for part in parts:
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if name == "file":
            audio, filename, part_type = payload, part.get_filename(), part.get_content_type()
        elif isinstance(name, str):
            fields[name] = payload.decode()
    return TranscriptionRequest(
        fields=fields,
        authorization=headers.get("Authorization"),
        audio=audio,
        filename=filename,
        content_type=part_type,
    )


@contextmanager
def serve_fake_transcriptions(text: str | None = None) -> Iterator[FakeTranscriptionsApi]:
    """The fake on 127.0.0.1 (a free port) for the duration of the block."""
    stop = threading.Event()
    api = FakeTranscriptionsApi(url="")
    if text is not None:
        api.text = text
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api, stop))
    server.daemon_threads = True
    api.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, name="fake-transcriptions", daemon=True)
    thread.start()
    try:
        yield api
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join()
