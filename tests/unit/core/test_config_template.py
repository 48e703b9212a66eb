"""The README's key reference is written from the config models, like the starter file
(`core/config/template.py`), so it cannot disagree with the code."""

from __future__ import annotations

import os
import re
from pathlib import Path

from persyn.core.config import AgentConfig, Settings
from persyn.core.config.template import config_keys, readme_reference, render_agent, starter_toml, toml_value
from persyn.core.ids import new_id

README = Path(__file__).resolve().parents[3] / "README.md"
_SECTION = re.compile(
    r"(<!-- config-reference:start[^\n]*-->\n)(.*?)(<!-- config-reference:end -->)", re.DOTALL
)


def test_the_readme_reference_is_the_one_the_config_models_write() -> None:
    text = README.read_text(encoding="utf-8")
    match = _SECTION.search(text)
    assert match is not None, "README.md has no config-reference markers"
    expected = readme_reference()
    if os.environ.get("PERSYN_WRITE_DOCS") == "1":
        README.write_text(text[: match.start(2)] + expected + text[match.end(2) :], encoding="utf-8")
        return
    assert match.group(2) == expected, (
        "README.md's key reference is stale: PERSYN_WRITE_DOCS=1 pytest tests/unit/core/test_config_template.py"
    )


def test_every_key_is_in_the_readme_with_its_default() -> None:
    text = README.read_text(encoding="utf-8")
    for key in config_keys():
        assert f"{key.name}` |" in text, f"{key.dotted} is not in README.md"
        if key.default is not None:
            assert f"{key.name}` | `{toml_value(key.default)}` |" in text, f"{key.dotted}'s default is not"


def test_the_values_shown_are_toml_that_reads_back() -> None:
    import tomllib

    for key in config_keys():
        for value in (key.default, key.example):
            if value is not None:
                assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value, key.dotted


def test_the_starter_file_and_an_agent_table_are_one_valid_toml_document() -> None:
    import tomllib

    agent = AgentConfig(name='Ann "the" Tester', id=new_id(), rules=["if asked, then say\nso"])
    data = tomllib.loads(starter_toml() + "\n" + render_agent(agent))
    assert Settings.model_validate({**data, "home": Path("/tmp")}).agents == [agent]
