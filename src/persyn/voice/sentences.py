"""Streamed text as speakable pieces: the fast model's tokens go in, sentences come out as soon as
they end, so the first is synthesized while the rest is still being written. The very first piece
may be a clause (ended by a comma, colon or semicolon, `first_clause_words` long or more): a short
first piece is heard sooner (first-clause TTS). `speakable` drops what must never be read aloud —
stage directions in asterisks or brackets, markup — since on a call whatever the model emits is
spoken verbatim (SPEC Appendix A)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["SentenceSplitter", "speakable"]

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:]\s")
_DIRECTION = re.compile(r"\*[^*]*\*|\([^)]*\)|\[[^\]]*\]")
_MARKUP = re.compile(r"[*_`#>~|]+")


def speakable(text: str) -> str:
    """What of `text` is said: stage directions (`*smiles*`, `(pauses)`, `[laughs]`) and markup
    removed, whitespace folded."""
    text = _DIRECTION.sub(" ", text)
    text = _MARKUP.sub(" ", text)
    return " ".join(text.split())


@dataclass
class SentenceSplitter:
    first_clause_words: int = 4
    _pending: str = ""
    _emitted: int = 0
    _parts: list[str] = field(default_factory=lambda: [])

    def push(self, delta: str) -> list[str]:
        """The pieces `delta` completed, in order (each already `speakable`, none empty). A
        boundary inside an unclosed `(`, `[` or `*` is no boundary: a stage direction is dropped
        whole, never half read out."""
        self._pending += delta
        out: list[str] = []
        while True:
            end = self._boundary()
            if end is None:
                break
            piece, self._pending = self._pending[:end], self._pending[end:]
            said = speakable(piece)
            if said and any(ch.isalnum() for ch in said):
                out.append(said)
                self._emitted += 1
        return out

    def _boundary(self) -> int | None:
        ends = [m.end() for m in _SENTENCE_END.finditer(self._pending)]
        if self._emitted == 0:
            ends += [
                m.end()
                for m in _CLAUSE_END.finditer(self._pending)
                if len(self._pending[: m.end()].split()) >= self.first_clause_words
            ]
        for end in sorted(ends):
            if _closed(self._pending[:end]):
                return end
        return None

    def flush(self) -> list[str]:
        """The rest, when the text is complete."""
        said = speakable(self._pending)
        self._pending = ""
        if said and any(ch.isalnum() for ch in said):
            self._emitted += 1
            return [said]
        return []


def _closed(text: str) -> bool:
    return (
        text.count("(") <= text.count(")") and text.count("[") <= text.count("]") and text.count("*") % 2 == 0
    )
