"""A streaming query's progress, recorded as a consumer group's offsets.

With `.option("group", "etl")` the stream reader records, after each
completed micro-batch, the next offset of every queue it reads as the offsets
of consumer group `etl`, so `Broker.consumer_progress("etl")` and
`mqlite consumerProgress` show the Spark job's lag.

`config/consumerOffset.json` belongs to the process that holds the store
open for writing: a live broker keeps the table in memory and rewrites the
file every few seconds, so anything written beside it would be lost, and a
write racing its own could leave either. The reader therefore writes that
file only when no live writer holds the store: it takes the store's writer
lock itself, without waiting (`mqlite.store.try_lock_store`: both the `flock`
mqlite takes and the POSIX lock a Java broker takes), writes the table through
`ConsumerOffsets` (atomic rename, `.bak` kept) and lets go, a few
milliseconds later. A writer that opens the store in exactly that window gets
`StoreLockedError` and can retry.

When a writer holds the lock, the offsets go to the side file
`config/sparkConsumerOffset.json` instead (`mqlite.offsets.side_offset_path`:
same `offsetTable` shape, its own lock). The live broker absorbs it into its
table on its next persist round (every 5 s) and at once when asked for
`consumer_progress`; a later commit that finds the store free also moves the
group's entries into `consumerOffset.json`. `ConsumerOffsets` reads both, the
side file winning, so `group_offsets()` always shows the latest progress.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..config import write_json_atomic
from ..offsets import TOPIC_GROUP_SEPARATOR, ConsumerOffsets, load_side_file, side_file_lock, side_offset_path
from ..store import try_lock_store
from .options import split_queue_key

__all__ = ["commit_group_offsets", "group_offsets", "SIDE_FILE"]

#: The side file, relative to the store directory.
SIDE_FILE = os.path.relpath(side_offset_path("."), ".")


def _table(offsets: Mapping[str, int]) -> dict[str, dict[int, int]]:
    table: dict[str, dict[int, int]] = {}
    for key, offset in offsets.items():
        topic, queue_id = split_queue_key(key)
        table.setdefault(topic, {})[queue_id] = int(offset)
    return table


def _update_side_file(root: str, group: str, table: dict[str, dict[int, int]] | None) -> None:
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


def commit_group_offsets(root: str, group: str, offsets: Mapping[str, int]) -> bool:
    """Record `offsets` (`{"topic/queueId": next offset}`) as `group`'s; True when written to the store's table.

    Blocks for one or two small JSON writes with fsyncs; never waits for a lock
    a writer holds (see the module docstring).
    """
    table = _table(offsets)
    lock = try_lock_store(root)
    if lock is None:
        _update_side_file(root, group, table)
        return False
    try:
        store_offsets = ConsumerOffsets(root)
        for topic, queues in table.items():
            for queue_id, offset in queues.items():
                store_offsets.commit(group, topic, queue_id, offset)
        store_offsets.persist()
        _update_side_file(root, group, None)
    finally:
        lock.release()
    return True


def group_offsets(root: str, group: str) -> dict[str, dict[int, int]]:
    """`group`'s committed offsets `{topic: {queue_id: offset}}`: the store's table, the side file on top."""
    return ConsumerOffsets(root).table_for(group)
