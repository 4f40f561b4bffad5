"""SQL92 selectors: RocketMQ's ParserTest and ExpressionTest, the reference's rules, and an oracle.

`outcome()` reads the full three-valued result (and Java exceptions) through the
public `matches` only: a condition is TRUE if it matches, FALSE if `NOT (...)`
matches, NULL if `(...) IS NULL` matches, and otherwise Java threw.
"""

from __future__ import annotations

import math
import pickle
import re
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqlite.errors import FilterError
from mqlite.filter import MAX_DEPTH, ExpressionType, MessageSelector, SqlExpression, compile_sql

TRUE, FALSE, NULL, ERROR = "TRUE", "FALSE", "NULL", "ERROR"


def outcome(expression: str, properties: dict[str, str] | None = None) -> str:
    props = properties or {}
    if compile_sql(expression).matches(props):
        return TRUE
    if compile_sql(f"NOT ({expression})").matches(props):
        return FALSE
    if compile_sql(f"({expression}) IS NULL").matches(props):
        return NULL
    return ERROR


def position_of(error: pytest.ExceptionInfo[FilterError]) -> int:
    found = re.search(r"at position (\d+)", str(error.value))
    assert found, str(error.value)
    return int(found.group(1))


# ======================================================================================================================
# ParserTest
# ======================================================================================================================
AND_EXPRESSION = "a=3 and b<>4 And c>5 AND d<=4"
OR_EXPRESSION = "a=3 or b<>4 Or c>5 OR d<=4"


@pytest.mark.parametrize("expression", [
    AND_EXPRESSION, OR_EXPRESSION, "a in ('3', '4', '5')", "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)", "a is null", "a is not null",
    "a <= now",  # `now` is an ordinary property: NowExpression is unreachable from the grammar
    "a=3 and b contains 'xxx' and c not contains 'xxx'",
])
def test_parse_valid(expression: str) -> None:
    assert MessageSelector.by_sql(expression).expression == expression


@pytest.mark.parametrize("expression, position", [
    ("a and between 2 and 10", 6),                          # ParserTest.testParse_invalid
    ("a > 100000000000000000000000", 4),                    # testParse_decimalOverFlow
    (" a between 10 and 0", 3),                             # testParse_illegalBetween
])
def test_parse_invalid(expression: str, position: int) -> None:
    with pytest.raises(FilterError) as error:
        MessageSelector.by_sql(expression)
    assert position_of(error) == position
    assert repr(expression) in str(error.value)


def test_parse_float_overflow() -> None:
    digits = "1" + "1" * 51 * 2048
    with pytest.raises(FilterError, match="Double.MAX_VALUE"):
        SqlExpression(f"a > {digits}.{digits}")


def test_equal_expressions_differ_only_in_spacing() -> None:
    # ParserTest.testEquals: the parsed trees are equal, not the texts.
    spaced = SqlExpression("a=3  and    b<>4 And c>5 AND d<=4")
    assert SqlExpression(AND_EXPRESSION) == spaced and hash(SqlExpression(AND_EXPRESSION)) == hash(spaced)
    assert SqlExpression(AND_EXPRESSION) != SqlExpression(OR_EXPRESSION)
    assert SqlExpression("a = 3 /* note */ AND\tb = 'x' -- comment\n") == SqlExpression("a=3 and b='x'")


# ======================================================================================================================
# ExpressionTest: CONTAINS / STARTSWITH / ENDSWITH (never null)
# ======================================================================================================================
MATCH_OPS = ["contains", "startswith", "endswith"]


@pytest.mark.parametrize("op", MATCH_OPS)
@pytest.mark.parametrize("value, search, expected", [
    ("axb", {"contains": "x", "startswith": "ax", "endswith": "xb"}, TRUE),  # _has
    ("abb", "x", FALSE),                                                     # _has_not
    ("axb", "", FALSE),                                                      # _hasEmpty
    (None, "x", FALSE),                                                      # _null_has_1/2
])
def test_string_match_on_property(op: str, value: str | None, search: object, expected: str) -> None:
    text = search[op] if isinstance(search, dict) else search
    props = {} if value is None else {"value": value}
    assert outcome(f"value {op} '{text}'", props) == expected
    negated_expected = {TRUE: FALSE, FALSE: TRUE}[expected] if text and value is not None else FALSE
    assert outcome(f"value not {op} '{text}'", props) == negated_expected


@pytest.mark.parametrize("op", MATCH_OPS)
@pytest.mark.parametrize("operand", ["1.23", "TRUE", "(value > 1)", "NULL", "-value"])
def test_string_match_on_a_non_string_is_false(op: str, operand: str) -> None:
    # _number_has, _boolean_has, _object_has: only a String can contain anything.
    for props in ({}, {"value": "2"}):
        assert outcome(f"{operand} {op} 'x'", props) == FALSE
        assert outcome(f"{operand} not {op} 'x'", props) == FALSE


