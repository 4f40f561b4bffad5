"""Producers: RocketMQ's `DefaultMQProducer` in-process.

`send` (sync), `send_async` (a `concurrent.futures.Future`), `send_oneway`,
queue selectors, `send_orderly` by sharding key, `send_batch`, body
compression over 4 KiB (zlib, level 5, as the Java client), send hooks, and
RocketMQ's client `Validators` before anything is stored.

>>> import mqlite, tempfile
>>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
...     with Producer(broker, group="pg") as producer:
...         result = producer.send(mqlite.Message("orders", b"hello", tags="TagA"))
...     result.send_status.name, result.queue_offset
('SEND_OK', 0)
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import logging
import operator
import os
import random
import threading
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from time import time_ns as _time_ns
from typing import Any, Protocol, Self, cast

from .broker import acquire, check_broker_target
from .clock import SYSTEM_CLOCK, SystemClock
from .commitlog import PutMessageStatus, PutResult
from .durablesends import DurableSends
from .config import JAVA_INT_MAX, MAX_MESSAGE_SIZE_LIMIT, check_int, check_seconds
from .errors import DiskFullError, IllegalStateError, MQClientError
from .message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_SEPARATOR,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    EncodedProperties,
    Message,
    MessageExt,
    MessageQueue,
    SysFlag,
    UniqIdGenerator,
    encode_properties,
    java_string_hash,
)
from .port import BrokerPort
from .record import EncodedBatchProperties
from .validators import check_group, validate_message
from .trace import ProducerTracer

__all__ = [
    "Producer",
    "SendResult",
    "SendStatus",
    "SendMessageContext",
    "MessageQueueSelector",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "COMPRESS_MSG_BODY_OVER_HOWMUCH",
    "DEFAULT_PRODUCER_GROUP",
    "TransactionProducer",
    "TransactionSendResult",
    "LocalTransactionState",
    "TransactionListener",
]

log = logging.getLogger("mqlite")

COMPRESS_MSG_BODY_OVER_HOWMUCH = 4096  # DefaultMQProducer.compressMsgBodyOverHowmuch
#: The producer group of a producer given none (`MixAll.DEFAULT_PRODUCER_GROUP`).
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
_COMPRESS_LEVEL = 5  # compressLevel default
_RETRY_PREFIX = "%RETRY%"
_ID_GENERATOR = UniqIdGenerator()  # one per process, as MessageClientIDSetter
_MAX_CACHED_HEADS = 256  # distinct property maps a producer keeps the encoding of
#: Properties the broker routes to the schedule or timer topic (the plain send leaves them to the full path).
_DELAY_PROPERTIES = frozenset({PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS,
                               PROPERTY_TIMER_DELAY_SEC})
_UNIQ_KEY_PREFIX = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}{NAME_VALUE_SEPARATOR}".encode()
_PROPERTY_END = PROPERTY_SEPARATOR.encode()
_PROPERTIES_OF = operator.attrgetter("properties")
_BODY_OF = operator.attrgetter("body")
_TOPIC_OF = operator.attrgetter("topic")
_FLAG_OF = operator.attrgetter("flag")
_HEAD_OF = operator.itemgetter(0)
_INT32_MIN, _INT32_MAX = -JAVA_INT_MAX - 1, JAVA_INT_MAX
_CHARS_OF = operator.itemgetter(1)


class SendStatus(Enum):
    """`SendStatus` of RocketMQ's client."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS = {PutMessageStatus.PUT_OK: SendStatus.SEND_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT}
_PUT_OK = PutMessageStatus.PUT_OK
_SEND_OK = SendStatus.SEND_OK


class SendResult:
    """What a send returns (`SendResult`). For a batch, ids are comma-joined and `queue_offset` is the first.

    `offset_msg_id` is computed on first access (most senders never read it).
    """

    __slots__ = ("send_status", "msg_id", "message_queue", "queue_offset", "transaction_id", "region_id",
                 "_put", "_offset_msg_id")

    def __init__(self, send_status: SendStatus, msg_id: str, message_queue: MessageQueue, queue_offset: int,
                 put: PutResult | str, transaction_id: str | None = None) -> None:
        self.send_status = send_status
        self.msg_id = msg_id
        self.message_queue = message_queue
        self.queue_offset = queue_offset
        self.transaction_id = transaction_id
        self.region_id = "DefaultRegion"
        self._put = put
        self._offset_msg_id: str | None = put if isinstance(put, str) else None

    @property
    def offset_msg_id(self) -> str:
        """The store's id(s): host, port and commit-log offset (comma-joined for a batch)."""
        if self._offset_msg_id is None:
            self._offset_msg_id = self._put.offset_msg_id  # type: ignore[union-attr]
        return self._offset_msg_id

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(send_status={self.send_status.name}, msg_id={self.msg_id!r}, "
                f"message_queue={self.message_queue}, queue_offset={self.queue_offset})")


MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def _java_hash_of(arg: Any) -> int:
    """`arg.hashCode()` as Java would compute it for the common argument types."""
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        value = arg & 0xFFFFFFFFFFFFFFFF
        if -(2**31) <= arg < 2**31:
            return arg  # Integer.hashCode
        folded = (value ^ (value >> 32)) & 0xFFFFFFFF  # Long.hashCode
        return folded - (1 << 32) if folded & 0x80000000 else folded
    if isinstance(arg, str):
        return java_string_hash(arg)
    return hash(arg)


class SelectMessageQueueByHash:
    """`SelectMessageQueueByHash`: `abs(arg.hashCode() % n)` with Java's remainder."""

    def __call__(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        h = _java_hash_of(arg)
        value = abs(h) % len(mqs)  # Java: h % n keeps h's sign; abs() of that equals abs(h) % n
        return mqs[value]

    select = __call__


class SelectMessageQueueByRandom:
    """`SelectMessageQueueByRandom`."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return mqs[self._rng.randrange(len(mqs))]

    select = __call__


@dataclasses.dataclass
class SendMessageContext:
    """What send hooks see (`SendMessageContext`): before the put, and after it with the result or error."""

    producer_group: str
    message: Message
    message_queue: MessageQueue
    communication_mode: str
    send_result: SendResult | None = None
    exception: BaseException | None = None
    props: dict[str, str] = dataclasses.field(default_factory=dict)
    #: What a before hook leaves for its after hook (`mqTraceContext`; the trace hook keeps its start time).
    mq_trace_context: Any = None


SendHook = Callable[[SendMessageContext], None]


class Producer:
    """An in-process `DefaultMQProducer`. Thread-safe: many threads may send at once.

    `broker` is a `Broker`, any other broker port (`mqlite.port.BrokerPort`), or a
    store path (a path shares one broker per directory in this process). Keyword options follow RocketMQ's defaults;
    `send_msg_timeout` bounds `send_async(...).result()` waits you do not time yourself.
    `trace=True` records each send in `RMQ_SYS_TRACE_TOPIC` (`mqlite.trace`; see `Broker.query_trace`).
    """

    def __init__(self, broker: BrokerPort | str | os.PathLike[str], group: str = DEFAULT_PRODUCER_GROUP, *,
                 send_msg_timeout: float = 3.0, compress_msg_body_over_howmuch: int = COMPRESS_MSG_BODY_OVER_HOWMUCH,
                 default_topic_queue_nums: int = 4, async_thread_nums: int = 4,
                 max_message_size: int | None = None, trace: bool = False) -> None:
        check_group(group, "producer group")
        if not isinstance(trace, bool):
            raise MQClientError(f"trace must be True or False, got {trace!r}")
        check_seconds("send_msg_timeout", send_msg_timeout, positive=True)
        check_int("compress_msg_body_over_howmuch", compress_msg_body_over_howmuch, 0, MAX_MESSAGE_SIZE_LIMIT)
        check_int("default_topic_queue_nums", default_topic_queue_nums, 1, 1024)
        check_int("async_thread_nums", async_thread_nums, 1, 1024)
        if max_message_size is not None:
            check_int("max_message_size", max_message_size, 1, MAX_MESSAGE_SIZE_LIMIT)
        check_broker_target(broker)
        self.group = group
        self.send_msg_timeout = send_msg_timeout
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.default_topic_queue_nums = default_topic_queue_nums
        self._target = broker
        self._broker: BrokerPort | None = None
        self._max_message_size = max_message_size
        self._async_thread_nums = async_thread_nums
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._state = "CREATED"
        self._state_lock = threading.Lock()
        self._round_robin = itertools.count(random.randrange(1 << 16))
        self._queues: dict[str, tuple[int, list[MessageQueue]]] = {}  # topic -> (table version, queues)
        self._checked_topics: set[str] = set()
        self._before_hooks: list[SendHook] = []
        self._after_hooks: list[SendHook] = []
        self._hooked = False  # any hook registered: every send takes the full path
        # The plain send (see `send`): valid property maps seen before -> (encoding, characters).
        self._plain_heads: dict[tuple[tuple[str, str], ...], tuple[bytes, int]] = {}
        self._body_limit = 0  # max_message_size once started; 0 keeps every send on the full path
        self._now_ms: Callable[[], int] = SYSTEM_CLOCK.now_ms  # the broker's clock once started
        self._system_clock = True  # `_now_ms` is SystemClock's: the plain send reads time_ns itself
        self._trace = trace
        self._tracer: ProducerTracer | None = None  # with trace=True, from start() to shutdown()
        self._durable: DurableSends | None = None  # send_async's pipeline under SYNC_FLUSH (a local store)
        self._pool_pending = 0  # tasks on the send pool while a pipeline exists (send_async keeps FIFO with them)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the producer: attach to the broker and register the group."""
        with self._state_lock:
            if self._state != "CREATED":
                raise IllegalStateError(f"producer {self.group!r} is {self._state.lower()}; create a new one")
            broker = self._broker = acquire(self._target)
            try:
                self._now_ms = broker.clock.now_ms
                self._system_clock = type(broker.clock) is SystemClock
                if self._trace:  # before joining: a broker that cannot store traces refuses here
                    self._tracer = ProducerTracer(broker.trace_dispatcher(self.group), self._now_ms)
                    self._tracer.start()
                    self.add_send_hook(self._tracer.before_send, self._tracer.after_send)
                broker.register_producer(self.group, self)
            except BaseException:
                # A refused start leaves nothing behind: no trace thread, no hold on the broker.
                tracer, self._tracer, self._broker = self._tracer, None, None
                if tracer is not None:
                    tracer.stop()
                broker.release()
                raise
            self._body_limit = self._max_message_size or broker.max_message_size
            self._durable = DurableSends.of(broker, self.group, SendStatus.FLUSH_DISK_TIMEOUT)
            self._state = "RUNNING"

    def shutdown(self) -> None:
        """Finish pending async sends, unregister, release the broker. Idempotent."""
        with self._state_lock:
            if self._state == "STOPPING":
                return  # another thread is shutting it down
            if self._state != "RUNNING":
                self._state = "SHUTDOWN"
                return
            # New sends are refused from here on; those already queued still run (draining).
            self._state = "STOPPING"
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        durable, self._durable = self._durable, None
        if durable is not None:
            durable.close()  # every pipelined send is settled (durable or FLUSH_DISK_TIMEOUT)
        with self._state_lock:
            self._state = "SHUTDOWN"
        tracer, self._tracer = self._tracer, None
        if tracer is not None:
            tracer.stop()  # stores the records of every send above and joins its thread
        broker = self._broker
        if broker is not None:
            broker.unregister_producer(self.group, self)
            broker.release()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    @property
    def broker(self) -> BrokerPort:
        """The broker this producer sends to (after `start()`)."""
        return self._running()

    def _running(self, *, queued: bool = False) -> BrokerPort:
        """The broker while the producer runs; `queued` sends (accepted before `shutdown`) may still drain."""
        broker = self._broker
        if (self._state != "RUNNING" and not (queued and self._state == "STOPPING")) or broker is None:
            raise IllegalStateError(f"producer {self.group!r} is not running: call start() first"
                                    if self._state == "CREATED" else f"producer {self.group!r} was shut down")
        return broker

    def check_transaction(self, msg: MessageExt) -> bool:
        """The broker's check-back of a half message: a plain producer has no transaction listener
        to ask, so it answers False and the broker asks another producer of the group."""
        return False

    # -- hooks ------------------------------------------------------------------------------------------------
    def add_send_hook(self, before: SendHook | None = None, after: SendHook | None = None) -> None:
        """Run `before(ctx)` ahead of every send and `after(ctx)` once it completed or failed."""
        for hook in (before, after):
            if hook is not None and not callable(hook):
                raise MQClientError(f"send hooks must be callables taking a SendMessageContext, got {hook!r}")
        if before is not None:
            self._before_hooks.append(before)
        if after is not None:
            self._after_hooks.append(after)
        self._hooked = True

    # -- queues -----------------------------------------------------------------------------------------------
    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The queues of `topic` this producer may send to (created on first use when allowed)."""
        return list(self._queues_of(topic))

    def _queues_of(self, topic: str) -> list[MessageQueue]:
        broker = self._running()
        version = broker.routes_version
        cached = self._queues.get(topic)
        if cached is not None and cached[0] == version:
            return cached[1]  # the topic table has not changed since
        queues = broker.fetch_publish_queues(topic, self.default_topic_queue_nums)
        self._queues[topic] = (broker.routes_version, queues)
        return queues

    def _choose(self, msg: Message, queue: MessageQueue | None, selector: MessageQueueSelector | None,
                arg: Any) -> MessageQueue:
        queues = self._queues_of(msg.topic)
        if queue is not None:
            if not isinstance(queue, MessageQueue) or queue.topic != msg.topic:
                raise MQClientError(f"queue {queue} does not belong to topic {msg.topic!r}")
            if not 0 <= queue.queue_id < len(queues):
                raise MQClientError(f"{queue} does not exist: {msg.topic!r} has queues 0..{len(queues) - 1}")
            return queue
        if selector is not None:
            if not callable(selector):
                raise MQClientError(f"selector must be a callable (queues, msg, arg) -> MessageQueue, got {selector!r}")
            chosen = selector(list(queues), msg, arg)
            if not isinstance(chosen, MessageQueue) or chosen not in queues:
                raise MQClientError(f"the selector returned {chosen!r}, not one of the topic's queues")
            return chosen
        return queues[next(self._round_robin) % len(queues)]

    # -- validation (Validators.checkMessage) -------------------------------------------------------------------------
    def _validate(self, msg: Message) -> None:
        """`validate_message` with this producer's limit; topics that passed are remembered (the plain send's cache)."""
        topics = self._checked_topics
        validate_message(msg, self._max_message_size or self._running().max_message_size, topics)
        if len(topics) < 10_000:
            topics.add(msg.topic)

    # -- sending ------------------------------------------------------------------------------------------------
    def send(self, msg: Message, selector: MessageQueueSelector | None = None, arg: Any = None, *,
             queue: MessageQueue | None = None) -> SendResult:
        """Send and wait until stored (under SYNC_FLUSH: flushed). Raises `MQClientError` on bad input.

        Costs about 10 us of CPU for a small message under ASYNC_FLUSH, index work included
        (docs/benchmarks.md, 5b); the plain send below skips what was checked before.
        """
        if selector is None and queue is None and type(msg) is Message and not self._hooked:
            head = self._plain_head(msg)
            if head is not None:
                return self._send_plain(msg, head)[0]
            return self._send(msg, self._choose(msg, None, None, None), "SYNC")
        self._validate(msg)
        return self._send(msg, self._choose(msg, queue, selector, arg), "SYNC")

    def _plain_head(self, msg: Message) -> bytes | None:
        """For a `Message` sent without hook, selector or queue: the cached encoding of its property
        map when the plain send (`_send_plain`) may take it, else None. Either way `msg` is valid on
        return (raises `MQClientError` if not): a property map validated and encoded before is
        looked up, not checked again (measured in bench/bench_producer.py)."""
        properties, body = msg.properties, msg.body
        cached = self._plain_heads.get(tuple(properties.items()))
        if (cached is not None and type(body) is bytes and 0 < len(body) <= self._body_limit
                and len(body) <= self.compress_msg_body_over_howmuch and msg.topic in self._checked_topics
                and type(msg.flag) is int and _INT32_MIN <= msg.flag <= _INT32_MAX):
            return cached[0]
        self._validate(msg)
        cached = self._learn(msg)
        if cached is not None and type(body) is bytes and len(body) <= self.compress_msg_body_over_howmuch:
            return cached[0]
        return None

    def _learn(self, msg: Message) -> tuple[bytes, int] | None:
        """After `_validate(msg)`: remember its property map's encoding (bytes, characters) when the
        plain send can reuse it: no id yet (a resent message keeps its own) and no delay to route."""
        properties = msg.properties
        if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX in properties or not _DELAY_PROPERTIES.isdisjoint(properties):
            return None
        text = encode_properties(properties)
        # The UNIQ_KEY entry the send adds comes last: its name is kept with the encoding.
        cached = (text.encode("utf-8") + _UNIQ_KEY_PREFIX, len(text))
        if len(self._plain_heads) < _MAX_CACHED_HEADS:  # maps that differ per message (unique KEYS) are not kept
            self._plain_heads[tuple(properties.items())] = cached
        return cached

    def _send_plain(self, msg: Message, head: bytes) -> tuple[SendResult, PutResult]:
        """`_send_put` for a valid message without hooks: round-robin queue, a new id, encoding reused."""
        broker = self._broker
        if self._state != "RUNNING" or broker is None:
            broker = self._running()  # raises
        topic = msg.topic
        cached = self._queues.get(topic)
        queues = cached[1] if cached is not None and cached[0] == broker.routes_version else self._queues_of(topic)
        mq = queues[next(self._round_robin) % len(queues)]
        uniq = _ID_GENERATOR.next_id()
        properties = msg.properties
        properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq  # MessageClientIDSetter.setUniqID
        props = EncodedProperties(properties)  # UNIQ_KEY is the last entry, so it encodes last
        props.encoded = head + uniq.encode() + _PROPERTY_END
        # SystemClock.now_ms inline (a call fewer per send).
        born = _time_ns() // 1_000_000 if self._system_clock else self._now_ms()
        put = broker.put_message(topic, mq.queue_id, msg.body, props, flag=msg.flag, born_timestamp=born)
        return SendResult(_SEND_OK if put.status is _PUT_OK else _STATUS[put.status], uniq, mq, put.queue_offset,
                          put), put

    def send_orderly(self, msg: Message, sharding_key: Any) -> SendResult:
        """Send to the queue the sharding key hashes to, so one key's messages keep their order."""
        return self.send(msg, SelectMessageQueueByHash(), sharding_key)

    def send_async(self, msg: Message, callback: Callable[[concurrent.futures.Future[SendResult]], None] | None = None,
                   selector: MessageQueueSelector | None = None, arg: Any = None, *,
                   queue: MessageQueue | None = None) -> concurrent.futures.Future[SendResult]:
        """Send without waiting; returns a Future. `callback(future)` runs once it completes.

        Bad input raises at once, before anything is queued. Under SYNC_FLUSH on a local store
        (and no send hook) the message is stored on the calling thread and its future completes
        once a group commit made it durable, so many sends in flight share each flush
        (`mqlite.durablesends`); its callbacks then run one at a time, in completion order, on the
        producer's `mqlite-producer-<group>-callbacks` thread (a callback may send again and wait).
        Otherwise the send runs on the producer's pool (`async_thread_nums`), callbacks too.
        A failure after validation (a full disk) is the future's exception either way.
        """
        if callback is not None and not callable(callback):
            raise MQClientError(f"callback must be a callable taking the future, got {callback!r}")
        durable = self._durable
        if durable is not None and (self._hooked or self._pool_pending):
            durable = None  # not while oneway or hooked sends wait on the pool: sends keep their order
        if durable is not None and selector is None and queue is None and type(msg) is Message:
            head = self._plain_head(msg)  # validates
            if head is not None:
                return durable.send(callback, self._send_plain, msg, head)
            mq = self._choose(msg, None, None, None)
        else:
            self._validate(msg)
            mq = self._choose(msg, queue, selector, arg)
        if durable is not None:
            return durable.send(callback, self._send_put, msg, mq, "ASYNC")
        future = self._submit(self._send, msg, mq, "ASYNC", queued=True)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def send_oneway(self, msg: Message, selector: MessageQueueSelector | None = None, arg: Any = None, *,
                    queue: MessageQueue | None = None) -> None:
        """Send without waiting for the result (failures after validation are only logged)."""
        self._validate(msg)
        mq = self._choose(msg, queue, selector, arg)
        self._submit(self._send_quietly, msg, mq)

    def _send_quietly(self, msg: Message, mq: MessageQueue) -> None:
        try:
            self._send(msg, mq, "ONEWAY", queued=True)
        except DiskFullError as exc:
            log.error("oneway send to %s refused: %s", mq, exc)  # an expected fault: no traceback
        except Exception:
            log.exception("oneway send to %s failed", mq)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        self._running()
        with self._state_lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._async_thread_nums, thread_name_prefix=f"mqlite-producer-{self.group}")
            return self._executor

    def _submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Run a send on the pool; with a send_async pipeline, counted until it ends (`_pool_pending`)."""
        pool = self._pool()
        if self._durable is None:
            return pool.submit(fn, *args, **kwargs)
        with self._state_lock:
            self._pool_pending += 1
        future = pool.submit(fn, *args, **kwargs)
        future.add_done_callback(self._pool_task_done)
        return future

    def _pool_task_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._state_lock:
            self._pool_pending -= 1

    def _send(self, msg: Message, mq: MessageQueue, mode: str, *, queued: bool = False) -> SendResult:
        return self._send_put(msg, mq, mode, queued=queued)[0]

    def _send_put(self, msg: Message, mq: MessageQueue, mode: str, *, sys_flag: int = 0,
                  extra: dict[str, str] | None = None, queued: bool = False) -> tuple[SendResult, PutResult]:
        """Send and return the client's result and the store's (which knows the commit-log offset)."""
        broker = self._running(queued=queued)
        properties = msg.properties
        uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq is None:  # MessageClientIDSetter.setUniqID: only when absent
            uniq = properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = _ID_GENERATOR.next_id()
        props = {**properties, **extra} if extra else properties
        body = bytes(msg.body)
        if len(body) > self.compress_msg_body_over_howmuch:
            body = zlib.compress(body, _COMPRESS_LEVEL)
            sys_flag |= SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB_TYPE
        context = self._hooks_before(msg, mq, mode, extra)
        try:
            put = broker.put_message(mq.topic, mq.queue_id, body, props, flag=msg.flag, sys_flag=sys_flag,
                                     born_timestamp=self._now_ms())
        except BaseException as exc:
            self._hooks_after(context, None, exc)
            raise
        result = SendResult(_STATUS[put.status], uniq, mq, put.queue_offset, put)
        self._hooks_after(context, result, None)
        return result, put

    def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic together (`MessageBatch`): one queue, consecutive offsets.

        RocketMQ's batch rules: one topic, no delay level, no retry topic, same
        `WAIT` flag; the encoded batch is limited to `max_message_size`. Bodies are not compressed.
        Messages whose property maps were sent before (checked and encoded then) go down column-wise
        (docs/design.md, "Batch send"): about 2.5 us of CPU a message for 1000 small ones under
        ASYNC_FLUSH, building the `Message`s and the key index included (bench/bench_send_batch.py).
        """
        try:
            msgs = list(msgs)
        except TypeError:
            raise MQClientError(f"send_batch takes a sequence of Message, got {type(msgs).__name__}") from None
        if not msgs:
            raise MQClientError("send_batch needs at least one message")
        first = msgs[0]
        # A before-hook may change a message's properties, which the column-wise path has encoded by
        # then: with one registered, every batch takes the map-by-map path, which encodes after the hooks.
        plain = None if self._before_hooks else self._plain_batch(msgs)
        if plain is None:
            self._check_batch(msgs)
        mq = self._choose(first, queue, None, None)
        properties: Sequence[Mapping[str, str]]
        bodies: list[bytes] | None = None
        flags: list[int] | None = None
        if plain is None:
            missing = [m for m in msgs if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in m.properties]
            for msg, uniq in zip(missing, _ID_GENERATOR.next_ids(len(missing))):
                msg.properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            ids = [m.properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in msgs]
            properties = [m.properties for m in msgs]
        else:  # every message is plain and has no id yet: new ids, cached encodings, column-wise
            heads, maps, bodies, flags = plain
            ids = _ID_GENERATOR.next_ids(len(msgs))
            properties = _batch_columns(heads, maps, ids)
        context = self._hooks_before(first, mq, "SYNC")
        try:
            broker = self._running()
            if bodies is None or flags is None:  # read after the hooks (as ever): they may change them
                bodies = [m.body if type(m.body) is bytes else bytes(m.body) for m in msgs]
                flags = list(map(_FLAG_OF, msgs))
            put: PutResult = broker.put_messages(mq.topic, mq.queue_id, bodies, properties,
                                                 flags=flags if any(flags) else None, born_timestamp=self._now_ms())
        except BaseException as exc:
            self._hooks_after(context, None, exc)
            raise
        result = SendResult(_STATUS[put.status], ",".join(ids), mq, put.queue_offset, put)
        self._hooks_after(context, result, None)
        return result

    def _plain_batch(self, msgs: list[Message]) -> tuple[list[bytes], list[dict[str, str]], list[bytes],
                                                         list[int]] | None:
        """When every message passes the batch rules by cache (valid, same topic and WAIT, no delay,
        no id yet, not too big): the cached encodings of their property maps, the maps, the bodies
        and the flags, as checked; else None.

        Each rule is one C-level pass over the batch (`map`, `set`), not a Python loop.
        """
        if set(map(type, msgs)) != {Message}:
            return None
        first = msgs[0]
        topic = first.topic
        if topic not in self._checked_topics or topic.startswith(_RETRY_PREFIX):
            return None
        maps = list(map(_PROPERTIES_OF, msgs))
        bodies = list(map(_BODY_OF, msgs))
        flags = list(map(_FLAG_OF, msgs))
        if (set(map(_TOPIC_OF, msgs)) != {topic} or set(map(type, maps)) != {dict}
                or set(map(type, bodies)) != {bytes} or not all(bodies)
                or set(map(type, flags)) != {int} or min(flags) < _INT32_MIN or max(flags) > _INT32_MAX):
            return None
        count = len(msgs)
        first_map = maps[0]
        if maps.count(first_map) == count and (len(first_map) < 2 or len(set(map(tuple, maps))) == 1):
            # One property map (equal entries in one order: one encoding), so one look-up and one
            # WAIT: measured 0.14 us a message less than a look-up per map.
            looked_up = [self._plain_heads.get(tuple(first_map.items()))] * count
        elif len(set(map(dict.get, maps, itertools.repeat(PROPERTY_WAIT_STORE_MSG_OK)))) != 1:
            return None
        else:
            looked_up = list(map(self._plain_heads.get, map(tuple, map(dict.items, maps))))
        if None in looked_up:
            return None
        cached = cast(list[tuple[bytes, int]], looked_up)
        size = sum(map(len, bodies)) + sum(map(_CHARS_OF, cached)) + 20 * count
        if size > self._body_limit:
            return None  # _check_batch raises with the size
        return list(map(_HEAD_OF, cached)), maps, bodies, flags

    def _check_batch(self, msgs: list[Message]) -> None:
        """RocketMQ's batch rules, message by message (`_validate` first); raises `MQClientError`."""
        first = msgs[0]
        for msg in msgs:
            self._validate(msg)
            if msg.topic != first.topic:
                raise MQClientError("the topic of the messages in one batch should be the same")
            if msg.delay_time_level > 0:
                raise MQClientError("TimeDelayLevel is not supported for batching")
            if msg.topic.startswith(_RETRY_PREFIX):
                raise MQClientError("Retry Group is not supported for batching")
            if msg.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != first.properties.get(PROPERTY_WAIT_STORE_MSG_OK):
                raise MQClientError("the waitStoreMsgOK of the messages in one batch should be the same")
            if len(self._plain_heads) < _MAX_CACHED_HEADS:
                self._learn(msg)  # the next batch of such messages takes the cached path
        limit = self._max_message_size or self._running().max_message_size
        size = sum(len(m.body) + 20 + sum(len(k) + len(v) + 2 for k, v in m.properties.items()) for m in msgs)
        if size > limit:
            raise MQClientError(f"the batch is about {size} bytes encoded; the limit is {limit}: split it")

    # -- hooks, run outside every lock -------------------------------------------------------------------------
    def _hooks_before(self, msg: Message, mq: MessageQueue, mode: str,
                      props: Mapping[str, str] | None = None) -> SendMessageContext | None:
        if not self._before_hooks and not self._after_hooks:
            return None
        # `props`: what the send adds to the message's properties (a half message's TRAN_MSG).
        context = SendMessageContext(self.group, msg, mq, mode, props=dict(props) if props else {})
        for hook in self._before_hooks:
            try:
                hook(context)
            except Exception:
                log.exception("send hook (before) failed")
        return context

    def _hooks_after(self, context: SendMessageContext | None, result: SendResult | None,
                     exc: BaseException | None) -> None:
        if context is None:
            return
        context.send_result, context.exception = result, exc
        for hook in self._after_hooks:
            try:
                hook(context)
            except Exception:
                log.exception("send hook (after) failed")

    def __repr__(self) -> str:
        return f"<mqlite.Producer group={self.group!r} {self._state.lower()}>"


