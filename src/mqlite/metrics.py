"""Metrics of a store, named after RocketMQ 5's, as Python values and as Prometheus text.

`collect(source, offsets, store=...)` reads one `MetricsSnapshot` from anything that answers the
few admin calls of `MetricsSource` (an embedded `Broker`, writer or `read_only=True`, and a
`RemoteBroker` from `mqlite.connect`); `Broker.metrics()` does it for a broker's own store.
`render_prometheus(snapshot)` writes Prometheus' text exposition format 0.0.4.

Every figure comes from the store, not from counters kept in memory as RocketMQ's
`BrokerMetricsManager` keeps them: messages in are the queues' max offsets, messages out the
committed offsets, bytes the record sizes in the consume-queue units, lag the difference. So any
process that reads the store (a dashboard beside the writer, a reader after a restart) sees the
same figures, and counters survive restarts. What follows from that:

- The counters only grow within one collector's life (a `StoreFigures`, or the `Counters` passed to
  `collect`; `Broker.metrics()` and `RemoteBroker.metrics()` keep one): bytes in and out
  (`rocketmq_throughput_in_total`, `..._out_total`) count each queue offset's record once, when the
  collector first sees it stored (in) or below the committed offset (out), and keep it counted after
  retention deleted it; messages out (`rocketmq_messages_out_total`) sum the highest offset each group
  committed per queue, so resetting offsets back lowers the lag but not the counter. Messages in are the
  max offsets, which only grow (a deleted topic leaves the output). A new collector (a new process, a
  restarted dashboard) starts from what the files hold then: its bytes cover only the records still
  stored and its messages out the offsets committed now, so the counters may start lower than the last
  process' did; Prometheus reads that as a counter reset, as it does a restarted RocketMQ broker.
- Messages out count what a group committed, not what it pulled. Lag is max offset minus the committed
  offset; a queue the group has not committed an offset for lags by nothing and has no lag latency, as
  RocketMQ's `ConsumerLagCalculator` counts it (it takes the queue's max offset for it).
- Figures that need the files are there only when `store` is given (a process that has the
  directory): bytes in and out, disk bytes, flush latency, flush-behind bytes, recovery counts.
  Over a `RemoteBroker` without it they are None and not rendered.

The names (RocketMQ's `BrokerMetricsConstant` and `DefaultStoreMetricsConstant`) and labels:

| metric | type | labels | from |
|---|---|---|---|
| `rocketmq_messages_in_total` | counter | topic, message_type, is_system | max offsets (retry and DLQ topics left out, as RocketMQ does) |
| `rocketmq_throughput_in_total` | counter | topic, message_type, is_system | unit sizes of the messages stored (bytes, each once) |
| `rocketmq_messages_out_total` | counter | topic, consumer_group, is_retry, is_system | highest committed offsets seen |
| `rocketmq_throughput_out_total` | counter | topic, consumer_group, is_retry, is_system | unit sizes below them (each once) |
| `rocketmq_consumer_lag_messages` | gauge | topic, consumer_group, is_retry, is_system | max offset - committed offset (0 without one) |
| `rocketmq_consumer_lag_latency` | gauge (ms) | topic, consumer_group, is_retry, is_system | now - store time of the oldest unconsumed message |
| `rocketmq_send_to_dlq_messages_total` | counter | consumer_group, is_system | `%DLQ%<group>`'s max offsets |
| `rocketmq_topic_number` | gauge | | the topic table |
| `rocketmq_consumer_group_number` | gauge | | groups with offsets or retry/DLQ topics |
| `rocketmq_storage_size` | gauge (bytes) | storage_type, storage_medium | the store directory's allocated bytes |
| `rocketmq_storage_flush_behind_bytes` | gauge | storage_type, storage_medium | log end - flushed (writer only) |
| `rocketmq_storage_message_reserve_time` | gauge (ms) | storage_type, storage_medium | now - store time of the commit log's first record |
| `mqlite_messages_stored` | gauge | topic | max - min offsets: messages still stored |
| `mqlite_storage_file_bytes` | gauge | kind | allocated bytes per kind of file |
| `mqlite_storage_flush_latency_seconds` | histogram | | one observation per commit-log flush round (writer only) |
| `mqlite_recoveries_total` | counter | abnormal | writer opens recorded in `config/recoveryHistory.jsonl` |
| `mqlite_store_info` | gauge (1) | broker_name, flush_disk_type | |

>>> import mqlite, tempfile
>>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
...     r = broker.put_message("orders", 0, b"hi")
...     snap = broker.metrics()
...     [(t.topic, t.messages_in, t.bytes_in > 0) for t in snap.topics]
[('orders', 1, True)]
>>> 'rocketmq_messages_in_total{topic="orders",message_type="normal",is_system="false"} 1' in render_prometheus(snap)
True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from .clock import Clock
from .config import file_signature
from .consumequeue import BLANK_UNIT
from .errors import MQLiteError
from .message import MessageExt
from .offsetfile import group_table, groups_of
from .recoveryhistory import RecoveryRecord, recovery_history, recovery_history_path
from .sendback import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_dlq_topic, is_retry_topic
from .store import MessageStore
from .storebase import StoreFiles
from .storeservices import HistogramSnapshot
from .topics import TopicConfig, is_system_topic

__all__ = ["MetricsSource", "MetricsSnapshot", "TopicFigures", "GroupTopicFigures", "StoreFacts", "StoreFigures",
           "Counters", "QueueRow", "collect", "disk_bytes", "render_prometheus", "topic_kind", "CONTENT_TYPE"]

#: The `Content-Type` of `render_prometheus`' text.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: `MixAll.CID_RMQ_SYS_PREFIX`: groups the broker itself uses (`is_system` in RocketMQ's labels).
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
#: Topics whose messages RocketMQ labels with another `message_type` than the topic's own.
_DELAY_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"})
_TRANSACTION_TOPICS = frozenset({"RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"})
_BLANK_SIZE = BLANK_UNIT[1]
_STORAGE_LABELS = {"storage_type": "local", "storage_medium": "disk"}  # DefaultStoreMetricsManager's


class QueueStatusLike(Protocol):
    """One queue's offsets, as `Broker.topic_status` answers them."""

    @property
    def queue_id(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def last_update_timestamp(self) -> int: ...


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue's offsets read from the files (`StoreFigures.queue_statuses`), as `topic_status` gives them."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


class MetricsSource(Protocol):
    """What `collect` asks of a broker: `Broker` and `RemoteBroker` both answer it (each with its method
    of the same name; over a connection each call is a round trip)."""

    @property
    def broker_name(self) -> str:
        """The broker's name."""
        ...

    @property
    def clock(self) -> Clock:
        """The clock `now_ms` defaults to."""
        ...

    def topic_list(self) -> list[str]:
        """The topic table's topics."""
        ...

    def topic_config(self, topic: str) -> TopicConfig | None:
        """A topic's settings (its `order` flag gives `message_type="fifo"`)."""
        ...

    def topic_status(self, topic: str) -> Sequence[QueueStatusLike]:
        """Per queue of `topic`: min and max offsets and the newest store time (asked when `collect` has no
        files; with them the offsets are read from the files)."""
        ...

    def query_message_by_offset(self, topic: str, queue_id: int, offset: int) -> MessageExt:
        """The message at a queue offset (its store time is the lag latency's start; asked without files)."""
        ...


@dataclass(frozen=True, slots=True)
class TopicFigures:
    """One topic's figures. `kind` is "user", "retry", "dlq" or "system"."""

    topic: str
    kind: str
    message_type: str
    queues: int
    messages_in: int  # messages ever stored: max offsets summed over the queues
    messages_stored: int  # still stored: max - min offsets summed
    bytes_in: int | None  # bytes of the records stored, each counted once (see the module); None without files
    last_store_timestamp: int  # store time of the newest message (epoch ms), 0 when none


@dataclass(frozen=True, slots=True)
class GroupTopicFigures:
    """One consumer group's progress on one topic (its retry topic is a topic of its own, `is_retry`)."""

    group: str
    topic: str
    is_retry: bool
    is_system: bool
    messages_out: int  # highest committed offsets seen, summed (each at most the queue's max offset)
    bytes_out: int | None  # bytes of the records below them, each counted once (see the module); None without files
    lag_messages: int  # max offset - committed offset, summed over the queues with a committed offset
    lag_latency_ms: int  # now - store time of the oldest message not consumed yet; 0 when nothing lags


@dataclass(frozen=True, slots=True)
class StoreFacts:
    """What only a process with the store directory knows (`StoreFigures.facts`)."""

    disk_bytes: Mapping[str, int]  # allocated bytes per kind: commitlog, consumequeue, index, config, other
    flush_disk_type: str
    flush_behind_bytes: int | None  # log end minus flushed offset; None for a reader (the writer knows)
    flush_latency: HistogramSnapshot | None  # commit-log flush rounds of this writer process; None for a reader
    recoveries: int  # writer opens recorded in config/recoveryHistory.jsonl
    abnormal_recoveries: int  # of which recovered after a crash (or from a bad checkpoint)
    earliest_store_timestamp: int | None  # store time of the oldest record in the commit log; None when empty

    @property
    def total_disk_bytes(self) -> int:
        """Allocated bytes of every file of the store."""
        return sum(self.disk_bytes.values())


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Every figure of one `collect`, for an application to export its own way (`to_json()`) or to
    render (`render_prometheus`)."""

    timestamp_ms: int
    broker_name: str
    topics: tuple[TopicFigures, ...]
    groups: tuple[GroupTopicFigures, ...]
    topic_number: int
    consumer_group_number: int
    store: StoreFacts | None

    def to_json(self) -> dict[str, Any]:
        """The snapshot as plain JSON values (histogram bounds as floats; `inf` never appears)."""
        return asdict(self)


class Counters:
    """What one collector has counted, so that its counters only grow: the highest committed offset seen per
    consumer group and queue (`rocketmq_messages_out_total` counts that: a group resetting its offsets back
    does not lower it). Keep one per exporter and pass it to every `collect` (a `StoreFigures` is one; a
    `RemoteBroker` keeps one for its `metrics()`). Thread-safe."""

    def __init__(self) -> None:
        self._committed: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def highest_committed(self, key: Hashable, offset: int) -> int:
        """The highest of `offset` and the offsets seen before under `key`."""
        with self._lock:
            best = max(self._committed.get(key, offset), offset)
            self._committed[key] = best
            return best


class StoreFigures(Counters):
    """The files' side of `collect` for one store (a `MessageStore` or a `StoreReader`).

    Keep one per store and pass it to every `collect`: it counts bytes incrementally, per queue (and per
    group and queue), each queue offset's record once (`unit_bytes`: a scrape reads only the units added
    since the last one, numpy over the mapped units), and caches the store times it read. Thread-safe.
    """

    def __init__(self, files: StoreFiles) -> None:
        super().__init__()
        self.files = files
        #: key -> (queue offset the count got to, bytes counted, commit-log offset of the last unit counted)
        self._spans: dict[Hashable, tuple[int, int, int]] = {}
        #: key -> (queue offset, its record's commit-log offset, store time): one answer per queue (and group)
        self._times: dict[Hashable, tuple[int, int, int]] = {}
        #: (inode, size, mtime) of the recovery history last read, and its newest record
        self._history_key: tuple[int, ...] | None = None
        self._history_last: RecoveryRecord | None = None

    def unit_bytes(self, key: Hashable, topic: str, queue_id: int, low: int, high: int) -> int:
        """Bytes of the records of a queue's units below `high`, each queue offset counted once in this
        object's life; `key` names the count. The first call sums units [low, high); later calls add the
        units from where the count got to (from `low` when retention deleted units not counted yet) up to
        `high`. So the sum never drops: the bytes of units retention deleted stay counted, and a `high`
        that went back adds nothing until it passes where the count got to. A queue deleted and written
        again (its last counted unit is another record now) is counted afresh on top. Cost: one unit read,
        and the units not counted yet."""
        cq = self.files.consume_queue(topic, queue_id)
        with self._lock:  # held while summing: two scrapes at once must not count the same units twice
            counted_to, total, last = self._spans.get(key, (low, 0, -1))
            start = max(low, counted_to)
            if cq is not None and low < counted_to <= high:
                unit = cq.unit_at(counted_to - 1)
                if unit is not None and unit[0] != last:  # another record now: none of this queue's is counted
                    start = low
            if cq is not None and start < high:
                sizes = cq.units_array(start, high)["size"]  # stops at a unit not written yet: counted later
                total += int(sizes[(sizes > 0) & (sizes != _BLANK_SIZE)].astype(np.int64).sum())
                if len(sizes):
                    counted_to = start + len(sizes)
                    end = cq.unit_at(counted_to - 1)
                    last = end[0] if end is not None else -1
            self._spans[key] = (counted_to, total, last)
            return total

    def queue_statuses(self, configs: Mapping[str, TopicConfig | None]) -> dict[str, list[QueueRow]]:
        """`Broker.topic_status` of each topic of `configs`, from the files: its read queues (per its
        config) and any queue with files, their min and max offsets and newest store time. A reader
        should `refresh()` first (once for all topics, where a reader's `topic_status` refreshes the
        whole store each call)."""
        files = self.files
        by_topic: dict[str, set[int]] = {}
        for topic, queue_id in list(files.consume_queues):
            by_topic.setdefault(topic, set()).add(queue_id)
        statuses = {}
        for topic, config in configs.items():
            ids = by_topic.get(topic, set())
            if config is None:
                ids = ids | set(range(max(ids) + 1) if ids else ())
            elif config.readable:
                ids = ids | set(range(config.read_queue_nums))
            rows = []
            for queue_id in sorted(ids):
                high = files.max_offset(topic, queue_id)
                last = self.store_timestamp((topic, queue_id), topic, queue_id, high - 1) if high > 0 else 0
                rows.append(QueueRow(queue_id, files.min_offset(topic, queue_id), high, max(last, 0)))
            statuses[topic] = rows
        return statuses

    def refresh(self) -> None:
        """Map what the writer added since the last look (a reader; nothing for the writer)."""
        self.files.refresh()

    def store_timestamp(self, key: Hashable, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time of the message at a queue offset (-1 when absent); `key` names the cached answer.

        Cost: one unit read when the answer cached under `key` is for the same offset and record,
        else one record read too."""
        cq = self.files.consume_queue(topic, queue_id)
        unit = cq.unit_at(queue_offset) if cq is not None else None
        if unit is None:
            return -1
        with self._lock:
            cached = self._times.get(key)
        if cached is not None and cached[0] == queue_offset and cached[1] == unit[0]:
            return cached[2]
        stored = self.files.commitlog.store_timestamp_at(unit[0], unit[1])
        with self._lock:
            self._times[key] = (queue_offset, unit[0], stored)
        return stored

    def facts(self) -> StoreFacts:
        """Disk bytes, flush mode and (a writer's) flush figures, recovery counts. Walks the directory."""
        files = self.files
        writer = files if isinstance(files, MessageStore) else None
        last = self._last_recovery()
        flushed = None
        if writer is not None:
            flushed = max(writer.commitlog.max_offset - writer.commitlog.mapped_files.flushed_where, 0)
        return StoreFacts(
            disk_bytes=disk_bytes(files.root), flush_disk_type=files.config.flush_disk_type,
            flush_behind_bytes=flushed,
            flush_latency=writer.flush_latency.snapshot() if writer is not None else None,
            recoveries=last.seq if last else 0, abnormal_recoveries=last.abnormal_total if last else 0,
            earliest_store_timestamp=self._earliest())

    def _last_recovery(self) -> RecoveryRecord | None:
        """The newest line of the recovery history, read again only when the file changed (one `stat`)."""
        key = file_signature(recovery_history_path(self.files.root))
        with self._lock:
            if key is not None and key == self._history_key:
                return self._history_last
        history = recovery_history(self.files.root) if key is not None else []
        last = history[-1] if history else None
        with self._lock:
            self._history_key, self._history_last = key, last
        return last

    def _earliest(self) -> int | None:
        """`getEarliestMessageTime`: the store time of the commit log's first record (one header read)."""
        commitlog = self.files.commitlog
        first = commitlog.min_offset
        size = commitlog.record_size_at(first) if first >= 0 else 0
        stored = commitlog.store_timestamp_at(first, size) if size else -1
        return stored if stored > 0 else None


