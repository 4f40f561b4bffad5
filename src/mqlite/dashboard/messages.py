"""Messages as the dashboard's JSON shows them, and the searches that find them.

A search takes the query string of `GET /api/messages` (or `/api/message`,
`/api/trace`) and answers through the admin surface: by key (the index), by
`msg_id` or `offset_msg_id`, from a queue offset, or by store time (two
binary searches per queue, then a scan). Every parameter is checked first:
bad input is an `MQClientError` saying what was wrong (HTTP 400), a missing
message a `MessageNotFoundError` (404).
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..admin import find_message, offset_range, scan_queue
from ..errors import MessageNotFoundError, MQClientError
from ..message import PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_RETRY_TOPIC, MessageExt, MessageQueue
from .source import Source

__all__ = ["summary", "detail", "search", "find_one", "msg_id_param", "int_param", "limit_param",
           "BODY_LIMIT", "DEFAULT_LIMIT", "MAX_LIMIT"]

#: Bytes of a body the detail view shows (as hex, and as text when it decodes).
BODY_LIMIT = 64 * 1024
#: Messages a search returns unless `limit` says otherwise, and the most it may ask for.
DEFAULT_LIMIT = 64
MAX_LIMIT = 1000
_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}")
_JAVA_LONG_MAX = (1 << 63) - 1
_SEARCH_FORMS = ("give key and topic, msg_id, offset_msg_id, topic with queue_id and offset, or topic with "
                 "begin and end (epoch ms)")

Query = Mapping[str, str]


# -- JSON shapes ----------------------------------------------------------------------------------------------
def summary(msg: MessageExt) -> dict[str, Any]:
    """A message's row in a list: ids, where it is stored, tags, keys, times, body size."""
    return {"msg_id": msg.msg_id, "offset_msg_id": msg.offset_msg_id, "topic": msg.topic, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "tags": msg.tags, "keys": msg.keys,
            "store_timestamp": msg.store_timestamp, "born_timestamp": msg.born_timestamp, "body_size": len(msg.body),
            "reconsume_times": msg.reconsume_times}


def detail(msg: MessageExt) -> dict[str, Any]:
    """`summary` plus headers, properties and the body: the first `BODY_LIMIT` bytes as hex, and as text
    when the whole body is UTF-8 (None otherwise)."""
    body = msg.body
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    truncated = len(body) > BODY_LIMIT
    if text is not None and truncated:
        text = body[:BODY_LIMIT].decode("utf-8", errors="ignore")  # a character cut at the limit is dropped
    return {**summary(msg), "properties": dict(msg.properties), "flag": msg.flag, "sys_flag": msg.sys_flag,
            "born_host": msg.born_host, "store_host": msg.store_host, "commit_log_offset": msg.commit_log_offset,
            "store_size": msg.store_size, "body_crc": msg.body_crc, "broker_name": msg.broker_name,
            "prepared_transaction_offset": msg.prepared_transaction_offset,
            "body_text": text, "body_hex": body[:BODY_LIMIT].hex(), "body_truncated": truncated}


def origin_topic(msg: MessageExt) -> str | None:
    """The topic a retry or dead-letter copy came from (None for an original)."""
    return msg.properties.get(PROPERTY_RETRY_TOPIC) or msg.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC)


# -- parameters -----------------------------------------------------------------------------------------------
def int_param(query: Query, name: str, low: int = 0, high: int = _JAVA_LONG_MAX) -> int:
    """The integer parameter `name`, in `[low, high]`; `MQClientError` saying what was wrong."""
    text = query.get(name)
    if text is None:
        raise MQClientError(f"parameter {name} is missing")
    try:
        value = int(text.strip())
    except ValueError:
        raise MQClientError(f"parameter {name} must be an integer, got {text!r}") from None
    if not low <= value <= high:
        raise MQClientError(f"parameter {name} must be from {low} to {high}, got {value}")
    return value


def limit_param(query: Query) -> int:
    """`limit`: how many messages to return, 1 to `MAX_LIMIT` (default `DEFAULT_LIMIT`)."""
    return int_param(query, "limit", 1, MAX_LIMIT) if "limit" in query else DEFAULT_LIMIT


