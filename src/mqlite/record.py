"""A commit-log record: the one owner of its bytes (layout, sizes, field positions, encode, decode, check).

Record layout (big-endian; `MessageExtEncoder`, `CommitLog.checkMessageAndReturnSize`).
Offsets are for IPv4 born and store hosts; an IPv6 host (sysflag 0x10 / 0x20) is
20 bytes instead of 8 and shifts every later field by 12:

    | offset | size  | field                                              |
    |--------|-------|----------------------------------------------------|
    |      0 | 4     | TOTALSIZE (whole record, this field included)      |
    |      4 | 4     | MAGICCODE: V1 0xDAA320A7, V2 0xDAA320AB            |
    |      8 | 4     | BODYCRC = crc32(stored body) & 0x7FFFFFFF          |
    |     12 | 4     | QUEUEID                                            |
    |     16 | 4     | FLAG (user flag)                                   |
    |     20 | 8     | QUEUEOFFSET (0 for prepared/rollback records)      |
    |     28 | 8     | PHYSICALOFFSET (this record's commit-log offset)   |
    |     36 | 4     | SYSFLAG                                            |
    |     40 | 8     | BORNTIMESTAMP (ms)                                 |
    |     48 | 8/20  | BORNHOST: address + int port                       |
    |     56 | 8     | STORETIMESTAMP (ms)                                |
    |     64 | 8/20  | STOREHOSTADDRESS: address + int port               |
    |     72 | 4     | RECONSUMETIMES                                     |
    |     76 | 8     | PREPARED TRANSACTION OFFSET                        |
    |     84 | 4     | BODY length, then the body bytes                   |
    |        | 1 / 2 | TOPIC length (V1: byte, V2: short), then UTF-8     |
    |        | 2     | PROPERTIES length (a short), then UTF-8            |

A record fits in a segment only if 8 bytes remain after it; otherwise the
segment is closed with an 8-byte BLANK record `[int remaining][int 0xCBD43194]`
and the record goes to the next segment. Every segment therefore ends in a blank.

`HEADER` (a `struct.Struct`) and `HEADER_DTYPE` (the same 88 bytes as a numpy record)
are the only sources of the header's sizes and offsets: the `*_POS` constants are
derived from them, never typed. Everything that reads or writes a record's bytes
(the commit log's appends, recovery, verify, the readers, the Spark reader, the
inbox) goes through the names below; the commit log (`commitlog.py`) owns where a
record lies and the locking, not its bytes.

>>> record_length(0, body_len=5, topic_len=1, props_len=0)
97
>>> body_length_pos(0), body_length_pos(SysFlag.BORNHOST_V6 | SysFlag.STOREHOSTADDRESS_V6)
(84, 108)
"""

from __future__ import annotations

import itertools
import mmap
import operator
import socket
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, overload

import numpy as np

from .compression import decompress
from .errors import MQClientError, StoreCorruptedError
from .message import (
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    EncodedProperties,
    MessageExt,
    SysFlag,
    create_offset_msg_id,
    decode_properties,
    encode_properties,
    tags_code,
)

__all__ = [
    "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "MAGIC_BYTES", "HEADER", "PREFIX", "BLANK", "RECORD_KEY",
    "TOTAL_AND_MAGIC", "COMMIT_LOG_OFFSET", "PROPERTIES_LENGTH", "EMPTY_PROPERTIES", "record_tail",
    "END_FILE_MIN_BLANK_LENGTH", "MIN_RECORD_SIZE", "MAX_PROPERTIES_LENGTH", "MAX_TOPIC_BYTES", "HOST_V6_EXTRA",
    "HOST_V6_FLAGS", "STORE_HOST", "HEADER_DTYPE", "HEADER_DTYPE_BORN_V6",
    "TOTAL_SIZE_POS", "MAGIC_POS", "BODY_CRC_POS", "QUEUE_ID_POS", "FLAG_POS", "QUEUE_OFFSET_POS",
    "COMMIT_LOG_OFFSET_POS", "SYSFLAG_POS", "SYSFLAG_LOW_POS", "BORN_TIMESTAMP_POS", "BORN_HOST_POS",
    "STORE_TIMESTAMP_POS", "STORE_HOST_POS", "RECONSUME_TIMES_POS", "PREPARED_TRANSACTION_OFFSET_POS",
    "BODY_LENGTH_POS", "BODY_POS", "pack_header_born_v6", "pack_headers", "place_headers",
    "check_encoded_records", "ByteRows", "host_shift", "body_length_pos", "store_timestamp_pos",
    "record_length", "topic_prefix", "host_bytes", "host_text", "TagsCodeFn", "default_tags_code",
    "DispatchRequest", "StoredMessage", "body_bytes", "record_body", "record_properties", "stored_record",
    "stored_body",
    "decode_message", "check_record", "framed_at", "find_frame", "encode_record", "encode_records",
    "BODY_LENGTH", "unwritten_at", "headers_at", "properties_length_pos", "properties_lengths",
    "encode_batch", "EncodedBatchProperties",
]

MAGIC_V1 = -626843481  # 0xDAA320A7: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-segment filler

#: The fixed part of a record with IPv4 hosts: TOTALSIZE .. BODY length (17 fields).
HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
#: The fields before the born host, common to every host kind.
PREFIX = struct.Struct(">iiiiiqqiq")
BLANK = struct.Struct(">ii")
#: TOTALSIZE and MAGICCODE, the first fields of every record (and of a BLANK): what lies at a position.
TOTAL_AND_MAGIC = struct.Struct(">ii")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_USHORT = struct.Struct(">H")  # V2's TOPIC length
#: PROPERTIES length, after the topic; the properties follow it. Every writer and reader packs and
#: unpacks it with this struct. RocketMQ writes and reads it as a Java short, so it is signed here too.
#: A written length is at most MAX_PROPERTIES_LENGTH (32767, checked before packing), where a signed
#: and an unsigned big-endian short are the same two bytes; a damaged length reads negative.
PROPERTIES_LENGTH = struct.Struct(">h")
#: The PROPERTIES length of a record without properties (nothing follows it).
EMPTY_PROPERTIES = PROPERTIES_LENGTH.pack(0)
END_FILE_MIN_BLANK_LENGTH = BLANK.size
#: The extra header bytes of each IPv6 host: an IPv6 address is 16 bytes where IPv4 takes 4.
HOST_V6_EXTRA = 16 - 4
#: The smallest record: empty body, empty topic, empty properties (IPv4 hosts, V1).
MIN_RECORD_SIZE = HEADER.size + 1 + 2
MAX_PROPERTIES_LENGTH = 2**15 - 1  # the largest PROPERTIES length a (signed) short holds
MAX_TOPIC_BYTES = 255  # HookUtils: MAX_TOPIC_LENGTH
_V1_TOPIC_BYTES = 127  # V1's topic length is a signed byte: longer topics need V2's short
#: MAGICCODE as it lies in a record (V1, V2): what a search of damaged bytes looks for.
MAGIC_BYTES = (_INT.pack(MAGIC_V1), _INT.pack(MAGIC_V2))
HOST_V6_FLAGS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOSTADDRESS_V6

