"""A model double for outreach across the network tests: asked to "tell NAME: X", the agent
writes X to NAME (`message_contact`) and then says what the tool answered (its delivery, or the
refusal it read); asked "in N minutes, WHAT", it sets a reminder (`set_reminder`) whose
objective is WHAT, and says WHAT when it comes due (a reminder's run speaks to the person it
was set for); anything else is echoed."""

from __future__ import annotations

import re

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.testing import consolidation_reply, tool_returns
from persyn.testing.models import DoubleReply, last_user_text

_ASKED = re.compile(r"tell (\w+): (.+)")
_LATER = re.compile(r"in (\d+) minutes?, (.+)")


def relay(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
    text = last_user_text(messages)
    later, asked = _LATER.search(text), _ASKED.search(text)
    if task == "respond" and "has come due:" in text:
        return DoubleReply(text=text.split("has come due:", 1)[1].strip().splitlines()[0])
    if task == "respond" and later:
        if not tool_returns(messages):
            args = {"in_minutes": int(later[1]), "objective": later[2].strip()}
            return DoubleReply(tool_calls=[{"name": "set_reminder", "args": args}])
        return DoubleReply(text="I will.")
    if task == "respond" and asked:
        returned = tool_returns(messages)
        if not returned:
            args = {"to": asked[1], "text": asked[2].strip()}
            return DoubleReply(tool_calls=[{"name": "message_contact", "args": args}])
        return DoubleReply(text=f"Done: {returned[-1].content}")
    return consolidation_reply(task) or DoubleReply(text=f"You said: {text}")
