"""The broker's consuming side: long-polling pull, offsets, send-back to retry and DLQ, progress, reset,
group membership and queue locks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.clock import ManualClock
from mqlite.errors import MQClientError
from mqlite.groups import ConsumerGroups, QueueLocks
from mqlite.longpoll import ArrivalHub, PullStatus
from mqlite.message import MessageQueue
from mqlite.sendback import dlq_topic, plan_send_back, retry_topic
from support import SMALL_STORE, broker_fixture, deadline, wait_until

broker = broker_fixture()


def _put(broker: Any, topic: str, n: int, queue_id: int = 0, **props: str) -> None:
    broker.create_topic(topic, 4) if topic not in broker.topic_list() else None
    for i in range(n):
        broker.put_message(topic, queue_id, f"m{i}".encode(), {"TAGS": props.get("tag", "A"), **props})


def test_pull_returns_at_once_when_messages_are_there(broker: Any) -> None:
    _put(broker, "T", 5)
    mq = MessageQueue("T", broker.broker_name, 0)
    with deadline(5):  # a pull that parked would wait its 20 s
        result = broker.pull("g", mq, 0, 32, wait=20.0)
    assert result.pull_status is PullStatus.FOUND
    assert [m.body for m in result.msg_found_list] == [f"m{i}".encode() for i in range(5)]
    assert result.next_begin_offset == 5 and result.max_offset == 5


def test_long_poll_wakes_on_a_message_sent_after_the_poll_started(broker: Any) -> None:
    _put(broker, "T", 1)
    mq = MessageQueue("T", broker.broker_name, 0)
    results: list[Any] = []
    poller = threading.Thread(target=lambda: results.append(broker.pull("g", mq, 1, 32, wait=20.0)))
    poller.start()
    wait_until(lambda: broker.arrivals.waiting > 0, "the pull to park")
    assert broker.arrivals.waiting == 1  # parked
    broker.put_message("T", 0, b"late", {"TAGS": "A"})
    poller.join(5)
    assert not poller.is_alive()  # woken by the arrival: its wait was 20 s
    assert results[0].pull_status is PullStatus.FOUND
    assert [m.body for m in results[0].msg_found_list] == [b"late"]
    assert broker.arrivals.waiting == 0


def test_long_poll_times_out_with_no_new_message(broker: Any) -> None:
    _put(broker, "T", 2)
    mq = MessageQueue("T", broker.broker_name, 0)
    results: list[Any] = []
    # A wait long enough that this thread, however late it is scheduled, sees the pull parked before it answers.
    poller = threading.Thread(target=lambda: results.append(broker.pull("g", mq, 2, wait=2.0)))
    poller.start()
    wait_until(lambda: broker.arrivals.waiting == 1 or results, "the pull to park")
    assert not results  # it parked instead of answering at once
    poller.join(10)
    assert not poller.is_alive() and broker.arrivals.waiting == 0  # and gave up after its wait
    [result] = results
    assert result.pull_status is PullStatus.NO_NEW_MSG and result.next_begin_offset == 2


def test_pull_statuses_follow_rocketmq_mapping(broker: Any) -> None:
    mq = MessageQueue("T", broker.broker_name, 0)
    assert broker.pull("g", mq, 0).pull_status is PullStatus.NO_NEW_MSG  # unknown queue at 0
    assert broker.pull("g", mq, 3).pull_status is PullStatus.OFFSET_ILLEGAL  # unknown queue elsewhere
    _put(broker, "T", 3)
    over = broker.pull("g", mq, 9)
    assert over.pull_status is PullStatus.OFFSET_ILLEGAL and over.next_begin_offset == 3
    assert broker.pull("g", mq, 3).pull_status is PullStatus.NO_NEW_MSG
    with pytest.raises(MQClientError):
        broker.pull("g", mq, 0, 0)


class _TagFilter:
    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.code = mqlite.message.tags_code(tag)

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return tags_code == self.code

    def is_matched_by_commit_log(self, message: Any) -> bool:
        return message.tags == self.tag


def test_filtered_pull_skips_non_matching_and_parks_at_the_end(broker: Any) -> None:
    broker.create_topic("T", 1)
    for i in range(50):
        broker.put_message("T", 0, f"{i}".encode(), {"TAGS": "B" if i != 40 else "A"})
    mq = MessageQueue("T", broker.broker_name, 0)
    found = broker.pull("g", mq, 0, 32, _TagFilter("A"), wait=0.0)
    assert found.pull_status is PullStatus.FOUND and [m.body for m in found.msg_found_list] == [b"40"]
    rest = broker.pull("g", mq, found.next_begin_offset, 32, _TagFilter("A"), wait=0.05)
    assert rest.pull_status is PullStatus.NO_NEW_MSG and rest.next_begin_offset == 50


def test_pull_wakes_when_broker_closes(tmp_path: Path) -> None:
    b = mqlite.open(str(tmp_path / "mq"), **SMALL_STORE)
    _put(b, "T", 1)
    mq = MessageQueue("T", b.broker_name, 0)
    done = threading.Event()
    results: list[Any] = []

    def poll() -> None:
        results.append(b.pull("g", mq, 1, wait=30.0))
        done.set()

    poller = threading.Thread(target=poll)
    poller.start()
    wait_until(lambda: b.arrivals.waiting > 0, "the pull to park")
    b.close()
    poller.join(5)
    assert done.is_set() and results[0].pull_status is PullStatus.NO_NEW_MSG


# -- offsets -----------------------------------------------------------------------------------------------
def test_commit_and_query_offsets_increase_only(broker: Any) -> None:
    mq = MessageQueue("T", broker.broker_name, 1)
    assert broker.query_offset("g", mq) == -1
    broker.commit_offset("g", mq, 5)
    broker.commit_offset("g", mq, 3, increase_only=True)
    assert broker.query_offset("g", mq) == 5
    broker.commit_offset("g", mq, 3)
    assert broker.query_offset("g", mq) == 3


def test_new_group_on_a_young_queue_starts_at_zero(broker: Any) -> None:
    _put(broker, "T", 3)
    assert broker.offset_for_new_group(MessageQueue("T", broker.broker_name, 0)) == 0
    assert broker.offset_for_new_group(MessageQueue("T", broker.broker_name, 2)) == 0  # empty queue


def test_consumer_progress_and_reset_by_time(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000, step_ms=0)
    b = mqlite.open(str(tmp_path / "mq"), clock=clock, **SMALL_STORE)
    try:
        b.create_topic("T", 2)
        for i in range(10):
            clock.advance(1000)
            b.put_message("T", i % 2, f"{i}".encode(), {"TAGS": "A"})
        b.commit_offset("g", MessageQueue("T", b.broker_name, 0), 4)
        rows = {r.queue_id: r for r in b.consumer_progress("g")}
        assert rows[0].broker_offset == 5 and rows[0].consumer_offset == 4 and rows[0].diff == 1
        assert rows[1].consumer_offset == 0 and rows[1].diff == 5
        assert rows[0].last_timestamp == 1_700_000_000_000 + 7000  # message 6 (offset 3 of queue 0)
        # Reset to the 5th second: queue 0 holds seconds 1,3,5,7,9 -> offset 2; queue 1 holds 2,4,6,8,10 -> 2.
        table = b.reset_offset_by_time("g", "T", 1_700_000_000_000 + 5000)
        assert {mq.queue_id: o for mq, o in table.items()} == {0: 2, 1: 2}
        assert b.query_offset("g", MessageQueue("T", b.broker_name, 0)) == 2
        end = b.reset_offset_by_time("g", "T", -1)
        assert sorted(end.values()) == [5, 5]
        with pytest.raises(MQClientError):
            b.reset_offset_by_time("g", "nope", 0)
    finally:
        b.close()


# -- send-back -------------------------------------------------------------------------------------------
def test_send_back_goes_to_retry_with_level_three_then_dlq(broker: Any) -> None:
    broker.create_topic("T", 1)
    broker.put_message("T", 0, b"payload", {"TAGS": "A", "UNIQ_KEY": "ABC", "KEYS": "k"})
    original = broker.query_message_by_offset("T", 0, 0)
    broker.send_message_back("g", original, 0, 16)
    # The retry copy waits in the schedule topic at level 3 (queue 2) with the real topic in REAL_TOPIC.
    delayed = broker.query_message_by_offset("SCHEDULE_TOPIC_XXXX", 2, 0)
    assert delayed.properties["REAL_TOPIC"] == retry_topic("g")
    assert delayed.properties["RETRY_TOPIC"] == "T"
    assert delayed.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
    assert delayed.properties["UNIQ_KEY"] == "ABC" and delayed.reconsume_times == 1
    assert delayed.body == b"payload"
    assert retry_topic("g") in broker.topic_list()
    # At the limit the copy goes to the DLQ, with no delay.
    dead = plan_send_back(original, "g", 0, 0)
    assert dead.to_dlq and dead.topic == dlq_topic("g")
    broker.send_message_back("g", original, 0, 0)
    in_dlq = broker.query_message_by_offset(dlq_topic("g"), 0, 0)
    assert in_dlq.msg_id == "ABC" and in_dlq.properties["DLQ_ORIGIN_TOPIC"] == "T"
    assert "DELAY" not in in_dlq.properties
    assert broker.topic_config(dlq_topic("g")).read_queue_nums == 1


def test_plan_send_back_levels() -> None:
    msg = mqlite.MessageExt.__new__(mqlite.MessageExt)
    msg.topic, msg.properties, msg.reconsume_times = "T", {"UNIQ_KEY": "U"}, 4
    msg.offset_msg_id = "OFF"
    assert plan_send_back(msg, "g").properties["DELAY"] == "7"
    assert plan_send_back(msg, "g", delay_level=2).properties["DELAY"] == "2"
    assert plan_send_back(msg, "g", delay_level=-1).to_dlq


# -- groups and locks ----------------------------------------------------------------------------------
class _Member:
    def __init__(self, cid: str) -> None:
        self.client_id = cid
        self.requests = 0

    def request_rebalance(self) -> None:
        self.requests += 1


def test_membership_asks_everyone_to_rebalance() -> None:
    groups = ConsumerGroups()
    a, b = _Member("a"), _Member("b")
    groups.register("g", a)
    groups.register("g", b)
    assert groups.client_ids("g") == ["a", "b"] and a.requests == 2 and b.requests == 1
    groups.unregister("g", a)
    assert groups.client_ids("g") == ["b"] and b.requests == 2
    groups.unregister("g", b)
    assert groups.groups() == []


def test_queue_locks_expire_and_belong_to_one_client() -> None:
    clock = ManualClock(0)
    locks = QueueLocks(clock, max_live_ms=60_000)
    mq = MessageQueue("T", "b", 0)
    assert locks.try_lock("g", [mq], "a") == {mq}
    assert locks.try_lock("g", [mq], "b") == set()
    assert locks.holder("g", mq) == "a"
    clock.advance(60_001)
    assert locks.try_lock("g", [mq], "b") == {mq}
    locks.unlock("g", [mq], "a")  # not a's any more: no effect
    assert locks.holder("g", mq) == "b"
    locks.unlock("g", [mq], "b")
    assert locks.holder("g", mq) is None


def test_arrival_hub_notify_wakes_only_watchers_of_that_queue() -> None:
    hub = ArrivalHub()
    e1, e2 = threading.Event(), threading.Event()
    hub.watch(e1, [("T", 0)])
    hub.watch(e2, [("T", 1)])
    hub.notify("T", 0)
    assert e1.is_set() and not e2.is_set()
    hub.unwatch(e1)
    assert hub.waiting == 1
    hub.close()
    assert e2.is_set()


def test_filtered_pull_without_wait_scans_one_window_and_says_where_to_go_on(broker: Any) -> None:
    broker.create_topic("T", 1)
    broker.put_messages("T", 0, [b"x"] * 3000, [{"TAGS": "B"}] * 3000)
    mq = MessageQueue("T", broker.broker_name, 0)
    result = broker.pull("g", mq, 0, 32, _TagFilter("A"), wait=0.0)
    assert result.pull_status is PullStatus.NO_MATCHED_MSG
    assert 0 < result.next_begin_offset < 3000  # one scan window, not the whole backlog


def test_send_back_of_a_message_whose_record_is_gone_uses_the_consumers_copy(broker: Any) -> None:
    broker.create_topic("T", 1)
    broker.put_message("T", 0, b"payload", {"TAGS": "A", "UNIQ_KEY": "ABC"})
    msg = broker.query_message_by_offset("T", 0, 0)
    _ = msg.properties  # decode before moving the offset
    msg.commit_log_offset = 1 << 40  # as if the segment had been cleaned up
    broker.send_message_back("g", msg, 0, 16)
    copy = broker.query_message_by_offset("SCHEDULE_TOPIC_XXXX", 2, 0)
    assert copy.body == b"payload" and copy.properties["UNIQ_KEY"] == "ABC" and copy.reconsume_times == 1


def test_a_client_id_can_join_a_group_once() -> None:
    groups = ConsumerGroups()
    groups.register("g", _Member("a"))
    with pytest.raises(mqlite.IllegalStateError, match="client_id"):
        groups.register("g", _Member("a"))
