"""`persyn sandbox`: what isolates `run_code`, probed from inside; the workspaces of every
compartment, listed and reset by the operator."""

from __future__ import annotations

from typing import Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, fail, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo

__all__ = ["register"]

sandbox_app = command_group(
    "The sandbox `run_code` delegates to: its provider, probes of its isolation, the workspaces of "
    "each compartment."
)

WorkspaceOption = Annotated[
    str | None,
    typer.Option("--workspace", help="One workspace, by the key `persyn sandbox list` prints."),
]
EveryAgentOption = Annotated[bool, typer.Option("--all", help="Every agent's workspaces.")]


@sandbox_app.command("check")
def sandbox_check(ctx: typer.Context, agent: AgentOption = None, as_json: JsonOption = False) -> None:
    """Run probes inside the agent's sandbox (write outside the workspace, reach the host's loopback,
    open an IP socket, read the host's home, start too many processes, write past the workspace
    quota) and print what is isolated. The probes use a workspace of their own.

    Exits 1 when there is no provider or a probe got out that the configuration does not allow."""
    from persyn.tools.sandbox.service import check_sandbox

    cli = CliContext.of(ctx)
    settings = cli.settings
    report = run(check_sandbox(settings, settings.agent(agent).id))
    if as_json:
        echo(dump_json(report.model_dump(mode="json")))
    else:
        echo(f"provider: {report.reason}" if report.provider else f"no sandbox provider: {report.reason}")
        if report.workspace:
            echo(f"workspaces: {report.workspace}")
        for probe in report.probes:
            verdict = (
                "isolated"
                if probe.isolated
                else (f"open (network = {report.network})" if probe.expected_open else "NOT ISOLATED")
            )
            echo(f"  {probe.name}: {verdict} — {probe.detail}")
    if report.provider is None:
        raise fail("run_code is not offered without a sandbox provider (no host fallback)", 1)
    if report.escaped:
        raise fail(f"{len(report.escaped)} probe(s) got out of the sandbox", 1)


@sandbox_app.command("list")
def sandbox_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    every: EveryAgentOption = False,
    as_json: JsonOption = False,
) -> None:
    """The agent's sandbox workspaces (`--all`: every agent's), one per compartment: whose runs
    share it (conversation or the agent's own runs, channels, people, sensitivity), its size and
    how many entries it holds."""
    from persyn.tools.sandbox.workspace import SandboxWorkspaces

    settings = CliContext.of(ctx).settings
    names = {a.id: a.name for a in settings.agents}
    chosen = None if every else settings.agent(agent).id
    found = SandboxWorkspaces(settings.data_dir / "sandbox").listing(chosen)
    if as_json:
        echo(
            dump_json(
                [
                    {
                        "agent": names.get(w.agent_id, w.agent_id),
                        "agent_id": w.agent_id,
                        "key": w.key,
                        "compartment": w.compartment,
                        "size_bytes": w.size_bytes,
                        "files": w.files,
                        "modified": w.modified.isoformat() if w.modified else None,
                    }
                    for w in found
                ]
            )
        )
        return
    if not found:
        echo("no sandbox workspaces")
        return
    for w in found:
        echo(
            f"{w.key}  {names.get(w.agent_id, w.agent_id)}  {_compartment(w.compartment)}  "
            f"{w.size_bytes / 1024 / 1024:.1f} MiB  {w.files if w.files is not None else '?'} entries"
        )


@sandbox_app.command("show")
def sandbox_show(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="The workspace's key, as `persyn sandbox list` prints it.")],
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """What one sandbox workspace holds: each entry with its size (read from the workspace's
    archive; nothing is extracted or run). Without --agent, the agent whose workspace KEY is."""
    from persyn.core.errors import ToolError
    from persyn.tools.sandbox.workspace import SandboxWorkspaces

    settings = CliContext.of(ctx).settings
    workspaces = SandboxWorkspaces(settings.data_dir / "sandbox")
    owners = [settings.agent(agent).id] if agent is not None else workspaces.agent_ids()
    try:
        found = [(owner, e) for owner in owners if (e := workspaces.entries(owner, key)) is not None]
    except ToolError as exc:
        raise fail(str(exc)) from None
    if not found:
        raise fail(f"there is no sandbox workspace {key!r} (persyn sandbox list shows them)")
    if len(found) > 1:
        raise fail(f"several agents have a workspace {key!r}: name one with --agent")
    entries = found[0][1]
    if as_json:
        echo(dump_json([{"path": path, "size_bytes": size} for path, size in entries]))
        return
    for path, size in entries:
        echo(f"{size:>12}  {path}")
    if not entries:
        echo("(empty)")


@sandbox_app.command("reset")
def sandbox_reset(
    ctx: typer.Context,
    agent: AgentOption = None,
    workspace: WorkspaceOption = None,
    every: EveryAgentOption = False,
) -> None:
    """Delete the agent's sandbox workspaces (their files from earlier `run_code` tasks): all of
    them, or the one `--workspace KEY` names; `--all`: every agent's."""
    from persyn.tools.sandbox.workspace import SandboxWorkspaces

    settings = CliContext.of(ctx).settings
    workspaces = SandboxWorkspaces(settings.data_dir / "sandbox")
    if every and workspace is not None:
        raise fail("give --workspace KEY or --all, not both")
    if workspace is not None and (not workspace or "/" in workspace or workspace.startswith(".")):
        raise fail(f"{workspace!r} does not name a workspace (persyn sandbox list shows them)")
    names = {a.id: a.name for a in settings.agents}
    if every:  # every agent that has workspaces, configured or not
        chosen = [(agent_id, names.get(agent_id, agent_id)) for agent_id in workspaces.agent_ids()]
    else:
        one = settings.agent(agent)
        chosen = [(one.id, one.name)]
    total = 0
    for agent_id, name in chosen:
        removed = workspaces.remove(agent_id, workspace)
        if workspace is not None and not removed:
            raise fail(f"{name} has no sandbox workspace {workspace!r} (persyn sandbox list shows them)")
        total += removed
        if not every:
            echo(f"removed {removed} sandbox workspace{'' if removed == 1 else 's'} of {name}")
    if every:
        echo(f"removed {total} sandbox workspace{'' if total == 1 else 's'} of {len(chosen)} agent(s)")


def _compartment(described: dict[str, object] | None) -> str:
    if described is None:
        return "(compartment unknown)"
    whose = "own runs" if described.get("own") else "conversations"
    channels = ", ".join(str(c) for c in _items(described.get("channels"))) or "no channel"
    people = ", ".join(str(p) for p in _items(described.get("participant_ids"))) or "nobody"
    run_id = described.get("run_id")
    single = f", run {run_id}" if run_id else ""
    return f"{whose} on {channels} with {people}, {described.get('sensitivity')}{single}"


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []  # pyright: ignore[reportUnknownArgumentType]


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