#: Top-level entries of a store directory -> the kind their bytes count under (anything else: "other").
_FILE_KINDS = {"commitlog": "commitlog", "consumequeue": "consumequeue", "index": "index", "config": "config",
               "checkpoint": "checkpoint"}


def disk_bytes(root: str) -> dict[str, int]:
    """Allocated bytes (blocks, as `du` counts: sparse segments count what they hold) of the store at
    `root`, per kind of file. Walks the directory: one `stat` per file."""
    totals = dict.fromkeys(("commitlog", "consumequeue", "index", "config", "checkpoint", "other"), 0)
    try:
        entries = list(os.scandir(root))
    except OSError:
        return totals
    for entry in entries:
        totals[_FILE_KINDS.get(entry.name, "other")] += _allocated(entry)
    return totals


def _allocated(entry: os.DirEntry[str]) -> int:
    try:
        if entry.is_dir(follow_symlinks=False):
            return sum(_allocated(child) for child in os.scandir(entry.path))
        return entry.stat(follow_symlinks=False).st_blocks * 512
    except OSError:  # removed while we looked (an expired segment, a renamed temporary file)
        return 0


# -- collect ------------------------------------------------------------------------------------------------------
def collect(source: MetricsSource, offsets: Mapping[str, Mapping[int, int]], *,
            store: StoreFigures | StoreFiles | None = None, counters: Counters | None = None,
            now_ms: int | None = None) -> MetricsSnapshot:
    """A `MetricsSnapshot` of the broker `source`, with the committed `offsets` (`{"topic@group": {queue_id:
    offset}}`: `admin.offset_table(broker)` or `RemoteBroker.consumer_offset_table()`).

    `store` adds what the files know (bytes, disk, flush, recovery); pass a `StoreFigures` kept between
    calls so bytes are read incrementally and the counters only grow (a bare `StoreFiles` reads every unit
    each time and starts its counts afresh). Without files, pass `counters` kept between calls for the
    same (with a `StoreFigures` they are its own). `now_ms` defaults to the source's clock. Cost: per topic `topic_config` and, without `store`, `topic_status` (round
    trips over a connection); per lagging group and queue one record read. With `store`, queue offsets
    come from the files (one refresh of a reader), plus the units added since the last call and one walk
    of the directory.
    """
    figures = StoreFigures(store) if isinstance(store, StoreFiles) else store
    marks = figures if figures is not None else counters
    now = source.clock.now_ms() if now_ms is None else now_ms
    if figures is not None:  # a reader maps what the writer added (new queues list new topics), once
        figures.refresh()
    topic_names = source.topic_list()
    configs = {topic: source.topic_config(topic) for topic in topic_names}
    statuses: dict[str, Sequence[QueueStatusLike]]
    if figures is not None:  # queue offsets from the files: `topic_status` of a reader refreshes per topic
        statuses = dict(figures.queue_statuses(configs))
    else:
        statuses = {topic: source.topic_status(topic) for topic in topic_names}
    topics = tuple(_topic_figures(topic, configs[topic], statuses[topic], figures) for topic in topic_names)
    groups: list[GroupTopicFigures] = []
    group_names = groups_of(offsets)
    for group in group_names:
        for topic, committed in sorted(group_table(offsets, group).items()):
            if topic not in statuses:  # committed offsets of a topic no longer in the table
                statuses[topic] = source.topic_status(topic)
            groups.append(_group_figures(source, group, topic, committed, statuses[topic], figures, marks, now))
    all_groups = set(group_names) | {_group_of(t) for t in topic_names if is_retry_topic(t) or is_dlq_topic(t)}
    return MetricsSnapshot(timestamp_ms=now, broker_name=source.broker_name, topics=topics, groups=tuple(groups),
                           topic_number=len(topic_names), consumer_group_number=len(all_groups),
                           store=figures.facts() if figures is not None else None)