def _batch_columns(heads: list[bytes], maps: list[dict[str, str]], ids: list[str]) -> EncodedBatchProperties:
    """A plain batch's property maps column-wise (`record.EncodedBatchProperties`): each distinct cached
    encoding once, with a copy of the map it encodes, and each message's new id, also set into its map
    (`MessageClientIDSetter.setUniqID`). C-level passes over the batch (`zip`, `map`), no Python loop:
    the commit log then does Python work per distinct map, not per message."""
    count = len(heads)
    if heads.count(heads[0]) == count:  # one map (most batches): one cached bytes object, C-level compares
        first = {heads[0]: 0}
    else:
        # Each distinct encoding with its first message: a dict keeps a key's first place and
        # last value, so the messages are walked backwards.
        first = dict(zip(reversed(heads), range(count - 1, -1, -1)))
    distinct = list(first)
    head_maps = [dict(maps[i]) for i in first.values()]  # copies, taken before the ids go in
    index = None
    if len(distinct) > 1:
        index = list(map({head: i for i, head in enumerate(distinct)}.__getitem__, heads))
    deque(map(dict.__setitem__, maps, itertools.repeat(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), ids), 0)
    return EncodedBatchProperties(distinct, head_maps, index, ids)


class LocalTransactionState(Enum):
    """What a transaction listener answers (`LocalTransactionState`)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # RocketMQ's spelling


class TransactionListener(Protocol):
    """`TransactionListener`: runs the local transaction and answers check-backs."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction after the half message is stored."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """Answer the broker's check-back for a half message left UNKNOW."""
        ...


