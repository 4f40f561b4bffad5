"""A long-lived read-only reader beside a writer whose retention deletes files: the reader lets go of
the deleted segments and queue and index files on `refresh()` (no mapping of a deleted file stays,
so the disk space goes back), its min offsets follow the writer's, and a read that was going on in a
dropped segment finishes with the bytes it was reading. Beside a writer that goes on (the dashboard's
case), `refresh()` also maps the index files started after the reader opened, so key look-ups find newer
messages, and forgets the queues of a topic the writer deleted, letting go of their files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import TINY_STORE, no_leftover_threads  # noqa: F401

import mqlite
from mqlite.clock import ManualClock
from mqlite.reader import StoreReader
from mqlite.store import MessageStore, StoreConfig
from mqlite.storebase import GetMessageStatus

#: Small files, so 600 messages of ~330 bytes fill several segments, queue files and index files.
SETTINGS = {"commitlog_file_size": 1 << 16, "consumequeue_file_size": 20 * 64,
            "max_hash_slot_num": 64, "max_index_num": 256, "file_reserved_time": 0.0}

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")


def _deleted_maps(root: Path) -> list[str]:
    """This process' mappings of files under `root` that were deleted."""
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if str(root) in line and line.rstrip().endswith("(deleted)")]


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[MessageStore]:
    # A day ahead, so every segment's modification time is past the (zero) reserve time.
    clock = ManualClock(int(time.time() * 1000) + 86_400_000)
    store = MessageStore(str(tmp_path), StoreConfig(**SETTINGS), clock=clock)
    try:
        for i in range(600):
            store.put("T", 0, b"x" * 300, {"KEYS": f"k{i}"})
        store.wait_dispatched()
        yield store
    finally:
        store.close()


def test_reader_lets_go_of_what_retention_deleted(tmp_path: Path, writer: MessageStore) -> None:
    with StoreReader(str(tmp_path)) as reader:
        assert (reader.min_offset("T", 0), reader.max_offset("T", 0)) == (0, 600)
        index_files = len(reader.index.files)
        assert writer.delete_expired_files(force=True) > 0
        assert _deleted_maps(tmp_path)  # the reader still maps what the writer deleted
        reader.refresh()
        assert _deleted_maps(tmp_path) == []
        assert reader.commitlog.min_offset == writer.commitlog.min_offset > 0
        low = writer.min_offset("T", 0)
        assert 0 < low < 600
        assert (reader.min_offset("T", 0), reader.max_offset("T", 0)) == (low, 600)
        assert len(reader.index.files) < index_files  # the index files retention deleted went too
        # Reads below the new min are told where the queue starts; from there on, the messages are there.
        assert reader.get_messages("T", 0, 0).status is GetMessageStatus.OFFSET_TOO_SMALL
        result = reader.get_messages("T", 0, low, 4)
        assert result.status is GetMessageStatus.FOUND
        assert [m.queue_offset for m in result.messages] == list(range(low, low + 4))
        assert reader.look_message_by_offset(writer.commitlog.min_offset).topic == "T"
        # Writes after the retention round are seen as before.
        writer.put("T", 0, b"later")
        writer.wait_dispatched()
        reader.refresh()
        assert reader.get_messages("T", 0, 600).messages[0].body == b"later"


def test_a_read_going_on_in_a_dropped_segment_finishes(tmp_path: Path, writer: MessageStore) -> None:
    with StoreReader(str(tmp_path)) as reader:
        first = writer.commitlog.mapped_files.files[0].file_from_offset
        expected = writer.look_message_by_offset(first).body
        segment = reader.commitlog.mapped_files.find(first)  # a read holds the segment, as `get_messages` does
        assert segment is not None
        assert writer.delete_expired_files(force=True) > 0
        reader.refresh()
        assert reader.commitlog.mapped_files.find(first) is None  # later reads find the record gone
        # The read in flight still reads its bytes (the map was not pulled from under it) ...
        size = reader.commitlog.record_size_at(reader.commitlog.min_offset)
        assert size > 0
        assert bytes(segment.mm[: len(expected) + 200]).count(expected) >= 1
        assert _deleted_maps(tmp_path)
        # ... and the map goes with the last reference to it.
        del segment
        assert _deleted_maps(tmp_path) == []


def test_a_writer_read_going_on_in_a_segment_retention_deletes_finishes(tmp_path: Path, writer: MessageStore) -> None:
    first = writer.commitlog.mapped_files.files[0].file_from_offset
    expected = writer.look_message_by_offset(first).body
    segment = writer.commitlog.mapped_files.find(first)  # a pull of another thread holds it, as `get_messages` does
    assert segment is not None
    assert writer.delete_expired_files(force=True) > 0
    assert writer.commitlog.mapped_files.find(first) is None  # later reads find the record gone
    assert bytes(segment.mm[: len(expected) + 200]).count(expected) >= 1  # not `ValueError: mmap closed`
    assert _deleted_maps(tmp_path)
    del segment  # the map goes with the last reference to it
    assert _deleted_maps(tmp_path) == []


def test_a_writer_read_going_on_in_a_queue_of_a_deleted_topic_finishes(tmp_path: Path, writer: MessageStore) -> None:
    queue_file = writer.consume_queues[("T", 0)].mapped_files.files[-1]  # a pull of another thread holds it
    unit = bytes(queue_file.mm[:20])
    writer.delete_topic("T")
    assert bytes(queue_file.mm[:20]) == unit  # not `ValueError: mmap closed`
    del queue_file
    assert _deleted_maps(tmp_path) == []


