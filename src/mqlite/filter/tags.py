"""Tag subscriptions: RocketMQ's `FilterAPI.buildSubscriptionData` and its two checks.

A tag expression is `"*"` (everything) or tags joined by `||`: `"TagA || TagB"`.
The broker screens consume-queue units by the 32-bit hash of the tag
(`ExpressionMessageFilter.isMatchedByConsumeQueue`), and the client then drops
hash collisions by comparing the tag itself (`PullAPIWrapper.processPullResult`);
`TagSubscription` does both.

>>> sub = TagSubscription.parse("TagA || TagB")
>>> sorted(sub.tags), sub.match_all
(['TagA', 'TagB'], False)
>>> sub.matches({"TAGS": "TagA"}), sub.matches({"TAGS": "TagC"}), sub.matches({})
(True, False, False)
>>> sub.is_matched_by_tags_code(2598919)  # "TagA".hashCode()
True
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import FilterError
from ..message import PROPERTY_TAGS, tags_code

__all__ = ["SUB_ALL", "TagSubscription"]

#: The tag expression that subscribes to every message (`SubscriptionData.SUB_ALL`).
SUB_ALL = "*"

_SEPARATOR = "||"


class TagSubscription:
    """The parsed form of a tag expression: its tags and their hash codes.

    Immutable. `matches` costs one dict lookup and one set lookup.
    """

    __slots__ = ("expression", "match_all", "tags", "codes", "_unsigned_codes")

    expression: str
    """The expression as given, or `"*"` for an empty, blank or `"*"` one."""
    match_all: bool
    """True for `"*"`: every message matches, tagged or not."""
    tags: frozenset[str]
    """The tags (`SubscriptionData.tagsSet`); empty when `match_all`."""
    codes: frozenset[int]
    """Their Java `String.hashCode` values (`SubscriptionData.codeSet`)."""

    def __init__(self, expression: str, tags: frozenset[str]) -> None:
        self.expression = expression
        self.match_all = expression == SUB_ALL
        self.tags = tags
        self.codes = frozenset(tags_code(tag) for tag in tags)
        # The broker compares `(int) tagsCode`: the low 32 bits of the unit's 64-bit code.
        self._unsigned_codes = frozenset(code & 0xFFFFFFFF for code in self.codes)

    @classmethod
    def parse(cls, expression: str | None) -> TagSubscription:
        """Parse a tag expression (`FilterAPI.buildSubscriptionData`).

        None, `""` and `"*"` (after stripping blanks) subscribe to all. Otherwise the
        text is split on `||`, each piece stripped and empty pieces skipped; a `"*"`
        among other tags is an ordinary tag, as in RocketMQ. An expression that
        names no tag at all (`"||"`, `" || "`) raises FilterError: RocketMQ either
        throws or subscribes to nothing for it, which is never what was meant.
        """
        if expression is not None and not isinstance(expression, str):
            raise FilterError(f"a tag expression must be a str, not {type(expression).__name__}")
        if expression is None or expression.strip() in ("", SUB_ALL):
            return cls(SUB_ALL, frozenset())
        tags = frozenset(piece.strip() for piece in expression.split(_SEPARATOR) if piece.strip())
        if not tags:
            raise FilterError(f"tag expression {expression!r} names no tag; write tags separated by "
                              "'||', such as 'TagA || TagB', or '*' for all messages")
        return cls(expression, tags)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether a message with these properties carries one of the tags (its `TAGS` value)."""
        return self.match_all or properties.get(PROPERTY_TAGS) in self.tags

    def is_matched_by_tags_code(self, code: int) -> bool:
        """The broker's consume-queue screen: the unit's tags code is one of the tags' hashes.

        A True answer may be a hash collision; `matches` on the message settles it.
        """
        return self.match_all or (code & 0xFFFFFFFF) in self._unsigned_codes

    def __repr__(self) -> str:
        return f"TagSubscription.parse({self.expression!r})"
