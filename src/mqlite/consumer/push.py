"""`PushConsumer`: RocketMQ's `DefaultMQPushConsumer`, in process.

One pull thread (`mqlite-pull-<group>`) rebalances, pulls every owned queue
that is not flow-controlled, caches what it pulled in the queue's
`ProcessQueue` and hands batches to a pool of consume threads
(`mqlite-consume-<group>-<i>`). When no queue had anything, the thread parks
until one of its queues grows (the broker's arrival hub wakes it), so a
message reaches a waiting listener within a wake-up, as RocketMQ's long
polling does.

Concurrent mode sends failures back to `%RETRY%<group>`; consume threads
acknowledge what they consumed without a lock and the pull thread commits,
on its next round, the smallest offset still cached (an unfinished message
is never skipped). Orderly mode consumes each queue on one thread at a time in
offset order, holding the queue's broker lock in clustering mode, and retries
a suspended batch after `suspend_current_queue_time`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..config import JAVA_INT_MAX, check_seconds
from ..errors import IllegalStateError, MQClientError
from ..filter import MessageSelector
from ..longpoll import PullStatus
from ..message import MessageExt, MessageQueue
from ..port import BrokerPort
from ..rebalance import AllocateMessageQueueStrategy, allocate
from ..sendback import DEFAULT_MAX_RECONSUME_TIMES, is_retry_topic
from .base import PERSIST_OFFSET_INTERVAL, REBALANCE_INTERVAL, ConsumerBase, check_range
from .processqueue import ProcessQueue, PulledRun
from .service import PullLoop, WorkerPool
from .types import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageListener,
    MessageModel,
)

__all__ = ["PushConsumer"]

log = logging.getLogger("mqlite.consumer")

#: `BROKER_SUSPEND_MAX_TIME_MILLIS` of the push consumer: a parked pull gives up after 15 s.
PUSH_LONG_POLLING_WAIT = 15.0
#: `ConsumeMessageConcurrentlyService`: a failed send-back is retried locally after 5 s.
SEND_BACK_RETRY_DELAY = 5.0
#: `ConsumeMessageOrderlyService.MAX_TIME_CONSUME_CONTINUOUSLY`: a worker yields a busy queue after 60 s.
MAX_TIME_CONSUME_CONTINUOUSLY = 60.0
#: `REBALANCE_LOCK_INTERVAL`: orderly consumers renew their queue locks every 20 s.
LOCK_RENEW_INTERVAL = 20.0
#: Orderly: retry locking a queue we own but could not lock (`tryLockLaterAndReconsume`).
LOCK_RETRY_DELAY = 0.1
_MAX_INT = 2**31 - 1
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
#: `pullTimeDelayMillsWhenException`: a queue whose pull failed is tried again after 3 s.
PULL_DELAY_WHEN_EXCEPTION = 3.0
#: RocketMQ caps `pullInterval` at 65535 ms.
MAX_PULL_INTERVAL = 65.535
#: With `consume_message_batch_max_size` 1, a pull's messages go to the consume threads several to a task
#: (each still its own listener call) once this many tasks per thread wait already: fewer hand-offs.
DEEP_BACKLOG_PER_THREAD = 2
#: A default pull result. Against 8: a backlog drains 7-8% faster at 20 and 4 threads, 2% at 1 (medians of 4
#: interleaved rounds): fewer hand-offs and acks.
MESSAGES_PER_TASK = 32
#: `join()` is woken by the consume path; this bounds the cost of a missed wake-up, not the normal latency.
JOIN_BACKSTOP = 1.0


def _nothing() -> None:
    """A timer that only wakes the pull loop."""


class _Request:
    """A batch on its way to the listener (`ConsumeRequest`).

    `run` and `start`: where the batch sits in its pull result (`msgs` is
    `run.msgs[start:start + len(msgs)]`), so success acknowledges it as one
    range; None for a retry of some of a batch's messages, acknowledged one by one.
    """

    __slots__ = ("msgs", "pq", "mq", "started", "run", "start")

    def __init__(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                 run: PulledRun | None = None, start: int = 0) -> None:
        self.msgs = msgs
        self.pq = pq
        self.mq = mq
        self.started = 0.0  # time.monotonic() when the listener got it
        self.run = run
        self.start = start


class PushConsumer(ConsumerBase):
    """An in-process `DefaultMQPushConsumer`: subscribe, register a listener, start.

    Options and defaults are RocketMQ's (API.md). Thread-safe; also a context
    manager (`start()` on entry, `shutdown()` on exit). `trace=True` records
    each listener call, retry and dead-letter move in `RMQ_SYS_TRACE_TOPIC`
    (`mqlite.trace`; see `Broker.query_trace`).
    """

    _kind = "push consumer"

    def __init__(self, broker: BrokerPort | str | os.PathLike[str], group: str, *,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | int | None = None,
                 allocate_strategy: AllocateMessageQueueStrategy | None = None,
                 client_id: str | None = None,
                 consume_thread_nums: int = 20, consume_message_batch_max_size: int = 1, pull_batch_size: int = 32,
                 pull_threshold_for_queue: int = 1000, pull_threshold_size_for_queue: int = 100,
                 consume_concurrently_max_span: int = 2000, max_reconsume_times: int = -1,
                 suspend_current_queue_time: float = 1.0, consume_timeout: float = 900.0,
                 pull_interval: float = 0.0, long_polling_wait: float = PUSH_LONG_POLLING_WAIT,
                 subscription: Mapping[str, MessageSelector | str | None] | None = None,
                 listener: MessageListener | None = None, orderly: bool = False,
                 offset_store_dir: str | None = None, trace: bool = False) -> None:
        super().__init__(broker, group, message_model=message_model, consume_from_where=consume_from_where,
                         consume_timestamp=consume_timestamp, allocate_strategy=allocate_strategy,
                         client_id=client_id, offset_store_dir=offset_store_dir, trace=trace)
        self.consume_thread_nums = check_range("consume_thread_nums", consume_thread_nums, 1, 1000)
        self.consume_message_batch_max_size = check_range("consume_message_batch_max_size",
                                                           consume_message_batch_max_size, 1, 1024)
        self.pull_batch_size = check_range("pull_batch_size", pull_batch_size, 1, 1024)
        self.pull_threshold_for_queue = check_range("pull_threshold_for_queue", pull_threshold_for_queue, 1, 65535)
        self.pull_threshold_size_for_queue = check_range("pull_threshold_size_for_queue (MiB)",
                                                          pull_threshold_size_for_queue, 1, 1024)
        self.consume_concurrently_max_span = check_range("consume_concurrently_max_span",
                                                          consume_concurrently_max_span, 1, 65535)
        # -1: RocketMQ's default (16 for concurrent listeners, unbounded for orderly ones).
        self.max_reconsume_times = check_range("max_reconsume_times", max_reconsume_times, -1, JAVA_INT_MAX)
        for name, value in (("suspend_current_queue_time", suspend_current_queue_time),
                            ("pull_interval", pull_interval), ("long_polling_wait", long_polling_wait)):
            check_seconds(name, value)
        check_seconds("consume_timeout", consume_timeout, positive=True)
        if pull_interval > MAX_PULL_INTERVAL:
            raise MQClientError(f"pull_interval must be at most {MAX_PULL_INTERVAL} s (RocketMQ's 65535 ms), "
                                f"got {pull_interval!r}")
        self.suspend_current_queue_time = float(suspend_current_queue_time)
        self.consume_timeout = float(consume_timeout)
        self.pull_interval = float(pull_interval)
        self.long_polling_wait = float(long_polling_wait)
        self._listener: MessageListener | None = None
        self._orderly = False
        self._suspended = False
        self._next_offsets: dict[MessageQueue, int] = {}
        self._running_requests: dict[_Request, None] = {}
        self._loop: PullLoop | None = None
        self._pool: WorkerPool | None = None
        self._stopping = False
        self._retry_at: dict[MessageQueue, float] = {}
        self._paced_until = 0.0
        self._clock: Clock = SYSTEM_CLOCK
        # `join()` callers wait here; rounds of the pull thread and orderly workers notify it.
        self._join_cv = threading.Condition()
        self._joiners = 0
        if subscription is not None and not isinstance(subscription, Mapping):
            raise MQClientError(f"subscription must map topics to expressions ({{'orders': '*'}}), got {subscription!r}")
        for topic, expression in (subscription or {}).items():
            self.subscribe(topic, expression)
        if listener is not None:
            self.register_message_listener(listener, orderly=orderly)

    # -- configuration ------------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*") -> None:
        """Consume `topic`'s messages matching a tag expression or a `MessageSelector` (before or after start)."""
        self._subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming `topic`."""
        self._unsubscribe(topic)

    def register_message_listener(self, listener: MessageListener, *, orderly: bool = False) -> None:
        """Set the listener: `(msgs, context) -> status`; `orderly=True` for per-queue ordered consumption."""
        if not callable(listener):
            raise MQClientError(f"listener must be callable (msgs, context) -> status, got {listener!r}")
        if self._state != "CREATED":
            raise IllegalStateError("register the listener before start()")
        self._listener = listener
        self._orderly = bool(orderly)

    @property
    def orderly(self) -> bool:
        """True when the listener consumes orderly."""
        return self._orderly

    def _effective_max_reconsume_times(self) -> int:
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return _MAX_INT if self._orderly else DEFAULT_MAX_RECONSUME_TIMES

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Join the group, rebalance and start pulling and consuming."""
        with self._state_lock:
            if self._state != "CREATED":
                raise IllegalStateError(f"push consumer {self.group!r} is {self._state.lower()}; create a new one")
            if self._listener is None:
                raise IllegalStateError("register a message listener before start()")
            broker = self._attach()
            self._clock = broker.clock
            self._subscribe_retry_topic()
            self._pool = WorkerPool(f"mqlite-consume-{self.group}", self.consume_thread_nums)
            self._loop = PullLoop(f"pull-{self.group}", self._pull_round_and_signal, self.long_polling_wait,
                                  clock=self._clock)
            self._wake = self._loop  # request_rebalance wakes the loop
            self._state = "RUNNING"
            self._join_or_give_up()
            self._pool.start()
            # Periodic chores run on the pull thread (its timer queue), not on threads of their own.
            self._every(REBALANCE_INTERVAL, self.request_rebalance)
            self._every(PERSIST_OFFSET_INTERVAL, self._persist_offsets)
            if self._orderly and self.clustering:
                self._every(LOCK_RENEW_INTERVAL, self._renew_locks)
            if not self._orderly and self.clustering:
                self._every(min(self.consume_timeout, 60.0), self._clean_expired)
            self._loop.start()

    def shutdown(self) -> None:
        """Stop pulling, finish the batches in flight, commit and persist offsets, leave the group. Idempotent."""
        with self._state_lock:
            if self._state != "RUNNING":
                if self._state == "CREATED":
                    self._state = "SHUTDOWN"
                return  # already stopping or stopped (a second caller must not release the broker twice)
            self._state = "STOPPING"
            self._stopping = True
        self._signal_joiners()  # a join() in progress returns False now
        loop, pool = self._loop, self._pool
        broker = self._broker
        if loop is not None:
            if broker is not None:
                broker.unwatch_arrivals(loop)
            loop.stop()
        if pool is not None:
            pool.stop()  # queued requests see _stopping and return; running ones finish
        self._commit_offsets()
        self._release_all_locks()
        self._drop_all()
        self._state = "SHUTDOWN"
        self._leave()

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def suspend(self) -> None:
        """Pause pulling (cached messages are still consumed)."""
        self._suspended = True

    def resume(self) -> None:
        """Resume pulling after `suspend()`."""
        self._suspended = False
        loop = self._loop
        if loop is not None:
            loop.poke()

    @property
    def suspended(self) -> bool:
        """True between `suspend()` and `resume()`."""
        return self._suspended

    # -- join ---------------------------------------------------------------------------------------------------
    def join(self, timeout: float | None = None) -> bool:
        """Block until every message readable now in the subscribed queues is consumed and committed.

        "Readable now" is fixed when the call starts (messages sent before it are
        dispatched first); "consumed" includes a failure sent back to the retry
        topic, whose retry is a new message due later. In CLUSTERING mode only the
        queues the allocation gives this consumer count (each member joins its
        own share). Returns True then, False after `timeout` seconds (None: no
        limit) or when the consumer shuts down meanwhile. The consume path wakes
        the wait (as dramatiq's `join`); the re-check every `JOIN_BACKSTOP` seconds
        only covers a missed wake-up. Call it from any thread but a consume thread
        of this consumer, which would wait for itself.
        """
        broker = self._running()
        if timeout is not None:
            timeout = check_seconds("join(timeout)", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        if not broker.wait_dispatched(timeout):
            return False
        targets = {mq: broker.max_offset(mq) for topic in list(self._subscriptions)
                   for mq in broker.fetch_subscribe_queues(topic)}
        with self._join_cv:
            self._joiners += 1
            try:
                while not self._caught_up(targets):
                    remaining = JOIN_BACKSTOP if deadline is None else deadline - time.monotonic()
                    if self._stopping or remaining <= 0:
                        return False
                    self._join_cv.wait(min(remaining, JOIN_BACKSTOP))
                return True
            finally:
                self._joiners -= 1

    def _caught_up(self, targets: Mapping[MessageQueue, int]) -> bool:
        """True when each queue this consumer should own is pulled up to its target, drained and committed."""
        with self._table_lock:
            queues = dict(self._process_queues)
        for mq in self._queues_to_own():
            target = targets.get(mq, 0)  # a queue that appeared after the call has nothing to wait for
            if target == 0:
                continue
            pq = queues.get(mq)
            # The pull thread fills the cache, then moves the next offset: reading the offset first
            # and the cache second never sees messages pulled but not counted yet.
            next_offset = self._next_offsets.get(mq)
            if pq is None or pq.dropped or next_offset is None or next_offset < target or pq.msg_count:
                return False
            if self._orderly:
                if pq.consume_lock.locked():  # a worker may still be committing its last batch
                    return False
            elif pq.pending_offset > pq.committed_offset:  # consumed, not committed yet
                return False
        return True

    def _queues_to_own(self) -> set[MessageQueue]:
        """The queues a finished rebalance gives this consumer now (what `join` waits for).

        Computed from the group's members rather than read from the table, so a
        rebalance still to come is waited for instead of missed.
        """
        broker = self._broker
        if broker is None:
            return set()
        cids = broker.consumer_ids(self.group) if self.clustering else []
        mine: set[MessageQueue] = set()
        for topic in list(self._subscriptions):
            mq_all = broker.fetch_subscribe_queues(topic)
            if not self.clustering:
                mine.update(mq_all)
            elif mq_all and cids:
                mine.update(allocate(self.allocate_strategy, self.group, self.client_id, mq_all, cids))
        return mine

    def _signal_joiners(self) -> None:
        # `_joiners` is read without the lock: a joiner counts itself before its first check,
        # so a change made before this read is seen by that check.
        if self._joiners:
            with self._join_cv:
                self._join_cv.notify_all()

    def _pull_round_and_signal(self) -> bool:
        """A pull round, then wake `join()`: the round commits offsets, rebalances and moves pull offsets."""
        try:
            return self._pull_round()
        finally:
            self._signal_joiners()

    def _consume_orderly_and_signal(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """An orderly worker's turn, then wake `join()`: it commits on its own thread, not the pull thread's."""
        try:
            self._consume_orderly(mq, pq)
        finally:
            self._signal_joiners()

    def reset_offsets(self, topic: str, offsets: dict[int, int]) -> None:
        """Admin reset: drop what is cached for `topic` and pull from the new offsets.

        Applied on the pull thread, so no pull in flight can undo it: each
        queue gets a fresh process queue (batches still running on the old one
        are ignored when they finish) and the new offset is committed again.
        """
        loop = self._loop
        if loop is not None:
            loop.call_later(0.0, lambda: self._apply_reset(topic, offsets))

    def _apply_reset(self, topic: str, offsets: dict[int, int]) -> None:
        offset_store = self.offset_store
        for mq, old in self._process_queue_items():
            if mq.topic != topic or mq.queue_id not in offsets or old.dropped:
                continue
            old.dropped = True
            fresh = ProcessQueue()
            fresh.locked, fresh.last_lock_timestamp = old.locked, old.last_lock_timestamp
            with self._table_lock:
                self._process_queues[mq] = fresh
            self._next_offsets[mq] = offsets[mq.queue_id]
            if offset_store is not None:
                offset_store.update(mq, offsets[mq.queue_id], False)

    # -- rebalance hooks --------------------------------------------------------------------------------
    def _queue_added(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if self._orderly and self.clustering:
            pq.locked = True
            pq.last_lock_timestamp = self._now_ms()
        self._next_offsets[mq] = offset
        broker = self._broker
        if broker is not None and self._loop is not None:
            broker.watch_arrivals(self._loop, [(mq.topic, mq.queue_id)])

    def _may_take(self, mq: MessageQueue) -> bool:
        if not (self._orderly and self.clustering):
            return True
        broker = self._broker
        assert broker is not None
        return mq in broker.lock_queues(self.group, [mq], self.client_id)

    def _remove_unnecessary_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        broker = self._broker
        assert broker is not None
        self._commit_offsets(only=pq)
        if self._orderly and self.clustering:
            # Wait (briefly) for the batch in flight so the next owner never overlaps it.
            if not pq.consume_lock.acquire(timeout=1.0):
                return False
            try:
                super()._remove_unnecessary_queue(mq, pq)
                broker.unlock_queues(self.group, [mq], self.client_id)  # the next owner is told it can lock it
            finally:
                pq.consume_lock.release()
        else:
            super()._remove_unnecessary_queue(mq, pq)
        if self._loop is not None:
            broker.unwatch_arrivals(self._loop, [(mq.topic, mq.queue_id)])
        self._next_offsets.pop(mq, None)
        return True

    def _release_all_locks(self) -> None:
        broker = self._broker
        if broker is not None and self._orderly and self.clustering:
            broker.unlock_queues(self.group, [mq for mq, _ in self._process_queue_items()], self.client_id)

    # -- the pull thread ---------------------------------------------------------------------------------
    def _now_ms(self) -> int:
        return self._clock.now_ms()

    def _pull_round(self) -> bool:
        """One pass over the owned queues; True when something was pulled."""
        if self._stopping:
            return False
        self._commit_offsets()
        if self._rebalance_requested.is_set():
            self.rebalance()
        if self._suspended:
            return False
        now = time.monotonic()
        if now < self._paced_until:
            return False  # `pull_interval`: a timer wakes the loop when it is up
        progress = False
        for mq, pq in self._process_queue_items():
            if pq.dropped or self._retry_at.get(mq, 0.0) > now:
                continue
            if self._flow_controlled(pq):
                pq.flow_blocked = True  # the consume side pokes us once it frees room
                continue
            if self._orderly and self.clustering and not pq.locked:
                continue
            try:
                progress |= self._pull_one(mq, pq)
            except Exception:
                # One bad queue (a damaged record, say) must not stop the others.
                log.exception("%s: pulling %s failed; trying it again in %.0f s", self.group, mq,
                              PULL_DELAY_WHEN_EXCEPTION)
                self._retry_at[mq] = now + PULL_DELAY_WHEN_EXCEPTION
                loop = self._loop
                if loop is not None:
                    loop.call_later(PULL_DELAY_WHEN_EXCEPTION, _nothing)
        if progress and self.pull_interval > 0:
            self._paced_until = now + self.pull_interval
            loop = self._loop
            if loop is not None:
                loop.call_later(self.pull_interval, _nothing)
        return progress

    def _pull_one(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Pull one queue once; True when it moved (messages, or an offset past filtered ones)."""
        offset = self._next_offsets.get(mq)
        if offset is None:
            return False
        broker = self._broker
        assert broker is not None
        selector = self._subscriptions.get(mq.topic)
        message_filter = None if selector is None or selector.match_all else selector
        result = broker.pull(self.group, mq, offset, self.pull_batch_size, message_filter, 0.0)
        msgs = result.msg_found_list
        if msgs:
            self._deliver(mq, pq, msgs)
            self._next_offsets[mq] = result.next_begin_offset  # only once they are cached
            return True
        self._no_messages(mq, pq, offset, result.next_begin_offset, result.pull_status)
        return result.next_begin_offset > offset  # a filtered stretch: scan on at once

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        if pq.msg_count > self.pull_threshold_for_queue:
            return True
        threshold = self.pull_threshold_size_for_queue
        if pq.msg_size >> 20 > threshold and pq.settle_size() >> 20 > threshold:
            return True  # exact: the cheap figure may still count ranges consumed in runs not finished
        return not self._orderly and pq.max_span > self.consume_concurrently_max_span

    def _no_messages(self, mq: MessageQueue, pq: ProcessQueue, offset: int, next_offset: int,
                     status: PullStatus) -> None:
        illegal = status is PullStatus.OFFSET_ILLEGAL
        if illegal:
            log.warning("%s: offset %d of %s is illegal; moving to %d", self.group, offset, mq, next_offset)
            pq.clear()
        elif pq.msg_count == 0:
            # `correctTagsOffset` (NO_NEW_MSG and NO_MATCHED_MSG): nothing pulled is left unconsumed, so
            # the group has consumed up to where the next pull starts, past any filtered messages, also
            # those a FOUND pull skipped at its end. Without it a filter that skips a queue's tail leaves
            # lag there forever. Increase-only: an orderly worker may commit a smaller offset meanwhile;
            # it then pokes this thread, whose next round corrects it again.
            assert self.offset_store is not None
            self.offset_store.update(mq, next_offset, True)
        if next_offset != offset:
            self._next_offsets[mq] = next_offset
            if illegal:
                assert self.offset_store is not None
                self.offset_store.update(mq, next_offset, False)

    def _deliver(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if is_retry_topic(mq.topic):
            self._reset_retry_topic(msgs)
        pool = self._pool
        assert pool is not None
        if self._orderly:
            if pq.put_messages(msgs):
                pool.submit(lambda: self._consume_orderly_and_signal(mq, pq))
            return
        run = pq.push_run(msgs)  # the pull result whole: no step per message here, the serial stage
        msgs = run.msgs
        size = self.consume_message_batch_max_size
        submit, consume = pool.submit_call, self._consume_concurrently
        if size == 1:
            if len(msgs) > 1 and pool.queued() >= DEEP_BACKLOG_PER_THREAD * pool.size:
                # Every thread has work queued already: a task of several messages (still one listener call
                # each) saves hand-offs without delaying any message a free thread could have taken.
                each = self._consume_each
                count = len(msgs)
                for start in range(0, count, MESSAGES_PER_TASK):
                    submit(each, (run, start, min(start + MESSAGES_PER_TASK, count), pq, mq))
                return
            for index, msg in enumerate(msgs):
                submit(consume, _Request([msg], pq, mq, run, index))
        else:
            for start in range(0, len(msgs), size):
                submit(consume, _Request(msgs[start:start + size], pq, mq, run, start))

    def _every(self, period: float, chore: Callable[[], None]) -> None:
        loop = self._loop
        assert loop is not None

        def tick() -> None:
            if self._stopping:
                return
            try:
                chore()
            finally:  # one failure (a full disk, say) must not end the chore for good
                loop.call_later(period, tick)

        loop.call_later(period, tick)

    def _commit_offsets(self, only: ProcessQueue | None = None) -> None:
        """Fold in what consume threads acknowledged, then commit `ProcessQueue.pending_offset`, increase-only.

        Concurrent consumption commits from the pull thread, so consume threads
        share no offset-table lock (RocketMQ's client, too, batches its
        offsets before the broker sees them).
        """
        offset_store = self.offset_store
        if offset_store is None or self._orderly:
            return
        for mq, pq in self._process_queue_items():
            if only is not None and pq is not only:
                continue
            pq.fold_acked()  # what consume threads acknowledged since the last round
            pending = pq.pending_offset
            # A queue being given up still commits what was consumed before (`only`).
            if pending > pq.committed_offset and (only is not None or not pq.dropped):
                offset_store.update(mq, pending, True)
                pq.committed_offset = pending

    def _persist_offsets(self) -> None:
        self._commit_offsets()
        if self.offset_store is not None:
            self.offset_store.persist()

    def _renew_locks(self) -> None:
        broker = self._broker
        assert broker is not None
        items = [(mq, pq) for mq, pq in self._process_queue_items() if not pq.dropped]
        held = broker.lock_queues(self.group, [mq for mq, _ in items], self.client_id)
        now = self._now_ms()
        for mq, pq in items:
            pq.locked = mq in held
            if pq.locked:
                pq.last_lock_timestamp = now

    def _clean_expired(self) -> None:
        """Batches running longer than `consume_timeout` are sent back with delay level 3 (`cleanExpiredMsg`)."""
        if not self.clustering:
            return
        now = time.monotonic()
        for request in list(self._running_requests):
            if request.started and now - request.started > self.consume_timeout and not request.pq.dropped:
                self._running_requests.pop(request, None)  # sent back once, as RocketMQ removes it
                for msg in request.msgs:
                    try:
                        self._send_back(msg, 3, self._effective_max_reconsume_times())
                    except Exception:
                        log.exception("%s: sending back an expired message failed", self.group)
                        continue
                    request.pq.remove_messages([msg])

    # -- concurrent consumption ------------------------------------------------------------------------
    def _consume_each(self, task: tuple[PulledRun, int, int, ProcessQueue, MessageQueue]) -> None:
        """Messages `start` to `stop` of a pull result in one task, each its own request and listener call.

        The requests are made here, on the consume thread, not on the pull
        thread. Successes are published as they happen (`ProcessQueue.track`:
        one list store a message), so the pull thread's next fold commits them,
        also when the queue is given up mid-task; a failure closes the range
        there (`ack`) and the rest is tracked anew. Before each listener call
        but the last, when no task waits in the pool (a consume thread may be
        idle), the rest is handed back as a task of its own: a slow or hung
        call holds up no message another thread could take.
        """
        run, start, stop, pq, mq = task
        msgs = run.msgs
        pool = self._pool
        assert pool is not None
        queued = pool.queued
        cell = pq.track(run, start)
        if self._tracer is not None:  # traced: each through the whole path
            consume = self._consume_listener
            for index in range(start, stop):
                if index == stop:
                    break  # the rest was handed back
                if index + 1 < stop and not queued():
                    pool.submit_call(self._consume_each, (run, index + 1, stop, pq, mq))
                    stop = index + 1
                request = _Request([msgs[index]], pq, mq, run, index)
                try:
                    ok = consume(request)
                except Exception:  # the tracer or `_settle` failed: never leave the message unfinished
                    self._consume_later(request)
                    ok = False
                if ok:
                    cell[2] = index + 1
                else:  # handled on its own (or not at all: dropped, stopping): the range so far is done
                    cell = self._close_range(pq, cell, index)
        else:  # `_consume_listener` inlined (a call less a message); anything but success goes to `_settle`
            listener = self._listener
            assert listener is not None
            running = self._running_requests
            monotonic = time.monotonic
            for index in range(start, stop):
                if index == stop or pq.dropped or self._stopping:
                    break  # the rest was handed back, or is not consumed, so not acknowledged
                if index + 1 < stop and not queued():
                    pool.submit_call(self._consume_each, (run, index + 1, stop, pq, mq))
                    stop = index + 1
                request = _Request([msgs[index]], pq, mq, run, index)
                context = ConsumeConcurrentlyContext(mq)
                request.started = monotonic()
                running[request] = None
                try:
                    status = listener(request.msgs, context)
                except Exception:
                    log.exception("%s: listener failed; the batch will be consumed again later", self.group)
                    status = ConsumeConcurrentlyStatus.RECONSUME_LATER
                finally:
                    running.pop(request, None)
                if (status is None or status is _SUCCESS) and context.ack_index >= 0 and not pq.dropped:
                    cell[2] = index + 1
                    continue
                cell = self._close_range(pq, cell, index)
                if not pq.dropped:
                    try:
                        self._settle(request, status, context)
                    except Exception:
                        self._consume_later(request)
        if cell[2] > cell[1]:
            self._ack(pq, run, cell[1], cell[2])
        pq.untrack(cell)

    def _close_range(self, pq: ProcessQueue, cell: list[Any], index: int) -> list[Any]:
        """Message `index` did not succeed: acknowledge the task's range before it; track from `index + 1`."""
        run, start, stop = cell
        if stop > start:
            self._ack(pq, run, start, stop)
        pq.untrack(cell)
        return pq.track(run, index + 1)

    def _consume_later(self, request: _Request) -> None:
        """Handling a consumed request failed (a tracer or send-back error): consume it again here later.

        As for a listener that raised (RECONSUME_LATER), its messages stay
        cached and are consumed again, here after `SEND_BACK_RETRY_DELAY`, so
        none is left unfinished with the queue's commit stuck below it.
        """
        log.exception("%s: handling a consumed batch failed; consuming it again in %s s",
                      self.group, SEND_BACK_RETRY_DELAY)
        loop = self._loop
        if loop is not None:
            loop.call_later(SEND_BACK_RETRY_DELAY, lambda: self._resubmit(request))

    def _ack(self, pq: ProcessQueue, run: PulledRun, start: int, stop: int) -> None:
        """Acknowledge consumed messages of a run without a lock; the pull thread folds them in and commits.

        The pull thread is poked when no task waits (the cache may be drained
        once this is folded: commit it now, not at the next timer) or when it
        skipped this queue for flow control.
        """
        pq.ack(run, start, stop)
        pool = self._pool
        if pq.flow_blocked or (pool is not None and not pool.queued()):
            pq.flow_blocked = False
            loop = self._loop
            if loop is not None:
                loop.poke()

    def _consume_concurrently(self, request: _Request) -> None:
        run = request.run
        try:
            ok = self._consume_listener(request)
        except Exception:  # the tracer or `_settle` failed: never leave the messages unfinished
            self._consume_later(request)
            return
        if ok and run is not None:
            self._ack(request.pq, run, request.start, request.start + len(request.msgs))

    def _consume_listener(self, request: _Request) -> bool:
        """The listener's call on one request; True when it all succeeded and the caller should `ack` it.

        Any other outcome (failure, partial ack, a request not from a run) is
        handled here under the process queue's lock, and so is a dropped
        queue's or a stopping consumer's request (nothing to acknowledge).
        """
        pq = request.pq
        if pq.dropped or self._stopping:
            return False
        listener = self._listener
        assert listener is not None
        msgs = request.msgs
        context = ConsumeConcurrentlyContext(request.mq)
        tracer = self._tracer
        traced = tracer.before(msgs) if tracer is not None else None  # if it raises, nothing is left running
        request.started = time.monotonic()
        running = self._running_requests
        running[request] = None
        try:
            status = listener(msgs, context)
        except Exception:
            log.exception("%s: listener failed; the batch will be consumed again later", self.group)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
            if traced is not None:
                traced.raised = True
        finally:
            running.pop(request, None)
        if traced is not None:
            traced.done(success=status is None or status is _SUCCESS, timeout=self.consume_timeout)
        if pq.dropped:
            return False
        if (status is None or status is _SUCCESS) and context.ack_index >= len(msgs) - 1 \
                and request.run is not None:
            return True  # the common case, kept short: the caller acknowledges it without a lock
        self._settle(request, status, context)
        return False

    def _settle(self, request: _Request, status: object, context: ConsumeConcurrentlyContext) -> None:
        """Apply a listener's answer other than the plain success of a run's batch, under the queue's lock."""
        if status is None:
            status = _SUCCESS
        elif not isinstance(status, ConsumeConcurrentlyStatus):
            log.warning("%s: listener returned %r, not a ConsumeConcurrentlyStatus; consuming again later",
                        self.group, status)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        self._process_concurrent_result(request, status, context)

    def _process_concurrent_result(self, request: _Request, status: ConsumeConcurrentlyStatus,
                                   context: ConsumeConcurrentlyContext) -> None:
        msgs = request.msgs
        failed: list[MessageExt] = []
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(context.ack_index, len(msgs) - 1)
        else:
            ack_index = -1
        if ack_index < len(msgs) - 1:
            if self.clustering:
                failed = self._send_back_all(msgs[ack_index + 1:], context.delay_level_when_next_consume)
            else:
                for msg in msgs[ack_index + 1:]:
                    log.warning("%s: BROADCASTING consumption failed; message %s dropped", self.group, msg.msg_id)
        done = msgs if not failed else [m for m in msgs if m not in failed]
        pq = request.pq
        pq.remove_messages(done)  # notes the committable offset; the pull thread commits it
        if failed:
            retry = _Request(failed, request.pq, request.mq)
            loop = self._loop
            if loop is not None:
                loop.call_later(SEND_BACK_RETRY_DELAY, lambda: self._resubmit(retry))
        self._drained_or_unblocked(pq)

    def _drained_or_unblocked(self, pq: ProcessQueue) -> None:
        """Wake the pull loop when a queue's cache drained (commit its offset now) or freed room."""
        if pq.msg_count <= pq.acked_pending and not pq.dropped:  # drained once the acks are folded in
            loop = self._loop
            if loop is not None:
                loop.poke()
        self._unblock(pq)

    def _unblock(self, pq: ProcessQueue) -> None:
        """Consumption freed room in a queue the pull loop skipped: let it look again."""
        if pq.flow_blocked:
            pq.flow_blocked = False
            loop = self._loop
            if loop is not None:
                loop.poke()

    def _resubmit(self, request: _Request) -> None:
        pool = self._pool
        if pool is not None and not self._stopping and not request.pq.dropped:
            pool.submit_call(self._consume_concurrently, request)

    def _send_back_all(self, msgs: Sequence[MessageExt], delay_level: int) -> list[MessageExt]:
        """Send failures back to the retry topic; returns the ones that could not be sent."""
        failed = []
        max_times = self._effective_max_reconsume_times()
        for msg in msgs:
            try:
                self._send_back(msg, delay_level, max_times)
            except Exception:
                log.exception("%s: sending message %s back failed; consuming it again in 5 s", self.group, msg.msg_id)
                msg.reconsume_times += 1
                failed.append(msg)
        return failed

    def _send_back(self, msg: MessageExt, delay_level: int, max_times: int) -> None:
        """`Broker.send_message_back`; traced, the retry (or dead-letter) copy is recorded as a Pub."""
        broker = self._broker
        assert broker is not None
        tracer = self._tracer
        if tracer is None:
            broker.send_message_back(self.group, msg, delay_level, max_times)
            return
        started = tracer.now_ms()
        put = broker.send_message_back(self.group, msg, delay_level, max_times)
        tracer.sent_back(msg, put, started)

    # -- orderly consumption ----------------------------------------------------------------------------
    def _consume_orderly(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if pq.dropped or self._stopping:
            return
        listener = self._listener
        assert listener is not None
        clustering = self.clustering
        with pq.consume_lock:
            begin = time.monotonic()
            while not pq.dropped and not self._stopping:
                if clustering and (not pq.locked or pq.is_lock_expired(self._now_ms())):
                    self._later(LOCK_RETRY_DELAY, mq, pq, relock=True)
                    return
                if time.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY:
                    self._later(0.01, mq, pq)
                    return
                msgs = pq.take_messages(self.consume_message_batch_max_size)
                if not msgs:
                    return
                context = ConsumeOrderlyContext(mq)
                tracer = self._tracer
                traced = tracer.before(msgs) if tracer is not None else None
                try:
                    status = listener(msgs, context)
                except Exception:
                    log.exception("%s: orderly listener failed; suspending the queue a moment", self.group)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    if traced is not None:
                        traced.raised = True
                if status is None:
                    status = ConsumeOrderlyStatus.SUCCESS
                elif not isinstance(status, ConsumeOrderlyStatus):
                    log.warning("%s: orderly listener returned %r; suspending the queue a moment", self.group, status)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if traced is not None:
                    traced.done(success=status in (ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT),
                                timeout=self.consume_timeout)
                if pq.dropped:
                    return
                if not self._process_orderly_result(mq, pq, msgs, status, context):
                    return

    def _process_orderly_result(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                                status: ConsumeOrderlyStatus, context: ConsumeOrderlyContext) -> bool:
        """Apply the listener's verdict; False when the worker should stop for now."""
        commit_offset = -1
        keep_going = True
        suspend = status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if context.auto_commit:
            if suspend:
                if self._check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self._later(self._suspend_time(context), mq, pq)
                    keep_going = False
                else:
                    commit_offset = pq.commit()
            else:  # SUCCESS, and the deprecated COMMIT / ROLLBACK
                commit_offset = pq.commit()
        else:
            if status is ConsumeOrderlyStatus.COMMIT:
                commit_offset = pq.commit()
            elif status is ConsumeOrderlyStatus.ROLLBACK:
                pq.rollback()
                self._later(self._suspend_time(context), mq, pq)
                keep_going = False
            elif suspend:
                if self._check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self._later(self._suspend_time(context), mq, pq)
                    keep_going = False
        if commit_offset >= 0 and not pq.dropped and self.offset_store is not None:
            self.offset_store.update(mq, commit_offset, False)
            self._drained_or_unblocked(pq)  # drained: the pull thread moves the offset past filtered ones
        return keep_going

    def _suspend_time(self, context: ConsumeOrderlyContext) -> float:
        millis = context.suspend_current_queue_time_millis
        seconds = self.suspend_current_queue_time if millis < 0 else millis / 1000
        return min(max(seconds, 0.01), 30.0)

    def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """True when the batch should be retried here; messages past the limit go to the DLQ."""
        suspend = False
        max_times = self._effective_max_reconsume_times()
        for msg in msgs:
            if msg.reconsume_times >= max_times:
                try:
                    self._send_back(msg, -1, max_times)
                except Exception:
                    log.exception("%s: moving message %s to the DLQ failed; retrying it", self.group, msg.msg_id)
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend

    def _later(self, delay: float, mq: MessageQueue, pq: ProcessQueue, *, relock: bool = False) -> None:
        loop = self._loop
        if loop is None or self._stopping:
            return

        def again() -> None:
            if relock and not pq.dropped:
                broker = self._broker
                assert broker is not None
                if mq in broker.lock_queues(self.group, [mq], self.client_id):
                    pq.locked = True
                    pq.last_lock_timestamp = self._now_ms()
            pool = self._pool
            if pool is not None and not pq.dropped and not self._stopping:
                pool.submit(lambda: self._consume_orderly_and_signal(mq, pq))

        loop.call_later(delay, again)

    def __repr__(self) -> str:
        mode = "orderly" if self._orderly else "concurrently"
        return f"<mqlite.PushConsumer group={self.group!r} {self.message_model.name} {mode} {self._state.lower()}>"