@pytest.mark.parametrize("expression, expected", [
    ("'axb' contains 'x'", TRUE), ("'axb' startswith 'ax'", TRUE), ("'axb' endswith 'xb'", TRUE),
    ("'axb' not contains 'x'", FALSE), ("'axb' not startswith 'ax'", FALSE), ("'axb' not endswith 'xb'", FALSE),
    ("'axb' contains 'u'", FALSE), ("'axb' startswith 'u'", FALSE), ("'axb' endswith 'u'", FALSE),
    ("'axb' not contains 'u'", TRUE), ("'axb' not startswith 'u'", TRUE), ("'axb' not endswith 'u'", TRUE),
    ("'axb' contains ''", FALSE), ("'axb' not contains ''", FALSE), ("'axb' not endswith ''", FALSE),
    ("' ' contains ' '", TRUE), ("' ' startswith ' '", TRUE), ("' ' not endswith ' '", FALSE),
    ("'axb' contains '.'", FALSE), ("'axb' not startswith '.'", TRUE),             # no regex meaning
    ("'s' contains '\\'", FALSE), ("'s' endswith '\\'", FALSE),
])
def test_string_match_on_literals(expression: str, expected: str) -> None:
    assert outcome(expression, {"whatever": "whatever"}) == expected


@pytest.mark.parametrize("expression", [
    "value contains x", "value not contains x", "value contains 123", "value not contains 123",
    "'axb' contains ", "'axb' not contains ",
])
def test_string_match_needs_a_string_literal(expression: str) -> None:
    with pytest.raises(FilterError, match="string literal"):
        SqlExpression(expression)


@pytest.mark.parametrize("op", ["contains", "startswith", "endswith"])
def test_all_in_one(op: str) -> None:
    expression = f"a not in ('4', '4', '5') and b between 3 and 10 and c not {op} 'axbc'"
    assert outcome(expression, {"a": "3", "b": "3", "c": "axbdc"}) == TRUE


# ======================================================================================================================
# ExpressionTest: evaluation
# ======================================================================================================================
def test_string_with_quotes() -> None:
    expression = "TAGS is not null and TAGS='''''tag'''''"
    assert outcome(expression, {"TAGS": "''tag''"}) == TRUE
    assert outcome(expression, {"TAGS": "'tag'"}) == FALSE


def test_now_is_a_property() -> None:
    assert outcome("a <= now", {"a": "1", "now": "2"}) == TRUE
    assert outcome("a <= now", {"a": "1"}) == NULL


def test_string_compare_throws() -> None:
    # testEvaluate_stringCompare expects Java's RuntimeException, which means "no match" on the broker.
    assert outcome("a between up and low", {"a": "3.14"}) == NULL
    assert outcome("a between up and low", {"a": "3.14", "up": "up", "low": "low"}) == ERROR
    assert outcome("key is not null and key between 0 and 100", {"key": "con"}) == ERROR
    assert outcome("a between 0 and 100", {"a": "abc"}) == ERROR
    assert outcome("a=b", {"a": "3.14", "b": "3.14"}) == TRUE
    assert outcome("a<>b", {"a": "3.14", "b": "3.14"}) == FALSE
    assert outcome("a<>b", {"a": "3.14", "b": "3.141"}) == TRUE


@pytest.mark.parametrize("expression, properties, expected", [
    ("a > 3.1E10", {"a": str(3.1415 * 10 ** 10)}, TRUE),           # testEvaluate_exponent
    ("a > 3.14", {"a": "3.1415"}, TRUE),                            # testEvaluate_floatNumber
    ("a > b", {"a": "10", "b": "20"}, FALSE),                       # testEvaluate_twoVariable
    ("a > b", {"a": "20", "b": "10"}, TRUE),                        # testEvaluate_twoVariableGt
    ("a is null OR a='hello'", {}, TRUE),                           # testEvaluate_nullOr
    ("a is null OR a='hello'", {"a": "hello"}, TRUE),
    ("a is null OR a='hello'", {"a": "abc"}, FALSE),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, TRUE),      # testEvaluate_boolean
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, FALSE),
    ("a is not null and a='hello'", {"a": "hello"}, TRUE),         # testEvaluate_equal
    ("a is not null and a='hello'", {}, FALSE),
    (AND_EXPRESSION, {"a": "3", "b": "5", "c": "6", "d": "1"}, TRUE),   # testEvaluate_andTrue
    (AND_EXPRESSION, {"a": "4", "b": "5", "c": "6", "d": "1"}, FALSE),  # testEvaluate_andFalse
    (OR_EXPRESSION, {"a": "3"}, TRUE),                                  # testEvaluate_orTrue
    (OR_EXPRESSION, {"a": "4", "b": "5"}, TRUE),
    (OR_EXPRESSION, {"a": "4", "b": "4", "c": "6"}, TRUE),
    (OR_EXPRESSION, {"a": "4", "b": "4", "c": "3", "d": "2"}, TRUE),
    (OR_EXPRESSION, {"a": "4", "b": "4", "c": "3", "d": "10"}, FALSE),  # testEvaluate_orFalse
    ("a in ('3', '4', '5')", {"a": "3"}, TRUE), ("a in ('3', '4', '5')", {"a": "5"}, TRUE),
    ("a in ('3', '4', '5')", {"a": "8"}, FALSE),
    ("a not in ('3', '4', '5')", {"a": "8"}, TRUE), ("a not in ('3', '4', '5')", {"a": "4"}, FALSE),
    ("a between 2 and 10", {"a": "2"}, TRUE), ("a between 2 and 10", {"a": "10"}, TRUE),
    ("a between 2 and 10", {"a": "3"}, TRUE),
    ("a between 2 and 10", {"a": "1"}, FALSE), ("a between 2 and 10", {"a": "11"}, FALSE),
    ("a not between 2 and 10", {"a": "1"}, TRUE), ("a not between 2 and 10", {"a": "11"}, TRUE),
    ("a not between 2 and 10", {"a": "2"}, FALSE), ("a not between 2 and 10", {"a": "10"}, FALSE),
    ("a not between 2 and 10", {"a": "3"}, FALSE),
    ("a is null", {"abc": "2"}, TRUE), ("a is null", {"a": "2"}, FALSE),
    ("a is not null", {"a": "2"}, TRUE), ("a is not null", {"abc": "2"}, FALSE),
])
def test_evaluate(expression: str, properties: dict[str, str], expected: str) -> None:
    assert outcome(expression, properties) == expected


