"""The broker port: everything a client may ask of a broker, and nothing more.

`Producer`, `TransactionProducer`, `PushConsumer`, `LitePullConsumer`,
`mqlite.aio` and `mqlite.testing` reach a broker only through `BrokerPort`.
Two classes implement it: the embedded `Broker` (calls in this process) and
`RemoteBroker` (the same calls over RocketMQ's remoting protocol to a process
that serves a store), so a client never knows which one it has.

The port is RocketMQ's client-to-broker surface in Python terms:

| port method | RocketMQ request |
|---|---|
| `fetch_publish_queues`, `fetch_subscribe_queues`, `routes_version` | `GET_ROUTEINFO_BY_TOPIC` (+ the 30 s route refresh) |
| `put_message` / `put_messages` | `SEND_MESSAGE(_V2)` / `SEND_BATCH_MESSAGE` |
| `end_transaction`; `register_producer` (check-backs) | `END_TRANSACTION`; `HEART_BEAT` + `CHECK_TRANSACTION_STATE` |
| `pull` (long polling with `wait`); `watch_arrivals` | `PULL_MESSAGE` (suspend timeout) |
| `commit_offset`, `query_offset`, `offset_for_new_group` | `UPDATE_CONSUMER_OFFSET`, `QUERY_CONSUMER_OFFSET` |
| `min_offset`, `max_offset`, `search_offset` | `GET_MIN_OFFSET`, `GET_MAX_OFFSET`, `SEARCH_OFFSET_BY_TIMESTAMP` |
| `register_consumer`, `unregister_consumer`, `consumer_ids` | `HEART_BEAT`, `UNREGISTER_CLIENT`, `GET_CONSUMER_LIST_BY_GROUP` (+ `NOTIFY_CONSUMER_IDS_CHANGED`) |
| `lock_queues`, `unlock_queues` | `LOCK_BATCH_MQ`, `UNLOCK_BATCH_MQ` |
| `send_message_back` | `CONSUMER_SEND_MSG_BACK` |
| `view_message` | `VIEW_MESSAGE_BY_ID` |
| `wait_dispatched` | no request: a local wait for the reput service (the holder's own) |
| `group_commit` | no request: the local store's SYNC_FLUSH group commit, which `send_async` pipelines through |
| `trace_dispatcher` | `SEND_MESSAGE` to `RMQ_SYS_TRACE_TOPIC` |

Callbacks go the other way through two small protocols the clients implement:
`GroupMember` (a consumer: rebalance, offset reset) and `TransactionChecker` (a
transactional producer: check-back).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from .clock import Clock
from .commitlog import PutResult
from .groups import GroupMember
from .longpoll import PullResult, Waker
from .message import MessageExt, MessageQueue
from .storebase import MessageFilter
from .storeservices import GroupCommit
from .trace import TraceDispatcher

__all__ = ["BrokerPort", "Subscription", "TransactionChecker", "GroupMember", "QueueKey"]

#: (topic, queue id): a queue named without a broker.
QueueKey = tuple[str, int]


class Subscription(MessageFilter, Protocol):
    """A consumer's filter with the expression it came from (a `MessageSelector`).

    The local broker uses the match methods; a remote one sends the expression.
    """

    @property
    def expression_type(self) -> str:
        """`"TAG"` or `"SQL92"`."""
        ...

    @property
    def expression(self) -> str:
        """The expression text (`"*"` for every tag)."""
        ...


class TransactionChecker(Protocol):
    """A live producer as the broker sees it (every producer registers, as RocketMQ's heartbeat
    carries each `ProducerData`); check-backs of its group go to one that can answer them
    (RocketMQ's `CHECK_TRANSACTION_STATE`)."""

    def check_transaction(self, msg: MessageExt) -> bool:
        """Ask the local transaction listener about the half message `msg` and end it by the answer.

        False when this producer has no transaction listener (a plain producer): the broker asks
        another producer of the group.
        """
        ...

    def shutdown(self) -> None:
        """Stop: the broker this producer sends to is closing (idempotent)."""
        ...


@runtime_checkable
class BrokerPort(Protocol):
    """A broker as its clients see it (see the module notes for the RocketMQ request behind each call)."""

    # -- identity and lifecycle ---------------------------------------------------------------------------
    @property
    def broker_name(self) -> str:
        """The name in every `MessageQueue` of this broker."""
        ...

    @property
    def read_only(self) -> bool:
        """True when nothing may be written (a read-only store)."""
        ...

    @property
    def closed(self) -> bool:
        """True once closed (or, for a remote broker, disconnected for good)."""
        ...

    @property
    def clock(self) -> Clock:
        """The broker's clock: born times and consume timestamps follow it (a test's mock clock)."""
        ...

    @property
    def max_message_size(self) -> int:
        """The largest body the broker accepts, in bytes."""
        ...

    @property
    def client_state_dir(self) -> str:
        """A directory for state a client keeps itself (broadcast offsets): the store, or a local one."""
        ...

    def release(self) -> None:
        """A client is done with this broker (a shared broker closes with its last user)."""
        ...

    # -- routes ----------------------------------------------------------------------------------------
    @property
    def routes_version(self) -> int:
        """Changes whenever a topic's queues may have changed: cached queue lists are stale then."""
        ...

    def fetch_publish_queues(self, topic: str, default_queue_nums: int | None = None) -> list[MessageQueue]:
        """Writable queues of `topic` (auto-created with `default_queue_nums` queues when allowed)."""
        ...

    def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of `topic`."""
        ...

    # -- sending ----------------------------------------------------------------------------------------
    def put_message(self, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None = None, *,
                    flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                    reconsume_times: int = 0) -> PutResult:
        """Store one message (delay and half-message rewrites included)."""
        ...

    def put_messages(self, topic: str, queue_id: int, bodies: Sequence[bytes],
                     properties: Sequence[Mapping[str, str] | None], *, flags: Sequence[int] | None = None,
                     born_timestamp: int | None = None) -> PutResult:
        """Store a batch of one queue (consecutive queue offsets)."""
        ...

    def end_transaction(self, half_commit_log_offset: int, commit: bool, producer_group: str, *,
                        from_check: bool = False, transaction_id: str | None = None) -> PutResult | None:
        """Commit or roll back the half message stored at `half_commit_log_offset`."""
        ...

    def register_producer(self, group: str, producer: TransactionChecker) -> None:
        """A producer started: check-backs of `group` may go to it."""
        ...

    def unregister_producer(self, group: str, producer: TransactionChecker) -> None:
        """A producer shut down."""
        ...

    # -- consuming --------------------------------------------------------------------------------------
    def pull(self, group: str, mq: MessageQueue, offset: int, max_nums: int = 32,
             message_filter: Subscription | None = None, wait: float = 0.0) -> PullResult:
        """Up to `max_nums` messages of `mq` from `offset`; parks up to `wait` seconds when there are none."""
        ...

    def watch_arrivals(self, waker: Waker, queues: Iterable[QueueKey]) -> None:
        """Call `waker.set()` when one of `queues` may have grown (a consumer's pull thread sleeps on it)."""
        ...

    def unwatch_arrivals(self, waker: Waker, queues: Iterable[QueueKey] | None = None) -> None:
        """Stop watching `queues` (all of them when None)."""
        ...

    def register_consumer(self, group: str, member: GroupMember) -> None:
        """A consumer joined `group`: every member rebalances."""
        ...

    def unregister_consumer(self, group: str, member: GroupMember) -> None:
        """A consumer left `group`: the others take its queues over."""
        ...

    def consumer_ids(self, group: str) -> list[str]:
        """The client ids of `group`'s live members, sorted (the input of queue allocation)."""
        ...

    def lock_queues(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock `mqs` for an orderly consumer; returns the ones it holds now."""
        ...

    def unlock_queues(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Give locks back; the group's other members are asked to rebalance (the next owner can lock)."""
        ...

    def send_message_back(self, group: str, msg: MessageExt, delay_level: int = 0,
                          max_reconsume_times: int = 16) -> PutResult:
        """A consumer failed `msg`: store its retry (or dead-letter) copy."""
        ...

    # -- offsets ------------------------------------------------------------------------------------------
    def commit_offset(self, group: str, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Record `group`'s next offset for `mq`."""
        ...

    def query_offset(self, group: str, mq: MessageQueue) -> int:
        """`group`'s committed offset for `mq`, or -1 when it has none."""
        ...

    def offset_for_new_group(self, mq: MessageQueue) -> int:
        """What the broker answers a group with no offset for `mq`: 0 or -1."""
        ...

    def min_offset(self, mq: MessageQueue) -> int:
        """The oldest queue offset still stored."""
        ...

    def max_offset(self, mq: MessageQueue) -> int:
        """The next queue offset to be written."""
        ...

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        """The first queue offset stored at or after `timestamp` (epoch ms)."""
        ...

    def wait_dispatched(self, timeout: float | None = None) -> bool:
        """Block until everything stored so far is visible to pulls; False on timeout."""
        ...

    @property
    def group_commit(self) -> GroupCommit | None:
        """The store's group commit when it is in this process and flushes synchronously (SYNC_FLUSH):
        a producer's `send_async` stores on the caller's thread and completes with its flush. Else None."""
        ...

    def view_message(self, msg_id: str) -> MessageExt:
        """A stored message by its `offset_msg_id` (or client `msg_id`); `MessageNotFoundError` when absent."""
        ...

    # -- tracing ------------------------------------------------------------------------------------------
    def trace_dispatcher(self, group: str) -> TraceDispatcher:
        """A (not yet started) dispatcher storing `group`'s trace records on this broker."""
        ...
