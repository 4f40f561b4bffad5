"""Consumer offsets: RocketMQ's `ConsumerOffsetManager` over `config/consumerOffset.json`.

One table maps `"topic@group"` to `{queue_id: next offset to consume}`. It lives
in memory and is written as a whole, the way a RocketMQ broker writes it. The files
(`consumerOffset.json`, its `.bak`, and the side file other processes leave offsets in)
and their JSON shape are storage's: `mqlite.offsetfile`.

`OffsetPersistService` (thread `mqlite-offset-persist`) writes the table every
`flush_consumer_offset_interval` seconds and once more when it stops, after absorbing
the side file.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root:
...     offsets = ConsumerOffsets(root)
...     offsets.commit("cg", "orders", 0, 12)
...     _ = offsets.persist()
...     ConsumerOffsets(root).query("cg", "orders", 0), offsets.query("cg", "orders", 1)
(12, -1)
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ._service import Service
from .clock import SYSTEM_CLOCK, Clock
from .offsetfile import (
    TOPIC_GROUP_SEPARATOR,
    consumer_offset_path,
    group_table,
    groups_of,
    load_offset_file,
    offset_document,
    remove_side_file,
    side_entries,
    side_file_lock,
    side_offset_path,
    write_offset_file,
)

__all__ = ["ConsumerOffsets", "OffsetPersistService"]


class ConsumerOffsets:
    """The consumer offset table of one store (`ConsumerOffsetManager`).

    Thread-safe: every method may be called from any thread. Reads and commits
    cost one lock acquisition and a dict look-up, and do no I/O; `persist()`
    copies the table under the lock and writes the file outside it.
    """

    def __init__(self, root: str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.root = root
        self.path = consumer_offset_path(root)
        self._clock = clock
        self._lock = threading.Lock()
        # Serialises writers of the file, so an older snapshot never lands after a newer one.
        self._persist_lock = threading.Lock()
        self._table: dict[str, dict[int, int]] = {}
        self._extra: dict[str, Any] = {}  # other top-level keys of a broker's file, written back unchanged
        self._counter = 0  # dataVersion.counter
        self._state_version = 0
        self._changes = 0  # bumped on every change; persist() writes only when it moved
        self._persisted_changes = 0
        self.load()

    # -- loading --------------------------------------------------------------------------------------
    def load(self) -> None:
        """(Re)read the file, falling back to `.bak` when it is missing, empty or corrupt, with the
        side file's offsets on top (they are newer). Does I/O."""
        loaded = load_offset_file(self.root)
        with self._lock:
            self._table, self._extra = loaded.table, loaded.extra
            self._counter, self._state_version = loaded.counter, loaded.state_version
            self._persisted_changes = self._changes

    # -- queries ----------------------------------------------------------------------------------------
    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of (group, topic, queue), or -1 when there is none (`queryOffset`)."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self._table.get(key)
            return queues.get(queue_id, -1) if queues else -1

    def groups(self) -> list[str]:
        """Consumer groups with at least one committed offset, sorted."""
        with self._lock:
            keys = list(self._table)
        return groups_of(keys)

    def table_for(self, group: str) -> dict[str, dict[int, int]]:
        """A copy of `group`'s offsets: `{topic: {queue_id: offset}}`."""
        with self._lock:
            return group_table(self._table, group)

    def snapshot(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table, keyed `topic@group`."""
        with self._lock:
            return {key: dict(queues) for key, queues in self._table.items()}

    # -- changes ----------------------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int, *, increase_only: bool = False) -> None:
        """Record `offset` as the next offset `group` consumes from (topic, queue) (`commitOffset`).

        With `increase_only` a smaller offset is ignored (the client's
        `updateOffset(mq, offset, true)`, used after each consumed batch).
        """
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self._table.get(key)
            if queues is None:
                queues = self._table[key] = {}
            current = queues.get(queue_id)
            if current != offset and not (increase_only and current is not None and current > offset):
                queues[queue_id] = offset
                self._changes += 1

    def remove_group(self, group: str) -> bool:
        """Forget every offset of `group` (`removeOffset`); True when something was removed."""
        suffix = TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            doomed = [key for key in self._table if key.endswith(suffix)]
            for key in doomed:
                del self._table[key]
            if doomed:
                self._changes += 1
            return bool(doomed)

    def remove_topic(self, topic: str) -> bool:
        """Forget every group's offsets of `topic` (after the topic is deleted); True when something was removed."""
        prefix = topic + TOPIC_GROUP_SEPARATOR
        with self._lock:
            doomed = [key for key in self._table if key.startswith(prefix)]
            for key in doomed:
                del self._table[key]
            if doomed:
                self._changes += 1
            return bool(doomed)

    def absorb_side_file(self) -> bool:
        """Take the offsets other processes left in the side file into the table, persist, remove
        the file; True when there were any. The store's owner calls this (each persist round).

        Costs one `stat` when there is no side file. The file goes only after the table
        holding its offsets is written, so a crash in between absorbs them again.
        """
        if not os.path.exists(side_offset_path(self.root)):
            return False
        with side_file_lock(self.root) as path:
            entries = side_entries(self.root)
            with self._lock:
                for key, queues in entries.items():
                    current = self._table.setdefault(key, {})
                    if any(current.get(q) != o for q, o in queues.items()):
                        current.update(queues)
                        self._changes += 1
            self.persist()
            remove_side_file(path)
        return bool(entries)

    # -- persistence ----------------------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """True when the table changed since it was last loaded or persisted."""
        with self._lock:
            return self._changes != self._persisted_changes

    def persist(self) -> bool:
        """Write the table if it changed since the last write; True when a file was written.

        Blocks for one JSON write and two fsyncs (`write_json_atomic`); the
        table lock is held only to copy it.
        """
        with self._persist_lock:
            with self._lock:
                if self._changes == self._persisted_changes:
                    return False
                changes = self._changes
                self._counter += 1
                document = offset_document(self._table, self._extra, counter=self._counter,
                                           state_version=self._state_version, timestamp=self._clock.now_ms())
            write_offset_file(self.root, document)
            with self._lock:
                self._persisted_changes = max(self._persisted_changes, changes)
            return True

    def __repr__(self) -> str:
        with self._lock:
            return f"<ConsumerOffsets {self.path!r} {len(self._table)} topic@group entries>"


class OffsetPersistService(Service):
    """Thread `mqlite-offset-persist`: `offsets.persist()` every `interval` seconds and on stop."""

    def __init__(self, offsets: ConsumerOffsets, interval: float = 5.0) -> None:
        super().__init__("offset-persist", interval)
        self.offsets = offsets

    def run_once(self) -> None:
        if not self.offsets.absorb_side_file():  # which persists
            self.offsets.persist()

    def on_stop(self) -> None:
        self.run_once()
