"""Tests for mqlite.recovery through MessageStore: RocketMQ's DefaultMessageStoreTest.testRecover and more.

Damage is done the way RocketMQ's test does it (`damageCommitLog`: zero 16 bytes at a record's topic
length, `offset + 84 + bodyLen + 4`), on closed stores, and the result is checked both through the
store and with tests/refformat.py, which reads the files independently.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from support import deadline as _deadline
from mqlite.clock import ManualClock
import mqlite
import mqlite.recovery
from mqlite.commitlog import PutResult
from mqlite.config import StoreConfig
from mqlite.errors import MQClientError
from mqlite.mappedfile import offset_to_file_name
from mqlite.message import SysFlag
from mqlite.storebase import GetMessageStatus
from mqlite.store import MessageStore

sys.path.insert(0, os.path.dirname(__file__))
import refformat as rf  # noqa: E402

T0 = 1_700_000_000_000
SEGMENT = 64 * 1024
CQ_FILE = 20 * 100  # 100 units per consume-queue file, so damage scenarios cross queue files
TOPIC = "TopicTest"



def _config(**overrides: object) -> StoreConfig:
    settings_: dict[str, object] = dict(commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE,
                                        max_hash_slot_num=1000, max_index_num=4000)
    settings_.update(overrides)
    return StoreConfig(**settings_)  # type: ignore[arg-type]



def _open(root: str | Path, config: StoreConfig | None = None, *, deadline: float = 10.0,
          clock: object | None = None) -> MessageStore:
    """Open (and so recover) a store; a recovery that hangs fails the test instead of the run."""
    extra = {"clock": clock} if clock is not None else {}
    with _deadline(deadline):
        return MessageStore(str(root), config, **extra)  # type: ignore[arg-type]


def _body(i: int) -> bytes:
    return b"Once, there was a chance for me! #%05d " % i + b"." * 250


def _put(store: MessageStore, i: int, topic: str = TOPIC, queue_id: int = 0) -> PutResult:
    return store.put(topic, queue_id, _body(i), {"KEYS": f"key-{i}", "TAGS": "TagA"})


def _damage(root: str | Path, offset: int, body_len: int, segment: int = SEGMENT) -> None:
    """DefaultMessageStoreTest.damageCommitLog: zero 16 bytes at the record's topic length."""
    path = Path(root) / "commitlog" / offset_to_file_name(offset - offset % segment)
    with open(path, "r+b") as f:
        f.seek(offset % segment + 84 + body_len + 4)
        f.write(bytes(16))


def _tear(root: str | Path, result: PutResult, body_len: int, segment: int = SEGMENT) -> None:
    """A torn tail from `result`'s record on: `_damage` it and zero the rest of its segment
    (the later pages never reached the disk), so nothing valid follows it."""
    _damage(root, result.commit_log_offset, body_len, segment)
    path = Path(root) / "commitlog" / offset_to_file_name(result.commit_log_offset - result.commit_log_offset % segment)
    start = result.commit_log_offset % segment + result.wrote_bytes
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(segment - start))


