"""Tests for mqlite.mappedfile: RocketMQ's MappedFileQueueTest in our words, plus loading rules."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mqlite.errors import StoreCorruptedError
from mqlite.mappedfile import OS_PAGE_SIZE, MappedFile, MappedFileQueue, offset_to_file_name
from mqlite.mappedfile import _zero_dirty_tail
from mqlite.storeservices import file_expired

FILE_SIZE = 1024


def _append(queue: MappedFileQueue, data: bytes) -> int:
    """Write `data` at the queue's end, rolling to a new file when it does not fit; returns its offset.

    This is what MappedFile.appendMessage + getLastMappedFile do in RocketMQ's test.
    """
    mf = queue.last_for_append()
    if mf.wrote_position + len(data) > mf.file_size:
        mf.wrote_position = mf.file_size  # the rest of the file stays unused
        mf = queue.last_for_append()
    pos = mf.wrote_position
    mf.reserve(pos + len(data))  # never a store into the map where no block is reserved
    mf.mm[pos : pos + len(data)] = data
    mf.wrote_position = pos + len(data)
    return mf.file_from_offset + pos


def _filled_queue(directory: Path, total: int, chunk: int = 64, file_size: int = FILE_SIZE) -> MappedFileQueue:
    queue = MappedFileQueue(str(directory), file_size)
    for i in range(total // chunk):
        _append(queue, bytes([i % 251]) * chunk)
    return queue


def _write_files(directory: Path, count: int, file_size: int = FILE_SIZE) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (directory / offset_to_file_name(i * file_size)).write_bytes(bytes([i % 256]) * file_size)


# -- names and rolling ---------------------------------------------------------------------------
def test_file_names_are_twenty_digit_offsets() -> None:
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1 << 30) == "00000000001073741824"
    assert len(offset_to_file_name(2**63 - 1)) == 20


def test_empty_queue_offsets() -> None:
    queue = MappedFileQueue("/nonexistent/mqlite-test", FILE_SIZE)
    queue.load()  # a missing directory is an empty queue
    assert queue.files == []
    assert queue.min_offset == -1  # as RocketMQ's getMinOffset
    assert queue.max_offset == 0
    assert queue.last is None
    assert queue.find(0) is None
    assert queue.flush(0) is True  # nothing to flush


def test_append_rolls_to_a_new_file_when_full(tmp_path: Path) -> None:
    # MappedFileQueueTest.testGetLastMappedFile / testAppendMessage: 16 KiB in 1 KiB files.
    queue = _filled_queue(tmp_path / "q", 16 * 1024)
    try:
        assert len(queue.files) == 16
        names = sorted(os.listdir(tmp_path / "q"))
        assert names == [offset_to_file_name(i * FILE_SIZE) for i in range(16)]
        assert all(os.path.getsize(tmp_path / "q" / n) == FILE_SIZE for n in names)
        assert queue.max_offset == 16 * 1024
        assert queue.min_offset == 0
        assert all(mf.is_full for mf in queue.files)
        # The next write creates file 17.
        assert _append(queue, b"x") == 16 * 1024
        assert len(queue.files) == 17
        assert queue.files[-1].end_offset == 16 * 1024 + 1
    finally:
        queue.close()


def test_a_write_that_does_not_fit_goes_to_the_next_file(tmp_path: Path) -> None:
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    try:
        assert _append(queue, b"a" * 1000) == 0
        assert _append(queue, b"b" * 100) == FILE_SIZE
        assert [mf.file_from_offset for mf in queue.files] == [0, FILE_SIZE]
    finally:
        queue.close()


def test_first_file_starts_at_the_floor_of_the_start_offset(tmp_path: Path) -> None:
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    try:
        mf = queue.last_for_append(start_offset=5 * FILE_SIZE + 17)
        assert mf.file_from_offset == 5 * FILE_SIZE
        assert queue.flushed_where == 5 * FILE_SIZE
        assert queue.min_offset == 5 * FILE_SIZE
        assert os.path.basename(mf.path) == offset_to_file_name(5 * FILE_SIZE)
    finally:
        queue.close()


# -- find ------------------------------------------------------------------------------------------
def test_find_by_offset(tmp_path: Path) -> None:
    # MappedFileQueueTest.testFindMappedFileByOffset: first, middle, last, and outside.
    queue = _filled_queue(tmp_path / "q", 4 * 1024)
    try:
        first = queue.find(0)
        assert first is not None and first.file_from_offset == 0
        assert queue.find(100).file_from_offset == 0  # type: ignore[union-attr]
        assert queue.find(FILE_SIZE - 1).file_from_offset == 0  # type: ignore[union-attr]
        assert queue.find(FILE_SIZE).file_from_offset == FILE_SIZE  # type: ignore[union-attr]
        assert queue.find(2 * FILE_SIZE + 500).file_from_offset == 2 * FILE_SIZE  # type: ignore[union-attr]
        assert queue.find(4 * FILE_SIZE - 1).file_from_offset == 3 * FILE_SIZE  # type: ignore[union-attr]
        assert queue.find(4 * FILE_SIZE) is None
        assert queue.find(100 * FILE_SIZE) is None
        assert queue.find(-1) is None
    finally:
        queue.close()


def test_find_after_leading_files_were_deleted(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 6 * 1024)
    try:
        assert queue.delete_files(lambda mf: True, batch_max=2) == 2
        assert queue.min_offset == 2 * FILE_SIZE
        assert queue.find(FILE_SIZE) is None
        assert queue.find(2 * FILE_SIZE).file_from_offset == 2 * FILE_SIZE  # type: ignore[union-attr]
        assert queue.find(5 * FILE_SIZE + 3).file_from_offset == 5 * FILE_SIZE  # type: ignore[union-attr]
    finally:
        queue.close()


# -- flush -------------------------------------------------------------------------------------------
def test_flush_advances_one_file_at_a_time(tmp_path: Path) -> None:
    # MappedFileQueueTest.testAppendMessage: each flush(0) moves flushed_where by one file and
    # returns False ("progress was made"); once everything is flushed it returns True.
    queue = _filled_queue(tmp_path / "q", 16 * 1024)
    try:
        assert queue.flushed_where == 0
        for i in range(1, 17):
            assert queue.flush(0) is False
            assert queue.flushed_where == i * FILE_SIZE
        assert queue.flush(0) is True
        assert queue.flushed_where == 16 * 1024
        assert all(mf.flushed_position == FILE_SIZE for mf in queue.files)
    finally:
        queue.close()


def test_flush_of_a_partial_file_and_least_pages(tmp_path: Path) -> None:
    size = 4 * OS_PAGE_SIZE
    queue = MappedFileQueue(str(tmp_path / "q"), size)
    try:
        _append(queue, b"x" * 100)
        # Less than one page dirty: a flush that wants 1 page does nothing.
        assert queue.flush(1) is True
        assert queue.flushed_where == 0
        # least_pages 0 flushes whatever was written.
        assert queue.flush(0) is False
        assert queue.flushed_where == 100
        assert queue.flush(0) is True
        # Two more pages: a flush wanting 2 pages goes; one wanting 3 would not have.
        _append(queue, b"y" * (2 * OS_PAGE_SIZE))
        assert queue.flush(3) is True
        assert queue.flush(2) is False
        assert queue.flushed_where == 100 + 2 * OS_PAGE_SIZE
    finally:
        queue.close()


def test_a_full_file_always_flushes(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), FILE_SIZE)
    try:
        mf.wrote_position = FILE_SIZE
        assert mf.flush(least_pages=100) == FILE_SIZE  # DefaultMappedFile.isAbleToFlush: full wins
    finally:
        mf.close()
        mf.close()  # idempotent


def test_flush_all(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 3 * 1024 + 64)
    try:
        queue.flush_all()
        assert queue.flushed_where == queue.max_offset == 3 * 1024 + 64
        assert queue.flush(0) is True
    finally:
        queue.close()


# -- truncate ------------------------------------------------------------------------------------------
def test_truncate_dirty_files_resets_to_an_offset(tmp_path: Path) -> None:
    # MappedFileQueueTest.testResetOffset / truncateDirtyFiles: files after the offset go,
    # the file holding it is cut there.
    queue = _filled_queue(tmp_path / "q", 8 * 1024)
    try:
        queue.flush_all()
        cut = 3 * FILE_SIZE + 200
        queue.truncate_dirty_files(cut)
        assert [mf.file_from_offset for mf in queue.files] == [0, FILE_SIZE, 2 * FILE_SIZE, 3 * FILE_SIZE]
        assert sorted(os.listdir(tmp_path / "q")) == [offset_to_file_name(i * FILE_SIZE) for i in range(4)]
        assert queue.max_offset == cut
        assert queue.files[-1].wrote_position == queue.files[-1].flushed_position == 200
        assert queue.flushed_where == cut
        # Appends continue at the cut.
        assert _append(queue, b"z" * 10) == cut
    finally:
        queue.close()


def test_truncate_at_a_file_boundary_keeps_an_empty_file(tmp_path: Path) -> None:
    # RocketMQ keeps the file that starts exactly at the offset, with position 0.
    queue = _filled_queue(tmp_path / "q", 4 * 1024)
    try:
        queue.truncate_dirty_files(2 * FILE_SIZE)
        assert [mf.file_from_offset for mf in queue.files] == [0, FILE_SIZE, 2 * FILE_SIZE]
        assert queue.files[-1].wrote_position == 0
        assert queue.max_offset == 2 * FILE_SIZE
        assert queue.find(2 * FILE_SIZE) is queue.files[-1]
    finally:
        queue.close()


def test_truncate_to_zero_keeps_the_first_file_empty(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 3 * 1024)
    try:
        queue.truncate_dirty_files(0)
        assert len(queue.files) == 1
        assert queue.max_offset == 0
        assert queue.flushed_where == 0
    finally:
        queue.close()


def test_truncate_can_zero_what_it_cuts(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 3 * 1024)  # chunk i holds byte i: file 1 holds 16..31
    try:
        queue.truncate_dirty_files(FILE_SIZE + 100, zero_limit=200)
        raw = (tmp_path / "q" / offset_to_file_name(FILE_SIZE)).read_bytes()
        assert raw[:64] == bytes([16]) * 64  # before the cut: untouched
        assert raw[100:300] == bytes(200)  # the cut, up to the limit
        assert raw[300:320] == bytes([20]) * 20  # beyond the limit: untouched
        assert not (tmp_path / "q" / offset_to_file_name(2 * FILE_SIZE)).exists()
        assert queue.max_offset == FILE_SIZE + 100
    finally:
        queue.close()


def test_delete_last_file(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 3 * 1024)
    try:
        queue.flush_all()
        queue.delete_last_file()
        assert [mf.file_from_offset for mf in queue.files] == [0, FILE_SIZE]
        assert not (tmp_path / "q" / offset_to_file_name(2 * FILE_SIZE)).exists()
        assert queue.max_offset == 2 * FILE_SIZE
        assert queue.flushed_where <= queue.max_offset
        assert _append(queue, b"n" * 10) == 2 * FILE_SIZE  # the file is made again on demand
    finally:
        queue.close()


# -- delete ----------------------------------------------------------------------------------------------
def test_delete_expired_files_by_time_stops_at_the_first_live_file(tmp_path: Path) -> None:
    # MappedFileQueueTest.testDeleteExpiredFileByTime: 50 files, 0-4 and 21-49 old; only the
    # leading five go, because clean-up never leaves holes.
    queue = _filled_queue(tmp_path / "q", 50 * 1024)
    try:
        now = time.time()
        hour = 3600
        for i, mf in enumerate(queue.files):
            age = 100 * hour if i < 5 or i >= 21 else 0
            os.utime(mf.path, (now - age, now - age))
        now_ms = int(now * 1000) + 1000
        deleted = queue.delete_files(lambda mf: file_expired(mf.last_modified(), now_ms, 72), batch_max=100)
        assert deleted == 5
        assert len(queue.files) == 45
        assert queue.min_offset == 5 * FILE_SIZE
        assert len(os.listdir(tmp_path / "q")) == 45
        # A second round deletes nothing: file 5 is still live.
        assert queue.delete_files(lambda mf: file_expired(mf.last_modified(), now_ms, 72), batch_max=100) == 0
    finally:
        queue.close()


def test_delete_files_with_a_victims_predicate_and_batch_max(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 50 * 1024)
    try:
        old = {i * FILE_SIZE for i in [*range(5), *range(21, 50)]}
        assert queue.delete_files(lambda mf: mf.file_from_offset in old, batch_max=3) == 3
        assert queue.min_offset == 3 * FILE_SIZE
        assert queue.delete_files(lambda mf: mf.file_from_offset in old, batch_max=10) == 2
        assert len(queue.files) == 45
        assert queue.delete_files(lambda mf: mf.file_from_offset in old, batch_max=10) == 0
    finally:
        queue.close()


def test_the_last_file_is_never_deleted(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 3 * 1024)
    try:
        assert queue.delete_files(lambda mf: True, batch_max=100) == 2
        assert len(queue.files) == 1
        assert queue.delete_files(lambda mf: True, batch_max=100) == 0
        assert len(queue.files) == 1
        assert os.listdir(tmp_path / "q") == [offset_to_file_name(2 * FILE_SIZE)]
    finally:
        queue.close()


def test_destroy_removes_files_and_directory(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 3 * 1024)
    queue.destroy()
    assert queue.files == []
    assert not (tmp_path / "q").exists()


# -- load ----------------------------------------------------------------------------------------------------
def test_load_maps_files_as_fully_written(tmp_path: Path) -> None:
    _write_files(tmp_path / "q", 3)
    (tmp_path / "q" / "notes.txt").write_text("ignored: not a 20-digit name")
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    queue.load()
    try:
        assert [mf.file_from_offset for mf in queue.files] == [0, FILE_SIZE, 2 * FILE_SIZE]
        assert all(mf.wrote_position == mf.flushed_position == FILE_SIZE for mf in queue.files)
        assert queue.max_offset == 3 * FILE_SIZE
        assert queue.find(FILE_SIZE + 5).read(5, 3) == b"\x01\x01\x01"  # type: ignore[union-attr]
    finally:
        queue.close()


def test_a_file_of_the_wrong_size_refuses_to_load(tmp_path: Path) -> None:
    _write_files(tmp_path / "q", 3)
    (tmp_path / "q" / offset_to_file_name(FILE_SIZE)).write_bytes(b"\0" * 500)
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    with pytest.raises(StoreCorruptedError, match="500 bytes"):
        queue.load()
    queue.close()


def test_a_file_of_the_wrong_size_is_skipped_when_not_strict(tmp_path: Path) -> None:
    _write_files(tmp_path / "q", 3)
    (tmp_path / "q" / offset_to_file_name(2 * FILE_SIZE)).write_bytes(b"\0" * 500)
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    queue.load(strict=False)
    try:
        assert [mf.file_from_offset for mf in queue.files] == [0, FILE_SIZE]
        assert queue.max_offset == 2 * FILE_SIZE
    finally:
        queue.close()
    # Nothing was deleted: skipping is not repairing.
    assert os.path.getsize(tmp_path / "q" / offset_to_file_name(2 * FILE_SIZE)) == 500


def test_a_missing_segment_refuses_to_load(tmp_path: Path) -> None:
    _write_files(tmp_path / "q", 3)
    os.unlink(tmp_path / "q" / offset_to_file_name(FILE_SIZE))
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    with pytest.raises(StoreCorruptedError, match="missing"):
        queue.load()
    queue.close()
    lenient = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    lenient.load(strict=False)
    assert [mf.file_from_offset for mf in lenient.files] == [0]
    lenient.close()


def test_an_empty_last_file_is_deleted_on_load(tmp_path: Path) -> None:
    # A crash while creating the next file leaves it empty; RocketMQ deletes it.
    _write_files(tmp_path / "q", 2)
    empty = tmp_path / "q" / offset_to_file_name(2 * FILE_SIZE)
    empty.write_bytes(b"")
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    queue.load()
    try:
        assert len(queue.files) == 2
        assert not empty.exists()
    finally:
        queue.close()


def test_an_empty_file_that_is_not_last_refuses_to_load(tmp_path: Path) -> None:
    _write_files(tmp_path / "q", 3)
    (tmp_path / "q" / offset_to_file_name(FILE_SIZE)).write_bytes(b"")
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    with pytest.raises(StoreCorruptedError):
        queue.load()
    queue.close()


def test_written_bytes_survive_close_and_reload(tmp_path: Path) -> None:
    queue = _filled_queue(tmp_path / "q", 2 * 1024 + 128)
    queue.flush_all()
    queue.close()
    again = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    again.load()
    try:
        assert len(again.files) == 3
        third = again.find(2 * FILE_SIZE)
        assert third is not None
        assert third.read(0, 64) == bytes([32]) * 64  # chunk 32 is the first of file 3
        assert third.read(64, 64) == bytes([33]) * 64
    finally:
        again.close()


# -- read-only mapping beside a writer -----------------------------------------------------------------------
def test_a_read_only_queue_maps_files_the_writer_creates_later(tmp_path: Path) -> None:
    writer = _filled_queue(tmp_path / "q", 1024)
    reader = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE, read_only=True)
    reader.load(strict=False)
    try:
        assert len(reader.files) == 1
        _append(writer, b"\x07" * 64)  # rolls to file 2
        mf = reader.find(FILE_SIZE + 10)
        assert mf is not None and mf.file_from_offset == FILE_SIZE
        assert mf.read(0, 64) == b"\x07" * 64
        assert reader.find(5 * FILE_SIZE) is None
    finally:
        reader.close()
        writer.close()


# -- reserving space before writing through the map ------------------------------------------------------------
def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def test_reserve_allocates_a_chunk_ahead_and_never_past_the_file(tmp_path: Path) -> None:
    size, chunk = 64 * OS_PAGE_SIZE, 4 * OS_PAGE_SIZE
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), size, reserve_chunk=chunk)
    try:
        assert mf.reserved == 0 and _allocated(mf.path) == 0  # created sparse
        mf.reserve(100)
        assert mf.reserved == OS_PAGE_SIZE + chunk  # the page of byte 99, then a chunk
        assert _allocated(mf.path) >= mf.reserved
        mf.reserve(50)  # inside: nothing to do
        assert mf.reserved == OS_PAGE_SIZE + chunk
        mf.reserve(size - 10)
        assert mf.reserved == size  # the chunk stops at the file's end
        with pytest.raises(ValueError):
            mf.reserve(size + 1)
    finally:
        mf.close()


def test_a_new_file_is_reserved_before_the_queue_shows_it(tmp_path: Path) -> None:
    queue = MappedFileQueue(str(tmp_path / "q"), 16 * OS_PAGE_SIZE, reserve_chunk=2 * OS_PAGE_SIZE)
    try:
        mf = queue.last_for_append(reserve=5000)
        assert mf.reserved == 4 * OS_PAGE_SIZE  # 5000 bytes -> 2 pages, plus the chunk
        assert _allocated(mf.path) >= mf.reserved
    finally:
        queue.close()


def test_prepared_files_are_invisible_until_created_and_deleted_when_unused(tmp_path: Path) -> None:
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    try:
        first = queue.last_for_append()
        queue.prepare_file(FILE_SIZE, 100)
        queue.prepare_file(2 * FILE_SIZE, 100)
        assert queue.files == [first] and queue.max_offset == 0 and queue.find(FILE_SIZE) is None
        second = queue.create_file(FILE_SIZE)
        assert second.reserved >= 100 and queue.files == [first, second]
    finally:
        queue.close()
    assert sorted(os.listdir(tmp_path / "q")) == [offset_to_file_name(0), offset_to_file_name(FILE_SIZE)]


def test_zeroing_a_cut_tail_fills_no_hole(tmp_path: Path) -> None:
    """Recovery zeroes what follows a cut only where data is: a hole written with zeros would need
    blocks a full disk may not have."""
    size = 256 * OS_PAGE_SIZE
    path = str(tmp_path / offset_to_file_name(0))
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(b"\x01" * 3 * OS_PAGE_SIZE)  # data, then a hole, then data again
        f.seek(200 * OS_PAGE_SIZE)
        f.write(b"\x02" * OS_PAGE_SIZE)
    before = _allocated(path)
    mf = MappedFile(path, size)
    try:
        _zero_dirty_tail(mf, OS_PAGE_SIZE, size)
        assert mf.read(0, OS_PAGE_SIZE) == b"\x01" * OS_PAGE_SIZE
        assert not any(mf.read(OS_PAGE_SIZE, size - OS_PAGE_SIZE))
        assert _allocated(path) <= before
    finally:
        mf.close()


def test_a_loaded_file_is_reserved_up_to_the_recovered_end(tmp_path: Path) -> None:
    _filled_queue(tmp_path / "q", 1024 + 256).close()
    queue = MappedFileQueue(str(tmp_path / "q"), FILE_SIZE)
    queue.load()
    try:
        queue.truncate_dirty_files(FILE_SIZE + 256)
        last = queue.last
        assert last is not None and last.reserved == last.wrote_position == 256
    finally:
        queue.close()
