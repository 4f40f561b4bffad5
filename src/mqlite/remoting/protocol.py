"""RocketMQ's remoting protocol, in one import: the names of `codes`, `frames`, `wirejson`, `batch` and `acl`.

Each of those modules does one job (codes; frames and their headers; fastjson bodies; batch bodies;
ACL signing); this module re-exports their public names so a caller can write
`from mqlite.remoting.protocol import RemotingCommand, RequestCode, to_wire_json`.
"""

from __future__ import annotations

from .acl import ACCESS_KEY, SIGNATURE, sign
from .batch import BatchEntry, decode_batch, decode_batch_texts, encode_batch
from .codes import (
    DEFAULT_TOPIC,
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    SERVER_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from .frames import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    decode_command,
    encode_frame,
    header_fields,
)
from .wirejson import WireKey, from_wire_json, message_queue_of, mq_wire, to_wire_json, wire_key

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "SERVER_VERSION",
    "RESPONSE_FLAG",
    "ONEWAY_FLAG",
    "FLAG_COMMIT_OFFSET",
    "FLAG_SUSPEND",
    "FLAG_SUBSCRIPTION",
    "DEFAULT_TOPIC",
    "SerializeType",
    "LanguageCode",
    "RequestCode",
    "ResponseCode",
    "RemotingCommand",
    "header_fields",
    "encode_frame",
    "FrameDecoder",
    "decode_command",
    "ProtocolError",
    "to_wire_json",
    "from_wire_json",
    "WireKey",
    "wire_key",
    "message_queue_of",
    "mq_wire",
    "BatchEntry",
    "encode_batch",
    "decode_batch",
    "decode_batch_texts",
    "sign",
    "ACCESS_KEY",
    "SIGNATURE",
]
