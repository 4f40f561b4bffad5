"""Tests for mqlite.indexfile: RocketMQ's IndexFileTest in our words, plus the service."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqlite.errors import ConfigError, IllegalStateError, StoreCorruptedError
from mqlite.indexfile import (
    INDEX_ENTRY,
    INDEX_HEADER,
    INDEX_SLOT,
    IndexFile,
    IndexService,
    _java_hash,
    index_file_size,
    index_key_hash,
)

T0 = 1_700_000_000_000  # an epoch-ms store time
FOREVER = 2**62
# tmp_path is shared by Hypothesis examples; each test clears what it reuses.
_FIXTURE_OK = [HealthCheck.function_scoped_fixture]


def _entry_at(path: Path, hash_slot_num: int, entry_no: int) -> tuple[int, int, int, int]:
    """Decode entry *entry_no* with hand-written offsets, independently of the module."""
    raw = path.read_bytes()
    at = 40 + hash_slot_num * 4 + entry_no * 20
    return struct.unpack(">iqii", raw[at : at + 20])


def _poke(path: Path, offset: int, fmt: str, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(fmt, value))


# -- hashing --------------------------------------------------------------------------------


def test_unit_sizes() -> None:
    assert (INDEX_HEADER.size, INDEX_SLOT.size, INDEX_ENTRY.size) == (40, 4, 20)
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040


@pytest.mark.parametrize(
    ("text", "java_hash"),
    [
        ("", 0),
        ("60", 1722),
        ("TopicTest#KEY1", -1656969516),
        ("polygenelubricants", -(2**31)),  # the classic Integer.MIN_VALUE string
        ("\u00e9", 0xE9),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 code units
    ],
)
def test_java_hash_vectors(text: str, java_hash: int) -> None:
    assert _java_hash(text) == java_hash


def test_index_key_hash_and_slots() -> None:
    assert index_key_hash("TopicTest#KEY1") == 1656969516
    assert index_key_hash("TopicTest#KEY1") % 100 == 16
    assert index_key_hash("TopicTest#KEY1") % 5_000_000 == 1969516
    assert index_key_hash("60") % 100 == 22
    assert index_key_hash("polygenelubricants") == 0  # Java's abs(MIN_VALUE) stays negative


# -- IndexFile ------------------------------------------------------------------------------


def test_put_key_until_full(tmp_path: Path) -> None:
    # IndexFileTest.testPutKey: 400 entries hold 399 keys because entry 0 is never used.
    f = IndexFile(str(tmp_path / "idx"), 100, 400)
    for i in range(399):
        assert f.put_key(str(i), i, T0 + i)
    assert f.is_write_full()
    assert not f.put_key("399", 399, T0 + 399)
    assert f.index_count == 400
    assert os.path.getsize(tmp_path / "idx") == 40 + 100 * 4 + 400 * 20
    assert f.verify() == []
    f.close()
    f.close()  # idempotent


def test_select_commit_log_offsets_like_rocketmq(tmp_path: Path) -> None:
    # IndexFileTest.testSelectPhyOffset: keys "0".."398" in 100 slots; "60" is found once
    # although its slot chain holds other keys.
    f = IndexFile(str(tmp_path / "idx"), 100, 400)
    for i in range(399):
        assert f.put_key(str(i), i * 100, T0)
    assert f.select_commit_log_offsets("60", 10, 0, FOREVER) == [6000]
    f.close()


def test_entry_and_header_bytes(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    # A rolled file inherits the previous file's end as begin and end.
    f = IndexFile(str(path), 10, 8, end_commit_log_offset=500, end_timestamp=T0)
    assert (f.begin_commit_log_offset, f.end_commit_log_offset, f.begin_timestamp, f.end_timestamp) == (
        500, 500, T0, T0)
    assert f.put_key("k", 600, T0 + 5_999)
    assert f.put_key("k", 700, T0 + 9_000)
    f.flush()
    slot = index_key_hash("k") % 10
    # First entry timed against the inherited begin (5 s), then begin moved to it.
    assert _entry_at(path, 10, 1) == (index_key_hash("k"), 600, 5, 0)
    assert _entry_at(path, 10, 2) == (index_key_hash("k"), 700, 3, 1)
    raw = path.read_bytes()
    assert struct.unpack(">qqqqii", raw[:40]) == (T0 + 5_999, T0 + 9_000, 600, 700, 1, 3)
    assert struct.unpack(">i", raw[40 + slot * 4 : 44 + slot * 4])[0] == 2
    f.close()


def test_time_diff_is_clamped(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "idx"), 10, 8)
    assert f.put_key("a", 1, T0)
    assert f.put_key("b", 2, T0 - 10_000)  # clock stepped back: clamped to 0
    assert f.put_key("c", 3, T0 + 2**31 * 1000 + 5_000)  # beyond an int of seconds
    f.close()
    assert _entry_at(tmp_path / "idx", 10, 2)[2] == 0
    assert _entry_at(tmp_path / "idx", 10, 3)[2] == 2**31 - 1


def test_chain_with_collisions_newest_first_and_time_range(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "idx"), 1, 16)  # one slot: every key collides
    assert _java_hash("Aa") == _java_hash("BB")  # same hash, different keys
    puts = [("Aa", 10, T0), ("x", 20, T0 + 1000), ("BB", 30, T0 + 2000),
            ("Aa", 40, T0 + 3000), ("y", 50, T0 + 4000), ("Aa", 60, T0 + 5000)]
    for key, offset, ts in puts:
        assert f.put_key(key, offset, ts)
    # Only hashes are compared, so "BB" rides along with "Aa".
    assert f.select_commit_log_offsets("Aa", 10, 0, FOREVER) == [60, 40, 30, 10]
    assert f.select_commit_log_offsets("Aa", 2, 0, FOREVER) == [60, 40]
    assert f.select_commit_log_offsets("Aa", 10, T0 + 2000, T0 + 3000) == [40, 30]
    assert f.select_commit_log_offsets("x", 10, 0, FOREVER) == [20]
    assert f.select_commit_log_offsets("nothing", 10, 0, FOREVER) == []
    assert f.select_commit_log_offsets("Aa", 0, 0, FOREVER) == []
    assert f.verify() == []
    f.close()


def test_is_time_matched(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "idx"), 4, 8)
    f.put_key("a", 1, 1000)
    f.put_key("a", 2, 2000)
    assert f.is_time_matched(500, 2500)  # covers
    assert f.is_time_matched(1500, 9000)  # begin inside
    assert f.is_time_matched(0, 1000)  # end inside
    assert not f.is_time_matched(2001, 9000)
    assert not f.is_time_matched(0, 999)
    f.close()


def test_reopen_loads_header_and_zero_count_reads_as_one(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    f = IndexFile(str(path), 4, 8)
    f.put_key("a", 7, T0)
    f.close()
    g = IndexFile(str(path), 4, 8)
    assert (g.index_count, g.select_commit_log_offsets("a", 5, 0, FOREVER)) == (2, [7])
    g.close()
    _poke(path, 36, ">i", 0)  # a Java-created file before its first flush
    h = IndexFile(str(path), 4, 8, read_only=True)
    assert h.index_count == 1
    assert h.select_commit_log_offsets("a", 5, 0, FOREVER) == []
    h.close()


def test_wrong_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    IndexFile(str(path), 4, 8).close()
    with pytest.raises(StoreCorruptedError, match="index settings"):
        IndexFile(str(path), 5, 8)


def test_closed_and_read_only_files_refuse_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "idx")
    f = IndexFile(path, 4, 8)
    f.close()
    with pytest.raises(IllegalStateError):
        f.put_key("a", 1, T0)
    r = IndexFile(path, 4, 8, read_only=True)
    with pytest.raises(IllegalStateError):
        r.put_key("a", 1, T0)
    with pytest.raises(IllegalStateError):
        r.destroy()
    r.close()


def _filled(path: Path, slots: int = 4, entries: int = 16) -> IndexFile:
    f = IndexFile(str(path), slots, entries)
    for i in range(10):
        assert f.put_key(f"k{i % 6}", i * 10, T0 + i * 1000)
    assert f.verify() == []
    return f


def test_verify_finds_a_looping_prev_link(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    f = _filled(path)
    entries_at = 40 + 4 * 4
    _poke(path, entries_at + 5 * 20 + 16, ">i", 7)  # entry 5 links forward: a loop
    problems = f.verify()
    assert any("entry 5: prevIndex 7" in p for p in problems), problems
    for key in ("k0", "k1", "k2", "k3", "k4", "k5"):
        f.select_commit_log_offsets(key, 100, 0, FOREVER)  # terminates
    f.close()


def test_verify_finds_a_wrong_slot_and_a_broken_link(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    f = _filled(path)
    slot = index_key_hash("k3") % 4
    _poke(path, 40 + slot * 4, ">i", 99)
    problems = f.verify()
    assert any(f"slot {slot} holds 99" in p for p in problems), problems
    f.close()

    path2 = tmp_path / "idx2"
    g = _filled(path2)
    _poke(path2, 40 + 4 * 4 + 9 * 20 + 16, ">i", 0)  # newest entry forgets its chain
    assert any("entry 9: prevIndex 0" in p for p in g.verify())
    _poke(path2, 40 + 4 * 4 + 9 * 20 + 12, ">i", -1)
    assert any("timeDiff -1" in p for p in g.verify())
    g.close()


@settings(max_examples=40, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(data=st.binary(min_size=40 + 4 * 4 + 12 * 20, max_size=40 + 4 * 4 + 12 * 20),
       keys=st.lists(st.text(max_size=3), min_size=1, max_size=5))
def test_garbage_file_never_crashes_a_reader(tmp_path: Path, data: bytes, keys: list[str]) -> None:
    path = tmp_path / "garbage"
    path.write_bytes(data)
    f = IndexFile(str(path), 4, 12, read_only=True)
    for key in keys:
        assert len(f.select_commit_log_offsets(key, 5, -FOREVER, FOREVER)) <= 5
    assert isinstance(f.verify(), list)
    f.is_time_matched(0, FOREVER)
    f.close()


@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "Aa", "BB", "c#1", "\u00e9", "zz"]),
                          st.integers(0, 2**40)), max_size=30))
def test_select_matches_a_model(tmp_path: Path, puts: list[tuple[str, int]]) -> None:
    path = tmp_path / "model"
    if path.exists():
        path.unlink()
    f = IndexFile(str(path), 3, 20)
    stored: list[tuple[str, int]] = []
    for key, offset in puts:
        if f.put_key(key, offset, T0):
            stored.append((key, offset))
    assert len(stored) == min(len(puts), 19)
    for key in {k for k, _ in puts}:
        expected = [o for k, o in reversed(stored) if index_key_hash(k) == index_key_hash(key)]
        assert f.select_commit_log_offsets(key, 100, 0, FOREVER) == expected
    assert f.verify() == []
    f.close()


# -- IndexService ---------------------------------------------------------------------------


class _Clock:
    """A name clock that stands still, so file names collide and must be bumped."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def _service(
    root: Path,
    *,
    read_only: bool = False,
    on_file_full: Callable[[int], None] | None = None,
    name_clock: Callable[[], int] | None = None,
) -> IndexService:
    """A service with 3 entries per file and, by default, a frozen name clock."""
    return IndexService(str(root / "index"), 4, 4, read_only=read_only,
                        on_file_full=on_file_full, name_clock=name_clock or _Clock())