#: The store host written into records unless a server sets its own (`CommitLog.set_store_host`).
STORE_HOST = ("127.0.0.1", 10911)
_STORE_IP = socket.inet_aton(STORE_HOST[0])
_STORE_PORT = STORE_HOST[1]

#: HEADER as a numpy record (batch appends pack many headers at once, readers read many); same fields,
#: same bytes. Field names are the `MessageExt` attributes the fields decode to.
_HEADER_FIELDS = [
    ("total", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("commit_log_offset", ">i8"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
    ("born_host", "S4"), ("born_port", ">i4"), ("store_timestamp", ">i8"), ("store_host", "S4"),
    ("store_port", ">i4"), ("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"), ("body_length", ">i4"),
]
HEADER_DTYPE = np.dtype(_HEADER_FIELDS)
#: The header of a record whose born host is IPv6 (`SysFlag.BORNHOST_V6`: 16 address bytes, not 4).
HEADER_DTYPE_BORN_V6 = np.dtype([(name, "S16" if name == "born_host" else kind) for name, kind in _HEADER_FIELDS])


def _pos(field: str) -> int:
    """Where `field` starts in a header with IPv4 hosts (from `HEADER_DTYPE`, the struct's twin)."""
    return int(HEADER_DTYPE.fields[field][1])  # type: ignore[index]


# Field positions with IPv4 hosts. Those after the born host move by `host_shift`.
TOTAL_SIZE_POS = _pos("total")
MAGIC_POS = _pos("magic")
BODY_CRC_POS = _pos("body_crc")
QUEUE_ID_POS = _pos("queue_id")
FLAG_POS = _pos("flag")
QUEUE_OFFSET_POS = _pos("queue_offset")
#: PHYSICALOFFSET: where a record says it lies in the log.
COMMIT_LOG_OFFSET_POS = _pos("commit_log_offset")
SYSFLAG_POS = _pos("sys_flag")
#: The low byte of the big-endian SYSFLAG: the compression and IPv6 host bits.
SYSFLAG_LOW_POS = SYSFLAG_POS + _INT.size - 1
BORN_TIMESTAMP_POS = _pos("born_timestamp")
BORN_HOST_POS = _pos("born_host")
STORE_TIMESTAMP_POS = _pos("store_timestamp")
STORE_HOST_POS = _pos("store_host")
RECONSUME_TIMES_POS = _pos("reconsume_times")
PREPARED_TRANSACTION_OFFSET_POS = _pos("prepared_transaction_offset")
BODY_LENGTH_POS = _pos("body_length")
BODY_POS = HEADER.size  # the body follows its length
#: TOTALSIZE, MAGICCODE (as bytes: compare with `MAGIC_BYTES`), QUEUEID, QUEUEOFFSET: what ties a
#: record to its consume-queue unit, in one unpack.
RECORD_KEY = struct.Struct(f">i4s{QUEUE_ID_POS - BODY_CRC_POS}xi{QUEUE_OFFSET_POS - FLAG_POS}xq")
#: PHYSICALOFFSET as it lies at `COMMIT_LOG_OFFSET_POS`: whether a record says it lies where it was found.
COMMIT_LOG_OFFSET = struct.Struct(">q")
assert COMMIT_LOG_OFFSET.size == HEADER_DTYPE["commit_log_offset"].itemsize
assert HEADER.size == HEADER_DTYPE.itemsize == 88 and PREFIX.size == BORN_HOST_POS == 48 and BLANK.size == 8
assert HEADER_DTYPE_BORN_V6.itemsize == HEADER.size + HOST_V6_EXTRA and RECORD_KEY.size == QUEUE_OFFSET_POS + 8
assert (COMMIT_LOG_OFFSET_POS, SYSFLAG_POS, BODY_LENGTH_POS) == (28, 36, 84)


def host_shift(sys_flag: int) -> int:
    """How far the fields after both hosts (RECONSUMETIMES on, body included) move: 12 per IPv6 host."""
    return (HOST_V6_EXTRA if sys_flag & SysFlag.BORNHOST_V6 else 0) + (
        HOST_V6_EXTRA if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 0)


def body_length_pos(sys_flag: int) -> int:
    """Where BODY length lies in a record with `sys_flag` (84 with IPv4 hosts); the body follows it."""
    return BODY_LENGTH_POS + host_shift(sys_flag)


def store_timestamp_pos(sys_flag: int) -> int:
    """Where STORETIMESTAMP lies in a record with `sys_flag` (after the born host only)."""
    return STORE_TIMESTAMP_POS + (HOST_V6_EXTRA if sys_flag & SysFlag.BORNHOST_V6 else 0)


_TAIL_V4 = struct.Struct(">q4siiqi")  # store ts, store host, store port, reconsume, prepared, body len


def pack_header_born_v6(buf: Any, pos: int, total: int, magic: int, crc: int, queue_id: int, flag: int,
                        queue_offset: int, commit_log_offset: int, sys_flag: int, born_timestamp: int,
                        born_ip: bytes, born_port: int, store_timestamp: int, store_ip: bytes, store_port: int,
                        reconsume_times: int, prepared_transaction_offset: int, body_length: int) -> None:
    """`HEADER.pack_into` for a record whose born host is IPv6 (16 address bytes; the store host IPv4):
    the same fields in `HEADER`'s order, written at `pos` of the writable buffer `buf`."""
    PREFIX.pack_into(buf, pos, total, magic, crc, queue_id, flag, queue_offset, commit_log_offset, sys_flag,
                     born_timestamp)
    p = pos + PREFIX.size
    buf[p : p + 16] = born_ip
    _INT.pack_into(buf, p + 16, born_port)
    _TAIL_V4.pack_into(buf, p + 20, store_timestamp, store_ip, store_port, reconsume_times,
                       prepared_transaction_offset, body_length)


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, v2: bool = False) -> int:
    """`calMsgLength`: the total size of a record (91 + body + topic + props for IPv4/V1)."""
    topic_len_size = _USHORT.size if v2 else 1
    return HEADER.size + host_shift(sys_flag) + body_len + topic_len_size + topic_len + PROPERTIES_LENGTH.size + props_len


def topic_prefix(topic: str) -> tuple[bytes, bool]:
    """The topic as a record stores it (length, then UTF-8) and whether it needs MAGIC_V2.

    RocketMQ picks V2 above 127 characters; a topic of fewer characters but more UTF-8
    bytes would overflow V1's signed length byte, so mqlite counts bytes. Raises
    `MQClientError` above `MAX_TOPIC_BYTES`.
    """
    data = topic.encode("utf-8")
    if len(data) > MAX_TOPIC_BYTES:
        raise MQClientError(f"topic {topic[:40]!r}... is {len(data)} bytes; the limit is {MAX_TOPIC_BYTES}")
    if len(data) > _V1_TOPIC_BYTES:
        return _USHORT.pack(len(data)) + data, True
    return bytes((len(data),)) + data, False


def record_tail(prefix: bytes, props: bytes) -> bytes:
    """What follows a record's body: the topic as `topic_prefix` gives it, PROPERTIES length and the
    encoded properties `props` (at most `MAX_PROPERTIES_LENGTH` bytes).

    The single append (the hot path of every send) packs the same bytes inline with
    `PROPERTIES_LENGTH.pack`: a call per send costs more than the concatenation.

    >>> record_tail(topic_prefix("T")[0], b"TAGS\\x01a\\x02")
    b'\\x01T\\x00\\x07TAGS\\x01a\\x02'
    """
    return prefix + PROPERTIES_LENGTH.pack(len(props)) + props


def host_bytes(host: str) -> tuple[bytes, int]:
    """`ip:port` (or `[ipv6]:port`) as a record stores it: the 4 or 16 address bytes and the port."""
    ip, _, port = host.rpartition(":")
    ip = ip.strip("[]")
    try:
        return socket.inet_pton(socket.AF_INET, ip), int(port)
    except OSError:
        return socket.inet_pton(socket.AF_INET6, ip), int(port)


def host_text(raw: bytes, port: int) -> str:
    """A record's host address bytes and port as text: `a.b.c.d:port` or `[ipv6]:port`."""
    if len(raw) == 4:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, raw)}]:{port}"


