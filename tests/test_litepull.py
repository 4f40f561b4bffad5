"""LitePullConsumer: the contract of RocketMQ's `DefaultLitePullConsumerTest`, on a real in-process broker.

Assign and subscribe polling, seek bounds and positions, pause/resume, the
subscribe/assign exclusion, commits, where a new queue starts (reference 8.2),
flow control, group rebalance and take-over, broadcasting offsets in the local
file, iteration, auto-commit across a restart, long polling, and threads.
No test sleeps: waits are poll timeouts and conditions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.clock import ManualClock
from mqlite.consumer.litepull import LitePullConsumer
from mqlite.consumer.offsetstore import local_offsets_path
from mqlite.consumer.types import ConsumeFromWhere, MessageModel
from mqlite.filter import MessageSelector
from support import (SMALL_STORE, broker_fixture, local, no_leftover_threads,  # noqa: F401 - autouse
                     over_the_wire, wait_until)

TOPIC = "LitePullConsumerTest"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET

broker = broker_fixture(topics={TOPIC: 4})  # a test marked @over_the_wire also runs remotely


def _mq(broker: mqlite.Broker, queue_id: int = 0, topic: str = TOPIC) -> mqlite.MessageQueue:
    return mqlite.MessageQueue(topic, broker.broker_name, queue_id)


def _put(broker: mqlite.Broker, n: int, queue_id: int = 0, prefix: str = "m", topic: str = TOPIC,
         tags: str | None = None) -> None:
    props = {"TAGS": tags} if tags else None
    for i in range(n):
        broker.put_message(topic, queue_id, f"{prefix}{i}".encode(), props)


def _consumer(broker: mqlite.Broker, group: str = "lg", **options: Any) -> LitePullConsumer:
    options.setdefault("consume_from_where", FIRST)
    return LitePullConsumer(broker, group, **options)


def _drain(consumers: list[LitePullConsumer], want: int, timeout: float = 5.0) -> list[list[mqlite.MessageExt]]:
    """Poll the consumers in turn until `want` messages came in total (or `timeout` passed)."""
    got: list[list[mqlite.MessageExt]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            got[i] += consumer.poll(0.05)
    return got


class _Assignments:
    """Queue listeners that record each consumer's share; tests wait on the condition, not on time."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.mine: dict[str, set[int]] = {}

    def listener(self, name: str) -> Callable[[str, set[mqlite.MessageQueue], set[mqlite.MessageQueue]], None]:
        def changed(topic: str, mq_all: set[mqlite.MessageQueue], mq_divided: set[mqlite.MessageQueue]) -> None:
            with self.cv:
                self.mine[name] = {mq.queue_id for mq in mq_divided}
                self.cv.notify_all()
        return changed

    def wait(self, predicate: Callable[[dict[str, set[int]]], bool], timeout: float = 5.0) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: predicate(self.mine), timeout), f"assignment stuck at {self.mine}"


# -- assign / subscribe -------------------------------------------------------------------------------
@over_the_wire
def test_assign_then_poll(broker: mqlite.Broker) -> None:
    _put(broker, 1, prefix="a")
    with _consumer(broker) as consumer:
        consumer.assign([_mq(broker)])
        result = consumer.poll(5.0)
        assert [m.body for m in result] == [b"a0"]
        assert result[0].topic == TOPIC and result[0].queue_offset == 0
        assert consumer.assignment() == {_mq(broker)}
        assert consumer.poll(0.05) == []


@over_the_wire
def test_subscribe_then_poll(broker: mqlite.Broker) -> None:
    for q in range(4):
        _put(broker, 3, queue_id=q, prefix=f"q{q}-")
    with _consumer(broker) as consumer:
        consumer.subscribe(TOPIC, "*")
        (got,) = _drain([consumer], 12)
        assert sorted(m.body for m in got) == sorted(f"q{q}-{i}".encode() for q in range(4) for i in range(3))
        assert consumer.assignment() == {_mq(broker, q) for q in range(4)}
        assert TOPIC in consumer.subscribed_topics()
        assert not any(t.startswith("%RETRY%") for t in consumer.subscribed_topics())  # lite pull has no retry


