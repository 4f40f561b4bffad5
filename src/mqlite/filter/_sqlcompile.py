"""Compile a SQL92 selector tree into one Python function, with Java's conversions.

RocketMQ evaluates a selector by walking its tree per message. Walking a tree in
Python costs a call per node, so instead the tree is turned into the source of a
single function and `compile()`d once: `a > 5 AND b = 'x'` becomes

    def match(p):
        try:
            if not ((v1 := p.get('a')) is not None and (int(v1) if ... else to_int(v1)) > 5):
                return False
            return ((v2 := p.get('b')) is not None and v2 == 'x')
        except EvaluationError:
            return False

which runs at a few million evaluations per second (bench/bench_filter.py).

Three-valued logic is kept exact. Every operand's Java class is known when the
function is generated (a property is a String or null, a literal has its class,
a condition is a Boolean or null), so each comparison is specialised to the one
conversion Java would make, and only nullness is tested at run time. Where Java
throws (a property that is not a number, a Boolean compared with a String), the
generated code raises `EvaluationError`, which aborts the whole evaluation as
Java's exception does; the broker then treats the message as not matched.

The generated code has three ways to look at a condition:

* `_value`: its exact value, True, False or None (null), raising where Java raises;
* `_test`: a bool, "the value is TRUE" (or FALSE), raising exactly where Java raises;
* `_require`/`_top`: at the top, where only "matched or not" is wanted: once a
  term of a top-level AND is not TRUE the answer is no match, so the function
  returns at once instead of evaluating the rest as Java would (an exception
  there would also mean no match).
"""

from __future__ import annotations

import contextlib
import math
import operator
import re
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, cast

from ._sqlast import (
    BOOLEAN_NODES,
    BoolCast,
    Chain,
    Compare,
    Const,
    Equal,
    InList,
    IsNull,
    Negate,
    Node,
    Not,
    Prop,
    StringMatch,
)

__all__ = ["EvaluationError", "MatchFunction", "compile_match", "java_compare"]

MatchFunction = Callable[[Mapping[str, str]], bool]