def _group_of(topic: str) -> str:
    prefix = RETRY_GROUP_TOPIC_PREFIX if is_retry_topic(topic) else DLQ_GROUP_TOPIC_PREFIX
    return topic[len(prefix):]


def topic_kind(topic: str) -> str:
    """`retry`, `dlq`, `system` or `user`: the kind of topic a figure is about (and the dashboard groups by)."""
    if is_retry_topic(topic):
        return "retry"
    if is_dlq_topic(topic):
        return "dlq"
    return "system" if is_system_topic(topic) else "user"


def _message_type(topic: str, config: TopicConfig | None) -> str:
    """RocketMQ's `TopicMessageType` metrics value, as far as the topic tells it (a send tells RocketMQ
    per message; a delayed message is stored in the delay topic first, then in its own)."""
    if topic in _DELAY_TOPICS:
        return "delay"
    if topic in _TRANSACTION_TOPICS:
        return "transaction"
    return "fifo" if config is not None and config.order else "normal"


def _topic_figures(topic: str, config: TopicConfig | None, status: Sequence[QueueStatusLike],
                   figures: StoreFigures | None) -> TopicFigures:
    bytes_in = None
    if figures is not None:
        bytes_in = sum(figures.unit_bytes((topic, q.queue_id), topic, q.queue_id, q.min_offset, q.max_offset)
                       for q in status)
    return TopicFigures(
        topic=topic, kind=topic_kind(topic), message_type=_message_type(topic, config), queues=len(status),
        messages_in=sum(q.max_offset for q in status),
        messages_stored=sum(max(q.max_offset - q.min_offset, 0) for q in status), bytes_in=bytes_in,
        last_store_timestamp=max((q.last_update_timestamp for q in status), default=0))


