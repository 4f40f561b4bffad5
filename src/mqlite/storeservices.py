"""The store's background services: reput (dispatch), flush and clean-up.

Each is a `Service` owned by `MessageStore`, which starts them after recovery
and stops them in the order DESIGN.md gives (reput until caught up, then
flush, then the checkpoint).
"""

from __future__ import annotations

import logging
import operator
import os
import threading
import time
from _thread import allocate_lock as _allocate_lock
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from threading import get_ident
from typing import TYPE_CHECKING, Any

from ._service import Service
from .clock import SYSTEM_CLOCK, Clock
from .errors import MQClientError, disk_used_ratio

if TYPE_CHECKING:
    from .store import MessageStore

__all__ = ["ReputService", "FlushService", "CleanService", "GroupCommit", "REPUT_BATCH", "LatencyHistogram",
           "HistogramSnapshot", "FLUSH_LATENCY_BUCKETS"]

log = logging.getLogger("mqlite")

#: Pending single-message dispatch entries that wake an idle reput thread (a batch put wakes it at once).
REPUT_BATCH = 512
REPUT_INTERVAL = 0.1
REPUT_STALLED_INTERVAL = 1.0
#: After a failed group-commit flush, the pause before the next try (seconds; `close` cuts it short).
FLUSH_RETRY_PAUSE = 0.01
#: While group-commit flushes keep failing, log at most one line this often (seconds).
FLUSH_FAILURE_LOG_INTERVAL = 1.0


#: Upper bounds (seconds) of the commit-log flush latency histogram's buckets (`le`, Prometheus style):
#: an `fdatasync` takes tens of microseconds on a page cache with nothing dirty, ~0.1-2 ms on an SSD,
#: tens of ms on a disk or a loaded VM; a flush slower than a second is a sick disk.
FLUSH_LATENCY_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A `LatencyHistogram` at one instant: `counts[i]` observations fell in bucket i, that is at or
    below `bounds[i]` and above the bound before it; the last count is above every bound (`+Inf`)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float
    count: int

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it) per bucket, ending with (`inf`, count): the
        `_bucket{le=...}` series of Prometheus' text format."""
        running, out = 0, []
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            running += n
            out.append((bound, running))
        return out