def _bodies(store: MessageStore, topic: str = TOPIC, queue_id: int = 0) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset(topic, queue_id)
    while True:
        r = store.get_messages(topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [m.body for m in r.messages]
        offset = r.next_begin_offset


def _create_abort(root: str | Path) -> None:
    (Path(root) / "abort").write_text("12345")


# -- DefaultMessageStoreTest.testRecover ------------------------------------------------------------------------
@pytest.mark.parametrize("cq_file_size", [
    # 100-unit files: the 201st message is the only unit of the third file, which the cut empties
    # (this once hung in ConsumeQueue.truncate_dirty).
    pytest.param(CQ_FILE, id="cq-100-units"),
    pytest.param(20 * 1000, id="cq-1000-units"),
])
def test_recover(tmp_path: Path, cq_file_size: int) -> None:
    root = str(tmp_path / "store")
    config = _config(consumequeue_file_size=cq_file_size)

    # (1) 100 messages and a clean restart: nothing changes.
    with _open(root, config) as store:
        for i in range(100):
            _put(store, i)
        assert store.wait_dispatched()
        max_phy = store.commitlog.max_offset
        cq_max = store.max_offset(TOPIC, 0)
    assert cq_max == 100
    assert not (tmp_path / "store" / "abort").exists()
    with _open(root) as store:
        assert not store.recovery.abnormal
        assert not store.recovery.damaged_tail
        assert store.commitlog.max_offset == max_phy
        assert store.max_offset(TOPIC, 0) == cq_max

        # (2) 100 more plus one, whose record is then damaged: a normal restart cuts it off.
        for i in range(100, 200):
            _put(store, i)
        last = _put(store, 200)
        assert store.wait_dispatched()
        cq_max = store.max_offset(TOPIC, 0)
        assert cq_max == 201
        assert len(store.commitlog.mapped_files.files) >= 2  # the test crosses segments
    _damage(root, last.commit_log_offset, len(_body(200)))
    with _open(root) as store:
        assert not store.recovery.abnormal
        assert store.recovery.damaged_tail
        assert store.commitlog.max_offset == last.commit_log_offset
        assert store.max_offset(TOPIC, 0) == cq_max - 1
        assert _bodies(store) == [_body(i) for i in range(200)]

        # (3) The same damage with an abort file: the abnormal path gives the same result.
        last = _put(store, 200)
        assert last.queue_offset == 200
        assert store.wait_dispatched()
    _damage(root, last.commit_log_offset, len(_body(200)))
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.abnormal
        assert store.commitlog.max_offset == last.commit_log_offset
        assert store.max_offset(TOPIC, 0) == cq_max - 1

        # Writing goes on where the damage was.
        again = [_put(store, i) for i in range(200, 210)]
        assert again[0].commit_log_offset == last.commit_log_offset
        assert [r.queue_offset for r in again] == list(range(200, 210))
        assert store.wait_dispatched()
        assert _bodies(store) == [_body(i) for i in range(210)]
        assert [m.body for m in store.query_message(TOPIC, "key-205")] == [_body(205)]
    with _open(root) as store:
        assert not store.recovery.abnormal
        assert _bodies(store) == [_body(i) for i in range(210)]
    assert rf.cross_check_store(root, hash_slot_num=1000) == []


def test_a_clean_restart_keeps_every_queue(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        for i in range(60):
            _put(store, i, topic=f"T{i % 3}", queue_id=i % 2)
        assert store.wait_dispatched()
        before = {key: (cq.min_offset, cq.max_offset) for key, cq in store.consume_queues.items()}
        max_phy = store.commitlog.max_offset
    with _open(root) as store:
        assert {key: (cq.min_offset, cq.max_offset) for key, cq in store.consume_queues.items()} == before
        assert store.commitlog.max_offset == max_phy
        assert store.recovery.records_dispatched == 0
        # Queue offsets continue where they were.
        assert _put(store, 60, topic="T0", queue_id=0).queue_offset == before[("T0", 0)][1]
    assert rf.cross_check_store(root, hash_slot_num=1000) == []


# -- damage in other places ------------------------------------------------------------------------------------------
def test_a_torn_record_at_the_tail_is_cut_off(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(20)]
    # A write that stopped half-way: only the first 40 bytes of a record made it to disk.
    end = results[-1].commit_log_offset + results[-1].wrote_bytes
    header = (Path(root) / "commitlog" / offset_to_file_name(0)).read_bytes()[:40]
    with open(Path(root) / "commitlog" / offset_to_file_name(0), "r+b") as f:
        f.seek(end)
        f.write(header)
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.damaged_tail
        assert store.commitlog.max_offset == end
        assert _bodies(store) == [_body(i) for i in range(20)]
        assert _put(store, 20).commit_log_offset == end
    assert rf.cross_check_store(root, hash_slot_num=1000) == []


def test_zeros_after_the_last_record_are_a_clean_end(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        for i in range(5):
            _put(store, i)
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.abnormal
        assert not store.recovery.damaged_tail
        assert _bodies(store) == [_body(i) for i in range(5)]


def test_damage_to_the_first_record_of_the_newest_segment(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(300)]
    first_of_last = next(r for r in results if r.commit_log_offset % SEGMENT == 0 and r.commit_log_offset > 0)
    count_before = results.index(first_of_last)
    _damage(root, first_of_last.commit_log_offset, len(_body(count_before)))
    # Departure from RocketMQ (which truncates there): valid records follow the damaged one, so
    # only the damaged record is lost; recovery resynchronises on the next record.
    with _open(root) as store:
        damaged_end = first_of_last.commit_log_offset + first_of_last.wrote_bytes
        assert store.recovery.damaged == [(first_of_last.commit_log_offset, damaged_end)]
        assert store.commitlog.max_offset == results[-1].commit_log_offset + results[-1].wrote_bytes
        assert store.max_offset(TOPIC, 0) == 300
        r = _put(store, 300)
        assert r.queue_offset == 300 and r.commit_log_offset == store.commitlog.max_offset - r.wrote_bytes
        assert store.wait_dispatched()
        assert _bodies(store) == [_body(i) for i in range(301) if i != count_before]
        assert store.get_messages(TOPIC, 0, count_before, 1).status is GetMessageStatus.MESSAGE_WAS_REMOVING


@pytest.mark.parametrize("check_crc", [True, False])
def test_a_body_crc_mismatch_at_the_tail(tmp_path: Path, check_crc: bool) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config(check_crc_on_recover=check_crc)) as store:
        results = [_put(store, i) for i in range(10)]
    last = results[-1]
    with open(Path(root) / "commitlog" / offset_to_file_name(0), "r+b") as f:
        f.seek(last.commit_log_offset + 84 + 4 + 3)  # a body byte: only the CRC notices
        f.write(b"#")
    _create_abort(root)
    with _open(root) as store:
        if check_crc:
            assert store.commitlog.max_offset == last.commit_log_offset
            assert store.max_offset(TOPIC, 0) == 9
        else:
            assert store.commitlog.max_offset == last.commit_log_offset + last.wrote_bytes
            assert store.max_offset(TOPIC, 0) == 10


def test_a_lost_newest_segment(tmp_path: Path) -> None:
    # A crash after the blank closed a segment but before the next segment reached the disk.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(250)]
    first_of_second = next(r for r in results if r.commit_log_offset == SEGMENT)
    n = results.index(first_of_second)
    ends_at = results[n - 1].commit_log_offset + results[n - 1].wrote_bytes
    os.unlink(root / "commitlog" / offset_to_file_name(SEGMENT))
    with _open(root) as store:
        assert store.max_offset(TOPIC, 0) == n
        assert store.commitlog.max_offset == ends_at  # appends go on before the old blank
        r = _put(store, n)
        assert r.commit_log_offset == SEGMENT and r.queue_offset == n
        assert store.wait_dispatched()
        assert _bodies(store) == [_body(i) for i in range(n + 1)]
    assert rf.cross_check_store(str(root), hash_slot_num=1000) == []


def test_a_queue_whose_only_message_was_cut_off_is_empty(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        for i in range(10):
            _put(store, i)
        last = store.put("Lonely", 0, b"y" * 100)
    _damage(root, last.commit_log_offset, 100)
    with _open(root) as store:
        r = store.get_messages("Lonely", 0, 0)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
        assert store.max_offset("Lonely", 0) == 0
        assert store.max_offset(TOPIC, 0) == 10


def test_a_queue_emptied_by_recovery_takes_new_messages(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        for i in range(10):
            _put(store, i)
        last = store.put("Lonely", 0, b"y" * 100)
    _damage(root, last.commit_log_offset, 100)
    with _open(root) as store:
        r = store.put("Lonely", 0, b"z" * 50)
        assert r.commit_log_offset == last.commit_log_offset and r.queue_offset == 0
        assert store.wait_dispatched()
        assert store.max_offset("Lonely", 0) == 1
        assert [m.body for m in store.get_messages("Lonely", 0, 0).messages] == [b"z" * 50]


def test_recovery_that_empties_the_last_consume_queue_file(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    config = _config(consumequeue_file_size=20 * 8)
    with _open(root, config) as store:
        results = [_put(store, i) for i in range(9)]  # units 0..7 fill one file, unit 8 starts the next
    _damage(root, results[8].commit_log_offset, len(_body(8)))
    with _open(root) as store:  # this once hung in ConsumeQueue.truncate_dirty
        assert store.max_offset(TOPIC, 0) == 8
        assert _bodies(store) == [_body(i) for i in range(8)]


# -- rebuilding from the commit log ---------------------------------------------------------------------------------
def test_no_commit_log_files_destroys_the_consume_queues(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(10):
            _put(store, i)
    for name in os.listdir(root / "commitlog"):
        os.unlink(root / "commitlog" / name)
    assert (root / "consumequeue" / TOPIC / "0").is_dir()
    with _open(root) as store:
        assert store.topics() == []
        assert store.get_messages(TOPIC, 0, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert not (root / "consumequeue" / TOPIC / "0").exists()
        r = _put(store, 0)
        assert (r.commit_log_offset, r.queue_offset) == (0, 0)
        assert store.wait_dispatched()
        assert _bodies(store) == [_body(0)]


@pytest.mark.parametrize("remove_index", [False, True])
def test_abnormal_recovery_rebuilds_consume_queues_and_index(tmp_path: Path, remove_index: bool) -> None:
    root = tmp_path / "store"
    clock = ManualClock(step_ms=1)  # everything within the checkpoint's 3 s margin
    keys_by_queue: dict[tuple[str, int], list[int]] = {}
    with _open(root, _config(), clock=clock) as store:
        for i in range(300):
            key = (f"T{i % 2}", i % 3)
            _put(store, i, topic=key[0], queue_id=key[1])
            keys_by_queue.setdefault(key, []).append(i)
        assert len(store.commitlog.mapped_files.files) >= 2
    shutil.rmtree(root / "consumequeue")
    if remove_index:
        shutil.rmtree(root / "index")
    _create_abort(root)
    with _open(root, clock=clock) as store:
        assert store.recovery.abnormal
        assert store.recovery.start_offset == 0
        assert store.recovery.records_dispatched == 300
        for (topic, qid), numbers in keys_by_queue.items():
            assert _bodies(store, topic, qid) == [_body(i) for i in numbers]
        for i in range(0, 300, 7):
            found = store.query_message(f"T{i % 2}", f"key-{i}")
            assert [m.body for m in found] == [_body(i)]
        assert store.query_message("T0", "key-1") == []  # key-1 is a T1 message
    assert rf.cross_check_store(str(root), hash_slot_num=1000) == []


def test_normal_recovery_rebuilds_deleted_consume_queues_too(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(50):
            _put(store, i)
    shutil.rmtree(root / "consumequeue")
    with _open(root) as store:
        assert not store.recovery.abnormal
        assert _bodies(store) == [_body(i) for i in range(50)]


def test_abnormal_recovery_of_an_intact_store_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(150):
            _put(store, i, queue_id=i % 2)
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.abnormal
        assert store.max_offset(TOPIC, 0) == 75 and store.max_offset(TOPIC, 1) == 75
        assert _bodies(store, TOPIC, 1) == [_body(i) for i in range(1, 150, 2)]
    assert rf.cross_check_store(str(root), hash_slot_num=1000) == []


def test_abnormal_recovery_starts_at_the_checkpoints_segment(tmp_path: Path) -> None:
    # CommitLog.recoverAbnormally: the newest segment whose first record is older than the
    # checkpoint's safe time (min(physic, logics) - 3 s). Messages here are 1 s apart.
    root = tmp_path / "store"
    clock = ManualClock(step_ms=1000)
    with _open(root, _config(), clock=clock) as store:
        results = [_put(store, i) for i in range(400)]
        segments = [mf.file_from_offset for mf in store.commitlog.mapped_files.files]
    assert len(segments) >= 3
    _create_abort(root)
    with _open(root, clock=clock) as store:
        report = store.recovery
        assert report.abnormal
        assert report.start_offset == segments[-1]
        in_last = sum(1 for r in results if r.commit_log_offset >= segments[-1])
        assert report.records_scanned == in_last < 400
        assert _bodies(store) == [_body(i) for i in range(400)]
        # The index is rebuilt from the start segment on. (Keys of older records were in the index
        # file that an abnormal load drops, as RocketMQ does with messageIndexSafe=false.)
        for i in range(400 - in_last, 400, 9):
            assert [m.body for m in store.query_message(TOPIC, f"key-{i}")] == [_body(i)]


# -- cost of a normal reopen ------------------------------------------------------------------------------------------
def test_normal_reopen_does_not_rescan_everything(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(2000):
            _put(store, i, queue_id=i % 4)
        segments = len(store.commitlog.mapped_files.files)
    assert segments >= 8
    with _open(root) as store:
        report = store.recovery
        assert not report.abnormal
        assert report.records_dispatched == 0
        assert 0 < report.records_scanned <= 2000 // (segments - 1)  # about one segment
        assert report.start_offset >= (segments - 1) * SEGMENT
        assert store.max_offset(TOPIC, 3) == 500


def test_normal_reopen_scans_a_bounded_tail_of_a_big_segment(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # One 1 MiB segment; with the tail shrunk to 16 KiB only its end is re-checked.
    monkeypatch.setattr(mqlite.recovery, "NORMAL_TAIL_BYTES", 16 * 1024)
    root = tmp_path / "store"
    config = _config(commitlog_file_size=1 << 20)
    with _open(root, config) as store:
        results = [_put(store, i, queue_id=i % 3) for i in range(2500)]
    assert results[-1].commit_log_offset < 1 << 20
    with _open(root) as store:
        report = store.recovery
        assert report.records_scanned < 100
        assert report.start_offset >= results[-1].commit_log_offset - 16 * 1024
        assert not report.damaged_tail
    # Damage at the tail is still found.
    _damage(root, results[-1].commit_log_offset, len(_body(2499)), segment=1 << 20)
    with _open(root) as store:
        assert store.recovery.damaged_tail
        assert store.commitlog.max_offset == results[-1].commit_log_offset
        assert store.max_offset(TOPIC, 2499 % 3) == 2499 // 3
        assert sum(store.max_offset(TOPIC, q) for q in range(3)) == 2499


# -- what recovery carries over ----------------------------------------------------------------------------------------
def test_min_offsets_survive_a_restart_after_clean_up(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000) + 86_400_000)  # files look a day old
    root = str(tmp_path / "store")
    config = _config(commitlog_file_size=8192, file_reserved_time=0.0)
    with _open(root, config, clock=clock) as store:
        for i in range(100):
            _put(store, i)
        assert store.wait_dispatched()
        assert store.delete_expired_files(force=True) > 0
        low = store.min_offset(TOPIC, 0)
        assert low > 0
    with _open(root, clock=clock) as store:
        assert store.min_offset(TOPIC, 0) == low
        assert store.commitlog.min_offset > 0
        assert _bodies(store) == [_body(i) for i in range(low, 100)]


def test_a_reopen_without_puts_keeps_the_checkpoint(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    clock = ManualClock(step_ms=10)
    with _open(root, _config(), clock=clock) as store:
        last = [_put(store, i) for i in range(5)][-1]
    before = rf.decode_checkpoint(root)
    assert before["physic_msg_timestamp"] == last.store_timestamp
    with _open(root, clock=clock):
        pass
    after = rf.decode_checkpoint(root)
    assert after["physic_msg_timestamp"] == before["physic_msg_timestamp"]
    assert after["min_timestamp"] == before["min_timestamp"] > 0


def test_store_times_do_not_decrease_across_a_restart(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config(), clock=ManualClock(T0 + 60_000)) as store:
        first = _put(store, 0)
    with _open(root, clock=ManualClock(T0)) as store:
        second = _put(store, 1)
    assert second.store_timestamp >= first.store_timestamp


def test_host_bits_in_sys_flag_cannot_corrupt_the_log(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with _open(root, _config()) as store:
        for i in range(5):
            _put(store, i)
        for flags in (SysFlag.BORNHOST_V6, SysFlag.STOREHOSTADDRESS_V6):
            try:
                store.put("Other", 0, b"odd", sys_flag=flags)
            except MQClientError:
                pass  # refusing is fine too
        for i in range(5, 10):
            _put(store, i)
    with _open(root) as store:
        assert _bodies(store) == [_body(i) for i in range(10)]


# -- the key index after recovery --------------------------------------------------------------------------------------
def _ids(results: list[PutResult]) -> list[str]:
    return [r.offset_msg_id for r in results]


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_records_appended_after_a_cut_are_indexed_at_once(tmp_path: Path, abnormal: bool) -> None:
    # A cut of several records left the index's end past the cut: the records appended
    # there were skipped by the index until the log passed the old end.
    import mqlite

    root = tmp_path / "store"
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(30)]
    _tear(root, results[20], len(_body(20)))  # records 20..29 go
    if abnormal:
        _create_abort(root)
    with mqlite.open(str(root)) as broker:
        assert broker.store.commitlog.max_offset == results[20].commit_log_offset
        again = [broker.store.put(TOPIC, 0, b"again %d" % i, {"KEYS": f"again-{i}", "UNIQ_KEY": f"{i:032X}"})
                 for i in range(5)]
        assert again[-1].commit_log_offset < results[-1].commit_log_offset  # still below the old end
        for i, r in enumerate(again):
            assert [m.body for m in broker.query_message(TOPIC, f"again-{i}")] == [b"again %d" % i]
            assert broker.view_message(f"{i:032X}").body == b"again %d" % i
            assert broker.view_message(r.offset_msg_id).body == b"again %d" % i
        for i in range(20, 30):  # the cut records' stale entries are gone, not just filtered out
            assert broker.query_message(TOPIC, f"key-{i}") == []
    with _open(root) as store:
        assert store.index.verify() == []
    assert rf.cross_check_store(str(root), hash_slot_num=1000) == []


@pytest.mark.parametrize("abnormal", [False, True], ids=["clean", "crashed"])
def test_a_deleted_index_directory_is_rebuilt(tmp_path: Path, abnormal: bool) -> None:
    import mqlite

    root = tmp_path / "store"
    config = _config(max_hash_slot_num=64, max_index_num=100)  # several index files
    uniq = [f"{i:032X}" for i in range(300)]
    with _open(root, config) as store:
        for i in range(300):
            store.put(TOPIC, i % 3, _body(i), {"KEYS": f"key-{i}", "UNIQ_KEY": uniq[i]})
        assert len(store.commitlog.mapped_files.files) >= 2
    shutil.rmtree(root / "index")
    if abnormal:
        _create_abort(root)
    with mqlite.open(str(root)) as broker:
        assert broker.store.recovery.index_rebuilt_from == 0
        for i in range(300):
            assert [m.body for m in broker.query_message(TOPIC, f"key-{i}")] == [_body(i)]
            assert broker.view_message(uniq[i]).body == _body(i)
    with _open(root) as store:  # a clean reopen rebuilds nothing and keeps finding everything
        assert store.recovery.index_rebuilt_from is None
        assert store.index.verify() == []
        assert [m.body for m in store.query_message(TOPIC, "key-299")] == [_body(299)]


@pytest.mark.parametrize("damage", ["truncated", "garbage-header"])
def test_a_damaged_index_file_is_rebuilt(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "store"
    config = _config(max_hash_slot_num=64, max_index_num=100)
    with _open(root, config) as store:
        for i in range(200):
            _put(store, i)
    files = sorted((root / "index").iterdir())
    assert len(files) >= 3
    if damage == "truncated":
        os.truncate(files[1], 100)
    else:
        with open(files[1], "r+b") as f:
            f.write(b"\xff" * 40)
    with _open(root) as store:  # RocketMQ and mqlite once refused to open: "delete the index directory"
        assert store.recovery.index_rebuilt_from is not None
        assert store.index.verify() == []
        for i in range(200):
            assert [m.body for m in store.query_message(TOPIC, f"key-{i}")] == [_body(i)]


def test_a_store_without_keys_is_not_rescanned_at_every_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(50):
            store.put(TOPIC, 0, _body(i))
    with _open(root) as store:
        assert store.recovery.index_rebuilt_from is None  # the empty index file says "indexed up to here"
        store.put(TOPIC, 0, b"keyed", {"KEYS": "late"})
        assert store.wait_dispatched()
        assert [m.body for m in store.query_message(TOPIC, "late")] == [b"keyed"]


# -- a bad body CRC in the middle of the log -------------------------------------------------------------------------
def _flip_body_byte(root: Path, result: PutResult) -> None:
    path = root / "commitlog" / offset_to_file_name(result.commit_log_offset - result.commit_log_offset % SEGMENT)
    with open(path, "r+b") as f:
        f.seek(result.commit_log_offset % SEGMENT + 88 + 10)  # inside the body: only the CRC notices
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize("queue_lost", [False, True], ids=["unit-present", "queues-rebuilt"])
def test_a_bad_crc_in_the_middle_sets_one_record_aside(tmp_path: Path, queue_lost: bool) -> None:
    root = tmp_path / "store"
    with _open(root, _config(check_crc_on_recover=True)) as store:
        results = [_put(store, i, queue_id=i % 2) for i in range(300)]
    victim = results[150]  # queue 0, queue offset 75
    _flip_body_byte(root, victim)
    if queue_lost:
        shutil.rmtree(root / "consumequeue")
    _create_abort(root)
    with _open(root) as store:
        report = store.recovery
        assert report.set_aside == [(victim.commit_log_offset, victim.wrote_bytes)]
        assert report.records_set_aside == 1 and not report.damaged_tail
        assert store.commitlog.max_offset == results[-1].commit_log_offset + results[-1].wrote_bytes
        # The unit stays (queue offsets are not renumbered); reads skip the record.
        assert store.max_offset(TOPIC, 0) == 150 and store.max_offset(TOPIC, 1) == 150
        assert _bodies(store, TOPIC, 0) == [_body(i) for i in range(0, 300, 2) if i != 150]
        assert _bodies(store, TOPIC, 1) == [_body(i) for i in range(1, 300, 2)]
        only = store.get_messages(TOPIC, 0, 75, 1)
        assert (only.status, only.next_begin_offset) == (GetMessageStatus.MESSAGE_WAS_REMOVING, 76)
        assert store.query_message(TOPIC, "key-150") == []
        assert [m.body for m in store.query_message(TOPIC, "key-151")] == [_body(151)]
        with pytest.raises(mqlite.MessageNotFoundError):
            store.look_message_by_offset(victim.commit_log_offset)
        assert _put(store, 300).queue_offset == 150  # appends go on at the end
    # A clean reopen does not scan that far back; the record stays set aside all the same.
    with _open(root) as store:
        assert not store.recovery.abnormal and store.recovery.set_aside == []
        assert _bodies(store, TOPIC, 0) == [_body(i) for i in range(0, 301, 2) if i != 150]
    with mqlite.StoreReader(str(root)) as reader:
        assert [m.body for m in reader.get_messages(TOPIC, 0, 74, 3).messages] == [_body(148), _body(152)]


class _Everything:
    """A message filter that matches every message (a subscription to `*` with a filter in place)."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, msg: object) -> bool:
        return True


def test_a_filtered_pull_skips_set_aside_records_with_one_line(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    # The filtered read once took set-aside records for a damaged consume queue: a read-repair
    # walk, an error line saying so, and a warning per record (twice for most).
    root = tmp_path / "store"
    with _open(root, _config(check_crc_on_recover=True)) as store:
        results = [_put(store, i) for i in range(60)]
    for victim in (20, 21, 22):
        _flip_body_byte(root, results[victim])
    _create_abort(root)
    with _open(root) as store:
        assert len(store.recovery.set_aside) == 3
        caplog.clear()
        with caplog.at_level("DEBUG", logger="mqlite"):
            result = store.get_messages(TOPIC, 0, 15, 32, message_filter=_Everything())
        assert [m.queue_offset for m in result.messages] == [*range(15, 20), *range(23, 50)]
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        assert "set aside" in caplog.records[0].getMessage()


def test_a_bad_crc_in_the_last_record_is_still_a_torn_tail(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(40)]
    _flip_body_byte(root, results[-1])
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.set_aside == []
        assert store.commitlog.max_offset == results[-1].commit_log_offset
        assert _bodies(store) == [_body(i) for i in range(39)]


def test_a_partial_last_record_is_still_cut_when_a_crc_fails_before_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(40)]
    _flip_body_byte(root, results[10])
    last = results[-1]
    path = root / "commitlog" / offset_to_file_name(0)
    with open(path, "r+b") as f:  # the last record lost its second half
        f.seek(last.commit_log_offset + last.wrote_bytes // 2)
        f.write(bytes(last.wrote_bytes - last.wrote_bytes // 2))
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.set_aside == [(results[10].commit_log_offset, results[10].wrote_bytes)]
        assert store.recovery.damaged_tail
        assert store.commitlog.max_offset == last.commit_log_offset
        assert _bodies(store) == [_body(i) for i in range(39) if i != 10]


def test_a_later_cut_before_a_set_aside_record_forgets_it(tmp_path: Path) -> None:
    # Records appended where a set-aside record was cut off must never be skipped.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        results = [_put(store, i) for i in range(40)]
    _flip_body_byte(root, results[30])
    _create_abort(root)
    with _open(root) as store:
        assert store.recovery.set_aside == [(results[30].commit_log_offset, results[30].wrote_bytes)]
    assert mqlite.recovery.load_set_aside(str(root)) == {results[30].commit_log_offset: results[30].wrote_bytes}
    _tear(root, results[20], len(_body(20)))
    with _open(root) as store:
        assert store.commitlog.max_offset == results[20].commit_log_offset
        assert store.commitlog.set_aside == {}
        again = [_put(store, i) for i in range(20, 40)]
        assert results[30].commit_log_offset in [r.commit_log_offset for r in again]  # the same sizes: same places
        assert store.wait_dispatched()
        assert _bodies(store) == [_body(i) for i in range(40)]
    assert mqlite.recovery.load_set_aside(str(root)) == {}


# -- a damaged checkpoint ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["missing", "short", "zeros", "garbage", "far-future"])
def test_a_damaged_checkpoint_gets_a_full_recovery(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "store"
    clock = ManualClock(T0, step_ms=1000)  # checkpoint times would start recovery at the last segment
    with _open(root, _config(), clock=clock) as store:
        for i in range(400):
            _put(store, i, queue_id=i % 2)
        assert len(store.commitlog.mapped_files.files) >= 3
    checkpoint = root / "checkpoint"
    if damage == "missing":
        checkpoint.unlink()
    elif damage == "short":
        os.truncate(checkpoint, 16)
    elif damage == "zeros":
        checkpoint.write_bytes(bytes(4096))
    elif damage == "garbage":
        checkpoint.write_bytes(os.urandom(4096))
    else:  # well formed, but from a clock years ahead
        checkpoint.write_bytes((T0 + 10**12).to_bytes(8, "big") * 3 + bytes(4096 - 24))
    shutil.rmtree(root / "consumequeue")  # only a recovery from the first segment finds every message
    _create_abort(root)
    with _open(root, clock=clock) as store:
        report = store.recovery
        assert report.abnormal and report.start_offset == 0
        assert (report.checkpoint_damage is None) == (damage == "zeros")  # zeros are a valid, empty checkpoint
        assert _bodies(store, TOPIC, 0) == [_body(i) for i in range(0, 400, 2)]
        assert _bodies(store, TOPIC, 1) == [_body(i) for i in range(1, 400, 2)]
        assert store.commitlog.last_store_timestamp < T0 + 10**12  # no store time taken from garbage
    assert rf.decode_checkpoint(str(root))["physic_msg_timestamp"] > 0


def test_a_directory_in_place_of_the_checkpoint_is_refused_clearly(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        _put(store, 0)
    (root / "checkpoint").unlink()
    (root / "checkpoint").mkdir()
    with pytest.raises(mqlite.StoreCorruptedError, match="checkpoint.*is a directory.*remove it"):
        _open(root)
    os.rmdir(root / "checkpoint")
    with _open(root) as store:  # the advice works
        assert store.recovery.checkpoint_damage == "missing"
        assert _bodies(store) == [_body(0)]


def test_the_empty_index_file_survives_reopens(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        for i in range(5):
            store.put(TOPIC, 0, _body(i))
    names = sorted(os.listdir(root / "index"))
    assert len(names) == 1
    with _open(root):  # (after a crash it is dropped and made again, as any empty index file is)
        pass
    assert sorted(os.listdir(root / "index")) == names


def test_a_clean_reopen_does_not_walk_keyless_records_after_the_index(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Keyless records after the last index entry (Spark rows without producer properties, store
    # puts) once made every clean open's coverage check walk all of them: O(store size) per open.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        keyed = [_put(store, i) for i in range(3)]
        keyless = [store.put(TOPIC, 1, _body(i)) for i in range(300)]  # several segments
        end = store.commitlog.max_offset
    walked: list[tuple[int, int]] = []
    keyed_record_in = mqlite.recovery._keyed_record_in

    def watched(commitlog: object, start: int, stop: int, *, include_start: bool) -> bool:
        walked.append((start, stop))
        return keyed_record_in(commitlog, start, stop, include_start=include_start)  # type: ignore[arg-type]

    monkeypatch.setattr(mqlite.recovery, "_keyed_record_in", watched)
    with _open(root) as store:
        assert store.recovery.index_rebuilt_from is None
        assert all(start >= end for start, _ in walked), walked  # nothing below the log's end is walked
        assert [m.body for m in store.query_message(TOPIC, "key-2")] == [_body(2)]
        assert store.index.verify() == []
    # A cut below the recorded end (a torn keyless tail) lowers it: records appended there are indexed.
    _tear(root, keyless[200], len(_body(200)))
    with _open(root) as store:
        assert store.commitlog.max_offset == keyless[200].commit_log_offset
        again = store.put(TOPIC, 0, b"again", {"KEYS": "again"})
        assert keyed[-1].commit_log_offset < again.commit_log_offset < end
        assert store.wait_dispatched()
        assert [m.body for m in store.query_message(TOPIC, "again")] == [b"again"]
    with _open(root) as store:
        assert store.index.verify() == []
        assert [m.body for m in store.query_message(TOPIC, "again")] == [b"again"]


def test_an_index_rebuild_steps_over_damage_in_an_old_segment(tmp_path: Path) -> None:
    # A clean open re-checks only the log's last MiB; an index rebuilt at that open walks the whole
    # log and once stopped at damage there, leaving every later record's keys unfindable (the scan
    # and a queue rebuild step over such damage, `_resync`).
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        results = [_put(store, i, queue_id=i % 4) for i in range(3000)]  # 1.2 MiB: segment 0 is not re-checked
    victim = results[10]
    _damage(root, victim.commit_log_offset, len(_body(10)))
    shutil.rmtree(root / "index")
    with _open(root, deadline=30) as store:
        assert not store.recovery.abnormal and store.recovery.index_rebuilt_from == 0
        assert [m.body for m in store.query_message(TOPIC, "key-11")] == [_body(11)]
        assert [m.body for m in store.query_message(TOPIC, "key-2999")] == [_body(2999)]
        assert store.query_message(TOPIC, "key-10") == []
        start, end = victim.commit_log_offset, results[11].commit_log_offset
        assert store.recovery.damaged == [(start, end)]
        assert mqlite.recovery.load_damaged(str(root)) == {start: end}
    with _open(root) as store:  # the range is known: reads skip the lost record's unit
        assert store.get_messages(TOPIC, 2, 2, 1).status is GetMessageStatus.MESSAGE_WAS_REMOVING


def test_an_open_that_fails_while_recovering_leaves_abort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Open changes files before it ends (queues rebuilt, index files dropped, the log cut): a crash
    # in the middle must make the next open recover as after a crash, never trust what was half done.
    root = tmp_path / "store"
    with _open(root, _config()) as store:
        _put(store, 0)

    def crash(self: object, rebuild_index: bool) -> None:
        raise RuntimeError("crashed while recovering")

    with monkeypatch.context() as patch:
        patch.setattr(MessageStore, "_after_recovery", crash)
        with pytest.raises(RuntimeError):
            _open(root)
    assert (root / "abort").exists()
    with _open(root) as store:
        assert store.recovery.abnormal
