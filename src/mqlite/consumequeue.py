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

Damage checks (run by the writer at open, before `recover`, see `recovery.py`):
`file_problems` finds what the file set shows without reading a unit (a file
missing from the sequence, a file of the wrong size, a misnamed file, a directory
in a file's place: a writer renames it `<name>.damaged-<n>` first), and
`unit_damage` what a few units show: every file but the last must be full, so
its first and last units are valid; the files `recover` inspects (the last
three) must be valid prefixes, full but for the last; and behind the last
file's valid prefix (and the torn unit a crash can leave there) there are only
zeros. Anything else means units were lost or overwritten, and the queue is
rebuilt from the commit log (`discard`, then re-dispatch), not cut back.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .config import CQ_UNIT
from .mappedfile import FILE_NAME_DIGITS, MappedFile, MappedFileQueue, offset_to_file_name

__all__ = ["ConsumeQueue", "CQ_UNIT_STRUCT", "CQ_DTYPE", "BLANK_UNIT", "LOWER", "UPPER", "CQ_RESERVE_CHUNK",
           "LMQ_PREFIX", "file_problems", "queue_files", "queue_directories"]

log = logging.getLogger("mqlite")

#: Bytes reserved at a time in a consume-queue file (6,553 units): small, as a store may have
#: thousands of queues, and one `posix_fallocate` per 6,553 messages of a queue costs nothing measurable.
CQ_RESERVE_CHUNK = 128 << 10

CQ_UNIT_STRUCT = struct.Struct(">qiq")
CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert CQ_UNIT_STRUCT.size == CQ_DTYPE.itemsize == CQ_UNIT == 20
BLANK_UNIT = (0, 2**31 - 1, 0)
_BLANK_UNIT_BYTES = CQ_UNIT_STRUCT.pack(*BLANK_UNIT)
LOWER, UPPER = "LOWER", "UPPER"  # BoundaryType of getOffsetInQueueByTime
#: RocketMQ's light message queues (`MixAll.LMQ_PREFIX`): a broker's multi-dispatch writes their units
#: pointing at records of other topics and queues, so their units cannot be checked against record headers.
LMQ_PREFIX = "%LMQ%"
_UNIT = CQ_UNIT_STRUCT.size
_PACK_UNIT = CQ_UNIT_STRUCT.pack_into


class ConsumeQueue:
    """One logical queue of a topic.

    Appends come from one thread (reput); reads from any thread, or from
    other processes through a read-only instance. `min_offset`/`max_offset` are
    in units (queue offsets); `max_commit_log_offset` is the commit-log offset just
    past the last record a unit points to (-1 without one).
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
        self.max_commit_log_offset = -1
        self.last_store_timestamp = 0  # store time of the newest unit appended in this process
        #: Queue offsets below this can be written without allocating (`make_room`). A hint for
        #: the put path: reset to 0 whenever files are cut or reloaded, and `put` checks `reserved` anyway.
        self.room = 0
        self.damage: list[str] = []  # what `load` found wrong with the files (a writer rebuilds such a queue)
        self.is_light = topic.startswith(LMQ_PREFIX)  # units point at other queues' records (see LMQ_PREFIX)

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
    @property
    def name(self) -> str:
        """The queue's directory relative to the store, as messages name it: `consumequeue/T/0`."""
        return f"consumequeue/{self.topic}/{self.queue_id}"

    def load(self) -> None:
        """Map the queue's files.

        A writer notes what is wrong with the file set in `damage` (recovery rebuilds such a
        queue from the commit log) and maps the files in front of the first bad one; a
        reader skips odd files instead of refusing.
        """
        self.room = 0
        if not self.read_only:
            moved = self._move_directories_aside()
            self.damage = moved + [f"{self.name}/{name}: {what}"
                                   for name, what in file_problems(self.directory, self.file_size)]
        self.mapped_files.load(strict=not self.read_only and not self.damage)
        files = self.mapped_files.files
        if files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)

    def _move_directories_aside(self) -> list[str]:
        """Writer: rename directories named like queue files to `<name>.damaged-<n>` (nothing maps
        or rebuilds over a directory); returns the damage, and the queue is rebuilt from the log."""
        damage = []
        for name in queue_directories(self.directory):
            path = os.path.join(self.directory, name)
            n = 0
            while os.path.lexists(f"{path}.damaged-{n}"):
                n += 1
            os.rename(path, f"{path}.damaged-{n}")
            log.warning("%s/%s is a directory, not a queue file: moved it aside to %s.damaged-%d "
                        "(delete it once looked at); the queue is rebuilt from the commit log", self.name, name, name, n)
            damage.append(f"{self.name}/{name}: a directory in place of the file (moved aside to {name}.damaged-{n})")
        return damage

    def recover(self) -> None:
        """`ConsumeQueue.recover`: find the last valid unit, in the last three files.

        Units are written in order, so validity is a prefix of each file: a
        binary search finds its end, and the units just before it are checked
        one by one so a torn unit is never taken for data. The end is in the
        newest file holding a valid unit: a writer recovers only queues whose
        other files are full (`unit_damage`); a reader of a damaged queue so
        still sees the files behind a damaged one (its reads skip bad units).
        """
        files = self.mapped_files.files
        self.room = 0
        if not files:
            return
        end = files[0].file_from_offset
        for mf in reversed(files[max(0, len(files) - 3) :]):
            count = _valid_prefix(mf)
            end = mf.file_from_offset + count * _UNIT
            if count:
                offset, size, _ = CQ_UNIT_STRUCT.unpack_from(mf.mm, (count - 1) * _UNIT)
                if size != BLANK_UNIT[1] or offset != 0:
                    self.max_commit_log_offset = offset + size
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

    def unit_damage(self) -> str | None:
        """What the units show to be wrong before `recover` (see the module docstring), or None.

        Cost: two units per file, the valid prefix of the last three files (as `recover`),
        and a look for data behind the last file's prefix (only regions the file system
        holds data for are read).
        """
        files = self.mapped_files.files
        unpack = CQ_UNIT_STRUCT.unpack_from
        for mf in files[:-1]:
            for pos in (0, self.file_size - _UNIT):
                offset, size, _ = unpack(mf.mm, pos)
                if offset < 0 or size <= 0:
                    return self._where(mf, pos, "invalid unit in a file that is not the queue's last "
                                       f"({_describe_unit(mf.mm, pos)})")
        for mf in files[max(0, len(files) - 3) : -1]:
            count = _valid_prefix(mf)
            if count < self.units_per_file:
                return self._where(mf, count * _UNIT, f"invalid unit ({_describe_unit(mf.mm, count * _UNIT)}) "
                                   "in a file that is not the queue's last")
        if files:
            last = files[-1]
            count = _valid_prefix(last)
            # A crash can tear the last unit it wrote; data past that unit is damage.
            behind = _first_data(last, (count + 1) * _UNIT)
            if behind is not None:
                return self._where(last, count * _UNIT, f"invalid unit ({_describe_unit(last.mm, count * _UNIT)}) "
                                   f"with units behind it (at byte {behind})")
        return None

    def _where(self, mf: MappedFile, pos: int, what: str) -> str:
        qoff = (mf.file_from_offset + pos) // _UNIT
        return f"{self.name}/{os.path.basename(mf.path)}: queue offset {qoff}: {what}"

    def apparent_end(self) -> int:
        """The queue offset the files suggest the queue ended at (for a damaged queue whose
        records all aged out of the log: its rebuilt self starts there). Errs high."""
        end = 0
        last = self.mapped_files.last
        if last is not None:
            end = last.file_from_offset + _valid_prefix(last) * _UNIT
        for start, size in queue_files(self.directory):
            if last is None or start > last.file_from_offset:
                end = max(end, start + min(size, self.file_size) // _UNIT * _UNIT)
        return end // _UNIT

    def discard(self) -> None:
        """Delete every file of the queue (a damaged one, about to be rebuilt) and start empty."""
        self.mapped_files.destroy()
        for start, _ in queue_files(self.directory):
            try:
                os.unlink(os.path.join(self.directory, offset_to_file_name(start)))
            except OSError:
                pass
        self.damage = []
        self.min_logic_offset = 0
        self.max_commit_log_offset = -1

    def cut(self, queue_offset: int) -> None:
        """Writer, at recovery: drop the units from `queue_offset` on (zeroed in their file, later files deleted)."""
        self.mapped_files.truncate_dirty_files(queue_offset * _UNIT, self.file_size)
        unit = self.unit_at(queue_offset - 1) if queue_offset > self.min_offset else None
        self.max_commit_log_offset = unit[0] + unit[1] if unit and unit[1] != BLANK_UNIT[1] else -1

    def start_at(self, queue_offset: int) -> None:
        """Make an empty queue continue at `queue_offset` (blank units before it, as `fillPreBlank`)."""
        if self.mapped_files.files or queue_offset <= 0:
            return
        self._file_for(queue_offset * _UNIT)

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
        if last.wrote_position < self.file_size:
            # Nothing new (an idle queue, the common case): one unit read instead of the search,
            # which costs ~8 us a queue (a dashboard refreshes every queue of the store).
            offset, size, _ = CQ_UNIT_STRUCT.unpack_from(last.mm, last.wrote_position)
            if offset < 0 or size <= 0:
                return
            count = _valid_prefix(last, start=last.wrote_position // _UNIT)
            if count * _UNIT > last.wrote_position:
                last.wrote_position = count * _UNIT
                self._follow_last_unit(last)
            if last.wrote_position < self.file_size:
                return
            # Filled since the last look: the writer may have rolled too, in the same look.
        # The writer may have rolled: map the files after this one (mapping them all
        # again would leak the old maps, once per read of a queue whose last file is full).
        if self.mapped_files.find(last.file_from_offset + self.file_size) is None:
            return
        for mf in self.mapped_files.files:
            if mf.file_from_offset > last.file_from_offset:
                mf.wrote_position = _valid_prefix(mf) * _UNIT
                self._follow_last_unit(mf)

    def _follow_last_unit(self, mf: MappedFile) -> None:
        """Read-only: `max_commit_log_offset` follows the newest unit seen, so a reader's end of the
        commit log (`StoreReader.refresh`) covers the records the writer dispatched since it opened."""
        if mf.wrote_position >= _UNIT:
            offset, size, _ = CQ_UNIT_STRUCT.unpack_from(mf.mm, mf.wrote_position - _UNIT)
            if size != BLANK_UNIT[1] or offset != 0:
                self.max_commit_log_offset = max(self.max_commit_log_offset, offset + size)

    # -- append -------------------------------------------------------------------------
    def put(self, offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """`putMessagePositionInfo`: append the unit for queue offset `queue_offset`.

        A unit for an already indexed record is skipped (re-dispatch after a
        crash is idempotent). Returns False only when the unit does not line up
        with the queue's end, which means the queue is out of step with the log.
        Runs under the commit log's put lock for every message: the common case
        (next unit, room in the last file) is one `pack_into` and no calls.
        """
        if offset + size <= self.max_commit_log_offset:
            return True
        files = self.mapped_files.files
        if files:
            mf = files[-1]
            pos = mf.wrote_position
            # `reserved` <= the file size: the unit fits and its bytes have disk blocks.
            if mf.file_from_offset + pos == queue_offset * _UNIT and pos + _UNIT <= mf.reserved:
                _PACK_UNIT(mf.mm, pos, offset, size, tags_code)
                mf.wrote_position = pos + _UNIT
                self.max_commit_log_offset = offset + size
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
        self.max_commit_log_offset = offset + size
        return True

    def put_batch(self, first_offset: int, sizes: Sequence[int] | np.ndarray,
                  tags_codes: Sequence[int] | np.ndarray | None, first_queue_offset: int) -> bool:
        """Append units for contiguous records (a batch); one numpy write per file touched.

        `sizes` and `tags_codes` may be lists or int64 arrays (the Spark commit's batches).
        """
        if first_offset + sizes[-1] <= self.max_commit_log_offset or len(sizes) == 1:
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
        self.max_commit_log_offset = int(offsets[-1]) + int(sizes[-1])
        return True

    def rewrite_unit(self, queue_offset: int, offset: int, size: int, tags_code: int) -> bool:
        """Writer, read repair: put right a damaged unit below the queue's end (the record it lost
        was found in the log) and make it durable. False when the unit's file is gone or the disk
        cannot take it; the caller holds the commit log's put lock (the lock of every unit write).
        Cost: one `posix_fallocate` check and one page `msync`.
        """
        byte_offset = queue_offset * _UNIT
        mf = self.mapped_files.find(byte_offset)
        if self.read_only or mf is None or byte_offset + _UNIT > mf.file_from_offset + mf.wrote_position:
            return False
        pos = byte_offset - mf.file_from_offset
        try:
            mf.reserve(pos + _UNIT)  # an old file's bytes have blocks, unless the damage punched a hole
            _PACK_UNIT(mf.mm, pos, offset, size, tags_code)
            page = pos - pos % mmap.PAGESIZE
            mf.mm.flush(page, min(mf.file_size, pos + _UNIT) - page)
        except (OSError, ValueError):  # DiskFullError is an OSError; ValueError: unmapped meanwhile
            return False
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

    def truncate_dirty(self, commit_log_offset: int) -> None:
        """`truncateDirtyLogicFiles`: drop units pointing at or beyond `commit_log_offset`.

        Walks back from the last file: a file whose first real unit is at or
        beyond the cut goes whole; in the first file that keeps a unit, the cut
        units are zeroed.
        """
        queue = self.mapped_files
        self.room = 0
        while True:
            last = queue.last
            if last is None:
                self.max_commit_log_offset = -1
                return
            count = last.wrote_position // _UNIT
            units = np.frombuffer(last.mm[: count * _UNIT], dtype=CQ_DTYPE)  # a copy: no map export
            real = units["size"] != BLANK_UNIT[1]
            # Units are in commit-log order, so the ones to keep are a prefix.
            keep = int(np.count_nonzero((units["offset"] < commit_log_offset) | ~real))
            if keep == 0 and len(queue.files) > 1:
                queue.delete_last_file()
                continue
            kept_real = np.flatnonzero(real[:keep])
            if kept_real.size:
                i = int(kept_real[-1])
                self.max_commit_log_offset = int(units["offset"][i]) + int(units["size"][i])
            elif len(queue.files) == 1:
                self.max_commit_log_offset = -1
            if keep < count:
                queue.truncate_dirty_files(last.file_from_offset + keep * _UNIT, (count - keep) * _UNIT)
            return

    def _expired(self, min_commit_log_offset: int) -> Callable[[MappedFile], bool]:
        """The rule retention deletes a queue file by: its last unit points below the log's min offset."""

        def expired(mf: MappedFile) -> bool:
            offset, size, _ = CQ_UNIT_STRUCT.unpack_from(mf.mm, self.file_size - _UNIT)
            return size > 0 and offset + size <= min_commit_log_offset

        return expired

    def delete_expired(self, min_commit_log_offset: int, batch_max: int = 10) -> int:
        """Delete leading files whose last unit points below the log's min offset."""
        return self._files_gone(self.mapped_files.delete_files(self._expired(min_commit_log_offset), batch_max))

    def forget_deleted(self, min_commit_log_offset: int) -> int:
        """Read-only: drop the leading files the writer's retention deleted (only files retention could
        have deleted are looked at, so a look costs no system call while none expired). Returns how many."""
        return self._files_gone(self.mapped_files.forget_deleted(self._expired(min_commit_log_offset)))

    def _files_gone(self, gone: int) -> int:
        """After leading files went: the queue starts at the first file left."""
        files = self.mapped_files.files
        if gone and files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)
        return gone

    def flush(self, least_pages: int) -> bool:
        """Flush as `MappedFileQueue.flush`."""
        return self.mapped_files.flush(least_pages)

    def flush_all(self) -> None:
        """Flush every dirty file."""
        self.mapped_files.flush_all()

    def close(self) -> None:
        """Unmap the files."""
        self.mapped_files.close()

    def release(self) -> None:
        """Read-only: let go of the files of a queue another process deleted (`MappedFileQueue.release`)."""
        self.mapped_files.release()

    def destroy(self) -> None:
        """Delete the queue's files."""
        self.room = 0
        self.mapped_files.destroy()


def queue_files(directory: str) -> list[tuple[int, int]]:
    """`(start offset, size in bytes)` of the files named by 20 digits in `directory`, in order
    (a directory of such a name is no file: `queue_directories` lists those)."""
    found = []
    for name in _queue_names(directory):
        path = os.path.join(directory, name)
        try:
            if not os.path.isdir(path):
                found.append((int(name), os.path.getsize(path)))
        except OSError:
            continue
    return found


def queue_directories(directory: str) -> list[str]:
    """Names of the directories in `directory` named like queue files (damage: nothing can map them)."""
    return [name for name in _queue_names(directory) if os.path.isdir(os.path.join(directory, name))]


def _queue_names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if len(n) == FILE_NAME_DIGITS and n.isdigit())
    except OSError:
        return []


def file_problems(directory: str, file_size: int) -> list[tuple[str, str]]:
    """`(file name, what is wrong)` for a queue's file set: sizes, names and gaps, no unit read.

    An empty last file is no problem (a crash while creating it; loading deletes it).
    """
    files = queue_files(directory)
    problems = [(name, "a directory in place of the file (a writer's open moves it aside and rebuilds the queue)")
                for name in queue_directories(directory)]
    units = file_size // _UNIT
    for index, (start, size) in enumerate(files):
        name = offset_to_file_name(start)
        if start % file_size:
            problems.append((name, f"its name is not a multiple of the file size {file_size}"))
        elif index and start > files[index - 1][0] + file_size:
            gap_start = files[index - 1][0] + file_size
            count = (start - gap_start) // file_size
            first = offset_to_file_name(gap_start)
            problems.append((first, "missing" + (f" ({count} files from here missing)" if count > 1 else "")
                             + f"; {count * units} units lost"))
        if size < file_size and not (size == 0 and index == len(files) - 1):
            problems.append((name, f"{file_size - size} bytes short ({units - size // _UNIT} units missing)"))
        elif size > file_size:
            problems.append((name, f"{size - file_size} bytes too long (files here are {file_size} bytes)"))
    return problems


def _describe_unit(mm: mmap.mmap, pos: int) -> str:
    offset, size, _ = CQ_UNIT_STRUCT.unpack_from(mm, pos)
    return "zeroed" if (offset, size) == (0, 0) else f"offset {offset}, size {size}"


def _first_data(mf: MappedFile, start: int) -> int | None:
    """The first position >= `start` holding a non-zero byte, or None (reads only data regions)."""
    mm = mf.mm
    pos = start
    while pos < mf.file_size:
        pos = mf.next_data(pos)
        if pos >= mf.file_size:
            return None
        end = min(mf.file_size, (pos // _CHUNK + 1) * _CHUNK)  # aligned: then skip the holes after it
        chunk = mm[pos:end]
        rest = chunk.lstrip(b"\0")
        if rest:
            return pos + len(chunk) - len(rest)
        pos = end
    return None


_CHUNK = 64 * 1024


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
