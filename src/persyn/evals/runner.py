"""Drives the continuity week through the real `persyn` commands (issue 38).

Nothing here calls the runtime's internals. The runner makes a scratch deployment with
`persyn init`, then for each day starts `persyn --now DAY run` (the daemon: dispatcher,
reminders, heartbeat, consolidation and culling are its own loops), sends the day's messages
with `persyn --now T send`, and stops the daemon with SIGTERM at the end of the day. The
clock of a day starts at `start + (day - 1)` days and moves on in real time, as `--now` does.
Between days the daemon's restart on the next day's clock is what closes the idle
conversations and consolidates them; the runner only waits, reading the store, until that
work is done before it speaks again. A `restart` step stops every process and starts them
again mid-day. Each daemon runs under a tether (`persyn.evals.tether`) that stops it when the
eval ends, even by SIGKILL, so no scratch daemon outlives its eval. What it did is written to `run.json` beside the scratch home: the evidence
the checkers read alongside the store, the traces, the activity log and the usage ledger.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from persyn.core.config import load_settings
from persyn.core.errors import PersynError
from persyn.evals.group import ROOM, IrcPerson, IrcRoom, ngircd_binary
from persyn.evals.scenario import Scenario, Step
from persyn.store import open_store
from persyn.store.base import Store
from persyn.store.ports.activity import ActivityPort
from persyn.store.ports.dialog import DialogHistoryPort
from persyn.store.ports.directory import DirectoryPort
from persyn.store.ports.jobs import ConsolidationStatus, JobsPort
from persyn.store.ports.memory import MemoryPort

__all__ = ["EvalRunError", "Happening", "IdentitySnapshot", "RunLog", "run_week"]

_BANNER = "persyn is serving"
_RUN_LOG = "run.json"
_TETHER = (sys.executable, "-m", "persyn.evals.tether")
# The scenario's channel said through the daemon's real web API (`[web]`, a key per person).
WEB = "web"
_WEB_URL = re.compile(r"web channel on (http://\S+)")
# The scenario's channel said in a real IRC room (a private ngircd), the group chat.
IRC = "irc"
_WEB_SETTINGS = {"PERSYN_WEB__ENABLED": "true", "PERSYN_WEB__HOST": "127.0.0.1", "PERSYN_WEB__PORT": "0"}
# How long a line waits for its answer: the scripted double answers in a second; a model on
# this machine (the bundled `local:` one on a shared CPU: a few tokens a second, one request
# at a time, the day's consolidation queued with the turns) takes minutes. Behaviour mode
# also gives each model request and each web turn that long, unless the scenario says.
_REPLY_SECONDS = 120.0
_MODEL_REPLY_SECONDS = 1800.0
_MODEL_SETTINGS = {
    "PERSYN_MODELS__REQUEST_TIMEOUT_SECONDS": "900",
    "PERSYN_WEB__REPLY_TIMEOUT_SECONDS": str(int(_MODEL_REPLY_SECONDS)),
}


class EvalRunError(PersynError):
    """The week could not be driven (a daemon that would not start, a send that failed)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Happening(_Frozen):
    """One step as it happened, on the moved clock."""

    day: int
    at: datetime
    action: str  # say | restart | heartbeat | wait | day
    who: str | None = None
    channel: str | None = None
    probe: str | None = None
    text: str | None = None
    reply: str | None = None  # the reply, or the reason for silence, as the surface gave it
    detail: str | None = None
    # Where it was said, "service:channel" as the store names it (web: the speaker's key id).
    address: str | None = None


class IdentitySnapshot(_Frozen):
    """Who the agent is, read from its configuration and its store at one moment."""

    taken: str  # "before restart" | "after restart"
    at: datetime
    agent_id: str
    name: str
    persona: str
    contacts: tuple[str, ...]
    memory_ids: tuple[str, ...]
    facts: int


class RunLog(_Frozen):
    scenario: str
    home: str
    agent_id: str
    start: datetime
    happenings: tuple[Happening, ...]
    snapshots: tuple[IdentitySnapshot, ...]
    wall_seconds: float
    environment: dict[str, str]  # the PERSYN_ settings the last daemon ran with (no secrets)
    mode: str = "mechanics"  # behaviour: every task ran on `model`
    model: str | None = None
    copy_of: str | None = None  # the live deployment's home the agent was copied from

    def probe(self, name: str) -> Happening | None:
        return next((h for h in self.happenings if h.probe == name), None)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> RunLog:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))


