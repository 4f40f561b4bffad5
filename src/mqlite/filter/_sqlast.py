"""The syntax tree of a parsed SQL92 selector, after RocketMQ's parse-time rewrites.

The parser (`sql92.py`) builds these nodes and the compiler (`_sqlcompile.py`)
turns them into Python. They mirror the Java expression classes the grammar
creates, with three simplifications that do not change any result:

* `a <> b` is `Not(Equal(a, b))` and `a IS NOT NULL` is `Not(IsNull(a))`, as in Java;
* `v BETWEEN x AND y` is `(v >= x AND v <= y)` and `v NOT BETWEEN x AND y` is
  `(v < x OR v > y)`, as in Java;
* nested ANDs (and nested ORs) are flattened into one `Chain`: Java evaluates
  `(a AND b) AND c` and `a AND (b AND c)` left to right with the same short
  cut (stop at the first FALSE), so one n-ary node has the same results, the
  same errors, and keeps long chains from nesting deeply.

`depth` bounds recursion in the compiler; `pos` is the character offset that
error messages point at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

#: The operators of `Chain`, `Compare` and `StringMatch`.
ChainOp = Literal["AND", "OR"]
OrderOp = Literal[">", ">=", "<", "<="]
MatchOp = Literal["CONTAINS", "STARTSWITH", "ENDSWITH"]

__all__ = [
    "ConstKind", "ChainOp", "OrderOp", "MatchOp", "Const", "Prop", "Negate", "BoolCast", "Not", "Chain", "Compare",
    "Equal", "IsNull", "StringMatch", "InList", "Node", "BOOLEAN_NODES", "is_boolean", "quote", "render",
]

#: Java class of a literal: String, Integer, Long, Double, Boolean or null.
ConstKind = Literal["string", "int", "long", "double", "bool", "null"]


@dataclass(frozen=True, slots=True)
class Const:
    """A literal (`ConstantExpression`); TRUE, FALSE and NULL are also conditions."""

    kind: ConstKind
    value: str | int | float | bool | None
    pos: int
    depth: int = 1


@dataclass(frozen=True, slots=True)
class Prop:
    """A message property by name (`PropertyExpression`): a str, or null when absent."""

    name: str
    pos: int
    depth: int = 1


@dataclass(frozen=True, slots=True)
class Negate:
    """Unary minus: negates numbers, null for anything else."""

    operand: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A bare property used as a condition: null when absent, else FALSE (it is never a Boolean)."""

    prop: Prop
    pos: int
    depth: int = 2


@dataclass(frozen=True, slots=True)
class Not:
    """Three-valued NOT: NOT null is null."""

    operand: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Chain:
    """`t1 AND t2 AND ...` or `t1 OR t2 OR ...`, evaluated left to right with Java's short cuts."""

    op: ChainOp
    terms: tuple[Node, ...]
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Compare:
    """`>`, `>=`, `<` or `<=`: null when either side is null (the right one is then not evaluated)."""

    op: OrderOp
    left: Node
    right: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Equal:
    """`=`: both sides evaluated; null = null is TRUE, null = x is null, x = null is FALSE."""

    left: Node
    right: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class IsNull:
    """`x IS NULL`: TRUE or FALSE, never null."""

    operand: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class StringMatch:
    """`[NOT] CONTAINS / STARTSWITH / ENDSWITH 'search'`: FALSE (never null) unless the value is a str."""

    op: MatchOp
    negated: bool
    operand: Node
    search: str
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class InList:
    """`prop [NOT] IN ('x', ...)`: null when the property is absent."""

    prop: Prop
    values: tuple[str, ...]
    negated: bool
    pos: int
    depth: int = 2


Node = Union[Const, Prop, Negate, BoolCast, Not, Chain, Compare, Equal, IsNull, StringMatch, InList]

#: Nodes that are Java `BooleanExpression`s (TRUE, FALSE and NULL literals are too).
BOOLEAN_NODES = (BoolCast, Not, Chain, Compare, Equal, IsNull, StringMatch, InList)


def is_boolean(node: Node) -> bool:
    """Whether Java would see a `BooleanExpression` (a condition) here."""
    return isinstance(node, BOOLEAN_NODES) or (isinstance(node, Const) and node.kind in ("bool", "null"))


def quote(text: str) -> str:
    """A string literal as it is written in a selector: single quotes, `''` for a quote."""
    return "'" + text.replace("'", "''") + "'"


def render(node: Node) -> str:
    """The canonical text of a node: fully parenthesized, keywords in capitals.

    It shows how the parser grouped an expression (`NOT a = 1` is `((NOT a) = 1)`)
    and is equal for expressions that differ only in spacing, case or comments.
    """
    if isinstance(node, Const):
        if node.kind == "string":
            return quote(str(node.value))
        if node.kind in ("bool", "null"):
            return "NULL" if node.value is None else ("TRUE" if node.value else "FALSE")
        return repr(node.value)
    if isinstance(node, Prop):
        return node.name
    if isinstance(node, BoolCast):
        return node.prop.name
    if isinstance(node, Negate):
        return f"(- {render(node.operand)})"
    if isinstance(node, Not):
        return f"(NOT {render(node.operand)})"
    if isinstance(node, Chain):
        return "(" + f" {node.op} ".join(render(t) for t in node.terms) + ")"
    if isinstance(node, Compare):
        return f"({render(node.left)} {node.op} {render(node.right)})"
    if isinstance(node, Equal):
        return f"({render(node.left)} = {render(node.right)})"
    if isinstance(node, IsNull):
        return f"({render(node.operand)} IS NULL)"
    if isinstance(node, StringMatch):
        return f"({render(node.operand)} {'NOT ' if node.negated else ''}{node.op} {quote(node.search)})"
    return f"({node.prop.name} {'NOT ' if node.negated else ''}IN ({', '.join(quote(v) for v in node.values)}))"
