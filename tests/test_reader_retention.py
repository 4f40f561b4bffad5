"""A long-lived read-only reader beside a writer whose retention deletes files: the reader lets go of
the deleted segments and queue and index files on `refresh()` (no mapping of a deleted file stays,
so the disk space goes back), its min offsets follow the writer's, and a read that was going on in a
dropped segment finishes with the bytes it was reading.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
