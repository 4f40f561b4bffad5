"""Hypothesis state machines: push consumers of one group against a model, across stops, reopens and crashes.

One store directory per example. Rules send messages (some with keys, some marked to fail once),
start and stop consumers of one group, reopen the broker cleanly, "crash" it, and wait until the
group is idle. The listener records every delivery (msg_id, queue, offset) in the model.

A crash is simulated in process: the consumer-offset and delay-offset files are read as they are
on disk at that moment (what a killed process would leave: the offset persist service writes
them every 20 ms here), the broker is closed, those two files are put back, and optionally the
`abort` marker is written so the reopen takes the abnormal-recovery path. The commit log keeps
everything acknowledged (the close flushed it); consumers lose the commits made since the last
persist, so messages are delivered again, never lost. A listener call still running at the crash
(messages marked `slow` take 30 ms) counts as never finished, as it would in a killed process.

`ConcurrentConsumers` (three queues, up to three members, CONSUME_FROM_FIRST_OFFSET) checks:

* nothing is delivered that was not sent, and a delivery from topic T is at the queue and offset
  the send returned; only messages that failed come back through `%RETRY%<group>`;
* committed offsets never exceed the queue's max offset, never pass a message whose listener call
  had not finished, and never go backwards (except to the last persisted value after a crash);
* a clean reopen keeps every committed offset exactly (consumers stopped first) or at least
  (consumers shut down by `close()`);
* once idle, every acknowledged message was consumed successfully at least once.

`OrderlyConsumers` (two queues, one member at a time) checks that per queue the successfully
consumed offsets are strictly increasing within one consumer lifetime, that each lifetime starts
at the offset committed when it started, that no offset is ever skipped, and that committed
offsets never pass what was consumed successfully.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import mqlite
from mqlite.config import read_json
from mqlite.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, ConsumeOrderlyStatus, PushConsumer
from mqlite.delay import delay_offset_path
from mqlite.message import MessageQueue
from mqlite.offsetfile import consumer_offset_path
from mqlite.sendback import retry_topic
from mqlite.testing import no_leaked_threads
from support import SMALL_STORE, wait_until

#: Every retry level 1 ms, so retries happen within a step.
FAST_LEVELS = " ".join(["1ms"] * 18)
#: Offsets reach the disk every 20 ms, so a crash loses some commits, not always all of them.
OPEN_SETTINGS: dict[str, Any] = {"message_delay_level": FAST_LEVELS, "flush_consumer_offset_interval": 0.02,
                                 "flush_delay_offset_interval": 0.02, **SMALL_STORE}
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
GROUP = "cg"
RETRY = retry_topic(GROUP)
IDLE_TIMEOUT = 10.0
MACHINE_SETTINGS = settings(max_examples=15, stateful_step_count=25, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow])


F = TypeVar("F", bound=Callable[..., Any])


def _guarded(fn: F) -> F:
    """Mark the machine broken when a step fails, so teardown skips the final wait (shrinking stays fast)."""

    @functools.wraps(fn)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except BaseException:
            self.broken = True
            raise

    return step  # type: ignore[return-value]


@dataclass(frozen=True)
class Sent:
    """An acknowledged send, as the model remembers it."""

    body: bytes
    queue_id: int
    queue_offset: int
    fail: bool
    key: str | None


@dataclass(frozen=True)
class Delivery:
    """One message handed to a listener."""

    lifetime: int  # which consumer instance got it
    msg_id: str
    source_topic: str  # the queue it was pulled from (T or the retry topic)
    queue_id: int
    queue_offset: int
    topic: str  # what the listener saw (the retry topic is reset to the original)
    reconsume_times: int
    body: bytes
    ok: bool


class _StoreMachine(RuleBasedStateMachine):
    """What both machines share: one store directory, the broker, its consumers and the crash."""

    topic = "T"
    queue_nums = 3

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="mqlite-consumer-stateful-")
        self.path = os.path.join(self.root, "mq")
        self.broker: mqlite.Broker | None = None
        self.consumers: list[PushConsumer] = []
        self.cond = threading.Condition()
        self.deliveries: list[Delivery] = []
        self.checked = 0  # deliveries already checked by the invariant
        self.failed: set[str] = set()  # msg ids that failed their one time
        self.lifetimes = 0
        self.floors: dict[tuple[str, int], int] = {}  # committed offsets seen: they never go back
        self.seq = 0
        self.broken = False
        self.epoch = 0  # bumped by a crash: listener calls it interrupts never finish
        self._open()
        assert self.broker is not None
        self.broker.create_topic(self.topic, self.queue_nums)

    # -- helpers ---------------------------------------------------------------------------------------
    def _open(self) -> None:
        self.broker = mqlite.open(self.path, **OPEN_SETTINGS)

    def _b(self) -> mqlite.Broker:
        assert self.broker is not None
        return self.broker

    def _mq(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(topic, self._b().broker_name, queue_id)

    def _tracked_queues(self) -> list[tuple[str, int]]:
        broker = self._b()
        queues = [(self.topic, q) for q in range(self.queue_nums)]
        if broker.topic_config(RETRY) is not None:
            queues.append((RETRY, 0))
        return queues

    def _committed(self) -> dict[tuple[str, int], int]:
        broker = self._b()
        return {(t, q): broker.query_offset(GROUP, self._mq(t, q)) for t, q in self._tracked_queues()}

    def _check_offsets(self) -> dict[tuple[str, int], int]:
        """Committed offsets: within [floor, max offset]; the floors move up to them."""
        broker = self._b()
        committed = self._committed()  # read before max offsets: those only grow
        for (topic, queue_id), offset in committed.items():
            high = broker.max_offset(self._mq(topic, queue_id))
            assert offset <= high, f"{topic}/{queue_id}: committed {offset} is past the max offset {high}"
            floor = self.floors.get((topic, queue_id), -1)
            assert offset >= floor, f"{topic}/{queue_id}: committed offset went back from {floor} to {offset}"
            self.floors[(topic, queue_id)] = offset
        return committed

    def _new_consumer(self, **options: Any) -> PushConsumer:
        self.lifetimes += 1
        return PushConsumer(self._b(), GROUP, client_id=f"c{self.lifetimes}", consume_from_where=FIRST,
                            consume_thread_nums=2, subscription={self.topic: "*"}, **options)

    def _stop_all(self) -> None:
        for consumer in self.consumers:
            consumer.shutdown()
        self.consumers.clear()

    def _read_offsets_on_disk(self) -> tuple[Any, Any]:
        return read_json(consumer_offset_path(self.path)), read_json(delay_offset_path(self.path))

    def _crash(self, abnormal: bool) -> None:
        """Close, then put back the offset files as they were on disk at the 'crash'."""
        on_disk = self._read_offsets_on_disk()  # the moment of the crash
        with self.cond:
            # Listener calls returning from here on die with the 'process'. (Bumped after the read: a
            # call returning in between counts as finished, and its commit is lost, which is allowed.)
            self.epoch += 1
        self._b().close()  # shuts the consumers down
        self.consumers.clear()
        for path, document in zip((consumer_offset_path(self.path), delay_offset_path(self.path)), on_disk):
            for leftover in (path, path + ".bak", path + ".tmp"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
            if document is not None:
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(document, f)
        if abnormal:
            with open(os.path.join(self.path, "abort"), "w") as f:
                f.write("1")
        self._open()
        if abnormal:
            assert self._b().store.recovery.abnormal  # type: ignore[attr-defined]
        self.floors = self._committed()  # back to what was persisted before the crash

    def _reopen(self, stop_first: bool) -> None:
        before = None
        if stop_first:
            self._stop_all()
            before = self._check_offsets()  # nothing commits now: the reopen must keep exactly these
        self._b().close()  # shuts running consumers down: they commit what they finished
        self.consumers.clear()
        self._open()
        after = self._check_offsets()  # never below what was seen before the close
        if before is not None:
            assert {k: v for k, v in after.items() if k in before} == before

    def _wait(self, done: Callable[[], bool], what: Callable[[], str]) -> None:
        """Until `done()` (called with `cond` held), or fail after IDLE_TIMEOUT saying `what()`."""

        def locked_done() -> bool:
            with self.cond:
                return done()

        # Looks, as no listener signals the committed offsets (`PushConsumer.join` would pick the
        # queues each member owns now, which the crashes and restarts of the machine move).
        wait_until(locked_done, lambda: f"idle: {what()}", IDLE_TIMEOUT)

    def _idle(self) -> bool:
        return all(row.diff == 0 for row in self._b().consumer_progress(GROUP))

    def teardown(self) -> None:
        try:
            try:
                self._stop_all()
            finally:
                if self.broker is not None:
                    self.broker.close()  # also stops any consumer a failed shutdown left running
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class ConcurrentConsumers(_StoreMachine):
    """Concurrent clustering consumers of one group; messages marked `fail` fail once, `slow` take 30 ms."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[str, Sent] = {}
        self.succeeded: set[str] = set()
        #: (source topic, queue id, offset) of listener calls that returned before any crash cut them short.
        self.completed: set[tuple[str, int, int]] = set()

    def _listener(self, lifetime: int) -> Any:
        def listen(msgs: list[Any], context: Any) -> Any:
            source = context.message_queue.topic
            with self.cond:
                epoch = self.epoch
                fail = [m for m in msgs if m.get_user_property("fail") == "1" and m.msg_id not in self.failed]
                ok = not fail
                for m in msgs:
                    self.deliveries.append(Delivery(lifetime, m.msg_id, source, m.queue_id, m.queue_offset, m.topic,
                                                    m.reconsume_times, m.body, ok))
                self.failed.update(m.msg_id for m in fail)
            if any(m.get_user_property("slow") == "1" for m in msgs):
                time.sleep(0.03)  # a window for a crash, a stop or a rebalance to hit a batch in flight
            with self.cond:
                if epoch == self.epoch:  # a call a crash interrupted never finished: its outcome is lost
                    if ok:
                        self.succeeded.update(m.msg_id for m in msgs)
                    self.completed.update((source, m.queue_id, m.queue_offset) for m in msgs)
                self.cond.notify_all()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS if ok else ConsumeConcurrentlyStatus.RECONSUME_LATER

        return listen

    # -- rules -----------------------------------------------------------------------------------------
    @rule(marks=st.lists(st.tuples(st.sampled_from(["plain", "fail", "slow"]), st.booleans()), min_size=1,
                         max_size=5))
    @_guarded
    def send(self, marks: list[tuple[str, bool]]) -> None:
        with mqlite.Producer(self._b(), "pg") as producer:
            for kind, keyed in marks:
                self.seq += 1
                key = f"k{self.seq}" if keyed else None
                body = f"m{self.seq}".encode()
                msg = mqlite.Message(self.topic, body, keys=key, properties=None if kind == "plain" else {kind: "1"})
                result = producer.send(msg)
                assert result.send_status is mqlite.SendStatus.SEND_OK
                with self.cond:
                    self.sent[result.msg_id] = Sent(body, result.message_queue.queue_id, result.queue_offset,
                                                    kind == "fail", key)

    @precondition(lambda self: len(self.consumers) < 3)
    @rule()
    @_guarded
    def start_consumer(self) -> None:
        consumer = self._new_consumer()
        consumer.register_message_listener(self._listener(self.lifetimes))
        consumer.start()
        self.consumers.append(consumer)

    @precondition(lambda self: self.consumers)
    @rule(which=st.integers(min_value=0, max_value=2))
    @_guarded
    def stop_consumer(self, which: int) -> None:
        self.consumers.pop(which % len(self.consumers)).shutdown()

    @rule(stop_first=st.booleans(), restart=st.integers(min_value=0, max_value=2))
    @_guarded
    def reopen(self, stop_first: bool, restart: int) -> None:
        self._reopen(stop_first)
        for _ in range(restart):
            self.start_consumer()

    @rule(abnormal=st.booleans(), restart=st.integers(min_value=0, max_value=2))
    @_guarded
    def crash(self, abnormal: bool, restart: int) -> None:
        self._crash(abnormal)
        for _ in range(restart):
            self.start_consumer()

    @precondition(lambda self: self.consumers)
    @rule()
    @_guarded
    def wait_idle(self) -> None:
        self._wait_consumed()

    def _wait_consumed(self) -> None:
        def done() -> bool:
            return self.succeeded >= set(self.sent) and self._idle()

        def what() -> str:
            missing = sorted(set(self.sent) - self.succeeded)
            busy = [r for r in self._b().consumer_progress(GROUP) if r.diff]
            return f"{len(missing)} never consumed ({missing[:3]}...); behind: {busy}"

        self._wait(done, what)
        self._check_deliveries()
        missing = set(self.sent) - self.succeeded
        assert not missing, f"acknowledged but never consumed successfully: {sorted(missing)}"
        committed = self._check_offsets()
        broker = self._b()
        for (topic, queue_id), offset in committed.items():
            # -1: nothing committed, which is right only for a queue that never had a message
            assert max(offset, 0) == broker.max_offset(self._mq(topic, queue_id)), (topic, queue_id, offset)
        for msg_id, sent in self.sent.items():
            if sent.key is not None:
                found = {m.msg_id for m in broker.query_message(self.topic, sent.key)}
                assert found == {msg_id}, f"key {sent.key}: {found}"

    # -- invariants ------------------------------------------------------------------------------------
    def _check_deliveries(self) -> None:
        with self.cond:
            fresh = self.deliveries[self.checked:]
            self.checked = len(self.deliveries)
            sent = dict(self.sent)
        for d in fresh:
            assert d.msg_id in sent, f"delivered but never sent: {d}"
            s = sent[d.msg_id]
            assert d.body == s.body and d.topic == self.topic, d
            if d.source_topic == self.topic:
                assert (d.queue_id, d.queue_offset, d.reconsume_times) == (s.queue_id, s.queue_offset, 0), (d, s)
            else:
                assert d.source_topic == RETRY and d.reconsume_times >= 1, d
                assert s.fail, f"a message that never failed came back from {RETRY}: {d}"

    @invariant()
    @_guarded
    def deliveries_match_what_was_sent(self) -> None:
        self._check_deliveries()

    @invariant()
    @_guarded
    def committed_offsets_are_bounded_and_monotonic(self) -> None:
        committed = self._check_offsets()  # read first: what is committed was completed before
        with self.cond:
            completed = set(self.completed)
        for (topic, queue_id), offset in committed.items():
            skipped = [o for o in range(max(offset, 0)) if (topic, queue_id, o) not in completed]
            assert not skipped, f"{topic}/{queue_id}: committed {offset} past unfinished offsets {skipped[:5]}"

    def teardown(self) -> None:
        try:
            if not self.broken and self.broker is not None and not self.broker.closed:
                if not self.consumers:
                    self.start_consumer()
                self._wait_consumed()  # the final wait: everything sent was consumed successfully
        finally:
            super().teardown()


