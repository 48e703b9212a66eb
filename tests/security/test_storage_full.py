"""A full disk (issue 33, item 2): a turn that fails on it ends with an error once there is
room again instead of staying PENDING and holding the agent's queue, is never replayed into the
same failure after a restart, is logged in one line, and shows a client no path or SQL."""

from __future__ import annotations

import io
import logging
import sqlite3
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import web_daemon  # tests/e2e, on the path (conftest.py)
from dbos import DBOS
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from tmpfs import can_mount, fill, mounted, small_disk_at
from web_daemon import WebDaemon

from persyn.cli.log_filter import OneLineErrors, RepeatFilter
from persyn.core.errors import STORAGE_UNAVAILABLE
from persyn.runtime.durable._storage_full import STORAGE_FULL_REASON
from persyn.runtime.durable.dispatch import emotion_workflow_id
from persyn.testing.harness import WAIT_SECONDS, run_runtime
from persyn.testing.models import (
    DoubleReply,
    DoubleResult,
    echo_text,
    last_user_text,
    minimal_instance,
    output_schema,
    registered_double,
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MB filesystem (tmpfs), mounted for the test: the deployment's data lives there."""
    with small_disk_at(tmp_path, "16m") as where:
        yield where


async def test_a_turn_that_fills_the_disk_ends_and_is_not_replayed(small_disk: Path) -> None:
    """The attacker's own turn fills the disk (as `run_code` writing /workspace did): its
    waiter hears at once that it went unanswered; once there is room again the failure is
    recorded and the workflow has ended (not PENDING), the agent answers the next message, and
    a restart does not run the turn again."""
    home = small_disk / "home"
    fills: list[str] = []

    def attacker(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        said = last_user_text(messages)
        if task == "respond" and "fill the disk" in said:
            fills.append(said)
            fill(small_disk)
        return echo_text(messages)

    with registered_double("diskfiller", attacker):
        async with run_runtime(home, model="test:diskfiller") as pilot:
            await pilot.say("hello", transmitted=True)
            attack = pilot.event("please fill the disk")
            await pilot.runtime.submit(attack)
            told = await pilot.runtime.wait_marker(attack.agent_id, attack.id, timeout=WAIT_SECONDS)
            assert fills and not told.transmitted and told.reason == STORAGE_FULL_REASON, told
            (small_disk / "filler").unlink()  # the operator makes room (`persyn sandbox reset`)
            after = await pilot.say("are you still there?", transmitted=True)
            assert after.marker.text == "You said: are you still there?"
            status = await DBOS.get_workflow_status_async(attack.id)
            assert status is not None and status.status == "SUCCESS", status
            stored = await pilot.store.get_marker(attack.agent_id, attack.id, pilot.clock.now())
            assert stored is not None and stored.reason == STORAGE_FULL_REASON, stored
            trace = await pilot.store.deliberation_traces(attack.agent_id, [attack.id])
            assert "database or disk is full" in trace[0].trace["failed"], trace
        async with run_runtime(home, model="test:diskfiller") as pilot:  # stopped, then started
            await pilot.say("and now?", transmitted=True)
            await pilot.settle()
    assert fills == ["please fill the disk"]


async def test_a_background_workflow_that_fills_the_disk_ends_and_is_not_replayed(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The emotion reading after an exchange (a workflow of the background queue) meets a full
    disk: once there is room again it has ended with that error instead of staying PENDING on
    a worker slot, and a restart does not run it again."""
    home = small_disk / "home"
    readings: list[str] = []

    def reader(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleResult:
        schema = output_schema(info)
        if schema is None:
            return echo_text(messages)
        if task == "classify" and not readings:
            readings.append(last_user_text(messages))
            fill(small_disk)
        return DoubleReply(output=minimal_instance(schema))

    with registered_double("fullreader", reader):
        async with run_runtime(home, model="test:fullreader") as pilot:
            turn = await pilot.say("tell me how you feel about the garden plan today", transmitted=True)
            # Room comes back only once the reading has met the full disk (freed as soon as the
            # double filled it, the reading's writes could all come after: no failure to see).
            await pilot.wait_for(
                lambda: _at_once(any("stopped: the storage is full" in line for line in caplog.messages)),
                "the emotion reading to stop on the full disk",
            )
            (small_disk / "filler").unlink()
            await pilot.settle()  # nothing queued or running: the reading ended
            status = await DBOS.get_workflow_status_async(emotion_workflow_id(turn.event.id))
            assert status is not None and status.status == "ERROR", status
            assert "storage full" in str(status.error), status
        async with run_runtime(home, model="test:fullreader") as pilot:
            await pilot.settle()
    assert len(readings) == 1, readings


async def _at_once(value: bool) -> bool:
    return value


@dataclass(frozen=True)
class FullDisk:
    web: WebDaemon
    data: Path  # the data directory: a filesystem of its own, full

    def chat(self) -> httpx.Response:
        """Alice (a web key without operator rights) says hello."""
        with httpx.Client(
            base_url=self.web.url, headers={"Authorization": f"Bearer {self.web.keys['alice']}"}, timeout=60
        ) as http:
            return http.post(
                "/v1/chat/completions",
                json={"model": "Ada", "messages": [{"role": "user", "content": "hello"}]},
            )


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullDisk]:
    """`persyn run` serving the web, its data directory (store, workflow database) on a small
    filesystem of its own, answering once and then filled; its home, script and log stay on
    the test's disk."""
    root = tmp_path_factory.mktemp("full-disk")
    if not can_mount(root):
        pytest.skip("needs root and permission to mount a tmpfs (a real full disk)")
    with mounted(root / "deployment" / "home" / "data", "16m") as data:
        web = web_daemon.start(root / "deployment", keys={"alice": False})
        try:
            disk = FullDisk(web, data)
            assert disk.chat().status_code == 200
            fill(data)
            yield disk
        finally:
            web.stop()


@pytest.mark.e2e
def test_a_client_is_told_the_storage_is_unavailable_without_path_or_sql(full_disk: FullDisk) -> None:
    for _ in range(3):
        refused = full_disk.chat()
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["message"] == STORAGE_UNAVAILABLE, refused.text
        for internal in (str(full_disk.data), "persyn.db", "SQL", "sqlite", "sqlalche.me", "disk is full"):
            assert internal not in refused.text, refused.text


@pytest.mark.e2e
def test_a_full_disk_is_logged_once_per_condition_without_tracebacks(full_disk: FullDisk) -> None:
    """The reminder schedule ticks every second (`tick_seconds = 1`) and fails on each tick
    while the disk is full, and every request fails on the store: the log is read after
    several ticks and requests."""
    log = full_disk.web.persyn.log
    deadline = time.monotonic() + WAIT_SECONDS
    while "Exception in schedule" not in log("run"):
        assert time.monotonic() < deadline, log("run")
        full_disk.chat()
        time.sleep(0.1)
    watched = time.monotonic() + 5
    while time.monotonic() < watched:
        assert full_disk.chat().status_code == 503
    text = log("run")
    assert "Traceback" not in text and "[SQL:" not in text and "sqlalche.me" not in text, text
    failing = [line for line in text.splitlines() if "disk is full" in line]
    assert len(failing) == len(set(failing)), text  # one line per condition
    assert len([line for line in failing if "Exception in schedule" in line]) == 1, text
    requests = [line for line in failing if "POST /v1/chat/completions" in line]
    assert len(requests) == 1 and str(full_disk.data) in requests[0], text  # the operator sees where


def _sqlite_full_error() -> sqlite3.OperationalError:
    """A real SQLITE_FULL: a database allowed two pages, given more."""
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute("PRAGMA max_page_count = 2")
        connection.execute("CREATE TABLE filler (data BLOB)")
        connection.execute("INSERT INTO filler VALUES (zeroblob(100000))")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        connection.close()
    raise AssertionError("SQLite took more than two pages")


def test_repeated_failures_on_a_full_disk_are_one_line_each() -> None:
    """What a full disk made DBOS log every second or five: a traceback formatted into the
    message, an exception with its statement and parameters, and a queue warning quoting one,
    each logged ten times through a real handler with the daemon's filters."""
    error = _sqlite_full_error()
    statement = f"(sqlite3.OperationalError) {error}\n[SQL: INSERT INTO x VALUES (?)]\n[parameters: (1,)]"
    try:
        raise RuntimeError(statement) from error
    except RuntimeError:
        formatted = traceback.format_exc()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(OneLineErrors())
    handler.addFilter(RepeatFilter())
    logger = logging.getLogger("persyn.test.storage_full")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        for attempt in range(10):
            logger.warning("Exception in schedule 'persyn-reminders': %s", formatted)
            logger.error("Exception encountered in asynchronous workflow:", exc_info=error)
            logger.warning("Exception encountered in queue thread for persyn-events: %s", statement)
            logger.warning(
                "Database connection failed: %s. Retrying in %.2fs (attempt %d)",
                error,
                0.5 + attempt,
                attempt,
            )
            logger.info("an ordinary line %d", attempt)
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert [line for line in lines if "ordinary" not in line] == [
        "Exception in schedule 'persyn-reminders': RuntimeError: (sqlite3.OperationalError) database or disk is full",
        "Exception encountered in asynchronous workflow: database or disk is full",
        "Exception encountered in queue thread for persyn-events: (sqlite3.OperationalError) database or disk is full",
        "Database connection failed: database or disk is full. Retrying in 0.50s (attempt 0)",
    ]
    assert len([line for line in lines if "ordinary" in line]) == 10  # information is never dropped


def test_a_full_disk_is_recognised_however_it_surfaces() -> None:
    """Each layer's own error for a full disk, and the wrappers that carry it."""
    import psycopg.errors
    import sqlalchemy
    from sqlalchemy.exc import OperationalError

    from persyn.core.errors import StoreError, is_storage_full

    sqlite_full = _sqlite_full_error()
    try:
        with open("/dev/full", "wb") as device:  # the kernel's always-full device: ENOSPC
            device.write(b"x")
            device.flush()
    except OSError as exc:
        device_full = exc
    else:
        raise AssertionError("/dev/full took a write")
    engine = sqlalchemy.create_engine("sqlite://")
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("PRAGMA max_page_count = 2")
            connection.exec_driver_sql("CREATE TABLE filler (data BLOB)")
            connection.exec_driver_sql("INSERT INTO filler VALUES (zeroblob(100000))")
    except OperationalError as exc:
        wrapped = StoreError("save_event failed on 'persyn.db': database or disk is full")
        wrapped.__cause__ = exc
        through_sqlalchemy: BaseException = exc
    else:
        raise AssertionError("SQLite took more than two pages")
    postgres_full = psycopg.errors.DiskFull("could not extend file")
    for error in (sqlite_full, device_full, through_sqlalchemy, wrapped, postgres_full):
        assert is_storage_full(error), repr(error)
    outer = RuntimeError("the workflow failed")
    outer.__cause__ = wrapped
    assert is_storage_full(outer)
    for other in (
        sqlite3.OperationalError("database is locked"),
        OSError(13, "Permission denied"),
        StoreError("no contact 'x'"),
    ):
        assert not is_storage_full(other), repr(other)


def test_a_condition_is_logged_again_when_it_returns_and_hourly_while_it_lasts() -> None:
    now = [0.0]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RepeatFilter(clock=lambda: now[0]))
    logger = logging.getLogger("persyn.test.storage_full_repeats")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for second in (0, 5, 10):  # a failing poll every 5 s
            now[0] = second
            logger.warning("the disk is full")
        now[0] = 10 + 121  # quiet for over two minutes: it ended, and this is a new occurrence
        logger.warning("the disk is full")
        for second in range(136, 136 + 3600, 5):  # an hour of failing polls
            now[0] = second
            logger.warning("the disk is full")
    finally:
        logger.removeHandler(handler)
    assert out.getvalue().splitlines() == [
        "the disk is full",
        "the disk is full (repeated 2 more times since it was last logged)",
        "the disk is full (repeated 719 more times since it was last logged)",
    ]
