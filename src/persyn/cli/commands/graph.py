"""`persyn graph`: the knowledge graph, queried."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

__all__ = ["register"]


graph_app = command_group(
    "The agent's knowledge graph: entities and how they relate, learned from conversations "
    "(each fact with the channel it was learned on)."
)


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
    ctx: typer.Context,
    entity: Annotated[
        str, typer.Argument(metavar="ENTITY", help="An entity's name (or id, or a unique part of its name).")
    ],
    hops: Annotated[int, typer.Option("--hops", "-n", help="How many relations out to follow (1-6).")] = 1,
    limit: Annotated[int, typer.Option("--limit", help="At most this many relations, nearest first.")] = 50,
    channel: GraphChannelOption = None,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """An entity, what is known about it, and everything within N relations of it."""
    from persyn.ops.graph import graph_query as query

    cli = CliContext.of(ctx)
    settings = cli.settings
    found = run(query(settings, settings.agent(agent), entity, hops, limit, channel))
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
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(metavar="A", help="An entity's name (or id).")],
    target: Annotated[str, typer.Argument(metavar="B", help="Another entity's name (or id).")],
    max_hops: Annotated[int, typer.Option("--max-hops", help="Longest chain looked for (1-6).")] = 4,
    channel: GraphChannelOption = None,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """A shortest chain of relations between two entities (in either direction). Exits 1
    when they are not connected within --max-hops."""
    from persyn.ops.graph import graph_path as path

    cli = CliContext.of(ctx)
    settings = cli.settings
    found = run(path(settings, settings.agent(agent), source, target, max_hops, channel))
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
def graph_stats(ctx: typer.Context, agent: AgentOption = None) -> None:
    """How many entities, mentions and relations the agent's graph holds."""
    from persyn.ops.graph import graph_stats as stats

    cli = CliContext.of(ctx)
    settings = cli.settings
    counts = run(stats(settings, settings.agent(agent)))
    echo(", ".join(f"{count} {name}" for name, count in counts.items()))


def register(app: typer.Typer) -> None:
    app.add_typer(graph_app, name="graph")