# ======================================================================================================================
# The reference, section 10: three-valued logic and Java's conversions
# ======================================================================================================================
@pytest.mark.parametrize("expression, properties, expected", [
    # a missing property is null; AND / OR / NOT
    ("a = 1", {}, NULL), ("a = 1 AND b = 1", {"b": "2"}, FALSE), ("a = 1 AND b = 1", {"b": "1"}, NULL),
    ("a = 1 OR b = 1", {"b": "1"}, TRUE), ("a = 1 OR b = 1", {"b": "2"}, NULL), ("NOT a = 1", {}, NULL),
    ("NOT (a = 1)", {}, NULL), ("NOT (a = 1)", {"a": "2"}, TRUE),
    # comparisons are null with a null side
    ("a > 1", {}, NULL), ("1 < a", {}, NULL), ("a > b", {"a": "1"}, NULL),
    # a String property against an Integer / Long / Double literal
    ("a > 3", {"a": "3.5"}, ERROR), ("a > 3.0", {"a": "3.5"}, TRUE), ("a > 3", {"a": "+4"}, TRUE),
    ("a = 3", {"a": "3"}, TRUE), ("a = 3", {"a": "03"}, TRUE), ("a = 3", {"a": " 3"}, ERROR),
    ("a = 3", {"a": "3.0"}, ERROR), ("a = 3", {"a": "x"}, ERROR), ("a = 'hello'", {"a": "hello"}, TRUE),
    ("a = 3", {"a": "٣"}, TRUE),                                      # Character.digit takes any Nd digit
    ("a > 2147483647", {"a": "2147483648"}, ERROR),                 # Integer literal: Integer.valueOf
    ("a > 2147483648", {"a": "2147483649"}, TRUE),                  # Long literal: Long.valueOf
    ("a < 9223372036854775807", {"a": "9223372036854775808"}, ERROR),
    ("a > 5L", {"a": "6"}, TRUE), ("a > 5L", {"a": "2147483648"}, ERROR),  # 5L is an Integer
    ("a > 1.5", {"a": " 2 "}, TRUE), ("a > 1.5", {"a": "2f"}, TRUE), ("a > 1.5", {"a": "0x1p1"}, TRUE),
    ("a > 1.5", {"a": "1_000"}, ERROR), ("a > 1.5", {"a": "inf"}, ERROR), ("a > 1.5", {"a": "Infinity"}, TRUE),
    ("a > 1.5", {"a": "NaN"}, TRUE), ("a < 1.5", {"a": "NaN"}, FALSE), ("a = 1.5", {"a": "NaN"}, FALSE),
    ("a > -1.5", {"a": "-Infinity"}, FALSE), ("a > 1.5", {"a": "٣"}, ERROR),
    # String against String: both as Double; equality stays string equality
    ("a > b", {"a": "10", "b": "9"}, TRUE), ("a > b", {"a": "up", "b": "9"}, ERROR),
    ("a > b", {"a": "NaN", "b": "Infinity"}, TRUE), ("a > b", {"a": "0.0", "b": "-0.0"}, TRUE),
    ("a >= b", {"a": "NaN", "b": "NaN"}, TRUE), ("a = b", {"a": "1.0", "b": "1"}, FALSE),
    ("a = b", {}, TRUE), ("a <> b", {}, FALSE), ("a = b", {"b": "1"}, NULL), ("a = b", {"a": "1"}, FALSE),
    # Booleans: Boolean.valueOf on the left, a ClassCastException on the right
    ("a = TRUE", {"a": "TrUe"}, TRUE), ("a = TRUE", {"a": "yes"}, FALSE), ("a = FALSE", {"a": "yes"}, TRUE),
    ("TRUE = a", {"a": "true"}, ERROR), ("TRUE = a", {}, FALSE), ("(a > 1) = 'x'", {"a": "2"}, ERROR),
    ("'true' = (a > 1)", {"a": "2"}, TRUE), ("(a > 1) = TRUE", {"a": "2"}, TRUE), ("(a > 1) = 1", {"a": "2"}, FALSE),
    ("1 = (a > 1)", {"a": "2"}, FALSE), ("(a > 1) = (b > 1)", {}, TRUE), ("TRUE = -1", {}, FALSE),
    # a bare property is a Boolean cast: never TRUE
    ("a", {"a": "true"}, FALSE), ("a", {}, NULL), ("NOT a", {"a": "true"}, TRUE), ("a OR TRUE", {}, TRUE),
    # literals compared with literals, Java's widening
    ("1 = 1.0", {}, TRUE), ("2147483648 = 2147483648.0", {}, TRUE), ("9007199254740993 = 9007199254740992.0", {}, TRUE),
    ("'5' = 5", {}, TRUE), ("'x' = 5", {}, ERROR), ("5 > 4.5", {}, TRUE), ("'true' = TRUE", {}, TRUE),
    ("TRUE = FALSE", {}, FALSE), ("TRUE", {}, TRUE), ("FALSE", {}, FALSE), ("NULL", {}, NULL),
    ("NULL IS NULL", {}, TRUE), ("5 IS NULL", {}, FALSE), ("'x' IS NOT NULL", {}, TRUE),
    # unary minus: numbers only; null otherwise, but its operand is still evaluated
    ("-a = 5", {"a": "-5"}, NULL), ("a = -5", {"a": "-5"}, TRUE), ("a = - -5", {"a": "5"}, TRUE),
    ("a > -'x'", {"a": "1"}, NULL), ("-(a > 1) IS NULL", {"a": "x"}, ERROR), ("-(a > 1) IS NULL", {}, TRUE),
    ("a = -2147483648", {"a": "-2147483648"}, TRUE), ("a > -(b > 1)", {"b": "x"}, NULL),
    ("a > -(b > 1)", {"a": "1", "b": "x"}, ERROR),
    # IN: a String value, never null for a present property
    ("a in ('x')", {}, NULL), ("a not in ('x')", {}, NULL), ("a not in ('x')", {"a": "y"}, TRUE),
    ("TAGS in ('TagA', 'TagB')", {"TAGS": "TagB"}, TRUE),
    # CONTAINS & co. never null: NOT around them is not the same as the NOT form
    ("a not contains 'x'", {}, FALSE), ("NOT (a contains 'x')", {}, TRUE),
    # BETWEEN is two comparisons, NOT BETWEEN their negations joined by OR
    ("a between 1 and 10", {"a": "x"}, ERROR), ("a not between 1 and 10", {}, NULL),
    ("a between -5 and -10", {"a": "-7"}, FALSE), ("a between 1 and 1", {"a": "1"}, TRUE),
    # Java's short cuts decide whether an error is reached
    ("a = 1 OR b > 5", {"a": "1", "b": "x"}, TRUE), ("b > 5 OR a = 1", {"a": "1", "b": "x"}, ERROR),
    ("a = 1 AND b > 5", {"a": "2", "b": "x"}, FALSE), ("NOT (a = 1 AND b > 5)", {"a": "2", "b": "x"}, TRUE),
    ("a = 1 AND b > 5", {"b": "x"}, ERROR), ("(a = 1 AND b > 5) OR c = 1", {"a": "2", "b": "x", "c": "1"}, TRUE),
    ("a > 1 AND b = 1", {"a": "x", "b": "2"}, ERROR),
    # precedence: NOT binds tighter than comparisons; AND tighter than OR
    ("NOT a = 1", {"a": "1"}, FALSE), ("NOT a CONTAINS 'x'", {"a": "x"}, FALSE),
    ("NOT a = 'x'", {"a": "x"}, ERROR), ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, TRUE),
    ("a = 1 = FALSE", {"a": "2"}, TRUE), ("a IS NULL IS NULL", {}, FALSE),
    # keywords are case-insensitive, property names are not
    ("A = 1 or a = 1", {"a": "1"}, TRUE), ("a Is NoT nUlL", {"a": ""}, TRUE), ("TAGS = 'x'", {"tags": "x"}, NULL),
])
def test_semantics(expression: str, properties: dict[str, str], expected: str) -> None:
    assert outcome(expression, properties) == expected


