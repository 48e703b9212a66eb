"""`persyn init`: write a commented starter `persyn.toml`, or add an agent to one."""

from __future__ import annotations

import contextlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.items import Table

from persyn.core.config import CONFIG_FILE, AgentConfig
from persyn.core.errors import ConfigError, InputError
from persyn.core.ids import new_id

__all__ = ["DEFAULT_DISPOSITION", "InitResult", "init_home"]

DEFAULT_DISPOSITION = (
    "Curious, candid and warm. I value being consistent with myself over being agreeable, "
    "I say so when I think someone is wrong, and I am honest about what I do not remember."
)

_HEADER = """\
# Persyn deployment configuration.
#
# Every setting here can be overridden by an environment variable: PERSYN_SECTION__KEY,
# e.g. PERSYN_MODELS__RESPOND="anthropic:claude-sonnet-4-5" or
# PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES=10 (a misspelt one is an error naming it; a
# PERSYN_ variable that names no section is ignored with a warning). Secrets are never read
# from this file: set ANTHROPIC_API_KEY or OPENAI_API_KEY in the environment.

# Where agent data lives. Default: SQLite files under data/ beside this file.
# storage_url = "sqlite:////absolute/path/persyn.db"   # its directory must exist

log_level = "warning"  # debug | info | warning | error

[models]
# Which model serves each task. "auto" uses a hosted model when ANTHROPIC_API_KEY or
# OPENAI_API_KEY is set, and otherwise the small offline model on this machine.
# Forms: "anthropic:NAME", "openai:NAME", "openai:NAME@http://127.0.0.1:11434/v1"
# (any OpenAI-compatible server: Ollama, vLLM, llama.cpp), "local:" (llama.cpp
# in this process's host, Gemma 3 270M by default) or "local:/path/model.gguf",
# and "test:echo" (deterministic doubles for tests).
default = "auto"
# respond = "anthropic:claude-sonnet-4-5"   # the voice of the agent
# critique = "anthropic:claude-sonnet-4-5"  # counter-perspective evaluation
# decide = "anthropic:claude-haiku-4-5"     # the decision to speak (fast, cheap)
# summarize = "anthropic:claude-haiku-4-5"  # memory consolidation
# A list is a fallback chain: the next model is tried when one fails after its retries.
# respond = ["anthropic:claude-sonnet-4-5", "openai:llama3@http://127.0.0.1:11434/v1"]
# context_window = 0        # tokens; 0 = the model's known window
# request_timeout_seconds = 120
# max_retries = 3           # on 429 / 5xx / timeouts, with backoff
# max_output_tokens = 2048  # bound on every reply
# local_max_output_tokens = 160  # the offline model is slow: keep its replies short
# max_concurrent_requests = 0    # per agent and model at once; 0 = no limit

# [prices."anthropic:claude-sonnet-4-5"]  # US dollars per million tokens
# input = 3.0
# output = 15.0
# cache_read = 0.3
# cache_write = 3.75

[metering]
event_log = true          # usage.jsonl beside this file: the exact ledger (`persyn usage`)
prometheus_port = 0       # >0 serves counters on 127.0.0.1:PORT/metrics

[conversation]
idle_timeout_minutes = 30      # an idle conversation closes (and is consolidated)
recent_dialog_messages = 20    # how much recent dialog each prompt carries
max_message_chars = 32000      # longer inbound messages are rejected
extract_every_messages = 8     # observations + knowledge graph every N new messages (0: at close only)

[dispatch]
queue_polling_seconds = 0.25   # how often workers look for events other processes enqueued (this one wakes them at once)
marker_ttl_seconds = 3600      # how long completion markers live
housekeeping_seconds = 60      # closing idle conversations, consolidation sweep, culling
outbox_poll_seconds = 1.0      # how soon a message sent elsewhere shows in a connected channel
outbox_keep_days = 30          # messages for a channel never connected are dropped after this
# executor_id = "worker-1"     # DBOS executor id; give each worker sharing one database its own

[memory]
# The encoder: "wordllama" (in-process, offline, 256-d), "openai:MODEL@http://host:port/v1"
# (a self-hosted /v1/embeddings service) or "sentence-transformers:NAME" (extra).
# After changing it, run `persyn memory reindex`.
embedder = "wordllama"
# embedder_dims = 0            # 0 = the encoder's own size; WordLlama also takes 64 or 128
budget_fraction = 0.7          # share of the respond model's context window for memories
half_life_days = 30            # recency decay of a memory's weight in the relevance score
strong_threshold = 0.6         # score bands shown to the agent: strong / moderate / weak
moderate_threshold = 0.35      # at most strong_threshold
# default_sensitivity = { terminal = "private" }  # per service: public | private | confidential | restricted
# Channels listed together share memory; by default each channel is its own compartment.
# channel_groups = [["terminal:terminal", "cli:cli"]]
cull_below_importance = 3      # culling deletes memories rated below this...
cull_after_days = 14           # ...and older than this; important ones stay forever
# [memory.weights]             # the relevance function (a weighted mean, normalised to 0..1)
# similarity = 1.0
# keyword = 1.0
# recency = 0.15
# participants = 0.15
# importance = 0.1

[deliberation]
# Before it speaks the agent critiques its own substantive replies: a provenance check
# (claims about the past against what it actually recalled) plus one lens drawn at random.
enabled = true
# "auto": deferred on interactive channels (the fast reply is sent at once; the critique
# lands in the agent's next turn), inline elsewhere (the refined reply is what is sent).
mode = "auto"
# channels = { terminal = "inline" }   # per-service override: inline | deferred
# lenses = ["adversarial", "predictive", "constrained", "hopes", "fears"]
substantive_min_words = 12     # shorter replies are critiqued only if they touch the past
offline_model = false          # critique with the tiny offline model too (slow, and mostly noise)

[autonomy]
# The heartbeat: every beat the agent reviews its recent memories and goals, then acts or
# rests. `persyn heartbeat delete` puts it to sleep (durably); `restore` wakes it.
heartbeat_minutes = 60
daily_token_budget = 200000    # self-initiated runs stop for the day after this many tokens
max_runs_per_hour = 12         # loop breaker for reminders that fire too often
channel_reply_tokens = 100000  # replies per channel per 24 hours (tokens); then it gets none

[graph]
# The knowledge graph: entities and relations extracted after each conversation closes,
# shown as context when an input names an entity; same compartment rules as memories.
enabled = true
hops = 2                       # how far from a mentioned entity the context reaches
max_relations = 30             # at most this many relations in a prompt
max_path_hops = 4              # shortest paths between mentioned entities, up to this long
"""


