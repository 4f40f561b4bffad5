"""Corruption tests: damage a closed store, then reopen it as a writer and read it with `StoreReader`.

Invariants, whatever the damage:
- the reader never crashes (no exception other than a documented `mqlite` error);
- every valid record before the damage point stays readable, at its queue offset, intact;
- the writer recovers (cut a torn tail, dropping consume-queue units that point at or past
  it; but a whole record whose body CRC fails is set aside, and damage with valid records
  after it is stepped over, not cut), rebuilds a damaged consume queue from the log
  (tests/test_cq_damage.py), or refuses loudly with `StoreCorruptedError` when a file has
  the wrong size; appends continue after a recovery.

The damage: a torn tail, a zeroed region, a flipped body byte (CRC mismatch: set aside), torn
properties, a truncated file, garbage files and names, a garbage checkpoint, an empty
directory, a consume-queue unit pointing past the log, lost consume queues, a lost page.
And what recovery cuts stays cut: no record or unit comes back after later appends and
a restart.
"""

from __future__ import annotations

import gc
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import mqlite
from _crashchild import check_message, make_body, make_properties, read_queue
from mqlite.reader import StoreLayout
from mqlite.testing import no_leaked_threads

SEGMENT = 64 * 1024
CQ_FILE = 20 * 100
SETTINGS: dict[str, Any] = {
    "commitlog_file_size": SEGMENT,
    "consumequeue_file_size": CQ_FILE,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
}
TOPIC = "Dmg"
QUEUES = 3
COUNT = 480  # about 240 KiB: four commit-log segments, several consume-queue and index files
HEADER = 88  # commit-log record bytes before the body (IPv4 hosts), per the format reference


@dataclass(frozen=True)
class Rec:
    """One message as written: where it is and what it holds."""

    qid: int
    qoff: int
    offset: int
    size: int
    seq: int


# -- building and damaging a store ------------------------------------------------------------
@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Rec]]:
    root = tmp_path_factory.mktemp("template") / "store"
    with mqlite.open(str(root), **SETTINGS) as broker:
        store = broker.store
        seq = 0
        while seq < COUNT:
            qid = seq % QUEUES
            if seq % 10 == 9:  # some batches too
                batch = [seq, seq + 1, seq + 2]
                store.put_batch(TOPIC, qid, [make_body(TOPIC, qid, s) for s in batch],
                                [make_properties(s) for s in batch])
                seq += 3
            else:
                store.put(TOPIC, qid, make_body(TOPIC, qid, seq), make_properties(seq))
                seq += 1
        assert store.wait_dispatched(30.0)
        recs = [Rec(qid, m.queue_offset, m.commit_log_offset, m.store_size, check_message(m, TOPIC, qid, i))
                for qid in range(QUEUES) for i, m in enumerate(read_queue(store, TOPIC, qid))]
    recs.sort(key=lambda r: r.offset)
    assert recs[-1].offset >= 3 * SEGMENT, "the template should span four segments"
    return root, recs


@pytest.fixture
def store(template: tuple[Path, list[Rec]], tmp_path: Path) -> tuple[Path, list[Rec]]:
    """A private copy of the template store."""
    root, recs = template
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    return copy, recs


def _segment(root: Path, offset: int) -> tuple[Path, int]:
    start = offset - offset % SEGMENT
    return root / "commitlog" / f"{start:020d}", offset - start


def _write_at(root: Path, offset: int, data: bytes) -> None:
    path, pos = _segment(root, offset)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _read_at(root: Path, offset: int, size: int) -> bytes:
    path, pos = _segment(root, offset)
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(size)


def _newest_segment_records(recs: list[Rec]) -> list[Rec]:
    last_start = recs[-1].offset - recs[-1].offset % SEGMENT
    return [r for r in recs if r.offset >= last_start]


def _abort(root: Path, abnormal: bool) -> None:
    if abnormal:
        (root / "abort").write_text("12345")  # a crashed writer's marker: forces abnormal recovery


ABNORMAL = pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])


# -- reading and checking ------------------------------------------------------------------------
_FIELDS = ("topic", "queue_id", "queue_offset", "commit_log_offset", "store_size", "body", "properties",
           "store_timestamp", "born_timestamp", "born_host", "store_host", "msg_id", "offset_msg_id", "keys", "tags")


