"""Message filters: tag subscriptions and RocketMQ's SQL92 selectors.

`MessageSelector.by_tag("TagA || TagB")` and `MessageSelector.by_sql("a > 5 AND b = 'x'")`
parse once and then answer `matches(properties)`. A selector is also the store's
`MessageFilter` (consume-queue screen by tags code, then the exact check).

Layer L3: this package imports only `mqlite.errors`, `mqlite.message` and `mqlite.storebase`.
"""

from __future__ import annotations

from .selector import ExpressionType, MessageSelector
from .sql92 import MAX_DEPTH, SqlExpression, compile_sql
from .tags import SUB_ALL, TagSubscription

__all__ = [
    "ExpressionType",
    "MAX_DEPTH",
    "MessageSelector",
    "SUB_ALL",
    "SqlExpression",
    "TagSubscription",
    "compile_sql",
]
