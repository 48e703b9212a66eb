"""Deployment configuration (ARCHITECTURE §8): one `persyn.toml` per deployment, read once at
start into frozen pydantic models, with `PERSYN_SECTION__KEY` environment variables over it.

One module per section (`models.py` is `[models]`, `memory.py` is `[memory]`, ...) over the strict
`Section` base (`core/section.py`); a chat network's `[channels.NAME]` section is in its own folder
(`channels/NAME/config.py`), found by entry point (`chat.py`); `settings.py` composes them into
`Settings`; `sources.py` reads the file and the environment (pydantic-settings sources);
`template.py` writes the starter file and the README's key reference from the models'
descriptions. Callers import from here.
"""

from persyn.core.config.agents import AgentConfig
from persyn.core.config.autonomy import AutonomyConfig
from persyn.core.config.browse import BrowseConfig, ReferenceConfig
from persyn.core.config.chat import ChannelsConfig, PacingConfig, PacingRules
from persyn.core.config.conversation import ConversationConfig
from persyn.core.config.deliberation import DeliberationConfig
from persyn.core.config.dispatch import DispatchConfig
from persyn.core.config.emotion import EmotionConfig
from persyn.core.config.images import ImagesConfig
from persyn.core.config.live import LiveConfig
from persyn.core.config.mcp import McpConfig, McpServerConfig
from persyn.core.config.memory import GraphConfig, MemoryConfig, RetrievalWeights
from persyn.core.config.metering import MeteringConfig, Price
from persyn.core.config.models import AUTO_PROBE_DEFAULT, ModelChoice, ModelsConfig, Task, model_chain
from persyn.core.config.safety import GuardrailConfig, SafetyConfig
from persyn.core.config.sandbox import ArtifactsConfig, SandboxConfig
from persyn.core.config.senses import SensesConfig, TwilioVoiceConfig, VoiceConfig
from persyn.core.config.settings import CONFIG_FILE, DEFAULT_HOME, Secrets, Settings
from persyn.core.config.skills import SkillsConfig
from persyn.core.config.sources import (
    browse_search_key,
    home_from_env,
    images_api_key,
    load_settings,
    mcp_headers,
    parse_settings,
)
from persyn.core.config.tools import ToolsConfig
from persyn.core.config.tracing import TracingConfig
from persyn.core.config.web import WebConfig

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
    "LiveConfig",
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
    "SensesConfig",
    "Settings",
    "SkillsConfig",
    "Task",
    "ToolsConfig",
    "TracingConfig",
    "TwilioVoiceConfig",
    "VoiceConfig",
    "WebConfig",
    "browse_search_key",
    "home_from_env",
    "images_api_key",
    "load_settings",
    "mcp_headers",
    "model_chain",
    "parse_settings",
]