# -- what a record tells the dispatch -----------------------------------------------------------
#: The store's tags code of a record: `fn(topic, properties, store_timestamp)`. A batch's records share one
#: store time, and the column-wise `append_batch` calls it once per distinct property map of a batch
#: (with one message's map): the function must not read UNIQ_KEY, the one property that map has of its own.
TagsCodeFn = Callable[[str, Mapping[str, str], int], int]


def default_tags_code(topic: str, properties: Mapping[str, str], store_timestamp: int) -> int:
    """The Java hash of the TAGS property (0 without tags)."""
    return tags_code(properties.get("TAGS"))


class DispatchRequest(NamedTuple):
    """What the reput service needs to index one record (built at append, or by `check_record` from
    the record's bytes)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int


# -- decoding -----------------------------------------------------------------------------
_new = object.__new__


class StoredMessage(MessageExt):
    """A `MessageExt` decoded lazily from a copy of its record.

    Creating one costs a slot assignment (`StoredMessage.of`); the body is
    sliced on first access and the other fields are decoded together the first
    time any of them is read.
    """

    __slots__ = ("_raw", "_body")

    _raw: bytes
    _body: bytes | None

    def __init__(self, raw: bytes, broker_name: str) -> None:
        self._raw = raw
        self._body = None
        self.broker_name = broker_name

    @classmethod
    def of(cls, raw: bytes, broker_name: str) -> StoredMessage:
        """The same as the constructor, cheaper in loops (no Python-level `__init__` call)."""
        msg = _new(cls)
        msg._raw = raw
        msg._body = None
        msg.broker_name = broker_name
        return msg

    @property  # type: ignore[override]
    def body(self) -> bytes:
        """The message body (decompressed when the record says it is compressed)."""
        body = self._body
        if body is None:
            body = self._body = record_body(self._raw)
        return body

    @body.setter
    def body(self, value: bytes) -> None:
        self._body = value

    def __getattr__(self, name: str) -> object:
        if name in _LAZY_FIELDS:
            _decode_into(self, self._raw)
            return object.__getattribute__(self, name)
        raise AttributeError(name)


_LAZY_FIELDS = frozenset(MessageExt.__slots__) | {"topic", "flag", "properties", "transaction_id"}


_CUT_BODY = operator.attrgetter("_body")


def body_bytes(msgs: Sequence[MessageExt]) -> int:
    """Total body length of `msgs` (what consumers' flow control counts), without a Python step per message
    when they are `StoredMessage`s whose bodies the read already cut (every plain record's)."""
    try:
        return sum(map(len, map(_CUT_BODY, msgs)))
    except (AttributeError, TypeError):  # not a StoredMessage, or a body still to decompress
        return sum(len(msg.body) for msg in msgs)


def record_body(raw: bytes) -> bytes:
    """The body of the whole record `raw`, decompressed when its sys flag says it is compressed."""
    (sys_flag,) = _INT.unpack_from(raw, SYSFLAG_POS)
    pos = body_length_pos(sys_flag) if sys_flag & HOST_V6_FLAGS else BODY_LENGTH_POS
    (length,) = _INT.unpack_from(raw, pos)
    body = raw[pos + 4 : pos + 4 + length]
    if sys_flag & SysFlag.COMPRESSED:
        body = decompress(body, sys_flag)
    return body


def stored_record(msg: MessageExt) -> bytes | None:
    """The bytes of `msg`'s record as they lie in the commit log (copied from the mapped file when
    it was read), or None for a message that was not read from a store. A server hands these out
    unchanged: RocketMQ's clients decode them with `MessageDecoder`."""
    return getattr(msg, "_raw", None)


def encode_record(msg: MessageExt) -> bytes:
    """`MessageDecoder.encode(msg, false)`: a whole record of `msg` as `decode_message` reads it, for a
    message that has no stored bytes to hand out (`stored_record`), such as a half message restored to
    its real topic. The body goes uncompressed; each host's form (IPv4 or IPv6) sets its sys flag bit,
    and a host that is not an address is written as 0.0.0.0:0. An uncompressed stored message encodes
    to exactly its stored bytes.
    """
    body = msg.body or b""
    prefix, v2 = topic_prefix(msg.topic)
    props = encode_properties(msg.properties).encode("utf-8")
    sys_flag = msg.sys_flag & ~(SysFlag.COMPRESSED | SysFlag.COMPRESSION_TYPE_MASK | HOST_V6_FLAGS)
    born_ip, born_port = _record_host(msg.born_host)
    store_ip, store_port = _record_host(msg.store_host)
    if len(born_ip) == 16:
        sys_flag |= SysFlag.BORNHOST_V6
    if len(store_ip) == 16:
        sys_flag |= SysFlag.STOREHOSTADDRESS_V6
    total = record_length(sys_flag, len(body), len(prefix) - (2 if v2 else 1), len(props), v2)
    return b"".join((
        PREFIX.pack(total, MAGIC_V2 if v2 else MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, msg.queue_id, msg.flag,
                    msg.queue_offset, msg.commit_log_offset, sys_flag, msg.born_timestamp),
        born_ip, _INT.pack(born_port), _LONG.pack(msg.store_timestamp), store_ip,
        _RECORD_TAIL.pack(store_port, msg.reconsume_times, msg.prepared_transaction_offset, len(body)),
        body, record_tail(prefix, props)))


_RECORD_TAIL = struct.Struct(">iiqi")  # store port, reconsume times, prepared offset, body length


def _record_host(host: str | None) -> tuple[bytes, int]:
    try:
        return host_bytes(host or "")
    except (OSError, ValueError):
        return bytes(4), 0


def stored_body(msg: MessageExt) -> tuple[bytes, int]:
    """The body bytes as the record stores them, with the sys flag that describes them.

    A compressed record's body stays compressed (RocketMQ copies it that way when
    it re-puts a message); a message without its record (a plain `MessageExt`)
    gives its decoded body and a sys flag without the compression bits.
    """
    sys_flag = msg.sys_flag
    raw = getattr(msg, "_raw", None)
    if raw is None:
        return msg.body, sys_flag & ~(SysFlag.COMPRESSED | SysFlag.COMPRESSION_TYPE_MASK)
    pos = body_length_pos(sys_flag)
    (length,) = _INT.unpack_from(raw, pos)
    return bytes(raw[pos + _INT.size : pos + _INT.size + length]), sys_flag


def _decode_into(msg: MessageExt, raw: bytes) -> None:
    try:
        (_, magic, crc, qid, flag, qoff, commit_log_offset, sys_flag, born_ts) = PREFIX.unpack_from(raw, 0)
        pos = PREFIX.size
        born_len = 16 if sys_flag & SysFlag.BORNHOST_V6 else 4
        born_ip = raw[pos : pos + born_len]
        (born_port,) = _INT.unpack_from(raw, pos + born_len)
        pos += born_len + 4
        (store_ts,) = struct.unpack_from(">q", raw, pos)
        pos += 8
        store_len = 16 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 4
        store_ip = raw[pos : pos + store_len]
        (store_port, reconsume, prepared, body_len) = struct.unpack_from(">iiqi", raw, pos + store_len)
        pos += store_len + 4 + 4 + 8 + 4
        body_end = pos + body_len
        if magic == MAGIC_V2:
            (topic_len,) = _USHORT.unpack_from(raw, body_end)
            pos = body_end + 2
        else:
            topic_len = raw[body_end]
            pos = body_end + 1
        topic = raw[pos : pos + topic_len].decode("utf-8", "replace")
        pos += topic_len
        (props_len,) = PROPERTIES_LENGTH.unpack_from(raw, pos)
        props = raw[pos + PROPERTIES_LENGTH.size : pos + PROPERTIES_LENGTH.size + max(props_len, 0)].decode("utf-8", "replace")
    except (struct.error, IndexError, ValueError) as exc:
        raise StoreCorruptedError(f"cannot decode the commit-log record of {len(raw)} bytes: {exc}") from None
    msg.topic = topic
    msg.flag = flag
    msg.properties = decode_properties(props)
    msg.transaction_id = None
    msg.queue_id = qid
    msg.queue_offset = qoff
    msg.commit_log_offset = commit_log_offset
    msg.store_size = len(raw)
    msg.body_crc = crc
    msg.sys_flag = sys_flag
    msg.born_timestamp = born_ts
    msg.store_timestamp = store_ts
    msg.born_host = host_text(born_ip, born_port)
    msg.store_host = host_text(store_ip, store_port)
    msg.reconsume_times = reconsume
    msg.prepared_transaction_offset = prepared
    msg.offset_msg_id = create_offset_msg_id(store_ip, store_port, commit_log_offset)
    body = raw[body_end - body_len : body_end]
    msg.body = decompress(body, sys_flag) if sys_flag & SysFlag.COMPRESSED else body


def decode_message(raw: bytes, broker_name: str) -> StoredMessage:
    """A fully decoded message from the bytes of one record."""
    msg = StoredMessage(raw, broker_name)
    _decode_into(msg, raw)
    return msg


def record_properties(raw: bytes | memoryview) -> dict[str, str]:
    """The property map of the whole record `raw`, without decoding the rest (its body stays unread).

    Raises `StoreCorruptedError` when the lengths do not lead to the properties.

    >>> records, sizes = encode_records("T", b"hi", [0, 2], [b"TAGS\\x01a\\x02"], born_timestamp=0)
    >>> record_properties(bytes(records))
    {'TAGS': 'a'}
    """
    try:
        (magic,) = _INT.unpack_from(raw, MAGIC_POS)
        (sys_flag,) = _INT.unpack_from(raw, SYSFLAG_POS)
        pos = body_length_pos(sys_flag)
        body_end = pos + _INT.size + _INT.unpack_from(raw, pos)[0]
        if magic == MAGIC_V2:
            topic_pos = body_end + _USHORT.size + _USHORT.unpack_from(raw, body_end)[0]
        else:
            topic_pos = body_end + 1 + raw[body_end]
        (props_len,) = PROPERTIES_LENGTH.unpack_from(raw, topic_pos)
        start = topic_pos + PROPERTIES_LENGTH.size
        if start + max(props_len, 0) > len(raw):
            raise ValueError("the properties run past the record")
        text = bytes(raw[start : start + max(props_len, 0)]).decode("utf-8", "replace")
    except (struct.error, IndexError, ValueError) as exc:
        raise StoreCorruptedError(f"cannot read the properties of the commit-log record of {len(raw)} bytes: "
                                  f"{exc}") from None
    return decode_properties(text)


def check_record(
    buf: bytes | memoryview | object, pos: int, limit: int, check_crc: bool, tags_code_fn: TagsCodeFn | None = None,
    describe: bool = True,
) -> tuple[int, DispatchRequest | None]:
    """`checkMessageAndReturnSize`: validate the record at `pos` and describe it.

    Returns `(size, request)` for a valid record (`request` is None unless
    `describe`), `(0, None)` for a BLANK end-of-segment record, `(-1, None)` for
    anything else (torn, zeroed, garbage). Never raises on bad data. `limit` is
    the end of readable data. Reads the fields in place; recovery runs this
    once per record, so it decodes topic and properties only when asked to.
    """
    if limit - pos <= 4:
        return -1, None
    try:
        total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)  # type: ignore[arg-type]
        if magic == BLANK_MAGIC:
            return 0, None
        end = pos + total
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or end > limit or total < MIN_RECORD_SIZE:
            return -1, None
        _, _, crc, queue_id, _, queue_offset, commit_log_offset, sys_flag, _ = PREFIX.unpack_from(buf, pos)  # type: ignore[arg-type]
        p = pos + PREFIX.size + (20 if sys_flag & SysFlag.BORNHOST_V6 else 8)
        (store_ts,) = _LONG.unpack_from(buf, p)  # type: ignore[arg-type]
        p += _LONG.size + (20 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 8) + _INT.size + _LONG.size
        (body_len,) = _INT.unpack_from(buf, p)  # type: ignore[arg-type]
        body_start = p + _INT.size
        body_end = body_start + body_len
        if body_len < 0 or body_end > end:
            return -1, None
        if check_crc and zlib.crc32(buf[body_start:body_end]) & 0x7FFFFFFF != crc:  # type: ignore[index]
            return -1, None
        v2 = magic == MAGIC_V2
        if v2:
            (topic_len,) = _USHORT.unpack_from(buf, body_end)  # type: ignore[arg-type]
            topic_pos = body_end + _USHORT.size
        else:
            topic_len = buf[body_end]  # type: ignore[index]
            topic_pos = body_end + 1
        props_pos = topic_pos + topic_len
        if props_pos + PROPERTIES_LENGTH.size > end:
            return -1, None
        (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)  # type: ignore[arg-type]
        if total != record_length(sys_flag, body_len, topic_len, props_len, v2):
            return -1, None
        if props_len > 0 and buf[end - 1] == 0:  # type: ignore[index]
            # Properties are the last bytes written; a record ending in NUL lost its last
            # page (no property string ends in NUL: Java writes a separator there).
            return -1, None
        if not describe:
            return total, None
        topic = bytes(buf[topic_pos:props_pos]).decode("utf-8", "replace")  # type: ignore[index]
        props_start = props_pos + PROPERTIES_LENGTH.size
        props = decode_properties(
            bytes(buf[props_start : props_start + props_len]).decode("utf-8", "replace")) if props_len > 0 else {}  # type: ignore[index]
    except (struct.error, IndexError, ValueError, TypeError):
        return -1, None
    fn = tags_code_fn or default_tags_code
    request = DispatchRequest(
        topic, queue_id, commit_log_offset, total, fn(topic, props, store_ts) if props else 0, store_ts,
        queue_offset, props.get(PROPERTY_KEYS), props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag,
    )
    return total, request


_SEARCH_CHUNK = 1 << 20


def framed_at(buf: bytes | memoryview | object, pos: int, limit: int, position: int) -> bool:
    """True when a whole record frame (size, magic code, every length) starts at `pos` and its
    PHYSICALOFFSET field says `position`, its offset in the log.

    The position check makes a record found by searching damaged bytes trustworthy: a
    random match of the magic code, a sane size and the right 8-byte offset is practically
    impossible. The body CRC is not checked here (`check_record` does).
    """
    if pos < 0 or limit - pos < COMMIT_LOG_OFFSET_POS + COMMIT_LOG_OFFSET.size:
        return False
    try:
        if COMMIT_LOG_OFFSET.unpack_from(buf, pos + COMMIT_LOG_OFFSET_POS)[0] != position:  # type: ignore[arg-type]
            return False
    except struct.error:
        return False
    return check_record(buf, pos, limit, False, None, False)[0] > 0


def find_frame(buf: mmap.mmap | bytes | bytearray, start: int, end: int, limit: int, base: int,
               next_data: Callable[[int], int] | None = None) -> int:
    """The first `pos` in [start, end) where `framed_at(buf, pos, limit, base + pos)`, or -1.

    `buf` holds the log from offset `base` (a segment's map). Reads 1 MiB windows: an
    all-zero window (the never-written rest of a preallocated segment) is skipped with
    one comparison, others are searched for the magic codes; `next_data`
    (`MappedFile.next_data`) skips the holes of a sparse file unread. Cost: one read of
    the data regions of [start, end) (measured: ~0.4 s for a GiB of cached zeros).
    """
    pos = max(start, 0)
    while pos < end:
        if next_data is not None:
            pos = max(pos, next_data(pos))
            if pos >= end:
                return -1
        chunk_end = min(end, pos + _SEARCH_CHUNK)
        # A frame starting in [pos, chunk_end) has its magic code in [pos + 4, chunk_end + 8).
        window = buf[pos : chunk_end + 8]
        if len(window) != len(_ZERO_WINDOW) or window != _ZERO_WINDOW:
            hit = _first_magic(window, 4)
            while 0 <= hit and pos + hit - 4 < chunk_end:
                if framed_at(buf, pos + hit - 4, limit, base + pos + hit - 4):
                    return pos + hit - 4
                hit = _first_magic(window, hit + 1)
        pos = chunk_end
    return -1


_ZERO_WINDOW = bytes(_SEARCH_CHUNK + 8)


def _first_magic(window: bytes | bytearray, start: int) -> int:
    """The first index >= `start` of a record magic code in `window`, or -1."""
    hits = [hit for hit in (window.find(magic, start) for magic in MAGIC_BYTES) if hit >= 0]
    return min(hits) if hits else -1


# -- encoding many records at once ---------------------------------------------------------------------
def pack_headers(sizes: Any, magic: int, crcs: Iterable[int], body_lengths: Any, *, queue_id: int = 0, flag: Any = None,
                 sys_flag: int = 0, born_timestamp: Any = None, born_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT),
                 store_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT)) -> np.ndarray:
    """The headers of `len(sizes)` records in a numpy record array (`HEADER_DTYPE`, or `HEADER_DTYPE_BORN_V6`
    for a 16-byte born address): every field but those the log's place decides (`place_headers`),
    which stay 0. `crcs` are the bodies' `zlib.crc32`s; `flag` and `born_timestamp` an int or one per
    record (None: 0). The batch appends' and `encode_records`' one way to pack headers (measured: one numpy
    pass per field, a third of the cost of `HEADER.pack` per record); a single append packs the
    same fields in `HEADER`'s order with one `pack_into`.
    """
    count = len(sizes)
    headers = np.zeros(count, dtype=HEADER_DTYPE if len(born_host[0]) == 4 else HEADER_DTYPE_BORN_V6)
    headers["total"] = sizes
    headers["magic"] = magic
    headers["body_crc"] = np.fromiter(crcs, dtype=np.int64, count=count) & 0x7FFFFFFF
    if queue_id:
        headers["queue_id"] = queue_id
    if flag is not None:
        headers["flag"] = flag
    if sys_flag:
        headers["sys_flag"] = sys_flag
    if born_timestamp is not None:
        headers["born_timestamp"] = born_timestamp
    headers["born_host"], headers["born_port"] = born_host
    headers["store_host"], headers["store_port"] = store_host
    headers["body_length"] = body_lengths
    return headers


