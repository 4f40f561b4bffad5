"""The store checkpoint: five timestamps and offsets that recovery starts from.

Byte layout of ``<root>/checkpoint`` (RocketMQ ``StoreCheckpoint``), big-endian::

    +--------+------+-----------------------+------------------------------------------+
    | offset | size | field                 | meaning                                  |
    +========+======+=======================+==========================================+
    |      0 |    8 | physicMsgTimestamp    | store time of the last flushed commit-log |
    |        |      |                       | record (epoch ms)                        |
    |      8 |    8 | logicsMsgTimestamp    | store time of the last consume-queue     |
    |        |      |                       | append (epoch ms)                        |
    |     16 |    8 | indexMsgTimestamp     | end time of the last full index file     |
    |        |      |                       | (epoch ms)                               |
    |     24 |    8 | masterFlushedOffset   | commit-log bytes the master has flushed  |
    |     32 |    8 | confirmPhyOffset      | confirmed commit-log offset (bytes)      |
    |     40 | 4056 | (unused)              | zero                                     |
    +--------+------+-----------------------+------------------------------------------+

The file is exactly one OS page (``CHECKPOINT_FILE_SIZE``) because RocketMQ maps it with
that length. ``CHECKPOINT`` is the only source of field sizes and offsets.

Example:

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "checkpoint")
>>> cp = StoreCheckpoint(path)
>>> cp.physic_msg_timestamp = 10_000
>>> cp.logics_msg_timestamp = 12_000
>>> cp.min_timestamp()
7000
>>> cp.close()
>>> StoreCheckpoint(path, read_only=True).physic_msg_timestamp
10000
"""

from __future__ import annotations

import mmap
import os
import struct

from .errors import StoreCorruptedError
from .mappedfile import reserve_space

__all__ = ["CHECKPOINT", "CHECKPOINT_FILE_SIZE", "StoreCheckpoint"]

#: physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset,
#: confirmPhyOffset: five big-endian signed longs at the start of the file.
CHECKPOINT = struct.Struct(">qqqqq")

#: RocketMQ maps the checkpoint with OS_PAGE_SIZE, so that is the file's size.
CHECKPOINT_FILE_SIZE = 4096

# RocketMQ subtracts this margin (ms) from the flushed timestamps before trusting them,
# because the commit log and consume queues are flushed by different threads.
_MIN_TIMESTAMP_MARGIN_MS = 3000


