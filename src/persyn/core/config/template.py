"""The starter `persyn.toml` and the README's key reference, written from the config models.

Every key, its default and its comment come from the pydantic models of the configuration
(`Field(description=..., examples=...)`, section docstrings), so the file `persyn init`
writes cannot disagree with the code. Keys are written commented out with their default
(`#key = value`), as postgresql.conf does: a key the operator never set follows the defaults
of whichever version runs, instead of freezing the defaults of the version that wrote the
file. A key without a default (`respond`, `storage_url`, ...) is shown with an example
instead. Only `[models] default` is set, to `auto`, the choice most operators change first.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from persyn.core.config import AgentConfig, GuardrailConfig, McpServerConfig, Price, Settings

__all__ = ["ConfigKey", "config_keys", "readme_reference", "render_agent", "starter_toml"]

_WIDTH = 100
_SET_IN_STARTER = frozenset({("models", "default")})
_NOT_IN_FILE = frozenset({"home", "secrets", "agents", "prices", "image_prices"})
_PRICE_EXAMPLE = "anthropic:claude-sonnet-4-6"
_IMAGE_PRICE_EXAMPLE = '"gpt-image-1"'  # `[prices.images]`: dollars per image, by image model
_EXAMPLE = "  # (an example; unset by default)"
# Tables of tables (`[[mcp.servers]]`): their keys follow their parent section, commented out
# with the table header, since an empty `[[...]]` table would not validate.
_ARRAY_TABLES: dict[tuple[str, ...], type[BaseModel]] = {
    ("mcp", "servers"): McpServerConfig,
    ("guardrails",): GuardrailConfig,
}
# Keys whose example is another way of saying what an earlier key's example says: shown, but
# never set together with it (a server is a command or a url; the list is its tables).
_ALTERNATIVES: dict[str, str] = {
    "mcp.servers.url": "command",
    "mcp.servers": "the [[mcp.servers]] tables below",
    "guardrails": "the [[guardrails]] tables below",
}

_HEADER = """\
# Persyn deployment configuration, written by `persyn init`.
#
# Every key is shown with its default, commented out (`#key = value`): remove the `#` to
# set one. A key left commented follows the defaults of the version you run.
#
# Every setting can also be overridden by an environment variable PERSYN_SECTION__KEY, e.g.
# PERSYN_MODELS__RESPOND="anthropic:claude-sonnet-4-6" or
# PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES=10 (a misspelt one is an error naming it; a
# PERSYN_ variable that names no section is ignored with a warning). Secrets are never read
# from this file: set ANTHROPIC_API_KEY or OPENAI_API_KEY in the environment.
"""


@dataclass(frozen=True)
class ConfigKey:
    """One key of `persyn.toml`: where it is, what it means and what it is by default."""

    section: tuple[str, ...]  # () for the top level; ("memory", "weights") for [memory.weights]
    name: str
    description: str
    default: Any  # None: no default (then `example` is shown)
    example: Any = None

    @property
    def dotted(self) -> str:
        return ".".join((*self.section, self.name))


def config_keys() -> Iterator[ConfigKey]:
    """Every key of the file, in file order (agents and prices, which are tables of their
    own, come last)."""
    yield from _keys(Settings, ())
    yield from _keys(Price, ("prices", _PRICE_EXAMPLE))
    yield from _keys(AgentConfig, ("agents",))


def _keys(model: type[BaseModel], section: tuple[str, ...]) -> Iterator[ConfigKey]:
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        if not section and name in _NOT_IN_FILE:
            continue
        submodel = _submodel(info)
        if submodel is not None:
            nested.append((name, submodel))
            continue
        if (*section, name) in _ARRAY_TABLES:
            nested.append((name, _ARRAY_TABLES[(*section, name)]))
        if not info.description:
            raise ValueError(f"{model.__name__}.{name} has no description: the starter file needs one")
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        example = info.examples[0] if info.examples else None
        if default is None and example is None and name not in ("id", "name"):
            raise ValueError(f"{model.__name__}.{name} has neither a default nor an example to show")
        yield ConfigKey(section, name, _with_choices(info), default, example)
    for name, submodel in nested:
        yield from _keys(submodel, (*section, name))


def _submodel(info: FieldInfo) -> type[BaseModel] | None:
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _with_choices(info: FieldInfo) -> str:
    """The description, with a Literal's allowed values when it does not list them."""
    text = info.description or ""
    choices = _literal_choices(info.annotation)
    if choices and not all(choice in text for choice in choices):
        text = f"{text} One of: {' | '.join(choices)}."
    return text


