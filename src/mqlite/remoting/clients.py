"""Remote clients: heartbeats, membership, queue locks, and the broker's calls back to clients.

RocketMQ's `ClientManageProcessor` and `ConsumerManageProcessor` (`HEART_BEAT`, `UNREGISTER_CLIENT`,
`GET_CONSUMER_LIST_BY_GROUP`, `CHECK_CLIENT_CONFIG`), `AdminBrokerProcessor`'s `LOCK_BATCH_MQ`,
`UNLOCK_BATCH_MQ` and `GET_CONSUMER_CONNECTION_LIST`.

A heartbeat registers one server-side proxy per (group, client id) in the broker's groups, so
local and remote consumers of a group share one membership, one allocation and one set of locks:

- `RemoteConsumer` is a `GroupMember`: `request_rebalance` sends `NOTIFY_CONSUMER_IDS_CHANGED` to
  its connection (oneway), `reset_offsets` sends `RESET_CONSUMER_CLIENT_OFFSET`;
- `RemoteProducer` is a `TransactionChecker`: `check_transaction` sends `CHECK_TRANSACTION_STATE`
  with the half message, restored to its real topic, as a whole record.

A connection that closes takes its proxies out of their groups at once (the others are notified);
the server closes a connection silent for longer than its channel expiry (RocketMQ: 120 s), and drops
a consumer whose last heartbeat is older than that, even while its connection carries other traffic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..record import encode_record
from ..errors import FilterError, IllegalStateError, MQClientError
from ..filter import MessageSelector
from ..groups import ConsumerData
from ..message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageExt, MessageQueue
from ..sendback import retry_topic
from ..topics import check_group
from .handlers import NAME_MAX, Peer, Request, RequestError, handles
from .codes import SERVER_VERSION, RequestCode, ResponseCode
from .frames import RemotingCommand
from .wirejson import message_queue_of, to_wire_json

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["ClientRegistry", "RemoteConsumer", "RemoteProducer"]


class RemoteConsumer:
    """A consumer in another process, as its group's member in this broker."""

    def __init__(self, peer: Peer, group: str, client_id: str, data: ConsumerData, broker: Broker,
                 sub_versions: dict[str, int] | None = None) -> None:
        self.peer = peer
        self.group = group
        self._client_id = client_id
        self.data = data
        #: Each subscription's `subVersion` (the client's time of subscribing), which pulls are checked against.
        self.sub_versions: dict[str, int] = sub_versions or {}
        self._broker_name: str = broker.broker_name
        self._now_ms = broker.clock.now_ms
        #: When its last heartbeat came (`time.monotonic()`): it expires after the server's channel expiry
        #: even while its connection carries other traffic (`ConsumerManager.scanNotActiveChannel`).
        self.last_heartbeat = time.monotonic()

    @property
    def client_id(self) -> str:
        """The client id from the heartbeat."""
        return self._client_id

    def request_rebalance(self) -> None:
        """`NOTIFY_CONSUMER_IDS_CHANGED`, oneway (the client rebalances at once)."""
        self.peer.send_oneway(_to_client(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": self.group}))

    def subscribed_topics(self) -> set[str]:
        """The topics of its last heartbeat's subscriptions."""
        return set(self.data.subscriptions)

    def assigned_queues(self) -> set[MessageQueue]:
        """Unknown here: a remote client allocates its queues itself (RocketMQ's broker does not know either)."""
        return set()

    def reset_offsets(self, topic: str, offsets: dict[int, int]) -> None:
        """`RESET_CONSUMER_CLIENT_OFFSET` (`Broker2Client.resetOffset`): the client drops what it cached."""
        body = to_wire_json({"offsetTable": {MessageQueue(topic, self._broker_name, q): o
                                             for q, o in offsets.items()}})
        self.peer.send_oneway(_to_client(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            {"topic": topic, "group": self.group, "timestamp": self._now_ms(), "isForce": True}, body))

    def shutdown(self) -> None:
        """Nothing to stop here: the client runs elsewhere (its connection closes with the server)."""

    def consumer_data(self) -> ConsumerData:
        """What its last heartbeat said."""
        return self.data


class RemoteProducer:
    """A producer in another process, asked about its group's half messages."""

    def __init__(self, peer: Peer, group: str) -> None:
        self.peer = peer
        self.group = group
        #: When its last heartbeat came (`time.monotonic()`): it expires after the server's channel expiry.
        self.last_heartbeat = time.monotonic()

    def check_transaction(self, msg: MessageExt) -> bool:
        """`CHECK_TRANSACTION_STATE`, oneway; the producer answers with `END_TRANSACTION`. True: asked
        (whether the remote producer has a transaction listener is not known here, as in RocketMQ)."""
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
        fields = {"tranStateTableOffset": msg.queue_offset, "commitLogOffset": msg.commit_log_offset,
                  "msgId": uniq, "transactionId": msg.transaction_id or uniq, "offsetMsgId": msg.offset_msg_id}
        self.peer.send_oneway(_to_client(RequestCode.CHECK_TRANSACTION_STATE, fields, encode_record(msg)))
        return True

    def shutdown(self) -> None:
        """Nothing to stop here (the broker calls this on its producers when it closes)."""


def _to_client(code: int, fields: Mapping[str, object], body: bytes | None = None) -> RemotingCommand:
    """A oneway request of the broker to a client, headed as a 5.0.0 broker heads its own (`JAVA`, version 413)."""
    cmd = RemotingCommand.request(code, fields, body, oneway=True)
    cmd.language, cmd.version = "JAVA", SERVER_VERSION
    return cmd


def _consumer_data(entry: Mapping[str, Any]) -> tuple[str, ConsumerData, dict[str, int]]:
    """A heartbeat's `ConsumerData` entry, checked, and each subscription's `subVersion`."""
    group = entry.get("groupName")
    if not isinstance(group, str) or not group:
        raise RequestError(ResponseCode.SYSTEM_ERROR, "a heartbeat's consumer data has no groupName")
    check_group(group)  # before anything is created for it (RocketMQ refuses an illegal group first)
    subscriptions: dict[str, tuple[str, str]] = {}
    versions: dict[str, int] = {}
    for sub in entry.get("subscriptionDataSet") or ():
        if not isinstance(sub, Mapping) or not isinstance(sub.get("topic"), str):
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"a heartbeat's subscription of {group} has no topic")
        kind = sub.get("expressionType") or "TAG"
        expression = sub.get("subString") or "*"
        if not isinstance(kind, str) or not isinstance(expression, str):
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"a heartbeat's subscription of {group} is malformed")
        subscriptions[sub["topic"]] = (kind, expression)
        version = sub.get("subVersion")  # a number (fastjson's long), or its text from a lenient client
        versions[sub["topic"]] = int(version) if type(version) is int or (
            isinstance(version, str) and version.isdigit() and len(version) <= 19) else 0

    def text(name: str, default: str) -> str:
        value = entry.get(name)
        return value if isinstance(value, str) else default

    return group, ConsumerData(text("messageModel", "CLUSTERING"), text("consumeType", "CONSUME_PASSIVELY"),
                               text("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET"), subscriptions), versions