def _tolerant_read(store: Any) -> dict[tuple[int, int], int | None]:
    """{(queue id, queue offset): seq, or None for a damaged message}, reading like any client.

    Only documented mqlite errors may come out of the library while reading a damaged
    message; anything else propagates and fails the test.
    """
    view: dict[tuple[int, int], int | None] = {}
    for topic in store.topics():
        for qid in store.queue_ids(topic):
            offset, high = store.min_offset(topic, qid), store.max_offset(topic, qid)
            while offset < high:
                result = store.get_messages(topic, qid, offset, 64)
                for msg in result.messages:
                    try:
                        for name in _FIELDS:
                            getattr(msg, name)
                    except mqlite.MQLiteError:
                        continue
                    try:
                        view[(msg.queue_id, msg.queue_offset)] = check_message(msg, topic, qid, msg.queue_offset)
                    except (AssertionError, ValueError):
                        view[(msg.queue_id, msg.queue_offset)] = None
                offset = max(result.next_begin_offset, offset + 1)
    return view


def _check_reader(root: Path, recs: list[Rec], damage_at: int | None) -> None:
    """The reader survives and returns every record before the damage, intact."""
    with mqlite.StoreReader(str(root)) as reader:
        view = _tolerant_read(reader)
    lost = [r for r in recs if (damage_at is None or r.offset < damage_at) and view.get((r.qid, r.qoff)) != r.seq]
    assert not lost, f"{len(lost)} records before the damage unreadable, e.g. {lost[:3]}"
    with mqlite.open(str(root), read_only=True) as broker:  # the read-only broker agrees
        assert broker.read_only
        for status in broker.topic_status(TOPIC):
            assert status.min_offset == 0


def _check_writer(root: Path, recs: list[Rec], damage_at: int | None) -> None:
    """The writer recovers to exactly the records before the damage, and appends continue."""
    survivors = [r for r in recs if damage_at is None or r.offset < damage_at]
    with mqlite.open(str(root)) as broker:
        store = broker.store
        for qid in range(QUEUES):
            expected = [r.seq for r in survivors if r.qid == qid]
            got = [check_message(m, TOPIC, qid, i) for i, m in enumerate(read_queue(store, TOPIC, qid))]
            assert got == expected, f"queue {qid}: {len(got)} messages after recovery, expected {len(expected)}"
        if damage_at is not None:
            last = survivors[-1]
            assert store.commitlog.max_offset == last.offset + last.size, "the log is cut after the last good record"
        _append_and_read(store, [len([r for r in survivors if r.qid == q]) for q in range(QUEUES)])


def _append_and_read(store: Any, next_offsets: list[int]) -> None:
    for qid, expected in enumerate(next_offsets):
        seq = 900_000 + qid
        result = store.put(TOPIC, qid, make_body(TOPIC, qid, seq), make_properties(seq))
        assert result.queue_offset == expected, f"queue {qid}: append got offset {result.queue_offset}"
    assert store.wait_dispatched(30.0)
    for qid, expected in enumerate(next_offsets):
        got = store.get_messages(TOPIC, qid, expected, 8).messages
        assert [check_message(m, TOPIC, qid, expected) for m in got] == [900_000 + qid]


def _verify_problems(root: Path) -> list[str]:
    from mqlite.verify import verify_store

    return verify_store(str(root)).problems


# -- a torn tail, zeroed bytes, a flipped byte -----------------------------------------------------
def test_the_public_layout_finds_every_segment_and_queue_file(template: tuple[Path, list[Rec]]) -> None:
    root, recs = template
    layout = StoreLayout.of(str(root))
    assert (layout.commitlog_file_size, layout.consumequeue_file_size) == (SEGMENT, CQ_FILE)
    for rec in recs:  # the segment holding each record, by the name the layout gives it
        start = rec.offset // SEGMENT * SEGMENT
        assert os.path.getsize(os.path.join(layout.commitlog_dir, layout.file_name(start))) == SEGMENT
    for qid in range(QUEUES):
        units = len([r for r in recs if r.qid == qid])
        last = (units - 1) * 20 // CQ_FILE * CQ_FILE
        assert os.path.isfile(os.path.join(layout.consume_queue_dir(TOPIC, qid), layout.file_name(last)))
    assert layout.set_aside() == {}


