"""A Server-Sent Events reader on its own thread (httpx), for the web tests: events are
collected as they arrive, and a test waits on a condition over them, never a sleep."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx


class SseReader:
    def __init__(self, url: str, key: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.status: int | None = None
        self.ended = False
        self._changed = threading.Condition()
        self._client = httpx.Client(timeout=httpx.Timeout(5.0, read=None))
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, key), daemon=True)
        self._thread.start()
        if not self._open.wait(30):
            raise AssertionError(f"the stream {url} did not open")

    def _run(self, url: str, key: str) -> None:
        try:
            with self._client.stream("GET", url, headers={"Authorization": f"Bearer {key}"}) as response:
                self.status = response.status_code
                self._open.set()
                kind, data = "message", ""
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        data += line[6:]
                    elif line == "" and data:
                        with self._changed:
                            self.events.append((kind, json.loads(data)))
                            self._changed.notify_all()
                        kind, data = "message", ""
        except Exception:  # closed by the test, or the server went away: the stream ended
            pass
        finally:
            self._open.set()
            with self._changed:
                self.ended = True
                self._changed.notify_all()

    def wait(
        self, condition: Callable[[list[tuple[str, dict[str, Any]]]], bool], timeout: float = 120
    ) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or self.ended:
                    return condition(self.events)
                self._changed.wait(left)
            return True

    def of(self, event_id: str) -> list[tuple[str, dict[str, Any]]]:
        with self._changed:
            return [(k, d) for k, d in self.events if d.get("event_id") == event_id]

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=10)