@over_the_wire
def test_poll_returns_one_pull_of_at_most_pull_batch_size_from_one_queue(broker: mqlite.Broker) -> None:
    _put(broker, 25)
    with _consumer(broker, pull_batch_size=10) as consumer:
        consumer.assign([_mq(broker)])
        sizes = [len(consumer.poll(5.0)) for _ in range(3)]
        assert sizes == [10, 10, 5]


@over_the_wire
def test_subscribe_with_a_tag_filter(broker: mqlite.Broker) -> None:
    for i in range(6):
        broker.put_message(TOPIC, 0, b"x%d" % i, {"TAGS": "A" if i % 2 == 0 else "B"})
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.subscribe(TOPIC, "A")
        (got,) = _drain([consumer], 3)
        assert sorted(m.body for m in got) == [b"x0", b"x2", b"x4"]
        assert consumer.poll(0.1) == []


@over_the_wire
def test_subscribe_with_a_sql92_selector(broker: mqlite.Broker) -> None:
    for i in range(6):
        broker.put_message(TOPIC, 1, b"s%d" % i, {"a": str(i)})
    with _consumer(broker) as consumer:
        consumer.subscribe(TOPIC, MessageSelector.by_sql("a >= 4"))
        (got,) = _drain([consumer], 2)
        assert sorted(m.body for m in got) == [b"s4", b"s5"]


@over_the_wire
def test_admin_reset_moves_a_running_consumer(broker: mqlite.Broker) -> None:
    _put(broker, 5)
    with _consumer(broker) as consumer:
        consumer.assign([_mq(broker)])
        (got,) = _drain([consumer], 5)
        assert len(got) == 5
        broker.reset_offset_by_time("lg", TOPIC, 0)
        assert [m.queue_offset for m in consumer.poll(5.0)] == [0, 1, 2, 3, 4]


def test_subscribe_and_assign_are_mutually_exclusive(broker: mqlite.Broker) -> None:
    with _consumer(broker) as consumer:
        consumer.subscribe(TOPIC, "*")
        with pytest.raises(mqlite.IllegalStateError, match="Subscribe and assign are mutually exclusive."):
            consumer.assign([_mq(broker)])
    with _consumer(broker) as consumer:
        consumer.assign([_mq(broker)])
        with pytest.raises(mqlite.IllegalStateError, match="Subscribe and assign are mutually exclusive."):
            consumer.subscribe(TOPIC, "*")
    consumer = _consumer(broker)
    consumer.subscribe(TOPIC)
    with pytest.raises(mqlite.IllegalStateError, match="mutually exclusive"):
        consumer.set_sub_expression_for_assign(TOPIC, "TagA")


def test_assign_rejects_nothing(broker: mqlite.Broker) -> None:
    consumer = _consumer(broker)
    bads: list[Any] = [None, [], set()]
    for bad in bads:
        with pytest.raises(mqlite.MQClientError, match="can not be null or empty"):
            consumer.assign(bad)
    with pytest.raises(mqlite.MQClientError, match="MessageQueue"):
        consumer.assign(["not a queue"])  # type: ignore[list-item]


def test_assign_replaces_the_whole_assignment(broker: mqlite.Broker) -> None:
    _put(broker, 2, queue_id=0, prefix="zero")
    _put(broker, 2, queue_id=1, prefix="one")
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([_mq(broker, 0)])
        assert {m.queue_id for m in consumer.poll(5.0)} == {0}
        consumer.assign([_mq(broker, 1)])
        assert consumer.assignment() == {_mq(broker, 1)}
        assert {m.queue_id for m in consumer.poll(5.0)} == {1}
        assert consumer.poll(0.1) == []


def test_sub_expression_for_assign_filters_and_only_works_before_start(broker: mqlite.Broker) -> None:
    for i in range(4):
        broker.put_message(TOPIC, 0, b"t%d" % i, {"TAGS": "TagA" if i < 2 else "TagB"})
    consumer = _consumer(broker)
    consumer.set_sub_expression_for_assign(TOPIC, "TagB")
    consumer.assign([_mq(broker)])
    with consumer:
        (got,) = _drain([consumer], 2)
        assert [m.body for m in got] == [b"t2", b"t3"]
        with pytest.raises(mqlite.IllegalStateError, match="before start"):
            consumer.set_sub_expression_for_assign(TOPIC, "*")


