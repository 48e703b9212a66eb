"""A tiny OTLP/HTTP trace receiver on loopback, for tests: what a local collector is to Persyn.

It decodes each `ExportTraceServiceRequest` it is sent (protobuf, as the SDK's exporter
posts it) and keeps both the raw bodies (to check what bytes left the process) and the
decoded spans. `mode="hang"` accepts a request and never answers until the test ends, as a
collector stuck behind a full disk does.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass
class Received:
    bodies: list[bytes] = field(default_factory=list[bytes])
    spans: list[Span] = field(default_factory=list[Span])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[Span]:
        with self.lock:
            return list(self.spans)


@dataclass
class Receiver:
    url: str
    received: Received


@contextmanager
def otlp_receiver(mode: Literal["answer", "hang"] = "answer") -> Iterator[Receiver]:
    received = Received()
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
            with received.lock:
                received.bodies.append(body)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        received.spans.extend(scope_spans.spans)
            if mode == "hang":
                release.wait(60)
                return
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received)
    finally:
        release.set()
        server.shutdown()
        server.server_close()
