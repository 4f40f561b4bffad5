"""The commit log: every message of every topic, appended in one sequence of segment files.

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
    |        | 2     | PROPERTIES length (signed short), then UTF-8       |

A record fits in a segment only if 8 bytes remain after it; otherwise the
segment is closed with an 8-byte BLANK record `[int remaining][int 0xCBD43194]`
and the record goes to the next segment. Every segment therefore ends in a blank.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import socket
import struct
from time import time_ns as _time_ns
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from .clock import Clock, SystemClock
from .compression import decompress
from .config import StoreConfig
from .errors import MQClientError, StoreCorruptedError
from .consumequeue import ConsumeQueue
from .mappedfile import MappedFile, MappedFileQueue
from .message import (
    PROPERTY_KEYS,
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
    "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "HEADER", "BLANK", "END_FILE_MIN_BLANK_LENGTH",
    "CommitLog", "DispatchRequest", "BatchDispatch", "PutResult", "PutMessageStatus", "StoredMessage",
    "record_length", "check_record", "decode_message", "TagsCodeFn", "default_tags_code", "stored_body",
    "stored_record", "encode_records", "topic_prefix", "framed_at", "find_frame",
]

log = logging.getLogger("mqlite")

MAGIC_V1 = -626843481  # 0xDAA320A7: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-segment filler

#: The fixed part of a record with IPv4 hosts: TOTALSIZE .. BODY length (17 fields).
HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
#: The fields before the born host, common to every host kind.
PREFIX = struct.Struct(">iiiiiqqiq")
BLANK = struct.Struct(">ii")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")
_TAIL_V4 = struct.Struct(">q4siiqi")  # store ts, store host, store port, reconsume, prepared, body len
END_FILE_MIN_BLANK_LENGTH = BLANK.size
_V6_EXTRA = 16 - 4  # an IPv6 address is 16 bytes where IPv4 takes 4
_MIN_RECORD = HEADER.size + 1 + 2  # empty body, empty topic, empty properties
MAX_PROPERTIES_LENGTH = 32767  # a signed short
MAX_TOPIC_BYTES = 255  # HookUtils: MAX_TOPIC_LENGTH
_V1_TOPIC_BYTES = 127  # V1's topic length is a signed byte: longer topics need V2's short
_BODY_LEN_POS = HEADER.size - _INT.size  # 84
_SYSFLAG_POS = PREFIX.size - 12  # 36: SYSFLAG sits before the born timestamp (8) and after 4 bytes
assert HEADER.size == 88 and PREFIX.size == 48 and BLANK.size == 8 and _BODY_LEN_POS == 84 and _SYSFLAG_POS == 36

STORE_HOST = ("127.0.0.1", 10911)

TagsCodeFn = Callable[[str, Mapping[str, str], int], int]


def default_tags_code(topic: str, properties: Mapping[str, str], store_timestamp: int) -> int:
    """The Java hash of the TAGS property (0 without tags)."""
    return tags_code(properties.get("TAGS"))


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, v2: bool = False) -> int:
    """`calMsgLength`: the total size of a record (91 + body + topic + props for IPv4/V1)."""
    v6_extra = (_V6_EXTRA if sys_flag & SysFlag.BORNHOST_V6 else 0) + (
        _V6_EXTRA if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 0)
    topic_len_size = _USHORT.size if v2 else 1
    return HEADER.size + v6_extra + body_len + topic_len_size + topic_len + _SHORT.size + props_len


class PutMessageStatus(Enum):
    """Outcome of a stored put (faults raise exceptions instead)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class PutResult(NamedTuple):
    """Where a put (or a batch) landed.

    For a batch, `commit_log_offset`/`queue_offset` are the first record's and
    `commit_log_offsets` lists every record's offset.
    """

    commit_log_offset: int
    wrote_bytes: int
    queue_offset: int
    store_timestamp: int
    msg_num: int = 1
    commit_log_offsets: list[int] | None = None
    status: PutMessageStatus = PutMessageStatus.PUT_OK
    store_host: tuple[bytes, int] = (socket.inet_aton(STORE_HOST[0]), STORE_HOST[1])
    """The records' store host (IPv4 bytes, port): part of their offset message ids."""

    @property
    def offset_msg_id(self) -> str:
        """The offset id(s) of the stored record(s), comma-joined for a batch."""
        offsets = self.commit_log_offsets or [self.commit_log_offset]
        ip, port = self.store_host
        return ",".join(create_offset_msg_id(ip, port, o) for o in offsets)


_PUT_OK = PutMessageStatus.PUT_OK


class DispatchRequest(NamedTuple):
    """What the reput service needs to index one record (built at append or by a scan)."""

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


class BatchDispatch(NamedTuple):
    """One dispatch entry for a whole batch of one queue (records are contiguous in the log).

    Its index keys are either strings (`keys`, `uniq_keys`: each record's KEYS and
    UNIQ_KEY) or already hashed (`key_hashes` as `IndexFile` stores them, with each
    key's record offset in `key_offsets`, in log order: `append_encoded_records`).
    """

    topic: str
    queue_id: int
    first_queue_offset: int
    first_commit_log_offset: int
    sizes: Sequence[int] | np.ndarray
    tags_codes: Sequence[int] | np.ndarray | None  # None: every record has tags code 0
    store_timestamp: int
    keys: Sequence[str | None] | None
    uniq_keys: Sequence[str | None] | None
    key_hashes: np.ndarray | None = None
    key_offsets: np.ndarray | None = None


def _host_bytes(host: str) -> tuple[bytes, int]:
    ip, _, port = host.rpartition(":")
    ip = ip.strip("[]")
    try:
        return socket.inet_pton(socket.AF_INET, ip), int(port)
    except OSError:
        return socket.inet_pton(socket.AF_INET6, ip), int(port)


def _host_text(raw: bytes, port: int) -> str:
    if len(raw) == 4:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, raw)}]:{port}"


