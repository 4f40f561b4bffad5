"""Tag selectors: RocketMQ's FilterAPITest, the consume-queue screen, MessageSelector, and the store."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqlite.config import StoreConfig
from mqlite.errors import FilterError, MQClientError
from mqlite.filter import SUB_ALL, ExpressionType, MessageSelector, TagSubscription
from mqlite.message import MessageExt, java_string_hash
from mqlite.store import MessageStore
from mqlite.storebase import MessageFilter


# ======================================================================================================================
# FilterAPITest
# ======================================================================================================================
def test_build_subscription_data() -> None:
    sub_string = "TAG1 || Tag2 || tag3"
    sel = MessageSelector.by_tag(sub_string)
    assert sel.expression == sub_string
    assert sel.tags == {"TAG1", "Tag2", "tag3"}
    assert sel.codes == {java_string_hash(t) for t in ("TAG1", "Tag2", "tag3")}
    assert 2567159 in sel.codes  # "TAG1".hashCode(), from the reference


def test_build_tag_some() -> None:
    sel = MessageSelector(ExpressionType.TAG, "A || B")
    assert sel.expression == "A || B" and sel.expression_type is ExpressionType.TAG
    assert sel.tags == {"A", "B"} and not sel.match_all and sel.sql is None


def test_build_sql() -> None:
    sel = MessageSelector("SQL92", "a is not null")
    assert sel.expression_type is ExpressionType.SQL92 and sel.expression == "a is not null"


# ======================================================================================================================
# Parsing tag expressions
# ======================================================================================================================
@pytest.mark.parametrize("expression", [None, "", "*", "  *  ", "   ", "\t"])
def test_subscribe_all(expression: str | None) -> None:
    sel = MessageSelector.by_tag(expression)
    assert sel.match_all and sel.expression == SUB_ALL and not sel.tags and not sel.codes
    assert sel == MessageSelector.by_tag() == MessageSelector.of(None)
    for props in ({}, {"TAGS": "anything"}, {"a": "1"}):
        assert sel.matches(props)
    for code in (0, 42, -1, 1 << 40):
        assert sel.is_matched_by_consume_queue(code)


@pytest.mark.parametrize("expression, tags", [
    ("TagA", {"TagA"}), (" TagA ||TagB|| ", {"TagA", "TagB"}), ("A||B||A", {"A", "B"}),
    ("Tag A || Tag B", {"Tag A", "Tag B"}),          # blanks inside a tag are kept
    ("A || *", {"A", "*"}),                          # "*" among tags is an ordinary tag
    ("A | B", {"A | B"}),                            # only "||" separates
    ("A ||| B", {"A", "| B"}), ("|| A", {"A"}),
])
def test_tag_sets(expression: str, tags: set[str]) -> None:
    sel = MessageSelector.by_tag(expression)
    assert sel.tags == tags and not sel.match_all and sel.expression == expression
    assert sel.codes == {java_string_hash(t) for t in tags}


@pytest.mark.parametrize("expression", ["||", " || ", "|| ||", "||||"])
def test_no_tag_is_an_error(expression: str) -> None:
    with pytest.raises(FilterError, match="names no tag"):
        MessageSelector.by_tag(expression)


def test_exact_match() -> None:
    sel = MessageSelector.by_tag("TagA || TagB")
    assert sel.matches({"TAGS": "TagA"}) and sel.matches({"TAGS": "TagB", "KEYS": "k"})
    assert not sel.matches({"TAGS": "TagC"})
    assert not sel.matches({})                          # an untagged message only matches "*"
    assert not sel.matches({"TAGS": "taga"})            # case-sensitive
    assert not sel.matches({"TAGS": "TagA || TagB"})    # the message's TAGS is one string, never split
    assert not sel.matches({"TAGS": " TagA"})


def test_consume_queue_screen() -> None:
    sel = MessageSelector.by_tag("TagA || TopicTest#KEY1")
    assert sel.is_matched_by_consume_queue(2598919)                  # "TagA"
    assert sel.is_matched_by_consume_queue(-1656969516)              # a negative hash code
    assert sel.is_matched_by_consume_queue(-1656969516 & 0xFFFFFFFF)  # the broker casts the long to int
    assert sel.is_matched_by_consume_queue((7 << 32) | 2598919)
    assert not sel.is_matched_by_consume_queue(0) and not sel.is_matched_by_consume_queue(2598920)


def test_hash_collisions_pass_the_screen_but_not_the_match() -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    sel = MessageSelector.by_tag("Aa")
    assert sel.is_matched_by_consume_queue(java_string_hash("BB"))
    assert not sel.matches({"TAGS": "BB"}) and sel.matches({"TAGS": "Aa"})


def test_tag_subscription() -> None:
    sub = TagSubscription.parse(" X || Y ")
    assert sub.tags == {"X", "Y"} and sub.expression == " X || Y " and not sub.match_all
    assert repr(sub) == "TagSubscription.parse(' X || Y ')"
    assert TagSubscription.parse(None).match_all


# ======================================================================================================================
# MessageSelector as a value
# ======================================================================================================================
def test_of() -> None:
    sel = MessageSelector.by_sql("a > 1")
    assert MessageSelector.of(sel) is sel
    assert MessageSelector.of("A || B") == MessageSelector.by_tag("A || B")
    assert MessageSelector.of(None).match_all
    with pytest.raises(MQClientError, match="MessageSelector, a tag expression str or None"):
        MessageSelector.of(5)  # type: ignore[arg-type]


def test_equality_hash_repr() -> None:
    a, b = MessageSelector.by_tag("A || B"), MessageSelector.by_tag("A || B")
    assert a == b and hash(a) == hash(b) and len({a, b, MessageSelector.by_tag("B || A")}) == 2
    assert MessageSelector.by_tag("") == MessageSelector.by_tag("*")
    assert a != "A || B" and MessageSelector.by_tag("x = 1") != MessageSelector.by_sql("x = 1")
    assert repr(a) == "MessageSelector.by_tag('A || B')"
    assert eval(repr(a), {"MessageSelector": MessageSelector}) == a
    assert pickle.loads(pickle.dumps(a)) == a and pickle.loads(pickle.dumps(a)).matches({"TAGS": "B"})


def test_immutable_and_slotted() -> None:
    sel = MessageSelector.by_tag("A")
    with pytest.raises(AttributeError):
        sel.expression = "B"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        sel.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(sel, "__dict__")


def test_expression_type() -> None:
    assert ExpressionType("TAG") is ExpressionType.TAG and ExpressionType.SQL92 == "SQL92"
    assert isinstance(ExpressionType.TAG, str) and f"{ExpressionType.TAG}" == str(ExpressionType.TAG) == "TAG"
    with pytest.raises(FilterError, match="unknown expression type"):
        MessageSelector("XPATH", "a")


def test_store_filter_protocol_on_messages() -> None:
    store_filter: MessageFilter = MessageSelector.by_tag("TagA")
    assert store_filter.is_matched_by_commit_log(MessageExt("t", b"", tags="TagA"))
    assert not store_filter.is_matched_by_commit_log(MessageExt("t", b"", tags="TagB"))
    sql_filter: MessageFilter = MessageSelector.by_sql("price > 10")
    assert sql_filter.is_matched_by_consume_queue(0)
    assert sql_filter.is_matched_by_commit_log(MessageExt("t", b"", properties={"price": "11"}))


def test_filters_in_the_store(tmp_path: Path) -> None:
    config = StoreConfig(commitlog_file_size=1 << 20, consumequeue_file_size=20 * 100, max_hash_slot_num=1000,
                         max_index_num=4000)
    with MessageStore(str(tmp_path / "s"), config) as store:
        for i, tag in enumerate(["TagA", "TagB", "", "Aa", "BB", "TagA"]):
            props = {"price": str(i * 10)}
            if tag:
                props["TAGS"] = tag
            store.put("T", 0, b"m%d" % i, props)
        assert store.wait_dispatched()

        def bodies(selector: MessageSelector) -> list[bytes]:
            return [m.body for m in store.get_messages("T", 0, 0, 32, message_filter=selector).messages]

        assert bodies(MessageSelector.by_tag("TagA")) == [b"m0", b"m5"]
        assert bodies(MessageSelector.by_tag("Aa || TagB")) == [b"m1", b"m3"]  # "BB" collides with "Aa"
        assert bodies(MessageSelector.by_tag("*")) == [b"m%d" % i for i in range(6)]
        assert bodies(MessageSelector.by_sql("price >= 20 AND TAGS IS NOT NULL")) == [b"m3", b"m4", b"m5"]
        assert bodies(MessageSelector.by_sql("TAGS IN ('TagA', 'BB') OR price = 20")) == [b"m0", b"m2", b"m4", b"m5"]


# ======================================================================================================================
# Hypothesis: a tag selector matches exactly the messages whose tag is in its set
# ======================================================================================================================
TAG = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="|"), min_size=1,
              max_size=6).map(str.strip).filter(lambda t: t not in ("", "*"))
BLANK = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(BLANK, TAG, BLANK), min_size=1, max_size=5),
       st.lists(st.one_of(TAG, st.none()), max_size=8))
def test_tag_selector_matches_exactly_its_tags(pieces: list[tuple[str, str, str]],
                                               message_tags: list[str | None]) -> None:
    expression = "||".join(before + tag + after for before, tag, after in pieces)
    subscribed = {tag for _, tag, _ in pieces}
    sel = MessageSelector.by_tag(expression)
    assert sel.tags == subscribed and not sel.match_all
    for tag in message_tags + sorted(subscribed):
        props = {} if tag is None else {"TAGS": tag}
        assert sel.matches(props) == (tag in subscribed)
        code = 0 if tag is None else java_string_hash(tag)
        if sel.matches(props):  # the screen never drops a message the exact check keeps
            assert sel.is_matched_by_consume_queue(code)
        elif code not in {java_string_hash(t) for t in subscribed}:
            assert not sel.is_matched_by_consume_queue(code)