def test_calls_before_start_raise_not_running(broker: mqlite.Broker) -> None:
    consumer = _consumer(broker)
    calls: list[Callable[[], object]] = [
        lambda: consumer.poll(0.1), lambda: consumer.fetch_message_queues(TOPIC),
        lambda: consumer.offset_for_timestamp(_mq(broker), 123456), lambda: consumer.committed(_mq(broker)),
        lambda: consumer.commit_sync(), lambda: next(iter(consumer))]
    for call in calls:
        with pytest.raises(mqlite.IllegalStateError, match="The consumer not running, please start it first."):
            call()
    consumer.shutdown()  # shutting down a consumer never started is fine
    with pytest.raises(mqlite.IllegalStateError, match="not running"):
        consumer.poll()


def test_poll_rejects_a_negative_timeout(broker: mqlite.Broker) -> None:
    with _consumer(broker) as consumer:
        with pytest.raises(mqlite.MQClientError, match="negative"):
            consumer.poll(-1)


def test_options_are_validated_and_short_auto_commit_intervals_ignored(broker: mqlite.Broker) -> None:
    assert _consumer(broker, auto_commit_interval=0.5).auto_commit_interval == 5.0
    assert _consumer(broker, auto_commit_interval=2).auto_commit_interval == 2.0
    consumer = _consumer(broker)
    consumer.auto_commit_interval = 0.999
    assert consumer.auto_commit_interval == 5.0
    with pytest.raises(mqlite.MQClientError, match="pull_batch_size"):
        _consumer(broker, pull_batch_size=0)
    with pytest.raises(mqlite.MQClientError, match="poll_timeout"):
        _consumer(broker, poll_timeout=-1)
    with pytest.raises(mqlite.MQClientError, match="DEFAULT_CONSUMER"):
        LitePullConsumer(broker, "DEFAULT_CONSUMER")
    with pytest.raises(mqlite.MQClientError, match="message_model"):
        _consumer(broker, message_model=None)
    started = _consumer(broker)
    with started:
        with pytest.raises(mqlite.IllegalStateError):
            started.start()
        assert "LitePullConsumer" in repr(started) and "running" in repr(started)


def test_fetch_message_queues_and_assignment(broker: mqlite.Broker) -> None:
    with _consumer(broker) as consumer:
        assert consumer.fetch_message_queues(TOPIC) == {_mq(broker, q) for q in range(4)}
        assert consumer.fetch_message_queues("NoSuchTopic") == set()
        assert consumer.assignment() == set()


# -- seek -------------------------------------------------------------------------------------------------
def test_seek_needs_an_assigned_queue(broker: mqlite.Broker) -> None:
    with _consumer(broker) as consumer:
        with pytest.raises(mqlite.MQClientError, match="The message queue is not in assigned list"):
            consumer.seek(_mq(broker), 0)
    with _consumer(broker) as consumer:
        consumer.subscribe("OtherTopic")
        with pytest.raises(mqlite.MQClientError, match="not in assigned list, may be rebalancing"):
            consumer.seek(_mq(broker), 0)


def test_seek_offset_must_be_within_min_and_max(broker: mqlite.Broker) -> None:
    _put(broker, 100)
    with _consumer(broker) as consumer:
        consumer.assign([_mq(broker)])
        with pytest.raises(mqlite.MQClientError, match="min offset = 0"):
            consumer.seek(_mq(broker), -1)
        with pytest.raises(mqlite.MQClientError,
                           match="Seek offset illegal, seek offset = 1000, min offset = 0, max offset = 100"):
            consumer.seek(_mq(broker), 1000)
        consumer.seek(_mq(broker), 100)  # max itself is fine: the next message to arrive


