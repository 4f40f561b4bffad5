"""Messages, message queues, property names, ids and the Java string hash.

These are RocketMQ's client-side value types (`Message`, `MessageExt`,
`MessageQueue`, `MessageConst`, `MessageSysFlag`, `MessageClientIDSetter`,
`MessageDecoder`'s id and property codecs), in snake_case. Tags, keys and the
delay level live in the property map under RocketMQ's names, exactly as in Java,
so a message round-trips through the commit log unchanged.
"""

from __future__ import annotations

import calendar
import functools
import itertools
import os
import random
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .config import JAVA_INT_MAX, check_int
from .errors import MQClientError

if TYPE_CHECKING:
    import numpy as np
else:
    np = None  # numpy, bound by `_bind_numpy` at the first batch hash: `mqlite.Message` does not import it

__all__ = [
    "Message",
    "MessageExt",
    "MessageQueue",
    "SysFlag",
    "java_string_hash",
    "java_string_hashes",
    "java_string_hash_array",
    "tags_code",
    "encode_properties",
    "EncodedProperties",
    "decode_properties",
    "create_offset_msg_id",
    "local_ip",
    "decode_offset_msg_id",
    "msg_id_offset",
    "UniqIdGenerator",
    "RESERVED_PROPERTY_NAMES",
    "check_int32",
    "check_property_text",
    "check_properties",
]

# -- property names (MessageConst) -------------------------------------------------
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

#: `MessageConst.STRING_HASH_SET`: names a user property may not take.
RESERVED_PROPERTY_NAMES = frozenset(
    """TRACE_ON MSG_REGION KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP
    MIN_OFFSET MAX_OFFSET BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG
    RECONSUME_TIME UNIQ_KEY MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET 1ST_POP_TIME
    TRAN_PREPARED_QUEUE_OFFSET DUP_INFO EXTEND_UNIQ_INFO INSTANCE_ID CORRELATION_ID REPLY_TO_CLIENT
    TTL ARRIVE_TIME PUSH_REPLY_TIME CLUSTER MSG_TYPE INNER_MULTI_QUEUE_OFFSET TIMER_DELAY_MS
    TIMER_DELAY_SEC TIMER_DELIVER_MS TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS TIMER_ROLL_TIMES TIMER_OUT_MS
    TIMER_DEL_UNIQKEY TIMER_DELAY_LEVEL BORN_HOST BORN_TIMESTAMP DLQ_ORIGIN_TOPIC
    DLQ_ORIGIN_MESSAGE_ID __CRC32#""".split()
)


class SysFlag:
    """`MessageSysFlag` bits of a record's SYSFLAG field."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOSTADDRESS_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_LZ4_TYPE = 0x100
    COMPRESSION_ZSTD_TYPE = 0x200
    COMPRESSION_ZLIB_TYPE = 0x300
    COMPRESSION_TYPE_MASK = 0x700

    @staticmethod
    def transaction_value(flag: int) -> int:
        """The transaction type bits (`getTransactionValue`)."""
        return flag & SysFlag.TRANSACTION_MASK

    @staticmethod
    def reset_transaction_value(flag: int, type_: int) -> int:
        """Replace the transaction type bits (`resetTransactionValue`)."""
        return (flag & ~SysFlag.TRANSACTION_MASK) | type_


# -- Java String.hashCode ---------------------------------------------------------------
def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()`: `31*h + c` over UTF-16 code units, 32-bit signed.

    >>> java_string_hash("TagA"), java_string_hash("TopicTest#KEY1")
    (2598919, -1656969516)
    """
    h = 0
    if s.isascii():
        units: Iterable[int] = s.encode("ascii")
    else:
        # surrogatepass: Java strings may hold lone surrogates; hash them as code units too.
        data = s.encode("utf-16-be", "surrogatepass")
        units = (data[i] << 8 | data[i + 1] for i in range(0, len(data), 2))
    for c in units:
        h = (31 * h + c) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


_POW31: dict[int, Any] = {}  # key length -> uint64 powers of 31 (mod 2**32), highest first


def java_string_hashes(texts: Sequence[str]) -> list[int]:
    """`java_string_hash` of many strings at once (numpy for ASCII strings of equal length).

    Exact: each product is below 2**40 and a sum of a few thousand of them
    stays below 2**64, so uint64 arithmetic then a 32-bit wrap equals Java's.

    >>> java_string_hashes(["TagA", "TopicTest#KEY1", "日本"])
    [2598919, -1656969516, 835047]
    """
    return java_string_hash_array(texts).tolist()  # type: ignore[no-any-return]


