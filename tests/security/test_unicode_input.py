"""Text that is not valid Unicode (issue 33 item 5): a lone surrogate sent as a JSON escape to
the web API, and bytes that are not UTF-8 on the command line, crashed with a
`UnicodeEncodeError` traceback (a plain-text 500; a traceback from the CLI). Each is now a
clear refusal naming the field or the argument — a JSON 400, or one `error:` line and exit 2
— and nothing is stored. Real HTTP on loopback against `persyn run`; real CLI subprocesses."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from persyn_cli import Persyn
from web_daemon import HELLO, WebDaemon, start

pytestmark = [pytest.mark.e2e]

NOT_UTF8 = os.fsdecode(b"caf\xe9 au lait")  # as Python hands such an argument over


def _count(persyn: Persyn, table: str) -> int:
    path = persyn.home / "data" / "persyn.db"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as connection:
        return int(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


# the web API --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start(tmp_path_factory.mktemp("unicode"), keys={"alice": False})
    yield daemon
    daemon.stop()


def _post(web: WebDaemon, path: str, body: object) -> httpx.Response:
    # json.dumps escapes a lone surrogate as "\ud800": valid JSON, not valid Unicode
    raw = json.dumps(body).encode("ascii")
    headers = {"Authorization": f"Bearer {web.keys['alice']}", "Content-Type": "application/json"}
    return httpx.post(web.url + path.lstrip("/"), content=raw, headers=headers, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/v1/chat/completions",
            {"model": "Ada", "messages": [{"role": "user", "content": "\ud800 x"}]},
            "messages.0.content",
        ),
        (
            "/v1/chat/completions",
            {
                "model": "Ada",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "a\udfff"}]}],
            },
            "messages.0.content.0.text",
        ),
        (
            "/v1/chat/completions",
            {"model": "Ada", "messages": [{"role": "user", "content": "hi"}], "user": "bo\udcff"},
            "user",
        ),
        ("/v1/agents/Ada/events", {"text": "\udcff"}, "text"),
        ("/v1/agents/Ada/events", {"text": "hello", "user": "\ud83d"}, "user"),
    ],
)
def test_a_lone_surrogate_in_a_request_is_a_400_naming_the_field_and_nothing_is_stored(
    web: WebDaemon, path: str, body: object, field: str
) -> None:
    events, messages = _count(web.persyn, "events"), _count(web.persyn, "messages")
    got = _post(web, path, body)
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["param"] == field
    assert f"invalid field {field!r}: not valid Unicode (a lone surrogate U+" in error["message"]
    assert (_count(web.persyn, "events"), _count(web.persyn, "messages")) == (events, messages)
    assert "Traceback" not in web.persyn.log("run")
    # The same request in valid Unicode is answered: the refusal was about the text alone.
    fine = _post(
        web, "/v1/chat/completions", {"model": "Ada", "messages": [{"role": "user", "content": "hello"}]}
    )
    assert fine.status_code == 200 and fine.json()["choices"][0]["message"]["content"] == HELLO


# the command line ---------------------------------------------------------------------------
@pytest.fixture
def home(tmp_path: Path) -> Persyn:
    runner = Persyn(home=tmp_path / "home", env={"PERSYN_MODELS__DEFAULT": "test:echo"})
    assert runner.run("init", "--name", "Ada").returncode == 0
    return runner


def _refused(done: subprocess.CompletedProcess[str], *names: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), done.stderr
    assert "is not valid UTF-8: b'caf\\xe9 au lait'" in errors[0], errors[0]
    for name in names:
        assert name in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("send", NOT_UTF8), ("argument 2",)),
        (("send", "--no-wait", NOT_UTF8), ("argument 3", "after --no-wait")),
        (("send", "--agent", NOT_UTF8, "hello"), ("argument 3", "after --agent")),
        (("web", "keys", "create", "--name", NOT_UTF8), ("after --name",)),
        (("web", "keys", "create", f"--name={NOT_UTF8}"), ("the value of --name",)),
        (("graph", "query", NOT_UTF8), ("argument 3",)),
        (("channels", "show", NOT_UTF8), ("argument 3",)),
    ],
)
def test_an_argument_that_is_not_utf8_is_one_error_line_and_nothing_is_stored(
    home: Persyn, args: tuple[str, ...], names: tuple[str, ...]
) -> None:
    events, keys = _count(home, "events"), _count(home, "web_keys")
    _refused(home.run(*args), *names)
    assert (_count(home, "events"), _count(home, "web_keys")) == (events, keys)


def test_init_with_a_name_that_is_not_utf8_creates_nothing(tmp_path: Path) -> None:
    runner = Persyn(home=tmp_path / "home")
    _refused(runner.run("init", "--name", NOT_UTF8), "argument 3", "after --name")
    assert not runner.home.exists() or not any(runner.home.iterdir())


def test_a_message_on_standard_input_that_is_not_utf8_is_refused_too(home: Persyn) -> None:
    done = home.run("send", "--no-wait", "-", input=b"caf\xe9 au lait")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "error: message is not valid UTF-8 (bad byte at position 3)" in done.stderr
    assert _count(home, "events") == 0
