"""Segmented, memory-mapped files: RocketMQ's `MappedFile` and `MappedFileQueue`.

A queue of files in one directory, each named by its 20-digit starting offset
(`00000000000000000000`, `00000000001073741824`, ...), all of one size, created
sparse at that size and mapped whole. The commit log, every consume queue and
(through its own class) the index use this layout.

Writers append through the map; `flush()` makes the written range durable with
`fdatasync` on the file (on Linux it writes back pages dirtied through a shared
map, and unlike `mmap.flush` it releases the GIL while it waits for the disk).
Readers in other processes map files read-only and never write.

Space is reserved before it is written (RocketMQ warms its files for the same
reason): a store into a mapped page the file system has no block for kills the
process with SIGBUS when the disk is full. `MappedFile.reserve` allocates blocks
(`posix_fallocate`) in chunks ahead of the write position, and raises
`DiskFullError` instead; nothing may be written through a map beyond
`MappedFile.reserved`. Chunks keep the footprint near the data: a 1 GiB segment
costs what is written plus at most one chunk (`RESERVE_CHUNK`).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable

from .errors import DiskFullError, StoreCorruptedError, disk_full_error

__all__ = ["MappedFile", "MappedFileQueue", "offset_to_file_name", "OS_PAGE_SIZE", "RESERVE_CHUNK",
           "reserve_space", "reserve_ahead"]

log = logging.getLogger("mqlite")

OS_PAGE_SIZE = 4096
FILE_NAME_DIGITS = 20
#: Bytes reserved ahead of the write position of an append-only file (commit-log segments).
#: One `posix_fallocate` per chunk: measured in bench/bench_producer.py, no change per message.
RESERVE_CHUNK = 4 << 20
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _page_align(size: int) -> int:
    return -(-size // OS_PAGE_SIZE) * OS_PAGE_SIZE


def reserve_space(fd: int, offset: int, length: int, path: str) -> None:
    """Give bytes [offset, offset + length) of the open file `fd` disk blocks (`posix_fallocate`).

    Blocks already allocated are left as they are (their data too). Raises
    `DiskFullError` when the disk (or a quota) has no room, having reserved
    nothing more that a writer will rely on. Where `posix_fallocate` is missing,
    one zero byte is written to every block that reads as a hole (as glibc's
    emulation does).
    """
    if length <= 0:
        return
    try:
        fallocate = getattr(os, "posix_fallocate", None)
        if fallocate is not None:
            fallocate(fd, offset, length)
        else:
            _touch_blocks(fd, offset, length)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise disk_full_error(path, f"reserving {length} bytes of {path}") from None
        raise


def reserve_ahead(fd: int, reserved: int, end: int, chunk: int, file_size: int, path: str) -> int:
    """Extend a file's reserved prefix [0, `reserved`) to cover `end`, a `chunk` further when the
    disk has room for it (else just to `end`: the disk's last blocks); returns the new end.

    Raises `DiskFullError` when not even `end` fits.
    """
    ahead = min(file_size, _page_align(end + chunk))
    try:
        reserve_space(fd, reserved, ahead - reserved, path)
    except DiskFullError:
        least = min(file_size, _page_align(end))
        if least >= ahead:
            raise
        reserve_space(fd, reserved, least - reserved, path)
        ahead = least
    return ahead


def _touch_blocks(fd: int, offset: int, length: int) -> None:
    pos = offset - offset % OS_PAGE_SIZE
    while pos < offset + length:
        at = max(pos, offset)
        if os.pread(fd, 1, at) in (b"", b"\0"):
            os.pwrite(fd, b"\0", at)
        pos += OS_PAGE_SIZE


def offset_to_file_name(offset: int) -> str:
    """`UtilAll.offset2FileName`: the offset zero-padded to 20 digits."""
    return f"{offset:0{FILE_NAME_DIGITS}d}"


class MappedFile:
    """One segment file, mapped whole.

    `wrote_position` is the end of written data inside the file, `flushed_position`
    the end of what `flush()` made durable, `reserved` the end of the bytes known
    to have disk blocks (`reserve`): a writer never stores through the map at or
    beyond it. Positions are file-relative; add `file_from_offset` for absolute offsets.
    """

    __slots__ = ("path", "file_from_offset", "file_size", "read_only", "mm", "_fd",
                 "wrote_position", "flushed_position", "_closed", "reserved", "reserve_chunk")

    def __init__(self, path: str, file_size: int, *, read_only: bool = False,
                 reserve_chunk: int = RESERVE_CHUNK) -> None:
        self.path = path
        self.file_from_offset = int(os.path.basename(path))
        self.file_size = file_size
        self.read_only = read_only
        self._closed = False
        # Nothing is known to be allocated yet (a loaded file too: recovery's
        # truncate_dirty_files vouches for the data before its cut).
        self.reserved = 0
        self.reserve_chunk = reserve_chunk
        if read_only:
            self._fd = os.open(path, os.O_RDONLY)
            self.mm = mmap.mmap(self._fd, file_size, prot=mmap.PROT_READ)
        else:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size < file_size:
                os.ftruncate(self._fd, file_size)  # sparse, like RandomAccessFile.setLength
            self.mm = mmap.mmap(self._fd, file_size)
        self.wrote_position = 0
        self.flushed_position = 0

    # -- state ---------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        """True when the file takes no more writes."""
        return self.wrote_position >= self.file_size

    @property
    def end_offset(self) -> int:
        """Absolute offset just after the written data."""
        return self.file_from_offset + self.wrote_position

    def last_modified(self) -> float:
        """The file's modification time in epoch seconds (0 when it vanished)."""
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return 0.0

    # -- I/O -----------------------------------------------------------------
    def reserve(self, end: int) -> None:
        """Make bytes [0, `end`) safe to write through the map: allocate their disk blocks.

        Reserves a chunk (`reserve_chunk`) past `end`, so appends call this once a
        chunk; when the chunk does not fit, just up to `end`. Raises `DiskFullError`
        (and `reserved` stays) when even that does not fit. One `posix_fallocate`;
        cheap for blocks already allocated. Writer only.
        """
        if end <= self.reserved:
            return
        if end > self.file_size:
            raise ValueError(f"cannot reserve {end} bytes of the {self.file_size}-byte file {self.path}")
        self.reserved = reserve_ahead(self._fd, self.reserved, end, self.reserve_chunk, self.file_size, self.path)

    def flush(self, least_pages: int) -> int:
        """Make written data durable when at least `least_pages` dirty pages wait (0: any).

        Returns the flushed position. Blocks on the disk; the GIL is released.
        """
        wrote = self.wrote_position
        if self._able_to_flush(wrote, least_pages) and not self._closed and not self.read_only:
            os.fdatasync(self._fd)
            self.flushed_position = wrote
        return self.flushed_position

    def _able_to_flush(self, wrote: int, least_pages: int) -> bool:
        # DefaultMappedFile.isAbleToFlush
        if wrote <= self.flushed_position:
            return False
        if self.is_full:
            return True
        if least_pages > 0:
            return wrote // OS_PAGE_SIZE - self.flushed_position // OS_PAGE_SIZE >= least_pages
        return True

    def read(self, position: int, size: int) -> bytes:
        """A copy of `size` bytes at file position `position` (short at the file end)."""
        return self.mm[position : position + size]

    def next_data(self, position: int) -> int:
        """The first position >= `position` the file system holds data for (file size if none).

        Falls back to `position` itself where `SEEK_DATA` is not supported.
        """
        return self._seek(position, "SEEK_DATA", self.file_size, position)

    def next_hole(self, position: int) -> int:
        """The first position >= `position` in a hole (no disk blocks), or the file size.

        Falls back to the file size where `SEEK_HOLE` is not supported.
        """
        return self._seek(position, "SEEK_HOLE", self.file_size, self.file_size)

    def _seek(self, position: int, whence_name: str, at_end: int, unsupported: int) -> int:
        whence = getattr(os, whence_name, None)
        if whence is None:
            return unsupported
        try:
            return min(os.lseek(self._fd, position, whence), self.file_size)
        except OSError as exc:
            return at_end if exc.errno == errno.ENXIO else unsupported

    def write_through_file(self, position: int, data: bytes) -> None:
        """Write `data` at `position` with `pwrite`, not through the map (the page cache is shared).

        For rare writes outside the append path (recovery zeroing a cut tail): a write
        the disk has no room for raises `DiskFullError` here, where a store through
        the map would kill the process.
        """
        try:
            os.pwrite(self._fd, data, position)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise disk_full_error(self.path, f"writing {len(data)} bytes into {self.path}") from None
            raise

    # -- lifecycle -------------------------------------------------------------
    def close(self) -> None:
        """Unmap and close. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.mm.close()
        except BufferError:
            # A memoryview into the map is still alive somewhere; the map goes
            # when that view is released. Closing the descriptor is still safe.
            log.debug("map of %s still exported; left to the garbage collector", self.path)
        os.close(self._fd)

    def deleted(self) -> bool:
        """True when the file was unlinked (by another process: a reader's look at the writer's retention),
        or this map was `release`d. One `fstat`."""
        if self._closed:
            return True
        try:
            return os.fstat(self._fd).st_nlink == 0
        except OSError:
            return True

    def release(self) -> None:
        """Let go of a file that is deleted (by another process, or `retire`). The descriptor closes now;
        the map goes with the last reference to this object, so a thread of this process still reading it
        finishes its read (`close()` would pull the map from under it). Idempotent."""
        if not self._closed:
            self._closed = True
            os.close(self._fd)

    def retire(self) -> None:
        """Delete the file and `release` it: the writer's retention, while a read of another thread (a pull
        of the oldest messages) may still be in it; that read finishes with its bytes instead of meeting a
        closed map (RocketMQ reference-counts its `MappedFile`s for the same reason)."""
        self.release()
        self._unlink()

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self._unlink()

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"


_ZERO_CHUNK = bytes(1 << 20)


def _zero_dirty_tail(mf: MappedFile, start: int, limit: int) -> None:
    """Zero every non-zero byte in [start, limit), then flush.

    Only regions the file system holds data for are read (`SEEK_DATA` to
    `SEEK_HOLE`): the never-written rest of a sparse segment is skipped, so this
    is cheap on a clean store, and no hole is ever written (a full disk could not
    back it). The zeros go through `pwrite` (`write_through_file`), so a disk that
    cannot take them raises `DiskFullError` instead of killing the process.
    """
    mm = mf.mm
    pos = start
    zeroed = False
    while pos < limit:
        pos = mf.next_data(pos)
        if pos >= limit:
            break
        end = min(limit, pos + len(_ZERO_CHUNK), max(mf.next_hole(pos), pos + 1))
        if mm[pos:end] != _ZERO_CHUNK[: end - pos]:
            mf.write_through_file(pos, _ZERO_CHUNK[: end - pos])
            zeroed = True
        pos = end
    if zeroed:
        mf.flushed_position = 0
        mf.flush(0)


class MappedFileQueue:
    """The ordered files of one directory, all `file_size` bytes.

    Thread-safety: one writer thread appends and rolls; other threads may look
    files up concurrently (the file list is replaced, never mutated in place,
    so a reader always sees a consistent snapshot).
    """

    def __init__(self, directory: str, file_size: int, *, read_only: bool = False,
                 reserve_chunk: int = RESERVE_CHUNK) -> None:
        self.directory = directory
        self.file_size = file_size
        self.read_only = read_only
        self.reserve_chunk = reserve_chunk
        self.files: list[MappedFile] = []
        # Files created and reserved ahead of need (`prepare_file`), by start offset; not in
        # `files` (invisible to offsets and readers) until `create_file` publishes them.
        self._prepared: dict[int, MappedFile] = {}
        self._lock = threading.Lock()  # guards replacing `files`
        self.flushed_where = 0

    # -- load --------------------------------------------------------------------
    def load(self, *, strict: bool = True) -> None:
        """Map the directory's files in name order, each as fully written.

        A file whose size differs from `file_size` makes a writer refuse to
        load (as RocketMQ's `doLoad`) unless it is the last one and empty; a
        reader (`strict=False`) stops at it. Names that are not 20 digits are ignored.
        """
        try:
            names = sorted(n for n in os.listdir(self.directory) if len(n) == FILE_NAME_DIGITS and n.isdigit())
        except FileNotFoundError:
            names = []
        files: list[MappedFile] = []
        try:
            self._load_files(names, files, strict)
        except BaseException:
            for mf in files:
                mf.close()
            raise
        self.files = files

    def _load_files(self, names: list[str], files: list[MappedFile], strict: bool) -> None:
        for index, name in enumerate(names):
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size != self.file_size:
                if index == len(names) - 1 and size == 0 and not self.read_only:
                    os.unlink(path)  # an empty last file is a crash during creation
                    continue
                if strict:
                    raise StoreCorruptedError(
                        f"{path} is {size} bytes but files here are {self.file_size} bytes; "
                        f"the store was written with another file size (check config/store.json)"
                    )
                log.warning("%s has size %d, expected %d; ignoring it and later files", path, size, self.file_size)
                break
            if files and int(name) != files[-1].file_from_offset + self.file_size:
                if strict:
                    raise StoreCorruptedError(f"{path} does not follow {files[-1].path}: a segment is missing")
                log.warning("%s does not follow %s; ignoring it and later files", path, files[-1].path)
                break
            mf = MappedFile(path, self.file_size, read_only=self.read_only, reserve_chunk=self.reserve_chunk)
            mf.wrote_position = mf.flushed_position = self.file_size
            files.append(mf)

    def _map_new_files(self) -> list[MappedFile]:
        """Read-only: map files that follow the last mapped one."""
        files = list(self.files)
        while True:
            next_offset = files[-1].file_from_offset + self.file_size if files else None
            if next_offset is None:
                self.load(strict=False)
                for mf in self.files:
                    mf.wrote_position = 0  # the consume queues say how much is written
                return self.files
            path = os.path.join(self.directory, offset_to_file_name(next_offset))
            try:
                if os.path.getsize(path) != self.file_size:
                    break
                files.append(MappedFile(path, self.file_size, read_only=True))
            except OSError:
                break
        with self._lock:
            self.files = files
        return files

    # -- look-up -------------------------------------------------------------------
    @property
    def last(self) -> MappedFile | None:
        """The newest file, or None."""
        files = self.files
        return files[-1] if files else None

    def last_for_append(self, start_offset: int = 0, reserve: int = 0) -> MappedFile:
        """The file to append to, creating the next one when the last is full or none exists.

        `start_offset` is where the first file starts when the queue is empty; a
        new file has `reserve` bytes (at least one chunk) reserved, see `create_file`.
        """
        files = self.files
        if files and not files[-1].is_full:
            return files[-1]
        if files:
            create_offset = files[-1].file_from_offset + self.file_size
        else:
            create_offset = start_offset - start_offset % self.file_size
        return self.create_file(create_offset, reserve)

    def create_file(self, offset: int, reserve: int = 0) -> MappedFile:
        """Create and append the file starting at absolute `offset`, its first `reserve` bytes
        (and a chunk ahead) reserved before anyone can write to it.

        Raises `DiskFullError` when the disk has no room, leaving the queue as it was
        (the new file is deleted again).
        """
        mf = self._prepared.pop(offset, None)
        if mf is not None:
            try:
                mf.reserve(max(reserve, 1))
            except BaseException:
                self._prepared[offset] = mf  # still reserved as far as it was: kept for the next try
                raise
        else:
            mf = self._new_file(offset, reserve)
        with self._lock:
            self.files = [*self.files, mf]
        if not self.files[:-1]:
            self.flushed_where = offset
        return mf

    def prepare_file(self, offset: int, reserve: int) -> None:
        """Create the file starting at `offset` with `reserve` bytes reserved, without publishing it:
        `create_file(offset)` will take it. Lets a writer make sure of the space a write
        needs before it writes anything. Raises `DiskFullError`; a file prepared before stays."""
        mf = self._prepared.get(offset)
        if mf is None:
            self._prepared[offset] = self._new_file(offset, reserve)
        else:
            mf.reserve(max(reserve, 1))

    def _new_file(self, offset: int, reserve: int) -> MappedFile:
        """A new file at `offset` with `reserve` bytes (and a chunk) reserved; deleted again on failure."""
        path = os.path.join(self.directory, offset_to_file_name(offset))
        try:
            os.makedirs(self.directory, exist_ok=True)
            mf = MappedFile(path, self.file_size, reserve_chunk=self.reserve_chunk)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise disk_full_error(path, f"creating {path}") from None
            raise
        try:
            mf.reserve(max(reserve, 1))
        except BaseException:
            mf.destroy()
            raise
        return mf

    def _drop_prepared(self) -> None:
        """Delete the files prepared ahead (empty by construction)."""
        prepared, self._prepared = self._prepared, {}
        for mf in prepared.values():
            mf.destroy()

    def find(self, offset: int) -> MappedFile | None:
        """The file holding absolute `offset`, or None when outside the queue.

        A read-only queue maps files a live writer created since the last look.
        """
        files = self.files
        if self.read_only and (not files or offset >= files[-1].file_from_offset + self.file_size):
            files = self._map_new_files()
        if not files:
            return None
        first = files[0].file_from_offset
        index = (offset - first) // self.file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return None

    @property
    def min_offset(self) -> int:
        """Start of the first file, or -1 when empty (as RocketMQ)."""
        files = self.files
        return files[0].file_from_offset if files else -1

    @property
    def max_offset(self) -> int:
        """End of written data in the last file (0 when empty)."""
        last = self.last
        return last.end_offset if last else 0

    # -- flush -----------------------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        """Flush the file that holds `flushed_where` (`MappedFileQueue.flush`).

        Returns True when nothing was flushed (RocketMQ's "result == old position").
        """
        mf = self.find(self.flushed_where) or (self.files[0] if self.files and self.flushed_where == 0 else None)
        if mf is None:
            return True
        where = mf.file_from_offset + mf.flush(least_pages)
        done = where == self.flushed_where
        self.flushed_where = where
        return done

    def flush_all(self) -> None:
        """Flush every file with unflushed writes."""
        for mf in self.files:
            mf.flush(0)
        last = self.last
        if last is not None:
            self.flushed_where = last.end_offset

    # -- truncation and deletion ----------------------------------------------------------
    def truncate_dirty_files(self, offset: int, zero_limit: int = 0) -> None:
        """Drop everything at or after absolute `offset` (`truncateDirtyFiles`).

        In the file that holds `offset`, the `zero_limit` bytes after it are
        zeroed, so that a reader in another process never mistakes what was cut
        for data.
        """
        self._drop_prepared()
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                if zero_limit and not self.read_only:
                    _zero_dirty_tail(mf, pos, min(self.file_size, pos + zero_limit))
                mf.wrote_position = mf.flushed_position = pos
                # What is kept was written, so it has its blocks; appends go on from `pos`.
                mf.reserved = max(mf.reserved, pos)
                keep.append(mf)
            else:
                mf.destroy()
        with self._lock:
            self.files = keep
        self.flushed_where = min(self.flushed_where, offset) if keep else offset

    def delete_last_file(self) -> None:
        """Delete the newest file (recovery cutting a consume queue back)."""
        files = self.files
        self._drop_prepared()
        if files:
            with self._lock:
                self.files = files[:-1]
            files[-1].destroy()
            self.flushed_where = min(self.flushed_where, self.max_offset)

    def delete_files(self, victims: Callable[[MappedFile], bool], batch_max: int,
                     before: Callable[[int], None] | None = None) -> int:
        """Delete leading files while `victims(file)` holds; never the last file.

        Stops at the first file that is not a victim (no holes), after `batch_max`.
        `before(new_min_offset)` runs once the victims are chosen and before any goes
        (the store records the commit log's new head there, see `recovery.save_log_head`).
        The files are `retire`d: a read of another thread still in one finishes it.
        """
        files = self.files
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            if len(doomed) >= batch_max or not victims(mf):
                break
            doomed.append(mf)
        if not doomed:
            return 0
        if before is not None:
            before(files[len(doomed)].file_from_offset)
        with self._lock:
            self.files = files[len(doomed) :]
        for mf in doomed:
            mf.retire()  # not destroy(): a read of another thread may still be in it
        return len(doomed)

    def forget_deleted(self, candidate: Callable[[MappedFile], bool] | None = None) -> int:
        """Read-only: drop the leading files another process deleted (`MappedFile.deleted`), as far as
        `candidate(file)` also holds; they are `release`d, so their disk space goes back once no read of
        this process holds them. Returns how many went. Cost: one `fstat` per candidate file looked at."""
        files = self.files
        gone = 0
        for mf in files:
            if (candidate is not None and not candidate(mf)) or not mf.deleted():
                break
            gone += 1
        if gone:
            with self._lock:
                self.files = files[gone:]
            for mf in files[:gone]:
                mf.release()
        return gone

    def release(self) -> None:
        """Read-only: let go of every file (another process deleted the directory): each is `release`d,
        so a read of this process still going on in one finishes it; later reads find no file."""
        with self._lock:
            files, self.files = self.files, []
        for mf in files:
            mf.release()

    def destroy(self) -> None:
        """Delete every file and the directory if empty (`retire`: a read of another thread still in a file
        finishes it; `Broker.delete_topic` beside a pull)."""
        with self._lock:
            files, self.files = self.files, []
        self._drop_prepared()
        for mf in files:
            mf.retire()
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def close(self) -> None:
        """Unmap every file (files prepared ahead are deleted: nothing was written to them)."""
        if not self.read_only:
            self._drop_prepared()
        for mf in self.files:
            mf.close()
