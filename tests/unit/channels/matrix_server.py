"""A real Matrix homeserver (PyPI's Synapse, in its own venv) on loopback, started once per test
session, and a raw client-server API client written against the spec alone (not the adapter's
code) to stand in for people."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

SYNAPSE_VENV = Path(__file__).resolve().parents[2] / "servers" / "synapse" / ".venv"
SYNAPSE_PYTHON = SYNAPSE_VENV / "bin" / "python"
REGISTER = SYNAPSE_VENV / "bin" / "register_new_matrix_user"
SERVER_NAME = "test.local"
WAIT_SECONDS = 60.0  # bounds a broken test only

# Tests send bursts: Synapse's per-user rate limits would answer them with 429s.
_UNLIMITED = """
rc_message: {per_second: 1000, burst_count: 1000}
rc_login:
  address: {per_second: 1000, burst_count: 1000}
  account: {per_second: 1000, burst_count: 1000}
rc_joins:
  local: {per_second: 1000, burst_count: 1000}
rc_invites:
  per_room: {per_second: 1000, burst_count: 1000}
  per_user: {per_second: 1000, burst_count: 1000}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Synapse:
    """One Synapse process on 127.0.0.1:`port` over SQLite; `stop` kills it (a crash, not a
    shutdown), `start` brings the same server back."""

    directory: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / "hs.yaml"

    def generate(self) -> None:
        """The configuration `--generate-config` would write, with what tests need instead of
        its defaults (a loopback listener, no key servers, no rate limits), written here: the
        generator is a Synapse start-up of its own (several seconds of CPU)."""
        secret = secrets.token_urlsafe(32)
        seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        (self.directory / "signing.key").write_text(f"ed25519 a_test {seed}\n")
        self.config.write_text(
            f"server_name: {SERVER_NAME}\n"
            f"pid_file: {self.directory / 'homeserver.pid'}\n"
            f"listeners:\n  - port: {self.port}\n    bind_addresses: ['127.0.0.1']\n    type: http\n"
            "    tls: false\n    x_forwarded: false\n    resources:\n      - names: [client]\n        compress: false\n"
            f"database:\n  name: sqlite3\n  args:\n    database: {self.directory / 'homeserver.db'}\n"
            f"media_store_path: {self.directory / 'media'}\n"
            f"signing_key_path: {self.directory / 'signing.key'}\n"
            f"registration_shared_secret: {secret}\nmacaroon_secret_key: {secret}x\nform_secret: {secret}y\n"
            "report_stats: false\ntrusted_key_servers: []\nsuppress_key_server_warning: true\n"
            "enable_metrics: false\n" + _UNLIMITED
        )

    def start(self) -> None:
        with (self.directory / "synapse.out").open("ab") as log:
            self.process = subprocess.Popen(
                [str(SYNAPSE_PYTHON), "-m", "synapse.app.homeserver", "-c", str(self.config)],
                cwd=self.directory,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"synapse did not start; see {self.directory / 'homeserver.log'}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def register(self, name: str, password: str) -> str:
        """A user made by Synapse's own `register_new_matrix_user`; returns the user id."""
        subprocess.run(
            [str(REGISTER), "-c", str(self.config), "-u", name, "-p", password, "--no-admin", self.url],
            check=True,
            capture_output=True,
        )
        return f"@{name}:{SERVER_NAME}"

    def register_later(self, name: str, password: str, *, admin: bool = False) -> subprocess.Popen[bytes]:
        """`register` started, not awaited (several users are made at once); `admin` makes a
        server admin (who may use Synapse's admin API)."""
        role = "--admin" if admin else "--no-admin"
        return subprocess.Popen(
            [str(REGISTER), "-c", str(self.config), "-u", name, "-p", password, role, self.url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )


@dataclass(frozen=True)
class Seen:
    room: str
    event: dict[str, Any]

    @property
    def sender(self) -> str:
        return str(self.event.get("sender"))

    @property
    def content(self) -> dict[str, Any]:
        return dict(self.event.get("content") or {})

    @property
    def body(self) -> str:
        return str(self.content.get("body") or "")


class MatrixPerson:
    """A person on Matrix, by the client-server API alone: logs in, makes rooms, invites,
    says things, and keeps every message and read receipt its own sync loop sees."""

    def __init__(self, server: Synapse, name: str, password: str) -> None:
        self.server = server
        self.name = name
        self.password = password
        self.user_id = f"@{name}:{SERVER_NAME}"
        self.seen: list[Seen] = []
        self.receipts: list[tuple[str, str, str]] = []  # (room, event id, reader)
        self._client = httpx.AsyncClient(base_url=f"{server.url}/_matrix/client/v3", timeout=60)
        self._task: asyncio.Task[None] | None = None
        self._since: str | None = None
        self._txn = 0
        self.token = ""

    async def login(self) -> MatrixPerson:
        done = await self._client.post(
            "/login",
            json={
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": self.name},
                "password": self.password,
            },
        )
        done.raise_for_status()
        self.token = str(done.json()["access_token"])
        self._client.headers["Authorization"] = f"Bearer {self.token}"
        first = await self._call("GET", "/sync", params={"timeout": 0})
        self._since = first["next_batch"]
        self._task = asyncio.ensure_future(self._sync_forever())
        return self

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        response = await self._client.request(method, path, json=body, params=params)
        assert response.status_code < 400, f"{method} {path}: {response.status_code} {response.text}"
        return dict(response.json())

    async def _sync_forever(self) -> None:
        while True:
            try:
                data = await self._call("GET", "/sync", params={"since": self._since, "timeout": 2000})
            except (httpx.HTTPError, AssertionError):
                await asyncio.sleep(0.2)  # the server is down (a restart test): try again
                continue
            for room_id in (data.get("rooms") or {}).get("invite") or {}:
                with contextlib.suppress(httpx.HTTPError, AssertionError):
                    await self.join(room_id)  # people here accept every invitation
            for room_id, room in ((data.get("rooms") or {}).get("join") or {}).items():
                for event in (room.get("timeline") or {}).get("events") or []:
                    if event.get("type") == "m.room.message":
                        self.seen.append(Seen(room_id, event))
                for event in (room.get("ephemeral") or {}).get("events") or []:
                    if event.get("type") != "m.receipt":
                        continue
                    for event_id, kinds in (event.get("content") or {}).items():
                        for reader in kinds.get("m.read") or {}:
                            self.receipts.append((room_id, event_id, reader))
            self._since = data["next_batch"]

    async def create_room(self, *invite: str, direct: bool = False) -> str:
        body: dict[str, Any] = {"invite": list(invite), "preset": "private_chat"}
        if direct:
            body["is_direct"] = True
        return str((await self._call("POST", "/createRoom", body))["room_id"])

    async def invite(self, room: str, user: str) -> None:
        await self._call("POST", f"/rooms/{quote(room)}/invite", {"user_id": user})

    async def join(self, room: str) -> None:
        await self._call("POST", f"/join/{quote(room)}", {})

    async def members(self, room: str) -> set[str]:
        return set((await self._call("GET", f"/rooms/{quote(room)}/joined_members"))["joined"])

    async def membership(self, room: str, user: str) -> str | None:
        state = await self._call("GET", f"/rooms/{quote(room)}/state/m.room.member/{quote(user)}")
        return state.get("membership")

    async def say(self, room: str, text: str, **extra: Any) -> str:
        self._txn += 1
        content = {"msgtype": "m.text", "body": text, **extra}
        sent = await self._call("PUT", f"/rooms/{quote(room)}/send/m.room.message/t{self._txn}", content)
        return str(sent["event_id"])

    async def upload(self, data: bytes, content_type: str, filename: str) -> str:
        """`data` put in the homeserver's media repository; its `mxc://` URI."""
        done = await self._client.post(
            f"{self.server.url}/_matrix/media/v3/upload",
            params={"filename": filename},
            content=data,
            headers={"Content-Type": content_type},
        )
        assert done.status_code == 200, f"upload: {done.status_code} {done.text}"
        return str(done.json()["content_uri"])

    async def send_file(
        self, room: str, msgtype: str, data: bytes, content_type: str, filename: str, caption: str = ""
    ) -> str:
        """A media message as clients send it: the file uploaded, its name and size in the
        event, a caption (Matrix v1.10) as `body` with the name in `filename`."""
        url = await self.upload(data, content_type, filename)
        info = {"mimetype": content_type, "size": len(data)}
        extra = {"filename": filename} if caption else {}
        return await self.say(room, caption or filename, msgtype=msgtype, url=url, info=info, **extra)

    async def limit_messages(self, user: str, per_second: int, burst: int) -> None:
        """Synapse's admin API (this person must be an admin): `user`'s sends limited to
        `per_second` with bursts of `burst`, whatever the server's `rc_message` says."""
        url = f"{self.server.url}/_synapse/admin/v1/users/{quote(user)}/override_ratelimit"
        done = await self._client.post(url, json={"messages_per_second": per_second, "burst_count": burst})
        assert done.status_code == 200, f"override_ratelimit: {done.status_code} {done.text}"

    def said_by(self, user: str, room: str | None = None) -> list[Seen]:
        return [s for s in self.seen if s.sender == user and (room is None or s.room == room)]

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while not condition():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{self.name} never saw {what}; saw {[s.body for s in self.seen[-10:]]}")
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.aclose()
