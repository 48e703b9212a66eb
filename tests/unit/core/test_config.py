from pathlib import Path

import pytest

from persyn.core.config import Settings, Task, load_settings
from persyn.core.errors import ConfigError, InputError
from persyn.ops.init_home import init_home


def test_init_writes_a_commented_file_with_a_seed_persona(tmp_path: Path) -> None:
    result = init_home(tmp_path, "Ada")
    text = result.path.read_text()
    assert result.created_file
    assert "# Persyn deployment configuration" in text
    assert 'name = "Ada"' in text
    settings = load_settings(tmp_path, environ={})
    assert [a.name for a in settings.agents] == ["Ada"]
    assert settings.agents[0].id == result.agent.id
    assert settings.agents[0].disposition


def test_init_on_an_existing_home_adds_an_agent_and_keeps_comments(tmp_path: Path) -> None:
    first = init_home(tmp_path, "Ada")
    second = init_home(tmp_path, "Bob")
    assert not second.created_file
    text = first.path.read_text()
    assert "# Persyn deployment configuration" in text
    settings = load_settings(tmp_path, environ={})
    assert [a.name for a in settings.agents] == ["Ada", "Bob"]
    assert settings.agents[0].id != settings.agents[1].id
    with pytest.raises(InputError, match="already exists"):
        init_home(tmp_path, "ada")


def test_agent_selection(tmp_path: Path) -> None:
    init_home(tmp_path, "Ada")
    settings = load_settings(tmp_path, environ={})
    assert settings.agent(None).name == "Ada"
    init_home(tmp_path, "Bob")
    settings = load_settings(tmp_path, environ={})
    with pytest.raises(ConfigError, match="choose one with --agent"):
        settings.agent(None)
    assert settings.agent("bob").name == "Bob"
    with pytest.raises(ConfigError, match="no agent named 'Eve'; configured agents: Ada, Bob"):
        settings.agent("Eve")


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    init_home(tmp_path, "Ada")
    settings = load_settings(
        tmp_path,
        environ={
            "PERSYN_MODELS__RESPOND": "test:echo",
            "PERSYN_CONVERSATION__IDLE_TIMEOUT_MINUTES": "5",
            "ANTHROPIC_API_KEY": "sk-secret",
        },
    )
    agent = settings.agent(None)
    assert settings.model_for(agent, Task.RESPOND) == "test:echo"
    assert settings.model_for(agent, Task.SUMMARIZE) == "auto"
    assert settings.conversation.idle_timeout_minutes == 5
    assert settings.secrets.anthropic_api_key is not None
    assert settings.secrets.anthropic_api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(settings)


def test_invalid_values_name_the_key_and_allowed_values(tmp_path: Path) -> None:
    (tmp_path / "persyn.toml").write_text('log_level = "loud"\n[metering]\nprometheus_port = "x"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, environ={})
    message = str(info.value)
    assert (
        "log_level" in message and "'debug', 'info', 'warning' or 'error'" in message and "'loud'" in message
    )
    assert "metering.prometheus_port" in message


def test_unknown_keys_and_tasks_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "persyn.toml").write_text('[models]\nrespnd = "test:echo"\n')
    with pytest.raises(ConfigError, match=r"models\.respnd: unknown key"):
        load_settings(tmp_path, environ={})


def test_malformed_toml_and_secrets_in_file_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "persyn.toml"
    path.write_text("[models\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(tmp_path, environ={})
    path.write_bytes(b"log_level = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_settings(tmp_path, environ={})
    path.write_text('[secrets]\nanthropic_api_key = "x"\n')
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        load_settings(tmp_path, environ={})


def test_bad_agent_id_in_file(tmp_path: Path) -> None:
    (tmp_path / "persyn.toml").write_text('[[agents]]\nname = "Ada"\nid = "not-a-ulid"\n')
    with pytest.raises(ConfigError, match=r"agents\.0\.id.*not a ULID"):
        load_settings(tmp_path, environ={})


def test_settings_built_in_code_read_neither_the_file_nor_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "persyn.toml").write_text('[models]\nrespond = "test:file"\n')
    monkeypatch.setenv("PERSYN_MODELS__DEFAULT", "test:environment")
    monkeypatch.chdir(tmp_path)
    built = Settings(home=tmp_path)
    assert (built.models.default, built.models.respond) == ("auto", None)
    loaded = load_settings(tmp_path)
    assert (loaded.models.default, loaded.models.respond) == ("test:environment", "test:file")


def test_a_section_set_as_a_value_and_one_of_its_keys_in_the_environment_are_refused(tmp_path: Path) -> None:
    environ = {"PERSYN_MODELS": "test:a", "PERSYN_MODELS__RESPOND": "test:b"}
    with pytest.raises(ConfigError, match="PERSYN_MODELS and PERSYN_MODELS__RESPOND: they overlap"):
        load_settings(tmp_path, environ=environ)
    # A table is merged with the keys set beside it, which win.
    environ = {
        "PERSYN_MODELS": '{ respond = "test:a", decide = "test:c" }',
        "PERSYN_MODELS__RESPOND": "test:b",
    }
    models = load_settings(tmp_path, environ=environ).models
    assert (models.respond, models.decide) == ("test:b", "test:c")


def test_environment_values_read_as_the_file_reads_them(tmp_path: Path) -> None:
    settings = load_settings(
        tmp_path,
        environ={
            "PERSYN_MODELS__RESPOND": '["test:a", "test:b"]',
            "PERSYN_MODELS__TIERS": '{ "test:a" = "cheap" }',
            "PERSYN_DISPATCH__EXECUTOR_ID": "worker-1",
            "PERSYN_METERING__EVENT_LOG": "false",
        },
    )
    assert settings.models.respond == ["test:a", "test:b"]
    assert settings.models.tiers == {"test:a": "cheap"}
    assert (settings.dispatch.executor_id, settings.metering.event_log) == ("worker-1", False)
    with pytest.raises(ConfigError, match=r"PERSYN_METERING__EVENT_LOG \(metering.event_log\)"):
        load_settings(tmp_path, environ={"PERSYN_METERING__EVENT_LOG": "yes"})
