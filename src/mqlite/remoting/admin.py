"""Admin requests (`AdminBrokerProcessor`, `QueryMessageProcessor`): topics, stats, offsets reset, messages.

`UPDATE_AND_CREATE_TOPIC`, `DELETE_TOPIC_IN_BROKER`, `GET_ALL_TOPIC_CONFIG`, `GET_TOPIC_STATS_INFO`,
`GET_TOPIC_CONFIG`, `GET_CONSUME_STATS`, `GET_ALL_CONSUMER_OFFSET`, `QUERY_TOPIC_CONSUME_BY_WHO`, `INVOKE_BROKER_TO_RESET_OFFSET`, `GET_BROKER_CONFIG`,
`GET_BROKER_RUNTIME_INFO`, `QUERY_MESSAGE`,
`VIEW_MESSAGE_BY_ID`: what `mqadmin` and the admin surface of `Broker` ask, each answered by one
`Broker` call and rendered in RocketMQ's body classes (fastjson).
"""

from __future__ import annotations

import dataclasses
import time

from ..record import stored_record
from ..errors import MessageNotFoundError, MQClientError
from ..message import MessageExt, MessageQueue
from ..topics import TopicConfig, is_system_topic
from .handlers import NAME_MAX, Mode, Request, RequestError, handles
from .nameserver import CLUSTER_NAME
from .codes import RequestCode, ResponseCode
from .frames import RemotingCommand
from .wirejson import to_wire_json

__all__: list[str] = []

_BOOT_MS = int(time.time() * 1000)


@handles(RequestCode.UPDATE_AND_CREATE_TOPIC, mode=Mode.BLOCKING)
def update_and_create_topic(request: Request) -> RemotingCommand | None:
    """Create or resize a topic (mqadmin `updateTopic`)."""
    h = request.header
    topic = h.text("topic", max_length=NAME_MAX)
    read = h.int32("readQueueNums", low=1, high=1024)
    write = h.int32("writeQueueNums", low=1, high=1024)
    if is_system_topic(topic):
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    try:
        request.broker.create_topic(topic, write, order=h.flag("order"), perm=h.int32("perm", 6, low=0, high=7),
                                    read_queue_nums=read, write_queue_nums=write)
    except MQClientError as exc:
        raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
    return request.reply()


@handles(RequestCode.DELETE_TOPIC_IN_BROKER, mode=Mode.BLOCKING)
def delete_topic(request: Request) -> RemotingCommand | None:
    """Delete a topic; an unknown one is not an error (RocketMQ answers success)."""
    broker = request.broker
    topic = request.header.text("topic", max_length=NAME_MAX)
    if is_system_topic(topic):
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    if topic in broker.topic_list():
        broker.delete_topic(topic)
    return request.reply()


@handles(RequestCode.GET_ALL_TOPIC_CONFIG)
def all_topic_config(request: Request) -> RemotingCommand | None:
    """`TopicConfigAndMappingSerializeWrapper` (5.0.0): every configured topic; no static-topic mappings."""
    broker = request.broker
    table = {}
    for topic in broker.topic_list():
        config = broker.topic_config(topic)
        if config is not None:
            table[topic] = _topic_config_json(config)
    version = {"counter": len(table), "stateVersion": 0, "timestamp": _BOOT_MS}
    return request.reply(body=to_wire_json({
        "dataVersion": version, "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": _BOOT_MS},
        "topicConfigTable": table, "topicQueueMappingDetailMap": {}, "topicQueueMappingInfoMap": {}}))


def _topic_config_json(config: TopicConfig) -> dict[str, object]:
    """A `TopicConfig` as 5.0.0 writes it (with its `attributes`, none here)."""
    return {"attributes": {}, **config.to_json()}


