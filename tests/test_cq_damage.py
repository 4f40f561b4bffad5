"""Consume-queue damage: open finds it and rebuilds the queue from the commit log, reads never stall
on a bad unit, and `verify` names the root cause once.

Every damage kind (a missing first, middle or last file, a short or too long file, a zeroed tail,
a zeroed whole file, a flipped unit, a garbage file) is done to queue 0 of a cleanly closed store
and of a crashed one (an `abort` marker left behind, as a killed writer leaves it). Then:
`verify` before reopening names the damaged file in at most a couple of findings; a reader of the
damaged files never stalls; after reopening every acknowledged message is reachable, by consuming
from the first offset and by `query_message_by_offset`; and `verify` is clean after a close.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
import mqlite.recovery
from mqlite.clock import ManualClock
from mqlite.config import StoreConfig
from mqlite.consumer.litepull import LitePullConsumer
from mqlite.consumer.types import ConsumeFromWhere
from mqlite.message import MessageExt
from mqlite.reader import StoreReader
from mqlite.store import MessageStore
from mqlite.storebase import GetMessageStatus, StoreFiles
from mqlite.verify import verify_store
from support import deadline

SEGMENT = 64 * 1024
UNITS_PER_FILE = 10
CQ_FILE = 20 * UNITS_PER_FILE
TOPIC = "T"
QUEUES = 3
PER_QUEUE = 60  # six consume-queue files per queue
SETTINGS = dict(commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE, max_hash_slot_num=64, max_index_num=256)


def _body(qid: int, i: int) -> bytes:
    return b"%s/%d #%04d " % (TOPIC.encode(), qid, i) + b"." * 200


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cq") / "store"
    with MessageStore(str(root), StoreConfig(**SETTINGS)) as store:  # type: ignore[arg-type]
        for i in range(PER_QUEUE):
            for qid in range(QUEUES):
                store.put(TOPIC, qid, _body(qid, i), {"KEYS": f"k{qid}-{i}"})
    assert verify_store(str(root)).ok
    return root


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(template, copy)
    return copy


def _queue_dir(root: Path, qid: int = 0) -> Path:
    return root / "consumequeue" / TOPIC / str(qid)


def _file(root: Path, index: int, qid: int = 0) -> Path:
    return _queue_dir(root, qid) / f"{index * CQ_FILE:020d}"


def _zero(path: Path, start: int, end: int) -> None:
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(end - start))


def _flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ 0x40]))


def _directory_in_place(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "x").write_bytes(b"not a queue file")


# Each damage: what it does, and a text `verify` must name.
DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing-first-file": (lambda r: _file(r, 0).unlink(), f"{0:020d}"),
    "missing-middle-file": (lambda r: _file(r, 2).unlink(), f"{2 * CQ_FILE:020d}: missing"),
    "missing-last-file": (lambda r: _file(r, 5).unlink(), f"{5 * CQ_FILE:020d}: missing"),
    "short-file": (lambda r: os.truncate(_file(r, 3), 130), "bytes short"),
    "truncated-last-file": (lambda r: os.truncate(_file(r, 5), 60), "bytes short"),
    "too-long-file": (lambda r: os.truncate(_file(r, 1), CQ_FILE + 20), "bytes too long"),
    "zeroed-tail-of-last-file": (lambda r: _zero(_file(r, 5), 100, CQ_FILE), "zeroed"),
    "zeroed-tail-of-middle-file": (lambda r: _zero(_file(r, 2), 100, CQ_FILE), "zeroed"),
    "zeroed-whole-middle-file": (lambda r: _zero(_file(r, 3), 0, CQ_FILE), "zeroed"),
    "zeroed-whole-last-file": (lambda r: _zero(_file(r, 5), 0, CQ_FILE), "zeroed"),
    "flipped-offset-of-last-unit": (lambda r: _flip(_file(r, 5), CQ_FILE - 20 + 5), "pointing at no record"),
    "flipped-size-of-a-tail-unit": (lambda r: _flip(_file(r, 5), 5 * 20 + 10), "pointing at no record"),
    "flipped-first-unit-of-a-file": (lambda r: _flip(_file(r, 1), 6), "pointing at no record"),
    "garbage-middle-file": (lambda r: _file(r, 2).write_bytes(random.Random(7).randbytes(CQ_FILE)), f"{2 * CQ_FILE:020d}"),
    # Nothing maps a directory: verify names it, a writer moves it aside (`<name>.damaged-0`) and rebuilds.
    "directory-first-file": (lambda r: _directory_in_place(_file(r, 0)), f"{0:020d}: a directory in place"),
    "directory-middle-file": (lambda r: _directory_in_place(_file(r, 2)), f"{2 * CQ_FILE:020d}: a directory in place"),
    "directory-last-file": (lambda r: _directory_in_place(_file(r, 5)), f"{5 * CQ_FILE:020d}: a directory in place"),
}


def _read_all(store: StoreFiles, qid: int) -> list[MessageExt]:
    """Consume queue `qid` from its first offset; a read that does not move on fails the test."""
    out: list[MessageExt] = []
    offset = store.min_offset(TOPIC, qid)
    with deadline(10):
        while offset < store.max_offset(TOPIC, qid):
            result = store.get_messages(TOPIC, qid, offset, 7)
            assert result.next_begin_offset > offset, f"the pull stalls at {TOPIC}/{qid} offset {offset}: {result}"
            out += result.messages
            offset = result.next_begin_offset
    return out


def _check_every_message(root: Path, *, abnormal: bool) -> None:
    with deadline(20):
        broker = mqlite.open(str(root))
    with broker:
        store = broker.store
        assert store.recovery.abnormal == abnormal
        # A crashed store's recovery re-dispatches the newest records anyway: a queue that only lost
        # units among them is mended by that silently.
        assert abnormal or f"consumequeue/{TOPIC}/0" in store.recovery.queues_repaired
        for qid in range(QUEUES):
            got = _read_all(store, qid)
            assert [m.body for m in got] == [_body(qid, i) for i in range(PER_QUEUE)], f"queue {qid}"
            assert [m.queue_offset for m in got] == list(range(PER_QUEUE))
            for i in (0, PER_QUEUE // 2, PER_QUEUE - 1):
                assert broker.query_message_by_offset(TOPIC, qid, i).body == _body(qid, i)
        # Appends continue at the right queue offset.
        assert store.put(TOPIC, 0, b"after").queue_offset == PER_QUEUE
    report = verify_store(str(root))
    assert report.ok, report.problems


@pytest.mark.parametrize("abnormal", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_queue_is_found_and_rebuilt(store: Path, damage: str, abnormal: bool) -> None:
    do, named = DAMAGES[damage]
    do(store)
    if abnormal:
        (store / "abort").write_text("12345")
    report = verify_store(str(store))
    assert not report.ok
    assert any(named in p and f"consumequeue/{TOPIC}/0" in p for p in report.problems), report.problems
    assert len(report.problems) <= 2, report.problems  # the root cause, not a line per unit
    with StoreReader(str(store)) as reader:  # a reader of the damaged files never stalls
        for qid in range(QUEUES):
            _read_all(reader, qid)
    _check_every_message(store, abnormal=abnormal)


def test_verify_counts_the_consequences_of_a_short_file(store: Path) -> None:
    os.truncate(_file(store, 3), 0 + 20 * 4)  # 6 units of 10 gone
    report = verify_store(str(store))
    assert report.problems == [f"consumequeue/{TOPIC}/0/{3 * CQ_FILE:020d}: {CQ_FILE - 80} bytes short "
                               f"(6 units missing); 6 messages of {TOPIC}/0 unreachable"]


def test_verify_names_a_gap_of_several_files_once(store: Path) -> None:
    _file(store, 2).unlink()
    _file(store, 3).unlink()
    report = verify_store(str(store))
    assert report.problems == [f"consumequeue/{TOPIC}/0/{2 * CQ_FILE:020d}: missing (2 files from here missing); "
                               f"20 units lost; 20 messages of {TOPIC}/0 unreachable"]


def test_verify_names_a_missing_queue_directory(store: Path) -> None:
    shutil.rmtree(_queue_dir(store, 1))
    report = verify_store(str(store))
    assert report.problems == [f"consumequeue/{TOPIC}/1: missing; {PER_QUEUE} messages of {TOPIC}/1 unreachable"]
    _check_missing_queue_reopen(store)


def _check_missing_queue_reopen(root: Path) -> None:
    with mqlite.open(str(root)) as broker:
        assert [m.body for m in _read_all(broker.store, 1)] == [_body(1, i) for i in range(PER_QUEUE)]


def _damage_unit_14(root: Path, damage: str) -> str:
    """Damage the unit of queue offset 14 (in an old file, between its first and last units,
    where open does not look); returns what verify calls it."""
    if damage == "flipped":
        _flip(_file(root, 1), 4 * 20 + 7)  # the offset of queue offset 14
        return "pointing at no record of this queue offset"
    _zero(_file(root, 1), 4 * 20, 5 * 20)
    return "zeroed"


@pytest.mark.parametrize("damage", ["flipped", "zeroed"])
def test_a_bad_unit_in_an_old_file_is_repaired_by_the_read(store: Path, damage: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # Open checks only the first and last unit of an old file: a bad unit between them is found by
    # verify and by the read that meets it, which finds the record between its neighbours' records
    # (read repair): a reader hands it out, and a writer also rewrites the unit.
    what = _damage_unit_14(store, damage)
    finding = f"consumequeue/{TOPIC}/0/{CQ_FILE:020d}: unit at queue offset 14 {what}; 1 messages of {TOPIC}/0 unreachable"
    assert verify_store(str(store)).problems == [finding]
    with StoreReader(str(store)) as reader, caplog.at_level(logging.WARNING, logger="mqlite"):
        got = _read_all(reader, 0)
        assert [m.body for m in got] == [_body(0, i) for i in range(PER_QUEUE)]
        filtered = reader.get_messages(TOPIC, 0, 14, 3, _Everything())
        assert [m.queue_offset for m in filtered.messages] == [14, 15, 16]
    assert any("queue offset 14" in r.getMessage() and "found the records" in r.getMessage() for r in caplog.records)
    assert verify_store(str(store)).problems == [finding]  # a reader never writes: the damage stays reported
    with mqlite.open(str(store)) as broker:
        assert broker.query_message_by_offset(TOPIC, 0, 14).body == _body(0, 14)
        # A consumer reading the queue gets every message.
        consumer = LitePullConsumer(broker, "cg", consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.assign([mqlite.MessageQueue(TOPIC, broker.broker_name, 0)])
        consumer.start()
        try:
            polled: list[MessageExt] = []
            with deadline(20):
                while len(polled) < PER_QUEUE:
                    polled += consumer.poll(1.0)
            assert sorted(m.queue_offset for m in polled) == list(range(PER_QUEUE))
        finally:
            consumer.shutdown()
    assert verify_store(str(store)).ok  # the writer's read rewrote the unit


def test_a_filtered_read_repairs_a_bad_unit(store: Path) -> None:
    _damage_unit_14(store, "zeroed")
    with mqlite.open(str(store)) as broker:
        with deadline(10):
            result = broker.store.get_messages(TOPIC, 0, 12, 5, _Everything())
        assert [m.queue_offset for m in result.messages] == [12, 13, 14, 15, 16]
    assert verify_store(str(store)).ok


def test_a_bad_unit_whose_record_is_destroyed_is_skipped(store: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The record is gone too (zeroed in an old segment, which a clean open does not re-check):
    # the read's search finds nothing and skips the unit with an error, as before read repair.
    with StoreReader(str(store)) as reader:
        victim = reader.get_messages(TOPIC, 0, 14, 1).messages[0]
    _zero(store / "commitlog" / f"{0:020d}", victim.commit_log_offset, victim.commit_log_offset + victim.store_size)
    _damage_unit_14(store, "zeroed")
    with mqlite.open(str(store)) as broker:
        with caplog.at_level(logging.ERROR, logger="mqlite"):
            got = _read_all(broker.store, 0)
        assert [m.queue_offset for m in got] == [i for i in range(PER_QUEUE) if i != 14]
        assert any("queue offset 14" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
        with deadline(10):
            result = broker.store.get_messages(TOPIC, 0, 14, 3, _Everything())
        assert [m.queue_offset for m in result.messages] == [15, 16, 17]
    assert not verify_store(str(store)).ok


class _Everything:
    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, message: MessageExt) -> bool:
        return True


@pytest.mark.parametrize("index", [4, 5], ids=["second-to-last-file", "last-file"])
def test_a_zeroed_unit_in_the_newest_files(store: Path, index: int) -> None:
    # Open finds it (a file before the last is not full; data behind the last file's prefix) and
    # rebuilds the queue. A reader of the damaged files reads past it to the end of the queue (read
    # repair finds its record), but in the last file, where it cannot tell damage from a unit a live
    # writer is writing, it stops.
    _zero(_file(store, index), 3 * 20, 4 * 20)
    bad = index * UNITS_PER_FILE + 3
    with StoreReader(str(store)) as reader:
        got = _read_all(reader, 0)
    end = PER_QUEUE if index < 5 else bad
    assert [m.queue_offset for m in got] == list(range(end))
    with mqlite.open(str(store)) as broker:
        assert [m.queue_offset for m in _read_all(broker.store, 0)] == list(range(PER_QUEUE))


def test_verify_reports_a_body_crc_mismatch_once(store: Path) -> None:
    with StoreReader(str(store)) as reader:
        victim = reader.get_messages(TOPIC, 1, 20, 1).messages[0]
    path = store / "commitlog" / f"{0:020d}"
    _flip(path, victim.commit_log_offset + victim.store_size - 30)  # inside the body
    report = verify_store(str(store))
    assert report.problems == [f"record at commit-log offset {victim.commit_log_offset}: body CRC mismatch; set aside"]


def test_a_rebuilt_queue_keeps_its_min_offset_after_segments_aged_out(tmp_path: Path) -> None:
    clock = ManualClock(int(time.time() * 1000) + 86_400_000)  # files look a day old
    root = tmp_path / "store"
    config = StoreConfig(commitlog_file_size=8192, consumequeue_file_size=CQ_FILE, file_reserved_time=0.0,
                         max_hash_slot_num=64, max_index_num=256)
    with MessageStore(str(root), config, clock=clock) as store:
        for i in range(100):
            store.put(TOPIC, 0, _body(0, i))
        assert store.delete_expired_files(force=True) > 0
        low = store.min_offset(TOPIC, 0)
    assert 0 < low < 100
    last = sorted(_queue_dir(root).iterdir())[-1]
    os.truncate(last, 100)  # the newest file of the queue, short: the queue is rebuilt from what the log holds
    with MessageStore(str(root), clock=clock) as store:
        assert "consumequeue/T/0" in store.recovery.queues_repaired
        assert store.min_offset(TOPIC, 0) == low
        assert [m.body for m in _read_all(store, 0)] == [_body(0, i) for i in range(low, 100)]


def test_a_clean_store_is_not_rebuilt(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(template, root)
    with mqlite.open(str(root)) as broker:
        assert broker.store.recovery.queues_repaired == {}
        assert broker.store.recovery.records_dispatched == 0
    (root / "abort").write_text("12345")
    with mqlite.open(str(root)) as broker:
        assert broker.store.recovery.queues_repaired == {}


def test_a_light_message_queue_is_read_and_kept(store: Path) -> None:
    # A RocketMQ broker's multi-dispatch writes a light message queue's units pointing at records of
    # other topics and queues: such units are not damage (a copy of T/1's units stands in for it).
    light = store / "consumequeue" / "%LMQ%orders" / "0"
    shutil.copytree(_queue_dir(store, 1), light)
    assert verify_store(str(store)).ok
    with mqlite.open(str(store)) as broker:
        assert broker.store.recovery.queues_repaired == {}
        got = _read_all_of(broker.store, "%LMQ%orders")
        assert [m.body for m in got] == [_body(1, i) for i in range(PER_QUEUE)]


def _read_all_of(store: StoreFiles, topic: str) -> list[MessageExt]:
    with deadline(10):
        return store.get_messages(topic, 0, 0, 1000).messages


def test_a_rebuild_keeps_the_place_of_a_record_with_a_bad_body_crc(store: Path) -> None:
    # Recovery sets such a record aside; the walk that rebuilds queues still describes it, so a
    # rebuilt queue holds its unit and the queue's later units can follow it. (Through a whole
    # reopen this needs recovery's scan to set the record aside rather than cut the log there.)
    with StoreReader(str(store)) as reader:
        victim = reader.get_messages(TOPIC, 0, 20, 1).messages[0]
    _flip(store / "commitlog" / f"{0:020d}", victim.commit_log_offset + 88 + 10)  # a body byte (IPv4 hosts)
    assert "body CRC mismatch" in verify_store(str(store)).problems[0]
    with StoreReader(str(store)) as reader:
        walked = list(mqlite.recovery.walk_records(reader.commitlog, 0, SEGMENT, False, wanted={0}.__contains__))
    assert [(r.queue_id, r.queue_offset) for r in walked if r.topic == TOPIC] == [(0, i) for i in range(PER_QUEUE)]


def test_a_reader_of_a_full_last_file_maps_it_once_and_sees_the_next(store: Path) -> None:
    # Every read of such a queue once mapped all of its files again (leaking the old maps).
    with StoreReader(str(store)) as reader:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            assert len(reader.get_messages(TOPIC, 0, 0, 5).messages) == 5
        assert len(os.listdir("/proc/self/fd")) == before
        with MessageStore(str(store)) as writer:  # the writer rolls to a new file
            writer.put(TOPIC, 0, b"rolled")
            assert [m.body for m in reader.get_messages(TOPIC, 0, PER_QUEUE, 5).messages] == [b"rolled"]


def test_read_repair_beside_set_aside_records_logs_one_line(store: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Read repair looks for good neighbours of a bad unit through `CommitLog.read`, which logs each
    # set-aside record it refuses: a bad unit beside a run of them (a damaged range's thousands
    # of placeholders) logged a line per unit, on every read.
    with StoreReader(str(store)) as reader:
        neighbours = reader.get_messages(TOPIC, 0, 11, 3).messages  # queue offsets 11..13
    for victim in neighbours:
        _flip(store / "commitlog" / f"{0:020d}", victim.commit_log_offset + victim.store_size - 30)  # body CRC
    (store / "abort").write_text("1")  # a crash: recovery re-checks the records and sets them aside
    with MessageStore(str(store)) as writer:
        assert len(writer.recovery.set_aside) == 3
    _damage_unit_14(store, "zeroed")
    with StoreReader(str(store)) as reader, caplog.at_level(logging.DEBUG, logger="mqlite"):
        caplog.clear()
        result = reader.get_messages(TOPIC, 0, 14, 2)
    assert [m.queue_offset for m in result.messages] == [14, 15]
    assert len(caplog.records) == 1 and "found the records" in caplog.records[0].getMessage(), caplog.records