def place_headers(headers: np.ndarray, first_queue_offset: int, commit_log_offsets: Any, store_timestamp: int) -> None:
    """Fill in the fields the log's place decides (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP) of
    `pack_headers`' headers of consecutive records of one queue; called under the put lock."""
    headers["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + len(headers), dtype=np.int64)
    headers["commit_log_offset"] = commit_log_offsets
    headers["store_timestamp"] = store_timestamp


def encode_records(topic: str, bodies: Any, body_offsets: Any, blocks: Sequence[bytes], block_index: Any = None,
                   suffixes: Any = None, *, flags: Any = None, born_timestamp: int) -> tuple[memoryview, Any]:
    """Whole commit-log records for messages of `topic`, before they have a place in the log.

    Message i has body `bodies[body_offsets[i]:body_offsets[i + 1]]` (`body_offsets`: n + 1
    ints from 0), properties `blocks[block_index[i]] + suffixes[i]` (encoded property blocks
    shared by many messages, e.g. `b"WAIT\x01true\x02UNIQ_KEY\x01"`, and an (n, w) uint8
    array of per-message endings such as a new id and its `\x02`; `block_index` None: all
    use `blocks[0]`), flag `flags[i]` (None: 0), IPv4 hosts and sys flag 0. Returns the
    records back to back and their sizes (int64), the bytes `append_batch` writes for the
    same messages except QUEUEID, QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP, left 0
    for `CommitLog.append_encoded_records` to fill in. Needs no store: the Spark writer's
    tasks call it in parallel. Raises `MQClientError` for a topic or property block too long.

    Cost: a CRC per body (and a slice, unless the bodies have one length) and numpy passes
    (`encode_batch`). Measured within `inbox.write_chunk`.
    """
    offsets = np.asarray(body_offsets, dtype=np.int64)
    count = len(offsets) - 1
    body_lengths = np.diff(offsets)
    data = bytes(bodies) if count else b""  # slices of bytes are the cheapest per-body objects (measured)
    body_rows = None
    if count and int(body_lengths.min()) == int(body_lengths.max()):
        length = int(body_lengths[0])
        # Rows of a 2-D array: cheaper than slices for the CRCs, and copied as one column.
        body_rows = np.frombuffer(data, dtype=np.uint8, count=count * length).reshape(count, length)
        body_list: Any = body_rows
    else:
        ends = offsets.tolist()
        body_list = [data[s:e] for s, e in zip(ends[:-1], ends[1:])]
    records, sizes, _ = _encode(topic, body_list, body_lengths, body_rows, blocks, block_index, suffixes, flags,
                                born_timestamp)
    return records.data, sizes


def encode_batch(topic: str, bodies: Sequence[bytes], blocks: Sequence[bytes], block_index: Any = None,
                 suffixes: Any = None, *, flags: Any = None, born_timestamp: int = 0, queue_id: int = 0,
                 store_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`encode_records` for bodies given as a list of `bytes` (a producer's batch), also returning the
    headers: `(records, sizes, headers)`, the records back to back in a writable uint8 array, their
    sizes (int64) and their `HEADER_DTYPE` headers (QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP 0,
    for `place_headers`). QUEUEID and the store host are written as given.

    The commit log's column-wise `append_batch` (`EncodedBatchProperties`) builds its records with it;
    the bytes are those of `encode_records` of the same messages, but for those two fields.
    """
    body_lengths = np.fromiter(map(len, bodies), dtype=np.int64, count=len(bodies))
    return _encode(topic, bodies, body_lengths, None, blocks, block_index, suffixes, flags, born_timestamp,
                   queue_id, store_host)


def _encode(topic: str, body_list: Any, body_lengths: np.ndarray, body_rows: Any, blocks: Sequence[bytes],
            block_index: Any, suffixes: Any, flags: Any, born_timestamp: int, queue_id: int = 0,
            store_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The one encoder of `encode_records` and `encode_batch`: `body_list` (bytes or uint8 rows: what the
    CRCs read), `body_rows` the bodies as one (n, length) array when they have one length (None: made
    from `body_list` when needed). Returns (records, sizes, headers).

    A 2-D copy when all records have one size, else one `bytearray.join` of two pieces a record
    (three when property blocks differ in length).
    """
    count = len(body_lengths)
    prefix, v2 = topic_prefix(topic)
    width = 0 if suffixes is None else int(suffixes.shape[1])
    block_lengths = np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks)) + width
    if len(blocks) and int(block_lengths.max()) > MAX_PROPERTIES_LENGTH:
        raise MQClientError(f"message properties are {int(block_lengths.max())} bytes encoded; the limit is "
                            f"{MAX_PROPERTIES_LENGTH} (RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values "
                            f"into the body")
    index = np.zeros(count, dtype=np.int64) if block_index is None else np.asarray(block_index, dtype=np.int64)
    sizes = body_lengths + block_lengths[index] + (HEADER.size + len(prefix) + PROPERTIES_LENGTH.size)
    if not count:
        return np.zeros(0, dtype=np.uint8), sizes, np.zeros(0, dtype=HEADER_DTYPE)
    # The suffixes follow each block: the length counts them (`record_tail` without its copy of them).
    pack_length = PROPERTIES_LENGTH.pack
    tails = [prefix + pack_length(len(b) + width) + b for b in blocks]
    # Tails of one length (one head, say) are columns of a 2-D array, like the headers and suffixes.
    tail_table = np.frombuffer(b"".join(tails), dtype=np.uint8).reshape(len(tails), -1) \
        if len(set(map(len, tails))) == 1 else None
    length = int(body_lengths[0])
    one_size = tail_table is not None and int(body_lengths.min()) == int(body_lengths.max())
    flag_array = None
    if flags is not None:
        flag_array = np.asarray(flags, dtype=np.int64)
        for value in (int(flag_array.min()), int(flag_array.max())):
            _INT.pack(value)  # out of an int's range: struct.error, as HEADER.pack would raise
    headers = pack_headers(sizes, MAGIC_V2 if v2 else MAGIC_V1, map(zlib.crc32, body_list), body_lengths,
                           queue_id=queue_id, flag=flag_array, born_timestamp=born_timestamp, store_host=store_host)
    header_bytes = headers.view(np.uint8).reshape(count, HEADER.size)
    trailer = (0 if tail_table is None else tail_table.shape[1]) + width
    if one_size:  # every record the same size: a 2-D array, a column copy per part
        if body_rows is None:
            body_rows = np.frombuffer(b"".join(body_list), dtype=np.uint8).reshape(count, length)
        out = np.empty((count, int(sizes[0])), dtype=np.uint8)
        out[:, HEADER.size : HEADER.size + length] = body_rows
        _fill_rows(out, header_bytes, tail_table, index, suffixes)
        return out.reshape(-1), sizes, headers
    # Else bodies of many sizes. `fixed` row i: header_i, then the tail (when of one length) and
    # suffix_i that follow body_i; each trailer and the next header lie together (a row of `fixed`
    # read from a header further on). A bytearray: the commit log fills headers in place.
    fixed = np.empty((count, HEADER.size + trailer), dtype=np.uint8)
    _fill_rows(fixed, header_bytes, tail_table, index, suffixes)
    flat = fixed.reshape(-1)
    step = fixed.shape[1]
    between = flat[HEADER.size : HEADER.size + (count - 1) * step].reshape(count - 1, step)
    if tail_table is not None:
        # Trailers of one length: the bodies joined around placeholders of that piece's width
        # (C-level, no object a record), then every placeholder overwritten at once (measured:
        # a quarter of the cost of a join of (body, row) pieces, whose rows are numpy views).
        joined = bytearray().join((bytes(HEADER.size), bytes(step).join(body_list), bytes(trailer)))
        out = np.frombuffer(joined, dtype=np.uint8)
        out[: HEADER.size] = header_bytes[0]
        ByteRows(out, np.cumsum(sizes[:-1]) - trailer, step, None).set(between)
        out[len(out) - trailer :] = flat[len(flat) - trailer :]
        return out, sizes, headers
    # Tails of many lengths: one join of three pieces a record (body, its shared tail, that row).
    gaps = list(between)
    gaps.append(flat[len(flat) - trailer :])
    pieces: Iterable[Any] = zip(body_list, map(tails.__getitem__, index.tolist()), gaps)
    joined = bytearray().join(itertools.chain((flat[: HEADER.size].data,), itertools.chain.from_iterable(pieces)))
    return np.frombuffer(joined, dtype=np.uint8), sizes, headers


class EncodedBatchProperties(Sequence[EncodedProperties]):
    """The property maps of a producer's batch, given column-wise: what `append_batch` encodes without
    a map per message (`encode_batch`), while it still reads as the sequence of maps it stands for.

    Message i's map is `head_maps[h]` followed by `UNIQ_KEY=ids[i]`, where `h = head_index[i]`
    (`head_index` None: every message has head 0); it encodes to `heads[h] + ids[i] + "\\x02"`,
    each of `heads` being its `head_maps` entry encoded (`encode_properties`, UTF-8) followed by
    `UNIQ_KEY\\x01`. Whoever builds one vouches for that (as for `EncodedProperties`): the
    producer, from the encodings it cached when it validated those maps. `head_maps` have no
    UNIQ_KEY of their own and are not changed afterwards (the producer passes copies).

    Reading an item builds that message's `EncodedProperties` (for any reader of maps: a remote
    broker, a store's general path); the commit log reads the columns instead.

    >>> batch = EncodedBatchProperties([b"WAIT\\x01true\\x02UNIQ_KEY\\x01"], [{"WAIT": "true"}], None, ["01", "02"])
    >>> batch[1], batch[1].encoded, len(batch)
    ({'WAIT': 'true', 'UNIQ_KEY': '02'}, b'WAIT\\x01true\\x02UNIQ_KEY\\x0102\\x02', 2)
    """

    __slots__ = ("heads", "head_maps", "head_index", "ids")

    def __init__(self, heads: Sequence[bytes], head_maps: Sequence[Mapping[str, str]], head_index: Sequence[int] | None,
                 ids: Sequence[str]) -> None:
        self.heads = heads
        self.head_maps = head_maps
        self.head_index = head_index
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> EncodedProperties: ...

    @overload
    def __getitem__(self, i: slice) -> list[EncodedProperties]: ...

    def __getitem__(self, i: int | slice) -> EncodedProperties | list[EncodedProperties]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        uniq = self.ids[i]
        h = 0 if self.head_index is None else self.head_index[i]
        props = EncodedProperties(self.head_maps[h])
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
        props.encoded = self.heads[h] + uniq.encode("utf-8") + _PROPERTY_END
        return props

    def id_suffixes(self) -> np.ndarray | None:
        """Each message's id and the `\\x02` closing it, as an (n, w + 1) uint8 array (`encode_batch`'s
        suffixes; `[:, :-1]` are the ids, for `index_key_hashes`); None unless the ids are ASCII and of
        one length (a producer's always are)."""
        ids = self.ids
        if len(set(map(len, ids))) != 1:
            return None
        text = "\x02".join(ids) + "\x02"
        if not text.isascii():
            return None
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8).reshape(len(ids), -1)