@ABNORMAL
def test_torn_tail(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    root, recs = store
    last = recs[-1]
    half = last.size // 2
    _write_at(root, last.offset + half, b"\0" * (last.size - half))
    _abort(root, abnormal)
    _check_reader(root, recs, last.offset)
    _check_writer(root, recs, last.offset)
    _check_reader(root, recs[:-1], None)


@ABNORMAL
def test_zeroed_region_in_newest_segment(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    # Valid records follow the zeroed bytes: only the records they destroyed are lost (recovery
    # resynchronises after the damage; RocketMQ would cut the log there).
    root, recs = store
    newest = _newest_segment_records(recs)
    victim = newest[len(newest) // 2]
    start, end = victim.offset + victim.size // 2, victim.offset + victim.size // 2 + 1500
    _write_at(root, start, b"\0" * (end - start))  # into the records after it too
    _abort(root, abnormal)
    _check_reader(root, recs, victim.offset)
    survivors = [r for r in recs if not (r.offset < end and start < r.offset + r.size)]
    with mqlite.open(str(root)) as broker:
        store = broker.store
        assert store.recovery.damaged and store.recovery.damaged[0][0] == victim.offset
        assert store.commitlog.max_offset == recs[-1].offset + recs[-1].size
        assert {k: v for k, v in _tolerant_read(store).items() if v is not None} == {
            (r.qid, r.qoff): r.seq for r in survivors}
        _append_and_read(store, [len([r for r in recs if r.qid == q]) for q in range(QUEUES)])


@ABNORMAL
def test_flipped_body_byte_sets_that_record_aside(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    # A whole record whose body CRC fails, with valid records after it, is set aside: only it
    # is lost (RocketMQ would truncate the log there and lose every record after it).
    root, recs = store
    newest = _newest_segment_records(recs)
    victim = newest[len(newest) // 3]
    at = victim.offset + HEADER + 30  # inside the body; the header and sizes stay plausible
    _write_at(root, at, bytes([_read_at(root, at, 1)[0] ^ 0x5A]))
    _abort(root, abnormal)
    _check_reader(root, recs, victim.offset)
    with mqlite.open(str(root)) as broker:
        store = broker.store
        assert store.recovery.set_aside == [(victim.offset, victim.size)]
        assert store.commitlog.max_offset == recs[-1].offset + recs[-1].size
        assert _tolerant_read(store) == {(r.qid, r.qoff): r.seq for r in recs if r != victim}
        _append_and_read(store, [len([r for r in recs if r.qid == q]) for q in range(QUEUES)])
    with mqlite.StoreReader(str(root)) as reader:  # a reader skips it too, never hands out the corrupt body
        assert (victim.qid, victim.qoff) not in _tolerant_read(reader)
    # Readers that map the files themselves (Spark tasks) learn it from the public layout.
    assert StoreLayout.of(str(root)).set_aside() == {victim.offset: victim.size}


@ABNORMAL
def test_torn_properties_are_cut(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    # What a power cut can leave under ASYNC_FLUSH: the page with the header and body was
    # written back, the page with the end of the properties was not.
    root, recs = store
    last = recs[-1]
    _write_at(root, last.offset + last.size - 3, b"\0\0\0")
    _abort(root, abnormal)
    _check_reader(root, recs, last.offset)
    _check_writer(root, recs, last.offset)


def test_damaged_tail_then_clean_reopen_is_stable(store: tuple[Path, list[Rec]]) -> None:
    # Recovery twice in a row (the second time from a clean exit) gives the same store.
    root, recs = store
    last = recs[-1]
    _write_at(root, last.offset + 4, b"\0\0\0\0")  # the magic
    _abort(root, True)
    with mqlite.open(str(root)):
        pass
    with mqlite.open(str(root)) as broker:
        assert not broker.store.recovery.abnormal
        assert broker.store.commitlog.max_offset == last.offset
        assert broker.store.max_offset(TOPIC, last.qid) == last.qoff


# -- truncated and wrongly sized files ---------------------------------------------------------------
def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("which", ["newest", "middle"])
def test_truncated_commitlog_segment(store: tuple[Path, list[Rec]], which: str) -> None:
    root, recs = store
    segments = sorted((root / "commitlog").iterdir())
    victim = segments[-1] if which == "newest" else segments[1]
    _truncate(victim, SEGMENT // 2)
    with no_leaked_threads(), pytest.raises(mqlite.StoreCorruptedError) as info:  # a failed open starts nothing
        mqlite.open(str(root))
    message = str(info.value)
    assert victim.name in message and str(SEGMENT) in message and str(SEGMENT // 2) in message, message
    # The failed open released the lock: the next attempt fails the same way, not with StoreLockedError.
    with pytest.raises(mqlite.StoreCorruptedError):
        mqlite.open(str(root))
    # A reader stops before the odd segment and serves everything in front of it.
    _check_reader(root, recs, int(victim.name))


def test_truncated_consume_queue_file(store: tuple[Path, list[Rec]]) -> None:
    root, recs = store
    files = sorted((root / "consumequeue" / TOPIC / "0").iterdir())
    assert len(files) >= 2
    _truncate(files[-1], 30)  # not even a whole unit
    units_before = int(files[-1].name) // 20
    _check_reader(root, [r for r in recs if r.qid != 0 or r.qoff < units_before], None)
    _check_writer(root, recs, None)  # the writer rebuilds the queue from the commit log (test_cq_damage)


def test_truncated_index_file(store: tuple[Path, list[Rec]]) -> None:
    root, recs = store
    files = sorted((root / "index").iterdir())
    assert files, "the template has index files"
    _truncate(files[0], 100)
    _check_reader(root, recs, None)
    with mqlite.open(str(root)) as broker:  # the index is derived data: rebuilt from the commit log
        assert broker.store.recovery.index_rebuilt_from == 0
        for r in recs:
            if "KEYS" in make_properties(r.seq):
                assert [m.queue_offset for m in broker.query_message(TOPIC, f"key-{r.seq}")] == [r.qoff]
    _check_reader(root, recs, None)


def test_stray_segment_after_a_gap(store: tuple[Path, list[Rec]]) -> None:
    # A correctly sized, segment-named file that does not follow the others: a segment is missing.
    root, recs = store
    stray = root / "commitlog" / f"{100 * SEGMENT:020d}"
    stray.write_bytes(b"\xab" * SEGMENT)
    with pytest.raises(mqlite.StoreCorruptedError) as info:
        mqlite.open(str(root))
    assert stray.name in str(info.value)
    _check_reader(root, recs, None)


def test_empty_newest_segment_is_a_crash_during_creation(store: tuple[Path, list[Rec]]) -> None:
    # RocketMQ deletes an empty last file; the records it held are gone and their units dropped.
    root, recs = store
    newest = sorted((root / "commitlog").iterdir())[-1]
    _truncate(newest, 0)
    _check_reader(root, recs, int(newest.name))
    _check_writer(root, recs, int(newest.name))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_failed_open_leaks_no_file_descriptors(store: tuple[Path, list[Rec]]) -> None:
    root, _ = store
    _truncate(sorted((root / "commitlog").iterdir())[-1], 1000)
    gc.collect()
    before = _open_fds()
    for _ in range(3):
        with pytest.raises(mqlite.StoreCorruptedError):
            mqlite.open(str(root))
    gc.collect()
    assert _open_fds() == before


# -- garbage --------------------------------------------------------------------------------------------
def _plant_garbage(root: Path) -> None:
    junk = b"\xde\xad\xbe\xef" * 333
    for name in ("foo", "1234", "00000000000000000000.bak", "0000000000000000000x", ".hidden"):
        (root / "commitlog" / name).write_bytes(junk)
    (root / "commitlog" / "subdir").mkdir()
    cq = root / "consumequeue"
    (cq / "strayfile").write_bytes(junk)  # a file where a topic directory belongs
    (cq / TOPIC / "notanumber").mkdir()
    (cq / TOPIC / "notanumber" / "00000000000000000000").write_bytes(junk)
    (cq / TOPIC / "0" / "garbage.txt").write_bytes(junk)
    (cq / TOPIC / "1" / "00000000000000000000.tmp").write_bytes(junk[:7])
    (cq / "EmptyTopic").mkdir()
    (cq / "EmptyTopic" / "0").mkdir()
    for name in ("garbage", "2024", "1999010100000000x", "README"):
        (root / "index" / name).write_bytes(junk[:41])
    (root / "index" / "somedir").mkdir()


def test_garbage_files_are_ignored(store: tuple[Path, list[Rec]]) -> None:
    root, recs = store
    _plant_garbage(root)
    _check_reader(root, recs, None)
    _check_writer(root, recs, None)
    _check_reader(root, recs, None)


@ABNORMAL
def test_garbage_config_json_is_refused_until_deleted(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    """Every config file and its .bak garbage: refused by name (guessing settings and offsets would move
    consumers and flush guarantees silently); once deleted, as the error says, the files give the rest."""
    root, recs = store
    for name in os.listdir(root / "config"):
        (root / "config" / name).write_bytes(b"{not json")
    _abort(root, abnormal)
    for read_only in (True, False):
        with pytest.raises(mqlite.StoreCorruptedError, match="store.json is damaged.*delete it"):
            mqlite.open(str(root), read_only=read_only)
    for name in os.listdir(root / "config"):
        (root / "config" / name).unlink()
    _check_reader(root, recs, None)
    _check_writer(root, recs, None)


@pytest.mark.parametrize("content", [
    pytest.param(bytes(range(256)) * 16, id="random"),
    pytest.param(b"\x01\x02\x03", id="short"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\x7f" + b"\xff" * 4095, id="far-future"),
    pytest.param(b"\xff" * 4096, id="negative"),
    pytest.param(b"\0" * 8192, id="too-long"),
])
@ABNORMAL
def test_garbage_checkpoint(store: tuple[Path, list[Rec]], content: bytes, abnormal: bool) -> None:
    root, recs = store
    (root / "checkpoint").write_bytes(content)
    _abort(root, abnormal)
    _check_reader(root, recs, None)
    _check_writer(root, recs, None)


def test_checkpoint_missing(store: tuple[Path, list[Rec]]) -> None:
    root, recs = store
    (root / "checkpoint").unlink()
    _abort(root, True)
    _check_reader(root, recs, None)
    _check_writer(root, recs, None)


# -- empty stores ------------------------------------------------------------------------------------------
def test_empty_directory(tmp_path: Path) -> None:
    with mqlite.StoreReader(str(tmp_path)) as reader:
        assert reader.topics() == []
        assert reader.get_messages(TOPIC, 0, 0).status is mqlite.GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    with mqlite.open(str(tmp_path)) as broker:
        assert broker.store.topics() == []
        _append_and_read(broker.store, [0] * QUEUES)
    with mqlite.StoreReader(str(tmp_path)) as reader:
        assert reader.max_offset(TOPIC, 0) == 1


def test_empty_subdirectories_and_abort(tmp_path: Path) -> None:
    for name in ("commitlog", "consumequeue", "index", "config"):
        (tmp_path / name).mkdir()
    (tmp_path / "abort").write_bytes(b"")
    (tmp_path / "lock").write_bytes(b"")
    with mqlite.StoreReader(str(tmp_path)) as reader:
        assert reader.topics() == []
    with mqlite.open(str(tmp_path), **SETTINGS) as broker:
        _append_and_read(broker.store, [0] * QUEUES)


def test_missing_directory_is_a_documented_error(tmp_path: Path) -> None:
    with pytest.raises(mqlite.StoreCorruptedError):
        mqlite.StoreReader(str(tmp_path / "nope"))
    with pytest.raises(mqlite.MQLiteError):
        mqlite.open(str(tmp_path / "nope"), read_only=True)


# -- consume queues out of step with the log ----------------------------------------------------------------
def _append_unit(root: Path, qid: int, qoff: int, offset: int, size: int) -> None:
    path = root / "consumequeue" / TOPIC / str(qid)
    start = qoff * 20 - (qoff * 20) % CQ_FILE
    with open(path / f"{start:020d}", "r+b") as f:
        f.seek(qoff * 20 - start)
        f.write(struct.pack(">qiq", offset, size, 0))


@ABNORMAL
def test_unit_pointing_past_the_log(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    root, recs = store
    qid = 1
    qoff = max(r.qoff for r in recs if r.qid == qid) + 1
    if qoff * 20 % CQ_FILE == 0:
        pytest.skip("the template's queue ends exactly at a file boundary")
    end = recs[-1].offset + recs[-1].size
    _append_unit(root, qid, qoff, end + 5000, 300)
    _abort(root, abnormal)
    _check_reader(root, recs, None)
    _check_writer(root, recs, None)  # the bogus unit is dropped: appends get offset qoff again


@ABNORMAL
def test_lost_consume_queues_are_rebuilt_from_the_log(store: tuple[Path, list[Rec]], abnormal: bool) -> None:
    # Also what a writer killed before its first dispatch leaves behind (see test_crash).
    root, recs = store
    shutil.rmtree(root / "consumequeue")
    _abort(root, abnormal)
    _check_writer(root, recs, None)


@pytest.mark.parametrize("abnormal", [
    pytest.param(False, id="normal"),
    pytest.param(True, id="abnormal"),
])
def test_records_after_a_cut_stay_cut(tmp_path: Path, abnormal: bool) -> None:
    # Recovery must not leave the cut records on disk: an append that ends on an old record
    # boundary would bring them back on the next restart.
    root = tmp_path / "store"
    with mqlite.open(str(root), **SETTINGS) as broker:
        results = [broker.store.put("Ghost", 0, b"old-%04d" % i) for i in range(30)]
    for r in results[20:]:  # records 20.. start with zeros now: nothing valid follows, a torn tail
        _write_at(root, r.commit_log_offset, b"\0" * 8)
    _abort(root, abnormal)
    with mqlite.open(str(root)) as broker:
        assert broker.store.max_offset("Ghost", 0) == 20
        broker.store.put("Ghost", 0, b"new-0020")  # same size: ends where old record 21 starts
    with mqlite.open(str(root)) as broker:
        bodies = [m.body for m in broker.store.get_messages("Ghost", 0, 0, 64).messages]
    assert bodies == [b"old-%04d" % i for i in range(20)] + [b"new-0020"]


def test_records_after_a_lost_page_are_kept(tmp_path: Path) -> None:
    # A page that never reached the disk (ASYNC_FLUSH and a power cut) leaves a zero page with
    # valid records behind it. Recovery resynchronises after the page: only the records on it
    # are lost, appends go on at the end of the log, and a restart keeps it all that way.
    root = tmp_path / "store"
    with mqlite.open(str(root), **SETTINGS) as broker:
        results = [broker.store.put("Ghost", 0, b"old-%04d" % i) for i in range(200)]
    size = results[0].wrote_bytes
    page = 8192
    _write_at(root, page, b"\0" * 4096)
    kept = [i for i, r in enumerate(results) if not (r.commit_log_offset < page + 4096 and page < r.commit_log_offset + size)]
    with mqlite.open(str(root)) as broker:
        assert broker.store.max_offset("Ghost", 0) == 200
        new = range(200, 250)
        for i in new:
            last = broker.store.put("Ghost", 0, b"new-%04d" % i)
        assert last.queue_offset == 249 and last.commit_log_offset > results[-1].commit_log_offset
    for _ in range(2):
        with mqlite.open(str(root)) as broker:
            bodies = [m.body for m in broker.store.get_messages("Ghost", 0, 0, 500).messages]
        assert bodies == [b"old-%04d" % i for i in kept] + [b"new-%04d" % i for i in new]


def test_units_after_a_cut_stay_cut(tmp_path: Path) -> None:
    # A unit dropped by recovery must not come back after a restart, pointing at whatever
    # record was appended at that offset since.
    root = tmp_path / "store"
    with mqlite.open(str(root), **SETTINGS) as broker:
        for i in range(10):
            last = broker.store.put("Stale", i % 2, b"msg-%04d" % i)  # the last one goes to queue 1
    _write_at(root, last.commit_log_offset + 4, b"\0" * 4)  # its magic
    with mqlite.open(str(root)) as broker:
        assert broker.store.max_offset("Stale", 1) == 4
        broker.store.put("Stale", 0, b"msg-new")  # lands where the damaged queue-1 record was
    with mqlite.open(str(root)) as broker:
        store = broker.store
        assert store.max_offset("Stale", 1) == 4
        assert {m.queue_id for m in store.get_messages("Stale", 1, 0, 64).messages} == {1}


def test_verify_is_clean_after_recovery(store: tuple[Path, list[Rec]]) -> None:
    # After a repaired torn tail and a clean close, nothing of the cut record or its unit remains.
    root, recs = store
    last = recs[-1]
    _write_at(root, last.offset + last.size // 2, b"\0" * (last.size - last.size // 2))
    with mqlite.open(str(root)):
        pass
    assert _verify_problems(root) == []


def test_verify_is_clean_on_the_undamaged_template(template: tuple[Path, list[Rec]]) -> None:
    assert _verify_problems(template[0]) == []

