"""Message trace: RocketMQ's trace records and the thread that stores them (the views: `mqlite.traceview`).

A client created with `trace=True` records what happened to each message it
sent or consumed, as RocketMQ's trace hooks do (`SendMessageTraceHookImpl`,
`ConsumeMessageTraceHookImpl`, `EndTransactionTraceHookImpl`), and a
`TraceDispatcher` thread (RocketMQ's `AsyncTraceDispatcher`) stores the records
in batches as messages of the system topic `RMQ_SYS_TRACE_TOPIC`, keyed by the
traced message's id and keys, so the index finds them (`Broker.query_trace`).

The text is `TraceDataEncoder`'s, so RocketMQ's tools decode it: one line per
record, fields separated by `CONTENT_SPLITOR` (\\x01), each line ended by
`FIELD_SPLITOR` (\\x02); a missing tag or key is written `null`, as Java's
`StringBuilder.append(null)` writes it:

| type | fields after the type, in order |
|---|---|
| Pub | timeStamp regionId groupName topic msgId tags keys storeHost bodyLength costTime |
| | msgType (a `MessageType` ordinal) offsetMsgId isSuccess |
| SubBefore | timeStamp regionId groupName requestId msgId retryTimes keys |
| SubAfter | requestId msgId costTime isSuccess keys contextCode (a `ConsumeReturnType` ordinal) |
| | timeStamp groupName |
| EndTransaction | timeStamp regionId groupName topic msgId tags keys storeHost msgType transactionId |
| | transactionState fromTransactionCheck |
| Recall | timeStamp regionId groupName topic msgId isSuccess (decoded only: mqlite has no recall) |

RocketMQ has no record for a message sent back to `%RETRY%<group>` or moved
to `%DLQ%<group>`: its trace shows a failed SubAfter, then a SubBefore whose
retryTimes grew. mqlite adds a Pub record for the copy the consumer group
published (topic `%RETRY%<group>` or `%DLQ%<group>`, group = the consumer
group, offsetMsgId = the copy's; a retry's copy is first stored delayed, in
`SCHEDULE_TOPIC_XXXX`), so a retry and the final move to the DLQ are
explicit, in a line RocketMQ's tools read as an ordinary Pub.

>>> ctx = TraceContext(TraceType.SubBefore, 1700000000000, "cg", (TraceBean("7F00", keys="k1"),),
...                    request_id="R1")
>>> text = encode_trace_context(ctx)
>>> text.split(CONTENT_SPLITOR)
['SubBefore', '1700000000000', 'DefaultRegion', 'cg', 'R1', '7F00', '0', 'k1\\x02']
>>> decode_trace_data(text) == [ctx], trace_keys(ctx)
(True, ['7F00', 'k1'])
"""

from __future__ import annotations

import collections
import enum
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._service import Service
from .commitlog import PutResult
from .record import STORE_HOST
from .errors import MQClientError
from .message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    MessageExt,
    UniqIdGenerator,
    decode_offset_msg_id,
)
from .sendback import is_dlq_topic, retry_topic

__all__ = [
    "TRACE_TOPIC", "CONTENT_SPLITOR", "FIELD_SPLITOR", "DEFAULT_REGION_ID", "TraceType", "MessageType",
    "ConsumeReturnType", "TraceBean", "TraceContext", "encode_trace_context", "trace_keys", "decode_trace_data",
    "message_type_of", "TraceRecord", "trace_record", "pack_trace_messages", "TraceDispatcher",
    "ProducerTracer", "ConsumerTracer", "ConsumeTrace",
]

log = logging.getLogger("mqlite.trace")

