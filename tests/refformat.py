"""An independent implementation of RocketMQ's on-disk store, written from the reference alone.

This module is a test oracle. It was written from ``/work/shared/reference/rocketmq-formats.md``
(sections 1, 2, 3 and 5) without reading or importing any code from ``src/mqlite``, so that format
tests can compare mqlite's files against a second, independent reading of RocketMQ's Java source.
It favours clarity over speed: every field is read and written on its own with ``struct``.

Two halves:

* **Decoders** that never raise on garbage. They return ``None``/``"BLANK"``/a list of problems instead.
  ``decode_record``, ``scan_commitlog``/``decode_commitlog``, ``decode_consumequeue``,
  ``decode_checkpoint``, ``decode_index_file``/``index_lookup`` and ``cross_check_store``.
* **BrokerStyleWriter**, which writes a store directory the way a RocketMQ broker does (commit log with
  BLANK end-of-file records, consume queues, one or more index files, a 4096-byte checkpoint, and no
  mqlite-specific config file), to build fixtures that mqlite must be able to read.

All integers are big-endian; "int" = 4 bytes signed, "long" = 8, "short" = 2.

>>> java_string_hash("TagA")
2598919
>>> decode_properties("k1\\x01v1\\x02\\x01v2")
{'k1': 'v1'}
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO

__all__ = [
    "MESSAGE_MAGIC_CODE_V1", "MESSAGE_MAGIC_CODE_V2", "BLANK_MAGIC_CODE", "CQ_UNIT_SIZE",
    "CQ_BLANK_UNIT", "INDEX_HEADER_SIZE", "INDEX_ENTRY_SIZE", "CHECKPOINT_FILE_SIZE",
    "java_string_hash", "tags_code", "cq_tags_code", "body_crc", "encode_properties",
    "decode_properties", "cal_msg_length", "encode_record", "decode_record", "CommitLogScan",
    "scan_commitlog", "decode_commitlog", "list_consumequeues", "decode_consumequeue",
    "decode_checkpoint", "encode_checkpoint", "index_key_hash", "index_slot", "decode_index_file",
    "index_lookup", "index_files", "offset_msg_id", "cross_check_store", "BrokerStyleWriter",
]

# ------------------------------------------------------------------------------------------------
# Constants (reference sections 1.2, 1.3, 1.4, 1.5, 2.1, 2.3, 3.1, 5.1)
# ------------------------------------------------------------------------------------------------

MESSAGE_MAGIC_CODE_V1 = -626843481   # 0xDAA320A7, 1-byte topic length
MESSAGE_MAGIC_CODE_V2 = -626843477   # 0xDAA320AB, 2-byte topic length
BLANK_MAGIC_CODE = -875286124        # 0xCBD43194, end-of-file filler
END_FILE_MIN_BLANK_LENGTH = 4 + 4    # [int remaining][int BLANK_MAGIC_CODE]

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC      # also the mask of the transaction bits
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
COMPRESSION_ZLIB_TYPE = 0x300
COMPRESSION_TYPE_MASK = 0x700

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767         # the properties length is a signed short
MAX_TOPIC_BYTES = 255                # broker-side MAX_TOPIC_LENGTH
V1_MAX_TOPIC_CHARS = 127             # longer topics (in UTF-16 chars) use magic V2

CQ_UNIT_SIZE = 20                    # long commit_log_offset, int size, long tags_code
CQ_BLANK_UNIT = (0, 2147483647, 0)   # fillPreBlank unit

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20                # int key_hash, long phy_offset, int time_diff, int prev_index

CHECKPOINT_FILE_SIZE = 4096

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", levels 1..18, in ms.
DELAY_LEVEL_MS = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
    360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

Host = tuple[str, int]


# ------------------------------------------------------------------------------------------------
# Hashes, CRC, properties (sections 1.5, 1.6, 1.10, 2.3)
# ------------------------------------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, 32-bit signed.

    >>> java_string_hash("*")
    42
    """
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def tags_code(tags: str | None) -> int:
    """``tagsString2tagsCode``: the Java hash of the whole TAGS string; 0 for None or empty."""
    if not tags:
        return 0
    return java_string_hash(tags)


