"""RocketMQ's remoting protocol: frames, the two header serializations, codes, body codecs, ACL signing.

One frame (`RemotingCommand.encode` / `NettyDecoder` of RocketMQ 5.0.0), big-endian:

| bytes | field | notes |
|---|---|---|
| 4 | length | of everything after this field; `length + 4 <= max_frame_size` (16 MiB) |
| 1 | serialize type | 0 JSON, 1 ROCKETMQ (binary) |
| 3 | header length | of the header that follows |
| header length | header | JSON text, or the binary layout below |
| rest | body | opaque bytes (a message, a JSON body, stored records) |

The binary header (`RocketMQSerializable.rocketMQProtocolEncode`):

| bytes | field |
|---|---|
| 2 | code (a Java short) |
| 1 | language (`LanguageCode`) |
| 2 | version |
| 4 | opaque (matches a response to its request) |
| 4 | flag (bit 0: response, bit 1: oneway) |
| 4 + n | remark, UTF-8 |
| 4 + n | ext fields: per entry a 2-byte key length, the key, a 4-byte value length, the value (UTF-8) |

A JSON header is fastjson's rendering of `RemotingCommand`: `{"code":..,"extFields":{..},"flag":..,
"language":"JAVA","opaque":..,"remark":..,"serializeTypeCurrentRPC":"JSON","version":..}`.
A server answers in the serialization the request used (`RemotingCommand.response(...,
serialize_type=request.serialize_type)`).

Bodies are mostly fastjson JSON (`to_wire_json` / `from_wire_json`: fastjson writes maps keyed by
objects or numbers with unquoted keys, `{{"brokerName":"b","queueId":0,"topic":"t"}:5}`), and a
batch send carries `MessageDecoder.encodeMessage` records back to back (`encode_batch` /
`decode_batch`). ACL requests carry `AccessKey` and `Signature` ext fields (`sign`).

Everything a peer sends is checked before it is used: a frame's length before anything is
buffered for it, every inner length against the bytes that are really there. A bad frame raises
`ProtocolError`, and only that connection is closed.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import itertools
import json
import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..errors import MQClientError, ProtocolError
from ..message import MessageQueue, decode_properties, encode_properties

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "SERVER_VERSION",
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
    "sign",
    "ACCESS_KEY",
    "SIGNATURE",
]

#: `MQVersion.CURRENT_VERSION` of RocketMQ 5.0.0 (`V5_0_0.ordinal()`): the version responses carry.
SERVER_VERSION = 413
#: `NettySystemConfig.frameMaxLength` / `com.rocketmq.remoting.frameMaxLength`: 16 MiB.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_RESPONSE_FLAG = 1  # 1 << RPC_TYPE
_ONEWAY_FLAG = 2  # 1 << RPC_ONEWAY

_PREFIX = struct.Struct(">iI")  # length, serialize type << 24 | header length
_LENGTH = struct.Struct(">i")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class SerializeType(enum.IntEnum):
    """How a frame's header is written (`SerializeType`)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(enum.IntEnum):
    """`LanguageCode`: the client's language, sent in every header (informational only)."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class RequestCode(enum.IntEnum):
    """RocketMQ 5.0.0's `RequestCode` (names and numbers as in the Java source)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    GET_CLIENT_CONFIG = 47
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    GET_TIMER_CHECK_POINT = 60
    GET_TIMER_METRICS = 61
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    QUERY_TOPICS_BY_CONSUMER = 343
    QUERY_SUBSCRIPTION_BY_CONSUMER = 345
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    UPDATE_AND_GET_GROUP_FORBIDDEN = 353
    LITE_PULL_MESSAGE = 361
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    UPDATE_AND_CREATE_STATIC_TOPIC = 513
    GET_BROKER_MEMBER_GROUP = 901
    ADD_BROKER = 902
    REMOVE_BROKER = 903
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    EXCHANGE_BROKER_HA_INFO = 906
    GET_BROKER_HA_STATUS = 907
    RESET_MASTER_FLUSH_OFFSET = 908
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055