# ======================================================================================================================
# Parse errors: every case of the reference, each with its position
# ======================================================================================================================
@pytest.mark.parametrize("expression, position, message", [
    ("a = NULL", 4, "use IS NULL"), ("NULL <> a", 0, "use IS NULL"),
    ("a > 'x'", 4, "cannot be compared"), ("a > TRUE", 4, "cannot be compared"), ("'1' <= a", 0, "cannot be compared"),
    ("a > NULL", 4, "cannot be compared"), ("(a > 1) > 2", 1, "condition"), ("a > (b = 1)", 5, "condition"),
    ("a BETWEEN 'a' AND 'z'", 10, "cannot be compared"),
    ("TRUE = 1", 5, "cannot be compared"), ("FALSE = 'x'", 6, "cannot be compared"),
    (" a between 10 and 0", 3, "reversed"), ("a between 2 and 1.5", 2, "reversed"),
    ("a between NULL and 1", 2, "NULL"), ("a between 1 and NULL", 2, "NULL"),
    ("5", 0, "not a condition"), ("'x'", 0, "not a condition"), ("-a", 0, "not a condition"),
    ("a = 1 AND 2", 10, "not a condition"), ("NOT 5", 4, "not a condition"), ("a OR 'x'", 5, "not a condition"),
    ("a and between 2 and 10", 6, "expected a property"),
    ("5 IN ('x')", 0, "IN needs a property"), ("NOT a IN ('x')", 0, "IN needs a property"),
    ("a IN ()", 6, "string literal"), ("a IN (1)", 6, "string literal"), ("a IN ('x' 'y')", 10, "')' or ','"),
    ("a > 9223372036854775808", 4, "out of range"), ("a > 0.0", 4, "MIN_VALUE"), ("a > 1e-400", 4, "MIN_VALUE"),
    ("a > 1e309", 4, "MAX_VALUE"),
    ("a != 1", 2, "'<>'"), ('a = "x"', 4, "single quotes"), ("a = 'x", 4, "unterminated"),
    ("a = 1 /* x", 6, "comment"), ("a.b = 1", 1, "'.'"), ("a = 1 -- no newline", 6, "line break"),
    ("a = 1 b = 2", 6, "after a complete expression"), ("(a = 1))", 7, "unbalanced"), ("(a = 1", 6, "')'"),
    ("a IS 5", 5, "NULL or NOT NULL"), ("a NOT b", 6, "after NOT"), ("a BETWEEN 1 OR 2", 12, "AND"),
    ("", 0, "empty"), ("   ", 3, "expected a property"), ("a LIKE 'x'", 2, "after a complete expression"),
    ("a = 1 + 2", 6, "after a complete expression"), ("a = #", 4, "unexpected character"),
])
def test_parse_errors(expression: str, position: int, message: str) -> None:
    with pytest.raises(FilterError) as error:
        SqlExpression(expression)
    assert message in str(error.value)
    if expression:
        assert position_of(error) == position
        assert repr(expression) in str(error.value)


