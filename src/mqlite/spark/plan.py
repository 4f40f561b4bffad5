"""Planning a read: which queues, which offsets, how many partitions.

Runs where Spark plans (a Python process beside the driver). It opens a
`StoreReader`, takes one snapshot of the consume queues the options
subscribe to, resolves starting and ending offsets (JSON, earliest/latest or a
store time through the consume queue's offset-by-time search) and cuts the
result into `QueueRange` partitions. A range never goes past what the consume
queue held at the snapshot, so tasks read a consistent prefix of a store that
a live process keeps writing.

>>> [(r.queue_id, r.start, r.end) for r in split_ranges([QueueRange("/mq", "T", 0, 0, 100),
...                                                        QueueRange("/mq", "T", 1, 0, 10)], 4)]
[(0, 0, 25), (0, 25, 50), (0, 50, 75), (0, 75, 100), (1, 0, 10)]
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ..errors import ConfigError, MessageNotFoundError
from ..reader import StoreReader
from .options import EARLIEST, LATEST, OffsetSpec, ReadOptions

__all__ = ["QueueRange", "subscribed_queues", "plan_batch", "split_ranges", "data_loss", "resolve_offset"]


@dataclass
class QueueRange(InputPartition):
    """One task's work: queue offsets [start, end) of (topic, queue_id) in the store at `path`."""

    path: str
    topic: str
    queue_id: int
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def data_loss(what: str) -> MessageNotFoundError:
    """The error for messages a read needs that the store no longer holds."""
    return MessageNotFoundError(
        f"{what}: the messages were removed (retention or a truncated store); "
        f"set .option(\"failOnDataLoss\", \"false\") to skip what is gone and read the rest")


def subscribed_queues(store: StoreReader, options: ReadOptions) -> list[tuple[str, int]]:
    """The (topic, queue id) pairs the subscription takes, among those with a consume queue, sorted."""
    queues = []
    for topic in store.topics():
        if not options.subscribes(topic):
            continue
        assigned = options.assigned_queues(topic)
        for queue_id in store.queue_ids(topic):
            if assigned is None or queue_id in assigned:
                queues.append((topic, queue_id))
    return queues


def resolve_offset(store: StoreReader, topic: str, queue_id: int, spec: OffsetSpec, low: int, high: int) -> int:
    """The queue offset `spec` names for one queue whose readable offsets are [low, high)."""
    if spec.timestamp is not None:
        return store.offset_by_time(topic, queue_id, spec.timestamp)
    offset = spec.offset_for(topic, queue_id)
    return low if offset == EARLIEST else high if offset == LATEST else offset


def plan_batch(store: StoreReader, options: ReadOptions) -> list[QueueRange]:
    """The partitions of a batch read, from one snapshot of the consume queues."""
    ranges = []
    for topic, queue_id in subscribed_queues(store, options):
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        start = resolve_offset(store, topic, queue_id, options.starting, low, high)
        end = resolve_offset(store, topic, queue_id, options.ending, low, high)
        explicit = options.starting.offset_for(topic, queue_id) >= 0 and options.ending.offset_for(topic, queue_id) >= 0
        if explicit and options.starting.timestamp is None and options.ending.timestamp is None and end < start:
            raise ConfigError(f"endingOffsets {end} of {topic}/{queue_id} is before its startingOffsets {start}")
        if start < low:
            if options.fail_on_data_loss:
                raise data_loss(f"startingOffsets asks for {topic}/{queue_id} from offset {start}, "
                                f"but the queue now starts at {low}")
            start = low
        if start > high:  # beyond the end: the queue lost its tail (a store restored from an older copy?)
            if options.fail_on_data_loss:
                raise data_loss(f"startingOffsets asks for {topic}/{queue_id} from offset {start}, "
                                f"but the queue holds offsets {low}..{high - 1} (next offset {high})")
        start, end = min(start, high), min(end, high)
        if end > start:
            ranges.append(QueueRange(options.path, topic, queue_id, start, end))
    return split_ranges(ranges, options.min_partitions)


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Cut ranges so there are at least `min_partitions` (when there are that many offsets), in proportion to size.

    Kafka's rule, rounded up rather than to the nearest, so the minimum holds.
    """
    total = sum(len(r) for r in ranges)
    if not min_partitions or min_partitions <= len(ranges) or total == 0:
        return ranges
    out = []
    for r in ranges:
        parts = max(1, min(len(r), -(-len(r) * min_partitions // total)))
        for i in range(parts):
            start = r.start + len(r) * i // parts
            end = r.start + len(r) * (i + 1) // parts
            out.append(QueueRange(r.path, r.topic, r.queue_id, start, end))
    return out
