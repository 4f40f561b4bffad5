"""RocketMQ's SQL92 message selector: lexer, parser, parse-time checks and the compiled matcher.

The grammar and every rule here follow RocketMQ's `SelectorParser.jj` and the
`filter/expression` classes (summarised in the format reference, section 10):

    or_expr    := and_expr ( OR and_expr )*
    and_expr   := eq_expr ( AND eq_expr )*
    eq_expr    := cmp_expr ( '=' cmp_expr | '<>' cmp_expr | IS NULL | IS NOT NULL )*
    cmp_expr   := unary ( ('>' | '>=' | '<' | '<=') unary
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) 'string'
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' 'string' (',' 'string')* ')' )*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := literal | identifier | '(' or_expr ')'

`NOT` binds tighter than comparisons: `NOT a = 1` is `(NOT a) = 1`; parenthesize.
Keywords are case-insensitive; there is no LIKE, no arithmetic and no `!=`.

>>> expr = SqlExpression("a > 5 AND b = 'x'")
>>> expr.matches({"a": "10", "b": "x"}), expr.matches({"a": "3.5", "b": "x"}), expr.matches({"b": "x"})
(True, False, False)
>>> str(expr)
"((a > 5) AND (b = 'x'))"

Two deliberate differences from Java, both about text RocketMQ accepts silently:
trailing input after a complete expression (`a = 1 b = 2`, `a = 1)`) is an error
here, where RocketMQ's parser stops at the first token it cannot use and ignores
the rest; and an expression may nest at most `MAX_DEPTH` levels deep.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import NamedTuple, cast

from ..errors import FilterError
from ._sqlast import (
    BoolCast,
    Chain,
    ChainOp,
    Compare,
    Const,
    Equal,
    InList,
    IsNull,
    MatchOp,
    Negate,
    Node,
    Not,
    OrderOp,
    Prop,
    StringMatch,
    is_boolean,
    render,
)
from ._sqlcompile import MatchFunction, compile_match, java_compare

__all__ = ["SqlExpression", "compile_sql", "MAX_DEPTH"]

#: Deepest nesting accepted (parentheses, unary operators and chained comparisons).
#: It keeps the parser and the generated code far from Python's recursion and
#: indentation limits; Java fails with a StackOverflowError somewhere deeper.
MAX_DEPTH = 64

_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                       "CONTAINS", "STARTSWITH", "ENDSWITH"})
_MATCH_OPS = ("CONTAINS", "STARTSWITH", "ENDSWITH")
_ORDER_OPS = (">", ">=", "<", "<=")
_NUMERIC = ("int", "long", "double")
_INT_MAX = (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1
_DOUBLE_MIN = 5e-324  # Double.MIN_VALUE

# One alternative per JavaCC token. Order gives JavaCC's longest match: a float is
# always longer than the decimal it starts with, "--" and "/*" comments beat "-"
# and "/", two-char operators come before their one-char prefixes.
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r) | /\*[^*]*\*+(?:[^/*][^*]*\*+)*/)
  | (?P<FLOAT>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)? | \.[0-9]+(?:[eE][+-]?[0-9]+)? | [0-9]+[eE][+-]?[0-9]+)
  | (?P<DECIMAL>0|[1-9][0-9]*[lL]?)
  | (?P<STRING>'(?:[^']|'')*')
  | (?P<ID>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|<=|>=|[=<>(),+-])
""", re.VERBOSE)

_HINTS = {
    "!": "'!=' is not an operator; use '<>'",
    '"': "string literals use single quotes",
    "'": "unterminated string literal",
    "/": "unterminated /* comment",
    ".": "property names cannot contain '.'",
    "*": "there is no arithmetic, and no '*' outside tag expressions",
}


class _Token(NamedTuple):
    kind: str  # ID, DECIMAL, FLOAT, STRING, EOF, a keyword in capitals, or the operator itself
    text: str
    pos: int


def _error(text: str, pos: int, problem: str) -> FilterError:
    """A FilterError naming the problem, the position and the expression, with a caret."""
    start = max(0, pos - 60)
    window = text[start:pos + 60]
    shown = text if len(text) <= 200 else text[:200] + "..."
    caret = "^".rjust(pos - start + 1)
    flat = "".join(" " if c in "\t\n\r\f" else c for c in window)
    return FilterError(f"{problem} at position {pos} of SQL92 expression {shown!r}\n  {flat}\n  {caret}")