_INT_BOUND = 1 << 31
_LONG_BOUND = 1 << 63
# String.trim() drops every char up to and including the space (U+0000..U+0020).
_JAVA_TRIM = "".join(map(chr, range(33)))
# Double.valueOf's grammar (FloatingDecimal.readJavaFormatString), ASCII digits only.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)")
_BITS = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")
_CANONICAL_NAN_BITS = 0x7FF8000000000000
_ORDER: dict[str, Callable[[int, int], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


class EvaluationError(Exception):
    """Java threw while evaluating a selector; the message does not match."""


# -- Java's conversions of a String property -------------------------------------------
def to_int(text: str) -> int:
    """`Integer.valueOf(text)`: an optional sign and decimal digits, in 32 bits; else EvaluationError."""
    return _parse_integer(text, _INT_BOUND, "Integer")


def to_long(text: str) -> int:
    """`Long.valueOf(text)`: an optional sign and decimal digits, in 64 bits; else EvaluationError."""
    return _parse_integer(text, _LONG_BOUND, "Long")


def _parse_integer(text: str, bound: int, java_type: str) -> int:
    # Python's int() also takes spaces and underscores, Java's parseInt does not.
    digits = text[1:] if text[:1] in ("+", "-") else text
    if digits.isdecimal() and len(digits) <= 20:  # more digits overflow anyway, and int() limits length
        value = int(text)
        if -bound <= value < bound:
            return value
    raise EvaluationError(f"NumberFormatException: {text!r} is not a {java_type}")


def to_double(text: str) -> float:
    """`Double.valueOf(text)`: Java's float syntax (NaN, Infinity, hex, f/d suffix), trimmed."""
    if text.isascii() and text.replace(".", "", 1).isdigit():
        return float(text)  # the common case, "12" or "3.5"; float() agrees with Java there
    trimmed = text.strip(_JAVA_TRIM)
    if not _JAVA_DOUBLE.fullmatch(trimmed):
        raise EvaluationError(f"NumberFormatException: {text!r} is not a Double")
    core = trimmed.rstrip("fFdD") if trimmed[-1:] != "N" else trimmed
    if "x" in core or "X" in core:
        try:
            return float.fromhex(core)
        except OverflowError:  # Java rounds a huge hex float to Infinity; fromhex refuses it
            return -math.inf if core[0] == "-" else math.inf
    return float(core)


def _to_double_vs_const(text: str) -> float:
    """`to_double` for a comparison with a literal, which is never NaN, zero or infinite.

    Java's `Double.compareTo` puts NaN above every number; Python compares NaN as
    False both ways. Against a finite literal, +inf behaves exactly like Java's NaN.
    """
    value = to_double(text)
    return math.inf if value != value else value


def java_boolean(text: str) -> bool:
    """`Boolean.valueOf(text)`: "true" in any case, everything else is false."""
    return text.lower() == "true"


def _double_bits(value: float) -> int:
    """`Double.doubleToLongBits`: the IEEE bits, every NaN collapsed to one."""
    return _CANONICAL_NAN_BITS if value != value else _BITS.unpack(_DOUBLE.pack(value))[0]


def compare_doubles(x: float, y: float) -> int:
    """`Double.compare`: numeric order, then -0.0 < 0.0 and NaN above everything (NaN == NaN)."""
    if x < y:
        return -1
    if x > y:
        return 1
    bx, by = _double_bits(x), _double_bits(y)
    return (bx > by) - (bx < by)


def _compare_strings_as_doubles(left: str, right: str) -> int:
    """Two String operands of `>`/`<`...: both must parse as Double (`ComparisonExpression.evaluate`)."""
    return compare_doubles(to_double(left), to_double(right))


def _class_cast() -> NoReturn:
    # __compare casts a Boolean left operand to String when the right one is a String.
    raise EvaluationError("ClassCastException: a Boolean cannot be compared with a String")


def _fail(message: str) -> NoReturn:
    raise EvaluationError(message)


# kinds of non-null operand values: String, Integer, Long, Double, Boolean; "N" is always null.
_KIND_OF = {"string": "S", "int": "I", "long": "L", "double": "D", "bool": "B"}


def java_compare(lk: str, lv: Any, rk: str, rv: Any) -> int:
    """`ComparisonExpression.__compare` of two non-null values of kinds S/I/L/D/B.

    Raises EvaluationError where Java throws (a bad number, Boolean against String).
    """
    if lk != rk:
        if lk == "B":
            if rk == "S":
                _class_cast()
            return -1
        if lk == "S":
            if rk == "B":
                lv = java_boolean(str(lv))
            else:
                lv = _CONVERT[rk](str(lv))
        elif rk == "S":
            rv = _CONVERT[lk](str(rv))
        elif rk == "B":
            return -1
        elif "D" in (lk, rk):  # Integer/Long widen to Double
            lv, rv = float(lv), float(rv)
        # Integer against Long: Python ints compare exactly, as Long.valueOf would
    if isinstance(lv, float) or isinstance(rv, float):
        return compare_doubles(float(lv), float(rv))
    return (lv > rv) - (lv < rv)


_CONVERT: dict[str, Callable[[str], object]] = {"I": to_int, "L": to_long, "D": to_double}


# -- code generation --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Leaf:
    """A generated value: `body` when `present` holds, else null.

    `present` (may be None: always) binds the operands and checks they are not null;
    `body` is then a bool expression. With no `present`, `body` is the whole value,
    a bool when `is_bool`, else True/False/None.
    """

    present: str | None
    body: str
    is_bool: bool = True

    def value(self) -> str:
        return self.body if self.present is None else f"({self.body} if {self.present} else None)"

    def test(self, want: bool) -> str:
        if self.present is None:
            if self.body in ("True", "False", "None"):
                return str(self.body == str(want))
            if self.is_bool:
                return self.body if want else f"(not {self.body})"
            return f"({self.body} is {want})"
        if self.body == "False":  # a bare property: null or FALSE, never TRUE
            return "False" if want else self.present
        return f"({self.present} and {'' if want else 'not '}{self.body})"


_NULL = _Leaf(None, "None", False)
_TRUE = _Leaf(None, "True")
_FALSE = _Leaf(None, "False")


@dataclass(frozen=True, slots=True)
class _Operand:
    """A value operand: kind S/I/L/D/B of its non-null values, or N (always null)."""

    kind: str
    code: str  # a name or a side-effect-free expression
    nullable: bool
    const: Any = None


_NULL_OPERAND = _Operand("N", "None", False)


def _int_of(name: str) -> str:
    # Inline the common case: up to 9 decimal digits always fit an Integer.
    return f"(int({name}) if {name}.isdecimal() and len({name}) < 10 else to_int({name}))"


def _convert(name: str, kind: str) -> str:
    """Code converting the str in `name` to the class of the other side (`__compare`)."""
    if kind == "I":
        return _int_of(name)
    if kind == "L":
        return f"to_long({name})"
    if kind == "D":
        return f"to_double_vs_const({name})"
    return f"({name}.lower() == 'true')"  # Boolean.valueOf


def _has_effects(node: Node) -> bool:
    """Whether evaluating a value may raise (it contains a condition)."""
    if isinstance(node, BOOLEAN_NODES):
        return True
    return isinstance(node, Negate) and _has_effects(node.operand)


class _Compiler:
    """Emits the statements of one match function."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 2
        self.names = 0
        self.constants: dict[str, object] = {}

    # -- plumbing --
    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(header)
        self.indent += 1
        mark = len(self.lines)
        yield
        if len(self.lines) == mark:
            self.line("pass")
        self.indent -= 1

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def constant(self, value: object) -> str:
        name = self.name("k")
        self.constants[name] = value
        return name

    def bind(self, operand: _Operand) -> tuple[str, str]:
        """(condition "operand is not null" binding a name, the name)."""
        if operand.code.isidentifier():
            return f"{operand.code} is not None", operand.code
        var = self.name("v")
        return f"({var} := {operand.code}) is not None", var

    # -- top level: only "matched or not" --
    def top(self, node: Node) -> None:
        if isinstance(node, Chain) and node.op == "AND":
            for term in node.terms[:-1]:
                self.require(term)
            self.top(node.terms[-1])
        elif isinstance(node, Chain):
            for term in node.terms[:-1]:
                test = self.test(term, True)
                self.line(f"if {test}: return True")
            self.top(node.terms[-1])
        else:
            self.line(f"return {self.test(node, True)}")

    def require(self, node: Node) -> None:
        """Return False from the function unless `node` is TRUE."""
        if isinstance(node, Chain) and node.op == "AND":
            for term in node.terms:
                self.require(term)
            return
        if isinstance(node, Chain):
            ok = self.name("ok")
            self.line(f"{ok} = {self.test(node.terms[0], True)}")
            for term in node.terms[1:]:
                with self.block(f"if not {ok}:"):
                    self.line(f"{ok} = {self.test(term, True)}")
            self.line(f"if not {ok}: return False")
            return
        test = self.test(node, True)
        if test != "True":
            self.line(f"if not {test}: return False")

    # -- exact values --
    def test(self, node: Node, want: bool) -> str:
        """A bool expression: node's value is `want`; raises exactly where Java would."""
        if isinstance(node, Not):
            return self.test(node.operand, not want)
        return self.leaf(node).test(want)

    def leaf(self, node: Node) -> _Leaf:
        if isinstance(node, Const):
            return _NULL if node.value is None else (_TRUE if node.value else _FALSE)
        if isinstance(node, BoolCast):
            return _Leaf(f"p.get({node.prop.name!r}) is not None", "False")
        if isinstance(node, Not):
            inner = self.leaf(node.operand)
            if inner.present is not None or inner.is_bool:
                return _Leaf(inner.present, f"(not {inner.body})")
            var = self.name("t")
            self.line(f"{var} = {inner.body}")
            return _Leaf(f"{var} is not None", f"(not {var})")
        if isinstance(node, Chain):
            return _Leaf(None, self.chain(node), False)
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, Equal):
            return self.equal(self.operand(node.left), self.operand(node.right))
        if isinstance(node, IsNull):
            return self.equal(self.operand(node.operand), _NULL_OPERAND)
        if isinstance(node, StringMatch):
            return self.string_match(node)
        if isinstance(node, InList):
            present, var = self.bind(self.operand(node.prop))
            values = self.constant(frozenset(node.values))
            return _Leaf(present, f"{var} {'not in' if node.negated else 'in'} {values}")
        raise AssertionError(f"not a condition: {node!r}")

    def chain(self, node: Chain) -> str:
        """Emit a Java AND/OR chain into a variable; returns its name."""
        var = self.name("t")
        self.line(f"{var} = {self.leaf(node.terms[0]).value()}")
        stop = "False" if node.op == "AND" else "True"
        for term in node.terms[1:]:
            with self.block(f"if {var} is not {stop}:"):
                item = self.name("x")
                self.line(f"{item} = {self.leaf(term).value()}")
                if node.op == "AND":  # var is True or None here
                    self.line(f"{var} = False if {item} is False else ({var} and {item})")
                else:  # var is False or None here
                    self.line(f"{var} = True if {item} else ({item} if {var} is False else None)")
        return var

    def operand(self, node: Node) -> _Operand:
        """Lower a value; a condition is evaluated into a variable first."""
        if isinstance(node, Const):
            if node.kind == "null":
                return _NULL_OPERAND
            return _Operand(_KIND_OF[node.kind], repr(node.value), False, node.value)
        if isinstance(node, Prop):
            return _Operand("S", f"p.get({node.name!r})", True)
        if isinstance(node, Negate):
            inner = self.operand(node.operand)
            if inner.kind in ("I", "L", "D"):  # numbers only come from literals: fold
                value = -inner.const
                return _Operand(inner.kind, repr(value), False, value)
            return _NULL_OPERAND  # Java: "-" of anything but a Number is null
        leaf = self.leaf(node)
        if leaf.present is None and leaf.body in ("True", "False"):
            return _Operand("B", leaf.body, False, leaf.body == "True")
        if leaf.present is None and leaf.body == "None":
            return _NULL_OPERAND
        var = self.name("t")
        self.line(f"{var} = {leaf.value()}")
        return _Operand("B", var, True)

    def compare(self, node: Compare) -> _Leaf:
        """`>`, `>=`, `<`, `<=`: operands are properties, numbers or null (checked at parse time)."""
        left = self.operand(node.left)
        if left.kind == "N":
            return _NULL  # the right side is not evaluated
        if left.nullable and _has_effects(node.right):
            # The right side is "-(condition)": null, but it may raise, and only runs if left is not null.
            with self.block(f"if {left.code} is not None:"):
                self.operand(node.right)
            return _NULL
        right = self.operand(node.right)
        op = node.op
        if right.kind == "N":
            return _NULL
        if not left.nullable and not right.nullable:
            result = _fold(lambda: java_compare(left.kind, left.const, right.kind, right.const))
            if isinstance(result, int):
                return _TRUE if _ORDER[op](result, 0) else _FALSE
            return _Leaf(None, str(result))  # a call that raises, as Java would
        if left.nullable and right.nullable:  # String against String: both parsed as Double
            lp, lvar = self.bind(left)
            rp, rvar = self.bind(right)
            return _Leaf(f"{lp} and {rp}", f"compare_strings_as_doubles({lvar}, {rvar}) {op} 0")
        if left.nullable:
            present, var = self.bind(left)
            return _Leaf(present, f"{_convert(var, right.kind)} {op} {right.code}")
        present, var = self.bind(right)
        return _Leaf(present, f"{left.code} {op} {_convert(var, left.kind)}")

    def equal(self, left: _Operand, right: _Operand) -> _Leaf:
        """`=` (`doCreateEqual`): null = null is TRUE, null = x is null, x = null is FALSE."""
        if right.kind == "N":
            if left.kind == "N":
                return _TRUE
            return _Leaf(None, f"{left.code} is None") if left.nullable else _FALSE
        if left.kind == "N":
            return _Leaf(None, f"(None if {right.code} is not None else True)", False) if right.nullable else _NULL
        if not left.nullable and not right.nullable:
            result = _fold(lambda: java_compare(left.kind, left.const, right.kind, right.const) == 0)
            return _Leaf(None, result if isinstance(result, str) else str(result))
        if not right.nullable:
            present, var = self.bind(left)
            return _Leaf(present, _equal_body(left.kind, var, right.kind, right.code))
        if not left.nullable:
            present, var = self.bind(right)
            return _Leaf(None, f"({present} and {_equal_body(left.kind, left.code, right.kind, var)})")
        lvar, rvar = self.bind(left)[1], self.bind(right)[1]
        if lvar != left.code:
            self.line(f"{lvar} = {left.code}")
        if rvar != right.code:
            self.line(f"{rvar} = {right.code}")
        body = _equal_body(left.kind, lvar, right.kind, rvar)
        return _Leaf(None, f"({body} if {lvar} is not None and {rvar} is not None else "
                           f"(None if {rvar} is not None else {lvar} is None))", False)

    def string_match(self, node: StringMatch) -> _Leaf:
        """CONTAINS and friends: FALSE unless the value is a String; never null."""
        if not node.search:
            return _FALSE  # Java returns before evaluating the operand
        operand = self.operand(node.operand)
        if operand.kind != "S":
            return _FALSE
        if not operand.nullable:
            return _TRUE if _string_match(node, str(operand.const)) else _FALSE
        present, var = self.bind(operand)
        search = repr(node.search)
        test = {"CONTAINS": f"{search} in {var}", "STARTSWITH": f"{var}.startswith({search})",
                "ENDSWITH": f"{var}.endswith({search})"}[node.op]
        return _Leaf(None, f"({present} and {'not ' if node.negated else ''}{test})")


def _string_match(node: StringMatch, value: str) -> bool:
    found = {"CONTAINS": node.search in value, "STARTSWITH": value.startswith(node.search),
             "ENDSWITH": value.endswith(node.search)}[node.op]
    return found != node.negated


def _equal_body(lk: str, left: str, rk: str, right: str) -> str:
    """Code for `left = right`, both non-null (`equals`, then `__compare(...) == 0`)."""
    if lk == rk:
        return f"{left} == {right}"
    if lk == "S":
        return f"{_convert(left, rk)} == {right}"
    if rk == "S":
        return "class_cast()" if lk == "B" else f"{left} == {_convert(right, lk)}"
    return "False"  # a Boolean against a number: __compare answers -1


def _fold(compute: Callable[[], object]) -> object:
    """A comparison of two literals, done now; one that throws in Java raises when evaluated."""
    try:
        return compute()
    except EvaluationError as exc:
        return f"fail({str(exc)!r})"


_RUNTIME = {
    "EvaluationError": EvaluationError, "to_int": to_int, "to_long": to_long,
    "to_double_vs_const": _to_double_vs_const, "compare_strings_as_doubles": _compare_strings_as_doubles,
    "class_cast": _class_cast, "fail": _fail,
}


def compile_match(root: Node, filename: str = "<sql92>") -> tuple[str, MatchFunction]:
    """Generate, compile and return (source, function) for a parsed condition.

    The function takes a property mapping and returns True only when the selector
    is TRUE for it; null, FALSE and Java exceptions all give False.
    """
    compiler = _Compiler()
    compiler.top(root)
    source = "\n".join(["def match(p):", "    try:", *compiler.lines,
                        "    except EvaluationError:", "        return False", ""])
    namespace: dict[str, object] = {**_RUNTIME, **compiler.constants, "__builtins__": {"int": int, "len": len}}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return source, cast(MatchFunction, namespace["match"])
