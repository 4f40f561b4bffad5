"""The message key index: RocketMQ's ``IndexFile`` and ``IndexService``.

One index file is a fixed-size hash table with chained entries, big-endian. Regions:
header (``INDEX_HEADER``, 40 bytes), then ``hash_slot_num`` slots (``INDEX_SLOT``, 4 bytes
each: the newest entry number of the bucket, 0 = empty), then ``index_num`` entries
(``INDEX_ENTRY``, 20 bytes each; entry 0 is never used)::

    header                                      entry
    +--------+------+-----------------+        +--------+------+------------+
    | offset | size | field           |        | offset | size | field      |
    +========+======+=================+        +========+======+============+
    |      0 |    8 | beginTimestamp  |        |      0 |    4 | keyHash    |
    |      8 |    8 | endTimestamp    |        |      4 |    8 | phyOffset  |
    |     16 |    8 | beginPhyOffset  |        |     12 |    4 | timeDiff   |
    |     24 |    8 | endPhyOffset    |        |     16 |    4 | prevIndex  |
    |     32 |    4 | hashSlotCount   |        +--------+------+------------+
    |     36 |    4 | indexCount      |
    +--------+------+-----------------+

``keyHash`` is ``abs(String.hashCode(key))`` (``Integer.MIN_VALUE`` -> 0) and the bucket is
``keyHash % hash_slot_num``. ``timeDiff`` is whole seconds since ``beginTimestamp``.
``prevIndex`` links to the previous entry of the same bucket (0 ends the chain).
``indexCount`` starts at 1, so a file holds ``index_num - 1`` entries. The three
``struct.Struct`` objects below are the only source of sizes and offsets.

Files live in ``<root>/index/`` named by their creation time in local time,
``yyyyMMddHHmmssSSS``. Keys are ``topic + "#" + key``; only hashes are stored, so a
lookup can return offsets of other keys and the caller must check the message's keys.

>>> import os, tempfile
>>> f = IndexFile(os.path.join(tempfile.mkdtemp(), "20240101000000000"), 8, 16)
>>> f.put_key("TopicTest#KEY1", 100, 1_700_000_000_000)
True
>>> f.select_commit_log_offsets("TopicTest#KEY1", 10, 0, 2**62)
[100]
>>> f.close()
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import itertools
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import ConfigError, IllegalStateError, StoreCorruptedError
from .errors import disk_full_error
from .mappedfile import reserve_ahead
from .message import java_string_hash as _java_hash
from .message import PROPERTY_KEYS, java_string_hash_array

__all__ = [
    "INDEX_ENTRY", "INDEX_HEADER", "INDEX_SLOT", "IndexFile", "IndexService",
    "index_file_size", "index_key_hash", "index_key_hash_array", "index_key_hashes", "index_key_names",
    "index_key_rows",
]

_log = logging.getLogger(__name__)

#: beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset (longs), hashSlotCount,
#: indexCount (ints).
INDEX_HEADER = struct.Struct(">qqqqii")
#: One bucket: the number of the newest entry in it, 0 when empty.
INDEX_SLOT = struct.Struct(">i")
#: keyHash (int), phyOffset (long), timeDiff in seconds (int), prevIndex (int).
INDEX_ENTRY = struct.Struct(">iqii")

# numpy views of the same layouts, used by verify() to scan millions of slots at once.
_SLOT_DTYPE = np.dtype(">i4")
_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("commit_log_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")]
)
assert _SLOT_DTYPE.itemsize == INDEX_SLOT.size and _ENTRY_DTYPE.itemsize == INDEX_ENTRY.size

#: Entry bytes reserved at a time (`posix_fallocate`) ahead of the newest entry: 52,428 entries.
INDEX_RESERVE_CHUNK = 1 << 20
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_INT_MIN = -(2**31)
_VECTOR_MIN = 16  # fewer keys than this go through put_key: numpy's set-up costs more
_INT_MAX = 2**31 - 1
_NAME_DIGITS = 17  # yyyyMMddHHmmssSSS
_UNUSABLE = {True: "skipping", False: "damaged"}  # how load() logs an unusable file, by read_only
_MAX_PROBLEMS_PER_KIND = 10  # verify() reports this many examples of each problem, then a count

# Header field positions in the unpacked INDEX_HEADER tuple.
_BEGIN_TS, _END_TS, _BEGIN_OFFSET, _END_OFFSET, _SLOT_COUNT, _INDEX_COUNT = range(6)


def index_key_hash(key: str) -> int:
    """The non-negative hash RocketMQ stores for an index key (``indexKeyHashMethod``).

    ``abs(key.hashCode())``, where Java's ``abs(Integer.MIN_VALUE)`` stays negative and is
    therefore mapped to 0.

    >>> index_key_hash("TopicTest#KEY1")
    1656969516
    """
    h = _java_hash(key)
    return 0 if h == _INT_MIN else abs(h)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of one index file: header, slot table and entry area."""
    return INDEX_HEADER.size + hash_slot_num * INDEX_SLOT.size + index_num * INDEX_ENTRY.size


def _check_shape(hash_slot_num: int, index_num: int) -> None:
    if hash_slot_num <= 0 or index_num < 2 or index_num > _INT_MAX:
        raise ConfigError(
            f"index shape hash_slot_num={hash_slot_num}, index_num={index_num} is invalid; "
            "hash_slot_num must be >= 1 and index_num between 2 and 2**31-1 "
            "(entry 0 is never used, so index_num=1 could hold nothing)"
        )


