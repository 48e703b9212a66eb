"""`[live]`: a Redis URL redis-py can connect to, or a configuration error naming it (and the
variable that set it); the password never in what doctor and the log print."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio.connection import parse_url

from persyn.core.config import parse_settings
from persyn.core.config.live import redis_url_problem
from persyn.core.errors import ConfigError
from persyn.core.urls import masked_url

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
    ("redis://127.0.0.1:notaport/0", "the port must be a number"),
    ("redis://127.0.0.1:99999/0", "the port must be a number"),
    ("redis://127.0.0.1:6379/zero", "the path must be a database number"),
    ("unix://", "names the socket's path"),
    ("redis://[::1/0", "its host is malformed"),
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
    assert masked_url("redis://:hunter2@127.0.0.1:6379/0") == "redis://***@127.0.0.1:6379/0"
    assert masked_url("rediss://alice:hunter2@h:6380/1") == "rediss://***@h:6380/1"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert masked_url("redis://:hun/ter2@h:6379/0") == "redis://***@h:6379/0"
    assert masked_url("redis://h:6379/0?password=hunter2&db=1") == "redis://h:6379/0?password=***&db=1"


# Malformed URLs carrying the password "hunter2", split by the fault in some of them.
MALFORMED_WITH_PASSWORD = [
    ("redis://:hunter2@127.0.0.1:notaport/0", "the port must be a number"),
    ("http://alice:hunter2@127.0.0.1:6379/0", "the scheme must be"),
    ("redis://:hunter2@:6379/0", "names no host"),
    ("redis://alice:hunter2@h:6379/zero", "the path must be a database number"),
    ("redis://:hun/ter2@127.0.0.1:6379/0", "must be percent-encoded"),
    ("redis://alice:hun?ter2@127.0.0.1:6379/0", "must be percent-encoded"),
    ("redis://:12/ter2@h:6379/0", "must be percent-encoded"),
    ("redis://h:6379/x?password=hunter2", "the path must be a database number"),
]


@pytest.mark.parametrize(("url", "problem"), MALFORMED_WITH_PASSWORD)
@pytest.mark.parametrize("source", ["file", "environment"])
def test_a_malformed_urls_error_names_the_problem_but_not_the_password(
    url: str, problem: str, source: str, tmp_path: Path
) -> None:
    data = {"live": {"redis_url": url}} if source == "file" else {}
    environ = {"PERSYN_LIVE__REDIS_URL": url} if source == "environment" else {}
    with pytest.raises(ConfigError) as raised:
        parse_settings(data, tmp_path, environ=environ)
    message = str(raised.value)
    assert problem in message and "redis_url" in message
    password = url.rpartition("@")[0].rpartition(":")[2] if "@" in url else "hunter2"
    for piece in {password, *password.replace("?", "/").split("/")} - {"", "12"}:
        assert piece not in message, (piece, message)
    assert "***@" in message or "password=***" in message


@pytest.mark.parametrize("namespace", ["", "two words", "a/b", "x" * 65, "persyn:*"])
def test_a_namespace_is_a_plain_name(namespace: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="redis_namespace"):
        parse_settings(
            {"live": {"redis_url": "redis://h/0", "redis_namespace": namespace}}, tmp_path, environ={}
        )
