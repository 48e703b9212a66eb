"""`Settings`: the whole configuration of a deployment (ARCHITECTURE §8), one section per module
of this package, composed here.

A `Settings` built in code holds what it is given; `load_settings` (`core/config/sources.py`)
builds one from `persyn.toml` and the `PERSYN_*` environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from persyn.core.config.agents import AgentConfig
from persyn.core.config.autonomy import AutonomyConfig
from persyn.core.config.browse import BrowseConfig, ReferenceConfig
from persyn.core.config.chat import ChannelsConfig, PacingConfig, channels_model
from persyn.core.config.conversation import ConversationConfig
from persyn.core.config.deliberation import DeliberationConfig
from persyn.core.config.dispatch import DispatchConfig
from persyn.core.config.emotion import EmotionConfig
from persyn.core.config.images import ImagesConfig
from persyn.core.config.live import LiveConfig
from persyn.core.config.mcp import McpConfig
from persyn.core.config.memory import GraphConfig, MemoryConfig
from persyn.core.config.metering import MeteringConfig, Price
from persyn.core.config.models import ModelsConfig, Task, model_chain
from persyn.core.config.safety import GuardrailConfig, SafetyConfig
from persyn.core.config.sandbox import ArtifactsConfig, SandboxConfig
from persyn.core.config.senses import SensesConfig, VoiceConfig
from persyn.core.config.skills import SkillsConfig
from persyn.core.config.tools import ToolsConfig
from persyn.core.config.tracing import TracingConfig
from persyn.core.config.web import WebConfig
from persyn.core.errors import ConfigError
from persyn.core.urls import masked_url

__all__ = ["CONFIG_FILE", "DEFAULT_HOME", "Secrets", "Settings", "channel_secret_variables"]

CONFIG_FILE = "persyn.toml"
DEFAULT_HOME = Path("~/.persyn")


# `[channels]`: a section for each chat network declared under `persyn.channel_settings`
# (`core/config/chat.py`), built once, when the configuration is imported. The type checker sees
# the base, whose `section(IrcConfig)` gives each network its own section, typed.
if TYPE_CHECKING:
    _Channels = ChannelsConfig
else:
    _Channels = channels_model()
_CHANNEL_SECRETS = _Channels.secret_variables()


def channel_secret_variables() -> dict[str, str]:
    """The chat networks' secrets (`Secrets.channel`): each one's name and its environment variable."""
    return dict(_CHANNEL_SECRETS)


class Secrets(BaseModel):
    """Secrets: only ever from the environment, never from the file. The model providers' API
    keys, and the secrets each chat network's section declares (`ChannelSection.secrets`)."""

    model_config = ConfigDict(frozen=True)

    anthropic_api_key: SecretStr | None = None
    openai_api_key: SecretStr | None = None
    # By the name a network's section gives it (`irc_password`); those set only.
    channels: dict[str, SecretStr] = Field(default_factory=dict[str, SecretStr])

    @field_validator("channels")
    @classmethod
    def _declared(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        unknown = sorted(set(value) - set(_CHANNEL_SECRETS))
        if unknown:
            raise ValueError(f"no chat network declares the secrets {unknown!r}")
        return value

    def channel(self, name: str) -> SecretStr | None:
        """The chat network's secret `name` (`"irc_password"`); None when its variable is unset."""
        if name not in _CHANNEL_SECRETS:
            raise LookupError(f"no chat network declares the secret {name!r}")
        return self.channels.get(name)


class Settings(BaseSettings):
    # `Section`'s strictness, and the names `sources.py` reads: `PERSYN_SECTION__KEY`. The file's
    # keys are matched exactly (`[Models]` is no section); the environment source matches
    # variable names without case itself.
    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        validate_default=False,
        case_sensitive=True,
        env_prefix="PERSYN_",
        env_nested_delimiter="__",
    )

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
    senses: SensesConfig = SensesConfig()
    voice: VoiceConfig = VoiceConfig()
    skills: SkillsConfig = SkillsConfig()
    channels: _Channels = _Channels()
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

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # `Settings(home=...)` in code and tests reads neither the file nor the environment:
        # `load_settings` passes its sources explicitly.
        return (init_settings,)

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
        chosen = agent.models.get(task.value)
        if chosen is None and task is Task.CAPTION and self.models.caption is None:
            return self.models_for(agent, Task.RESPOND)  # the voice that answers is the one that looks
        if chosen is None and task is Task.VOICE and self.models.voice is None and "decide" in agent.models:
            return self.models_for(agent, Task.DECIDE)  # a live call's fast model is the fast one
        chosen = chosen or agent.models.get("default")
        return model_chain(chosen) if chosen else self.models.chain_for_task(task)
