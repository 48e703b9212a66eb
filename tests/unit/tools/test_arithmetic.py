"""Exact arithmetic (SPEC §4.6): rational results, bounded work, and a clear refusal for
anything that is not arithmetic — the evaluator never reaches Python's eval."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persyn.gateway.base import ToolCall
from persyn.tools import ToolRegistry, ToolStatus
from persyn.tools.builtin.arithmetic import (
    MAX_EXPRESSION_CHARS,
    Calculation,
    ExpressionError,
    calculator_tool,
    evaluate,
    format_number,
)


@pytest.mark.parametrize(
    ("expression", "value", "decimal"),
    [
        ("0.1 + 0.2", "0.3", None),
        ("0.1 + 0.2 - 0.3", "0", None),
        ("1/3 + 1/6", "0.5", None),
        ("1/3", "1/3", "0.333333333333333333333333333333"),
        ("2/3 * 3", "2", None),
        ("10 / 4", "2.5", None),
        ("-7 // 2", "-4", None),
        ("-7 % 3", "2", None),
        ("7.5 % 2", "1.5", None),
        ("(1 + 2) * -3", "-9", None),
        ("+5 - -5", "10", None),
        ("2 ** -2", "0.25", None),
        ("(-2) ** 3", "-8", None),
        ("(2/3) ** 2", "4/9", "0.444444444444444444444444444444"),
        ("0 ** 0", "1", None),
        ("1e-3 * 3", "0.003", None),
        ("1_000_000 * 1.5", "1500000", None),
        ("0x10 + 1", "17", None),
        ("1.1 * 1.1", "1.21", None),
        ("abs(-2.5)", "2.5", None),
        ("round(2.675, 2)", "2.68", None),  # exact 2.675: a float would give 2.67
        ("round(2.5)", "2", None),  # half to even
        ("round(1234.5, -2)", "1200", None),
        ("min(3, 1/2, 2)", "0.5", None),
        ("max(3, 1/2, 2)", "3", None),
        ("floor(-1.5) + ceil(1.2)", "0", None),
        ("sqrt(9/4)", "1.5", None),
        ("sqrt(0)", "0", None),
        ("-0.125", "-0.125", None),
    ],
)
def test_exact_results(expression: str, value: str, decimal: str | None) -> None:
    result = evaluate(expression)
    assert result == Calculation(expression=expression, value=value, exact=True, decimal=decimal)


def test_big_integers_stay_exact() -> None:
    assert evaluate("2 ** 100").value == "1267650600228229401496703205376"
    assert evaluate("3 ** 200 - 3 ** 200 + 1").value == "1"
    assert evaluate("2 ** 9999").value == str(2**9999)
    assert evaluate("12345678901234567890 * 98765432109876543210").value == str(
        12345678901234567890 * 98765432109876543210
    )


def test_an_irrational_root_is_approximated_and_says_so() -> None:
    result = evaluate("sqrt(2)")
    assert result.exact is False
    assert result.value == "1.4142135623730950488016887242096980785696718753769"  # 50 digits
    assert not evaluate("sqrt(2) * sqrt(2) - 2").exact


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "the expression is empty"),
        ("x + 1", "'x' is not supported: names are not supported"),
        ("pi * 2", "'pi' is not supported: names are not supported"),
        ("__import__('os').system('true')", "__import__('os').system\" is not an available function"),
        ("open('/etc/passwd')", "'open' is not an available function; available: abs, ceil, floor, max"),
        ("(1).real", "attributes are not supported"),
        ("[1, 2][0]", "indexing is not supported"),
        ("'a' * 3", "\"'a'\" is not a number"),
        ("True + 1", "'True' is not a number"),
        ("1j * 2", "'1j' is not a number"),
        ("1 < 2", "comparisons are not supported"),
        ("1 and 2", "'and'/'or' are not supported"),
        ("2 ^ 10", "'^' is not a power here; write 2**10"),
        ("lambda: 1", "functions cannot be defined"),
        ("1 if 2 else 3", "conditional expressions are not supported"),
        ("1 / 0", "division by zero in '1 / 0'"),
        ("5 // (2 - 2)", "division by zero in '5 // (2 - 2)'"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "zero to a negative power"),
        ("2 ** 0.5", "only whole-number exponents are exact; use sqrt()"),
        ("2 ** 10000", "is too large to compute exactly"),
        ("10 ** 10 ** 10", "is too large to compute exactly"),
        ("(10 ** 2000) * (10 ** 2000)", "is too large to compute exactly"),
        ("sqrt(-4)", "sqrt() of a negative number (-4) is not real"),
        ("sqrt(1, 2)", "sqrt() takes 1 arguments, got 2"),
        ("max()", "max() takes 1 to 100 arguments, got 0"),
        ("round(1, 0.5)", "round(): the number of places must be a whole number"),
        ("round(1, ndigits=2)", "pass arguments by position"),
        ("1 +", "is not an arithmetic expression"),
        ("1 = 1", "is not an arithmetic expression"),
        ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
        ("+".join(["1"] * 300), "the expression is too complex"),
        ("1" * (MAX_EXPRESSION_CHARS + 1), "the limit is 1000"),
    ],
)
def test_rejections_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(expression)
    assert message in str(caught.value)


def test_format_number() -> None:
    assert format_number(Fraction(-3, 8)) == ("-0.375", None)
    assert format_number(Fraction(22, 7)) == ("22/7", "3.14285714285714285714285714286")
    assert format_number(Fraction(10**20)) == ("100000000000000000000", None)


@given(
    st.fractions(max_denominator=10**6),
    st.fractions(max_denominator=10**6),
    st.sampled_from(["+", "-", "*", "/"]),
)
def test_matches_fraction_arithmetic(left: Fraction, right: Fraction, operator: str) -> None:
    if operator == "/" and right == 0:
        return
    expression = f"({left.numerator}/{left.denominator}) {operator} ({right.numerator}/{right.denominator})"
    expected = {
        "+": left + right,
        "-": left - right,
        "*": left * right,
        "/": left / right if right else Fraction(0),
    }[operator]
    assert evaluate(expression).value == format_number(expected)[0]


async def test_the_calculate_tool_through_the_registry() -> None:
    registry = ToolRegistry([calculator_tool()])
    ok = await registry.call(ToolCall(id="c1", name="calculate", args={"expression": "0.1 + 0.2"}))
    assert ok.status is ToolStatus.OK
    assert ok.output == {"expression": "0.1 + 0.2", "value": "0.3", "exact": True, "decimal": None}
    refused = await registry.call(ToolCall(id="c2", name="calculate", args={"expression": "1/0"}))
    assert refused.status is ToolStatus.FAILED
    assert refused.content == "Tool 'calculate' failed: division by zero in '1/0'"
    too_long = await registry.call(ToolCall(id="c3", name="calculate", args={"expression": "1" * 1001}))
    assert too_long.status is ToolStatus.INVALID_ARGUMENTS
