"""A streaming query's progress, recorded as a consumer group's offsets.

With `.option("group", "etl")` the stream reader records, after each
completed micro-batch, the next offset of every queue it reads as the offsets
of consumer group `etl`, so `Broker.consumer_progress("etl")` and
`mqlite consumerProgress` show the Spark job's lag.

The offsets are written with storage's offset-file API `mqlite.offsetfile.commit_group_offsets`,
which never waits for a live writer: `config/consumerOffset.json` belongs to the
process that holds the store open for writing, so when one does, the offsets go to
the side file `config/sparkConsumerOffset.json` instead (same `offsetTable` shape,
its own lock). The live broker absorbs it into its table on its next persist round
(every 5 s) and at once when asked for `consumer_progress`; a later commit that
finds the store free writes the group's offsets into `consumerOffset.json` itself
(taking the store's writer lock for a few milliseconds, without waiting) and drops
its side-file entries. Reads (`mqlite.offsetfile.read_group_offsets`) see both, the
side file winning, so `group_offsets()` always shows the latest progress.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..offsetfile import commit_group_offsets, read_group_offsets, side_offset_path
from .options import split_queue_key

__all__ = ["commit_stream_offsets", "group_offsets", "SIDE_FILE"]

#: The side file, relative to the store directory.
SIDE_FILE = os.path.relpath(side_offset_path("."), ".")


def _table(offsets: Mapping[str, int]) -> dict[str, dict[int, int]]:
    table: dict[str, dict[int, int]] = {}
    for key, offset in offsets.items():
        topic, queue_id = split_queue_key(key)
        table.setdefault(topic, {})[queue_id] = int(offset)
    return table


def commit_stream_offsets(root: str, group: str, offsets: Mapping[str, int]) -> bool:
    """Record a stream's `offsets` (Spark queue keys: `{"topic/queueId": next offset}`) as `group`'s;
    True when written to the store's table (`mqlite.offsetfile.commit_group_offsets`, which takes
    `{topic: {queue_id: offset}}`).

    Blocks for one or two small JSON writes with fsyncs; never waits for a lock
    a writer holds (see the module docstring).
    """
    return commit_group_offsets(root, group, _table(offsets))


def group_offsets(root: str, group: str) -> dict[str, dict[int, int]]:
    """`group`'s committed offsets `{topic: {queue_id: offset}}`: the store's table, the side file on top."""
    return read_group_offsets(root, group)
