"""`Broker`: what `mqlite.open` returns; owns the store, the topic table and the services.

It answers the admin surface of API.md and implements the broker port
(`mqlite.port.BrokerPort`), the only way clients reach it: `put_message`
applies RocketMQ's broker-side rules (topic checks, auto-create) before the
store appends. A read-only broker (`mqlite.open(path, read_only=True)`) runs
over a `StoreReader`: no lock, no threads, safe beside a live writer. Clients
given a path share one broker per directory (`acquire`), closed with its last
user; a store another process holds is reached through the hook installed
with `set_remote_connector`.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import socket
import struct
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from . import wiring
from ._service import Service, close_at_exit, forget_at_exit
from .clock import SYSTEM_CLOCK, Clock
from .commitlog import PutResult
from .record import STORE_HOST, stored_body
from .delay import SCHEDULE_TOPIC, TIMER_TOPIC, DelayService, delay_offset_path, delay_tags_code, rewrite_for_delay
from .config import JAVA_INT_MAX, check_int, check_seconds, check_store_path
from .errors import IllegalStateError, MessageNotFoundError, MQClientError, StoreLockedError
from .groups import ConsumerGroups, GroupMember, QueueLocks
from .inbox import InboxService, already_committed, append_staged, import_inbox, mark_committed
from .longpoll import ArrivalHub, PullResult, PullStatus, Waker, pull_result_of
from .message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    EncodedProperties,
    MessageExt,
    MessageQueue,
    SysFlag,
    check_properties,
    msg_id_offset,
)
from .metrics import MetricsSnapshot, StoreFigures, collect
from .offsetfile import TOPIC_GROUP_SEPARATOR, groups_of
from .offsets import ConsumerOffsets, OffsetPersistService
from .port import BrokerPort, QueueKey, TransactionChecker
from .reader import StoreReader
from .sendback import DEFAULT_MAX_RECONSUME_TIMES, dlq_topic, is_dlq_topic, is_retry_topic, plan_send_back, retry_topic
from .store import MessageStore
from .storeservices import GroupCommit
from .storebase import MAX_PULL_MSG_SIZE, MessageFilter, StoreFiles, config_for
from .topics import (
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
    TopicTable,
    check_group,
    check_topic,
    is_system_topic,
)
from .trace import TRACE_MAX_MSG_SIZE, TRACE_TOPIC, TraceDispatcher
from .traceview import MessageTrack, TraceView, trace_views, track_message
from .txn import HALF_TOPIC, TransactionalMessageService, TransactionCheckService, parse_half_message
from .validators import check_send_topic

#: Topics `put_message` may redirect a client's message to.
_ROUTED_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, HALF_TOPIC})
_DELAY_PROPERTIES = frozenset({PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS,
                               PROPERTY_TIMER_DELAY_SEC})

__all__ = ["Broker", "QueueStatus", "QueueProgress", "open", "acquire", "set_remote_connector",
           "check_broker_target", "RemoteConnector",
           "Serving", "set_server_factory"]

log = logging.getLogger("mqlite")


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's offsets (`TopicOffset` of mqadmin's topicStatus)."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One row of `consumer_progress` (mqadmin consumerProgress's `OffsetWrapper`)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    client_id: str
    last_timestamp: int

    @property
    def diff(self) -> int:
        """Messages not consumed yet: broker offset minus consumer offset."""
        return self.broker_offset - self.consumer_offset


class Joinable(Protocol):
    """What `Broker.wait_idle` waits on besides the broker: a consumer's `join` (`PushConsumer.join`)."""

    def join(self, timeout: float | None = None) -> bool:
        """Block until everything readable now is consumed and committed; False on timeout."""
        ...


class Serving(Protocol):
    """What `Broker.serve` returns (`mqlite.Server`), as the broker sees it."""

    @property
    def address(self) -> str:
        """`host:port` the server listens on."""
        ...

    @property
    def store_host(self) -> str | None:
        """`ip:port` it had the broker write into records as their store host (None: it did not)."""
        ...

    def close(self) -> None:
        """Stop serving (idempotent)."""
        ...


#: Builds a server for `Broker.serve`: mqlite.remoting's (an upper layer), which `import mqlite` put in
#: `wiring` before this module was imported (see `set_server_factory`).
_SERVER_FACTORY: Callable[..., Serving] | None = wiring.server_factory


def set_server_factory(factory: Callable[..., Serving]) -> None:
    """Install what `Broker.serve` builds servers with (`mqlite/__init__.py` installs mqlite.remoting's).

    The broker (layer L2) cannot import the remoting adapter (L4); the package wires them.
    """
    global _SERVER_FACTORY
    _SERVER_FACTORY = factory