class ResponseCode(enum.IntEnum):
    """RocketMQ 5.0.0's `RemotingSysResponseCode` and `ResponseCode` (the response codes a client reads)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501


_LANGUAGE_NAMES = {code.value: code.name for code in LanguageCode}
_OPAQUES = itertools.count(1)  # this process's request ids (`RemotingCommand.requestId`)


class RemotingCommand:
    """One request or response (`RemotingCommand`): a code, an `opaque` matching the response to its
    request, flag bits, an optional remark, string ext fields (the custom header) and a body.

    >>> req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
    >>> frame = encode_frame(req)
    >>> [back] = FrameDecoder().feed(frame)
    >>> (back.code, back.ext_fields, back.is_response, back.opaque == req.opaque)
    (105, {'topic': 't'}, False, True)
    """

    __slots__ = ("code", "opaque", "flag", "remark", "ext_fields", "body", "language", "version", "serialize_type")

    def __init__(self, code: int, opaque: int = 0, flag: int = 0, remark: str | None = None,
                 ext_fields: dict[str, str] | None = None, body: bytes | None = None, language: str = "JAVA",
                 version: int = 0, serialize_type: SerializeType = SerializeType.JSON) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields: dict[str, str] = ext_fields if ext_fields is not None else {}
        self.body = body
        self.language = language
        self.version = version
        self.serialize_type = serialize_type

    @classmethod
    def request(cls, code: int, ext_fields: Mapping[str, object] | None = None, body: bytes | None = None, *,
                oneway: bool = False, serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
        """A new request with the next opaque of this process (values of `ext_fields` become strings,
        as `makeCustomHeaderToNet` writes them; None values are left out)."""
        opaque = next(_OPAQUES) & 0x7FFFFFFF  # `next` on a count is atomic: threads never share an opaque
        return cls(int(code), opaque, _ONEWAY_FLAG if oneway else 0, None, header_fields(ext_fields), body,
                   "PYTHON", 0, serialize_type)

    @classmethod
    def response(cls, code: int, opaque: int, ext_fields: Mapping[str, object] | None = None,
                 body: bytes | None = None, remark: str | None = None, *,
                 serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
        """A response to the request with `opaque` (answer in the request's `serialize_type`)."""
        return cls(int(code), opaque, _RESPONSE_FLAG, remark, header_fields(ext_fields), body, "JAVA",
                   SERVER_VERSION, serialize_type)

    def reply(self, code: int, ext_fields: Mapping[str, object] | None = None, body: bytes | None = None,
              remark: str | None = None) -> RemotingCommand:
        """The response to this request: its opaque and serialization."""
        return RemotingCommand.response(code, self.opaque, ext_fields, body, remark,
                                        serialize_type=self.serialize_type)

    @property
    def is_response(self) -> bool:
        """Flag bit 0: a response (else a request)."""
        return bool(self.flag & _RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """Flag bit 1: a request that expects no response."""
        return bool(self.flag & _ONEWAY_FLAG)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "oneway" if self.is_oneway else "request"
        name = _code_name(self.code, self.is_response)
        remark = f", remark={self.remark!r}" if self.remark else ""
        size = 0 if self.body is None else len(self.body)
        return f"<RemotingCommand {kind} {name} opaque={self.opaque} ext={self.ext_fields}{remark} body={size}B>"


def _code_name(code: int, response: bool) -> str:
    try:
        return (ResponseCode(code) if response else RequestCode(code)).name
    except ValueError:
        return str(code)


def header_fields(fields: Mapping[str, object] | None) -> dict[str, str]:
    """Ext fields as strings the way Java's `toString` writes them (`True` -> `"true"`); None dropped."""
    if not fields:
        return {}
    out: dict[str, str] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str):
            out[key] = value
        else:
            out[key] = str(value)
    return out


# -- encoding -------------------------------------------------------------------------------------------
def encode_frame(cmd: RemotingCommand, serialize_type: SerializeType | None = None) -> bytes:
    """The whole frame of `cmd` (length prefix included), its header in `serialize_type`
    (default: `cmd.serialize_type`)."""
    kind = cmd.serialize_type if serialize_type is None else serialize_type
    header = _encode_binary_header(cmd) if kind == SerializeType.ROCKETMQ else _encode_json_header(cmd)
    body = cmd.body or b""
    if len(header) > 0xFFFFFF:
        raise MQClientError(f"a remoting header is {len(header)} bytes; the frame has 3 bytes for its length")
    return b"".join((_PREFIX.pack(4 + len(header) + len(body), (int(kind) << 24) | len(header)), header, body))


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # fastjson writes a bean's properties sorted by name and leaves a null remark out.
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    header["flag"] = cmd.flag
    header["language"] = cmd.language
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return _JSON_ENCODER.encode(header).encode("utf-8", "surrogatepass")


#: One encoder for every header (`json.dumps` with options builds a new one per call).
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _java_short(value: int) -> int:
    """`(short) value`: Java truncates a code above 32767 (the pop codes) to 16 bits."""
    return ((value + 0x8000) & 0xFFFF) - 0x8000


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        language = LanguageCode[cmd.language].value
    except KeyError:
        language = LanguageCode.OTHER.value
    parts = [_BINARY_FIXED.pack(_java_short(cmd.code), language, _java_short(cmd.version), cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts += [_I32.pack(len(remark)), remark]
    fields = []
    for key, value in cmd.ext_fields.items():
        k, v = key.encode("utf-8"), value.encode("utf-8")
        fields += [_I16.pack(len(k)), k, _I32.pack(len(v)), v]
    ext = b"".join(fields)
    parts += [_I32.pack(len(ext)), ext]
    return b"".join(parts)


# -- decoding -------------------------------------------------------------------------------------------
class FrameDecoder:
    """Splits a byte stream into `RemotingCommand`s; one per connection.

    `feed` takes whatever the socket returned and gives back the commands it completed. A frame's
    4-byte length is checked against `max_frame_size` as soon as it has arrived, before any byte of
    the frame is kept, so a peer cannot make the decoder buffer more than one frame's worth.
    Malformed input raises `ProtocolError`; the decoder is then unusable (close the connection).
    Not thread-safe (one reader per connection).
    """

    __slots__ = ("max_frame_size", "_head", "_frame", "_expected", "_broken")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not isinstance(max_frame_size, int) or isinstance(max_frame_size, bool) or max_frame_size < 8:
            raise MQClientError(f"max_frame_size must be an int >= 8 (bytes), got {max_frame_size!r}")
        self.max_frame_size = max_frame_size
        self._head = b""  # the length prefix, while it is incomplete
        self._frame = bytearray()  # the frame being received, without its length prefix
        self._expected = -1  # its length once the prefix was read and checked, else -1
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._head) + len(self._frame)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """The commands completed by `data` (possibly none); `ProtocolError` on a bad frame."""
        if self._broken:
            raise ProtocolError("this connection already sent a malformed frame")
        try:
            return self._feed(memoryview(data).cast("B"))
        except ProtocolError:
            self._broken = True
            raise

    def _feed(self, data: memoryview) -> list[RemotingCommand]:
        out: list[RemotingCommand] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._expected < 0:
                if not self._head and n - pos >= 4:
                    length = _LENGTH.unpack_from(data, pos)[0]
                    pos += 4
                else:
                    take = min(4 - len(self._head), n - pos)
                    self._head += bytes(data[pos:pos + take])
                    pos += take
                    if len(self._head) < 4:
                        break
                    length = _LENGTH.unpack(self._head)[0]
                    self._head = b""
                self._check_length(length)
                if not self._frame and n - pos >= length:  # the whole frame is here: no copy to a buffer
                    out.append(decode_command(data[pos:pos + length]))
                    pos += length
                    continue
                self._expected = length
            take = min(self._expected - len(self._frame), n - pos)
            self._frame += data[pos:pos + take]
            pos += take
            if len(self._frame) == self._expected:
                frame, self._frame, self._expected = self._frame, bytearray(), -1
                out.append(decode_command(memoryview(frame)))
        return out

    def _check_length(self, length: int) -> None:
        if length < 4:
            raise ProtocolError(f"a frame says it is {length} bytes long; it needs at least 4 (its header length)")
        if length + 4 > self.max_frame_size:
            raise ProtocolError(f"a frame of {length + 4} bytes is over max_frame_size {self.max_frame_size}")


def decode_command(frame: memoryview | bytes) -> RemotingCommand:
    """One command from a frame without its length prefix (`RemotingCommand.decode`)."""
    view = memoryview(frame).cast("B") if not isinstance(frame, memoryview) else frame
    if len(view) < 4:
        raise ProtocolError(f"a frame of {len(view)} bytes has no header length")
    mark = _I32.unpack_from(view, 0)[0] & 0xFFFFFFFF
    kind, header_length = mark >> 24, mark & 0xFFFFFF
    if header_length > len(view) - 4:
        raise ProtocolError(f"a header of {header_length} bytes does not fit a frame of {len(view)} bytes")
    header = view[4:4 + header_length]
    if kind == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif kind == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise ProtocolError(f"unknown header serialize type {kind} (0 is JSON, 1 ROCKETMQ)")
    body = view[4 + header_length:]
    cmd.body = bytes(body) if len(body) else None
    return cmd


def _int_field(header: Mapping[str, Any], name: str) -> int:
    value = header.get(name, 0)
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:
        return value
    if value is None:
        return 0
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,10}", value):
        value = int(value)  # fastjson reads "12" into an int field too
        if _INT32_MIN <= value <= _INT32_MAX:
            return value
    raise ProtocolError(f"header field {name!r} must be a Java int, got {value!r}")


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        obj = json.loads(bytes(header))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"a JSON header is not valid JSON ({exc})") from None
    if type(obj) is not dict:
        raise ProtocolError(f"a JSON header must be an object, got {type(obj).__name__}")
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        raise ProtocolError(f"header field 'remark' must be a string, got {remark!r}")
    language = obj.get("language", "JAVA")
    if type(language) is not str:
        if type(language) is not int:
            raise ProtocolError(f"header field 'language' must be a string, got {language!r}")
        language = _LANGUAGE_NAMES.get(language, "OTHER")
    ext = obj.get("extFields")
    if ext is None:
        fields: dict[str, str] = {}
    elif type(ext) is not dict:
        raise ProtocolError(f"header field 'extFields' must be an object, got {type(ext).__name__}")
    elif all(type(v) is str for v in ext.values()):
        fields = ext  # what RocketMQ's Java client sends: strings only
    else:  # other clients (ali-ons) send numbers and booleans: Java's toString of each
        fields = {}
        for key, value in ext.items():
            if value is None:
                continue
            if isinstance(value, (dict, list)):
                raise ProtocolError(f"ext field {key!r} must be a string, got {type(value).__name__}")
            fields[key] = value if isinstance(value, str) else header_fields({key: value})[key]
    return RemotingCommand(_int_field(obj, "code"), _int_field(obj, "opaque"), _int_field(obj, "flag"), remark,
                           fields, None, language, _int_field(obj, "version"), SerializeType.JSON)


