"""`persyn doctor`: check what a deployment needs and say how to fix what is missing."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import typer

from persyn.core.config import CONFIG_FILE, Settings, Task, home_from_env, load_settings
from persyn.core.errors import PersynError, StoreError
from persyn.gateway.auto import AutoChoice, resolve_auto
from persyn.gateway.local import LOCAL_EXTRA_HINT, local_available
from persyn.gateway.registry import ModelSpec, parse_model_string
from persyn.ops.doctor.channels import channel_checks, channel_owner_check
from persyn.ops.doctor.live import live_checks
from persyn.ops.doctor.postgres import Check, is_postgres, postgres_checks, shown_url
from persyn.ops.doctor.reach import reach_checks
from persyn.store import Store, open_store
from persyn.store.capabilities import (
    capability,
    command_capability,
    missing_capabilities,
    offered_capabilities,
)
from persyn.store.ports.directory import ContactsPort
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.jobs import ConsolidationStatus, JobsPort
from persyn.tracing import read_losses

__all__ = [
    "Check",
    "check_capabilities",
    "check_consolidation",
    "check_guardrails",
    "collect_checks",
    "preflight",
    "run_doctor",
    "sqlite_problem",
]


async def _check_database(settings: Settings) -> Check:
    for name, path, fix in _database_files(settings):
        if name == "database":
            problem = await asyncio.to_thread(sqlite_problem, path, thorough=True)
            if problem is not None:
                return Check(name, False, f"{path}: {problem}", fix)
    try:
        store = open_store(settings.database_url)
        try:
            await store.setup()
            version = await store.schema_version()
            directory = capability(store, ContactsPort)
            agents = None if directory is None else len(await directory.list_agents())
        finally:
            await store.close()
    except Exception as exc:
        return Check(
            "database",
            False,
            f"{shown_url(settings.database_url)}: {exc}",
            "check storage_url and file permissions",
        )
    seen = "" if agents is None else f", {agents} agent(s) seen"
    return Check("database", True, f"{shown_url(settings.database_url)} (schema v{version}{seen})")


def check_capabilities(store: Store) -> Check:
    """The optional capabilities `store` offers and lacks (`store/capabilities.py`). A store
    without one still runs turns with that part off (SPEC §2 fail soft): a note, not a failure."""
    name = "store capabilities"
    offered, missing = offered_capabilities(store), missing_capabilities(store)
    if not missing:
        return Check(name, True, f"all offered: {', '.join(offered)}")
    return Check(
        name,
        True,
        f"missing: {', '.join(missing)}; offered: {', '.join(offered) or 'none'}",
        "the agent runs without what is missing; the SQLite and PostgreSQL backends offer every one",
        warning=True,
    )


async def _check_capabilities(settings: Settings) -> Check:
    try:
        store = open_store(settings.database_url)
        try:
            return check_capabilities(store)
        finally:
            await store.close()
    except Exception as exc:
        return Check("store capabilities", True, f"unreadable: {exc}", "check the database", warning=True)


def _sqlite_file(url: str) -> Path | None:
    scheme, _, rest = url.partition(":///")
    if scheme.split("+")[0] != "sqlite" or not rest or rest.startswith(":memory:"):
        return None
    return Path(rest.split("?")[0])


def sqlite_problem(path: Path, *, thorough: bool = False) -> str | None:
    """What is wrong with the SQLite file at `path`, or None when it reads (or does not exist
    yet: it is created at the first start). `thorough` runs `PRAGMA quick_check`, which reads
    every page (doctor); without it only the schema is read (every start)."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return None
    if not path.is_file():
        return "it is not a file"
    try:
        connection = sqlite3.connect(path, timeout=5)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if thorough:
                rows = connection.execute("PRAGMA quick_check").fetchall()
                problems = [str(r[0]) for r in rows if r[0] != "ok"]
                if problems:
                    return "damaged: " + "; ".join(problems[:3])
        finally:
            connection.close()
    except sqlite3.Error as exc:
        return str(exc)
    return None


def _move_aside_fix(path: Path, what: str) -> str:
    return f"move it aside (mv {path} {path}.broken); a new one is made at the next start. {what}"