@over_the_wire
def test_seek_delivers_from_the_offset_and_drops_what_was_cached(broker: mqlite.Broker) -> None:
    _put(broker, 30)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        assert [m.queue_offset for m in consumer.poll(5.0)] == list(range(10))
        consumer.seek(mq, 5)
        assert consumer.committed(mq) == 5  # seek also sets the consume offset
        assert [m.queue_offset for m in consumer.poll(5.0)] == list(range(5, 15))
        consumer.seek(mq, 27)
        assert [m.body for m in consumer.poll(5.0)] == [b"m27", b"m28", b"m29"]


def test_seek_to_begin_and_end(broker: mqlite.Broker) -> None:
    _put(broker, 3)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        assert len(consumer.poll(5.0)) == 3
        consumer.seek_to_begin(mq)
        assert [m.queue_offset for m in consumer.poll(5.0)] == [0, 1, 2]
        consumer.seek_to_end(mq)
        assert consumer.committed(mq) == 3
        assert consumer.poll(0.1) == []
        _put(broker, 1, prefix="late")
        assert [m.body for m in consumer.poll(5.0)] == [b"late0"]


def test_seek_before_the_first_pull_wins_over_consume_from_where(broker: mqlite.Broker) -> None:
    _put(broker, 10)
    mq = _mq(broker)
    consumer = _consumer(broker, consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    consumer.assign([mq])
    consumer.pause([mq])
    with consumer:
        consumer.seek(mq, 4)
        consumer.resume([mq])
        assert consumer.poll(5.0)[0].queue_offset == 4


# -- pause / resume --------------------------------------------------------------------------------------
@over_the_wire
def test_pause_then_resume(broker: mqlite.Broker) -> None:
    _put(broker, 1, prefix="a")
    mq = _mq(broker)
    consumer = _consumer(broker)
    consumer.assign([mq])
    consumer.pause([mq])
    with consumer:
        assert consumer.is_paused(mq)
        assert consumer.poll(0.3) == []
        consumer.resume([mq])
        result = consumer.poll(5.0)
        assert result[0].topic == TOPIC and result[0].body == b"a0"


def test_paused_queue_still_returns_what_was_fetched(broker: mqlite.Broker) -> None:
    _put(broker, 20)
    mq = _mq(broker)
    with _consumer(broker, pull_batch_size=10) as consumer:
        consumer.assign([mq])
        first = consumer.poll(5.0)
        consumer.pause([mq])
        rest = consumer.poll(0.2)  # the second batch may already have been pulled
        assert len(first) == 10 and len(rest) in (0, 10)
        _put(broker, 5, prefix="new")
        assert consumer.poll(0.2) == []
        consumer.resume([mq])
        (got,) = _drain([consumer], 25 - 10 - len(rest))
        assert len(first) + len(rest) + len(got) == 25


# -- commits ----------------------------------------------------------------------------------------------
@over_the_wire
def test_commit_sync_with_explicit_offsets(broker: mqlite.Broker) -> None:
    _put(broker, 5)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        consumer.seek(mq, 0)
        assert consumer.committed(mq) == 0
        consumer.commit_sync({mq: 1}, persist=True)
        assert consumer.committed(mq) == 1
        consumer.commit({mq: -1})  # -1 is ignored
        assert consumer.committed(mq) == 1
        consumer.commit_sync({_mq(broker, 3): 0})  # not assigned: ignored, as RocketMQ
        assert consumer.committed(_mq(broker, 3)) == -1
    assert broker.query_offset("lg", mq) == 1


def test_commit_sync_commits_what_poll_handed_out(broker: mqlite.Broker) -> None:
    _put(broker, 15)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        assert consumer.committed(mq) == -1
        assert len(consumer.poll(5.0)) == 10
        assert consumer.committed(mq) == -1  # manual mode: nothing until commit
        consumer.commit_sync()
        assert consumer.committed(mq) == 10
        assert len(consumer.poll(5.0)) == 5
        consumer.commit_sync()
        assert consumer.committed(mq) == 15
    progress = {p.queue_id: p for p in broker.consumer_progress("lg")}
    assert progress[0].consumer_offset == 15 and progress[0].diff == 0


def test_manual_commit_without_commit_redelivers_after_restart(broker: mqlite.Broker) -> None:
    _put(broker, 5)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        assert len(consumer.poll(5.0)) == 5
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        assert [m.queue_offset for m in consumer.poll(5.0)] == [0, 1, 2, 3, 4]


def test_offset_for_timestamp(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000, step_ms=1000)
    with mqlite.open(str(tmp_path / "mq"), clock=clock, **SMALL_STORE) as broker:
        _put(broker, 5)
        mq = _mq(broker)
        stamps = [broker.query_message_by_offset(TOPIC, 0, i).store_timestamp for i in range(5)]
        assert stamps == sorted(set(stamps))
        with _consumer(broker) as consumer:
            assert consumer.offset_for_timestamp(mq, stamps[2]) == 2
            assert consumer.offset_for_timestamp(mq, stamps[2] - 1) == 2
            assert consumer.offset_for_timestamp(mq, 0) == 0


# -- where a queue without an offset starts (reference 8.2) ---------------------------------------------------
def _first_offset(broker: mqlite.Broker, **options: Any) -> int | None:
    with _consumer(broker, auto_commit=False, **options) as consumer:
        consumer.assign([_mq(broker)])
        got = consumer.poll(0.5)
        return got[0].queue_offset if got else None


def test_consume_from_first_offset(broker: mqlite.Broker) -> None:
    _put(broker, 5)
    assert _first_offset(broker, consume_from_where=FIRST) == 0
    broker.commit_offset("lg", _mq(broker), 3)
    assert _first_offset(broker, consume_from_where=FIRST) == 3  # a stored offset always wins


def test_consume_from_last_offset(broker: mqlite.Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    _put(broker, 5)
    last = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    # A brand-new group on a young queue (offset 0 still in memory): the broker answers 0.
    assert _first_offset(broker, consume_from_where=last) == 0
    # An older queue: the broker has no offset for the group, so it starts at the end.
    monkeypatch.setattr(broker, "offset_for_new_group", lambda mq: -1)
    with _consumer(broker, group="late", consume_from_where=last) as consumer:
        consumer.assign([_mq(broker)])
        assert consumer.poll(0.3) == []
        _put(broker, 1, prefix="after")
        assert [m.body for m in consumer.poll(5.0)] == [b"after0"]
    broker.commit_offset("stored", _mq(broker), 2)
    assert _first_offset(broker, group="stored", consume_from_where=last) == 2


def test_consume_from_timestamp(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000, step_ms=1000)
    with mqlite.open(str(tmp_path / "mq"), clock=clock, **SMALL_STORE) as broker:
        _put(broker, 5)  # a young queue: the timestamp still applies (the broker would answer 0)
        stamp = broker.query_message_by_offset(TOPIC, 0, 3).store_timestamp
        when = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
        assert _first_offset(broker, consume_from_where=when, consume_timestamp=stamp) == 3
        human = time.strftime("%Y%m%d%H%M%S", time.localtime(stamp / 1000))
        assert _first_offset(broker, consume_from_where=when, consume_timestamp=human) == 3
        broker.commit_offset("lg", _mq(broker), 1)
        assert _first_offset(broker, consume_from_where=when, consume_timestamp=stamp) == 1


# -- flow control -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", ["pull_threshold_for_all", "pull_threshold_for_queue",
                                       "pull_threshold_size_for_queue", "consume_max_span"])
