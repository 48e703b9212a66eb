"""Typed steps checkpoint plain JSON: what DBOS stores for a finished activation is JSON that
validates as the step protocol's models, under the declared application version."""

from __future__ import annotations

import inspect
import json
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dbos import DBOS
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.deliberation import Critique, Decision, Objection
from persyn.core.clock import ManualClock
from persyn.core.config import AgentConfig, load_settings
from persyn.core.events import Event, Speaker
from persyn.core.ids import new_id
from persyn.runtime.compose import build_runtime
from persyn.runtime.durable import _instance as _dbos_instance
from persyn.runtime.durable.dispatch import WORKFLOWS_CLASS, WORKFLOWS_INSTANCE
from persyn.runtime.durable.steps import APPLICATION_VERSION, step_output_types
from persyn.runtime.durable.workflows import Workflows, activation_result
from persyn.runtime.turn.models import Turned
from persyn.testing import RecordingChannel
from persyn.testing.models import DoubleReply, registered_double

START = datetime(2026, 11, 30, 9, tzinfo=UTC)
DRAFT = "Honestly, I think the moon is made of cheese and that is why it looks so pale at night."
REFINED = "The moon is not cheese at all: it is rock and dust, and it looks pale at night because it reflects the light of the sun."


def _mind(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
    if task == "respond":
        return DoubleReply(text=DRAFT)
    if task == "critique":
        return Critique(
            objections=(
                Objection(kind="false-premise", span="the moon is made of cheese", explanation="rock"),
            )
        )
    if task == "refine":
        return REFINED
    if task == "decide":
        return Decision(action="speak", reason="it answers what was asked")
    return DoubleReply(text="ok")


def _is_plain_json(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(_is_plain_json(v) for v in value)  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain_json(v) for k, v in value.items())  # pyright: ignore[reportUnknownVariableType]
    return False


async def test_a_finished_activation_checkpoints_json_that_validates_as_the_step_models(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "persyn.toml").write_text(
        '[models]\ndefault = "test:steps"\n[metering]\nevent_log = false\n[deliberation]\nmode = "inline"\n'
    )
    settings = load_settings(home, environ={})
    agent = AgentConfig(name="Ada", id=new_id(START))
    settings = settings.model_copy(update={"agents": [agent]})
    with registered_double("steps", _mind):
        runtime = build_runtime(settings, clock=ManualClock(START), channels={"test": RecordingChannel()})
        async with runtime:
            event = Event(
                id=new_id(START),
                agent_id=agent.id,
                service="test",
                channel="room",
                speaker=Speaker(service="test", channel="room", speaker_id="sam", display_name="Sam"),
                text="Why is the moon so pale?",
                received_at=START,
            )
            await runtime.submit(event)
            marker = await runtime.wait_marker(agent.id, event.id, timeout=60)
            assert marker.text == REFINED
            # The marker is committed inside transmit; DBOS records the step's output after
            # it returns, and the workflow's after that: read the checkpoints once it ended.
            recorded = await (await DBOS.retrieve_workflow_async(event.id)).get_result()
            steps = await DBOS.list_workflow_steps_async(event.id)
            status = await DBOS.get_workflow_status_async(event.id)

    assert status is not None and status.app_version == APPLICATION_VERSION
    assert (status.class_name, status.config_name) == (WORKFLOWS_CLASS, WORKFLOWS_INSTANCE)
    names = [step["function_name"] for step in steps]
    assert names == [
        # inline with a draft to critique: critique, refinement, decision and transmit all
        # inside the turn step (the gateway checkpoints each model call)
        "persyn.turn",
        "persyn.feel",  # the emotional-state reading, enqueued on the background queue
    ]
    types = step_output_types()
    # The enqueue is DBOS's record of a child workflow (its id), not a checkpointed step output.
    outputs = {
        step["function_name"]: step["output"] for step in steps if step["function_name"] != "persyn.feel"
    }
    for name, output in outputs.items():
        assert _is_plain_json(output), f"{name} checkpointed {output!r}"
        assert json.loads(json.dumps(output)) == output
        types[name].validate_python(output)
    turned = Turned.model_validate(outputs["persyn.turn"])
    received = turned.received
    assert received.setup.event_id == event.id
    assert received.draft is not None and received.draft.reply.text == DRAFT
    sent = turned.result
    assert sent is not None and sent.transmitted and sent.text == REFINED
    # The workflow's own result is recorded as JSON too, and read back as its typed model.
    assert _is_plain_json(recorded)
    assert activation_result(recorded) == sent


def _loose(annotation: Any) -> bool:
    """Whether a type is, or contains, `Any` or a bare dict (what a typed step must not pass)."""
    if annotation is Any or annotation is dict or typing.get_origin(annotation) is dict:
        return True
    return any(_loose(arg) for arg in typing.get_args(annotation))


def test_no_workflow_or_step_of_the_activation_passes_a_loose_dict() -> None:
    durable = {
        name: inspect.unwrap(member)
        for name, member in vars(Workflows).items()
        if callable(member) and hasattr(member, "__wrapped__")
    }
    assert {"activation", "turn_step", "transmit_step"} <= set(durable)
    for name, function in durable.items():
        hints = typing.get_type_hints(function)
        loose = [key for key, hint in hints.items() if _loose(hint)]
        assert not loose, f"Workflows.{name} passes {loose} untyped"


def test_the_dbos_instance_registry_has_the_shape_release_instance_expects() -> None:
    """`_dbos_instance` reaches into DBOS's registry: this notices when DBOS changes it."""
    registry = _dbos_instance.dbos_internals._get_or_create_dbos_registry()  # pyright: ignore[reportPrivateUsage]
    assert isinstance(registry.instance_info_map, dict)
    assert hasattr(registry, "dbos")
    assert hasattr(_dbos_instance.dbos_internals, "_dbos_global_instance")
