"""CONSUME_FROM_TIMESTAMP: a queue the group has no offset for starts at the first message stored at
or after `consume_timestamp` (RocketMQ's `computePullFromWhereWithException` + `searchOffset`), also
on a young queue, where the broker would answer offset 0; a retry topic starts at its end."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

import mqlite
from mqlite import ConsumeFromWhere, MessageQueue
from mqlite.testing import MockClock, wait_idle
from support import deadline

TOPIC = "orders"
WHEN = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


def _send_spread(broker: mqlite.Broker, clock: MockClock, count: int, seconds_apart: float) -> list[int]:
    """`count` messages to queue 0, `seconds_apart` of clock time apart; their store times."""
    broker.create_topic(TOPIC, 1)
    stamps = []
    for i in range(count):
        stamps.append(broker.put_message(TOPIC, 0, b"m%d" % i).store_timestamp)
        clock.advance(seconds_apart)
    return stamps


def _push_bodies(broker: mqlite.Broker, **options: Any) -> list[bytes]:
    got: list[bytes] = []
    consumer = mqlite.PushConsumer(broker, "cg", subscription={TOPIC: "*"}, consume_from_where=WHEN,
                                   listener=lambda msgs, ctx: got.extend(m.body for m in msgs), **options)
    with consumer:
        wait_idle(broker, consumer)
    return sorted(got)


def test_push_consumer_starts_at_the_timestamp_on_a_young_queue(mqlite_broker: mqlite.Broker,
                                                                mqlite_clock: MockClock,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    stamps = _send_spread(mqlite_broker, mqlite_clock, 5, 1)
    # The queue is young (offset 0 in memory): RocketMQ's broker answers 0 to a new group.
    assert mqlite_broker.offset_for_new_group(MessageQueue(TOPIC, mqlite_broker.broker_name, 0)) == 0
    with caplog.at_level(logging.INFO, logger="mqlite.consumer"):
        assert _push_bodies(mqlite_broker, consume_timestamp=stamps[3]) == [b"m3", b"m4"]
    assert "stored offset" not in caplog.text
    assert f"starts at offset 3, the first message stored at or after {stamps[3]}" in caplog.text
    # The group has an offset now: it resumes there, whatever the timestamp says.
    mqlite_broker.put_message(TOPIC, 0, b"m5")
    assert _push_bodies(mqlite_broker, consume_timestamp=0) == [b"m5"]


def test_default_timestamp_is_half_an_hour_before_start_on_the_brokers_clock(mqlite_broker: mqlite.Broker,
                                                                            mqlite_clock: MockClock) -> None:
    mqlite_broker.create_topic(TOPIC, 1)
    mqlite_broker.put_message(TOPIC, 0, b"old")
    mqlite_clock.advance(3600)
    mqlite_broker.put_message(TOPIC, 0, b"recent")  # 29 minutes before the consumer starts
    mqlite_clock.advance(29 * 60)
    assert _push_bodies(mqlite_broker) == [b"recent"]


def test_a_timestamp_after_every_message_starts_at_the_end(mqlite_broker: mqlite.Broker,
                                                           mqlite_clock: MockClock) -> None:
    stamps = _send_spread(mqlite_broker, mqlite_clock, 3, 1)
    assert _push_bodies(mqlite_broker, consume_timestamp=stamps[-1] + 60_000) == []


def test_yyyymmddhhmmss_timestamp(mqlite_broker: mqlite.Broker, mqlite_clock: MockClock) -> None:
    stamps = _send_spread(mqlite_broker, mqlite_clock, 4, 2)
    human = time.strftime("%Y%m%d%H%M%S", time.localtime(stamps[2] / 1000 + 1))  # a second into the gap
    assert _push_bodies(mqlite_broker, consume_timestamp=human) == [b"m3"]


def test_retry_topic_starts_at_its_end(mqlite_broker: mqlite.Broker, mqlite_clock: MockClock) -> None:
    put = mqlite_broker.put_message(TOPIC, 0, b"m0")
    mqlite_broker.send_message_back("cg", mqlite_broker.view_message(put.offset_msg_id))
    mqlite_clock.advance(10)  # the retry copy (delay level 3) reaches %RETRY%cg
    assert mqlite_broker.max_offset(MessageQueue("%RETRY%cg", mqlite_broker.broker_name, 0)) == 1
    assert _push_bodies(mqlite_broker, consume_timestamp=0) == [b"m0"]  # not the retry copy


def test_lite_pull_consumer_starts_at_the_timestamp(mqlite_broker: mqlite.Broker, mqlite_clock: MockClock) -> None:
    stamps = _send_spread(mqlite_broker, mqlite_clock, 5, 1)
    with mqlite.LitePullConsumer(mqlite_broker, "lg", consume_from_where=WHEN,
                                 consume_timestamp=stamps[2]) as consumer:
        consumer.subscribe(TOPIC)
        got: list[bytes] = []
        with deadline(20):
            while len(got) < 3:
                got.extend(m.body for m in consumer.poll(timeout=1.0))
    assert got == [b"m2", b"m3", b"m4"]