def test_flow_control_thresholds_stop_pulling(broker: mqlite.Broker, threshold: str) -> None:
    _put(broker, 1)
    options: dict[str, Any] = {threshold: -1}
    with _consumer(broker, **options) as consumer:
        consumer.assign([_mq(broker)])
        assert consumer.poll(0.3) == []


def test_flow_control_resumes_as_poll_frees_room(broker: mqlite.Broker) -> None:
    _put(broker, 40)
    with _consumer(broker, pull_batch_size=10, pull_threshold_for_all=0, auto_commit=False) as consumer:
        consumer.assign([_mq(broker)])
        # 1 cached request * 10 > 0: the pull thread stops after each pull until poll() takes it.
        batches = [consumer.poll(5.0) for _ in range(4)]
        assert [b[0].queue_offset for b in batches] == [0, 10, 20, 30]
        assert len(consumer._requests) <= 1


def test_flow_control_by_cached_count(broker: mqlite.Broker) -> None:
    _put(broker, 50)
    with _consumer(broker, pull_batch_size=5, pull_threshold_for_queue=12) as consumer:
        consumer.assign([_mq(broker)])
        first = consumer.poll(5.0)
        assert len(first) == 5
        (got,) = _drain([consumer], 45)
        assert [m.queue_offset for m in first + got] == list(range(50))
        state = consumer._assigned[_mq(broker)]
        assert state.pq.msg_count == 0