_PROPERTY_END = PROPERTY_SEPARATOR.encode()


def _fill_rows(rows: np.ndarray, header_bytes: np.ndarray, tail_table: np.ndarray | None, index: np.ndarray,
               suffixes: np.ndarray | None) -> None:
    """Write each record's header at the start of its row of `rows` and, at the row's end, its tail
    (from `tail_table`, when tails have one length: row `index[i]`) and then its suffix."""
    rows[:, : HEADER.size] = header_bytes
    end = rows.shape[1]
    width = 0 if suffixes is None else suffixes.shape[1]
    if tail_table is not None:
        start = end - width - tail_table.shape[1]
        rows[:, start : end - width] = tail_table[0] if len(tail_table) == 1 else tail_table[index]
    if width:
        rows[:, end - width :] = suffixes


def check_encoded_records(buf: Any, sizes: Any, starts: Any, topic: str) -> tuple[np.ndarray, ByteRows, bool]:
    """The headers of the records `encode_records` built for `topic`, after checking every record's
    structure: `(headers, header_rows, v2)`, the headers a copy (`HEADER_DTYPE`) and `header_rows`
    (`ByteRows`) where they lie in `buf` (to write back once placed: `header_rows.set(...)`).

    `buf` is the records back to back (uint8 array), `sizes` their sizes and `starts` where each
    begins. Size, magic, host flags, body length, topic and property length must agree with each
    record: `MQClientError` (and `topic_prefix`'s for a topic too long) otherwise. Costs numpy
    passes over the headers and the topic bytes, no Python per record.
    """
    prefix, v2 = topic_prefix(topic)
    step = int(sizes[0]) if int(sizes.min()) == int(sizes.max()) else None
    header_rows = ByteRows(buf, starts, HEADER.size, step)
    headers = np.ascontiguousarray(header_rows.get()).view(HEADER_DTYPE)[:, 0]
    body_lengths = headers["body_length"].astype(np.int64)
    tails = starts + HEADER.size + body_lengths
    if ((headers["total"] != sizes).any() or (headers["magic"] != (MAGIC_V2 if v2 else MAGIC_V1)).any()
            or (headers["sys_flag"] != 0).any() or (body_lengths < 0).any()
            or (tails + len(prefix) + PROPERTIES_LENGTH.size > starts + sizes).any()):
        raise MQClientError(f"encoded records for {topic!r} are damaged (a size, magic code, host flag or body "
                            f"length disagrees with the record); nothing was stored")
    same_body = int(body_lengths.min()) == int(body_lengths.max())
    topic_rows = ByteRows(buf, tails, len(prefix) + PROPERTIES_LENGTH.size, step if same_body else None).get()
    # Read unsigned: a negative (damaged) length reads above 32767 and fails the sum below.
    props_lengths = _ints(topic_rows[:, len(prefix):], ">u2")
    if ((topic_rows[:, : len(prefix)] != np.frombuffer(prefix, dtype=np.uint8)).any()
            or (tails + len(prefix) + PROPERTIES_LENGTH.size + props_lengths != starts + sizes).any()):
        raise MQClientError(f"encoded records are not all of topic {topic!r} or their property lengths "
                            f"disagree with their sizes; nothing was stored")
    return headers, header_rows, v2


