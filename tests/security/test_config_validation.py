"""Configuration that used to be accepted but wrong (issue 13, item 13): each is now an error
at start that names the key (or the environment variable) and the value."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from persyn_cli import Persyn
from pydantic import BaseModel

from persyn.core.config import Settings, load_settings
from persyn.core.errors import ConfigError
from persyn.core.ids import new_id
from persyn.ops.init_home import init_home

AGENT_ID = new_id()


def _write(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "persyn.toml").write_text(text, encoding="utf-8")


def _error(home: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(home, environ=environ or {})
    return str(info.value)


AGENT = f'[[agents]]\nname = "Ada"\nid = "{AGENT_ID}"\n'


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        pytest.param(
            '[memory]\ndefault_sensitivity = { terminal = "privat" }\n',
            ["memory.default_sensitivity", "'privat'", "service 'terminal'", "'confidential'"],
            id="misspelt-sensitivity",
        ),
        pytest.param(
            AGENT + f'[[agents]]\nname = "Bob"\nid = "{AGENT_ID}"\n',
            ["agents.id", repr(AGENT_ID)],
            id="duplicate-agent-id",
        ),
        pytest.param(
            AGENT + f'[[agents]]\nname = "Bob"\nid = "{AGENT_ID.lower()}"\n',
            ["agents.id", repr(AGENT_ID)],
            id="duplicate-agent-id-in-lower-case",
        ),
        pytest.param(
            "[conversation]\nidle_timeout_minutes = inf\n",
            ["conversation.idle_timeout_minutes", "finite", "inf"],
            id="infinite-timeout",
        ),
        pytest.param(
            "[memory]\nmoderate_threshold = 0.7\nstrong_threshold = 0.6\n",
            ["moderate_threshold 0.7", "strong_threshold 0.6"],
            id="moderate-above-strong",
        ),
        pytest.param(
            "[memory]\nsimilarity_floor = 0.8\nsimilarity_ceiling = 0.7\n",
            ["similarity_floor 0.8", "similarity_ceiling 0.7"],
            id="floor-above-ceiling",
        ),
        pytest.param(
            '[memory]\nembedder = "wordlama"\n',
            ["memory.embedder", "'wordlama'", "'wordllama'"],
            id="unknown-embedder",
        ),
        pytest.param(
            '[memory]\nembedder = "openai:bge-small"\n',
            ["memory.embedder", "'openai:bge-small'", "openai:MODEL@URL"],
            id="service-embedder-without-url",
        ),
        pytest.param(
            "[memory]\nembedder_dims = 7\n",
            ["embedder_dims 7", "'wordllama'", "64, 128, 256"],
            id="wordllama-dims",
        ),
        pytest.param(
            '[memory]\nembedder = "test:hash"\nembedder_dims = 128\n',
            ["embedder_dims 128", "'test:hash'"],
            id="fixed-size-embedder-dims",
        ),
        pytest.param(
            "[graph]\nhops = true\n",
            ["graph.hops", "a boolean is not a number", "True"],
            id="bool-for-int",
        ),
        pytest.param(
            "[memory]\nhalf_life_days = true\n",
            ["memory.half_life_days", "a boolean is not a number"],
            id="bool-for-float",
        ),
        pytest.param(
            "[metering]\nevent_log = 1\n",
            ["metering.event_log", "(got 1)"],
            id="int-for-bool",
        ),
    ],
)
def test_wrong_configuration_is_an_error_naming_the_key(
    tmp_path: Path, toml: str, expected: list[str]
) -> None:
    _write(tmp_path, toml)
    message = _error(tmp_path)
    for part in expected:
        assert part in message, message


def _float_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys.extend(_float_keys(annotation, f"{prefix}{name}."))
        elif annotation in (float, float | None):
            keys.append(prefix + name)
    return keys


FLOAT_KEYS = _float_keys(Settings)


def test_every_float_setting_is_found() -> None:
    assert "conversation.idle_timeout_minutes" in FLOAT_KEYS
    assert "memory.weights.recency" in FLOAT_KEYS
    assert len(FLOAT_KEYS) > 20


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_non_finite_floats_are_rejected_everywhere(tmp_path: Path, key: str, value: str) -> None:
    *sections, name = key.split(".")
    _write(tmp_path, (f"[{'.'.join(sections)}]\n" if sections else "") + f"{name} = {value}\n")
    message = _error(tmp_path)
    assert key in message and "finite" in message, message


DURATION_KEYS = [k for k in FLOAT_KEYS if k.rsplit("_", 1)[-1] in ("seconds", "minutes", "hours", "days")]


def test_every_duration_setting_is_found() -> None:
    assert "conversation.idle_timeout_minutes" in DURATION_KEYS
    assert "memory.cull_after_days" in DURATION_KEYS
    assert "autonomy.heartbeat_minutes" in DURATION_KEYS


@pytest.mark.parametrize("key", DURATION_KEYS)
def test_a_duration_past_what_a_time_can_hold_is_an_error_naming_the_key(tmp_path: Path, key: str) -> None:
    """1e300 minutes passed every lower bound, then failed every activation ("Python int
    too large to convert to C int") or every housekeeping tick."""
    *sections, name = key.split(".")
    _write(tmp_path, (f"[{'.'.join(sections)}]\n" if sections else "") + f"{name} = 1e300\n")
    message = _error(tmp_path)
    assert key in message and ("100 years" in message or "less than or equal" in message), message


def test_non_finite_prices_are_rejected(tmp_path: Path) -> None:
    _write(tmp_path, '[prices."test:echo"]\ninput = 1.0\noutput = nan\n')
    message = _error(tmp_path)
    assert "prices.test:echo.output" in message and "finite" in message, message


def test_storage_url_in_a_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    _write(tmp_path / "home", f'storage_url = "sqlite:///{missing}/persyn.db"\n')
    message = _error(tmp_path / "home")
    assert "storage_url" in message and repr(str(missing)) in message, message
    assert not missing.exists()


def test_storage_url_in_an_existing_directory_is_fine(tmp_path: Path) -> None:
    _write(tmp_path / "home", f'storage_url = "sqlite:///{tmp_path}/persyn.db"\n')
    assert load_settings(tmp_path / "home", environ={}).database_url == f"sqlite:///{tmp_path}/persyn.db"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql:/alice:hunter2@db.example:5432/persyn",  # one slash short
        "alice:hunter2@db.example/persyn",  # no scheme
        "postgresql//alice:hun/ter2@db.example/persyn",  # no colon, a '/' in the password
        "db.example/persyn?user=alice&password=hunter2",
    ],
)
@pytest.mark.parametrize("source", ["file", "environment"])
def test_a_malformed_storage_urls_error_names_the_problem_but_not_the_password(
    url: str, source: str, tmp_path: Path
) -> None:
    _write(tmp_path, f'storage_url = "{url}"\n' if source == "file" else "")
    message = _error(tmp_path, {"PERSYN_STORAGE_URL": url} if source == "environment" else None)
    assert "is not a database URL" in message and "storage_url" in message, message
    for piece in ("hunter2", "hun/ter2", "ter2"):
        assert piece not in message, message
    assert "***" in message, message