def _group_figures(source: MetricsSource, group: str, topic: str, committed: Mapping[int, int],
                   status: Sequence[QueueStatusLike], figures: StoreFigures | None, marks: Counters | None,
                   now: int) -> GroupTopicFigures:
    out = lag = 0
    bytes_out: int | None = 0 if figures is not None else None
    oldest: int | None = None
    for q in status:
        offset = committed.get(q.queue_id, -1)
        # RocketMQ's `ConsumerLagCalculator`: a queue without a committed offset lags by nothing (it takes the
        # broker's max offset for it). One past the end (committed before a truncation, or by hand) consumed
        # no more than the queue holds (admin.topic_stats' rule).
        consumed = min(offset, q.max_offset) if offset >= 0 else q.max_offset
        lag += q.max_offset - consumed
        # Messages out count the highest offset the group committed (seen by `marks`): never lowered by a reset.
        counted = min(offset, q.max_offset) if offset >= 0 else 0
        if marks is not None:
            counted = marks.highest_committed((group, topic, q.queue_id), counted)
        out += counted
        if figures is not None and bytes_out is not None:
            bytes_out += figures.unit_bytes((group, topic, q.queue_id), topic, q.queue_id, q.min_offset, counted)
        if consumed < q.max_offset:
            stored = _store_time(source, figures, group, topic, q.queue_id, max(consumed, q.min_offset))
            if stored > 0 and (oldest is None or stored < oldest):
                oldest = stored
    return GroupTopicFigures(
        group=group, topic=topic, is_retry=is_retry_topic(topic),
        is_system=is_system_topic(topic) or group.startswith(SYSTEM_GROUP_PREFIX),
        messages_out=out, bytes_out=bytes_out, lag_messages=lag,
        lag_latency_ms=max(now - oldest, 0) if oldest is not None else 0)