def test_service_rolls_and_queries_newest_first(tmp_path: Path) -> None:
    full: list[int] = []

    def on_full(end_timestamp: int) -> None:
        full.append(end_timestamp)
        svc.query_offsets("T", "K", 1, 0, FOREVER)  # would deadlock if called under the lock

    svc = _service(tmp_path, on_file_full=on_full)
    svc.load(True, 0)
    for i in range(8):
        svc.build_index("T", i * 100, T0 + i * 1000, None, "K")
    files = svc.files
    assert [f.index_count - 1 for f in files] == [3, 3, 2]
    names = [f.file_name for f in files]
    assert names == sorted(names) and all(len(n) == 17 and n.isdigit() for n in names)
    assert len(set(names)) == 3  # the frozen clock was bumped by 1 ms
    assert full == [T0 + 2000, T0 + 5000]
    assert files[1].begin_commit_log_offset == 300  # begin moved to its first entry
    assert svc.query_offsets("T", "K", 100, 0, FOREVER) == [700, 600, 500, 400, 300, 200, 100, 0]
    assert svc.query_offsets("T", "K", 3, 0, FOREVER) == [700, 600, 500]
    assert svc.query_offsets("T", "K", 100, T0 + 2500, T0 + 4500) == [400, 300]
    assert svc.query_offsets("U", "K", 100, 0, FOREVER) == []
    assert svc.verify() == []
    svc.close()
    svc.close()


