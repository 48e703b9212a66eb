"""The `persyn` command. One `asyncio.run` per command, at this edge."""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import sys
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from persyn.cli_render import block, dump_json, echo, error_text, one_line, visible
from persyn.core.config import CONFIG_FILE, Settings, home_from_env, load_settings
from persyn.core.errors import InputError, PersynError

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="persyn",
    help=(
        "Persyn runs autonomous agents with a persistent autobiographical memory.\n\n"
        "Start with `persyn init --name NAME`, then `persyn chat`. Data and configuration "
        "live under PERSYN_HOME (default ~/.persyn); every setting in persyn.toml can be "
        "overridden by a PERSYN_SECTION__KEY environment variable."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
agents_app = typer.Typer(help="The agents of this deployment.", no_args_is_help=True)
app.add_typer(agents_app, name="agents")
memory_app = typer.Typer(
    help="The agent's long-term memory: import history, recall, inspect, forget, cull, reindex.",
    no_args_is_help=True,
)
app.add_typer(memory_app, name="memory")
conversations_app = typer.Typer(
    help="Conversations an agent has had, and their full dialog.", no_args_is_help=True
)
app.add_typer(conversations_app, name="conversations")
contacts_app = typer.Typer(
    help="The agent's contact directory: the people and agents it has met (made on first contact; "
    "you browse, rename, merge, attach identities and record addresses).",
    no_args_is_help=True,
)
app.add_typer(contacts_app, name="contacts")
channels_app = typer.Typer(
    help="The channels the agent has spoken on, each with its recent conversations.", no_args_is_help=True
)
app.add_typer(channels_app, name="channels")
people_app = typer.Typer(
    help="What the agent has observed about people, and its briefing (dossier) on each.", no_args_is_help=True
)
app.add_typer(people_app, name="people")
graph_app = typer.Typer(
    help="The agent's knowledge graph: entities and how they relate, learned from conversations "
    "(each fact with the channel it was learned on).",
    no_args_is_help=True,
)
app.add_typer(graph_app, name="graph")
heartbeat_app = typer.Typer(
    help="The agent's heartbeat: its idle cognition between conversations. Delete it and the agent "
    "sleeps until spoken to; restore wakes it.",
    no_args_is_help=True,
)
app.add_typer(heartbeat_app, name="heartbeat")
reminders_app = typer.Typer(
    help="Reminders the agent set itself: list, show what happened when they fired, cancel.",
    no_args_is_help=True,
)
app.add_typer(reminders_app, name="reminders")
goals_app = typer.Typer(help="Goals the agent set itself (read-only here).", no_args_is_help=True)
app.add_typer(goals_app, name="goals")

_state: dict[str, Path | None] = {"home": None}
_now: dict[str, datetime | None] = {"now": None}

HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home", help="Deployment directory (default: $PERSYN_HOME or ~/.persyn).", show_default=False
    ),
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent", "-a", help="Agent name or id (optional when there is only one).", show_default=False
    ),
]


@app.callback()
def _root(
    home: HomeOption = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="Run as if it were this ISO time (the clock then moves on in real time): for "
            "trying reminders and the heartbeat, and for tests.",
            show_default=False,
        ),
    ] = None,
) -> None:
    _state["home"] = home
    _now["now"] = _parse_instant(now, "--now")


