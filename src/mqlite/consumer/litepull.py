"""`LitePullConsumer`: RocketMQ's `DefaultLitePullConsumer`, in process.

The application pulls: `poll()` returns the messages of one pull (at most
`pull_batch_size`, all from one queue) and the consumer remembers how far each
queue was handed out (its *consume offset*). Offsets are committed by
`commit_sync()`, or, with `auto_commit`, by `poll()` once every
`auto_commit_interval` and by `shutdown()`, so what a crashed application had
not finished is delivered again (at least once), never skipped.

Queues come from `subscribe()` (the group shares each topic's queues through
the allocation strategy, rebalanced when members come and go) or from
`assign()` (a fixed list chosen by the application); a consumer uses one or
the other, never both.

One thread, `mqlite-pull-<group>`, rebalances (subscribe mode), pulls every
owned queue that is neither paused nor flow-controlled without blocking, and
appends each non-empty pull result to a queue of consume requests that
`poll()` waits on. When no queue had anything the thread parks until one of
its queues grows (it is registered on the broker's arrival hub), so a `poll()`
waiting for the next message gets it within a wake-up, as RocketMQ's long
polling does. A `poll()` that frees room pokes the thread when flow control
had stopped it; `seek()`, `resume()` and `assign()` poke it too.

Locking: `_cv` (a `Condition`) guards the assigned-queue table, the request
queue, the paused set and the mode. It is never held while pulling from the
broker or calling user code; the only locks taken under it are a process
queue's own and the pull loop's wake-up.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from ..config import check_seconds
from ..errors import IllegalStateError, MQClientError
from ..filter import MessageSelector
from ..longpoll import PullStatus
from ..message import MessageExt, MessageQueue
from ..port import BrokerPort
from ..rebalance import AllocateMessageQueueStrategy
from .base import PERSIST_OFFSET_INTERVAL, REBALANCE_INTERVAL, ConsumerBase, check_range
from .processqueue import ProcessQueue, PulledRun
from .service import PullLoop
from .types import ConsumeFromWhere, MessageModel, MessageQueueListener

__all__ = ["LitePullConsumer", "TopicMessageQueueChangeListener", "ConsumeRequest"]

log = logging.getLogger("mqlite.consumer")

#: `brokerSuspendMaxTimeMillis`: the longest the pull thread parks without a wake-up.
LITE_LONG_POLLING_WAIT = 20.0
#: `DefaultLitePullConsumer.MIN_AUTOCOMMIT_INTERVAL_MILLIS`: shorter auto-commit intervals are ignored.
MIN_AUTO_COMMIT_INTERVAL = 1.0
#: `pullTimeDelayMillsWhenException`: a queue whose pull failed is tried again after 1 s.
PULL_DELAY_WHEN_EXCEPTION = 1.0
#: `topicMetadataCheckIntervalMillis`: how often topic queue sets are compared for the change listeners.
TOPIC_METADATA_CHECK_INTERVAL = 30.0

_NOT_RUNNING = "The consumer not running, please start it first."
_EXCLUSIVE = "Subscribe and assign are mutually exclusive."


class TopicMessageQueueChangeListener(Protocol):
    """Told a topic's whole new set of queues when it changes (`TopicMessageQueueChangeListener.onChanged`)."""

    def __call__(self, topic: str, message_queues: set[MessageQueue], /) -> None: ...


class ConsumeRequest:
    """One pull result's messages (`msgs`) from one queue (`mq`), waiting for `poll()` (`ConsumeRequest`).

    What `LitePullConsumer.take` returns. `pq` and `epoch` (the queue's seek
    epoch when it was pulled, see `_Assigned`) tell whether it went stale;
    `run` is the pull result in the process queue that `msgs` are the rest of.
    """

    __slots__ = ("msgs", "mq", "pq", "epoch", "run")

    def __init__(self, msgs: list[MessageExt], mq: MessageQueue, pq: ProcessQueue, epoch: int,
                 run: PulledRun) -> None:
        self.msgs = msgs
        self.mq = mq
        self.pq = pq
        self.epoch = epoch
        self.run = run


class _Assigned:
    """Per assigned queue (`AssignedMessageQueue.MessageQueueState`): where pulling and consuming stand.

    `epoch` changes on every seek, so a pull that was in flight across a seek
    is recognised and thrown away (RocketMQ cancels the queue's pull task).
    """

    __slots__ = ("pq", "pull_offset", "seek_offset", "consume_offset", "epoch", "retry_at")

    def __init__(self, pq: ProcessQueue, pull_offset: int = -1) -> None:
        self.pq = pq
        self.pull_offset = pull_offset
        self.seek_offset = -1
        self.consume_offset = -1
        self.epoch = 0
        self.retry_at = 0.0