def test_query_caps_at_max_msgs_num_batch(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 8, 64, max_msgs_num_batch=5)
    svc.load(True, 0)
    for i in range(20):
        svc.build_index("T", i, T0, None, "K")
    assert svc.query_offsets("T", "K", 64, 0, FOREVER) == [19, 18, 17, 16, 15]
    svc.close()


def test_build_index_keys_uniq_rollback_and_duplicates(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 16, 64)
    svc.load(True, 0)
    svc.build_index("T", 100, T0, "UNIQ1", " a  b c ")
    for key in ("UNIQ1", "a", "b", "c"):
        assert svc.query_offsets("T", key, 10, 0, FOREVER) == [100]
    assert svc.files[0].index_count == 5  # four entries, the empty pieces were skipped
    svc.build_index("T", 200, T0, None, "rb", is_rollback=True)
    assert svc.query_offsets("T", "rb", 10, 0, FOREVER) == []
    svc.build_index("T", 50, T0, None, "old")  # below end_commit_log_offset: already indexed
    assert svc.query_offsets("T", "old", 10, 0, FOREVER) == []
    # RocketMQ skips only offsets strictly below the end, so the last record is indexed again;
    # query_offsets returns each offset once.
    svc.build_index("T", 100, T0, None, "again")
    svc.build_index("T", 100, T0, None, "again")
    assert svc.query_offsets("T", "again", 10, 0, FOREVER) == [100]
    svc.build_index("T", 300, T0, "", None)  # an empty uniq key is still a key
    assert svc.query_offsets("T", "", 10, 0, FOREVER) == [300]
    svc.close()


