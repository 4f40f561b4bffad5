"""Tests for mqlite.consumequeue and the store's queue reads.

RocketMQ's ConsumeQueueTest, DefaultMessageStoreTest.testGetOffsetInQueueByTime*, testPullSize and
testMaxOffset in our words, plus the getMessage status table (rocketmq-formats.md section 8.5).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import deadline as _deadline
from mqlite.clock import ManualClock
from mqlite.config import StoreConfig
from mqlite.consumequeue import BLANK_UNIT, CQ_DTYPE, CQ_UNIT_STRUCT, LOWER, UPPER, ConsumeQueue, file_problems
from mqlite.mappedfile import offset_to_file_name
from mqlite.message import MessageExt, java_string_hash
from mqlite.storebase import GetMessageStatus
from mqlite.store import MessageStore

T0 = 1_700_000_000_000
UNITS_PER_FILE = 8
SMALL = 20 * UNITS_PER_FILE  # a consume-queue file of 8 units



def _config(**overrides: object) -> StoreConfig:
    settings_: dict[str, object] = dict(commitlog_file_size=1 << 20, consumequeue_file_size=20 * 100,
                                        max_hash_slot_num=1000, max_index_num=4000)
    settings_.update(overrides)
    return StoreConfig(**settings_)  # type: ignore[arg-type]



@pytest.fixture
def cq(tmp_path: Path) -> Iterator[ConsumeQueue]:
    queue = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, SMALL)
    yield queue
    queue.close()


def _fill(queue: ConsumeQueue, count: int, size: int = 100, first: int = 0) -> None:
    """Units first..first+count-1, unit i pointing at commit-log offset size*i."""
    for i in range(first, first + count):
        assert queue.put(size * i, size, i * 7, i)


def _reopen(tmp_path: Path, file_size: int = SMALL) -> ConsumeQueue:
    queue = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, file_size)
    queue.load()
    queue.recover()
    return queue


def _queue_file(tmp_path: Path, logical_byte_start: int) -> Path:
    return tmp_path / "consumequeue" / "TopicTest" / "0" / offset_to_file_name(logical_byte_start)


# -- layout ------------------------------------------------------------------------------------------------
def test_unit_layout() -> None:
    assert CQ_UNIT_STRUCT.size == CQ_DTYPE.itemsize == 20
    assert CQ_UNIT_STRUCT.format == ">qiq"  # long commit-log offset, int size, long tags code
    assert BLANK_UNIT == (0, 2**31 - 1, 0)


def test_units_on_disk(cq: ConsumeQueue, tmp_path: Path) -> None:
    assert cq.put(1234, 105, -99, 0)
    assert cq.put(1339, 200, 2598919, 1)
    raw = _queue_file(tmp_path, 0).read_bytes()
    assert len(raw) == SMALL
    assert raw[:20] == struct.pack(">qiq", 1234, 105, -99)
    assert raw[20:40] == struct.pack(">qiq", 1339, 200, 2598919)
    assert raw[40:] == bytes(SMALL - 40)
    assert cq.max_commit_log_offset == 1539
    assert (cq.min_offset, cq.max_offset) == (0, 2)


# -- iteration and files ---------------------------------------------------------------------------------------
def test_iteration_over_units_across_files(cq: ConsumeQueue, tmp_path: Path) -> None:
    _fill(cq, 20)
    assert [mf.file_from_offset for mf in cq.mapped_files.files] == [0, SMALL, 2 * SMALL]
    assert sorted(os.listdir(tmp_path / "consumequeue" / "TopicTest" / "0")) == [
        offset_to_file_name(0), offset_to_file_name(SMALL), offset_to_file_name(2 * SMALL)]
    assert cq.max_offset == 20
    assert list(cq.iter_units(0, 20)) == [(i, 100 * i, 100, 7 * i) for i in range(20)]
    assert list(cq.iter_units(5, 13)) == [(i, 100 * i, 100, 7 * i) for i in range(5, 13)]
    assert list(cq.iter_units(18, 100)) == [(18, 1800, 100, 126), (19, 1900, 100, 133)]
    assert list(cq.iter_units(20, 30)) == []
    assert cq.unit_at(8) == (800, 100, 56)
    assert cq.unit_at(20) is None
    assert len(cq.read_units(6, 10)) == 2 * 20  # reads stop at the end of a file
    units = cq.units_array(0, 20)
    assert list(units["offset"]) == [100 * i for i in range(20)]
    assert list(units["tags_code"]) == [7 * i for i in range(20)]


def test_the_file_size_is_rounded_up_to_whole_units() -> None:
    assert StoreConfig(consumequeue_file_size=10).consumequeue_file_size == 20
    assert StoreConfig(consumequeue_file_size=2001).consumequeue_file_size == 2020
    assert StoreConfig(consumequeue_file_size=2000).cq_units_per_file == 100


def test_one_unit_per_file(tmp_path: Path) -> None:
    queue = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, 20)
    try:
        _fill(queue, 5)
        assert len(queue.mapped_files.files) == 5
        assert [u[0] for u in queue.iter_units(0, 5)] == list(range(5))
    finally:
        queue.close()


# -- put ----------------------------------------------------------------------------------------------------------
def test_putting_the_same_unit_again_is_idempotent(cq: ConsumeQueue) -> None:
    # ConsumeQueueTest.testPutMessagePositionInfo_buildCQRepeatedly.
    _fill(cq, 10)
    before = cq.read_units(0, 10)
    for i in range(10):
        assert cq.put(100 * i, 100, 7 * i, i)
    assert cq.max_offset == 10
    assert cq.read_units(0, 10) == before
    assert cq.max_commit_log_offset == 1000


def test_a_unit_that_skips_ahead_is_refused(cq: ConsumeQueue) -> None:
    _fill(cq, 3)
    assert cq.put(5000, 100, 0, 7) is False
    assert cq.max_offset == 3
    assert cq.put(300, 100, 0, 3) is True


def test_first_put_at_a_later_offset_fills_blank_units(cq: ConsumeQueue, tmp_path: Path) -> None:
    # ConsumeQueue.fillPreBlank: a new queue whose first unit is at queue offset 5.
    assert cq.put(4242, 100, 9, 5)
    raw = _queue_file(tmp_path, 0).read_bytes()
    for i in range(5):
        assert struct.unpack_from(">qiq", raw, i * 20) == (0, 2**31 - 1, 0)
    assert struct.unpack_from(">qiq", raw, 100) == (4242, 100, 9)
    assert cq.min_offset == 5
    assert cq.max_offset == 6
    assert cq.max_commit_log_offset == 4342
    assert cq.unit_at(5) == (4242, 100, 9)
    assert cq.put(4342, 100, 9, 6)
    assert cq.max_offset == 7


def test_first_put_beyond_the_first_file(cq: ConsumeQueue, tmp_path: Path) -> None:
    assert cq.put(100, 100, 0, 2 * UNITS_PER_FILE + 3)
    assert [mf.file_from_offset for mf in cq.mapped_files.files] == [2 * SMALL]
    assert os.listdir(tmp_path / "consumequeue" / "TopicTest" / "0") == [offset_to_file_name(2 * SMALL)]
    assert cq.min_offset == 2 * UNITS_PER_FILE + 3
    assert cq.max_offset == 2 * UNITS_PER_FILE + 4
    raw = _queue_file(tmp_path, 2 * SMALL).read_bytes()
    assert raw[:60] == struct.pack(">qiq", *BLANK_UNIT) * 3


def test_prefilled_queue_survives_reopen(cq: ConsumeQueue, tmp_path: Path) -> None:
    assert cq.put(1000, 100, 0, 5)
    assert cq.put(1100, 100, 0, 6)
    cq.close()
    again = _reopen(tmp_path)
    try:
        assert again.max_offset == 7
        assert again.max_commit_log_offset == 1200
        # The blank units are read back as units; the store corrects the minimum from the log.
        again.correct_min_offset(1000)
        assert again.min_offset == 5
    finally:
        again.close()


# -- correct_min_offset -----------------------------------------------------------------------------------------
def test_correct_min_offset(tmp_path: Path) -> None:
    # ConsumeQueueTest.testCorrectMinOffset: 10000 units of size 100, unit i at 100*i.
    queue = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, 20 * 1000)
    try:
        for i in range(10000):
            assert queue.put(100 * i, 100, 0, i)
        assert queue.max_offset == 10000
        queue.correct_min_offset(0)
        assert queue.min_offset == 0
        queue.min_logic_offset = 100  # bytes: unit 5
        queue.correct_min_offset(2000)
        assert queue.min_offset == 20
        queue.min_logic_offset = (10000 - 1) * 20  # the last unit
        queue.correct_min_offset(1_000_000)
        assert queue.min_logic_offset == 200_000
        assert queue.min_offset == queue.max_offset == 10000
    finally:
        queue.close()


def test_correct_min_offset_between_units_and_never_backwards(cq: ConsumeQueue) -> None:
    _fill(cq, 20)
    cq.correct_min_offset(150)  # inside unit 1: unit 2 is the first whole record
    assert cq.min_offset == 2
    cq.correct_min_offset(0)
    assert cq.min_offset == 2  # the minimum never moves back
    cq.correct_min_offset(1900)
    assert cq.min_offset == 19


def test_correct_min_offset_on_an_empty_queue(cq: ConsumeQueue) -> None:
    cq.correct_min_offset(12345)
    assert (cq.min_offset, cq.max_offset) == (0, 0)


# -- recover ---------------------------------------------------------------------------------------------------------
def test_recover_keeps_everything_valid(cq: ConsumeQueue, tmp_path: Path) -> None:
    _fill(cq, 21)
    cq.close()
    again = _reopen(tmp_path)
    try:
        assert again.max_offset == 21
        assert again.max_commit_log_offset == 2100
        assert again.min_offset == 0
        assert [u[0] for u in again.iter_units(0, 21)] == list(range(21))
    finally:
        again.close()


@pytest.mark.parametrize("damage", ["zeros", "negative_offset", "zero_size", "garbage"])
def test_recover_after_a_torn_last_unit_keeps_the_valid_prefix(cq: ConsumeQueue, tmp_path: Path,
                                                                damage: str) -> None:
    _fill(cq, 21)  # units 16..20 in the third file
    cq.close()
    path = _queue_file(tmp_path, 2 * SMALL)
    raw = bytearray(path.read_bytes())
    at = 4 * 20  # unit 20
    if damage == "zeros":
        raw[at : at + 20] = bytes(20)
    elif damage == "negative_offset":
        raw[at : at + 8] = struct.pack(">q", -1)
    elif damage == "zero_size":
        raw[at + 8 : at + 12] = bytes(4)  # the offset was written, the size never was
    else:
        raw[at : at + 20] = b"\xff" * 20
    path.write_bytes(bytes(raw))
    again = _reopen(tmp_path)
    try:
        assert again.max_offset == 20
        assert again.max_commit_log_offset == 2000
        assert again.unit_at(19) == (1900, 100, 133)
        assert again.unit_at(20) is None
        assert again.put(2000, 100, 0, 20)  # the queue takes the unit again
        assert again.max_offset == 21
    finally:
        again.close()


def test_recover_stops_at_damage_in_the_middle_of_the_last_file(cq: ConsumeQueue, tmp_path: Path) -> None:
    _fill(cq, 22)
    cq.close()
    path = _queue_file(tmp_path, 2 * SMALL)
    raw = bytearray(path.read_bytes())
    raw[20:40] = bytes(20)  # unit 17; units 18..21 behind it are dropped too
    path.write_bytes(bytes(raw))
    again = _reopen(tmp_path)
    try:
        assert again.max_offset == 17
        assert again.max_commit_log_offset == 1700
    finally:
        again.close()


def test_a_bad_unit_in_a_full_file_is_damage_not_the_end(cq: ConsumeQueue, tmp_path: Path) -> None:
    # Once recover cut the queue at such a unit and deleted the later files, losing their units;
    # now unit_damage names it (the store rebuilds the queue from the commit log) and recover
    # ends in the newest file holding units, so a reader still sees the files behind it.
    _fill(cq, 22)
    cq.close()
    path = _queue_file(tmp_path, SMALL)
    raw = bytearray(path.read_bytes())
    raw[3 * 20 : 4 * 20] = bytes(20)  # unit 11 of the second file
    path.write_bytes(bytes(raw))
    again = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, SMALL)
    again.load()
    try:
        damage = again.unit_damage()
        assert damage is not None and f"{SMALL:020d}: queue offset 11: invalid unit (zeroed)" in damage
        again.recover()
        assert again.max_offset == 22
        assert _queue_file(tmp_path, 2 * SMALL).exists()
    finally:
        again.close()


@pytest.mark.parametrize("damage", ["gap", "short", "long", "misnamed"])
def test_file_problems_name_the_file(cq: ConsumeQueue, tmp_path: Path, damage: str) -> None:
    _fill(cq, 30)
    cq.close()
    directory = _queue_file(tmp_path, 0).parent
    if damage == "gap":
        _queue_file(tmp_path, SMALL).unlink()
        expected = (offset_to_file_name(SMALL), f"missing; {UNITS_PER_FILE} units lost")
    elif damage == "short":
        os.truncate(_queue_file(tmp_path, SMALL), 50)
        expected = (offset_to_file_name(SMALL), f"{SMALL - 50} bytes short ({UNITS_PER_FILE - 2} units missing)")
    elif damage == "long":
        os.truncate(_queue_file(tmp_path, SMALL), SMALL + 3)
        expected = (offset_to_file_name(SMALL), "3 bytes too long (files here are 160 bytes)")
    else:
        _queue_file(tmp_path, SMALL).rename(directory / offset_to_file_name(SMALL + 20))
        expected = (offset_to_file_name(SMALL + 20), "its name is not a multiple of the file size 160")
    assert expected in file_problems(str(directory), SMALL)
    assert file_problems(str(_queue_file(tmp_path, 0).parent.parent / "1"), SMALL) == []


def test_recover_of_an_exactly_full_last_file(cq: ConsumeQueue, tmp_path: Path) -> None:
    _fill(cq, 2 * UNITS_PER_FILE)
    cq.close()
    again = _reopen(tmp_path)
    try:
        assert again.max_offset == 16
        assert again.put(1600, 100, 0, 16)
        assert [mf.file_from_offset for mf in again.mapped_files.files] == [0, SMALL, 2 * SMALL]
    finally:
        again.close()


# -- truncate_dirty ---------------------------------------------------------------------------------------------------
def test_truncate_dirty_drops_units_at_or_beyond_the_offset(cq: ConsumeQueue, tmp_path: Path) -> None:
    _fill(cq, 20)
    cq.truncate_dirty(1750)  # inside unit 17: 17 points at 1700 < 1750, so it stays
    assert cq.max_offset == 18
    assert cq.max_commit_log_offset == 1800
    cq.truncate_dirty(1700)  # unit 17 starts at 1700: dropped
    assert cq.max_offset == 17
    assert cq.max_commit_log_offset == 1700
    # What was cut is zeroed, so no reader (or later recovery) takes it for units.
    raw = _queue_file(tmp_path, 2 * SMALL).read_bytes()
    assert raw[20:] == bytes(SMALL - 20)
    assert struct.unpack_from(">qiq", raw, 0) == (1600, 100, 112)
    assert cq.put(1700, 100, 0, 17)  # re-dispatch after recovery continues here
    assert cq.max_offset == 18


def test_truncate_dirty_beyond_everything_changes_nothing(cq: ConsumeQueue) -> None:
    _fill(cq, 10)
    cq.truncate_dirty(10_000)
    assert cq.max_offset == 10
    assert cq.max_commit_log_offset == 1000


def test_truncate_dirty_inside_an_earlier_file(cq: ConsumeQueue) -> None:
    _fill(cq, 20)
    with _deadline(5):  # this once looped forever
        cq.truncate_dirty(1000)  # unit 10, in the second file; the third file goes
    assert cq.max_offset == 10
    assert cq.max_commit_log_offset == 1000
    assert [mf.file_from_offset for mf in cq.mapped_files.files] == [0, SMALL]


def test_truncate_dirty_that_empties_the_last_file(cq: ConsumeQueue) -> None:
    _fill(cq, 9)  # units 0..7 fill the first file, unit 8 is alone in the second
    with _deadline(5):  # this once looped forever
        cq.truncate_dirty(800)
    assert cq.max_offset == 8
    assert cq.max_commit_log_offset == 800


def test_truncate_dirty_of_every_unit_resets_max_commit_log_offset(cq: ConsumeQueue) -> None:
    assert cq.put(1000, 100, 0, 0)
    cq.truncate_dirty(1000)
    assert cq.max_offset == 0
    assert cq.max_commit_log_offset <= 1000
    assert cq.put(1000, 90, 0, 0)  # a new record where the dropped one was
    assert cq.max_offset == 1


def test_truncate_dirty_keeps_prefilled_blank_units(cq: ConsumeQueue) -> None:
    assert cq.put(1000, 100, 0, 3)
    assert cq.put(1100, 100, 0, 4)
    cq.truncate_dirty(1100)
    assert cq.max_offset == 4
    assert cq.min_offset == 3
    assert cq.unit_at(3) == (1000, 100, 0)


# -- delete_expired ---------------------------------------------------------------------------------------------------
def test_delete_expired_by_commit_log_min_offset(cq: ConsumeQueue, tmp_path: Path) -> None:
    # DefaultMessageStore's CleanConsumeQueueService / testDeleteExpiredFileByOffset.
    _fill(cq, 4 * UNITS_PER_FILE + 2)  # five files
    assert cq.delete_expired(799) == 0  # file 0 ends with unit 7: 700 + 100 > 799
    assert cq.delete_expired(800) == 1
    assert cq.min_offset == UNITS_PER_FILE
    assert not _queue_file(tmp_path, 0).exists()
    assert cq.delete_expired(10_000, batch_max=2) == 2
    assert cq.min_offset == 3 * UNITS_PER_FILE
    assert cq.delete_expired(10_000) == 1  # never the last file
    assert len(cq.mapped_files.files) == 1
    assert cq.max_offset == 4 * UNITS_PER_FILE + 2
    cq.correct_min_offset(10_000)
    assert cq.min_offset == cq.max_offset


# -- offset by time on one queue ----------------------------------------------------------------------------------------
def test_offset_by_time_binary_search(cq: ConsumeQueue) -> None:
    _fill(cq, 20)
    times = {100 * i: T0 + 10 * i for i in range(20)}

    def store_time_at(offset: int, size: int) -> int:
        return times.get(offset, -1)

    for i in range(20):
        assert cq.offset_by_time(T0 + 10 * i, store_time_at) == i
        assert cq.offset_by_time(T0 + 10 * i - 2, store_time_at, LOWER) == i
        assert cq.offset_by_time(T0 + 10 * i, store_time_at, UPPER) == i
        assert cq.offset_by_time(T0 + 10 * i + 2, store_time_at, UPPER) == i
    assert cq.offset_by_time(T0 - 20_000, store_time_at) == 0
    assert cq.offset_by_time(T0 + 10_000, store_time_at) == 20  # all earlier: the max offset
    assert cq.offset_by_time(T0 - 20_000, store_time_at, UPPER) == 0
    assert cq.offset_by_time(T0 + 10_000, store_time_at, UPPER) == 19
    cq.min_logic_offset = 5 * 20
    assert cq.offset_by_time(T0 - 20_000, store_time_at) == 5  # all later: the min offset


def test_offset_by_time_on_an_empty_queue(cq: ConsumeQueue) -> None:
    assert cq.offset_by_time(T0, lambda o, s: T0) == 0


# ======================================================================================================================
# Through the store
# ======================================================================================================================
def test_offset_in_queue_by_time(tmp_path: Path) -> None:
    # DefaultMessageStoreTest.testGetOffsetInQueueByTime, _TimestampIsSkewing, _MinOffset (10 ms apart).
    clock = ManualClock()
    with MessageStore(str(tmp_path / "s"), _config(), clock=clock) as store:
        stamps = []
        for i in range(10):
            r = store.put("TopicTest", 0, b"m%d" % i)
            stamps.append(r.store_timestamp)
            clock.advance(5)
            store.put("TopicTest", 1, b"other")  # another queue in between
            clock.advance(5)
        assert stamps == [T0 + 10 * i for i in range(10)]
        assert store.wait_dispatched()
        for i, ts in enumerate(stamps):
            assert store.offset_by_time("TopicTest", 0, ts) == i
            assert store.offset_by_time("TopicTest", 0, ts - 2) == i  # a skewed timestamp
            assert store.offset_by_time("TopicTest", 0, ts, UPPER) == i
            assert store.offset_by_time("TopicTest", 0, ts + 2, UPPER) == i
            if i:
                assert store.offset_by_time("TopicTest", 0, ts - 2, UPPER) == i - 1
            assert store.store_timestamp("TopicTest", 0, i) == ts
        assert store.offset_by_time("TopicTest", 0, stamps[0] - 20_000) == 0  # the min offset
        assert store.offset_by_time("TopicTest", 0, stamps[-1] + 20_000) == 10  # the max offset
        assert store.offset_by_time("TopicTest", 0, stamps[0] - 20_000, UPPER) == 0
        assert store.offset_by_time("TopicTest", 0, stamps[-1] + 20_000, UPPER) == 9
        assert store.offset_by_time("TopicTest", 1, stamps[3] + 5) == 3
        # An unknown queue.
        assert store.offset_by_time("TopicTest", 7, T0) == 0
        assert store.offset_by_time("NoSuchTopic", 0, T0, UPPER) == 0
        assert store.store_timestamp("NoSuchTopic", 0, 0) == -1
        assert store.store_timestamp("TopicTest", 0, 10) == -1


def test_get_message_statuses(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(str(root), _config()) as store:
        store.put("Other", 0, b"x")
    # A queue directory without files: the queue exists and is empty.
    (root / "consumequeue" / "Empty" / "0").mkdir(parents=True)
    with MessageStore(str(root)) as store:
        for i in range(10):
            store.put("TopicTest", 0, b"m%d" % i)
        assert store.wait_dispatched()

        r = store.get_messages("NoSuchTopic", 0, 0)
        assert (r.status, r.next_begin_offset, r.messages) == (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, [])
        r = store.get_messages("TopicTest", 3, 5)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)

        r = store.get_messages("Empty", 0, 0)
        assert (r.status, r.next_begin_offset, r.max_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0)

        r = store.get_messages("TopicTest", 0, 10)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 10)
        assert (r.min_offset, r.max_offset) == (0, 10)
        r = store.get_messages("TopicTest", 0, 25)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 10)

        r = store.get_messages("TopicTest", 0, 3, 4)
        assert r.status is GetMessageStatus.FOUND
        assert [m.body for m in r.messages] == [b"m3", b"m4", b"m5", b"m6"]
        assert [m.queue_offset for m in r.messages] == [3, 4, 5, 6]
        assert r.next_begin_offset == 7
        assert (r.min_offset, r.max_offset) == (0, 10)
        r = store.get_messages("TopicTest", 0, 8, 32)
        assert [m.body for m in r.messages] == [b"m8", b"m9"]
        assert r.next_begin_offset == 10


def test_offset_too_small_after_segments_are_deleted(tmp_path: Path) -> None:
    # File expiry keys on modification time, so the clock runs a day ahead of the files.
    clock = ManualClock(int(time.time() * 1000) + 86_400_000)
    config = _config(commitlog_file_size=4096, file_reserved_time=0.0)
    root = str(tmp_path / "s")
    with MessageStore(root, config, clock=clock) as store:
        for i in range(100):
            store.put("TopicTest", 0, b"m%03d" % i + b"." * 150)
        assert store.wait_dispatched()
        segments = len(store.commitlog.mapped_files.files)
        assert segments >= 4
        deleted = store.delete_expired_files(force=True)
        assert deleted == segments - 1  # never the last segment
        low = store.min_offset("TopicTest", 0)
        assert 0 < low < 100
        r = store.get_messages("TopicTest", 0, 0)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, low)
        r = store.get_messages("TopicTest", 0, low - 1)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
        r = store.get_messages("TopicTest", 0, low, 1)
        assert r.status is GetMessageStatus.FOUND
        assert r.messages[0].body.startswith(b"m%03d" % low)
        assert r.messages[0].commit_log_offset >= store.commitlog.min_offset
        # The unit before the minimum points into a deleted segment.
        before = store.consume_queues[("TopicTest", 0)].unit_at(low - 1)
        assert before is not None and before[0] < store.commitlog.min_offset
    with MessageStore(root, config, clock=clock) as store:
        assert store.min_offset("TopicTest", 0) == low  # recovery corrects the minimum again
        assert store.get_messages("TopicTest", 0, 0).status is GetMessageStatus.OFFSET_TOO_SMALL


def test_message_was_removing_when_the_segment_is_gone_before_the_minimum_moves(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path / "s"), _config(commitlog_file_size=4096)) as store:
        for i in range(60):
            store.put("TopicTest", 0, b"m%03d" % i + b"." * 150)
        assert store.wait_dispatched()
        units = store.consume_queues[("TopicTest", 0)].iter_units(0, 60)
        first_segment_units = sum(1 for _, commit_log_offset, _, _ in units if commit_log_offset < 4096)
        # Delete the first segment without correcting the queues' minimum (clean-up does both).
        assert store.commitlog.mapped_files.delete_files(lambda mf: mf.file_from_offset == 0, 1) == 1
        r = store.get_messages("TopicTest", 0, 0, 2)
        assert (r.status, r.messages, r.next_begin_offset) == (GetMessageStatus.MESSAGE_WAS_REMOVING, [], 2)
        r = store.get_messages("TopicTest", 0, 0, 32)
        assert r.status is GetMessageStatus.FOUND
        assert r.messages[0].queue_offset == first_segment_units
        store.correct_min_offsets()
        assert store.min_offset("TopicTest", 0) == first_segment_units
        assert store.get_messages("TopicTest", 0, 0).status is GetMessageStatus.OFFSET_TOO_SMALL


def test_pull_size(tmp_path: Path) -> None:
    # DefaultMessageStoreTest.testPullSize: 32 messages; max 32/20/10 gives 32/20/10.
    with MessageStore(str(tmp_path / "s"), _config()) as store:
        for i in range(32):
            store.put("TopicTest", 0, b"Once, there was a chance for me! %d" % i)
        assert store.wait_dispatched()
        for max_count in (32, 20, 10):
            r = store.get_messages("TopicTest", 0, 0, max_count)
            assert r.status is GetMessageStatus.FOUND
            assert len(r.messages) == max_count
            assert r.next_begin_offset == max_count
        assert len(store.get_messages("TopicTest", 0, 0, 100).messages) == 32


def test_reads_and_batches_across_consume_queue_files(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    config = _config(consumequeue_file_size=SMALL)
    with MessageStore(root, config) as store:
        for i in range(5):
            store.put("TopicTest", 0, b"m%02d" % i)
        r = store.put_batch("TopicTest", 0, [b"m%02d" % i for i in range(5, 25)],
                            [{"TAGS": "TagA", "KEYS": f"k{i}"} for i in range(5, 25)])
        assert (r.queue_offset, r.msg_num) == (5, 20)
        store.put("TopicTest", 0, b"m25")
        assert store.wait_dispatched()
        assert store.max_offset("TopicTest", 0) == 26
        cq = store.consume_queues[("TopicTest", 0)]
        assert len(cq.mapped_files.files) == 4
        got = store.get_messages("TopicTest", 0, 3, 20)
        assert [m.body for m in got.messages] == [b"m%02d" % i for i in range(3, 23)]
        assert [m.queue_offset for m in got.messages] == list(range(3, 23))
        assert got.next_begin_offset == 23
        assert [u[3] for u in cq.iter_units(5, 25)] == [java_string_hash("TagA")] * 20
        assert [m.body for m in store.query_message("TopicTest", "k17")] == [b"m17"]
    with MessageStore(root) as store:
        got = store.get_messages("TopicTest", 0, 0, 32)
        assert [m.body for m in got.messages] == [b"m%02d" % i for i in range(26)]


class _TagFilter:
    """A MessageFilter on TAGS: the hash on the unit, the exact tag on the message."""

    def __init__(self, *tags: str) -> None:
        self.tags = set(tags)
        self.codes = {java_string_hash(t) for t in tags}
        self.cq_checks = 0
        self.log_checks = 0

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        self.cq_checks += 1
        return tags_code in self.codes

    def is_matched_by_commit_log(self, message: MessageExt) -> bool:
        self.log_checks += 1
        return message.tags in self.tags


class _RejectOnLog(_TagFilter):
    def is_matched_by_commit_log(self, message: MessageExt) -> bool:
        super().is_matched_by_commit_log(message)
        return False


def test_filters_and_no_matched_message(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path / "s"), _config()) as store:
        for i in range(10):
            store.put("TopicTest", 0, b"m%d" % i, {"TAGS": "TagA" if i % 2 == 0 else "TagB"})
        assert store.wait_dispatched()

        tag_a = _TagFilter("TagA")
        r = store.get_messages("TopicTest", 0, 0, 32, tag_a)
        assert r.status is GetMessageStatus.FOUND
        assert [m.body for m in r.messages] == [b"m0", b"m2", b"m4", b"m6", b"m8"]
        assert r.next_begin_offset == 10
        assert tag_a.cq_checks == 10 and tag_a.log_checks == 5  # the unit check ran first

        r = store.get_messages("TopicTest", 0, 0, 2, _TagFilter("TagB"))
        assert [m.body for m in r.messages] == [b"m1", b"m3"]
        assert r.next_begin_offset == 4  # just after the last unit scanned

        r = store.get_messages("TopicTest", 0, 0, 32, _TagFilter("TagC"))
        assert (r.status, r.messages) == (GetMessageStatus.NO_MATCHED_MESSAGE, [])
        assert r.next_begin_offset == 10

        on_log = _RejectOnLog("TagA", "TagB")
        r = store.get_messages("TopicTest", 0, 3, 32, on_log)
        assert (r.status, r.messages) == (GetMessageStatus.NO_MATCHED_MESSAGE, [])
        assert on_log.log_checks == 7
        assert r.next_begin_offset == 10


def test_units_are_readable_when_put_returns(tmp_path: Path) -> None:
    # DefaultMessageStoreTest.testMaxOffset separates dispatched from assigned offsets, because
    # RocketMQ's reput thread writes the units later. mqlite writes the unit under the put lock:
    # both counts agree as soon as put returns, and the arrival listener runs afterwards on the
    # putting thread, outside the lock, already seeing the unit.
    seen: list[tuple[str, int, int, int, bool]] = []
    caller = threading.current_thread()

    def on_arrival(topic: str, queue_id: int, next_offset: int) -> None:
        seen.append((topic, queue_id, next_offset, store.max_offset(topic, queue_id),
                     threading.current_thread() is caller))

    store = MessageStore(str(tmp_path / "s"), _config(), on_arrival=on_arrival)
    try:
        for i in range(3):
            store.put("TopicTest", 0, b"m%d" % i)
            assert store.max_offset("TopicTest", 0) == i + 1
            assert store.commitlog.topic_queue_table[("TopicTest", 0)] == i + 1
        store.put_batch("TopicTest", 0, [b"m3", b"m4"])
        assert store.max_offset("TopicTest", 0) == 5
        assert [m.body for m in store.get_messages("TopicTest", 0, 3).messages] == [b"m3", b"m4"]
        assert seen == [("TopicTest", 0, n, n, True) for n in (1, 2, 3, 5)]
    finally:
        store.close()


def test_a_read_only_queue_follows_a_fill_and_a_roll_in_one_refresh(tmp_path: Path) -> None:
    # The reader last saw its newest file part-full; the writer has since filled it and rolled to the
    # next: one refresh must reach the newest unit (a key search right after the roll finds it).
    writer = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, 20 * 64)
    reader = ConsumeQueue(str(tmp_path / "consumequeue"), "TopicTest", 0, 20 * 64, read_only=True)
    try:
        _fill(writer, 60)
        reader.refresh()
        assert reader.max_offset == 60
        _fill(writer, 10, first=60)  # 4 more fill the first file, 6 go into the second
        reader.refresh()
        assert (reader.max_offset, reader.max_commit_log_offset) == (70, 100 * 69 + 100)
    finally:
        reader.close()
        writer.close()