def test_valid_embedder_sizes_are_accepted(tmp_path: Path) -> None:
    _write(tmp_path, "[memory]\nembedder_dims = 128\n")
    assert load_settings(tmp_path, environ={}).memory.embedder_dims == 128
    _write(tmp_path, '[memory]\nembedder = "openai:e5@http://127.0.0.1:9/v1"\nembedder_dims = 384\n')
    assert load_settings(tmp_path, environ={}).memory.embedder_dims == 384


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param(
            {"PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "inf"},
            ["PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES", "finite", "inf"],
            id="infinite",
        ),
        pytest.param({"PERSYN_GRAPH__HOPS": "true"}, ["PERSYN_GRAPH__HOPS", "True"], id="bool-for-int"),
        pytest.param(
            {"PERSYN_MODELS__RESPND": "test:echo"},
            ["PERSYN_MODELS__RESPND", "unknown key"],
            id="misspelt-key",
        ),
        pytest.param(
            {"PERSYN_MEMORY__EMBEDDER": "wordlama"},
            ["PERSYN_MEMORY__EMBEDDER", "'wordlama'"],
            id="unknown-embedder",
        ),
        pytest.param(
            {"PERSYN_AGENTS__0__NAME": "Eve"},
            ["PERSYN_AGENTS__0__NAME", "configured in persyn.toml"],
            id="agents",
        ),
        pytest.param(
            {"PERSYN_SECRETS__ANTHROPIC_API_KEY": "sk"},
            ["PERSYN_SECRETS__ANTHROPIC_API_KEY", "OPENAI_API_KEY instead"],
            id="secrets",
        ),
    ],
)
def test_environment_errors_name_the_variable_not_the_file(
    tmp_path: Path, environ: dict[str, str], expected: list[str]
) -> None:
    init_home(tmp_path, "Ada")
    message = _error(tmp_path, environ)
    for part in expected:
        assert part in message, message
    assert "persyn.toml:" not in message and "invalid configuration in the environment:" in message, message


