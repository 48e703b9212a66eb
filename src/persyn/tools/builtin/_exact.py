"""The exact evaluator behind the `calculate` tool (`tools/builtin/arithmetic.py`), standard library only.

It is CPU-bound work the event loop cannot interrupt, so the tool runs it in a fresh
interpreter started with `-I -S` (`tools/_isolated.py`: about 20 ms, no site packages), killed
at `[tools] cpu_seconds`; this module therefore imports nothing outside the standard library.
A refusal is a `Refused` (a `ValueError`) whose message says what to change.

The expression is parsed with `ast` and only a small, explicit grammar is walked: numbers,
parentheses, unary + and -, the binary operators + - * / // % **, and a few functions
(abs, round, min, max, floor, ceil, sqrt). Numbers are exact rationals (`Fraction`); a decimal
literal is read from its source text, so 0.1 + 0.2 is exactly 0.3. Only `sqrt` of a number
that is not a perfect square gives an approximation (50 significant digits), and the result
says so.

Bounds keep one call cheap: the expression length, the number of syntax nodes, and the size
of every number (`MAX_BITS` for numerator and denominator), checked *before* it is computed:
a power from the sizes of its operands, a decimal literal from its digits and exponent
(`Fraction("1e30000000")` would otherwise expand ten characters into a 30-million-digit
integer, 28 s of CPU).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

__all__ = [
    "MAX_BITS",
    "MAX_EXPRESSION_CHARS",
    "Refused",
    "calculate",
    "evaluate_exact",
    "format_number",
]

MAX_EXPRESSION_CHARS = 1000
MAX_NODES = 400
MAX_BITS = 10_000  # ~3,000 decimal digits; well inside Python's int-to-str limit
SQRT_DIGITS = 50
APPROXIMATION_DIGITS = 30
_MAX_DIGITS = math.ceil(MAX_BITS / math.log2(10)) + 1
_DECIMAL_LITERAL = re.compile(r"(?P<whole>\d*)(?:\.(?P<fraction>\d*))?(?:[eE](?P<exponent>[+-]?\d+))?")


class Refused(ValueError):
    """An expression the evaluator refuses or cannot compute."""


def calculate(arguments: dict[str, Any]) -> dict[str, Any]:
    """The tool's work on its JSON input (`{"expression": ...}`): the `Calculation` fields."""
    return evaluate_exact(str(arguments["expression"]))