def _shorten(literal: str) -> str:
    return literal if len(literal) <= 40 else literal[:40] + "..."


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, end = 0, len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            char = text[pos]
            hint = _HINTS.get(char, "not part of the SQL92 grammar")
            raise _error(text, pos, f"unexpected character {char!r} ({hint})")
        kind = m.lastgroup
        if kind == "ID" and m.group().upper() in _KEYWORDS:
            tokens.append(_Token(m.group().upper(), m.group(), pos))
        elif kind == "op":
            tokens.append(_Token(m.group(), m.group(), pos))
        elif kind not in ("ws", "comment"):
            tokens.append(_Token(str(kind), m.group(), pos))
        pos = m.end()
    tokens.append(_Token("EOF", "", end))
    return tokens


def _describe(token: _Token) -> str:
    if token.kind == "EOF":
        return "the end of the expression"
    if token.kind in _KEYWORDS:
        return token.kind
    return repr(token.text)


class _Parser:
    """Recursive descent over the token list; builds `_sqlast` nodes and runs Java's checks."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.nesting = 0

    # -- token plumbing --
    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def expect(self, kind: str, what: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            raise self.error(token.pos, f"expected {what}, found {_describe(token)}")
        return self.advance()

    def error(self, pos: int, problem: str) -> FilterError:
        return _error(self.text, pos, problem)

    def deeper(self, pos: int) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(pos, f"expression nested more than {MAX_DEPTH} levels deep")

    def node_depth(self, node: Node) -> Node:
        if node.depth > MAX_DEPTH:
            raise self.error(node.pos, f"expression nested more than {MAX_DEPTH} levels deep")
        return node

    # -- grammar --
    def parse(self) -> Node:
        node = self.or_expr()
        token = self.peek()
        if token.kind != "EOF":
            hint = ""
            if token.kind == "-" and self.peek(1).kind == "-":
                hint = " (a '--' comment must end with a line break)"
            elif token.kind == ")":
                hint = " (unbalanced parenthesis)"
            raise self.error(token.pos, f"unexpected {_describe(token)} after a complete expression{hint}")
        return self.as_condition(node)

    def or_expr(self) -> Node:
        return self.chain("OR", self.and_expr)

    def and_expr(self) -> Node:
        return self.chain("AND", self.eq_expr)

    def chain(self, op: ChainOp, parse: Callable[[], Node]) -> Node:
        first = parse()
        if self.peek().kind != op:
            return first
        terms = [self.as_condition(first)]
        while self.peek().kind == op:
            self.advance()
            terms.append(self.as_condition(parse()))
        return self.make_chain(op, terms, first.pos)

    def make_chain(self, op: ChainOp, terms: list[Node], pos: int) -> Node:
        flat: list[Node] = []
        for term in terms:
            flat.extend(term.terms if isinstance(term, Chain) and term.op == op else (term,))
        depth = 1 + max(t.depth for t in flat)
        return self.node_depth(Chain(op, tuple(flat), pos, depth))

    def eq_expr(self) -> Node:
        left = self.cmp_expr()
        while True:
            token = self.peek()
            if token.kind in ("=", "<>"):
                self.advance()
                node = self.make_equal(left, self.cmp_expr(), token)
                left = node if token.kind == "=" else self.node_depth(Not(node, left.pos, node.depth + 1))
            elif token.kind == "IS":
                self.advance()
                negated = self.peek().kind == "NOT"
                if negated:
                    self.advance()
                found = self.peek()
                if found.kind != "NULL":
                    raise self.error(found.pos, f"expected NULL or NOT NULL after IS, found {_describe(found)}")
                self.advance()
                left = self.node_depth(IsNull(left, left.pos, left.depth + 1))
                if negated:
                    left = self.node_depth(Not(left, left.pos, left.depth + 1))
            else:
                return left

    def cmp_expr(self) -> Node:
        left = self.unary()
        while True:
            token = self.peek()
            negated = token.kind == "NOT"
            op = self.peek(1).kind if negated else token.kind
            if token.kind in _ORDER_OPS:
                self.advance()
                left = self.make_compare(token.kind, left, self.unary(), token)
                continue
            if op not in (*_MATCH_OPS, "BETWEEN", "IN"):
                if negated:
                    raise self.error(self.peek(1).pos, "expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN "
                                                       f"after NOT, found {_describe(self.peek(1))}")
                return left
            self.advance()
            if negated:
                self.advance()
            if op in _MATCH_OPS:
                search = self.string_literal(f"a string literal after {op}")
                left = self.node_depth(StringMatch(cast(MatchOp, op), negated, left, search, left.pos,
                                                   left.depth + 1))
            elif op == "BETWEEN":
                low = self.unary()
                self.expect("AND", "AND between the BETWEEN bounds")
                left = self.make_between(left, low, self.unary(), negated, token)
            else:
                left = self.make_in(left, self.in_list(), negated, token)

    def unary(self) -> Node:
        token = self.peek()
        if token.kind not in ("+", "-", "NOT"):
            return self.primary()
        self.advance()
        self.deeper(token.pos)
        operand = self.unary()
        self.nesting -= 1
        if token.kind == "+":
            return operand  # Java returns the operand itself: +'x' is still a string literal
        if token.kind == "-":
            return self.node_depth(Negate(operand, token.pos, operand.depth + 1))
        operand = self.as_condition(operand)
        return self.node_depth(Not(operand, token.pos, operand.depth + 1))

    def primary(self) -> Node:
        token = self.peek()
        kind = token.kind
        if kind == "(":
            self.advance()
            self.deeper(token.pos)
            node = self.or_expr()
            self.nesting -= 1
            self.expect(")", "')'")
            return node  # parentheses leave the node as it is: (a) is still a property
        if kind == "ID":
            self.advance()
            return Prop(token.text, token.pos)
        if kind == "STRING":
            return Const("string", self.string_literal("a string"), token.pos)
        if kind in ("TRUE", "FALSE", "NULL"):
            self.advance()
            return Const("null", None, token.pos) if kind == "NULL" else Const("bool", kind == "TRUE", token.pos)
        if kind == "DECIMAL":
            self.advance()
            return self.decimal(token)
        if kind == "FLOAT":
            self.advance()
            return self.floating(token)
        raise self.error(token.pos, f"expected a property, a literal or '(', found {_describe(token)}")

    def string_literal(self, what: str) -> str:
        token = self.expect("STRING", what)
        return token.text[1:-1].replace("''", "'")

    def in_list(self) -> tuple[str, ...]:
        self.expect("(", "'(' after IN")
        values = [self.string_literal("a string literal in the IN list")]
        while self.peek().kind == ",":
            self.advance()
            values.append(self.string_literal("a string literal in the IN list"))
        self.expect(")", "')' or ',' in the IN list")
        return tuple(values)

    # -- literals (ConstantExpression.createFromDecimal / createFloat) --
    def decimal(self, token: _Token) -> Const:
        digits = token.text.rstrip("lL")
        # 19 digits bound the length before int() (which refuses thousands of digits).
        if len(digits) > 19 or int(digits) > _LONG_MAX:
            raise self.error(token.pos, f"integer literal {_shorten(token.text)} is out of range "
                                        f"(the largest is {_LONG_MAX})")
        value = int(digits)
        return Const("int" if value <= _INT_MAX else "long", value, token.pos)

    def floating(self, token: _Token) -> Const:
        value = float(token.text)
        if value == float("inf"):
            raise self.error(token.pos, f"number literal {_shorten(token.text)} is larger than Double.MAX_VALUE")
        if value < _DOUBLE_MIN:
            raise self.error(token.pos, f"number literal {_shorten(token.text)} is below Double.MIN_VALUE (4.9E-324); "
                                        "RocketMQ refuses 0.0 and anything that rounds to it")
        return Const("double", value, token.pos)

    # -- parse-time checks (ComparisonExpression.create*, asBooleanExpression) --
    def as_condition(self, node: Node) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Prop):
            return BoolCast(node, node.pos)
        raise self.error(node.pos, f"{render(node)} is not a condition (it will not result in a boolean value)")

    def check_ordered(self, node: Node, op: str) -> None:
        """`checkLessThanOperand`: only numbers, properties and other values can be ordered."""
        if isinstance(node, Const) and node.kind not in _NUMERIC:
            raise self.error(node.pos, f"{render(node)} cannot be compared with {op!r}; only numbers can")
        if is_boolean(node):
            raise self.error(node.pos, f"a condition, {render(node)}, cannot be compared with {op!r}")

    def make_compare(self, op: str, left: Node, right: Node, token: _Token) -> Node:
        self.check_ordered(left, op)
        self.check_ordered(right, op)
        return self.node_depth(Compare(cast(OrderOp, op), left, right, left.pos, 1 + max(left.depth, right.depth)))

    def make_equal(self, left: Node, right: Node, token: _Token) -> Node:
        for side in (left, right):  # checkEqualOperand
            if isinstance(side, Const) and side.kind == "null":
                raise self.error(side.pos, f"NULL cannot be compared with {token.text!r}; "
                                           "use IS NULL or IS NOT NULL")
        # checkEqualOperandCompatability: TRUE/FALSE against another literal of another class
        if (isinstance(left, Const) and isinstance(right, Const) and left.kind == "bool"
                and right.kind != "bool"):
            raise self.error(token.pos, f"{render(left)} cannot be compared with {render(right)}")
        return self.node_depth(Equal(left, right, left.pos, 1 + max(left.depth, right.depth)))

    def make_between(self, value: Node, low: Node, high: Node, negated: bool, token: _Token) -> Node:
        if not negated and isinstance(low, Const) and isinstance(high, Const):
            if low.kind == "null" or high.kind == "null":
                raise self.error(token.pos, "BETWEEN bounds cannot be NULL")
            if low.kind in _NUMERIC and high.kind in _NUMERIC:
                kinds = {"int": "I", "long": "L", "double": "D"}
                if java_compare(kinds[high.kind], high.value, kinds[low.kind], low.value) < 0:
                    raise self.error(token.pos, f"BETWEEN bounds are reversed: {render(low)} is greater than "
                                                f"{render(high)}; write the smaller bound first")
        if negated:  # createNotBetween: v < low OR v > high
            terms = [self.make_compare("<", value, low, token), self.make_compare(">", value, high, token)]
            return self.make_chain("OR", terms, value.pos)
        terms = [self.make_compare(">=", value, low, token), self.make_compare("<=", value, high, token)]
        return self.make_chain("AND", terms, value.pos)

    def make_in(self, left: Node, values: tuple[str, ...], negated: bool, token: _Token) -> Node:
        if not isinstance(left, Prop):
            raise self.error(left.pos, f"IN needs a property on its left, not {render(left)}")
        return InList(left, values, negated, left.pos)


class SqlExpression:
    """A parsed and compiled SQL92 selector.

    Construction parses, checks and compiles (tens of microseconds); it raises
    `FilterError` naming the problem and its position. `matches` then costs well
    under a microsecond for a typical selector and may be called from any thread.

    >>> SqlExpression("region IN ('eu', 'us') AND NOT (price > 99.5)").matches({"region": "eu", "price": "80"})
    True
    >>> SqlExpression("a = NULL")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mqlite.errors.FilterError: NULL cannot be compared with '='; use IS NULL or IS NOT NULL at position 4 ...
    """

    __slots__ = ("expression", "canonical", "source", "matches")

    expression: str
    """The selector text, as given."""
    canonical: str
    """The parsed expression, fully parenthesized (equal for equivalent spellings)."""
    source: str
    """The generated Python source of `matches`, for the curious and for debugging."""
    matches: MatchFunction
    """`matches(properties) -> bool`: True only when the selector evaluates to TRUE.

    `properties` maps names to str values (a message's property map; `TAGS` and
    `KEYS` included). NULL, FALSE and a Java exception (such as a property that
    is not a number compared with a number) all give False.
    """

    def __init__(self, expression: str) -> None:
        if not isinstance(expression, str):
            raise FilterError(f"a SQL92 expression must be a str, not {type(expression).__name__}")
        if not expression:
            raise FilterError("a SQL92 expression cannot be empty; use MessageSelector.by_tag('*') to match all")
        root = _Parser(expression).parse()
        self.expression = expression
        self.canonical = render(root)
        self.source, self.matches = compile_match(root, f"<sql92 {expression[:60]!r}>")

    def __repr__(self) -> str:
        return f"SqlExpression({self.expression!r})"

    def __str__(self) -> str:
        return self.canonical

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SqlExpression):
            return NotImplemented
        return self.canonical == other.canonical

    def __hash__(self) -> int:
        return hash(self.canonical)


@functools.lru_cache(maxsize=100)
def compile_sql(expression: str) -> SqlExpression:
    """`SqlExpression(expression)`, cached like RocketMQ's parse cache (100 entries).

    Raises FilterError for an invalid expression (errors are not cached).
    """
    return SqlExpression(expression)
