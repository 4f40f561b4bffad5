"""The admin surface of `Broker` over the wire: mqadmin's requests (`MQClientAPIImpl`'s admin half).

`RemoteAdmin` is a mixin of `RemoteBroker`; each method answers as the
method of the same name on a local `Broker` does (same types, same errors),
through the request RocketMQ's `DefaultMQAdminExt` sends for it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from ..broker import QueueProgress, QueueStatus
from ..trace import TRACE_TOPIC
from ..traceview import MessageTrack, TraceView, trace_views, track_message
from ..errors import MessageNotFoundError, MQClientError
from ..message import PROPERTY_RETRY_TOPIC, MessageExt, MessageQueue, msg_id_offset
from ..longpoll import PullResult, PullStatus
from ..port import Subscription
from ..topics import PERM_READ, PERM_WRITE, TopicConfig, check_topic, is_system_topic
from ..sendback import is_dlq_topic, is_retry_topic
from .codes import DEFAULT_TOPIC, RequestCode, ResponseCode
from .frames import RemotingCommand
from .wirejson import message_queue_of

__all__ = ["RemoteAdmin", "TOOLS_GROUP", "TopicRoute", "QueueData"]

#: The group mqadmin's own pulls name (`MixAll.TOOLS_CONSUMER_GROUP`).
TOOLS_GROUP = "TOOLS_CONSUMER"


class QueueData(TypedDict, total=False):
    """One broker's queues of a topic in a route (RocketMQ's `QueueData`)."""

    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int
    topicSynFlag: int  # the field's name before RocketMQ 5


class TopicRoute(TypedDict, total=False):
    """`GET_ROUTEINFO_BY_TOPIC`'s body (RocketMQ's `TopicRouteData`), as fastjson decodes it: the fields
    mqlite reads. It comes off the wire: every value is converted where it is read."""

    queueDatas: list[QueueData]
    brokerDatas: list[dict[str, Any]]
    orderTopicConf: str


class RemoteAdmin(abc.ABC):
    """Topics, offsets, messages and group progress of a served broker (see `Broker` for each contract).

    The admin half of `RemoteBroker`, which provides the connection and the port calls declared
    abstract here.
    """

    address: str

    @property
    @abc.abstractmethod
    def broker_name(self) -> str:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def _call(self, code: int, fields: Mapping[str, object] | None = None, body: bytes | None = None, *,
              ok: Iterable[int] = (ResponseCode.SUCCESS,), timeout: float | None = None) -> RemotingCommand:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def pull(self, group: str, mq: MessageQueue, offset: int, max_nums: int = 32,
             message_filter: Subscription | None = None, wait: float = 0.0) -> PullResult:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def _json(self, response: RemotingCommand) -> Any:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def _forget_routes(self) -> None:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def _route(self, topic: str, *, fresh: bool = False) -> TopicRoute | None:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def _decode(self, body: bytes | None) -> list[MessageExt]:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def max_offset(self, mq: MessageQueue) -> int:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        """Provided by `RemoteBroker`."""

    @abc.abstractmethod
    def commit_offset(self, group: str, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Provided by `RemoteBroker`."""

    @property
    def path(self) -> str:
        """The server's address (what the command line and reprs show where a local broker has a path)."""
        return self.address

    # -- topics --------------------------------------------------------------------------------------------
    def create_topic(self, topic: str, queue_nums: int = 4, *, order: bool = False,
                     perm: int = PERM_READ | PERM_WRITE, read_queue_nums: int | None = None,
                     write_queue_nums: int | None = None) -> TopicConfig:
        """`UPDATE_AND_CREATE_TOPIC`: create (or resize) a topic."""
        check_topic(topic)
        if is_system_topic(topic):
            raise MQClientError(f"topic {topic!r} is a RocketMQ system topic; choose another name")
        read = queue_nums if read_queue_nums is None else read_queue_nums
        write = queue_nums if write_queue_nums is None else write_queue_nums
        config = TopicConfig(topic, read, write, perm, order=order)
        self._call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": read, "writeQueueNums": write,
            "perm": perm, "topicFilterType": config.topic_filter_type, "topicSysFlag": 0, "order": order})
        self._forget_routes()
        return config

    def topic_config(self, topic: str) -> TopicConfig | None:
        """A topic's settings as its route tells them (`GET_ROUTEINFO_BY_TOPIC`), or None."""
        if not isinstance(topic, str):
            return None
        route = self._route(topic, fresh=True)
        datas = (route or {}).get("queueDatas") or []
        if not datas:
            return None
        data = datas[0]
        return TopicConfig(topic, int(data.get("readQueueNums", 0)), int(data.get("writeQueueNums", 0)),
                           int(data.get("perm", PERM_READ | PERM_WRITE)),
                           topic_sys_flag=int(data.get("topicSysFlag", data.get("topicSynFlag", 0)) or 0),
                           order=bool((route or {}).get("orderTopicConf")))

    def delete_topic(self, topic: str) -> None:
        """`DELETE_TOPIC_IN_BROKER`: delete a topic and its consume queues (system topics are refused)."""
        self._call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        self._forget_routes()

    def topic_list(self) -> list[str]:
        """`GET_ALL_TOPIC_LIST_FROM_NAMESERVER`: every topic, sorted."""
        body = self._json(self._call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)) or {}
        # The name server's list names the default topic (the auto-create template RocketMQ's clients
        # route new topics by); it is no topic of the store, and a local broker's list has no such entry.
        return sorted(t for t in body.get("topicList") or [] if t != DEFAULT_TOPIC)

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """`GET_TOPIC_STATS_INFO`: per queue, min and max offsets and the newest store time."""
        body = self._json(self._call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})) or {}
        rows = [QueueStatus(mq.queue_id, int(s.get("minOffset", 0)), int(s.get("maxOffset", 0)),
                            int(s.get("lastUpdateTimestamp", 0)))
                for mq, s in pairs(body.get("offsetTable"))]
        return sorted(rows, key=lambda r: r.queue_id)

    # -- messages -------------------------------------------------------------------------------------------
    def view_message(self, msg_id: str) -> MessageExt:
        """A message by `offset_msg_id` (`VIEW_MESSAGE_BY_ID`) or by `msg_id` (the key index, every topic)."""
        offset = msg_id_offset(msg_id)
        if offset >= 0:
            response = self._call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset},
                                  ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
            if response.code == ResponseCode.SUCCESS:
                for msg in self._decode(response.body):
                    if msg.offset_msg_id == msg_id.upper():
                        return msg
        # A delayed or failed message also has copies in system, retry and DLQ topics (same msg_id): user's first.
        for topic in sorted(self.topic_list(), key=lambda t: (is_system_topic(t), is_retry_topic(t) or is_dlq_topic(t))):
            for msg in self._query(topic, msg_id, 1, 0, None, unique=True):
                if msg.msg_id == msg_id:
                    return msg
        raise MessageNotFoundError(f"no message with id {msg_id!r} on {self.address}")

    def query_message(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """`QUERY_MESSAGE`: messages of `topic` with key (or unique id) `key` stored in [begin, end], newest first."""
        return self._query(topic, key, max_num, begin, end, unique=False)

    def _query(self, topic: str, key: str, max_num: int, begin: int, end: int | None, *,
               unique: bool) -> list[MessageExt]:
        fields: dict[str, object] = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin,
                                     "endTimestamp": end if end is not None else (1 << 63) - 1}
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = True
        response = self._call(RequestCode.QUERY_MESSAGE, fields, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code != ResponseCode.SUCCESS:
            return []
        found = self._decode(response.body)
        return sorted(found, key=lambda m: m.store_timestamp, reverse=True)[:max_num]

    def query_message_by_offset(self, topic: str, queue_id: int, offset: int) -> MessageExt:
        """The message at a queue offset (a pull of one, as mqadmin's queryMsgByOffset); `MessageNotFoundError`."""
        result = self.pull(TOOLS_GROUP, MessageQueue(topic, self.broker_name, queue_id), offset, 1)
        if result.pull_status is not PullStatus.FOUND or not result.msg_found_list:
            raise MessageNotFoundError(
                f"no message at {topic}/{queue_id} offset {offset} "
                f"(readable offsets are {result.min_offset}..{result.max_offset - 1})")
        return result.msg_found_list[0]

    # -- trace ----------------------------------------------------------------------------------------------
    def query_trace(self, msg_id: str, max_num: int = 64, begin: int = 0, end: int | None = None) -> list[TraceView]:
        """mqadmin's `queryMsgTraceById`: `QUERY_MESSAGE` on the trace topic by the message id (the trace
        messages' key), the records decoded and put in causal order."""
        if not isinstance(msg_id, str) or not msg_id:
            raise MQClientError("msg_id must be a non-empty string")
        return trace_views(msg_id, self.query_message(TRACE_TOPIC, msg_id, max_num, begin, end))

    def message_track(self, msg_id: str) -> list[MessageTrack]:
        """Where message `msg_id` stands for each group, judged by the committed offsets
        (`GET_ALL_CONSUMER_OFFSET`) as on a read-only broker: a connection does not see who is online."""
        msg = self.view_message(msg_id)
        origin = msg.properties.get(PROPERTY_RETRY_TOPIC)
        if origin is not None and origin != msg.topic:  # a retry or dead-letter copy: track the original
            copies = [m for m in self.query_message(origin, msg.msg_id) if m.msg_id == msg.msg_id]
            msg = copies[-1] if copies else msg  # newest first: the last is the first stored
        return track_message(msg, self.consumer_offset_table(), None)

    # -- groups ---------------------------------------------------------------------------------------------
    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """`GET_CONSUME_STATS`: per queue the group consumes, broker and consumer offsets and the owner."""
        body = self._json(self._call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group})) or {}
        rows = []
        for mq, wrapper in pairs(body.get("offsetTable")):
            rows.append(QueueProgress(mq.topic, mq.broker_name, mq.queue_id,
                                      int(wrapper.get("brokerOffset", 0)), max(int(wrapper.get("consumerOffset", 0)), 0),
                                      str(wrapper.get("clientId", "") or ""), int(wrapper.get("lastTimestamp", 0))))
        return sorted(rows, key=lambda r: (r.topic, r.queue_id))

    def consumer_offset_table(self) -> dict[str, dict[int, int]]:
        """`GET_ALL_CONSUMER_OFFSET`: the committed offsets, keyed `topic@group` -> queue id -> offset (the
        `admin.OffsetTable` that statsAll, consumerProgress and message tracks read)."""
        body = self._json(self._call(RequestCode.GET_ALL_CONSUMER_OFFSET)) or {}
        table = body.get("offsetTable")
        if not isinstance(table, dict):
            return {}
        return {str(key): {int(q): int(o) for q, o in queues.items()} for key, queues in table.items()
                if isinstance(queues, dict)}

    def reset_offset_by_time(self, group: str, topic: str, timestamp: int) -> dict[MessageQueue, int]:
        """`INVOKE_BROKER_TO_RESET_OFFSET`: move `group`'s offsets on `topic` to `timestamp` (-1: the end)."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < -1:
            raise MQClientError(f"timestamp must be epoch milliseconds (an int >= 0, or -1 for the end), "
                                f"got {timestamp!r}")
        response = self._call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                              {"topic": topic, "group": group, "timestamp": timestamp, "isForce": True},
                              ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return self._reset_offsets_one_by_one(group, topic, timestamp)
        body = self._json(response) or {}
        return {mq: int(offset) for mq, offset in pairs(body.get("offsetTable"))}

    def _reset_offsets_one_by_one(self, group: str, topic: str, timestamp: int) -> dict[MessageQueue, int]:
        """mqadmin's way when no consumer of the group is online (`resetOffsetByTimestampOld`, forced): each
        queue of `topic` the group has progress on (none: every queue of the topic) gets the offset of
        `timestamp` (`SEARCH_OFFSET_BY_TIMESTAMP`, or `GET_MAX_OFFSET` for -1) by `UPDATE_CONSUMER_OFFSET`."""
        queue_ids = (sorted({row.queue_id for row in self.consumer_progress(group) if row.topic == topic})
                     or [row.queue_id for row in self.topic_status(topic)])
        table: dict[MessageQueue, int] = {}
        for queue_id in queue_ids:
            mq = MessageQueue(topic, self.broker_name, queue_id)
            table[mq] = self.max_offset(mq) if timestamp == -1 else self.search_offset(mq, timestamp)
            self.commit_offset(group, mq, table[mq])
        return table


def pairs(table: Any) -> list[tuple[MessageQueue, Any]]:
    """The entries of a fastjson map keyed by `MessageQueue` objects, as `from_wire_json` returns it."""
    if not isinstance(table, dict):
        return []
    return [(message_queue_of(key), value) for key, value in table.items()]
