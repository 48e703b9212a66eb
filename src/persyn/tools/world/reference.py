"""Offline reference (SPEC §4.6): `lookup_reference` over ZIM archives (the Kiwix format:
Wikipedia, Wiktionary, Stack Exchange... as single files), read with PyPI `libzim`.

A lookup searches every configured archive by title (the archive's suggestion index: the
right article for a name) and by full text (its Xapian index, when it has one), lists the
matches and returns the best one's text — a title match first — as plain text cut at
`[reference] max_chars`. Asked for one `path`, it returns that article. libzim is blocking and
its archives are memory-mapped: each lookup opens them in a worker thread. An archive that is
missing or unreadable is named in the answer and the others are still searched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import ToolError
from persyn.tools.registry import Tool

__all__ = ["ReferenceHit", "ReferenceLibrary", "reference_tools"]


class ReferenceHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    archive: str  # the archive's file name
    path: str
    title: str


class ReferenceInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=300, description="A topic, name or question.")
    path: str | None = Field(default=None, max_length=1000, description="Read this article from the results.")
    archive: str | None = Field(default=None, max_length=300, description="The archive of `path`.")


class ReferenceOutput(BaseModel):
    results: list[ReferenceHit]
    title: str = ""
    text: str = ""  # the best match's (or the asked article's) text
    truncated: bool = False
    unavailable: list[str] = Field(default_factory=list[str])


class ReferenceLibrary:
    """The configured archives, searched synchronously (call from a thread)."""

    def __init__(self, archives: Sequence[Path], *, max_results: int, max_chars: int) -> None:
        self.archives = tuple(archives)
        self.max_results = max_results
        self.max_chars = max_chars

    def lookup(self, query: str, path: str | None = None, archive: str | None = None) -> ReferenceOutput:
        from libzim.reader import Archive  # the native library loads on first use

        opened: list[tuple[str, Any]] = []
        unavailable: list[str] = []
        for file in self.archives:
            try:
                opened.append((file.name, Archive(file)))
            except (RuntimeError, OSError) as exc:
                unavailable.append(f"{file.name}: {exc}")
        if path is not None:
            for name, zim in opened:
                if archive in (None, name) and zim.has_entry_by_path(path):
                    title, text, cut = self._article(zim, path)
                    hit = ReferenceHit(archive=name, path=path, title=title)
                    return ReferenceOutput(results=[hit], title=title, text=text, truncated=cut)
            raise ToolError(f"no article {path!r} in {archive or 'the reference archives'}")
        hits: list[tuple[Any, ReferenceHit]] = []
        for name, zim in opened:
            for found in self._search(zim, query):
                if all(h.archive != name or h.path != found for _, h in hits):
                    entry = zim.get_entry_by_path(found)
                    hits.append((zim, ReferenceHit(archive=name, path=found, title=entry.title)))
        hits = hits[: self.max_results]
        if not hits:
            return ReferenceOutput(results=[], unavailable=unavailable)
        zim, best = hits[0]
        title, text, cut = self._article(zim, best.path)
        return ReferenceOutput(
            results=[h for _, h in hits], title=title, text=text, truncated=cut, unavailable=unavailable
        )

    def _search(self, zim: Any, query: str) -> list[str]:
        from libzim.search import Query, Searcher
        from libzim.suggestion import SuggestionSearcher

        paths: list[str] = []
        if zim.has_title_index:
            suggestion = SuggestionSearcher(zim).suggest(query)
            paths += list(suggestion.getResults(0, self.max_results))
        if zim.has_fulltext_index:
            search = Searcher(zim).search(Query().set_query(query))
            paths += list(search.getResults(0, self.max_results))
        return list(dict.fromkeys(paths))

    def _article(self, zim: Any, path: str) -> tuple[str, str, bool]:
        entry = zim.get_entry_by_path(path)
        item = entry.get_item()
        raw = bytes(item.content).decode("utf-8", errors="replace")
        text = _html_text(raw) if "html" in item.mimetype else raw
        text = text.strip()
        return entry.title, text[: self.max_chars], len(text) > self.max_chars


def _html_text(html: str) -> str:
    import trafilatura

    return trafilatura.html2txt(html) or ""


def reference_tools(library: ReferenceLibrary | None) -> list[Tool[Any, Any]]:
    """`lookup_reference` when archives are configured."""
    if library is None or not library.archives:
        return []

    async def lookup(args: ReferenceInput) -> ReferenceOutput:
        return await asyncio.to_thread(library.lookup, args.query, args.path, args.archive)

    return [
        Tool(
            name="lookup_reference",
            description=(
                "Look a topic up in the offline reference library (encyclopedia-style articles): "
                "returns matching titles and the best article's text."
            ),
            input_model=ReferenceInput,
            output_model=ReferenceOutput,
            handler=lookup,
        )
    ]