class ByteRows:
    """`width` bytes at each of `positions` in the uint8 array `buf`, to read (`get`) or overwrite (`set`):
    the headers of encoded records that `check_encoded_records` checked, which the commit log
    fills in once it has placed them.

    A strided view when the positions are `step` apart (records of one size: no index
    array at all), else the positions index a view with one `width`-byte item at every
    byte of `buf` (as `headers_at`; measured: an (n, width) index of byte positions cost
    a tenth of a send_batch of 1000 records of many sizes). Built outside the put lock, so
    the writes under it are single numpy assignments.

    >>> buf = np.arange(12, dtype=np.uint8)
    >>> rows = ByteRows(buf, np.array([0, 4, 8]), 2, 4)
    >>> rows.get().tolist()
    [[0, 1], [4, 5], [8, 9]]
    >>> rows.set(np.array([7, 7], dtype=np.uint8)); buf.tolist()[:6]
    [7, 7, 2, 3, 7, 7]
    >>> rows = ByteRows(buf, np.array([1, 9]), 3, None)
    >>> rows.set(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint8)); rows.get().tolist(), buf.tolist()
    ([[1, 2, 3], [4, 5, 6]], [7, 1, 2, 3, 7, 7, 6, 7, 7, 4, 5, 6])
    """

    __slots__ = ("buf", "view", "index", "items")

    view: Any  # the strided view, or None
    index: Any  # the positions, or None
    items: Any  # the view of `width`-byte items at every byte, or None

    def __init__(self, buf: Any, positions: Any, width: int, step: int | None) -> None:
        self.buf = buf
        if step is not None or len(positions) == 1:
            first = int(positions[0])
            # The ndarray constructor, not `as_strided` (Python-level, about a fifth of a small
            # batch's bytecodes); it also refuses a view past the buffer's end.
            self.view = np.ndarray((len(positions), width), dtype=np.uint8, buffer=buf, offset=first,
                                   strides=(step or width, 1))
            self.index = self.items = None
        else:
            self.view = None
            self.index = np.asarray(positions, dtype=np.int64)
            self.items = np.ndarray((len(buf) - width + 1,), dtype=f"V{width}", buffer=buf, strides=(1,))

    def get(self) -> Any:
        """The bytes as an (n, width) uint8 array."""
        if self.index is None:
            return self.view
        return self.items[self.index].view(np.uint8).reshape(len(self.index), -1)

    def set(self, values: Any) -> None:
        """Overwrite them with `values` ((n, width) uint8, or one row to broadcast)."""
        if self.index is None:
            self.view[...] = values
        else:
            self.items[self.index] = np.ascontiguousarray(values, dtype=np.uint8).view(self.items.dtype).reshape(-1)


