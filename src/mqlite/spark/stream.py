"""The streaming reader: `spark.readStream.format("mqlite")`.

Offsets are JSON objects `{"topic/queueId": next queue offset}` with sorted
keys, which Spark stores in the checkpoint; a restarted query resumes from
them, so nothing is read twice or skipped. Each trigger refreshes one
`StoreReader` (kept open in the query's long-lived planner process) and
offers what the consume queues hold:

* `maxOffsetsPerTrigger` becomes the default `ReadMaxRows` limit, shared
  among the queues in proportion to what each has waiting;
* `Trigger.AvailableNow` freezes the heads once, in `prepareForTriggerAvailableNow`;
* a pattern subscription (`subscribePattern`) picks up topics and queues
  created after the start; they are read from their first message;
* a queue that lost messages the query still needs (retention, a topic
  deleted and created again) fails the query unless `failOnDataLoss=false`.

With `group` set, the offsets of each completed batch are recorded as that
consumer group's (see `groupoffsets`). Spark's `commit(end)` lags a batch and
may never come for the last one, so the reader also records `start` when
Spark asks for the next batch (`latestOffset(start, ...)`): by then the batch
that ended at `start` is complete and in the checkpoint's commit log.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..reader import StoreReader
from .arrowread import read_range
from .groupoffsets import commit_stream_offsets
from .options import ReadOptions, queue_key, split_queue_key
from .plan import QueueRange, data_loss, resolve_offset, split_ranges, subscribed_queues

__all__ = ["MqliteStreamReader", "share_budget"]

Offsets = dict[str, int]


def share_budget(start: Offsets, end: Offsets, budget: int) -> Offsets:
    """Cut `end` so at most `budget` offsets are read, each queue in proportion to what it has waiting.

    Largest remainders get the odd units, so the whole budget is used.

    >>> share_budget({"T/0": 0, "T/1": 0}, {"T/0": 90, "T/1": 10}, 10)
    {'T/0': 9, 'T/1': 1}
    """
    waiting = {k: max(0, e - start.get(k, 0)) for k, e in end.items()}
    total = sum(waiting.values())
    if total <= budget:
        return dict(end)
    shares = {k: w * budget // total for k, w in waiting.items()}
    spare = budget - sum(shares.values())
    by_remainder = sorted(waiting, key=lambda k: (-(waiting[k] * budget % total), k))
    for k in by_remainder[:spare]:
        shares[k] += 1
    return {k: (start.get(k, 0) + shares[k] if waiting[k] else e) for k, e in end.items()}


class MqliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the subscribed queues (see the module docstring).

    Spark calls the offset methods from one long-lived process per query run
    and `read()` in executor workers on a pickled copy, which carries no open store.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._store: StoreReader | None = None
        self._target: Offsets | None = None
        self._heads: Offsets | None = None
        self._recorded: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None
        return state

    # -- the store ------------------------------------------------------------------------------------
    def _reader(self) -> StoreReader:
        if self._store is None:
            self._store = StoreReader(self.options.path)
        else:
            self._store.refresh()
        return self._store

    def _current(self) -> tuple[StoreReader, Offsets]:
        """The store, refreshed, and the head (max offset) of every subscribed queue."""
        store = self._reader()
        heads = {queue_key(t, q): store.max_offset(t, q) for t, q in subscribed_queues(store, self.options)}
        self._heads = dict(sorted(heads.items()))
        return store, self._heads

    # -- offsets --------------------------------------------------------------------------------------
    def initialOffset(self) -> Offsets:
        """Where a new query starts: startingOffsets or startingTimestamp, for every subscribed queue."""
        store, heads = self._current()
        start = {}
        for key, head in heads.items():
            topic, queue_id = split_queue_key(key)
            low = store.min_offset(topic, queue_id)
            start[key] = resolve_offset(store, topic, queue_id, self.options.starting, low, head)
        return start

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = dict(self._current()[1])

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The end of the next batch: the queues' heads, capped by the AvailableNow target and `limit`."""
        self._record(start)
        _, heads = self._current()
        if self._target is not None:
            heads = {k: min(v, self._target[k]) for k, v in heads.items() if k in self._target}
        end = dict(start)
        for key, head in heads.items():
            position = start.get(key, 0)
            if head < position and self.options.fail_on_data_loss:
                raise data_loss(f"queue {key} now ends at offset {head}, before the query's offset {position} "
                                f"(the topic was deleted and created again, or startingOffsets points past its end)")
            end[key] = head  # below `position` only without failOnDataLoss: start over from the new end
        if isinstance(limit, ReadMaxRows):
            end = share_budget(start, end, limit.max_rows)
        elif isinstance(limit, ReadMinRows) and self._target is None:
            if sum(max(0, e - start.get(k, 0)) for k, e in end.items()) < limit.min_rows:
                return start
        return dict(sorted(end.items()))

    def reportLatestOffset(self) -> Offsets | None:
        return self._heads

    def partitions(self, start: Offsets, end: Offsets) -> list[QueueRange]:
        """One range per queue with new offsets (split by minPartitions); ranges below a queue's start are lost."""
        store = self._reader()
        ranges = []
        for key, stop in sorted(end.items()):
            first = start.get(key, 0)
            if stop <= first:
                continue
            topic, queue_id = split_queue_key(key)
            low = store.min_offset(topic, queue_id)
            if first < low:
                if self.options.fail_on_data_loss:
                    raise data_loss(f"the query needs {key} from offset {first}, but the queue now starts at {low}")
                first = low
            if stop > first:
                ranges.append(QueueRange(self.options.path, topic, queue_id, first, stop))
        return split_ranges(ranges, self.options.min_partitions)

    def read(self, partition: Any) -> Any:
        from pyspark.sql.pandas.types import to_arrow_schema

        return read_range(self.options, to_arrow_schema(self.schema, timezone="UTC"), partition)

    def commit(self, end: Offsets) -> None:
        """Spark's acknowledgement of a batch; it lags, so it never moves the group's offsets back."""
        recorded = self._recorded or {}
        if all(end.get(key, 0) >= offset for key, offset in recorded.items()):
            self._record(end)

    def _record(self, offsets: Offsets) -> None:
        """Record completed progress as the consumer group's offsets (only when it moved)."""
        group = self.options.group
        if group is None or not offsets or offsets == self._recorded:
            return
        commit_stream_offsets(self.options.path, group, offsets)
        self._recorded = dict(offsets)

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
