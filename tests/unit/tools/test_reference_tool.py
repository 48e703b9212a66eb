"""`lookup_reference` over a real ZIM archive, written here with libzim's own `Creator` (with a
full-text index), through the agent's real registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from libzim.writer import (  # pyright: ignore[reportMissingModuleSource]
    Creator,
    Hint,
    Item,
    StringProvider,
)

from persyn.core.clock import SystemClock
from persyn.ops.tools import call_tool, list_tools
from persyn.testing import ADA
from persyn.testing.harness import harness_settings
from persyn.tools.registry import ToolOutcome, ToolStatus

ARTICLES = {
    "Barn_owl": (
        "Barn owl",
        "<html><body><h1>Barn owl</h1><p>The barn owl hunts small mammals at night, locating "
        "prey by sound.</p></body></html>",
    ),
    "Tawny_owl": (
        "Tawny owl",
        "<html><body><h1>Tawny owl</h1><p>The tawny owl nests in tree holes across Europe.</p>"
        + "<p>Its call is a familiar hoot in woodland. </p>" * 400
        + "</body></html>",
    ),
    "Kestrel": (
        "Kestrel",
        "<html><body><h1>Kestrel</h1><p>A falcon that hovers over fields, hunting voles.</p></body></html>",
    ),
}


class _Article(Item):  # pyright: ignore[reportUntypedBaseClass]
    def __init__(self, path: str, title: str, html: str) -> None:
        super().__init__()
        self.path, self.title, self.html = path, title, html

    def get_path(self) -> str:
        return self.path

    def get_title(self) -> str:
        return self.title

    def get_mimetype(self) -> str:
        return "text/html"

    def get_contentprovider(self) -> Any:
        return StringProvider(self.html)

    def get_hints(self) -> dict[Any, int]:
        return {Hint.FRONT_ARTICLE: True}


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zim") / "birds.zim"
    with Creator(path).config_indexing(True, "eng") as creator:
        creator.set_mainpath("Barn_owl")
        for key, (title, html) in ARTICLES.items():
            creator.add_item(_Article(key, title, html))
        for name, value in {"Title": "Birds", "Language": "eng", "Creator": "tests"}.items():
            creator.add_metadata(name, value)
    return path


def _config(archive: Path, extra: str = "") -> str:
    return f'[reference]\narchives = ["{archive}"]\nmax_chars = 2000\n{extra}'


async def _lookup(tmp_path: Path, config: str, args: dict[str, Any]) -> ToolOutcome:
    settings = harness_settings(tmp_path / "home", config=config)
    return await call_tool(settings, ADA, SystemClock(), "lookup_reference", args)


async def test_no_archives_no_tool(tmp_path: Path) -> None:
    names = {t.name for t in (await list_tools(harness_settings(tmp_path), ADA, SystemClock())).tools}
    assert "lookup_reference" not in names


async def test_a_title_finds_its_article(tmp_path: Path, archive: Path) -> None:
    outcome = await _lookup(tmp_path, _config(archive), {"query": "Kestrel"})
    assert outcome.ok, outcome.content
    data = json.loads(outcome.content)
    assert data["results"][0] == {"archive": "birds.zim", "path": "Kestrel", "title": "Kestrel"}
    assert "hovers over fields" in data["text"] and "<p>" not in data["text"]


async def test_full_text_finds_an_article_by_its_words(tmp_path: Path, archive: Path) -> None:
    outcome = await _lookup(tmp_path, _config(archive), {"query": "tree holes"})
    assert outcome.ok, outcome.content
    data = json.loads(outcome.content)
    assert [r["path"] for r in data["results"]] == ["Tawny_owl"]
    assert data["title"] == "Tawny owl"
    assert len(data["text"]) == 2000 and data["truncated"] is True  # bounded


async def test_an_article_is_read_by_path_and_a_wrong_path_is_an_error(tmp_path: Path, archive: Path) -> None:
    outcome = await _lookup(tmp_path, _config(archive), {"query": "owl", "path": "Barn_owl"})
    assert outcome.ok and "locating prey by sound" in json.loads(outcome.content)["text"]
    outcome = await _lookup(tmp_path, _config(archive), {"query": "owl", "path": "Dodo"})
    assert outcome.status is ToolStatus.FAILED and "no article 'Dodo'" in outcome.content


async def test_a_missing_archive_is_named_and_the_others_still_answer(tmp_path: Path, archive: Path) -> None:
    config = f'[reference]\narchives = ["{tmp_path / "gone.zim"}", "{archive}"]\n'
    outcome = await _lookup(tmp_path, config, {"query": "Kestrel"})
    assert outcome.ok, outcome.content
    data = json.loads(outcome.content)
    assert data["results"][0]["path"] == "Kestrel"
    assert len(data["unavailable"]) == 1 and data["unavailable"][0].startswith("gone.zim")
