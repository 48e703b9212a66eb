"""`[live]`: a Redis URL redis-py can connect to, or a configuration error naming it (and the
variable that set it); the password never in what doctor and the log print."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio.connection import parse_url

from persyn.core.config import parse_settings
from persyn.core.config_live import redis_url_problem, shown_redis_url
from persyn.core.errors import ConfigError

GOOD = [
    "redis://127.0.0.1:6379/0",
    "redis://localhost",
    "rediss://user:secret@redis.example:6380/3",
    "redis://:secret@[::1]:6379/1",
    "unix:///run/redis/redis.sock?db=2",
]
BAD = [
    ("redis//127.0.0.1:6379", "the scheme must be"),
    ("http://127.0.0.1:6379/0", "the scheme must be"),
    ("redis://:6379/0", "names no host"),
    ("redis://127.0.0.1:notaport/0", "Port could not be cast"),
    ("redis://127.0.0.1:99999/0", "out of range"),
    ("redis://127.0.0.1:6379/zero", "is not a number"),
    ("unix://", "names the socket's path"),
    ("redis://[::1/0", "Invalid IPv6 URL"),
]


@pytest.mark.parametrize("url", GOOD)
def test_a_url_redis_py_takes_is_accepted(url: str, tmp_path: Path) -> None:
    assert redis_url_problem(url) is None
    parse_url(url)  # and redis-py agrees
    settings = parse_settings({"live": {"redis_url": url}}, tmp_path, environ={})
    assert settings.live.redis_url == url


@pytest.mark.parametrize(("url", "problem"), BAD)
def test_a_malformed_url_is_a_configuration_error_naming_it(url: str, problem: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings({}, tmp_path, environ={"PERSYN_LIVE__REDIS_URL": url})
    message = str(raised.value)
    assert "PERSYN_LIVE__REDIS_URL" in message and repr(url) in message and problem in message


def test_the_password_is_never_shown() -> None:
    assert shown_redis_url("redis://:hunter2@127.0.0.1:6379/0") == "redis://***@127.0.0.1:6379/0"
    assert shown_redis_url("rediss://alice:hunter2@h:6380/1") == "rediss://***@h:6380/1"
    assert shown_redis_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize("namespace", ["", "two words", "a/b", "x" * 65, "persyn:*"])
def test_a_namespace_is_a_plain_name(namespace: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="redis_namespace"):
        parse_settings(
            {"live": {"redis_url": "redis://h/0", "redis_namespace": namespace}}, tmp_path, environ={}
        )