#: `TopicValidator.RMQ_SYS_TRACE_TOPIC`: where trace records are stored (one queue).
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: `TraceConstants.CONTENT_SPLITOR`: between the fields of one record.
CONTENT_SPLITOR = "\x01"
#: `TraceConstants.FIELD_SPLITOR`: after each record.
FIELD_SPLITOR = "\x02"
#: `MixAll.DEFAULT_TRACE_REGION_ID`, also what a send result carries as its region.
DEFAULT_REGION_ID = "DefaultRegion"
#: `ClientConfig.traceMsgBatchNum`: records per trace message (RocketMQ caps it at 20).
TRACE_BATCH_NUM = 10
#: The trace producer's `maxMessageSize`: a trace message's body grows to about this, then a new one starts.
TRACE_MAX_MSG_SIZE = 128_000
#: Records the dispatcher's queue holds; a client thread finding it full stores a chunk itself. RocketMQ's
#: queue holds 2048; this one is larger because the thread wakes less often (`TRACE_WAKE_AT`).
TRACE_QUEUE_CAPACITY = 8192
#: `flushTraceInterval`: fewer than `TRACE_WAKE_AT` records wait at most this long (seconds).
FLUSH_TRACE_INTERVAL = 5.0
#: Pending records that wake the dispatcher before its interval. RocketMQ's thread polls every 5 ms and
#: sends each batch of 10; here every round of the thread costs GIL hand-offs with the client threads, so
#: one round takes thousands of records (measured on traced sends: a round per 2048 records cost less
#: than per 512, and far less than per batch of 10). A quarter of the queue leaves room for what
#: arrives before the thread runs.
TRACE_WAKE_AT = TRACE_QUEUE_CAPACITY // 4
#: Records packed and stored per batch put by the dispatcher (each put also wakes the reput thread).
_CHUNK_RECORDS = 1000
#: Characters of one trace message's KEYS property; a longer key set starts a new message.
_MAX_KEYS_CHARS = 16_000
_NULL = "null"  # what Java's StringBuilder.append writes for a null tag, key or transaction id
_PROPERTY_MSG_REGION = "MSG_REGION"
_PROPERTY_TRACE_SWITCH = "TRACE_ON"
_DELAY_PROPERTIES = frozenset({PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS,
                               PROPERTY_TIMER_DELAY_SEC})
_STORE_HOST = f"{STORE_HOST[0]}:{STORE_HOST[1]}"  # the store's own host (a record without an offset id)
_ID_GENERATOR = UniqIdGenerator()  # trace messages' own ids and the SubBefore/SubAfter request ids


def _store_host_of(offset_msg_id: str) -> str:
    """The broker address a record's offset message id names (`ip:port`), which RocketMQ's trace hooks
    record as the store host (the address the request went to): the serving address while a broker
    serves, `127.0.0.1:10911` otherwise."""
    return _host_of_id(offset_msg_id[:-16])  # the id without its 8-byte commit-log offset: one per broker


@functools.lru_cache(maxsize=16)
def _host_of_id(host_hex: str) -> str:
    try:
        ip, port, _ = decode_offset_msg_id(host_hex + "0" * 16)
    except MQClientError:
        return _STORE_HOST
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class TraceType(enum.Enum):
    """`TraceType`: the kind of a trace record (the names are the encoded text)."""

    Pub = "Pub"
    Recall = "Recall"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """`MessageType` of RocketMQ's common module; records carry its ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3
    Order_Msg = 4


class ConsumeReturnType(enum.IntEnum):
    """`ConsumeReturnType`: how a listener call ended; a SubAfter record carries its ordinal."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


# TraceBean and TraceContext are built on every traced send: not frozen, since a frozen dataclass
# took eight times as long to build (measured, 12 fields). Treat them as values all the same.
@dataclass(slots=True)
class TraceBean:
    """One traced message in a record (`TraceBean`). `tags`, `keys`, `transaction_id`: None when absent."""

    msg_id: str
    topic: str = ""
    tags: str | None = None
    keys: str | None = None
    offset_msg_id: str = ""
    store_host: str = ""
    body_length: int = 0
    retry_times: int = 0
    msg_type: MessageType = MessageType.Normal_Msg
    transaction_id: str | None = None
    transaction_state: str = ""
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    """One trace record (`TraceContext`): what happened, when (epoch ms), by which group, to which messages."""

    trace_type: TraceType
    time_stamp: int
    group_name: str
    beans: tuple[TraceBean, ...]
    region_id: str = DEFAULT_REGION_ID
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0


# -- the codec (TraceDataEncoder) --------------------------------------------------------------------------------
# One function per hot record type, called with plain values by the hooks and by encode_trace_context,
# so the field order lives in one place; one f-string each (measured: a helper call per field made the
# encoding about three times slower).
def _pub_line(time_stamp: int, region_id: str, group: str, topic: str, msg_id: str, tags: str | None,
              keys: str | None, store_host: str, body_length: int, cost_time: int, msg_type: int,
              offset_msg_id: str, success: bool) -> str:
    c = CONTENT_SPLITOR
    return (f"Pub{c}{time_stamp}{c}{region_id}{c}{group}{c}{topic}{c}{msg_id}{c}{_NULL if tags is None else tags}"
            f"{c}{_NULL if keys is None else keys}{c}{store_host}{c}{body_length}{c}{cost_time}{c}{msg_type}{c}"
            f"{offset_msg_id}{c}{'true' if success else 'false'}{FIELD_SPLITOR}")


