"""What push and lite-pull consumers share: options, subscriptions, offsets and rebalance.

`ConsumerBase` is RocketMQ's `RebalanceImpl` plus the client bits around it:
the subscription table, the process-queue table, where a queue without an
offset starts (`computePullFromWhere`), and group membership on the broker.
Rebalance runs on the consumer's own pull thread (so the process-queue table
has one writer); `request_rebalance` only flags it and wakes that thread.
"""

from __future__ import annotations

import abc
import datetime
import itertools
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from ..broker import acquire, check_broker_target
from ..config import check_int
from ..errors import IllegalStateError, MQClientError
from ..filter import MessageSelector
from ..groups import ConsumerData
from ..longpoll import Waker
from ..message import PROPERTY_RETRY_TOPIC, MessageExt, MessageQueue, local_ip
from ..port import BrokerPort
from ..rebalance import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy, allocate
from ..sendback import is_retry_topic, retry_topic
from ..topics import check_group
from ..trace import ConsumerTracer
from .offsetstore import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
    check_client_id,
    local_offsets_path,
)
from .processqueue import ProcessQueue
from .service import PullLoop
from .types import ConsumeFromWhere, MessageModel, MessageQueueListener

__all__ = ["ConsumerBase", "REBALANCE_INTERVAL", "parse_consume_timestamp", "new_client_id", "check_range"]

log = logging.getLogger("mqlite.consumer")

#: `RebalanceService`'s period (`rocketmq.client.rebalance.waitInterval`).
REBALANCE_INTERVAL = 20.0
#: `ClientConfig.persistConsumerOffsetInterval`.
PERSIST_OFFSET_INTERVAL = 5.0
_LAST_OFFSET_LIKE = frozenset({
    ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST,
    ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET, ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET})
_CLIENT_SEQ = itertools.count()
_DEFAULT_GROUPS = frozenset({"DEFAULT_CONSUMER"})


def new_client_id() -> str:
    """`ip@pid#n`: RocketMQ's `ip@instanceName`, made unique per client object in a process."""
    ip = ".".join(str(b) for b in local_ip())
    return f"{ip}@{os.getpid()}#{next(_CLIENT_SEQ)}"


def parse_consume_timestamp(value: str | int | None, now_ms: int) -> int:
    """A `consume_timestamp` as epoch ms: an int, RocketMQ's `yyyyMMddHHmmss` (local time), or None.

    None is RocketMQ's default, half an hour before `now_ms` to the second (its
    `yyyyMMddHHmmss` string has no milliseconds).

    >>> parse_consume_timestamp(None, 1_801_999), parse_consume_timestamp(5, 0)
    (1000, 5)
    """
    if value is None:
        return (now_ms - 30 * 60 * 1000) // 1000 * 1000
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) == 14 and value.isascii() and value.isdigit():
        try:
            parsed = datetime.datetime.strptime(value, "%Y%m%d%H%M%S")
        except ValueError:  # digits that are no date: month 13, hour 25 ...
            raise MQClientError(f"consume_timestamp {value!r} is not a date in yyyyMMddHHmmss") from None
        return int(parsed.timestamp() * 1000)
    raise MQClientError(f"consume_timestamp must be epoch ms or 'yyyyMMddHHmmss', got {value!r}")


def check_range(name: str, value: Any, low: int, high: int) -> int:
    """`value` if it is an int in [low, high]; `MQClientError` naming the option otherwise."""
    return check_int(name, value, low, high)