class ClientRegistry:
    """Remote consumers and producers by connection; thread-safe (handlers run on the loop, the broker
    calls proxies from its own threads)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._lock = threading.Lock()
        self._consumers: dict[tuple[str, str], RemoteConsumer] = {}  # (group, client id) -> proxy
        self._producers: dict[tuple[Peer, str], RemoteProducer] = {}  # (connection, group) -> proxy
        self._by_peer: dict[Peer, set[tuple[str, str]]] = {}

    def heartbeat(self, peer: Peer, data: Mapping[str, Any], will_write_files: Callable[[], None]) -> None:
        """`ClientManageProcessor.heartBeat`: register or refresh the client's consumers and producers.
        `will_write_files` is called before a group's retry topic is created (`Request.will_write_files`)."""
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not client_id:
            raise RequestError(ResponseCode.SYSTEM_ERROR, "a heartbeat needs a clientID")
        broker = self._broker
        consumers = []
        for entry in data.get("consumerDataSet") or ():  # every entry checked before anything changes
            if not isinstance(entry, Mapping):
                raise RequestError(ResponseCode.SYSTEM_ERROR, "a heartbeat's consumerDataSet holds a non-object")
            consumers.append(_consumer_data(entry))
        missing = [group for group, consumer, _ in consumers
                   if consumer.message_model == "CLUSTERING" and broker.topic_config(retry_topic(group)) is None]
        if missing:
            will_write_files()
            for group in missing:
                broker.ensure_group_topic(group, retry_topic(group))  # as RocketMQ's heartbeat creates it
        for group, consumer, versions in consumers:
            self._register_consumer(peer, group, client_id, consumer, versions)
        for entry in data.get("producerDataSet") or ():
            name = entry.get("groupName") if isinstance(entry, Mapping) else None
            if not isinstance(name, str) or not name:
                raise RequestError(ResponseCode.SYSTEM_ERROR, "a heartbeat's producer data has no groupName")
            group = name
            with self._lock:
                known_producer = self._producers.get((peer, group))
                known = known_producer is not None
                if known_producer is not None:
                    known_producer.last_heartbeat = time.monotonic()
                else:
                    producer = self._producers[(peer, group)] = RemoteProducer(peer, group)
            if not known:
                try:
                    broker.register_producer(group, producer)
                except MQClientError as exc:
                    with self._lock:
                        self._producers.pop((peer, group), None)
                    raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    def _register_consumer(self, peer: Peer, group: str, client_id: str, data: ConsumerData,
                           versions: dict[str, int]) -> None:
        key = (group, client_id)
        with self._lock:
            member = self._consumers.get(key)
            new = member is None
            if member is None:
                member = self._consumers[key] = RemoteConsumer(peer, group, client_id, data, self._broker, versions)
                self._by_peer.setdefault(peer, set()).add(key)
                changed = False
            else:
                changed = member.data.subscriptions != data.subscriptions
                member.data, member.sub_versions = data, versions
                member.last_heartbeat = time.monotonic()
                if member.peer is not peer:  # the client reconnected before its old connection was seen to close
                    self._by_peer.get(member.peer, set()).discard(key)
                    member.peer = peer
                    self._by_peer.setdefault(peer, set()).add(key)
        if new:
            try:
                self._broker.register_consumer(group, member)  # every member is notified
            except (IllegalStateError, MQClientError) as exc:
                with self._lock:
                    self._consumers.pop(key, None)
                    self._by_peer.get(peer, set()).discard(key)
                raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        elif changed:
            self._broker.request_rebalance(group)  # a subscription changed: the group rebalances

    def unregister(self, peer: Peer, client_id: str, producer_group: str | None, consumer_group: str | None) -> None:
        """`UNREGISTER_CLIENT`: the client shut a producer or consumer down."""
        if consumer_group:
            self._drop_consumer((consumer_group, client_id), peer)
        if producer_group:
            with self._lock:
                producer = self._producers.pop((peer, producer_group), None)
            if producer is not None:
                self._broker.unregister_producer(producer_group, producer)

    def _drop_consumer(self, key: tuple[str, str], peer: Peer | None) -> None:
        with self._lock:
            member = self._consumers.get(key)
            if member is None or (peer is not None and member.peer is not peer):
                return
            self._forget_locked(key, member)
        self._broker.unregister_consumer(key[0], member)  # the others are notified

    def _forget_locked(self, key: tuple[str, str], member: RemoteConsumer) -> None:
        del self._consumers[key]
        self._by_peer.get(member.peer, set()).discard(key)

    def expire_consumers(self, limit: float) -> list[RemoteConsumer]:
        """Drop the consumers whose last heartbeat came before `limit` (`time.monotonic()`); their groups
        are notified. RocketMQ's `ConsumerManager.scanNotActiveChannel`: one client instance keeps one
        connection for all its clients, so a consumer that stops heartbeating (a crashed thread) leaves
        its group while the connection lives on."""
        with self._lock:
            stale = [(key, m) for key, m in self._consumers.items() if m.last_heartbeat < limit]
            for key, member in stale:
                self._forget_locked(key, member)
        for (group, _), member in stale:
            self._broker.unregister_consumer(group, member)
        return [member for _, member in stale]

    def expire_producers(self, limit: float) -> list[RemoteProducer]:
        """Forget the producers whose last heartbeat came before `limit` (`time.monotonic()`), so check-backs
        go to live ones: RocketMQ's `ProducerManager.scanNotActiveChannel`, for the same reason as
        `expire_consumers`."""
        with self._lock:
            stale = [(key, p) for key, p in self._producers.items() if p.last_heartbeat < limit]
            for key, _ in stale:
                del self._producers[key]
        for (_, group), producer in stale:
            self._broker.unregister_producer(group, producer)
        return [producer for _, producer in stale]

    def drop_peer(self, peer: Peer) -> None:
        """A connection closed: its consumers leave their groups now, its producers are forgotten."""
        with self._lock:
            keys = self._by_peer.pop(peer, set())
            producers = [(k, p) for k, p in self._producers.items() if k[0] is peer]
            for k, _ in producers:
                del self._producers[k]
        for key in keys:
            self._drop_consumer(key, peer)
        for (_, group), producer in producers:
            self._broker.unregister_producer(group, producer)

    def drop_all(self) -> None:
        """The server stopped: every connection's clients leave (`drop_peer` for each)."""
        with self._lock:
            peers = set(self._by_peer) | {peer for peer, _ in self._producers}
        for peer in peers:
            self.drop_peer(peer)

    def subscription(self, group: str, topic: str) -> tuple[str, str, int] | None:
        """(expression type, expression, subVersion) of the newest subscription of `topic` among the remote
        members of `group` (RocketMQ's group keeps the highest `subVersion` its heartbeats brought), or None."""
        with self._lock:
            members = [m for (g, _), m in self._consumers.items() if g == group]
        newest: tuple[str, str, int] | None = None
        for member in members:
            found = member.data.subscriptions.get(topic)
            if found is not None:
                version = member.sub_versions.get(topic, 0)
                if newest is None or version > newest[2]:
                    newest = (*found, version)
        return newest

    def consumers(self, group: str) -> list[RemoteConsumer]:
        """The remote members of `group`."""
        with self._lock:
            return [m for (g, _), m in self._consumers.items() if g == group]