def _literal_choices(annotation: Any) -> tuple[str, ...]:
    if get_origin(annotation) is Literal:
        return tuple(str(arg) for arg in get_args(annotation))
    if get_origin(annotation) is Union:
        return next((found for arg in get_args(annotation) if (found := _literal_choices(arg))), ())
    return ()


def toml_value(value: Any) -> str:
    """`value` as a TOML value (the subset the config models use)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        items = [f"{_toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"no TOML form for {value!r}")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _comment(text: str, indent: str = "") -> list[str]:
    return [
        f"{indent}# {line}"
        for line in textwrap.wrap(
            text, _WIDTH - len(indent) - 2, break_on_hyphens=False, break_long_words=False
        )
    ]


def _key_lines(key: ConfigKey) -> list[str]:
    lines = _comment(key.description)
    if key.dotted in _ALTERNATIVES:
        shown = key.example if key.default is None else key.default
        lines.append(f"#{key.name} = {toml_value(shown)}  # (instead of {_ALTERNATIVES[key.dotted]})")
    elif key.default is None:
        lines.append(f"#{key.name} = {toml_value(key.example)}{_EXAMPLE}")
    else:
        mark = "" if (*key.section, key.name) in _SET_IN_STARTER else "#"
        lines.append(f"{mark}{key.name} = {toml_value(key.default)}")
    return lines


def _section_doc(section: tuple[str, ...]) -> str:
    if section in _ARRAY_TABLES:
        return " ".join((_ARRAY_TABLES[section].__doc__ or "").split())
    model: type[BaseModel] = Settings
    for part in section:
        submodel = _submodel(model.model_fields[part])
        assert submodel is not None
        model = submodel
    return " ".join((model.__doc__ or "").split())


def starter_toml() -> str:
    """The whole starter file but its `[[agents]]` (`render_agent` writes those)."""
    lines = [_HEADER]
    current: tuple[str, ...] | None = ()
    for key in config_keys():
        if key.section and key.section[0] in ("prices", "agents"):
            break
        if key.section != current:
            current = key.section
            if current in _ARRAY_TABLES:
                lines += ["", f"#[[{'.'.join(current)}]]", *_comment(_section_doc(current))]
            else:
                lines += ["", f"[{'.'.join(current)}]", *_comment(_section_doc(current))]
        key_lines = _key_lines(key)
        if key.section in _ARRAY_TABLES:  # every line commented: an empty table would not validate
            key_lines = [line if line.startswith("#") else f"#{line}" for line in key_lines]
        lines += ["", *key_lines]
    lines += ["", *_prices_lines(), ""]
    return "\n".join(lines)


def _prices_lines() -> list[str]:
    described = Settings.model_fields["prices"].description or ""
    lines = [*_comment(f"{described} An example:"), f'#[prices."{_PRICE_EXAMPLE}"]']
    for key in _keys(Price, ("prices", _PRICE_EXAMPLE)):
        lines.append(f"#{key.name} = {toml_value(key.example)}  # {key.description}")
    images = Settings.model_fields["image_prices"].description or ""
    lines += ["", *_comment(images), "#[prices.images]", f"#{_IMAGE_PRICE_EXAMPLE} = 0.04"]
    return lines


def render_agent(agent: AgentConfig) -> str:
    """One `[[agents]]` table for `agent`, commented from `AgentConfig`'s fields."""
    lines = ["[[agents]]", *_comment(" ".join((AgentConfig.__doc__ or "").split()))]
    for key in _keys(AgentConfig, ("agents",)):
        value = getattr(agent, key.name)
        lines += _comment(key.description)
        if key.name == "models" and not value:
            lines.append(f"#models = {toml_value(key.example)}{_EXAMPLE}")
        else:
            lines.append(f"{key.name} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def readme_reference() -> str:
    """The README's table of every key (between its `config-reference` markers)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key in config_keys():
        section = key.section[:1] if key.section[:1] == ("prices",) else key.section
        where = f"[{'.'.join(section)}] " if section else ""
        if section == ("prices",):
            where = '[prices."MODEL"] '
        if section == ("agents",):
            where = "[[agents]] "
        if section in _ARRAY_TABLES:
            where = f"[[{'.'.join(section)}]] "
        shown = "—" if key.default is None else f"`{toml_value(key.default)}`"
        meaning = key.description.replace("|", "\\|")
        rows.append(f"| `{where}{key.name}` | {shown} | {meaning} |")
        if section == ("prices",) and key.name == "cache_write":
            images = (Settings.model_fields["image_prices"].description or "").replace("|", "\\|")
            rows.append(f'| `[prices.images] "MODEL"` | — | {images} |')
    return "\n".join(rows) + "\n"
