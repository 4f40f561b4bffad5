"""Consumer offsets: RocketMQ's `ConsumerOffsetManager` over `config/consumerOffset.json`.

One table maps `"topic@group"` to `{queue_id: next offset to consume}`. It lives
in memory and is written as a whole, the way a RocketMQ broker writes it
(`ConfigManager.persist`: the old file becomes `consumerOffset.json.bak`, so a
torn or corrupt file falls back to the previous one on load)::

    {
      "offsetTable": {"orders@cg": {"0": 12, "1": 3}},
      "dataVersion": {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000}
    }

`OffsetPersistService` (thread `mqlite-offset-persist`) writes the table every
`flush_consumer_offset_interval` seconds and once more when it stops.

Other processes must not write that file while a live broker holds the store (the
broker would overwrite it). They leave offsets in the side file
`config/sparkConsumerOffset.json` (same `offsetTable` shape, guarded by an `flock` on
`<side file>.lock`; a Spark stream's `group` progress does this), which `load()` reads
on top of the table and the owner absorbs on its next persist round.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root:
...     offsets = ConsumerOffsets(root)
...     offsets.commit("cg", "orders", 0, 12)
...     _ = offsets.persist()
...     ConsumerOffsets(root).query("cg", "orders", 0), offsets.query("cg", "orders", 1)
(12, -1)
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ._service import Service
from .clock import SYSTEM_CLOCK, Clock
from .config import load_json_file, write_json_atomic
from .store import try_lock_store

__all__ = ["ConsumerOffsets", "OffsetPersistService", "TOPIC_GROUP_SEPARATOR", "consumer_offset_path",
           "side_offset_path", "side_file_lock", "load_side_file", "groups_of", "group_table",
           "commit_group_offsets", "read_group_offsets"]

log = logging.getLogger("mqlite")

#: `ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR`: table keys are `topic@group`.
TOPIC_GROUP_SEPARATOR = "@"


def consumer_offset_path(root: str) -> str:
    """Where a store keeps its consumer offsets."""
    return os.path.join(root, "config", "consumerOffset.json")


def side_offset_path(root: str) -> str:
    """Where other processes leave offsets for the store's owner (see the module docstring)."""
    return os.path.join(root, "config", "sparkConsumerOffset.json")