def _seconds(name: str, value: Any, *, positive: bool = False) -> float:
    return check_seconds(name, value, positive=positive)


def _queue_list(method: str, message_queues: Any) -> list[MessageQueue]:
    """The queues of an iterable argument; `MQClientError` for anything else in it."""
    try:
        queues = list(message_queues)
    except TypeError:
        raise MQClientError(f"{method} takes an iterable of MessageQueue, got {message_queues!r}") from None
    for mq in queues:
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"{method} takes MessageQueue objects, got {mq!r}")
    return queues


def _int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise MQClientError(f"{name} must be an int, got {value!r}")
    return value


class LitePullConsumer(ConsumerBase):
    """An in-process `DefaultLitePullConsumer`: subscribe or assign, start, then `poll()`.

    Options and defaults are RocketMQ's (API.md); durations are seconds.
    `pull_threshold_size_for_queue` is in MiB. The flow-control thresholds may
    be changed on a running consumer; a negative one stops pulling (RocketMQ
    does not check them either). `long_polling_wait` bounds how long the pull
    thread parks when a wake-up is missed. `trace=True` records each hand-out in
    `RMQ_SYS_TRACE_TOPIC` (SubBefore and SubAfter, as RocketMQ's lite-pull consumer).

    Thread-safe: `poll()` may be called from several threads (each request goes
    to one of them). Also a context manager (`start()`/`shutdown()`) and an
    iterator (`for msg in consumer`, until `consumer_timeout`).

    >>> import mqlite, tempfile
    >>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
    ...     _ = broker.put_message("orders", 0, b"hello")
    ...     with LitePullConsumer(broker, "lg", auto_commit=False) as consumer:
    ...         consumer.assign(consumer.fetch_message_queues("orders"))
    ...         [m.body for m in consumer.poll(timeout=5.0)]
    [b'hello']
    """

    _kind = "lite pull consumer"
    consume_type = "CONSUME_ACTIVELY"  # RocketMQ's ConsumeType: the application pulls

    def __init__(self, broker: BrokerPort | str | os.PathLike[str], group: str, *,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0, pull_batch_size: int = 10,
                 poll_timeout: float = 5.0, consumer_timeout: float | None = None,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | int | None = None,
                 allocate_strategy: AllocateMessageQueueStrategy | None = None,
                 client_id: str | None = None,
                 pull_threshold_for_all: int = 10000, pull_threshold_for_queue: int = 1000,
                 pull_threshold_size_for_queue: int = 100, consume_max_span: int = 2000,
                 long_polling_wait: float = LITE_LONG_POLLING_WAIT,
                 offset_store_dir: str | None = None, trace: bool = False) -> None:
        super().__init__(broker, group, message_model=message_model, consume_from_where=consume_from_where,
                         consume_timestamp=consume_timestamp, allocate_strategy=allocate_strategy,
                         client_id=client_id, offset_store_dir=offset_store_dir, trace=trace)
        if not isinstance(auto_commit, bool):
            raise MQClientError(f"auto_commit must be True or False, got {auto_commit!r}")
        self.auto_commit = auto_commit
        self._auto_commit_interval = 5.0
        self.auto_commit_interval = auto_commit_interval
        self.pull_batch_size = check_range("pull_batch_size", pull_batch_size, 1, 1024)
        self.poll_timeout = _seconds("poll_timeout", poll_timeout)
        self.consumer_timeout = None if consumer_timeout is None else _seconds("consumer_timeout", consumer_timeout)
        self.pull_threshold_for_all = _int("pull_threshold_for_all", pull_threshold_for_all)
        self.pull_threshold_for_queue = _int("pull_threshold_for_queue", pull_threshold_for_queue)
        self.pull_threshold_size_for_queue = _int("pull_threshold_size_for_queue (MiB)", pull_threshold_size_for_queue)
        self.consume_max_span = _int("consume_max_span", consume_max_span)
        self.long_polling_wait = _seconds("long_polling_wait", long_polling_wait, positive=True)
        self._cv = threading.Condition()
        self._mode = "NONE"  # SUBSCRIBE or ASSIGN once chosen
        self._assigned: dict[MessageQueue, _Assigned] = {}
        self._requests: collections.deque[ConsumeRequest] = collections.deque()
        self._paused: set[MessageQueue] = set()
        self._assign_selectors: dict[str, MessageSelector] = {}
        self._topic_listeners: dict[str, TopicMessageQueueChangeListener] = {}
        self._topic_queues: dict[str, set[MessageQueue]] = {}
        self._loop: PullLoop | None = None
        self._flow_blocked = False
        self._next_auto_commit = 0.0  # RocketMQ starts at -1: the first poll commits
        self._last_rebalance = 0.0
        self._last_persist = 0.0
        self._last_metadata_check = 0.0

    # -- configuration ------------------------------------------------------------------------------------
    @property
    def auto_commit_interval(self) -> float:
        """Seconds between the commits `poll()` makes with `auto_commit`; values below 1 s are ignored."""
        return self._auto_commit_interval

    @auto_commit_interval.setter
    def auto_commit_interval(self, value: float) -> None:
        seconds = _seconds("auto_commit_interval", value)
        if seconds < MIN_AUTO_COMMIT_INTERVAL:
            log.warning("%s %s: auto_commit_interval %.3f s is below the %.0f s minimum; keeping %.3f s",
                        self._kind, self.group, seconds, MIN_AUTO_COMMIT_INTERVAL, self._auto_commit_interval)
            return
        self._auto_commit_interval = seconds

    def _choose_mode(self, mode: str) -> None:
        """`setSubscriptionType` (caller holds `_cv`)."""
        if self._mode == "NONE":
            self._mode = mode
        elif self._mode != mode:
            now, other = ("assign()", "subscribe()") if mode == "ASSIGN" else ("subscribe()", "assign()")
            raise IllegalStateError(f"{_EXCLUSIVE} This consumer already uses {other}; "
                                    f"use another LitePullConsumer instance for {now}")

    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*", *,
                  queue_listener: MessageQueueListener | None = None) -> None:
        """Consume `topic`'s messages matching a tag expression or a `MessageSelector`; queues are rebalanced.

        Works before or after `start()`. `queue_listener(topic, mq_all, mq_divided)`
        is told, on the pull thread, every time this consumer's share of the
        topic changes. Raises `IllegalStateError` after `assign()`.
        """
        if not isinstance(topic, str) or not topic.strip():
            raise MQClientError(f"topic must be a non-blank string, got {topic!r}")
        if queue_listener is not None and not callable(queue_listener):
            raise MQClientError(f"queue_listener must be callable (topic, mq_all, mq_divided), got {queue_listener!r}")
        selector = MessageSelector.of(expression)
        with self._cv:
            self._choose_mode("SUBSCRIBE")
            if queue_listener is not None:
                self._queue_listeners[topic] = queue_listener
            self._subscribe(topic, selector)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming `topic`: its queues are dropped now, their cached messages forgotten."""
        with self._cv:
            dropped = [mq for mq in self._assigned if mq.topic == topic]
            for mq in dropped:
                self._assigned.pop(mq).pq.dropped = True
            self._queue_listeners.pop(topic, None)
            self._unsubscribe(topic)
        self._watch((), dropped)

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (replacing the previous assignment); no rebalance.

        Raises `MQClientError` for None or an empty collection and
        `IllegalStateError` after `subscribe()`. With `auto_commit`, the consume
        offsets of the queues given up are committed first (as Kafka does).
        """
        mqs = _queue_list("assign", message_queues) if message_queues is not None else []
        if not mqs:
            raise MQClientError("Message queues can not be null or empty; pass the queues to consume, "
                                "e.g. consumer.fetch_message_queues(topic)")
        wanted = set(mqs)
        with self._cv:
            self._choose_mode("ASSIGN")
            gone = {mq: state for mq, state in self._assigned.items() if mq not in wanted}
        if gone and self.auto_commit and self._state == "RUNNING":
            self._commit_offsets({mq: state.consume_offset for mq, state in gone.items()}, persist=True)
        with self._cv:
            for mq in gone:
                state = self._assigned.pop(mq, None)
                if state is not None:
                    state.pq.dropped = True
            added = [mq for mq in sorted(wanted) if mq not in self._assigned]
            for mq in added:
                self._assigned[mq] = _Assigned(ProcessQueue())
        self._watch(added, gone)

    def set_sub_expression_for_assign(self, topic: str, expression: MessageSelector | str | None) -> None:
        """The filter for assigned queues of `topic` (default "*"); only before `start()`."""
        if not isinstance(topic, str) or not topic.strip():
            raise MQClientError(f"topic must be a non-blank string, got {topic!r}")
        if isinstance(expression, str) and not expression.strip():
            raise MQClientError("subExpression can not be null or empty; use '*' for every message")
        selector = MessageSelector.of(expression)
        with self._cv:
            if self._state != "CREATED":
                raise IllegalStateError("set_sub_expression_for_assign only works before start(); "
                                        "create the consumer, set the expression, then start it")
            self._choose_mode("ASSIGN")
            self._assign_selectors[topic] = selector

    def register_topic_message_queue_change_listener(self, topic: str,
                                                     listener: TopicMessageQueueChangeListener) -> None:
        """Call `listener(topic, queues)` when `topic`'s set of queues changes (checked on the pull thread
        every 30 s and whenever the broker announces a topic change). Replaces an earlier listener."""
        if not isinstance(topic, str) or not topic.strip() or not callable(listener):
            raise MQClientError(f"Topic or listener is null: need a topic name and a callable, "
                                f"got {topic!r} and {listener!r}")
        with self._cv:
            self._topic_listeners[topic] = listener
        if self._state == "RUNNING":
            queues = set(self.broker.fetch_subscribe_queues(topic))
            with self._cv:
                self._topic_queues[topic] = queues

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Join the group, start the pull thread. Raises `IllegalStateError` when started before."""
        with self._state_lock:
            if self._state != "CREATED":
                raise IllegalStateError(f"lite pull consumer {self.group!r} is {self._state.lower()}; "
                                        "create a new one")
            broker = self._attach()
            loop = PullLoop(f"pull-{self.group}", self._pull_round, self.long_polling_wait, clock=broker.clock)
            self._loop = loop
            self._wake = loop  # request_rebalance wakes the loop
            for topic in list(self._topic_listeners):
                self._topic_queues[topic] = set(broker.fetch_subscribe_queues(topic))
            self._last_metadata_check = time.monotonic()
            self._state = "RUNNING"
            with self._cv:
                assigned = list(self._assigned)
            self._watch(assigned, ())
            self._join_or_give_up()
            loop.start()

    def shutdown(self) -> None:
        """Stop pulling; with `auto_commit` commit what `poll()` handed out; persist offsets, leave the group.

        Idempotent. Blocked `poll()` calls return `[]`; the pull thread is joined.
        """
        with self._state_lock:
            if self._state != "RUNNING":
                self._state = "SHUTDOWN"
                return
            if self.auto_commit:
                self._commit_all()
            self._state = "SHUTDOWN"
        with self._cv:
            self._cv.notify_all()
        loop, broker = self._loop, self._broker
        if loop is not None:
            if broker is not None:
                broker.unwatch_arrivals(loop)
            loop.stop()
        if self._mode == "SUBSCRIBE":
            self._drop_all()
        with self._cv:
            for state in self._assigned.values():
                state.pq.dropped = True
            self._requests.clear()
            if self._mode == "SUBSCRIBE":
                self._assigned.clear()
        self._leave()

    def __enter__(self) -> LitePullConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        """True between `start()` and `shutdown()`."""
        return self._state == "RUNNING"

    # -- the GroupMember protocol -----------------------------------------------------------------------
    def subscribed_topics(self) -> set[str]:
        """Subscribed topics, or the topics of the assigned queues in assign mode."""
        if self._mode == "ASSIGN":
            with self._cv:
                return {mq.topic for mq in self._assigned}
        return super().subscribed_topics()

    def assigned_queues(self) -> set[MessageQueue]:
        """Queues this instance consumes now."""
        return self.assignment()

    def reset_offsets(self, topic: str, offsets: dict[int, int]) -> None:
        """Admin reset (the broker already committed `offsets`): drop what is cached, pull from there."""
        with self._cv:
            for mq, state in self._assigned.items():
                if mq.topic == topic and mq.queue_id in offsets:
                    self._restart_at(mq, state, offsets[mq.queue_id])
                    state.consume_offset = offsets[mq.queue_id]  # so a commit before the next pull keeps it
        self._poke()

    # -- polling ------------------------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next pull result's messages (≤ `pull_batch_size`, one queue), or `[]` after `timeout` seconds.

        `timeout` defaults to `poll_timeout`. Blocks on a condition until a
        request is ready. With `auto_commit`, first commits every queue's
        consume offset once `auto_commit_interval` has passed. Handing the
        messages out moves their queue's consume offset past them.
        """
        self._running()
        wait = self.poll_timeout if timeout is None else check_seconds("poll(timeout)", timeout)
        self.commit_if_due()
        return self._poll(float(wait))

    def _poll(self, timeout: float) -> list[MessageExt]:
        # `take` and `hand_out` under one acquisition of `_cv`, which the pull thread shares.
        with self._cv:
            request = self._next_request(time.monotonic() + timeout, None)
            if request is None:
                return []
            state = self._hand_out_locked(request, request.msgs)
            poke, self._flow_blocked = self._flow_blocked, False
        if poke:
            self._poke()
        tracer = self._tracer
        if tracer is not None and state is not None:
            tracer.polled(request.msgs)
        return request.msgs

    # -- taking and handing out: `poll()` in two steps, for adapters (`mqlite.aio`) ----------------------------
    def check_running(self) -> None:
        """Raise `IllegalStateError` unless the consumer runs (between `start()` and `shutdown()`)."""
        self._running()

    def commit_if_due(self) -> None:
        """With `auto_commit`: commit every queue's consume offset once `auto_commit_interval` has passed
        since the last time (what `poll()` does before it waits). Nothing without `auto_commit`."""
        if self.auto_commit:
            self._maybe_auto_commit()

    def take(self, timeout: float, abandoned: Callable[[], bool] | None = None) -> ConsumeRequest | None:
        """The next live pull result, waiting up to `timeout` seconds; None on timeout or shutdown.

        The first step of `poll()`: the messages are not handed out yet, so the
        consume offset has not moved; pass them to `hand_out` (or `give_back`).
        `abandoned` (checked whenever the wait is woken, see `wake_takers`) ends
        the wait early: `mqlite.aio` sets it when the coroutine waiting for this
        take is cancelled. Blocks on a condition; any thread may call it.
        """
        with self._cv:
            return self._next_request(time.monotonic() + timeout, abandoned)

    def _next_request(self, deadline: float, abandoned: Callable[[], bool] | None) -> ConsumeRequest | None:
        """`take` (caller holds `_cv`)."""
        requests = self._requests
        while True:
            while requests:
                request = requests.popleft()
                if self._state_of(request) is not None:
                    return request
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._state != "RUNNING" or (abandoned is not None and abandoned()):
                return None
            self._cv.wait(remaining)
            requests = self._requests  # `_restart_at` replaces the deque

    def hand_out(self, request: ConsumeRequest, msgs: list[MessageExt]) -> bool:
        """`msgs` of `request` (from `take`) go to the application: the queue's consume offset moves past them.

        `msgs` are the front of what `request` has not handed out yet, in order
        (all of `request.msgs`, or the next few as an iteration goes); anything
        else raises `MQClientError`. False when the request went stale since it
        was taken (a seek, a reset, the queue given up or a shutdown): its
        offset then stays where it is. Traced, a hand-out is recorded here
        (every way of polling comes here).
        """
        with self._cv:
            state = self._hand_out_locked(request, msgs)
            poke, self._flow_blocked = self._flow_blocked, False
        if poke:
            self._poke()
        tracer = self._tracer
        if tracer is not None and state is not None:
            tracer.polled(msgs)
        return state is not None

    def _hand_out_locked(self, request: ConsumeRequest, msgs: list[MessageExt]) -> _Assigned | None:
        """`hand_out` (caller holds `_cv`): the queue's state, or None when `request` went stale."""
        pq = request.pq
        offset = pq.remove_from_run(request.run, msgs)
        state = self._state_of(request)
        if state is not None and offset >= 0:
            if pq.msg_count == 0 and state.seek_offset < 0:
                # All pulled is handed out: what lies between them and the pull position was
                # filtered out (a FOUND pull skips a filtered stretch at its end too).
                offset = max(offset, state.pull_offset)
            state.consume_offset = offset
        return state

    def _state_of(self, request: ConsumeRequest) -> _Assigned | None:
        """The queue state `request` belongs to, or None when it went stale (caller holds `_cv`)."""
        state = self._assigned.get(request.mq)
        if state is None or state.pq is not request.pq or state.epoch != request.epoch or state.pq.dropped:
            return None
        return state

    def give_back(self, request: ConsumeRequest, msgs: list[MessageExt]) -> None:
        """Messages of `request` taken but never handed out (an iteration stopped mid-batch, a cancelled
        coroutine) are polled first next time; dropped when the request went stale meanwhile."""
        with self._cv:
            if msgs and self._state_of(request) is not None:
                self._requests.appendleft(ConsumeRequest(msgs, request.mq, request.pq, request.epoch, request.run))
                self._cv.notify()

    def wake_takers(self) -> None:
        """Wake every waiting `take()`: one whose `abandoned()` is true now returns None at once."""
        with self._cv:
            self._cv.notify_all()

    def __iter__(self) -> Iterator[MessageExt]:
        """Messages one by one; stops after `consumer_timeout` seconds without one (None: at shutdown).

        Each message counts as consumed when it is yielded, so leaving the loop
        early (`break`) leaves the rest of its batch for the next poll.
        """
        self._running()
        idle_since = time.monotonic()
        while self._state == "RUNNING":
            wait = max(self.poll_timeout, 0.1)
            if self.consumer_timeout is not None:
                remaining = idle_since + self.consumer_timeout - time.monotonic()
                if remaining <= 0:
                    return
                wait = min(wait, remaining)
            self.commit_if_due()
            request = self.take(wait)
            if request is None:
                continue
            msgs = request.msgs
            for i, msg in enumerate(msgs):
                if not self.hand_out(request, [msg]):
                    break  # seeked or given up meanwhile: the rest of this batch is stale
                try:
                    yield msg
                except GeneratorExit:
                    self.give_back(request, msgs[i + 1:])
                    raise
                idle_since = time.monotonic()

    # -- positions ------------------------------------------------------------------------------------------
    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Deliver `mq` from `offset` next: its cached messages and pending results are dropped.

        Also sets the queue's consume offset (and commits it). Raises
        `MQClientError` when `mq` is not assigned or `offset` is outside
        `[min_offset, max_offset]`.
        """
        broker = self._running()
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"seek takes a MessageQueue, got {mq!r}")
        with self._cv:
            assigned = mq in self._assigned
            rebalancing = self._mode == "SUBSCRIBE"
        if not assigned:
            hint = ", may be rebalancing" if rebalancing else ""
            raise MQClientError(f"The message queue is not in assigned list{hint}, message queue: {mq} "
                                "(assign() it, or seek a queue listed by assignment())")
        offset = _int("offset", offset)
        low, high = broker.min_offset(mq), broker.max_offset(mq)
        if not low <= offset <= high:
            raise MQClientError(f"Seek offset illegal, seek offset = {offset}, min offset = {low}, "
                                f"max offset = {high}")
        with self._cv:
            state = self._assigned.get(mq)
            if state is None or state.pq.dropped:
                return
            self._restart_at(mq, state, offset)
            state.consume_offset = offset
        assert self.offset_store is not None
        self.offset_store.update(mq, offset, False)
        self._poke()

    def seek_to_begin(self, mq: MessageQueue) -> None:
        """`seek(mq, min_offset)`."""
        self.seek(mq, self._running().min_offset(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        """`seek(mq, max_offset)`: only messages that arrive from now on."""
        self.seek(mq, self._running().max_offset(mq))

    def _restart_at(self, mq: MessageQueue, state: _Assigned, offset: int) -> None:
        """Forget what was pulled for `mq` and pull from `offset` (caller holds `_cv`)."""
        state.seek_offset = offset
        state.epoch += 1
        state.retry_at = 0.0
        state.pq.clear()
        if self._requests:
            self._requests = collections.deque(r for r in self._requests if r.mq != mq)

    def pause(self, message_queues: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues (no rebalance); what was already fetched may still be polled."""
        queues = _queue_list("pause", message_queues)
        with self._cv:
            self._paused.update(queues)

    def resume(self, message_queues: Iterable[MessageQueue]) -> None:
        """Pull these queues again."""
        queues = _queue_list("resume", message_queues)
        with self._cv:
            self._paused.difference_update(queues)
        self._poke()

    def is_paused(self, mq: MessageQueue) -> bool:
        """True between `pause([mq])` and `resume([mq])`."""
        return isinstance(mq, MessageQueue) and mq in self._paused

    # -- offsets ------------------------------------------------------------------------------------------
    def commit_sync(self, offsets: Mapping[MessageQueue, int] | None = None, persist: bool = True) -> None:
        """Commit every assigned queue's consume offset, or the explicit `offsets` (-1 entries are skipped).

        Explicit offsets are applied to assigned queues only (as RocketMQ) and
        also become their consume offsets. `persist` writes a broadcasting
        consumer's offset file now (clustering offsets live in the broker,
        which persists them every 5 s and on close).
        """
        broker = self._running()
        if offsets is None:
            self._commit_all(persist=persist)
            return
        if not isinstance(offsets, Mapping):
            raise MQClientError(f"offsets must be a mapping of MessageQueue to offset, got {offsets!r}")
        # Every entry is checked before any is committed: a bad one leaves all offsets as they were.
        for mq, offset in offsets.items():
            if not isinstance(mq, MessageQueue) or mq.broker_name != broker.broker_name:
                raise MQClientError(f"commit_sync: {mq!r} is not a MessageQueue of this broker "
                                    f"({broker.broker_name!r}); take queues from assignment()")
            if mq not in broker.fetch_subscribe_queues(mq.topic):
                raise MQClientError(f"commit_sync: {mq} does not exist; take queues from assignment()")
            high = broker.max_offset(mq)
            if not -1 <= _int("offset", offset) <= high:
                raise MQClientError(f"commit_sync: offset {offset} of {mq} is outside [0, {high}] (the queue's "
                                    "max offset; -1 skips the queue)")
        self._commit_offsets(dict(offsets), persist=persist)

    commit = commit_sync

    def _commit_all(self, persist: bool = False) -> None:
        """`commitAll`: every assigned queue's consume offset (broadcasting: also persisted).

        Each offset is read under the lock as it is committed and never written
        back, so a `poll()` on another thread meanwhile is not undone.
        """
        offset_store = self.offset_store
        assert offset_store is not None
        done = []
        with self._cv:
            queues = list(self._assigned)
        for mq in queues:
            with self._cv:  # held across the update, so a reset or seek cannot slip in between
                state = self._assigned.get(mq)
                offset = -1 if state is None or state.pq.dropped else state.consume_offset
                if offset >= 0:
                    offset_store.update(mq, offset, False)
                    done.append(mq)
        if (persist or not self.clustering) and done:
            offset_store.persist(done)

    def _commit_offsets(self, offsets: Mapping[MessageQueue, int], *, persist: bool) -> None:
        offset_store = self.offset_store
        assert offset_store is not None
        done = []
        for mq, offset in offsets.items():
            if offset < 0:
                continue
            with self._cv:
                state = self._assigned.get(mq)
                if state is None or state.pq.dropped:
                    log.warning("%s %s: not committing %s (not assigned)", self._kind, self.group, mq)
                    continue
                state.consume_offset = offset
            offset_store.update(mq, offset, False)
            done.append(mq)
        if persist and done:
            offset_store.persist(done)

    def _maybe_auto_commit(self) -> None:
        now = time.monotonic()
        if now >= self._next_auto_commit:
            self._next_auto_commit = now + self._auto_commit_interval
            self._commit_all()

    def committed(self, mq: MessageQueue) -> int:
        """The committed offset of `mq` in the offset store (the broker's table, or the local file), -1 when none."""
        self._running()
        assert self.offset_store is not None
        return self.offset_store.read(mq)

    def offset_for_timestamp(self, mq: MessageQueue, timestamp: int) -> int:
        """The first offset of `mq` stored at or after `timestamp` (epoch ms)."""
        broker = self._running()
        return broker.search_offset(mq, _int("timestamp", timestamp))

    def fetch_message_queues(self, topic: str) -> set[MessageQueue]:
        """The readable queues of `topic` (empty for an unknown topic)."""
        return set(self._running().fetch_subscribe_queues(topic))

    def assignment(self) -> set[MessageQueue]:
        """The queues assigned now (by `assign()` or by the last rebalance)."""
        with self._cv:
            return {mq for mq, state in self._assigned.items() if not state.pq.dropped}

    # -- rebalance hooks (pull thread) ---------------------------------------------------------------------
    def _queue_added(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        with self._cv:
            self._assigned[mq] = _Assigned(pq, offset)
        self._watch([mq], ())

    def _remove_unnecessary_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        with self._cv:
            state = self._assigned.get(mq)
            if state is not None and state.pq is pq:
                del self._assigned[mq]
        super()._remove_unnecessary_queue(mq, pq)
        self._watch((), [mq])
        return True

    def _watch(self, added: Iterable[MessageQueue], removed: Iterable[MessageQueue]) -> None:
        """Keep the arrival hub's registrations equal to the assigned queues (only while running)."""
        loop, broker = self._loop, self._broker
        if loop is None or broker is None or self._state != "RUNNING":
            return
        gone = [(mq.topic, mq.queue_id) for mq in removed]
        if gone:
            broker.unwatch_arrivals(loop, gone)
        new = [(mq.topic, mq.queue_id) for mq in added]
        if new:
            broker.watch_arrivals(loop, new)
            loop.poke()

    def _poke(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.poke()

    # -- the pull thread ----------------------------------------------------------------------------------
    def _pull_round(self) -> bool:
        """Housekeeping, then one non-blocking pull per eligible queue; True when something arrived."""
        if self._state != "RUNNING":
            return False
        now = time.monotonic()
        requested = self._rebalance_requested.is_set()
        if self._mode == "SUBSCRIBE":
            if requested or now - self._last_rebalance >= REBALANCE_INTERVAL:
                self._last_rebalance = now
                self.rebalance()
        else:
            self._rebalance_requested.clear()  # membership changes do not move assigned queues
        if self._topic_listeners and (requested or now - self._last_metadata_check >= TOPIC_METADATA_CHECK_INTERVAL):
            self._last_metadata_check = now
            self._check_topic_metadata()
        if now - self._last_persist >= PERSIST_OFFSET_INTERVAL:
            self._last_persist = now
            if self.offset_store is not None:
                self.offset_store.persist(self.assignment())
        with self._cv:
            items = list(self._assigned.items())
        progress = False
        for mq, state in items:
            if self._state != "RUNNING":
                break
            if mq in self._paused or state.pq.dropped or state.retry_at > now:
                continue
            with self._cv:  # serialised with poll(), which pokes the loop when it frees room
                blocked = self._flow_controlled(state.pq)
                self._flow_blocked = self._flow_blocked or blocked
            if blocked:
                continue
            if self._pull_one(mq, state):
                progress = True
        return progress

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        if len(self._requests) * self.pull_batch_size > self.pull_threshold_for_all:
            return True
        if pq.msg_count > self.pull_threshold_for_queue:
            return True
        if pq.msg_size >> 20 > self.pull_threshold_size_for_queue:
            return True
        return pq.max_span > self.consume_max_span

    def _next_pull_offset(self, mq: MessageQueue, state: _Assigned) -> tuple[int, int]:
        """(offset, epoch) to pull `mq` from: a pending seek, else the pull position, else `consume_from_where`."""
        with self._cv:
            if state.seek_offset >= 0:
                offset, state.seek_offset = state.seek_offset, -1
                state.consume_offset = offset
                return offset, state.epoch
            if state.pull_offset >= 0:
                return state.pull_offset, state.epoch
            epoch = state.epoch
        offset = self.compute_pull_from_where(mq)  # a broker call: outside the lock
        with self._cv:
            if state.epoch != epoch:
                return -1, epoch  # a seek came in meanwhile: the next round takes it
            state.pull_offset = offset
            return offset, epoch

    def _pull_one(self, mq: MessageQueue, state: _Assigned) -> bool:
        broker = self._broker
        assert broker is not None
        try:
            offset, epoch = self._next_pull_offset(mq, state)
            if offset < 0:
                return False
            result = broker.pull(self.group, mq, offset, self.pull_batch_size, self._filter_for(mq.topic), 0.0)
        except Exception:
            if self._state != "RUNNING":
                return False
            log.exception("%s %s: pulling %s failed; retrying in %.0f s", self._kind, self.group, mq,
                          PULL_DELAY_WHEN_EXCEPTION)
            state.retry_at = time.monotonic() + PULL_DELAY_WHEN_EXCEPTION
            loop = self._loop
            if loop is not None:
                loop.call_later(PULL_DELAY_WHEN_EXCEPTION, lambda: None)  # wakes the loop then
            return False
        msgs = result.msg_found_list
        with self._cv:
            if self._assigned.get(mq) is not state or state.epoch != epoch or state.pq.dropped:
                return False  # seeked, reset or given up while the pull ran
            if result.pull_status is PullStatus.FOUND and msgs:
                run = state.pq.put_run(msgs)
                self._requests.append(ConsumeRequest(msgs, mq, state.pq, epoch, run))
                self._cv.notify()
            elif result.pull_status is PullStatus.OFFSET_ILLEGAL:
                log.warning("%s %s: offset %d of %s is illegal; moving to %d", self._kind, self.group, offset,
                            mq, result.next_begin_offset)
            elif state.pq.msg_count == 0 and result.next_begin_offset > state.consume_offset:
                # NO_NEW_MSG or NO_MATCHED_MSG with everything pulled handed out: the consumer stands where
                # the next pull starts, past the messages its filter skipped (also those a FOUND pull skipped
                # at its end), so the committed offset does not lag behind forever (the push consumer's
                # `correctTagsOffset`; RocketMQ's lite pull consumer has none).
                state.consume_offset = result.next_begin_offset
            state.pull_offset = result.next_begin_offset
        return bool(msgs) or result.next_begin_offset > offset  # a filtered stretch: scan on at once

    def _filter_for(self, topic: str) -> MessageSelector | None:
        if self._mode == "SUBSCRIBE":
            selector = self._subscriptions.get(topic)
        else:
            selector = self._assign_selectors.get(topic)
        return None if selector is None or selector.match_all else selector

    def _check_topic_metadata(self) -> None:
        """`fetchTopicMessageQueuesAndCompare`: tell the listeners of topics whose queue set changed."""
        broker = self._broker
        assert broker is not None
        with self._cv:
            listeners = dict(self._topic_listeners)
        for topic, listener in listeners.items():
            queues = set(broker.fetch_subscribe_queues(topic))
            with self._cv:
                changed = self._topic_queues.get(topic) != queues
                self._topic_queues[topic] = queues
            if changed:
                try:
                    listener(topic, set(queues))
                except Exception:
                    log.exception("topic message queue change listener of %s failed", topic)

    def __repr__(self) -> str:
        mode = {"NONE": "unused", "SUBSCRIBE": "subscribe", "ASSIGN": "assign"}[self._mode]
        return (f"<mqlite.LitePullConsumer group={self.group!r} {self.message_model.name} {mode} "
                f"{len(self._assigned)} queues {self._state.lower()}>")