def java_string_hash_array(texts: Sequence[str]) -> Any:
    """`java_string_hashes` as an int64 numpy array (what the index builder consumes).

    Keys of one topic and one id format (`topic#UNIQ_KEY`) are all ASCII and of
    one length: they are checked and hashed in a few C-level passes.
    """
    if np is None:
        _bind_numpy()
    if len(texts) >= 4:
        length = len(texts[0])
        if 0 < length <= 4096 and min(map(len, texts)) == length == max(map(len, texts)):
            joined = "".join(texts)
            if joined.isascii():
                return _hash_ascii_rows(joined.encode("ascii"), len(texts), length)
    out = [0] * len(texts)
    groups: dict[int, list[int]] = {}
    for i, text in enumerate(texts):
        if text.isascii() and 0 < len(text) <= 4096:
            groups.setdefault(len(text), []).append(i)
        else:
            out[i] = java_string_hash(text)
    for length, members in groups.items():
        if len(members) < 4:  # numpy's set-up costs more than a few loops
            for i in members:
                out[i] = java_string_hash(texts[i])
            continue
        hashes = _hash_ascii_rows("".join([texts[i] for i in members]).encode("ascii"), len(members), length)
        for i, value in zip(members, hashes.tolist()):
            out[i] = value
    return np.array(out, dtype=np.int64)


def _bind_numpy() -> None:
    """Bind the module's `np` (once: a global read a batch after that, not an import statement)."""
    global np
    import numpy  # noqa: PLC0415 - deferred to the first batch hash

    np = numpy