@handles(RequestCode.HEART_BEAT)
def heart_beat(request: Request) -> RemotingCommand | None:
    """Register or refresh the client's consumers and producers (`HeartbeatData` body)."""
    data = request.body_json()
    if not isinstance(data, Mapping):
        raise RequestError(ResponseCode.SYSTEM_ERROR, "a heartbeat body must be a HeartbeatData object")
    request.server.clients.heartbeat(request.peer, data, request.will_write_files)
    request.peer.touch()
    return None if request.cmd.is_oneway else request.reply()


@handles(RequestCode.UNREGISTER_CLIENT)
def unregister_client(request: Request) -> RemotingCommand | None:
    """A client shut down a producer or a consumer."""
    h = request.header
    request.server.clients.unregister(request.peer, h.text("clientID"), h.optional_text("producerGroup"),
                                      h.optional_text("consumerGroup"))
    return None if request.cmd.is_oneway else request.reply()


@handles(RequestCode.GET_CONSUMER_LIST_BY_GROUP)
def consumer_list(request: Request) -> RemotingCommand | None:
    """The group's client ids (local and remote members alike)."""
    group = request.header.text("consumerGroup", max_length=NAME_MAX)
    ids = request.broker.consumer_ids(group)
    if not ids:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return request.reply(body=to_wire_json({"consumerIdList": ids}))


