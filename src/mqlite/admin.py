"""Admin queries over a `Broker` that its own surface does not offer (mqadmin's and the dashboard's).

Consumer groups and their progress as another process sees them (from
`config/consumerOffset.json`, which a live writer persists every
`flush_consumer_offset_interval` seconds), a scan of one queue between two
offsets, message look-up by id within one topic, per-topic statistics computed
from the store, and the dead-letter queue: listing `%DLQ%<group>` and
re-sending its messages.

Everything goes through the public `Broker` API (and `Broker.store` for
offsets), so it works on a writer and on a read-only broker alike; only
`resend_dlq_message` needs the writer. The functions that take an
`AdminSurface` and an `OffsetTable` work over a connection too (`mqlite.connect`;
`RemoteBroker.consumer_offset_table` is the table there).

>>> import mqlite, tempfile
>>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
...     r = broker.put_message("orders", 0, b"hi")
...     broker.commit_offset("cg", mqlite.MessageQueue("orders", broker.broker_name, 0), 0)
...     consumer_groups(broker, offset_table(broker)), [(p.queue_id, p.diff) for p in consumer_progress(broker, "cg")]
(['cg'], [(0, 1)])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from .broker import Broker, QueueProgress, QueueStatus
from .record import stored_body
from .errors import MessageNotFoundError, MQClientError
from .longpoll import PullStatus
from .message import (
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    MessageExt,
    MessageQueue,
    SysFlag,
)
from .offsetfile import group_table, groups_of
from .offsets import ConsumerOffsets
from .port import BrokerPort, Subscription
from .sendback import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic
from .topics import PERM_READ, PERM_WRITE, TopicConfig, is_system_topic
from .traceview import MessageTrack, TraceView

__all__ = [
    "AdminSurface",
    "TOOLS_CONSUMER_GROUP",
    "OffsetTable",
    "consumer_offsets",
    "offset_table",
    "consumer_groups",
    "group_exists",
    "consumer_progress",
    "offset_range",
    "scan_queue",
    "find_message",
    "TopicStats",
    "topic_stats",
    "dlq_messages",
    "ResendResult",
    "resend_destination",
    "check_resend",
    "resend_dlq_message",
]

#: `MixAll.TOOLS_CONSUMER_GROUP`: the group mqadmin's read commands pull as (never commits).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: `MixAll.CID_RMQ_SYS_PREFIX`: groups the broker itself uses (the transaction check's).
_SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
_PULL_BATCH = 32  # what mqadmin's printMsg pulls at a time
#: `TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`: a server routes it exactly when it creates topics on first send.
_AUTO_CREATE_TOPIC_KEY = "TBW102"
_MINUTE_MS = 60_000
_DAY_MS = 24 * 3600_000
#: Properties a re-sent dead letter drops: it starts over as a fresh delivery.
_DEAD_LETTER_PROPERTIES = (PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_DLQ_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME,
                           PROPERTY_MAX_RECONSUME_TIMES)
#: The committed offsets, keyed `topic@group` -> queue id -> offset (`ConsumerOffsets.snapshot()`, the
#: `offsetTable` of `config/consumerOffset.json` and of RocketMQ's `GET_ALL_CONSUMER_OFFSET`).
OffsetTable: TypeAlias = Mapping[str, Mapping[int, int]]


class AdminSurface(BrokerPort, Protocol):
    """What admin tools need of a broker: the client port plus the admin calls a local `Broker` and a
    `RemoteBroker` (`mqlite.connect`) both answer, each as `Broker`'s method of the same name. The
    functions here that take it (and the commands `mqlite -n HOST:PORT` runs) work on either."""

    @property
    def path(self) -> str:
        """The store directory (a remote broker: its address)."""
        ...

    def create_topic(self, topic: str, queue_nums: int = 4, *, order: bool = False,
                     perm: int = PERM_READ | PERM_WRITE, read_queue_nums: int | None = None,
                     write_queue_nums: int | None = None) -> TopicConfig:
        """Create or update a topic."""
        ...

    def topic_config(self, topic: str) -> TopicConfig | None:
        """A topic's settings, or None."""
        ...

    def delete_topic(self, topic: str) -> None:
        """Delete a topic and its consume queues."""
        ...

    def topic_list(self) -> list[str]:
        """The store's topics."""
        ...

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of `topic`: offsets and last update."""
        ...

    def query_message(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """Messages of `topic` by key or unique id."""
        ...

    def query_message_by_offset(self, topic: str, queue_id: int, offset: int) -> MessageExt:
        """The message at a queue offset."""
        ...

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """Per queue `group` consumes: broker and consumer offsets."""
        ...

    def reset_offset_by_time(self, group: str, topic: str, timestamp: int) -> dict[MessageQueue, int]:
        """Move `group`'s offsets on `topic` to `timestamp` (-1: the end)."""
        ...

    def query_trace(self, msg_id: str, max_num: int = 64, begin: int = 0, end: int | None = None) -> list[TraceView]:
        """The trace records of message `msg_id`, in causal order."""
        ...

    def message_track(self, msg_id: str) -> list[MessageTrack]:
        """Where message `msg_id` stands for each consumer group."""
        ...