def test_a_reader_follows_a_queue_a_reopened_writer_rebuilt(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**TINY_STORE)) as writer:
        for _ in range(100):
            writer.put("T", 0, b"m")
    with StoreReader(str(tmp_path)) as reader:
        # Damage the next open rebuilds the queue for: a directory named like its next file.
        os.mkdir(tmp_path / "consumequeue" / "T" / "0" / f"{20 * 64 * 2:020d}")
        with MessageStore(str(tmp_path), StoreConfig(**TINY_STORE)) as writer:
            assert writer.recovery.queues_repaired  # its files were written anew
            writer.put("T", 0, b"later")
            writer.wait_dispatched()
            reader.refresh()
            assert _deleted_maps(tmp_path) == []
            assert reader.max_offset("T", 0) == writer.max_offset("T", 0) == 101
            assert reader.get_messages("T", 0, 100).messages[0].body == b"later"


def _put_keyed(store: MessageStore, first: int, count: int) -> None:
    for i in range(first, first + count):
        store.put("T", 0, b"m" * 200, {"KEYS": f"k{i}"})
    store.wait_dispatched()


def test_key_lookups_find_messages_in_index_files_started_after_the_reader_opened(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**TINY_STORE)) as writer:
        _put_keyed(writer, 0, 10)
        with StoreReader(str(tmp_path)) as reader:
            assert [m.properties["KEYS"] for m in reader.query_message("T", "k3")] == ["k3"]
            index_files, segments = len(reader.index.files), len(reader.commitlog.mapped_files.files)
            # TINY_STORE's index files hold 255 entries (one a message here) and its segments 64 KiB: 600
            # messages roll the writer's index twice and its commit log once or more.
            _put_keyed(writer, 10, 600)
            assert len(writer.index.files) > index_files and len(writer.commitlog.mapped_files.files) > segments
            reader.refresh()
            assert [f.file_name for f in reader.index.files] == [f.file_name for f in writer.index.files]
            for i in (3, 300, 609):
                assert [m.properties["KEYS"] for m in reader.query_message("T", f"k{i}")] == [f"k{i}"]


def test_a_reader_opened_before_any_index_file_maps_the_first(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**TINY_STORE)) as writer:
        with StoreReader(str(tmp_path)) as reader:
            assert reader.index.files == []
            _put_keyed(writer, 0, 5)
            reader.refresh()
            assert [m.properties["KEYS"] for m in reader.query_message("T", "k4")] == ["k4"]


def test_a_reader_follows_an_index_a_reopened_writer_rebuilt(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**TINY_STORE)) as writer:
        _put_keyed(writer, 0, 300)  # a full index file and a newer one
    with StoreReader(str(tmp_path)) as reader:
        newest = reader.index.files[-1]
        assert len(reader.index.files) == 2 and not newest.is_write_full()
        os.unlink(newest.path)  # lost (as a crashed writer's recovery drops files newer than its checkpoint)
        with MessageStore(str(tmp_path), StoreConfig(**TINY_STORE)) as writer:
            _put_keyed(writer, 300, 5)
            reader.refresh()
            assert _deleted_maps(tmp_path) == []  # the reader let go of the file that went
            assert [f.file_name for f in reader.index.files] == [f.file_name for f in writer.index.files]
            for i in (3, 270, 304):
                assert [m.properties["KEYS"] for m in reader.query_message("T", f"k{i}")] == [f"k{i}"]


def test_a_read_only_broker_views_a_message_by_msg_id_after_the_index_rolled(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **TINY_STORE) as writer, mqlite.Producer(writer, "pg") as producer:
        writer.create_topic("T", 1)
        producer.send(mqlite.Message("T", b"first", keys="first"))
        with mqlite.open(path, read_only=True) as reader:
            # Two entries a message (its unique id and its key): 300 roll TINY_STORE's 255-entry index files.
            ids = [producer.send(mqlite.Message("T", b"m%d" % i, keys=f"k{i}")).msg_id for i in range(300)]
            assert writer.query_message("T", "k299")  # dispatched and indexed on the writer's side
            reader.topic_status("T")  # the dashboard's sample: one refresh
            assert reader.view_message(ids[-1]).body == b"m299"
            assert [m.body for m in reader.query_message("T", "k299")] == [b"m299"]


def test_a_reader_forgets_a_deleted_topic_and_lets_go_of_its_files(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **TINY_STORE) as writer, mqlite.Producer(writer, "pg") as producer:
        writer.create_topic("Gone", 2)
        writer.create_topic("Kept", 2)
        for _ in range(100):  # two of TINY_STORE's 64-unit queue files or more
            producer.send(mqlite.Message("Gone", b"g"))
            producer.send(mqlite.Message("Kept", b"k"))
        with mqlite.open(path, read_only=True) as reader:
            assert sum(s.max_offset for s in reader.topic_status("Gone")) == 100
            writer.delete_topic("Gone")
            assert _deleted_maps(tmp_path)  # the reader still maps the deleted queue files
            assert sum(s.max_offset for s in reader.topic_status("Kept")) == 100
            assert _deleted_maps(tmp_path) == []
            assert reader.topic_list() == writer.topic_list()
            assert "Gone" not in reader.topic_list()
            assert reader.topic_status("Gone") == writer.topic_status("Gone") == []
            # The topic comes back when written again, and the reader follows it.
            writer.create_topic("Gone", 2)
            producer.send(mqlite.Message("Gone", b"again"))
            assert sum(s.max_offset for s in reader.topic_status("Gone")) == 1