class ConsumerBase(abc.ABC):
    """Shared state and rebalance of one consumer instance (not used directly)."""

    _kind = "consumer"
    #: RocketMQ's `ConsumeType` of this kind of consumer (a heartbeat carries it).
    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, broker: BrokerPort | str | os.PathLike[str], group: str, *,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | int | None = None,
                 allocate_strategy: AllocateMessageQueueStrategy | None = None,
                 client_id: str | None = None, offset_store_dir: str | None = None, trace: bool = False) -> None:
        check_group(group)
        if not isinstance(trace, bool):
            raise MQClientError(f"trace must be True or False, got {trace!r}")
        if group in _DEFAULT_GROUPS:
            raise MQClientError("consumerGroup can not equal DEFAULT_CONSUMER; name your group")
        if not isinstance(message_model, MessageModel):
            raise MQClientError(f"message_model must be a MessageModel, got {message_model!r}")
        if not isinstance(consume_from_where, ConsumeFromWhere):
            raise MQClientError(f"consume_from_where must be a ConsumeFromWhere, got {consume_from_where!r}")
        strategy = allocate_strategy if allocate_strategy is not None else AllocateMessageQueueAveragely()
        if not isinstance(strategy, AllocateMessageQueueStrategy):
            raise MQClientError(f"allocate_strategy must be an AllocateMessageQueueStrategy, got {strategy!r}")
        if client_id is not None:
            check_client_id(client_id)
        if offset_store_dir is not None and not isinstance(offset_store_dir, (str, os.PathLike)):
            raise MQClientError(f"offset_store_dir must be a directory path, got {offset_store_dir!r}")
        check_broker_target(broker)
        parse_consume_timestamp(consume_timestamp, 0)  # validate now, not at the first rebalance
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self._consume_timestamp_ms = 0  # epoch ms of `consume_timestamp`, resolved at start
        self.allocate_strategy = strategy
        self._client_id = client_id or new_client_id()
        self._offset_store_dir = offset_store_dir
        self._target = broker
        self._broker: BrokerPort | None = None
        self._state = "CREATED"
        self._state_lock = threading.Lock()
        self._subscriptions: dict[str, MessageSelector] = {}
        self._table_lock = threading.Lock()
        self._process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._queue_listeners: dict[str, MessageQueueListener] = {}
        self._rebalance_requested = threading.Event()
        self._wake: Waker = threading.Event()  # replaced by the consumer's pull loop at start
        self.offset_store: OffsetStore | None = None
        self._trace = trace
        #: With trace=True, from joining the group to leaving it: records consumption (`mqlite.trace`).
        self._tracer: ConsumerTracer | None = None

    # -- identity ------------------------------------------------------------------------------------------
    @property
    def client_id(self) -> str:
        """This instance's id among the group's members."""
        return self._client_id

    @property
    def broker(self) -> BrokerPort:
        """The broker consumed from (after `start()`)."""
        return self._running()

    @property
    def clustering(self) -> bool:
        """True in CLUSTERING mode."""
        return self.message_model is MessageModel.CLUSTERING

    #: RocketMQ's `ConsumeType` (what `Broker.message_track` reports): push consumers consume passively.
    consume_type = "CONSUME_PASSIVELY"

    def subscription(self, topic: str) -> MessageSelector | None:
        """The selector `topic` is consumed with, or None when it is not subscribed."""
        return self._subscriptions.get(topic)

    def _running(self) -> BrokerPort:
        broker = self._broker
        if self._state != "RUNNING" or broker is None:
            raise IllegalStateError(f"The consumer not running, please start it first ({self._kind} {self.group!r} "
                                    f"is {self._state.lower()})")
        return broker

    # -- membership (the broker's GroupMember protocol) ---------------------------------------------------------
    def request_rebalance(self) -> None:
        """Rebalance on the pull thread soon."""
        self._rebalance_requested.set()
        self._wake.set()

    def subscribed_topics(self) -> set[str]:
        """Topics subscribed (retry topic included)."""
        return set(self._subscriptions)

    def consumer_data(self) -> ConsumerData:
        """How this consumer consumes and what it subscribes (a remote broker's heartbeat carries it)."""
        return ConsumerData(self.message_model.value, self.consume_type, self.consume_from_where.value,
                            {topic: (str(selector.expression_type), selector.expression)
                             for topic, selector in list(self._subscriptions.items())})

    def assigned_queues(self) -> set[MessageQueue]:
        """Queues this instance consumes now."""
        with self._table_lock:
            return {mq for mq, pq in self._process_queues.items() if not pq.dropped}

    # -- lifecycle helpers ------------------------------------------------------------------------------------
    def _attach(self) -> BrokerPort:
        """Take the broker, build the offset store, join the group (caller holds `_state_lock`)."""
        broker = acquire(self._target)
        try:
            if broker.read_only:
                raise IllegalStateError("consumers need a writable broker (offsets are committed to it); "
                                        "open the store without read_only=True")
            # Fixed once, on the broker's clock (RocketMQ fixes its default when the consumer is built):
            # every queue without an offset starts from the same moment, whenever it is allocated.
            self._consume_timestamp_ms = parse_consume_timestamp(self.consume_timestamp, broker.clock.now_ms())
            if self.clustering:
                self.offset_store = RemoteBrokerOffsetStore(broker, self.group)
            else:
                if self._offset_store_dir is not None:  # the caller's directory: wherever it resolves
                    path = local_offsets_path(self._offset_store_dir, self._client_id, self.group)
                else:  # inside the broker's directory for clients (the store): it must stay there
                    state_dir = broker.client_state_dir
                    path = local_offsets_path(os.path.join(state_dir, "broadcast_offsets"), self._client_id,
                                              self.group, within=state_dir)
                self.offset_store = LocalFileOffsetStore(path)
        except BaseException:
            broker.release()
            raise
        self._broker = broker
        return broker

    def _join(self) -> None:
        broker = self._broker
        assert broker is not None
        broker.register_consumer(self.group, self)

    def _join_or_give_up(self) -> None:
        """Join the group; if the broker refuses (closing, a taken client id), undo `_attach` and re-raise."""
        try:
            self._join()
        except BaseException:
            self._state = "SHUTDOWN"
            broker, self._broker = self._broker, None
            if broker is not None:
                if isinstance(self._wake, PullLoop):
                    broker.unwatch_arrivals(self._wake)
                broker.release()
            raise
        if self._trace:  # a member now: its consumption is recorded until it leaves
            broker = self._broker
            assert broker is not None
            self._tracer = ConsumerTracer(broker.trace_dispatcher(self.group), self.group, broker.clock.now_ms,
                                          broker.view_message)
            self._tracer.start()

    def _leave(self) -> None:
        """Store the pending trace records, persist offsets, leave the group, release the broker."""
        tracer, self._tracer = self._tracer, None
        if tracer is not None:
            tracer.stop()  # consumption has ended: stores what it recorded and joins the thread
        broker = self._broker
        if broker is None:
            return
        if self.offset_store is not None:
            self.offset_store.persist()
        broker.unregister_consumer(self.group, self)
        broker.release()

    # -- subscriptions ------------------------------------------------------------------------------------------
    def _subscribe(self, topic: str, expression: MessageSelector | str | None) -> MessageSelector:
        if not isinstance(topic, str) or not topic.strip():
            raise MQClientError(f"topic must be a non-blank string, got {topic!r}")
        selector = MessageSelector.of(expression)
        self._subscriptions[topic] = selector
        self.request_rebalance()
        return selector

    def _subscribe_retry_topic(self) -> None:
        """Clustering consumers also read `%RETRY%<group>`, with every tag."""
        if self.clustering:
            self._subscriptions.setdefault(retry_topic(self.group), MessageSelector.of("*"))

    def _unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self.request_rebalance()

    # -- rebalance ----------------------------------------------------------------------------------------------
    def _queues_of(self, topic: str) -> list[MessageQueue]:
        broker = self._broker
        assert broker is not None
        return broker.fetch_subscribe_queues(topic)

    def rebalance(self) -> bool:
        """Re-divide every subscribed topic's queues (`RebalanceImpl.doRebalance`); True when ours changed."""
        broker = self._broker
        if broker is None or self._state != "RUNNING":
            return False
        self._rebalance_requested.clear()
        changed = False
        subscriptions = dict(self._subscriptions)
        for topic in subscriptions:
            mq_all = self._queues_of(topic)
            if self.clustering:
                cid_all = broker.consumer_ids(self.group)
                if not mq_all or not cid_all:
                    mine: set[MessageQueue] = set()
                else:
                    mine = set(allocate(self.allocate_strategy, self.group, self._client_id, mq_all, cid_all))
            else:
                mine = set(mq_all)
            if self._update_process_queues(topic, mine):
                changed = True
                self._message_queue_changed(topic, set(mq_all), mine)
        # Queues of topics no longer subscribed (`truncateMessageQueueNotMyTopic`).
        with self._table_lock:
            stale = [(mq, pq) for mq, pq in self._process_queues.items() if mq.topic not in subscriptions]
        for mq, pq in stale:
            pq.dropped = True
            if self._remove_unnecessary_queue(mq, pq):
                with self._table_lock:
                    self._process_queues.pop(mq, None)
                changed = True
        return changed

    def _update_process_queues(self, topic: str, mine: set[MessageQueue]) -> bool:
        changed = False
        with self._table_lock:
            current = {mq: pq for mq, pq in self._process_queues.items() if mq.topic == topic}
        for mq, pq in list(current.items()):
            # A queue given up whose hand-over could not finish yet (an orderly batch still ran) is
            # tried again; once it is gone, a queue allocated to us again starts afresh below.
            if mq not in mine or pq.dropped:
                pq.dropped = True
                if self._remove_unnecessary_queue(mq, pq):
                    with self._table_lock:
                        self._process_queues.pop(mq, None)
                    del current[mq]
                    changed = True
        for mq in sorted(mine - set(current)):
            if not self._may_take(mq):
                continue
            offset_store = self.offset_store
            assert offset_store is not None
            offset_store.remove(mq)
            try:
                offset = self.compute_pull_from_where(mq)
            except MQClientError:
                log.exception("%s %s: cannot compute where to start %s", self._kind, self.group, mq)
                continue
            pq = ProcessQueue()
            with self._table_lock:
                self._process_queues[mq] = pq
            self._queue_added(mq, pq, offset)
            changed = True
        return changed

    def _may_take(self, mq: MessageQueue) -> bool:
        """Whether a newly allocated queue can be started now (orderly consumers must lock it first)."""
        return True

    def _remove_unnecessary_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """A queue went to another member: keep its offset. False to keep it and retry later."""
        offset_store = self.offset_store
        assert offset_store is not None
        offset_store.persist([mq])
        offset_store.remove(mq)
        return True

    @abc.abstractmethod
    def _queue_added(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """Start pulling a new queue from `offset`."""

    @abc.abstractmethod
    def reset_offsets(self, topic: str, offsets: dict[int, int]) -> None:
        """An admin reset `topic`'s offsets (queue id -> offset): drop what is cached, pull from there."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop consuming, commit, leave the group; idempotent."""

    def _message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mine: set[MessageQueue]) -> None:
        listener = self._queue_listeners.get(topic)
        if listener is not None:
            try:
                listener(topic, mq_all, mine)
            except Exception:
                log.exception("message queue listener of %s failed", topic)

    def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Where a queue starts: its committed offset, else `consume_from_where` (`computePullFromWhere`).

        For a queue the group has no offset for: CONSUME_FROM_TIMESTAMP searches
        the first message stored at or after `consume_timestamp` (a retry topic
        starts at its end); otherwise a clustering group asks the broker first
        (`Broker.offset_for_new_group`: offset 0 while the queue is young), then
        FIRST starts at 0 and the LAST-like modes at the end (a retry topic at 0).
        """
        broker = self._broker
        offset_store = self.offset_store
        assert broker is not None and offset_store is not None
        where = self.consume_from_where
        last = offset_store.read(mq)
        if last >= 0:
            if where is not ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
                log.info("%s %s: %s resumes at its committed offset %d; %s applies only to queues without one",
                         self._kind, self.group, mq, last, where.name)
            return last
        retry = is_retry_topic(mq.topic)
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            if retry:  # a retry topic is never replayed from a time
                return broker.max_offset(mq)
            offset = broker.search_offset(mq, self._consume_timestamp_ms)
            log.info("%s %s: %s has no committed offset; starts at offset %d, the first message stored at or "
                     "after %d (CONSUME_FROM_TIMESTAMP)", self._kind, self.group, mq, offset, self._consume_timestamp_ms)
            return offset
        if self.clustering:
            young = broker.offset_for_new_group(mq)
            if young >= 0:
                if where in _LAST_OFFSET_LIKE and broker.max_offset(mq) > young:
                    log.info("%s %s: %s has no committed offset and still holds its first message in memory; "
                             "it starts at offset %d, as RocketMQ's broker answers a new group, not at the end "
                             "(%s)", self._kind, self.group, mq, young, where.name)
                return young
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        return 0 if retry else broker.max_offset(mq)  # the LAST_OFFSET-like modes

    def _process_queue_items(self) -> list[tuple[MessageQueue, ProcessQueue]]:
        with self._table_lock:
            return list(self._process_queues.items())

    def _drop_all(self) -> None:
        """Shutdown: persist and forget every queue."""
        for mq, pq in self._process_queue_items():
            pq.dropped = True
            self._remove_unnecessary_queue(mq, pq)
        with self._table_lock:
            self._process_queues.clear()

    # -- delivery -------------------------------------------------------------------------------------------
    def _reset_retry_topic(self, msgs: Iterable[MessageExt]) -> None:
        """Messages read from `%RETRY%<group>` show their original topic (`resetRetryAndNamespace`)."""
        retry = retry_topic(self.group)
        for msg in msgs:
            origin = msg.properties.get(PROPERTY_RETRY_TOPIC)
            if origin is not None and msg.topic == retry:
                msg.topic = origin