def msg_id_param(text: str, name: str = "msg_id") -> str:
    """A message id (32 or 56 hex digits: `msg_id` or `offset_msg_id`), upper-cased."""
    if not _MSG_ID.fullmatch(text.strip()):
        raise MQClientError(f"parameter {name} must be 32 or 56 hexadecimal characters (a msg_id or "
                            f"offset_msg_id), got {text!r}")
    return text.strip().upper()


# -- searches -------------------------------------------------------------------------------------------------
def find_one(source: Source, query: Query) -> MessageExt:
    """The message `query` names: `msg_id` (optionally in `topic`), `offset_msg_id`, or `topic`,
    `queue_id` and `offset`. Caller holds `source.lock`."""
    broker = source.broker
    if "msg_id" in query:
        topic = query.get("topic")
        if topic is not None:
            source.require_topic(topic)
        return find_message(broker, msg_id_param(query["msg_id"]), topic)
    if "offset_msg_id" in query:
        wanted = msg_id_param(query["offset_msg_id"], "offset_msg_id")
        msg = broker.view_message(wanted)
        if msg.offset_msg_id != wanted:  # view_message also takes a msg_id: this parameter names a position
            raise MessageNotFoundError(f"no message with offset_msg_id {wanted} in {broker.path}")
        return msg
    if {"topic", "queue_id", "offset"} <= query.keys():
        source.require_topic(query["topic"])
        return broker.query_message_by_offset(query["topic"], int_param(query, "queue_id", 0, 1 << 31),
                                              int_param(query, "offset"))
    raise MQClientError("name the message: msg_id, offset_msg_id, or topic with queue_id and offset")


def search(source: Source, query: Query) -> tuple[list[MessageExt], bool]:
    """The messages `query` asks for and whether more matched than `limit`. Caller holds `source.lock`.

    Forms: `key` and `topic` (newest first, optional `begin`/`end`); `msg_id` or `offset_msg_id` (one
    message); `topic`, `queue_id` and `offset` (that message and the ones after it in its queue);
    `topic`, `begin` and `end` (stored in `[begin, end)`, oldest first over all queues).
    """
    limit = limit_param(query)
    broker = source.broker
    if "key" in query:
        topic = _topic(source, query)
        begin = int_param(query, "begin") if "begin" in query else 0
        end = int_param(query, "end") if "end" in query else None
        found = broker.query_message(topic, query["key"], limit + 1, begin, end)
        return found[:limit], len(found) > limit
    if "msg_id" in query or "offset_msg_id" in query:
        return [find_one(source, query)], False
    if "offset" in query or "queue_id" in query:
        first = find_one(source, query)
        mq = first.message_queue
        rest = scan_queue(broker, mq, first.queue_offset + 1, broker.max_offset(mq))
        return _cut(itertools.chain([first], rest), limit)
    if "begin" in query or "end" in query:
        topic = _topic(source, query)
        begin, end = int_param(query, "begin"), int_param(query, "end")
        if end < begin:
            raise MQClientError(f"end ({end}) is before begin ({begin})")
        # Each queue in store-time order already: merge them, and stop after limit + 1.
        return _cut(heapq.merge(*(_in_window(source, mq, begin, end) for mq in broker.fetch_subscribe_queues(topic)),
                                key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset)), limit)
    raise MQClientError(_SEARCH_FORMS)


def _topic(source: Source, query: Query) -> str:
    topic = query.get("topic")
    if not topic:
        raise MQClientError(f"parameter topic is missing; {_SEARCH_FORMS}")
    source.require_topic(topic)
    return topic


def _in_window(source: Source, mq: MessageQueue, begin: int, end: int) -> Iterator[MessageExt]:
    low, high = offset_range(source.broker, mq, begin, end)
    return (m for m in scan_queue(source.broker, mq, low, high) if begin <= m.store_timestamp < end)


def _cut(messages: Iterator[MessageExt], limit: int) -> tuple[list[MessageExt], bool]:
    taken = list(itertools.islice(messages, limit + 1))
    return taken[:limit], len(taken) > limit
