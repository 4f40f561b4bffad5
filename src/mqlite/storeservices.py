"""The store's background services: reput (dispatch), flush and clean-up.

Each is a `Service` owned by `MessageStore`, which starts them after recovery
and stops them in the order DESIGN.md gives (reput until caught up, then
flush, then the checkpoint).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._service import Service
from .clock import SYSTEM_CLOCK, Clock
from .errors import disk_used_ratio

if TYPE_CHECKING:
    from .store import MessageStore

__all__ = ["ReputService", "FlushService", "CleanService", "GroupCommit", "REPUT_BATCH"]

log = logging.getLogger("mqlite")

#: Pending single-message dispatch entries that wake an idle reput thread (a batch put wakes it at once).
REPUT_BATCH = 512
REPUT_INTERVAL = 0.1
REPUT_STALLED_INTERVAL = 1.0


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


class GroupCommit:
    """SYNC_FLUSH: writers wait until their record is on disk; one of them flushes for all.

    The first waiter becomes the leader and flushes everything written so far
    (`fdatasync` releases the GIL, so other writers keep appending meanwhile);
    the rest wait on a condition and are released together. This is
    RocketMQ's group commit without the hand-off to a separate thread, which
    saves a context switch per batch.

    Measured limits (docs/benchmarks.md): a store into a mapped page under
    writeback faults and waits for the journal while holding the GIL, and
    every waiter costs a thread wake-up (~30 us in CPython) per cycle. Making
    the leader gather writers, or holding appends back during a flush, changed
    little; many writers reach high durable rates through `put_batch`.
    """

    def __init__(self, flush_to: Callable[[], int], timeout: float, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._flush_to = flush_to  # flushes the log; returns the offset now durable
        self._timeout = timeout
        # The deadline runs on the store's clock (real monotonic time for the system and manual
        # clocks), so a test clock can let exactly `timeout` pass during a failing flush.
        self._monotonic = clock.monotonic
        self._cv = threading.Condition()
        self._flushed = 0
        self._leader = False

    def wait(self, end_offset: int) -> bool:
        """Block until `end_offset` is durable; False after the timeout (the data stays written)."""
        monotonic = self._monotonic
        deadline = monotonic() + self._timeout
        with self._cv:
            while self._flushed < end_offset:
                remaining = deadline - monotonic()
                if remaining <= 0:
                    return False  # also a leader whose flushes make no progress (a failing disk)
                if not self._leader:
                    self._lead()
                else:
                    self._cv.wait(remaining)
            return True

    def _lead(self) -> None:
        """Flush for everyone (called with the condition held; releases it meanwhile)."""
        self._leader = True
        self._cv.release()
        flushed = 0
        try:
            flushed = self._flush_to()
        except OSError:
            # The record is written; only its durability is in doubt. Waiters time out
            # with FLUSH_DISK_TIMEOUT, as RocketMQ answers a failed group commit.
            log.exception("group commit: flushing the commit log failed")
        finally:
            self._cv.acquire()
            self._leader = False
        self._flushed = max(self._flushed, flushed)
        self._cv.notify_all()

    def reset(self, flushed: int) -> None:
        """Start from a known durable offset (after recovery)."""
        with self._cv:
            self._flushed = flushed


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