def evaluate_exact(expression: str) -> dict[str, Any]:
    """Evaluate `expression` exactly (the fields of a `Calculation`); raise `Refused` saying why
    it cannot be."""
    text = expression.strip()
    if not text:
        raise Refused("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise Refused(f"the expression is {len(text)} characters long; the limit is {MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise Refused(f"{text!r} is not an arithmetic expression ({detail})") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise Refused(f"the expression is too complex ({nodes} parts; the limit is {MAX_NODES})")
    walker = _Evaluator(text)
    try:
        value = walker.visit(tree.body)
    except RecursionError:
        raise Refused("the expression is nested too deeply") from None
    return _calculation(text, value, walker.exact)


def format_number(value: Fraction) -> tuple[str, str | None]:
    """(`value` as an integer, exact decimal or fraction p/q; a decimal approximation when
    it is a fraction, else None)."""
    if value.denominator == 1:
        return str(value.numerator), None
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator == 1:  # a terminating decimal: write it out exactly
        places = max(twos, fives)
        scaled = abs(value.numerator) * 10**places // value.denominator
        digits = str(scaled).rjust(places + 1, "0")
        sign = "-" if value < 0 else ""
        return f"{sign}{digits[:-places]}.{digits[-places:]}", None
    context = Context(prec=APPROXIMATION_DIGITS)
    approximation = context.divide(Decimal(value.numerator), Decimal(value.denominator))
    return f"{value.numerator}/{value.denominator}", _plain(approximation)


def _calculation(expression: str, value: Fraction, exact: bool) -> dict[str, Any]:
    if not exact:
        # An approximated root: report it as a decimal, never as a misleading huge fraction.
        approximation = Context(prec=SQRT_DIGITS).divide(Decimal(value.numerator), Decimal(value.denominator))
        return {"expression": expression, "value": _plain(approximation), "exact": False, "decimal": None}
    shown, decimal = format_number(value)
    return {"expression": expression, "value": shown, "exact": True, "decimal": decimal}


def _plain(number: Decimal) -> str:
    text = format(number, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


_BINARY: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}

_HINTS: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' is not a power here; write 2**10 for two to the tenth",
    ast.MatMult: "'@' is not an arithmetic operator",
    ast.Compare: "comparisons are not supported; compute both sides and compare them",
    ast.BoolOp: "'and'/'or' are not supported",
    ast.Name: "names are not supported; write the number itself",
    ast.Attribute: "attributes are not supported",
    ast.Subscript: "indexing is not supported",
    ast.Lambda: "functions cannot be defined",
    ast.IfExp: "conditional expressions are not supported",
}


class _Evaluator:
    def __init__(self, source: str) -> None:
        self._source = source
        self.exact = True
        self._functions: dict[str, Callable[[Sequence[Fraction]], Fraction]] = {
            "abs": self._abs,
            "round": self._round,
            "min": self._min,
            "max": self._max,
            "floor": self._floor,
            "ceil": self._ceil,
            "sqrt": self._sqrt,
        }

    def visit(self, node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.visit(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._binary(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise Refused(f"{self._segment(node)!r} is not supported: {self._hint(node)}")

    def _hint(self, node: ast.AST) -> str:
        key = type(node.op) if isinstance(node, ast.BinOp | ast.UnaryOp) else type(node)
        return _HINTS.get(key, "use numbers, + - * / // % **, parentheses and " + self._function_list())

    def _function_list(self) -> str:
        return "the functions " + ", ".join(sorted(self._functions))

    def _segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self._source, node) or type(node).__name__

    def _constant(self, node: ast.Constant) -> Fraction:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Refused(f"{self._segment(node)!r} is not a number")
        if isinstance(value, int):
            return _bounded(Fraction(value), self._segment(node))
        # Read the literal as written: float(0.1) is not one tenth, the text "0.1" is.
        literal = self._segment(node).replace("_", "")
        _bound_literal(literal)
        try:
            number = Fraction(literal)
        except (ValueError, ZeroDivisionError):
            raise Refused(f"{literal!r} is not a number this evaluator reads") from None
        return _bounded(number, literal)

    def _binary(self, node: ast.BinOp) -> Fraction:
        left = self.visit(node.left)
        right = self.visit(node.right)
        symbol = _BINARY[type(node.op)]
        where = self._segment(node)
        if symbol == "**":
            return self._power(left, right, where)
        if symbol in ("/", "//", "%") and right == 0:
            raise Refused(f"division by zero in {where!r}")
        if symbol == "+":
            result = left + right
        elif symbol == "-":
            result = left - right
        elif symbol == "*":
            result = left * right
        elif symbol == "/":
            result = left / right
        elif symbol == "//":
            result = Fraction(left // right)
        else:
            result = left % right
        return _bounded(result, where)

    def _power(self, base: Fraction, exponent: Fraction, where: str) -> Fraction:
        if exponent.denominator != 1:
            raise Refused(f"{where!r}: only whole-number exponents are exact; use sqrt() for square roots")
        power = exponent.numerator
        if base == 0 and power < 0:
            raise Refused(f"division by zero in {where!r} (zero to a negative power)")
        if base in (0, 1) or power == 0:
            return Fraction(1) if power == 0 else base
        if base == -1:
            return Fraction(1 if power % 2 == 0 else -1)
        # The result has at least (bits - 1) * |power| bits: refuse before computing it.
        bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
        if (bits - 1) * abs(power) > MAX_BITS:
            raise Refused(
                f"{where!r} is too large to compute exactly (more than about {MAX_BITS * 3 // 10} digits)"
            )
        return _bounded(base**power, where)

    def _call(self, node: ast.Call) -> Fraction:
        if not isinstance(node.func, ast.Name) or node.func.id not in self._functions:
            raise Refused(
                f"{self._segment(node.func)!r} is not an available function; available: "
                + ", ".join(sorted(self._functions))
            )
        if node.keywords:
            raise Refused(f"{self._segment(node)!r}: pass arguments by position")
        arguments = [self.visit(argument) for argument in node.args]
        return _bounded(self._functions[node.func.id](arguments), self._segment(node))

    # functions -------------------------------------------------------------------------
    @staticmethod
    def _arity(name: str, arguments: Sequence[Fraction], low: int, high: int) -> None:
        if not low <= len(arguments) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            raise Refused(f"{name}() takes {wanted} arguments, got {len(arguments)}")

    def _abs(self, arguments: Sequence[Fraction]) -> Fraction:
        self._arity("abs", arguments, 1, 1)
        return abs(arguments[0])

    def _round(self, arguments: Sequence[Fraction]) -> Fraction:
        """Round half to even, like Python's round; `round(x, n)` keeps n decimal places."""
        self._arity("round", arguments, 1, 2)
        if len(arguments) == 1:
            return Fraction(round(arguments[0]))
        places = arguments[1]
        if places.denominator != 1 or not -100 <= places.numerator <= 100:
            raise Refused("round(): the number of places must be a whole number from -100 to 100")
        return Fraction(round(arguments[0], places.numerator))

    def _min(self, arguments: Sequence[Fraction]) -> Fraction:
        self._arity("min", arguments, 1, 100)
        return min(arguments)

    def _max(self, arguments: Sequence[Fraction]) -> Fraction:
        self._arity("max", arguments, 1, 100)
        return max(arguments)

    def _floor(self, arguments: Sequence[Fraction]) -> Fraction:
        self._arity("floor", arguments, 1, 1)
        return Fraction(math.floor(arguments[0]))

    def _ceil(self, arguments: Sequence[Fraction]) -> Fraction:
        self._arity("ceil", arguments, 1, 1)
        return Fraction(math.ceil(arguments[0]))

    def _sqrt(self, arguments: Sequence[Fraction]) -> Fraction:
        """Exact for squares of rationals (sqrt(9/4) = 3/2), else 50 significant digits."""
        self._arity("sqrt", arguments, 1, 1)
        value = arguments[0]
        if value < 0:
            raise Refused(f"sqrt() of a negative number ({format_number(value)[0]}) is not real")
        numerator, denominator = math.isqrt(value.numerator), math.isqrt(value.denominator)
        if numerator * numerator == value.numerator and denominator * denominator == value.denominator:
            return Fraction(numerator, denominator)
        self.exact = False
        context = Context(prec=SQRT_DIGITS + 5)
        root = context.sqrt(context.divide(Decimal(value.numerator), Decimal(value.denominator)))
        return Fraction(root)


def _bounded(value: Fraction, where: str) -> Fraction:
    if max(abs(value.numerator).bit_length(), value.denominator.bit_length()) > MAX_BITS:
        raise Refused(
            f"{where!r} is too large to compute exactly (more than about {MAX_BITS * 3 // 10} digits)"
        )
    return value


def _bound_literal(literal: str) -> None:
    """Refuse a decimal literal with an exponent too large to read *before* reading it. What
    passes expands to at most (2 * digits + MAX_BITS / log2(10)) decimal digits, which is
    cheap; `_bounded` then checks the exact value."""
    parsed = _DECIMAL_LITERAL.fullmatch(literal)
    if parsed is None or parsed["exponent"] is None:
        return  # no exponent: its size is the literal's length, bounded already
    digits = len(parsed["whole"]) + len(parsed["fraction"] or "")
    exponent = parsed["exponent"].lstrip("+-").lstrip("0")
    if len(exponent) > 9 or int(exponent or "0") > digits + _MAX_DIGITS:
        raise Refused(
            f"{literal!r} is too large to compute exactly (more than about {MAX_BITS * 3 // 10} digits)"
        )
