"""`RemoteBroker`: the broker port over RocketMQ's remoting protocol (what `mqlite.connect` returns).

Every call of `BrokerPort` becomes the request RocketMQ's client sends for it
(`MQClientAPIImpl`), so the producers and consumers of this package work on a
broker in another process unchanged, and the admin surface of `Broker` maps to
mqadmin's requests (`remoteadmin.RemoteAdmin`). What RocketMQ's client
instance (`MQClientInstance`) does in the background happens here too:

- routes come from `GET_ROUTEINFO_BY_TOPIC`, cached and refreshed every 30 s;
  `NOTIFY_CONSUMER_IDS_CHANGED` drops the cache (a topic's queues may have
  changed: the broker notifies on topic changes as well as membership);
- members and producers are announced by `HEART_BEAT` when they start and
  every 30 s after (`mqlite-remote-heartbeat`), and again at once after a
  reconnect; they leave with `UNREGISTER_CLIENT`;
- the server's requests are answered as `ClientRemotingProcessor` does:
  `NOTIFY_CONSUMER_IDS_CHANGED` -> `request_rebalance()`, `CHECK_TRANSACTION_STATE`
  -> the group's producer's `check_transaction(msg)`, `RESET_CONSUMER_CLIENT_OFFSET`
  -> `reset_offsets`.

Long polling across processes (`watch_arrivals`) needs no thread per queue:
each pull of a watched queue is followed by one issued ahead, a long poll
parked on the server after an empty pull, a prefetch after a full one
(`pullahead.PullAhead`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._service import Service, close_at_exit, forget_at_exit
from ..clock import SYSTEM_CLOCK, Clock
from ..commitlog import PutMessageStatus, PutResult
from ..record import PREFIX, StoredMessage, record_length
from ..config import check_seconds
from ..errors import IllegalStateError, MQClientError, RemotingError, SendTimeoutError
from ..groups import GroupMember, add_member
from ..longpoll import PullResult, PullStatus, Waker
from ..message import (
    PROPERTY_PRODUCER_GROUP,
    EncodedProperties,
    MessageExt,
    MessageQueue,
    SysFlag,
    decode_offset_msg_id,
    encode_properties,
)
from ..metrics import Counters, MetricsSnapshot, collect
from ..port import BrokerPort, QueueKey, Subscription, TransactionChecker
from ..producer import DEFAULT_PRODUCER_GROUP
from ..trace import TRACE_MAX_MSG_SIZE, TRACE_TOPIC, TraceDispatcher
from .client import RemotingClient
from .pullahead import PullAhead
from .remoteadmin import RemoteAdmin, TopicRoute, pairs
from .batch import encode_batch
from .codes import DEFAULT_TOPIC, FLAG_SUBSCRIPTION, FLAG_SUSPEND, RequestCode, ResponseCode
from .faults import exception_for
from .frames import RemotingCommand
from .wirejson import from_wire_json, message_queue_of, mq_wire, to_wire_json

__all__ = ["RemoteBroker", "connect", "DEFAULT_TOPIC", "HEARTBEAT_INTERVAL", "ROUTE_TTL"]

log = logging.getLogger("mqlite.remoting")

#: Queues of a topic created by a send that names `DEFAULT_TOPIC` as its template (its template's, at most 4).
DEFAULT_TOPIC_QUEUE_NUMS = 4
#: `MQClientInstance`: heartbeat to every broker, and refresh the routes in use, every 30 s.
HEARTBEAT_INTERVAL = 30.0
ROUTE_TTL = 30.0

_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
_SEND_STATUS = {
    ResponseCode.SUCCESS: PutMessageStatus.PUT_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: PutMessageStatus.FLUSH_DISK_TIMEOUT,
}
_DEFAULT_QUEUE_NUMS_TEXT = str(DEFAULT_TOPIC_QUEUE_NUMS)
#: An IPv6 store host: a `PutResult` keeps its default (it holds IPv4 bytes only).
_NO_STORE_HOST: tuple[bytes, int] = (b"", 0)


def decode_records(body: bytes | None, broker_name: str) -> list[MessageExt]:
    """The messages of a pull or query body: stored records back to back, each led by its size.

    Decoded lazily, as a local pull's: the queue offset (what a consumer's process
    queue keys on) is read off the record's fixed prefix, the rest when first used.
    """
    if not body:
        return []
    view = memoryview(body)
    of = StoredMessage.of
    prefix = PREFIX.unpack_from
    messages: list[MessageExt] = []
    pos, end = 0, len(body)
    while pos + PREFIX.size <= end:
        fields = prefix(view, pos)
        size = fields[0]
        if size < PREFIX.size or pos + size > end:
            raise RemotingError(f"the server sent a truncated record at byte {pos} of a {end}-byte body")
        msg = of(bytes(view[pos:pos + size]), broker_name)
        msg.queue_offset = fields[5]
        messages.append(msg)
        pos += size
    if pos != end:
        raise RemotingError(f"the server sent {end - pos} bytes after the last whole record of a {end}-byte body")
    return messages


class _Background(Service):
    """`mqlite-remote-heartbeat`: heartbeats and route refreshes every 30 s (`MQClientInstance`'s timers)."""

    def __init__(self, broker: RemoteBroker) -> None:
        super().__init__("remote-heartbeat", HEARTBEAT_INTERVAL)
        self._broker = broker

    def run_once(self) -> None:
        self._broker.send_heartbeats()
        self._broker.refresh_routes()


class RemoteBroker(RemoteAdmin):
    """A broker in another process, reached over RocketMQ's remoting protocol. Use `mqlite.connect()`.

    Implements `mqlite.port.BrokerPort` (every client works on it) and the
    admin surface of `Broker`. Thread-safe; `close()` is idempotent.
    """

    def __init__(self, address: str, *, timeout: float = 3.0, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        self.address = address
        self.timeout = check_seconds("timeout", timeout)
        self.remote = RemotingClient(address, timeout=self.timeout, access_key=access_key, secret_key=secret_key)
        forget_at_exit(self.remote)  # owned: closed with this broker (which is closed at exit if forgotten)
        self._lock = threading.Lock()
        self._closing = False
        self._closed = False
        self._counters = Counters()  # `metrics()`: the highest committed offsets seen, so its counters only grow
        self._users = 0  # users beyond its owner: clients given a store path share one connection
        self._routes: dict[str, tuple[float, TopicRoute]] = {}  # topic -> (fetched at, route body)
        self._routes_version = 0
        self._id_hosts: dict[str, tuple[bytes, int]] = {}  # an offset msg id's host part -> (ip, port)
        self._members: dict[str, dict[str, GroupMember]] = {}  # group -> client id -> member
        self._producers: dict[str, list[TransactionChecker]] = {}
        # RemoteBrokerOffsetStore's client table: (group, queue) -> the offset this client last committed or
        # read. UPDATE_CONSUMER_OFFSET is a plain set on the broker, so `increase_only` is decided here, and
        # the lock keeps two commits of one queue from crossing on the wire.
        self._offsets: dict[tuple[str, MessageQueue], int] = {}
        self._offsets_lock = threading.Lock()
        self._ahead = PullAhead(self.remote, self.timeout, self._pull_result)
        self._trace_dispatchers: list[TraceDispatcher] = []
        self._client_id = f"{_local_host()}@{os.getpid()}@{id(self):x}"
        self.remote.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self.remote.register_handler(RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction)
        self.remote.register_handler(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        self.remote.on_reconnect(self.send_heartbeats)
        try:
            self._broker_name, self._max_message_size = self._handshake()
        except BaseException:
            self.remote.close()
            raise
        self._background = _Background(self)
        self._background.start()
        close_at_exit(self)

    def _handshake(self) -> tuple[str, int]:
        """The server's broker name (cluster info) and its `maxMessageSize` (broker config)."""
        info = self._json(self._call(RequestCode.GET_BROKER_CLUSTER_INFO))
        names = sorted((info or {}).get("brokerAddrTable") or {})
        if not names:
            raise RemotingError(f"the server at {self.address} names no broker in its cluster info; "
                                "is it an mqlite server (mqlite serve) or a RocketMQ broker's name server?")
        response = self._request(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
        size = 4 << 20  # RocketMQ's default maxMessageSize
        if response.code == ResponseCode.SUCCESS and response.body:
            for line in response.body.decode("utf-8", "replace").splitlines():
                name, _, value = line.partition("=")
                if name.strip() == "maxMessageSize" and value.strip().isdigit():
                    size = int(value.strip())
        return names[0], size

    # -- requests ------------------------------------------------------------------------------------------
    def _request(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        if self._closed:
            raise IllegalStateError(f"the connection to {self.address} is closed")
        return self.remote.request(cmd, timeout)

    def _call(self, code: int, fields: Mapping[str, object] | None = None, body: bytes | None = None, *,
              ok: Iterable[int] = (ResponseCode.SUCCESS,), timeout: float | None = None) -> RemotingCommand:
        """A request whose answer must be one of `ok` (SUCCESS); anything else raises as the local broker would."""
        cmd = RemotingCommand.request(code, fields, body)
        response = self._request(cmd, timeout)
        if response.code not in ok:
            raise _error_of(response, code, self.address)
        return response

    def _json(self, response: RemotingCommand) -> Any:
        return from_wire_json(response.body) if response.body else None

    def _decode(self, body: bytes | None) -> list[MessageExt]:
        return decode_records(body, self._broker_name)

    # -- identity and lifecycle -----------------------------------------------------------------------------
    @property
    def broker_name(self) -> str:
        """The served broker's name (in every `MessageQueue` it routes)."""
        return self._broker_name

    @property
    def read_only(self) -> bool:
        """False: a server serves a writable store."""
        return False

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    @property
    def clock(self) -> Clock:
        """The system clock (a remote broker cannot share a test's manual clock)."""
        return SYSTEM_CLOCK

    def metrics(self) -> MetricsSnapshot:
        """The served store's metrics, as `Broker.metrics()` gives them but for the figures that need the files
        (bytes, disk, flush, recovery: None, and left out of `render_prometheus`); so `mqlite.open(path).metrics()`
        works whoever holds the store. `mqlite.metrics.collect(self, self.consumer_offset_table())`, with counters
        this connection keeps between calls (they only grow). Cost: round trips per topic (see `collect`)."""
        return collect(self, self.consumer_offset_table(), counters=self._counters)

    @property
    def max_message_size(self) -> int:
        """The server's `maxMessageSize`."""
        return self._max_message_size

    @property
    def client_state_dir(self) -> str:
        """`~/.mqlite/remote/<host>_<port>`: where clients of this server keep local state (broadcast offsets)."""
        path = os.path.join(os.path.expanduser("~"), ".mqlite", "remote",
                            f"{self.remote.host}_{self.remote.port}".replace(":", "_"))
        os.makedirs(path, exist_ok=True)
        return path

    def share(self) -> RemoteBroker:
        """One more client given a store path uses this connection; it closes with the last `release()`.

        A connection from `mqlite.connect` is never shared: its owner closes it.
        """
        with self._lock:
            if self._closing:
                raise IllegalStateError(f"the connection to {self.address} is closed")
            self._users += 1
        return self

    def release(self) -> None:
        """A client is done with this broker: a shared connection closes with its last user."""
        with self._lock:
            if self._users <= 0:
                return  # owned (mqlite.connect): its owner closes it
            self._users -= 1
            last = self._users == 0
        if last:
            self.close()

    def close(self) -> None:
        """As `Broker.close`: the clients on this connection shut down (consumers commit their offsets
        over it first), what is left is unregistered, the heartbeat stops, the connection closes. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True  # no new consumers; requests still go out until the clients are down
        forget_at_exit(self)
        for dispatcher in list(self._trace_dispatchers):
            dispatcher.flush()
        for member in [m for table in list(self._members.values()) for m in list(table.values())]:
            try:
                member.shutdown()
            except Exception:
                log.exception("closing %s: a consumer failed to shut down", self.address)
        for producer in [p for group in list(self._producers.values()) for p in list(group)]:
            try:
                producer.shutdown()
            except Exception:
                log.exception("closing %s: a producer failed to shut down", self.address)
        self._ahead.close()  # a consumer still sleeping on its waker wakes up
        self._background.stop()
        self._unregister_all()
        self._closed = True
        self.remote.close()

    def __enter__(self) -> RemoteBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<mqlite.RemoteBroker {self.address}{' closed' if self._closed else ''}>"

    # -- routes -------------------------------------------------------------------------------------------
    @property
    def routes_version(self) -> int:
        """Grows whenever a refreshed route differs from the cached one."""
        return self._routes_version

    def _route(self, topic: str, *, fresh: bool = False) -> TopicRoute | None:
        """A topic's route (`TopicRouteData` as a dict), or None when the server has no such topic."""
        if not isinstance(topic, str) or not topic:
            raise MQClientError(f"topic must be a non-empty str, got {topic!r}")
        cached = self._routes.get(topic)
        if cached is not None and not fresh and time.monotonic() - cached[0] < ROUTE_TTL:
            return cached[1]
        response = self._call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                              ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        route: TopicRoute | None = self._json(response) if response.code == ResponseCode.SUCCESS else None
        with self._lock:
            old = self._routes.get(topic)
            if old is not None and _queue_layout(old[1]) != _queue_layout(route):
                self._routes_version += 1
            if route is None:
                self._routes.pop(topic, None)  # not cached: the topic may appear any moment (a first send)
            else:
                self._routes[topic] = (time.monotonic(), route)
        return route

    def refresh_routes(self) -> None:
        """Re-read every cached route (the 30 s timer); a changed one bumps `routes_version`."""
        for topic in list(self._routes):
            try:
                self._route(topic, fresh=True)
            except (RemotingError, MQClientError):
                pass  # the next round tries again, as updateTopicRouteInfoFromNameServer does

    def _forget_routes(self) -> None:
        with self._lock:
            if self._routes:
                self._routes.clear()
                self._routes_version += 1

    @staticmethod
    def _queues(topic: str, route: TopicRoute | None, writable: bool) -> list[MessageQueue]:
        """The read (or write) queues a route gives `topic`, skipping brokers without the permission."""
        queues: list[MessageQueue] = []
        for data in (route or {}).get("queueDatas") or ():
            perm = int(data.get("perm", 6))
            if writable and not perm & 2 or not writable and not perm & 4:
                continue
            nums = int(data.get("writeQueueNums", 0) if writable else data.get("readQueueNums", 0))
            queues.extend(MessageQueue(topic, data["brokerName"], i) for i in range(nums))
        return queues

    def fetch_publish_queues(self, topic: str, default_queue_nums: int | None = None) -> list[MessageQueue]:
        """Writable queues of `topic`; for a new topic, the default topic's (the first send creates it)."""
        route = self._route(topic, fresh=True)
        if route is not None:
            queues = self._queues(topic, route, True)
            if not queues:
                raise MQClientError(f"topic {topic!r} is not writable on {self.address}")
            return queues
        template = self._route(DEFAULT_TOPIC)
        if template is None:
            raise MQClientError(f"topic {topic!r} does not exist on {self.address} and auto_create_topic is off "
                                f"there; create it with broker.create_topic({topic!r}, queue_nums)")
        nums = min(default_queue_nums or DEFAULT_TOPIC_QUEUE_NUMS, DEFAULT_TOPIC_QUEUE_NUMS)
        return self._queues(topic, template, True)[:nums]

    def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of `topic` (none for an unknown topic)."""
        return self._queues(topic, self._route(topic), False)

    # -- sending ------------------------------------------------------------------------------------------
    def put_message(self, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None = None, *,
                    flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                    reconsume_times: int = 0) -> PutResult:
        """`SEND_MESSAGE_V2`: store one message on the server."""
        props = properties or {}
        group = props.get(PROPERTY_PRODUCER_GROUP, DEFAULT_PRODUCER_GROUP)
        if type(props) is EncodedProperties:  # a producer's send: its encoding comes with it
            encoded = props.encoded
            text = encoded.decode()
        else:
            text = encode_properties(props) if props else ""
            encoded = text.encode()
        born = born_timestamp if born_timestamp is not None else SYSTEM_CLOCK.now_ms()
        # The ext fields as the strings they travel as (what header_fields would make of the values).
        fields = {"a": group, "b": topic, "c": DEFAULT_TOPIC, "d": _DEFAULT_QUEUE_NUMS_TEXT, "e": str(queue_id),
                  "f": str(sys_flag), "g": str(born), "h": str(flag), "i": text, "j": str(reconsume_times),
                  "k": "false", "m": "false"}
        response = self._send(RequestCode.SEND_MESSAGE_V2, fields, body)
        size = record_length(sys_flag, len(body), len(topic.encode()), len(encoded))
        return self._put_result(response, size, 1)

    def put_messages(self, topic: str, queue_id: int, bodies: Sequence[bytes],
                     properties: Sequence[Mapping[str, str] | None], *, flags: Sequence[int] | None = None,
                     born_timestamp: int | None = None) -> PutResult:
        """`SEND_BATCH_MESSAGE`: store a batch of one queue (consecutive offsets)."""
        if not bodies:
            raise MQClientError("a batch needs at least one message")
        group = DEFAULT_PRODUCER_GROUP
        first = properties[0] if properties else None
        if first:
            group = first.get(PROPERTY_PRODUCER_GROUP, group)
        body = encode_batch(zip(flags or [0] * len(bodies), bodies, [p or {} for p in properties]))
        born = born_timestamp if born_timestamp is not None else SYSTEM_CLOCK.now_ms()
        fields = {"a": group, "b": topic, "c": DEFAULT_TOPIC, "d": _DEFAULT_QUEUE_NUMS_TEXT, "e": str(queue_id),
                  "f": "0", "g": str(born), "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
        response = self._send(RequestCode.SEND_BATCH_MESSAGE, fields, body)
        return self._put_result(response, len(body), len(bodies))

    def _send(self, code: int, fields: dict[str, str], body: bytes) -> RemotingCommand:
        cmd = RemotingCommand.request(code, None, body)
        cmd.ext_fields = fields  # strings already
        try:
            response = self._request(cmd)
        except RemotingError as exc:
            raise SendTimeoutError(f"send to {self.address} failed: {exc}") from exc
        if response.code not in _SEND_STATUS:
            raise _error_of(response, code, self.address)
        return response

    def _put_result(self, response: RemotingCommand, size: int, count: int) -> PutResult:
        ext = response.ext_fields or {}
        ids = [i for i in ext.get("msgId", "").split(",") if i]
        store_host = None
        if ids:
            # The records' store host (the server's address), in their ids; the batch's ids share it. The
            # host part of an id is the same for every answer of a server: decoded (and checked) once.
            first = ids[0]
            host_part = first[:-16]
            store_host = self._id_hosts.get(host_part)
            if store_host is None or len(first) not in (32, 56):
                host, port, _ = decode_offset_msg_id(first)  # checks the form
                store_host = (socket.inet_aton(host), port) if ":" not in host else _NO_STORE_HOST
                if len(self._id_hosts) < 16:
                    self._id_hosts[host_part] = store_host
        # The commit-log offset is an id's last 16 hex digits (8 bytes), whatever the host's length.
        offsets = [int(i[-16:], 16) for i in ids]
        # RocketMQ's answer has no store time: the time the answer came is the closest this side knows.
        stored = int(ext["storeTimestamp"]) if "storeTimestamp" in ext else SYSTEM_CLOCK.now_ms()
        status = _SEND_STATUS[response.code]  # type: ignore[index]  # (an IntEnum key hashes as its int)
        queue_offset = int(ext.get("queueOffset", -1))
        first_offset = offsets[0] if offsets else -1
        many = offsets if count > 1 else None
        if store_host is None or store_host is _NO_STORE_HOST:
            return PutResult(first_offset, size, queue_offset, stored, count, many, status)
        return PutResult(first_offset, size, queue_offset, stored, count, many, status, store_host)

    def end_transaction(self, half_commit_log_offset: int, commit: bool, producer_group: str, *,
                        from_check: bool = False, transaction_id: str | None = None) -> PutResult | None:
        """`END_TRANSACTION`: commit or roll back the half message at `half_commit_log_offset` (waits for the answer)."""
        end = SysFlag.TRANSACTION_COMMIT_TYPE if commit else SysFlag.TRANSACTION_ROLLBACK_TYPE
        fields = {"producerGroup": producer_group, "tranStateTableOffset": 0,
                  "commitLogOffset": half_commit_log_offset,
                  "commitOrRollback": end,
                  "fromTransactionCheck": from_check, "msgId": transaction_id or "",
                  "transactionId": transaction_id}
        self._call(RequestCode.END_TRANSACTION, fields)
        return None

    def register_producer(self, group: str, producer: TransactionChecker) -> None:
        """Announce a producer of `group` (check-backs of its half messages may come here)."""
        with self._lock:
            self._producers.setdefault(group, []).append(producer)
        try:
            self._heartbeat(self._client_id, producers=[group])
        except BaseException:
            self._forget_producer(group, producer)  # the start fails: nothing stays registered
            raise

    def unregister_producer(self, group: str, producer: TransactionChecker) -> None:
        """A producer shut down; the group leaves the server when its last one does."""
        if self._forget_producer(group, producer):
            self._unregister(self._client_id, producer_group=group)

    def _forget_producer(self, group: str, producer: TransactionChecker) -> bool:
        """Drop `producer`; True when it was its group's last one here."""
        with self._lock:
            members = self._producers.get(group, [])
            if producer in members:
                members.remove(producer)
            if members:
                return False
            self._producers.pop(group, None)
            return True

    def _unregister(self, client_id: str, *, producer_group: str | None = None,
                    consumer_group: str | None = None) -> None:
        """`UNREGISTER_CLIENT`; a server that is gone or refuses is only logged (RocketMQ's
        `unregisterClient` does the same): it forgets a closed connection's clients anyway."""
        if not self._closed:
            self._send_unregister(client_id, producer_group=producer_group, consumer_group=consumer_group)

    def _send_unregister(self, client_id: str, *, producer_group: str | None = None,
                         consumer_group: str | None = None) -> None:
        cmd = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {
            "clientID": client_id, "producerGroup": producer_group, "consumerGroup": consumer_group})
        try:
            response = self.remote.request(cmd)
        except (RemotingError, IllegalStateError) as exc:
            log.warning("%s: unregistering %s failed (%s)", self.address, client_id, exc)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("%s: unregistering %s refused: %s", self.address, client_id, response.remark)

    # -- consuming ----------------------------------------------------------------------------------------
    def pull(self, group: str, mq: MessageQueue, offset: int, max_nums: int = 32,
             message_filter: Subscription | None = None, wait: float = 0.0) -> PullResult:
        """`PULL_MESSAGE`: up to `max_nums` messages from `offset`, suspended on the server up to `wait` s.

        A pull with `wait=0` of a watched queue may be answered by a pull issued
        ahead (`pullahead`): a parked long poll still waiting answers NO_NEW_MSG
        at once, a finished one or a prefetch gives its result.
        """
        expression = _expression(message_filter)
        if wait > 0:
            return self._pull_now(group, mq, offset, max_nums, expression, message_filter, wait)
        key = (group, mq.topic, mq.queue_id)
        result = self._ahead.answer(key, offset, max_nums, expression)
        if result is None:
            result = self._pull_now(group, mq, offset, max_nums, expression, message_filter, 0.0)

        def request_for(start: int, suspend: float, nums: int) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                           self._pull_fields(group, mq, start, nums, expression, suspend))

        self._ahead.follow(key, result, max_nums, expression, request_for, message_filter)
        return result

    def _pull_fields(self, group: str, mq: MessageQueue, offset: int, max_nums: int,
                     expression: tuple[str, str] | None, wait: float) -> dict[str, object]:
        sys_flag = (FLAG_SUSPEND if wait > 0 else 0) | FLAG_SUBSCRIPTION
        expression_type, text = expression or ("TAG", "*")
        return {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "queueOffset": offset,
                "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": 0,
                "suspendTimeoutMillis": int(wait * 1000), "subscription": text, "subVersion": 0,
                "expressionType": expression_type}

    def _pull_now(self, group: str, mq: MessageQueue, offset: int, max_nums: int,
                  expression: tuple[str, str] | None, message_filter: Subscription | None,
                  wait: float) -> PullResult:
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise MQClientError(f"offset must be an int, got {offset!r}")
        if not isinstance(max_nums, int) or max_nums < 1:
            raise MQClientError(f"max_nums must be a positive int, got {max_nums!r}")
        wait = check_seconds("wait", wait)
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                      self._pull_fields(group, mq, offset, max_nums, expression, wait))
        return self._pull_result(self._request(cmd, wait + self.timeout), offset, message_filter)

    def _pull_result(self, response: RemotingCommand, offset: int,
                     message_filter: Subscription | None) -> PullResult:
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise _error_of(response, RequestCode.PULL_MESSAGE, self.address)
        ext = response.ext_fields or {}
        messages = decode_records(response.body, self._broker_name) if status is PullStatus.FOUND else []
        if message_filter is not None and messages:
            # The server matched tag hash codes; the exact check is the client's (PullAPIWrapper).
            messages = [m for m in messages if message_filter.is_matched_by_commit_log(m)]
        return PullResult(status, int(ext.get("nextBeginOffset", offset)), int(ext.get("minOffset", 0)),
                          int(ext.get("maxOffset", 0)), messages)

    def watch_arrivals(self, waker: Waker, queues: Iterable[QueueKey]) -> None:
        """Set `waker` when one of `queues` may have grown (through parked long-polling pulls)."""
        self._ahead.watch(waker, queues)

    def unwatch_arrivals(self, waker: Waker, queues: Iterable[QueueKey] | None = None) -> None:
        """Stop setting `waker` for `queues` (all when None)."""
        self._ahead.unwatch(waker, queues)

    def register_consumer(self, group: str, member: GroupMember) -> None:
        """Announce `member` to the server (a heartbeat); every member of `group` rebalances."""
        if self._closing:
            raise IllegalStateError(f"the connection to {self.address} is closed; start consumers before close()")
        with self._lock:
            add_member(self._members.setdefault(group, {}), group, member)
        try:
            self._heartbeat(member.client_id, consumers=[(group, member)])
        except BaseException:
            self._forget_member(group, member)  # the start fails: nothing stays registered
            raise
        member.request_rebalance()

    def unregister_consumer(self, group: str, member: GroupMember) -> None:
        """`UNREGISTER_CLIENT`: the server tells the other members to take over `member`'s queues."""
        if self._forget_member(group, member):
            self._unregister(member.client_id, consumer_group=group)

    def _forget_member(self, group: str, member: GroupMember) -> bool:
        """Drop `member`; False when it was not registered."""
        with self._lock:
            table = self._members.get(group)
            if not table or table.get(member.client_id) is not member:
                return False
            del table[member.client_id]
            if not table:
                del self._members[group]
            return True

    def consumer_ids(self, group: str) -> list[str]:
        """`GET_CONSUMER_LIST_BY_GROUP`: the live members' client ids, sorted."""
        response = self._call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group},
                              ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if response.code != ResponseCode.SUCCESS:
            return []  # RocketMQ answers SYSTEM_ERROR "no consumer for this group"
        return sorted((self._json(response) or {}).get("consumerIdList") or [])

    def lock_queues(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """`LOCK_BATCH_MQ`: lock (or renew) `mqs` for `client_id`; returns the ones it holds."""
        mqs = list(mqs)
        if not mqs:
            return set()
        body = to_wire_json({"consumerGroup": group, "clientId": client_id, "onlyThisBroker": False,
                             "mqSet": [mq_wire(mq) for mq in mqs]})
        response = self._call(RequestCode.LOCK_BATCH_MQ, None, body)
        locked = (self._json(response) or {}).get("lockOKMQSet") or []
        return {message_queue_of(m) for m in locked}

    def unlock_queues(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """`UNLOCK_BATCH_MQ`: give locks back."""
        mqs = list(mqs)
        if not mqs:
            return
        body = to_wire_json({"consumerGroup": group, "clientId": client_id, "onlyThisBroker": False,
                             "mqSet": [mq_wire(mq) for mq in mqs]})
        self._call(RequestCode.UNLOCK_BATCH_MQ, None, body)

    def send_message_back(self, group: str, msg: MessageExt, delay_level: int = 0,
                          max_reconsume_times: int = 16) -> PutResult:
        """`CONSUMER_SEND_MSG_BACK`: the server stores the retry (or dead-letter) copy of `msg`."""
        if not isinstance(msg, MessageExt):
            raise MQClientError(f"send_message_back needs a MessageExt a consumer received, got {type(msg).__name__}")
        fields = {"offset": msg.commit_log_offset, "group": group, "delayLevel": delay_level,
                  "originMsgId": msg.msg_id, "originTopic": msg.topic, "unitMode": False,
                  "maxReconsumeTimes": max_reconsume_times}
        response = self._call(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
        return self._put_result(response, 0, 1)

    # -- offsets ------------------------------------------------------------------------------------------
    def commit_offset(self, group: str, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """`UPDATE_CONSUMER_OFFSET` (waits for the answer, so a query after it sees the offset).

        The broker's update is a plain set (RocketMQ has no increase-only flag
        on the wire), so, as RocketMQ's `RemoteBrokerOffsetStore`, this client
        keeps a table of the offsets it committed or read, and with
        `increase_only` an offset below that table's is not sent, nor one equal
        to it (a push consumer re-commits its position after every empty pull,
        RocketMQ's `correctTagsOffset`: a round trip each would cost more than the
        pull). Another process's commits are not in this table: see
        docs/design.md "Serving".
        """
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise MQClientError(f"offset must be an int >= 0 (the next queue offset to consume), got {offset!r}")
        key = (group, mq)
        with self._offsets_lock:
            known = self._offsets.get(key)
            if increase_only and known is not None and known >= offset:
                return
            self._call(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": mq.topic,
                                                             "queueId": mq.queue_id, "commitOffset": offset})
            self._offsets[key] = offset

    def query_offset(self, group: str, mq: MessageQueue) -> int:
        """`QUERY_CONSUMER_OFFSET`: the committed offset, or -1 (`QUERY_NOT_FOUND`)."""
        # setZeroIfNotFound=false: the committed offset only, not the answer for a new group (that is
        # offset_for_new_group's), so both calls mean what they mean on a local broker.
        response = self._call(RequestCode.QUERY_CONSUMER_OFFSET,
                              {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id,
                               "setZeroIfNotFound": False},
                              ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code != ResponseCode.SUCCESS:
            return -1
        offset = int((response.ext_fields or {}).get("offset", -1))
        with self._offsets_lock:  # what the broker holds now (another process may have moved it)
            self._offsets[(group, mq)] = offset
        return offset

    def offset_for_new_group(self, mq: MessageQueue) -> int:
        """0 when `mq` still starts at offset 0 (RocketMQ's answer to a group without an offset), else -1.

        The server's own rule also answers -1 for a young queue whose first
        message lies beyond 40% of its RAM behind the log's end; no request
        asks that without a group, so a remote consumer starts such a queue at 0.
        """
        return 0 if self.min_offset(mq) == 0 else -1

    def min_offset(self, mq: MessageQueue) -> int:
        """`GET_MIN_OFFSET`."""
        return self._offset_call(RequestCode.GET_MIN_OFFSET, mq)

    def max_offset(self, mq: MessageQueue) -> int:
        """`GET_MAX_OFFSET`."""
        return self._offset_call(RequestCode.GET_MAX_OFFSET, mq)

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        """`SEARCH_OFFSET_BY_TIMESTAMP`: the first offset stored at or after `timestamp` (epoch ms)."""
        return self._offset_call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp=timestamp)

    def _offset_call(self, code: int, mq: MessageQueue, **extra: object) -> int:
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"expected an mqlite.MessageQueue, got {mq!r}")
        response = self._call(code, {"topic": mq.topic, "queueId": mq.queue_id, **extra})
        return int((response.ext_fields or {}).get("offset", 0))

    @property
    def group_commit(self) -> None:
        """None: the store's flushes are the server's (a send is answered once its flush mode is met)."""
        return None

    def wait_dispatched(self, timeout: float | None = None) -> bool:
        """True at once, without a request: nothing this client stored can be missed by its next read.

        A put over the wire is answered after its consume-queue unit is written
        (units are written with the append), so a pull made after the answer
        finds it; key and unique-id look-ups (`query_message`, `view_message` by
        msg id) run the server's `Broker.query_message`, which waits until its
        index has caught up with everything stored before the request. What
        this does not cover: records another client stores after this call.
        """
        return True

    # -- tracing ------------------------------------------------------------------------------------------
    def trace_dispatcher(self, group: str) -> TraceDispatcher:
        """A dispatcher sending `group`'s trace records to the server's trace topic in batches."""
        dispatcher = TraceDispatcher(group, lambda bodies, props: self.put_messages(TRACE_TOPIC, 0, bodies, props),
                                     max_body=min(self._max_message_size, TRACE_MAX_MSG_SIZE),
                                     max_batch_bytes=min(1 << 20, self._max_message_size))
        self._trace_dispatchers.append(dispatcher)
        return dispatcher

    # -- heartbeats and the server's requests ----------------------------------------------------------------
    def _heartbeat(self, client_id: str, *, producers: Sequence[str] = (),
                   consumers: Sequence[tuple[str, GroupMember]] = ()) -> None:
        consumer_data = []
        for group, member in consumers:
            data = member.consumer_data()
            consumer_data.append({
                "groupName": group, "consumeType": data.consume_type, "messageModel": data.message_model,
                "consumeFromWhere": data.consume_from_where, "unitMode": False,
                "subscriptionDataSet": [
                    {"topic": topic, "subString": text, "expressionType": kind, "classFilterMode": False,
                     "tagsSet": [], "codeSet": [], "subVersion": 0}
                    for topic, (kind, text) in sorted(data.subscriptions.items())]})
        body = to_wire_json({"clientID": client_id, "consumerDataSet": consumer_data,
                             "producerDataSet": [{"groupName": g} for g in producers]})
        self._call(RequestCode.HEART_BEAT, None, body)

    def send_heartbeats(self) -> None:
        """Announce every producer and member again (the 30 s timer, and at once after a reconnect)."""
        if self._closed:
            return
        with self._lock:
            producers = sorted(self._producers)
            members = [(group, member) for group, table in self._members.items() for member in table.values()]
        try:
            if producers:
                self._heartbeat(self._client_id, producers=producers)
            for group, member in members:
                self._heartbeat(member.client_id, consumers=[(group, member)])
        except (RemotingError, IllegalStateError):
            pass  # the next round (or the next reconnect) tries again
        for _, member in members:
            member.request_rebalance()  # a restarted server may have lost locks and members meanwhile

    def _unregister_all(self) -> None:
        """On close: nothing is left registered (the server also forgets a closed connection's clients)."""
        with self._lock:
            producers, self._producers = list(self._producers), {}
            members = [(g, cid) for g, table in self._members.items() for cid in table]
            self._members = {}
        if not self.remote.connected:
            return  # the server already forgot them with the connection
        for group in producers:
            self._send_unregister(self._client_id, producer_group=group)
        for group, cid in members:
            self._send_unregister(cid, consumer_group=group)

    def _members_of(self, group: str) -> list[GroupMember]:
        with self._lock:
            return list(self._members.get(group, {}).values())

    def _on_ids_changed(self, cmd: RemotingCommand) -> RemotingCommand | None:
        self._forget_routes()  # topic layouts change with membership news too
        for member in self._members_of((cmd.ext_fields or {}).get("consumerGroup", "")):
            member.request_rebalance()
        return None

    def _on_check_transaction(self, cmd: RemotingCommand) -> RemotingCommand | None:
        for msg in decode_records(cmd.body, self._broker_name):
            group = msg.properties.get(PROPERTY_PRODUCER_GROUP, "")
            with self._lock:
                producers = list(self._producers.get(group, ()))
            for producer in producers:  # a plain producer answers False: ask the next one
                if producer.check_transaction(msg):
                    break
        return None

    def _on_reset_offset(self, cmd: RemotingCommand) -> RemotingCommand | None:
        ext = cmd.ext_fields or {}
        topic, group = ext.get("topic", ""), ext.get("group", "")
        table = (from_wire_json(cmd.body) if cmd.body else {}).get("offsetTable") or {}
        offsets = {mq.queue_id: int(offset) for mq, offset in pairs(table) if mq.topic == topic}
        for member in self._members_of(group):
            if topic in member.subscribed_topics():
                member.reset_offsets(topic, dict(offsets))
        return RemotingCommand.response(ResponseCode.SUCCESS, cmd.opaque)


def connect(address: str, *, timeout: float = 3.0, access_key: str | None = None,
            secret_key: str | None = None) -> RemoteBroker:
    """A `RemoteBroker` for the server at `address` ("host:port"); `RemotingError` when nothing answers there."""
    return RemoteBroker(address, timeout=timeout, access_key=access_key, secret_key=secret_key)


def _expression(message_filter: Subscription | None) -> tuple[str, str] | None:
    if message_filter is None:
        return None
    return message_filter.expression_type, message_filter.expression


def _queue_layout(route: TopicRoute | None) -> list[tuple[object, ...]] | None:
    if route is None:
        return None
    return sorted((d.get("brokerName"), d.get("readQueueNums"), d.get("writeQueueNums"), d.get("perm"))
                  for d in route.get("queueDatas") or ())


def _local_host() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _error_of(response: RemotingCommand, code: int, address: str) -> Exception:
    """The exception for a refused request: what the local broker raises for the same cause.

    The server answers a broker's exception as `faults.EXCEPTION_CODES` says (the exception's text as
    the remark), a busy one with `SYSTEM_BUSY`; `faults.exception_for` reads the table backwards.
    """
    answer = _name(ResponseCode, response.code)
    text = f"{address} refused {_name(RequestCode, code)} ({answer}){': ' + response.remark if response.remark else ''}"
    if response.code == ResponseCode.SYSTEM_BUSY:  # flow control, not an error of the request
        return RemotingError(text + "; try again later")
    return exception_for(response.code, response.ext_fields)(text)


def _name(codes: type[RequestCode] | type[ResponseCode], code: int) -> str:
    try:
        return codes(code).name
    except ValueError:
        return str(code)


if TYPE_CHECKING:
    def _remote_broker_implements_the_port(broker: RemoteBroker) -> BrokerPort:
        return broker  # mypy checks every member of BrokerPort against RemoteBroker here