def test_error_message_points_at_the_problem() -> None:
    with pytest.raises(FilterError) as error:
        SqlExpression("a = 1 AND\n  b = NULL")
    first, snippet, caret = str(error.value).split("\n")
    assert first.startswith("NULL cannot be compared with '='") and "position 16" in first
    assert snippet[caret.index("^")] == "N"


def test_nesting_is_bounded() -> None:
    assert outcome("(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH, {"a": "1"}) == TRUE
    for deep in ["(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1), "NOT " * 1000 + "a",
                 "a = " + "- " * 1000 + "1", "a" + " = 1" * 1000]:
        with pytest.raises(FilterError, match="nested more than"):
            SqlExpression(deep)


def test_long_flat_chains_are_fine() -> None:
    terms = [f"p{i} = '{i}'" for i in range(1000)]
    expr = SqlExpression(" OR ".join(terms))
    assert expr.matches({"p999": "999"}) and not expr.matches({"p1": "2"})
    expr = SqlExpression(" AND ".join(terms))
    assert expr.matches({f"p{i}": str(i) for i in range(1000)}) and not expr.matches({"p1": "1"})


# ======================================================================================================================
# MessageSelector.by_sql and compile-once
# ======================================================================================================================
def test_by_sql_selector() -> None:
    sel = MessageSelector.by_sql("a > 5 AND b = 'x'")
    assert sel.expression_type is ExpressionType.SQL92 and sel.expression_type == "SQL92"
    assert sel.expression == "a > 5 AND b = 'x'" and not sel.match_all and not sel.tags
    assert sel.matches({"a": "6", "b": "x"}) and not sel.matches({"a": "6", "b": "y"})
    assert sel.is_matched_by_consume_queue(12345) and sel.is_matched_by_consume_queue(0)
    assert repr(sel) == "MessageSelector.by_sql(\"a > 5 AND b = 'x'\")"
    assert eval(repr(sel), {"MessageSelector": MessageSelector}) == sel
    assert pickle.loads(pickle.dumps(sel)) == sel and pickle.loads(pickle.dumps(sel)).matches({"a": "6", "b": "x"})
    assert sel != MessageSelector.by_sql("a > 5 and b = 'x'")  # equality is by text, like SubscriptionData
    assert sel != MessageSelector.by_tag("a > 5 AND b = 'x'")
    assert sel.sql is not None and sel.sql is compile_sql("a > 5 AND b = 'x'")  # parsed once, cached
    assert "def match(p)" in sel.sql.source


@pytest.mark.parametrize("bad", [None, ""])
def test_by_sql_needs_an_expression(bad: str | None) -> None:
    # FilterAPI.build(topic, null, "SQL92") throws IllegalArgumentException.
    with pytest.raises(FilterError, match="needs an expression"):
        MessageSelector(ExpressionType.SQL92, bad)


def test_filter_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        MessageSelector.by_sql("a >")


# ======================================================================================================================
# Hypothesis: random text only ever raises FilterError
# ======================================================================================================================
TOKENS = ["a", "b", "TAGS", "and", "OR", "not", "NOT", "between", "in", "IN", "is", "null", "TRUE", "false",
          "contains", "startswith", "endswith", "=", "<>", ">", ">=", "<", "<=", "(", ")", ",", "+", "-", "--",
          "/*", "*/", "'x'", "''", "'", "0", "5", "5L", "1.5", ".5", "5.", "1e3", "0.0", "99999999999999999999",
          "\n", " ", "\t", "!", "\"", ".", "$x", "_", "é", "\x00"]


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=40),
                 st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join),
                 st.lists(st.sampled_from(TOKENS), max_size=25).map("".join)))