def _sub_before_line(time_stamp: int, region_id: str, group: str, request_id: str, msg_id: str, retry_times: int,
                     keys: str | None) -> str:
    c = CONTENT_SPLITOR
    return (f"SubBefore{c}{time_stamp}{c}{region_id}{c}{group}{c}{request_id}{c}{msg_id}{c}{retry_times}{c}"
            f"{_NULL if keys is None else keys}{FIELD_SPLITOR}")


def _sub_after_line(request_id: str, msg_id: str, cost_time: int, success: bool, keys: str | None,
                    context_code: int, time_stamp: int, group: str) -> str:
    # As a LOCAL (not CLOUD) client writes it: with the time stamp and the group at the end.
    c = CONTENT_SPLITOR
    return (f"SubAfter{c}{request_id}{c}{msg_id}{c}{cost_time}{c}{'true' if success else 'false'}{c}"
            f"{_NULL if keys is None else keys}{c}{context_code}{c}{time_stamp}{c}{group}{FIELD_SPLITOR}")


def encode_trace_context(ctx: TraceContext) -> str:
    """`TraceDataEncoder.encoderFromContextBean`'s text: one line per bean (Pub and EndTransaction: the first)."""
    kind = ctx.trace_type
    beans = ctx.beans
    if kind is TraceType.Pub:
        b = beans[0]
        return _pub_line(ctx.time_stamp, ctx.region_id, ctx.group_name, b.topic, b.msg_id, b.tags, b.keys,
                         b.store_host, b.body_length, ctx.cost_time, b.msg_type.value, b.offset_msg_id, ctx.success)
    if kind is TraceType.SubBefore:
        return "".join(_sub_before_line(ctx.time_stamp, ctx.region_id, ctx.group_name, ctx.request_id, b.msg_id,
                                        b.retry_times, b.keys) for b in beans)
    if kind is TraceType.SubAfter:
        return "".join(_sub_after_line(ctx.request_id, b.msg_id, ctx.cost_time, ctx.success, b.keys,
                                       ctx.context_code, ctx.time_stamp, ctx.group_name) for b in beans)
    c = CONTENT_SPLITOR
    b = beans[0]
    head = f"{kind.value}{c}{ctx.time_stamp}{c}{ctx.region_id}{c}{ctx.group_name}{c}{b.topic}{c}{b.msg_id}{c}"
    if kind is TraceType.EndTransaction:
        return (f"{head}{_NULL if b.tags is None else b.tags}{c}{_NULL if b.keys is None else b.keys}{c}"
                f"{b.store_host}{c}{b.msg_type.value}{c}{_NULL if b.transaction_id is None else b.transaction_id}{c}"
                f"{b.transaction_state}{c}{'true' if b.from_transaction_check else 'false'}{FIELD_SPLITOR}")
    return f"{head}{'true' if ctx.success else 'false'}{FIELD_SPLITOR}"  # Recall


def _keys_of(msg_id: str, keys: str | None) -> list[str]:
    """One bean's index keys: its msg id, then each of its space-separated keys."""
    return [msg_id, *filter(None, keys.split(" "))] if keys else [msg_id]


def trace_keys(ctx: TraceContext) -> list[str]:
    """The index keys of a record (`TraceTransferBean.transKey`): each bean's msg id, then its keys."""
    if len(ctx.beans) == 1:
        return _keys_of(ctx.beans[0].msg_id, ctx.beans[0].keys)
    return list(dict.fromkeys(itertools.chain.from_iterable(_keys_of(b.msg_id, b.keys) for b in ctx.beans)))


#: A record ready to store, RocketMQ's `TraceTransferBean` plus the traced topic: (topic, text, index keys).
TraceRecord = tuple[str, str, list[str]]


def trace_record(ctx: TraceContext) -> TraceRecord:
    """`ctx` encoded for `TraceDispatcher.append` (it must have a bean)."""
    return ctx.beans[0].topic, encode_trace_context(ctx), trace_keys(ctx)


