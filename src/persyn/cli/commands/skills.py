"""`persyn skills`: the skills an agent may use, one skill in full, and a refresh that checks
every skill folder and puts back protected skills that were changed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, fail
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

if TYPE_CHECKING:
    from persyn.tools.skills.library import SkillLibrary

__all__ = ["register"]

skills_app = command_group(
    "Skills (folders with a SKILL.md): the model sees their names and descriptions and loads one with use_skill."
)


def _library(ctx: typer.Context, agent: str | None) -> SkillLibrary:
    from persyn.runtime.turn.agent_tools import agent_skills

    settings = CliContext.of(ctx).settings
    library = agent_skills(settings, settings.agent(agent))
    if library is None:
        raise fail("skills are turned off ([skills] enabled = false)", 2)
    return library


@skills_app.command("list")
def skills_list(ctx: typer.Context, agent: AgentOption = None, as_json: JsonOption = False) -> None:
    """Every skill the agent is offered (name, where it comes from, description) and the folders that are not skills."""
    library = _library(ctx, agent)
    restored = library.guard()
    skills = library.scan()
    if as_json:
        echo(
            dump_json(
                {
                    "skills": [s.model_dump(mode="json") for s in skills],
                    "problems": [p.model_dump(mode="json") for p in library.problems],
                    "restored": [e.model_dump(mode="json") for e in restored],
                }
            )
        )
        return
    for event in restored:
        echo(f"restored protected skill {event.skill} ({event.change}) in {event.folder}")
    for skill in skills:
        mark = ", protected" if skill.protected else ""
        echo(one_line(f"{skill.name}  ({skill.origin}{mark})  {skill.description}")[:160])
    for problem in library.problems:
        echo(f"not a skill: {problem.folder}: {problem.problem}")
    if not skills:
        echo("no skills")


@skills_app.command("show")
def skills_show(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The skill's name, as `persyn skills list` shows it.")
    ],
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """One skill: its description, its instructions (what use_skill returns) and its files."""
    from persyn.core.errors import ToolError

    library = _library(ctx, agent)
    library.guard()
    try:
        skill = library.get(name)
    except ToolError as exc:
        raise fail(str(exc), 2) from None
    instructions = library.instructions(name)
    if as_json:
        data = skill.model_dump(mode="json") | {"instructions": instructions, "files": skill.files()}
        echo(dump_json(data))
        return
    mark = ", protected" if skill.protected else ""
    echo(f"{skill.name}  ({skill.origin}{mark})  {skill.folder}")
    echo(skill.description)
    echo("")
    echo(instructions)
    if skill.files():
        echo("")
        echo("files: " + ", ".join(skill.files()))


@skills_app.command("refresh")
def skills_refresh(ctx: typer.Context, agent: AgentOption = None) -> None:
    """Read every skill folder again now: put back protected skills that were changed and report folders that are not valid skills.

    Skills are read from disk before every model call, so a change is offered from the next one."""
    library = _library(ctx, agent)
    restored = library.guard()
    skills = library.scan()
    for event in restored:
        echo(f"restored protected skill {event.skill} ({event.change}) in {event.folder}")
    for problem in library.problems:
        echo(f"not a skill: {problem.folder}: {problem.problem}")
    echo(
        f"{len(skills)} skill(s) offered, {len(library.problems)} folder(s) skipped, {len(restored)} restored"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(skills_app, name="skills")
