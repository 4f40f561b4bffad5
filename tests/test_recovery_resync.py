"""Recovery resynchronises after damage: only a torn tail is cut (issue 11).

Damage in the middle of the log (zeroed, flipped or overwritten bytes, a segment whose head
or whole content is destroyed) costs the records it destroyed, never the acknowledged records
after it; a vanished oldest segment is told from an expired one and reported.
Small stores: 64 KiB segments of ~160 records of 413 bytes, two queues.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import time
from pathlib import Path

import pytest

import mqlite
import mqlite.recovery
import mqlite.verify
from mqlite.clock import ManualClock
from mqlite.commitlog import PutResult
from mqlite.record import BLANK_MAGIC, find_frame, framed_at
from mqlite.errors import StoreCorruptedError
from mqlite.mappedfile import offset_to_file_name
from mqlite.store import MessageStore
from test_recovery import SEGMENT, TOPIC, _body, _config, _create_abort, _open, _put

N = 700  # five segments


def _fill(root: Path, n: int = N) -> list[PutResult]:
    with _open(root, _config()) as store:
        return [_put(store, i, queue_id=i % 2) for i in range(n)]


def _write(root: Path, offset: int, data: bytes) -> None:
    """Overwrite commit-log bytes at absolute `offset` (within one segment)."""
    path = root / "commitlog" / offset_to_file_name(offset - offset % SEGMENT)
    with open(path, "r+b") as f:
        f.seek(offset % SEGMENT)
        f.write(data)


def _reachable(store: MessageStore, results: list[PutResult]) -> list[int]:
    """Indexes of the acknowledged messages readable at their queue offsets with their bodies."""
    found = []
    for i, r in enumerate(results):
        got = store.get_messages(TOPIC, i % 2, r.queue_offset, 1)
        if got.messages and got.messages[0].queue_offset == r.queue_offset and got.messages[0].body == _body(i):
            found.append(i)
    return found


def _overlapping(results: list[PutResult], start: int, end: int) -> set[int]:
    return {i for i, r in enumerate(results) if r.commit_log_offset < end and start < r.commit_log_offset + r.wrote_bytes}


def _check(root: Path, results: list[PutResult], start: int, end: int, *, abnormal: bool = True,
           lost: set[int] | None = None) -> MessageStore:
    """Reopen (after a crash unless `abnormal` is False) and hold recovery to the rule: every message
    but those the damage in [start, end) destroyed (`lost`, by default all of it) is reachable, and
    appends go on at the log's end."""
    if abnormal:
        _create_abort(root)
    store = _open(root)
    try:
        lost = _overlapping(results, start, end) if lost is None else lost
        assert _reachable(store, results) == [i for i in range(len(results)) if i not in lost]
        assert store.recovery.damaged, "damage in the middle of the log must be reported"
        ranges = store.recovery.damaged
        assert all(a <= start < b or start <= a < end for a, b in ranges), ranges
        end_of_log = results[-1].commit_log_offset + results[-1].wrote_bytes
        assert store.commitlog.max_offset == end_of_log
        assert len(os.listdir(root / "commitlog")) == 5  # no segment holding records was deleted
        after = _put(store, N, queue_id=0)
        assert after.commit_log_offset >= end_of_log
        assert store.wait_dispatched()
        assert [m.body for m in store.get_messages(TOPIC, 0, after.queue_offset, 1).messages] == [_body(N)]
        return store
    except BaseException:
        store.close()
        raise