def _utf8(data: memoryview, what: str) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"the {what} of a binary header is not UTF-8") from None


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    n = len(header)
    if n < _BINARY_FIXED.size + 8:
        raise ProtocolError(f"a binary header of {n} bytes is shorter than its fixed part ({_BINARY_FIXED.size + 8})")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    pos = _BINARY_FIXED.size
    remark_length = _I32.unpack_from(header, pos)[0]
    pos += 4
    if remark_length < 0 or remark_length > n - pos - 4:
        raise ProtocolError(f"a binary header's remark of {remark_length} bytes does not fit its {n} bytes")
    remark = _utf8(header[pos:pos + remark_length], "remark") if remark_length else None
    pos += remark_length
    ext_length = _I32.unpack_from(header, pos)[0]
    pos += 4
    if ext_length < 0 or ext_length != n - pos:
        raise ProtocolError(f"a binary header's ext fields of {ext_length} bytes do not match the {n - pos} "
                            "bytes left")
    fields: dict[str, str] = {}
    while pos < n:
        if n - pos < 2:
            raise ProtocolError("a binary header's ext field is cut off in its key length")
        key_length = _I16.unpack_from(header, pos)[0]
        pos += 2
        if key_length < 0 or key_length > n - pos - 4:
            raise ProtocolError(f"a binary header's ext key of {key_length} bytes does not fit")
        key = _utf8(header[pos:pos + key_length], "ext field key")
        pos += key_length
        value_length = _I32.unpack_from(header, pos)[0]
        pos += 4
        if value_length < 0 or value_length > n - pos:
            raise ProtocolError(f"a binary header's ext value of {value_length} bytes does not fit")
        fields[key] = _utf8(header[pos:pos + value_length], "ext field value")
        pos += value_length
    return RemotingCommand(code, opaque, flag, remark, fields, None, _LANGUAGE_NAMES.get(language, "OTHER"),
                           version, SerializeType.ROCKETMQ)