_SYSTEM_DB_LOSS = "Messages and memories (persyn.db) are kept; activations queued in it are lost."
_STORE_DB_FIX = "restore it from a backup, or move it aside to start this deployment with no memories"


def _database_files(settings: Settings) -> list[tuple[str, Path, str]]:
    files: list[tuple[str, Path, str]] = []
    store = _sqlite_file(settings.database_url)
    if store is not None:
        files.append(("database", store, _STORE_DB_FIX))
    system = _sqlite_file(settings.dbos_database_url)
    if system is not None:
        files.append(("workflow database", system, _move_aside_fix(system, _SYSTEM_DB_LOSS)))
    return files


def preflight(settings: Settings) -> None:
    """Refuse to start on a database file that is not one (garbage, or a directory), before
    anything writes to it: a clean error with the fix, instead of a failure deep in DBOS."""
    for name, path, fix in _database_files(settings):
        problem = sqlite_problem(path)
        if problem is not None:
            raise StoreError(f"the {name} {str(path)!r} is unreadable ({problem}): {fix}")


async def _check_system_database(settings: Settings) -> Check | None:
    for name, path, fix in _database_files(settings):
        if name != "workflow database":
            continue
        problem = await asyncio.to_thread(sqlite_problem, path, thorough=True)
        if problem is not None:
            return Check(name, False, f"{path}: {problem}", fix)
        state = "not created yet" if not path.exists() else "readable"
        return Check(name, True, f"{path} ({state})")
    return None


_GRAPH_FAILURE_FLAG = "degraded:graph"  # cognition/context.py GRAPH_FAILURE_FLAG


async def _check_graph(settings: Settings) -> Check:
    """The knowledge graph is optional: disabled, or failing lately, is a note, not a failure."""
    if not settings.graph.enabled:
        return Check("knowledge graph", True, "disabled ([graph] enabled = false)", warning=True)
    try:
        store = open_store(settings.database_url)
        try:
            await store.setup()
            graph = capability(store, GraphPort)
            if graph is None:
                return Check(
                    "knowledge graph",
                    True,
                    "this store offers no knowledge graph: the capability is absent",
                    warning=True,
                )
            lines: list[str] = []
            for agent in settings.agents:
                counts = await graph.graph_stats(agent.id)
                raw = await store.get_flag(agent.id, _GRAPH_FAILURE_FLAG)
                failure = ""
                if raw:
                    try:
                        data = json.loads(raw)
                        failure = f"; last failure {data.get('at', '?')}: {data.get('error', raw)}"
                    except ValueError:
                        failure = f"; last failure: {raw}"
                lines.append(
                    f"{agent.name}: {counts['entities']} entities, {counts['relations']} relations{failure}"
                )
        finally:
            await store.close()
    except Exception as exc:
        return Check("knowledge graph", True, f"unreadable: {exc}", "check the database", warning=True)
    detail = "; ".join(lines) or "no agents"
    failing = "last failure" in detail
    return Check(
        "knowledge graph",
        True,
        detail,
        "see the log of `persyn run`; turns still complete without the graph" if failing else "",
        warning=failing,
    )


_FAILING_SHOWN = 1000


async def check_consolidation(settings: Settings) -> Check:
    """Conversations whose consolidation keeps failing (a model error): they are retried with
    backoff until it succeeds, their dialog kept meanwhile; a note, not a failure."""
    name = "consolidation"
    try:
        store = open_store(settings.database_url)
        try:
            await store.setup()
            jobs = command_capability(store, JobsPort)
            failing = await jobs.consolidations(ConsolidationStatus.FAILED, limit=_FAILING_SHOWN)
        finally:
            await store.close()
    except Exception as exc:
        return Check(name, True, f"unreadable: {exc}", "check the database", warning=True)
    if not failing:
        return Check(name, True, "no conversation is waiting for a retry")
    latest = max(failing, key=lambda state: state.updated_at)
    due = min(state.next_attempt_at for state in failing if state.next_attempt_at is not None)
    count = f"{len(failing)}{'+' if len(failing) >= _FAILING_SHOWN else ''}"
    detail = (
        f"{count} conversation(s) failing to consolidate; last error ({latest.updated_at.isoformat()}, "
        f"attempt {latest.attempts}): {latest.last_error}; next attempt {due.isoformat()}"
    )
    fix = (
        "see the log of `persyn run`; `persyn run` retries them until the model answers (the dialog is kept)"
    )
    return Check(name, True, detail, fix, warning=True)