def _java_parse_int(text: str) -> int | None:
    """``Integer.parseInt``: optional sign and ASCII digits, in int range; None where Java throws."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -2**31 <= value <= INT_MAX else None


def cq_tags_code(topic: str, properties: dict[str, str], store_timestamp: int) -> int:
    """The tags_code the broker puts in a consume-queue unit (``checkMessageAndReturnSize``).

    Normally the hash of TAGS. For ``SCHEDULE_TOPIC_XXXX`` with a DELAY property whose level
    (clamped to 18) is > 0, it is the delivery time ``store_timestamp + delay(level)`` instead.
    Raises ValueError for a DELAY that Java's ``Integer.parseInt`` would reject (the broker would
    treat that record as invalid).
    """
    code = tags_code(properties.get("TAGS"))
    if topic == SCHEDULE_TOPIC and "DELAY" in properties:
        level = _java_parse_int(properties["DELAY"])
        if level is None:
            raise ValueError(f"DELAY property {properties['DELAY']!r} is not a Java int")
        level = min(level, len(DELAY_LEVEL_MS))
        if level > 0:
            code = store_timestamp + DELAY_LEVEL_MS[level - 1]
    return code


def body_crc(data: bytes) -> int:
    """``UtilAll.crc32``: zlib CRC-32 with the top bit cleared (0 for an empty body).

    >>> body_crc(b"hello!q!")
    1020379427
    """
    return zlib.crc32(data) & 0x7FFFFFFF


def encode_properties(properties: dict[str, str | None] | None) -> str:
    """``messageProperties2String``: ``name\\x01value\\x02`` per pair, trailing ``\\x02``; None values skipped."""
    if not properties:
        return ""
    return "".join(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                   for name, value in properties.items() if value is not None)


def decode_properties(raw: str) -> dict[str, str]:
    """``string2messageProperties``: split on ``\\x02``; keep a segment only if the text before its
    first ``\\x01`` (the key) and the text after it (the value) are both non-empty. Later keys win."""
    result: dict[str, str] = {}
    for segment in raw.split(PROPERTY_SEPARATOR):
        sep = segment.find(NAME_VALUE_SEPARATOR)
        # sep > 0: non-empty key; sep < len-1: non-empty value (this implies len >= 3).
        if 0 < sep < len(segment) - 1:
            result[segment[:sep]] = segment[sep + 1:]
    return result


# ------------------------------------------------------------------------------------------------
# CommitLog record (section 1.1)
#
#   off  size  field
#     0   4    TOTALSIZE            int, whole record including this field
#     4   4    MAGICCODE            V1 0xDAA320A7 / V2 0xDAA320AB / BLANK 0xCBD43194
#     8   4    BODYCRC              crc32(stored body) & 0x7FFFFFFF
#    12   4    QUEUEID
#    16   4    FLAG
#    20   8    QUEUEOFFSET          0 for PREPARED / ROLLBACK
#    28   8    PHYSICALOFFSET       absolute commit log offset of this record
#    36   4    SYSFLAG
#    40   8    BORNTIMESTAMP
#    48   8|20 BORNHOST             4|16 address bytes + int port (IPv6 if SYSFLAG & 0x10)
#    ..   8    STORETIMESTAMP
#    ..   8|20 STOREHOST            (IPv6 if SYSFLAG & 0x20)
#    ..   4    RECONSUMETIMES
#    ..   8    PREPARED TRANSACTION OFFSET
#    ..   4+n  BODY                 int length + stored bytes (at 84 with IPv4 hosts)
#    ..   1|2+n TOPIC               V1: byte length, V2: short length, UTF-8
#    ..   2+n  PROPERTIES           short length, UTF-8
# ------------------------------------------------------------------------------------------------

def _host_size(v6: bool) -> int:
    return 16 + 4 if v6 else 4 + 4


def cal_msg_length(version: int, sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """``MessageExtEncoder.calMsgLength``; version is 1 or 2. IPv4/IPv4/V1 gives 91 + body + topic + props.

    >>> cal_msg_length(1, 0, 5, 9, 0)
    105
    """
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
            + _host_size(bool(sys_flag & BORNHOST_V6_FLAG))
            + 8
            + _host_size(bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))
            + 4 + 8
            + 4 + max(body_len, 0)
            + (1 if version == 1 else 2) + topic_len
            + 2 + max(props_len, 0))


def _topic_char_length(topic: str) -> int:
    """Java ``String.length()``: UTF-16 code units."""
    return len(topic.encode("utf-16-le", "surrogatepass")) // 2


def _parse_host(host: Host | str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """Accept ``("ip", port)`` or ``"ip:port"`` / ``"[v6]:port"``."""
    if isinstance(host, str):
        addr, _, port = host.rpartition(":")
        host = (addr.strip("[]"), int(port))
    return ipaddress.ip_address(host[0]), int(host[1])


def _encode_host(host: Host | str) -> bytes:
    addr, port = _parse_host(host)
    return addr.packed + struct.pack(">i", port)


def _with_host_flags(sys_flag: int, born_host: Host | str, store_host: Host | str) -> int:
    """sys_flag with bits 0x10/0x20 set exactly when the born/store address is IPv6 (as the broker does)."""
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if _parse_host(born_host)[0].version == 6:
        sys_flag |= BORNHOST_V6_FLAG
    if _parse_host(store_host)[0].version == 6:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    return sys_flag


def encode_record(*, topic: str, queue_id: int, body: bytes, properties_raw: str = "",
                  flag: int = 0, queue_offset: int = 0, physical_offset: int = 0, sys_flag: int = 0,
                  born_timestamp: int = 0, born_host: Host | str = ("127.0.0.1", 54321),
                  store_timestamp: int = 0, store_host: Host | str = ("127.0.0.1", 10911),
                  reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> bytes:
    """Encode one record exactly as ``MessageExtEncoder``/``DefaultAppendMessageCallback`` does.

    ``body`` is the stored body (already compressed if sys_flag says so). The IPv6 sysflag bits are
    derived from the host addresses, the magic from the topic length (V2 when > 127 chars), and
    BODYCRC from the body. Raises ValueError on inputs a broker would refuse or could not read back.
    """
    born_addr, born_port = _parse_host(born_host)
    store_addr, store_port = _parse_host(store_host)
    sys_flag = _with_host_flags(sys_flag, born_host, store_host)
    topic_bytes = topic.encode("utf-8")
    props_bytes = properties_raw.encode("utf-8")
    version = 2 if _topic_char_length(topic) > V1_MAX_TOPIC_CHARS else 1
    if len(topic_bytes) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic is {len(topic_bytes)} UTF-8 bytes; a broker refuses over {MAX_TOPIC_BYTES}")
    if version == 1 and len(topic_bytes) > 127:
        raise ValueError("a V1 topic over 127 UTF-8 bytes would be written as a negative length byte")
    if len(props_bytes) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"properties are {len(props_bytes)} bytes; the limit is {MAX_PROPERTIES_BYTES}")

    total = cal_msg_length(version, sys_flag, len(body), len(topic_bytes), len(props_bytes))
    out = bytearray()
    out += struct.pack(">i", total)                                  # TOTALSIZE
    out += struct.pack(">i", MESSAGE_MAGIC_CODE_V2 if version == 2 else MESSAGE_MAGIC_CODE_V1)
    out += struct.pack(">i", body_crc(body))                         # BODYCRC
    out += struct.pack(">i", queue_id)                               # QUEUEID
    out += struct.pack(">i", flag)                                   # FLAG
    out += struct.pack(">q", queue_offset)                           # QUEUEOFFSET
    out += struct.pack(">q", physical_offset)                        # PHYSICALOFFSET
    out += struct.pack(">i", sys_flag)                               # SYSFLAG
    out += struct.pack(">q", born_timestamp)                         # BORNTIMESTAMP
    out += born_addr.packed + struct.pack(">i", born_port)           # BORNHOST
    out += struct.pack(">q", store_timestamp)                        # STORETIMESTAMP
    out += store_addr.packed + struct.pack(">i", store_port)         # STOREHOSTADDRESS
    out += struct.pack(">i", reconsume_times)                        # RECONSUMETIMES
    out += struct.pack(">q", prepared_transaction_offset)            # PREPARED TRANSACTION OFFSET
    out += struct.pack(">i", len(body)) + body                       # BODY
    if version == 2:
        out += struct.pack(">h", len(topic_bytes)) + topic_bytes     # TOPIC (V2)
    else:
        out += struct.pack(">b", len(topic_bytes)) + topic_bytes     # TOPIC (V1)
    out += struct.pack(">h", len(props_bytes)) + props_bytes         # PROPERTIES
    assert len(out) == total, (len(out), total)
    return bytes(out)


class _Truncated(Exception):
    """Internal: a read ran past the end of the buffer (Java's BufferUnderflowException)."""


class _Cursor:
    """Sequential big-endian reads over a buffer, one field at a time."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise _Truncated
        chunk = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return chunk

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def host(self, v6: bool) -> str:
        addr = ipaddress.ip_address(self.take(16 if v6 else 4))
        return f"{addr}:{self.i32()}"


def _decode_record_with_reason(buf: bytes, pos: int) -> tuple[dict[str, Any] | str | None, str]:
    """decode_record plus a human-readable reason when the result is None."""
    remaining = len(buf) - pos
    if pos < 0 or remaining <= 4:
        return None, f"only {max(remaining, 0)} bytes left (need more than 4)"
    cur = _Cursor(buf, pos)
    try:
        total_size = cur.i32()
        if remaining < total_size:
            return None, f"TOTALSIZE {total_size} exceeds the {remaining} bytes left (half-written record)"
        magic = cur.i32()
        if magic == BLANK_MAGIC_CODE:
            return "BLANK", ""
        if magic not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2):
            return None, f"unknown magic code 0x{magic & 0xFFFFFFFF:08X} (TOTALSIZE {total_size})"
        version = 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1
        rec: dict[str, Any] = {"total_size": total_size, "magic": magic, "version": version}
        rec["body_crc"] = cur.i32()
        rec["queue_id"] = cur.i32()
        rec["flag"] = cur.i32()
        rec["queue_offset"] = cur.i64()
        rec["physical_offset"] = cur.i64()
        sys_flag = rec["sys_flag"] = cur.i32()
        rec["born_timestamp"] = cur.i64()
        rec["born_host"] = cur.host(bool(sys_flag & BORNHOST_V6_FLAG))
        rec["store_timestamp"] = cur.i64()
        rec["store_host"] = cur.host(bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))
        rec["reconsume_times"] = cur.i32()
        rec["prepared_transaction_offset"] = cur.i64()
        body_len = cur.i32()
        rec["body"] = cur.take(body_len) if body_len > 0 else b""
        topic_len = cur.i16() if version == 2 else cur.i8()
        if topic_len < 0:
            return None, f"negative topic length {topic_len}"
        topic_bytes = cur.take(topic_len)
        rec["topic"] = topic_bytes.decode("utf-8", "replace")
        props_len = cur.i16()
        props_bytes = cur.take(props_len) if props_len > 0 else b""
        rec["properties_raw"] = props_bytes.decode("utf-8", "replace")
        rec["properties"] = decode_properties(rec["properties_raw"])
    except _Truncated:
        return None, "a field runs past the end of the file"
    rec["computed_crc_ok"] = body_crc(rec["body"]) == rec["body_crc"]
    rec["computed_length_ok"] = total_size == cal_msg_length(
        version, sys_flag, body_len, topic_len, props_len)
    rec["body_decompressed"] = _maybe_decompress(rec["body"], sys_flag)
    return rec, ""


def _maybe_decompress(body: bytes, sys_flag: int) -> bytes | None:
    """The uncompressed body for a COMPRESSED_FLAG record using ZLIB (type 3, or 0 = old ZLIB); None if
    the record is not compressed, uses another codec, or does not inflate."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    if (sys_flag & COMPRESSION_TYPE_MASK) >> 8 not in (0, 3):
        return None
    try:
        return zlib.decompress(body)
    except zlib.error:
        return None


def decode_record(buf: bytes, pos: int) -> dict[str, Any] | str | None:
    """Decode the CommitLog record at ``buf[pos:]``, following ``checkMessageAndReturnSize``.

    ``buf`` should be one commit log file (reads past its end make the record invalid). Returns:

    * ``"BLANK"`` for an end-of-file blank record (magic 0xCBD43194),
    * ``None`` for anything invalid (≤ 4 bytes left, TOTALSIZE beyond the buffer, unknown magic,
      a field running past the buffer, negative V1 topic length) and for zeros,
    * otherwise a dict with every field: total_size, magic, version (1|2), body_crc, queue_id, flag,
      queue_offset, physical_offset, sys_flag, born_timestamp, born_host ("ip:port"),
      store_timestamp, store_host, reconsume_times, prepared_transaction_offset, body (stored bytes),
      topic, properties_raw, properties (dict), computed_crc_ok, computed_length_ok, and
      body_decompressed (bytes for zlib-compressed records, else None).

    A dict with computed_crc_ok or computed_length_ok False is a record the broker would reject.
    Never raises.
    """
    return _decode_record_with_reason(buf, pos)[0]


def offset_msg_id(store_host: Host | str, physical_offset: int) -> str:
    """offsetMsgId: uppercase hex of store address + int port + long physical offset.

    >>> offset_msg_id(("127.0.0.1", 9103), 123456)
    '7F0000010000238F000000000001E240'
    """
    return (_encode_host(store_host) + struct.pack(">q", physical_offset)).hex().upper()


# ------------------------------------------------------------------------------------------------
# CommitLog directory (section 1.3)
# ------------------------------------------------------------------------------------------------

def _numbered_files(directory: str, problems: list[str] | None = None) -> list[tuple[int, str]]:
    """Files named by a 20-digit start offset, in name order; other names are reported and skipped."""
    if not os.path.isdir(directory):
        return []
    result = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if len(name) == 20 and name.isdigit() and os.path.isfile(path):
            result.append((int(name), path))
        elif problems is not None:
            problems.append(f"{path}: not a 20-digit offset file name; ignored")
    return result


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@dataclass
class CommitLogScan:
    """What ``scan_commitlog`` found.

    records: valid records in order, each also carrying ``found_at_offset`` (where it really lies).
    problems: everything a broker's recovery would complain about, in words (empty = clean).
    end_offset: the commit log offset just past the last valid record (the recovery point).
    files: (start offset, size) per commit log file.
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    end_offset: int = 0
    files: list[tuple[int, int]] = field(default_factory=list)


def scan_commitlog(store_dir: str) -> CommitLogScan:
    """Walk ``<store>/commitlog/`` like broker recovery: each file from its start until a BLANK record
    (go to the next file) or an invalid record / zeros (stop everything). A stop followed only by zeros
    (to the end of this file and of every later file) is the normal end; anything else is reported in
    ``problems``.
    Records with a bad body CRC or a TOTALSIZE that disagrees with calMsgLength stop the scan
    (``checkCRCOnRecover`` defaults to true). Reads whole files into memory. Never raises on garbage.
    """
    scan = CommitLogScan()
    files = _numbered_files(os.path.join(store_dir, "commitlog"), scan.problems)
    if files:
        scan.end_offset = files[0][0]
    expected_size: int | None = None
    for index, (start, path) in enumerate(files):
        data = _read_file(path)
        scan.files.append((start, len(data)))
        is_last = index == len(files) - 1
        if expected_size is None:
            expected_size = len(data)
        elif len(data) != expected_size:
            scan.problems.append(f"{path}: size {len(data)} differs from the first file's {expected_size}")
        if index > 0 and start != files[index - 1][0] + expected_size:
            scan.problems.append(f"{path}: starts at {start}, expected {files[index - 1][0] + expected_size}")
        if start % max(expected_size, 1):
            scan.problems.append(f"{path}: start {start} is not a multiple of the file size {expected_size}")
        pos = 0
        while True:
            result, reason = _decode_record_with_reason(data, pos)
            if result == "BLANK":
                break  # the rest of this file is filler; go to the next file
            if not isinstance(result, dict):
                # The normal end: only zeros from here on, including any later files (the broker's
                # AllocateMappedFileService leaves a pre-allocated, all-zero next file).
                later_zero = all(not any(_read_file(later)) for _, later in files[index + 1:])
                if any(data[pos:]):
                    scan.problems.append(f"{path} at {start + pos}: scan stops: {reason}")
                elif not later_zero:
                    scan.problems.append(f"{path} at {start + pos}: scan stops: zeros before the end "
                                         "of a file that is followed by data")
                if not later_zero:
                    scan.problems.append(f"files after {path} were ignored")
                return scan
            if not result["computed_crc_ok"] or not result["computed_length_ok"]:
                what = "body CRC mismatch" if not result["computed_crc_ok"] else (
                    f"TOTALSIZE {result['total_size']} disagrees with calMsgLength")
                scan.problems.append(f"{path} at {start + pos}: scan stops: {what}")
                if not is_last:
                    scan.problems.append(f"files after {path} were ignored")
                return scan
            result["found_at_offset"] = start + pos
            if result["physical_offset"] != start + pos:
                scan.problems.append(f"record at {start + pos} says PHYSICALOFFSET {result['physical_offset']}")
            scan.records.append(result)
            pos += result["total_size"]
            scan.end_offset = start + pos
    return scan


def decode_commitlog(store_dir: str) -> list[dict[str, Any]]:
    """The valid records of ``<store>/commitlog/`` in order (see ``scan_commitlog`` for the problems)."""
    return scan_commitlog(store_dir).records


# ------------------------------------------------------------------------------------------------
# ConsumeQueue (section 2.1)
#
#   unit n of a queue sits at logical byte n*20, in file <store>/consumequeue/<topic>/<qid>/<20-digit start>
#     0  8  commit_log_offset   long
#     8  4  size                int
#    12  8  tags_code           long
# ------------------------------------------------------------------------------------------------

def list_consumequeues(store_dir: str) -> list[tuple[str, int]]:
    """(topic, queue_id) for every ``<store>/consumequeue/<topic>/<qid>/`` directory, sorted."""
    root = os.path.join(store_dir, "consumequeue")
    found = []
    if os.path.isdir(root):
        for topic in sorted(os.listdir(root)):
            topic_dir = os.path.join(root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in sorted(os.listdir(topic_dir)):
                if re.fullmatch(r"-?[0-9]+", qid) and os.path.isdir(os.path.join(topic_dir, qid)):
                    found.append((topic, int(qid)))
    return sorted(found)


def decode_consumequeue(store_dir: str, topic: str, queue_id: int) -> list[tuple[int, int, int, int]]:
    """All units of one consume queue as ``(queue_offset, commit_log_offset, size, tags_code)``.

    Files are read in name order; a unit's queue offset is ``(file start + position) / 20``. Leading
    pre-filled blank units ``(0, 2147483647, 0)`` are skipped (they still count in the queue offset),
    and decoding stops at the first invalid unit (offset < 0 or size <= 0, which includes zeros).
    A missing queue gives []. Never raises on garbage.
    """
    units: list[tuple[int, int, int, int]] = []
    leading = True
    queue_dir = os.path.join(store_dir, "consumequeue", topic, str(queue_id))
    for start, path in _numbered_files(queue_dir):
        data = _read_file(path)
        for pos in range(0, len(data) - CQ_UNIT_SIZE + 1, CQ_UNIT_SIZE):
            cur = _Cursor(data, pos)
            offset, size, code = cur.i64(), cur.i32(), cur.i64()
            if leading and (offset, size, code) == CQ_BLANK_UNIT:
                continue
            leading = False
            if offset < 0 or size <= 0:
                return units
            units.append(((start + pos) // CQ_UNIT_SIZE, offset, size, code))
    return units


# ------------------------------------------------------------------------------------------------
# Checkpoint (section 5.1): <store>/checkpoint, 4096 bytes
#     0  8  physic_msg_timestamp
#     8  8  logics_msg_timestamp
#    16  8  index_msg_timestamp
#    24  8  master_flushed_offset
#    32  8  confirm_phy_offset
#    40 ..  zeros
# ------------------------------------------------------------------------------------------------

_CHECKPOINT_FIELDS = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
                      "master_flushed_offset", "confirm_phy_offset")


def decode_checkpoint(store_dir: str) -> dict[str, Any]:
    """The five longs of ``<store>/checkpoint`` plus file_size, min_timestamp
    (``max(0, min(physic, logics) - 3000)``) and problems. Fields that do not fit are None.
    Raises FileNotFoundError if there is no checkpoint file."""
    data = _read_file(os.path.join(store_dir, "checkpoint"))
    result: dict[str, Any] = {"file_size": len(data), "problems": []}
    cur = _Cursor(data, 0)
    for name in _CHECKPOINT_FIELDS:
        try:
            result[name] = cur.i64()
        except _Truncated:
            result[name] = None
    if len(data) != CHECKPOINT_FILE_SIZE:
        result["problems"].append(f"checkpoint is {len(data)} bytes, expected {CHECKPOINT_FILE_SIZE}")
    if any(data[40:]):
        result["problems"].append("checkpoint has non-zero bytes after offset 40")
    physic, logics = result["physic_msg_timestamp"], result["logics_msg_timestamp"]
    result["min_timestamp"] = None if physic is None or logics is None else max(0, min(physic, logics) - 3000)
    return result


def encode_checkpoint(physic_msg_timestamp: int, logics_msg_timestamp: int, index_msg_timestamp: int,
                      master_flushed_offset: int = 0, confirm_phy_offset: int = 0) -> bytes:
    """The 4096 bytes of a checkpoint file."""
    out = bytearray()
    out += struct.pack(">q", physic_msg_timestamp)
    out += struct.pack(">q", logics_msg_timestamp)
    out += struct.pack(">q", index_msg_timestamp)
    out += struct.pack(">q", master_flushed_offset)
    out += struct.pack(">q", confirm_phy_offset)
    out += bytes(CHECKPOINT_FILE_SIZE - len(out))
    return bytes(out)


# ------------------------------------------------------------------------------------------------
# IndexFile (section 3): <store>/index/<yyyyMMddHHmmssSSS>, 40 + slots*4 + index_num*20 bytes
#
#   header   0  8  begin_timestamp     8  8  end_timestamp
#           16  8  begin_phy_offset   24  8  end_phy_offset
#           32  4  hash_slot_count    36  4  index_count (starts at 1; entry 0 is never used)
#   slots   40 + slot*4: int, newest entry number in the bucket (0 = empty)
#   entries 40 + slots*4 + n*20: int key_hash, long phy_offset, int time_diff (s), int prev_index
# ------------------------------------------------------------------------------------------------

def index_key_hash(key: str) -> int:
    """``indexKeyHashMethod``: abs(Java hash), with Integer.MIN_VALUE mapped to 0."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def index_slot(key: str, hash_slot_num: int) -> int:
    """The bucket of ``key`` (``topic#key``) in a file with ``hash_slot_num`` slots.

    >>> index_slot("TopicTest#KEY1", 100)
    16
    """
    return index_key_hash(key) % hash_slot_num


def _index_geometry(file_size: int, hash_slot_num: int | None) -> tuple[int, int] | None:
    """(hash_slot_num, index_num) for a file size. The file does not record them, so without an
    explicit hash_slot_num we assume RocketMQ's default ratio index_num = 4 * hash_slot_num."""
    body = file_size - INDEX_HEADER_SIZE
    if hash_slot_num is None:
        per_slot = INDEX_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
        if body <= 0 or body % per_slot:
            return None
        return body // per_slot, 4 * (body // per_slot)
    entries = body - hash_slot_num * INDEX_SLOT_SIZE
    if hash_slot_num <= 0 or entries < 0 or entries % INDEX_ENTRY_SIZE:
        return None
    return hash_slot_num, entries // INDEX_ENTRY_SIZE


def _index_entry(data: bytes, hash_slot_num: int, entry_no: int) -> tuple[int, int, int, int] | None:
    cur = _Cursor(data, INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + entry_no * INDEX_ENTRY_SIZE)
    try:
        return cur.i32(), cur.i64(), cur.i32(), cur.i32()
    except _Truncated:
        return None


def decode_index_file(path: str, *, hash_slot_num: int | None = None) -> dict[str, Any]:
    """Header fields of an index file, plus geometry, entries and problems.

    Keys: file_size, begin_timestamp, end_timestamp, begin_phy_offset, end_phy_offset, hash_slot_count,
    index_count (as stored; ``index_count_effective`` applies the "≤ 0 reads as 1" load rule),
    hash_slot_num, index_num (None if the geometry cannot be worked out; pass ``hash_slot_num`` when
    index_num != 4 * hash_slot_num), slots ({slot: entry_no} for non-empty slots), entries (list of
    dicts entry_no/key_hash/phy_offset/time_diff/prev_index for 1..index_count-1), problems.
    Never raises on garbage (FileNotFoundError if the file is missing).
    """
    data = _read_file(path)
    result: dict[str, Any] = {"file_size": len(data), "problems": [], "slots": {}, "entries": []}
    cur = _Cursor(data, 0)
    try:
        result["begin_timestamp"] = cur.i64()
        result["end_timestamp"] = cur.i64()
        result["begin_phy_offset"] = cur.i64()
        result["end_phy_offset"] = cur.i64()
        result["hash_slot_count"] = cur.i32()
        result["index_count"] = cur.i32()
    except _Truncated:
        result["problems"].append(f"{path}: shorter than the 40-byte header")
        return result
    result["index_count_effective"] = max(result["index_count"], 1)
    geometry = _index_geometry(len(data), hash_slot_num)
    result["hash_slot_num"], result["index_num"] = geometry if geometry else (None, None)
    if geometry is None:
        result["problems"].append(f"{path}: size {len(data)} does not fit 40 + slots*4 + index_num*20")
        return result
    slots, index_num = geometry
    count = result["index_count_effective"]
    if count > index_num:
        result["problems"].append(f"{path}: index_count {count} exceeds index_num {index_num}")
    for slot in range(slots):
        value = struct.unpack_from(">i", data, INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE)[0]
        if value != 0:
            result["slots"][slot] = value
            if not 0 < value < count:
                result["problems"].append(f"{path}: slot {slot} points at entry {value} (index_count {count})")
    if len(result["slots"]) != result["hash_slot_count"]:
        result["problems"].append(
            f"{path}: hash_slot_count {result['hash_slot_count']} but {len(result['slots'])} non-empty slots")
    for entry_no in range(1, min(count, index_num)):
        entry = _index_entry(data, slots, entry_no)
        if entry is None:
            break
        key_hash, phy_offset, time_diff, prev_index = entry
        result["entries"].append({"entry_no": entry_no, "key_hash": key_hash, "phy_offset": phy_offset,
                                  "time_diff": time_diff, "prev_index": prev_index})
    return result


def index_lookup(path: str, key: str, *, hash_slot_num: int | None = None, max_num: int | None = None,
                 begin: int = 0, end: int = LONG_MAX) -> list[int]:
    """``IndexFile.selectPhyOffset`` over one file: physical offsets whose stored hash equals the hash of
    ``key`` (the full ``topic#key`` string; keys are not compared, only hashes), newest first, within
    [begin, end] ms (default: all time). Returns [] for garbage. Reads the whole file."""
    data = _read_file(path)
    header = _Cursor(data, 0)
    try:
        begin_timestamp = header.i64()
        header.take(8 + 8 + 8 + 4)             # end_timestamp, begin/end_phy_offset, hash_slot_count
        index_count = max(header.i32(), 1)     # load rule: a value <= 0 reads as 1
    except _Truncated:
        return []
    geometry = _index_geometry(len(data), hash_slot_num)
    if geometry is None:
        return []
    slots, index_num = geometry
    key_hash = index_key_hash(key)
    slot_value = struct.unpack_from(">i", data, INDEX_HEADER_SIZE + (key_hash % slots) * INDEX_SLOT_SIZE)[0]
    if slot_value <= 0 or slot_value > index_count or index_count <= 1:
        return []
    found: list[int] = []
    current = slot_value
    for _ in range(index_num):  # bounds a corrupt cycle of prev links
        if max_num is not None and len(found) >= max_num:
            break
        entry = _index_entry(data, slots, current)
        if entry is None:
            break
        stored_hash, phy_offset, time_diff, prev_index = entry
        if time_diff < 0:
            break
        time_read = begin_timestamp + time_diff * 1000
        if stored_hash == key_hash and begin <= time_read <= end:
            found.append(phy_offset)
        if prev_index <= 0 or prev_index > index_count or prev_index == current or time_read < begin:
            break
        current = prev_index
    return found


def index_files(store_dir: str) -> list[str]:
    """Paths of ``<store>/index/*`` files named by 17 digits, oldest first (name order)."""
    directory = os.path.join(store_dir, "index")
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if len(n) == 17 and n.isdigit()]


