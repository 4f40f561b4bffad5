"""PushConsumer end to end: concurrent and orderly listeners, rebalance among members, broadcasting,
retry and DLQ, filters, offsets across restarts, long-poll latency, shutdown hygiene."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    MessageModel,
    PushConsumer,
)
from mqlite.errors import IllegalStateError, MQClientError
from mqlite.filter import MessageSelector
from mqlite.message import MessageQueue
from mqlite.sendback import dlq_topic
from mqlite.testing import no_leaked_threads
from support import SMALL_STORE, broker_fixture, local, over_the_wire, wait_until

#: Every retry level 1 ms, so retries and DLQ happen within a test.
FAST_LEVELS = " ".join(["1ms"] * 18)
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET

broker = broker_fixture(message_delay_level=FAST_LEVELS)  # a test marked @over_the_wire also runs remotely


class Collector:
    """A listener that records what it saw and lets the test wait for a condition."""

    def __init__(self, decide: Callable[[list[Any], Any], Any] | None = None) -> None:
        self.cond = threading.Condition()
        self.seen: list[Any] = []
        self.decide = decide

    def __call__(self, msgs: list[Any], context: Any) -> Any:
        status = self.decide(msgs, context) if self.decide else None
        with self.cond:
            self.seen.extend((m, status) for m in msgs)
            self.cond.notify_all()
        return status

    def wait_for(self, predicate: Callable[[list[Any]], bool], timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.seen), timeout), f"gave up; saw {len(self.seen)}"

    def bodies(self) -> list[bytes]:
        with self.cond:
            return [m.body for m, _ in self.seen]


def _send(broker: Any, topic: str, n: int, queues: int = 4, **kw: Any) -> list[str]:
    if broker.topic_config(topic) is None:
        broker.create_topic(topic, queues)
    ids = []
    with mqlite.Producer(broker, "pg") as producer:
        for i in range(n):
            ids.append(producer.send(mqlite.Message(topic, f"{i}".encode(), **kw)).msg_id)
    return ids


@over_the_wire
def test_concurrent_consumes_everything_and_commits_offsets(broker: Any) -> None:
    _send(broker, "T", 100)
    listener = Collector()
    with PushConsumer(broker, "cg", consume_from_where=FIRST, consume_thread_nums=4,
                      subscription={"T": "*"}, listener=listener) as consumer:
        listener.wait_for(lambda seen: len(seen) >= 100)
        assert sorted(int(b) for b in listener.bodies()) == list(range(100))
        # A served broker creates the group's retry topic at its first heartbeat, as RocketMQ's does.
        assigned = {mq for mq in consumer.assigned_queues() if mq.topic == "T"}
        assert assigned == {MessageQueue("T", broker.broker_name, q) for q in range(4)}
    progress = {(r.topic, r.queue_id): r for r in broker.consumer_progress("cg")}
    assert all(progress[("T", q)].diff == 0 for q in range(4))
    assert not [t.name for t in threading.enumerate() if "cg" in t.name]  # the consumer's threads are gone


class HoldOne:
    """A listener that holds one queue offset until released; every other message succeeds at once."""

    def __init__(self, queue_id: int, offset: int) -> None:
        self.held = (queue_id, offset)
        self.release = threading.Event()
        self.cond = threading.Condition()
        self.seen: dict[str, list[tuple[int, int]]] = defaultdict(list)  # client id -> (queue id, offset)

    def listener(self, client: str) -> Callable[[list[Any], Any], None]:
        def consume(msgs: list[Any], context: Any) -> None:
            for msg in msgs:
                with self.cond:
                    self.seen[client].append((msg.queue_id, msg.queue_offset))
                    self.cond.notify_all()
                if (msg.queue_id, msg.queue_offset) == self.held and client == "a":
                    assert self.release.wait(10)
        return consume

    def wait_for(self, client: str, predicate: Callable[[list[tuple[int, int]]], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.seen[client]), 10), self.seen[client]


def test_acks_out_of_order_across_consume_threads_commit_below_the_unacked_message(broker: Any) -> None:
    broker.create_topic("T", 1)
    mq = MessageQueue("T", broker.broker_name, 0)
    for i in range(20):
        broker.put_message("T", 0, b"%d" % i)
    hold = HoldOne(0, 5)
    with PushConsumer(broker, "cg", client_id="a", consume_from_where=FIRST, consume_thread_nums=4,
                      subscription={"T": "*"}, listener=hold.listener("a")) as consumer:
        hold.wait_for("a", lambda seen: len(seen) == 20)  # 5 is held; the other 19 finished on other threads
        broker.put_message("T", 0, b"20")  # wakes the pull thread, whose round folds the acks in and commits
        hold.wait_for("a", lambda seen: len(seen) == 21)
        wait_until(lambda: broker.query_offset("cg", mq) == 5, lambda: f"offset 5, got {broker.query_offset('cg', mq)}")
        hold.release.set()
        assert consumer.join(10)
        assert broker.query_offset("cg", mq) == 21


def test_a_queue_given_up_with_acks_not_folded_commits_below_the_unacked_message(broker: Any) -> None:
    broker.create_topic("T", 2)
    for i in range(10):
        broker.put_message("T", 1, b"%d" % i)
    hold = HoldOne(1, 3)
    a = PushConsumer(broker, "cg", client_id="a", consume_from_where=FIRST, consume_thread_nums=4,
                     subscription={"T": "*"}, listener=hold.listener("a"))
    b = PushConsumer(broker, "cg", client_id="b", consume_from_where=FIRST, subscription={"T": "*"},
                     listener=hold.listener("b"))
    try:
        a.start()
        # 3 is held; the others are acked but not folded in (nothing pokes the pull thread: not drained).
        hold.wait_for("a", lambda seen: len(seen) == 10)
        b.start()  # queue 1 goes to b: a folds its acks in and commits 3, never past it
        hold.wait_for("b", lambda seen: len(seen) >= 7)
        assert sorted(hold.seen["b"]) == [(1, i) for i in range(3, 10)]
    finally:
        hold.release.set()
        b.shutdown()
        a.shutdown()


def test_a_deep_backlog_goes_several_messages_a_task_but_one_listener_call_each(broker: Any) -> None:
    broker.create_topic("T", 1)
    broker.put_messages("T", 0, [b"%d" % i for i in range(300)], [None] * 300)
    gate = threading.Event()
    calls: list[int] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], context: Any) -> None:
        assert gate.wait(10)  # the first calls hold every thread until the backlog is deep
        with lock:
            calls.extend(m.queue_offset for m in msgs)
            assert len(msgs) == 1

    consumer = PushConsumer(broker, "cg", consume_from_where=FIRST, consume_thread_nums=2,
                            subscription={"T": "*"}, listener=listener)
    grouped = []
    each = consumer._consume_each

    def counting(task: Any) -> None:
        grouped.append(task[2] - task[1])  # (run, start, stop, pq, mq)
        each(task)

    consumer._consume_each = counting  # type: ignore[method-assign]
    with consumer:
        wait_until(lambda: consumer._pool is not None and consumer._pool.backlog >= 8, "a deep backlog")
        gate.set()
        assert consumer.join(10)
    assert sorted(calls) == list(range(300))  # each once, each in its own listener call
    assert grouped and max(grouped) > 1


def test_flow_control_by_size_counts_what_is_left_of_runs_in_progress(broker: Any) -> None:
    """Acked ranges of a pull result still in progress keep their bytes in the cheap figure; the pull
    thread settles it before holding the queue back, so only bodies not consumed count (RocketMQ's msgSize)."""
    from mqlite.consumer.processqueue import ProcessQueue
    from mqlite.message import MessageExt

    msgs = []
    for offset in range(4):
        msg = MessageExt("T", bytes(1 << 20))
        msg.queue_offset = offset
        msgs.append(msg)
    consumer = PushConsumer(broker, "cg", pull_threshold_size_for_queue=1, subscription={"T": "*"},
                            listener=lambda msgs, ctx: None)
    pq = ProcessQueue()
    run = pq.push_run(msgs)
    assert consumer._flow_controlled(pq)  # 4 MiB cached
    pq.ack(run, 0, 3)
    pq.fold_acked()
    assert pq.msg_size >> 20 == 4  # the cheap figure still counts the consumed range
    assert not consumer._flow_controlled(pq)  # 1 MiB left: pull on
    assert pq.msg_size == 1 << 20


def test_a_task_whose_message_stays_cached_after_a_failure_never_lets_the_commit_pass_it(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks of several messages ack their successes as ranges: a failure in the middle whose send-back
    fails stays cached (retried here), and no commit passes it until that retry succeeds."""
    import mqlite.consumer.push as push_module

    monkeypatch.setattr(push_module, "SEND_BACK_RETRY_DELAY", 0.05)
    broker.create_topic("T", 1)
    broker.put_messages("T", 0, [b"%d" % i for i in range(200)], [None] * 200)
    gate = threading.Event()
    succeeded: set[int] = set()
    attempts: list[int] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], context: Any) -> Any:
        assert gate.wait(10)  # the first calls hold every thread until the backlog is deep
        offset = msgs[0].queue_offset
        with lock:
            attempts.append(offset)
            if offset == 50 and attempts.count(50) == 1:
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            succeeded.add(offset)  # before the ack can be folded in
        return None

    consumer = PushConsumer(broker, "cg", consume_from_where=FIRST, consume_thread_nums=2,
                            subscription={"T": "*"}, listener=listener)
    grouped = []
    each = consumer._consume_each

    def counting(task: Any) -> None:
        grouped.append(task[2] - task[1])
        each(task)

    def failing_send_back(msg: Any, delay_level: int, max_times: int) -> None:
        raise OSError("the retry topic is unreachable")

    consumer._consume_each = counting  # type: ignore[method-assign]
    consumer._send_back = failing_send_back  # type: ignore[method-assign]
    commits: list[int] = []
    early: list[tuple[int, list[int]]] = []
    with consumer:
        store = consumer.offset_store
        assert store is not None
        update = store.update

        def checked(mq: MessageQueue, offset: int, increase_only: bool) -> None:
            with lock:
                missing = [o for o in range(offset) if o not in succeeded]
            if missing:  # noted, not raised: the pull thread would only log it
                early.append((offset, missing[:5]))
            commits.append(offset)
            update(mq, offset, increase_only)

        store.update = checked  # type: ignore[method-assign]
        wait_until(lambda: consumer._pool is not None and consumer._pool.backlog >= 8, "a deep backlog")
        gate.set()
        wait_until(lambda: commits and commits[-1] == 200, "everything committed")
    assert not early, f"committed past messages not consumed: {early}"
    assert attempts.count(50) == 2 and sorted(set(attempts)) == list(range(200))
    assert grouped and max(grouped) > 1


def test_a_failure_that_drains_the_cache_behind_unfolded_acks_wakes_the_pull_thread(broker: Any, tmp_path: Path) -> None:
    """BROADCASTING drops a failed message; with the one before it acked but not folded in, the cache is
    drained: the consume thread wakes the pull thread, whose round folds and commits at once."""
    broker.create_topic("T", 1)
    mq = MessageQueue("T", broker.broker_name, 0)
    listener = Collector(lambda msgs, ctx: ConsumeConcurrentlyStatus.RECONSUME_LATER if msgs[0].body == b"fails"
                         else None)
    consumer = PushConsumer(broker, "cg", message_model=MessageModel.BROADCASTING, consume_from_where=FIRST,
                            consume_thread_nums=1, offset_store_dir=str(tmp_path), subscription={"T": "*"},
                            listener=listener)
    with consumer:
        loop = consumer._loop
        assert loop is not None
        pokes: list[str] = []
        poke = loop.poke

        def counting() -> None:
            pokes.append(threading.current_thread().name)
            poke()

        loop.poke = counting  # type: ignore[method-assign]
        broker.put_messages("T", 0, [b"ok", b"fails"], [None, None])
        listener.wait_for(lambda seen: len(seen) == 2)
        wait_until(lambda: consumer.offset_store is not None and consumer.offset_store.read(mq) == 2,
                   "the offset past both committed")
        assert any(name.startswith("mqlite-consume-cg") for name in pokes), pokes


@over_the_wire
def test_long_poll_delivers_a_message_sent_after_start_quickly(broker: Any) -> None:
    broker.create_topic("T", 2)
    listener = Collector()
    with PushConsumer(broker, "cg", subscription={"T": "*"}, listener=listener), \
            mqlite.Producer(broker, "pg") as producer:
        wait_until(lambda: local(broker).arrivals.waiting > 0, "the consumer's pull to park on the broker")
        producer.send(mqlite.Message("T", b"hello"))
        listener.wait_for(lambda seen: len(seen) == 1, timeout=5)  # woken by the arrival, not the 15 s backstop


@over_the_wire
def test_retry_then_dlq_after_exactly_max_reconsume_times(broker: Any) -> None:
    [msg_id] = _send(broker, "T", 1, queues=1)
    listener = Collector(lambda msgs, ctx: ConsumeConcurrentlyStatus.RECONSUME_LATER)
    with PushConsumer(broker, "cg", consume_from_where=FIRST, max_reconsume_times=2,
                      subscription={"T": "*"}, listener=listener) as consumer:
        listener.wait_for(lambda seen: len(seen) >= 3)
        assert consumer.join(10)  # the third failure is sent to the DLQ before its offset is committed
        assert broker.wait_dispatched(10)
        assert broker.max_offset(MessageQueue(dlq_topic("cg"), broker.broker_name, 0)) == 1
    attempts = [(m.msg_id, m.reconsume_times, m.topic) for m, _ in listener.seen]
    assert attempts == [(msg_id, 0, "T"), (msg_id, 1, "T"), (msg_id, 2, "T")]
    dead = broker.query_message_by_offset(dlq_topic("cg"), 0, 0)
    assert dead.msg_id == msg_id and dead.reconsume_times == 3 and dead.body == b"0"


def test_a_batch_running_past_consume_timeout_is_sent_back(broker: Any) -> None:
    _send(broker, "T", 1, queues=1)
    release, retried = threading.Event(), threading.Event()
    attempts: list[int] = []

    def slow_first(msgs: list[Any], ctx: Any) -> Any:
        attempts.append(msgs[0].reconsume_times)
        if len(attempts) == 1:
            release.wait(10)
        else:
            retried.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    listener = Collector(slow_first)
    with PushConsumer(broker, "cg", consume_from_where=FIRST, consume_thread_nums=2, consume_timeout=0.2,
                      subscription={"T": "*"}, listener=listener):
        assert retried.wait(10), attempts
        release.set()
        listener.wait_for(lambda seen: len(seen) >= 2)
    assert attempts == [0, 1]


@over_the_wire
def test_listener_exception_means_reconsume_later(broker: Any) -> None:
    _send(broker, "T", 1, queues=1)
    calls: list[int] = []

    def flaky(msgs: list[Any], ctx: Any) -> Any:
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    listener = Collector(flaky)
    with PushConsumer(broker, "cg", consume_from_where=FIRST, subscription={"T": "*"}, listener=listener):
        listener.wait_for(lambda seen: len(seen) >= 1)  # the raising call records nothing
    assert calls == [0, 1]


@over_the_wire
def test_ack_index_sends_back_only_the_rest(broker: Any) -> None:
    broker.create_topic("T", 1)
    for i in range(4):
        broker.put_message("T", 0, f"{i}".encode(), {"TAGS": "A"})
    first_batch: list[list[bytes]] = []

    def partial(msgs: list[Any], ctx: Any) -> Any:
        if not first_batch:
            first_batch.append([m.body for m in msgs])
            ctx.ack_index = 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    listener = Collector(partial)
    with PushConsumer(broker, "cg", consume_from_where=FIRST, consume_message_batch_max_size=4,
                      subscription={"T": "*"}, listener=listener):
        listener.wait_for(lambda seen: len(seen) >= 6)
    assert first_batch == [[b"0", b"1", b"2", b"3"]]
    retried = sorted(m.body for m, _ in listener.seen[4:])
    assert retried == [b"2", b"3"]


@over_the_wire
def test_two_then_three_members_split_queues_and_take_over(broker: Any) -> None:
    broker.create_topic("T", 6)
    consumers = [PushConsumer(broker, "cg", client_id=f"c{i}", subscription={"T": "*"}, listener=Collector())
                 for i in range(3)]

    def owned(c: PushConsumer) -> set[int]:
        return {mq.queue_id for mq in c.assigned_queues() if mq.topic == "T"}

    def settle(active: list[PushConsumer], expected: list[set[int]]) -> None:
        wait_until(lambda: [owned(c) for c in active] == expected,
                   lambda: f"the queues {expected}, owned {[owned(c) for c in active]}")

    try:
        consumers[0].start()
        settle(consumers[:1], [set(range(6))])
        consumers[1].start()
        settle(consumers[:2], [{0, 1, 2}, {3, 4, 5}])
        consumers[2].start()
        settle(consumers, [{0, 1}, {2, 3}, {4, 5}])
        consumers[0].shutdown()
        settle(consumers[1:], [{0, 1, 2}, {3, 4, 5}])
    finally:
        for c in consumers:
            c.shutdown()


@over_the_wire
def test_messages_survive_a_member_leaving(broker: Any) -> None:
    broker.create_topic("T", 4)
    a_seen, b_seen = Collector(), Collector()
    a = PushConsumer(broker, "cg", client_id="a", consume_from_where=FIRST, subscription={"T": "*"},
                     listener=a_seen)
    b = PushConsumer(broker, "cg", client_id="b", consume_from_where=FIRST, subscription={"T": "*"},
                     listener=b_seen)
    a.start()
    b.start()
    try:
        _send(broker, "T", 100)
        a.shutdown()
        _send(broker, "T", 100)
        assert b.join(10)  # b took a's queues over and consumed everything from a's committed offsets
        everything = a_seen.bodies() + b_seen.bodies()
        assert sorted(set(int(x) for x in everything)) == list(range(100))  # bodies 0..99 twice over
        assert len(everything) >= 200  # at least once
    finally:
        b.shutdown()


def test_broadcasting_gives_every_member_everything(broker: Any, tmp_path: Path) -> None:
    broker.create_topic("T", 3)
    seen = [Collector(), Collector()]
    consumers = [PushConsumer(broker, "bg", client_id=f"b{i}", message_model=MessageModel.BROADCASTING,
                              consume_from_where=FIRST, subscription={"T": "*"}, listener=seen[i],
                              offset_store_dir=str(tmp_path / "offsets")) for i in range(2)]
    for c in consumers:
        c.start()
    try:
        _send(broker, "T", 30, queues=3)
        for s in seen:
            s.wait_for(lambda msgs: len(msgs) >= 30)
            assert sorted(int(b) for b in s.bodies()) == list(range(30))
    finally:
        for c in consumers:
            c.shutdown()
    assert (tmp_path / "offsets" / "b0" / "bg" / "offsets.json").exists()


@over_the_wire
def test_orderly_keeps_queue_order_through_suspends(broker: Any) -> None:
    broker.create_topic("T", 2)
    with mqlite.Producer(broker, "pg") as producer:
        for i in range(60):
            producer.send_orderly(mqlite.Message("T", f"{i % 2}:{i}".encode()), i % 2)
    suspended: set[bytes] = set()
    consumed: dict[int, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def orderly(msgs: list[Any], ctx: Any) -> Any:
        body = msgs[0].body
        if int(body.split(b":")[1]) % 7 == 3 and body not in suspended:
            suspended.add(body)
            ctx.suspend_current_queue_time_millis = 10
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        with lock:
            consumed[ctx.message_queue.queue_id].extend(m.queue_offset for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    listener = Collector(orderly)
    consumer = PushConsumer(broker, "og2", consume_from_where=FIRST, subscription={"T": "*"})
    consumer.register_message_listener(listener, orderly=True)
    with consumer:
        listener.wait_for(lambda seen: sum(1 for _, s in seen if s is ConsumeOrderlyStatus.SUCCESS) >= 60)
    for queue_id, offsets in consumed.items():
        assert offsets == list(range(30)), queue_id  # every message once, in order, despite suspends
    assert len(suspended) > 0


@over_the_wire
def test_tag_and_sql_filters_deliver_exactly_the_matching_messages(broker: Any) -> None:
    broker.create_topic("T", 2)
    with mqlite.Producer(broker, "pg") as producer:
        for i in range(30):
            producer.send(mqlite.Message("T", f"{i}".encode(), tags="ABC"[i % 3], properties={"n": str(i)}))
    tags, sql = Collector(), Collector()
    with PushConsumer(broker, "tg", consume_from_where=FIRST, subscription={"T": "A || C"}, listener=tags) as by_tag, \
            PushConsumer(broker, "sg", consume_from_where=FIRST, subscription={"T": MessageSelector.by_sql("n > 20")},
                         listener=sql) as by_sql:
        assert by_tag.join(10) and by_sql.join(10)  # everything readable consumed: nothing more can come
    assert sorted(int(b) for b in tags.bodies()) == [i for i in range(30) if i % 3 != 1]
    assert sorted(int(b) for b in sql.bodies()) == list(range(21, 30))


def test_offsets_survive_restart_at_least_once(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL_STORE) as b:
        _send(b, "T", 50)
        first = Collector()
        with PushConsumer(b, "cg", consume_from_where=FIRST, subscription={"T": "*"}, listener=first):
            first.wait_for(lambda seen: len(seen) >= 50)
    with mqlite.open(path, **SMALL_STORE) as b:
        _send(b, "T", 10)
        second = Collector()
        with PushConsumer(b, "cg", consume_from_where=FIRST, subscription={"T": "*"}, listener=second) as consumer:
            assert consumer.join(10)  # everything readable consumed: nothing more can come
        assert sorted(int(x) for x in second.bodies()) == list(range(10))  # only the new ones


@over_the_wire
def test_reset_offset_by_time_rewinds_a_running_consumer(broker: Any) -> None:
    _send(broker, "T", 20, queues=1)
    listener = Collector()
    with PushConsumer(broker, "cg", consume_from_where=FIRST, subscription={"T": "*"}, listener=listener):
        listener.wait_for(lambda seen: len(seen) >= 20)
        broker.reset_offset_by_time("cg", "T", 0)
        listener.wait_for(lambda seen: len(seen) >= 40)
    assert sorted(int(b) for b in listener.bodies()) == sorted(list(range(20)) * 2)


def test_suspend_and_resume(broker: Any) -> None:
    broker.create_topic("T", 1)
    listener = Collector()
    with PushConsumer(broker, "cg", subscription={"T": "*"}, listener=listener) as consumer:
        consumer.suspend()
        _send(broker, "T", 3, queues=1)
        assert not consumer.join(0.1)  # the arrival wakes the pull loop, which pulls nothing while suspended
        assert listener.seen == []
        consumer.resume()
        assert consumer.join(10)
        assert len(listener.seen) == 3


def test_bad_options_and_states(broker: Any) -> None:
    with pytest.raises(MQClientError):
        PushConsumer(broker, "")
    with pytest.raises(MQClientError):
        PushConsumer(broker, "DEFAULT_CONSUMER")
    with pytest.raises(MQClientError):
        PushConsumer(broker, "cg", pull_batch_size=0)
    with pytest.raises(MQClientError):
        PushConsumer(broker, "cg", consume_thread_nums=1001)
    with pytest.raises(IllegalStateError):
        PushConsumer(broker, "cg").start()  # no listener
    consumer = PushConsumer(broker, "cg", listener=Collector())
    consumer.start()
    with pytest.raises(IllegalStateError):
        consumer.start()
    consumer.shutdown()
    consumer.shutdown()  # idempotent


def test_broker_close_shuts_running_consumers_down(tmp_path: Path) -> None:
    with no_leaked_threads():
        b = mqlite.open(str(tmp_path / "mq"), **SMALL_STORE)
        consumer = PushConsumer(b, "cg", subscription={"T": "*"}, listener=Collector())
        consumer.start()
        b.close()
    consumer.shutdown()


def test_at_least_once_when_the_consumer_process_is_killed(tmp_path: Path) -> None:
    """kill -9 a process consuming a backlog; a new consumer of the group gets everything not finished."""
    import os
    import signal

    from _crashchild import SETTINGS, Child

    class ConsumeChild(Child):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_consumechild.py")

    path = str(tmp_path / "mq")
    total = 2000
    with mqlite.open(path, **SETTINGS) as b:
        b.create_topic("CT", 4)
        for q in range(4):
            b.put_messages("CT", q, [f"{q}-{i}".encode() for i in range(total // 4)], [None] * (total // 4))
    expected = {f"{q}-{i}" for q in range(4) for i in range(total // 4)}
    first: set[str] = set()
    with ConsumeChild(path, "crash-g", "CT") as child:
        deadline = time.monotonic() + 30
        assert child.readline(deadline) == "STARTED"
        while len(first) < total // 3:
            line = child.readline(deadline)
            assert line is not None and line.startswith("OK "), child.stderr()
            first.add(line[3:])
        os.kill(child.pid, signal.SIGKILL)
        child.proc.wait(10)
    assert first < expected
    second = Collector()
    with mqlite.open(path, **SETTINGS) as b:
        with PushConsumer(b, "crash-g", subscription={"CT": "*"}, listener=second, consume_thread_nums=4) as consumer:
            assert consumer.join(30)
            assert expected <= first | {m.body.decode() for m, _ in second.seen}
        assert {r.diff for r in b.consumer_progress("crash-g") if r.topic == "CT"} == {0}
    redelivered = {m.body.decode() for m, _ in second.seen}
    assert redelivered <= expected  # nothing that was never sent


def test_orderly_members_hold_the_broker_locks_of_their_queues(broker: Any) -> None:
    broker.create_topic("T", 4)
    consumers = []
    for cid in ("o1", "o2"):
        c = PushConsumer(broker, "og", client_id=cid, subscription={"T": "*"})
        c.register_message_listener(Collector(), orderly=True)
        consumers.append(c)

    def holders() -> dict[int, str | None]:
        return {q: broker.queue_locks.holder("og", MessageQueue("T", broker.broker_name, q)) for q in range(4)}

    def settle(expected: dict[int, str | None]) -> None:
        wait_until(lambda: holders() == expected, lambda: f"the lock holders {expected}, are {holders()}")

    try:
        consumers[0].start()
        settle({0: "o1", 1: "o1", 2: "o1", 3: "o1"})
        consumers[1].start()
        settle({0: "o1", 1: "o1", 2: "o2", 3: "o2"})  # o1 let go of 2 and 3 before o2 took them
        owned = {c.client_id: {mq.queue_id for mq in c.assigned_queues() if mq.topic == "T"} for c in consumers}
        assert owned == {"o1": {0, 1}, "o2": {2, 3}}
        consumers[0].shutdown()
        settle({0: "o2", 1: "o2", 2: "o2", 3: "o2"})
    finally:
        for c in consumers:
            c.shutdown()
    assert holders() == {0: None, 1: None, 2: None, 3: None}


def test_concurrent_shutdowns_release_a_shared_broker_once(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    producer = mqlite.Producer(path, "pg")
    producer.start()
    try:
        consumer = PushConsumer(path, "cg", subscription={"T": "*"}, listener=Collector())
        consumer.start()
        threads = [threading.Thread(target=consumer.shutdown) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.send(mqlite.Message("T", b"still open"))  # the producer's share of the broker survives
    finally:
        producer.shutdown()


def test_consume_timeout_and_pull_interval_bounds(broker: Any) -> None:
    with pytest.raises(MQClientError, match="consume_timeout"):
        PushConsumer(broker, "cg", consume_timeout=0)
    with pytest.raises(MQClientError, match="pull_interval"):
        PushConsumer(broker, "cg", pull_interval=100)


def test_a_queue_whose_pull_fails_does_not_stop_the_others(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _send(broker, "T", 40, queues=2)
    real_pull = broker.pull
    failing: list[int] = []

    def pull(group: str, mq: MessageQueue, *args: Any, **kwargs: Any) -> Any:
        if mq.topic == "T" and mq.queue_id == 0:
            failing.append(1)
            raise mqlite.StoreCorruptedError("injected")
        return real_pull(group, mq, *args, **kwargs)

    monkeypatch.setattr(broker, "pull", pull)
    listener = Collector()
    with PushConsumer(broker, "cg", consume_from_where=FIRST, subscription={"T": "*"}, listener=listener) as consumer:
        listener.wait_for(lambda seen: len(seen) >= 20)  # all of queue 1
        # Queue 0 cannot be consumed, so join gives up; meanwhile a tight retry loop would pull it many times.
        assert not consumer.join(0.3)
    assert {m.queue_id for m, _ in listener.seen} == {1}
    assert len(failing) <= 2  # retried after 3 s, not in a tight loop
