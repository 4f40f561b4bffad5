"""The store's services: SYNC_FLUSH group commit outcomes and the clean-up rules."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from mqlite.clock import ManualClock
from mqlite.commitlog import PutMessageStatus
from mqlite.config import StoreConfig
from mqlite.store import MessageStore
from mqlite.storebase import GetMessageStatus
from support import TINY_STORE, deadline

HOUR_MS = 3_600_000


def _config(**overrides: object) -> StoreConfig:
    """The tiny store (its 64 KiB segments fill in a few dozen 1000-byte puts) with `overrides`."""
    return StoreConfig(**{**TINY_STORE, **overrides})


# -- SYNC_FLUSH --------------------------------------------------------------------------------
def test_sync_flush_put_returns_once_durable(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), _config(flush_disk_type="SYNC_FLUSH")) as store:
        result = store.put("T", 0, b"durable")
        assert result.status is PutMessageStatus.PUT_OK
        assert store.commitlog.mapped_files.flushed_where >= result.commit_log_offset + result.wrote_bytes


class _FlushClock(ManualClock):
    """A `ManualClock` whose monotonic time moves only by hand too (`ManualClock`'s is the real one), so
    a test can let exactly `sync_flush_timeout` pass while a put waits for its flush."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds


#: Manual seconds each failing flush lets pass, and the put's `sync_flush_timeout`: exact in binary.
FLUSH_STEP = 0.0625
FLUSH_TIMEOUT = 4 * FLUSH_STEP


@pytest.mark.parametrize("failure", ["no progress", "disk error"])
def test_flush_disk_timeout_keeps_the_message(tmp_path: Path, failure: str) -> None:
    clock = _FlushClock()
    config = _config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=FLUSH_TIMEOUT)
    with MessageStore(str(tmp_path), config, clock=clock) as store:
        flushed_at: list[float] = []

        def broken_flush() -> int:
            flushed_at.append(clock.seconds)
            clock.seconds += FLUSH_STEP  # the failing flush took this long
            if failure == "disk error":
                raise OSError(5, "Input/output error")
            return 0  # the disk accepted nothing

        store._group_commit._flush_to = broken_flush  # type: ignore[method-assign]
        with deadline(5):
            result = store.put("T", 0, b"stored anyway")
        assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        # The put flushed again and again while the clock was short of sync_flush_timeout, and gave up
        # once it got there: neither at the first failure nor before the timeout.
        assert flushed_at == [0.0, FLUSH_STEP, 2 * FLUSH_STEP, 3 * FLUSH_STEP]
        assert clock.seconds == FLUSH_TIMEOUT
        # RocketMQ: the message is stored; only its durability was not confirmed in time.
        assert [m.body for m in store.get_messages("T", 0, 0).messages] == [b"stored anyway"]


def test_group_commit_serves_concurrent_writers(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), _config(flush_disk_type="SYNC_FLUSH", commitlog_file_size=1 << 20)) as store:
        results: list[PutMessageStatus] = []

        def writer(n: int) -> None:
            for i in range(20):
                results.append(store.put("T", n % 4, b"w%d-%d" % (n, i)).status)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [PutMessageStatus.PUT_OK] * 160
        assert sum(store.max_offset("T", q) for q in range(4)) == 160
        assert store.commitlog.mapped_files.flushed_where >= store.commitlog.max_offset


# -- clean-up (CleanCommitLogService) ------------------------------------------------------------------
def _fill(store: MessageStore, segments: int) -> None:
    while len(store.commitlog.mapped_files.files) <= segments:
        store.put("T", 0, b"x" * 1000)


def _store(tmp_path: Path, clock: ManualClock, **overrides: object) -> MessageStore:
    return MessageStore(str(tmp_path), _config(**overrides), clock=clock)


def test_nothing_is_deleted_outside_delete_when(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000))
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    with _store(tmp_path, clock, delete_when=f"{(hour + 12) % 24:02d}", file_reserved_time=1.0,
                disk_max_used_space_ratio=95) as store:
        _fill(store, 4)
        clock.advance(10 * HOUR_MS)  # every segment is long expired
        store._clean.disk_used_ratio = lambda: 0.10  # type: ignore[method-assign]
        assert store.delete_expired_files() == 0
        assert len(store.commitlog.mapped_files.files) == 5


def test_expired_segments_go_at_delete_when_but_never_the_active_one(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000))
    hour = time.localtime(clock.now_ms() / 1000 + 10 * 3600).tm_hour
    with _store(tmp_path, clock, delete_when=f"{hour:02d}", file_reserved_time=1.0,
                delete_file_batch_max=2) as store:
        _fill(store, 4)
        store._clean.disk_used_ratio = lambda: 0.10  # type: ignore[method-assign]
        assert store.delete_expired_files() == 0  # right hour? not yet: the clock is still now
        clock.advance(10 * HOUR_MS)
        assert store.delete_expired_files() == 2  # delete_file_batch_max per round
        assert store.delete_expired_files() == 2
        assert store.delete_expired_files() == 0  # the active segment stays
        files = store.commitlog.mapped_files.files
        assert len(files) == 1
        # Consume queues follow: reading below the new minimum says OFFSET_TOO_SMALL.
        low = store.min_offset("T", 0)
        assert low > 0
        result = store.get_messages("T", 0, 0)
        assert result.status is GetMessageStatus.OFFSET_TOO_SMALL and result.next_begin_offset == low
        assert store.get_messages("T", 0, low).messages[0].commit_log_offset >= files[0].file_from_offset


def test_a_full_disk_deletes_expired_segments_at_any_hour(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000))
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    with _store(tmp_path, clock, delete_when=f"{(hour + 12) % 24:02d}", file_reserved_time=1.0) as store:
        _fill(store, 3)
        clock.advance(10 * HOUR_MS)
        store._clean.disk_used_ratio = lambda: 0.80  # above disk_max_used_space_ratio (75)
        assert store.delete_expired_files() == 3


def test_a_nearly_full_disk_deletes_unexpired_segments(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000))
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    with _store(tmp_path, clock, delete_when=f"{(hour + 12) % 24:02d}") as store:  # 72 h reserve
        _fill(store, 3)
        store._clean.disk_used_ratio = lambda: 0.86  # above the forcible ratio (0.85)
        assert store.delete_expired_files() == 3
        assert len(store.commitlog.mapped_files.files) == 1


def test_deleted_segments_stay_deleted_after_reopen(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000))
    with _store(tmp_path, clock, file_reserved_time=0.0) as store:
        _fill(store, 3)
        total = store.max_offset("T", 0)
        clock.advance(60_000)  # the manual clock started before the files were written
        assert store.delete_expired_files(force=True) == 3
        low = store.min_offset("T", 0)
    assert len(os.listdir(tmp_path / "commitlog")) == 1
    with _store(tmp_path, clock) as store:
        assert store.min_offset("T", 0) == low
        assert store.max_offset("T", 0) == total
        assert len(store.get_messages("T", 0, low, 10_000).messages) == total - low