# ------------------------------------------------------------------------------------------------
# Whole-store consistency check
# ------------------------------------------------------------------------------------------------

def cross_check_store(store_dir: str, *, hash_slot_num: int | None = None, check_index: bool = True,
                      check_checkpoint: bool = True) -> list[str]:
    """Check that commit log, consume queues, index and checkpoint agree the way a broker keeps them.
    Returns a list of problems in words; [] means consistent. Never raises on garbage.

    * commit log scan problems; store timestamps non-decreasing;
    * each NOT/COMMIT record has a CQ unit at (topic, queue_id, queue_offset) = (its offset, size,
      cq_tags_code); PREPARED/ROLLBACK records store queue offset 0 and have no unit;
    * each CQ unit points at such a record; queue offsets per queue run consecutively;
    * (check_index) every UNIQ_KEY and KEYS key of each non-ROLLBACK record is found by index_lookup;
    * (check_checkpoint) the checkpoint is 4096 bytes and its timestamps are not after the last record.
    """
    scan = scan_commitlog(store_dir)
    problems = list(scan.problems)
    by_offset = {rec["found_at_offset"]: rec for rec in scan.records}
    expected_units: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    last_ts = None
    for rec in scan.records:
        where = f"record at {rec['found_at_offset']}"
        if last_ts is not None and rec["store_timestamp"] < last_ts:
            problems.append(f"{where}: store timestamp {rec['store_timestamp']} decreases (previous {last_ts})")
        last_ts = rec["store_timestamp"]
        tran = rec["sys_flag"] & TRANSACTION_ROLLBACK_TYPE
        if tran in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            if rec["queue_offset"] != 0:
                problems.append(f"{where}: transaction type 0x{tran:X} but QUEUEOFFSET {rec['queue_offset']}")
            continue
        try:
            code = cq_tags_code(rec["topic"], rec["properties"], rec["store_timestamp"])
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        queue = expected_units.setdefault((rec["topic"], rec["queue_id"]), {})
        if rec["queue_offset"] in queue:
            problems.append(f"{where}: queue offset {rec['queue_offset']} of {rec['topic']}/{rec['queue_id']} reused")
        queue[rec["queue_offset"]] = (rec["found_at_offset"], rec["total_size"], code)

    for key in sorted(set(expected_units) | set(list_consumequeues(store_dir))):
        expected = expected_units.get(key, {})
        actual = {qo: (off, size, code) for qo, off, size, code in decode_consumequeue(store_dir, *key)}
        name = f"consume queue {key[0]}/{key[1]}"
        offsets = sorted(actual)
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            problems.append(f"{name}: queue offsets are not consecutive")
        for qo in sorted(set(expected) | set(actual)):
            if qo not in actual:
                problems.append(f"{name}: no unit at queue offset {qo} for record at {expected[qo][0]}")
            elif qo not in expected:
                target = by_offset.get(actual[qo][0])
                problems.append(f"{name}: unit {qo} -> {actual[qo]} has no matching record"
                                + ("" if target is None else f" (record there has queue offset {target['queue_offset']})"))
            elif actual[qo] != expected[qo]:
                problems.append(f"{name}: unit {qo} is {actual[qo]}, expected {expected[qo]}")

    if check_index:
        problems += _cross_check_index(store_dir, scan.records, hash_slot_num)
    if check_checkpoint:
        problems += _cross_check_checkpoint(store_dir, last_ts)
    return problems


