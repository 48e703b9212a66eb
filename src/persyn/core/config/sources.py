"""Where a deployment's `Settings` come from: `persyn.toml` and the `PERSYN_*` environment, as
pydantic-settings sources (ARCHITECTURE §8). This is the only module that reads `os.environ`.

Precedence: the deployment directory and the API keys, then `PERSYN_SECTION__KEY` variables
(`PERSYN_MODELS__RESPOND=...` sets `[models] respond`), then the file. Secrets come only from
their own variables (`ANTHROPIC_API_KEY`, ...), never from the file or a `PERSYN_` variable.

An error names the key of the file or the variable that set it: the environment source keeps
where each value came from (`EnvironmentSource.origins`) for `_describe`.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    TomlConfigSettingsSource,
)

from persyn.core.config.settings import CONFIG_FILE, DEFAULT_HOME, Settings, channel_secret_variables
from persyn.core.errors import ConfigError
from persyn.core.urls import masked_url

__all__ = [
    "NOT_SETTINGS_ENV",
    "EnvironmentSource",
    "FileSource",
    "browse_search_key",
    "home_from_env",
    "images_api_key",
    "load_settings",
    "mcp_headers",
    "parse_settings",
]

# The model providers' keys; the chat networks' secrets are each network's to declare
# (`channel_secret_variables`).
_SECRET_ENV = {"anthropic_api_key": "ANTHROPIC_API_KEY", "openai_api_key": "OPENAI_API_KEY"}
# `PERSYN_` variables that are not settings: read by `home_from_env` (and by nothing else).
NOT_SETTINGS_ENV = frozenset({"PERSYN_HOME"})
_NOT_FROM_ENV = {
    "agents": "agents are configured in persyn.toml, not in the environment",
    "secrets": "secrets have their own variables: set ANTHROPIC_API_KEY / OPENAI_API_KEY instead",
    "home": "the deployment directory is set by PERSYN_HOME (or --home) alone",
}

_log = logging.getLogger(__name__)


def home_from_env(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    raw = explicit if explicit is not None else env.get("PERSYN_HOME") or DEFAULT_HOME
    return Path(raw).expanduser().resolve()


class EnvironmentSource(EnvSettingsSource):
    """`PERSYN_A__B=value` sets `[a] b`, nested by `__` (pydantic-settings' `env_nested_delimiter`).

    A value means what it would in the file: it is read as a TOML value when it is one (`5`,
    `true`, `["a", "b"]`, `{ x = 1 }`), else kept as the string it is. So `PERSYN_GRAPH__HOPS=true`
    is refused like `hops = true` would be, never read as 1.

    A variable whose first part is no top-level setting (`PERSYN_FOO=1`) is ignored with a
    warning naming it: wrappers and scripts put their own `PERSYN_` variables beside ours. One
    that names a section (`PERSYN_MODELS__RESPND`) is validated like the file, so a misspelt key
    or a bad value is an error naming the variable (`origins` maps each setting's path to it).

    Two hooks of `EnvSettingsSource` are replaced: `_load_env_vars` (the variables come from the
    mapping given, not `os.environ`, and are sorted out here) and `_coerce_env_val_strict` (its
    strict-mode coercion by the field's type would turn `true` into 1). Should pydantic-settings
    rename either, tests/security/test_config_validation.py fails on the variable's name or on
    `true` accepted as a number.
    """

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.origins: dict[tuple[str, ...], str] = {}
        super().__init__(settings_cls, case_sensitive=False)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        prefix = str(self.settings_cls.model_config.get("env_prefix"))
        delimiter = str(self.settings_cls.model_config.get("env_nested_delimiter"))
        chosen: dict[str, str | None] = {}
        for variable, raw in sorted(self._environ.items()):
            if not variable.startswith(prefix) or variable in NOT_SETTINGS_ENV:
                continue
            path = tuple(variable.removeprefix(prefix).lower().split(delimiter))
            refused = _NOT_FROM_ENV.get(path[0])
            if refused is not None:
                raise ConfigError(f"invalid configuration in the environment:\n  - {variable}: {refused}")
            if path[0] not in self.settings_cls.model_fields or any(not part for part in path):
                _log.warning(
                    "ignoring environment variable %s: it names no setting (PERSYN_SECTION__KEY, e.g. "
                    "PERSYN_MODELS__RESPOND)",
                    variable,
                )
                continue
            clash = next(
                (
                    earlier
                    for known, earlier in self.origins.items()
                    if path[: len(known)] == known
                    and not isinstance(_toml_value(self._environ[earlier]), dict)
                ),
                None,
            )
            if clash is not None:
                # `PERSYN_MODELS=x` beside `PERSYN_MODELS__RESPOND`: neither may silently win (a
                # table, `PERSYN_MODELS='{ ... }'`, is merged with the keys set beside it).
                raise ConfigError(f"invalid environment variables {clash} and {variable}: they overlap")
            self.origins[path] = variable
            chosen[variable.lower()] = raw
        return chosen

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        return _toml_value(value)

    def _coerce_env_val_strict(self, field: FieldInfo | None, value: Any) -> Any:
        return _toml_value(value) if isinstance(value, str) else value


def _toml_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


class FileSource(TomlConfigSettingsSource):
    """`persyn.toml` (a missing file means defaults and no agents), with errors that name it."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        super().__init__(settings_cls, toml_file=path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        path = Path(str(file_path))
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"invalid configuration in {path}: the file is not UTF-8 ({exc.reason})"
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"invalid configuration in {path}: not valid TOML: {exc}") from exc
        _no_secrets(data, path)
        return data


def _no_secrets(data: Mapping[str, Any], where: Path) -> None:
    if "secrets" in data:
        raise ConfigError(
            f"invalid configuration in {where}: [secrets] is not allowed in the file; "
            "set ANTHROPIC_API_KEY / OPENAI_API_KEY in the environment instead"
        )


# Values a configuration error shows only through a mask: they may carry a password.
_MASKED_INPUTS: dict[tuple[str, ...], Callable[[str], str]] = {
    ("live", "redis_url"): masked_url,
    ("storage_url",): masked_url,
}


def _describe(error: ValidationError, source: Path, origins: Mapping[tuple[str, ...], str]) -> str:
    lines: list[str] = []
    from_file = from_env = False
    for issue in error.errors():
        loc = tuple(str(p) for p in issue["loc"])
        key = ".".join(loc)
        variable = next((origins[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origins), None)
        if variable is None and issue["type"] == "extra_forbidden":
            # An unknown key under a section the environment set: the variable is the culprit.
            variable = next((v for path, v in origins.items() if path[: len(loc)] == loc), None)
        message = issue["msg"]
        if variable is None and issue["type"] == "value_error":
            # A check across keys (thresholds, embedder and its size): name the variables
            # that set any of them, as the file may not be where the fault is.
            involved = sorted(v for path, v in origins.items() if path[: len(loc)] == loc)
            if involved:
                from_env = True
                message = f"{message} (set in the environment: {', '.join(involved)})"
        ctx = issue.get("ctx") or {}
        if "expected" in ctx and str(ctx["expected"]) not in message:
            message = f"{message} (allowed: {ctx['expected']})"
        if issue["type"] == "extra_forbidden":
            message = "unknown key"
        value = issue.get("input")
        if isinstance(value, bool) and issue["type"] in ("int_type", "float_type"):
            message = f"{message} (a boolean is not a number)"
        if loc in _MASKED_INPUTS and isinstance(value, str):
            value = _MASKED_INPUTS[loc](value)
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        if variable is not None:
            from_env = True
            lines.append(f"  - {variable} ({key}): {message}{shown}")
        else:
            from_file = True
            lines.append(f"  - {key}: {message}{shown}")
    where = " and ".join(w for w, used in ((str(source), from_file), ("the environment", from_env)) if used)
    return "\n".join([f"invalid configuration in {where}:", *lines])


def parse_settings(
    data: Mapping[str, Any], home: Path, environ: Mapping[str, str] | None = None, source: Path | None = None
) -> Settings:
    """`Settings` from a file's parsed contents `data` (its path `source`, for errors) and the
    environment."""
    where = source or home / CONFIG_FILE
    _no_secrets(data, where)
    return _settings(InitSettingsSource(Settings, dict(data)), home, environ, where)


def load_settings(home: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `$PERSYN_HOME/persyn.toml` (a missing file means defaults and no agents)."""
    root = home_from_env(home, environ)
    path = root / CONFIG_FILE
    return _settings(FileSource(Settings, path), root, environ, path)


def _settings(
    file: PydanticBaseSettingsSource, home: Path, environ: Mapping[str, str] | None, where: Path
) -> Settings:
    env = os.environ if environ is None else environ
    environment = EnvironmentSource(Settings, env)
    api_keys = {field: SecretStr(env[var]) for field, var in _SECRET_ENV.items() if env.get(var)}
    networks = {name: SecretStr(env[var]) for name, var in channel_secret_variables().items() if env.get(var)}
    fixed = InitSettingsSource(Settings, {"home": home, "secrets": {**api_keys, "channels": networks}})
    try:
        # `_build_sources` is BaseSettings.__init__'s own parameter, which the type checker's view
        # of the model (its fields) does not show.
        built: dict[str, Any] = {"_build_sources": ((fixed, environment, file), {})}
        settings = Settings(**built)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, where, environment.origins)) from exc
    for key, values in (
        ("name", [a.name.lower() for a in settings.agents]),
        ("id", [a.id for a in settings.agents]),
    ):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            # Two agents with one id would share every memory (rows are namespaced by id).
            raise ConfigError(
                f"invalid configuration in {where}: agents.{key}: {repeated[0]!r} is used by more "
                f"than one agent; each agent needs its own {key}"
            )
    return settings


def mcp_headers(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Each `[[mcp.servers]]` entry's HTTP headers with their values read from the environment
    variables the file names (a variable that is unset sends no header: the server's refusal
    then says what is missing)."""
    env = os.environ if environ is None else environ
    return {
        server.name: {header: env[variable] for header, variable in server.headers.items() if variable in env}
        for server in settings.mcp.servers
    }


def browse_search_key(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """The web search API's key, from the variable `[browse] search_key_env` names (None when
    it is unset: a provider that needs one then says so)."""
    env = os.environ if environ is None else environ
    return env.get(settings.browse.search_key_env) or None


def images_api_key(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """The images API's key, from the variable `[images] key_env` names (None when unset: no
    Authorization header is sent, as a local server needs none)."""
    env = os.environ if environ is None else environ
    return env.get(settings.images.key_env) or None