def _java_split(text: str, separator: str) -> list[str]:
    """`String.split(separator)`: trailing empty strings are dropped."""
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _nullable(text: str) -> str | None:
    return None if text == _NULL else text


def _java_bool(text: str) -> bool:
    return text.lower() == "true"  # Boolean.parseBoolean


def _decode_line(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == "Pub":
        success = _java_bool(line[12]) if len(line) == 13 else _java_bool(line[13]) if len(line) >= 14 else True
        bean = TraceBean(line[5], line[4], _nullable(line[6]), _nullable(line[7]),
                         line[12] if len(line) >= 14 else "", line[8], int(line[9]),
                         msg_type=MessageType(int(line[11])))
        return TraceContext(TraceType.Pub, int(line[1]), line[3], (bean,), line[2], int(line[10]), success)
    if kind == "SubBefore":
        bean = TraceBean(line[5], keys=_nullable(line[7]), retry_times=int(line[6]))
        return TraceContext(TraceType.SubBefore, int(line[1]), line[3], (bean,), line[2], request_id=line[4])
    if kind == "SubAfter":
        bean = TraceBean(line[2], keys=_nullable(line[5]))
        code = int(line[6]) if len(line) >= 7 else 0
        stamp, group = (int(line[7]), line[8]) if len(line) >= 9 else (0, "")  # a CLOUD client leaves them out
        return TraceContext(TraceType.SubAfter, stamp, group, (bean,), "", int(line[3]), _java_bool(line[4]),
                            line[1], code)
    if kind == "EndTransaction":
        bean = TraceBean(line[5], line[4], _nullable(line[6]), _nullable(line[7]), store_host=line[8],
                         msg_type=MessageType(int(line[9])), transaction_id=_nullable(line[10]),
                         transaction_state=line[11], from_transaction_check=_java_bool(line[12]))
        return TraceContext(TraceType.EndTransaction, int(line[1]), line[3], (bean,), line[2])
    if kind == "Recall":
        bean = TraceBean(line[5], line[4])
        return TraceContext(TraceType.Recall, int(line[1]), line[3], (bean,), line[2], success=_java_bool(line[6]))
    return None


def decode_trace_data(text: str) -> list[TraceContext]:
    """`TraceDataEncoder.decoderFromTraceDataString`: the records of a trace message's body, one bean each.

    Lines of an unknown type are skipped, as RocketMQ skips them; a damaged
    line is skipped too (RocketMQ's decoder would throw) and logged.
    """
    contexts = []
    for record in _java_split(text, FIELD_SPLITOR):
        line = _java_split(record, CONTENT_SPLITOR)
        try:
            ctx = _decode_line(line) if line else None
        except (IndexError, ValueError):
            log.warning("skipping a damaged trace record: %r", record[:200])
            continue
        if ctx is not None:
            contexts.append(ctx)
    return contexts


def message_type_of(properties: Mapping[str, str], added: Mapping[str, str] | None = None) -> MessageType:
    """What `sendKernelImpl` tells the send hook: a delayed message, a half one, or a normal one.

    `added`: what the send adds to the message's properties (a half message's TRAN_MSG).
    """
    if not _DELAY_PROPERTIES.isdisjoint(properties):
        return MessageType.Delay_Msg
    if properties.get(PROPERTY_TRANSACTION_PREPARED) == "true" or (
            added and added.get(PROPERTY_TRANSACTION_PREPARED) == "true"):
        return MessageType.Trans_Msg_Half
    return MessageType.Normal_Msg


# -- batching (AsyncTraceDispatcher) ------------------------------------------------------------------------------
def pack_trace_messages(records: Sequence[TraceRecord], *, batch_num: int = TRACE_BATCH_NUM,
                        max_body: int = TRACE_MAX_MSG_SIZE) -> list[tuple[bytes, dict[str, str]]]:
    """The trace messages for `records`: (body, properties) pairs, as `AsyncDataSendTask` builds them.

    Each message holds up to `batch_num` records of one traced topic: their
    text, and in KEYS their index keys. RocketMQ cuts the records into groups
    of `batch_num` in arrival order and then splits each group by topic; here
    the records of each topic are ordered by message id first, so a message's
    records (a SubBefore and its SubAfter) share a trace message and its
    index key is written once instead of twice. A message is closed before
    its body passes `max_body` bytes or its KEYS about 16,000 characters (a
    single larger record goes alone).
    """
    messages: list[tuple[bytes, dict[str, str]]] = []
    by_topic: dict[str, list[TraceRecord]] = {}
    for record in records:
        by_topic.setdefault(record[0], []).append(record)
    for records_of_topic in by_topic.values():
        records_of_topic.sort(key=_first_key)  # stable: a message's records keep their order
        for start in range(0, len(records_of_topic), batch_num):
            group = records_of_topic[start:start + batch_num]
            # The usual group fits one message: joined with C-level passes; the record-by-record
            # loop that checks the limits is only for the rare group that does not fit.
            body = "".join([record[1] for record in group]).encode("utf-8")
            keys = dict.fromkeys(itertools.chain.from_iterable([record[2] for record in group]))
            if len(body) <= max_body and sum(map(len, keys)) + len(keys) <= _MAX_KEYS_CHARS:
                messages.append(_trace_message([body], keys))
            else:
                messages.extend(_split_group(group, max_body))
    return messages


def _first_key(record: TraceRecord) -> str:
    return record[2][0]  # the first bean's msg id


def _split_group(group: list[TraceRecord], max_body: int) -> list[tuple[bytes, dict[str, str]]]:
    """Trace messages for records of one topic too big for one: each closed before a limit is passed."""
    messages = []
    lines: list[bytes] = []
    keys: dict[str, None] = {}
    size = keys_chars = 0
    for _, text, more in group:
        line = text.encode("utf-8")
        chars = sum(map(len, more)) + len(more)  # counts a repeated key twice: a bound is enough
        if lines and (size + len(line) > max_body or keys_chars + chars > _MAX_KEYS_CHARS):
            messages.append(_trace_message(lines, keys))
            lines, keys, size, keys_chars = [], {}, 0, 0
        lines.append(line)
        size += len(line)
        keys.update(dict.fromkeys(more))
        keys_chars += chars
    messages.append(_trace_message(lines, keys))
    return messages


def _trace_message(lines: list[bytes], keys: dict[str, None]) -> tuple[bytes, dict[str, str]]:
    text = " ".join(keys)
    if len(text) > _MAX_KEYS_CHARS:  # one record with huge user keys: keep its msg id, which comes first
        text = text[:_MAX_KEYS_CHARS].rsplit(" ", 1)[0]
    properties = {PROPERTY_KEYS: text, PROPERTY_WAIT_STORE_MSG_OK: "true",
                  PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: _ID_GENERATOR.next_id()}
    return b"".join(lines), properties


PutTraceMessages = Callable[[list[bytes], list[dict[str, str]]], object]


class TraceDispatcher(Service):
    """The thread storing one client's trace records (`AsyncTraceDispatcher`), `mqlite-trace-<group>`.

    `append` is what the traced paths call, with records they encoded (so the
    work is shared by the client threads, and this thread only joins and
    stores): a deque append, and a wake-up only when `wake_at` records wait
    and the thread sleeps. A round packs what was pending when it started
    into trace messages of `batch_num` records and stores them with batch
    puts (one lock each); it runs once `wake_at` records wait, after
    `flush_interval` seconds, or when `flush()` asks. The owner `start()`s it
    and `stop()`s it on shutdown, which stores what is pending and joins the
    thread; records appended after that are dropped (counted in `discarded`).

    A full queue makes the appending thread store a chunk itself. RocketMQ
    drops the record instead; under the GIL, busy client threads (twenty
    consume threads) can starve this one thread so long that many records
    would be lost, so mqlite slows the client instead (measured: a traced
    backlog drain with drops lost a third to a half of its records).
    """

    def __init__(self, group: str, put: PutTraceMessages, *, batch_num: int = TRACE_BATCH_NUM,
                 max_body: int = TRACE_MAX_MSG_SIZE, max_batch_bytes: int = 1 << 20,
                 capacity: int = TRACE_QUEUE_CAPACITY, flush_interval: float = FLUSH_TRACE_INTERVAL,
                 wake_at: int = TRACE_WAKE_AT) -> None:
        super().__init__(f"trace-{group}", flush_interval)
        self._put = put
        self._batch_num = max(1, min(batch_num, 20))  # AsyncTraceDispatcher: "max value 20"
        self._max_body = max_body
        self._max_batch_bytes = max_batch_bytes
        self._capacity = max(1, capacity)
        self._wake_at = max(1, min(wake_at, self._capacity))
        self._wake_sent = False  # a wake-up is on its way: later appends need not send another
        self._pending: collections.deque[TraceRecord] = collections.deque()
        # One storer at a time (this thread, or a client thread that found the queue full), so a
        # round that ends with the queue empty ends after every record taken before it is stored.
        self._store_lock = threading.Lock()
        self._rounds = threading.Condition()  # guards the round counters and _closed
        self._started_rounds = 0
        self._finished_rounds = 0
        self._flush_requested = False
        self._closed = False
        #: Records dropped because they came after `stop()`.
        self.discarded = 0

    def append(self, record: TraceRecord) -> bool:
        """Queue an encoded record (`trace_record`) for storing; False (and counted) once stopped. Any thread.

        No I/O unless the queue is full: then this thread stores `wake_at` records first.
        """
        if self._closed:
            self.discarded += 1  # a statistic: a lost increment under a race does no harm
            if self.discarded == 1:
                log.warning("%s: trace records after shutdown are dropped", self.name)
            return False
        pending = self._pending
        pending.append(record)
        if len(pending) >= self._wake_at:
            if len(pending) >= self._capacity:
                self._store_chunk(self._wake_at)
            elif self.idle and not self._wake_sent:
                self._wake_sent = True
                self.wakeup()
        return True

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until every record appended before the call is stored; False on timeout.

        Returns at once when the thread is not running (a stopped dispatcher stored everything).
        """
        with self._rounds:
            target = self._started_rounds + 1  # the next round starts after this call: it takes them all
            self._flush_requested = True
        self.wakeup()
        with self._rounds:
            return self._rounds.wait_for(
                lambda: self._finished_rounds >= target or self._closed or not self.is_alive, timeout)

    @property
    def pending(self) -> int:
        """Records waiting to be stored."""
        return len(self._pending)

    def has_work(self) -> bool:
        return self._flush_requested or len(self._pending) >= self._wake_at

    def run_once(self) -> None:
        with self._rounds:
            self._started_rounds += 1
            self._flush_requested = False
            self._wake_sent = False
        try:
            # What is pending now, not what arrives meanwhile: chasing a busy client would store
            # a few records at a time (measured: hundreds of tiny puts, twice the cost).
            left = len(self._pending)
            while left > 0 and self._store_chunk(min(left, _CHUNK_RECORDS)):
                left -= _CHUNK_RECORDS
            with self._store_lock:  # a client thread still storing records it took earlier finishes first
                pass
        finally:
            with self._rounds:
                self._finished_rounds += 1
                self._rounds.notify_all()

    def on_stop(self) -> None:
        try:
            while self._store_chunk(_CHUNK_RECORDS):  # everything, to the last record
                pass
        finally:
            with self._rounds:
                self._closed = True
                self._rounds.notify_all()

    def _store_chunk(self, limit: int) -> bool:
        """Store up to `limit` pending records; False when there were none."""
        with self._store_lock:
            pending = self._pending
            if not pending:
                return False
            records = [pending.popleft() for _ in range(min(len(pending), limit))]
            messages = pack_trace_messages(records, batch_num=self._batch_num, max_body=self._max_body)
            start = 0
            while start < len(messages):  # batch puts, each small enough for one commit-log segment
                end, size = start + 1, len(messages[start][0])
                while end < len(messages) and size + len(messages[end][0]) <= self._max_batch_bytes:
                    size += len(messages[end][0])
                    end += 1
                chunk = messages[start:end]
                try:
                    self._put([body for body, _ in chunk], [properties for _, properties in chunk])
                except Exception:
                    log.exception("%s: storing %d trace messages failed; their records are lost", self.name,
                                  len(chunk))
                start = end
            return True


# -- the hooks the clients call ---------------------------------------------------------------------------------
class SendContext(Protocol):
    """What `ProducerTracer` reads of a producer's `SendMessageContext`."""

    producer_group: str
    message: Message
    send_result: Any
    props: dict[str, str]
    mq_trace_context: Any


class ProducerTracer:
    """A traced producer's hooks (`SendMessageTraceHookImpl`, `EndTransactionTraceHookImpl`); owns its dispatcher.

    `before_send` notes the time; `after_send` records a Pub for a completed
    send (a send that raised records nothing, as RocketMQ). A batch records
    one Pub per message id, with no tags, keys or body length (the hook sees
    the first message only); RocketMQ records one Pub under the joined ids.
    """

    def __init__(self, dispatcher: TraceDispatcher, now_ms: Callable[[], int]) -> None:
        self.dispatcher = dispatcher
        self._now_ms = now_ms

    def start(self) -> None:
        """Start the dispatcher thread."""
        self.dispatcher.start()

    def stop(self) -> None:
        """Store what is pending and join the dispatcher thread."""
        self.dispatcher.stop()

    def before_send(self, context: SendContext) -> None:
        """Send hook, before the put: the trace's time stamp."""
        context.mq_trace_context = self._now_ms()

    def after_send(self, context: SendContext) -> None:
        """Send hook, after the put: a Pub record with the cost, status, store host and offset id."""
        result, started = context.send_result, context.mq_trace_context
        if result is None or started is None:
            return
        msg = context.message
        properties = msg.properties
        msg_type = message_type_of(properties, context.props).value
        cost = self._now_ms() - started
        success = result.send_status.name == "SEND_OK"
        region = result.region_id or DEFAULT_REGION_ID
        group, topic, msg_id = context.producer_group, msg.topic, result.msg_id
        append = self.dispatcher.append
        host = _store_host_of(result.offset_msg_id.partition(",")[0])
        if "," not in msg_id:
            keys = properties.get(PROPERTY_KEYS) or None
            append((topic, _pub_line(started, region, group, topic, msg_id, properties.get(PROPERTY_TAGS), keys,
                                     host, len(msg.body), cost, msg_type, result.offset_msg_id, success),
                    _keys_of(msg_id, keys)))
            return
        for one, offset_id in zip(msg_id.split(","), result.offset_msg_id.split(",")):
            append((topic, _pub_line(started, region, group, topic, one, None, None, host, 0, cost, msg_type,
                                     offset_id, success), [one]))

    def end_transaction(self, group: str, msg: Message, msg_id: str, state: str, *, from_check: bool,
                        offset_msg_id: str) -> None:
        """An EndTransaction record: the local transaction's (or a check-back's) answer, UNKNOW included;
        `offset_msg_id` is the half message's (it names the broker).

        Never raises: a tracing failure is logged and the transaction goes on.
        """
        try:
            properties = msg.properties
            bean = TraceBean(msg_id, msg.topic, properties.get(PROPERTY_TAGS), properties.get(PROPERTY_KEYS) or None,
                             store_host=_store_host_of(offset_msg_id), msg_type=MessageType.Trans_msg_Commit,
                             transaction_id=msg.transaction_id, transaction_state=state,
                             from_transaction_check=from_check)
            region = properties.get(_PROPERTY_MSG_REGION) or DEFAULT_REGION_ID
            self.dispatcher.append(trace_record(TraceContext(TraceType.EndTransaction, self._now_ms(), group,
                                                             (bean,), region)))
        except Exception:
            log.exception("%s: recording EndTransaction of %s failed", group, msg_id)


class ConsumeTrace:
    """A listener call in progress (its SubBefore is recorded); set `raised` when the listener raised."""

    __slots__ = ("tracer", "time_stamp", "request_id", "topic", "beans", "keys", "count", "raised")

    def __init__(self, tracer: ConsumerTracer, time_stamp: int, request_id: str, topic: str,
                 beans: list[tuple[str, str | None]], keys: list[str], count: int) -> None:
        self.tracer = tracer
        self.time_stamp = time_stamp
        self.request_id = request_id
        self.topic = topic
        self.beans = beans  # (msg id, keys) of each traced message
        self.keys = keys
        self.count = count
        self.raised = False

    def done(self, *, success: bool, timeout: float = float("inf")) -> None:
        """The call returned: record its SubAfter (`ConsumerTracer.after`)."""
        self.tracer.after(self, success=success, timeout=timeout)


class ConsumerTracer:
    """A traced consumer's hooks (`ConsumeMessageTraceHookImpl`); owns its dispatcher.

    `before`/`after` wrap each listener call (SubBefore, SubAfter); `polled`
    records a lite-pull consumer's hand-out (both at once, a success, as
    RocketMQ's `DefaultLitePullConsumerImpl.poll`); `sent_back` records the
    retry or dead-letter copy of a failed message (mqlite's Pub, see the module docstring).
    """

    def __init__(self, dispatcher: TraceDispatcher, group: str, now_ms: Callable[[], int],
                 look: Callable[[str], MessageExt]) -> None:
        self.dispatcher = dispatcher
        self.group = group
        self._now_ms = now_ms
        self._look = look

    def start(self) -> None:
        """Start the dispatcher thread."""
        self.dispatcher.start()

    def stop(self) -> None:
        """Store what is pending and join the dispatcher thread."""
        self.dispatcher.stop()

    def before(self, msgs: Sequence[MessageExt]) -> ConsumeTrace | None:
        """SubBefore for the messages handed to the listener (those not marked TRACE_ON=false).

        Never raises, like every hook here: a tracing failure is logged and consumption goes on
        (RocketMQ's `executeHookBefore` catches its hooks' exceptions too).
        """
        try:
            return self._before(msgs)
        except Exception:
            log.exception("%s: recording SubBefore failed", self.group)
            return None

    def _before(self, msgs: Sequence[MessageExt]) -> ConsumeTrace | None:
        traced = [m for m in msgs if m.properties.get(_PROPERTY_TRACE_SWITCH) != "false"]
        if not traced:
            return None
        now, request_id, group = self._now_ms(), _ID_GENERATOR.next_id(), self.group
        first = traced[0]
        region = first.properties.get(_PROPERTY_MSG_REGION) or DEFAULT_REGION_ID
        beans = [(m.msg_id, m.properties.get(PROPERTY_KEYS) or None) for m in traced]
        text = "".join([_sub_before_line(now, region, group, request_id, msg_id, m.reconsume_times, keys)
                        for (msg_id, keys), m in zip(beans, traced)])
        keys = (_keys_of(*beans[0]) if len(beans) == 1
                else list(dict.fromkeys(itertools.chain.from_iterable(_keys_of(*b) for b in beans))))
        self.dispatcher.append((first.topic, text, keys))
        return ConsumeTrace(self, now, request_id, first.topic, beans, keys, len(msgs))

    def after(self, trace: ConsumeTrace, *, success: bool, timeout: float = float("inf")) -> None:
        """SubAfter: success flag, cost per message, and how the call ended (`ConsumeReturnType`).

        A listener returning None counts as SUCCESS, since mqlite treats None as success
        (RocketMQ records RETURNNULL and reconsumes).
        """
        try:
            self._after(trace, success, timeout)
        except Exception:
            log.exception("%s: recording SubAfter failed", self.group)

    def _after(self, trace: ConsumeTrace, success: bool, timeout: float) -> None:
        now = self._now_ms()
        elapsed = now - trace.time_stamp
        if trace.raised:
            code = ConsumeReturnType.EXCEPTION
        elif elapsed >= timeout * 1000:
            code = ConsumeReturnType.TIME_OUT
        else:
            code = ConsumeReturnType.SUCCESS if success else ConsumeReturnType.FAILED
        cost, request_id, group = elapsed // trace.count, trace.request_id, self.group
        text = "".join([_sub_after_line(request_id, msg_id, cost, success, keys, code.value, now, group)
                        for msg_id, keys in trace.beans])
        self.dispatcher.append((trace.topic, text, trace.keys))

    def polled(self, msgs: Sequence[MessageExt]) -> None:
        """A lite-pull `poll()` handed `msgs` out: SubBefore and a successful SubAfter."""
        trace = self.before(msgs)
        if trace is not None:
            self.after(trace, success=True)

    def sent_back(self, msg: MessageExt, put: PutResult, started: int) -> None:
        """`msg` failed and its copy was stored by `Broker.send_message_back` (`put`), `started` ms ago."""
        try:
            stored_topic = self._look(put.offset_msg_id).topic  # where the broker sent it: retry or DLQ
            to_dlq = is_dlq_topic(stored_topic)
            topic = stored_topic if to_dlq else retry_topic(self.group)
            properties = msg.properties
            keys = properties.get(PROPERTY_KEYS) or None
            msg_type = MessageType.Normal_Msg if to_dlq else MessageType.Delay_Msg
            text = _pub_line(started, DEFAULT_REGION_ID, self.group, topic, msg.msg_id,
                             properties.get(PROPERTY_TAGS), keys, _store_host_of(put.offset_msg_id), len(msg.body),
                             self._now_ms() - started, msg_type.value, put.offset_msg_id, True)
            self.dispatcher.append((topic, text, _keys_of(msg.msg_id, keys)))
        except Exception:
            log.exception("%s: recording the retry copy of %s failed", self.group, msg.msg_id)

    def now_ms(self) -> int:
        """The clock the records are stamped with (epoch ms)."""
        return self._now_ms()