# -- groups -------------------------------------------------------------------------------------------------------
@over_the_wire
def test_two_members_split_the_queues_and_one_takes_over(broker: mqlite.Broker) -> None:
    seen = _Assignments()
    a = _consumer(broker, client_id="A")
    b = _consumer(broker, client_id="B")
    a.subscribe(TOPIC, "*", queue_listener=seen.listener("A"))
    b.subscribe(TOPIC, "*", queue_listener=seen.listener("B"))
    with a, b:
        seen.wait(lambda mine: len(mine.get("A", ())) == 2 and len(mine.get("B", ())) == 2)
        assert a.assignment().isdisjoint(b.assignment())
        for q in range(4):
            _put(broker, 5, queue_id=q, prefix=f"q{q}-")
        got_a, got_b = _drain([a, b], 20)
        assert {m.queue_id for m in got_a} == seen.mine["A"] and {m.queue_id for m in got_b} == seen.mine["B"]
        assert len(got_a) == len(got_b) == 10
        a.shutdown()  # auto-commit: what A handed out is committed
        seen.wait(lambda mine: len(mine.get("B", ())) == 4)
        for q in range(4):
            _put(broker, 2, queue_id=q, prefix=f"new{q}-")
        (more,) = _drain([b], 8)
        assert sorted(m.body for m in more) == sorted(f"new{q}-{i}".encode() for q in range(4) for i in range(2))
        assert b.poll(0.1) == []  # nothing of A's was delivered twice


def test_broadcasting_members_each_get_everything(broker: mqlite.Broker, tmp_path: Path) -> None:
    store_dir = str(tmp_path / "offsets")
    options: dict[str, Any] = dict(message_model=MessageModel.BROADCASTING, offset_store_dir=store_dir)
    a = _consumer(broker, client_id="A", **options)
    b = _consumer(broker, client_id="B", **options)
    for consumer in (a, b):
        consumer.subscribe(TOPIC)
    for q in range(4):
        _put(broker, 3, queue_id=q)
    with a, b:
        got_a, got_b = _drain([a, b], 24)
        assert len(got_a) == len(got_b) == 12
        assert a.assignment() == b.assignment() == {_mq(broker, q) for q in range(4)}
    for client in ("A", "B"):
        path = local_offsets_path(store_dir, client, "lg")
        with open(path) as f:
            rows = json.load(f)["offsetTable"]
        assert {(r["queueId"], r["offset"]) for r in rows} == {(q, 3) for q in range(4)}
    assert broker.query_offset("lg", _mq(broker)) == -1  # broadcasting offsets never go to the broker
    _put(broker, 1, queue_id=2, prefix="later")
    again = _consumer(broker, client_id="A", **options)  # same client id: same offsets file
    again.subscribe(TOPIC)
    with again:
        (got,) = _drain([again], 1)
        assert [m.body for m in got] == [b"later0"]
        assert again.poll(0.1) == []


def test_subscribe_after_start_and_unsubscribe(broker: mqlite.Broker) -> None:
    _put(broker, 2, queue_id=1)
    with _consumer(broker) as consumer:
        assert consumer.poll(0.05) == []
        consumer.subscribe(TOPIC)
        (got,) = _drain([consumer], 2)
        assert len(got) == 2
        consumer.unsubscribe(TOPIC)
        assert consumer.assignment() == set()
        _put(broker, 1, queue_id=1)
        assert consumer.poll(0.2) == []