# -- consumer groups ------------------------------------------------------------------------------------------
def consumer_offsets(broker: Broker) -> ConsumerOffsets:
    """The offset table: the writer's live one, or for a reader a fresh read of the file (one JSON load)."""
    return broker.offsets if broker.offsets is not None else ConsumerOffsets(broker.path)


def offset_table(broker: Broker) -> dict[str, dict[int, int]]:
    """The committed offsets as an `OffsetTable` (`consumer_offsets`' snapshot)."""
    return consumer_offsets(broker).snapshot()


def _group_of(topic: str) -> str | None:
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return None


def consumer_groups(broker: AdminSurface, table: OffsetTable) -> list[str]:
    """Groups with committed offsets in `table` or a retry or dead-letter topic, sorted; the broker's own
    left out."""
    groups = set(groups_of(table))
    groups.update(g for g in map(_group_of, broker.topic_list()) if g)
    return sorted(g for g in groups if not g.startswith(_SYSTEM_GROUP_PREFIX))


def group_exists(broker: AdminSurface, group: str, table: OffsetTable) -> bool:
    """True when `group` has committed offsets in `table` or a retry or dead-letter topic."""
    topics = broker.topic_list()
    return retry_topic(group) in topics or dlq_topic(group) in topics or bool(group_table(table, group))


def consumer_progress(broker: AdminSurface, group: str, topic: str | None = None, *,
                      offsets: OffsetTable | None = None) -> list[QueueProgress]:
    """`consumer_progress` of the broker, optionally for one topic.

    A reader sees the offsets the writer last persisted (or `offsets`, loaded
    once for many groups) and no client ids (consumers live in the writer's process).
    """
    if isinstance(broker, Broker) and broker.offsets is None:
        rows = _progress_from_file(broker, group_table(offset_table(broker) if offsets is None else offsets, group))
    else:
        rows = broker.consumer_progress(group)
    return [row for row in rows if topic is None or row.topic == topic]