async def _check_model(settings: Settings, spec: ModelSpec, tasks: list[str]) -> Check:
    label = f"model {spec.provider}:{spec.name}" + (f"@{spec.base_url}" if spec.base_url else "")
    used_for = f" for {', '.join(tasks)}"
    if spec.provider == "test":
        return Check(label, True, "deterministic test double" + used_for, warning=True)
    if spec.provider == "local":
        if not local_available():
            return Check(label, False, "llama.cpp is not installed" + used_for, LOCAL_EXTRA_HINT)
        if not spec.bundled:
            return Check(label, True, "llama.cpp installed" + used_for)
        return Check(
            label,
            True,
            "llama.cpp installed; the tiny offline model will answer" + used_for,
            "set ANTHROPIC_API_KEY or OPENAI_API_KEY (or [models] in persyn.toml) for a real model",
            warning=True,
        )
    if spec.base_url:
        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                response = await client.get(f"{spec.base_url.rstrip('/')}/models")
            if response.status_code >= 400:
                return Check(
                    label,
                    False,
                    f"server answered HTTP {response.status_code}{used_for}",
                    "check the server and URL",
                )
        except httpx.HTTPError as exc:
            return Check(
                label, False, f"unreachable{used_for}: {exc!s}", f"start the server at {spec.base_url}"
            )
        return Check(label, True, "server answers" + used_for)
    key = "ANTHROPIC_API_KEY" if spec.provider == "anthropic" else "OPENAI_API_KEY"
    present = (
        settings.secrets.anthropic_api_key
        if spec.provider == "anthropic"
        else settings.secrets.openai_api_key
    )
    if present is None:
        return Check(label, False, f"{key} is not set{used_for}", f"export {key}=... in the environment")
    return Check(label, True, f"{key} is set" + used_for)


async def _check_web(settings: Settings) -> Check:
    """The web channel `persyn run` serves: where, and whether any key can use it."""
    from persyn.core.config.web import is_loopback_host
    from persyn.ops.web_keys import list_keys

    web = settings.web
    where = f"http://{web.host}:{web.port}/"
    try:
        active = [k for k in await list_keys(settings) if k.revoked_at is None]
    except PersynError as exc:
        return Check("web channel", False, f"keys unreadable: {exc}", "check the database")
    create = "create one: `persyn web keys create --name NAME`"
    if not active and not is_loopback_host(web.host):
        return Check("web channel", False, f"{where} is not loopback and no key exists", create)
    if not active:
        return Check(
            "web channel", True, f"{where}, but no key: every request is refused", create, warning=True
        )
    operators = sum(k.operator for k in active)
    if operators and "*" in web.cors_origins:
        return Check(
            "web channel",
            False,
            f"{where}: [web] cors_origins allows '*' (any site) and {operators} operator key(s) exist: a page "
            "on any site could use an operator key from a visitor's browser to read every conversation",
            "list only the origins that need the API in [web] cors_origins, or revoke the operator keys "
            "(`persyn web keys revoke KEY`)",
        )
    return Check("web channel", True, f"{where}, {len(active)} key(s), {operators} operator")


async def check_guardrails(settings: Settings, now: datetime) -> Check:
    """The guardrail blocks in force (SPEC §4.10): each silences replies to a person or
    channel until it ends, so the operator should know of every one."""
    from persyn.ops.guardrails import active_blocks, guardrail_patterns

    name = "guardrails"
    patterns = guardrail_patterns(settings)
    if not patterns:
        return Check(name, True, "none in force ([safety] enabled = false, or no patterns)", warning=True)
    try:
        blocks = await active_blocks(settings, now)
    except PersynError as exc:
        return Check(name, True, f"unreadable: {exc}", "check the database", warning=True)
    if not blocks:
        return Check(name, True, f"{len(patterns)} pattern(s); no active block")
    shown = "; ".join(
        f"{b.guardrail} blocks {b.subject_kind} {b.subject or 'the agent'} until {b.blocked_until:%Y-%m-%d %H:%M} UTC"
        for b in blocks[:5]
    )
    more = f" (and {len(blocks) - 5} more)" if len(blocks) > 5 else ""
    return Check(
        name,
        True,
        f"{len(blocks)} active block(s): {shown}{more}",
        "see `persyn guardrails events`; `persyn guardrails lift EVENT_ID` ends one now",
        warning=True,
    )