def test_topic_queue_change_listener(broker: mqlite.Broker) -> None:
    changes: list[tuple[str, int]] = []
    cv = threading.Condition()

    def changed(topic: str, queues: set[mqlite.MessageQueue]) -> None:
        with cv:
            changes.append((topic, len(queues)))
            cv.notify_all()

    with _consumer(broker) as consumer:
        consumer.register_topic_message_queue_change_listener(TOPIC, changed)
        broker.create_topic(TOPIC, 6)
        with cv:
            assert cv.wait_for(lambda: changes, 5.0)
        assert changes == [(TOPIC, 6)]


# -- iteration, auto-commit, long polling ------------------------------------------------------------------------
def test_iteration_stops_after_consumer_timeout(broker: mqlite.Broker) -> None:
    _put(broker, 15)
    with _consumer(broker, consumer_timeout=0.3) as consumer:
        consumer.assign([_mq(broker)])
        assert [m.queue_offset for m in consumer] == list(range(15))


def test_leaving_an_iteration_early_keeps_the_rest_of_the_batch(broker: mqlite.Broker) -> None:
    _put(broker, 10)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        for msg in consumer:
            if msg.queue_offset == 3:
                break
        consumer.commit_sync()
        assert consumer.committed(mq) == 4
        assert [m.queue_offset for m in consumer.poll(5.0)] == [4, 5, 6, 7, 8, 9]


def test_seek_inside_an_iteration_takes_effect_at_once(broker: mqlite.Broker) -> None:
    _put(broker, 10)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False, consumer_timeout=0.3) as consumer:
        consumer.assign([mq])
        seen: list[int] = []
        for msg in consumer:
            seen.append(msg.queue_offset)
            if seen == [0, 1, 2]:
                consumer.seek(mq, 8)
        assert seen == [0, 1, 2, 8, 9]


def test_results_handed_out_out_of_order_never_commit_past_the_older_one(broker: mqlite.Broker) -> None:
    """Two pollers took two pulls of one queue; the later one is handed out first."""
    _put(broker, 20)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False, pull_batch_size=10) as consumer:
        consumer.assign([mq])
        wait_until(lambda: len(consumer._requests) == 2, "both pulls cached")
        older, newer = consumer.take(5.0), consumer.take(5.0)
        assert older is not None and newer is not None
        assert [older.msgs[0].queue_offset, newer.msgs[0].queue_offset] == [0, 10]
        assert consumer.hand_out(newer, newer.msgs)
        consumer.commit_sync()
        assert consumer.committed(mq) == 0  # 0..9 are not handed out yet
        assert consumer.hand_out(older, older.msgs[:4])
        consumer.commit_sync()
        assert consumer.committed(mq) == 4
        consumer.give_back(older, older.msgs[4:])
        assert [m.queue_offset for m in consumer.poll(5.0)] == list(range(4, 10))
        consumer.commit_sync()
        assert consumer.committed(mq) == 20
        assert consumer._assigned[mq].pq.msg_count == 0


def test_a_result_taken_before_a_seek_is_not_handed_out(broker: mqlite.Broker) -> None:
    _put(broker, 10)
    mq = _mq(broker)
    with _consumer(broker, auto_commit=False) as consumer:
        consumer.assign([mq])
        taken = consumer.take(5.0)
        assert taken is not None and len(taken.msgs) == 10
        consumer.seek(mq, 6)
        assert not consumer.hand_out(taken, taken.msgs)  # stale: counts and offsets stay
        assert [m.queue_offset for m in consumer.poll(5.0)] == [6, 7, 8, 9]
        consumer.commit_sync()
        assert consumer.committed(mq) == 10
        assert consumer._assigned[mq].pq.msg_count == 0


def test_iteration_without_timeout_ends_at_shutdown(broker: mqlite.Broker) -> None:
    _put(broker, 3)
    consumer = _consumer(broker, poll_timeout=10.0)
    consumer.assign([_mq(broker)])
    consumer.start()
    seen: list[int] = []
    stopper = threading.Thread(target=consumer.shutdown, name="test-shutdown")
    for msg in consumer:
        seen.append(msg.queue_offset)
        if len(seen) == 3:
            stopper.start()
    stopper.join()
    assert seen == [0, 1, 2]