@pytest.mark.parametrize("damage", ["zero-all", "zero-head", "garbage", "flip-sizes"])
def test_damage_in_a_middle_segment_costs_only_its_records(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "store"
    results = _fill(root)
    rng = random.Random(11)
    if damage == "zero-all":
        start, end = SEGMENT, 2 * SEGMENT
        _write(root, start, bytes(SEGMENT))
    elif damage == "zero-head":  # the segment's head is destroyed: recovery resumes at its first valid record
        start, end = SEGMENT, SEGMENT + 5000
        _write(root, start, bytes(end - start))
    elif damage == "garbage":
        start, end = SEGMENT, 2 * SEGMENT
        _write(root, start, rng.randbytes(SEGMENT))
    else:  # the size fields of three records
        victims = [results[i] for i in (200, 230, 260)]
        for r in victims:
            _write(root, r.commit_log_offset, b"\x7f")
        start, end = victims[0].commit_log_offset, victims[-1].commit_log_offset + 1
    destroyed = {200, 230, 260} if damage == "flip-sizes" else _overlapping(results, start, end)
    with _check(root, results, start, end, lost=destroyed) as store:
        if damage == "flip-sizes":
            assert store.recovery.damaged == [(r.commit_log_offset, r.commit_log_offset + r.wrote_bytes)
                                              for r in (results[200], results[230], results[260])]
        lost = store.recovery.lost_units
        assert lost and all(start <= offset < end for offset, _ in lost)
    # The damage is remembered: reads keep skipping it after a clean reopen, which does not scan that far back.
    assert mqlite.recovery.load_damaged(str(root)) == dict(store.recovery.damaged)
    with _open(root) as store:
        assert not store.recovery.abnormal and store.recovery.damaged == []
        assert _reachable(store, results) == [i for i in range(N) if i not in destroyed]


@pytest.mark.parametrize("lost", ["all", "partly"])
def test_queues_lost_with_the_damage_keep_their_offsets(tmp_path: Path, lost: str) -> None:
    # The queues never (all) or only partly reached the disk: rebuilt from the log, they lack the
    # destroyed records' units; placeholders keep the later records at their acknowledged queue offsets.
    root = tmp_path / "store"
    results = _fill(root)
    _write(root, SEGMENT, bytes(SEGMENT))
    if lost == "all":
        shutil.rmtree(root / "consumequeue")
    else:  # queue 0 keeps its first file: 100 units, the last ones pointing into the damaged segment
        folder = root / "consumequeue" / TOPIC / "0"
        for name in sorted(os.listdir(folder))[1:]:
            os.unlink(folder / name)
        assert results[198].commit_log_offset >= SEGMENT  # unit 99 of queue 0 is in the damage
    with _check(root, results, SEGMENT, 2 * SEGMENT) as store:
        destroyed = _overlapping(results, SEGMENT, 2 * SEGMENT)
        assert store.max_offset(TOPIC, 0) == N // 2 + 1 and store.max_offset(TOPIC, 1) == N // 2
        assert len(store.recovery.lost_units) == len(destroyed)
        assert all(SEGMENT <= offset < 2 * SEGMENT for offset, _ in store.recovery.lost_units)


@pytest.mark.parametrize("abnormal", [True, False], ids=["crashed", "clean"])
def test_zeros_inside_the_newest_segment_are_not_its_end(tmp_path: Path, abnormal: bool) -> None:
    # A zeroed page before intact records read as the clean end of the log and cut them.
    root = tmp_path / "store"
    results = _fill(root)
    newest = results[-1].commit_log_offset - results[-1].commit_log_offset % SEGMENT
    start = newest + 4096
    end = start + 4096
    _write(root, start, bytes(end - start))
    _check(root, results, start, end, abnormal=abnormal).close()


def test_a_blank_in_the_middle_of_a_segment_is_damage(tmp_path: Path) -> None:
    # A BLANK fills its segment to the end; one with another size must not skip the rest of the segment.
    root = tmp_path / "store"
    results = _fill(root)
    victim = results[240]
    assert SEGMENT < victim.commit_log_offset < 2 * SEGMENT - 5000
    _write(root, victim.commit_log_offset, struct.pack(">ii", 400, BLANK_MAGIC))
    with _check(root, results, victim.commit_log_offset, victim.commit_log_offset + 8) as store:
        assert store.recovery.damaged == [(victim.commit_log_offset, victim.commit_log_offset + victim.wrote_bytes)]


def test_a_destroyed_segment_end_resumes_at_the_next_segment(tmp_path: Path) -> None:
    # The last records of a segment and the BLANK that closes it are gone.
    root = tmp_path / "store"
    results = _fill(root)
    start, end = SEGMENT - 1500, SEGMENT
    _write(root, start, bytes(end - start))
    with _check(root, results, start, end) as store:
        first_lost = min(_overlapping(results, start, end))
        assert store.recovery.damaged == [(results[first_lost].commit_log_offset, SEGMENT)]


def test_a_torn_tail_after_damage_is_still_cut(tmp_path: Path) -> None:
    # Damage with nothing valid after it is a torn tail: cut, and appends go on there.
    root = tmp_path / "store"
    results = _fill(root)
    cut = results[-3].commit_log_offset
    _write(root, cut, bytes(SEGMENT - cut % SEGMENT))
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.damaged == []
        assert store.commitlog.max_offset == cut
        assert _reachable(store, results) == list(range(N - 3))
        assert _put(store, N).commit_log_offset == cut


def test_a_record_image_inside_a_body_is_not_taken_for_a_record(tmp_path: Path) -> None:
    # The forward search trusts a frame only where its PHYSICALOFFSET field names its position.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        first = _put(store, 0)
        image = store.commitlog.read(first.commit_log_offset, first.wrote_bytes)
        assert image is not None
        carrier = store.put(TOPIC, 0, bytes(image))
        tail = [_put(store, i) for i in range(1, 4)]
    mm = bytearray((root / "commitlog" / offset_to_file_name(0)).read_bytes())
    inside = mm.find(image, carrier.commit_log_offset + 1)
    assert carrier.commit_log_offset < inside < tail[0].commit_log_offset
    assert not framed_at(mm, inside, len(mm), inside)  # says it lies at 0
    assert framed_at(mm, tail[0].commit_log_offset, len(mm), tail[0].commit_log_offset)
    assert find_frame(mm, carrier.commit_log_offset + 1, len(mm), len(mm), 0) == tail[0].commit_log_offset
    # Destroy the carrier's header: recovery resumes at the next real record, not at the image.
    _write(root, carrier.commit_log_offset, bytes(8))
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.damaged == [(carrier.commit_log_offset, tail[0].commit_log_offset)]
        assert [m.body for m in store.get_messages(TOPIC, 0, 0, 10).messages] == [_body(i) for i in range(4)]


@pytest.mark.parametrize("at", [1, (1 << 20) - 6, (1 << 20) - 4, (1 << 20) - 1, (1 << 20) + 3])
def test_the_frame_search_finds_a_record_anywhere_in_zeros(tmp_path: Path, at: int) -> None:
    # The search reads 1 MiB windows and skips all-zero ones: a frame across a window's edge is found.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        first = _put(store, 0)
        image = bytearray(store.commitlog.read(first.commit_log_offset, first.wrote_bytes) or b"")
    image[28:36] = (at + 7).to_bytes(8, "big")  # PHYSICALOFFSET: its position in a log starting at 7
    buf = bytearray(3 << 20)
    buf[at : at + len(image)] = image
    assert find_frame(buf, 0, len(buf), len(buf), 7) == at
    assert find_frame(buf, at + 1, len(buf), len(buf), 7) == -1
    assert find_frame(buf, 0, len(buf), len(buf), 8) == -1  # the position field disagrees


def test_the_index_rebuilt_after_damage_steps_over_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    results = _fill(root)
    _write(root, SEGMENT, bytes(SEGMENT))
    shutil.rmtree(root / "index")
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.index_rebuilt_from is not None
        lost = _overlapping(results, SEGMENT, 2 * SEGMENT)
        for i in (0, min(lost) - 1, max(lost) + 1, N - 1):
            assert [m.body for m in store.query_message(TOPIC, f"key-{i}")] == [_body(i)]
        assert store.query_message(TOPIC, f"key-{min(lost)}") == []


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_lost_middle_segment_of_a_clean_store_is_refused(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "store"
    _fill(root)
    path = root / "commitlog" / offset_to_file_name(SEGMENT)
    if damage == "delete":
        path.unlink()
    else:
        os.truncate(path, SEGMENT // 2)
    with pytest.raises(StoreCorruptedError):
        _open(root)


# -- C: a vanished oldest segment ----------------------------------------------------------------
def test_a_deleted_oldest_segment_is_reported_not_taken_for_expiry(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    results = _fill(root)
    assert json.loads((root / "config" / "logHead.json").read_text())["minOffset"] == 0
    (root / "commitlog" / offset_to_file_name(0)).unlink()
    with _open(root) as store:
        assert store.recovery.lost_segments == [(0, SEGMENT)]
        assert any("never expired" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
        survivors = [i for i, r in enumerate(results) if r.commit_log_offset >= SEGMENT]
        assert _reachable(store, results) == survivors
    assert mqlite.recovery.check_log_head(str(root), SEGMENT)[1] == [(0, SEGMENT)]
    with _open(root) as store:  # still reported at the next open: the loss is recorded
        assert store.recovery.lost_segments == [(0, SEGMENT)]


def test_expired_segments_are_not_reported_lost(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000) + 86_400_000)  # files look a day old
    root = tmp_path / "store"
    config = _config(file_reserved_time=0.0)
    with _open(root, config, clock=clock) as store:
        for i in range(N):
            _put(store, i)
        assert store.delete_expired_files(force=True) > 0
        head = store.commitlog.min_offset
    assert mqlite.recovery.load_log_head(str(root)) == (head, [])
    for abnormal in (False, True):
        if abnormal:
            _create_abort(root)
        with _open(root, clock=clock) as store:
            assert store.commitlog.min_offset == head and store.recovery.lost_segments == []


def test_the_head_is_recorded_before_segments_go(tmp_path: Path) -> None:
    # A crash between recording the head and deleting leaves segments below it: not a loss.
    root = tmp_path / "store"
    _fill(root)
    mqlite.recovery.save_log_head(str(root), 2 * SEGMENT, [])
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.lost_segments == []
        assert store.commitlog.min_offset == 0
    assert mqlite.recovery.load_log_head(str(root)) == (2 * SEGMENT, [])


def test_a_store_without_a_recorded_head_keeps_rocketmqs_behaviour(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _fill(root)
    os.unlink(root / "config" / "logHead.json")  # as a RocketMQ broker's store
    (root / "commitlog" / offset_to_file_name(0)).unlink()
    with _open(root) as store:
        assert store.recovery.lost_segments == []
    assert mqlite.recovery.load_log_head(str(root)) == (SEGMENT, [])  # recorded from now on


def test_verify_names_a_lost_oldest_segment_before_and_after_the_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _fill(root)
    (root / "commitlog" / offset_to_file_name(0)).unlink()
    before = mqlite.verify.verify_store(str(root))
    assert any(f"[0, {SEGMENT}) are missing but never expired" in p for p in before.problems), before.problems
    with _open(root):
        pass
    after = mqlite.verify.verify_store(str(root))  # the loss is recorded: still reported
    assert any(f"[0, {SEGMENT}) are missing but never expired" in p for p in after.problems), after.problems


def test_verify_reports_a_damaged_range_once_with_its_lost_units(tmp_path: Path) -> None:
    root = tmp_path / "store"
    results = _fill(root)
    _write(root, SEGMENT, bytes(SEGMENT))  # the whole second segment zeroed
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.damaged == [(SEGMENT, 2 * SEGMENT)]
    report = mqlite.verify.verify_store(str(root))
    ranges = [p for p in report.problems if f"bytes [{SEGMENT}, {2 * SEGMENT}) are damaged" in p]
    destroyed = len(_overlapping(results, SEGMENT, 2 * SEGMENT))
    assert len(ranges) == 1 and f"{destroyed} consume-queue units point past it" in ranges[0], report.problems
    # The records after the range were walked: the log's end is the real end, not the damage.
    assert report.log_end == results[-1].commit_log_offset + results[-1].wrote_bytes


def test_placeholders_for_a_damaged_range_over_2_gib_fit_a_unit(tmp_path: Path) -> None:
    # A unit's size is a Java int: placeholders spanning a range of several GiB (two whole 1 GiB
    # segments destroyed) must still be units, not a struct.error that stops the open.
    from mqlite.record import DispatchRequest
    from mqlite.consumequeue import ConsumeQueue

    cq = ConsumeQueue(str(tmp_path / "consumequeue"), TOPIC, 0, 20 * 64)
    cq.load()
    cq.put(0, 100, 0, 0)  # queue offset 0: a record before the damage
    report = mqlite.recovery.RecoveryReport(abnormal=True)
    start, end = 1 << 30, 3 << 30
    report.damaged.append((start, end))
    dispatched: list[DispatchRequest] = []
    fill = mqlite.recovery._filling_gaps(dispatched.append, lambda: {(TOPIC, 0): cq}, report)
    after = DispatchRequest(TOPIC, 0, end, 300, 0, 0, 3, None, None, 0)  # queue offset 3: two were destroyed
    fill(after)
    assert dispatched == [after]
    units = [cq.unit_at(q) for q in (1, 2)]
    assert all(u is not None and start <= u[0] < end and 0 < u[1] < 2**31 - 1 for u in units), units
    cq.close()


def test_a_batch_cut_off_mid_copy_is_a_torn_tail(tmp_path: Path) -> None:
    # A kill during a batch's copy into the segment can leave whole records behind a broken first one
    # (a large memcpy stores its first bytes last) and no units for any of them: nothing of the batch was
    # acknowledged, so it is a torn tail, cut, not damage with valid records after it (which would leave a
    # set-aside hole in the queue). Found by the kill -9 test with three writers.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(20):
            _put(store, i)
        batch = store.put_batch(TOPIC, 0, [_body(100 + i) for i in range(4)])
    assert batch.queue_offset == 20
    first = batch.commit_log_offset
    _write(root, first, bytes(32))  # the first record's header start never landed
    cq_file = root / "consumequeue" / TOPIC / "0" / offset_to_file_name(0)
    units = bytearray(cq_file.read_bytes())
    units[20 * 20 : 24 * 20] = bytes(4 * 20)  # the batch's units were never written
    cq_file.write_bytes(bytes(units))
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.damaged == [] and store.recovery.set_aside == []
        assert store.commitlog.max_offset == first
        assert store.get_messages(TOPIC, 0, 0, 100).next_begin_offset == 20
        assert [m.body for m in store.get_messages(TOPIC, 0, 0, 100).messages] == [_body(i) for i in range(20)]
        assert _put(store, 20).queue_offset == 20  # appends go on where the batch would have been
