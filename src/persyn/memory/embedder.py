"""The `Embedder` port (ARCHITECTURE §6) and its adapters.

An embedder turns texts into unit-length vectors. The vector's model id (`name`) and
dimensionality (`dims`) are stored with every vector, so a changed model is noticed and
`persyn memory reindex` can re-embed what it no longer matches.

Adapters, chosen by the `[memory] embedder` string (`build_embedder`):

- `minilm`: all-MiniLM-L6-v2, int8 ONNX on onnxruntime (`minilm.py`); model and
  tokenizer ship in wheels.
- `wordllama` (default): WordLlama's 256-d token-embedding model, in-process, numpy only. Its
  weights ship inside the wheel; they are loaded from the package directory with downloads
  disabled, so nothing is ever fetched at run time.
- `openai:MODEL@http://host:port/v1`: any self-hosted OpenAI-compatible `/v1/embeddings`
  service (SPEC §6: a fleet of agents may share one accelerator). Loopback-friendly: plain
  http, no key needed unless the service wants one.
- `sentence-transformers:NAME_OR_PATH`: the optional extra, loaded from local files only.
- `test:NAME`: deterministic doubles from `persyn.testing.embedder` (`test:hash`).

Every kind registers its factory in one registry (`register_embedder`): the three above here;
any other (the test doubles are one) through the `persyn.embedders` entry points of its
package, loaded the first time a string names it, so this module never imports them.

SPEC §6 fail-soft: an encoder that cannot serve a request raises `EmbedderUnavailable`;
retrieval catches it, falls back to keyword search and says so (`RetrievalResult.degraded`).
Blocking work (model loading, inference) runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy
from pydantic import BaseModel, Field, ValidationError

from persyn.core.config import MemoryConfig
from persyn.core.errors import ConfigError, EmbedderUnavailable
from persyn.memory.minilm import MiniLMEmbedder

__all__ = [
    "DEFAULT_EMBEDDER",
    "ENTRY_POINT_GROUP",
    "Embedder",
    "EmbedderFactory",
    "EmbedderOptions",
    "EmbedderUnavailable",
    "MiniLMEmbedder",
    "OpenAICompatibleEmbedder",
    "SentenceReader",
    "SentenceTransformersEmbedder",
    "WordLlamaEmbedder",
    "build_embedder",
    "embedder_from_config",
    "normalise",
    "register_embedder",
]

log = logging.getLogger(__name__)

DEFAULT_EMBEDDER = "wordllama"
ENTRY_POINT_GROUP = "persyn.embedders"


@runtime_checkable
class Embedder(Protocol):
    """Texts in, unit-length vectors out, one per text, in order."""

    @property
    def name(self) -> str:
        """Model id stored with each vector, e.g. `wordllama:l2_supercat-256`."""
        ...

    @property
    def dims(self) -> int:
        """Vector length; 0 while a service has not yet told us."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch. Raises `EmbedderUnavailable` when the encoder cannot serve it."""
        ...


@runtime_checkable
class LocalEmbedder(Protocol):
    """An encoder whose weights live on this machine and load on first use (hundreds of
    milliseconds for WordLlama, seconds for a sentence-transformers model)."""

    def load(self) -> Any:
        """Load the weights (once; thread-safe). Blocking: call from a worker thread."""
        ...


@runtime_checkable
class SentenceReader(Protocol):
    """An encoder that reads word order and context (a transformer such as MiniLM). Recall
    embeds the whole question for it: dropping the stop words, which helps an encoder that
    averages token vectors (WordLlama), throws away the syntax this one reads ("was Sam
    under the weather" became "sam weather"; bench/locomo.py has the figures)."""

    @property
    def reads_sentences(self) -> bool: ...


async def warm_embedder(embedder: Embedder | None) -> bool:
    """Load a local encoder's weights now, so the first recall does not wait for them.
    A remote service is not called (a call may cost); nothing to warm returns False.
    Raises `EmbedderUnavailable` when the weights cannot be loaded."""
    if not isinstance(embedder, LocalEmbedder):
        return False
    await asyncio.to_thread(embedder.load)
    return True