def _store_time(source: MetricsSource, figures: StoreFigures | None, group: str, topic: str, queue_id: int,
                offset: int) -> int:
    """Store time of the message at a queue offset: from the files when we have them, else asked."""
    if figures is not None:
        return figures.store_timestamp((group, topic, queue_id), topic, queue_id, offset)
    try:
        return source.query_message_by_offset(topic, queue_id, offset).store_timestamp
    except MQLiteError:  # not found (expired), or damaged meanwhile: no start to count from
        return -1


# -- Prometheus text ------------------------------------------------------------------------------------------------
Labels = Mapping[str, str]


#: (name, type, help, TopicFigures field) of the per-topic families (retry and DLQ topics are left out, as
#: RocketMQ's `SendMessageProcessor` leaves them out of its counters).
_TOPIC_FAMILIES = (
    ("rocketmq_messages_in_total", "counter",
     "Messages stored per topic (max offsets summed over its queues; retry and DLQ topics left out).", "messages_in"),
    ("rocketmq_throughput_in_total", "counter",
     "Bytes of the messages stored per topic (record sizes from the consume queues, each counted once, kept "
     "after retention deletes it).", "bytes_in"),
)
#: (name, type, help, GroupTopicFigures field) of the per-group-and-topic families.
_GROUP_FAMILIES = (
    ("rocketmq_messages_out_total", "counter",
     "Messages a consumer group committed per topic (the highest committed offsets seen, summed).",
     "messages_out"),
    ("rocketmq_throughput_out_total", "counter",
     "Bytes of the messages below a consumer group's highest committed offsets per topic (each counted once).",
     "bytes_out"),
    ("rocketmq_consumer_lag_messages", "gauge",
     "Messages not consumed yet per consumer group and topic (max offset - committed offset; 0 for a queue "
     "without a committed offset).", "lag_messages"),
    ("rocketmq_consumer_lag_latency", "gauge",
     "Milliseconds since the oldest message a consumer group has not consumed was stored.", "lag_latency_ms"),
)