def _record_index_keys(rec: dict[str, Any]) -> list[str]:
    """The index keys IndexService.buildIndex puts for a record (none for ROLLBACK)."""
    if rec["sys_flag"] & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE:
        return []
    keys = []
    props = rec["properties"]
    if "UNIQ_KEY" in props:
        keys.append(f"{rec['topic']}#{props['UNIQ_KEY']}")
    for key in props.get("KEYS", "").split(" "):
        if key:
            keys.append(f"{rec['topic']}#{key}")
    return keys


def _cross_check_index(store_dir: str, records: list[dict[str, Any]], hash_slot_num: int | None) -> list[str]:
    problems = []
    paths = index_files(store_dir)
    if not paths:
        expected = [key for rec in records for key in _record_index_keys(rec)]
        return ["no index files under <store>/index"] if expected else []
    for path in paths:
        problems += decode_index_file(path, hash_slot_num=hash_slot_num)["problems"]
    for rec in records:
        for key in _record_index_keys(rec):
            hits = [o for p in reversed(paths) for o in index_lookup(p, key, hash_slot_num=hash_slot_num)]
            if rec["found_at_offset"] not in hits:
                problems.append(f"index: key {key!r} does not find record at {rec['found_at_offset']}")
    return problems


def _cross_check_checkpoint(store_dir: str, last_ts: int | None) -> list[str]:
    if not os.path.isfile(os.path.join(store_dir, "checkpoint")):
        return ["no checkpoint file"]
    cp = decode_checkpoint(store_dir)
    problems = list(cp["problems"])
    for name in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
        value = cp.get(name)
        if value is not None and last_ts is not None and value > last_ts:
            problems.append(f"checkpoint {name} {value} is after the last store timestamp {last_ts}")
    return problems