_STORE_IP = socket.inet_aton(STORE_HOST[0])
_STORE_PORT = STORE_HOST[1]


# -- decoding -----------------------------------------------------------------------------
_new = object.__new__
_new_tuple = tuple.__new__


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
            body = self._body = _body_of(self._raw)
        return body

    @body.setter
    def body(self, value: bytes) -> None:
        self._body = value

    def __getattr__(self, name: str) -> object:
        if name in _LAZY_FIELDS:
            _decode_into(self, self._raw)
            return object.__getattribute__(self, name)
        raise AttributeError(name)


_HOST_V6_FLAGS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOSTADDRESS_V6
# SysFlag and HEADER values as module constants: the append path reads them for every record.
_BORNHOST_V6 = SysFlag.BORNHOST_V6
_TRANSACTION_MASK = SysFlag.TRANSACTION_MASK
_PREPARED = SysFlag.TRANSACTION_PREPARED_TYPE
_ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE
_HEADER_SIZE = HEADER.size
_DICT_TYPES = frozenset({dict, EncodedProperties})
#: HEADER as a numpy record (batch appends pack many headers at once); same fields, same bytes.
_HEADER_FIELDS = [
    ("total", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
    ("born_host", "S4"), ("born_port", ">i4"), ("store_timestamp", ">i8"), ("store_host", "S4"),
    ("store_port", ">i4"), ("reconsume_times", ">i4"), ("prepared_offset", ">i8"), ("body_length", ">i4"),
]
_HEADER_DTYPE = np.dtype(_HEADER_FIELDS)
assert _HEADER_DTYPE.itemsize == HEADER.size
#: The header of a record whose born host is IPv6 (`SysFlag.BORNHOST_V6`: 16 address bytes, not 4).
_HEADER_DTYPE_BORN_V6 = np.dtype([(name, "S16" if name == "born_host" else kind) for name, kind in _HEADER_FIELDS])
assert _HEADER_DTYPE_BORN_V6.itemsize == HEADER.size + _V6_EXTRA
_LAZY_FIELDS = frozenset(MessageExt.__slots__) | {"topic", "flag", "properties", "transaction_id"}


def _body_offset(raw: bytes, sys_flag: int) -> int:
    shift = (12 if sys_flag & SysFlag.BORNHOST_V6 else 0) + (12 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 0)
    return _BODY_LEN_POS + shift


def _body_of(raw: bytes) -> bytes:
    (sys_flag,) = _INT.unpack_from(raw, _SYSFLAG_POS)
    pos = _body_offset(raw, sys_flag) if sys_flag & _HOST_V6_FLAGS else _BODY_LEN_POS
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
    pos = _body_offset(raw, sys_flag)
    (length,) = _INT.unpack_from(raw, pos)
    return bytes(raw[pos + _INT.size : pos + _INT.size + length]), sys_flag


def _decode_into(msg: MessageExt, raw: bytes) -> None:
    try:
        (_, magic, crc, qid, flag, qoff, phys, sys_flag, born_ts) = PREFIX.unpack_from(raw, 0)
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
        (props_len,) = _SHORT.unpack_from(raw, pos)
        props = raw[pos + 2 : pos + 2 + max(props_len, 0)].decode("utf-8", "replace")
    except (struct.error, IndexError, ValueError) as exc:
        raise StoreCorruptedError(f"cannot decode the commit-log record of {len(raw)} bytes: {exc}") from None
    msg.topic = topic
    msg.flag = flag
    msg.properties = decode_properties(props)
    msg.transaction_id = None
    msg.queue_id = qid
    msg.queue_offset = qoff
    msg.commit_log_offset = phys
    msg.store_size = len(raw)
    msg.body_crc = crc
    msg.sys_flag = sys_flag
    msg.born_timestamp = born_ts
    msg.store_timestamp = store_ts
    msg.born_host = _host_text(born_ip, born_port)
    msg.store_host = _host_text(store_ip, store_port)
    msg.reconsume_times = reconsume
    msg.prepared_transaction_offset = prepared
    msg.offset_msg_id = create_offset_msg_id(store_ip, store_port, phys)
    body = raw[body_end - body_len : body_end]
    msg.body = decompress(body, sys_flag) if sys_flag & SysFlag.COMPRESSED else body


def decode_message(raw: bytes, broker_name: str) -> StoredMessage:
    """A fully decoded message from the bytes of one record."""
    msg = StoredMessage(raw, broker_name)
    _decode_into(msg, raw)
    return msg


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
        total, magic = BLANK.unpack_from(buf, pos)  # type: ignore[arg-type]
        if magic == BLANK_MAGIC:
            return 0, None
        end = pos + total
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or end > limit or total < _MIN_RECORD:
            return -1, None
        _, _, crc, queue_id, _, queue_offset, phys, sys_flag, _ = PREFIX.unpack_from(buf, pos)  # type: ignore[arg-type]
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
        if props_pos + _SHORT.size > end:
            return -1, None
        (props_len,) = _SHORT.unpack_from(buf, props_pos)  # type: ignore[arg-type]
        if total != record_length(sys_flag, body_len, topic_len, props_len, v2):
            return -1, None
        if props_len > 0 and buf[end - 1] == 0:  # type: ignore[index]
            # Properties are the last bytes written; a record ending in NUL lost its last
            # page (no property string ends in NUL: Java writes a separator there).
            return -1, None
        if not describe:
            return total, None
        topic = bytes(buf[topic_pos:props_pos]).decode("utf-8", "replace")  # type: ignore[index]
        props_start = props_pos + _SHORT.size
        props = decode_properties(
            bytes(buf[props_start : props_start + props_len]).decode("utf-8", "replace")) if props_len > 0 else {}  # type: ignore[index]
    except (struct.error, IndexError, ValueError, TypeError):
        return -1, None
    fn = tags_code_fn or default_tags_code
    request = DispatchRequest(
        topic, queue_id, phys, total, fn(topic, props, store_ts) if props else 0, store_ts, queue_offset,
        props.get(PROPERTY_KEYS), props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag,
    )
    return total, request


#: PHYSICALOFFSET: where a record says it lies in the log (PREFIX's 7th field, byte 28).
_PHYS_POS = 28
_PHYS = struct.Struct(">q")
_MAGIC_BYTES = (struct.pack(">i", MAGIC_V1), struct.pack(">i", MAGIC_V2))
_SEARCH_CHUNK = 1 << 20


def framed_at(buf: bytes | memoryview | object, pos: int, limit: int, position: int) -> bool:
    """True when a whole record frame (size, magic code, every length) starts at `pos` and its
    PHYSICALOFFSET field says `position`, its offset in the log.

    The position check makes a record found by searching damaged bytes trustworthy: a
    random match of the magic code, a sane size and the right 8-byte offset is practically
    impossible. The body CRC is not checked here (`check_record` does).
    """
    if pos < 0 or limit - pos < _PHYS_POS + _PHYS.size:
        return False
    try:
        if _PHYS.unpack_from(buf, pos + _PHYS_POS)[0] != position:  # type: ignore[arg-type]
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
    hits = [hit for hit in (window.find(magic, start) for magic in _MAGIC_BYTES) if hit >= 0]
    return min(hits) if hits else -1


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

    Cost: a CRC per body (and a slice, unless the bodies have one length) and numpy passes:
    a 2-D copy when all records have one size, else one `bytes.join` of two pieces a record
    (three when property blocks differ in length). Measured within `inbox.write_chunk`.
    """
    offsets = np.asarray(body_offsets, dtype=np.int64)
    count = len(offsets) - 1
    prefix, v2 = topic_prefix(topic)
    width = 0 if suffixes is None else int(suffixes.shape[1])
    block_lengths = np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks)) + width
    if len(blocks) and int(block_lengths.max()) > MAX_PROPERTIES_LENGTH:
        raise MQClientError(f"message properties are {int(block_lengths.max())} bytes encoded; the limit is "
                            f"{MAX_PROPERTIES_LENGTH} (RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values "
                            f"into the body")
    index = np.zeros(count, dtype=np.int64) if block_index is None else np.asarray(block_index, dtype=np.int64)
    body_lengths = np.diff(offsets)
    sizes = body_lengths + block_lengths[index] + (HEADER.size + len(prefix) + _SHORT.size)
    if not count:
        return memoryview(b""), sizes
    data = bytes(bodies)  # slices of bytes are the cheapest per-body objects (measured against memoryviews)
    tails = [prefix + _USHORT.pack(len(b) + width) + b for b in blocks]
    # Tails of one length (one head, say) are columns of a 2-D array, like the headers and suffixes.
    tail_table = np.frombuffer(b"".join(tails), dtype=np.uint8).reshape(len(tails), -1) \
        if len(set(map(len, tails))) == 1 else None
    length = int(body_lengths[0])
    one_size = tail_table is not None and int(body_lengths.min()) == int(body_lengths.max())
    if one_size:
        body_rows = np.frombuffer(data, dtype=np.uint8, count=count * length).reshape(count, length)
        body_list: Any = body_rows  # rows of a 2-D array: cheaper than slices for the CRCs
    else:
        ends = offsets.tolist()
        body_list = [data[s:e] for s, e in zip(ends[:-1], ends[1:])]
    headers = np.zeros(count, dtype=_HEADER_DTYPE)
    headers["total"] = sizes
    headers["magic"] = MAGIC_V2 if v2 else MAGIC_V1
    headers["body_crc"] = np.fromiter(map(zlib.crc32, body_list), dtype=np.int64, count=count) & 0x7FFFFFFF
    if flags is not None:
        flag_array = np.asarray(flags, dtype=np.int64)
        for value in (int(flag_array.min()), int(flag_array.max())):
            _INT.pack(value)  # out of an int's range: struct.error, as HEADER.pack would raise
        headers["flag"] = flag_array
    headers["born_timestamp"] = born_timestamp
    headers["born_host"] = headers["store_host"] = _STORE_IP
    headers["born_port"] = headers["store_port"] = _STORE_PORT
    headers["body_length"] = body_lengths
    # `fixed` row i: header_i, then the tail (when of one length) and suffix_i that follow body_i.
    trailer = (0 if tail_table is None else tail_table.shape[1]) + width
    fixed = np.empty((count, HEADER.size + trailer), dtype=np.uint8)
    fixed[:, : HEADER.size] = headers.view(np.uint8).reshape(count, HEADER.size)
    if tail_table is not None:
        fixed[:, HEADER.size : fixed.shape[1] - width] = tail_table[0] if len(tails) == 1 else tail_table[index]
    if width:
        fixed[:, fixed.shape[1] - width :] = suffixes
    if one_size:  # every record the same size: a 2-D array, three column copies
        out = np.empty((count, int(sizes[0])), dtype=np.uint8)
        out[:, : HEADER.size] = fixed[:, : HEADER.size]
        out[:, HEADER.size : HEADER.size + length] = body_rows
        out[:, HEADER.size + length :] = fixed[:, HEADER.size :]
        return out.reshape(-1).data, sizes
    # Else one `bytes.join`: each trailer and the next header are one piece (a row of `fixed`
    # read from a header further on), so a record takes two pieces (body, that row), or
    # three when tails differ in length (body, its shared tail, that row).
    flat = fixed.reshape(-1)
    step = fixed.shape[1]
    gaps = list(flat[HEADER.size : HEADER.size + (count - 1) * step].reshape(count - 1, step))
    gaps.append(flat[len(flat) - trailer :])
    if tail_table is not None:
        pieces: Iterable[Any] = zip(body_list, gaps)
    else:
        pieces = zip(body_list, map(tails.__getitem__, index.tolist()), gaps)
    joined = b"".join(itertools.chain((flat[: HEADER.size].data,), itertools.chain.from_iterable(pieces)))
    return memoryview(joined), sizes


class _Rows:
    """`width` bytes at each of `positions` in the uint8 array `buf`, to read or overwrite.

    A strided view when the positions are `step` apart (records of one size: no index
    array at all), else an (n, width) fancy index. Built outside the put lock, so the
    writes under it are single numpy assignments.
    """

    __slots__ = ("buf", "view", "index")

    view: Any  # the strided view, or None
    index: Any  # the fancy index, or None

    def __init__(self, buf: Any, positions: Any, width: int, step: int | None) -> None:
        self.buf = buf
        if step is not None or len(positions) == 1:
            first = int(positions[0])
            self.view = np.lib.stride_tricks.as_strided(buf[first:], shape=(len(positions), width),
                                                        strides=(step or width, 1))
            self.index = None
        else:
            self.view = None
            self.index = positions[:, None] + np.arange(width)

    def get(self) -> Any:
        """The bytes as an (n, width) uint8 array."""
        return self.view if self.index is None else self.buf[self.index]

    def set(self, values: Any) -> None:
        """Overwrite them with `values` ((n, width) uint8, or one row to broadcast)."""
        if self.index is None:
            self.view[...] = values
        else:
            self.buf[self.index] = values


def _ints(rows: Any, dtype: str) -> Any:
    """The (n, width) byte rows as n big-endian integers of `dtype` (width = its size)."""
    return np.ascontiguousarray(rows).view(dtype)[:, 0].astype(np.int64)


# -- the log -------------------------------------------------------------------------------
class CommitLog:
    """Appends records under one lock and reads them back by offset.

    Queue offsets are assigned at append, per (topic, queue id), except for
    prepared and rollback transaction records, which never enter a consume
    queue. Once the store has recovered it hands over its queue table
    (`unit_queues`): from then on each record's consume-queue unit is written
    under the same lock, and only records with keys leave a `DispatchRequest`
    (or `BatchDispatch`) in `dispatch_queue` for the reput service's index
    work (none when `message_index_enable` is off), so nothing just written is parsed again.
    """

    def __init__(self, directory: str, config: StoreConfig, clock: Clock, *, read_only: bool = False,
                 tags_code_fn: TagsCodeFn | None = None) -> None:
        self.config = config
        self.clock = clock
        self.mapped_files = MappedFileQueue(directory, config.commitlog_file_size, read_only=read_only)
        self.put_lock = threading.Lock()
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.dispatch_queue: deque[DispatchRequest | BatchDispatch] = deque()
        self.tags_code_fn: TagsCodeFn = tags_code_fn or default_tags_code
        self.last_store_timestamp = 0
        self.appended_count = 0  # dispatch entries appended by this process; reput counts the ones it did
        #: {offset: size} of records recovery set aside (body CRC wrong): reads treat them as removed.
        self.set_aside: dict[int, int] = {}
        #: {start: end} of damaged ranges recovery stepped over; walks of the log step over them too.
        self.damaged: dict[int, int] = {}
        # Set by the store once recovered: consume-queue units are then written under
        # the put lock (into `unit_queues`, the store's queue table), and only index
        # work goes through `dispatch_queue`.
        self.unit_queues: Mapping[tuple[str, int], ConsumeQueue] | None = None
        self.create_unit_queue: Callable[[str, int], ConsumeQueue] | None = None
        self._topic_bytes: dict[str, bytes] = {}
        self._empty_tails: dict[str, bytes] = {}
        self._v2_topics: set[str] = set()  # topics written with MAGIC_V2 (filled by _topic_prefix)
        self._born_default = (_STORE_IP, _STORE_PORT)  # producer and broker share a process: same host
        #: The store host written into new records (`set_store_host`; RocketMQ's brokerIP1:listenPort).
        self.store_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT)
        self._max_body = config.max_message_size
        # Once units are written with the append, dispatch entries only feed the key index:
        # with the index off none are queued (nothing would read them).
        self._index_keys = config.message_index_enable
        self._system_clock = isinstance(clock, SystemClock)  # lets the put path read time_ns directly
        self._active: MappedFile | None = None  # the segment appends go to (set by _room_for)

    # -- offsets -------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """First readable offset (`-1` when empty)."""
        return self.mapped_files.min_offset

    @property
    def max_offset(self) -> int:
        """Offset after the last written byte."""
        return self.mapped_files.max_offset

    # -- append ----------------------------------------------------------------------
    def _topic_prefix(self, topic: str) -> bytes:
        """Length-prefixed topic bytes, cached (topics repeat on every put)."""
        cached = self._topic_bytes.get(topic)
        if cached is not None:
            return cached
        prefix, v2 = topic_prefix(topic)
        if v2:
            self._v2_topics.add(topic)
        if len(self._topic_bytes) < 100_000:
            self._topic_bytes[topic] = prefix
        return prefix

    def _encode_tail(self, topic: str, properties: Mapping[str, str] | None) -> tuple[bytes, bytes]:
        prefix = self._topic_prefix(topic)
        props = encode_properties(properties).encode("utf-8") if properties else b""
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise MQClientError(
                f"message properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH} "
                f"(RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values into the body"
            )
        return prefix, props

    def _check_body(self, body: bytes) -> None:
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise MQClientError(f"message body must be bytes, got {type(body).__name__}")
        if len(body) > self.config.max_message_size:
            raise MQClientError(
                f"message body is {len(body)} bytes; max_message_size is {self.config.max_message_size} "
                f"(raise it with mqlite.open(..., max_message_size=...))"
            )

    def append(self, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None = None,
               flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None, born_host: str | None = None,
               reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> PutResult:
        """Append one record; returns where it landed. Bad input raises `MQClientError` first.

        The hot path of every send: measured with bench/, so it avoids calls
        and keyword arguments (one `pack_into`, two slice copies, one lock).
        """
        if type(body) is not bytes or len(body) > self._max_body:
            self._check_body(body)
        if properties:
            if type(properties) is EncodedProperties and len(properties.encoded) <= MAX_PROPERTIES_LENGTH:
                props = properties.encoded  # a producer's send: encoded already
                tail = (self._topic_bytes.get(topic) or self._topic_prefix(topic)) + _USHORT.pack(len(props)) + props
            else:
                prefix, props = self._encode_tail(topic, properties)
                tail = prefix + _USHORT.pack(len(props)) + props
            keys = properties.get(PROPERTY_KEYS)
            uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        else:
            tail = self._empty_tails.get(topic) or self._empty_tail(topic)
            keys = uniq = None
        v6 = 0  # extra header bytes of an IPv6 born host
        born_ip, born_port = self._born_default
        in_queue = True
        if sys_flag or born_host:
            sys_flag &= ~_HOST_V6_FLAGS  # the addresses decide these bits, not the caller
            if born_host:
                born_ip, born_port = _host_bytes(born_host)
                if len(born_ip) == 16:
                    sys_flag |= _BORNHOST_V6
                    v6 = _V6_EXTRA
            trans = sys_flag & _TRANSACTION_MASK
            in_queue = trans != _PREPARED and trans != _ROLLBACK
        total = _HEADER_SIZE + len(body) + len(tail) + v6
        crc = zlib.crc32(body) & 0x7FFFFFFF
        key = (topic, queue_id)
        with self.put_lock:
            now = _time_ns() // 1_000_000 if self._system_clock else self.clock.now_ms()
            if now < self.last_store_timestamp:
                now = self.last_store_timestamp  # store times never decrease along the log
            self.last_store_timestamp = now
            # Space first, for the unit and then the record: a full disk raises DiskFullError
            # here, before anything is written or any offset moves.
            queues = self.unit_queues
            if in_queue:
                qoff = self.topic_queue_table.get(key, 0)
                if queues is not None:
                    cq = queues.get(key) or self.create_unit_queue(topic, queue_id)  # type: ignore[misc]
                    if qoff >= cq.room:
                        cq.make_room(qoff, 1)
            else:
                qoff = 0
            mf = self._active
            # `reserved` <= the file size: the record and a later BLANK fit, on allocated blocks.
            if mf is None or mf.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > mf.reserved:
                mf = self._room_for(total)
            pos = mf.wrote_position
            phys = mf.file_from_offset + pos
            mm = mf.mm
            born = now if born_timestamp is None else born_timestamp
            # Body and tail first, header last: a writer killed mid-copy leaves no
            # TOTALSIZE/magic, so recovery never takes a half-written record for whole.
            body_pos = pos + _HEADER_SIZE + v6
            end = body_pos + len(body)
            mm[body_pos:end] = body
            mm[end : end + len(tail)] = tail
            if not v6:
                HEADER.pack_into(mm, pos, total, MAGIC_V2 if topic in self._v2_topics else MAGIC_V1, crc,
                                 queue_id, flag, qoff, phys, sys_flag, born, born_ip, born_port,
                                 now, *self.store_host, reconsume_times, prepared_transaction_offset,
                                 len(body))
            else:
                self._pack_v6_header(mm, pos, total, topic in self._v2_topics, crc, queue_id, flag, qoff, phys,
                                     sys_flag, born, born_ip, born_port, now, reconsume_times,
                                     prepared_transaction_offset, len(body))
            mf.wrote_position = pos + total
            code = self.tags_code_fn(topic, properties, now) if properties else 0
            if in_queue:
                self.topic_queue_table[key] = qoff + 1
                if queues is not None and not cq.put(phys, total, code, qoff):
                    log.error("consume queue %s/%d out of step at queue offset %d", topic, queue_id, qoff)
            if queues is None or (self._index_keys and (keys is not None or uniq is not None)):
                self.appended_count += 1
                # A plain tuple in DispatchRequest's field order: cheaper than building the NamedTuple.
                self.dispatch_queue.append((topic, queue_id, phys, total, code, now, qoff, keys, uniq,
                                            sys_flag))  # type: ignore[arg-type]
        # tuple.__new__ skips the NamedTuple's Python-level __new__ (measurable per put).
        return _new_tuple(PutResult, (phys, total, qoff, now, 1, None, _PUT_OK, self.store_host))

    def _empty_tail(self, topic: str) -> bytes:
        """Topic bytes plus an empty property block, cached per topic."""
        tail = self._topic_prefix(topic) + b"\0\0"
        if len(self._empty_tails) < 100_000:
            self._empty_tails[topic] = tail
        return tail

    def append_batch(self, topic: str, queue_id: int, bodies: Sequence[bytes],
                     properties: Sequence[Mapping[str, str] | None] | None = None, *, flag: int = 0,
                     born_timestamp: int | None = None, flags: Sequence[int] | None = None,
                     born_host: str | None = None) -> PutResult:
        """Append records of one queue together, under one lock, in one segment.

        `born_host` (`ip:port`) is the sender's address (default: the store's), as in `append`.

        As RocketMQ's batch: if the batch does not fit in what is left of the
        segment, the whole batch moves to the next one. The reput service gets
        one `BatchDispatch` for all of it.
        """
        count = len(bodies)
        if not count:
            raise MQClientError("a batch needs at least one message")
        if properties is not None and len(properties) != count:
            raise MQClientError(f"{count} bodies but {len(properties)} property maps")
        if flags is not None and len(flags) != count:
            raise MQClientError(f"{count} bodies but {len(flags)} flags")
        max_body = self._max_body
        if set(map(type, bodies)) != {bytes} or max(map(len, bodies)) > max_body:
            for body in bodies:
                if type(body) is not bytes or len(body) > max_body:
                    self._check_body(body)
            bodies = [b if type(b) is bytes else bytes(b) for b in bodies]
        # The numpy header fields take any int: out-of-range ones raise here, as HEADER.pack would.
        for value in (queue_id, flag) if flags is None else (queue_id, min(flags), max(flags)):
            _INT.pack(value)
        # Each record ends with the topic, the property block's length and the block: the first two
        # are one shared object when every block has the same length (no bytes built per record).
        prefix = self._topic_prefix(topic)
        tail_lengths: Any
        keys: list[str | None] | None = None
        uniqs: list[str | None] | None = None
        blocks: list[bytes] | None = None
        if properties is None or not any(properties):
            properties = None
            tail_heads: Iterable[bytes] = itertools.repeat(prefix + b"\0\0", count)
            tail_lengths = len(prefix) + 2
        else:
            blocks = self._property_blocks(properties)
            if set(map(type, properties)) <= _DICT_TYPES:  # C-level gets (most batches)
                maps: Sequence[dict[str, str]] = properties  # type: ignore[assignment]
                keys = list(map(dict.get, maps, itertools.repeat(PROPERTY_KEYS)))
                uniqs = list(map(dict.get, maps, itertools.repeat(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)))
            else:
                keys = [p.get(PROPERTY_KEYS) if p else None for p in properties]
                uniqs = [p.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) if p else None for p in properties]
            block_lengths = np.fromiter(map(len, blocks), dtype=np.int64, count=count)
            shortest, longest = int(block_lengths.min()), int(block_lengths.max())
            pack_len = _USHORT.pack
            if shortest == longest:
                tail_heads = itertools.repeat(prefix + pack_len(shortest), count)
            else:
                tail_heads = list(map(prefix.__add__, map(pack_len, block_lengths.tolist())))
            tail_lengths = block_lengths + (len(prefix) + 2)
        born_ip, born_port = self._born_default if not born_host else _host_bytes(born_host)
        header_dtype = _HEADER_DTYPE if len(born_ip) == 4 else _HEADER_DTYPE_BORN_V6
        size = header_dtype.itemsize
        body_lengths = np.fromiter(map(len, bodies), dtype=np.int64, count=count)
        size_array = body_lengths + tail_lengths + size
        sizes: list[int] = size_array.tolist()
        total_all = sum(sizes)
        if total_all + END_FILE_MIN_BLANK_LENGTH > self.config.commitlog_file_size:
            raise MQClientError(
                f"the batch is {total_all} bytes and cannot fit one commit-log segment of "
                f"{self.config.commitlog_file_size} bytes; send smaller batches"
            )
        # Headers are packed together into a numpy record array (one pass per field,
        # measured: a third of the cost of HEADER.pack per record); the fields that
        # depend on the log's position are filled under the lock.
        headers = np.zeros(count, dtype=header_dtype)
        headers["total"] = size_array
        headers["magic"] = MAGIC_V2 if topic in self._v2_topics else MAGIC_V1
        headers["body_crc"] = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=count) & 0x7FFFFFFF
        headers["queue_id"] = queue_id
        headers["flag"] = flag if flags is None else np.fromiter(flags, dtype=np.int64, count=count)
        headers["born_host"] = born_ip
        headers["born_port"] = born_port
        if header_dtype is _HEADER_DTYPE_BORN_V6:
            headers["sys_flag"] = _BORNHOST_V6
        headers["store_host"], headers["store_port"] = self.store_host
        headers["body_length"] = body_lengths
        record_starts = np.zeros(count, dtype=np.int64)
        np.cumsum(size_array[:-1], out=record_starts[1:])
        key = (topic, queue_id)
        with self.put_lock:
            now, mf, first_qoff = self._place_batch(key, total_all, count)
            start = mf.wrote_position
            mm, base = mf.mm, mf.file_from_offset
            headers["queue_offset"] = np.arange(first_qoff, first_qoff + count, dtype=np.int64)
            headers["physical_offset"] = record_starts + (base + start)
            headers["born_timestamp"] = now if born_timestamp is None else born_timestamp
            headers["store_timestamp"] = now
            raw = headers.tobytes()
            slices = [raw[i : i + size] for i in range(0, count * size, size)]
            records = zip(slices, bodies, tail_heads) if blocks is None else zip(slices, bodies, tail_heads, blocks)
            # One slice assignment for the whole batch (measured: cheaper than three copies per
            # record). A torn batch (killed mid-copy) shows whole records then garbage, which the
            # per-record checks of recovery cut; nothing of it was acknowledged.
            pos = start + total_all
            mm[start:pos] = b"".join(itertools.chain.from_iterable(records))
            mf.wrote_position = pos
            self.topic_queue_table[key] = first_qoff + count
            fn = self.tags_code_fn  # a delayed message's code is its due time: known only under the lock
            codes = None if properties is None else [fn(topic, p, now) if p else 0 for p in properties]
            self._batch_written(BatchDispatch(topic, queue_id, first_qoff, base + start, sizes, codes, now, keys,
                                              uniqs), keys is not None)
        return PutResult(base + start, total_all, first_qoff, now, count, (record_starts + (base + start)).tolist(),
                         store_host=self.store_host)

    def append_encoded_records(self, topic: str, queue_id: int, records: Any, sizes: Any, codes: Any = None,
                               key_hashes: Any = None, key_rows: Any = None) -> PutResult:
        """Append whole records `encode_records` built (a Spark task did), as one batch of one queue.

        `records` is a writable buffer of the records back to back, `sizes` their sizes;
        QUEUEID, QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are filled in, in place,
        then the bytes go into the segment with one copy: the same bytes, units and
        dispatch as `append_batch` of the same messages. `codes` are the records' tags codes
        (None: 0); `key_hashes` are index-key hashes (`index_key_hash`) of record
        `key_rows[i]`, in log order, for the reput thread's key index. Every record's
        structure (size, magic, host flags, topic, lengths) is checked first:
        `MQClientError` and nothing stored when one is wrong. Costs numpy passes over the
        headers, no Python per record.
        """
        sizes = np.asarray(sizes, dtype=np.int64)
        count = len(sizes)
        if not count:
            raise MQClientError("a batch needs at least one message")
        buf = np.frombuffer(records, dtype=np.uint8)
        if not buf.flags.writeable:
            raise MQClientError("encoded records must be in a writable buffer (they are filled in place)")
        total_all = int(sizes.sum())
        if total_all != len(buf) or int(sizes.min()) < HEADER.size:
            raise MQClientError(f"{count} record sizes add up to {total_all} bytes, but the buffer holds {len(buf)}")
        if total_all + END_FILE_MIN_BLANK_LENGTH > self.config.commitlog_file_size:
            raise MQClientError(f"the batch is {total_all} bytes and cannot fit one commit-log segment of "
                                f"{self.config.commitlog_file_size} bytes; send smaller batches")
        _INT.pack(queue_id)
        prefix, v2 = topic_prefix(topic)
        starts = np.zeros(count, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        step = int(sizes[0]) if int(sizes.min()) == int(sizes.max()) else None
        header_rows = _Rows(buf, starts, HEADER.size, step)
        headers = np.ascontiguousarray(header_rows.get()).view(_HEADER_DTYPE)[:, 0]
        body_lengths = headers["body_length"].astype(np.int64)
        tails = starts + HEADER.size + body_lengths
        if ((headers["total"] != sizes).any() or (headers["magic"] != (MAGIC_V2 if v2 else MAGIC_V1)).any()
                or (headers["sys_flag"] != 0).any() or (body_lengths < 0).any()
                or (tails + len(prefix) + _USHORT.size > starts + sizes).any()):
            raise MQClientError(f"encoded records for {topic!r} are damaged (a size, magic code, host flag or body "
                                f"length disagrees with the record); nothing was stored")
        same_body = int(body_lengths.min()) == int(body_lengths.max())
        topic_rows = _Rows(buf, tails, len(prefix) + _USHORT.size, step if same_body else None).get()
        props_lengths = _ints(topic_rows[:, len(prefix):], ">u2")
        if ((topic_rows[:, : len(prefix)] != np.frombuffer(prefix, dtype=np.uint8)).any()
                or (tails + len(prefix) + _USHORT.size + props_lengths != starts + sizes).any()):
            raise MQClientError(f"encoded records are not all of topic {topic!r} or their property lengths "
                                f"disagree with their sizes; nothing was stored")
        if v2:
            self._v2_topics.add(topic)
        codes = np.zeros(count, dtype=np.int64) if codes is None else np.asarray(codes, dtype=np.int64)
        if len(codes) != count:
            raise MQClientError(f"{count} records but {len(codes)} tags codes")
        hashes = None if key_hashes is None or not len(key_hashes) else np.asarray(key_hashes, dtype=np.int64)
        rows = None if hashes is None else np.asarray(key_rows, dtype=np.int64)
        if rows is not None and (len(rows) != len(hashes) or int(rows.min()) < 0  # type: ignore[arg-type]
                                 or int(rows.max()) >= count):
            raise MQClientError("every index key hash needs the number of its record in the batch")
        key = (topic, queue_id)
        with self.put_lock:
            now, mf, first_qoff = self._place_batch(key, total_all, count)
            start = mf.wrote_position
            mm, base = mf.mm, mf.file_from_offset
            physical = starts + (base + start)
            # The fields that depend on the log's place, filled before the copy: a torn copy
            # never leaves a valid-looking record with placeholder offsets.
            headers["queue_id"] = queue_id
            headers["queue_offset"] = np.arange(first_qoff, first_qoff + count, dtype=np.int64)
            headers["physical_offset"] = physical
            headers["store_timestamp"] = now
            header_rows.set(headers.view(np.uint8).reshape(count, HEADER.size))
            pos = start + total_all
            mm[start:pos] = buf.data
            mf.wrote_position = pos
            self.topic_queue_table[key] = first_qoff + count
            indexed = self._index_keys and hashes is not None
            self._batch_written(BatchDispatch(topic, queue_id, first_qoff, base + start, sizes, codes, now, None, None,
                                              hashes if indexed else None, physical[rows] if indexed else None),
                                hashes is not None)
        return PutResult(base + start, total_all, first_qoff, now, count, physical.tolist())

    def _property_blocks(self, properties: Sequence[Mapping[str, str] | None]) -> list[bytes]:
        """Each message's encoded property block (empty for none); a producer's `EncodedProperties` are reused."""
        if set(map(type, properties)) == {EncodedProperties}:
            blocks: list[bytes] = [p.encoded for p in properties]  # type: ignore[union-attr]
        else:
            blocks = [encode_properties(p).encode("utf-8") if p else b"" for p in properties]
        if max(map(len, blocks)) > MAX_PROPERTIES_LENGTH:
            raise MQClientError(
                f"message properties are {max(map(len, blocks))} bytes encoded; the limit is "
                f"{MAX_PROPERTIES_LENGTH} (RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values into the body")
        return blocks

    def set_store_host(self, host: str, port: int) -> None:
        """Write `host:port` (IPv4) as the store host of records appended from now on, and in their
        offset message ids. A server sets the address it serves at: RocketMQ's clients send a
        consumer's send-back, and an admin's view by offset id, to the host in the record."""
        self.store_host = (socket.inet_aton(host), port)

    def _pack_v6_header(self, mm: object, pos: int, total: int, v2: bool, crc: int, queue_id: int, flag: int,
                        qoff: int, phys: int, sys_flag: int, born_ts: int, born_ip: bytes, born_port: int,
                        now: int, reconsume: int, prepared: int, body_len: int) -> int:
        PREFIX.pack_into(mm, pos, total, MAGIC_V2 if v2 else MAGIC_V1, crc, queue_id, flag, qoff, phys,  # type: ignore[arg-type]
                         sys_flag, born_ts)
        p = pos + PREFIX.size
        mm[p : p + 16] = born_ip  # type: ignore[index]
        _INT.pack_into(mm, p + 16, born_port)  # type: ignore[arg-type]
        _TAIL_V4.pack_into(mm, p + 20, now, *self.store_host, reconsume, prepared, body_len)  # type: ignore[arg-type]
        return p + 20 + _TAIL_V4.size

    def _batch_written(self, batch: BatchDispatch, has_keys: bool) -> None:
        """With `put_lock` held, once a batch's bytes are in place: its consume-queue units, and its
        dispatch entry when the reput thread has work for it (index keys, or units to write in recovery)."""
        key = (batch.topic, batch.queue_id)
        queues = self.unit_queues
        if queues is not None:
            cq = queues.get(key) or self.create_unit_queue(*key)  # type: ignore[misc]
            if not cq.put_batch(batch.first_commit_log_offset, batch.sizes, batch.tags_codes,
                                batch.first_queue_offset):
                log.error("consume queue %s/%d out of step at queue offset %d", batch.topic, batch.queue_id,
                          batch.first_queue_offset)
        if queues is None or (self._index_keys and has_keys):
            self.appended_count += 1
            self.dispatch_queue.append(batch)

    def _place_batch(self, key: tuple[str, int], total: int, count: int) -> tuple[int, MappedFile, int]:
        """A batch's store time, segment (it writes at `wrote_position`) and first queue offset.

        Called with `put_lock` held; store times never go back, even when the clock does.
        The space of its `count` units and `total` bytes is reserved first (`DiskFullError`
        before anything is written).
        """
        now = max(self.clock.now_ms(), self.last_store_timestamp)
        self.last_store_timestamp = now
        first_qoff = self.topic_queue_table.get(key, 0)
        queues = self.unit_queues
        if queues is not None:
            cq = queues.get(key) or self.create_unit_queue(*key)  # type: ignore[misc]
            if first_qoff + count > cq.room:
                cq.make_room(first_qoff, count)
        mf = self._active
        if mf is None or mf.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > mf.reserved:
            mf = self._room_for(total)
        return now, mf, first_qoff

    def _room_for(self, total: int) -> MappedFile:
        """The segment to write `total` bytes to, its space reserved; the active one is closed
        with a BLANK when the record does not fit.

        Called with `put_lock` held; the record goes at the returned file's `wrote_position`.
        The next segment is created and reserved before the BLANK is written, so a full
        disk raises `DiskFullError` with the log as it was.
        """
        need = total + END_FILE_MIN_BLANK_LENGTH  # a record always leaves room for a BLANK
        size = self.config.commitlog_file_size
        if need > size:
            raise MQClientError(f"a {total}-byte record cannot fit a {size}-byte commit-log segment")
        files = self.mapped_files
        mf = files.last_for_append(reserve=need)
        pos = mf.wrote_position
        if pos + need > size:
            mf.reserve(pos + END_FILE_MIN_BLANK_LENGTH)
            following = files.create_file(mf.file_from_offset + size, need)
            BLANK.pack_into(mf.mm, pos, size - pos, BLANK_MAGIC)
            mf.wrote_position = size
            mf = following
        else:
            mf.reserve(pos + need)
        self._active = mf
        return mf

    # -- read -----------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """The bytes of the record at `offset` (None when outside the log or not a record)."""
        mf = self.mapped_files.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        raw = mf.mm[pos : pos + size]
        if len(raw) != size or size < 8:
            return None
        total, magic = BLANK.unpack_from(raw, 0)
        if total != size or (magic != MAGIC_V1 and magic != MAGIC_V2):
            return None
        if self.set_aside and offset in self.set_aside:
            log.warning("commit log: not reading the record at offset %d: recovery set it aside (a wrong body CRC, "
                        "or it lies in a damaged range)", offset)
            return None
        return raw

    def read_message(self, offset: int, size: int, broker_name: str) -> StoredMessage | None:
        """The message at `offset` with the given record size, or None."""
        raw = self.read(offset, size)
        return None if raw is None else StoredMessage(raw, broker_name)

    def record_size_at(self, offset: int) -> int:
        """TOTALSIZE of the record that starts at `offset`; 0 when none does. Any offset may be asked
        (a client's message id): a record starts there only if its magic is one, its PHYSICALOFFSET
        field names `offset` and it lies in its file, below the write position."""
        mf = self.mapped_files.find(offset)
        if mf is None or offset < 0:
            return 0
        pos = offset - mf.file_from_offset
        if pos + PREFIX.size > mf.file_size:
            return 0
        total, magic = BLANK.unpack_from(mf.mm, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or total < PREFIX.size or pos + total > mf.file_size \
                or offset + total > self.max_offset or _PHYS.unpack_from(mf.mm, pos + _PHYS_POS)[0] != offset:
            return 0
        return total

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at `offset` (-1 when absent)."""
        raw = self.read(offset, size)
        if raw is None:
            return -1
        msg = StoredMessage(raw, "")
        try:
            return msg.store_timestamp
        except StoreCorruptedError:
            return -1

    def scan(self, start: int, check_crc: bool = True) -> Iterator[tuple[int, int, DispatchRequest]]:
        """Walk records from `start`: yields `(offset, size, request)`; stops at the first bad record.

        BLANK records move on to the next segment.
        """
        offset = start
        fn = self.tags_code_fn
        while True:
            mf = self.mapped_files.find(offset)
            if mf is None:
                return
            pos = offset - mf.file_from_offset
            size, request = check_record(mf.mm, pos, mf.file_size, check_crc, fn)
            if size > 0:
                assert request is not None  # described: check_record was asked to
                yield offset, size, request
                offset += size
            elif size == 0:
                offset = mf.file_from_offset + mf.file_size
            else:
                return

    def close(self) -> None:
        """Unmap the segments."""
        self.mapped_files.close()