class OrderlyConsumers(_StoreMachine):
    """One orderly consumer at a time; messages marked `fail` suspend their queue once, `slow` take 30 ms."""

    topic = "O"
    queue_nums = 2

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: dict[tuple[int, int], tuple[str, bool]] = {}  # (queue, offset) -> (msg id, fail)
        self.starts: dict[int, dict[int, int]] = {}  # lifetime -> queue -> committed offset at start
        self.last_ok: dict[tuple[int, int], int] = {}  # (lifetime, queue) -> last offset consumed
        self.frontier: dict[int, int] = {q: 0 for q in range(self.queue_nums)}  # 1 + highest offset consumed

    def _listener(self, lifetime: int) -> Any:
        def listen(msgs: list[Any], context: Any) -> Any:
            with self.cond:
                fail = [m for m in msgs if m.get_user_property("fail") == "1" and m.msg_id not in self.failed]
                ok = not fail
                for m in msgs:
                    self.deliveries.append(Delivery(lifetime, m.msg_id, context.message_queue.topic, m.queue_id,
                                                    m.queue_offset, m.topic, m.reconsume_times, m.body, ok))
                self.failed.update(m.msg_id for m in fail)
                self.cond.notify_all()
            if ok:
                if any(m.get_user_property("slow") == "1" for m in msgs):
                    time.sleep(0.03)  # a window for a stop or a crash to hit a batch in flight
                return ConsumeOrderlyStatus.SUCCESS
            context.suspend_current_queue_time_millis = 10
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

        return listen

    # -- rules -----------------------------------------------------------------------------------------
    @rule(marks=st.lists(st.tuples(st.integers(min_value=0, max_value=3), st.sampled_from(["plain", "fail", "slow"])),
                         min_size=1, max_size=5))
    @_guarded
    def send(self, marks: list[tuple[int, str]]) -> None:
        with mqlite.Producer(self._b(), "pg") as producer:
            for sharding_key, kind in marks:
                self.seq += 1
                msg = mqlite.Message(self.topic, f"o{self.seq}".encode(), keys=f"k{self.seq}",
                                     properties=None if kind == "plain" else {kind: "1"})
                result = producer.send_orderly(msg, sharding_key)
                assert result.send_status is mqlite.SendStatus.SEND_OK
                at = (result.message_queue.queue_id, result.queue_offset)
                with self.cond:
                    assert at not in self.sent_at, f"queue offset {at} handed out twice"
                    self.sent_at[at] = (result.msg_id, kind == "fail")

    @precondition(lambda self: not self.consumers)
    @rule()
    @_guarded
    def start_consumer(self) -> None:
        committed = self._committed()
        consumer = self._new_consumer(suspend_current_queue_time=0.01)
        consumer.register_message_listener(self._listener(self.lifetimes), orderly=True)
        with self.cond:
            self.starts[self.lifetimes] = {q: max(committed[(self.topic, q)], 0) for q in range(self.queue_nums)}
        consumer.start()
        self.consumers.append(consumer)

    @precondition(lambda self: self.consumers)
    @rule()
    @_guarded
    def stop_consumer(self) -> None:
        self._stop_all()

    @rule(stop_first=st.booleans(), restart=st.booleans())
    @_guarded
    def reopen(self, stop_first: bool, restart: bool) -> None:
        self._reopen(stop_first)
        if restart:
            self.start_consumer()

    @rule(abnormal=st.booleans(), restart=st.booleans())
    @_guarded
    def crash(self, abnormal: bool, restart: bool) -> None:
        self._crash(abnormal)
        if restart:
            self.start_consumer()

    @precondition(lambda self: self.consumers)
    @rule()
    @_guarded
    def wait_idle(self) -> None:
        self._wait_consumed()

    def _wait_consumed(self) -> None:
        broker = self._b()

        def done() -> bool:
            self._check_deliveries_locked()
            return all(self.frontier[q] >= broker.max_offset(self._mq(self.topic, q))
                       for q in range(self.queue_nums)) and self._idle()

        def what() -> str:
            highs = {q: broker.max_offset(self._mq(self.topic, q)) for q in range(self.queue_nums)}
            return f"consumed up to {self.frontier}, queues end at {highs}; committed {self._committed()}"

        self._wait(done, what)
        consumed = {(d.queue_id, d.queue_offset) for d in self.deliveries if d.ok}
        assert set(self.sent_at) <= consumed, sorted(set(self.sent_at) - consumed)

    # -- invariants ------------------------------------------------------------------------------------
    def _check_deliveries_locked(self) -> None:
        """Check new deliveries in the order the listener saw them (caller holds `cond`)."""
        fresh = self.deliveries[self.checked:]
        self.checked = len(self.deliveries)
        for d in fresh:
            assert d.source_topic == self.topic and d.topic == self.topic, d
            at = (d.queue_id, d.queue_offset)
            assert at in self.sent_at and self.sent_at[at][0] == d.msg_id, f"delivered but never sent: {d}"
            if not d.ok:
                continue
            previous = self.last_ok.get((d.lifetime, d.queue_id))
            if previous is None:
                start = self.starts[d.lifetime][d.queue_id]
                assert d.queue_offset == start, f"lifetime {d.lifetime} began at {d.queue_offset}, committed {start}"
            else:
                assert d.queue_offset > previous, f"lifetime {d.lifetime} went from {previous} to {d}"
            assert d.queue_offset <= self.frontier[d.queue_id], f"skipped to {d}; consumed up to {self.frontier}"
            self.last_ok[(d.lifetime, d.queue_id)] = d.queue_offset
            self.frontier[d.queue_id] = max(self.frontier[d.queue_id], d.queue_offset + 1)

    @invariant()
    @_guarded
    def consumed_in_order_without_gaps(self) -> None:
        committed = self._check_offsets()
        with self.cond:
            self._check_deliveries_locked()
            for q in range(self.queue_nums):
                offset = committed[(self.topic, q)]
                assert offset <= self.frontier[q], f"queue {q}: committed {offset}, consumed only to {self.frontier}"

    def teardown(self) -> None:
        try:
            if not self.broken and self.broker is not None and not self.broker.closed:
                if not self.consumers:
                    self.start_consumer()
                self._wait_consumed()
        finally:
            super().teardown()


def test_concurrent_consumers_deliver_every_message_at_least_once() -> None:
    with no_leaked_threads():
        run_state_machine_as_test(ConcurrentConsumers, settings=MACHINE_SETTINGS)


def test_orderly_consumers_keep_queue_order_across_restarts() -> None:
    with no_leaked_threads():
        run_state_machine_as_test(OrderlyConsumers, settings=MACHINE_SETTINGS)