@over_the_wire
def test_auto_commit_across_a_restart_is_at_least_once_without_loss(broker: mqlite.Broker) -> None:
    for q in range(4):
        _put(broker, 25, queue_id=q, prefix=f"q{q}-")
    first: list[bytes] = []
    with _consumer(broker, client_id="one") as consumer:  # auto_commit=True by default
        consumer.subscribe(TOPIC)
        for _ in range(5):
            first += [m.body for m in consumer.poll(5.0)]
    assert len(first) == 50
    rest: list[bytes] = []
    with _consumer(broker, client_id="two") as consumer:
        consumer.subscribe(TOPIC)
        (got,) = _drain([consumer], 50)
        rest = [m.body for m in got]
        assert consumer.poll(0.1) == []
    assert not set(first) & set(rest)  # nothing committed came back
    assert sorted(first + rest) == sorted(f"q{q}-{i}".encode() for q in range(4) for i in range(25))


def _poll_in_thread(consumer: LitePullConsumer) -> tuple[threading.Thread, list[list[mqlite.MessageExt]]]:
    """A `poll(30.0)` on a thread of its own, once it runs; the result list gets what the poll returns.
    A test that joins the thread within 5 s shows that something woke the poll."""
    result: list[list[mqlite.MessageExt]] = []
    polling = threading.Event()

    def poller() -> None:
        polling.set()
        result.append(consumer.poll(30.0))

    thread = threading.Thread(target=poller, name="test-poller")
    thread.start()
    assert polling.wait(5.0)
    return thread, result


@over_the_wire
def test_a_waiting_poll_gets_a_message_sent_after_it_started(broker: mqlite.Broker) -> None:
    mq = _mq(broker)
    with _consumer(broker) as consumer:  # long_polling_wait 20 s: only the arrival wake-up can be in time
        consumer.assign([mq])
        assert consumer.poll(0.2) == []
        thread, result = _poll_in_thread(consumer)
        # Sent only once the consumer's pull is parked on the broker: an earlier send would be found by
        # the pull without any wake-up.
        wait_until(lambda: local(broker).arrivals.waiting > 0, "the consumer's pull to park on the broker")
        with mqlite.Producer(broker, group="pg") as producer:
            producer.send(mqlite.Message(TOPIC, b"wake up"), queue=mq)
        thread.join(5.0)
        assert not thread.is_alive()  # woken by the arrival: the parked pull would have waited 20 s
        assert [m.body for m in result[0]] == [b"wake up"]


# -- threads and lifecycle ------------------------------------------------------------------------------------
def test_pull_thread_is_named_and_gone_after_shutdown(broker: mqlite.Broker) -> None:
    consumer = _consumer(broker, group="threads")
    consumer.subscribe(TOPIC)
    consumer.start()
    pull = [t for t in threading.enumerate() if t.name == "mqlite-pull-threads"]
    assert len(pull) == 1 and not pull[0].daemon
    consumer.shutdown()
    consumer.shutdown()  # idempotent
    assert not pull[0].is_alive()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mqlite-pull-")]


def test_shutdown_wakes_a_blocked_poll(broker: mqlite.Broker) -> None:
    consumer = _consumer(broker)
    consumer.assign([_mq(broker)])
    consumer.start()
    thread, result = _poll_in_thread(consumer)
    consumer.shutdown()
    thread.join(5.0)
    assert not thread.is_alive() and result == [[]]  # woken by the shutdown: the poll would have waited 30 s


def test_broker_close_shuts_the_consumer_down(tmp_path: Path) -> None:
    broker = mqlite.open(str(tmp_path / "mq"), **SMALL_STORE)
    consumer = _consumer(broker)
    consumer.subscribe(TOPIC)
    consumer.start()
    broker.close()
    assert not consumer.running
    with pytest.raises(mqlite.IllegalStateError):
        consumer.poll(0.1)


def test_a_path_opens_a_shared_broker(tmp_path: Path) -> None:
    path = str(tmp_path / "shared")
    with mqlite.Producer(path, group="pg") as producer:
        producer.send(mqlite.Message(TOPIC, b"via path"))
        with LitePullConsumer(path, "lg", consume_from_where=FIRST) as consumer:
            consumer.subscribe(TOPIC)
            (got,) = _drain([consumer], 1)
            assert [m.body for m in got] == [b"via path"]