@dataclass(frozen=True)
class InitResult:
    path: Path
    agent: AgentConfig
    created_file: bool


def _agent_table(agent: AgentConfig) -> Table:
    table = tomlkit.table()
    table.add(tomlkit.comment("The seed persona: the agent's day-zero voice. Memory soon augments it."))
    table.add("name", agent.name)
    table.add("id", agent.id)
    table["id"].comment("ULID: the agent's identity; never change it once it has memories")
    table.add("disposition", agent.disposition)
    table.add("objectives", tomlkit.array())
    table["objectives"].comment('what it cares about, e.g. ["learn what my operator is building"]')
    table.add("rules", tomlkit.array())
    table["rules"].comment('standing rules as conditionals, e.g. ["if asked for secrets, then decline"]')
    return table


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` all at once: a full disk or a crash mid-write leaves the old
    file as it was, never a truncated one (which would lose every agent's id)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if path.exists():
            os.chmod(temporary, path.stat().st_mode)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc


def init_home(home: Path, name: str | None) -> InitResult:
    """Create `home/persyn.toml` with one agent, or add an agent to an existing file."""
    agent_name = (name or "Persyn").strip()
    if not agent_name or len(agent_name) > 64:
        raise InputError(f"invalid agent name {name!r}: use 1 to 64 characters")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the deployment directory {str(home)!r}: {exc.strerror or exc}"
        ) from exc
    path = home / CONFIG_FILE
    agent = AgentConfig(name=agent_name, id=new_id(), disposition=DEFAULT_DISPOSITION)

    if path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {str(path)!r}: {exc}") from exc
        try:
            existing = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"invalid configuration in {path}: not valid TOML: {exc}") from exc
        names = [str(a.get("name", "")).lower() for a in existing.get("agents", [])]
        if agent_name.lower() in names:
            raise InputError(f"an agent named {agent_name!r} already exists in {path}")
        document = tomlkit.parse(text)
        agents = document.get("agents")
        if agents is None:
            agents = tomlkit.aot()
            document.append("agents", agents)
        agents.append(_agent_table(agent))
        _write_atomically(path, tomlkit.dumps(document))
        return InitResult(path=path, agent=agent, created_file=False)

    document = tomlkit.parse(_HEADER)
    agents = tomlkit.aot()
    agents.append(_agent_table(agent))
    document.append("agents", agents)
    _write_atomically(path, tomlkit.dumps(document))
    return InitResult(path=path, agent=agent, created_file=True)