def test_random_text_raises_only_filter_error(text: str) -> None:
    try:
        sel = MessageSelector.by_sql(text)
    except FilterError:
        return
    for props in ({}, {"a": "1", "b": "x", "TAGS": "t"}, {"a": "true", "b": "NaN"}):
        assert sel.matches(props) in (True, False)


# ======================================================================================================================
# Hypothesis: the compiled evaluator agrees with a small, independent tree-walking oracle
# ======================================================================================================================
# Java's conversions of every string the generator can produce, worked out by hand from the JDK's rules:
# (Integer.valueOf, Long.valueOf, Double.valueOf); None where Java throws. Boolean.valueOf is "true" in any case.
X = None
JAVA_NUMBERS: dict[str, tuple[int | None, int | None, float | None]] = {
    "0": (0, 0, 0.0), "3": (3, 3, 3.0), "5": (5, 5, 5.0), "10": (10, 10, 10.0), "-2": (-2, -2, -2.0),
    "+4": (4, 4, 4.0), "007": (7, 7, 7.0), "3.5": (X, X, 3.5), "1e3": (X, X, 1000.0), "NaN": (X, X, math.nan),
    "-Infinity": (X, X, -math.inf), "-0.0": (X, X, -0.0), "0.0": (X, X, 0.0),
    "2147483648": (X, 2147483648, 2147483648.0), "9223372036854775808": (X, X, 9.223372036854776e18),
    "1.5f": (X, X, 1.5), "0x1p3": (X, X, 8.0), " 3": (X, X, 3.0), "٣": (3, 3, X), "true": (X, X, X),
    "TRUE": (X, X, X), "false": (X, X, X), "x": (X, X, X), "": (X, X, X), "axb": (X, X, X), "a'b": (X, X, X),
}
POOL = sorted(JAVA_NUMBERS)


Tree = tuple[Any, ...]  # test-side expression trees and the oracle's built nodes: (kind, ...)


class Invalid(Exception):
    """Java's parser would refuse the expression."""


class Threw(Exception):
    """Java would throw while evaluating."""


@dataclass(frozen=True)
class J:
    """A Java value: cls is String, Integer, Long, Double or Boolean."""
    cls: str
    v: Any


def java_parse(cls: str, text: str) -> J:
    if cls == "Boolean":
        return J(cls, text.lower() == "true")
    value = JAVA_NUMBERS[text][("Integer", "Long", "Double").index(cls)]
    if value is None:
        raise Threw(f"NumberFormatException {text!r}")
    return J(cls, value)


def double_compare(x: float, y: float) -> int:
    # java.lang.Double.compare
    if x < y:
        return -1
    if x > y:
        return 1
    bits = [0x7FF8000000000000 if d != d else struct.unpack("<q", struct.pack("<d", d))[0] for d in (x, y)]
    return 0 if bits[0] == bits[1] else (-1 if bits[0] < bits[1] else 1)


NUMBER_RANK = {"Integer": 0, "Long": 1, "Double": 3}


def java_compare(lv: J, rv: J) -> int:
    """ComparisonExpression.__compare with CONVERT_STRING_EXPRESSIONS on."""
    if lv.cls != rv.cls:
        if lv.cls == "Boolean":
            if rv.cls == "String":
                raise Threw("ClassCastException")
            return -1
        if lv.cls in NUMBER_RANK:
            if rv.cls == "String":
                rv = java_parse(lv.cls, str(rv.v))
            elif rv.cls in NUMBER_RANK:
                wider = max(lv.cls, rv.cls, key=NUMBER_RANK.__getitem__)
                lv, rv = (J(wider, float(x.v) if wider == "Double" else x.v) for x in (lv, rv))
            else:
                return -1
        elif lv.cls == "String":
            lv = java_parse(rv.cls, str(lv.v))
    if lv.cls == "Double":
        return double_compare(lv.v, rv.v)
    return (lv.v > rv.v) - (lv.v < rv.v)


def java_equals(lv: J, rv: J) -> bool:
    if lv.cls != rv.cls:
        return False
    if lv.cls == "Double":
        return double_compare(lv.v, rv.v) == 0
    return lv.v == rv.v


