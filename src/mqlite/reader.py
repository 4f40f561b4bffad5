"""`StoreReader`: read a store from another process, beside a live writer.

No lock, no threads, no writes. It maps the files read-only, finds where each
consume queue's valid units end, and reads only records those units point to,
so it never returns a record the writer has not finished. `refresh()` (also
done by every read of a queue) picks up what the writer dispatched since.
It reads stores written by a RocketMQ broker too: sizes come from
`config/store.json` when present, else from the files themselves.

>>> import tempfile, mqlite.store
>>> d = tempfile.mkdtemp()
>>> with mqlite.store.MessageStore(d, mqlite.store.StoreConfig(commitlog_file_size=1 << 20)) as s:
...     _ = s.put("T", 0, b"x")
>>> with StoreReader(d) as r:
...     r.max_offset("T", 0), r.get_messages("T", 0, 0).messages[0].body
(1, b'x')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .config import StoreConfig, file_signature
from .errors import StoreCorruptedError
from .mappedfile import offset_to_file_name
from .recovery import load_set_aside
from .recoveryhistory import recovery_history_path
from .storebase import StoreFiles, config_for

__all__ = ["StoreReader", "StoreLayout", "store_config"]


def store_config(root: str) -> StoreConfig:
    """The settings of the store at `root` as a reader sees them, without opening it.

    `config/store.json` when present, else sizes inferred from a RocketMQ broker's files, else
    the defaults (a store not created yet). Reads one small JSON file (or lists the segment
    directories); no lock. `ConfigError` or `StoreCorruptedError` when the file is unusable.
    """
    return config_for(root, {})


@dataclass(frozen=True)
class StoreLayout:
    """Where a store's files lie and how big they are, for readers that map them themselves.

    A Spark task maps the consume-queue files and commit-log segments of its range directly
    (numpy over the maps, no `StoreReader` object per task): this is the part of the store's
    format it needs besides the record and unit codecs. Segments are named by their first
    byte's offset (`file_name`); a consume-queue file holds `consumequeue_file_size // 20`
    units. Built with `StoreLayout.of(root)` (reads `store_config`).

    >>> StoreLayout.file_name(1 << 30)
    '00000000001073741824'
    """

    root: str
    commitlog_file_size: int
    consumequeue_file_size: int

    @classmethod
    def of(cls, root: str) -> StoreLayout:
        """The layout of the store at `root` (`store_config`: one small JSON read)."""
        config = store_config(root)
        return cls(root, config.commitlog_file_size, config.consumequeue_file_size)

    @property
    def commitlog_dir(self) -> str:
        """The directory of the commit-log segments."""
        return os.path.join(self.root, "commitlog")

    def consume_queue_dir(self, topic: str, queue_id: int) -> str:
        """The directory of one consume queue's files."""
        return os.path.join(self.root, "consumequeue", topic, str(queue_id))

    @staticmethod
    def file_name(start: int) -> str:
        """The name of the segment file whose first byte is at offset `start` (20 digits, as RocketMQ's)."""
        return offset_to_file_name(start)

    def set_aside(self) -> dict[int, int]:
        """`{commit_log_offset: size}` of the records recovery set aside (a wrong body CRC): never hand them out.

        Reads one small JSON file (`recovery.set_aside_path`); empty when there is none or it is unreadable.
        """
        return load_set_aside(self.root)