async def collect_checks(home: Path | None) -> list[Check]:
    root = home_from_env(home)
    checks: list[Check] = []
    try:
        settings = load_settings(root)
    except PersynError as exc:
        fix = (
            "correct or unset the PERSYN_ variable named above"
            if "in the environment" in str(exc)
            else f"edit {root / CONFIG_FILE}"
        )
        return [Check("configuration", False, str(exc), fix)]
    if not (root / CONFIG_FILE).exists():
        return [
            Check(
                "configuration",
                False,
                f"{root / CONFIG_FILE} does not exist",
                "run `persyn init --name NAME`",
            )
        ]
    names = ", ".join(a.name for a in settings.agents) or "none"
    checks.append(
        Check(
            "configuration",
            bool(settings.agents),
            f"{root / CONFIG_FILE}: agents {names}",
            "" if settings.agents else "run `persyn init --name NAME`",
        )
    )
    server = await postgres_checks(settings.database_url) if is_postgres(settings.database_url) else []
    checks.extend(server)
    checks.extend(await live_checks(settings))
    if all(check.ok for check in server):  # a server that fails has said why: no store to open
        database = await _check_database(settings)
        checks.append(database)
        system = await _check_system_database(settings)
        if system is not None:
            checks.append(system)
        if database.ok:  # the graph lives in that database: nothing more to say when it is broken
            checks.append(await _check_capabilities(settings))
            checks.append(await _check_graph(settings))
            checks.append(await check_consolidation(settings))
            checks.append(await check_guardrails(settings, datetime.now(UTC)))
            owners = await channel_owner_check(settings, datetime.now(UTC))
            if owners is not None:
                checks.append(owners)
            if settings.web.enabled:
                checks.append(await _check_web(settings))
    if settings.tracing.enabled:
        checks.append(await check_tracing(settings))
    settings, auto = await asyncio.to_thread(resolve_auto, settings)
    if auto is not None:
        checks.append(_check_auto(auto))
    by_model: dict[ModelSpec, list[str]] = {}
    for agent in settings.agents:
        for task in Task:
            # Every link of a fallback chain may serve the task: each is checked.
            chain = settings.models_for(agent, task)
            for link, raw in enumerate(chain, 1):
                used = f"{agent.name}/{task.value}" + (
                    f" (link {link} of {len(chain)})" if len(chain) > 1 else ""
                )
                try:
                    spec = parse_model_string(raw, settings.secrets, task)
                except PersynError as exc:
                    checks.append(Check(f"model for {used}", False, str(exc), "fix [models]"))
                    continue
                by_model.setdefault(spec, []).append(used)
    results = await asyncio.gather(*(_check_model(settings, spec, tasks) for spec, tasks in by_model.items()))
    checks.extend(results)
    checks.extend(await _check_mcp(settings))
    checks.extend(await channel_checks(settings))
    if settings.sandbox.enabled:
        checks.append(await _check_sandbox(settings))
    checks.extend(await reach_checks(settings))
    return checks


async def _check_sandbox(settings: Settings) -> Check:
    """Which provider isolates `run_code`, or why none does (then the tool is not offered:
    there is no host fallback; the agent answers without it)."""
    from persyn.tools.sandbox.isolation import detect_provider

    detected = await detect_provider(settings.sandbox, settings.data_dir / "sandbox")
    if detected.provider is not None:
        return Check(
            "sandbox", True, f"run_code runs in {detected.summary}; `persyn sandbox check` probes it"
        )
    return Check(
        "sandbox",
        False,
        f"no provider, so run_code is not offered: {detected.summary}",
        "install bubblewrap (apt-get install bubblewrap) where user namespaces are allowed, or gVisor's runsc, "
        "or run a Docker daemon; or set [sandbox] enabled = false",
        warning=True,
    )