# ------------------------------------------------------------------------------------------------
# Broker-style writer
# ------------------------------------------------------------------------------------------------

def _file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20 zero-padded digits."""
    return f"{offset:020d}"


def _index_file_name(timestamp_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: local time yyyyMMddHHmmssSSS."""
    moment = datetime.datetime.fromtimestamp(timestamp_ms // 1000)
    return moment.strftime("%Y%m%d%H%M%S") + f"{timestamp_ms % 1000:03d}"


def _java_div(a: int, b: int) -> int:
    """Java long division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


class _IndexFileWriter:
    """One index file being filled by ``putKey`` (section 3.2), written through to disk."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int,
                 end_phy_offset: int, end_timestamp: int) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.handle: BinaryIO = open(path, "w+b")
        self.handle.truncate(INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE)
        # The constructor quirk: a new file starts with begin = end = the previous file's end.
        self.begin_timestamp = self.end_timestamp = max(end_timestamp, 0)
        self.begin_phy_offset = self.end_phy_offset = max(end_phy_offset, 0)
        self.hash_slot_count = 0
        self.index_count = 1
        self._write_header()

    def _write_at(self, pos: int, data: bytes) -> None:
        self.handle.seek(pos)
        self.handle.write(data)

    def _write_header(self) -> None:
        header = (struct.pack(">q", self.begin_timestamp) + struct.pack(">q", self.end_timestamp)
                  + struct.pack(">q", self.begin_phy_offset) + struct.pack(">q", self.end_phy_offset)
                  + struct.pack(">i", self.hash_slot_count) + struct.pack(">i", self.index_count))
        self._write_at(0, header)

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add one key; False when the file is full (capacity index_num - 1)."""
        if self.is_full():
            return False
        key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE
        self.handle.seek(slot_pos)
        slot_value = struct.unpack(">i", self.handle.read(4))[0]
        if slot_value <= 0 or slot_value > self.index_count:
            slot_value = 0
        time_diff = _java_div(store_timestamp - self.begin_timestamp, 1000)
        if self.begin_timestamp <= 0:
            time_diff = 0
        time_diff = min(max(time_diff, 0), INT_MAX)
        entry_pos = (INDEX_HEADER_SIZE + self.hash_slot_num * INDEX_SLOT_SIZE
                     + self.index_count * INDEX_ENTRY_SIZE)
        entry = (struct.pack(">i", key_hash) + struct.pack(">q", phy_offset)
                 + struct.pack(">i", time_diff) + struct.pack(">i", slot_value))
        self._write_at(entry_pos, entry)
        self._write_at(slot_pos, struct.pack(">i", self.index_count))
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        return True

    def close(self) -> None:
        self.handle.close()


class BrokerStyleWriter:
    """Write a store directory the way a RocketMQ broker (default config, async flush) leaves it.

    Layout written under ``store_dir``: ``commitlog/<20-digit start>`` files of exactly
    ``commitlog_file_size`` bytes (zero-filled, ended by an 8-byte BLANK record when the next message
    does not fit with 8 bytes to spare), ``consumequeue/<topic>/<qid>/<20-digit logical byte start>``
    files of ``consumequeue_file_size`` bytes (rounded up to a multiple of 20, as the broker does),
    ``index/<yyyyMMddHHmmssSSS>`` files of ``40 + hash_slot_num*4 + index_num*20`` bytes (rolled when
    full) and, on ``close()``, a 4096-byte ``checkpoint``. No config file, no abort or lock file.

    ``preallocate_next_commitlog_file=True`` mimics AllocateMappedFileService, which leaves one extra
    all-zero commit log file after the one in use.

    Single-threaded; each ``append`` does a handful of small positional writes. Use as a context manager
    or call ``close()``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with BrokerStyleWriter(d) as w:
    ...         r = w.append("TopicTest", 0, b"Hello", store_timestamp=1_700_000_000_000)
    ...     (r["physical_offset"], r["queue_offset"], r["size"], len(decode_commitlog(d)))
    (0, 0, 105, 1)
    """

    def __init__(self, store_dir: str, commitlog_file_size: int = 1024 * 1024,
                 consumequeue_file_size: int = 300 * CQ_UNIT_SIZE, *, hash_slot_num: int = 1000,
                 index_num: int = 4000, preallocate_next_commitlog_file: bool = False) -> None:
        if commitlog_file_size < 128:
            raise ValueError(f"commitlog_file_size {commitlog_file_size} is too small to hold a record")
        if consumequeue_file_size <= 0 or hash_slot_num <= 0 or index_num <= 1:
            raise ValueError("consumequeue_file_size, hash_slot_num must be > 0 and index_num > 1")
        self.store_dir = store_dir
        self.commitlog_file_size = commitlog_file_size
        # getMappedFileSizeConsumeQueue rounds up to a multiple of 20.
        self.consumequeue_file_size = -(-consumequeue_file_size // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.preallocate_next_commitlog_file = preallocate_next_commitlog_file
        for sub in ("commitlog", "consumequeue", "index"):
            os.makedirs(os.path.join(store_dir, sub), exist_ok=True)
        self._next_offset = 0                                   # commit log write position
        self._queue_offsets: dict[tuple[str, int], int] = {}    # next queue offset per queue
        self._prefill_pending: set[tuple[str, int]] = set()
        self._last_store_timestamp = 0
        self._handles: dict[str, BinaryIO] = {}
        self._index: _IndexFileWriter | None = None
        self._index_paths: list[str] = []
        self._closed = False

    # -- context manager ------------------------------------------------------------------------
    def __enter__(self) -> BrokerStyleWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- files ----------------------------------------------------------------------------------
    def _handle(self, path: str, size: int) -> BinaryIO:
        """An open handle on ``path``, creating it zero-filled at ``size`` bytes if missing."""
        handle = self._handles.get(path)
        if handle is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.truncate(size)
            handle = self._handles[path] = open(path, "r+b")
        return handle

    def _write(self, path: str, size: int, pos: int, data: bytes) -> None:
        handle = self._handle(path, size)
        handle.seek(pos)
        handle.write(data)

    def _commitlog_path(self, file_start: int) -> str:
        return os.path.join(self.store_dir, "commitlog", _file_name(file_start))

    # -- public API -----------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """The commit log offset where the next record (or BLANK) would be written."""
        return self._next_offset

    @property
    def index_paths(self) -> list[str]:
        """Index files created so far, oldest first."""
        return list(self._index_paths)

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next NOT/COMMIT message to this queue will get."""
        return self._queue_offsets.get((topic, queue_id), 0)

    def set_next_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """Start a queue at ``queue_offset`` instead of 0, as a broker does when a consume queue is rebuilt
        for a queue whose earlier units are gone: the first CQ file is pre-filled with blank units
        ``(0, 2147483647, 0)`` up to that position (``fillPreBlank``). Only before the queue's first message."""
        key = (topic, queue_id)
        if key in self._queue_offsets:
            raise ValueError(f"queue {topic}/{queue_id} already has messages")
        if queue_offset < 0:
            raise ValueError("queue_offset must be >= 0")
        self._queue_offsets[key] = queue_offset
        if queue_offset:
            self._prefill_pending.add(key)

    def append(self, topic: str, queue_id: int, body: bytes, properties: dict[str, str] | None = None, *,
               properties_raw: str | None = None, flag: int = 0, sys_flag: int = 0,
               born_host: Host | str = ("127.0.0.1", 54321), store_host: Host | str = ("127.0.0.1", 10911),
               born_timestamp: int | None = None, store_timestamp: int | None = None,
               reconsume_times: int = 0, prepared_transaction_offset: int = 0,
               compress: bool = False) -> dict[str, Any]:
        """Append one message: commit log record, then its consume-queue unit and index keys.

        ``properties`` is serialized ``name\\x01value\\x02`` in dict order; ``properties_raw`` replaces
        it verbatim (to inject odd strings). ``store_timestamp`` defaults to now and must not be before
        the previous one; ``born_timestamp`` defaults to the store timestamp. IPv6 hosts set sysflag bits
        0x10/0x20. ``compress=True`` stores ``zlib.compress(body, 5)`` and sets sysflag 0x1|0x300.
        Transaction PREPARED (0x4) and ROLLBACK (0xC) records store QUEUEOFFSET 0, do not advance the
        queue and get no consume-queue unit; ROLLBACK records are not indexed.

        Returns physical_offset, queue_offset (as stored), size, store_timestamp, sys_flag, tags_code,
        in_consume_queue, index_keys, blank_at (offset of a BLANK written first, else None), offset_msg_id.
        """
        if self._closed:
            raise ValueError("writer is closed")
        if queue_id < 0:
            raise ValueError(f"queue_id {queue_id} must be >= 0")
        now = time.time_ns() // 1_000_000
        if store_timestamp is None:
            store_timestamp = max(now, self._last_store_timestamp)
        elif store_timestamp < self._last_store_timestamp:
            raise ValueError(f"store_timestamp {store_timestamp} is before the previous "
                             f"{self._last_store_timestamp}; a broker's store times never decrease")
        if born_timestamp is None:
            born_timestamp = store_timestamp
        raw = properties_raw if properties_raw is not None else encode_properties(properties)
        parsed = decode_properties(raw)  # what the broker's dispatch sees
        sys_flag = _with_host_flags(sys_flag, born_host, store_host)
        stored_body = bytes(body)
        if compress:
            stored_body = zlib.compress(stored_body, 5)
            sys_flag |= COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE
        tran = sys_flag & TRANSACTION_ROLLBACK_TYPE
        to_consume_queue = tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
        code = cq_tags_code(topic, parsed, store_timestamp)
        queue_offset = self.next_queue_offset(topic, queue_id) if to_consume_queue else 0

        fields: dict[str, Any] = dict(
            topic=topic, queue_id=queue_id, body=stored_body, properties_raw=raw, flag=flag,
            queue_offset=queue_offset, sys_flag=sys_flag, born_timestamp=born_timestamp,
            born_host=born_host, store_timestamp=store_timestamp, store_host=store_host,
            reconsume_times=reconsume_times, prepared_transaction_offset=prepared_transaction_offset)
        size = len(encode_record(**fields))  # validates too; the offset does not change the length
        if size + END_FILE_MIN_BLANK_LENGTH > self.commitlog_file_size:
            raise ValueError(f"record of {size} bytes cannot fit a {self.commitlog_file_size}-byte commit log file")

        blank_at = None
        file_start = self._next_offset - self._next_offset % self.commitlog_file_size
        remaining = file_start + self.commitlog_file_size - self._next_offset
        if size + END_FILE_MIN_BLANK_LENGTH > remaining:
            blank_at = self._next_offset
            blank = struct.pack(">i", remaining) + struct.pack(">i", BLANK_MAGIC_CODE)
            self._write(self._commitlog_path(file_start), self.commitlog_file_size,
                        self._next_offset - file_start, blank)
            file_start += self.commitlog_file_size
            self._next_offset = file_start
        physical_offset = self._next_offset
        record = encode_record(physical_offset=physical_offset, **fields)
        self._write(self._commitlog_path(file_start), self.commitlog_file_size,
                    physical_offset - file_start, record)
        if self.preallocate_next_commitlog_file:
            self._handle(self._commitlog_path(file_start + self.commitlog_file_size), self.commitlog_file_size)
        self._next_offset = physical_offset + size
        self._last_store_timestamp = store_timestamp

        if to_consume_queue:
            self._put_cq_unit(topic, queue_id, queue_offset, physical_offset, size, code)
            self._queue_offsets[(topic, queue_id)] = queue_offset + 1
        index_keys = _record_index_keys({"sys_flag": sys_flag, "topic": topic, "properties": parsed})
        if tran != TRANSACTION_ROLLBACK_TYPE:
            self._build_index(index_keys, physical_offset, store_timestamp)
        return {"physical_offset": physical_offset, "queue_offset": queue_offset, "size": size,
                "store_timestamp": store_timestamp, "sys_flag": sys_flag,
                "tags_code": code, "in_consume_queue": to_consume_queue, "index_keys": index_keys,
                "blank_at": blank_at, "offset_msg_id": offset_msg_id(store_host, physical_offset)}

    def _put_cq_unit(self, topic: str, queue_id: int, queue_offset: int,
                     commit_log_offset: int, size: int, code: int) -> None:
        logical = queue_offset * CQ_UNIT_SIZE
        file_start = logical - logical % self.consumequeue_file_size
        path = os.path.join(self.store_dir, "consumequeue", topic, str(queue_id), _file_name(file_start))
        if (topic, queue_id) in self._prefill_pending:
            self._prefill_pending.discard((topic, queue_id))
            blank = struct.pack(">q", 0) + struct.pack(">i", INT_MAX) + struct.pack(">q", 0)
            self._write(path, self.consumequeue_file_size, 0, blank * ((logical - file_start) // CQ_UNIT_SIZE))
        unit = struct.pack(">q", commit_log_offset) + struct.pack(">i", size) + struct.pack(">q", code)
        self._write(path, self.consumequeue_file_size, logical - file_start, unit)

    def _build_index(self, keys: list[str], phy_offset: int, store_timestamp: int) -> None:
        """IndexService.buildIndex: the index file exists once any non-ROLLBACK record is dispatched."""
        if self._index is None:
            self._roll_index(store_timestamp)
        for key in keys:
            assert self._index is not None
            if not self._index.put_key(key, phy_offset, store_timestamp):
                self._roll_index(store_timestamp)
                self._index.put_key(key, phy_offset, store_timestamp)

    def _roll_index(self, now_ms: int) -> None:
        end_phy, end_ts = 0, 0
        if self._index is not None:
            end_phy, end_ts = self._index.end_phy_offset, self._index.end_timestamp
            self._index.close()
        name_ms = now_ms
        while os.path.exists(os.path.join(self.store_dir, "index", _index_file_name(name_ms))):
            name_ms += 1  # two files in one millisecond: keep names unique and ordered
        path = os.path.join(self.store_dir, "index", _index_file_name(name_ms))
        self._index = _IndexFileWriter(path, self.hash_slot_num, self.index_num, end_phy, end_ts)
        self._index_paths.append(path)

    def close(self) -> None:
        """Close all files and write the checkpoint (physic/logics/index = last store timestamp;
        master_flushed_offset and confirm_phy_offset 0, as a broker that never restarted leaves them).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        if self._index is not None:
            self._index.close()
        ts = self._last_store_timestamp
        with open(os.path.join(self.store_dir, "checkpoint"), "wb") as f:
            f.write(encode_checkpoint(ts, ts, ts))
