"""`persyn sandbox`: what isolates `run_code`, probed from inside; an agent's workspace reset."""

from __future__ import annotations

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, fail, run
from persyn.cli.help import command_group
from persyn.cli.render import dump_json, echo

__all__ = ["register"]

sandbox_app = command_group(
    "The sandbox `run_code` delegates to: its provider, probes of its isolation, the agents' workspaces."
)


@sandbox_app.command("check")
def sandbox_check(ctx: typer.Context, agent: AgentOption = None, as_json: JsonOption = False) -> None:
    """Run probes inside the agent's sandbox (write outside the workspace, reach the host's loopback,
    open an IP socket, read the host's home) and print what is isolated.

    Exits 1 when there is no provider or a probe got out that the configuration does not allow."""
    from persyn.runtime.sandbox_ops import check_sandbox

    cli = CliContext.of(ctx)
    settings = cli.settings
    report = run(check_sandbox(settings, settings.agent(agent).id))
    if as_json:
        echo(dump_json(report.model_dump(mode="json")))
    else:
        echo(f"provider: {report.reason}" if report.provider else f"no sandbox provider: {report.reason}")
        if report.workspace:
            echo(f"workspace: {report.workspace}")
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


@sandbox_app.command("reset")
def sandbox_reset(ctx: typer.Context, agent: AgentOption = None) -> None:
    """Delete the agent's sandbox workspace (its files from earlier `run_code` tasks)."""
    from persyn.tools.sandbox_agent import SandboxWorkspaces

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent)
    removed = SandboxWorkspaces(settings.data_dir / "sandbox").remove(chosen.id)
    echo(f"{'removed' if removed else 'no'} sandbox workspace of {chosen.name}")


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