class Broker:
    """An embedded RocketMQ broker over one directory. Use `mqlite.open()` to get one.

    Thread-safe. `close()` is idempotent and also runs at the end of a `with` block.
    """

    def __init__(self, store: StoreFiles) -> None:
        self._store = store
        self._closed = False
        self._closing = False
        self._pid = os.getpid()  # a forked child disowns the broker (`_disown_in_child`)
        _OPENED.add(self)
        self.config = store.config
        self.topics = TopicTable(store.root, read_only=store.read_only, clock=store.clock)
        self._learn_topics(store)
        self._clients_lock = threading.Lock()
        self._producers: dict[str, list[TransactionChecker]] = {}
        # Traced clients' dispatchers (each owned by its client), flushed by query_trace.
        self._trace_dispatchers: weakref.WeakSet[TraceDispatcher] = weakref.WeakSet()
        self._servers: list[Serving] = []  # from serve(): closed first by close()
        self._shared_key: str | None = None
        self._users = 0
        self._services: list[Service] = []
        self.offsets: ConsumerOffsets | None = None
        self.transactions: TransactionalMessageService | None = None
        self.delay: DelayService | None = None
        self._transaction_check: TransactionCheckService | None = None
        #: Parked pulls and pull threads, woken when their queues grow.
        self.arrivals = ArrivalHub()
        #: Live consumers per group, and the orderly consumers' queue locks.
        self.consumer_groups = ConsumerGroups()
        self.queue_locks = QueueLocks(store.clock)
        self._figures = StoreFigures(store)  # `metrics()`: byte sums read so far, per queue
        if isinstance(store, MessageStore):
            self._start_services(store)
        # Its threads are not daemons (and a reader holds maps): one the program forgets is closed at exit.
        close_at_exit(self)

    def _start_services(self, store: MessageStore) -> None:
        """Offsets, delay delivery and transaction check-back: started after recovery, stopped before the store."""
        config = store.config
        self.offsets = ConsumerOffsets(store.root, clock=store.clock)
        self.delay = DelayService(store, self._deliver_due, levels_ms=config.delay_levels_ms,
                                  offsets_path=delay_offset_path(store.root), clock=store.clock,
                                  flush_interval=config.flush_delay_offset_interval)
        self.transactions = TransactionalMessageService(store, self.offsets, put=self._put_system,
                                                        check_listener=self._check_transaction)
        store.on_arrival = self._on_arrival
        # Stop order (close() reverses this list): Spark inbox import (its last round while the store is
        # still open), check-back, delay delivery, then offsets persist.
        inbox = InboxService(self.import_inbox)
        self._transaction_check = TransactionCheckService(self.transactions)
        self._services = [OffsetPersistService(self.offsets, config.flush_consumer_offset_interval),
                          self.delay, self._transaction_check, inbox]
        for service in self._services:
            service.start()
        inbox.wakeup()  # jobs handed over while the store was closed go in now, not a second later

    def _on_arrival(self, topic: str, queue_id: int, next_offset: int) -> None:
        self.arrivals.notify(topic, queue_id)
        delay = self.delay
        if delay is not None and (topic == SCHEDULE_TOPIC or topic == TIMER_TOPIC):
            delay.notify_arrival(topic, queue_id, next_offset)

    def _put_system(self, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None = None,
                    **fields: Any) -> PutResult:
        """Store a message the broker itself writes (system topics, committed halves).

        A committed transactional message with a delay goes through the delay
        rewrite now, as RocketMQ 5's `HookUtils.handleScheduleMessage` does.
        """
        sys_flag = fields.get("sys_flag", 0)
        if sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT_TYPE:
            # Only commits: re-appended half copies keep their properties and must stay halves.
            topic, queue_id, properties = self._route_delay(topic, queue_id, properties, sys_flag)
        self._register_system_topic(topic)
        return self._writer().put(topic, queue_id, body, properties, **fields)

    def _route_delay(self, topic: str, queue_id: int, properties: Mapping[str, str] | None,
                     sys_flag: int) -> tuple[str, int, Mapping[str, str] | None]:
        """Where a message with delay properties goes (schedule or timer topic); unchanged otherwise."""
        if not properties or _DELAY_PROPERTIES.isdisjoint(properties):
            return topic, queue_id, properties
        return rewrite_for_delay(topic, queue_id, properties, levels_ms=self.config.delay_levels_ms,
                                 now_ms=self._writer().clock.now_ms(), sys_flag=sys_flag)

    def _register_system_topic(self, topic: str) -> None:
        """Put a system topic the broker writes to into the topic table on first use."""
        if topic not in self.topics and is_system_topic(topic):
            self.topics.ensure_system(topic, len(self.config.delay_levels_ms) if topic == SCHEDULE_TOPIC else None)

    def _deliver_due(self, topic: str, queue_id: int, body: bytes, properties: dict[str, str], flag: int,
                     sys_flag: int, born_timestamp: int, born_host: str, reconsume_times: int) -> PutResult:
        """The delay service's hand-back: a due message goes to its real topic and queue."""
        return self._writer().put(topic, queue_id, body, properties, flag=flag, sys_flag=sys_flag,
                                  born_timestamp=born_timestamp, born_host=born_host,
                                  reconsume_times=reconsume_times)

    def _check_transaction(self, group: str, msg: MessageExt) -> bool:
        """Ask a live producer of `group` about a half message; False when none is alive."""
        for producer in self.producers(group):
            if producer.check_transaction(msg):  # a plain producer of the group answers False
                return True
        return False

    # -- properties ---------------------------------------------------------------------------------
    @property
    def store(self) -> StoreFiles:
        """The underlying store (`MessageStore`, or `StoreReader` when read-only)."""
        return self._store

    @property
    def path(self) -> str:
        """The store directory."""
        return self._store.root

    @property
    def broker_name(self) -> str:
        """The name in every `MessageQueue` of this broker."""
        return self._store.broker_name

    @property
    def read_only(self) -> bool:
        """True for a reader opened with `read_only=True`."""
        return self._store.read_only

    @property
    def clock(self) -> Clock:
        """The store's clock (`mqlite.open(..., clock=...)`): born, store and consume times follow it."""
        return self._store.clock

    @property
    def max_message_size(self) -> int:
        """The largest message body this broker stores, in bytes (`StoreConfig.max_message_size`)."""
        return self.config.max_message_size

    @property
    def client_state_dir(self) -> str:
        """Where clients keep state of their own (a broadcasting consumer's offsets): the store directory."""
        return self._store.root

    # A C-level getter (`attrgetter`), not a `def`: every plain send reads it (measured with
    # callgrind: a Python frame fewer, ~1.5k of ~72k instructions a send).
    routes_version = property(operator.attrgetter("topics.version"),
                              doc="The topic table's version: it changes whenever a topic is created, resized or deleted.")

    def _check(self) -> StoreFiles:
        if self._closed:
            if self._pid != os.getpid():
                raise IllegalStateError(f"the broker at {self.path} was opened by process {self._pid} before this "
                                        "process forked from it; open the store (or build clients) in this process")
            raise IllegalStateError(f"the broker at {self.path} is closed")
        return self._store

    def _indexed(self) -> StoreFiles:
        """The store, with everything sent so far indexed (read-your-writes for key look-ups)."""
        store = self._check()
        if isinstance(store, MessageStore):
            store.wait_dispatched()
        return store

    def _writer(self) -> MessageStore:
        store = self._check()
        if not isinstance(store, MessageStore):
            raise IllegalStateError(f"the broker at {self.path} is read-only; open it without read_only=True to write")
        return store

    # -- topics --------------------------------------------------------------------------------------------
    def create_topic(self, topic: str, queue_nums: int = 4, *, order: bool = False,
                     perm: int = PERM_READ | PERM_WRITE, read_queue_nums: int | None = None,
                     write_queue_nums: int | None = None) -> TopicConfig:
        """Create (or resize) a topic with `queue_nums` read and write queues (mqadmin `updateTopic`);
        `perm` is RocketMQ's permission bits (`PERM_READ` 4, `PERM_WRITE` 2).

        `read_queue_nums` / `write_queue_nums` set either count apart (RocketMQ's way to shrink a topic:
        fewer write queues first, fewer read queues once consumers have drained the rest): producers
        send to the write queues, consumers read the read queues.
        """
        self._writer()
        before = self.topics.get(_topic_str(topic))
        config = self.topics.create(topic, queue_nums, perm=perm, order=order, read_queue_nums=read_queue_nums,
                                    write_queue_nums=write_queue_nums)
        if before is None or before.read_queue_nums != config.read_queue_nums:
            self.consumer_groups.notify_all()
        return config

    def delete_topic(self, topic: str) -> None:
        """Delete a topic and its consume queues (its records age out of the commit log).

        System topics (`topics.is_system_topic`: the schedule, timer, half, op and
        trace topics...) are refused with `MQClientError`, as RocketMQ's broker
        refuses them: they hold the broker's own pending work (a delayed message
        waits in `SCHEDULE_TOPIC_XXXX`). A group's retry and dead-letter topics
        may be deleted.
        """
        store = self._writer()
        if is_system_topic(_topic_str(topic)):
            raise MQClientError(f"the topic {topic!r} is a system topic (the broker keeps its own messages there: "
                                "delayed, transactional, timer or trace); it cannot be deleted")
        if topic not in self.topics and topic not in store.topics():
            raise MQClientError(f"topic {topic!r} does not exist")
        self.topics.delete(topic)
        store.delete_topic(topic)
        self._offsets().remove_topic(topic)  # RocketMQ 5's deleteTopic: cleanOffsetByTopic
        self.consumer_groups.notify_all()

    def topic_list(self) -> list[str]:
        """Every topic: user, retry, DLQ and system topics, from the table and from the disk."""
        store = self._check()
        self._follow_topics(store)
        return sorted(set(self.topics.names()) | set(store.topics()))

    def _follow_topics(self, store: StoreFiles) -> None:
        """A reader: the topic table as the writer last saved it (a topic created or deleted since).
        One `stat` while the file is unchanged."""
        if store.read_only and self.topics.reload():
            self._learn_topics(store)

    def _learn_topics(self, store: StoreFiles) -> None:
        """Topics with queues on disk join the table when it lacks them, with as many queues as found.
        From one snapshot of the queues (a reader's refresh in another thread may replace them)."""
        counts: dict[str, int] = {}
        for topic, queue_id in store.consume_queues:
            counts[topic] = max(counts.get(topic, 0), queue_id + 1)
        self.topics.learn(counts.items())

    def topic_config(self, topic: str) -> TopicConfig | None:
        """A topic's settings, or None."""
        return self.topics.get(topic) if isinstance(topic, str) else None

    def ensure_system_topic(self, topic: str) -> TopicConfig:
        """The config of system topic `topic` (`is_system_topic`), created on first use with its usual queue
        count: what RocketMQ's broker creates at start, such as the trace topic when tracing is on. May write
        the topic table (blocks on the disk); thread-safe. `MQClientError` for a topic that is not a system one.
        """
        self._writer()
        if not is_system_topic(topic):
            raise MQClientError(f"{topic!r} is not a system topic; create_topic() makes other topics")
        return self.topics.ensure_system(topic)

    def fetch_publish_queues(self, topic: str, default_queue_nums: int | None = None) -> list[MessageQueue]:
        """The queues a producer may send `topic` to, creating the topic when auto-create is on."""
        self._writer()
        check_send_topic(topic)
        config = self.topics.get(topic)
        if config is None:
            if not self.config.auto_create_topic:
                raise MQClientError(
                    f"topic {topic!r} does not exist and auto_create_topic is off; create it with "
                    f"broker.create_topic({topic!r}, queue_nums) or open with auto_create_topic=True")
            if default_queue_nums is not None:
                check_int("default_queue_nums", default_queue_nums, 1, 1024)
            nums = min(default_queue_nums or self.config.default_topic_queue_nums, self.config.default_topic_queue_nums)
            config = self.topics.create(topic, nums)
            # As create_topic: consumers already subscribed to it rebalance now, not at their next 20 s round.
            self.consumer_groups.notify_all()
        if not config.writable:
            raise MQClientError(f"topic {topic!r} is not writable (perm {config.perm})")
        return [MessageQueue(topic, self.broker_name, i) for i in range(config.write_queue_nums)]

    def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """The queues consumers of `topic` read (its read queues; none for an unknown topic)."""
        config = self.topics.get(_topic_str(topic))
        if config is None:
            store = self._check()
            ids = store.queue_ids(topic)
            return [MessageQueue(topic, self.broker_name, i) for i in range(max(ids) + 1)] if ids else []
        if not config.readable:
            return []
        return [MessageQueue(topic, self.broker_name, i) for i in range(config.read_queue_nums)]

    # -- sending ------------------------------------------------------------------------------------------------
    def put_message(self, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None = None, *,
                    flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                    reconsume_times: int = 0, born_host: str | None = None) -> PutResult:
        """Store one message sent by a client (the broker's `SendMessageProcessor` path).

        `born_host` (`ip:port`) is the sender's address, which a server passes (default: the store's).

        Rewrites first, as RocketMQ's broker: a prepared (half) message goes to
        the half topic; a delayed one to the schedule or timer topic.
        """
        store = self._store
        if self._closed or not isinstance(store, MessageStore):
            store = self._writer()  # raises
        if topic not in _GOOD_TOPICS or type(queue_id) is not int or not 0 <= queue_id <= JAVA_INT_MAX:
            _check_put_target(topic, queue_id)  # the plain send's put costs a set look-up here, no regex
        if properties and type(properties) is not EncodedProperties:  # a producer's plain send vouches for its own
            check_properties(properties)
        if sys_flag and (type(sys_flag) is not int or sys_flag & ~_CLIENT_SYS_FLAGS
                         or sys_flag & SysFlag.COMPRESSION_TYPE_MASK > SysFlag.COMPRESSION_ZLIB_TYPE):
            _check_sys_flag(sys_flag)
        if sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_PREPARED_TYPE:
            topic, queue_id, properties, sys_flag = parse_half_message(topic, queue_id, properties or {}, sys_flag)
        elif properties and not _DELAY_PROPERTIES.isdisjoint(properties):
            topic, queue_id, properties = self._route_delay(topic, queue_id, properties, sys_flag)
        # else: a plain message, stored as sent (the check above is _route_delay's, inlined for sends)
        if topic in _ROUTED_TOPICS:
            self._register_system_topic(topic)
        try:
            # Positional: `MessageStore.put` takes its fields in this order (keywords cost more per send).
            return store.put(topic, queue_id, body, properties, flag, sys_flag, born_timestamp, born_host,
                             reconsume_times)
        except (struct.error, OverflowError, TypeError) as exc:
            # A field that does not fit the record (flag, times beyond their Java types). The header
            # is packed last, before the write position moves: nothing was stored.
            raise _bad_field(exc, flag=flag, sys_flag=sys_flag, born_timestamp=born_timestamp,
                             reconsume_times=reconsume_times) from None

    def end_transaction(self, half_commit_log_offset: int, commit: bool, producer_group: str, *,
                        from_check: bool = False, transaction_id: str | None = None) -> PutResult | None:
        """Commit (expose the real message) or roll back a half message (`EndTransactionProcessor`)."""
        self._writer()
        _valid_group(producer_group)
        assert self.transactions is not None
        return self.transactions.end_transaction(half_commit_log_offset, commit, producer_group,
                                                 from_check=from_check, transaction_id=transaction_id)

    def put_messages(self, topic: str, queue_id: int, bodies: Sequence[bytes],
                     properties: Sequence[Mapping[str, str] | None], *, flags: Sequence[int] | None = None,
                     born_timestamp: int | None = None, born_host: str | None = None) -> PutResult:
        """Store a batch of one queue (consecutive queue offsets, one segment).

        `born_host` (`ip:port`) is the sender's address, which a server passes (default: the store's).
        """
        store = self._writer()
        if topic not in _GOOD_TOPICS or type(queue_id) is not int or not 0 <= queue_id <= JAVA_INT_MAX:
            _check_put_target(topic, queue_id)
        try:
            return store.put_batch(topic, queue_id, bodies, properties, flags=flags, born_timestamp=born_timestamp,
                                   born_host=born_host)
        except (struct.error, OverflowError, TypeError) as exc:
            raise _bad_field(exc, flags=flags, born_timestamp=born_timestamp) from None

    def put_encoded_records(self, topic: str, queue_id: int, records: Any, sizes: Any, codes: Any = None,
                            key_hashes: Any = None, key_rows: Any = None) -> PutResult:
        """Store records built by `record.encode_records` as one batch of one queue
        (`MessageStore.put_encoded_records`; the Spark commit's put)."""
        return self._writer().put_encoded_records(topic, queue_id, records, sizes, codes, key_hashes, key_rows)

    def tags_code(self, topic: str, properties: Mapping[str, str]) -> int:
        """The tags code a message of `topic` with `properties` is stored with (`put_encoded_records`)."""
        return self._writer().tags_code(topic, properties)

    def import_inbox(self) -> int:
        """Append the Spark jobs waiting in `<store>/spark-inbox/`, oldest first; returns the messages stored.

        A Spark write with `.option("whenLocked", "inbox")` hands its job there while this
        broker holds the store; the `mqlite-inbox` service calls this about every second and
        once more on `close()`, so calling it is only needed to store them sooner. Blocks
        while another import in this process runs; costs one `listdir` when there is nothing.
        A job refused or damaged is moved to `spark-inbox/failed/` and logged (`mqlite.inbox`).
        """
        self._writer()
        return import_inbox(self)

    def append_staged(self, paths: Sequence[str], *, query_id: str | None = None,
                      batch_id: int | None = None) -> int | None:
        """Append one job of staged record files (`mqlite.inbox.write_chunk`) whole; returns the messages stored.

        The ingest entry point of a bulk writer that encodes in other processes (the Spark
        writer's commit). The inbox goes first (`import_inbox`: jobs handed over earlier are
        stored before this one). Every file and queue is then checked before anything is
        stored (`MQClientError` for a refused topic or queue, `StoreCorruptedError` for a
        damaged file); a failure during the puts raises `MQLiteError` saying how many
        messages were stored before it. With `query_id` and `batch_id` (a streaming
        micro-batch) the job is stored at most once per query: None when that batch was
        stored before (or waits in the inbox), else the batch is recorded as stored
        (`<store>/spark-sink/<query_id>.json`, durably) after its puts; one of the two without
        the other is refused with `MQClientError` before anything is stored. Writer only;
        blocks for the puts (one `put_encoded_records` per 4 MiB of a queue's records).
        """
        if (query_id is None) != (batch_id is None):  # half an id would silently drop "at most once"
            raise MQClientError(f"append_staged got query_id={query_id!r} and batch_id={batch_id!r}: give both "
                                "query_id and batch_id (a streaming batch, stored at most once) or neither (a batch job)")
        self._writer()
        self.import_inbox()
        if query_id is not None and batch_id is not None and already_committed(self.path, query_id, batch_id):
            return None
        stored = append_staged(self, paths)
        if query_id is not None and batch_id is not None:
            mark_committed(self.path, query_id, batch_id, stored)
        return stored

    # -- clients ------------------------------------------------------------------------------------------------
    def register_producer(self, group: str, producer: TransactionChecker) -> None:
        """Record a started producer (transaction check-backs go to a live producer of the group)."""
        _valid_group(group)
        with self._clients_lock:
            self._producers.setdefault(group, []).append(producer)

    def unregister_producer(self, group: str, producer: TransactionChecker) -> None:
        """Forget a producer that shut down."""
        with self._clients_lock:
            members = self._producers.get(group, [])
            if producer in members:
                members.remove(producer)
            if not members:
                self._producers.pop(group, None)

    def producers(self, group: str) -> list[TransactionChecker]:
        """Live producers of `group`."""
        with self._clients_lock:
            return list(self._producers.get(group, []))

    @classmethod
    def acquire(cls, target: Broker | str | os.PathLike[str]) -> Broker:
        """The local broker for `target`: the broker itself, or one shared per directory in this process.

        Clients call the module's `acquire`, which takes any broker port and also
        reaches a store another process holds (`set_remote_connector`).
        """
        if isinstance(target, Broker):
            target._check()
            return target
        key = os.path.realpath(check_store_path(target, create=False))
        with _SHARED_LOCK:
            broker = _SHARED.get(key)
            if broker is None or broker.closed:
                opened = _opened_writer(key)
                if opened is not None:
                    return opened  # this process opened the directory itself: its owner closes it
                broker = open(key)
                broker._shared_key = key
                _SHARED[key] = broker
            broker._users += 1
            return broker

    def release(self) -> None:
        """Give back a broker from `acquire`: a shared one closes with its last user."""
        if self._shared_key is None:
            return
        with _SHARED_LOCK:
            self._users -= 1
            if self._users > 0:
                return
            _SHARED.pop(self._shared_key, None)
        self.close()

    # -- offsets ------------------------------------------------------------------------------------------
    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of `topic`: min and max offsets and the store time of the newest message."""
        store = self._check()
        _topic_str(topic)
        if store.read_only:
            store.refresh()
            self._follow_topics(store)
        rows = []
        # Every queue of the topic's config, as mqadmin lists them (0/0 for one never written), and any
        # other queue that has files.
        queue_ids = {mq.queue_id for mq in self.fetch_subscribe_queues(topic)} | set(store.queue_ids(topic))
        for queue_id in sorted(queue_ids):
            high = store.max_offset(topic, queue_id)
            last = store.store_timestamp(topic, queue_id, high - 1) if high > 0 else 0
            rows.append(QueueStatus(queue_id, store.min_offset(topic, queue_id), high, max(last, 0)))
        return rows

    def min_offset(self, mq: MessageQueue) -> int:
        """Smallest readable offset of the queue."""
        _check_queue(mq)
        return self._check().min_offset(mq.topic, mq.queue_id)

    def max_offset(self, mq: MessageQueue) -> int:
        """Next offset to be written in the queue."""
        _check_queue(mq)
        return self._check().max_offset(mq.topic, mq.queue_id)

    def earliest_store_time(self, mq: MessageQueue) -> int:
        """Store time (epoch ms) of the oldest message still in the queue, -1 when it has none
        (`GET_EARLIEST_MSG_STORETIME`). Reads one commit-log record's header."""
        _check_queue(mq)
        store = self._check()
        return store.store_timestamp(mq.topic, mq.queue_id, store.min_offset(mq.topic, mq.queue_id))

    def offset_snapshot(self) -> dict[str, dict[int, int]]:
        """Every committed consumer offset, `topic@group` -> queue id -> offset, as `consumerOffset.json`
        holds it (`GET_ALL_CONSUMER_OFFSET`); empty for a read-only broker. A copy; no I/O."""
        self._check()
        return self.offsets.snapshot() if self.offsets is not None else {}

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        """First offset whose message was stored at or after `timestamp` (epoch ms)."""
        _check_queue(mq)
        check_int("timestamp", timestamp, -_JAVA_LONG_MAX - 1, _JAVA_LONG_MAX)
        return self._check().offset_by_time(mq.topic, mq.queue_id, timestamp)

    def metrics(self) -> MetricsSnapshot:
        """The store's metrics (`mqlite.metrics`): messages and bytes in per topic, out and lag per consumer
        group, disk bytes, flush figures (a writer's) and recovery counts; `render_prometheus` writes them
        for Prometheus. A reader sees the offsets the writer last persisted.

        Any thread. Cost: what `mqlite.metrics.collect` costs; the units are summed incrementally (the
        first call reads every stored unit: ~25 ms a million messages, later calls ~2.5 ms; bench/bench_metrics.py).
        """
        self._check()
        offsets = self.offsets if self.offsets is not None else ConsumerOffsets(self.path)
        return collect(self, offsets.snapshot(), store=self._figures)

    # -- messages -------------------------------------------------------------------------------------------
    def view_message(self, msg_id: str) -> MessageExt:
        """A message by `offset_msg_id` or by `msg_id` (client unique id); `MessageNotFoundError` if none."""
        store = self._check()
        offset = msg_id_offset(msg_id)
        if offset >= 0:  # read from the commit log: no need to wait for the index
            try:
                stored = store.look_message_by_offset(offset)
                if stored.offset_msg_id == msg_id.upper():
                    return stored
            except MessageNotFoundError:
                pass
        store = self._indexed()
        # A delayed or transactional message also has a copy in a system topic, a failed one in
        # the group's retry and dead-letter topics (same msg_id): the user's topic first.
        for topic in sorted(store.topics(), key=_copies_last):
            for msg in store.query_message(topic, msg_id, 1):
                if msg.msg_id == msg_id:
                    return msg
        raise MessageNotFoundError(f"no message with id {msg_id!r} in {self.path}")

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt:
        """The record at `commit_log_offset` in the commit log (`VIEW_MESSAGE_BY_ID`, a send-back's message);
        `MessageNotFoundError` when no record starts there. Reads the record from disk (may page in)."""
        return self._check().look_message_by_offset(commit_log_offset)

    def commit_log_range(self) -> tuple[int, int]:
        """(min, max) commit-log offset: the first byte still kept and the next byte to be written."""
        commitlog = self._check().commitlog
        return commitlog.min_offset, commitlog.max_offset

    def query_message(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """Messages of `topic` with key (or unique id) `key`, stored in [begin, end], newest first."""
        store = self._indexed()
        check_int("max_num", max_num, 1, JAVA_INT_MAX)
        for name, value in (("begin", begin), ("end", end)):
            if value is not None:
                check_int(name, value, -_JAVA_LONG_MAX - 1, _JAVA_LONG_MAX)
        return store.query_message(topic, key, max_num, begin, end)

    def query_message_by_offset(self, topic: str, queue_id: int, offset: int) -> MessageExt:
        """The message at a queue offset; `MessageNotFoundError` when absent."""
        store = self._check()
        _topic_str(topic)
        check_int("queue_id", queue_id, 0, JAVA_INT_MAX)
        check_int("offset", offset, -_JAVA_LONG_MAX - 1, _JAVA_LONG_MAX)
        result = store.get_messages(topic, queue_id, offset, 1)
        if not result.messages:
            raise MessageNotFoundError(
                f"no message at {topic}/{queue_id} offset {offset} "
                f"(readable offsets are {result.min_offset}..{result.max_offset - 1})")
        return result.messages[0]

    # -- message trace --------------------------------------------------------------------------------------
    def trace_dispatcher(self, group: str) -> TraceDispatcher:
        """A new dispatcher storing `group`'s trace records in `RMQ_SYS_TRACE_TOPIC` (for `trace=True` clients).

        The caller owns it: it starts it and stops it on shutdown (which stores what is pending).
        """
        self._writer()
        _valid_group(group)
        self._register_system_topic(TRACE_TOPIC)
        # A round's trace messages go in batch puts, each of which must fit one commit-log segment.
        dispatcher = TraceDispatcher(group, functools.partial(self.put_messages, TRACE_TOPIC, 0),
                                     max_body=min(self.config.max_message_size, TRACE_MAX_MSG_SIZE),
                                     max_batch_bytes=min(1 << 20, self.config.commitlog_file_size // 4))
        with self._clients_lock:
            self._trace_dispatchers.add(dispatcher)
        return dispatcher

    def query_trace(self, msg_id: str, max_num: int = 64, begin: int = 0, end: int | None = None) -> list[TraceView]:
        """The trace records of message `msg_id` (mqadmin `queryMsgTraceById`), in causal order (`trace_views`).

        Found through the index: trace messages stored in [begin, end] (epoch ms)
        whose keys hold `msg_id`, at most `max_num` of them (each carries up to 10
        records). Traced clients of this broker store what they recorded before
        the call first; a read-only broker sees what was indexed when it opened.
        """
        if not isinstance(msg_id, str) or not msg_id:
            raise MQClientError("msg_id must be a non-empty string")
        with self._clients_lock:
            dispatchers = list(self._trace_dispatchers)
        for dispatcher in dispatchers:
            dispatcher.flush()
        return trace_views(msg_id, self._indexed().query_message(TRACE_TOPIC, msg_id, max_num, begin, end))

    def message_track(self, msg_id: str) -> list[MessageTrack]:
        """Where message `msg_id` stands for each consumer group (RocketMQ's `messageTrackDetail`).

        A writer knows which groups are online (NOT_ONLINE, PULL, ...); a read-only
        broker judges every group by the committed offsets persisted in
        `config/consumerOffset.json`. Raises `MessageNotFoundError` for an unknown id.
        """
        msg = self.view_message(msg_id)
        origin = msg.properties.get(PROPERTY_RETRY_TOPIC)
        if origin is not None and origin != msg.topic:  # a retry or dead-letter copy: track the original
            copies = [m for m in self.query_message(origin, msg.msg_id) if m.msg_id == msg.msg_id]
            msg = copies[-1] if copies else msg  # newest first: the last is the first stored
        if self.offsets is not None:
            groups = self.consumer_groups
            return track_message(msg, self.offsets.snapshot(), {g: groups.members(g) for g in groups.groups()})
        return track_message(msg, ConsumerOffsets(self.path).snapshot(), None)

    # -- consuming --------------------------------------------------------------------------------------------
    def pull(self, group: str, mq: MessageQueue, offset: int, max_nums: int = 32,
             message_filter: MessageFilter | None = None, wait: float = 0.0, *,
             max_bytes: int = MAX_PULL_MSG_SIZE) -> PullResult:
        """Pull up to `max_nums` messages of `mq` from `offset` (RocketMQ's long-polling pull).

        Returns at once when messages are there. Otherwise it parks until the
        queue grows or `wait` seconds pass and then tries once more; `wait=0`
        never parks (the consumers pull that way and park on the arrival hub
        themselves, across all their queues). With a filter, one call scans one
        window of units: without a wait it returns NO_MATCHED_MSG with the
        offset to go on from; with one it scans on while time remains.
        `group` names the puller, as RocketMQ's request does. The records found total at most
        `max_bytes` (at least one is returned; the store stops before copying more).
        """
        store = self._check()
        _valid_group(group)
        _check_queue(mq)
        check_seconds("wait", wait)
        if message_filter is not None and not hasattr(message_filter, "is_matched_by_consume_queue"):
            raise MQClientError(f"message_filter must be a MessageFilter (a MessageSelector's), got {message_filter!r}")
        if not isinstance(max_nums, int) or max_nums < 1:
            raise MQClientError(f"max_nums must be a positive int, got {max_nums!r}")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise MQClientError(f"offset must be an int, got {offset!r}")
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise MQClientError(f"max_bytes must be a positive int, got {max_bytes!r}")
        deadline = store.clock.monotonic() + wait
        topic, queue_id = mq.topic, mq.queue_id
        while True:
            result = pull_result_of(store.get_messages(topic, queue_id, offset, max_nums, message_filter, max_bytes),
                                    offset)
            remaining = deadline - store.clock.monotonic()
            if result.pull_status is PullStatus.NO_MATCHED_MSG and result.next_begin_offset > offset:
                if wait <= 0:
                    return result  # RocketMQ's PULL_RETRY_IMMEDIATELY: the caller scans on (and can stop)
                offset = result.next_begin_offset
                if remaining > 0:
                    continue
                return PullResult(PullStatus.NO_NEW_MSG, offset, result.min_offset, result.max_offset, [])
            if result.pull_status is not PullStatus.NO_NEW_MSG or remaining <= 0 or self._closed:
                return result
            start = offset
            self.arrivals.wait(topic, queue_id, lambda: store.max_offset(topic, queue_id) > start or self._closed,
                               remaining)
            if store.max_offset(topic, queue_id) <= offset:
                return result

    def watch_arrivals(self, waker: Waker, queues: Iterable[QueueKey]) -> None:
        """Call `waker.set()` whenever one of `queues` ((topic, queue id) pairs) grows, until
        `unwatch_arrivals`; at once when the broker is closing. A consumer's pull thread sleeps on it."""
        self.arrivals.watch(waker, queues)

    def unwatch_arrivals(self, waker: Waker, queues: Iterable[QueueKey] | None = None) -> None:
        """Stop waking `waker` for `queues` (for every queue when None)."""
        self.arrivals.unwatch(waker, queues)

    def consumer_members(self, group: str) -> list[GroupMember]:
        """The live members of consumer `group` (in-process consumers and a server's remote ones)."""
        return self.consumer_groups.members(group)

    def consuming_groups(self, topic: str) -> list[str]:
        """The groups that consume `topic`, sorted: online ones subscribed to it and those with offsets on it
        (`QUERY_TOPIC_CONSUME_BY_WHO`'s `GroupList`)."""
        registry = self.consumer_groups
        groups = {g for g in registry.groups() if any(topic in m.subscribed_topics() for m in registry.members(g))}
        groups.update(groups_of(k for k in self.offset_snapshot() if k.startswith(topic + TOPIC_GROUP_SEPARATOR)))
        return sorted(groups)

    def request_rebalance(self, group: str) -> None:
        """Ask every live member of `group` to rebalance (a member's subscription changed). Never blocks."""
        self.consumer_groups.notify(group)

    def consumer_ids(self, group: str) -> list[str]:
        """The client ids of `group`'s live members, sorted (`GET_CONSUMER_LIST_BY_GROUP`)."""
        return self.consumer_groups.client_ids(group)

    def lock_queues(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock or renew `mqs` for `client_id`, an orderly consumer of `group` (`LOCK_BATCH_MQ`).

        Returns the queues it holds now: a queue locked by another live client
        stays theirs until they unlock it or their lock expires (60 s unrenewed).
        """
        return self.queue_locks.try_lock(group, mqs, client_id)

    def unlock_queues(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Give back the locks `client_id` holds on `mqs` (`UNLOCK_BATCH_MQ`).

        The group's other members are asked to rebalance, so the next owner
        locks the queues now rather than at its next 20 s round.
        """
        self.queue_locks.unlock(group, mqs, client_id)
        for member in self.consumer_groups.members(group):
            if member.client_id != client_id:
                member.request_rebalance()

    @property
    def group_commit(self) -> GroupCommit | None:
        """The writable store's group commit under SYNC_FLUSH (`BrokerPort.group_commit`); else None."""
        store = self._store
        return store.group_commit if isinstance(store, MessageStore) and not self._closed else None

    def wait_dispatched(self, timeout: float | None = None) -> bool:
        """Block until everything stored so far is readable by pulls (dispatched to the consume
        queues and the index); False after `timeout` seconds. A read-only broker returns True."""
        store = self._check()
        if isinstance(store, MessageStore):
            return store.wait_dispatched(timeout)
        return True

    def commit_offset(self, group: str, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Record `group`'s next offset for `mq` (persisted every 5 s and on close)."""
        offsets = self._offsets()
        _valid_group(group)
        _check_queue(mq)
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= _JAVA_LONG_MAX:
            raise MQClientError(f"offset must be an int >= 0 (the next queue offset to consume), got {offset!r}")
        offsets.commit(group, mq.topic, mq.queue_id, offset, increase_only=increase_only)

    def query_offset(self, group: str, mq: MessageQueue) -> int:
        """`group`'s committed offset for `mq`, or -1 when it has none."""
        offsets = self._offsets()
        _valid_group(group)
        _check_queue(mq)
        return offsets.query(group, mq.topic, mq.queue_id)

    def offset_for_new_group(self, mq: MessageQueue) -> int:
        """What the broker answers a group with no offset for `mq`: 0 or -1 (`queryConsumerOffset`).

        RocketMQ answers 0 instead of "not found" when the queue still starts
        at offset 0 and that message is still in memory (within 40% of RAM of
        the commit log's end), so a new group on a young topic reads it from
        the start even with CONSUME_FROM_LAST_OFFSET. Consumers do not ask it
        with CONSUME_FROM_TIMESTAMP: that mode searches by time for every queue
        without an offset (RocketMQ's answer would make it start at 0 instead).
        """
        store = self._check()
        _check_queue(mq)
        if store.min_offset(mq.topic, mq.queue_id) > 0 or store.max_offset(mq.topic, mq.queue_id) == 0:
            return 0 if store.max_offset(mq.topic, mq.queue_id) == 0 else -1
        first = store.get_messages(mq.topic, mq.queue_id, 0, 1).messages
        if not first:
            return -1
        behind = store.commitlog.max_offset - first[0].commit_log_offset
        return 0 if behind <= _memory_window() else -1

    def _offsets(self) -> ConsumerOffsets:
        self._writer()
        assert self.offsets is not None
        return self.offsets

    def send_message_back(self, group: str, msg: MessageExt, delay_level: int = 0,
                          max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES) -> PutResult:
        """A consumer of `group` failed `msg`: store its retry (or dead-letter) copy.

        RocketMQ's `consumerSendMsgBack`: the stored original is read back by
        commit-log offset, and its copy goes to `%RETRY%<group>` with delay
        level `3 + reconsume_times` (or `delay_level`), or to `%DLQ%<group>`
        once `max_reconsume_times` is reached or `delay_level` is negative.
        """
        store = self._writer()
        _valid_group(group)
        if not isinstance(msg, MessageExt):
            raise MQClientError(f"send_message_back needs a MessageExt a consumer received, got {type(msg).__name__}")
        check_int("delay_level", delay_level, -JAVA_INT_MAX - 1, JAVA_INT_MAX)
        check_int("max_reconsume_times", max_reconsume_times, -1, JAVA_INT_MAX)
        try:
            original: MessageExt = store.look_message_by_offset(msg.commit_log_offset)
        except MessageNotFoundError:
            # The record aged out of the commit log: RocketMQ's client then re-sends its own copy
            # (`sendMessageBackAsNormalMessage`), so the retry count and DLQ still work.
            original = msg
        plan = plan_send_back(original, group, delay_level, max_reconsume_times)
        self.ensure_group_topic(group, plan.topic)
        body, sys_flag = stored_body(original)
        topic, queue_id, properties = self._route_delay(plan.topic, 0, plan.properties, sys_flag)
        if topic in _ROUTED_TOPICS:
            self._register_system_topic(topic)
        return store.put(topic, queue_id, body, properties, flag=original.flag, sys_flag=sys_flag,
                         born_timestamp=original.born_timestamp, born_host=original.born_host,
                         reconsume_times=plan.reconsume_times)

    def ensure_group_topic(self, group: str, topic: str) -> TopicConfig:
        """`group`'s retry (`%RETRY%<group>`) or dead-letter (`%DLQ%<group>`) topic, created with one
        queue on first use; the group's live members then rebalance, so they start reading it.

        Where RocketMQ's broker creates them (`createTopicInSendMessageBackMethod`):
        a send-back, and a dead letter re-sent to its group (`mqlite.admin.resend_dlq_message`).
        """
        _valid_group(group)
        if topic != retry_topic(group) and topic != dlq_topic(group):
            raise MQClientError(f"{topic!r} is neither the retry nor the dead-letter topic of group {group!r}")
        config = self.topics.get(topic)
        if config is None:
            config = self.topics.ensure_system(topic, 1)
            self.consumer_groups.notify(group)  # members start reading their new retry topic
        return config

    def register_consumer(self, group: str, member: GroupMember) -> None:
        """A consumer started: every member of `group` rebalances."""
        self._writer()
        _valid_group(group)
        if self._closing:
            raise IllegalStateError(f"the broker at {self.path} is closing; start consumers before close()")
        self.consumer_groups.register(group, member)

    def unregister_consumer(self, group: str, member: GroupMember) -> None:
        """A consumer stopped: the others rebalance and take its queues over."""
        self.consumer_groups.unregister(group, member)

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """Per queue the group consumes: broker offset, consumer offset, diff, owner, last store time."""
        store = self._check()
        _valid_group(group)
        if isinstance(store, MessageStore):
            offsets = self._offsets()
            offsets.absorb_side_file()  # a Spark stream's progress, left while this broker held the store
        else:  # a reader: the table as the writer last persisted it (the side file on top)
            offsets = ConsumerOffsets(self.path)
        table = offsets.table_for(group)
        members = self.consumer_groups.members(group)
        topics = set(table)
        owners: dict[MessageQueue, str] = {}
        for member in members:
            topics |= member.subscribed_topics()
            for mq in member.assigned_queues():
                owners[mq] = member.client_id
        rows = []
        for topic in sorted(topics):
            committed = table.get(topic, {})
            for queue_id in sorted(set(store.queue_ids(topic)) | set(committed)):
                broker_offset = store.max_offset(topic, queue_id)
                consumer_offset = max(committed.get(queue_id, 0), 0)
                last = store.store_timestamp(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
                mq = MessageQueue(topic, self.broker_name, queue_id)
                rows.append(QueueProgress(topic, self.broker_name, queue_id, broker_offset, consumer_offset,
                                          owners.get(mq, ""), max(last, 0)))
        return rows

    def reset_offset_by_time(self, group: str, topic: str, timestamp: int) -> dict[MessageQueue, int]:
        """Move `group`'s offsets on `topic` to the first message stored at or after `timestamp`.

        `timestamp` -1 means the end of each queue (skip everything). Running
        consumers drop what they cached and pull from the new offsets. Returns
        the new offset per queue.
        """
        store = self._writer()
        offsets = self._offsets()
        _valid_group(group)
        check_topic(topic, max_length=None)
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or not -1 <= timestamp <= _JAVA_LONG_MAX:
            raise MQClientError(f"timestamp must be epoch milliseconds (an int >= 0, or -1 for the end), "
                                f"got {timestamp!r}")
        if topic not in self.topics and topic not in store.topics():
            raise MQClientError(f"topic {topic!r} does not exist")
        table: dict[int, int] = {}
        for queue_id in store.queue_ids(topic):
            table[queue_id] = (store.max_offset(topic, queue_id) if timestamp == -1
                               else store.offset_by_time(topic, queue_id, timestamp))
            offsets.commit(group, topic, queue_id, table[queue_id])
        # Every member hears of it, as RocketMQ's Broker2Client.resetOffset tells every connection of the group:
        # an assign-mode consumer's heartbeat subscribes nothing, and each member ignores queues it does not hold.
        for member in self.consumer_groups.members(group):
            member.reset_offsets(topic, dict(table))
        return {MessageQueue(topic, self.broker_name, q): o for q, o in table.items()}

    # -- serving ------------------------------------------------------------------------------------------------
    def set_store_host(self, address: str | None) -> None:
        """Write `address` (`ip:port`, IPv4) as the store host of the records stored from now on, which
        their offset message ids name; None goes back to `127.0.0.1:10911`. `serve()` sets the address it
        serves at, as a RocketMQ broker writes its `brokerIP1:listenPort`: RocketMQ's clients send a
        consumer's send-back (and an admin's look-up by offset id) to the host in the record."""
        store = self._writer()
        if address is None:
            host, port = STORE_HOST
        else:
            host, _, port_text = address.rpartition(":") if isinstance(address, str) else ("", "", "")
            try:
                port = int(port_text)
                socket.inet_aton(host)
            except (ValueError, OSError):
                raise MQClientError(f"a store host is 'ip:port' with an IPv4 address, got {address!r}") from None
            if not 0 <= port <= 65535 or host.count(".") != 3:
                raise MQClientError(f"a store host is 'ip:port' with an IPv4 address, got {address!r}")
        store.commitlog.set_store_host(host, port)

    def forget_server(self, server: Serving) -> None:
        """A server from `serve()` stopped (it calls this): records take the store host of the newest
        server still serving, or `127.0.0.1:10911` when none is (`set_store_host`)."""
        with self._clients_lock:
            if server in self._servers:
                self._servers.remove(server)
            remaining = [s.store_host for s in self._servers if s.store_host is not None]
        if server.store_host is not None and not self._closed:
            self.set_store_host(remaining[-1] if remaining else None)

    def serve(self, address: str = "127.0.0.1:0", *, acl: Mapping[str, str] | None = None,
              allow_anonymous: bool = False, max_frame_size: int = 16 * 1024 * 1024, **options: Any) -> Serving:
        """Serve this broker over Apache RocketMQ's remoting protocol; returns the `mqlite.Server`.

        RocketMQ's clients (any language) connect with `namesrvAddr` set to `server.address`,
        mqlite's with `mqlite.connect(server.address)`. Port 0 picks a free port. Loopback by
        default; any other address needs `acl={access_key: secret_key}` (RocketMQ ACL signatures)
        or `allow_anonymous=True`, else `ConfigError`. A frame over `max_frame_size` bytes closes
        its connection. `options`: `channel_expired_timeout` (seconds a silent connection is kept,
        120), `executor_threads` (8), `executor_queue` (requests waiting for those threads before
        the server answers SYSTEM_BUSY, 10000), `max_parked` (long-polling pulls parked at once, all
        connections together, 65536; past it a pull that finds nothing answers at once).
        `close()` closes the servers first. Starts two kinds of
        threads: `mqlite-remoting` and up to `executor_threads` `mqlite-remoting-exec_N`.
        """
        self._check()
        if self._closing:
            raise IllegalStateError(f"the broker at {self.path} is closing; serve before close()")
        if _SERVER_FACTORY is None:
            raise IllegalStateError("serving needs mqlite.remoting; import mqlite (the package) first")
        server = _SERVER_FACTORY(self, address, acl=acl, allow_anonymous=allow_anonymous,
                                 max_frame_size=max_frame_size, **options)
        with self._clients_lock:
            self._servers.append(server)
        return server

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def wait_idle(self, *consumers: Joinable, timeout: float | None = None) -> bool:
        """Block until nothing is left to happen now: True when idle, False once `timeout` seconds passed.

        Idle means: everything put so far is dispatched (readable), every delayed
        or timer message due by the broker's clock is delivered to its real queue,
        a transaction check that fell due has asked its producers (and applied
        their answers), and each of `consumers` has consumed and committed all it can read
        (`consumer.join`). The steps repeat until a pass stores nothing new, since a
        listener may send and a failure is sent back. Messages due later are not
        waited for: with a `ManualClock`, advance it first (`mqlite.testing` does).
        Call it from a test or an application thread, never from a listener of
        `consumers` (it would wait for itself). Cost: a few wake-ups per pass.
        """
        store = self._writer()
        clock = store.clock
        deadline = None if timeout is None else clock.monotonic() + check_seconds("timeout", timeout)

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - clock.monotonic())

        while True:
            appended = store.commitlog.appended_count
            if not store.wait_dispatched(left()):
                return False
            # The delay service reads dispatched units, so its round comes after the dispatch.
            if self.delay is not None and not self.delay.wait_round(left()):
                return False
            # A transaction check that fell due (a ManualClock moved past it) runs its check-backs now.
            if self._transaction_check is not None and not self._transaction_check.wait_round(left()):
                return False
            for consumer in consumers:
                if not consumer.join(left()):
                    return False
            if store.commitlog.appended_count == appended:
                return True

    def close(self) -> None:
        """Ordered shutdown: consumers, services, final flush, checkpoint, unlock. Idempotent."""
        if self._closed or self._closing:
            return  # a consumer shut down below may release a shared broker: that must not re-enter
        self._closing = True
        forget_at_exit(self)
        for server in list(self._servers):  # remote clients go first: their requests finish, they leave their groups
            try:
                server.close()
            except Exception:
                log.exception("closing %s: a server failed to stop", self.path)
        for group in self.consumer_groups.groups():
            for member in self.consumer_groups.members(group):
                try:
                    member.shutdown()  # finishes in-flight batches and commits their offsets
                except Exception:
                    log.exception("closing %s: a consumer of %s failed to shut down", self.path, group)
        with self._clients_lock:
            producers = [p for members in self._producers.values() for p in members]
        for producer in producers:
            try:
                producer.shutdown()
            except Exception:
                log.exception("closing %s: a producer failed to shut down", self.path)
        self.arrivals.close()
        # The delay and check services may still put while they stop, so the broker stays open until then.
        for service in reversed(self._services):  # inbox, check-back, delay delivery, offsets (persists on stop)
            service.stop()
        self._closed = True
        self._store.close()  # type: ignore[attr-defined]

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        shared = " shared by the clients given its path" if self._shared_key is not None else ""
        return f"<mqlite.Broker {self.path!r} {mode}{shared}{' closed' if self._closed else ''}>"


def _copies_last(topic: str) -> tuple[bool, bool]:
    """Sort key for a msg_id look-up: user topics, then retry and DLQ copies, then system topics."""
    return is_system_topic(topic), is_retry_topic(topic) or is_dlq_topic(topic)


def _memory_window() -> int:
    """`accessMessageInMemoryMaxRatio` (40) percent of physical memory, in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 40 // 100
    except (ValueError, OSError, AttributeError):
        return 1 << 30


_JAVA_LONG_MAX = (1 << 63) - 1
_GOOD_GROUPS: set[str] = set()  # names check_group passed (a pull checks its group without a regex)


#: SYSFLAG bits a sender may set (`MessageSysFlag`): compressed, multi tags, the transaction type and the
#: compression type; the host bits are accepted and ignored (the store sets them from the addresses).
#: The batch bits (NEED_UNWRAP, INNER_BATCH) are the broker's and any higher bit is undefined.
_CLIENT_SYS_FLAGS = (SysFlag.COMPRESSED | SysFlag.MULTI_TAGS | SysFlag.TRANSACTION_MASK | SysFlag.BORNHOST_V6
                     | SysFlag.STOREHOSTADDRESS_V6 | SysFlag.COMPRESSION_TYPE_MASK)


def _check_sys_flag(sys_flag: object) -> None:
    """`MQClientError` for a sys flag a sender may not set, before anything is stored: a record with an
    undefined compression type could never be read back (RocketMQ answers MESSAGE_ILLEGAL)."""
    if type(sys_flag) is not int or not 0 <= sys_flag <= JAVA_INT_MAX:
        raise MQClientError(f"sys_flag must be an int in [0, {JAVA_INT_MAX}], got {sys_flag!r}")
    if sys_flag & ~_CLIENT_SYS_FLAGS:
        raise MQClientError(f"sys_flag {sys_flag:#x} sets bits {sys_flag & ~_CLIENT_SYS_FLAGS:#x} that a sender may "
                            f"not set (allowed: {_CLIENT_SYS_FLAGS:#x})")
    kind = (sys_flag & SysFlag.COMPRESSION_TYPE_MASK) >> 8
    if kind > 3:
        raise MQClientError(f"sys_flag {sys_flag:#x} names compression type {kind}, which RocketMQ does not define "
                            "(1 LZ4, 2 ZSTD, 3 ZLIB)")


def _valid_group(group: str) -> None:
    """`check_group(group)`, remembered: a consumer names its group on every pull."""
    if type(group) is not str or group not in _GOOD_GROUPS:
        check_group(group)
        if len(_GOOD_GROUPS) < 10_000:
            _GOOD_GROUPS.add(group)


_GOOD_TOPICS: set[str] = set()  # names a put checked (as _GOOD_GROUPS)


def _check_put_target(topic: object, queue_id: object) -> None:
    """A topic name (RocketMQ's rule; no length limit: retry and DLQ names may be long) and a queue id."""
    check_topic(topic, max_length=None)
    check_int("queue_id", queue_id, 0, JAVA_INT_MAX)
    if len(_GOOD_TOPICS) < 10_000:
        _GOOD_TOPICS.add(topic)  # type: ignore[arg-type]


def _bad_field(exc: Exception, **fields: object) -> MQClientError:
    shown = ", ".join(f"{k}={v!r}" for k, v in fields.items() if v is not None)
    return MQClientError(f"a message field does not fit the record ({exc}); flag, sys_flag and "
                         f"reconsume_times are Java ints, born_timestamp a Java long: {shown}")


def _topic_str(topic: object) -> str:
    """`topic` when it is a str (a wrong type would fail a dict look-up with a raw `TypeError`)."""
    if not isinstance(topic, str):
        raise MQClientError(f"topic must be a str, got {type(topic).__name__} {topic!r}")
    return topic


def _check_queue(mq: object) -> None:
    if not isinstance(mq, MessageQueue) or not isinstance(mq.topic, str) or not isinstance(mq.queue_id, int):
        raise MQClientError(f"expected an mqlite.MessageQueue (topic str, queue_id int), got {mq!r}")


_SHARED: dict[str, Broker] = {}
_SHARED_LOCK = threading.Lock()
_OPENED: weakref.WeakSet[Broker] = weakref.WeakSet()


def _opened_writer(path: str) -> Broker | None:
    """A writer this process opened on `path` (a real path) and has not closed, or None."""
    for broker in list(_OPENED):
        if (not broker._closed and not broker._closing and not broker.read_only and broker._pid == os.getpid()
                and os.path.realpath(broker.path) == path):
            return broker
    return None


def _disown_in_child() -> None:
    """A forked child inherits the parent's brokers without their threads but with their maps of
    the parent's files: writing through one would put records where the parent writes next (lost,
    though acknowledged), and closing one would flush and unlock the parent's store. Every inherited
    broker counts as closed in the child, and clients given a path there open their own."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()  # the parent may have held it while forking
    _SHARED.clear()
    for broker in list(_OPENED):
        broker._closed = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_in_child)


#: How `acquire` reaches a store another process holds: `connector(path) -> BrokerPort` (see `set_remote_connector`).
RemoteConnector = Callable[[str], BrokerPort]
#: mqlite.remoting's, which `import mqlite` put in `wiring` before this module was imported.
_remote_connector: RemoteConnector | None = wiring.remote_connector


def set_remote_connector(connector: RemoteConnector | None) -> RemoteConnector | None:
    """Install how `acquire` reaches a store that another process holds; returns the one it replaces.

    The hook point for serving (issue 12): when a client is given a store path
    and opening it fails with `StoreLockedError`, `acquire` calls
    `connector(path)` (the store's real path) inside the `except` block, so an
    error it raises carries the `StoreLockedError` as its context. It returns
    a port to the process that holds the store (a `RemoteBroker` connected to
    the address that process serves), which the client gives back with
    `release()`, or raises. The remoting layer (L4) installs it, since this
    layer cannot import it. None, the default, lets the `StoreLockedError`
    reach the caller.
    """
    global _remote_connector
    if connector is not None and not callable(connector):
        raise MQClientError(f"the remote connector must be a callable (path) -> BrokerPort, got {connector!r}")
    previous, _remote_connector = _remote_connector, connector
    return previous


def acquire(target: BrokerPort | str | os.PathLike[str]) -> BrokerPort:
    """The broker a client given `target` sends to or consumes from; give it back with `release()`.

    A broker port (a `Broker`, a `RemoteBroker`) is returned unchanged once
    checked open (`IllegalStateError` otherwise). A store path gives the broker
    shared by every client of that directory in this process (`Broker.acquire`:
    opened on first use, closed with its last user). When another process holds
    the store, the connector installed with `set_remote_connector` is asked for a
    port to that process; without one, `StoreLockedError` is raised as before.
    """
    if isinstance(target, (str, os.PathLike)):
        try:
            return Broker.acquire(target)
        except StoreLockedError:
            connector = _remote_connector
            if connector is None:
                raise
            return connector(os.path.realpath(check_store_path(target, create=False)))
    if isinstance(target, Broker):
        return Broker.acquire(target)
    check_broker_target(target)
    if target.closed:
        raise IllegalStateError(f"{target!r} is closed; connect again")
    return target


def check_broker_target(target: object) -> BrokerPort | str | os.PathLike[str]:
    """`target` when a client may be given it: a broker port (`Broker`, `RemoteBroker`) or a store path;
    `MQClientError` otherwise. Opens nothing."""
    if isinstance(target, (Broker, str, os.PathLike)) or isinstance(target, BrokerPort):
        return target
    raise MQClientError(f"broker must be a Broker (mqlite.open), a connected broker (mqlite.connect) or a "
                        f"store path, got {type(target).__name__}")


if TYPE_CHECKING:
    def _broker_implements_the_port(broker: Broker) -> BrokerPort:
        return broker  # mypy checks every member of BrokerPort against Broker here


def open(path: str | os.PathLike[str], *, read_only: bool = False, clock: Clock | None = None,  # noqa: A001 - mirrors mqlite.open
         **config: Any) -> Broker:
    """Open (creating if needed) the store at `path` and return its `Broker`.

    Writers take the directory's lock, recover after a crash and start the
    background services. `read_only=True` takes no lock and starts no thread.
    Unknown or invalid settings raise `ConfigError`; see `StoreConfig` for them all.
    `clock` replaces the wall clock (tests: `mqlite.clock.ManualClock`).
    """
    path = check_store_path(path, create=False)
    if clock is not None and not callable(getattr(clock, "now_ms", None)):
        raise MQClientError(f"clock must be an mqlite.clock.Clock (now_ms(), monotonic() ...), got {clock!r}")
    if read_only:
        return Broker(StoreReader(path, **config))
    settings = config_for(path, config)  # refused settings leave no directory behind
    check_store_path(path, create=True)
    # The delay topics' consume queues hold due times as tags codes; recovery needs the rule too.
    store = MessageStore(path, settings, tags_code_fn=delay_tags_code(settings.delay_levels_ms),
                         clock=clock or SYSTEM_CLOCK)
    try:
        return Broker(store)
    except BaseException:
        store.close()
        raise