def normalise(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to unit length. A zero (or non-finite) vector cannot be compared by
    cosine, so it is rejected rather than stored as NaNs."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise EmbedderUnavailable("the encoder returned a zero or non-finite vector")
    return [x / norm for x in vector]


# WordLlama ------------------------------------------------------------------------------------
_INLINE_CHARS = 4096  # a single text up to this long is embedded on the caller's thread


class WordLlamaEmbedder:
    """WordLlama (`l2_supercat`, 256-d): averaged token embeddings distilled from an LLM's
    embedding table. Fast on a laptop CPU (~30 µs a sentence), no torch, weights in the wheel.

    The package's own weight lookup looks in a user cache and may try Hugging Face; we point
    it at the weights shipped in the wheel and disable downloads, so a missing file is a
    clear `EmbedderUnavailable`, never a network call.
    """

    config_name = "l2_supercat"

    def __init__(self, dims: int = 256, batch_size: int = 256) -> None:
        # The wheel ships the 256-d weights; 64 and 128 are their Matryoshka truncations
        # (smaller index, faster search, a little less accurate).
        if dims not in (64, 128, 256):
            raise ConfigError(f"WordLlama dimensionality {dims!r} is not one of 64, 128, 256")
        self._dims = dims
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"wordllama:{self.config_name}-{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    def load(self) -> Any:
        """Load the model (once; thread-safe). Blocking: call from a worker thread."""
        with self._lock:
            if self._model is None:
                self._model = _load_wordllama(self.config_name, self._dims)
            return self._model

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        model = self.load()
        try:
            # Normalised here, not by WordLlama: its own division warns (and yields NaN)
            # for a text with no known token.
            matrix = model.embed(list(texts), norm=False, batch_size=self._batch_size)
        except Exception as exc:
            raise EmbedderUnavailable(f"WordLlama could not embed {len(texts)} text(s): {exc}") from exc
        vectors = numpy.asarray(matrix, dtype=numpy.float64)
        norms = numpy.linalg.norm(vectors, axis=1)
        rows: list[list[float]] = []
        for row, norm in zip(vectors, norms, strict=True):
            # A text with no known token embeds to zeros; give it a constant direction
            # instead, so it is stored and simply matches nothing well.
            ok = bool(numpy.isfinite(norm)) and float(norm) > 0.0
            rows.append((row / norm).tolist() if ok else _unit_fallback(self._dims))
        return rows

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._model is not None and len(texts) == 1 and len(texts[0]) <= _INLINE_CHARS:
            # A recall query embeds in ~0.1 ms once the model is loaded: less than handing
            # it to a worker thread and back on a busy process.
            return self.embed_sync(texts)
        return await asyncio.to_thread(self.embed_sync, texts)


def _load_wordllama(config_name: str, dims: int) -> Any:
    """The shipped 256-d weights, truncated to `dims`; never downloads."""
    try:
        wordllama = importlib.import_module("wordllama")
    except ImportError as exc:
        raise EmbedderUnavailable(
            "the default encoder needs the 'wordllama' package; reinstall persyn (it is a dependency)"
        ) from exc
    package_dir = Path(str(wordllama.__file__)).parent
    try:
        return wordllama.WordLlama.load(
            config=config_name,
            cache_dir=package_dir,
            dim=256,
            trunc_dim=dims if dims < 256 else None,
            disable_download=True,
        )
    except Exception as exc:  # FileNotFoundError for missing weights, anything from its loader
        raise EmbedderUnavailable(
            f"WordLlama weights {config_name!r} (256-d) could not be loaded from {package_dir} "
            f"(downloads are disabled): {exc}"
        ) from exc


def _unit_fallback(dims: int) -> list[float]:
    value = 1.0 / math.sqrt(dims)
    return [value] * dims


# OpenAI-compatible service --------------------------------------------------------------------
class OpenAICompatibleEmbedder:
    """A self-hosted `/v1/embeddings` service (text-embeddings-inference, llama.cpp server,
    vLLM, Ollama, LocalAI…). Every failure — refused connection, timeout, HTTP error, a
    reply of the wrong shape — is an `EmbedderUnavailable` naming the URL and the cause."""

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        dims: int = 0,
        api_key: str | None = None,
        timeout_seconds: float = 10.0,
        batch_size: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not model:
            raise ConfigError("an OpenAI-compatible embedder needs a model name: openai:MODEL@URL")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"embedding service URL {base_url!r} must start with http:// or https:// "
                "(e.g. 'openai:bge-small@http://127.0.0.1:8080/v1')"
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._dims = dims
        self._api_key = api_key
        self._timeout = httpx.Timeout(timeout_seconds, connect=min(timeout_seconds, 3.0))
        self._batch_size = max(1, batch_size)
        self._transport = transport

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def url(self) -> str:
        return f"{self.base_url}/embeddings"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        vectors: list[list[float]] = []
        # One client per call: a client binds to the event loop it first ran on, and an
        # embedder outlives loops (CLI commands, tests). Loopback connections are cheap.
        async with httpx.AsyncClient(
            timeout=self._timeout, transport=self._transport, headers=headers
        ) as client:
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                vectors.extend(await self._embed_batch(client, batch))
        return vectors

    async def _embed_batch(self, client: httpx.AsyncClient, batch: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        try:
            response = await client.post(self.url, json=payload)
        except httpx.TimeoutException as exc:
            raise EmbedderUnavailable(f"embedding service {self.url!r} timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise EmbedderUnavailable(f"embedding service {self.url!r} is unreachable: {exc!r}") from exc
        if response.status_code != 200:
            raise EmbedderUnavailable(
                f"embedding service {self.url!r} answered HTTP {response.status_code}: {response.text[:200]!r}"
            )
        vectors = _parse_embeddings(response, self.url, len(batch))
        dims = len(vectors[0])
        if self._dims and dims != self._dims:
            raise EmbedderUnavailable(
                f"embedding service {self.url!r} returned {dims}-d vectors for model {self.model!r}, "
                f"but {self._dims} dimensions are configured"
            )
        self._dims = dims
        return [normalise(v) for v in vectors]


class _EmbeddingItem(BaseModel):
    embedding: list[float] = Field(min_length=1)
    index: int | None = None


class _EmbeddingsReply(BaseModel):
    """The part of an OpenAI `/v1/embeddings` reply we use; extra fields are ignored."""

    data: list[_EmbeddingItem]


def _parse_embeddings(response: httpx.Response, url: str, expected: int) -> list[list[float]]:
    def bad(why: str) -> EmbedderUnavailable:
        return EmbedderUnavailable(f"embedding service {url!r} sent an unusable reply: {why}")

    try:
        reply = _EmbeddingsReply.model_validate_json(response.content)
    except ValidationError as exc:
        raise bad(f"{exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}") from exc
    if len(reply.data) != expected:
        raise bad(f"{len(reply.data)} embeddings for {expected} inputs")
    by_index = {
        item.index if item.index is not None else i: item.embedding for i, item in enumerate(reply.data)
    }
    if sorted(by_index) != list(range(expected)):
        raise bad("the 'index' fields do not cover the batch")
    vectors = [by_index[i] for i in range(expected)]
    if len({len(v) for v in vectors}) != 1:
        raise bad("vectors of different lengths in one batch")
    return vectors


# sentence-transformers (extra) -----------------------------------------------------------------
_ST_HINT = (
    "the 'sentence-transformers' encoder needs the optional extra: "
    "uv sync --extra sentence-transformers (or pip install 'persyn[sentence-transformers]')"
)


class SentenceTransformersEmbedder:
    """A sentence-transformers model from local files only (a name in the Hugging Face cache,
    or a directory): nothing is downloaded at run time — fetch the model once beforehand."""

    def __init__(self, model_name: str, *, batch_size: int = 64) -> None:
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise ConfigError(_ST_HINT) from exc
        if not model_name:
            raise ConfigError("sentence-transformers needs a model: sentence-transformers:NAME_OR_PATH")
        self._module: Any = module
        self.model_name = model_name
        self._batch_size = batch_size
        self._model: Any = None
        self._dims = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"sentence-transformers:{self.model_name}"

    @property
    def dims(self) -> int:
        return self._dims

    def load(self) -> Any:
        """Load the model (once; thread-safe). Blocking: call from a worker thread."""
        with self._lock:
            if self._model is None:
                try:
                    model = self._module.SentenceTransformer(self.model_name, local_files_only=True)
                except Exception as exc:
                    raise EmbedderUnavailable(
                        f"sentence-transformers model {self.model_name!r} is not available locally "
                        f"(downloads are disabled at run time): {exc}"
                    ) from exc
                self._dims = int(model.get_sentence_embedding_dimension() or 0)
                self._model = model
            return self._model

    def _embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        model = self.load()
        try:
            matrix = model.encode(list(texts), batch_size=self._batch_size, normalize_embeddings=True)
        except Exception as exc:
            raise EmbedderUnavailable(f"sentence-transformers could not embed: {exc}") from exc
        return [normalise(row) for row in matrix.tolist()]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_sync, texts)


# building from configuration -------------------------------------------------------------------
@dataclass(frozen=True)
class EmbedderOptions:
    """The `[memory]` settings that go with an embedder string."""

    spec: str
    dims: int = 0
    api_key: str | None = None
    timeout_seconds: float = 10.0


EmbedderFactory = Callable[[str, EmbedderOptions], Embedder]
"""`factory(rest, options)`: `rest` is what follows `KIND:` in the string (may be empty)."""

_factories: dict[str, EmbedderFactory] = {}
_plugins_loaded = False


def register_embedder(kind: str, factory: EmbedderFactory, *, replace: bool = False) -> None:
    """Make `KIND:...` embedder strings build with `factory` in this process."""
    if kind in _factories and not replace:
        raise ValueError(f"an embedder kind {kind!r} is already registered")
    _factories[kind] = factory


def build_embedder(
    spec: str, *, dims: int = 0, api_key: str | None = None, timeout_seconds: float = 10.0
) -> Embedder:
    """The embedder a `[memory] embedder` string names. Cheap: nothing is loaded or
    contacted here, so a service that is down shows up at the first `embed`, as a degraded
    retrieval rather than a failed start. A malformed string is a `ConfigError`."""
    kind, _, rest = spec.strip().partition(":")
    factory = _factories.get(kind)
    if factory is None:
        _load_plugins()
        factory = _factories.get(kind)
    if factory is None:
        raise ConfigError(
            f"unknown embedder {spec!r}; expected 'minilm', 'wordllama', 'openai:MODEL@URL', "
            f"'sentence-transformers:NAME' or 'test:hash' (registered kinds: {', '.join(sorted(_factories))})"
        )
    return factory(
        rest, EmbedderOptions(spec=spec, dims=dims, api_key=api_key, timeout_seconds=timeout_seconds)
    )


def _load_plugins() -> None:
    """Register every embedder kind a distribution declares (once per process)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _factories:
            continue
        try:
            factory: EmbedderFactory = point.load()
        except Exception:
            log.warning("embedder plugin %r (%s) failed to load", point.name, point.value, exc_info=True)
            continue
        _factories[point.name] = factory


def _wordllama(rest: str, options: EmbedderOptions) -> Embedder:
    if rest:
        raise ConfigError(f"embedder {options.spec!r}: 'wordllama' takes no model name")
    return WordLlamaEmbedder(options.dims or 256)


def _openai(rest: str, options: EmbedderOptions) -> Embedder:
    model, at, url = rest.partition("@")
    if not at or not model or not url:
        raise ConfigError(
            f"embedder {options.spec!r} must be 'openai:MODEL@URL', e.g. 'openai:bge-small@http://127.0.0.1:8080/v1'"
        )
    return OpenAICompatibleEmbedder(
        model, url, dims=options.dims, api_key=options.api_key, timeout_seconds=options.timeout_seconds
    )


def _sentence_transformers(rest: str, options: EmbedderOptions) -> Embedder:
    return SentenceTransformersEmbedder(rest)


def _minilm(rest: str, options: EmbedderOptions) -> Embedder:
    if rest not in ("", MiniLMEmbedder.model_id):
        raise ConfigError(f"embedder {options.spec!r}: 'minilm' ships one model, {MiniLMEmbedder.model_id!r}")
    if options.dims not in (0, MiniLMEmbedder.dims_of_model):
        raise ConfigError(
            f"embedder {options.spec!r} gives {MiniLMEmbedder.dims_of_model}-d vectors, not {options.dims}"
        )
    return MiniLMEmbedder()


register_embedder("wordllama", _wordllama)
register_embedder("openai", _openai)
register_embedder("sentence-transformers", _sentence_transformers)
register_embedder("minilm", _minilm)


def embedder_from_config(config: MemoryConfig, *, api_key: str | None = None) -> Embedder:
    """`build_embedder` with the `[memory]` settings that go with the string."""
    return build_embedder(
        config.embedder,
        dims=config.embedder_dims,
        api_key=api_key,
        timeout_seconds=config.embedder_timeout_seconds,
    )