# Test-side expression trees, tuples: (kind, ...). They render fully parenthesized, so
# the parsed tree is exactly the generated one (parentheses are transparent in Java).
def render(t: Tree) -> str:
    kind = t[0]
    if kind == "prop":
        return t[1]
    if kind == "str":
        return "'" + t[1].replace("'", "''") + "'"
    if kind in ("int", "float", "kw"):
        return t[1]
    if kind in ("neg", "pos", "not"):
        return {"neg": "- ", "pos": "+ ", "not": "NOT "}[kind] + f"({render(t[1])})"
    if kind in ("and", "or"):
        return f"(({render(t[1])}) {kind.upper()} ({render(t[2])}))"
    if kind in ("cmp", "eq", "ne"):
        op = t[1] if kind == "cmp" else {"eq": "=", "ne": "<>"}[kind]
        return f"(({render(t[-2])}) {op} ({render(t[-1])}))"
    if kind == "isnull":
        return f"(({render(t[2])}) IS {'NOT ' if t[1] else ''}NULL)"
    if kind == "match":
        return f"(({render(t[3])}) {'NOT ' if t[2] else ''}{t[1]} {render(('str', t[4]))})"
    if kind == "between":
        return f"(({render(t[2])}) {'NOT ' if t[1] else ''}BETWEEN ({render(t[3])}) AND ({render(t[4])}))"
    assert kind == "in"
    return f"(({render(t[2])}) {'NOT ' if t[1] else ''}IN ({', '.join(render(('str', v)) for v in t[3])}))"


# The oracle builds Java's objects (raising Invalid where SelectorParser would), then evaluates them.
BOOLEAN_KINDS = {"not", "and", "or", "cmp", "eq", "ne", "isnull", "match", "between", "in", "cast"}


def is_bool_expr(b: Tree) -> bool:
    return b[0] in BOOLEAN_KINDS or (b[0] == "const" and (b[1] is None or b[1].cls == "Boolean"))


def as_boolean(b: Tree) -> Tree:
    if is_bool_expr(b):
        return b
    if b[0] == "prop":
        return ("cast", b)
    raise Invalid("not boolean")


def check_ordered(b: Tree) -> None:
    if b[0] == "const" and (b[1] is None or b[1].cls not in NUMBER_RANK):
        raise Invalid("cannot be compared")
    if is_bool_expr(b):
        raise Invalid("cannot be compared")


def build(t: Tree) -> Tree:
    kind = t[0]
    if kind == "prop":
        return t
    if kind == "str":
        return ("const", J("String", t[1]))
    if kind == "int":
        value = int(t[1].rstrip("lL"))
        if value >= 1 << 63:
            raise Invalid("long overflow")
        return ("const", J("Integer" if value < 1 << 31 else "Long", value))
    if kind == "float":
        return ("const", J("Double", float(t[1])))
    if kind == "kw":
        return ("const", {"TRUE": J("Boolean", True), "FALSE": J("Boolean", False), "NULL": None}[t[1].upper()])
    if kind == "pos":
        return build(t[1])
    if kind == "neg":
        return ("neg", build(t[1]))
    if kind == "not":
        return ("not", as_boolean(build(t[1])))
    if kind in ("and", "or"):
        return (kind, as_boolean(build(t[1])), as_boolean(build(t[2])))
    if kind == "cmp":
        left, right = build(t[2]), build(t[3])
        check_ordered(left)
        check_ordered(right)
        return ("cmp", t[1], left, right)
    if kind in ("eq", "ne"):
        left, right = build(t[1]), build(t[2])
        for side in (left, right):
            if side[0] == "const" and side[1] is None:
                raise Invalid("= NULL")
        if left[0] == "const" and right[0] == "const" and is_bool_expr(left) and not is_bool_expr(right):
            raise Invalid("incompatible")
        return (kind, left, right)
    if kind == "isnull":
        return ("isnull", t[1], build(t[2]))
    if kind == "match":
        return ("match", t[1], t[2], build(t[3]), t[4])
    if kind == "between":
        subject, low, high = build(t[2]), build(t[3]), build(t[4])
        if not t[1] and low[0] == "const" and high[0] == "const":
            if low[1] is None or high[1] is None:
                raise Invalid("null bounds")
            try:
                if java_compare(high[1], low[1]) < 0:
                    raise Invalid("reversed")
            except Threw:
                raise Invalid("bounds") from None
        for side in (subject, low, high):
            check_ordered(side)
        if t[1]:
            return ("or", ("cmp", "<", subject, low), ("cmp", ">", subject, high))
        return ("and", ("cmp", ">=", subject, low), ("cmp", "<=", subject, high))
    assert kind == "in"
    left = build(t[2])
    if left[0] != "prop":
        raise Invalid("IN needs a property")
    return ("in", t[1], left, frozenset(t[3]))