def _progress_from_file(broker: Broker, table: dict[str, dict[int, int]]) -> list[QueueProgress]:
    store = broker.store
    rows = []
    for topic in sorted(table):
        committed = table[topic]
        for queue_id in sorted(set(store.queue_ids(topic)) | set(committed)):
            consumer_offset = max(committed.get(queue_id, 0), 0)
            last = store.store_timestamp(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
            rows.append(QueueProgress(topic, broker.broker_name, queue_id, store.max_offset(topic, queue_id),
                                      consumer_offset, "", max(last, 0)))
    return rows


# -- reading queues -------------------------------------------------------------------------------------------
def offset_range(broker: AdminSurface, mq: MessageQueue, begin: int | None = None, end: int | None = None) -> tuple[int, int]:
    """The queue offsets `[low, high)` of messages stored in `[begin, end)` (epoch ms; None: open end).

    mqadmin's `searchOffset` on both ends: two binary searches at most.
    """
    low = broker.search_offset(mq, begin) if begin is not None else broker.min_offset(mq)
    high = broker.search_offset(mq, end) if end is not None else broker.max_offset(mq)
    return low, max(low, high)


def scan_queue(broker: AdminSurface, mq: MessageQueue, low: int, high: int,
               message_filter: Subscription | None = None) -> Iterator[MessageExt]:
    """Messages of `mq` at offsets `[low, high)` that pass `message_filter`, in order.

    Pulls 32 at a time as `TOOLS_CONSUMER` (mqadmin's printMsg loop); lazy, so
    a caller may stop early. Offsets that aged out are skipped.
    """
    offset = low
    while offset < high:
        result = broker.pull(TOOLS_CONSUMER_GROUP, mq, offset, _PULL_BATCH, message_filter)
        for msg in result.msg_found_list:
            if msg.queue_offset >= high:
                return
            yield msg
        if result.pull_status is PullStatus.NO_NEW_MSG or result.next_begin_offset <= offset:
            return
        offset = result.next_begin_offset


def find_message(broker: AdminSurface, msg_id: str, topic: str | None = None) -> MessageExt:
    """A message by `msg_id` (UNIQ_KEY) or `offset_msg_id`, in `topic` when given.

    Retry and dead-letter copies keep the original's `msg_id`: without a
    topic the original is preferred while it is stored; naming the copy's
    topic (or its `offset_msg_id`) finds the copy. Raises `MessageNotFoundError`.
    """
    if topic is not None:
        return _find_in_topic(broker, msg_id, topic)
    found = broker.view_message(msg_id)
    origin = found.properties.get(PROPERTY_RETRY_TOPIC)
    if origin and _group_of(found.topic) is not None and msg_id != found.offset_msg_id:
        try:
            return _find_in_topic(broker, msg_id, origin)
        except MessageNotFoundError:
            pass  # the original aged out of the commit log: the copy is what is left
    return found


def _find_in_topic(broker: AdminSurface, msg_id: str, topic: str) -> MessageExt:
    for msg in broker.query_message(topic, msg_id):
        if msg.msg_id == msg_id:
            return msg
    try:
        by_offset = broker.view_message(msg_id)
    except MessageNotFoundError:
        by_offset = None
    if by_offset is not None and by_offset.topic == topic and by_offset.offset_msg_id == msg_id:
        return by_offset
    raise MessageNotFoundError(f"no message with id {msg_id!r} in topic {topic!r} of {broker.path}")


# -- statistics -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TopicStats:
    """One row of mqadmin's `statsAll`, computed from the store instead of runtime counters.

    `in_msg_24h`: messages stored in the last 24 hours; `in_tps`: stored in the
    last minute, per second. `out_msg_24h` / `out_tps`: of those, how many
    `consumer_group` has consumed (its offsets are past them). `accumulation`:
    the group's total diff. A topic nobody consumes has one row with
    `consumer_group`, `out_tps` and `out_msg_24h` None.
    """

    topic: str
    consumer_group: str | None
    accumulation: int
    in_tps: float
    out_tps: float | None
    in_msg_24h: int
    out_msg_24h: int | None


def topic_stats(broker: AdminSurface, topic: str, now_ms: int, offsets: OffsetTable) -> list[TopicStats]:
    """`statsAll`'s rows for `topic`: one per consumer group (committed offsets), or one without a group.

    Cost: two binary searches per queue plus one offset look-up per group and queue.
    """
    queues = broker.fetch_subscribe_queues(topic)
    day = {mq.queue_id: broker.search_offset(mq, now_ms - _DAY_MS) for mq in queues}
    minute = {mq.queue_id: broker.search_offset(mq, now_ms - _MINUTE_MS) for mq in queues}
    high = {mq.queue_id: broker.max_offset(mq) for mq in queues}
    in_day = sum(high[q] - day[q] for q in high)
    in_tps = sum(high[q] - minute[q] for q in high) / 60
    tables = {g: group_table(offsets, g) for g in groups_of(offsets)}
    groups = sorted(g for g, table in tables.items() if topic in table)
    if not groups:
        return [TopicStats(topic, None, 0, in_tps, None, in_day, None)]
    rows = []
    for group in groups:
        committed = {q: max(o, 0) for q, o in tables[group][topic].items()}
        # An offset past the end (committed before a truncation, or by hand) consumed no more than the queue
        # holds: clamped, as consumerProgress's diff is, so "out" never exceeds "in".
        consumed = {q: min(committed.get(q, 0), high[q]) for q in high}
        rows.append(TopicStats(
            topic, group,
            accumulation=sum(max(high[q] - consumed[q], 0) for q in high),
            in_tps=in_tps,
            out_tps=sum(max(consumed[q] - minute[q], 0) for q in high) / 60,
            in_msg_24h=in_day,
            out_msg_24h=sum(max(consumed[q] - day[q], 0) for q in high)))
    return rows


# -- dead letters -----------------------------------------------------------------------------------------------
def dlq_messages(broker: AdminSurface, group: str, begin: int | None = None, end: int | None = None, *,
                 from_offset: int = 0) -> Iterator[MessageExt]:
    """The messages in `%DLQ%<group>` stored in `[begin, end)`, oldest first, from queue offset `from_offset`
    of each queue on (a later page); none when the topic does not exist.

    rocketmq-dashboard's `queryDlqMessageByConsumerGroup` (a missing DLQ topic is an empty page there too).
    """
    topic = dlq_topic(group)
    for mq in broker.fetch_subscribe_queues(topic):
        low, high = offset_range(broker, mq, begin, end)
        yield from scan_queue(broker, mq, max(low, from_offset), high)


@dataclass(frozen=True, slots=True)
class ResendResult:
    """Where a re-sent dead letter went: `msg_id` is kept, the copy has a new `offset_msg_id`."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    offset_msg_id: str


def _origin_topic(msg: MessageExt) -> str:
    origin = msg.properties.get(PROPERTY_RETRY_TOPIC) or msg.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC)
    if not origin:
        raise MessageNotFoundError(f"message {msg.msg_id} in {msg.topic} names no original topic "
                                   f"({PROPERTY_RETRY_TOPIC} is missing); it cannot be re-sent")
    return origin


def resend_destination(msg: MessageExt, group: str, *, to_origin: bool = False) -> str:
    """The topic `resend_dlq_message` would send the dead letter `msg` to; no I/O.

    Lets a caller check every destination before re-sending the first of many.
    Raises `MessageNotFoundError` when `msg` names no original topic.
    """
    origin = _origin_topic(msg)
    return origin if to_origin else retry_topic(group)


def _auto_creates_topics(broker: AdminSurface) -> bool:
    """Whether a send to a missing topic creates it: the store's setting; over a connection, whether the
    server routes the default topic `TBW102` (it does exactly when its auto_create_topic is on)."""
    if isinstance(broker, Broker):
        return broker.config.auto_create_topic
    return broker.topic_config(_AUTO_CREATE_TOPIC_KEY) is not None


def check_resend(broker: AdminSurface, letters: Iterable[MessageExt], group: str, *, to_origin: bool = False) -> None:
    """Refuse a re-send of `letters` before the first copy is sent: `MessageNotFoundError` for a letter
    that names no original topic, `MQClientError` naming the first destination topic that would refuse.

    The retry topic is created on the first re-send when missing; an original
    topic must exist (or the store auto-creates topics), take writes and have queues.
    Cost: one topic look-up per distinct destination.
    """
    destinations = {resend_destination(msg, group, to_origin=to_origin) for msg in letters}
    for topic in sorted(destinations):
        config = broker.topic_config(topic)
        if to_origin and is_system_topic(topic):
            problem = "is a system topic, which takes no sends: re-send without --to-origin (to the retry topic)"
        elif config is None:
            if not to_origin or _auto_creates_topics(broker):
                continue  # created by the first re-send to it
            problem = (f"does not exist: create it with `mqlite updateTopic -t {topic}`, or re-send without "
                       "--to-origin (to the retry topic)")
        elif not config.writable:
            problem = (f"is not writable (perm {config.perm}): make it writable with "
                       f"`mqlite updateTopic -t {topic} -p 6`")
        elif config.write_queue_nums < 1:
            problem = f"has no write queues: give it some with `mqlite updateTopic -t {topic} -w 8`"
        else:
            continue
        raise MQClientError(f"topic {topic!r} {problem}")


def resend_dlq_message(broker: AdminSurface, msg: MessageExt, group: str, *, to_origin: bool = False,
                       sequence: int = 0) -> ResendResult:
    """Give a dead letter of `group` back to its consumers; needs the writer (or a connection to it).

    RocketMQ's dashboard re-delivers a DLQ message to the group alone (it
    looks the original up by `RETRY_TOPIC` and `ORIGIN_MESSAGE_ID` and has a
    live client of the group consume it directly). A store has no remote
    clients, so the copy goes to `%RETRY%<group>`, which only that group's
    consumers read and which shows them the original topic. With `to_origin`
    it goes to the original topic instead (every group consuming it sees it
    again, like mqadmin's `queryMsgById -s true`), to queue `sequence` modulo
    the topic's write queues. Either way the copy keeps its `msg_id`, body and
    user properties, and starts over with `reconsume_times` 0.
    """
    origin = _origin_topic(msg)
    properties = {k: v for k, v in msg.properties.items() if k not in _DEAD_LETTER_PROPERTIES}
    if to_origin:
        properties.pop(PROPERTY_RETRY_TOPIC, None)
        queues = broker.fetch_publish_queues(origin)
        if not queues:
            raise MQClientError(f"topic {origin!r} has no write queues; give it some before re-sending to it")
        topic, queue_id = origin, queues[sequence % len(queues)].queue_id
    else:
        properties[PROPERTY_RETRY_TOPIC] = origin  # the client shows the message under this topic
        topic, queue_id = retry_topic(group), 0
        if isinstance(broker, Broker):  # live members start reading a new retry topic
            broker.ensure_group_topic(group, topic)
        # A served broker creates it on the send itself, as RocketMQ's does for a send to a retry topic.
    body, sys_flag = stored_body(msg)
    put = broker.put_message(topic, queue_id, body, properties, flag=msg.flag,
                             sys_flag=SysFlag.reset_transaction_value(sys_flag, SysFlag.TRANSACTION_NOT_TYPE),
                             born_timestamp=msg.born_timestamp)
    return ResendResult(msg.msg_id, topic, queue_id, put.queue_offset, put.offset_msg_id)