class IndexFile:
    """One index file, mapped into memory.

    Writable mode creates the file (sparse, via ``ftruncate``) when it is missing or empty,
    with ``begin = end = (end_commit_log_offset, end_timestamp)`` inherited from the previous file
    as RocketMQ does; an existing file's header is loaded. Header fields are cached and
    written through to the map on every ``put_key``.

    Read-only mode maps the file without write access and re-reads the header on every
    call, so it can follow a writer in another process; every slot and link read from the
    file is bounds-checked and chain walks are capped, so torn or garbage data yields
    wrong-but-bounded answers, never an exception or an endless loop.

    A file of the wrong size raises ``StoreCorruptedError`` (other index settings than the
    ones the store was created with). Not thread-safe: ``IndexService`` serialises access.
    """

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        *,
        end_commit_log_offset: int = 0,
        end_timestamp: int = 0,
        read_only: bool = False,
    ) -> None:
        _check_shape(hash_slot_num, index_num)
        self.path = path
        self.file_name = os.path.basename(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.read_only = read_only
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_at = INDEX_HEADER.size + hash_slot_num * INDEX_SLOT.size
        # Guards the map's lifetime only: flush() may run outside IndexService's lock.
        self._map_lock = threading.Lock()
        self._hdr = [0, 0, 0, 0, 0, 1]
        self._raw_index_count = 1  # as stored, before "<= 0 reads as 1"
        # Bytes from 0 known to have disk blocks: header and slots (written anywhere) and the
        # entries up to here. Nothing is written through the map beyond it (a full disk would
        # kill the process with SIGBUS there); a loaded file reserves on its first put.
        self._reserved = 0
        created = False
        try:
            fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise disk_full_error(path, f"creating the index file {path}") from None
            raise
        try:
            size = os.fstat(fd).st_size
            if size == 0 and not read_only:
                # A new file, or one torn between create and truncate: nothing was written.
                os.ftruncate(fd, self.file_size)
                created = True
                try:
                    self._reserved = reserve_ahead(fd, 0, self._entries_at + 2 * INDEX_ENTRY.size,
                                                   INDEX_RESERVE_CHUNK, self.file_size, path)
                except BaseException:
                    os.unlink(path)
                    raise
            elif size != self.file_size:
                raise StoreCorruptedError(
                    f"index file {path} is {size} bytes; hash_slot_num={hash_slot_num} and "
                    f"index_num={index_num} need {self.file_size} (open the store with the "
                    "index settings it was created with, or delete the index directory so "
                    "it is rebuilt from the commit log)"
                )
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._map: mmap.mmap | None = mmap.mmap(fd, self.file_size, access=access)
        finally:
            os.close(fd)  # the map keeps its own descriptor
        if created:
            if end_commit_log_offset > 0:
                self._hdr[_BEGIN_OFFSET] = self._hdr[_END_OFFSET] = end_commit_log_offset
            if end_timestamp > 0:
                self._hdr[_BEGIN_TS] = self._hdr[_END_TS] = end_timestamp
            INDEX_HEADER.pack_into(self._map, 0, *self._hdr)
        else:
            self._load_header()

    # -- header ---------------------------------------------------------------------------

    def _load_header(self) -> None:
        assert self._map is not None
        self._hdr = list(INDEX_HEADER.unpack_from(self._map, 0))
        self._raw_index_count = self._hdr[_INDEX_COUNT]
        if self._hdr[_INDEX_COUNT] <= 0:
            self._hdr[_INDEX_COUNT] = 1

    def _header(self) -> list[int]:
        """The header fields; re-read from the map in read-only mode (a writer may append)."""
        if self.read_only and self._map is not None:
            self._load_header()
        return self._hdr

    @property
    def begin_timestamp(self) -> int:
        """Store time (ms) of the first entry, or the inherited end time of the previous file."""
        return self._header()[_BEGIN_TS]

    @property
    def end_timestamp(self) -> int:
        """Store time (ms) of the newest entry."""
        return self._header()[_END_TS]

    @property
    def begin_commit_log_offset(self) -> int:
        """Commit-log offset of the first entry (or inherited, see ``begin_timestamp``)."""
        return self._header()[_BEGIN_OFFSET]

    @property
    def end_commit_log_offset(self) -> int:
        """Commit-log offset of the newest entry."""
        return self._header()[_END_OFFSET]

    @property
    def hash_slot_count(self) -> int:
        """Number of slots that became non-empty."""
        return self._header()[_SLOT_COUNT]

    @property
    def index_count(self) -> int:
        """Number of the next entry to write (entries are ``1 .. index_count - 1``)."""
        return self._header()[_INDEX_COUNT]

    def _require_map(self) -> mmap.mmap:
        if self._map is None:
            raise IllegalStateError(f"index file {self.path} is closed")
        return self._map

    # -- RocketMQ operations -------------------------------------------------------------

    def _reserve(self, end: int) -> None:
        """Give bytes [0, `end`) disk blocks before they are written (a chunk of entries ahead).

        Raises `DiskFullError` with nothing written. Cost: one open and `posix_fallocate`
        per `INDEX_RESERVE_CHUNK` of entries.
        """
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._reserved = reserve_ahead(fd, self._reserved, end, INDEX_RESERVE_CHUNK, self.file_size, self.path)
        finally:
            os.close(fd)

    def is_write_full(self) -> bool:
        """True when no entry is left (``indexCount >= indexNum``). O(1)."""
        return self._header()[_INDEX_COUNT] >= self.index_num

    def put_key(self, key: str, commit_log_offset: int, store_timestamp: int, key_hash: int | None = None) -> bool:
        """Append an entry for *key*; False when the file is full (RocketMQ ``putKey``).

        Cost: one hash, four small writes into the map, no I/O wait (the OS writes the pages
        back; ``flush()`` forces it). Writable mode only.
        """
        m = self._require_map()
        if self.read_only:
            raise IllegalStateError(f"index file {self.path} is open read-only")
        hdr = self._hdr
        count = hdr[_INDEX_COUNT]
        if count >= self.index_num:
            return False
        entry_at = self._entries_at + count * INDEX_ENTRY.size
        if entry_at + INDEX_ENTRY.size > self._reserved:
            self._reserve(entry_at + INDEX_ENTRY.size)
        if key_hash is None:
            key_hash = index_key_hash(key)
        slot_at = INDEX_HEADER.size + (key_hash % self.hash_slot_num) * INDEX_SLOT.size
        (slot_value,) = INDEX_SLOT.unpack_from(m, slot_at)
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
        begin_ts = hdr[_BEGIN_TS]
        if begin_ts <= 0:
            time_diff = 0
        else:
            # Floor vs Java's truncating division only differs below zero, which is clamped.
            time_diff = min(max((store_timestamp - begin_ts) // 1000, 0), _INT_MAX)
        # Entry, then slot, then header: a concurrent reader that sees the new slot value
        # finds a complete entry behind it.
        INDEX_ENTRY.pack_into(m, entry_at, key_hash, commit_log_offset, time_diff, slot_value)
        INDEX_SLOT.pack_into(m, slot_at, count)
        if count <= 1:
            # After timeDiff was computed: a new file's first entry is timed against the
            # previous file's end, then begin moves to this message (RocketMQ quirk).
            hdr[_BEGIN_OFFSET] = commit_log_offset
            hdr[_BEGIN_TS] = store_timestamp
        if slot_value == 0:
            hdr[_SLOT_COUNT] += 1
        hdr[_INDEX_COUNT] = count + 1
        hdr[_END_OFFSET] = commit_log_offset
        hdr[_END_TS] = store_timestamp
        INDEX_HEADER.pack_into(m, 0, *hdr)
        return True

    def put_keys(self, key_hashes: np.ndarray, commit_log_offsets: np.ndarray, store_timestamps: np.ndarray) -> int:
        """``put_key`` for many entries in order (int64 arrays; hashes as ``index_key_hash`` gives them).

        Returns how many fit (fewer than given when the file fills). Writes the same bytes
        as ``put_key`` one entry at a time: each entry links to the newest earlier entry of
        its bucket, in this batch or in the file. Entries, then slots, then the header, so a
        concurrent reader never follows a slot to a missing entry. Cost: a few numpy passes,
        about 0.1 us an entry against 2-3 us for ``put_key`` (measured, bench/bench_producer.py).
        """
        m = self._require_map()
        if self.read_only:
            raise IllegalStateError(f"index file {self.path} is open read-only")
        hdr = self._hdr
        total = len(key_hashes)
        done = 0
        # A file's first entry moves begin_* after its own timeDiff (put_key's rule): alone.
        while done < total and hdr[_INDEX_COUNT] <= 1:
            if not self.put_key("", int(commit_log_offsets[done]), int(store_timestamps[done]), int(key_hashes[done])):
                return done
            done += 1
        count = hdr[_INDEX_COUNT]
        n = min(total - done, self.index_num - count)
        if n <= 0:
            return done
        end = self._entries_at + (count + n) * INDEX_ENTRY.size
        if end > self._reserved:
            self._reserve(end)  # DiskFullError before this batch writes anything
        hashes = key_hashes[done : done + n]
        offsets = commit_log_offsets[done : done + n]
        stamps = store_timestamps[done : done + n]
        numbers = np.arange(count, count + n, dtype=np.int64)
        buckets = hashes % self.hash_slot_num
        order = np.argsort(buckets, kind="stable")  # a bucket's entries together, in log order
        sorted_buckets = buckets[order]
        same = sorted_buckets[1:] == sorted_buckets[:-1]
        last = np.ones(n, dtype=bool)
        last[:-1] = ~same
        slots = np.frombuffer(m, dtype=_SLOT_DTYPE, count=self.hash_slot_num, offset=INDEX_HEADER.size)
        try:
            prev = slots[buckets].astype(np.int64)
            prev[(prev <= 0) | (prev > numbers)] = 0  # put_key's check on the slot it read
            prev[order[1:][same]] = numbers[order[:-1][same]]  # an earlier entry of this batch
            begin_ts = hdr[_BEGIN_TS]
            if begin_ts <= 0:
                diffs = np.zeros(n, dtype=np.int64)
            else:
                diffs = np.clip((stamps - begin_ts) // 1000, 0, _INT_MAX)
            entries = np.empty(n, dtype=_ENTRY_DTYPE)
            entries["key_hash"] = hashes
            entries["commit_log_offset"] = offsets
            entries["time_diff"] = diffs
            entries["prev_index"] = prev
            at = self._entries_at + count * INDEX_ENTRY.size
            m[at : at + n * INDEX_ENTRY.size] = entries.tobytes()
            slots[sorted_buckets[last]] = numbers[order[last]]  # each bucket's newest entry
        finally:
            del slots  # the map cannot close while a view of it lives
        hdr[_SLOT_COUNT] += int(np.count_nonzero(prev == 0))
        hdr[_INDEX_COUNT] = count + n
        hdr[_END_OFFSET] = int(offsets[-1])
        hdr[_END_TS] = int(stamps[-1])
        INDEX_HEADER.pack_into(m, 0, *hdr)
        return done + n

    def is_time_matched(self, begin: int, end: int) -> bool:
        """True when ``[begin, end]`` (ms) overlaps this file's time range (RocketMQ's test)."""
        hdr = self._header()
        lo, hi = hdr[_BEGIN_TS], hdr[_END_TS]
        return (begin < lo and end > hi) or (lo <= begin <= hi) or (lo <= end <= hi)

    def select_commit_log_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of entries whose hash equals *key*'s, stored in ``[begin, end]``.

        Newest first, at most *max_num*. Only hashes are compared, so other keys can appear.
        Walks the bucket's chain from the slot and stops at an invalid link, a self link, a
        negative timeDiff, or an entry older than *begin* (RocketMQ ``selectPhyOffset``).
        Cost: O(chain length), capped at ``index_count`` steps.
        """
        m = self._require_map()
        hdr = self._header()
        begin_ts, count = hdr[_BEGIN_TS], hdr[_INDEX_COUNT]
        result: list[int] = []
        if count <= 1 or max_num <= 0:
            return result
        key_hash = index_key_hash(key)
        slot_at = INDEX_HEADER.size + (key_hash % self.hash_slot_num) * INDEX_SLOT.size
        (entry_no,) = INDEX_SLOT.unpack_from(m, slot_at)
        # RocketMQ accepts links up to indexCount (a reader may see the new slot before the
        # new count); entries must also lie inside the file, which garbage may not respect.
        last = min(count, self.index_num - 1)
        entries_at, entry_size = self._entries_at, INDEX_ENTRY.size
        for _ in range(last):  # a chain of distinct entries is at most this long
            if entry_no <= 0 or entry_no > last:
                break
            key_hash_read, commit_log_offset, time_diff, prev = INDEX_ENTRY.unpack_from(
                m, entries_at + entry_no * entry_size
            )
            if time_diff < 0:
                break
            time_read = begin_ts + time_diff * 1000
            if key_hash_read == key_hash and begin <= time_read <= end:
                result.append(commit_log_offset)
                if len(result) >= max_num:
                    break
            if prev == entry_no or time_read < begin:
                break
            entry_no = prev
        return result

    # -- checks and lifecycle ------------------------------------------------------------

    def _header_problems(self, strict: bool = False) -> list[str]:
        """Header values no writer can produce; cheap. The loose form (used to skip garbage
        in read-only mode) also accepts torn reads of a live header and files written by
        RocketMQ 4.x, which counted every put in hashSlotCount."""
        hdr, problems = self._header(), []
        count = hdr[_INDEX_COUNT]
        if not 0 <= self._raw_index_count <= self.index_num:
            problems.append(f"indexCount {self._raw_index_count} is outside [0, {self.index_num}]")
        top = count - 1 if strict else self.index_num
        if not 0 <= hdr[_SLOT_COUNT] <= top:
            problems.append(f"hashSlotCount {hdr[_SLOT_COUNT]} is outside [0, {top}]")
        names = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset")
        for name, value in zip(names, hdr[:4], strict=True):
            if value < 0:
                problems.append(f"{name} {value} is negative")
        return problems

    def verify(self) -> list[str]:
        """Human-readable problems in this file; ``[]`` when it is consistent. Never raises
        on garbage (raises ``IllegalStateError`` only when closed).

        Checks the header, that every slot points at the newest entry of its bucket, that
        every ``prevIndex`` is below its own entry number (so chains end, no loops) and links
        the previous entry of the same bucket, that timeDiff and keyHash are not negative,
        and that begin/end offsets match the first/last entry. Cost: O(hash_slot_num +
        index_count) in numpy, about 40 bytes of memory per entry (800 MB for a full
        default-sized file). Run it on a quiescent
        file: a concurrent writer makes it report transient problems.
        """
        problems = self._header_problems(strict=True)
        count = min(self._header()[_INDEX_COUNT], self.index_num)
        slots, key_hash, time_diff, prev, ends = self._read_arrays(count)
        if count > 1:
            problems += self._check_ends(ends)
        problems += _check_chains(slots, key_hash, time_diff, prev, self._hdr[_SLOT_COUNT])
        return problems

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the ``keyHash`` and ``phyOffset`` of entries ``1 .. indexCount-1`` (int64), in write
        order: for checking them against the commit log (`verify`). Cost: O(index_count) in numpy."""
        count = min(self._header()[_INDEX_COUNT], self.index_num)
        if count <= 1:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        entries = np.frombuffer(self._require_map(), _ENTRY_DTYPE, count - 1, self._entries_at + INDEX_ENTRY.size)
        return entries["key_hash"].astype(np.int64), entries["commit_log_offset"].astype(np.int64)

    def _read_arrays(
        self, count: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
        """Native-int copies of the slots and of entries ``0 .. count-1``, plus the offsets
        of entries 1 and count-1. The numpy views that pin the map die with this frame."""
        m = self._require_map()
        slots = np.frombuffer(m, _SLOT_DTYPE, self.hash_slot_num, INDEX_HEADER.size)
        entries = np.frombuffer(m, _ENTRY_DTYPE, count, self._entries_at)
        offsets = entries["commit_log_offset"]
        ends = (int(offsets[1]), int(offsets[-1])) if count > 1 else (0, 0)
        return (
            slots.astype(np.int32),
            entries["key_hash"].astype(np.int32),
            entries["time_diff"].astype(np.int32),
            entries["prev_index"].astype(np.int32),
            ends,
        )

    def _check_ends(self, ends: tuple[int, int]) -> list[str]:
        hdr, problems = self._hdr, []
        if hdr[_BEGIN_OFFSET] != ends[0]:
            problems.append(f"beginPhyOffset {hdr[_BEGIN_OFFSET]} != first entry's offset {ends[0]}")
        if hdr[_END_OFFSET] < ends[1]:  # above it: keyless records after the last entry (`mark_indexed_to`)
            problems.append(f"endPhyOffset {hdr[_END_OFFSET]} < last entry's offset {ends[1]}")
        return problems

    def flush(self) -> None:
        """Write the header and msync the whole map (RocketMQ ``IndexFile.flush``).

        Blocks until dirty pages are on disk. No-op when read-only or closed. May run on a
        different thread than ``put_key`` (the file is full by then).
        """
        with self._map_lock:
            if self._map is None or self.read_only:
                return
            INDEX_HEADER.pack_into(self._map, 0, *self._hdr)
            self._map.flush()

    def close(self) -> None:
        """Flush (writable mode) and unmap. Idempotent."""
        self.flush()
        with self._map_lock:
            if self._map is not None:
                self._map.close()
                self._map = None

    def truncate_from(self, commit_log_offset: int) -> int:
        """Drop the entries of records at or after `commit_log_offset`; returns how many entries remain.

        Entries are written in commit-log order, so the dropped ones are the newest: each
        is undone as ``put_key`` did it, newest first (its bucket's slot goes back to the
        entry's ``prevIndex``; ``hashSlotCount`` drops where the entry had filled an empty
        slot), then zeroed. ``endPhyOffset`` becomes the last kept entry's offset, so
        records appended after a recovery cut the log are indexed again (``build_index``
        skips offsets below it). ``endTimestamp`` stays: a time range that is too wide
        only costs a lookup a file it did not need. Writable mode. Cost: one small read
        and three writes per dropped entry.
        """
        m = self._require_map()
        if self.read_only:
            raise IllegalStateError(f"index file {self.path} is open read-only")
        hdr = self._hdr
        count = min(hdr[_INDEX_COUNT], self.index_num)
        entries_at, entry_size = self._entries_at, INDEX_ENTRY.size
        keep = count
        while keep > 1 and INDEX_ENTRY.unpack_from(m, entries_at + (keep - 1) * entry_size)[1] >= commit_log_offset:
            keep -= 1
        for number in range(count - 1, keep - 1, -1):
            key_hash, _, _, prev = INDEX_ENTRY.unpack_from(m, entries_at + number * entry_size)
            slot_at = INDEX_HEADER.size + (key_hash % self.hash_slot_num) * INDEX_SLOT.size
            INDEX_SLOT.pack_into(m, slot_at, prev if 0 < prev < number else 0)
            if prev == 0:
                hdr[_SLOT_COUNT] = max(0, hdr[_SLOT_COUNT] - 1)
        if keep < count or hdr[_END_OFFSET] > commit_log_offset:  # also an end `mark_indexed_to` moved past the cut
            m[entries_at + keep * entry_size : entries_at + count * entry_size] = bytes((count - keep) * entry_size)
            hdr[_INDEX_COUNT] = keep
            if keep > 1:
                hdr[_END_OFFSET] = INDEX_ENTRY.unpack_from(m, entries_at + (keep - 1) * entry_size)[1]
            INDEX_HEADER.pack_into(m, 0, *hdr)
        return keep - 1

    def mark_indexed_to(self, commit_log_offset: int) -> None:
        """Move ``endPhyOffset`` up to `commit_log_offset`: every record below it is indexed or has no keys.

        RocketMQ's ``endPhyOffset`` is the newest entry's offset and serves to skip records
        below it (``buildIndex``) and to expire the file; moving it past keyless records keeps
        both right and spares the next open's coverage check (`recovery.index_coverage_gap`)
        a walk of those records, however many. An empty file's begin moves with it (it
        inherits, see the class docstring). Writable mode; a header write.
        """
        hdr = self._hdr
        if self.read_only or commit_log_offset <= hdr[_END_OFFSET]:
            return
        if hdr[_INDEX_COUNT] <= 1:
            hdr[_BEGIN_OFFSET] = commit_log_offset
        hdr[_END_OFFSET] = commit_log_offset
        INDEX_HEADER.pack_into(self._require_map(), 0, *hdr)

    def destroy(self) -> None:
        """Close and delete the file. Writable mode only."""
        if self.read_only:
            raise IllegalStateError(f"index file {self.path} is open read-only; cannot delete it")
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __repr__(self) -> str:
        hdr = self._hdr
        return (
            f"IndexFile({self.file_name!r}, entries={hdr[_INDEX_COUNT] - 1}/{self.index_num - 1}, "
            f"commit_log_offsets=[{hdr[_BEGIN_OFFSET]}, {hdr[_END_OFFSET]}], time=[{hdr[_BEGIN_TS]}, {hdr[_END_TS]}])"
        )


def _examples(kind: str, where: np.ndarray, describe: Callable[[int], str]) -> list[str]:
    """Up to ``_MAX_PROBLEMS_PER_KIND`` messages for the positions in *where*, then a count."""
    found = [describe(int(i)) for i in where[:_MAX_PROBLEMS_PER_KIND]]
    if len(where) > _MAX_PROBLEMS_PER_KIND:
        found.append(f"... and {len(where) - _MAX_PROBLEMS_PER_KIND} more {kind}")
    return found


def _check_chains(
    slots: np.ndarray,
    key_hash: np.ndarray,
    time_diff: np.ndarray,
    prev: np.ndarray,
    slot_count: int,
) -> list[str]:
    """Compare the slot table and links with the ones ``put_key`` would have written.

    Entries ``1 .. n-1`` are in use. In bucket ``b``, each entry must link to the previous
    entry of ``b`` (0 for the first) and the slot must hold the newest one.
    """
    n, num_slots = len(key_hash), len(slots)
    problems: list[str] = []
    used = np.arange(1, n)
    problems += _examples("negative key hashes", used[key_hash[1:] < 0],
                          lambda i: f"entry {i}: keyHash {key_hash[i]} is negative")
    problems += _examples("negative time diffs", used[time_diff[1:] < 0],
                          lambda i: f"entry {i}: timeDiff {time_diff[i]} is negative")
    wild = used[(prev[1:] < 0) | (prev[1:] >= used)]
    problems += _examples("links that do not point back", wild,
                          lambda i: f"entry {i}: prevIndex {prev[i]} is not in [0, {i})")
    bad_slot = np.flatnonzero((slots != 0) & ((slots < 1) | (slots >= n)))
    problems += _examples("slots out of range", bad_slot,
                          lambda s: f"slot {s} holds {slots[s]}, outside [1, {n})")
    # What put_key would have built: entries grouped by bucket, in entry order (stable).
    bucket = key_hash % num_slots  # numpy's % is non-negative for a positive divisor
    order = used[np.argsort(bucket[1:], kind="stable")]
    same = bucket[order[1:]] == bucket[order[:-1]]  # order[k+1] follows order[k] in a bucket
    expected_prev = np.zeros(n, dtype=np.int64)
    expected_prev[order[1:][same]] = order[:-1][same]
    newest = order[np.append(~same, True)] if n > 1 else order  # last of each bucket group
    expected_slots = np.zeros(num_slots, dtype=np.int64)
    expected_slots[bucket[newest]] = newest
    ok_link = np.ones(n, dtype=bool)
    ok_link[wild] = False
    broken = used[(prev[1:] != expected_prev[1:]) & ok_link[1:]]
    problems += _examples("broken chain links", broken, lambda i: (
        f"entry {i}: prevIndex {prev[i]}, but the previous entry of slot "
        f"{bucket[i]} is {expected_prev[i]}"))
    in_range = (slots == 0) | ((slots >= 1) & (slots < n))
    stale = np.flatnonzero((slots != expected_slots) & in_range)
    problems += _examples("slots not pointing at their newest entry", stale, lambda s: (
        f"slot {s} holds {slots[s]}, but its newest entry is {expected_slots[s]}"))
    non_empty = int(np.count_nonzero(slots))
    if slot_count < non_empty:
        problems.append(f"hashSlotCount {slot_count} is below the {non_empty} non-empty slots")
    return problems


def _format_name(ms: int) -> str:
    """RocketMQ's ``timeMillisToHumanString``: local time as ``yyyyMMddHHmmssSSS``."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def _parse_name(name: str) -> int | None:
    """Epoch ms of an index file name (local time), or None if it is not one."""
    if len(name) != _NAME_DIGITS or not name.isdigit():
        return None
    try:
        seconds = int(datetime.datetime.strptime(name[:-3], "%Y%m%d%H%M%S").timestamp())
    except (ValueError, OverflowError, OSError):
        return None
    return seconds * 1000 + int(name[-3:])


def index_key_hash_array(keys: Sequence[str]) -> np.ndarray:
    """``index_key_hash`` of each key, as an int64 array (`java_string_hash_array`, then Java's abs).

    >>> index_key_hash_array(["TopicTest#KEY1"]).tolist()
    [1656969516]
    """
    return _java_abs(java_string_hash_array(keys))


def index_key_hashes(prefix: str, suffixes: np.ndarray) -> np.ndarray:
    """``index_key_hash(prefix + s)`` for each row `s` of `suffixes` ((n, w) uint8, ASCII), as int64.

    For keys that share a prefix and a width, such as ``topic#`` and 32-character
    ``UNIQ_KEY``s: Java's hash of the prefix is carried through with numpy (no string per
    key; exact, as `java_string_hash_array`). Raises ``ValueError`` on a non-ASCII byte.

    >>> rows = np.frombuffer(b"KEY1KEY2", dtype=np.uint8).reshape(2, 4)
    >>> index_key_hashes("TopicTest#", rows).tolist() == [index_key_hash("TopicTest#KEY1"), index_key_hash("TopicTest#KEY2")]
    True
    """
    count, width = suffixes.shape
    if count and int(suffixes.max()) > 127:
        raise ValueError("index_key_hashes takes ASCII suffixes only")
    if count:
        # Columns every row shares (ids of one millisecond share 28 of 32 characters) join the prefix.
        differs = (suffixes != suffixes[0]).any(axis=0)
        common = int(np.argmax(differs)) if differs.any() else width
        prefix += bytes(suffixes[0, :common]).decode("ascii")
        suffixes = suffixes[:, common:]
        width -= common
    mask = np.uint64(0xFFFFFFFF)
    powers = np.array([pow(31, width - 1 - j, 1 << 32) for j in range(width)], dtype=np.uint64)
    # Each product is below 2**39 and a row of them below 2**45: uint64 holds them before the 32-bit wrap.
    sums = (suffixes.astype(np.uint64) * powers).sum(axis=1, dtype=np.uint64) if width else np.zeros(count, np.uint64)
    head = np.uint64((_java_hash(prefix) & 0xFFFFFFFF) * pow(31, width, 1 << 32) & 0xFFFFFFFF)
    signed = ((sums + head) & mask).astype(np.int64)
    signed[signed >= 1 << 31] -= 1 << 32
    return _java_abs(signed)


def _java_abs(signed: np.ndarray) -> np.ndarray:
    """``index_key_hash``'s ``abs`` over int64 Java hashes: ``Math.abs(MIN_VALUE)`` stays negative, stored as 0."""
    return np.where(signed == _INT_MIN, 0, np.abs(signed))


def index_key_rows(topic: str, heads: Sequence[Mapping[str, str]], head_index: Any,
                   uniq_hashes: Any) -> tuple[np.ndarray, np.ndarray]:
    """(row, hash) of every index key of a batch whose row i has the KEYS of `heads[head_index[i]]`
    (an int64 array) and, unless `uniq_hashes` is None, the UNIQ_KEY hashed as `uniq_hashes[i]`:
    rows ascending, each row's `topic#UNIQ_KEY` first, then each `topic#KEY` (the order of
    `index_key_names`). KEYS are hashed once per head, not per row; numpy passes otherwise.

    >>> rows, hashes = index_key_rows("T", [{"KEYS": "a b"}, {}], np.array([0, 1, 0]), None)
    >>> rows.tolist(), hashes.tolist() == [index_key_hash(k) for k in ["T#a", "T#b", "T#a", "T#b"]]
    ([0, 0, 2, 2], True)
    """
    count = len(head_index)
    names_of = [[f"{topic}#{k}" for k in (h.get(PROPERTY_KEYS) or "").split(" ") if k] for h in heads]
    head_counts = np.array([len(n) for n in names_of], dtype=np.int64)
    uniq = 0 if uniq_hashes is None else 1
    if not head_counts.any():
        if uniq:
            return np.arange(count, dtype=np.int64), uniq_hashes
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    head_hashes = index_key_hash_array([name for names in names_of for name in names])
    head_first = np.zeros(len(heads), dtype=np.int64)
    np.cumsum(head_counts[:-1], out=head_first[1:])
    counts = head_counts[head_index] + uniq
    rows = np.repeat(np.arange(count, dtype=np.int64), counts)
    row_first = np.zeros(count, dtype=np.int64)
    np.cumsum(counts[:-1], out=row_first[1:])
    within = np.arange(len(rows), dtype=np.int64) - row_first[rows]  # a key's place among its row's keys
    hashes = np.empty(len(rows), dtype=np.int64)
    if uniq:
        hashes[row_first] = uniq_hashes
    keyed = within >= uniq
    hashes[keyed] = head_hashes[head_first[head_index[rows[keyed]]] + within[keyed] - uniq]
    return rows, hashes


def index_key_names(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """A record's index keys (RocketMQ ``buildIndex``): ``topic#UNIQ_KEY``, then ``topic#k`` for each
    non-empty space-separated ``k`` of KEYS."""
    names = [f"{topic}#{uniq_key}"] if uniq_key is not None else []
    if keys:
        names += [f"{topic}#{k}" for k in keys.split(" ") if k]
    return names


class IndexService:
    """The index files of a store, oldest first (RocketMQ ``IndexService``).

    The reput thread calls ``build_index``; any thread may call ``query_offsets``. One lock
    serialises them; ``on_file_full`` (which lets the store record the last full file's end
    time in the checkpoint) runs after that lock is released, on the ``build_index`` caller.

    Read-only mode never creates, deletes or writes a file; files of the wrong size or with
    an impossible header are skipped with a warning, so a reader can follow a live writer in
    another process (``load()`` sees the files present at that moment).
    """

    def __init__(
        self,
        index_dir: str,
        hash_slot_num: int,
        index_num: int,
        *,
        max_msgs_num_batch: int = 64,
        read_only: bool = False,
        on_file_full: Callable[[int], None] | None = None,
        name_clock: Callable[[], int] | None = None,
    ) -> None:
        """Remember the settings; touches no file until ``load()`` or ``build_index()``."""
        _check_shape(hash_slot_num, index_num)
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.max_msgs_num_batch = max_msgs_num_batch
        self.read_only = read_only
        self._on_file_full = on_file_full
        self._name_clock = name_clock or (lambda: int(time.time() * 1000))
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._closed = False
        self._skipped: set[str] = set()  # read-only: damaged files ``map_new`` warned about once
        #: After ``load()``: the commit-log offset from which the index must be rebuilt
        #: (the files were missing or damaged), or None when it is whole.
        self.rebuild_from: int | None = None
        #: Whether the index shape is known to be the files' own (mqlite recorded it). When not
        #: (a RocketMQ broker's store), files that all have another size mean other settings,
        #: and ``load()`` refuses them instead of taking them for damage.
        self.shape_known = True

    @property
    def files(self) -> list[IndexFile]:
        """A snapshot of the open index files, oldest first."""
        with self._lock:
            return list(self._files)

    def _check_open(self, writing: bool = False) -> None:
        if self._closed:
            raise IllegalStateError(f"index service for {self.index_dir} is closed")
        if writing and self.read_only:
            raise IllegalStateError(f"index service for {self.index_dir} is read-only")

    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> None:
        """Open the files in name order. After an abnormal exit (writable mode), destroy the
        files whose ``end_timestamp > index_msg_timestamp``: recovery re-dispatches them.

        Names that are not 17 digits are ignored. In writable mode a missing index (no
        index file at all) or a damaged file (wrong size, impossible header) sets
        ``rebuild_from``: a damaged file and every newer one are deleted (the index is
        derived data) and the store rebuilds the rest from the commit log. Read-only mode
        skips a damaged file with a warning. Cost: one open and map per file.
        """
        with self._lock:
            self._check_open()
            if self._files:
                raise IllegalStateError(f"index service for {self.index_dir} is already loaded")
            try:
                names = sorted(os.listdir(self.index_dir))
            except (FileNotFoundError, NotADirectoryError):
                names = []
            paths = [os.path.join(self.index_dir, name) for name in names]
            for path in paths:
                if _parse_name(os.path.basename(path)) is None or not os.path.isfile(path):
                    _log.warning("ignoring %s: not an index file name", path)
            paths = [p for p in paths if _parse_name(os.path.basename(p)) is not None and os.path.isfile(p)]
            if not paths and not self.read_only:
                self.rebuild_from = 0
            if paths and not (self.read_only or self.shape_known):
                expected = index_file_size(self.hash_slot_num, self.index_num)
                if all(os.path.getsize(p) not in (0, expected) for p in paths):
                    # Every file has another shape: other settings, not damage. Raises
                    # StoreCorruptedError with the sizes and the fix.
                    IndexFile(paths[0], self.hash_slot_num, self.index_num).close()
            try:
                for i, path in enumerate(paths):
                    f = self._open_existing(path)
                    if f is None:
                        if self.read_only:
                            self._skipped.add(os.path.basename(path))
                            continue
                        self._drop_damaged(paths[i:])
                        break
                    dirty = not (last_exit_ok or self.read_only)
                    # An empty file (crash right after creating it) would read as "nothing
                    # indexed yet" and make recovery index everything again into it.
                    if dirty and (f.end_timestamp > index_msg_timestamp or f.index_count <= 1):
                        _log.info("abnormal exit: dropping %s, newer than the checkpoint", path)
                        f.destroy()
                        continue
                    self._files.append(f)
                if paths and not self._files and not self.read_only and self.rebuild_from is None:
                    # Every file went (damaged, or newer than the checkpoint after a crash): recovery
                    # re-dispatches only from its checkpoint's segment, and the records before it
                    # would have no entries. The whole index is rebuilt, as when none was there.
                    _log.warning("no index file of %s is left to use; the index is rebuilt from the commit log",
                                 self.index_dir)
                    self.rebuild_from = 0
            except BaseException:
                for f in self._files:
                    f.close()
                self._files.clear()
                raise

    def drop_from(self, position: int, why: str) -> None:
        """Delete the loaded files from `position` on and ask for a rebuild from the end of the one
        before (``rebuild_from``): the store found records they should cover missing (`why`). Writable mode."""
        with self._lock:
            self._check_open(writing=True)
            doomed = self._files[position:]
            del self._files[position:]
            _log.warning("index of %s: %s; deleting %d file(s) from there, the index is rebuilt from the "
                         "commit log", self.index_dir, why, len(doomed))
            for f in doomed:
                f.destroy()
            self.rebuild_from = self._files[-1].end_commit_log_offset if self._files else 0

    def _drop_damaged(self, paths: list[str]) -> None:
        """Delete a damaged index file (``paths[0]``) and the newer ones; the index is rebuilt
        from the end of the last good file. Called by ``load`` with the lock held."""
        _log.warning("index file %s is damaged; deleting it and %d newer file(s), the index is rebuilt "
                     "from the commit log", paths[0], len(paths) - 1)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.rebuild_from = self._files[-1].end_commit_log_offset if self._files else 0

    def _open_existing(self, path: str) -> IndexFile | None:
        """The file at `path`, or None when it is damaged (wrong size, impossible header)."""
        try:
            f = IndexFile(path, self.hash_slot_num, self.index_num, read_only=self.read_only)
        except (StoreCorruptedError, ValueError, OSError) as e:
            if isinstance(e, OSError) and not self.read_only:
                raise  # an I/O fault, not damage: deleting the file would not help
            _log.warning("%s index file %s: %s", _UNUSABLE[self.read_only], path, e)
            return None
        problems = f._header_problems()
        if problems:
            _log.warning("%s index file %s: %s", _UNUSABLE[self.read_only], path, "; ".join(problems))
            f.close()
            return None
        return f

    def truncate_dirty(self, commit_log_offset: int) -> None:
        """Drop entries of records at or after `commit_log_offset` (recovery cut the log there).

        Files whose entries all lie past the cut are deleted; the newest file that keeps
        one is truncated (``IndexFile.truncate_from``). Without this, a file's
        ``endPhyOffset`` past the cut would make ``build_index`` skip the records appended
        after the cut until the log grew past it again. Writable mode; before the reput
        thread starts. Cost: proportional to the entries dropped.
        """
        with self._lock:
            self._check_open(writing=True)
            while self._files:
                f = self._files[-1]
                begin, end = f.begin_commit_log_offset, f.end_commit_log_offset
                if end < commit_log_offset or (f.index_count <= 1 and end == commit_log_offset):
                    return  # nothing past the cut (an empty file may say "indexed up to" the cut itself)
                if f.index_count > 1 and begin < commit_log_offset and f.truncate_from(commit_log_offset) > 0:
                    return
                _log.info("recovery cut the log at %d: dropping index file %s", commit_log_offset, f.path)
                f.destroy()
                self._files.pop()

    def mark_indexed_to(self, commit_log_offset: int, timestamp: int) -> None:
        """Record `commit_log_offset` as indexed up to: in the newest file (`IndexFile.mark_indexed_to`),
        or, without index files, in a new empty one.

        RocketMQ's own rule (a new file inherits the previous file's end): records below a
        file's ``endPhyOffset`` count as indexed. The store calls this once records below
        `commit_log_offset` were indexed (or had no keys), so that an empty ``index/`` directory
        afterwards means the index was lost, and the next open's coverage check starts at
        `commit_log_offset` rather than walking the keyless records after the last entry. Writable mode.
        """
        with self._lock:
            self._check_open(writing=True)
            if self._files:
                self._files[-1].mark_indexed_to(commit_log_offset)
                return
            os.makedirs(self.index_dir, exist_ok=True)
            self._files.append(IndexFile(self._new_file_path(), self.hash_slot_num, self.index_num,
                                         end_commit_log_offset=commit_log_offset, end_timestamp=timestamp))

    def build_index(
        self,
        topic: str,
        commit_log_offset: int,
        store_timestamp: int,
        uniq_key: str | None,
        keys: str | None,
        is_rollback: bool = False,
    ) -> None:
        """Index one dispatched record under ``topic#uniq_key`` and ``topic#k`` for each
        non-empty space-separated ``k`` in *keys* (RocketMQ ``buildIndex``).

        Skips records below the newest file's ``end_commit_log_offset`` (already indexed) and
        rollback records. Rolls to a new file when one fills: the full file is flushed
        (msync) and ``on_file_full(end_timestamp)`` called, both after the lock is released.
        Writable mode; call from one thread (the reput service).
        """
        if is_rollback:
            return
        names = index_key_names(topic, uniq_key, keys)
        self.build_index_keys(names, [commit_log_offset] * len(names), [store_timestamp] * len(names))

    def build_index_keys(self, names: Sequence[str], offsets: Sequence[int], stamps: Sequence[int]) -> None:
        """Index `names[i]` (a full key, ``topic#key``) at commit-log offset `offsets[i]` stored at
        `stamps[i]`, in log order; what `build_index` does once keys are split (the reput
        thread builds these columns directly). The names are hashed together
        (`index_key_hash_array`), then as `build_index_hashes`. Writable mode; one thread.
        """
        if not names:
            return
        self.build_index_hashes(index_key_hash_array(names), np.asarray(offsets, dtype=np.int64),
                                np.asarray(stamps, dtype=np.int64))

    def build_index_hashes(self, key_hashes: np.ndarray, offsets: np.ndarray, stamps: np.ndarray) -> None:
        """Index entries whose keys are hashed already (``index_key_hash``; int64 arrays, log order).

        Entries below the newest file's ``end_commit_log_offset`` are skipped (indexed before).
        Small inputs go entry by entry, large ones through `IndexFile.put_keys`; a full file
        is flushed and reported as in `build_index`. Writable mode; one thread (the reput
        service). Cost: about 0.1 us an entry (numpy), no Python work per entry.
        """
        if not len(key_hashes):
            return
        full: list[IndexFile] = []
        try:
            with self._lock:
                self._check_open(writing=True)
                self._put_hashes(key_hashes, offsets, stamps, full)
        finally:
            # RocketMQ flushes a full file on a separate thread so lookups do not wait for msync.
            for prev in full:
                prev.flush()
                if self._on_file_full is not None and prev.end_timestamp > 0:
                    self._on_file_full(prev.end_timestamp)

    def _put_hashes(self, key_hashes: np.ndarray, offsets: np.ndarray, stamps: np.ndarray,
                    full: list[IndexFile]) -> None:
        """`build_index_hashes` under the lock; files that filled go to `full`.

        A full disk raises `DiskFullError` from the file being written (nothing of the
        entry or batch it refused is written) or from a new file; the entries before it
        stay, and giving the same input again later indexes the rest (see the rule below).
        """
        f = self._writable_file(full)
        # RocketMQ's rule: only offsets below the end are known to be indexed. A record
        # at exactly the end may have had some of its keys cut off by a crash at a file
        # boundary, so it is indexed again; query_offsets removes the duplicates.
        skip_below = f.end_commit_log_offset
        if len(key_hashes) < _VECTOR_MIN:
            for key_hash, offset, timestamp in zip(key_hashes.tolist(), offsets.tolist(), stamps.tolist()):
                if offset < skip_below:
                    continue
                while not f.put_key("", offset, timestamp, key_hash):
                    f = self._writable_file(full)
        else:
            if skip_below > 0 and offsets[0] < skip_below:
                keep = offsets >= skip_below
                key_hashes, offsets, stamps = key_hashes[keep], offsets[keep], stamps[keep]
            done = 0
            while done < len(offsets):
                done += f.put_keys(key_hashes[done:], offsets[done:], stamps[done:])
                if done < len(offsets):
                    f = self._writable_file(full)

    def _writable_file(self, full: list[IndexFile]) -> IndexFile:
        """The newest file if it has room, else a new one (the old one is added to *full*).

        A new file inherits the previous file's end offset and time as its begin and end.
        """
        last = self._files[-1] if self._files else None
        if last is not None and not last.is_write_full():
            return last
        os.makedirs(self.index_dir, exist_ok=True)
        f = IndexFile(
            self._new_file_path(),
            self.hash_slot_num,
            self.index_num,
            end_commit_log_offset=last.end_commit_log_offset if last else 0,
            end_timestamp=last.end_timestamp if last else 0,
        )
        self._files.append(f)
        if last is not None:
            full.append(last)
        return f

    def _new_file_path(self) -> str:
        """A free name from ``name_clock``, bumped by 1 ms while taken.

        Names must also sort after the newest file (files load in name order), so a clock
        that stepped back starts from the newest name plus 1 ms.
        """
        ms = self._name_clock()
        newest = self._files[-1].file_name if self._files else ""
        newest_ms = _parse_name(newest)
        if newest_ms is not None:
            ms = max(ms, newest_ms + 1)
        while True:
            name = _format_name(ms)
            path = os.path.join(self.index_dir, name)
            if name > newest and not os.path.exists(path):
                return path
            ms += 1

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets indexed under ``topic#key`` with store time in ``[begin, end]``.

        Newest first, at most ``min(max_num, max_msgs_num_batch)``. Hash matches only: the
        caller must check each message's keys. Scans files newest to oldest, only those whose
        time range overlaps, and stops after a file that begins before *begin*
        (RocketMQ ``queryOffset``). Cost: one chain walk per matched file; takes the lock.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        result: list[int] = []
        full_key = f"{topic}#{key}"
        with self._lock:
            self._check_open()
            for f in reversed(self._files):
                if f.is_time_matched(begin, end):
                    result += f.select_commit_log_offsets(full_key, max_num - len(result), begin, end)
                if f.begin_timestamp < begin or len(result) >= max_num:
                    break
        # A record re-indexed after a crash can appear twice; keep the first (newest) hit.
        return list(dict.fromkeys(result))

    def delete_expired(self, min_commit_log_offset: int) -> int:
        """Delete the oldest files whose ``end_commit_log_offset < min_commit_log_offset``, stopping
        at the first that is not; never the newest file. Returns how many were deleted.

        Writable mode. Cost: one unmap and unlink per file, under the lock.
        """
        with self._lock:
            self._check_open(writing=True)
            return self._drop_oldest(self._files[:-1], lambda f: f.end_commit_log_offset < min_commit_log_offset,
                                     IndexFile.destroy)

    def forget_deleted(self) -> int:
        """Read-only: close the oldest files the writer's retention deleted (``delete_expired``), so their
        disk space goes back; returns how many. Queries take the lock too, so none is reading them.

        Cost: one ``stat`` while the oldest file is still there.
        """
        with self._lock:
            self._check_open()
            # Index file names are times and never reused: a name gone is a file deleted.
            return self._drop_oldest(self._files, lambda f: not os.path.exists(f.path), IndexFile.close)

    def map_new(self) -> int:
        """Read-only: map the files the writer created since the last look; returns how many.

        A writer starts a file only when its newest is full or when it has none (``_writable_file``,
        ``mark_indexed_to``), or when a restarted writer's recovery dropped its newest ones. So the
        directory is listed only when this view's newest file is full, gone, or there is none; files
        gone from the listing are closed, new ones mapped in name order. A file not yet sized (the
        writer is creating it) is left for the next look; a damaged one is skipped once, with a warning.
        Cost: one ``stat`` of the newest file while it has room.
        """
        with self._lock:
            self._check_open()
            last = self._files[-1] if self._files else None
            if last is not None and not last.is_write_full() and os.path.exists(last.path):
                return 0
            names = set(self._file_names())
            kept = [f for f in self._files if f.file_name in names]
            for f in self._files:
                if f.file_name not in names:
                    f.close()
            known = {f.file_name for f in kept} | self._skipped
            fresh = []
            for name in sorted(names - known):
                path = os.path.join(self.index_dir, name)
                with contextlib.suppress(OSError):
                    if os.path.getsize(path) == 0:
                        continue  # being created: its size and header come next
                opened = self._open_existing(path)
                if opened is None:
                    self._skipped.add(name)
                else:
                    fresh.append(opened)
            self._files = sorted(kept + fresh, key=lambda f: f.file_name)
            return len(fresh)

    def _file_names(self) -> list[str]:
        """The names in the directory that are index file names, sorted (none when there is no directory)."""
        try:
            names = os.listdir(self.index_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if _parse_name(n) is not None)

    def _drop_oldest(self, files: list[IndexFile], doomed: Callable[[IndexFile], bool],
                     drop: Callable[[IndexFile], None]) -> int:
        """Under the lock: `drop` the oldest of `files` while `doomed` holds, and forget them."""
        count = sum(1 for _ in itertools.takewhile(doomed, files))
        for f in self._files[:count]:
            drop(f)
        del self._files[:count]
        return count

    def verify(self) -> list[str]:
        """Problems of every file (prefixed with its name) and of their order; ``[]`` = OK.

        Cost: ``IndexFile.verify`` per file, under the lock.
        """
        with self._lock:
            self._check_open()
            problems: list[str] = []
            for i, f in enumerate(self._files):
                problems += [f"{f.file_name}: {p}" for p in f.verify()]
                # Records are indexed in commit-log order, so files must not overlap.
                prev_end = self._files[i - 1].end_commit_log_offset if i else 0
                if f.index_count > 1 and f.begin_commit_log_offset < prev_end:
                    problems.append(
                        f"{f.file_name}: beginPhyOffset {f.begin_commit_log_offset} is below the "
                        f"previous file's endPhyOffset {prev_end}"
                    )
            return problems

    def flush(self) -> None:
        """msync every file (no-op when read-only or closed). Blocks for the disk writes."""
        with self._lock:
            for f in self._files:
                f.flush()

    def close(self) -> None:
        """Flush (writable) and unmap every file. Idempotent."""
        with self._lock:
            for f in self._files:
                f.close()
            self._files.clear()
            self._closed = True

    def destroy(self) -> None:
        """Close and delete every index file. Writable mode only."""
        with self._lock:
            self._check_open(writing=True)
            for f in self._files:
                f.destroy()
            self._files.clear()
            self._closed = True