async def _check_mcp(settings: Settings) -> list[Check]:
    """Each configured MCP server: connected and listed, or why not (its tools are then not
    offered; the agent answers without them)."""
    if not settings.mcp.servers:
        return []
    from persyn.core.config import mcp_headers
    from persyn.tools.mcp.servers import McpTools

    checks: list[Check] = []
    async with McpTools(settings.mcp, mcp_headers(settings), log_dir=settings.logs_dir) as mcp:
        for status in mcp.statuses():
            name = f"mcp server {status.name}"
            if status.error is not None:
                checks.append(
                    Check(
                        name,
                        False,
                        f"{status.transport}: {status.error}",
                        f"check [[mcp.servers]] {status.name!r}: its command or url, headers and environment "
                        f"(a stdio server's own errors are in {settings.logs_dir / f'mcp-{status.name}.log'}; "
                        "the agent runs without its tools meanwhile)",
                    )
                )
            else:
                shown = ", ".join(status.tools[:8]) + (" ..." if len(status.tools) > 8 else "")
                checks.append(Check(name, True, f"{status.transport}: {len(status.tools)} tool(s): {shown}"))
    return checks


async def check_tracing(settings: Settings) -> Check:
    """Spans lost in the last 24 hours (every process reports its drops to the traces
    directory), and whether the OTLP collector answers. Tracing never fails a turn, so a
    loss is a note, not a failure."""
    config = settings.tracing
    since = datetime.now(UTC) - timedelta(hours=24)
    losses = await asyncio.to_thread(read_losses, settings.traces_dir, since=since)
    lost = [f"{loss.exporter}: {loss.dropped} dropped, {loss.failed} not exported" for loss in losses]
    problems: list[str] = []
    if "otlp" in config.exporters:
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                # An empty body is an empty ExportTraceServiceRequest: a collector accepts it.
                response = await client.post(
                    config.otlp_endpoint, content=b"", headers={"Content-Type": "application/x-protobuf"}
                )
            if response.status_code >= 400:
                problems.append(
                    f"the collector at {config.otlp_endpoint} answers HTTP {response.status_code}"
                )
        except httpx.HTTPError as exc:
            problems.append(f"the collector at {config.otlp_endpoint} does not answer ({type(exc).__name__})")
    exporters = ", ".join(config.exporters) or "none"
    if not lost and not problems:
        return Check(
            "tracing", True, f"exporters {exporters}, content {config.content}; no span lost in 24 h"
        )
    detail = "; ".join([*problems, *(["spans lost in 24 h: " + "; ".join(lost)] if lost else [])])
    return Check(
        "tracing",
        True,
        detail,
        'start the collector, or set [tracing] exporters = ["local"] (turns are never held up either way)',
        warning=True,
    )


def _check_auto(auto: AutoChoice) -> Check:
    """What `auto` chose in this process, and why; the bundled model is a note with the fix."""
    if auto.source != "bundled":
        return Check("models auto", True, auto.detail)
    return Check(
        "models auto",
        True,
        auto.detail,
        "set ANTHROPIC_API_KEY or OPENAI_API_KEY, or start an OpenAI-compatible server (Ollama, the llama.cpp "
        "server, vLLM, LM Studio) where [models] auto_probe looks",
        warning=True,
    )


async def run_doctor(home: Path | None) -> int:
    checks = await collect_checks(home)
    failed = 0
    for check in checks:
        if not check.ok:
            mark, color = "FAIL", typer.colors.RED
            failed += 1
        elif check.warning:
            mark, color = "note", typer.colors.YELLOW
        else:
            mark, color = " ok ", typer.colors.GREEN
        typer.secho(f"[{mark}] {check.name}: {check.detail}", fg=color)
        if check.fix and (not check.ok or check.warning):
            typer.echo(f"       fix: {check.fix}")
    typer.echo("All checks passed." if not failed else f"{failed} check(s) failed.")
    return 1 if failed else 0