class StoreReader(StoreFiles):
    """A read-only view of the store at `root` (see the module docstring)."""

    def __init__(self, root: str, **settings: Any) -> None:
        if not os.path.isdir(root):
            raise StoreCorruptedError(f"{root} is not a store directory (it does not exist)")
        super().__init__(root, config_for(root, settings), read_only=True)
        # Every writer open rewrites it once its recovery is done: how `refresh` notices one.
        self._history = recovery_history_path(root)
        self._writer_open = file_signature(self._history)
        self.load_files(last_exit_ok=True)
        for cq in self.consume_queues.values():
            cq.recover()
        self._end_of_log()
        self._correct_min_offsets()

    def _correct_min_offsets(self) -> None:
        """Start each queue at its first unit whose record is still in the log.

        After retention deleted old segments, a queue's first file can still hold units
        pointing into them (RocketMQ deletes a queue file only once its last unit has
        expired); the writer skips them on open (`correct_min_offset`), and so does a reader.
        """
        min_commit_log_offset = self.commitlog.min_offset
        if min_commit_log_offset > 0:
            for cq in self.consume_queues.values():
                cq.correct_min_offset(min_commit_log_offset)

    def _forget_deleted(self) -> None:
        """Drop the files the writer deleted (retention: the log's oldest segments, then the queue and
        index files pointing into them only), so the disk space they held goes back and the min offsets
        follow the writer's. A read of this process still going on in a dropped file finishes it (see
        `MappedFile.release`); later reads find the record gone, as a writer's reads do. Cost: one
        `fstat` of the first segment, one `stat` of the first index file, nothing per queue unless its
        first file expired."""
        self.commitlog.mapped_files.forget_deleted()
        min_commit_log_offset = self.commitlog.min_offset
        if min_commit_log_offset > 0:
            for cq in self.consume_queues.values():
                cq.forget_deleted(min_commit_log_offset)
        self.index.forget_deleted()

    def _forget_gone_queues(self, on_disk: list[tuple[str, int]]) -> None:
        """Drop the queues whose directories the writer deleted (`Broker.delete_topic`), letting go of
        their files. Free: `on_disk` is the listing `refresh` does anyway to find new queues."""
        listed = set(on_disk)
        gone = [key for key in self.consume_queues if key not in listed]
        if gone:
            queues = dict(self.consume_queues)
            for key in gone:
                queues.pop(key).release()
            self.consume_queues = queues

    def _after_writer_open(self) -> None:
        """A writer opened the store since the last look: its recovery may have rebuilt queues (their files
        replaced, the directory kept) or cut their ends back after a crash. A queue with a file gone is
        forgotten (the listing that follows maps it anew); the others find their ends again. Cost, once a
        writer open: one `fstat` a queue file and a queue's `recover`."""
        queues = dict(self.consume_queues)
        for key, cq in self.consume_queues.items():
            if any(mf.deleted() for mf in cq.mapped_files.files):
                queues.pop(key).release()
            else:
                cq.recover()
        self.consume_queues = queues

    def _end_of_log(self) -> None:
        """Mark the newest segment as written up to the end of the last dispatched record, mapping the
        segments the writer started since the last look first (a look-up by offset, as the index's, reads
        only below the newest segment's end: found later, a segment would be mapped as empty)."""
        end = max((cq.max_commit_log_offset for cq in self.consume_queues.values()), default=0)
        if end > 0:
            self.commitlog.mapped_files.find(end - 1)
        files = self.commitlog.mapped_files.files
        if not files:
            return
        last = files[-1]
        last.wrote_position = max(0, min(last.file_size, end - last.file_from_offset))

    def refresh(self) -> None:
        """Pick up consume queues, segments, units and index files the writer added since the last look,
        and let go of what it deleted: the segments and queue and index files of its retention (their
        min offsets move up) and the queues of a deleted topic."""
        self._require_open()
        self._forget_deleted()
        self.index.map_new()
        opened = file_signature(self._history)
        if opened != self._writer_open:
            self._writer_open = opened
            self._after_writer_open()
        on_disk, whole = self._queues_on_disk()
        if whole:
            self._forget_gone_queues(on_disk)
        for cq in self._load_consume_queues(on_disk):
            cq.recover()
        for cq in self.consume_queues.values():
            cq.refresh()
        self._end_of_log()
        self._correct_min_offsets()

    def close(self) -> None:
        """Unmap everything. Idempotent."""
        self.close_files()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