def run_log_path(work: Path) -> Path:
    return work / _RUN_LOG


@dataclass
class _Week:
    scenario: Scenario
    work: Path
    home: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    overrides: dict[str, str] = field(default_factory=dict[str, str])
    daemon: subprocess.Popen[bytes] | None = None
    day_clock: datetime | None = None
    day_started: float = 0.0
    happenings: list[Happening] = field(default_factory=list[Happening])
    snapshots: list[IdentitySnapshot] = field(default_factory=list[IdentitySnapshot])
    # Behaviour mode: the model every task runs on (the scenario's scripted rules unused).
    model: str | None = None
    # The web channel: this day's daemon's URL, and each speaker's key (secret, id).
    web_url: str | None = None
    web_keys: dict[str, tuple[str, str]] = field(default_factory=dict[str, tuple[str, str]])
    # The group chat: the IRC server and each speaker's client in its room.
    room: IrcRoom | None = None
    irc: dict[str, IrcPerson] = field(default_factory=dict[str, IrcPerson])

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.home = self.work / "home"
        script = self.work / "rules.json"
        script.write_text(self.scenario.rules_json(), encoding="utf-8")
        self.env = self.scenario.environment(script)
        if self.model is not None:
            self.env = {**_MODEL_SETTINGS, **self.env, "PERSYN_MODELS__DEFAULT": self.model}
        if any(step.channel == WEB for day in self.scenario.days for step in day.steps if step.say):
            self.env.update(_WEB_SETTINGS)

    @property
    def reply_seconds(self) -> float:
        """How long a line waits for its answer (and a `wait` step is stretched by)."""
        return _REPLY_SECONDS if self.model is None else _MODEL_REPLY_SECONDS

    def patience(self, seconds: float) -> float:
        """A scenario's wait, stretched for a model that answers in minutes, not seconds."""
        return seconds * self.reply_seconds / _REPLY_SECONDS

    # processes -------------------------------------------------------------------------
    def environ(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PERSYN_")}
        if self.model is None:
            for secret in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
                base.pop(secret, None)  # mechanics mode never reaches a hosted model
        return {**base, "PERSYN_HOME": str(self.home), **self.env, **self.overrides}

    def now(self) -> datetime:
        assert self.day_clock is not None
        return self.day_clock + timedelta(seconds=time.monotonic() - self.day_started)

    def persyn(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        moved = ("--now", self.now().isoformat()) if self.day_clock is not None else ()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "persyn", *moved, *args],
                capture_output=True,
                env=self.environ(),
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise EvalRunError(f"`persyn {' '.join(args)}` took longer than {timeout:.0f} s") from exc
        return subprocess.CompletedProcess(
            done.args,
            done.returncode,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )

    def must(self, *args: str, timeout: float = 120) -> str:
        done = self.persyn(*args, timeout=timeout)
        if done.returncode != 0:
            raise EvalRunError(f"`persyn {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def start_daemon(self) -> None:
        # A `local:` model's llama.cpp server loads before the daemon says it is serving.
        timeout = 180 if self.model is None else 600
        log_path = self.work / "daemon.log"
        before = log_path.read_text(errors="replace").count(_BANNER) if log_path.exists() else 0
        with open(log_path, "ab") as log:
            # Tethered: the daemon is stopped when this process ends, however it ends.
            self.daemon = subprocess.Popen(
                [*_TETHER, sys.executable, "-m", "persyn", "--now", self.now().isoformat(), "run"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                env=self.environ(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            if text.count(_BANNER) > before:
                served = _WEB_URL.findall(text)
                self.web_url = served[-1] if served and self.env.get("PERSYN_WEB__ENABLED") else None
                return
            if self.daemon.poll() is not None:
                raise EvalRunError(f"`persyn run` exited with {self.daemon.returncode}:\n{text[-2000:]}")
            time.sleep(0.05)
        self.stop_daemon()
        raise EvalRunError(f"`persyn run` did not start within {timeout:.0f} s (see {log_path})")

    def stop_daemon(self) -> None:
        daemon, self.daemon = self.daemon, None
        if daemon is None:
            return
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)  # the tether passes it on to the daemon
            try:
                # The tether itself kills a daemon that has not stopped within a minute.
                daemon.wait(timeout=90)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        if daemon.stdin is not None:
            daemon.stdin.close()

    # one day ------------------------------------------------------------------------
    def begin_day(self, day_clock: datetime) -> None:
        self.day_clock = day_clock
        self.day_started = time.monotonic()

    def note(self, day: int, action: str, step: Step | None = None, **fields: str | None) -> Happening:
        happening = Happening(
            day=day,
            at=self.now(),
            action=action,
            who=step.who if step is not None and step.say is not None else None,
            channel=step.channel if step is not None and step.say is not None else None,
            probe=step.probe if step is not None else None,
            **fields,
        )
        self.happenings.append(happening)
        return happening


async def run_week(
    scenario: Scenario,
    work: Path,
    progress: Callable[[str], None] = lambda _: None,
    *,
    model: str | None = None,
    copy_of: Path | None = None,
    group_chat: str = "auto",
) -> RunLog:
    """Drive `scenario` in a scratch deployment under `work` and return what happened;
    with `model` (behaviour mode) every task runs on it instead of the scripted double;
    with `copy_of` (a live deployment's home) the agent is a copy of that deployment's
    agent named `scenario.agent`, its store copied whole (`persyn store copy`). The group
    chat (the scenario's `irc` channel) is a real IRC room (`group_chat="irc"`), said through
    `persyn send --channel irc` (`"send"`), or the room when ngircd is installed (`"auto"`)."""
    began = time.monotonic()
    week = await asyncio.to_thread(_Week, scenario, work, model=model)
    try:
        return await _run(week, progress, copy_of, began, group_chat)
    finally:
        for person in week.irc.values():
            await person.close()
        if week.room is not None:
            await asyncio.to_thread(week.room.stop)


async def _run(
    week: _Week, progress: Callable[[str], None], copy_of: Path | None, began: float, group_chat: str
) -> RunLog:
    scenario, work = week.scenario, week.work
    if group_chat == "send" or (group_chat == "auto" and ngircd_binary() is None):
        if group_chat == "auto" and _group_speakers(week):
            progress(
                "ngircd is not installed: the group chat is said through `persyn send --channel irc`, "
                "not a real IRC room (apt install ngircd for one)"
            )
    else:
        await _open_the_room(week)
    known: set[str] = set()
    if copy_of is not None:
        known = await asyncio.to_thread(_copy_deployment, week, copy_of)
    for name in (scenario.agent, *scenario.others):
        if name.casefold() not in known:
            await asyncio.to_thread(week.must, "init", "--name", name)
    settings = load_settings(week.home, environ=week.environ())
    agent_id = settings.agent(scenario.agent).id
    today = datetime.now(UTC).replace(hour=scenario.start_hour, minute=0, second=0, microsecond=0)
    start = today + timedelta(days=1)
    store = open_store(settings.database_url)
    await store.setup()
    try:
        if not all(
            isinstance(store, port)
            for port in (JobsPort, MemoryPort, DirectoryPort, ActivityPort, DialogHistoryPort)
        ):
            raise EvalRunError("the eval needs a store with consolidation jobs, memory and a directory")
        if copy_of is not None:
            start = await _after_the_copy(store, agent_id, start, scenario.start_hour)
        assert isinstance(store, DirectoryPort)
        known_people = {p.display_name.casefold() for p in await store.list_persons(agent_id)}
        await asyncio.to_thread(_make_web_keys, week, known_people)
        for number, day in enumerate(scenario.days, start=1):
            week.begin_day(start + timedelta(days=number - 1))
            progress(f"day {number}: {week.now():%Y-%m-%d %H:%M} UTC")
            await _start(week)
            try:
                # A model on this machine consolidates a day in minutes, not seconds.
                settled = await _wait_settled(
                    store, agent_id, week.now(), week.patience(120), lenient=week.model is not None
                )
                week.note(number, "day", detail=settled)
                for step in day.steps:
                    await _do(week, store, agent_id, number, step)
            finally:
                await asyncio.to_thread(week.stop_daemon)
    finally:
        await asyncio.to_thread(week.stop_daemon)
        await store.close()
    log = RunLog(
        scenario=scenario.name,
        home=str(week.home),
        agent_id=agent_id,
        start=start,
        happenings=tuple(week.happenings),
        snapshots=tuple(week.snapshots),
        wall_seconds=round(time.monotonic() - began, 1),
        environment={k: v for k, v in week.environ().items() if k.startswith("PERSYN_")},
        mode="mechanics" if week.model is None else "behaviour",
        model=week.model,
        copy_of=None if copy_of is None else str(copy_of),
    )
    await asyncio.to_thread(log.save, run_log_path(work))
    return log


async def _after_the_copy(store: Store, agent_id: str, start: datetime, hour: int) -> datetime:
    """A copied agent's week starts no earlier than the day after its last conversation began
    (a deployment that itself lived on a moved clock may be ahead of today)."""
    assert isinstance(store, DialogHistoryPort)
    conversations = await store.list_conversations(agent_id, limit=10_000)
    if not conversations:
        return start
    last = max(c.started_at for c in conversations)
    after = last.replace(hour=hour, minute=0, second=0, microsecond=0) + timedelta(days=1)
    return max(start, after)


def _copy_deployment(week: _Week, live_home: Path) -> set[str]:
    """Make the scratch home a copy of the deployment at `live_home`: its configuration file
    and every row of its store (read, never written: `persyn store copy` takes one snapshot).
    The copy's store is always the scratch SQLite file, whatever backend the live one uses.
    Returns the (casefolded) names of the agents the copy already has."""
    live = load_settings(live_home, environ={})
    if week.scenario.agent.casefold() not in {a.name.casefold() for a in live.agents}:
        names = ", ".join(a.name for a in live.agents) or "none"
        raise EvalRunError(f"no agent named {week.scenario.agent!r} at {str(live_home)!r} (agents: {names})")
    (week.home / "data").mkdir(parents=True, exist_ok=True)
    config = live_home / "persyn.toml"
    if config.is_file():
        (week.home / "persyn.toml").write_bytes(config.read_bytes())
    scratch_url = f"sqlite:///{week.home / 'data' / 'persyn.db'}"
    week.env["PERSYN_STORAGE_URL"] = scratch_url
    week.must("store", "copy", "--from", live.database_url, "--to", scratch_url, timeout=600)
    return {a.name.casefold() for a in live.agents}


def _group_speakers(week: _Week) -> set[str]:
    return {s.who for d in week.scenario.days for s in d.steps if s.say and s.channel == IRC}


async def _open_the_room(week: _Week) -> None:
    """When the scenario has people speak on the IRC channel: start the room's server, have
    the agent (only it) join the room through its IRC adapter, and connect each speaker."""
    speakers = _group_speakers(week)
    if not speakers:
        return
    week.room = IrcRoom(week.work / "irc")
    try:
        await asyncio.to_thread(week.room.start)
    except PersynError as exc:
        raise EvalRunError(str(exc)) from exc
    week.env.update(
        {
            "PERSYN_CHANNELS__IRC__SERVER": "127.0.0.1",
            "PERSYN_CHANNELS__IRC__PORT": str(week.room.port),
            "PERSYN_CHANNELS__IRC__TLS": "false",
            "PERSYN_CHANNELS__IRC__CHANNELS": json.dumps([ROOM]),
            "PERSYN_CHANNELS__IRC__AGENTS": json.dumps([week.scenario.agent]),
        }
    )
    for who in sorted(speakers):
        person = IrcPerson(who)
        week.irc[who] = person
        await person.connect(week.room.port)


async def _start(week: _Week) -> None:
    """Start the daemon; with a group chat, wait until the agent is in the room."""
    await asyncio.to_thread(week.start_daemon)
    if week.irc and not await next(iter(week.irc.values())).await_present(week.scenario.agent):
        raise EvalRunError(f"{week.scenario.agent} did not join {ROOM} (see daemon.log)")


async def _say_in_the_room(week: _Week, day: int, step: Step) -> Happening:
    """Say the line in the IRC room, addressed to the agent by name as people do there; its
    answer is what it said in the room next."""
    assert step.say is not None
    line = f"{week.scenario.agent}: {step.say}"
    at = week.now()
    reply = await week.irc[step.who].say(line, week.scenario.agent, timeout=week.reply_seconds)
    shown = reply if reply is not None else f"(nothing said in the room within {week.reply_seconds:.0f} s)"
    return _said(day, at, step, line, shown, f"irc:{ROOM}")


def _said(day: int, at: datetime, step: Step, text: str, reply: str, address: str) -> Happening:
    """A `say` step as it happened: the line as said, its answer, where it was said."""
    return Happening(
        day=day,
        at=at,
        action="say",
        who=step.who,
        channel=step.channel,
        probe=step.probe,
        text=text,
        reply=reply,
        address=address,
    )


def _make_web_keys(week: _Week, known: set[str]) -> None:
    """A web API key for each person the scenario has speak on the web channel, named after
    them; one the agent already knows (a copied agent) is the contact the key speaks as."""
    speakers = {s.who for d in week.scenario.days for s in d.steps if s.say and s.channel == WEB}
    for who in sorted(speakers):
        tie = ("--agent", week.scenario.agent, "--contact", who) if who.casefold() in known else ()
        made = json.loads(week.must("web", "keys", "create", "--name", who, *tie, "--json"))
        week.web_keys[who] = (str(made["key"]), str(made["id"]))
    # "{web:NAME}" in a setting (say, a channel group) is NAME's web conversation, "web:KEY-ID".
    for who, (_secret, key_id) in week.web_keys.items():
        week.env = {k: v.replace(f"{{web:{who}}}", f"web:{key_id}") for k, v in week.env.items()}


async def _say_on_the_web(week: _Week, day: int, step: Step) -> Happening:
    """POST the line to the daemon's OpenAI-compatible endpoint with the speaker's key, as
    any client would; the answer (or the reason for silence) is what the surface returned."""
    assert step.say is not None
    if week.web_url is None:
        raise EvalRunError(f"day {day}: the daemon did not serve the web channel (see daemon.log)")
    secret, key_id = week.web_keys[step.who]
    at = week.now()
    body = {"model": week.scenario.agent, "messages": [{"role": "user", "content": step.say}]}
    try:
        async with httpx.AsyncClient(base_url=week.web_url, timeout=week.reply_seconds + 30) as client:
            answer = await client.post(
                "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
            )
    except httpx.HTTPError as exc:
        raise EvalRunError(f"day {day}: the web channel did not answer: {exc}") from exc
    if answer.status_code != 200:
        raise EvalRunError(f"day {day}: the web channel answered {answer.status_code}: {answer.text[:400]}")
    reply = str(answer.json()["choices"][0]["message"]["content"])
    return _said(day, at, step, step.say, reply, f"web:{key_id}")


async def _do(week: _Week, store: Store, agent_id: str, day: int, step: Step) -> None:
    if step.say is not None and step.channel == WEB:
        week.happenings.append(await _say_on_the_web(week, day, step))
    elif step.say is not None and step.channel == IRC and week.room is not None:
        week.happenings.append(await _say_in_the_room(week, day, step))
    elif step.say is not None:
        at = week.now()
        done = await asyncio.to_thread(
            week.persyn,
            "send",
            "--agent",
            week.scenario.agent,
            "--as",
            step.who,
            "--channel",
            step.channel,
            "--timeout",
            f"{week.reply_seconds:.0f}",
            step.say,
            timeout=week.reply_seconds + 60,
        )
        if done.returncode != 0:
            raise EvalRunError(
                f"`persyn send` failed on day {day} ({done.returncode}): {done.stderr.strip()}"
            )
        week.happenings.append(_said(day, at, step, step.say, done.stdout.strip(), f"cli:{step.channel}"))
    elif step.restart:
        await asyncio.to_thread(week.stop_daemon)
        week.snapshots.append(await _identity(week, store, agent_id, "before restart"))
        week.overrides.update(
            {
                "PERSYN_" + k.upper().replace(".", "__"): v.replace("{work}", str(week.work))
                for k, v in step.config.items()
            }
        )
        await _start(week)
        week.snapshots.append(await _identity(week, store, agent_id, "after restart"))
        week.note(day, "restart", step, detail="every process stopped (SIGTERM) and started again")
    elif step.heartbeat == "delete":
        whose = step.agent or week.scenario.agent
        shown = await asyncio.to_thread(week.must, "heartbeat", "delete", "--agent", whose)
        week.note(day, "heartbeat", step, detail=shown.strip())
    elif step.wait == "reminder":
        assert isinstance(store, ActivityPort)
        deadline = time.monotonic() + week.patience(step.timeout_seconds)
        while time.monotonic() < deadline:
            if await store.recent_activity(agent_id, limit=1, kind="reminder"):
                break
            await asyncio.sleep(0.3)
        ran = await store.recent_activity(agent_id, limit=5, kind="reminder")
        week.note(day, "wait", step, detail=f"{len(ran)} reminder run(s) logged")
    elif step.wait == "agents":
        count = await _quiet_between_agents(
            store, agent_id, week.patience(step.timeout_seconds), quiet=week.patience(6.0)
        )
        week.note(day, "wait", step, detail=f"{count} message(s) between the agents, then quiet")


async def _quiet_between_agents(store: Store, agent_id: str, timeout: float, quiet: float = 6.0) -> int:
    """Wait until the agents' exchange has started and nothing was said in it for `quiet`
    seconds (or `timeout` passed); the number of its messages."""
    assert isinstance(store, DialogHistoryPort)
    deadline = time.monotonic() + timeout
    count, changed = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = 0
        for conversation in await store.list_conversations(agent_id, limit=1000):
            if conversation.service == "agent":
                now += len(await store.recent_messages(agent_id, conversation.id, limit=1000))
        if now != count:
            count, changed = now, time.monotonic()
        elif count > 0 and time.monotonic() - changed >= quiet:
            break
        await asyncio.sleep(0.3)
    return max(count, 0)


async def _wait_settled(
    store: Store, agent_id: str, before: datetime, timeout: float = 120, *, lenient: bool = False
) -> str:
    """Wait until the conversations begun before `before` are closed and consolidated; what
    to note of it. A consolidation that failed counts as settled: the daemon degrades so (the
    dialog kept, its sweep retrying later), and a small model's malformed rating must not stop
    the week. Past `timeout` the week stops, unless `lenient` (behaviour mode: a model on a
    busy machine may take longer than any bound), where the day goes on and says so."""
    deadline = time.monotonic() + timeout
    while (failed := await _unsettled(store, agent_id, before)) is None:
        if time.monotonic() > deadline:
            late = f"the conversations before {before:%Y-%m-%d %H:%M} were not consolidated in time"
            if not lenient:
                raise EvalRunError(late)
            return f"daemon started; {late} ({timeout:.0f} s): the day goes on"
        await asyncio.sleep(0.3)
    if failed:
        return (
            f"daemon started; the day before is consolidated, {len(failed)} of it failed and is left "
            f"to the daemon's retries: {failed[0][:300]}"
        )
    return "daemon started; the day before is consolidated"


async def _unsettled(store: Store, agent_id: str, before: datetime) -> list[str] | None:
    """None while a conversation started before `before` is open or its consolidation not
    yet attempted; else the errors of those whose consolidation failed (settled too)."""
    assert isinstance(store, JobsPort) and isinstance(store, DialogHistoryPort)
    failed: list[str] = []
    for conversation in await store.list_conversations(agent_id, limit=1000):
        if conversation.started_at >= before or conversation.kind != "dialog":
            continue
        if conversation.closed_at is None:
            return None
        state = await store.get_consolidation(agent_id, conversation.id)
        if state is None or state.status == ConsolidationStatus.PENDING:
            return None
        if state.status == ConsolidationStatus.FAILED:
            failed.append(f"{conversation.id}: {state.last_error}")
    return failed


async def _identity(week: _Week, store: Store, agent_id: str, taken: str) -> IdentitySnapshot:
    """Who the agent is now: its persona as configured, and its store's people, memories, facts.
    Read afresh (a new connection) so a store swapped by configuration shows as it is."""
    settings = load_settings(week.home, environ=week.environ())
    agent = settings.agent(week.scenario.agent)
    fresh = open_store(settings.database_url)
    await fresh.setup()
    try:
        assert isinstance(fresh, MemoryPort) and isinstance(fresh, DirectoryPort)
        people = await fresh.list_persons(agent.id)
        records = await fresh.list_records(agent.id, limit=1000)
        facts = 0
        for person in people:
            facts += len(await fresh.facts(agent.id, person.id))
    finally:
        await fresh.close()
    persona = " | ".join([agent.disposition, *agent.objectives, *agent.rules])
    return IdentitySnapshot(
        taken=taken,
        at=week.now(),
        agent_id=agent.id,
        name=agent.name,
        persona=persona,
        contacts=tuple(sorted(p.display_name for p in people)),
        memory_ids=tuple(sorted(r.id for r in records)),
        facts=facts,
    )
