"""Issue 13 item 7: CPU-bound tool work never holds the event loop.

`calculate("1e30000000")` — ten characters — once ran 28 s on the event loop (`Fraction`
expanded the exponent before the size bound), stalling every agent, the scheduler and the
DBOS workers of the process. Literals are bounded before they are read, and a tool marked
`isolated` runs its work in a child interpreter the registry kills at `[tools] cpu_seconds`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from pydantic import BaseModel

from persyn.core.config import ToolsConfig
from persyn.gateway.base import ToolCall
from persyn.tools import Tool, ToolRegistry, ToolStatus
from persyn.tools._isolated import IsolatedWork
from persyn.tools.builtin.arithmetic import ExpressionError, calculator_tool, evaluate


async def test_a_huge_literal_is_refused_while_the_event_loop_runs_on() -> None:
    registry = ToolRegistry([calculator_tool()])
    call = asyncio.create_task(
        registry.call(ToolCall(id="c1", name="calculate", args={"expression": "1e30000000"}))
    )
    # Another coroutine of the process (another agent, the scheduler) gets the loop while the
    # calculation is under way: the call is still pending when it has finished.
    other = asyncio.create_task(asyncio.sleep(0))
    done, _ = await asyncio.wait({call, other}, return_when=asyncio.FIRST_COMPLETED)
    assert other in done and call not in done
    outcome = await call
    assert outcome.status is ToolStatus.FAILED
    assert outcome.content == (
        "Tool 'calculate' failed: '1e30000000' is too large to compute exactly (more than about 3000 digits)"
    )


@pytest.mark.parametrize("literal", ["1e30000000", "1E+999999999999", "0.5e-40000000", "7e3100"])
def test_a_literal_with_a_huge_exponent_is_refused_before_it_is_read(literal: str) -> None:
    with pytest.raises(ExpressionError, match="too large to compute exactly"):
        evaluate(f"{literal} * 0")


def test_literals_with_exponents_inside_the_bound_still_read_exactly() -> None:
    assert evaluate("1.5e3").value == "1500"
    assert evaluate("2.5e-3").value == "0.0025"
    assert evaluate("1e3000 / 1e2999").value == "10"


class _Spin(BaseModel):
    pid_file: str


class _Nothing(BaseModel):
    pass


_SPINNER = """
import os, pathlib

def spin(argument):
    pathlib.Path(argument["pid_file"]).write_text(str(os.getpid()))
    while True:
        pass
"""


async def test_isolated_work_past_its_limit_is_killed(tmp_path: Path) -> None:
    module = tmp_path / "spinner.py"
    module.write_text(_SPINNER)
    pid_file = tmp_path / "pid"
    spinner: Tool[_Spin, _Nothing] = Tool(
        name="spin",
        description="Burns CPU forever.",
        input_model=_Spin,
        output_model=_Nothing,
        isolated=IsolatedWork(module, "spin"),
    )
    registry = ToolRegistry([spinner], config=ToolsConfig(cpu_seconds=3))
    outcome = await registry.call(ToolCall(id="s1", name="spin", args={"pid_file": str(pid_file)}))
    assert outcome.status is ToolStatus.FAILED
    assert outcome.content == "Tool 'spin' did not finish within 3 seconds and was stopped."
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # the work really stopped: its process is gone
        os.kill(pid, 0)