def _lock_body(request: Request) -> tuple[str, str, list[MessageQueue]]:
    body = request.body_json()
    if not isinstance(body, Mapping):
        raise RequestError(ResponseCode.SYSTEM_ERROR, "a lock request's body must be an object")
    group, client_id, mqs = body.get("consumerGroup"), body.get("clientId"), body.get("mqSet") or []
    if not isinstance(group, str) or not isinstance(client_id, str) or not isinstance(mqs, list):
        raise RequestError(ResponseCode.SYSTEM_ERROR, "a lock request needs consumerGroup, clientId and mqSet")
    try:
        return group, client_id, [_own_queue(request, message_queue_of(mq)) for mq in mqs]
    except MQClientError as exc:
        raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None


def _own_queue(request: Request, mq: MessageQueue) -> MessageQueue:
    """`mq` when this broker holds it (routes name this broker); `RequestError` for another broker's."""
    if mq.broker_name != request.broker.broker_name:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"{mq} is not a queue of broker {request.broker.broker_name}")
    return mq


@handles(RequestCode.LOCK_BATCH_MQ)
def lock_batch(request: Request) -> RemotingCommand | None:
    """Lock (or renew) queues for an orderly consumer; the answer lists those it holds."""
    group, client_id, mqs = _lock_body(request)
    held = request.broker.lock_queues(group, mqs, client_id)
    return request.reply(body=to_wire_json({"lockOKMQSet": [mq for mq in mqs if mq in held]}))