# -- fastjson bodies ------------------------------------------------------------------------------------------
#: A decoded object key: the object's (name, value) pairs sorted by name (hashable; `dict(key)` reads it).
WireKey = tuple[tuple[str, Any], ...]


def mq_wire(mq: MessageQueue) -> dict[str, object]:
    """`MessageQueue` as fastjson writes it (properties sorted by name)."""
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def wire_key(obj: Mapping[str, Any]) -> WireKey:
    """The hashable key `from_wire_json` gives an object used as a map key."""
    return tuple(sorted((k, _hashable(v)) for k, v in obj.items()))


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return wire_key(value)
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def message_queue_of(obj: Mapping[str, Any] | WireKey) -> MessageQueue:
    """A `MessageQueue` from its wire object (a dict, or a `WireKey`); `MQClientError` when it is not one."""
    fields = dict(obj) if not isinstance(obj, Mapping) else obj
    topic, broker, queue_id = fields.get("topic"), fields.get("brokerName"), fields.get("queueId")
    if not isinstance(topic, str) or not isinstance(broker, str) or type(queue_id) is not int:
        raise MQClientError(f"not a MessageQueue (topic, brokerName, queueId): {dict(fields)!r}")
    return MessageQueue(topic, broker, queue_id)


def to_wire_json(value: Any) -> bytes:
    """`value` as fastjson writes it: maps keyed by numbers or objects (a `MessageQueue`, a `WireKey`)
    get unquoted keys, `MessageQueue` values become their objects, bytes become base64 strings.

    >>> to_wire_json({MessageQueue("t", "b", 0): 5, 0: "a"})
    b'{{"brokerName":"b","queueId":0,"topic":"t"}:5,0:"a"}'
    """
    out: list[str] = []
    _write_json(value, out)
    return "".join(out).encode("utf-8", "surrogatepass")


