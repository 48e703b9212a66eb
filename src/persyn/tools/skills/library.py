"""Skills (SPEC §4.6) in the Agent Skills format: a folder named after the skill holding
`SKILL.md` — YAML front matter with `name` and `description`, then the instructions in
Markdown — and optionally `scripts/`, `references/` and `assets/`.

**Where they come from** (`SkillLibrary.for_agent`), in this order, the first folder of a name
winning: the skills shipped with persyn (installed into `data/skills/bundled`), the
deployment's `[skills] directories`, the agent's `[skills] agent_directories`, and the skills
the agent wrote itself (`data/skills/agents/AGENT_ID`). A folder whose `SKILL.md` does not
parse or validate is not offered; `persyn skills list` names it and why.

**Progressive disclosure.** Only each skill's name and description are in the stable prompt
prefix: the description of the `use_skill` tool lists them (so they cost tokens once per
call, like any tool definition, and the prefix stays cacheable until a skill is added).
`use_skill(name)` returns the instructions and the names of the bundled files;
`use_skill(name, file)` returns one of those files' text. Nothing else of a skill reaches the
model.

**Protected skills** (`[skills] protected`; the shipped `skill-authoring` by default) may be
used but not changed. Before a library is read, `guard` compares each protected skill's files
with its supplied version — the copy in the package for a shipped skill, else the snapshot
taken the first time the skill was seen (`data/skills/protected/NAME`) — and when they differ
(edited, a file added, the folder deleted) puts the supplied version back and appends the event
to `data/skills/events.jsonl` (and the log).

**Authoring.** `write_skill` validates a new skill (name, description, instructions, and text
files under `scripts/`, `references/`, `assets/` only) and writes it to the agent's own
folder; it is offered from the next model call on. It never replaces a skill that exists. What
the agent writes may carry what it heard, so an authored skill records the channel it was
written on (`metadata.channel`) and is offered — its name and description included — only
where that channel's memories could surface (`visible`: the same compartment); an operator's
view (`persyn skills`) sees them all.

**Scripts** are never run here: a skill's `scripts/` are files the model may read. They run in
the sandbox: `run_code`'s sandbox agent sees every skill the activation may use at
`/skills/NAME`, bind-mounted read-only from `Skill.folder` (`runtime/turn/agent_tools.py`,
`tools/sandbox/agent.py`), so a script runs there and nothing inside can change a skill.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field

from persyn.core.config.skills import SkillsConfig
from persyn.core.errors import InputError, ToolError
from persyn.tools.registry import Tool

__all__ = [
    "BUNDLED_SKILLS",
    "Skill",
    "SkillEvent",
    "SkillLibrary",
    "SkillProblem",
    "parse_skill",
    "skill_tools",
]

log = logging.getLogger(__name__)

BUNDLED_SKILLS = Path(__file__).with_name("bundled")
SKILL_FILE = "SKILL.md"
_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_MAX_NAME = 64
_MAX_DESCRIPTION = 1024
_MAX_INSTRUCTIONS = 50_000
_FILE_DIRS = ("scripts", "references", "assets")
_MIN_SHOWN = 32  # characters of a description always shown in the catalogue
_MAX_FILES = 20

Origin = Literal["bundled", "deployment", "agent", "authored"]


class Skill(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    folder: Path
    origin: Origin
    protected: bool = False
    channel: str | None = None  # an authored skill: the channel it was written on

    def files(self) -> list[str]:
        """The bundled files, as paths relative to the folder."""
        found: list[str] = []
        for sub in _FILE_DIRS:
            base = self.folder / sub
            if base.is_dir():
                found += [
                    p.relative_to(self.folder).as_posix() for p in sorted(base.rglob("*")) if p.is_file()
                ]
        return found


class SkillProblem(BaseModel):
    model_config = ConfigDict(frozen=True)

    folder: Path
    problem: str


class SkillEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: datetime
    skill: str
    change: Literal["edited", "deleted"]
    restored_from: str  # "bundled" or "snapshot"
    folder: str


def parse_skill(text: str, folder_name: str | None = None) -> tuple[str, str, str]:
    """(name, description, instructions) of a SKILL.md, or InputError naming what is wrong."""
    name, description, body, _ = _parse(text, folder_name)
    return name, description, body


def _parse(text: str, folder_name: str | None) -> tuple[str, str, str, dict[str, Any]]:
    if not text.startswith("---"):
        raise InputError("SKILL.md must start with YAML front matter between '---' lines")
    parts = re.split(r"^---[ \t]*$", text, maxsplit=2, flags=re.MULTILINE)
    if len(parts) < 3:
        raise InputError("SKILL.md's front matter has no closing '---' line")
    try:
        front = yaml.safe_load(parts[1])
    except yaml.YAMLError as exc:
        raise InputError(f"SKILL.md's front matter is not valid YAML: {exc}") from None
    if not isinstance(front, dict):
        raise InputError("SKILL.md's front matter must be a mapping with name and description")
    meta = cast(dict[str, Any], front)
    name, description = meta.get("name"), meta.get("description")
    _check_name(name)
    assert isinstance(name, str)
    if folder_name is not None and name != folder_name:
        raise InputError(f"the skill's name {name!r} differs from its folder's name {folder_name!r}")
    _check_description(description)
    assert isinstance(description, str)
    metadata = meta.get("metadata")
    extra = cast(dict[str, Any], metadata) if isinstance(metadata, dict) else {}
    return name, " ".join(description.split()), parts[2].strip(), extra


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InputError("a skill needs a name")
    if len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        raise InputError(
            f"invalid skill name {name!r}: 1 to {_MAX_NAME} lowercase letters, digits and single hyphens"
        )


def _check_description(description: object) -> None:
    if not isinstance(description, str) or not description.strip():
        raise InputError("a skill needs a description: it is how the skill is chosen")
    if len(description) > _MAX_DESCRIPTION:
        raise InputError(
            f"a skill's description is at most {_MAX_DESCRIPTION} characters, not {len(description)}"
        )


def _tree(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _replace(folder: Path, tree: dict[str, bytes]) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    for relative, data in tree.items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


@dataclass
class SkillLibrary:
    """The skills one agent may use, read from disk on every `scan` (cheap: one small file
    per skill), after `guard` has restored any protected skill that was changed."""

    sources: Sequence[tuple[Path, Origin]]
    authored: Path | None  # where write_skill writes; None = no authoring
    data: Path  # data/skills: bundled copies, protected snapshots, the event log
    protected: frozenset[str]
    max_file_chars: int = 20_000
    catalogue_chars: int = 3000
    # Which channels' authored skills this activation may see (None: all, for the operator).
    visible: Callable[[str], bool] | None = None
    channel: str | None = None  # where this activation is: what write_skill records
    problems: list[SkillProblem] = field(default_factory=list[SkillProblem])

    @classmethod
    def for_agent(
        cls,
        config: SkillsConfig,
        home: Path,
        agent_id: str,
        agent_name: str,
        *,
        channel: str | None = None,
        visible: Callable[[str], bool] | None = None,
    ) -> SkillLibrary:
        data = home / "data" / "skills"
        sources: list[tuple[Path, Origin]] = [(data / "bundled", "bundled")]
        deployment: Origin = "deployment"
        per_agent: Origin = "agent"
        sources.extend((home / Path(d).expanduser(), deployment) for d in config.directories)
        for name, directories in config.agent_directories.items():
            if name.lower() == agent_name.lower():
                sources.extend((home / Path(d).expanduser(), per_agent) for d in directories)
        authored = data / "agents" / agent_id
        sources.append((authored, "authored"))
        return cls(
            sources=sources,
            authored=authored if config.write else None,
            data=data,
            protected=frozenset(config.protected),
            max_file_chars=config.max_file_chars,
            catalogue_chars=config.catalogue_chars,
            visible=visible,
            channel=channel,
        )

    def fingerprint(self) -> tuple[tuple[str, int, int], ...]:
        """What changes when a skill's name or description may have: each SKILL.md's path,
        modification time and size (a stat per skill; for caching what the model is offered)."""
        marks: list[tuple[str, int, int]] = []
        for directory, _ in self.sources:
            for manifest in sorted(directory.glob(f"*/{SKILL_FILE}")) if directory.is_dir() else ():
                stat = manifest.stat()
                marks.append((str(manifest), stat.st_mtime_ns, stat.st_size))
        return tuple(marks)

    # protection ------------------------------------------------------------------------------
    def guard(self, now: datetime | None = None) -> list[SkillEvent]:
        """Put back every protected skill that differs from its supplied version; install the
        shipped skills the first time. Returns (and records) what was restored."""
        events: list[SkillEvent] = []
        bundled_home = self.data / "bundled"
        snapshots = self.data / "protected"
        found = {s.name: s.folder for s in self._read(restrict_to=self.protected)}
        for name in sorted(self.protected):
            shipped = BUNDLED_SKILLS / name
            if (shipped / SKILL_FILE).is_file():
                supplied, source, folder = _tree(shipped), "bundled", found.get(name, bundled_home / name)
            else:
                snapshot = snapshots / name
                if not snapshot.is_dir():
                    if name in found:  # first seen: this is the supplied version
                        _replace(snapshot / "files", _tree(found[name]))
                        (snapshot / "folder").write_text(str(found[name]))
                    continue
                supplied, source = _tree(snapshot / "files"), "snapshot"
                folder = found.get(name, Path((snapshot / "folder").read_text()))
            current = _tree(folder)
            if current == supplied:
                continue
            first_install = source == "bundled" and not current and not (snapshots / name).exists()
            _replace(folder, supplied)
            if source == "bundled":
                (snapshots / name).mkdir(parents=True, exist_ok=True)  # marks it installed
            if first_install:
                continue
            event = SkillEvent(
                at=now or datetime.now(UTC),
                skill=name,
                change="deleted" if not current else "edited",
                restored_from=source,
                folder=str(folder),
            )
            log.warning("protected skill %r was %s; the supplied version is restored", name, event.change)
            self.data.mkdir(parents=True, exist_ok=True)
            with (self.data / "events.jsonl").open("a", encoding="utf-8") as out:
                out.write(event.model_dump_json() + "\n")
            events.append(event)
        return events

    def events(self) -> list[SkillEvent]:
        path = self.data / "events.jsonl"
        if not path.exists():
            return []
        return [
            SkillEvent.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()
        ]

    # reading --------------------------------------------------------------------------------
    def _read(self, restrict_to: frozenset[str] | None = None) -> list[Skill]:
        skills: dict[str, Skill] = {}
        problems: list[SkillProblem] = []
        for directory, origin in self.sources:
            if not directory.is_dir():
                continue
            for folder in sorted(p for p in directory.iterdir() if p.is_dir()):
                if restrict_to is not None and folder.name not in restrict_to:
                    continue
                manifest = folder / SKILL_FILE
                try:
                    name, description, _, metadata = _parse(manifest.read_text(encoding="utf-8"), folder.name)
                except FileNotFoundError:
                    problems.append(SkillProblem(folder=folder, problem=f"no {SKILL_FILE}"))
                    continue
                except (InputError, UnicodeDecodeError) as exc:
                    problems.append(SkillProblem(folder=folder, problem=str(exc)))
                    continue
                if name in skills:
                    problems.append(
                        SkillProblem(folder=folder, problem=f"{name!r} is already {skills[name].folder}")
                    )
                    continue
                written_on = metadata.get("channel") if origin == "authored" else None
                skill = Skill(
                    name=name,
                    description=description,
                    folder=folder,
                    origin=origin,
                    protected=name in self.protected,
                    channel=written_on if isinstance(written_on, str) else None,
                )
                if restrict_to is None and not self._shown(skill):
                    continue  # written in another compartment: not even its name
                skills[name] = skill
        if restrict_to is None:
            self.problems = problems
        return sorted(skills.values(), key=lambda s: s.name)

    def _shown(self, skill: Skill) -> bool:
        return skill.channel is None or self.visible is None or self.visible(skill.channel)

    def peek(self) -> list[Skill]:
        """Every valid skill as the folders are now, restoring nothing (for checks)."""
        return self._read()

    def scan(self) -> list[Skill]:
        """Every valid skill, by name, after restoring protected ones."""
        self.guard()
        return self._read()

    def get(self, name: str) -> Skill:
        for skill in self._read():
            if skill.name == name:
                return skill
        raise ToolError(f"there is no skill named {name!r}")

    def instructions(self, name: str) -> str:
        skill = self.get(name)
        _, _, body = parse_skill((skill.folder / SKILL_FILE).read_text(encoding="utf-8"), name)
        return body

    def read_file(self, name: str, relative: str) -> str:
        skill = self.get(name)
        if relative not in skill.files():  # only the listed files: no '..', no links out
            raise ToolError(
                f"skill {name!r} has no file {relative!r}; its files: {', '.join(skill.files()) or 'none'}"
            )
        data = (skill.folder / relative).read_bytes()
        if b"\x00" in data[:4096]:
            return f"({relative} is a binary file of {len(data):,} bytes)"
        text = data.decode("utf-8", errors="replace")
        return text[: self.max_file_chars]

    # authoring ------------------------------------------------------------------------------
    def write(self, name: str, description: str, instructions: str, files: dict[str, str]) -> Skill:
        if self.authored is None:
            raise ToolError("writing skills is turned off ([skills] write = false)")
        _check_name(name)
        _check_description(description)
        if not instructions.strip():
            raise InputError("a skill needs instructions")
        if len(instructions) > _MAX_INSTRUCTIONS:
            raise InputError(f"instructions are at most {_MAX_INSTRUCTIONS} characters")
        if len(files) > _MAX_FILES:
            raise InputError(f"at most {_MAX_FILES} files per skill")
        for relative, text in files.items():
            parts = PurePosixPath(relative).parts
            if len(parts) < 2 or parts[0] not in _FILE_DIRS or ".." in parts or relative.startswith("/"):
                raise InputError(f"file {relative!r} must be under scripts/, references/ or assets/")
            if len(text) > self.max_file_chars:
                raise InputError(f"file {relative!r} is over {self.max_file_chars} characters")
        if name in self.protected or any(s.name == name for s in self._read(restrict_to=frozenset({name}))):
            raise InputError(f"the skill name {name!r} is taken; choose another name")
        front_matter: dict[str, Any] = {"name": name, "description": " ".join(description.split())}
        if self.channel is not None:
            front_matter["metadata"] = {"channel": self.channel}
        front = yaml.safe_dump(front_matter, sort_keys=False)
        folder = self.authored / name
        tree = {SKILL_FILE: f"---\n{front}---\n\n{instructions.strip()}\n".encode()}
        tree |= {relative: text.encode() for relative, text in files.items()}
        _replace(folder, tree)
        return self.get(name)


# tools -----------------------------------------------------------------------------------------
class UseSkillInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=_MAX_NAME, description="The skill's name.")
    file: str | None = Field(default=None, max_length=300, description="Read this file of the skill instead.")


class UseSkillOutput(BaseModel):
    skill: str
    instructions: str = ""
    files: list[str] = Field(default_factory=list[str])
    file: str | None = None
    content: str = ""


class WriteSkillInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=_MAX_NAME, description="Lowercase, hyphenated, new.")
    description: str = Field(max_length=_MAX_DESCRIPTION, description="What it does and when to use it.")
    instructions: str = Field(max_length=_MAX_INSTRUCTIONS, description="The steps, in Markdown.")
    files: dict[str, str] = Field(
        default_factory=dict[str, str], description="Extra text files, e.g. {'scripts/x.py': '...'}."
    )


class WriteSkillOutput(BaseModel):
    written: str
    folder: str


def catalogue(skills: Sequence[Skill], budget: int) -> str:
    """One line per skill, `- name: description`, in about `budget` characters: when the
    descriptions do not all fit, each is cut to an equal share (at least `_MIN_SHOWN`
    characters, at a word), so fifty skills cost what a few long tool definitions would."""
    fixed = sum(len(skill.name) + 5 for skill in skills)
    share = max(_MIN_SHOWN, (budget - fixed) // max(len(skills), 1))
    lines: list[str] = []
    for skill in skills:
        shown = skill.description
        if len(shown) > share:
            shown = shown[:share].rsplit(" ", 1)[0].rstrip(",;:") + "..."
        lines.append(f"- {skill.name}: {shown}")
    return "\n".join(lines)


def skill_tools(library: SkillLibrary) -> list[Tool[Any, Any]]:
    """`use_skill` (when there is a skill) and `write_skill` (when authoring is on)."""
    skills = library.scan()
    tools: list[Tool[Any, Any]] = []
    if skills:

        async def use(args: UseSkillInput) -> UseSkillOutput:
            if args.file is not None:
                return UseSkillOutput(
                    skill=args.name, file=args.file, content=library.read_file(args.name, args.file)
                )
            skill = library.get(args.name)
            return UseSkillOutput(
                skill=skill.name, instructions=library.instructions(skill.name), files=skill.files()
            )

        tools.append(
            Tool(
                name="use_skill",
                description=(
                    "Load a skill's instructions when a task matches one:\n"
                    + catalogue(skills, library.catalogue_chars)
                ),
                input_model=UseSkillInput,
                output_model=UseSkillOutput,
                handler=use,
            )
        )
    if library.authored is not None:

        async def write(args: WriteSkillInput) -> WriteSkillOutput:
            skill = library.write(args.name, args.description, args.instructions, args.files)
            return WriteSkillOutput(written=skill.name, folder=str(skill.folder))

        tools.append(
            Tool(
                name="write_skill",
                description="Save a new skill of yours for later tasks (use_skill skill-authoring first).",
                input_model=WriteSkillInput,
                output_model=WriteSkillOutput,
                handler=write,
            )
        )
    return tools