def test_reopen_keeps_entries(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    svc.load(True, 0)
    for i in range(5):
        svc.build_index("T", i, T0 + i, f"u{i}", "K")
    svc.close()
    again = _service(tmp_path)
    again.load(True, 0)
    assert len(again.files) == 4
    assert again.query_offsets("T", "K", 10, 0, FOREVER) == [4, 3, 2, 1, 0]
    assert again.query_offsets("T", "u2", 10, 0, FOREVER) == [2]
    again.build_index("T", 5, T0 + 5, None, "K")  # appends after the reopen
    assert again.query_offsets("T", "K", 2, 0, FOREVER) == [5, 4]
    assert again.verify() == []
    again.close()


def _three_files(tmp_path: Path) -> list[int]:
    """Seven entries of key K in three files; returns the end times of the two that filled."""
    full: list[int] = []
    svc = _service(tmp_path, on_file_full=full.append)
    svc.load(True, 0)
    for i in range(7):
        svc.build_index("T", i, T0 + i * 1000, None, "K")
    svc.close()
    return full


def test_abnormal_load_drops_files_newer_than_checkpoint(tmp_path: Path) -> None:
    full = _three_files(tmp_path)
    assert full == [T0 + 2000, T0 + 5000]
    crashed = _service(tmp_path)
    crashed.load(False, full[0])  # the checkpoint saw only the first file fill
    assert len(crashed.files) == 1
    assert len(os.listdir(tmp_path / "index")) == 1
    assert crashed.query_offsets("T", "K", 10, 0, FOREVER) == [2, 1, 0]
    crashed.close()


def test_delete_expired_never_deletes_the_last_file(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    svc.load(True, 0)
    for i in range(9):
        svc.build_index("T", i * 10, T0 + i, None, "K")
    assert len(svc.files) == 3
    assert svc.delete_expired(0) == 0
    assert svc.delete_expired(25) == 1  # first file ends at 20
    assert svc.delete_expired(10**9) == 1  # the newest file stays
    assert len(svc.files) == 1 and len(os.listdir(tmp_path / "index")) == 1
    assert svc.query_offsets("T", "K", 10, 0, FOREVER) == [80, 70, 60]
    svc.destroy()
    assert os.listdir(tmp_path / "index") == []


def test_query_stops_after_a_file_older_than_begin(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    svc.load(True, 0)
    for i, secs in enumerate([0, 10, 20, 5, 30, 40]):
        svc.build_index("T", i, T0 + secs * 1000, None, "K")
    # The second file begins 5 s in, before the range, so the scan ends there although the
    # first file also holds a time in range (it ends 20 s in).
    assert svc.query_offsets("T", "K", 10, T0 + 10_000, FOREVER) == [5, 4]
    svc.close()


def test_read_only_service_skips_bad_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    svc = _service(tmp_path)
    svc.load(True, 0)
    for i in range(4):
        svc.build_index("T", i, T0 + i, None, "K")
    svc.close()
    index = tmp_path / "index"
    size = index_file_size(4, 4)
    (index / "20990101000000001").write_bytes(b"\x07" * 10)  # truncated
    (index / "20990101000000002").write_bytes(b"\xff" * size)  # garbage header
    (index / "20990101000000003").write_bytes(bytes(size))  # a writer's fresh, empty file
    (index / "notes.txt").write_text("not an index file")
    reader = _service(tmp_path, read_only=True)
    reader.load(False, 0)  # a reader drops nothing, even after an "abnormal" exit
    assert [f.file_name for f in reader.files][-1] == "20990101000000003"
    assert len(reader.files) == 3
    assert reader.query_offsets("T", "K", 10, 0, FOREVER) == [3, 2, 1, 0]
    assert "skipping index file" in caplog.text
    with pytest.raises(IllegalStateError):
        reader.build_index("T", 9, T0, None, "K")
    with pytest.raises(IllegalStateError):
        reader.delete_expired(10**9)
    reader.flush()
    reader.close()
    assert len(os.listdir(index)) == 6


def test_read_only_missing_dir_and_no_writes(tmp_path: Path) -> None:
    reader = IndexService(str(tmp_path / "index"), 4, 4, read_only=True)
    reader.load(True, 0)
    assert reader.files == [] and reader.query_offsets("T", "K", 1, 0, FOREVER) == []
    reader.close()
    assert not (tmp_path / "index").exists()


def test_reader_follows_writer_appends(tmp_path: Path) -> None:
    writer = IndexService(str(tmp_path / "index"), 8, 32)
    writer.load(True, 0)
    writer.build_index("T", 1, T0, None, "K")
    reader = IndexService(str(tmp_path / "index"), 8, 32, read_only=True)
    reader.load(True, 0)
    assert reader.query_offsets("T", "K", 10, 0, FOREVER) == [1]
    writer.build_index("T", 2, T0 + 1, None, "K")  # the reader re-reads the header
    assert reader.query_offsets("T", "K", 10, 0, FOREVER) == [2, 1]
    reader.close()
    writer.close()


def test_writable_load_drops_a_wrong_sized_file_and_asks_for_a_rebuild(tmp_path: Path) -> None:
    # The advice of the wrong-size error ("delete the index directory so it is rebuilt") is
    # what a writer now does by itself: the index is derived from the commit log.
    index = tmp_path / "index"
    index.mkdir()
    (index / "20240101000000000").write_bytes(b"\0" * 7)
    svc = _service(tmp_path)
    svc.load(True, 0)
    assert svc.rebuild_from == 0 and svc.files == []
    assert not (index / "20240101000000000").exists()
    svc.close()


def test_a_damaged_file_drops_the_newer_ones_and_rebuilds_from_the_last_good_end(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 4, 4, name_clock=lambda: 4_102_444_800_000)
    svc.load(True, 0)
    for i in range(9):  # three entries a file: three files
        svc.build_index("T", 100 * i, 1_700_000_000_000 + i, None, f"k{i}")
    names = [f.path for f in svc.files]
    svc.close()
    assert len(names) == 3
    with open(names[1], "r+b") as f:
        f.write(struct.pack(">q", -5))  # an impossible header
    again = IndexService(str(tmp_path / "index"), 4, 4)
    again.load(True, 0)
    assert [f.path for f in again.files] == names[:1]
    assert again.rebuild_from == 200  # the last record the good file indexed
    assert not os.path.exists(names[1]) and not os.path.exists(names[2])
    again.close()


def test_a_missing_index_asks_for_a_rebuild_from_the_start(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    svc.load(True, 0)
    assert svc.rebuild_from == 0
    svc.close()
    ro = IndexService(str(tmp_path / "index"), 4, 4, read_only=True)
    ro.load(True, 0)
    assert ro.rebuild_from is None  # a reader never rebuilds
    ro.close()


def test_truncate_dirty_undoes_the_entries_past_a_cut(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 4, 8, name_clock=lambda: 4_102_444_800_000)
    svc.load(True, 0)
    for i in range(10):  # two keys a record, 7 entries a file: three files
        svc.build_index("T", 100 * i, 1_700_000_000_000 + 1000 * i, None, f"k{i % 3} u{i}")
    assert len(svc.files) == 3
    svc.truncate_dirty(400)
    # The third file goes; the second keeps its first entry (the second key of the record at 300).
    assert [f.end_commit_log_offset for f in svc.files] == [300, 300]
    assert svc.files[1].index_count == 2
    assert svc.verify() == []
    for i in range(4, 10):  # what a recovery cut is appended again, at the same offsets
        svc.build_index("T", 100 * i, 1_700_000_000_000 + 1000 * i, None, f"k{i % 3} u{i}")
    assert svc.verify() == []
    for i in range(10):
        assert svc.query_offsets("T", f"u{i}", 10, 0, FOREVER) == [100 * i]
    assert svc.query_offsets("T", "k1", 10, 0, FOREVER) == [700, 400, 100]
    svc.truncate_dirty(0)
    assert svc.files == []
    svc.close()


def test_concurrent_build_and_query(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "index"), 16, 64)
    svc.load(True, 0)
    errors: list[BaseException] = []
    done = threading.Event()

    def query() -> None:
        try:
            while not done.is_set():
                found = svc.query_offsets("T", "K", 64, 0, FOREVER)
                assert found == sorted(found, reverse=True)
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    reader = threading.Thread(target=query)
    reader.start()
    for i in range(500):
        svc.build_index("T", i, T0 + i, None, "K")
    done.set()
    reader.join()
    assert errors == []
    assert svc.verify() == []
    svc.close()


def test_names_stay_ordered_when_the_clock_steps_back(tmp_path: Path) -> None:
    clock = _Clock(T0)
    svc = _service(tmp_path, name_clock=clock)
    svc.load(True, 0)
    for i in range(4):
        svc.build_index("T", i, T0, None, "K")
    clock.ms = T0 - 3_600_000  # an hour back (NTP step, DST)
    for i in range(4, 7):
        svc.build_index("T", i, T0, None, "K")
    names = [f.file_name for f in svc.files]
    assert len(names) == 3 and names == sorted(names)
    svc.close()
    again = _service(tmp_path)
    again.load(True, 0)
    assert again.query_offsets("T", "K", 10, 0, FOREVER) == [6, 5, 4, 3, 2, 1, 0]
    again.close()


def test_service_verify_names_the_damaged_file(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    svc.load(True, 0)
    for i in range(5):
        svc.build_index("T", i, T0, None, f"K{i}")
    assert svc.verify() == []
    first = svc.files[0]
    svc.flush()
    _poke(Path(first.path), 40 + 4 * 4 + 2 * 20 + 16, ">i", 2)  # entry 2 links to itself
    problems = svc.verify()
    assert problems and all(p.startswith(first.file_name + ": ") for p in problems)
    svc.close()


def test_bad_shape_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        IndexFile(str(tmp_path / "idx"), 0, 8)
    with pytest.raises(ConfigError):
        IndexService(str(tmp_path / "index"), 4, 1)


@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(
    slots=st.sampled_from([1, 3, 8, 64]),
    index_num=st.sampled_from([2, 3, 10, 50, 200]),
    inherited=st.booleans(),
    entries=st.lists(st.tuples(st.sampled_from([0, 1, 2, 7, 2**31 - 1, 123456789]), st.integers(0, 5000)),
                     min_size=1, max_size=250),
    chunk=st.integers(1, 80),
)
def test_put_keys_writes_what_put_key_writes(tmp_path: Path, slots: int, index_num: int, inherited: bool,
                                             entries: list[tuple[int, int]], chunk: int) -> None:
    """The vectorised put_keys gives the same bytes as put_key one entry at a time (also when it fills)."""
    import numpy as np

    for name in ("one", "many"):
        (tmp_path / name).unlink(missing_ok=True)
    begin = dict(end_commit_log_offset=5, end_timestamp=T0) if inherited else {}
    one = IndexFile(str(tmp_path / "one"), slots, index_num, **begin)  # type: ignore[arg-type]
    many = IndexFile(str(tmp_path / "many"), slots, index_num, **begin)  # type: ignore[arg-type]
    hashes = [h for h, _ in entries]
    offsets = [100 + i * 10 for i in range(len(entries))]
    stamps = [T0 - 3000 + sum(d for _, d in entries[: i + 1]) for i in range(len(entries))]
    stored = 0
    for h, o, t in zip(hashes, offsets, stamps):
        if not one.put_key("", o, t, h):
            break
        stored += 1
    done = 0
    while done < len(entries):
        end = min(len(entries), done + chunk)
        took = many.put_keys(np.array(hashes[done:end]), np.array(offsets[done:end]), np.array(stamps[done:end]))
        done += took
        if took < end - (done - took):
            break
    assert done == stored
    one.flush()
    many.flush()
    assert (tmp_path / "one").read_bytes() == (tmp_path / "many").read_bytes()
    one.close()
    many.close()


def test_an_abnormal_load_that_drops_every_file_asks_for_a_rebuild_from_the_start(tmp_path: Path) -> None:
    # The oldest file is gone (deleted, or a directory moved aside) and the others are newer than
    # the checkpoint: recovery re-dispatches only from the checkpoint's segment, so without a
    # rebuild the records before it would have no entries.
    full = _three_files(tmp_path)
    os.unlink(sorted((tmp_path / "index").iterdir())[0])
    crashed = _service(tmp_path)
    crashed.load(False, full[0])
    assert crashed.files == [] and crashed.rebuild_from == 0
    crashed.close()


def _keyed_store(root: Path) -> None:
    from mqlite.config import StoreConfig
    from mqlite.store import MessageStore

    config = StoreConfig(commitlog_file_size=64 * 1024, max_hash_slot_num=8, max_index_num=64)
    with MessageStore(str(root), config) as store:
        for i in range(40):
            store.put("T", i % 2, b"body %d" % i, {"KEYS": f"k{i}"})
        assert store.wait_dispatched()


def _found(root: Path) -> list[int]:
    import mqlite

    with mqlite.open(str(root)) as broker:
        return [i for i in range(40) if [m.body for m in broker.store.query_message("T", f"k{i}")] == [b"body %d" % i]]


@pytest.mark.parametrize("field", ["key_hash", "commit_log_offset"])
def test_verify_finds_entries_that_do_not_match_the_log_and_deleting_the_file_repairs_them(
        tmp_path: Path, field: str) -> None:
    # A changed keyHash that stays in its bucket (a multiple of hash_slot_num) or a changed
    # phyOffset leaves the chains whole: only the log shows it. Open does not check entries
    # (O(entries)); verify does, names the file and the fix, and the fix works.
    from mqlite.verify import verify_store

    root = tmp_path / "store"
    _keyed_store(root)
    path = sorted((root / "index").iterdir())[0]
    entry = 40 + 8 * 4 + 5 * 20  # entry 5
    key_hash, phy, _, _ = _entry_at(path, 8, 5)
    if field == "key_hash":
        _poke(path, entry, ">i", key_hash ^ (8 << 4))
    else:
        _poke(path, entry + 4, ">q", phy + 3)
    assert len(_found(root)) == 39  # one key no longer found (the open did not repair it)
    problems = verify_store(str(root)).problems
    assert len(problems) == 1 and problems[0].startswith(f"index {path.name}: entries ")
    assert "delete the file: the next open for writing rebuilds it" in problems[0]
    path.unlink()
    assert _found(root) == list(range(40))
    assert verify_store(str(root)).ok
