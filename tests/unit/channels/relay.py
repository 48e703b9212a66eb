"""A model double for outreach across the network tests: asked to "tell NAME: X", the agent
writes X to NAME (`message_contact`) and then says what the tool answered (its delivery, or the
refusal it read); anything else is echoed."""

from __future__ import annotations

import re

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.testing import tool_returns
from persyn.testing.models import DoubleReply, last_user_text

_ASKED = re.compile(r"tell (\w+): (.+)")


def relay(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
    text = last_user_text(messages)
    asked = _ASKED.search(text)
    if task == "respond" and asked:
        returned = tool_returns(messages)
        if not returned:
            args = {"to": asked[1], "text": asked[2].strip()}
            return DoubleReply(tool_calls=[{"name": "message_contact", "args": args}])
        return DoubleReply(text=f"Done: {returned[-1].content}")
    return DoubleReply(text=f"You said: {text}")
