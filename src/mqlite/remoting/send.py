"""Writes: `SEND_MESSAGE`, `SEND_MESSAGE_V2`, `SEND_BATCH_MESSAGE`, `CONSUMER_SEND_MSG_BACK`, `END_TRANSACTION`.

RocketMQ's `SendMessageProcessor` and `EndTransactionProcessor`, in front of `Broker.put_message`,
`put_messages`, `send_message_back` and `end_transaction` (which apply the rewrites: half, delay,
retry). The checks come first, as in `AbstractSendMessageProcessor.msgCheck`: the topic exists or
is auto-created from the request's `defaultTopic`/`defaultTopicQueueNums`, the queue id is one of
its write queues (a negative one picks a queue at random).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ..commitlog import PutMessageStatus, PutResult
from ..errors import MessageNotFoundError, MQClientError
from ..message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    EncodedProperties,
    SysFlag,
    UniqIdGenerator,
    create_offset_msg_id,
    decode_properties,
    encode_properties,
)
from ..sendback import DEFAULT_MAX_RECONSUME_TIMES, RETRY_GROUP_TOPIC_PREFIX, dlq_topic, is_retry_topic
from ..trace import TRACE_TOPIC
from .handlers import NAME_MAX, Mode, Request, RequestError, handles
from .batch import decode_batch_texts
from .codes import RequestCode, ResponseCode
from .faults import PUT_EXCEPTION_CODES, refusal
from .frames import RemotingCommand

__all__ = ["V2_FIELDS"]

#: `SendMessageRequestHeaderV2`'s one-letter fields -> `SendMessageRequestHeader`'s names.
V2_FIELDS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
             "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
             "k": "unitMode", "l": "consumeRetryTimes", "m": "batch"}

_V1_TO_V2 = {v1: v2 for v2, v1 in V2_FIELDS.items()}
_IDS = UniqIdGenerator()  # the ids this broker gives messages sent without one (MessageClientIDSetter)
_STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
}


#: `MQVersion.Version.V3_4_9.ordinal()`: from there on a send carries the consumer's `maxReconsumeTimes`.
_V3_4_9 = 121


def _v1(request: Request) -> None:
    """Read a V2 header (one-letter names, what `SEND_MESSAGE_V2` and `SEND_BATCH_MESSAGE` carry) as a V1 one
    (V1 names are kept, so a batch with V1 names reads too)."""
    if request.cmd.code != RequestCode.SEND_MESSAGE:
        request.header.use_aliases(_V1_TO_V2)


def _target(request: Request) -> tuple[str, int]:
    """`msgCheck`: the topic (auto-created when allowed) and a valid write queue id."""
    h, broker = request.header, request.broker
    topic = h.text("topic", max_length=NAME_MAX)
    h.text("producerGroup", max_length=NAME_MAX)
    queue_id = h.int32("queueId")
    default_nums = h.int32("defaultTopicQueueNums", 4, low=1, high=1024)
    config = broker.topic_config(topic)
    if config is None or not config.writable:
        if config is None:
            request.will_write_files()  # creating a topic persists the table: not on the loop thread
        try:
            if is_retry_topic(topic) and config is None:
                # A client's sendMessageBackAsNormalMessage.
                config = broker.ensure_group_topic(topic[len(RETRY_GROUP_TOPIC_PREFIX):], topic)
            elif topic == TRACE_TOPIC and config is None:
                # A traced client's trace records (RocketMQ's broker creates the trace topic at start when
                # tracing is on).
                config = broker.ensure_system_topic(topic)
            else:
                broker.fetch_publish_queues(topic, default_nums)
                config = broker.topic_config(topic)
        except MQClientError as exc:
            code = ResponseCode.NO_PERMISSION if config is not None else ResponseCode.TOPIC_NOT_EXIST
            raise RequestError(code, f"topic[{topic}] not exist, apply first please! ({exc})") from None
    assert config is not None
    if queue_id < 0:
        queue_id = random.randrange(config.write_queue_nums)
    elif queue_id >= config.write_queue_nums:
        raise RequestError(ResponseCode.SYSTEM_ERROR,
                           f"request queueId[{queue_id}] is illegal, topic: {topic} "
                           f"topicConfig.writeQueueNums: {config.write_queue_nums}")
    return topic, queue_id


def _properties(text: str, *, dead_letter: bool = False) -> EncodedProperties:
    """The wire's property string as the map the store writes: decoding by the separators leaves no
    name or value that `check_properties` would refuse, so the map carries its encoding (no second check).

    A message without a `UNIQ_KEY` gets one, as 5.0.0's `SendMessageProcessor` gives it (its msg id):
    clients such as ali-ons send none. A `dead_letter` is not delayed (`handleRetryAndDLQ`'s
    `setDelayTimeLevel(0)`: a client's retry carries `DELAY` 3 + its reconsume times)."""
    properties = EncodedProperties(decode_properties(text))
    in_order = True
    if not properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
        properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = _IDS.next_id()
        in_order = False  # a name the text does not hold: encoded again
    if dead_letter:
        properties[PROPERTY_DELAY_TIME_LEVEL] = "0"
        in_order = False  # a value the text does not hold: encoded again
    return _encoded(properties, text, in_order)


def _encoded(properties: EncodedProperties, text: str, in_order: bool) -> EncodedProperties:
    """`properties`, decoded from `text` (`in_order`: with its names in `text`'s order), given its
    encoding: `text` itself when every segment was kept and no name came twice (the map encodes back
    to it, plus the last separator; measured: 1 us a message less), else the map encoded again."""
    try:
        if in_order and len(properties) == (text.count("\x02") + (not text.endswith("\x02")) if text else 0):
            properties.encoded = (text if not text or text.endswith("\x02") else text + "\x02").encode("utf-8")
        else:
            properties.encoded = encode_properties(properties).encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "the message properties are not valid UTF-8 text") from None
    return properties