@contextmanager
def side_file_lock(root: str) -> Iterator[str]:
    """Hold the side file's lock (blocking; held for one small read or write); yields its path."""
    path = side_offset_path(root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield path


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
        document = load_json_file(self.path, lenient=True, check=_check_offsets_document,
                                  fix="delete it (and its .bak): every consumer group then starts where its "
                                      "consume_from_where says, or restore the file from a backup")
        table: dict[str, dict[int, int]] = {}
        extra: dict[str, Any] = {}
        counter = state_version = 0
        if isinstance(document, dict):
            for key, value in document.items():
                if key == "offsetTable":
                    table = _parse_table(value, self.path)
                elif key == "dataVersion" and isinstance(value, dict):
                    counter = _as_int(value.get("counter"), 0)
                    state_version = _as_int(value.get("stateVersion"), 0)
                else:
                    extra[key] = value
        for key, queues in self._side_entries().items():
            table.setdefault(key, {}).update(queues)
        with self._lock:
            self._table, self._extra = table, extra
            self._counter, self._state_version = counter, state_version
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
            entries = self._side_entries()
            with self._lock:
                for key, queues in entries.items():
                    current = self._table.setdefault(key, {})
                    if any(current.get(q) != o for q, o in queues.items()):
                        current.update(queues)
                        self._changes += 1
            self.persist()
            for name in (path, path + ".bak"):  # read_json would fall back to an old .bak
                try:
                    os.remove(name)
                except FileNotFoundError:
                    pass
        return bool(entries)

    def _side_entries(self) -> dict[str, dict[int, int]]:
        path = side_offset_path(self.root)
        document = load_side_file(path)
        if document is None or "offsetTable" not in document:
            return {}
        return _parse_table(document["offsetTable"], path)

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
                document: dict[str, Any] = dict(self._extra)
                document["offsetTable"] = {key: {str(q): o for q, o in sorted(queues.items())}
                                           for key, queues in self._table.items()}
                document["dataVersion"] = {"counter": self._counter, "stateVersion": self._state_version,
                                           "timestamp": self._clock.now_ms()}
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            write_json_atomic(self.path, document)
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


# -- other processes: a group's offsets written beside (or without) the store's owner ----------------------------
def commit_group_offsets(root: str, group: str, table: Mapping[str, Mapping[int, int]]) -> bool:
    """Record `table` (`{topic: {queue_id: next offset}}`) as `group`'s offsets in the store at `root`,
    from a process that does not hold the store; True when written to the store's own table.

    `consumerOffset.json` belongs to the process holding the store open for writing (a live
    broker rewrites it every few seconds), so it is written only when no writer holds the
    store: the writer lock is taken without waiting (`store.try_lock_store`: mqlite's
    `flock` and a Java broker's POSIX lock), the table written through `ConsumerOffsets`
    (atomic rename, `.bak` kept), the group's side-file entries dropped, and the lock let go
    a few milliseconds later (a writer opening the store in that window gets
    `StoreLockedError` and can retry). When a writer holds the lock, the group's entries in
    the side file (`side_offset_path`, under `side_file_lock`) are replaced instead and False
    returned: the owner absorbs them on its next persist round, and `ConsumerOffsets` reads
    them on top of the table meanwhile. Blocks for one or two small JSON writes with fsyncs;
    never waits for a lock a writer holds. A Spark stream's `group` option calls this.
    """
    lock = try_lock_store(root)
    if lock is None:
        _replace_side_entries(root, group, table)
        return False
    try:
        store_offsets = ConsumerOffsets(root)
        for topic, queues in table.items():
            for queue_id, offset in queues.items():
                store_offsets.commit(group, topic, queue_id, offset)
        store_offsets.persist()
        _replace_side_entries(root, group, None)
    finally:
        lock.release()
    return True


def read_group_offsets(root: str, group: str) -> dict[str, dict[int, int]]:
    """`group`'s committed offsets in the store at `root`, `{topic: {queue_id: offset}}`: the store's table
    with the side file on top (what `commit_group_offsets` wrote last). Reads two small JSON files; no lock."""
    return ConsumerOffsets(root).table_for(group)


def _replace_side_entries(root: str, group: str, table: Mapping[str, Mapping[int, int]] | None) -> None:
    """Replace `group`'s entries in the side file (`table` None removes them)."""
    suffix = TOPIC_GROUP_SEPARATOR + group
    with side_file_lock(root) as path:
        document = load_side_file(path)
        entries = document.get("offsetTable", {}) if document is not None else {}
        kept = {k: v for k, v in entries.items() if not k.endswith(suffix)}
        if table:
            kept.update({topic + suffix: {str(q): o for q, o in sorted(queues.items())}
                         for topic, queues in table.items()})
        if kept == entries:
            return
        if not kept and not os.path.exists(path):
            return
        write_json_atomic(path, {"offsetTable": kept})


# -- helpers ---------------------------------------------------------------------------------------------
def _check_offsets_document(document: dict[str, Any]) -> None:
    """The shape of an `offsetTable` file: the table an object of objects (entries are checked as read)."""
    table = document.get("offsetTable", {})
    if not isinstance(table, dict):
        raise ValueError("offsetTable is not an object")
    if not all(isinstance(queues, dict) for queues in table.values()):
        raise ValueError("an entry of offsetTable is not an object of queue offsets")


def load_side_file(path: str) -> dict[str, Any] | None:
    """The side file's document (or its `.bak`'s); None when there is none; `StoreCorruptedError` when damaged."""
    return load_json_file(path, check=_check_offsets_document,
                          fix="delete it (and its .bak): the offsets other processes left there (a Spark "
                              "stream's group progress) are lost and those groups resume from the store's table")


def groups_of(keys: Iterable[str]) -> list[str]:
    """The groups of offset-table keys (`topic@group`), sorted: `ConsumerOffsets.groups` of a table
    (a `snapshot()`, or the one `GET_ALL_CONSUMER_OFFSET` answers)."""
    return sorted({group for _, group in map(_split_key, keys) if group})


def group_table(table: Mapping[str, Mapping[int, int]], group: str) -> dict[str, dict[int, int]]:
    """A copy of `group`'s offsets in `table` (keyed `topic@group`): `{topic: {queue_id: offset}}`."""
    suffix = TOPIC_GROUP_SEPARATOR + group
    return {key[: -len(suffix)]: dict(queues) for key, queues in table.items()
            if key.endswith(suffix) and TOPIC_GROUP_SEPARATOR not in key[: -len(suffix)]}


def _split_key(key: str) -> tuple[str, str]:
    topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return (topic, group) if sep and TOPIC_GROUP_SEPARATOR not in group else (key, "")


def _as_int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return default


def _parse_table(value: Any, path: str) -> dict[str, dict[int, int]]:
    table: dict[str, dict[int, int]] = {}
    if not isinstance(value, dict):
        log.error("%s: offsetTable is not an object; ignoring it", path)
        return table
    for key, queues in value.items():
        if not isinstance(queues, dict):
            log.error("%s: offsets of %r are not an object; skipping them", path, key)
            continue
        parsed: dict[int, int] = {}
        for qid, offset in queues.items():
            q, o = _as_int(qid, -1), _as_int(offset, -1)
            if q < 0 or isinstance(offset, bool) or not isinstance(offset, (int, str)):
                log.error("%s: skipping %r queue %r offset %r", path, key, qid, offset)
                continue
            parsed[q] = o
        table[str(key)] = parsed
    return table