class StoreCheckpoint:
    """The ``checkpoint`` file of a store, mapped into memory.

    Writable mode creates the file (zero-filled, ``CHECKPOINT_FILE_SIZE`` bytes) if it is
    missing and maps it read-write; assignments to the five attributes are kept in memory
    until ``flush()`` packs them into the map and msyncs it (one ``pack_into`` plus one
    msync of a page). Read-only mode opens nothing for writing: it reads the first
    ``CHECKPOINT.size`` bytes once; a missing or short file reads as zeros (a short file is
    padded), and any content decodes, so garbage never raises.

    Not thread-safe: the store's flush thread owns it.
    """

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_commit_log_offset: int

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        """Open (and in writable mode create) the checkpoint at *path*. Cost: one small read.

        Writable mode checks the file first (`damage`); a damaged one is rewritten as a
        zero page, so nothing in it is trusted. A directory in its place raises
        `StoreCorruptedError`.
        """
        self.path = path
        self.read_only = read_only
        self._map: mmap.mmap | None = None
        #: Why the file on disk could not be trusted at open (writable mode), or None.
        self.damage: str | None = None
        if read_only:
            self._set_fields(_read_prefix(path))
        else:
            self.damage = _damage(path)
            self._map = _map_writable(path)
            if self.damage is not None:
                self._map[:] = bytes(CHECKPOINT_FILE_SIZE)
                self._map.flush()
            self._set_fields(self._map[: CHECKPOINT.size])

    def _set_fields(self, raw: bytes) -> None:
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_commit_log_offset,
        ) = CHECKPOINT.unpack(raw)

    def reload(self) -> None:
        """Re-read the five fields from disk, dropping unflushed assignments.

        Meant for read-only readers that follow a live writer. Cost: one small read.
        """
        if self._map is not None:
            self._set_fields(self._map[: CHECKPOINT.size])
        elif self.read_only:
            self._set_fields(_read_prefix(self.path))

    def flush(self) -> None:
        """Write all five fields into the map and msync the page; no-op read-only or closed.

        Blocks for one msync (a single page). Call from the thread that owns the store.
        """
        if self._map is None:
            return
        CHECKPOINT.pack_into(
            self._map,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_commit_log_offset,
        )
        self._map.flush()

    def min_timestamp(self) -> int:
        """Store time (ms) up to which both commit log and consume queues are surely flushed.

        ``max(0, min(physic, logics) - 3000)``, as RocketMQ's ``getMinTimestamp``.
        """
        low = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, low - _MIN_TIMESTAMP_MARGIN_MS)

    def min_timestamp_index(self) -> int:
        """``min(min_timestamp(), index_msg_timestamp)``, as RocketMQ's ``getMinTimestampIndex``."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def close(self) -> None:
        """Flush (writable mode) and unmap. Idempotent."""
        if self._map is None:
            return
        self.flush()
        self._map.close()
        self._map = None

    def __enter__(self) -> StoreCheckpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"StoreCheckpoint({self.path!r}, physic={self.physic_msg_timestamp}, "
            f"logics={self.logics_msg_timestamp}, index={self.index_msg_timestamp}, "
            f"master_flushed={self.master_flushed_offset}, confirm={self.confirm_commit_log_offset})"
        )


def _read_prefix(path: str) -> bytes:
    """The first ``CHECKPOINT.size`` bytes of *path*, zero-padded; zeros if it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(CHECKPOINT.size)
    except OSError:  # missing, a directory in its place, unreadable: nothing to trust
        raw = b""
    return raw.ljust(CHECKPOINT.size, b"\0")


def _damage(path: str) -> str | None:
    """Why the checkpoint at *path* cannot be trusted, or None (a missing file is "missing").

    Only mqlite or RocketMQ wrote it if it is one page of five non-negative longs followed
    by zeros. Raises `StoreCorruptedError` for a directory in its place.
    """
    if os.path.isdir(path):
        raise StoreCorruptedError(
            f"{path} is a directory where the store's checkpoint file belongs; remove it "
            "(the checkpoint is rebuilt by a full recovery of the commit log)")
    try:
        with open(path, "rb") as f:
            raw = f.read(CHECKPOINT_FILE_SIZE + 1)
    except FileNotFoundError:
        return "missing"
    if len(raw) != CHECKPOINT_FILE_SIZE:
        return f"{len(raw)} bytes long, not {CHECKPOINT_FILE_SIZE}" if len(raw) <= CHECKPOINT_FILE_SIZE \
            else f"longer than {CHECKPOINT_FILE_SIZE} bytes"
    if any(value < 0 for value in CHECKPOINT.unpack_from(raw)):
        return "a field is negative"
    if any(raw[CHECKPOINT.size :]):
        return "bytes after its five fields are not zero"
    return None


def _map_writable(path: str) -> mmap.mmap:
    """Create *path* if needed, make it exactly a page and map that page read-write."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # A crash between create and truncate leaves a short file; growing it with zeros is
        # what RocketMQ's read-write mapping does too, and zeros mean "nothing recorded yet".
        if os.fstat(fd).st_size != CHECKPOINT_FILE_SIZE:
            os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
        # The page gets its disk block before the map writes it: on a full disk a store
        # into a hole kills the process (SIGBUS); this raises DiskFullError instead.
        reserve_space(fd, 0, CHECKPOINT_FILE_SIZE, path)
        return mmap.mmap(fd, CHECKPOINT_FILE_SIZE, access=mmap.ACCESS_WRITE)
    finally:
        # The map holds its own duplicate of the descriptor.
        os.close(fd)
