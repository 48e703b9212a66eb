"""Deterministic embedders for tests, registered through the real embedder registry as
`test:NAME` (the `test` entry of the `persyn.embedders` entry points, pyproject.toml), so
configuration, the CLI and the runtime use them unchanged:

- `test:hash` — `HashEmbedder`: a hashed bag of word stems in 64 dimensions. Texts that
  share content words are closer than texts that share none; no model, no randomness.
- `test:unavailable` — `UnavailableEmbedder`: every call fails like a dead embedding
  service, to exercise keyword-only degradation.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

from persyn.core.errors import ConfigError
from persyn.memory._query import content_terms
from persyn.memory.embedder import Embedder, EmbedderOptions, EmbedderUnavailable

__all__ = ["TEST_EMBEDDERS", "HashEmbedder", "UnavailableEmbedder", "build_test_embedder"]


class HashEmbedder:
    """Each content-word stem adds ±1 to one of `dims` buckets (both chosen by a hash of the
    stem); the sum is normalised. Shared stems pull vectors together, so "I hiked the ridge"
    is closer to "hiking on the ridge" than to "tax forms"."""

    def __init__(self, dims: int = 64) -> None:
        self._dims = dims
        self.calls = 0  # embed calls made, for tests that care about batching

    @property
    def name(self) -> str:
        return f"test:hash-{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    def vector(self, text: str) -> list[float]:
        buckets = [0.0] * self._dims
        for term in content_terms(text):
            digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "big") % self._dims
            buckets[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(math.fsum(x * x for x in buckets))
        if norm == 0.0:  # no content words: a fixed direction that matches nothing well
            return [1.0 / math.sqrt(self._dims)] * self._dims
        return [x / norm for x in buckets]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [self.vector(t) for t in texts]


class UnavailableEmbedder:
    """An encoder whose service is down: every `embed` raises `EmbedderUnavailable`."""

    def __init__(self, dims: int = 64) -> None:
        self._dims = dims

    @property
    def name(self) -> str:
        return "test:unavailable"

    @property
    def dims(self) -> int:
        return self._dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise EmbedderUnavailable("test:unavailable: the embedding service is down (by design)")


TEST_EMBEDDERS: dict[str, Callable[[], Embedder]] = {"hash": HashEmbedder, "unavailable": UnavailableEmbedder}


def build_test_embedder(name: str, options: EmbedderOptions) -> Embedder:
    """The `test` kind's factory: `test:hash`, `test:unavailable`."""
    factory = TEST_EMBEDDERS.get(name)
    if factory is None:
        known = ", ".join(f"test:{n}" for n in sorted(TEST_EMBEDDERS))
        raise ConfigError(f"unknown test embedder {options.spec!r}; known: {known}")
    return factory()
