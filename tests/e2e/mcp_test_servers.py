"""MCP servers written by others, as the tests start them: the npm "everything" server (stdio,
or streamable HTTP on a free loopback port) and PyPI's `mcp-server-time`, both installed under
`tests/servers` by `.ci/deps` (`npm ci --prefix tests/servers`; a venv for the Python one)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import needs

SERVERS = Path(__file__).resolve().parents[1] / "servers"
EVERYTHING = SERVERS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
TIME_SERVER = SERVERS / ".venv" / "bin" / "mcp-server-time"
UNLOCK_SERVER = Path(__file__).resolve().parent / "mcp_unlock_server.py"


def require_servers() -> None:
    absent = [
        str(path.relative_to(SERVERS.parent)) for path in (EVERYTHING, TIME_SERVER) if not path.exists()
    ]
    if absent:
        needs.missing(f"the MCP test servers ({', '.join(absent)})")


def everything_stdio(name: str = "everything", **extra: Any) -> dict[str, Any]:
    require_servers()
    return {"name": name, "command": "node", "args": [str(EVERYTHING), "stdio"], **extra}


def time_stdio(name: str = "time", **extra: Any) -> dict[str, Any]:
    require_servers()
    return {"name": name, "command": str(TIME_SERVER), "args": ["--local-timezone", "UTC"], **extra}


def unlock_stdio(name: str = "lock") -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [str(UNLOCK_SERVER)]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EverythingHttp:
    """The everything server over streamable HTTP on `port` (it binds every interface: the port
    is random and the process lives only as long as the test)."""

    def __init__(self, port: int | None = None) -> None:
        require_servers()
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> EverythingHttp:
        self.process = subprocess.Popen(
            ["node", str(EVERYTHING), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the everything server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the everything server did not listen on port {self.port}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def children_running(path: Path) -> list[int]:
    """Child processes of this test process whose command line mentions `path`."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and str(path) in cmdline:
            found.append(int(entry.name))
    return found