def render_prometheus(snapshot: MetricsSnapshot) -> str:
    """The snapshot in Prometheus' text exposition format 0.0.4 (`CONTENT_TYPE`): `# HELP` and `# TYPE`
    per family, label values escaped (backslash, double quote, newline), counters ending `_total`,
    the flush histogram as `_bucket{le=...}`, `_sum` and `_count`. Families without samples are left
    out (figures a `RemoteBroker` cannot give)."""
    out: list[str] = []
    topics = [({"topic": t.topic, "message_type": t.message_type, "is_system": _bool(t.kind == "system")}, t)
              for t in snapshot.topics if t.kind not in ("retry", "dlq")]
    groups = [({"topic": g.topic, "consumer_group": g.group, "is_retry": _bool(g.is_retry),
                "is_system": _bool(g.is_system)}, g) for g in snapshot.groups]
    for rows, families in ((topics, _TOPIC_FAMILIES), (groups, _GROUP_FAMILIES)):
        for name, kind, help_text, field in families:
            _family(out, name, kind, help_text, [(labels, getattr(row, field)) for labels, row in rows])
    _family(out, "rocketmq_send_to_dlq_messages_total", "counter",
            "Messages sent to a consumer group's dead-letter queue (%DLQ%<group>'s max offsets).",
            [({"consumer_group": group, "is_system": _bool(group.startswith(SYSTEM_GROUP_PREFIX))}, t.messages_in)
             for t, group in ((t, _group_of(t.topic)) for t in snapshot.topics if t.kind == "dlq")])
    _family(out, "rocketmq_topic_number", "gauge", "Topics in the topic table.", [({}, snapshot.topic_number)])
    _family(out, "rocketmq_consumer_group_number", "gauge",
            "Consumer groups (with committed offsets, a retry or a dead-letter topic).",
            [({}, snapshot.consumer_group_number)])
    _family(out, "mqlite_messages_stored", "gauge", "Messages still stored per topic (max - min offsets).",
            [({"topic": t.topic}, t.messages_stored) for t in snapshot.topics])
    facts = snapshot.store
    if facts is not None:
        _render_store(out, snapshot, facts)
    return "".join(out)