def _batch_properties(shared: dict[str, str], text: str) -> EncodedProperties:
    """A batched message's map: the request's properties under the message's own (`text`)."""
    own = decode_properties(text)
    if not shared:
        return _encoded(EncodedProperties(own), text, True)
    merged = EncodedProperties(shared)
    merged.update(own)
    return _encoded(merged, text, len(merged) == len(own) and list(merged) == list(own))


def _offset_msg_ids(result: PutResult) -> str:
    """`result.offset_msg_id`: each id is its store host's hex prefix and 16 hex digits of its offset."""
    prefix = _HOST_HEX.get(result.store_host)
    if prefix is None:
        ip, port = result.store_host
        prefix = _HOST_HEX[result.store_host] = create_offset_msg_id(ip, port, 0)[:-16]
    offsets = result.commit_log_offsets
    if not offsets:
        return f"{prefix}{result.commit_log_offset:016X}"
    return ",".join([f"{prefix}{offset:016X}" for offset in offsets])


_HOST_HEX: dict[tuple[bytes, int], str] = {}  # store host -> the hex of its ip and port (a server has one or two)


def _response(request: Request, result: PutResult, queue_id: int, properties: Mapping[str, str]) -> RemotingCommand:
    code = _STATUS_CODES.get(result.status)
    if code is None:  # FLUSH_DISK_TIMEOUT and friends: RocketMQ answers with that code and the header
        code = ResponseCode[result.status.name] if result.status.name in ResponseCode.__members__ \
            else ResponseCode.SYSTEM_ERROR
    fields = {"msgId": _offset_msg_ids(result), "queueId": str(queue_id), "queueOffset": str(result.queue_offset),
              "transactionId": properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
              "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}  # the two a 5.0.0 broker always adds
    if fields["transactionId"] is None:
        del fields["transactionId"]
    return request.reply(code, fields)


#: `SendMessageProcessor.handlePutMessageResult`'s remark for MESSAGE_ILLEGAL (the body-size limit goes in).
_ILLEGAL = ("the message is illegal, maybe msg body or properties length not matched. msg body length limit %dB, "
            "msg properties length limit 32KB.")


def put_failure(exc: Exception) -> RequestError:
    """A put's exception as RocketMQ's `handlePutMessageResult` answers it."""
    if isinstance(exc, RequestError):
        return exc
    answer = refusal(exc, PUT_EXCEPTION_CODES)
    if answer is None:
        raise exc
    code, fields = answer
    remark = f"service not available now: {exc}" if code == ResponseCode.SERVICE_NOT_AVAILABLE else str(exc)
    return RequestError(code, remark, fields)


@handles(RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, mode=Mode.PUT)
def send_message(request: Request) -> RemotingCommand | None:
    """`SendMessageProcessor.sendMessage`: one message, or a batch when the header says `batch`."""
    _v1(request)
    h = request.header
    if h.flag("batch"):
        return send_batch(request)
    try:
        topic, queue_id = _target(request)
        sys_flag = h.int32("sysFlag")
        reconsume_times = h.int32("reconsumeTimes", 0, low=0)
        dead_letter = is_retry_topic(topic) and _past_max_reconsume_times(request, reconsume_times)
        if dead_letter:
            topic, queue_id = _dlq(request, topic)
        properties = _properties(h.text("properties", ""), dead_letter=dead_letter)
        body = request.cmd.body
        if not body:  # RocketMQ's decoder reads an empty body as null, which HookUtils refuses
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, _ILLEGAL % request.broker.config.max_message_size)
        result = request.broker.put_message(topic, queue_id, body, properties, flag=h.int32("flag"),
                                            sys_flag=sys_flag, born_timestamp=h.int64("bornTimestamp", low=0),
                                            reconsume_times=reconsume_times, born_host=request.peer.remote_address)
    except Exception as exc:  # noqa: BLE001 - put_failure re-raises what it does not know
        raise put_failure(exc) from None
    return _response(request, result, queue_id, properties)


