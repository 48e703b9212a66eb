"""Deployment configuration (ARCHITECTURE §8).

One `persyn.toml` per deployment, read once at start into pydantic models. `PERSYN_*`
environment variables override file settings (`PERSYN_MODELS__RESPOND=...` sets
`[models] respond`); secrets (API keys) come only from the environment. This is the only
module that reads `os.environ`.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from persyn.core.config.browse import BrowseConfig, ImagesConfig, ReferenceConfig, SkillsConfig
from persyn.core.config.live import LiveConfig
from persyn.core.config.mcp import McpConfig, McpServerConfig
from persyn.core.config.memory import (
    AutonomyConfig,
    DeliberationConfig,
    GraphConfig,
    MemoryConfig,
    RetrievalWeights,
    ToolsConfig,
)
from persyn.core.config.models import (
    AUTO_PROBE_DEFAULT,
    AgentConfig,
    ConversationConfig,
    DispatchConfig,
    MeteringConfig,
    ModelChoice,
    ModelsConfig,
    Price,
    Section,
    Task,
    model_chain,
)
from persyn.core.config.safety import EmotionConfig, GuardrailConfig, SafetyConfig
from persyn.core.config.sandbox import ArtifactsConfig, SandboxConfig
from persyn.core.config.tracing import TracingConfig
from persyn.core.config.web import WebConfig
from persyn.core.config_chat import (
    ChannelsConfig,
    IrcConfig,
    MatrixConfig,
    PacingConfig,
    PacingRules,
    TelegramConfig,
)
from persyn.core.errors import ConfigError
from persyn.core.urls import masked_url

__all__ = [
    "AUTO_PROBE_DEFAULT",
    "CONFIG_FILE",
    "DEFAULT_HOME",
    "AgentConfig",
    "ArtifactsConfig",
    "AutonomyConfig",
    "BrowseConfig",
    "ChannelsConfig",
    "ConversationConfig",
    "DeliberationConfig",
    "DispatchConfig",
    "EmotionConfig",
    "GraphConfig",
    "GuardrailConfig",
    "ImagesConfig",
    "IrcConfig",
    "LiveConfig",
    "MatrixConfig",
    "McpConfig",
    "McpServerConfig",
    "MemoryConfig",
    "MeteringConfig",
    "ModelChoice",
    "ModelsConfig",
    "PacingConfig",
    "PacingRules",
    "Price",
    "ReferenceConfig",
    "RetrievalWeights",
    "SafetyConfig",
    "SandboxConfig",
    "Secrets",
    "Settings",
    "SkillsConfig",
    "Task",
    "TelegramConfig",
    "ToolsConfig",
    "TracingConfig",
    "WebConfig",
    "browse_search_key",
    "home_from_env",
    "images_api_key",
    "load_settings",
    "mcp_headers",
    "model_chain",
    "parse_settings",
]

CONFIG_FILE = "persyn.toml"
DEFAULT_HOME = Path("~/.persyn")


class Secrets(BaseModel):
    """Secrets: only ever from the environment, never from the file."""

    model_config = ConfigDict(frozen=True)

    anthropic_api_key: SecretStr | None = None
    openai_api_key: SecretStr | None = None
    irc_password: SecretStr | None = None
    telegram_bot_token: SecretStr | None = None
    matrix_access_token: SecretStr | None = None
    matrix_password: SecretStr | None = None


class Settings(Section):
    home: Path
    storage_url: str | None = Field(
        default=None,
        description="Where agent data lives; unset = SQLite files under data/ beside persyn.toml. Its directory must exist.",
        examples=["sqlite:////absolute/path/persyn.db"],
    )
    agents: list[AgentConfig] = Field(default_factory=list[AgentConfig])
    models: ModelsConfig = ModelsConfig()
    prices: dict[str, Price] = Field(
        default_factory=dict[str, Price],
        description='US dollars per million tokens, per model string, e.g. [prices."anthropic:claude-sonnet-4-6"].',
    )
    # `[prices.images]` in the file (a table of its own inside `[prices]`, moved here when read:
    # `prices` maps model strings to token prices, and `images` is no model string).
    image_prices: dict[str, float] = Field(
        default_factory=dict[str, float],
        description=(
            'US dollars per image, as [prices.images] "MODEL" = 0.04 (any size) or "MODEL@SIZE" = 0.06 '
            "(that size first); an image model not listed is counted, not costed."
        ),
    )
    metering: MeteringConfig = MeteringConfig()
    conversation: ConversationConfig = ConversationConfig()
    dispatch: DispatchConfig = DispatchConfig()
    live: LiveConfig = LiveConfig()
    memory: MemoryConfig = MemoryConfig()
    deliberation: DeliberationConfig = DeliberationConfig()
    graph: GraphConfig = GraphConfig()
    autonomy: AutonomyConfig = AutonomyConfig()
    tools: ToolsConfig = ToolsConfig()
    mcp: McpConfig = McpConfig()
    sandbox: SandboxConfig = SandboxConfig()
    artifacts: ArtifactsConfig = ArtifactsConfig()
    browse: BrowseConfig = BrowseConfig()
    reference: ReferenceConfig = ReferenceConfig()
    images: ImagesConfig = ImagesConfig()
    skills: SkillsConfig = SkillsConfig()
    channels: ChannelsConfig = ChannelsConfig()
    pacing: PacingConfig = PacingConfig()
    web: WebConfig = WebConfig()
    tracing: TracingConfig = TracingConfig()
    safety: SafetyConfig = SafetyConfig()
    emotion: EmotionConfig = EmotionConfig()
    guardrails: list[GuardrailConfig] = Field(
        default_factory=list[GuardrailConfig],
        description="Guardrail patterns beyond (or replacing, by name) the built-in ones: one [[guardrails]] table each.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="warning", description="`debug` also keeps the tracebacks of logged failures."
    )
    secrets: Secrets = Secrets()

    @model_validator(mode="before")
    @classmethod
    def _image_prices_apart(cls, data: Any) -> Any:
        """`[prices.images]` is per-image prices, not a model string's token prices."""
        if not isinstance(data, dict):
            return data
        given = cast(dict[str, Any], data)
        prices: object = given.get("prices")
        if not isinstance(prices, dict) or "images" not in prices:
            return given
        rest = dict(cast(dict[str, Any], prices))
        return {**given, "prices": rest, "image_prices": rest.pop("images")}

    @field_validator("image_prices")
    @classmethod
    def _image_prices_not_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for model, price in value.items():
            if price < 0:
                raise ValueError(f"[prices.images] {model!r} = {price!r}: a price is not negative")
        return value

    @field_validator("guardrails")
    @classmethod
    def _unique_guardrails(cls, value: list[GuardrailConfig]) -> list[GuardrailConfig]:
        names = [g.name for g in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"guardrail names must be unique; repeated: {repeated!r}")
        return value

    @model_validator(mode="after")
    def _sandbox_cannot_write_the_deployment(self) -> Settings:
        if self.sandbox.writable_home(self.home):
            raise ValueError(
                f"[sandbox] host_dir {self.sandbox.host_dir!r} with host_dir_mode 'rw' holds this deployment "
                f"({str(self.home)!r}): code the model writes could rewrite its configuration and memories; "
                "map a directory outside it, or use host_dir_mode 'ro'"
            )
        return self

    @field_validator("storage_url")
    @classmethod
    def _storage_directory_exists(cls, value: str | None) -> str | None:
        # A mistyped directory would otherwise be created, holding a new empty database: the
        # agents would start over with no memories while the real ones sit elsewhere.
        if value is None:
            return None
        scheme, sep, rest = value.partition("://")
        if not sep or not scheme:
            raise ValueError(
                f"{masked_url(value)!r} is not a database URL, e.g. 'sqlite:////absolute/path/persyn.db' "
                "or 'postgresql://USER:PASSWORD@HOST:5432/DATABASE'"
            )
        if scheme.split("+")[0] != "sqlite":
            return value
        path = rest.removeprefix("/").split("?")[0]
        if path in ("", ":memory:"):
            return value
        parent = Path(path).expanduser().parent
        if not parent.is_dir():
            raise ValueError(
                f"the directory {str(parent)!r} of {value!r} does not exist; create it first "
                "(an existing database is never created anew)"
            )
        return value

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def database_url(self) -> str:
        return self.storage_url or f"sqlite:///{self.data_dir / 'persyn.db'}"

    @property
    def dbos_database_url(self) -> str:
        if self.storage_url and not self.storage_url.startswith("sqlite"):
            return self.storage_url
        return f"sqlite:///{self.data_dir / 'dbos.sqlite'}"

    @property
    def usage_log_path(self) -> Path:
        return self.home / "usage.jsonl"

    @property
    def traces_dir(self) -> Path:
        return self.data_dir / "traces"

    @property
    def logs_dir(self) -> Path:
        """Logs of the programs a deployment starts (each MCP server's stderr: `mcp-NAME.log`)."""
        return self.data_dir / "logs"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    def agent(self, name: str | None) -> AgentConfig:
        """The agent called `name` (case-insensitive), or the only one when `name` is None."""
        if not self.agents:
            raise ConfigError(
                f"no agents are configured in {self.home / CONFIG_FILE}; run `persyn init --name NAME`"
            )
        if name is None:
            if len(self.agents) > 1:
                names = ", ".join(a.name for a in self.agents)
                raise ConfigError(f"several agents are configured ({names}); choose one with --agent NAME")
            return self.agents[0]
        for agent in self.agents:
            if agent.name.lower() == name.lower() or agent.id == name.upper():
                return agent
        names = ", ".join(a.name for a in self.agents)
        raise ConfigError(f"no agent named {name!r}; configured agents: {names}")

    def model_for(self, agent: AgentConfig, task: Task) -> str:
        """The first model of `task`'s chain for `agent` (what most callers need to know)."""
        return self.models_for(agent, task)[0]

    def models_for(self, agent: AgentConfig, task: Task) -> tuple[str, ...]:
        """Every model `task` may run on for `agent`, in the order they are tried."""
        chosen = agent.models.get(task.value) or agent.models.get("default")
        return model_chain(chosen) if chosen else self.models.chain_for_task(task)