def ev(b: Tree, props: dict[str, str]) -> Any:
    kind = b[0]
    if kind == "const":
        return None if b[1] is None else (b[1].v if b[1].cls == "Boolean" else b[1])
    if kind == "prop":
        return None if b[1] not in props else J("String", props[b[1]])
    if kind == "neg":
        v = ev(b[1], props)
        return J(v.cls, -v.v) if isinstance(v, J) and v.cls in NUMBER_RANK else None
    if kind == "cast":
        v = ev(b[1], props)
        return None if v is None else (v if isinstance(v, bool) else False)
    if kind == "not":
        v = ev(b[1], props)
        return None if v is None else not v
    if kind == "and":
        lv = ev(b[1], props)
        if lv is False:
            return False
        rv = ev(b[2], props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    if kind == "or":
        lv = ev(b[1], props)
        if lv is True:
            return True
        rv = ev(b[2], props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    if kind == "cmp":
        lv = ev(b[2], props)
        if lv is None:
            return None
        rv = ev(b[3], props)
        if rv is None:
            return None
        assert isinstance(lv, J) and isinstance(rv, J)
        if lv.cls == rv.cls == "String":
            lv, rv = java_parse("Double", str(lv.v)), java_parse("Double", str(rv.v))
        answer = java_compare(lv, rv)
        return {">": answer > 0, ">=": answer >= 0, "<": answer < 0, "<=": answer <= 0}[b[1]]
    if kind in ("eq", "ne", "isnull"):
        lv = ev(b[-2] if kind != "isnull" else b[2], props)
        rv = ev(b[2], props) if kind != "isnull" else None
        if lv is None and rv is None:
            result: bool | None = True
        elif lv is None:
            result = None
        elif rv is None:
            result = False
        else:
            jl = lv if isinstance(lv, J) else J("Boolean", lv)
            jr = rv if isinstance(rv, J) else J("Boolean", rv)
            result = java_equals(jl, jr) or java_compare(jl, jr) == 0
        negate = kind == "ne" or (kind == "isnull" and b[1])
        return None if result is None else result != negate
    if kind == "match":
        _, op, negated, operand, search = b
        if not search:
            return False
        v = ev(operand, props)
        if not (isinstance(v, J) and v.cls == "String"):
            return False
        found = {"CONTAINS": search in v.v, "STARTSWITH": v.v.startswith(search),
                 "ENDSWITH": v.v.endswith(search)}[op]
        return found != negated
    assert kind == "in"
    v = ev(b[2], props)
    if not isinstance(v, J) or v.cls != "String":
        return None
    return (v.v in b[3]) != b[1]


def oracle(t: Tree, props: dict[str, str]) -> str:
    root = as_boolean(build(t))  # Invalid propagates
    try:
        value = ev(root, props)
    except Threw:
        return ERROR
    return {True: TRUE, False: FALSE, None: NULL}[value]


NAMES = st.sampled_from(["a", "b", "c"])
PROPS = NAMES.map(lambda n: ("prop", n))
NUMBERS = st.sampled_from(["0", "1", "3", "5", "10", "2147483647", "2147483648", "9223372036854775807", "5L",
                           "3.5", "0.5", "1e3", "2.", ".5"]).map(
    lambda x: ("int", x) if x.rstrip("lL").isdigit() else ("float", x))
values = st.one_of(PROPS, NUMBERS, st.sampled_from(POOL).map(lambda s: ("str", s)),
                   st.sampled_from(["TRUE", "false", "NULL"]).map(lambda k: ("kw", k)))


def mostly(usual: st.SearchStrategy[Tree], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Tree]:
    """`usual` 80% of the time: most trees should pass the parser's checks, some should not."""
    return st.integers(0, 9).flatmap(lambda i: usual if i < 8 else other)


# Operands of > < BETWEEN: mostly what the parser accepts, sometimes anything.
ordered = mostly(st.one_of(PROPS, NUMBERS, st.tuples(st.just("neg"), st.one_of(PROPS, NUMBERS)),
                           st.tuples(st.just("pos"), PROPS)), values)
ORDER = st.sampled_from([">", ">=", "<", "<="])
SEARCH = st.sampled_from(["x", "a", "3", "", "'"])


def extend(inner: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    operand = st.one_of(values, inner)
    return st.one_of(
        st.tuples(st.just("not"), inner), st.tuples(st.just("and"), inner, inner),
        st.tuples(st.just("or"), inner, inner), st.tuples(st.just("and"), inner, inner),
        st.tuples(st.just("or"), inner, inner), st.tuples(st.just("neg"), operand),
        st.tuples(st.just("eq"), operand, operand), st.tuples(st.just("ne"), ordered, operand),
        st.tuples(st.just("isnull"), st.booleans(), operand),
        st.tuples(st.just("match"), st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]), st.booleans(),
                  st.one_of(PROPS, operand), SEARCH),
        st.tuples(st.just("in"), st.booleans(), mostly(PROPS, operand),
                  st.lists(st.sampled_from(POOL), min_size=1, max_size=3)),
    )


leaves = mostly(st.one_of(
    st.tuples(st.just("cmp"), ORDER, ordered, ordered), st.tuples(st.just("cmp"), ORDER, PROPS, NUMBERS),
    st.tuples(st.just("eq"), PROPS, values), st.tuples(st.just("eq"), PROPS, PROPS),
    st.tuples(st.just("between"), st.booleans(), ordered, ordered, ordered),
    st.tuples(st.just("in"), st.booleans(), PROPS, st.lists(st.sampled_from(POOL), min_size=1, max_size=3)),
    st.sampled_from(["TRUE", "false", "NULL"]).map(lambda k: ("kw", k))), values)
conditions = st.recursive(leaves, extend, max_leaves=8)
property_maps = st.dictionaries(NAMES, st.sampled_from(POOL), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions, st.lists(property_maps, min_size=1, max_size=4))
def test_compiled_evaluator_agrees_with_the_oracle(tree: Tree, maps: list[dict[str, str]]) -> None:
    text = render(tree)
    try:
        expected = [oracle(tree, props) for props in maps]
    except Invalid:
        with pytest.raises(FilterError):
            SqlExpression(text)
        return
    for props, want in zip(maps, expected):
        assert outcome(text, props) == want, (text, props)
