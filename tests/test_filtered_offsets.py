"""Offsets move past filtered messages (RocketMQ's `correctTagsOffset`): a consumer whose filter
skips the tail of a queue shows no lag there once it consumed everything it matches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import mqlite
from mqlite import ConsumeFromWhere, ConsumeOrderlyStatus
from mqlite.testing import wait_idle
from support import deadline, wait_until

TOPIC = "orders"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def _send(broker: mqlite.Broker, tags: list[str]) -> None:
    broker.create_topic(TOPIC, 1)
    with mqlite.Producer(broker, "pg") as producer:
        for i, tag in enumerate(tags):
            producer.send(mqlite.Message(TOPIC, b"%s%d" % (tag.encode(), i), tags=tag))


def _lag(broker: mqlite.Broker, group: str) -> int:
    rows = [row for row in broker.consumer_progress(group) if row.topic == TOPIC]
    return sum(row.diff for row in rows) if rows else -1


def _wait_no_lag(broker: mqlite.Broker, group: str, step: Callable[[], Any] = lambda: None) -> None:
    """Look until the group's lag on TOPIC is 0, calling `step` between looks (no event tells a commit
    past a filtered tail: the consumer makes it on its next round)."""

    def no_lag() -> bool:
        if _lag(broker, group) == 0:
            return True
        step()
        return False

    wait_until(no_lag, f"group {group} to commit past the end of {TOPIC}", 20)


# Three matching messages, then a tail the filter skips; and a queue where nothing matches.
CASES = {"filtered-tail": ["A", "A", "A", "B", "B", "B", "B", "B"], "nothing-matches": ["B"] * 6}


@pytest.mark.parametrize("tags", CASES.values(), ids=list(CASES))
@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_push_consumer_commits_past_a_filtered_tail(mqlite_broker: mqlite.Broker, tags: list[str],
                                                    orderly: bool) -> None:
    _send(mqlite_broker, tags)
    got: list[bytes] = []

    def listener(msgs: list[mqlite.MessageExt], context: object) -> Any:
        got.extend(m.body for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS if orderly else None

    consumer = mqlite.PushConsumer(mqlite_broker, "cg", subscription={TOPIC: "A"}, consume_from_where=FIRST,
                                   listener=listener, orderly=orderly)
    with consumer:
        wait_idle(mqlite_broker, consumer)
        _wait_no_lag(mqlite_broker, "cg")
    assert got == [b"A%d" % i for i, tag in enumerate(tags) if tag == "A"]
    assert _lag(mqlite_broker, "cg") == 0


@pytest.mark.parametrize("tags", CASES.values(), ids=list(CASES))
def test_lite_pull_consumer_commits_past_a_filtered_tail(mqlite_broker: mqlite.Broker, tags: list[str]) -> None:
    _send(mqlite_broker, tags)
    got: list[bytes] = []
    with mqlite.LitePullConsumer(mqlite_broker, "lg", auto_commit=False, consume_from_where=FIRST) as consumer:
        consumer.subscribe(TOPIC, "A")

        def step() -> None:
            got.extend(m.body for m in consumer.poll(timeout=0.05))
            consumer.commit_sync()

        _wait_no_lag(mqlite_broker, "lg", step)
    assert got == [b"A%d" % i for i, tag in enumerate(tags) if tag == "A"]


def test_lite_pull_shutdown_commits_past_a_filtered_tail(mqlite_broker: mqlite.Broker) -> None:
    # auto_commit: shutdown commits where the consumer stands, past the filtered tail.
    _send(mqlite_broker, CASES["filtered-tail"])
    with mqlite.LitePullConsumer(mqlite_broker, "lg", consume_from_where=FIRST) as consumer:
        consumer.subscribe(TOPIC, "A")
        got: list[mqlite.MessageExt] = []
        with deadline(20):
            while len(got) < 3:
                got.extend(consumer.poll(timeout=1.0))
    assert _lag(mqlite_broker, "lg") == 0
