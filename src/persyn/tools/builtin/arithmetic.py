"""Exact arithmetic (SPEC §4.6): a safe evaluator for expressions, never `eval`.

The evaluator itself is `tools/builtin/_exact.py` (its module note has the grammar and the bounds):
standard library only, so the `calculate` tool runs it in a killable child interpreter
(`Tool.isolated`, `tools/_isolated.py`) and a pathological expression costs at most
`[tools] cpu_seconds` of a child's CPU, never the event loop's. `evaluate` runs it in
process, for callers that bound their input themselves (and for tests).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.errors import ToolError
from persyn.tools._isolated import IsolatedWork
from persyn.tools.builtin import _exact
from persyn.tools.builtin._exact import MAX_BITS, MAX_EXPRESSION_CHARS, format_number
from persyn.tools.registry import Tool

__all__ = [
    "MAX_BITS",
    "MAX_EXPRESSION_CHARS",
    "Calculation",
    "CalculatorInput",
    "ExpressionError",
    "calculator_tool",
    "evaluate",
    "format_number",
]


class ExpressionError(ToolError):
    """An expression the evaluator refuses or cannot compute."""


class Calculation(BaseModel):
    """The result of an expression: `value` as an integer or exact decimal when it has
    one, else as a fraction p/q with `decimal` an approximation of it."""

    model_config = ConfigDict(frozen=True)

    expression: str
    value: str = Field(description="The result: an integer, an exact decimal, or a fraction p/q.")
    exact: bool = Field(description="False only when a square root had to be approximated.")
    decimal: str | None = Field(
        default=None, description="A decimal approximation, when `value` is a fraction."
    )


class CalculatorInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expression: str = Field(
        description=(
            "E.g. '(1.5 + 2/3) * 12'. Operators + - * / // % ** and parentheses; abs, "
            "round(x, digits), min, max, floor, ceil, sqrt."
        ),
        max_length=MAX_EXPRESSION_CHARS,
    )


def calculator_tool() -> Tool[CalculatorInput, Calculation]:
    return Tool(
        name="calculate",
        description=(
            "Evaluate arithmetic exactly (0.1 + 0.2 is 0.3); use it for any calculation "
            "instead of doing it in your head."
        ),
        input_model=CalculatorInput,
        output_model=Calculation,
        isolated=IsolatedWork(_exact.__file__, "calculate"),
    )


def evaluate(expression: str) -> Calculation:
    """Evaluate `expression` exactly, in this process; raise `ExpressionError` saying why it
    cannot be."""
    try:
        return Calculation.model_validate(_exact.evaluate_exact(expression))
    except _exact.Refused as exc:
        raise ExpressionError(str(exc)) from None
