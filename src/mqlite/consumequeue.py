"""Consume queues: per (topic, queue id), fixed 20-byte units pointing into the commit log.

Unit layout (big-endian; `ConsumeQueue.CQ_STORE_UNIT_SIZE`):

    | offset | size | field                                                   |
    |--------|------|---------------------------------------------------------|
    |      0 | 8    | commit-log offset of the record                         |
    |      8 | 4    | record size                                             |
    |     12 | 8    | tags code (Java hash of TAGS; delivery time for delays) |

Queue offset n is unit n: byte n*20 of the logical queue. Files live at
`consumequeue/<topic>/<queue id>/<20-digit logical byte start>`, each
`consumequeue_file_size` bytes. A unit is valid when offset >= 0 and size > 0.
A queue whose first file starts mid-way is pre-filled with blank units
`(0, 2**31 - 1, 0)` up to its first real unit.

Units are written through the map only where space is reserved (`MappedFile.reserve`,
in `CQ_RESERVE_CHUNK`s): `make_room` reserves it before the commit log writes the
record the unit points to, so a full disk refuses the put before anything is written.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .config import CQ_UNIT
from .mappedfile import MappedFile, MappedFileQueue

__all__ = ["ConsumeQueue", "CQ_UNIT_STRUCT", "CQ_DTYPE", "BLANK_UNIT", "LOWER", "UPPER", "CQ_RESERVE_CHUNK"]

#: Bytes reserved at a time in a consume-queue file (6,553 units): small, as a store may have
#: thousands of queues, and one `posix_fallocate` per 6,553 messages of a queue costs nothing measurable.
CQ_RESERVE_CHUNK = 128 << 10

CQ_UNIT_STRUCT = struct.Struct(">qiq")
CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert CQ_UNIT_STRUCT.size == CQ_DTYPE.itemsize == CQ_UNIT == 20
BLANK_UNIT = (0, 2**31 - 1, 0)
_BLANK_UNIT_BYTES = CQ_UNIT_STRUCT.pack(*BLANK_UNIT)
LOWER, UPPER = "LOWER", "UPPER"  # BoundaryType of getOffsetInQueueByTime
_UNIT = CQ_UNIT_STRUCT.size
_PACK_UNIT = CQ_UNIT_STRUCT.pack_into


class ConsumeQueue:
    """One logical queue of a topic.

    Appends come from one thread (reput); reads from any thread, or from
    other processes through a read-only instance. `min_offset`/`max_offset` are
    in units (queue offsets); `max_physic_offset` is the commit-log offset just
    after the last indexed record.
    """

    def __init__(self, root: str, topic: str, queue_id: int, file_size: int, *, read_only: bool = False) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(root, topic, str(queue_id))
        self.file_size = file_size
        self.read_only = read_only
        self.mapped_files = MappedFileQueue(self.directory, file_size, read_only=read_only,
                                            reserve_chunk=CQ_RESERVE_CHUNK)
        self.min_logic_offset = 0
        self.max_physic_offset = -1
        self.last_store_timestamp = 0  # store time of the newest unit appended in this process
        #: Queue offsets below this can be written without allocating (`make_room`). A hint for
        #: the put path: reset to 0 whenever files are cut or reloaded, and `put` checks `reserved` anyway.
        self.room = 0

    # -- offsets ----------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """Smallest readable queue offset."""
        return self.min_logic_offset // _UNIT

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written."""
        return self.mapped_files.max_offset // _UNIT

    @property
    def units_per_file(self) -> int:
        """Units in one file."""
        return self.file_size // _UNIT

    # -- load and recovery ---------------------------------------------------------------
    def load(self) -> None:
        """Map the queue's files (a reader skips odd files instead of refusing)."""
        self.room = 0
        self.mapped_files.load(strict=not self.read_only)
        files = self.mapped_files.files
        if files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)

    def recover(self) -> None:
        """`ConsumeQueue.recover`: find the last valid unit from the third-to-last file on.

        Units are written in order, so validity is a prefix of each file: a
        binary search finds its end, and the units just before it are checked
        one by one so a torn unit is never taken for data.
        """
        files = self.mapped_files.files
        self.room = 0
        if not files:
            return
        end = files[0].file_from_offset
        for mf in files[max(0, len(files) - 3) :]:
            count = _valid_prefix(mf)
            end = mf.file_from_offset + count * _UNIT
            if count:
                offset, size, _ = CQ_UNIT_STRUCT.unpack_from(mf.mm, (count - 1) * _UNIT)
                if size != BLANK_UNIT[1] or offset != 0:
                    self.max_physic_offset = offset + size
            if count < self.units_per_file:
                break
        if not self.read_only:
            self.mapped_files.truncate_dirty_files(end, self.file_size)
        else:
            self._set_end(end)
        files = self.mapped_files.files
        if files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)

    def _set_end(self, end: int) -> None:
        """Read-only: record where valid data ends, without touching files."""
        for mf in self.mapped_files.files:
            if mf.file_from_offset <= end < mf.file_from_offset + self.file_size:
                mf.wrote_position = end - mf.file_from_offset
            elif mf.file_from_offset >= end:
                mf.wrote_position = 0

    def refresh(self) -> None:
        """Read-only: pick up units a live writer appended since the last look."""
        if not self.read_only:
            return
        if not self.mapped_files.files:
            self.load()
            self.recover()
            return
        last = self.mapped_files.last
        assert last is not None
        if last.wrote_position >= self.file_size:
            self.load()  # the writer rolled a new file
            self.recover()
            return
        count = _valid_prefix(last, start=last.wrote_position // _UNIT)
        last.wrote_position = count * _UNIT

    # -- append -------------------------------------------------------------------------
    def put(self, offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """`putMessagePositionInfo`: append the unit for queue offset `queue_offset`.

        A unit for an already indexed record is skipped (re-dispatch after a
        crash is idempotent). Returns False only when the unit does not line up
        with the queue's end, which means the queue is out of step with the log.
        Runs under the commit log's put lock for every message: the common case
        (next unit, room in the last file) is one `pack_into` and no calls.
        """
        if offset + size <= self.max_physic_offset:
            return True
        files = self.mapped_files.files
        if files:
            mf = files[-1]
            pos = mf.wrote_position
            # `reserved` <= the file size: the unit fits and its bytes have disk blocks.
            if mf.file_from_offset + pos == queue_offset * _UNIT and pos + _UNIT <= mf.reserved:
                _PACK_UNIT(mf.mm, pos, offset, size, tags_code)
                mf.wrote_position = pos + _UNIT
                self.max_physic_offset = offset + size
                return True
        expect = queue_offset * _UNIT
        target = self._file_for(expect)
        if target is None:
            return True  # a duplicate below the queue's start
        mf = target
        current = mf.file_from_offset + mf.wrote_position
        if expect < current:
            return True  # already written
        if expect != current:
            return False
        pos = mf.wrote_position
        mf.reserve(pos + _UNIT)  # DiskFullError before anything is written
        CQ_UNIT_STRUCT.pack_into(mf.mm, pos, offset, size, tags_code)
        mf.wrote_position = pos + _UNIT
        self.max_physic_offset = offset + size
        return True

    def put_batch(self, first_offset: int, sizes: Sequence[int] | np.ndarray,
                  tags_codes: Sequence[int] | np.ndarray | None, first_queue_offset: int) -> bool:
        """Append units for contiguous records (a batch); one numpy write per file touched.

        `sizes` and `tags_codes` may be lists or int64 arrays (the Spark commit's batches).
        """
        if first_offset + sizes[-1] <= self.max_physic_offset or len(sizes) == 1:
            offset = first_offset
            codes = [0] * len(sizes) if tags_codes is None else [int(c) for c in tags_codes]
            ok = True
            for i, size in enumerate(int(s) for s in sizes):
                ok = self.put(offset, size, codes[i], first_queue_offset + i) and ok
                offset += size
            return ok
        units = np.empty(len(sizes), dtype=CQ_DTYPE)
        size_array = np.asarray(sizes, dtype=np.int64)
        units["size"] = size_array
        offsets = np.empty(len(sizes), dtype=np.int64)
        offsets[0] = first_offset
        np.cumsum(size_array[:-1], out=offsets[1:])
        offsets[1:] += first_offset
        units["offset"] = offsets
        units["tags_code"] = tags_codes if tags_codes is not None else 0
        data = units.tobytes()
        done = 0
        while done < len(sizes):
            expect = (first_queue_offset + done) * _UNIT
            mf = self._file_for(expect)
            if mf is None or mf.file_from_offset + mf.wrote_position != expect:
                return False
            room = (self.file_size - mf.wrote_position) // _UNIT
            take = min(room, len(sizes) - done)
            pos = mf.wrote_position
            mf.reserve(pos + take * _UNIT)  # a no-op after make_room
            mf.mm[pos : pos + take * _UNIT] = data[done * _UNIT : (done + take) * _UNIT]
            mf.wrote_position = pos + take * _UNIT
            done += take
        self.max_physic_offset = int(offsets[-1]) + int(sizes[-1])
        return True

    def _file_for(self, expect: int) -> MappedFile | None:
        queue = self.mapped_files
        last = queue.last
        if last is None:
            # fillPreBlank: a queue that starts at a non-zero offset.
            start = expect - expect % self.file_size
            mf = queue.last_for_append(expect, reserve=expect - start + _UNIT)
            blanks = (expect - mf.file_from_offset) // _UNIT
            if blanks:
                mf.mm[: blanks * _UNIT] = _BLANK_UNIT_BYTES * blanks
                mf.wrote_position = blanks * _UNIT
            self.min_logic_offset = expect
            return mf
        if last.is_full:
            if expect < last.file_from_offset + self.file_size:
                return last
            return queue.last_for_append(reserve=_UNIT)
        if expect < last.file_from_offset:
            return None
        return last

    def make_room(self, first_queue_offset: int, count: int) -> None:
        """Reserve the space of units [first, first + count) before anything of their put is written.

        Files those units need are created and reserved ahead, unpublished (see
        `MappedFileQueue.prepare_file`), so offsets and readers see nothing until the
        units are written. Raises `DiskFullError`, leaving every offset as it was.
        Called under the commit log's put lock when `room` says the units may not fit;
        costs one `posix_fallocate` per chunk (`CQ_RESERVE_CHUNK`).
        """
        queue = self.mapped_files
        offset, end = first_queue_offset * _UNIT, (first_queue_offset + count) * _UNIT
        last = queue.last
        while offset < end:
            file_start = offset - offset % self.file_size
            need = min(end - file_start, self.file_size)
            mf = queue.find(file_start)
            if mf is not None:
                mf.reserve(need)
            elif last is None or file_start > last.file_from_offset:  # below the first file: nothing is written
                queue.prepare_file(file_start, need)
            offset = file_start + self.file_size
        last = queue.last
        self.room = (last.file_from_offset + last.reserved) // _UNIT if last is not None else 0

    # -- read ---------------------------------------------------------------------------
    def read_units(self, start: int, max_count: int) -> bytes:
        """Raw bytes of up to `max_count` units from queue offset `start`, stopping at a file end.

        Read-only instances read past their cached end too, so callers validate units.
        """
        byte_offset = start * _UNIT
        mf = self.mapped_files.find(byte_offset)
        if mf is None:
            return b""
        pos = byte_offset - mf.file_from_offset
        end = mf.wrote_position if not self.read_only else mf.file_size
        return mf.mm[pos : min(end, pos + max_count * _UNIT)]

    def iter_units(self, start: int, stop: int) -> Iterator[tuple[int, int, int, int]]:
        """Yield `(queue_offset, commit_log_offset, size, tags_code)` for offsets in [start, stop)."""
        qoff = start
        while qoff < stop:
            data = self.read_units(qoff, min(stop - qoff, 4096))
            if not data:
                return
            for offset, size, code in CQ_UNIT_STRUCT.iter_unpack(data):
                if offset < 0 or size <= 0:
                    return
                yield qoff, offset, size, code
                qoff += 1

    def units_array(self, start: int, stop: int) -> np.ndarray:
        """Units [start, stop) as a structured numpy array (copies; stops at the first gap)."""
        parts = []
        qoff = start
        while qoff < stop:
            data = self.read_units(qoff, stop - qoff)
            if not data:
                break
            parts.append(np.frombuffer(data, dtype=CQ_DTYPE))
            qoff += len(data) // _UNIT
        return np.concatenate(parts) if parts else np.empty(0, dtype=CQ_DTYPE)

    def unit_at(self, queue_offset: int) -> tuple[int, int, int] | None:
        """The unit at `queue_offset`, or None when absent or invalid."""
        data = self.read_units(queue_offset, 1)
        if len(data) < _UNIT:
            return None
        offset, size, code = CQ_UNIT_STRUCT.unpack(data)
        return (offset, size, code) if offset >= 0 and size > 0 else None

    def offset_by_time(self, timestamp: int, store_time_at: Callable[[int, int], int], boundary: str = LOWER) -> int:
        """`getOffsetInQueueByTime`: binary search on the records' store times.

        LOWER: first offset whose store time >= timestamp (max offset if all are
        earlier, min offset if all later). UPPER: last offset with store time <=
        timestamp (0 if all later).
        """
        low, high = self.min_offset, self.max_offset - 1
        if high < low:
            return 0
        found = -1
        while low <= high:
            mid = (low + high) // 2
            unit = self.unit_at(mid)
            ts = store_time_at(unit[0], unit[1]) if unit else -1
            if ts < 0:
                # The record is gone (deleted or damaged): search above it.
                low = mid + 1
                continue
            if boundary == LOWER:
                if ts >= timestamp:
                    found, high = mid, mid - 1
                else:
                    low = mid + 1
            else:
                if ts <= timestamp:
                    found, low = mid, mid + 1
                else:
                    high = mid - 1
        if found >= 0:
            return found
        if boundary == LOWER:
            first = self.unit_at(self.min_offset)
            first_ts = store_time_at(first[0], first[1]) if first else -1
            return self.min_offset if first_ts >= timestamp else self.max_offset
        return 0

    # -- maintenance --------------------------------------------------------------------------
    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """Move the min offset to the first unit whose record still exists in the log."""
        low, high = self.min_offset, self.max_offset - 1
        if high < low:
            return
        last = self.unit_at(high)
        if last is not None and last[0] < min_commit_log_offset:
            self.min_logic_offset = self.max_offset * _UNIT
            return
        while low < high:
            mid = (low + high) // 2
            unit = self.unit_at(mid)
            if unit is None or unit[0] < min_commit_log_offset:
                low = mid + 1
            else:
                high = mid
        self.min_logic_offset = max(self.min_logic_offset, low * _UNIT)

    def truncate_dirty(self, phy_offset: int) -> None:
        """`truncateDirtyLogicFiles`: drop units pointing at or beyond `phy_offset`.

        Walks back from the last file: a file whose first real unit is at or
        beyond the cut goes whole; in the first file that keeps a unit, the cut
        units are zeroed.
        """
        queue = self.mapped_files
        self.room = 0
        while True:
            last = queue.last
            if last is None:
                self.max_physic_offset = -1
                return
            count = last.wrote_position // _UNIT
            units = np.frombuffer(last.mm[: count * _UNIT], dtype=CQ_DTYPE)  # a copy: no map export
            real = units["size"] != BLANK_UNIT[1]
            # Units are in commit-log order, so the ones to keep are a prefix.
            keep = int(np.count_nonzero((units["offset"] < phy_offset) | ~real))
            if keep == 0 and len(queue.files) > 1:
                queue.delete_last_file()
                continue
            kept_real = np.flatnonzero(real[:keep])
            if kept_real.size:
                i = int(kept_real[-1])
                self.max_physic_offset = int(units["offset"][i]) + int(units["size"][i])
            elif len(queue.files) == 1:
                self.max_physic_offset = -1
            if keep < count:
                queue.truncate_dirty_files(last.file_from_offset + keep * _UNIT, (count - keep) * _UNIT)
            return

    def delete_expired(self, min_commit_log_offset: int, batch_max: int = 10) -> int:
        """Delete leading files whose last unit points below the log's min offset."""

        def expired(mf: MappedFile) -> bool:
            offset, size, _ = CQ_UNIT_STRUCT.unpack_from(mf.mm, self.file_size - _UNIT)
            return size > 0 and offset + size <= min_commit_log_offset

        deleted = self.mapped_files.delete_files(expired, batch_max)
        files = self.mapped_files.files
        if deleted and files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)
        return deleted

    def flush(self, least_pages: int) -> bool:
        """Flush as `MappedFileQueue.flush`."""
        return self.mapped_files.flush(least_pages)

    def flush_all(self) -> None:
        """Flush every dirty file."""
        self.mapped_files.flush_all()

    def close(self) -> None:
        """Unmap the files."""
        self.mapped_files.close()

    def destroy(self) -> None:
        """Delete the queue's files."""
        self.room = 0
        self.mapped_files.destroy()


def _valid_prefix(mf: MappedFile, start: int = 0) -> int:
    """Number of valid units at the start of `mf` (validity is a prefix).

    Binary search for the first invalid unit, then a check of the 1024 units
    just before it (numpy over a copy), so a torn unit near the end stops the prefix.
    """
    mm = mf.mm
    unpack = CQ_UNIT_STRUCT.unpack_from
    low, high = start, mf.file_size // _UNIT
    while low < high:
        mid = (low + high) // 2
        offset, size, _ = unpack(mm, mid * _UNIT)
        if offset >= 0 and size > 0:
            low = mid + 1
        else:
            high = mid
    window_start = max(start, low - 1024)
    window = np.frombuffer(mm[window_start * _UNIT : low * _UNIT], dtype=CQ_DTYPE)
    bad = np.flatnonzero((window["offset"] < 0) | (window["size"] <= 0))
    return window_start + int(bad[0]) if bad.size else low
