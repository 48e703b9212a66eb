"""`persyn init` writes a starter `persyn.toml` that cannot disagree with the code (issue 15,
item 5): it parses to exactly the defaults, every default it shows is the code's, every example
it shows is valid, and every key of the config models is in it with its comment."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from persyn_cli import Persyn
from pydantic import BaseModel

from persyn.core.config import AgentConfig, Price, Settings, parse_settings
from persyn.ops.init_home import DEFAULT_DISPOSITION

pytestmark = pytest.mark.e2e

_VALUE_LINE = re.compile(
    r"^#(?P<key>[a-z_]+) = (?P<value>.*?)(?P<example>  # \(an example; unset by default\))?$"
)


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, str]:
    runner = Persyn(home=tmp_path / "home")
    done = runner.run("init", "--name", "Ada")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "home" / "persyn.toml"
    return path, path.read_text(encoding="utf-8")


def _defaults(home: Path, agent_id: str) -> Settings:
    return Settings(home=home, agents=[AgentConfig(name="Ada", id=agent_id, disposition=DEFAULT_DISPOSITION)])


def _assert_equal_field_by_field(loaded: Settings, expected: Settings) -> None:
    for name in Settings.model_fields:
        assert getattr(loaded, name) == getattr(expected, name), f"{name} differs from the default"
    assert loaded == expected


def _uncommented(text: str, *, examples: bool) -> str:
    """The file with its `#key = value` lines set: the defaults shown, and with `examples` the
    examples shown for keys that have no default (and the commented `[prices."..."]` table)."""
    lines: list[str] = []
    in_commented_table = False
    for line in text.splitlines():
        if line.startswith("#["):
            in_commented_table = True
            lines.append(line[1:] if examples else line)
            continue
        if line.startswith("["):
            in_commented_table = False
        match = _VALUE_LINE.match(line)
        if match is not None:
            is_example = bool(match["example"]) or in_commented_table
            value = f"{match['key']} = {match['value'].split('  # ')[0]}"
            if match["key"] == "storage_url" or "  # (instead of " in line:
                # storage_url's example names a directory of another machine; an alternative
                # (an MCP server's url instead of its command) is never set beside the other
                lines.append(line)
            elif examples or not is_example:
                lines.append(value)
            else:
                lines.append(line)
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_the_file_persyn_init_writes_parses_to_exactly_the_defaults(written: tuple[Path, str]) -> None:
    path, text = written
    data = tomllib.loads(text)
    loaded = parse_settings(data, path.parent, environ={}, source=path)
    _assert_equal_field_by_field(loaded, _defaults(path.parent, loaded.agents[0].id))
    assert data["models"] == {"default": "auto"}, "only [models] default is set; the rest follow the code"


def test_every_default_the_file_shows_is_the_codes_default(written: tuple[Path, str]) -> None:
    path, text = written
    shown = _uncommented(text, examples=False)
    assert shown.count("\n#") < text.count("\n#"), "the test set some keys"
    loaded = parse_settings(tomllib.loads(shown), path.parent, environ={}, source=path)
    _assert_equal_field_by_field(loaded, _defaults(path.parent, loaded.agents[0].id))
    # and they were really set, not left to their defaults
    assert tomllib.loads(shown)["memory"]["weights"]["recency"] == Settings(home=path).memory.weights.recency
    assert tomllib.loads(shown)["autonomy"]["daily_token_budget"] == 200_000


def test_every_example_the_file_shows_is_valid(written: tuple[Path, str]) -> None:
    path, text = written
    data = tomllib.loads(_uncommented(text, examples=True))
    loaded = parse_settings(data, path.parent, environ={}, source=path)
    assert loaded.models.respond is not None and loaded.dispatch.executor_id is not None
    assert loaded.prices, "the price example is a valid [prices] table"


def _keys(model: type[BaseModel], section: str) -> list[tuple[str, str, str]]:
    """(section, key, description) of every leaf key under `model`, through its sub-sections."""
    found: list[tuple[str, str, str]] = []
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        if model is Settings and name in ("home", "secrets", "agents", "prices", "image_prices"):
            continue  # not file keys (home, secrets) or tables of their own (checked apart)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _keys(annotation, f"{section}.{name}".strip("."))
        else:
            found.append((section, name, info.description or ""))
    return found


def _sections(text: str) -> dict[tuple[str, str], list[int]]:
    """Where each (section, key) is set or shown: line numbers, by the table they are under."""
    where: dict[tuple[str, str], list[int]] = {}
    section = ""
    for index, line in enumerate(text.splitlines()):
        header = re.match(r"^#?\[\[?(?P<name>[^\]]+)\]", line)
        if header is not None:
            section = header["name"].split(".")[0] if header["name"].startswith("prices") else header["name"]
            continue
        key = re.match(r"^#?(?P<key>[a-z_]+) = ", line)
        if key is not None:
            where.setdefault((section, key["key"]), []).append(index)
    return where


def test_every_key_of_the_config_models_is_in_the_file_under_its_comment(written: tuple[Path, str]) -> None:
    _, text = written
    lines = text.splitlines()
    where = _sections(text)
    every = _keys(Settings, "") + _keys(Price, "prices") + _keys(AgentConfig, "agents")
    assert len(every) > 90
    assert "#[prices.images]" in lines  # image prices: a table of their own, with an example
    for section, key, description in every:
        assert description, f"[{section}] {key} has no description in core/config/"
        assert (section, key) in where, f"[{section}] {key} is not in the starter file"
        for index in where[section, key]:
            comment: list[str] = []
            for line in reversed(lines[:index]):
                if not line.startswith("# "):
                    break
                comment.insert(0, line.removeprefix("# "))
            inline = lines[index].partition("  # ")[2]
            shown = " ".join(" ".join(comment).split() + inline.split())
            assert " ".join(description.split()) in shown, (
                f"[{section}] {key}: its comment is not its description"
            )
