"""A fake of the OpenAI images API on loopback, for tests and benchmarks (ARCHITECTURE §21).

It speaks the wire format of https://platform.openai.com/docs/api-reference/images:
`POST /v1/images/generations` takes JSON (`model`, `prompt`, `n`, `size`, `response_format`),
`POST /v1/images/edits` takes multipart form data (an `image` file part, or one `image[]` part per
image when an edit composes several, and the same fields);
both answer `{"created": <unix time>, "data": [{"b64_json": …, "revised_prompt": …}]}`, and
an error as `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status.

The image it draws is a real PNG (1×1, its colour from the prompt), so what the library keeps
can be checked as an image. `mode` makes it misbehave the ways a real server does; `gate`
holds every answer until the test opens it, so a test orders events without timing them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = ["FakeImagesApi", "ImagesRequest", "png_pixel", "serve_fake_images"]

Mode = Literal["ok", "refuse", "malformed", "huge", "huge_unsized", "not_an_image", "hang"]


def png_pixel(rgb: tuple[int, int, int]) -> bytes:
    """A valid 1×1 PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + bytes(rgb))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


@dataclass(frozen=True)
class ImagesRequest:
    """One request the fake received."""

    endpoint: Literal["generations", "edits"]
    fields: dict[str, str]
    authorization: str | None
    image: bytes | None = None  # edits: the (first) uploaded image file
    images: tuple[bytes, ...] = ()  # edits: every uploaded image (`image`, or each `image[]`), in order


@dataclass
class FakeImagesApi:
    url: str  # the base URL to configure, ending in /v1
    mode: Mode = "ok"
    requests: list[ImagesRequest] = field(default_factory=list[ImagesRequest])
    gate: threading.Event = field(default_factory=threading.Event)  # set: answer at once
    received: threading.Event = field(default_factory=threading.Event)  # a request came in
    canned: tuple[int, bytes] | None = None  # (status, body) answered instead of an image

    def __post_init__(self) -> None:
        self.gate.set()

    def hold(self) -> None:
        """Answer nothing until `release`."""
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()


def _image_for(prompt: str) -> bytes:
    digest = hashlib.sha256(prompt.encode()).digest()
    return png_pixel((digest[0], digest[1], digest[2]))


def _handler(api: FakeImagesApi, stop: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _answer(self, status: int, body: bytes, *, sized: bool = True) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if sized:
                self.send_header("Content-Length", str(len(body)))
            else:  # the body ends when the connection closes: only reading it tells its size
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up on it, as it should on a huge answer

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            endpoint = self.path.rstrip("/").rpartition("/")[2]
            if self.path not in ("/v1/images/generations", "/v1/images/edits"):
                self._answer(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())
                return
            images: tuple[bytes, ...] = ()
            if endpoint == "generations":
                fields = {k: str(v) for k, v in json.loads(body).items()}
            else:
                fields, images = _multipart(self.headers.get("Content-Type", ""), body)
            image = images[0] if images else None
            api.requests.append(
                ImagesRequest(
                    endpoint="generations" if endpoint == "generations" else "edits",
                    fields=fields,
                    authorization=self.headers.get("Authorization"),
                    image=image,
                    images=images,
                )
            )
            api.received.set()
            while not api.gate.wait(0.05):
                if stop.is_set():
                    return
            self._respond(fields, b"".join(images) or None)

        def _respond(self, fields: dict[str, str], image: bytes | None) -> None:
            if api.canned is not None:
                self._answer(*api.canned)
                return
            if api.mode == "hang":
                stop.wait()
                return
            if api.mode == "refuse":
                error = {
                    "message": "Your request was rejected by the safety system.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "moderation_blocked",
                }
                self._answer(400, json.dumps({"error": error}).encode())
                return
            if api.mode == "malformed":
                self._answer(200, b'{"created": 1, "data": [{"b64_json": "iVBOR')
                return
            if api.mode in ("huge", "huge_unsized"):
                huge = b'{"created": 1, "data": [{"b64_json": "' + b"A" * 11_000_000 + b'"}]}'
                self._answer(200, huge, sized=api.mode == "huge")
                return
            drawn = _image_for(fields.get("prompt", "") + (image.hex() if image else ""))
            if api.mode == "not_an_image":
                drawn = b"<html>not an image</html>"
            answer = {
                "created": 1_700_000_000,
                "data": [
                    {"b64_json": base64.b64encode(drawn).decode(), "revised_prompt": fields.get("prompt")}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 100, "total_tokens": 110},
            }
            self._answer(200, json.dumps(answer).encode())

    return Handler


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, str], tuple[bytes, ...]]:
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, str] = {}
    images: list[bytes] = []
    for part in message.iter_parts():  # pyright: ignore[reportAttributeAccessIssue, reportUnknownVariableType]
        name = part.get_param("name", header="content-disposition")  # pyright: ignore[reportUnknownMemberType]
        payload = part.get_payload(decode=True)  # pyright: ignore[reportUnknownMemberType]
        if not isinstance(payload, bytes):
            continue
        if name in ("image", "image[]"):
            images.append(payload)
        elif isinstance(name, str):
            fields[name] = payload.decode()
    return fields, tuple(images)


@contextmanager
def serve_fake_images(mode: Mode = "ok") -> Iterator[FakeImagesApi]:
    """The fake on 127.0.0.1 (a free port) for the duration of the block."""
    stop = threading.Event()
    server: ThreadingHTTPServer | None = None
    api = FakeImagesApi(url="", mode=mode)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api, stop))
    server.daemon_threads = True
    api.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, name="fake-images", daemon=True)
    thread.start()
    try:
        yield api
    finally:
        stop.set()
        api.release()
        server.shutdown()
        server.server_close()
        thread.join()
