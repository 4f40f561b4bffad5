"""The consumer-offset files: RocketMQ's `config/consumerOffset.json` and mqlite's side file.

Storage's part of consumer offsets: where the files lie, their JSON shape, reading and
writing them, and the one job other processes do on them (a group's offsets recorded
beside, or without, the store's owner). The table a broker keeps in memory and its
persist thread are `mqlite.offsets.ConsumerOffsets` (L2), built on this module.

`config/consumerOffset.json` is RocketMQ's `ConsumerOffsetManager` file, written as a
whole (`ConfigManager.persist`: the old file becomes `consumerOffset.json.bak`, so a torn
or corrupt file falls back to the previous one on load)::

    {
      "offsetTable": {"orders@cg": {"0": 12, "1": 3}},
      "dataVersion": {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000}
    }

    +---------------+------------------------------------------------------------------+
    | key           | value                                                            |
    +===============+==================================================================+
    | offsetTable   | "topic@group" -> {queue id (a string): next offset to consume}   |
    | dataVersion   | counter (bumped by each write), stateVersion, timestamp (ms)     |
    | anything else | a broker's other keys, read and written back unchanged           |
    +---------------+------------------------------------------------------------------+

Other processes must not write that file while a writer holds the store (a live broker
rewrites it every few seconds). They leave offsets in the side file
`config/sparkConsumerOffset.json` (`{"offsetTable": {...}}`, same shape, guarded by an
`flock` on `<side file>.lock`), which readers of the table read on top of it and the
owner absorbs on its next persist round.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root:
...     commit_group_offsets(root, "cg", {"orders": {0: 12}}), read_group_offsets(root, "cg")
(True, {'orders': {0: 12}})
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .clock import SYSTEM_CLOCK
from .config import load_json_file, write_json_atomic
from .store import try_lock_store

__all__ = ["TOPIC_GROUP_SEPARATOR", "OffsetFile", "consumer_offset_path", "side_offset_path", "side_file_lock",
           "load_offset_file", "offset_document", "write_offset_file", "load_side_file", "side_entries",
           "remove_side_file", "groups_of", "group_table", "commit_group_offsets", "read_group_offsets"]

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


@dataclass
class OffsetFile:
    """What a store's offset files hold: the table (`topic@group` -> {queue_id: offset}), the
    `dataVersion` and the file's other top-level keys (a broker's, written back unchanged)."""

    table: dict[str, dict[int, int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    counter: int = 0  # dataVersion.counter
    state_version: int = 0  # dataVersion.stateVersion


def load_offset_file(root: str) -> OffsetFile:
    """The store's `consumerOffset.json` (or its `.bak` when it is missing, empty or corrupt), with the
    side file's entries on top (they are newer). Reads two small JSON files; no lock.
    `StoreCorruptedError` when neither the file nor its `.bak` (or the side file's) reads."""
    path = consumer_offset_path(root)
    document = load_json_file(path, lenient=True, check=_check_offsets_document,
                              fix="delete it (and its .bak): every consumer group then starts where its "
                                  "consume_from_where says, or restore the file from a backup")
    loaded = OffsetFile()
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "offsetTable":
                loaded.table = _parse_table(value, path)
            elif key == "dataVersion" and isinstance(value, dict):
                loaded.counter = _as_int(value.get("counter"), 0)
                loaded.state_version = _as_int(value.get("stateVersion"), 0)
            else:
                loaded.extra[key] = value
    for key, queues in side_entries(root).items():
        loaded.table.setdefault(key, {}).update(queues)
    return loaded


def offset_document(table: Mapping[str, Mapping[int, int]], extra: Mapping[str, Any], *, counter: int,
                    state_version: int, timestamp: int) -> dict[str, Any]:
    """The JSON document of `consumerOffset.json` for `table` (a copy: queue ids as strings, sorted)."""
    document: dict[str, Any] = dict(extra)
    document["offsetTable"] = {key: {str(q): o for q, o in sorted(queues.items())} for key, queues in table.items()}
    document["dataVersion"] = {"counter": counter, "stateVersion": state_version, "timestamp": timestamp}
    return document


def write_offset_file(root: str, document: Mapping[str, Any]) -> None:
    """Write `document` (an `offset_document`) as the store's `consumerOffset.json`: atomic rename,
    the old file kept as `.bak`. Blocks for one JSON write and two fsyncs (`write_json_atomic`)."""
    path = consumer_offset_path(root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, document)


def load_side_file(path: str) -> dict[str, Any] | None:
    """The side file's document (or its `.bak`'s); None when there is none; `StoreCorruptedError` when damaged."""
    return load_json_file(path, check=_check_offsets_document,
                          fix="delete it (and its .bak): the offsets other processes left there (a Spark "
                              "stream's group progress) are lost and those groups resume from the store's table")


def side_entries(root: str) -> dict[str, dict[int, int]]:
    """The side file's table (`topic@group` -> {queue_id: offset}); empty when there is none. No lock."""
    path = side_offset_path(root)
    document = load_side_file(path)
    if document is None or "offsetTable" not in document:
        return {}
    return _parse_table(document["offsetTable"], path)


def remove_side_file(path: str) -> None:
    """Remove the side file at `path` and its `.bak` (the loader would fall back to an old `.bak`).
    Call under `side_file_lock`, after the table holding its offsets is written."""
    for name in (path, path + ".bak"):
        try:
            os.remove(name)
        except FileNotFoundError:
            pass


def groups_of(keys: Iterable[str]) -> list[str]:
    """The groups of offset-table keys (`topic@group`), sorted: `ConsumerOffsets.groups` of a table
    (a `snapshot()`, or the one `GET_ALL_CONSUMER_OFFSET` answers)."""
    return sorted({group for _, group in map(_split_key, keys) if group})


def group_table(table: Mapping[str, Mapping[int, int]], group: str) -> dict[str, dict[int, int]]:
    """A copy of `group`'s offsets in `table` (keyed `topic@group`): `{topic: {queue_id: offset}}`."""
    suffix = TOPIC_GROUP_SEPARATOR + group
    return {key[: -len(suffix)]: dict(queues) for key, queues in table.items()
            if key.endswith(suffix) and TOPIC_GROUP_SEPARATOR not in key[: -len(suffix)]}


# -- other processes: a group's offsets written beside (or without) the store's owner ----------------------------
def commit_group_offsets(root: str, group: str, table: Mapping[str, Mapping[int, int]]) -> bool:
    """Record `table` (`{topic: {queue_id: next offset}}`) as `group`'s offsets in the store at `root`,
    from a process that does not hold the store; True when written to the store's own table.

    `consumerOffset.json` belongs to the process holding the store open for writing (a live
    broker rewrites it every few seconds), so it is written only when no writer holds the
    store: the writer lock is taken without waiting (`store.try_lock_store`: mqlite's
    `flock` and a Java broker's POSIX lock), the table loaded (side file on top), the group's
    offsets set and the file written when they changed or the side file holds some of the
    group's (atomic rename, `.bak` kept, `dataVersion.counter` bumped), the group's side-file
    entries dropped, and the lock let go a few milliseconds later (a writer opening the store in that window gets
    `StoreLockedError` and can retry). When a writer holds the lock, the group's entries in
    the side file (`side_offset_path`, under `side_file_lock`) are replaced instead and False
    returned: the owner absorbs them on its next persist round, and `load_offset_file` reads
    them on top of the table meanwhile. Blocks for one or two small JSON writes with fsyncs;
    never waits for a lock a writer holds. A Spark stream's `group` option calls this.
    """
    lock = try_lock_store(root)
    if lock is None:
        _replace_side_entries(root, group, table)
        return False
    try:
        current = load_offset_file(root)
        changed = False
        for topic, queues in table.items():
            for queue_id, offset in queues.items():  # a topic without queues adds no entry
                entry = current.table.setdefault(topic + TOPIC_GROUP_SEPARATOR + group, {})
                if entry.get(queue_id) != offset:
                    entry[queue_id] = offset
                    changed = True
        # The group's side-file entries are dropped below, so the file must hold them even when this
        # commit repeats them (a writer that stopped without absorbing the side file left them there).
        suffix = TOPIC_GROUP_SEPARATOR + group
        if changed or any(key.endswith(suffix) for key in side_entries(root)):
            write_offset_file(root, offset_document(current.table, current.extra, counter=current.counter + 1,
                                                    state_version=current.state_version,
                                                    timestamp=SYSTEM_CLOCK.now_ms()))
        _replace_side_entries(root, group, None)
    finally:
        lock.release()
    return True


def read_group_offsets(root: str, group: str) -> dict[str, dict[int, int]]:
    """`group`'s committed offsets in the store at `root`, `{topic: {queue_id: offset}}`: the store's table
    with the side file on top (what `commit_group_offsets` wrote last). Reads two small JSON files; no lock."""
    return group_table(load_offset_file(root).table, group)


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