def _ints(rows: Any, dtype: str) -> Any:
    """The (n, width) byte rows as n big-endian integers of `dtype` (width = its size)."""
    return np.ascontiguousarray(rows).view(dtype)[:, 0].astype(np.int64)


# -- reading many records at once --------------------------------------------------------------------
# Readers that cut fields out of records without decoding them (the pull path's bodies, recovery's
# end of log, the Spark reader's numpy batches) take the positions from here, so that no reader
# knows an offset of its own. `mqlite.propertybatch` splits the properties found this way.

#: BODY length as it lies at `body_length_pos(sys_flag)` (a reader cutting bodies out of records).
BODY_LENGTH = struct.Struct(">i")
#: The bytes of TOPIC length: V1 one, V2 one more (a short).
_TOPIC_LENGTH_V1 = 1
assert BODY_LENGTH.size == HEADER_DTYPE["body_length"].itemsize and _USHORT.size == _TOPIC_LENGTH_V1 + 1


def unwritten_at(buf: Any, pos: int) -> bool:
    """Whether the bytes at `pos` are zeros where a record would start (TOTALSIZE and MAGICCODE): the
    never-written rest of a segment, the log's end, rather than damage."""
    return not any(buf[pos : pos + BLANK.size])


def headers_at(buf: Any, size: int, positions: np.ndarray) -> np.ndarray:
    """Copies of the `HEADER_DTYPE` headers of the records at `positions` of `buf` (`size` bytes, any
    buffer), in one fancy-indexing pass over a view with one 88-byte item per byte position.
    Every position must leave a whole header before `size` (a caller checks its units first).
    """
    items = np.ndarray((size - HEADER.size + 1,), dtype=f"V{HEADER.size}", buffer=buf, strides=(1,))
    return items[positions].view(HEADER_DTYPE)


def properties_length_pos(body_end: Any, topic_length: int, magic: Any) -> Any:
    """Where PROPERTIES length lies in records whose body ends at `body_end`, with a topic of
    `topic_length` bytes and magic code `magic` (numbers or numpy arrays alike)."""
    return body_end + (_TOPIC_LENGTH_V1 + topic_length) + (magic == MAGIC_V2)  # V2: one byte more


def properties_lengths(u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """PROPERTIES length at each of `pos` in `u8` (the bytes as uint8), read unsigned: a negative
    (damaged) length reads above 32767, so it fails any check that the record's lengths add up."""
    return (u8[pos].astype(np.int64) << 8) | u8[pos + 1]