def _hash_ascii_rows(data: bytes, rows: int, length: int) -> Any:
    """Java hashes (int64 array) of `rows` ASCII strings of `length` bytes each, concatenated in `data`."""
    powers = _POW31.get(length)
    if powers is None:
        powers = np.array([pow(31, length - 1 - j, 1 << 32) for j in range(length)], dtype=np.uint64)
        _POW31[length] = powers
    chars = np.frombuffer(data, dtype=np.uint8).reshape(rows, length)
    step = max(1, (1 << 20) // length)  # bounds the uint64 temporaries to 8 MiB
    sums = np.concatenate([(chars[i : i + step].astype(np.uint64) * powers).sum(axis=1)
                           for i in range(0, rows, step)]) & np.uint64(0xFFFFFFFF)
    signed = sums.astype(np.int64)
    signed[signed >= 1 << 31] -= 1 << 32
    return signed


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The consume-queue tags code of a TAGS value (`tagsString2tagsCode`); 0 when empty.

    Cached: the set of tags in a system is small and this runs once per message.
    """
    return java_string_hash(tags) if tags else 0


# -- properties codec (MessageDecoder.messageProperties2String / string2messageProperties) ---
def encode_properties(properties: Mapping[str, str]) -> str:
    """`name\\x01value\\x02` per entry, with the trailing separator Java writes."""
    return "".join([f"{k}\x01{v}\x02" for k, v in properties.items() if v is not None])


class EncodedProperties(dict[str, str]):
    """A property map that carries its own encoding: `encoded` is `encode_properties(self)` in UTF-8.

    A producer builds one per send (its cached encoding of the message's
    properties plus the new UNIQ_KEY entry), so the commit log does not encode
    the map again (measured: 0.8 us a send). Whoever builds one vouches that
    `encoded` matches; treat it as read-only, since a change would not reach `encoded`.

    >>> p = EncodedProperties({"WAIT": "true"}); p.encoded = encode_properties(p).encode(); p.encoded
    b'WAIT\\x01true\\x02'
    """

    __slots__ = ("encoded",)

    encoded: bytes


def decode_properties(text: str) -> dict[str, str]:
    """Parse a property string; segments with an empty name or value are dropped, as in Java.

    >>> decode_properties("k1\\x01v1\\x02k2\\x01\\x02")
    {'k1': 'v1'}
    """
    result: dict[str, str] = {}
    if not text:
        return result
    for part in text.split("\x02"):
        i = part.find("\x01")
        if 0 < i < len(part) - 1:
            result[part[:i]] = part[i + 1 :]
    return result


# -- ids -----------------------------------------------------------------------------------
def create_offset_msg_id(ip: bytes, port: int, commit_log_offset: int) -> str:
    """`MessageDecoder.createMessageId`: store host, port and offset as 32 (or 56) hex chars.

    >>> create_offset_msg_id(bytes([127, 0, 0, 1]), 9103, 123456)
    '7F0000010000238F000000000001E240'
    """
    return (ip + port.to_bytes(4, "big", signed=True) + commit_log_offset.to_bytes(8, "big", signed=True)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Inverse of `create_offset_msg_id`: `(ip, port, commit_log_offset)`.

    Raises `MQClientError` when the text is not a 32- or 56-character hex id.
    """
    if len(msg_id) not in (32, 56):
        raise MQClientError(f"{msg_id!r} is not an offset message id (32 or 56 hex characters)")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MQClientError(f"{msg_id!r} is not an offset message id (not hexadecimal)") from None
    ip_len = 4 if len(raw) == 16 else 16
    ip = socket.inet_ntop(socket.AF_INET if ip_len == 4 else socket.AF_INET6, raw[:ip_len])
    port = int.from_bytes(raw[ip_len : ip_len + 4], "big", signed=True)
    return ip, port, int.from_bytes(raw[ip_len + 4 :], "big", signed=True)


def msg_id_offset(msg_id: str) -> int:
    """The commit-log offset `msg_id` names when it is an offset message id, else -1 (a client's unique id,
    looked up in the key index instead). `MQClientError` when `msg_id` is not a non-empty string.

    >>> msg_id_offset("7F00000100002A9F0000000000000010"), msg_id_offset("7F0000010001")
    (16, -1)
    """
    if not isinstance(msg_id, str) or not msg_id:
        raise MQClientError("msg_id must be a non-empty string")
    try:
        return decode_offset_msg_id(msg_id)[2]
    except MQClientError:
        return -1


def local_ip() -> bytes:
    """`UtilAll.getIP()` in spirit: a non-loopback IPv4 address of this host, else 127.0.0.1."""
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = info[4][0]
            if not str(ip).startswith("127."):
                return socket.inet_aton(str(ip))
    except OSError:
        pass
    return socket.inet_aton("127.0.0.1")


class UniqIdGenerator:
    """`MessageClientIDSetter`: 16-byte client message ids as 32 uppercase hex characters.

    Layout: IP (4) + pid (short) + class-loader hash (int; a random int per
    process here) + ms since the start of the local month (int) + counter (short).
    Thread-safe; ids from one process are unique and increase with the counter.
    """

    def __init__(self) -> None:
        prefix = local_ip() + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.getrandbits(32).to_bytes(4, "big")
        self._prefix_hex = prefix.hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start = 0
        self._next_month_start = 0
        self._stamp = (-1, "")  # (ms, prefix + time field): ids of one millisecond share it

    def _month_bounds(self, now_ms: int) -> None:
        lt = time.localtime(now_ms / 1000)
        start = time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        days = calendar.monthrange(lt.tm_year, lt.tm_mon)[1]
        end = time.mktime((lt.tm_year, lt.tm_mon, days, 0, 0, 0, 0, 0, -1)) + 86400
        self._month_start, self._next_month_start = int(start * 1000), int(end * 1000)

    def _stamp_for(self, now: int) -> tuple[int, str]:
        if now >= self._next_month_start:
            with self._lock:  # once a month
                if now >= self._next_month_start:
                    self._month_bounds(now)
        stamp = self._stamp = (now, f"{self._prefix_hex}{(now - self._month_start) & 0xFFFFFFFF:08X}")
        return stamp

    def next_id(self) -> str:
        """A new unique id. Thread-safe: the counter is an `itertools.count` (atomic under the GIL).

        Costs about 0.3 us: the first 28 characters are formatted once per millisecond
        and the counter's four come from a table (measured; an f-string took 1 us).
        """
        now = time.time_ns() // 1_000_000
        stamp = self._stamp
        if stamp[0] != now:
            stamp = self._stamp_for(now)
        count = next(self._counter)
        return stamp[1] + _HEX2[count >> 8 & 0xFF] + _HEX2[count & 0xFF]

    def next_ids(self, n: int) -> list[str]:
        """`n` new ids stamped with the same millisecond (a batch send's)."""
        stamp = self._stamp_for(time.time_ns() // 1_000_000)[1]
        return [stamp + _HEX2[c >> 8 & 0xFF] + _HEX2[c & 0xFF] for c in itertools.islice(self._counter, n)]


_HEX2 = [f"{i:02X}" for i in range(256)]


# -- argument checks -----------------------------------------------------------------------
_JAVA_LONG_MAX = (1 << 63) - 1
_JAVA_LONG = re.compile(r"-?[0-9]{1,19}")


def check_int32(what: str, value: object) -> int:
    """`value` when it is an int that fits a Java int (the record's 4-byte fields); else `MQClientError`.

    >>> check_int32("message flag", 1 << 31)
    Traceback (most recent call last):
    mqlite.errors.MQClientError: message flag must be an int from -2147483648 to 2147483647, got 2147483648
    """
    return check_int(what, value, -JAVA_INT_MAX - 1, JAVA_INT_MAX)


def check_property_text(what: str, text: object) -> str:
    """`text` when it is a str without the property separators (\\x01 between name and value,
    \\x02 after each entry), which would split it into other properties on the way back."""
    if not isinstance(text, str):
        raise MQClientError(f"{what} must be a str, got {type(text).__name__} {text!r}")
    if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
        raise MQClientError(f"{what} {text!r} contains a \\x01 or \\x02 character (RocketMQ's property "
                            "separators); remove it")
    return text


def check_properties(properties: object) -> dict[str, str]:
    """A copy of a property map when every name is a non-empty str and every value a str, both
    free of the separators; else `MQClientError`."""
    if not isinstance(properties, Mapping):
        raise MQClientError(f"properties must be a mapping of str to str, got {type(properties).__name__}")
    copy = dict(properties)
    for name, value in copy.items():
        if not name or not isinstance(name, str) or not isinstance(value, str):
            raise MQClientError(f"message properties must map non-empty str to str, got {name!r}: {value!r}")
        check_property_text("property name", name)
        check_property_text(f"property {name!r}", value)
    return copy


# -- value types ---------------------------------------------------------------------------
@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    """One queue of a topic on a broker; ordered by (topic, broker_name, queue_id).

    >>> str(MessageQueue("T", "mqlite", 0))
    'MessageQueue [topic=T, brokerName=mqlite, queueId=0]'
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


class Message:
    """A message to send: topic, body, and a property map holding tags, keys and delay.

    >>> m = Message("orders", b"hi", tags="TagA", keys=["k1", "k2"])
    >>> m.properties["KEYS"], m.tags, m.keys
    ('k1 k2', 'TagA', ['k1', 'k2'])
    """

    __slots__ = ("topic", "body", "flag", "properties", "transaction_id")

    topic: str
    body: bytes
    flag: int
    properties: dict[str, str]
    transaction_id: str | None

    def __init__(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        flag: int = 0,
        properties: Mapping[str, str] | None = None,
        delay_time_level: int = 0,
    ) -> None:
        # Wrong types are refused here, where the mistake is made, not at the send.
        # The topic's name rules are RocketMQ's send-time check (`Validators.checkTopic`).
        if type(topic) is not str:
            raise MQClientError(f"topic must be a str, got {type(topic).__name__} {topic!r}")
        if type(body) is not bytes and not isinstance(body, (bytes, bytearray)):
            hint = " (encode text first: body.encode())" if isinstance(body, str) else ""
            raise MQClientError(f"message body must be bytes, got {type(body).__name__}{hint}")
        if type(flag) is not int or not -0x80000000 <= flag <= 0x7FFFFFFF:
            check_int32("message flag", flag)  # raises
        self.topic = topic
        self.body = body
        self.flag = flag
        self.transaction_id = None
        self.properties = check_properties(properties) if properties else {}
        if tags:
            # Inlined `tags` setter: most messages have tags (measured: 0.2 us less a construction).
            if type(tags) is str and NAME_VALUE_SEPARATOR not in tags and PROPERTY_SEPARATOR not in tags:
                self.properties[PROPERTY_TAGS] = tags
            else:
                self.tags = tags
        if keys:
            self.keys = keys  # type: ignore[assignment]
        if delay_time_level:
            self.delay_time_level = delay_time_level
        # Java's Message constructors always set waitStoreMsgOK = true.
        self.properties.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")

    @property
    def tags(self) -> str | None:
        """The TAGS property."""
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[PROPERTY_TAGS] = check_property_text("tags", value)
        else:
            self.properties.pop(PROPERTY_TAGS, None)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces (empty list when none)."""
        text = self.properties.get(PROPERTY_KEYS)
        return [k for k in text.split(KEY_SEPARATOR) if k] if text else []

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        text: str
        if isinstance(value, str):
            text = value
        elif not value:
            text = ""
        else:
            try:
                items = list(value)
            except TypeError:
                raise MQClientError(f"keys must be a str or an iterable of str, got {value!r}") from None
            bad = [k for k in items if not isinstance(k, str)]
            if bad:
                raise MQClientError(f"keys must be strings, got {bad[0]!r} ({type(bad[0]).__name__})")
            text = KEY_SEPARATOR.join(items)
        if text:
            check_property_text("keys", text)
            self.properties[PROPERTY_KEYS] = text
        else:
            self.properties.pop(PROPERTY_KEYS, None)

    @property
    def delay_time_level(self) -> int:
        """The DELAY property as an int (0 when absent)."""
        return self._int_property(PROPERTY_DELAY_TIME_LEVEL) or 0

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        """Levels above the broker's highest are delivered at the highest, as RocketMQ does."""
        if check_int("delay_time_level (0: no delay)", level, 0, JAVA_INT_MAX):
            self.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        else:
            self.properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)

    def _int_property(self, name: str) -> int | None:
        text = self.properties.get(name)
        # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
        return int(text) if isinstance(text, str) and _JAVA_LONG.fullmatch(text) else None

    def _set_time_property(self, name: str, value: int | None, what: str) -> None:
        if value is None:
            self.properties.pop(name, None)
            return
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _JAVA_LONG_MAX:
            raise MQClientError(f"{what} must be None or an int of milliseconds >= 0 (a Java long), got {value!r}")
        self.properties[name] = str(int(value))

    @property
    def deliver_time_ms(self) -> int | None:
        """Absolute delivery time in epoch ms (RocketMQ 5's TIMER_DELIVER_MS), or None."""
        return self._int_property(PROPERTY_TIMER_DELIVER_MS)

    @deliver_time_ms.setter
    def deliver_time_ms(self, when: int | None) -> None:
        self._set_time_property(PROPERTY_TIMER_DELIVER_MS, when, "deliver_time_ms")

    @property
    def delay_ms(self) -> int | None:
        """Delay from sending in ms (RocketMQ 5's TIMER_DELAY_MS), or None."""
        return self._int_property(PROPERTY_TIMER_DELAY_MS)

    @delay_ms.setter
    def delay_ms(self, delay: int | None) -> None:
        self._set_time_property(PROPERTY_TIMER_DELAY_MS, delay, "delay_ms")

    def put_user_property(self, name: str, value: str) -> None:
        """Set a user property; RocketMQ's reserved names, blank names or values and the
        property separators (\\x01, \\x02) are refused."""
        if not isinstance(name, str) or not isinstance(value, str) or not name.strip() or not value.strip():
            raise MQClientError(f"user property name and value must be non-blank strings, got {name!r}: {value!r}")
        if name in RESERVED_PROPERTY_NAMES:
            raise MQClientError(f"{name!r} is a reserved RocketMQ property name; choose another name")
        self.properties[check_property_text("property name", name)] = check_property_text(name, value)

    def get_user_property(self, name: str) -> str | None:
        """A property by name, or None."""
        return self.properties.get(name)

    def get_property(self, name: str) -> str | None:
        """A property by name, or None (system properties too)."""
        return self.properties.get(name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(topic={self.topic!r}, body={len(self.body)} bytes, properties={self.properties!r})"


class MessageExt(Message):
    """A stored message, as consumers and queries see it (`MessageExt`/`MessageClientExt`).

    `msg_id` is the client unique id (`UNIQ_KEY`) when present, else `offset_msg_id`.
    """

    __slots__ = (
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "store_size",
        "body_crc",
        "sys_flag",
        "born_timestamp",
        "store_timestamp",
        "born_host",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "broker_name",
        "offset_msg_id",
    )

    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    body_crc: int
    sys_flag: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    broker_name: str
    offset_msg_id: str

    @property
    def msg_id(self) -> str:
        """The client unique id, or the offset id for a message without one."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def message_queue(self) -> MessageQueue:
        """The queue this message was stored in."""
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"msg_id={self.msg_id!r}, body={len(self.body)} bytes, properties={self.properties!r})"
        )