def test_a_check_across_keys_names_the_variables_involved(tmp_path: Path) -> None:
    init_home(tmp_path, "Ada")
    message = _error(tmp_path, {"PERSYN_MEMORY__MODERATE_THRESHOLD": "0.9"})
    assert "moderate_threshold 0.9 is above strong_threshold 0.6" in message, message
    assert "set in the environment: PERSYN_MEMORY__MODERATE_THRESHOLD" in message, message
    assert "and the environment:" in message, message


def test_a_file_error_and_an_environment_error_are_told_apart(tmp_path: Path) -> None:
    _write(tmp_path, "[graph]\nhops = 9\n")
    message = _error(tmp_path, {"PERSYN_MEMORY__HALF_LIFE_DAYS": "-1"})
    assert f"in {tmp_path / 'persyn.toml'} and the environment" in message, message
    assert "  - graph.hops:" in message
    assert "  - PERSYN_MEMORY__HALF_LIFE_DAYS (memory.half_life_days):" in message


def test_a_stray_persyn_variable_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    init_home(tmp_path, "Ada")
    environ = {"PERSYN_FOO": "1", "PERSYN_HOME": str(tmp_path), "PERSYN_MODELS__RESPOND": "test:echo"}
    with caplog.at_level(logging.WARNING, logger="persyn.core.config"):
        settings = load_settings(tmp_path, environ=environ)
    assert settings.models.respond == "test:echo"
    assert [r.getMessage() for r in caplog.records if "PERSYN_FOO" in r.getMessage()]
    assert not [r for r in caplog.records if "PERSYN_HOME" in r.getMessage()]


@pytest.mark.e2e
def test_cli_names_the_stray_variable_and_carries_on(persyn: Persyn) -> None:
    done = persyn.run("agents", "list", PERSYN_FOO="1")
    assert done.returncode == 0, done.stderr
    assert "PERSYN_FOO" in done.stderr and "Ada" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "edit", "expected"),
    [
        pytest.param({"PERSYN_GRAPH__HOPS": "true"}, ("", ""), "PERSYN_GRAPH__HOPS (graph.hops)", id="env"),
        pytest.param(
            {},
            ("#idle_timeout_minutes = 30.0", "idle_timeout_minutes = inf"),
            "conversation.idle_timeout_minutes",
            id="file",
        ),
    ],
)
def test_cli_refuses_to_start_on_wrong_configuration(
    persyn: Persyn, env: dict[str, str], edit: tuple[str, str], expected: str
) -> None:
    path = persyn.home / "persyn.toml"
    text = path.read_text(encoding="utf-8")
    assert edit[0] in text
    path.write_text(text.replace(*edit), encoding="utf-8")
    done = persyn.run("send", "--no-wait", "hello", env=env)
    assert done.returncode == 2
    assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (persyn.home / "data").exists() or not any((persyn.home / "data").iterdir())


@pytest.mark.e2e
def test_doctor_points_an_environment_error_at_the_variable(persyn: Persyn) -> None:
    done = persyn.run("doctor", PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES="-1")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES" in output, output
    assert "fix: correct or unset the PERSYN_ variable named above" in output, output
    assert "edit " not in output, output
