"""`MessageSelector`: what a consumer subscribes with, and the filter the store applies.

>>> sel = MessageSelector.by_sql("a > 5 AND b = 'x'")
>>> sel.matches({"a": "10", "b": "x"}), sel.expression_type
(True, <ExpressionType.SQL92: 'SQL92'>)
>>> MessageSelector.of("TagA || TagB").matches({"TAGS": "TagB"})
True
>>> MessageSelector.of(None) == MessageSelector.by_tag("*")
True
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Callable

from ..errors import FilterError, MQClientError
from ..message import MessageExt
from .sql92 import SqlExpression, compile_sql
from .tags import SUB_ALL, TagSubscription

if TYPE_CHECKING:
    from ..storebase import MessageFilter

__all__ = ["ExpressionType", "MessageSelector"]


class ExpressionType(StrEnum):
    """How a subscription expression is read (`ExpressionType`): tags or SQL92.

    A str: `ExpressionType.SQL92 == "SQL92"` and `f"{ExpressionType.TAG}"` is `"TAG"`.
    """

    TAG = "TAG"
    SQL92 = "SQL92"


def _match_all(properties: Mapping[str, str]) -> bool:
    return True


class MessageSelector:
    """A tag or SQL92 subscription expression, parsed once.

    Immutable and hashable; equal when type and expression text are equal. It is
    also the store's `MessageFilter`: `is_matched_by_consume_queue` screens a
    consume-queue unit by its tags code (tags only; SQL92 passes everything) and
    `is_matched_by_commit_log` decides on the stored message.

    Cost: construction parses (and for SQL92 compiles, cached for the last 100
    expressions); `matches` is a set lookup for tags and well under a
    microsecond for a typical SQL92 selector. Safe to share between threads.
    """

    __slots__ = ("expression_type", "expression", "match_all", "tags", "codes", "sql", "_tag_subscription",
                 "_match")

    expression_type: ExpressionType
    """`ExpressionType.TAG` or `ExpressionType.SQL92`."""
    expression: str
    """The expression text (`"*"` for a tag selector built from None, "" or "*")."""
    match_all: bool
    """True only for the tag expression `"*"`."""
    tags: frozenset[str]
    """The tags of a tag selector (empty for `"*"` and for SQL92)."""
    codes: frozenset[int]
    """The Java hash codes of `tags`."""
    sql: SqlExpression | None
    """The compiled SQL92 expression, or None for a tag selector."""
    _tag_subscription: TagSubscription | None
    _match: Callable[[Mapping[str, str]], bool]

    def __init__(self, expression_type: ExpressionType | str, expression: str | None) -> None:
        """Parse `expression` as `expression_type`; raises FilterError when it is invalid."""
        try:
            kind = ExpressionType(expression_type)
        except ValueError:
            raise FilterError(f"unknown expression type {expression_type!r}; use 'TAG' or 'SQL92'") from None
        init = super().__setattr__
        init("expression_type", kind)
        if kind is ExpressionType.TAG:
            sub = TagSubscription.parse(expression)
            init("expression", sub.expression)
            init("match_all", sub.match_all)
            init("tags", sub.tags)
            init("codes", sub.codes)
            init("sql", None)
            init("_tag_subscription", sub)
            init("_match", _match_all if sub.match_all else sub.matches)
            return
        if expression is None or expression == "":
            # FilterAPI.build: "Expression can't be null!"
            raise FilterError("a SQL92 selector needs an expression; use MessageSelector.by_tag('*') to match all")
        if not isinstance(expression, str):  # before the cache, which would fail on an unhashable value
            raise FilterError(f"a SQL92 expression must be a str, not {type(expression).__name__}")
        sql = compile_sql(expression)
        init("expression", expression)
        init("match_all", False)
        init("tags", frozenset())
        init("codes", frozenset())
        init("sql", sql)
        init("_tag_subscription", None)
        init("_match", sql.matches)

    @classmethod
    def by_tag(cls, expression: str | None = SUB_ALL) -> MessageSelector:
        """A tag selector: `"*"` for all, or tags joined by `||` (`"TagA || TagB"`)."""
        return cls(ExpressionType.TAG, expression)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """A SQL92 selector over message properties, such as `"a > 5 AND b = 'x'"`.

        Parsed and compiled now; an invalid expression raises FilterError naming the
        problem and its position.
        """
        return cls(ExpressionType.SQL92, expression)

    @classmethod
    def of(cls, value: MessageSelector | str | None) -> MessageSelector:
        """What `subscribe(topic, expression)` accepts: a selector, a tag expression, or None for all."""
        if isinstance(value, MessageSelector):
            return value
        if value is None or isinstance(value, str):
            return cls.by_tag(value)
        raise MQClientError(f"a subscription expression must be a MessageSelector, a tag expression str or None, "
                            f"not {type(value).__name__}")

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether a message with these properties is selected (its tag is in `TAGS`).

        For SQL92, only a TRUE result selects: NULL (a missing property), FALSE and
        errors (a non-numeric property compared with a number) do not.
        """
        return self._match(properties)

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        """Store filter, first step: False rules the message out from its consume-queue unit."""
        sub = self._tag_subscription
        return sub is None or sub.is_matched_by_tags_code(tags_code)

    def is_matched_by_commit_log(self, message: MessageExt) -> bool:
        """Store filter, second step: the exact match on the stored message's properties."""
        return self._match(message.properties)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MessageSelector is immutable; cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageSelector):
            return NotImplemented
        return self.expression_type is other.expression_type and self.expression == other.expression

    def __hash__(self) -> int:
        return hash((self.expression_type, self.expression))

    def __repr__(self) -> str:
        factory = "by_tag" if self.expression_type is ExpressionType.TAG else "by_sql"
        return f"MessageSelector.{factory}({self.expression!r})"

    def __reduce__(self) -> tuple[Callable[..., MessageSelector], tuple[str, str]]:
        # The compiled function cannot be pickled; the text is enough to rebuild it.
        return MessageSelector, (self.expression_type.value, self.expression)


if TYPE_CHECKING:
    # The store's filter protocol is satisfied structurally; mypy checks it here.
    _as_store_filter: MessageFilter = MessageSelector.by_tag()