class LatencyHistogram:
    """A fixed-bucket histogram of durations in seconds (the commit log's flush latency).

    `observe` costs a binary search and one lock: it is called once a flush (one `fdatasync`
    round), never per message. Any thread may observe and snapshot.

    >>> h = LatencyHistogram((0.001, 0.01))
    >>> h.observe(0.0005); h.observe(0.002); h.observe(3.0)
    >>> h.snapshot().counts, h.snapshot().cumulative()[-1]
    ((1, 1, 1), (inf, 3))
    """

    __slots__ = ("bounds", "_counts", "_sum", "_lock")

    def __init__(self, bounds: tuple[float, ...] = FLUSH_LATENCY_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise MQClientError(f"histogram bounds must be distinct and ascending, got {bounds!r}")
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Count one duration (in the first bucket whose bound is at or above it)."""
        i = bisect_left(self.bounds, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        """The counts so far (a copy)."""
        with self._lock:
            counts, total = tuple(self._counts), self._sum
        return HistogramSnapshot(self.bounds, counts, total, sum(counts))


class ReputService(Service):
    """`ReputMessageService`, reduced to the index: consume-queue units are written with
    the append (under the put lock), so this thread only builds index entries.

    Woken once `REPUT_BATCH` entries wait (or a batch put, or `wait_dispatched()`),
    else every `interval`; drains the commit log's dispatch queue in order and
    hashes all pending keys together. Waking per put cost more in GIL hand-offs
    than the index work itself (bench/bench_producer.py).
    """

    def __init__(self, store: MessageStore) -> None:
        super().__init__("reput", interval=REPUT_INTERVAL)
        self.store = store

    def run_once(self) -> None:
        self.store.dispatch_pending()
        # While a full disk stops the index, retry once a second: each try hashes every pending key.
        self.interval = REPUT_STALLED_INTERVAL if self.store.index_stalled else REPUT_INTERVAL

    def has_work(self) -> bool:
        return len(self.store.commitlog.dispatch_queue) >= REPUT_BATCH and not self.store.index_stalled

    def wakeup(self) -> None:
        # Clear `idle` at once: until the woken thread gets the GIL (up to the 5 ms switch
        # interval) every put would call wakeup() again (measured: one put in seven).
        # Safe: the notify below always follows, and the loop sets `idle` itself.
        self.idle = False
        super().wakeup()

    def on_stop(self) -> None:
        self.store.dispatch_pending()  # catch up before the store flushes and closes


class FlushService(Service):
    """`FlushRealTimeService` + `FlushConsumeQueueService` + the checkpoint's periodic flush.

    Commit log: every `flush_interval_commitlog` when at least
    `flush_commitlog_least_pages` dirty pages wait, everything every
    `flush_commitlog_thorough_interval` (ASYNC_FLUSH; under SYNC_FLUSH the
    writers' group commit flushes the log and this keeps it tidy). Consume
    queues and index: every `flush_interval_consume_queue`, thoroughly every
    `flush_consume_queue_thorough_interval` (every round under SYNC_FLUSH).
    Checkpoint: every round, with the times the flushes above made durable
    (`physicMsgTimestamp` after a commit-log flush reached the end it saw,
    `logicsMsgTimestamp` after a thorough queue flush, `indexMsgTimestamp`
    when an index file fills).
    """

    def __init__(self, store: MessageStore) -> None:
        config = store.config
        super().__init__("flush", interval=config.flush_interval_commitlog)
        self.store = store
        self._last_thorough = time.monotonic()
        self._last_cq_flush = time.monotonic()
        self._last_cq_thorough = time.monotonic()

    def run_once(self) -> None:
        config = self.store.config
        now = time.monotonic()
        least = config.flush_commitlog_least_pages
        if now - self._last_thorough >= config.flush_commitlog_thorough_interval:
            least, self._last_thorough = 0, now
        self.store.flush_commitlog(least)
        if now - self._last_cq_flush >= config.flush_interval_consume_queue:
            self._last_cq_flush = now
            # SYNC_FLUSH: every round is thorough, so the checkpoint's consume-queue time stays
            # within a round of the durable log and a crashed store recovers from a recent
            # segment (RocketMQ waits for its 60 s thorough round, whatever the flush mode).
            thorough = (config.sync_flush
                        or now - self._last_cq_thorough >= config.flush_consume_queue_thorough_interval)
            if thorough:
                self._last_cq_thorough = now
            self.store.flush_queues(0 if thorough else config.flush_consume_queue_least_pages)
        self.store.checkpoint.flush()


_ACKED, _LEAD, _FAILED = 1, 2, 3  # a parked waiter's outcome, set under the mutex before its lock is released

#: What a `GroupCommit.when_durable` sink receives: the items now durable, then those that failed.
DurableSink = Callable[[list[Any], list[Any]], None]


class _Waiter:
    """A parked writer: its record's end and deadline, and `lock`, held until it is released.
    Kept in the waiter list in end order."""

    __slots__ = ("end", "deadline", "lock", "outcome")

    def __init__(self, end: int, deadline: float) -> None:
        self.end = end
        self.deadline = deadline
        self.outcome = 0
        self.lock = _allocate_lock()
        self.lock.acquire()


#: A pipelined send waiting for its flush: (end offset, deadline, item, sink).
_Pipelined = tuple[int, float, Any, DurableSink]


_END_OF = operator.attrgetter("end")


class GroupCommit:
    """SYNC_FLUSH: writers wait until their record is on disk; one flush serves everyone written before it.

    RocketMQ's `GroupCommitService`, shaped by measurements on CPython (issue 14's profile,
    docs/benchmarks.md):

    - **A writer leads when no flush runs.** It calls `fdatasync` itself (no hand-off, so one
      thread sends as fast as its disk: a dedicated flush thread cost 0.84x there).
    - **Waiters park on their own lock.** A writer that finds a flush running parks on a lock it
      holds, in a list kept in end order. After each flush the flusher takes every waiter whose
      record ends at or below the offset it read *before* its `fdatasync` and releases each lock
      once: no shared condition to re-acquire (a shared `Condition` made each woken writer convoy
      on its lock, and woke the writers of later records for nothing: 0.7 futile wake-ups a
      message at 32 threads). Later writers sleep on.
    - **The lead passes on.** When the leader's own record is durable and others wait, the lead
      goes to the oldest parked writer (released with the outcome "lead"); with no writer
      parked, to the flush thread `mqlite-group-commit` (started on first need, joined by
      `close`), which flushes while anyone waits and then sleeps. When nobody waits, no flush
      runs and the next writer leads again.
    - **Pipelined sends** (`when_durable`) wait without a thread of their own, in a deque the
      sender appends to without the mutex while a flush is under way (the flusher takes the mutex
      once a flush, not the sender once a send); their sink gets a whole group per flush. Groups are queued under the mutex in the order
      they were settled and handed over outside it by one thread at a time, so sinks see them
      in end order (it must be quick: hand the group to another thread). A watcher thread
      (`mqlite-group-commit-timeouts`, started with the first pipelined send) fails pipelined
      sends at their deadline even while a flush hangs, as RocketMQ's `FlushDiskWatcher` does.

    A flush that raises makes nothing durable (the records stay written; RocketMQ answers
    FLUSH_DISK_TIMEOUT). The leader retries, after a short pause, until its `timeout` (on the
    store's clock) passes, then gives up and passes the lead on; parked writers give up on their
    own deadline, settled under the mutex against a release that races it. A leader, parked
    writer or flush thread that leaves on any other exception (a `KeyboardInterrupt` in
    `fdatasync`) first passes the lead on, so the group commit never stalls.
    """

    def __init__(self, flush_to: Callable[[], int], timeout: float, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._flush_to = flush_to  # flushes the log; returns the offset durable (read before its fdatasync)
        self._timeout = timeout
        # The deadline runs on the store's clock (real monotonic time for the system and manual
        # clocks), so a test clock can let exactly `timeout` pass during a failing flush.
        self._monotonic = clock.monotonic
        self._mu = threading.Lock()
        self._flushed = 0
        self._flushing = False  # someone leads: a writer in `_lead` or the flush thread
        self._waiters: list[_Waiter] = []  # parked writers, in end order
        # Pipelined sends in the order they registered (their ends nearly in order: several
        # threads may append); appended without the mutex, taken from its head under it.
        self._pipelined: deque[_Pipelined] = deque()
        self._closed = False
        self._deferring: set[int] = set()  # threads whose `wait` returns at once (`deferring`)
        self._thread: threading.Thread | None = None
        self._thread_leads = False
        self._wake = threading.Lock()  # held while the flush thread has nothing to do
        self._wake.acquire()
        self._ready: deque[_Ready] = deque()  # settled pipelined groups, in settle order (`_drain`)
        self._delivering = False  # a thread is handing `_ready` to the sinks
        self._watcher: threading.Thread | None = None  # fails pipelined sends at their deadline
        self._stop = threading.Event()  # set by close: wakes the watcher and a leader pausing after a failure
        self._failures = 0  # failed flushes in a row (`_flush` logs the first with a traceback)
        self._failure_logged = 0.0

    # -- writers -------------------------------------------------------------------------------------
    def wait(self, end_offset: int) -> bool:
        """Block until `end_offset` is durable; False after the timeout (the data stays written).

        Inside `deferring()` returns True at once: that caller registers with `when_durable`.
        """
        if self._deferring and get_ident() in self._deferring:
            return True
        deadline = self._monotonic() + self._timeout
        with self._mu:
            if self._flushed >= end_offset:
                return True
            if self._closed:
                return False
            if not self._flushing:
                self._flushing = True
                waiter = None
            else:
                waiter = _Waiter(end_offset, deadline)
                insort(self._waiters, waiter, key=_END_OF)
        if waiter is None:
            return self._lead(end_offset, deadline)
        return self._park(waiter)

    def _park(self, waiter: _Waiter) -> bool:
        """Sleep on the waiter's own lock until a flush covers it, the lead passes to it, or the deadline."""
        monotonic = self._monotonic
        while True:
            try:
                remaining = waiter.deadline - monotonic()
                if remaining > 0:
                    waiter.lock.acquire(timeout=remaining)
            except BaseException:  # (a KeyboardInterrupt): leave the list, or pass on a lead handed to us
                with self._mu:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                    elif waiter.outcome == _LEAD:
                        self._pass_lead()
                raise
            with self._mu:  # settle a timeout against a release that races it
                outcome = waiter.outcome
                if not outcome:
                    if monotonic() < waiter.deadline:
                        continue
                    self._waiters.remove(waiter)
                    return False
            if outcome == _LEAD:
                return self._lead(waiter.end, waiter.deadline)
            return outcome == _ACKED

    def _lead(self, end_offset: int, deadline: float) -> bool:
        """Flush (again, after a failure) until `end_offset` is durable or the deadline passes."""
        monotonic = self._monotonic
        leading = True
        try:
            while True:
                flushed = self._flush()
                with self._mu:
                    self._queue(self._settle(flushed))
                    durable = self._flushed >= end_offset
                    done = durable or self._closed or monotonic() >= deadline
                    if done:
                        leading = False
                        self._pass_lead()
                    elif flushed < 0:
                        self._queue(self._expire())
                self._drain()
                if done:
                    return durable
                if flushed < 0:
                    self._pause(deadline - monotonic())
        except BaseException:  # (a KeyboardInterrupt in fdatasync): the lead goes on before we leave
            if leading:
                with self._mu:
                    self._pass_lead()
            raise

    # -- pipelined sends -------------------------------------------------------------------------
    def deferring(self) -> _Deferral:
        """A context in which this thread's `wait` returns at once (the put's record is written, not
        yet durable): a pipelined send then calls `when_durable` with the record's end."""
        return _Deferral(self._deferring)

    def when_durable(self, end_offset: int, item: Any, sink: DurableSink) -> None:
        """Call `sink([item], [])` once `end_offset` is durable, or `sink([], [item])` when the flush
        failed until `timeout` passed or the store closed first. Never blocks on the disk.

        `sink` gets every item a flush settled in one call, in the order they registered, on the
        thread that settled them or this one: keep it short. While a flush is under way this takes
        no lock: one deque append.
        """
        self._pipelined.append((end_offset, self._monotonic() + self._timeout, item, sink))
        # Read after the append: a leader that lets the lead go clears `_flushing` before it looks
        # at the deque (`_pass_lead`), and `close` sets `_closed` before it settles the deque, so
        # either they see this send or this sees the flag.
        if self._flushing and self._watcher is not None and not self._closed:
            return
        with self._mu:
            if self._closed:  # `close` settled the deque already: answer what came after it
                self._queue(self._settle_pipelined(self._flushed, fail_rest=True))
            else:
                if self._watcher is None:
                    self._start_watcher()
                if not self._flushing:
                    # Queued behind groups settled earlier and not yet handed over: sinks see end order.
                    self._queue(self._settle_pipelined(self._flushed))
                    if self._pipelined:
                        self._flushing = True
                        self._lead_to_thread()
        self._drain()

    # -- the lead --------------------------------------------------------------------------------
    def _flush(self) -> int:
        """One flush; the offset it made durable, or -1 when it raised.

        Any `Exception` is a failed flush (an `OSError`, a `ValueError` from a map a racing close
        unmapped): the records are written, only their durability is in doubt, and waiters time
        out with FLUSH_DISK_TIMEOUT, as RocketMQ answers a failed group commit. The first failure
        of a streak is logged with its traceback, later ones at most once a second.
        """
        try:
            flushed = self._flush_to()
        except Exception as exc:
            self._failures += 1
            now = time.monotonic()
            if self._failures == 1:
                self._failure_logged = now
                log.exception("group commit: flushing the commit log failed")
            elif now - self._failure_logged >= FLUSH_FAILURE_LOG_INTERVAL:
                self._failure_logged = now
                log.error("group commit: flushing the commit log still fails (%d times in a row): %s",
                          self._failures, exc)
            return -1
        self._failures = 0
        return flushed

    def _pause(self, remaining: float) -> None:
        """After a failed flush: wait a little before the next try (`close` cuts it short)."""
        if remaining > 0:
            self._stop.wait(min(remaining, FLUSH_RETRY_PAUSE))

    def _queue(self, ready: _Ready | None) -> None:
        """Queue a settled group for `_drain` (mutex held), so groups reach sinks in settle order."""
        if ready:
            self._ready.append(ready)

    def _drain(self) -> None:
        """Hand queued groups to their sinks, in order, outside the mutex; one thread at a time
        (a thread that finds another one delivering leaves its groups to it)."""
        while True:
            with self._mu:
                if self._delivering or not self._ready:
                    return
                self._delivering = True
                ready = self._ready.popleft()
            try:
                _deliver(ready)
            finally:
                with self._mu:
                    self._delivering = False

    def _settle(self, flushed: int, *, fail_rest: bool = False) -> _Ready | None:
        """After a flush (mutex held): release every parked writer it covered; the pipelined sends
        it covered, or all of them with `fail_rest` (the store closes), to deliver."""
        if flushed > self._flushed:
            self._flushed = flushed
        flushed = self._flushed
        waiters = self._waiters
        n = 0
        for waiter in waiters:
            if waiter.end > flushed:
                break
            waiter.outcome = _ACKED
            waiter.lock.release()
            n += 1
        if n:
            del waiters[:n]
        if not self._pipelined:
            return None
        return self._settle_pipelined(flushed, fail_rest=fail_rest)

    def _expire(self) -> _Ready | None:
        """(Mutex held.) Fail the pipelined sends past their deadline: after a failed flush, and
        by the watcher while a flush hangs."""
        if not self._pipelined:
            return None
        return self._settle_pipelined(self._flushed, expired_at=self._monotonic())

    def _settle_pipelined(self, flushed: int, *, fail_rest: bool = False,
                          expired_at: float | None = None) -> _Ready | None:
        """(Mutex held.) Take the pipelined sends from the deque's head, in order, while their
        record ends at or below `flushed` (durable), or `fail_rest` (failed: the store closes), or
        their deadline is at or before `expired_at` (failed: FLUSH_DISK_TIMEOUT).

        The deque is taken from its head only, so sends appended meanwhile are never lost; a send
        behind one that is not settled waits for the next flush or deadline (ends and deadlines
        are in registration order, but for sends of several threads racing to append).
        """
        pipelined = self._pipelined
        ready: _Ready = {}
        sink: DurableSink | None = None
        lists: tuple[list[Any], list[Any]] = ([], [])
        while pipelined:
            end, deadline, item, item_sink = pipelined[0]
            if end <= flushed:
                failed = 0
            elif fail_rest or (expired_at is not None and deadline <= expired_at):
                failed = 1
            else:
                break
            pipelined.popleft()
            if item_sink is not sink:  # (one sink, a producer's, in the common case)
                sink = item_sink
                got = ready.get(sink)
                if got is None:
                    got = ready[sink] = ([], [])
                lists = got
            lists[failed].append(item)
        return ready or None

    def _pass_lead(self) -> None:
        """The leader is done (mutex held): the lead goes on while anyone waits, else no flush runs.

        To the oldest parked writer: with `Producer.send` from 4, 8 and 32 threads that ran at
        1.1-1.4x handing it to the flush thread, with 20-30% less CPU a message (issue 14, 8
        interleaved rounds at 32 threads); the thread's extra wake-up costs more than it saves
        here. Pipelined sends have no thread to lead, so with no writer parked the thread leads.
        """
        if self._closed:
            self._flushing = False
            return
        waiters = self._waiters
        if waiters:
            waiter = waiters.pop(0)  # the oldest parked writer leads next
            waiter.outcome = _LEAD
            waiter.lock.release()
            return
        self._flushing = False
        if not self._pipelined:  # read after clearing the flag: see `when_durable`
            return
        self._flushing = True
        self._lead_to_thread()

    def _lead_to_thread(self) -> None:
        """Hand the lead to the flush thread (mutex held), starting it on first need."""
        if self._thread is None:
            # Not a daemon, whoever starts it (close joins it; design.md "Threads").
            thread = threading.Thread(target=self._thread_main, name="mqlite-group-commit", daemon=False)
            try:
                thread.start()
            except BaseException:  # (can't start a new thread): nobody leads; the next writer will
                self._flushing = False
                raise
            self._thread = thread
        self._thread_leads = True
        if self._wake.locked():
            self._wake.release()

    def _thread_main(self) -> None:
        """The flush thread: flushes while it holds the lead and anyone waits, then sleeps."""
        try:
            self._thread_loop()
        except BaseException:  # (never an Exception: `_flush` takes those) pass the lead on, then end
            with self._mu:
                self._thread = None  # the next hand-off starts a new one
                if self._thread_leads:
                    self._thread_leads = False
                    self._pass_lead()
            raise

    def _thread_loop(self) -> None:
        while True:
            # The timeout only bounds a missed wake-up; the lead is handed over with `_wake`.
            self._wake.acquire(timeout=1.0)
            with self._mu:
                if self._closed and not self._thread_leads:
                    return
                if not self._thread_leads:
                    continue
            while True:
                flushed = self._flush()
                with self._mu:
                    self._queue(self._settle(flushed))
                    if flushed < 0:
                        self._queue(self._expire())
                    closed = self._closed
                    idle = closed or not self._waiters
                    if idle:
                        self._thread_leads = self._flushing = False
                        if not closed and self._pipelined:  # read after clearing: see `when_durable`
                            idle = False
                            self._thread_leads = self._flushing = True
                self._drain()
                if closed:
                    return
                if idle:
                    break
                if flushed < 0:
                    self._pause(FLUSH_RETRY_PAUSE)

    def _start_watcher(self) -> None:
        """Start the thread that fails pipelined sends at their deadline (mutex held)."""
        watcher = threading.Thread(target=self._watch, name="mqlite-group-commit-timeouts", daemon=False)
        watcher.start()
        self._watcher = watcher

    def _watch(self) -> None:
        """RocketMQ's `FlushDiskWatcher`: a pipelined send still waiting at its deadline fails
        (FLUSH_DISK_TIMEOUT), even while a flush hangs without returning."""
        monotonic = self._monotonic
        while True:
            with self._mu:
                if self._closed:
                    return
                self._queue(self._expire())
                now = monotonic()
                # Sleep until the head's deadline (the earliest, but for sends of racing threads);
                # a send registered later has one `timeout` away.
                pipelined = self._pipelined
                sleep = (pipelined[0][1] if pipelined else now + self._timeout) - now
            self._drain()
            self._stop.wait(max(sleep, 0.001))

    # -- lifecycle -------------------------------------------------------------------------------
    def reset(self, flushed: int) -> None:
        """Start from a known durable offset (after recovery)."""
        with self._mu:
            self._flushed = flushed

    def close(self, flushed: int) -> None:
        """The store flushed up to `flushed` and closes: settle every waiter (durable or failed) and
        join the flush thread. Later waits return at once. Idempotent."""
        with self._mu:
            self._closed = True
            ready = self._settle(flushed, fail_rest=True)
            for waiter in self._waiters:
                waiter.outcome = _FAILED
                waiter.lock.release()
            self._waiters.clear()
            self._queue(ready)
            if self._wake.locked():
                self._wake.release()
            self._stop.set()
            threads = [self._thread, self._watcher]
        self._drain()
        for thread in threads:
            if thread is not None and thread is not threading.current_thread():
                thread.join()


#: Settled pipelined sends, per sink: (items durable, items failed).
_Ready = dict[DurableSink, tuple[list[Any], list[Any]]]


def _deliver(ready: _Ready) -> None:
    """Hand each sink its group (outside the mutex): a failing sink is logged, the others still run."""
    for sink, (durable, failed) in ready.items():
        try:
            sink(durable, failed)
        except Exception:
            log.exception("group commit: a durability listener failed")


class _Deferral:
    """`GroupCommit.deferring()`: marks the calling thread while it is entered."""

    __slots__ = ("_threads",)

    def __init__(self, threads: set[int]) -> None:
        self._threads = threads

    def __enter__(self) -> None:
        self._threads.add(get_ident())

    def __exit__(self, *exc_info: object) -> None:
        self._threads.discard(get_ident())


class CleanService(Service):
    """`CleanCommitLogService` + `CleanConsumeQueueService`: watch the disk, delete expired files.

    Each round first measures the disk (`MessageStore.check_disk_space`): fuller than
    `disk_space_warning_level_ratio`, the store refuses puts until a later check finds
    room (RocketMQ's `isSpaceFull` and running flags). Commit-log segments go when the
    hour is in `delete_when`, the disk is fuller than `disk_max_used_space_ratio`, or a
    manual request is pending; a segment is expired `file_reserved_time` hours after its
    last write (or at once when the disk passes the forcible ratio). Never the active
    segment; at most `delete_file_batch_max` per round; stops at the first live segment.
    Consume queues and index files whose data is gone follow, and min offsets are corrected.
    """

    def __init__(self, store: MessageStore) -> None:
        super().__init__("clean", interval=store.config.clean_resource_interval)
        self.store = store

    def run_once(self) -> None:
        self.store.check_disk_space()
        self.store.delete_expired_files()

    def disk_used_ratio(self) -> float:
        """Fraction of the commit log's disk in use: used / (used + available), as `df` and RocketMQ count it."""
        return disk_used_ratio(self.store.commitlog.mapped_files.directory
                               if os.path.isdir(self.store.commitlog.mapped_files.directory) else self.store.root)


def file_expired(mtime: float, now_ms: int, reserved_hours: float) -> bool:
    """A file is expired `reserved_hours` after its last modification."""
    return mtime * 1000 + reserved_hours * 3_600_000 <= now_ms