class TransactionSendResult(SendResult):
    """`TransactionSendResult`: a `SendResult` plus the local transaction's state."""

    __slots__ = ("local_transaction_state",)

    def __init__(self, sent: SendResult, state: LocalTransactionState) -> None:
        super().__init__(sent.send_status, sent.msg_id, sent.message_queue, sent.queue_offset, sent.offset_msg_id,
                         sent.msg_id)
        self.local_transaction_state = state


class TransactionProducer(Producer):
    """`TransactionMQProducer`: half message, local transaction, then commit or rollback.

    UNKNOW (or an exception in `execute_local_transaction`) leaves the half
    message to the broker's check service, which calls this group's
    `check_local_transaction` after `transaction_timeout` (on the
    `mqlite-txn-check` thread) until it answers, at most `transaction_check_max` times.
    """

    def __init__(self, broker: BrokerPort | str | os.PathLike[str], group: str = "DEFAULT_TX_PRODUCER", *,
                 listener: TransactionListener, **options: Any) -> None:
        if listener is None or not hasattr(listener, "execute_local_transaction") \
                or not hasattr(listener, "check_local_transaction"):
            raise MQClientError("listener must have execute_local_transaction(msg, arg) and "
                                "check_local_transaction(msg_ext)")
        super().__init__(broker, group, **options)
        self.listener = listener

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Store a half message, run the local transaction, then commit or roll back."""
        self._validate(msg)
        msg.properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)  # as the Java client: no delay for transactions
        mq = self._choose(msg, None, None, None)
        extra = {PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: self.group}
        sent, half = self._send_put(msg, mq, "SYNC", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE, extra=extra)
        msg.transaction_id = sent.msg_id
        state = LocalTransactionState.ROLLBACK_MESSAGE
        if sent.send_status is SendStatus.SEND_OK:
            try:
                state = self.listener.execute_local_transaction(msg, arg) or LocalTransactionState.UNKNOW
            except Exception:
                log.exception("execute_local_transaction failed; the broker will check back")
                state = LocalTransactionState.UNKNOW
        if self._tracer is not None:  # as RocketMQ's endTransaction hook: every answer, UNKNOW too
            self._tracer.end_transaction(self.group, msg, sent.msg_id, state.name, from_check=False,
                                         offset_msg_id=sent.offset_msg_id)
        if state is not LocalTransactionState.UNKNOW:
            try:
                self.broker.end_transaction(half.commit_log_offset, state is LocalTransactionState.COMMIT_MESSAGE,
                                            self.group, transaction_id=sent.msg_id)
            except DiskFullError as exc:
                # The local transaction ran; as RocketMQ's client, a failed end is logged and the
                # broker's check-back settles the half once the disk has room.
                log.warning("local transaction %s ended %s, but the broker could not record it (%s); "
                            "the check-back will settle it", sent.msg_id, state.name, exc)
        return TransactionSendResult(sent, state)

    def check_transaction(self, msg: MessageExt) -> bool:
        """The broker's check-back: ask the listener and end the transaction by its answer.

        Returns True: this producer answered the check (an UNKNOW answer or a
        failing listener leaves the half message to the next check).
        """
        try:
            state = self.listener.check_local_transaction(msg) or LocalTransactionState.UNKNOW
        except Exception:
            log.exception("check_local_transaction failed; the broker will check again")
            return True
        if self._tracer is not None:
            self._tracer.end_transaction(self.group, msg, msg.msg_id, state.name, from_check=True,
                                         offset_msg_id=msg.offset_msg_id)
        if state is not LocalTransactionState.UNKNOW:
            self.broker.end_transaction(msg.commit_log_offset, state is LocalTransactionState.COMMIT_MESSAGE,
                                        self.group, from_check=True, transaction_id=msg.transaction_id)
        return True
