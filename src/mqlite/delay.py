"""Delay messages: RocketMQ's delay levels (`ScheduleMessageService`) and RocketMQ 5 timer messages.

Both are message rewrites above the store (DESIGN.md): the broker calls
`rewrite_for_delay` before `MessageStore.put`, which moves a delayed message
into a system topic with its real topic and queue in `REAL_TOPIC`/`REAL_QID`.
`DelayService` (thread `mqlite-delay`) puts each one back into its real queue
when it falls due.

Level delays (`DELAY` = 1..N, `message_delay_level`):
    topic `SCHEDULE_TOPIC_XXXX`, queue `level - 1`. The consume-queue tags code
    of such a record is its due time, `store_timestamp + delay(level)`
    (`delay_tags_code`, as `CommitLog.checkMessageAndReturnSize`), so due-ness
    is read off the 20-byte units. Each level is FIFO: one cursor per level.

Timer messages (`TIMER_DELIVER_MS` absolute, or `TIMER_DELAY_MS` / `TIMER_DELAY_SEC`
relative to now):
    topic `rmq_sys_wheel_timer`, queue 0, with `TIMER_OUT_MS` = the due time.
    RocketMQ keeps them in a timer wheel of 1 s slots and rounds the due time
    down to the slot (`deliverMs % 1000 == 0` subtracts a whole slot). mqlite
    keeps the exact millisecond and delivers from an in-memory heap in due
    order, so a timer message is never delivered before its `TIMER_OUT_MS`
    and up to a second later than RocketMQ would. The tags code of a timer
    record is `TIMER_OUT_MS` too (RocketMQ stores the tag hash there; a store
    written by a RocketMQ broker therefore has no usable due times in that queue).

Persistence: `config/delayOffset.json` in RocketMQ's shape
(`{"offsetTable": {"<level>": <offset>}, "dataVersion": {...}}`) plus mqlite's
`"timerState": {"lowWater": n, "deliveredRanges": [[start, end), ...]}`:
every timer queue offset below `lowWater` was delivered, and so was every
offset inside a range. Cursors move only after a successful delivery, so after
a crash every due message is delivered at least once (the ones delivered since
the last write, at most `flush_interval` seconds' worth, are delivered again).
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from ._service import Service
from .clock import Clock, on_advance
from .commitlog import PutResult
from .record import TagsCodeFn, default_tags_code, stored_body
from .config import load_json_file, write_json_atomic
from .errors import ConfigError, MessageNotFoundError, MQClientError
from .message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ_KEY,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    MessageExt,
    SysFlag,
)
from .message import tags_code as _tags_code  # default_tags_code's body, inlined below
from .store import MessageStore

__all__ = [
    "SCHEDULE_TOPIC", "TIMER_TOPIC", "PROPERTY_TIMER_OUT_MS", "PROPERTY_TIMER_ENQUEUE_MS",
    "PROPERTY_TIMER_DEQUEUE_MS", "DEFAULT_TIMER_MAX_DELAY_MS", "DELAY_OFFSET_FILE",
    "delay_level_to_queue_id", "queue_id_to_delay_level", "compute_deliver_timestamp",
    "rewrite_for_delay", "delay_tags_code", "rebuild_due_message", "delay_offset_path",
    "DueMessage", "DeliverFn", "DelayService",
]

log = logging.getLogger("mqlite")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
#: TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC; spelled here so delay.py needs nothing from txn.py.
_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
DEFAULT_TIMER_MAX_DELAY_MS = 259_200 * 1000  # timerMaxDelaySec: 3 days
DELAY_OFFSET_FILE = "delayOffset.json"
_UNKNOWN_LEVEL_DELAY_MS = 1000  # computeDeliverTimestamp's fallback for a level not in the table
_RETRY_AFTER_MS = 10_000  # DELAY_FOR_A_PERIOD: a failed delivery is tried again after this
_DELAY_TOPICS = frozenset((SCHEDULE_TOPIC, TIMER_TOPIC))
_TIMER_REQUESTS = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
#: Cleared from every message put back into its real topic (messageTimeUp, TimerMessageStore).
_CLEARED_ON_DELIVERY = (PROPERTY_DELAY_TIME_LEVEL, *_TIMER_REQUESTS, PROPERTY_TIMER_OUT_MS)
_NOT_REWRITTEN = (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE)

#: `deliver(topic, queue_id, body, properties, flag, sys_flag, born_timestamp, born_host,
#: reconsume_times)`: put one due message into its real queue; raises on failure.
DeliverFn = Callable[[str, int, bytes, dict[str, str], int, int, int, str, int], PutResult | None]


# -- levels -------------------------------------------------------------------------------------------
def delay_level_to_queue_id(level: int) -> int:
    """`delayLevel2QueueId`: the schedule-topic queue of a level.

    >>> delay_level_to_queue_id(3)
    2
    """
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    """`queueId2DelayLevel`: the level of a schedule-topic queue.

    >>> queue_id_to_delay_level(3)
    4
    """
    return queue_id + 1


def compute_deliver_timestamp(levels_ms: tuple[int, ...], level: int, store_timestamp: int) -> int:
    """`computeDeliverTimestamp`: store time plus the level's delay (+1000 ms for an unknown level).

    >>> compute_deliver_timestamp((5000, 8000), 2, 100), compute_deliver_timestamp((5000, 8000), 999, 0)
    (8100, 1000)
    """
    if 1 <= level <= len(levels_ms):
        return store_timestamp + levels_ms[level - 1]
    return store_timestamp + _UNKNOWN_LEVEL_DELAY_MS


def delay_offset_path(root: str) -> str:
    """Where a store keeps its delay cursors: `<root>/config/delayOffset.json`."""
    return os.path.join(root, "config", DELAY_OFFSET_FILE)


# -- the rewrite before storing ------------------------------------------------------------------------
def rewrite_for_delay(topic: str, queue_id: int, properties: Mapping[str, str], *, levels_ms: tuple[int, ...],
                      now_ms: int, max_delay_ms: int = DEFAULT_TIMER_MAX_DELAY_MS,
                      sys_flag: int = 0) -> tuple[str, int, dict[str, str]]:
    """Where a message is stored: `(topic, queue_id, properties)`, properties a new dict.

    Pure (`HookUtils.handleScheduleMessage`): the input is not changed. A
    `DELAY` level > 0 wins, drops the TIMER_* requests and is capped at the
    highest level; level <= 0 means no level delay. A timer request due
    after `now_ms` goes to the timer topic; one due now or earlier is stored
    in its real topic unchanged. Half (prepared) and rollback records are never
    rewritten: the commit record is. Raises `MQClientError` for an unreadable
    value or a timer due more than `max_delay_ms` ahead.

    >>> rewrite_for_delay("T", 3, {"DELAY": "9"}, levels_ms=(1000, 5000), now_ms=0)
    ('SCHEDULE_TOPIC_XXXX', 1, {'DELAY': '2', 'REAL_TOPIC': 'T', 'REAL_QID': '3'})
    >>> rewrite_for_delay("T", 0, {"TIMER_DELAY_MS": "1500"}, levels_ms=(1000,), now_ms=10)[2]["TIMER_OUT_MS"]
    '1510'
    """
    props = dict(properties)
    if topic in _DELAY_TOPICS or sys_flag & SysFlag.TRANSACTION_MASK in _NOT_REWRITTEN:
        return topic, queue_id, props
    level_text = props.get(PROPERTY_DELAY_TIME_LEVEL)
    level = _parse_int(PROPERTY_DELAY_TIME_LEVEL, level_text,
                       f"use a delay level 1..{len(levels_ms)}") if level_text is not None else 0
    if level > 0:
        for name in _TIMER_REQUESTS:
            props.pop(name, None)
        level = min(level, len(levels_ms))
        props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        return SCHEDULE_TOPIC, delay_level_to_queue_id(level), props
    if PROPERTY_TIMER_OUT_MS in props:
        return topic, queue_id, props  # already a timer record (HookUtils' double check)
    deliver_ms = _timer_deliver_ms(props, now_ms)
    if deliver_ms is None or deliver_ms <= now_ms:
        return topic, queue_id, props
    if deliver_ms - now_ms > max_delay_ms:
        raise MQClientError(
            f"timer message due in {deliver_ms - now_ms} ms; the longest allowed delay is {max_delay_ms} ms "
            f"({max_delay_ms // 1000} s, RocketMQ's timerMaxDelaySec): deliver it sooner or raise the limit")
    props[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return TIMER_TOPIC, 0, props


def _timer_deliver_ms(props: Mapping[str, str], now_ms: int) -> int | None:
    """The due time a timer request asks for (RocketMQ's order: SEC, then MS, then DELIVER_MS)."""
    hint = "use an integer number"
    sec = props.get(PROPERTY_TIMER_DELAY_SEC)
    if sec is not None:
        return now_ms + _parse_int(PROPERTY_TIMER_DELAY_SEC, sec, hint + " of seconds") * 1000
    ms = props.get(PROPERTY_TIMER_DELAY_MS)
    if ms is not None:
        return now_ms + _parse_int(PROPERTY_TIMER_DELAY_MS, ms, hint + " of milliseconds")
    at = props.get(PROPERTY_TIMER_DELIVER_MS)
    if at is not None:
        return _parse_int(PROPERTY_TIMER_DELIVER_MS, at, hint + " of epoch milliseconds")
    return None


def _parse_int(name: str, text: str, fix: str) -> int:
    try:
        return int(text.strip())
    except (ValueError, AttributeError):
        raise MQClientError(f"property {name} is {text!r}, not an integer; {fix}") from None


# -- tags codes: due times in the consume queues of the two system topics ---------------------------
def delay_tags_code(levels_ms: tuple[int, ...], fallback: TagsCodeFn = default_tags_code) -> TagsCodeFn:
    """The store's tags-code function: due times for delay records, `fallback` for the rest.

    A `SCHEDULE_TOPIC_XXXX` record with `DELAY` gets `store_timestamp +
    delay(min(level, max))` (section 2.3); a timer record gets `TIMER_OUT_MS`.
    Pass it as `MessageStore(tags_code_fn=...)` (it also runs during recovery).
    Runs under the put lock for every message: two string compares otherwise.

    >>> fn = delay_tags_code((5000, 8000))
    >>> fn(SCHEDULE_TOPIC, {"DELAY": "3"}, 100), fn(TIMER_TOPIC, {"TIMER_OUT_MS": "42"}, 1), fn("T", {}, 1)
    (8100, 42, 0)
    """
    levels = tuple(levels_ms)
    max_level = len(levels)
    plain = fallback is default_tags_code

    def tags_code_fn(topic: str, properties: Mapping[str, str], store_timestamp: int) -> int:
        if topic == SCHEDULE_TOPIC:
            text = properties.get(PROPERTY_DELAY_TIME_LEVEL)
            if text is not None:
                try:
                    level = min(int(text), max_level)
                except ValueError:
                    level = 0
                if level > 0:
                    return compute_deliver_timestamp(levels, level, store_timestamp)
        elif topic == TIMER_TOPIC:
            text = properties.get(PROPERTY_TIMER_OUT_MS)
            if text is not None:
                try:
                    return int(text)
                except ValueError:
                    pass
        if plain:
            return _tags_code(properties.get(PROPERTY_TAGS))  # default_tags_code, one call fewer per put
        return fallback(topic, properties, store_timestamp)

    return tags_code_fn


# -- putting a due message back ------------------------------------------------------------------------
class DueMessage(NamedTuple):
    """A due message rebuilt for its real queue: the arguments of `DeliverFn`, in order."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    reconsume_times: int


def rebuild_due_message(msg: MessageExt, *, dequeue_ms: int | None = None) -> DueMessage | None:
    """`messageTimeUp` (levels) / the timer's dequeue: the message to put into its real queue.

    Properties are copied without DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC,
    TIMER_DELAY_MS and TIMER_OUT_MS. REAL_TOPIC/REAL_QID stay on a level
    message (as RocketMQ) and are removed from a timer message (as RocketMQ 5),
    which also gets TIMER_ENQUEUE_MS (its store time in the timer topic) and
    TIMER_DEQUEUE_MS (`dequeue_ms`) when `dequeue_ms` is given. UNIQ_KEY stays,
    so `msg_id` is unchanged. The body is the stored bytes and `sys_flag` is
    kept, so a compressed body stays compressed and the consumer decompresses
    it, as with RocketMQ (which reads the record without decompressing).

    Returns None for a message that must not be delivered: one bound for the
    half-transaction topic (RocketMQ discards these), for a delay topic
    (would loop), or with a missing or unreadable REAL_TOPIC/REAL_QID.
    """
    props = dict(msg.properties)
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    real_qid = props.get(PROPERTY_REAL_QUEUE_ID, "")
    if not real_topic or real_topic == _HALF_TOPIC or real_topic in _DELAY_TOPICS \
            or not real_qid.strip().isdigit():
        return None
    for name in _CLEARED_ON_DELIVERY:
        props.pop(name, None)
    if msg.topic == TIMER_TOPIC:
        del props[PROPERTY_REAL_TOPIC], props[PROPERTY_REAL_QUEUE_ID]
        if dequeue_ms is not None:
            props[PROPERTY_TIMER_ENQUEUE_MS] = str(msg.store_timestamp)
            props[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
    body, sys_flag = stored_body(msg)
    return DueMessage(real_topic, int(real_qid), body, props, msg.flag, sys_flag, msg.born_timestamp,
                      msg.born_host, msg.reconsume_times)


# -- the service ----------------------------------------------------------------------------------------
class DelayService(Service):
    """Thread `mqlite-delay`: puts due level and timer messages back into their real queues.

    Owned by the broker: construct (loads and corrects the cursors), `start()`,
    `stop()` (ends the round, writes `delayOffset.json`, joins). `deliver` runs
    on this thread with no lock of this object held; it must raise when the
    message was not stored (the cursor then stays and the message is tried
    again after 10 s of `clock` time). An `MQClientError` from it means the
    message can never be stored: it is logged and skipped, as RocketMQ drops
    a message whose re-put throws.

    Cost while nothing is due: one round per `max_wait` seconds (or per wakeup),
    each reading one 20-byte unit per level and the timer heap's head, however
    long the backlog. Messages are delivered in order per level, and timer
    messages in due order (ties in queue order). Each timer message waiting
    costs one heap entry in memory (a tuple, about 120 bytes).
    """

    def __init__(self, store: MessageStore, deliver: DeliverFn, *, levels_ms: tuple[int, ...],
                 offsets_path: str, clock: Clock | None = None, flush_interval: float = 10.0,
                 max_wait: float = 1.0) -> None:
        super().__init__("delay", interval=0.0)  # the first round starts at once
        if not levels_ms:
            raise ConfigError("levels_ms is empty; give the delay of each level, e.g. config.delay_levels_ms")
        if flush_interval <= 0 or max_wait <= 0:
            raise ConfigError(f"flush_interval and max_wait must be > 0 seconds, got {flush_interval!r}, {max_wait!r}")
        self._store = store
        self._deliver = deliver
        self.levels_ms = tuple(levels_ms)
        self.offsets_path = offsets_path
        self._clock = clock or store.clock
        self.flush_interval = flush_interval
        self.max_wait = max_wait
        # State below is changed by the service thread only, under _state_lock, so
        # persist() and the snapshots may run on any thread.
        self._state_lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._level_offsets: dict[int, int] = {}
        self._retry_at: dict[int, int] = {}  # level (0 = timer) -> clock ms of the next attempt
        self._timer_low = 0
        self._timer_done: SortedList = SortedList()  # delivered timer queue offsets >= _timer_low
        self._timer_heap: list[tuple[int, int]] = []  # (due ms, queue offset), scanned, undelivered
        self._timer_scan = 0  # next timer queue offset to read into the heap
        self._version = {"counter": 0, "stateVersion": 0, "timestamp": 0}
        self._dirty = False
        self._next_persist = 0.0
        self._round_cv = threading.Condition()
        self._rounds_started = 0
        self._rounds_finished = 0
        self.delivered_count = 0
        self.cpu_time = 0.0  # thread CPU seconds spent in rounds (time.thread_time)
        # After a crash, records stored before it may have been delivered after the last
        # cursor save: those look for their delivered copy first (exactly once in practice).
        self._replay_until = 0 if getattr(store, "last_exit_ok", True) else store.commitlog.max_offset
        self._levels = list(range(1, len(self.levels_ms) + 1))
        self._load()
        # Due times are clock times: a test moving a ManualClock wakes the round at once.
        self._stop_watching_clock = on_advance(self._clock, self.wakeup)

    # -- state: load, correct, persist ------------------------------------------------------------------
    def _load(self) -> None:
        document = _read_offsets_document(self.offsets_path)
        table = document.get("offsetTable") if isinstance(document, dict) else None
        if isinstance(table, dict):
            for key, value in table.items():
                try:
                    self._level_offsets[int(key)] = int(value)
                except (TypeError, ValueError):
                    log.warning("%s: ignoring offsetTable entry %r: %r", self.offsets_path, key, value)
        version = document.get("dataVersion") if isinstance(document, dict) else None
        if isinstance(version, dict):
            self._version.update({k: v for k, v in version.items() if k in self._version and isinstance(v, int)})
        timer = document.get("timerState") if isinstance(document, dict) else None
        if isinstance(timer, dict):
            try:
                low = int(timer.get("lowWater", 0))
                done = [qoff for start, end in timer.get("deliveredRanges", []) for qoff in range(start, end)]
                self._timer_low, self._timer_done = low, SortedList(q for q in done if q >= low)
            except (TypeError, ValueError):
                # At least once: an unreadable state re-delivers the timer queue rather than skip any of it.
                log.warning("%s: unreadable timerState %r; timer messages are read again from offset 0",
                            self.offsets_path, timer)
        # Schedule-topic queues beyond the table (it shrank since they were written) still deliver.
        known = set(self._levels)
        for queue_id in self._store.queue_ids(SCHEDULE_TOPIC):
            if queue_id_to_delay_level(queue_id) not in known:
                self._levels.append(queue_id_to_delay_level(queue_id))
        self.correct_delay_offsets()
        self._timer_scan = self._timer_low

    def correct_delay_offsets(self) -> None:
        """`correctDelayOffset`: clamp every cursor into its queue's [min, max] offsets.

        The timer's low-water mark is clamped the same way. Call before `start()`.
        """
        store = self._store
        with self._state_lock:
            for level, offset in list(self._level_offsets.items()):
                queue_id = delay_level_to_queue_id(level)
                low, high = store.min_offset(SCHEDULE_TOPIC, queue_id), store.max_offset(SCHEDULE_TOPIC, queue_id)
                fixed = min(max(offset, low), high)
                if fixed != offset:
                    log.warning("delay level %d: offset %d is outside [%d, %d]; using %d",
                                level, offset, low, high, fixed)
                    self._level_offsets[level] = fixed
                    self._dirty = True
            low, high = store.min_offset(TIMER_TOPIC, 0), store.max_offset(TIMER_TOPIC, 0)
            fixed = min(max(self._timer_low, low), high)
            if fixed != self._timer_low:
                log.warning("timer low-water offset %d is outside [%d, %d]; using %d",
                            self._timer_low, low, high, fixed)
                self._timer_low = fixed
                self._dirty = True
            done = self._timer_done
            while done and done[0] < fixed:
                done.pop(0)
            while done and done[-1] >= high:
                done.pop()

    def offset_table(self) -> dict[int, int]:
        """Level -> next schedule-topic queue offset to deliver (a snapshot)."""
        with self._state_lock:
            return dict(self._level_offsets)

    def timer_state(self) -> tuple[int, list[int]]:
        """`(low_water, delivered offsets above it)` of the timer queue (a snapshot)."""
        with self._state_lock:
            return self._timer_low, list(self._timer_done)

    @property
    def pending_timer_count(self) -> int:
        """Timer messages read into the heap and not delivered yet."""
        return len(self._timer_heap)

    def persist(self) -> None:
        """Write `delayOffset.json` atomically (temp file, fsync, rename). Any thread."""
        with self._persist_lock:
            with self._state_lock:
                self._version["counter"] += 1
                self._version["timestamp"] = self._clock.now_ms()
                document = {
                    "offsetTable": {str(level): offset for level, offset in sorted(self._level_offsets.items())},
                    "dataVersion": dict(self._version),
                    "timerState": {"lowWater": self._timer_low, "deliveredRanges": _ranges(self._timer_done)},
                }
                self._dirty = False
            os.makedirs(os.path.dirname(self.offsets_path) or ".", exist_ok=True)
            write_json_atomic(self.offsets_path, document)

    # -- waking -----------------------------------------------------------------------------------------------
    def notify_arrival(self, topic: str, queue_id: int, next_offset: int) -> None:
        """The store's arrival listener for the delay topics (others are ignored). Any thread.

        A level is FIFO, so a new message there matters only when its level
        was caught up; a timer message may be due before all others: always wake.
        """
        if topic == SCHEDULE_TOPIC:
            level = queue_id_to_delay_level(queue_id)
            if level not in self._levels:
                self._levels = [*self._levels, level]  # copy on write: the service iterates it
            elif self._level_offsets.get(level, 0) < next_offset - 1:
                return
            self.wakeup()
        elif topic == TIMER_TOPIC:
            self.wakeup()

    def wait_round(self, timeout: float | None = 10.0) -> bool:
        """Wake the service and block until a round that began after this call has ended.

        For tests and `wait_idle()`: after advancing a `ManualClock`, everything
        due by then is delivered when this returns True (False on timeout; None waits forever).
        """
        with self._round_cv:
            target = self._rounds_started + 1
        self.wakeup()
        with self._round_cv:
            return self._round_cv.wait_for(lambda: self._rounds_finished >= target, timeout)

    # -- the loop ------------------------------------------------------------------------------------------------
    def run_once(self) -> None:
        cpu_start = time.thread_time()
        with self._round_cv:
            self._rounds_started += 1
        self.interval = self.max_wait  # if the round fails, try again after the longest wait
        try:
            now = self._clock.now_ms()
            delivered = self.delivered_count
            next_due = _earliest(self._run_levels(now), self._run_timer(now))
            # Cursors are written after every round that delivered something, so a crash
            # re-delivers at most one round's messages (RocketMQ: up to 10 s of them).
            if self._dirty and (self.delivered_count != delivered or time.monotonic() >= self._next_persist):
                self.persist()
                self._next_persist = time.monotonic() + self.flush_interval
            # The base loop sleeps `interval` before the next round: here, until the next due time.
            self.interval = self._wait_seconds(next_due)
        finally:
            with self._round_cv:
                self._rounds_finished += 1
                self._round_cv.notify_all()
            self.cpu_time += time.thread_time() - cpu_start

    def on_stop(self) -> None:
        self._stop_watching_clock()
        self.persist()

    def _wait_seconds(self, next_due: int | None) -> float:
        # The wait is in real seconds, due times in clock ms: capped at max_wait so a
        # missed wakeup is noticed within max_wait (advancing a ManualClock wakes the service).
        wait = self.max_wait
        if next_due is not None:
            wait = min(wait, max(0.0, (next_due - self._clock.now_ms()) / 1000))
        if self._dirty:
            wait = min(wait, max(0.0, self._next_persist - time.monotonic()))
        return wait

    def _run_levels(self, now: int) -> int | None:
        """Deliver what is due at the head of every level; the earliest due time left."""
        next_due: int | None = None
        store = self._store
        for level in self._levels:
            if self.is_stopping:
                return None
            retry = self._retry_at.get(level, 0)
            if retry > now:
                next_due = _earliest(next_due, retry)
                continue
            cq = store.consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level))
            if cq is None:
                continue
            offset = self._level_offsets.get(level, 0)
            if offset < cq.min_offset:  # the clean-up deleted what the cursor pointed at
                offset = cq.min_offset
                self._set_level_offset(level, offset)
            head = cq.unit_at(offset)  # O(1): the level is FIFO, only its head can be due
            if head is None and offset < cq.max_offset:
                offset = self._mend_head(level, cq, offset)
                head = cq.unit_at(offset)
            if head is None:
                continue
            due = self._due(level, head[2], now)
            if due > now:
                next_due = _earliest(next_due, due)
                continue
            next_due = _earliest(next_due, self._drain_level(level, cq, offset, now))
        return next_due

    def _mend_head(self, level: int, cq: Any, offset: int) -> int:
        """A level's head unit is damaged (written, but not a unit): read it through the store,
        which repairs it from the log when its record is there; when the record is gone, skip
        past it (logged) so the level never stalls. Returns the level's offset to go on from."""
        result = self._store.get_messages(SCHEDULE_TOPIC, cq.queue_id, offset, 1)
        if cq.unit_at(offset) is not None:
            return offset  # repaired in place
        resume = max(result.next_begin_offset, offset + 1)
        log.error("delay level %d: the unit at queue offset %d of %s is damaged and its record is gone; "
                  "skipped to %d", level, offset, SCHEDULE_TOPIC, resume)
        self._set_level_offset(level, resume)
        return resume

    def _drain_level(self, level: int, cq: Any, offset: int, now: int) -> int | None:
        for qoff, commit_log_offset, _size, code in cq.iter_units(offset, cq.max_offset):
            if self.is_stopping:
                return None
            due = self._due(level, code, now)
            if due > now:
                return due
            if not self._deliver_record(commit_log_offset, None, (SCHEDULE_TOPIC, cq.queue_id, qoff)):
                self._retry_at[level] = now + _RETRY_AFTER_MS
                return now + _RETRY_AFTER_MS
            self._set_level_offset(level, qoff + 1)
        return None

    def _due(self, level: int, tags_code: int, now: int) -> int:
        # correctDeliverTimestamp: a due time beyond now + the level's delay comes from a
        # clock that went back since the store; deliver it now rather than wait for it.
        delay = self.levels_ms[level - 1] if level <= len(self.levels_ms) else _UNKNOWN_LEVEL_DELAY_MS
        return now if tags_code > now + delay else tags_code

    def _set_level_offset(self, level: int, offset: int) -> None:
        with self._state_lock:
            self._level_offsets[level] = offset
            self._dirty = True

    def _run_timer(self, now: int) -> int | None:
        """Read new timer units into the heap, deliver the due ones; the earliest due time left."""
        cq = self._store.consume_queue(TIMER_TOPIC, 0)
        if cq is None:
            return None
        self._scan_timer(cq)
        retry = self._retry_at.get(0, 0)
        heap = self._timer_heap
        if retry > now:
            return retry
        while heap and heap[0][0] <= now:
            if self.is_stopping:
                return None
            qoff = heap[0][1]
            unit = cq.unit_at(qoff)
            # A unit gone (the clean-up deleted its file) has nothing left to deliver.
            if unit is not None and not self._deliver_record(unit[0], now, (TIMER_TOPIC, 0, qoff)):
                self._retry_at[0] = now + _RETRY_AFTER_MS
                return now + _RETRY_AFTER_MS
            heapq.heappop(heap)
            self._mark_timer_delivered(qoff)
        return heap[0][0] if heap else None

    def _scan_timer(self, cq: Any) -> None:
        start = max(self._timer_scan, cq.min_offset)
        high = cq.max_offset
        if start >= high:
            return
        units = cq.units_array(start, high)  # numpy: one copy for the whole new range
        codes = units["tags_code"].tolist()
        done, low = self._timer_done, self._timer_low
        if done or start < low:
            fresh = [(code, qoff) for qoff, code in enumerate(codes, start) if qoff >= low and qoff not in done]
        else:
            fresh = list(zip(codes, range(start, start + len(codes))))
        heap = self._timer_heap
        if len(fresh) > len(heap):
            heap.extend(fresh)  # a rebuild after a restart: heapify beats n pushes
            heapq.heapify(heap)
        else:
            for item in fresh:
                heapq.heappush(heap, item)
        self._timer_scan = start + len(codes)

    def _mark_timer_delivered(self, qoff: int) -> None:
        with self._state_lock:
            done = self._timer_done
            if qoff == self._timer_low:
                low = qoff + 1
                while done and done[0] == low:
                    done.pop(0)
                    low += 1
                self._timer_low = low
            elif qoff > self._timer_low:
                done.add(qoff)
            self._dirty = True

    def _deliver_record(self, commit_log_offset: int, timer_now: int | None, unit: tuple[str, int, int]) -> bool:
        """Put the record of the unit (topic, queue id, queue offset) at `commit_log_offset` into its
        real queue; False to try again later."""
        store = self._store
        try:
            msg: MessageExt | None = store.look_message_by_offset(commit_log_offset)
        except MessageNotFoundError:
            msg = None
        if msg is None and commit_log_offset < store.commitlog.min_offset:
            log.warning("delay: no record at commit-log offset %d any more; skipped", commit_log_offset)
            return True
        if msg is None or (msg.topic, msg.queue_id, msg.queue_offset) != unit:
            # A damaged unit (open checks only the queues' tails): read it through the store,
            # which finds the unit's own record in the log (and repairs the unit), or skips it.
            msg = self._own_record(*unit)
            if msg is None:
                log.error("delay: the unit at queue offset %d of %s/%d does not point at its record and the "
                          "commit log does not hold that record (or recovery set it aside); skipped",
                          unit[2], unit[0], unit[1])
                return True
            commit_log_offset = msg.commit_log_offset
        due = rebuild_due_message(msg, dequeue_ms=timer_now)
        if due is not None and commit_log_offset < self._replay_until and self._delivered_before(due):
            return True
        if due is None:
            log.warning("delay: message %s from %s not delivered (real topic %r, queue %r)", msg.msg_id,
                        msg.topic, msg.properties.get(PROPERTY_REAL_TOPIC), msg.properties.get(PROPERTY_REAL_QUEUE_ID))
            return True
        try:
            self._deliver(*due)
        except MQClientError:
            log.exception("delay: message %s refused by %s/%d; dropped", msg.msg_id, due.topic, due.queue_id)
            return True
        except Exception:
            log.exception("delay: putting message %s into %s/%d failed; trying again in %d ms",
                          msg.msg_id, due.topic, due.queue_id, _RETRY_AFTER_MS)
            return False
        self.delivered_count += 1
        return True


    def _own_record(self, topic: str, queue_id: int, queue_offset: int) -> MessageExt | None:
        """The message of queue offset `queue_offset`, read through the store (read repair)."""
        messages = self._store.get_messages(topic, queue_id, queue_offset, 1).messages
        return messages[0] if messages and messages[0].queue_offset == queue_offset else None

    def _delivered_before(self, due: DueMessage) -> bool:
        """True when the real topic already holds this message (delivered before a crash)."""
        uniq = due.properties.get(PROPERTY_UNIQ_KEY)
        if not uniq:
            return False
        self._store.wait_dispatched()  # the key index is built by the reput thread
        return any(m.queue_id == due.queue_id for m in self._store.query_message(due.topic, uniq, 4))


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Sorted offsets as half-open ranges: [3, 4, 5, 9] -> [[3, 6], [9, 10]].

    >>> _ranges([3, 4, 5, 9])
    [[3, 6], [9, 10]]
    """
    ranges: list[list[int]] = []
    for qoff in offsets:
        if ranges and ranges[-1][1] == qoff:
            ranges[-1][1] = qoff + 1
        else:
            ranges.append([qoff, qoff + 1])
    return ranges


def _read_offsets_document(path: str) -> dict[str, Any]:
    """`delayOffset.json` (or its `.bak`), also in fastjson's form with bare integer keys (`{1:5}`); {} if none.

    `StoreCorruptedError` when neither file reads (`load_json_file`)."""
    return load_json_file(path, lenient=True, check=_check_delay_document,
                          fix="delete it (and its .bak): every pending delayed and timer message is then "
                              "delivered again from the start of its queue (at least once)") or {}


def _check_delay_document(document: dict[str, Any]) -> None:
    for key in ("offsetTable", "dataVersion", "timerState"):
        if not isinstance(document.get(key, {}), dict):
            raise ValueError(f"{key} is not an object")