def _past_max_reconsume_times(request: Request, reconsume_times: int) -> bool:
    """`handleRetryAndDLQ`: whether a retried message is dead. '>' not '>=', as 5.0.0: the client counted
    this attempt already; the header's `maxReconsumeTimes` counts from request version 3.4.9 on."""
    max_times = DEFAULT_MAX_RECONSUME_TIMES  # a group's retryMaxTimes
    if request.cmd.version >= _V3_4_9:
        max_times = request.header.int32("maxReconsumeTimes", max_times)
    return reconsume_times > max_times


def _dlq(request: Request, retry: str) -> tuple[str, int]:
    """The dead-letter topic and queue of the group whose retry topic is `retry` (created on first use,
    on the executor: it writes the topic table)."""
    group = retry[len(RETRY_GROUP_TOPIC_PREFIX):]
    dlq = dlq_topic(group)
    if request.broker.topic_config(dlq) is None:
        request.will_write_files()
    try:
        request.broker.ensure_group_topic(group, dlq)
    except MQClientError as exc:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"topic[{dlq}] not exist ({exc})") from None
    return dlq, 0


@handles(RequestCode.SEND_BATCH_MESSAGE, mode=Mode.PUT)
def send_batch(request: Request) -> RemotingCommand | None:
    """`SendMessageProcessor.sendBatchMessage`: the `MessageBatch` body's messages in one queue."""
    _v1(request)
    h = request.header
    try:
        topic, queue_id = _target(request)
        if is_retry_topic(topic):
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + topic)
        if h.int32("sysFlag", 0) & SysFlag.TRANSACTION_MASK:
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "batch message does not support transaction")
        entries = decode_batch_texts(request.cmd.body or b"")
        if not entries:
            raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "the batch body holds no message")
        shared = decode_properties(h.text("properties", ""))
        # The request's properties go with each message, under the message's own: RocketMQ's batch encoder
        # appends them after, so there the batch's UNIQ_KEY overrides every message's (one id for all).
        properties = [_batch_properties(shared, text) for _, _, text in entries]
        result = request.broker.put_messages(topic, queue_id, [body for _, body, _ in entries], properties,
                                             flags=[flag for flag, _, _ in entries],
                                             born_timestamp=h.int64("bornTimestamp", low=0),
                                             born_host=request.peer.remote_address)
    except Exception as exc:  # noqa: BLE001
        raise put_failure(exc) from None
    uniq = ",".join(p.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "") for p in properties)
    return _response(request, result, queue_id, {PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq})


@handles(RequestCode.CONSUMER_SEND_MSG_BACK, mode=Mode.BLOCKING)  # a cold read of any offset; may create topics
def consumer_send_back(request: Request) -> RemotingCommand | None:
    """`consumerSendMsgBack`: the message at commit-log `offset` goes to the group's retry (or DLQ) topic."""
    h, broker = request.header, request.broker
    offset = h.int64("offset", low=0)
    group = h.text("group", max_length=NAME_MAX)
    delay_level = h.int32("delayLevel")
    max_times = h.int32("maxReconsumeTimes", DEFAULT_MAX_RECONSUME_TIMES, low=-1)
    try:
        msg = broker.look_message_by_offset(offset)
    except MessageNotFoundError:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}") from None
    try:
        broker.send_message_back(group, msg, delay_level, max_times)
    except Exception as exc:  # noqa: BLE001
        raise put_failure(exc) from None
    return request.reply()


_COMMIT, _ROLLBACK = SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE


@handles(RequestCode.END_TRANSACTION, mode=Mode.PUT)
def end_transaction(request: Request) -> RemotingCommand | None:
    """`EndTransactionProcessor`: commit or roll back the half message at `commitLogOffset`
    (a producer's own end, or its answer to a check-back). Oneway from RocketMQ's clients."""
    h = request.header
    group = h.text("producerGroup", max_length=NAME_MAX)
    offset = h.int64("commitLogOffset", low=0)
    kind = h.int32("commitOrRollback")
    if kind not in (_COMMIT, _ROLLBACK):
        return None  # TRANSACTION_NOT_TYPE (unknown): nothing to do and no answer, as RocketMQ
    try:
        request.broker.end_transaction(offset, kind == _COMMIT, group, from_check=h.flag("fromTransactionCheck"),
                                       transaction_id=h.optional_text("transactionId"))
    except Exception as exc:  # noqa: BLE001
        raise put_failure(exc) from None
    return None if request.cmd.is_oneway else request.reply()
