"""The respond step's degradation: an empty reply is asked for once more, then reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.cognition.pipeline import respond
from persyn.core.config import AgentConfig, Settings
from persyn.core.ids import new_id
from persyn.gateway.base import Prompt, UserTurn
from persyn.gateway.gateway import ModelGateway
from persyn.testing.meter import RecordingAdapter
from persyn.testing.models import DoubleReply, registered_double
from persyn.usage.meter import Meter

AGENT = AgentConfig(name="Ada", id=new_id())
PROMPT = Prompt(system="You are Ada.", items=(UserTurn(text="Hi!", name="Sam"),))


async def _respond_with(tmp_path: Path, replies: list[str]) -> tuple[Any, RecordingAdapter]:
    def speaker(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        return DoubleReply(text=replies.pop(0))

    adapter = RecordingAdapter()
    with registered_double("terse", speaker):
        settings = Settings(home=tmp_path, agents=[AGENT])
        settings = settings.model_copy(
            update={"models": settings.models.model_copy(update={"default": "test:terse"})}
        )
        meter = Meter([adapter])
        gateway = ModelGateway(settings, AGENT, meter)
        try:
            reply = await respond(gateway, PROMPT)
        finally:
            await gateway.aclose()
        assert meter.flush()
    return reply, adapter


async def test_an_empty_reply_is_asked_for_once_more(tmp_path: Path) -> None:
    reply, adapter = await _respond_with(tmp_path, ["  \n", "Hello Sam."])
    assert reply.text == "Hello Sam." and reply.failure is None
    assert [r.stage for r in adapter.records] == ["respond", "respond"]  # both calls metered


async def test_two_empty_replies_are_a_stated_failure(tmp_path: Path) -> None:
    reply, adapter = await _respond_with(tmp_path, ["", "\n"])
    assert reply.text is None and reply.failure == "the model returned an empty reply"
    assert len(adapter.records) == 2