def _render_store(out: list[str], snapshot: MetricsSnapshot, facts: StoreFacts) -> None:
    _family(out, "rocketmq_storage_size", "gauge", "Allocated bytes of the store directory's files.",
            [(_STORAGE_LABELS, facts.total_disk_bytes)])
    if facts.earliest_store_timestamp is not None:
        _family(out, "rocketmq_storage_message_reserve_time", "gauge",
                "Milliseconds since the oldest message still in the commit log was stored.",
                [(_STORAGE_LABELS, max(snapshot.timestamp_ms - facts.earliest_store_timestamp, 0))])
    if facts.flush_behind_bytes is not None:
        _family(out, "rocketmq_storage_flush_behind_bytes", "gauge",
                "Commit-log bytes written but not flushed yet.", [(_STORAGE_LABELS, facts.flush_behind_bytes)])
    _family(out, "mqlite_storage_file_bytes", "gauge", "Allocated bytes of the store's files per kind.",
            [({"kind": kind}, n) for kind, n in sorted(facts.disk_bytes.items())])
    if facts.flush_latency is not None:
        _histogram(out, "mqlite_storage_flush_latency_seconds",
                   "Seconds each commit-log flush round (fdatasync) took in this writer process.",
                   facts.flush_latency)
    clean = facts.recoveries - facts.abnormal_recoveries
    _family(out, "mqlite_recoveries_total", "counter", "Writer opens of the store, by how they recovered.",
            [({"abnormal": "false"}, clean), ({"abnormal": "true"}, facts.abnormal_recoveries)])
    _family(out, "mqlite_store_info", "gauge", "The store's name and flush mode (always 1).",
            [({"broker_name": snapshot.broker_name, "flush_disk_type": facts.flush_disk_type}, 1)])


def _family(out: list[str], name: str, kind: str, help_text: str,
            samples: Iterable[tuple[Labels, float | int | None]]) -> None:
    lines = [f"{name}{_labels(labels)} {_number(value)}\n" for labels, value in samples if value is not None]
    if lines:
        out.append(f"# HELP {name} {_escape_help(help_text)}\n# TYPE {name} {kind}\n")
        out.extend(lines)


def _histogram(out: list[str], name: str, help_text: str, histogram: HistogramSnapshot) -> None:
    out.append(f"# HELP {name} {_escape_help(help_text)}\n# TYPE {name} histogram\n")
    for bound, count in histogram.cumulative():
        out.append(f"{name}_bucket{_labels({'le': _number(bound)})} {count}\n")
    out.append(f"{name}_sum {_number(histogram.sum)}\n{name}_count {histogram.count}\n")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape_label(value)}"' for key, value in labels.items()) + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


def _bool(value: bool) -> str:
    return "true" if value else "false"