# Ids carry their time as milliseconds since 1970 (core/ids.py), and dates a year before
# datetime's end leave room for the intervals added to "now" (reminders, retention, TTLs).
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def _parse_instant(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 time given for `option` (naive = UTC), within the years ids can carry."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InputError(f"invalid {option} {value!r}: use ISO 8601, e.g. 2026-12-07T09:00") from exc
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        in_range = _EARLIEST <= parsed < _LATEST
    except OverflowError:  # an offset that pushes it past datetime's range
        in_range = False
    if not in_range:
        raise InputError(
            f"invalid {option} {value!r}: use a time from {_EARLIEST:%Y-%m-%d} to before {_LATEST:%Y-%m-%d}"
        )
    return parsed


def _clock() -> Any:
    """The runtime's clock: the system's, or shifted to `--now`."""
    from persyn.core.clock import OffsetClock, SystemClock

    return OffsetClock(_now["now"]) if _now["now"] is not None else SystemClock()


class _OneLineErrors(logging.Filter):
    """Below `log_level = "debug"`, a logged exception is one line (its message), not a
    traceback: a failing write on a full disk says what failed without burying the
    operator's terminal; `debug` keeps the tracebacks for whoever investigates."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {error_text(record.exc_info[1])}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def _settings() -> Settings:
    settings = load_settings(_state["home"])
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if settings.log_level != "debug":
        one_line_errors = _OneLineErrors()
        for handler in logging.getLogger().handlers:
            handler.addFilter(one_line_errors)
        logging.getLogger("dbos").addFilter(one_line_errors)  # DBOS logs through its own handler
    return settings


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _preflight(settings: Settings) -> None:
    """Before a runtime starts: its database files must be databases (runtime/doctor.py)."""
    from persyn.runtime.doctor import preflight

    preflight(settings)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {visible(message)}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


# init / agents ---------------------------------------------------------------------------
@app.command()
def init(
    name: Annotated[str | None, typer.Option("--name", "-n", help="The new agent's name.")] = None,
    home: HomeOption = None,
) -> None:
    """Create a deployment with one agent, or add another agent to an existing one.

    Agents in one deployment share infrastructure (database, model servers) but never
    memories: every stored row is namespaced by agent id."""
    from persyn.runtime.setup import init_home

    root = home_from_env(home or _state["home"])
    result = init_home(root, name)
    if result.created_file:
        echo(f"Created {result.path}")
    else:
        echo(f"Added an agent to {result.path}")
    echo(f"Agent {result.agent.name} ({result.agent.id}) is ready. Talk to it with:")
    home_flag = "" if home is None and _state["home"] is None else f" --home {root}"
    echo(f"  persyn{home_flag} chat --agent {result.agent.name}")


@agents_app.command("list")
def agents_list(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the agents configured in persyn.toml."""
    settings = _settings()
    rows = [{"name": a.name, "id": a.id, "disposition": a.disposition} for a in settings.agents]
    if as_json:
        echo(dump_json(rows))
        return
    if not rows:
        echo(f"No agents yet in {settings.home / CONFIG_FILE}. Create one: persyn init --name NAME")
        return
    for row in rows:
        echo(f"{one_line(row['name']):<20} {row['id']}")


# chat / send -----------------------------------------------------------------------------
@app.command()
def chat(
    agent: AgentOption = None,
    as_name: Annotated[
        str | None,
        typer.Option("--as", help="Your display name for this session (overrides the remembered one)."),
    ] = None,
) -> None:
    """Chat with an agent in this terminal. Type /help for commands; Ctrl-D leaves.

    Without an API key the agent runs on a tiny offline model (Gemma 3 270M via llama.cpp);
    set ANTHROPIC_API_KEY / OPENAI_API_KEY or [models] in persyn.toml for a real one."""
    from persyn.channels.terminal import run_chat
    from persyn.runtime.compose import build_runtime

    settings = _settings()
    chosen = settings.agent(agent)
    _preflight(settings)

    async def _chat() -> int:
        runtime = build_runtime(settings, clock=_clock())
        await runtime.start(workers=True, role="chat")
        try:
            return await run_chat(runtime, chosen, display_name=as_name)
        finally:
            await runtime.stop()

    raise typer.Exit(_run(_chat()))


@app.command()
def send(
    text: Annotated[str, typer.Argument(help="The message. Use - to read it from standard input.")],
    agent: AgentOption = None,
    as_name: Annotated[str, typer.Option("--as", help="Display name of the sender.")] = "operator",
    channel: Annotated[str, typer.Option("--channel", help="Channel name the message arrives on.")] = "cli",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the reply and print it.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the reply.")] = 300.0,
) -> None:
    """Send one message to an agent served by `persyn run` / `persyn worker`.

    The event is stored and queued; any worker of this deployment answers it. With --wait
    (the default) the reply, or the agent's stated reason for silence, is printed."""
    from persyn.core.events import Event, Speaker
    from persyn.core.ids import new_id
    from persyn.runtime.compose import build_runtime

    # Checked before anything is queued: a failure after it would make a retry a duplicate.
    if not (timeout > 0 and math.isfinite(timeout)):
        raise InputError(f"invalid --timeout {timeout!r}: give a positive number of seconds")
    settings = _settings()
    chosen = settings.agent(agent)
    raw: str | bytes = sys.stdin.buffer.read() if text == "-" else text
    _preflight(settings)

    async def _send() -> int:
        runtime = build_runtime(settings, clock=_clock())
        body = runtime.validate_text(raw)
        await runtime.start(workers=False)
        try:
            now = runtime.clock.now()
            event = Event(
                id=new_id(now),
                agent_id=chosen.id,
                service="cli",
                channel=channel,
                speaker=Speaker(
                    service="cli", channel=channel, speaker_id=as_name.lower(), display_name=as_name
                ),
                text=body,
                received_at=now,
            )
            await runtime.submit(event)
            if not wait:
                echo(event.id)
                return 0
            try:
                marker = await runtime.wait_marker(chosen.id, event.id, timeout=timeout)
            except TimeoutError:
                typer.secho(
                    f"error: no reply to {event.id} within {timeout:g}s; it stays queued and a worker "
                    "(`persyn run` or `persyn worker`) answers it: do not send it again",
                    err=True,
                    fg=typer.colors.RED,
                )
                return 1
            if marker.transmitted:
                echo(marker.text or "")
                return 0
            echo(f"· {chosen.name} stayed silent: {marker.reason}", err=True, dim=True)
            return 1
        finally:
            await runtime.stop()

    raise typer.Exit(_run(_send()))


# daemon ------------------------------------------------------------------------------------
async def _serve(settings: Settings, *, housekeeping: bool) -> int:
    from persyn.runtime.compose import build_runtime

    _preflight(settings)
    runtime = build_runtime(settings, clock=_clock())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.start(workers=True, scheduler=housekeeping)
    names = ", ".join(a.name for a in settings.agents) or "no agents"
    echo(f"persyn is serving {names} (Ctrl-C or SIGTERM stops; unfinished work resumes on restart)")
    try:
        await stop.wait()
    finally:
        echo("stopping...")
        await runtime.stop()
    return 0


@app.command()
def run() -> None:
    """Run the deployment: workers, scheduler and configured channels in one process.

    SIGTERM stops it without losing accepted events; activations that were running resume
    after the last finished step when it starts again."""
    settings = _settings()
    raise typer.Exit(_run(_serve(settings, housekeeping=True)))


@app.command()
def worker() -> None:
    """Run workers only (scale-out): they take events for any agent from the shared queue."""
    settings = _settings()
    raise typer.Exit(_run(_serve(settings, housekeeping=False)))


# usage -------------------------------------------------------------------------------------
def _parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    if value[:-1].isdigit() and value[-1] in units:
        try:
            return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
        except OverflowError:
            raise InputError(
                f"invalid --since {value!r}: that reaches before the year 1; use a shorter span"
            ) from None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InputError(
            f"invalid --since {value!r}: use ISO 8601 (2026-11-30T09:00) or 30m, 12h, 7d, 2w"
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@app.command()
def usage(
    by: Annotated[
        str, typer.Option("--by", help="Group by: stage, model, channel, conversation or agent.")
    ] = "stage",
    since: Annotated[
        str | None, typer.Option("--since", help="ISO time or a span like 30m, 12h, 7d.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Sum the usage ledger exactly once (records are deduplicated by id).

    Cost comes from the [prices] table at the time of each call; unpriced calls are counted
    but not costed."""
    from persyn.usage.ledger import render_summary, summarize

    settings = _settings()
    report = summarize(settings.usage_log_path, by=by, since=_parse_since(since))
    if as_json:
        echo(dump_json(report.model_dump(mode="json")))
    else:
        echo(render_summary(report))


# conversations -----------------------------------------------------------------------------
@conversations_app.command("list")
def conversations_list(
    agent: AgentOption = None,
    channel: Annotated[str | None, typer.Option("--channel", help="Only this channel.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List conversations, newest first."""
    from persyn.runtime.inspect import list_conversations

    settings = _settings()
    rows = _run(list_conversations(settings, settings.agent(agent), channel, limit))
    if as_json:
        echo(dump_json([r.model_dump(mode="json") for r in rows]))
        return
    for row in rows:
        state = "open" if row.closed_at is None else "closed"
        echo(
            f"{row.id}  {row.started_at:%Y-%m-%d %H:%M}  {one_line(row.service)}/{one_line(row.channel)}  {state}"
        )


@conversations_app.command("show")
def conversations_show(
    conversation_id: Annotated[str, typer.Argument(metavar="ID", help="The conversation's ULID.")],
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    deliberation: Annotated[
        bool,
        typer.Option(
            "--deliberation",
            help="Also show, under each message, what deliberation did: the critics' objections "
            "(or why a critic was skipped) and the decision to speak, stay silent or decline.",
        ),
    ] = False,
) -> None:
    """Read a conversation's full dialog."""
    from persyn.runtime.inspect import conversation_dialog, deliberation_traces

    settings = _settings()
    chosen = settings.agent(agent)
    conversation, messages = _run(conversation_dialog(settings, chosen, conversation_id))
    traces: dict[str, dict[str, Any]] = {}
    if deliberation:
        inbound = [m.event_id for m in messages if m.event_id and m.role.value != "agent"]
        traces = _run(deliberation_traces(settings, chosen, inbound))
    if as_json:
        payload: dict[str, Any] = {
            "conversation": conversation.model_dump(mode="json"),
            "messages": [m.model_dump(mode="json") for m in messages],
        }
        if deliberation:
            payload["deliberation"] = traces
        echo(dump_json(payload))
        return
    echo(
        f"Conversation {conversation.id} on {one_line(conversation.service)}/{one_line(conversation.channel)}"
    )
    for message in messages:
        echo(_message_line(message))
        trace = traces.get(message.event_id or "") if message.role.value != "agent" else None
        if trace:
            for line in _trace_lines(trace):
                echo(f"    · {block(line, '      ')}")


def _message_line(message: Any) -> str:
    """One dialog message: the speaker's name on one line, the text's own lines indented."""
    return f"[{message.created_at:%Y-%m-%d %H:%M:%S}] {one_line(message.speaker_name)}: {block(message.text)}"


def _trace_lines(trace: dict[str, Any]) -> list[str]:
    lines = [f"deliberation: {trace.get('mode', '?')}"]
    for critique in trace.get("critiques") or []:
        lens = critique.get("lens", "?")
        if critique.get("skipped"):
            lines.append(f"{lens}: skipped ({critique['skipped']})")
            continue
        objections = critique.get("objections") or []
        if not objections:
            lines.append(f"{lens}: no objections")
        for objection in objections:
            lines.append(
                f'{lens}: [{objection.get("kind")}] "{objection.get("span")}" - {objection.get("explanation")}'
            )
    for used in trace.get("tools") or []:
        lines.append(f"tool {used.get('name')}: {used.get('status')}")
    for trip in trace.get("trips") or []:
        what = f" ({trip.get('tool')})" if trip.get("tool") else ""
        lines.append(
            f"loop breaker {trip.get('reason')}{what}: {trip.get('count')} of at most {trip.get('limit')}"
        )
    decision = trace.get("decision")
    if decision:
        lines.append(f"decided to {decision.get('action')}: {decision.get('reason')}")
    return lines


# contacts ------------------------------------------------------------------------------------
@contacts_app.command("list")
def contacts_list(
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Everyone the agent has met, most recently seen first."""
    from persyn.runtime.inspect import contacts

    settings = _settings()
    found = _run(contacts(settings, settings.agent(agent)))
    if as_json:
        payload = [
            {**c.person.model_dump(mode="json"), "addresses": [_address_json(a) for a in c.addresses]}
            for c in found
        ]
        echo(dump_json(payload))
        return
    if not found:
        echo("No contacts yet: people are added on first contact.")
    for entry in found:
        person = entry.person
        seen = f"{person.last_interaction_at:%Y-%m-%d %H:%M}" if person.last_interaction_at else "never"
        where = ", ".join(f"{i.service}/{i.channel}" for i in person.identities) or "-"
        echo(
            f"{person.id}  {one_line(person.display_name):<20} {person.kind:<6} last seen {seen}  "
            f"on {one_line(where)}"
        )


def _address_json(address: Any) -> dict[str, Any]:
    return address.model_dump(mode="json", include={"label", "value", "created_at"})


@contacts_app.command("show")
def contacts_show(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID (see `contacts list`).")],
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """A contact's identities, addresses, last interaction and a digest of their latest
    conversations (summaries, bounded; read one in full with `persyn conversations show ID`)."""
    from persyn.runtime.inspect import contact

    settings = _settings()
    digest = _run(contact(settings, settings.agent(agent), person_id))
    if as_json:
        payload = {
            "person": digest.person.model_dump(mode="json"),
            "addresses": [_address_json(a) for a in digest.addresses],
            "display_name_preference": digest.display_name_preference,
            "preferred_channel": digest.preferred_channel,
            "facts": digest.facts,
            "conversations": [
                {"conversation": c.model_dump(mode="json"), "summary": summary}
                for c, summary in digest.conversations
            ],
        }
        echo(dump_json(payload))
        return
    person = digest.person
    echo(f"{one_line(person.display_name)} ({person.kind}) {person.id}")
    if digest.display_name_preference:
        echo(f"  prefers to be called: {one_line(digest.display_name_preference)}")
    if digest.preferred_channel:
        echo(f"  preferred channel: {one_line(digest.preferred_channel)}")
    for key, value in digest.facts.items():
        echo(f"  fact: {one_line(key)} = {one_line(value)}")
    seen = f"{person.last_interaction_at:%Y-%m-%d %H:%M}" if person.last_interaction_at else "never"
    echo(f"  last interaction: {seen}")
    for identity in person.identities:
        echo(
            f"  identity: {one_line(identity.service)} / {one_line(identity.channel)} / "
            f"{one_line(identity.speaker_id)}"
        )
    for address in digest.addresses:
        echo(f"  address: {one_line(address.label)} {one_line(address.value)}")
    echo("  recent conversations:" if digest.conversations else "  no conversations yet")
    for conversation, summary in digest.conversations:
        echo(
            f"    {conversation.id}  {conversation.started_at:%Y-%m-%d %H:%M}  "
            f"{one_line(conversation.service)}/{one_line(conversation.channel)}: "
            f"{one_line(summary or '(not consolidated yet)')}"
        )


@contacts_app.command("rename")
def contacts_rename(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The new display name (1-64 characters).")],
    agent: AgentOption = None,
) -> None:
    """Change how a contact is named; identities and history stay as they are."""
    from persyn.runtime.inspect import rename_contact

    settings = _settings()
    person = _run(rename_contact(settings, settings.agent(agent), person_id, name))
    echo(f"{person.id} is now {one_line(person.display_name)}")


@contacts_app.command("merge")
def contacts_merge(
    survivor: Annotated[str, typer.Argument(metavar="SURVIVOR", help="The contact that remains.")],
    other: Annotated[str, typer.Argument(metavar="OTHER", help="The duplicate folded into it (then gone).")],
    agent: AgentOption = None,
    name: Annotated[str | None, typer.Option("--name", help="The survivor's name afterwards.")] = None,
) -> None:
    """Fold a duplicate into one contact, retroactively: identities, addresses, preferences,
    facts, observations, dialog, conversations and memories all name the survivor, so the
    agent recognises the person on every channel either record knew."""
    from persyn.runtime.inspect import merge_contacts

    settings = _settings()
    person = _run(merge_contacts(settings, settings.agent(agent), survivor, other, name))
    where = ", ".join(f"{i.service}/{i.channel}" for i in person.identities) or "-"
    echo(f"{person.id} ({one_line(person.display_name)}) now covers {one_line(where)}")


def _identity_command(
    person_id: str, service: str, channel: str, speaker: str, agent: str | None, attach: bool
) -> None:
    from persyn.runtime.inspect import change_identity
    from persyn.store.base import Identity

    if not all(part.strip() for part in (service, channel, speaker)):
        raise _fail("SERVICE, CHANNEL and SPEAKER must not be empty")
    settings = _settings()
    identity = Identity(service=service, channel=channel, speaker_id=speaker)
    person = _run(change_identity(settings, settings.agent(agent), person_id, identity, attach=attach))
    where = ", ".join(f"{i.service}/{i.channel}/{i.speaker_id}" for i in person.identities) or "-"
    echo(f"{person.id} ({one_line(person.display_name)}) identities: {one_line(where)}")


@contacts_app.command("attach")
def contacts_attach(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    service: Annotated[str, typer.Argument(metavar="SERVICE", help="e.g. terminal, slack.")],
    channel: Annotated[str, typer.Argument(metavar="CHANNEL", help="The channel on that service.")],
    speaker: Annotated[str, typer.Argument(metavar="SPEAKER", help="The sender id the channel reports.")],
    agent: AgentOption = None,
) -> None:
    """Add an identity to a contact: the next message from it is recognised as them."""
    _identity_command(person_id, service, channel, speaker, agent, attach=True)


@contacts_app.command("detach")
def contacts_detach(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    service: Annotated[str, typer.Argument(metavar="SERVICE")],
    channel: Annotated[str, typer.Argument(metavar="CHANNEL")],
    speaker: Annotated[str, typer.Argument(metavar="SPEAKER")],
    agent: AgentOption = None,
) -> None:
    """Remove an identity from a contact, looking forward: history stays with them, and new
    traffic on that identity makes a new contact."""
    _identity_command(person_id, service, channel, speaker, agent, attach=False)


_ADDRESS_LABEL_HELP = "The kind of address: a short word such as email, phone, matrix, home or work."


def _address_command(person_id: str, label: str, value: str, agent: str | None, add: bool) -> None:
    from persyn.runtime.inspect import change_address

    settings = _settings()
    person, changed = _run(change_address(settings, settings.agent(agent), person_id, label, value, add=add))
    label, value = one_line(label.strip().lower()), one_line(value.strip())
    name = one_line(person.display_name)
    if not add:
        echo(f"{name} ({person.id}) no longer has {label} {value}")
    elif changed:
        echo(f"{name} ({person.id}) can be reached at {label} {value}")
    else:
        echo(f"{name} ({person.id}) already has {label} {value}")


@contacts_app.command("add-address")
def contacts_add_address(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    label: Annotated[str, typer.Argument(metavar="LABEL", help=_ADDRESS_LABEL_HELP)],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The address, e.g. sam@example.com.")],
    agent: AgentOption = None,
) -> None:
    """Record a way to reach a contact (an email address, a phone number, ...) under a type
    label. A contact may have several per label; adding one they have changes nothing."""
    _address_command(person_id, label, value, agent, add=True)


@contacts_app.command("remove-address")
def contacts_remove_address(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    label: Annotated[str, typer.Argument(metavar="LABEL", help=_ADDRESS_LABEL_HELP)],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The address, as `contacts show` prints it.")],
    agent: AgentOption = None,
) -> None:
    """Forget one of a contact's addresses."""
    _address_command(person_id, label, value, agent, add=False)


@contacts_app.command("prefer")
def contacts_prefer(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    channel: Annotated[
        str, typer.Argument(metavar="CHANNEL", help="SERVICE:CHANNEL, e.g. terminal:terminal.")
    ],
    agent: AgentOption = None,
) -> None:
    """Set the channel on which to reach a contact first."""
    from persyn.runtime.inspect import prefer_channel

    settings = _settings()
    person = _run(prefer_channel(settings, settings.agent(agent), person_id, channel))
    echo(f"{one_line(person.display_name)} is reached first on {one_line(channel)}")


@channels_app.command("list")
def channels_list(
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Channels the agent has conversed on, most recently active first."""
    from persyn.runtime.inspect import channels

    settings = _settings()
    found = _run(channels(settings, settings.agent(agent)))
    if as_json:
        echo(dump_json([f"{c.service}:{c.channel}" for c in found]))
        return
    if not found:
        echo("No conversations yet.")
    for digest in found:
        echo(f"{one_line(digest.service)}:{one_line(digest.channel)}")


@channels_app.command("show")
def channels_show(
    name: Annotated[
        str, typer.Argument(metavar="CHANNEL", help="SERVICE:CHANNEL, as `channels list` prints it.")
    ],
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """A channel's latest conversations with their summaries, newest first (bounded); read one
    in full with `persyn conversations show ID`."""
    from persyn.runtime.inspect import channel

    settings = _settings()
    digest = _run(channel(settings, settings.agent(agent), name))
    if as_json:
        payload = [
            {"conversation": c.model_dump(mode="json"), "summary": summary}
            for c, summary in digest.conversations
        ]
        echo(dump_json(payload))
        return
    echo(f"{one_line(digest.service)}:{one_line(digest.channel)}")
    for conversation, summary in digest.conversations:
        echo(
            f"  {conversation.id}  {conversation.started_at:%Y-%m-%d %H:%M}: "
            f"{one_line(summary or '(not consolidated yet)')}"
        )


@people_app.command("observations")
def people_observations(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID (see `contacts list`).")],
    agent: AgentOption = None,
    history: Annotated[
        bool, typer.Option("--history", help="Also show how each observation changed, and why.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Observations about a person (extracted after each conversation closes)."""
    from persyn.runtime.inspect import person_observations

    settings = _settings()
    person, observations, changes, _ = _run(person_observations(settings, settings.agent(agent), person_id))
    if as_json:
        payload: dict[str, Any] = {"observations": [o.model_dump(mode="json") for o in observations]}
        if history:
            payload["history"] = [c.model_dump(mode="json") for c in changes]
        echo(dump_json(payload))
        return
    echo(f"{one_line(person.display_name)} ({person.id})")
    if not observations:
        echo("  nothing observed yet")
    for observation in observations:
        echo(
            f"  [{one_line(observation.kind)}] {one_line(observation.value)}  ({observation.observed_at:%Y-%m-%d})"
        )
    if history:
        echo("history:")
        for change in changes:
            echo(
                f"  {change.at:%Y-%m-%d %H:%M} {one_line(change.action)}: {change.before!r} -> "
                f"{change.after!r} ({one_line(change.reason)})"
            )


@people_app.command("dossier")
def people_dossier(
    person_id: Annotated[str, typer.Argument(metavar="ID", help="The contact's ULID.")],
    agent: AgentOption = None,
) -> None:
    """The agent's briefing on a person, as last synthesised from their observations."""
    from persyn.runtime.inspect import person_observations

    settings = _settings()
    person, observations, _, dossier = _run(person_observations(settings, settings.agent(agent), person_id))
    if dossier:
        echo(dossier)
    elif observations:
        echo(
            f"No dossier on {one_line(person.display_name)} yet: it is written after their next conversation closes."
        )
    else:
        echo(f"Nothing is known about {one_line(person.display_name)} yet.")


# graph ---------------------------------------------------------------------------------------
GraphChannelOption = Annotated[
    str | None,
    typer.Option(
        "--channel",
        help="Only what the agent could bring up on SERVICE:CHANNEL with nobody else present "
        "(its compartment and sensitivity rules); default: everything, with provenance.",
        show_default=False,
    ),
]


def _relation_json(relation: Any) -> dict[str, Any]:
    return relation.model_dump(mode="json")


def _relation_text(relation: Any) -> str:
    return one_line(
        f"{relation.line()}  [{relation.channel}, {relation.sensitivity}, {relation.learned_at:%Y-%m-%d}]"
    )


@graph_app.command("query")
def graph_query(
    entity: Annotated[
        str, typer.Argument(metavar="ENTITY", help="An entity's name (or id, or a unique part of its name).")
    ],
    hops: Annotated[int, typer.Option("--hops", "-n", help="How many relations out to follow (1-6).")] = 1,
    limit: Annotated[int, typer.Option("--limit", help="At most this many relations, nearest first.")] = 50,
    channel: GraphChannelOption = None,
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """An entity, what is known about it, and everything within N relations of it."""
    from persyn.runtime.inspect_graph import graph_query as query

    settings = _settings()
    found = _run(query(settings, settings.agent(agent), entity, hops, limit, channel))
    if as_json:
        payload = {
            "entity": found.entity.model_dump(mode="json"),
            "entities": [e.model_dump(mode="json") for e in found.around.entities],
            "relations": [_relation_json(r) for r in found.around.relations],
        }
        echo(dump_json(payload))
        return
    head = found.entity
    echo(f"{one_line(head.name)} ({one_line(head.kind)}) {head.id}")
    for key, value in sorted(head.attributes.items()):
        echo(f"  {one_line(key)}: {one_line(value)}")
    if not found.around.relations:
        echo(f"  no relations within {hops} hop{'s' if hops != 1 else ''}")
    for relation in found.around.relations:
        echo(f"  {_relation_text(relation)}")


@graph_app.command("path")
def graph_path(
    source: Annotated[str, typer.Argument(metavar="A", help="An entity's name (or id).")],
    target: Annotated[str, typer.Argument(metavar="B", help="Another entity's name (or id).")],
    max_hops: Annotated[int, typer.Option("--max-hops", help="Longest chain looked for (1-6).")] = 4,
    channel: GraphChannelOption = None,
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """A shortest chain of relations between two entities (in either direction). Exits 1
    when they are not connected within --max-hops."""
    from persyn.runtime.inspect_graph import graph_path as path

    settings = _settings()
    found = _run(path(settings, settings.agent(agent), source, target, max_hops, channel))
    if as_json:
        relations = None if found.relations is None else [_relation_json(r) for r in found.relations]
        echo(dump_json({"source": found.source.name, "target": found.target.name, "path": relations}))
    elif found.relations is None:
        echo(
            f"{one_line(found.source.name)} and {one_line(found.target.name)} are not connected "
            f"within {max_hops} hops."
        )
    else:
        echo(f"{one_line(found.source.name)} → {one_line(found.target.name)}: {len(found.relations)} hop(s)")
        for relation in found.relations:
            echo(f"  {_relation_text(relation)}")
    if found.relations is None:
        raise typer.Exit(1)


@graph_app.command("stats")
def graph_stats(agent: AgentOption = None) -> None:
    """How many entities, mentions and relations the agent's graph holds."""
    from persyn.runtime.inspect_graph import graph_stats as stats

    settings = _settings()
    counts = _run(stats(settings, settings.agent(agent)))
    echo(", ".join(f"{count} {name}" for name, count in counts.items()))


# autonomy ----------------------------------------------------------------------------------
@heartbeat_app.command("status")
def heartbeat_status_command(
    agent: AgentOption = None,
    limit: Annotated[int, typer.Option("--limit", help="How many recent self-initiated runs to list.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Whether the heartbeat beats and when next, today's autonomy budget, and what the agent
    recently did on its own (beats, reminders, skips, rests)."""
    from persyn.runtime.inspect_autonomy import heartbeat

    settings = _settings()
    view = _run(heartbeat(settings, settings.agent(agent), limit))
    if as_json:
        payload = {
            "heartbeat": None if view.beat is None else view.beat.model_dump(mode="json"),
            "tokens_today": view.tokens_today,
            "daily_token_budget": view.budget,
            "activity": [e.model_dump(mode="json") for e in view.activity],
        }
        echo(dump_json(payload))
        return
    if view.beat is None:
        echo("asleep: the heartbeat is deleted (restore it with `persyn heartbeat restore`)")
    else:
        echo(
            f"beating: next at {view.beat.next_fire_at:%Y-%m-%d %H:%M} UTC, {view.beat.fire_count} beat(s) so far"
        )
    echo(f"autonomy budget: {view.tokens_today} of {view.budget} tokens used in the last 24 hours")
    for entry in view.activity:
        echo(
            f"  {entry.at:%Y-%m-%d %H:%M} {entry.kind:<9} {one_line(entry.outcome[:100])}  ({entry.tokens} tokens)"
        )


@heartbeat_app.command("delete")
def heartbeat_delete(agent: AgentOption = None) -> None:
    """Put the agent to sleep: no beats (durably, across restarts) until `restore`. It still
    answers messages, and its own reminders still fire."""
    from persyn.runtime.inspect_autonomy import sleep

    settings = _settings()
    chosen = settings.agent(agent)
    if _run(sleep(settings, chosen)):
        echo(f"{chosen.name}'s heartbeat is deleted: it sleeps until spoken to.")
    else:
        echo(f"{chosen.name} was already asleep.")


@heartbeat_app.command("restore")
def heartbeat_restore(agent: AgentOption = None) -> None:
    """Wake the agent's idle cognition: the heartbeat beats again, first one interval from now."""
    from persyn.runtime.inspect_autonomy import wake

    settings = _settings()
    chosen = settings.agent(agent)
    beat = _run(wake(settings, chosen))
    echo(f"{chosen.name}'s heartbeat beats again; next at {beat.next_fire_at:%Y-%m-%d %H:%M} UTC.")


@reminders_app.command("list")
def reminders_list(
    agent: AgentOption = None,
    cancelled: Annotated[bool, typer.Option("--cancelled", help="Include cancelled reminders.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The reminders the agent set itself, soonest first (the heartbeat is not one of them)."""
    from persyn.runtime.inspect_autonomy import agent_reminders
    from persyn.schedule import describe_trigger

    settings = _settings()
    found = _run(agent_reminders(settings, settings.agent(agent), cancelled))
    if as_json:
        echo(dump_json([r.model_dump(mode="json") for r in found]))
        return
    if not found:
        echo("No reminders: the agent sets them itself, with its reminder tools.")
    for reminder in found:
        echo(
            f"{reminder.id}  next {reminder.next_fire_at:%Y-%m-%d %H:%M}  {describe_trigger(reminder.trigger)}"
            f"  [{reminder.status}]  {one_line(reminder.objective[:80])}"
        )


@reminders_app.command("show")
def reminders_show(
    reminder_id: Annotated[
        str, typer.Argument(metavar="ID", help="The reminder's ULID (see `reminders list`).")
    ],
    agent: AgentOption = None,
) -> None:
    """A reminder and what happened the last times it fired."""
    from persyn.runtime.inspect_autonomy import reminder
    from persyn.schedule import describe_trigger

    settings = _settings()
    found, runs = _run(reminder(settings, settings.agent(agent), reminder_id))
    echo(
        f"{block(found.objective, '  ')}\n  {describe_trigger(found.trigger)}; "
        f"next {found.next_fire_at:%Y-%m-%d %H:%M} UTC"
    )
    echo(f"  status {found.status}, fired {found.fire_count} time(s)")
    for run in runs:
        echo(f"  {run.at:%Y-%m-%d %H:%M} {one_line(run.outcome[:100])} ({run.tokens} tokens)")


@reminders_app.command("cancel")
def reminders_cancel(
    reminder_id: Annotated[str, typer.Argument(metavar="ID", help="The reminder's ULID.")],
    agent: AgentOption = None,
) -> None:
    """Cancel one of the agent's reminders: it never fires again (it stays listed with
    `--cancelled`)."""
    from persyn.runtime.inspect_autonomy import cancel_reminder

    settings = _settings()
    cancelled = _run(cancel_reminder(settings, settings.agent(agent), reminder_id))
    echo(f"cancelled: {one_line(cancelled.objective[:80])}")


@app.command("activity")
def activity_command(
    agent: AgentOption = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only since then: 7d, 12h, 30m, or an ISO time.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What the agent did on its own — heartbeat beats, reminder runs, skips and rests — with
    each run's token cost, newest first."""
    from persyn.runtime.inspect_autonomy import activity

    settings = _settings()
    entries = _run(activity(settings, settings.agent(agent), _parse_since(since), limit))
    if as_json:
        echo(dump_json([e.model_dump(mode="json") for e in entries]))
        return
    if not entries:
        echo("Nothing self-initiated yet.")
    for entry in entries:
        echo(
            f"{entry.at:%Y-%m-%d %H:%M} {entry.kind:<9} {entry.tokens:>7} tokens  {one_line(entry.outcome[:100])}"
        )
    echo(f"total: {sum(e.tokens for e in entries)} tokens over {len(entries)} run(s)")


@goals_app.command("list")
def goals_list(
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The goals the agent set itself: open ones first, then how the others ended."""
    from persyn.runtime.inspect_autonomy import agent_goals

    settings = _settings()
    found = _run(agent_goals(settings, settings.agent(agent)))
    if as_json:
        echo(dump_json([g.model_dump(mode="json") for g in found]))
        return
    if not found:
        echo("No goals: the agent creates them itself, with its goal tool.")
    for goal in found:
        ending = f" — {goal.outcome}" if goal.outcome else ""
        echo(f"{goal.id}  [{goal.status}]  {one_line(goal.description[:100] + ending)}")


# memory ------------------------------------------------------------------------------------
def _progress(description: str) -> tuple[Any, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=False
    )
    task = progress.add_task(description, total=None)

    def update(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    return progress, update


def _parse_now(value: str | None) -> datetime | None:
    return _parse_instant(value, "--now")


def _scored_json(result: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": s.record.id,
            "ref": s.record.ref,
            "score": round(s.score, 6),
            "band": s.band.value,
            "tokens": s.tokens,
            "summary": s.record.summary,
            "time": s.record.created_at.isoformat(),
        }
        for s in result.records
    ]


@memory_app.command("import")
def memory_import(
    path: Annotated[
        Path, typer.Argument(metavar="FILE.jsonl", help="One JSON object per line (see --help).")
    ],
    agent: AgentOption = None,
    extract: Annotated[
        bool,
        typer.Option(
            "--extract",
            help="Also extract the knowledge graph and observations from the imported dialog "
            "(model calls: the estimate is printed first; needs --budget).",
        ),
    ] = False,
    budget: Annotated[
        int | None,
        typer.Option("--budget", min=0, metavar="TOKENS", help="With --extract: stop before spending more."),
    ] = None,
) -> None:
    """Import history: one JSON object per line with `time` (ISO 8601), `channel`,
    `participants` (names or person ids), `summary`, and optional `importance`, `tags`,
    `sensitivity`, `ref`, `dialog` ([{speaker, text, time}]). Bad lines are reported with their
    line number; good lines are imported; re-importing a `ref` never duplicates. Imported
    conversations are stored closed and already remembered: no model is called for them
    unless you ask for --extract."""
    from persyn.runtime.memory_ops import estimate_extraction, extract_imported, memory_ops

    settings = _settings()
    chosen = settings.agent(agent)
    if not path.is_file():
        raise PersynError(f"no such file: {str(path)!r}")
    if extract and budget is None:
        raise PersynError("--extract needs --budget TOKENS (--budget 0 prints the estimate only)")
    if budget is not None and not extract:
        raise PersynError("--budget applies to --extract only")

    async def _import() -> Any:
        async with memory_ops(settings, chosen) as ops:
            if ops.degraded:
                typer.secho(
                    f"· {ops.degraded}; importing without vectors (run `persyn memory reindex` later)",
                    err=True,
                )
            progress, update = _progress("embedding")
            with progress:
                report = await ops.import_file(path, update)
            for problem in report.problems:
                typer.secho(f"{path}:{problem.line}: {problem.reason}", err=True, fg=typer.colors.YELLOW)
            repaired = f", links completed {report.repaired}" if report.repaired else ""
            typer.echo(
                f"imported {report.imported}, already present {report.duplicates}, "
                f"rejected {len(report.problems)}{repaired}"
            )
            if budget is None:
                return report
            estimate = await estimate_extraction(ops.store, settings, chosen, report.conversations)
        typer.echo(
            f"extraction estimate: {estimate.conversations} conversations, {estimate.calls} model calls, "
            f"about {estimate.tokens} tokens (budget {budget})"
        )
        if estimate.conversations and budget > 0:
            progress, update = _progress("extracting")
            with progress:
                done = await extract_imported(settings, chosen, estimate, budget, update)
            typer.echo(
                f"extracted {done.extracted} of {estimate.conversations} conversations, {done.tokens} tokens"
            )
            if done.stopped:
                typer.secho(
                    f"· stopped: {done.stopped}; run again with a larger --budget for the rest", err=True
                )
        return report

    report = _run(_import())
    if report.problems and not report.imported:
        raise typer.Exit(1)


@memory_app.command("recall")
def memory_recall(
    query: Annotated[str | None, typer.Argument(help="What to remember (omit with --queries).")] = None,
    agent: AgentOption = None,
    channel: Annotated[
        str | None, typer.Option("--channel", help="Channel key, e.g. terminal:terminal.")
    ] = None,
    participant: Annotated[
        list[str] | None,
        typer.Option("--participant", "-p", help="Who is present: a name or id (repeat)."),
    ] = None,
    now: Annotated[str | None, typer.Option("--now", help="Pretend it is this time (ISO 8601).")] = None,
    budget_tokens: Annotated[
        int | None, typer.Option("--budget-tokens", min=1, help="Context budget.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most this many records.")] = None,
    queries: Annotated[
        Path | None,
        typer.Option("--queries", help="Batch: JSONL of {id, query, channel?, participants?, now?}."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Exactly the retrieval the agent uses when it answers, with each record's band. A name
    several contacts go by is an error listing them: give the id."""
    from persyn.runtime.memory_ops import memory_ops, read_queries

    settings = _settings()
    chosen = settings.agent(agent)
    if (query is None) == (queries is None):
        raise PersynError("give either a QUERY or --queries FILE")
    batch = read_queries(queries) if queries is not None else []

    async def _recall() -> None:
        async with memory_ops(settings, chosen) as ops:
            if ops.degraded:
                typer.secho(f"· {ops.degraded}; keyword retrieval only", err=True)
            if queries is not None:
                for item in batch:
                    result = await ops.recall(
                        item.query,
                        channel=item.channel or channel,
                        participants=item.participants or participant or [],
                        now=item.now or _parse_now(now),
                        budget_tokens=budget_tokens,
                        limit=limit,
                    )
                    echo(dump_json({"id": item.id, "results": _scored_json(result)}, indent=None))
                return
            assert query is not None
            result = await ops.recall(
                query,
                channel=channel,
                participants=participant or [],
                now=_parse_now(now),
                budget_tokens=budget_tokens,
                limit=limit,
            )
            if as_json:
                echo(dump_json(_scored_json(result)))
                return
            if not result.records:
                echo("I don't remember anything about that here.")
            for scored in result.records:
                echo(
                    f"[{scored.band.value:>8}] {scored.score:.3f}  {scored.record.created_at:%Y-%m-%d}  {scored.record.id}"
                )
                echo(f"           {one_line(scored.record.summary)}")

    _run(_recall())


@memory_app.command("list")
def memory_list(
    agent: AgentOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The newest memories."""
    from persyn.runtime.memory_ops import memory_ops

    settings = _settings()
    chosen = settings.agent(agent)

    async def _list() -> list[Any]:
        async with memory_ops(settings, chosen) as ops:
            return await ops.store.list_records(chosen.id, limit=limit)

    records = _run(_list())
    if as_json:
        echo(dump_json([r.model_dump(mode="json") for r in records]))
        return
    for record in records:
        echo(
            f"{record.id}  {record.created_at:%Y-%m-%d}  [{record.importance:>2}/10 {record.sensitivity.value}]  "
            f"{one_line(record.summary[:100])}"
        )


@memory_app.command("show")
def memory_show(
    record_id: Annotated[str, typer.Argument(metavar="ID")],
    agent: AgentOption = None,
    dialog: Annotated[
        bool, typer.Option("--dialog", help="Also print the raw dialog behind it (remember harder).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """One memory with all its metadata; --dialog pulls the verbatim exchange behind it."""
    from persyn.runtime.memory_ops import memory_ops

    settings = _settings()
    chosen = settings.agent(agent)

    async def _show() -> Any:
        async with memory_ops(settings, chosen) as ops:
            return await ops.show(record_id)

    record, messages = _run(_show())
    if as_json:
        payload: dict[str, Any] = {"record": record.model_dump(mode="json")}
        if dialog:
            payload["dialog"] = [m.model_dump(mode="json") for m in messages]
        echo(dump_json(payload))
        return
    for key, value in record.model_dump(mode="json").items():
        echo(f"{key:>16}: {block(str(value), ' ' * 18)}")
    if dialog:
        if not messages:
            echo(
                "(no verbatim dialog is kept for this memory: it is past the retention window or was imported without it)"
            )
        for message in messages:
            echo(_message_line(message))


@memory_app.command("forget")
def memory_forget(record_id: Annotated[str, typer.Argument(metavar="ID")], agent: AgentOption = None) -> None:
    """Delete one memory (its vector and index entries too)."""
    from persyn.runtime.memory_ops import memory_ops

    settings = _settings()
    chosen = settings.agent(agent)

    async def _forget() -> Any:
        async with memory_ops(settings, chosen) as ops:
            return await ops.forget(record_id)

    record = _run(_forget())
    echo(f"forgot {record.id}: {one_line(record.summary[:100])}")


@memory_app.command("stats")
def memory_stats(
    agent: AgentOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """How many memories, by channel, sensitivity and importance; which encoder made the vectors."""
    from persyn.runtime.memory_ops import memory_ops

    settings = _settings()
    chosen = settings.agent(agent)

    async def _stats() -> dict[str, object]:
        async with memory_ops(settings, chosen) as ops:
            return await ops.store.record_stats(chosen.id)

    stats = _run(_stats())
    echo(dump_json(stats, indent=2 if as_json else 1))


@memory_app.command("cull")
def memory_cull(
    agent: AgentOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be deleted.")] = False,
    now: Annotated[str | None, typer.Option("--now", help="Pretend it is this time (ISO 8601).")] = None,
) -> None:
    """Delete memories rated below [memory] cull_below_importance AND older than
    cull_after_days (defaults 3/10 and 14 days); important memories stay regardless of age."""
    from persyn.runtime.memory_ops import memory_ops

    settings = _settings()
    chosen = settings.agent(agent)

    async def _cull() -> list[Any]:
        async with memory_ops(settings, chosen) as ops:
            return await ops.cull(dry_run=dry_run, now=_parse_now(now))

    doomed = _run(_cull())
    verb = "would delete" if dry_run else "deleted"
    echo(f"{verb} {len(doomed)} memories")
    for record in doomed:
        echo(
            f"  {record.id}  {record.created_at:%Y-%m-%d}  [{record.importance}/10]  {one_line(record.summary[:90])}"
        )


@memory_app.command("reindex")
def memory_reindex(agent: AgentOption = None) -> None:
    """Re-embed memories whose vectors came from another encoder (after changing [memory] embedder)."""
    from persyn.runtime.memory_ops import memory_ops

    settings = _settings()
    chosen = settings.agent(agent)

    async def _reindex() -> int:
        async with memory_ops(settings, chosen) as ops:
            progress, update = _progress("re-embedding")
            with progress:
                return await ops.reindex(update)

    echo(f"re-embedded {_run(_reindex())} memories")


# doctor ------------------------------------------------------------------------------------
@app.command()
def doctor() -> None:
    """Check configuration, database and model reachability, and say what to fix."""
    from persyn.runtime.doctor import run_doctor

    raise typer.Exit(_run(run_doctor(_state["home"])))


def main() -> None:
    try:
        app()
    except (PersynError, OSError) as exc:
        # OSError: the machine refused (a full disk, a read-only directory): say which file.
        typer.secho(f"error: {error_text(exc)}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