@handles(RequestCode.GET_TOPIC_CONFIG)
def topic_config(request: Request) -> RemotingCommand | None:
    """`TopicConfigAndQueueMapping` of one topic (5.0.0's admin asks it before topic and consume stats)."""
    topic = request.header.text("topic", max_length=NAME_MAX)
    config = request.broker.topic_config(topic)
    if config is None:
        raise RequestError(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
    return request.reply(body=to_wire_json(_topic_config_json(config)))


@handles(RequestCode.GET_TOPIC_STATS_INFO)
def topic_stats(request: Request) -> RemotingCommand | None:
    """`TopicStatsTable`: min and max offset and the last store time per queue."""
    broker = request.broker
    topic = request.header.text("topic", max_length=NAME_MAX)
    if broker.topic_config(topic) is None and topic not in broker.topic_list():
        raise RequestError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    table = {MessageQueue(topic, broker.broker_name, row.queue_id):
             {"lastUpdateTimestamp": row.last_update_timestamp, "maxOffset": row.max_offset,
              "minOffset": row.min_offset} for row in broker.topic_status(topic)}
    return request.reply(body=to_wire_json({"offsetTable": table}))


@handles(RequestCode.GET_CONSUME_STATS, mode=Mode.BLOCKING)  # reads the offsets' side file
def consume_stats(request: Request) -> RemotingCommand | None:
    """`ConsumeStats`: per queue the broker offset, the group's offset and the last consumed store time."""
    h, broker = request.header, request.broker
    group = h.text("consumerGroup", max_length=NAME_MAX)
    topic = h.optional_text("topic")
    table = {MessageQueue(row.topic, row.broker_name, row.queue_id):
             {"brokerOffset": row.broker_offset, "consumerOffset": row.consumer_offset,
              "lastTimestamp": row.last_timestamp}
             for row in broker.consumer_progress(group) if not topic or row.topic == topic}
    return request.reply(body=to_wire_json({"consumeTps": 0.0, "offsetTable": table}))


@handles(RequestCode.GET_ALL_CONSUMER_OFFSET)
def all_consumer_offset(request: Request) -> RemotingCommand | None:
    """`ConsumerOffsetSerializeWrapper`: every committed offset, `topic@group` -> queue id -> offset (what a
    slave syncs, and what the CLI's statsAll, consumerProgress and message tracks read over `-n`)."""
    table = request.broker.offset_snapshot()
    version = {"counter": 0, "stateVersion": 0, "timestamp": _BOOT_MS}
    return request.reply(body=to_wire_json({"dataVersion": version, "offsetTable": table}))


@handles(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO)
def topic_consumed_by(request: Request) -> RemotingCommand | None:
    """`GroupList`: the groups consuming a topic, the online ones subscribed to it and those with offsets on it
    (mqadmin's statsAll and message tracks ask it)."""
    topic = request.header.text("topic", max_length=NAME_MAX)
    return request.reply(body=to_wire_json({"groupList": request.broker.consuming_groups(topic)}))


@handles(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, mode=Mode.BLOCKING)
def reset_offset(request: Request) -> RemotingCommand | None:
    """Move a group's offsets on a topic to a time (-1: the end); live members drop what they cached.

    As 5.0.0's `Broker2Client.resetOffset`: with no consumer of the group online the answer is
    `CONSUMER_NOT_ONLINE` and nothing moves; mqadmin then sets each queue's offset itself
    (`resetOffsetByTimestampOld`), as `RemoteBroker.reset_offset_by_time` does.
    """
    h, broker = request.header, request.broker
    group, topic = h.text("group", max_length=NAME_MAX), h.text("topic", max_length=NAME_MAX)
    timestamp = h.int64("timestamp", low=-1)
    if broker.topic_config(topic) is None and topic not in broker.topic_list():
        raise RequestError(ResponseCode.SYSTEM_ERROR,
                           f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
    if not broker.consumer_members(group):
        raise RequestError(ResponseCode.CONSUMER_NOT_ONLINE, f"Consumer not online, so can not reset offset, "
                                                             f"Group: {group} Topic: {topic} Timestamp: {timestamp}")
    try:
        table = broker.reset_offset_by_time(group, topic, timestamp)
    except MQClientError as exc:
        raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
    return request.reply(body=to_wire_json({"offsetTable": table}))


def _config_value(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@handles(RequestCode.GET_BROKER_CONFIG)
def broker_config(request: Request) -> RemotingCommand | None:
    """The broker's settings as `key=value` lines (mqadmin `getBrokerConfig`): RocketMQ's names of the ones
    it shares, then every mqlite setting (`StoreConfig`) under its own name."""
    broker = request.broker
    config = broker.config
    host, _, port = request.peer.local_address.rpartition(":")
    shared = {"brokerClusterName": CLUSTER_NAME, "brokerName": broker.broker_name, "brokerId": 0,
              "brokerIP1": host.strip("[]"), "listenPort": port, "storePathRootDir": broker.path,
              "maxMessageSize": config.max_message_size, "flushDiskType": config.flush_disk_type,
              "autoCreateTopicEnable": config.auto_create_topic, "defaultTopicQueueNums": config.default_topic_queue_nums,
              "messageDelayLevel": config.message_delay_level,
              "transactionTimeOut": int(config.transaction_timeout * 1000),
              "transactionCheckInterval": int(config.transaction_check_interval * 1000),
              "transactionCheckMax": config.transaction_check_max, "aclEnable": request.server.acl_enabled}
    lines = [f"{k}={_config_value(v)}" for k, v in shared.items()]
    lines += [f"{f.name}={_config_value(getattr(config, f.name))}" for f in dataclasses.fields(config)]
    version = to_wire_json({"counter": 0, "stateVersion": 0, "timestamp": _BOOT_MS}).decode()
    return request.reply(ResponseCode.SUCCESS, {"version": version}, "\n".join(lines).encode("utf-8"))


@handles(RequestCode.GET_BROKER_RUNTIME_INFO)
def runtime_info(request: Request) -> RemotingCommand | None:
    """`KVTable` of a few runtime facts (mqadmin `brokerStatus`)."""
    broker = request.broker
    min_offset, max_offset = broker.commit_log_range()
    table = {"brokerVersionDesc": "V5_0_0", "brokerVersion": "413", "bootTimestamp": str(_BOOT_MS),
             "runtime": f"[ {int(time.time() * 1000 - _BOOT_MS) // 1000} s ]",
             "commitLogMaxOffset": str(max_offset), "commitLogMinOffset": str(min_offset),
             "brokerName": broker.broker_name}
    return request.reply(body=to_wire_json({"table": table}))


#: `maxMsgsNumBatch`: the most messages one QUERY_MESSAGE answers (RocketMQ's store caps `maxNum` at it).
MAX_QUERY_NUM = 64
_HEADER_ROOM = 64 * 1024  # of a frame, left for the response header


def _records(messages: list[MessageExt], max_bytes: int) -> bytes:
    """The stored records of `messages` (newest first), as many as fit in `max_bytes` (at least one)."""
    records: list[bytes] = []
    total = 0
    for record in map(stored_record, messages):
        if record is None:
            continue
        if records and total + len(record) > max_bytes:
            break  # an answer over the client's frame limit would make it drop its connection
        records.append(record)
        total += len(record)
    return b"".join(records)


@handles(RequestCode.QUERY_MESSAGE, mode=Mode.BLOCKING)
def query_message(request: Request) -> RemotingCommand | None:
    """Messages of a topic by key or unique id, as stored records (`QueryMessageProcessor`): at most
    `MAX_QUERY_NUM` of them, and no more than fit in one frame."""
    h, broker = request.header, request.broker
    found = broker.query_message(h.text("topic", max_length=NAME_MAX), h.text("key", max_length=4096),
                                 min(h.int32("maxNum", 32, low=1), MAX_QUERY_NUM), h.int64("beginTimestamp", 0),
                                 h.int64("endTimestamp", (1 << 63) - 1))
    if not found:
        raise RequestError(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
    last = max(m.store_timestamp for m in found)
    frame = request.server.max_frame_size
    body = _records(found, frame - min(_HEADER_ROOM, frame // 4))
    return request.reply(ResponseCode.SUCCESS, {"indexLastUpdateTimestamp": last, "indexLastUpdatePhyoffset": 0},
                         body)


@handles(RequestCode.VIEW_MESSAGE_BY_ID, mode=Mode.BLOCKING)  # any offset: a cold page of the log
def view_message(request: Request) -> RemotingCommand | None:
    """The stored record at a commit-log offset."""
    offset = request.header.int64("offset", low=0)
    try:
        msg = request.broker.look_message_by_offset(offset)
    except MessageNotFoundError:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}") from None
    return request.reply(body=stored_record(msg))