def home_from_env(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    raw = explicit if explicit is not None else env.get("PERSYN_HOME") or DEFAULT_HOME
    return Path(raw).expanduser().resolve()


_SECRET_ENV = {
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "openai_api_key": "OPENAI_API_KEY",
    "irc_password": "IRC_PASSWORD",
    "telegram_bot_token": "TELEGRAM_BOT_TOKEN",
    "matrix_access_token": "MATRIX_ACCESS_TOKEN",
    "matrix_password": "MATRIX_PASSWORD",
}
# `PERSYN_` variables that are not settings: read by `home_from_env` (and by nothing else).
NOT_SETTINGS_ENV = frozenset({"PERSYN_HOME"})
_ENV_PREFIX = "PERSYN_"
_NOT_FROM_ENV = {
    "agents": "agents are configured in persyn.toml, not in the environment",
    "secrets": "secrets have their own variables: set ANTHROPIC_API_KEY / OPENAI_API_KEY instead",
    "home": "the deployment directory is set by PERSYN_HOME (or --home) alone",
}

_log = logging.getLogger(__name__)


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """`PERSYN_A__B=value` → {"a": {"b": value}}, and where each override came from
    ({("a", "b"): "PERSYN_A__B"}) so that an error names the variable, not the file.
    Values are parsed as TOML scalars when they look like one (numbers, booleans), else kept
    as strings.

    A variable whose first part is no top-level setting (`PERSYN_FOO=1`) is ignored with a
    warning naming it: wrappers and scripts put their own `PERSYN_` variables beside ours.
    One that names a setting's section (`PERSYN_MODELS__RESPND`) is validated like the file,
    so a misspelt key or a bad value is an error naming the variable."""
    overrides: dict[str, Any] = {}
    origins: dict[tuple[str, ...], str] = {}
    for variable, raw in sorted(environ.items()):
        if not variable.startswith(_ENV_PREFIX) or variable in NOT_SETTINGS_ENV:
            continue
        path = tuple(variable.removeprefix(_ENV_PREFIX).lower().split("__"))
        refused = _NOT_FROM_ENV.get(path[0])
        if refused is not None:
            raise ConfigError(f"invalid configuration in the environment:\n  - {variable}: {refused}")
        if path[0] not in Settings.model_fields or any(not part for part in path):
            _log.warning(
                "ignoring environment variable %s: it names no setting (PERSYN_SECTION__KEY, e.g. "
                "PERSYN_MODELS__RESPOND)",
                variable,
            )
            continue
        node = overrides
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                clash = origins.get(path[: depth + 1], variable)
                raise ConfigError(f"invalid environment variables {clash} and {variable}: they overlap")
            node = cast(dict[str, Any], child)
        node[path[-1]] = _parse_scalar(raw)
        origins[path] = variable
    return overrides, origins


def _parse_scalar(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)  # type: ignore[arg-type]
        else:
            merged[key] = value
    return merged


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
    env = os.environ if environ is None else environ
    overrides, origins = _env_overrides(env)
    merged = _merge(dict(data), overrides)
    merged["home"] = home
    merged["secrets"] = {field: SecretStr(env[var]) for field, var in _SECRET_ENV.items() if env.get(var)}
    if "secrets" in data:
        raise ConfigError(
            f"invalid configuration in {source or home / CONFIG_FILE}: [secrets] is not allowed in the file; "
            "set ANTHROPIC_API_KEY / OPENAI_API_KEY in the environment instead"
        )
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source or home / CONFIG_FILE, origins)) from exc
    where = source or home / CONFIG_FILE
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


def load_settings(home: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `$PERSYN_HOME/persyn.toml` (a missing file means defaults and no agents)."""
    env = os.environ if environ is None else environ
    root = home_from_env(home, env)
    path = root / CONFIG_FILE
    data: dict[str, Any] = {}
    if path.exists():
        try:
            raw = path.read_bytes().decode("utf-8")
            data = tomllib.loads(raw)
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"invalid configuration in {path}: the file is not UTF-8 ({exc.reason})"
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"invalid configuration in {path}: not valid TOML: {exc}") from exc
    return parse_settings(data, root, env, path)


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