def _write_json(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(json.dumps(value))
    elif isinstance(value, MessageQueue):
        _write_json(mq_wire(value), out)
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            _write_key(key, out)
            out.append(":")
            _write_json(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write_json(item, out)
        out.append("]")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append('"' + base64.b64encode(bytes(value)).decode("ascii") + '"')
    else:
        raise TypeError(f"cannot write {type(value).__name__} {value!r} as wire JSON")


def _write_key(key: Any, out: list[str]) -> None:
    if isinstance(key, str):
        out.append(json.dumps(key, ensure_ascii=False))
    elif isinstance(key, bool) or not isinstance(key, (int, MessageQueue, tuple)):
        raise TypeError(f"cannot write {type(key).__name__} {key!r} as a wire JSON key")
    elif isinstance(key, tuple):  # a WireKey
        _write_json({k: _unhashable(v) for k, v in key}, out)
    else:
        _write_json(key, out)  # an int unquoted, a MessageQueue as its object (fastjson's non-string keys)


def _unhashable(value: Any) -> Any:
    if isinstance(value, tuple) and value and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                                 for p in value):
        return {k: _unhashable(v) for k, v in value}
    if isinstance(value, tuple):
        return [_unhashable(v) for v in value]
    return value


_MAX_JSON_DEPTH = 64
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


def from_wire_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a fastjson body: standard JSON plus maps with unquoted number keys (-> int) and object
    keys (-> `WireKey`). `MQClientError` when it is not that.

    >>> from_wire_json(b'{{"brokerName":"b","queueId":0,"topic":"t"}:5,0:"a"}')
    {(('brokerName', 'b'), ('queueId', 0), ('topic', 't')): 5, 0: 'a'}
    """
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MQClientError(f"a JSON body is not UTF-8 ({exc})") from None
    try:
        return json.loads(text)  # the common case: plain JSON, at C speed
    except RecursionError:
        raise MQClientError("a JSON body is nested too deeply") from None
    except ValueError:
        pass
    try:
        value, pos = _parse_value(text, _WS.match(text, 0).end(), 0)  # type: ignore[union-attr]
    except (ValueError, IndexError, RecursionError) as exc:
        raise MQClientError(f"a JSON body cannot be parsed ({exc})") from None
    if _WS.match(text, pos).end() != len(text):  # type: ignore[union-attr]
        raise MQClientError(f"a JSON body has extra text at character {pos}")
    return value


def _parse_value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_JSON_DEPTH}")
    ch = text[pos]
    if ch == "{":
        return _parse_object(text, pos + 1, depth + 1)
    if ch == "[":
        items: list[Any] = []
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        if text[pos] == "]":
            return items, pos + 1
        while True:
            item, pos = _parse_value(text, pos, depth + 1)
            items.append(item)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos] == "]":
                return items, pos + 1
            if text[pos] != ",":
                raise ValueError(f"expected , or ] at {pos}")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
    if ch == '"':
        return json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined,no-any-return]
    for word, literal in _LITERALS.items():
        if text.startswith(word, pos):
            return literal, pos + len(word)
    match = _NUMBER.match(text, pos)
    if match is None:
        raise ValueError(f"unexpected {ch!r} at {pos}")
    number = match.group()
    return (float(number) if match.group(1) or match.group(2) else int(number)), match.end()


def _parse_object(text: str, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
    result: dict[Any, Any] = {}
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if text[pos] == "}":
        return result, pos + 1
    while True:
        key, pos = _parse_value(text, pos, depth)
        if isinstance(key, dict):
            key = wire_key(key)
        elif isinstance(key, list):
            raise ValueError(f"an array cannot be a key (at {pos})")
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] != ":":
            raise ValueError(f"expected : at {pos}")
        value, pos = _parse_value(text, _WS.match(text, pos + 1).end(), depth)  # type: ignore[union-attr]
        result[key] = value
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] == "}":
            return result, pos + 1
        if text[pos] != ",":
            raise ValueError(f"expected , or }} at {pos}")
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]


# -- batch bodies (MessageDecoder.encodeMessage / decodeMessages) -----------------------------------------------
class BatchEntry(NamedTuple):
    """One message of a batch body: what `MessageDecoder.encodeMessage` keeps (flag, body, properties)."""

    flag: int
    body: bytes
    properties: dict[str, str]


_BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic (0), body CRC (0), flag, body length
_PROPS_MAX = 0x7FFF  # a Java short holds the properties' length


def encode_batch(messages: Iterable[tuple[int, bytes, Mapping[str, str]]]) -> bytes:
    """The body of `SEND_BATCH_MESSAGE`: each (flag, body, properties) as `MessageDecoder.encodeMessage`."""
    parts: list[bytes] = []
    for flag, body, properties in messages:
        props = encode_properties(properties).encode("utf-8") if properties else b""
        if len(props) > _PROPS_MAX:
            raise MQClientError(f"a batched message's properties take {len(props)} bytes; at most {_PROPS_MAX} fit")
        size = _BATCH_HEAD.size + len(body) + 2 + len(props)
        parts += [_BATCH_HEAD.pack(size, 0, 0, flag, len(body)), bytes(body), _I16.pack(len(props)), props]
    return b"".join(parts)


def decode_batch(data: bytes | memoryview) -> list[BatchEntry]:
    """The messages of a batch body (`MessageDecoder.decodeMessages`); `MQClientError` when a length
    does not fit the bytes there. The total size field is not trusted, as Java does not read it."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
    out: list[BatchEntry] = []
    pos, n = 0, len(view)
    while pos < n:
        if n - pos < _BATCH_HEAD.size:
            raise MQClientError(f"a batch body is cut off: {n - pos} bytes left at {pos}, a message needs "
                                f"at least {_BATCH_HEAD.size + 2}")
        _, _, _, flag, body_length = _BATCH_HEAD.unpack_from(view, pos)
        pos += _BATCH_HEAD.size
        if body_length < 0 or body_length > n - pos - 2:
            raise MQClientError(f"a batched message's body of {body_length} bytes does not fit the batch")
        body = bytes(view[pos:pos + body_length])
        pos += body_length
        props_length = _I16.unpack_from(view, pos)[0]
        pos += 2
        if props_length < 0 or props_length > n - pos:
            raise MQClientError(f"a batched message's properties of {props_length} bytes do not fit the batch")
        try:
            properties = decode_properties(str(view[pos:pos + props_length], "utf-8"))
        except UnicodeDecodeError:
            raise MQClientError("a batched message's properties are not UTF-8") from None
        pos += props_length
        out.append(BatchEntry(flag, body, properties))
    return out


# -- ACL (AclClientRPCHook, AclUtils.combineRequestContent, AclSigner) -------------------------------------------
ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def _java_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")  # a TreeMap<String, ...> sorts by UTF-16 code units


def sign(ext_fields: Mapping[str, str], body: bytes | None, secret_key: str) -> str:
    """RocketMQ ACL's signature: HmacSHA1, keyed by `secret_key`, of the values of the ext fields
    sorted by name (`Signature` itself left out) followed by the body; base64.

    >>> sign({"AccessKey": "ak", "topic": "t"}, b"x", "sk")
    '6SB4Yq5B3U7Vw40rFDCo15c7rEg='
    """
    content = "".join(ext_fields[k] for k in sorted(ext_fields, key=_java_order) if k != SIGNATURE)
    digest = hmac.new(secret_key.encode("utf-8"), content.encode("utf-8") + (body or b""), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")