@handles(RequestCode.UNLOCK_BATCH_MQ)
def unlock_batch(request: Request) -> RemotingCommand | None:
    """Give locks back (the group's other members are asked to rebalance)."""
    group, client_id, mqs = _lock_body(request)
    request.broker.unlock_queues(group, mqs, client_id)
    return None if request.cmd.is_oneway else request.reply()


@handles(RequestCode.CHECK_CLIENT_CONFIG)
def check_client_config(request: Request) -> RemotingCommand | None:
    """A push consumer with an SQL92 subscription asks whether the broker can filter it."""
    body = request.body_json()
    sub = body.get("subscriptionData") if isinstance(body, Mapping) else None
    if not isinstance(sub, Mapping):
        raise RequestError(ResponseCode.SYSTEM_ERROR, "CHECK_CLIENT_CONFIG needs a subscriptionData")
    kind, expression = sub.get("expressionType") or "TAG", sub.get("subString")
    if kind != "TAG":
        try:
            MessageSelector(kind, expression)
        except (FilterError, MQClientError) as exc:
            raise RequestError(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"{exc}") from None
    return request.reply()


@handles(RequestCode.GET_CONSUMER_CONNECTION_LIST)
def consumer_connections(request: Request) -> RemotingCommand | None:
    """`ConsumerConnection` of a group: its members' connections and subscriptions."""
    group = request.header.text("consumerGroup", max_length=NAME_MAX)
    members = request.broker.consumer_members(group)
    if not members:
        raise RequestError(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    connections, table = [], {}
    data = members[0].consumer_data()
    for member in members:
        peer = getattr(member, "peer", None)
        connections.append({"clientAddr": peer.remote_address if peer is not None else "in-process",
                            "clientId": member.client_id, "language": "JAVA" if peer is not None else "PYTHON",
                            "version": 0})
        for topic, (kind, expression) in member.consumer_data().subscriptions.items():
            table[topic] = {"classFilterMode": False, "codeSet": [], "expressionType": kind, "subString": expression,
                            "subVersion": 0, "tagsSet": [], "topic": topic}
    return request.reply(body=to_wire_json({
        "connectionSet": connections, "consumeFromWhere": data.consume_from_where, "consumeType": data.consume_type,
        "messageModel": data.message_model, "subscriptionTable": table}))
