"""Tests for mqlite.commitlog: RocketMQ's AppendCallbackTest and record-format facts, plus round trips.

Byte positions are written out from the reference (rocketmq-formats.md section 1.1) rather than
taken from the module's structs, and records are compared with tests/refformat.py, an independent
encoder/decoder written from the same reference.
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqlite.clock import ManualClock
from mqlite.commitlog import BatchDispatch, CommitLog
from mqlite.record import (
    BLANK,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER,
    MAGIC_V1,
    MAGIC_V2,
    DispatchRequest,
    StoredMessage,
    check_record,
    decode_message,
    encode_records,
    record_length,
)
from mqlite.config import StoreConfig
from mqlite.errors import MessageNotFoundError, MQClientError
from mqlite.message import SysFlag, java_string_hash
from mqlite.store import MessageStore

sys.path.insert(0, os.path.dirname(__file__))
import refformat as rf  # noqa: E402
from support import deadline  # noqa: E402

T0 = 1_700_000_000_000
SEGMENT = 4096  # the smallest segment StoreConfig allows
STORE_HOST = ("127.0.0.1", 10911)  # mqlite writes this as both born and store host by default



def _config(**overrides: object) -> StoreConfig:
    settings_: dict[str, object] = dict(commitlog_file_size=SEGMENT, consumequeue_file_size=20 * 100,
                                        max_hash_slot_num=1000, max_index_num=4000)
    settings_.update(overrides)
    return StoreConfig(**settings_)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def log(tmp_path: Path, clock: ManualClock) -> Iterator[CommitLog]:
    commitlog = CommitLog(str(tmp_path / "commitlog"), _config(), clock)
    yield commitlog
    commitlog.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(str(tmp_path / "store"), _config(commitlog_file_size=1 << 20)) as s:
        yield s


def _raw(log: CommitLog, offset: int, size: int) -> bytes:
    mf = log.mapped_files.find(offset)
    assert mf is not None
    pos = offset - mf.file_from_offset
    return bytes(mf.mm[pos : pos + size])


def _int(raw: bytes, at: int) -> int:
    return struct.unpack_from(">i", raw, at)[0]


def _long(raw: bytes, at: int) -> int:
    return struct.unpack_from(">q", raw, at)[0]


def _body_of_size(total: int, topic: str = "T") -> bytes:
    """A body that makes a property-less IPv4/V1 record exactly `total` bytes."""
    return b"b" * (total - 91 - len(topic.encode()))


# -- constants and sizes -----------------------------------------------------------------------------------
def test_struct_sizes_and_magic_codes() -> None:
    assert HEADER.size == 88  # TOTALSIZE .. BODY length, IPv4 hosts
    assert BLANK.size == END_FILE_MIN_BLANK_LENGTH == 8
    assert MAGIC_V1 == -626843481 and MAGIC_V1 & 0xFFFFFFFF == 0xDAA320A7
    assert MAGIC_V2 == -626843477 and MAGIC_V2 & 0xFFFFFFFF == 0xDAA320AB
    assert BLANK_MAGIC == -875286124 and BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194


def test_record_length_formula() -> None:
    assert record_length(0, 5, 9, 0) == 105  # "TopicTest", b"Hello", no properties
    assert record_length(0, 0, 0, 0) == 91
    assert record_length(0, 5, 9, 0, v2=True) == 106  # a 2-byte topic length
    assert record_length(SysFlag.BORNHOST_V6, 5, 9, 0) == 117
    assert record_length(SysFlag.BORNHOST_V6 | SysFlag.STOREHOSTADDRESS_V6, 5, 9, 0) == 129
    for body, topic, props in [(0, 1, 0), (100, 20, 300), (4096, 200, 32767)]:
        for v2 in (False, True):
            expected = rf.cal_msg_length(2 if v2 else 1, 0, body, topic, props)
            assert record_length(0, body, topic, props, v2=v2) == expected


@pytest.mark.parametrize("data, crc", [
    (b"hello!q!", 1020379427), (b"a", 1756872259), (b"body", 1537739698),
    (b"Once, there was a chance for me!", 151131488), (b"", 0),
])
def test_body_crc_is_zlib_crc32_without_the_top_bit(log: CommitLog, data: bytes, crc: int) -> None:
    assert zlib.crc32(data) & 0x7FFFFFFF == crc
    r = log.append("TopicTest", 0, data)
    assert _int(_raw(log, r.commit_log_offset, r.wrote_bytes), 8) == crc


# -- one record, every field -------------------------------------------------------------------------------
def test_topic_test_hello_is_105_bytes_and_every_field_reads_back(log: CommitLog, clock: ManualClock) -> None:
    log.append("Other", 3, b"first")  # so that the record under test is not at offset 0
    clock.advance(10)
    r = log.append("TopicTest", 3, b"Hello", flag=7, born_timestamp=T0 - 5, reconsume_times=2,
                   prepared_transaction_offset=1234)
    assert r.wrote_bytes == 105
    assert r.queue_offset == 0
    assert r.store_timestamp == T0 + 10
    raw = _raw(log, r.commit_log_offset, 105)

    # Raw reads at the positions RocketMQ names (MessageDecoder constants, damageCommitLog's +84).
    assert _int(raw, 0) == 105  # TOTALSIZE
    assert _int(raw, 4) == MAGIC_V1  # MESSAGE_MAGIC_CODE_POSITION
    assert _int(raw, 8) == zlib.crc32(b"Hello") & 0x7FFFFFFF
    assert _int(raw, 12) == 3  # QUEUEID
    assert _int(raw, 16) == 7  # MESSAGE_FLAG_POSITION
    assert _long(raw, 20) == 0  # QUEUE_OFFSET_POSITION
    assert _long(raw, 28) == r.commit_log_offset  # PHY_POS_POSITION
    assert _int(raw, 36) == 0  # SYSFLAG_POSITION
    assert _long(raw, 40) == T0 - 5  # BORNTIMESTAMP
    assert raw[48:52] == bytes([127, 0, 0, 1]) and _int(raw, 52) == 10911  # BORNHOST
    assert _long(raw, 56) == T0 + 10  # MESSAGE_STORE_TIMESTAMP_POSITION
    assert raw[64:68] == bytes([127, 0, 0, 1]) and _int(raw, 68) == 10911  # STOREHOSTADDRESS
    assert _int(raw, 72) == 2  # RECONSUMETIMES
    assert _long(raw, 76) == 1234  # PREPARED TRANSACTION OFFSET
    assert _int(raw, 84) == 5  # BODY length
    assert raw[88:93] == b"Hello"
    assert raw[93] == 9 and raw[94:103] == b"TopicTest"  # V1: 1-byte topic length
    assert struct.unpack_from(">h", raw, 103)[0] == 0  # no properties

    # The independent encoder produces the same bytes.
    assert raw == rf.encode_record(
        topic="TopicTest", queue_id=3, body=b"Hello", flag=7, queue_offset=0,
        physical_offset=r.commit_log_offset, born_timestamp=T0 - 5, born_host=STORE_HOST,
        store_timestamp=T0 + 10, store_host=STORE_HOST, reconsume_times=2, prepared_transaction_offset=1234)

    for msg in (decode_message(raw, "b1"), StoredMessage(raw, "b1")):
        assert msg.topic == "TopicTest"
        assert msg.body == b"Hello"
        assert msg.queue_id == 3
        assert msg.flag == 7
        assert msg.queue_offset == 0
        assert msg.commit_log_offset == r.commit_log_offset
        assert msg.sys_flag == 0
        assert msg.born_timestamp == T0 - 5
        assert msg.store_timestamp == T0 + 10
        assert msg.born_host == "127.0.0.1:10911"
        assert msg.store_host == "127.0.0.1:10911"
        assert msg.reconsume_times == 2
        assert msg.prepared_transaction_offset == 1234
        assert msg.store_size == 105
        assert msg.body_crc == zlib.crc32(b"Hello") & 0x7FFFFFFF
        assert msg.properties == {}
        assert msg.broker_name == "b1"
        assert msg.offset_msg_id == rf.offset_msg_id(STORE_HOST, r.commit_log_offset) == r.offset_msg_id
        assert msg.msg_id == msg.offset_msg_id  # no UNIQ_KEY


def test_properties_are_written_with_a_trailing_separator(log: CommitLog) -> None:
    r = log.append("TopicTest", 0, b"x", {"TAGS": "TagA", "KEYS": "k1 k2"})
    raw = _raw(log, r.commit_log_offset, r.wrote_bytes)
    props = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02".encode()
    assert raw.endswith(struct.pack(">h", len(props)) + props)
    assert r.wrote_bytes == 91 + 1 + 9 + len(props)
    decoded = rf.decode_record(raw, 0)
    assert isinstance(decoded, dict)
    assert decoded["properties"] == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert decoded["computed_crc_ok"] and decoded["computed_length_ok"]


def test_born_timestamp_defaults_to_the_store_time(log: CommitLog, clock: ManualClock) -> None:
    clock.advance(123)
    r = log.append("T", 0, b"x")
    msg = decode_message(_raw(log, r.commit_log_offset, r.wrote_bytes), "b")
    assert msg.born_timestamp == msg.store_timestamp == T0 + 123


def test_store_timestamps_never_decrease_when_the_clock_steps_back(log: CommitLog, clock: ManualClock) -> None:
    first = log.append("T", 0, b"a")
    clock.advance(-5000)
    second = log.append("T", 0, b"b")
    assert second.store_timestamp == first.store_timestamp == T0
    raw = _raw(log, second.commit_log_offset, second.wrote_bytes)
    assert _long(raw, 56) == T0


def test_queue_offsets_are_assigned_per_topic_and_queue(log: CommitLog) -> None:
    offsets = [log.append(t, q, b"x").queue_offset for t, q in
               [("A", 0), ("A", 0), ("A", 1), ("B", 0), ("A", 0), ("A", 1)]]
    assert offsets == [0, 1, 0, 0, 2, 1]
    assert log.topic_queue_table == {("A", 0): 3, ("A", 1): 2, ("B", 0): 1}


# -- end of segment ------------------------------------------------------------------------------------------
def test_a_record_that_does_not_fit_leaves_a_blank_and_moves_on(log: CommitLog) -> None:
    # AppendCallbackTest.testAppendMessageEndOfFile in our words.
    first = log.append("T", 0, _body_of_size(100))
    assert (first.commit_log_offset, first.wrote_bytes) == (0, 100)
    size = SEGMENT - 100 - 8 + 1  # one byte too many: fewer than 8 bytes would remain
    second = log.append("T", 0, _body_of_size(size))
    assert second.commit_log_offset == SEGMENT
    assert second.queue_offset == 1
    blank = _raw(log, 100, 8)
    assert blank == struct.pack(">ii", SEGMENT - 100, BLANK_MAGIC)
    assert blank == struct.pack(">I", SEGMENT - 100) + bytes.fromhex("CBD43194")
    assert log.mapped_files.files[0].wrote_position == SEGMENT
    assert len(log.mapped_files.files) == 2
    assert check_record(log.mapped_files.files[0].mm, 100, SEGMENT, True) == (0, None)
    assert rf.decode_record(_raw(log, 0, SEGMENT), 100) == "BLANK"


def test_a_record_leaving_exactly_eight_bytes_fits(log: CommitLog) -> None:
    log.append("T", 0, _body_of_size(100))
    r = log.append("T", 0, _body_of_size(SEGMENT - 100 - 8))
    assert r.commit_log_offset == 100
    assert len(log.mapped_files.files) == 1
    # The next record of any size closes the segment with an 8-byte blank.
    nxt = log.append("T", 0, b"")
    assert nxt.commit_log_offset == SEGMENT
    assert _raw(log, SEGMENT - 8, 8) == struct.pack(">ii", 8, BLANK_MAGIC)


def test_scan_walks_records_across_segments_skipping_blanks(log: CommitLog) -> None:
    offsets = [log.append("T", i % 3, bytes([i]) * (i * 37 % 900)).commit_log_offset for i in range(40)]
    assert len(log.mapped_files.files) > 3
    seen = list(log.scan(0))
    assert [offset for offset, _, _ in seen] == offsets
    for i, (offset, size, request) in enumerate(seen):
        assert request is not None
        assert request.commit_log_offset == offset and request.size == size
        assert request.queue_id == i % 3
        assert request.topic == "T"
    assert rf.scan_commitlog(str(Path(log.mapped_files.directory).parent)).problems == []


def test_a_record_bigger_than_a_segment_is_refused(log: CommitLog) -> None:
    log.append("T", 0, b"x")
    before = log.max_offset
    with pytest.raises(MQClientError):
        log.append("T", 0, _body_of_size(SEGMENT - 7))
    assert log.max_offset == before
    assert log.append("T", 0, b"y").queue_offset == 1  # the refused record took no queue offset


def test_a_batch_that_does_not_fit_moves_whole_to_the_next_segment(log: CommitLog) -> None:
    # AppendCallbackTest.testAppendMessageBatchEndOfFile: the whole batch goes to the next file.
    log.append("T", 0, _body_of_size(3000))
    bodies = [b"m%d" % i + b"." * 40 for i in range(10)]  # 10 records of 135 bytes: 1350 > 1096 left
    r = log.append_batch("T", 0, bodies)
    assert r.msg_num == 10
    assert r.commit_log_offset == SEGMENT
    assert r.queue_offset == 1
    assert _raw(log, 3000, 8) == struct.pack(">ii", SEGMENT - 3000, BLANK_MAGIC)
    assert r.commit_log_offsets is not None and r.commit_log_offsets[0] == SEGMENT
    expected_offsets = [SEGMENT + sum(91 + 1 + len(b) for b in bodies[:i]) for i in range(10)]
    assert r.commit_log_offsets == expected_offsets
    assert r.wrote_bytes == sum(91 + 1 + len(b) for b in bodies)
    for i, offset in enumerate(expected_offsets):
        msg = decode_message(_raw(log, offset, 91 + 1 + len(bodies[i])), "b")
        assert msg.body == bodies[i]
        assert msg.queue_offset == 1 + i
        assert msg.commit_log_offset == offset
    assert len(r.offset_msg_id.split(",")) == 10
    assert log.topic_queue_table[("T", 0)] == 11


def _encoded(topic: str, bodies: list[bytes], heads: list[dict[str, str]], head_index: list[int],
             ids: list[str] | None, flags: list[int], born: int) -> tuple[bytearray, Any, list[dict[str, str]]]:
    """The Spark task's encoding of the messages (`encode_records`), and the property maps `append_batch`
    gets for the same messages (each head, then its UNIQ_KEY)."""
    from mqlite.message import encode_properties

    blocks = [encode_properties(h).encode() + (b"UNIQ_KEY\x01" if ids else b"") for h in heads]
    suffixes = None
    if ids:
        suffixes = np.frombuffer("".join(i + "\x02" for i in ids).encode(), dtype=np.uint8).reshape(len(ids), -1)
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in bodies])])
    records, sizes = encode_records(topic, b"".join(bodies), offsets, blocks, np.array(head_index), suffixes,
                                    flags=np.array(flags), born_timestamp=born)
    maps = [{**heads[h], **({"UNIQ_KEY": ids[i]} if ids else {})} for i, h in enumerate(head_index)]
    return bytearray(records), sizes, maps


ENCODED_CASES = {
    # heads of different lengths, bodies of different lengths: the three-piece join
    "mixed": ("T", [b"one", b"two" * 30, b"three", b"four"],
              [{"TAGS": "TagA", "KEYS": "k1 k2"}, {"WAIT": "true"}], [0, 1, 1, 0], True),
    # one head, one body length: the 2-D path
    "one size": ("T", [b"x" * 10] * 5, [{"WAIT": "true"}], [0] * 5, True),
    # heads of one length, bodies of different lengths: the two-piece join
    "one tail length": ("T", [b"a", b"bb" * 9, b"c" * 3], [{"a": "1"}, {"b": "2"}], [0, 1, 0], True),
    # producerProperties=false: no UNIQ_KEY, empty property blocks
    "bare": ("T", [b"x" * 10, b"yy"], [{}], [0, 0], False),
    # a topic of more than 127 UTF-8 bytes: MAGIC_V2 and a 2-byte topic length
    "v2 topic": ("\u00e9" * 70, [b"x" * 10] * 3, [{"a": "\u00e9t\u00e9"}, {"b": "2"}], [0, 1, 0], True),
}


@pytest.mark.parametrize("case", list(ENCODED_CASES))
def test_encoded_records_are_the_bytes_of_a_batch_of_maps(tmp_path: Path, case: str) -> None:
    # The Spark path (whole records built by the tasks, fields filled in at commit) against the
    # producer's batch: same records byte for byte, same units, same index keys (hashed).
    from mqlite.indexfile import index_key_hash, index_key_names

    topic, bodies, heads, head_index, with_ids = ENCODED_CASES[case]
    ids = [f"{i:032X}" for i in range(len(bodies))] if with_ids else None
    flags = [i % 3 for i in range(len(bodies))]
    records, sizes, maps = _encoded(topic, bodies, heads, head_index, ids, flags, T0 - 5)
    by_maps = CommitLog(str(tmp_path / "maps"), _config(), ManualClock())
    encoded = CommitLog(str(tmp_path / "encoded"), _config(), ManualClock())
    try:
        for clog in (by_maps, encoded):  # both start mid-segment, at the same offset and queue offset
            clog.append(topic, 2, b"before")
        r1 = by_maps.append_batch(topic, 2, bodies, maps, flags=flags, born_timestamp=T0 - 5)
        codes = np.array([java_string_hash(m["TAGS"]) if "TAGS" in m else 0 for m in maps])
        names = [index_key_names(topic, m.get("UNIQ_KEY"), m.get("KEYS")) for m in maps]
        key_rows = np.array([i for i, n in enumerate(names) for _ in n], dtype=np.int64)
        key_hashes = np.array([index_key_hash(k) for n in names for k in n], dtype=np.int64)
        r2 = encoded.append_encoded_records(topic, 2, records, sizes, codes, key_hashes, key_rows)
        assert r1 == r2
        assert _raw(by_maps, 0, r1.commit_log_offset + r1.wrote_bytes) == \
            _raw(encoded, 0, r2.commit_log_offset + r2.wrote_bytes)
        assert bytes(records) == _raw(by_maps, r1.commit_log_offset, r1.wrote_bytes)  # filled in place
        batch1, batch2 = by_maps.dispatch_queue[-1], encoded.dispatch_queue[-1]
        assert isinstance(batch1, BatchDispatch) and isinstance(batch2, BatchDispatch)
        assert batch1[:4] == batch2[:4] and batch1.store_timestamp == batch2.store_timestamp
        assert list(batch1.sizes) == list(batch2.sizes) and list(batch1.tags_codes or [0] * len(bodies)) == list(
            batch2.tags_codes)  # type: ignore[arg-type]
        offsets = r1.commit_log_offsets or []
        if len(key_hashes):
            assert batch2.key_hashes is not None and batch2.key_offsets is not None
            assert batch2.key_hashes.tolist() == key_hashes.tolist()
            assert batch2.key_offsets.tolist() == [offsets[i] for i in key_rows]
        else:  # nothing to index: the dispatch (queued only because this log has no unit queues) has no keys
            assert batch2.key_hashes is None and not any(batch1.keys or []) and not any(batch1.uniq_keys or [])
        for offset, size, body in zip(offsets, sizes.tolist(), bodies):
            assert rf.decode_record(_raw(encoded, offset, size), 0)["body"] == body  # type: ignore[index]
    finally:
        by_maps.close()
        encoded.close()


def test_encoded_records_that_do_not_fit_move_whole_to_the_next_segment(log: CommitLog) -> None:
    records, sizes, _ = _encoded("T", [b"x" * 600] * 4, [{"WAIT": "true"}], [0] * 4, None, [0] * 4, T0)
    first = log.append("T", 0, b"y" * 1500)  # 1592 bytes: the 4 x 702 bytes of the batch do not fit after it
    r = log.append_encoded_records("T", 0, records, sizes)
    assert r.commit_log_offset == SEGMENT and r.queue_offset == 1
    raw = _raw(log, 0, SEGMENT)
    blank_at = first.wrote_bytes
    assert BLANK.unpack_from(raw, blank_at) == (SEGMENT - blank_at, BLANK_MAGIC)
    assert [(o, m.queue_offset) for o, m in ((o, decode_message(_raw(log, o, int(s)), "b"))
                                             for o, s in zip(r.commit_log_offsets or [], sizes))] == \
        [(SEGMENT + i * int(sizes[0]), 1 + i) for i in range(4)]


@pytest.mark.parametrize("damage", ["size", "magic", "sys flag", "topic", "body length", "read-only", "sum",
                                    "huge"])
def test_malformed_encoded_records_store_nothing(log: CommitLog, damage: str) -> None:
    records, sizes, _ = _encoded("T", [b"ab", b"cde"], [{"WAIT": "true"}], [0, 0], None, [0, 0], T0)
    second = int(sizes[0])
    buffer: Any = records
    if damage == "size":
        struct.pack_into(">i", records, second, int(sizes[1]) + 1)
    elif damage == "magic":
        struct.pack_into(">i", records, second + 4, MAGIC_V2)
    elif damage == "sys flag":
        struct.pack_into(">i", records, second + 36, SysFlag.BORNHOST_V6)
    elif damage == "topic":
        records[second + 88 + 3 + 1] = ord("X")
    elif damage == "body length":
        struct.pack_into(">i", records, second + 84, 10_000)
    elif damage == "read-only":
        buffer = bytes(records)
    elif damage == "sum":
        sizes = sizes[:1]
    else:
        records, sizes, _ = _encoded("T", [b"x" * 1000] * 5, [{}], [0] * 5, None, [0] * 5, T0)
        buffer = records
    with pytest.raises(MQClientError):
        log.append_encoded_records("T", 0, buffer, sizes)
    assert log.max_offset == 0 and not log.dispatch_queue and not log.topic_queue_table


def test_a_batch_bigger_than_a_segment_is_refused_before_anything_is_stored(log: CommitLog) -> None:
    before = log.max_offset
    with pytest.raises(MQClientError, match="batch"):
        log.append_batch("T", 0, [b"x" * 1000] * 5)
    with pytest.raises(MQClientError):
        log.append_batch("T", 0, [])
    with pytest.raises(MQClientError):
        log.append_batch("T", 0, [b"ok", "not bytes"])  # type: ignore[list-item]
    assert log.max_offset == before
    assert ("T", 0) not in log.topic_queue_table


# -- V2 topics, IPv6 hosts -----------------------------------------------------------------------------------------
def test_a_topic_over_127_chars_uses_magic_v2(log: CommitLog) -> None:
    topic = "%RETRY%" + "g" * 150
    r = log.append(topic, 0, b"Hello", {"k": "v"})
    raw = _raw(log, r.commit_log_offset, r.wrote_bytes)
    assert _int(raw, 4) == MAGIC_V2
    assert r.wrote_bytes == 91 + 5 + 1 + 157 + 4  # one extra byte for the short topic length, "k\1v\2"
    assert struct.unpack_from(">h", raw, 84 + 4 + 5)[0] == 157  # V2: 2-byte topic length after the body
    assert raw[95 : 95 + 157] == topic.encode()
    msg = decode_message(raw, "b")
    assert msg.topic == topic and msg.body == b"Hello" and msg.properties == {"k": "v"}
    size, request = check_record(raw, 0, len(raw), True)
    assert size == r.wrote_bytes and request is not None and request.topic == topic
    decoded = rf.decode_record(raw, 0)
    assert isinstance(decoded, dict) and decoded["version"] == 2 and decoded["topic"] == topic


def test_a_topic_over_127_utf8_bytes_stays_readable_by_rocketmq(log: CommitLog) -> None:
    topic = "é" * 100  # 100 characters, 200 UTF-8 bytes
    try:
        r = log.append(topic, 0, b"x")
    except MQClientError:
        return  # refusing it is a correct answer
    decoded = rf.decode_record(_raw(log, r.commit_log_offset, r.wrote_bytes), 0)
    assert isinstance(decoded, dict) and decoded["topic"] == topic


@pytest.mark.parametrize("length, magic", [(127, MAGIC_V1), (128, MAGIC_V2), (255, MAGIC_V2)])
def test_the_v2_threshold_is_127_characters(log: CommitLog, length: int, magic: int) -> None:
    topic = "t" * length
    r = log.append(topic, 0, b"")
    raw = _raw(log, r.commit_log_offset, r.wrote_bytes)
    assert _int(raw, 4) == magic
    assert decode_message(raw, "b").topic == topic


def test_an_ipv6_born_host_sets_the_flag_and_decodes_back(log: CommitLog) -> None:
    r = log.append("TopicTest", 0, b"Hello", born_host="[::1]:1234", born_timestamp=T0 - 1)
    assert r.wrote_bytes == 105 + 12
    raw = _raw(log, r.commit_log_offset, r.wrote_bytes)
    assert _int(raw, 36) & SysFlag.BORNHOST_V6 == 0x10
    assert _int(raw, 36) & SysFlag.STOREHOSTADDRESS_V6 == 0
    assert raw[48:64] == bytes(15) + b"\x01" and _int(raw, 64) == 1234
    assert _long(raw, 56 + 12) == T0  # the store timestamp moves by 12
    assert _int(raw, 84 + 12) == 5
    msg = decode_message(raw, "b")
    assert msg.born_host == "[::1]:1234"
    assert msg.store_host == "127.0.0.1:10911"
    assert msg.sys_flag & 0x10
    assert msg.body == b"Hello" and msg.topic == "TopicTest" and msg.born_timestamp == T0 - 1
    assert check_record(raw, 0, len(raw), True)[0] == 117
    assert raw == rf.encode_record(
        topic="TopicTest", queue_id=0, body=b"Hello", queue_offset=0, physical_offset=r.commit_log_offset,
        sys_flag=0, born_timestamp=T0 - 1, born_host="[::1]:1234", store_timestamp=T0, store_host=STORE_HOST)


def test_an_ipv4_born_host_is_kept(log: CommitLog) -> None:
    r = log.append("T", 0, b"x", born_host="10.1.2.3:5555")
    msg = decode_message(_raw(log, r.commit_log_offset, r.wrote_bytes), "b")
    assert msg.born_host == "10.1.2.3:5555"
    assert msg.sys_flag == 0


def test_ipv6_with_a_v2_topic(log: CommitLog) -> None:
    topic = "%RETRY%" + "x" * 130
    r = log.append(topic, 1, b"body", {"a": "b"}, born_host="[2001:db8::7]:9")
    raw = _raw(log, r.commit_log_offset, r.wrote_bytes)
    assert _int(raw, 4) == MAGIC_V2
    msg = decode_message(raw, "b")
    assert (msg.topic, msg.body, msg.born_host, msg.properties) == (topic, b"body", "[2001:db8::7]:9", {"a": "b"})
    assert check_record(raw, 0, len(raw), True)[0] == len(raw)


# -- transactions ------------------------------------------------------------------------------------------------------
def test_prepared_and_rollback_records_take_no_queue_offset(store: MessageStore) -> None:
    n0 = store.put("Tx", 0, b"normal-0")
    prepared = store.put("Tx", 0, b"half", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE)
    rollback = store.put("Tx", 0, b"rollback", sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE,
                         prepared_transaction_offset=prepared.commit_log_offset)
    commit = store.put("Tx", 0, b"commit", sys_flag=SysFlag.TRANSACTION_COMMIT_TYPE,
                       prepared_transaction_offset=prepared.commit_log_offset)
    n1 = store.put("Tx", 0, b"normal-1")
    assert [r.queue_offset for r in (n0, prepared, rollback, commit, n1)] == [0, 0, 0, 1, 2]
    assert store.wait_dispatched()
    assert store.max_offset("Tx", 0) == 3
    bodies = [m.body for m in store.get_messages("Tx", 0, 0).messages]
    assert bodies == [b"normal-0", b"commit", b"normal-1"]
    half = store.look_message_by_offset(prepared.commit_log_offset)
    assert half.queue_offset == 0 and half.sys_flag & 0xC == 0x4 and half.body == b"half"
    rb = store.look_message_by_offset(rollback.commit_log_offset)
    assert rb.sys_flag & 0xC == 0xC and rb.prepared_transaction_offset == prepared.commit_log_offset


def test_look_up_by_commit_log_offset(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path / "s"), _config()) as store:
        first = store.put("T", 0, _body_of_size(3000))
        second = store.put("T", 0, _body_of_size(2000))  # does not fit: a blank at 3000, then 4096
        assert second.commit_log_offset == SEGMENT
        assert store.look_message_by_offset(first.commit_log_offset).store_size == 3000
        assert store.look_message_by_offset(SEGMENT).queue_offset == 1
        for nowhere in (3000, 17, SEGMENT + 5, 10 * SEGMENT, -1):
            with pytest.raises(MessageNotFoundError):
                store.look_message_by_offset(nowhere)
        assert store.commitlog.read(3000, 8) is None  # the blank is not a record


# -- check_record --------------------------------------------------------------------------------------------------------
def _one_record(log: CommitLog) -> bytes:
    r = log.append("TopicTest", 2, b"Hello world", {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"})
    return _raw(log, r.commit_log_offset, r.wrote_bytes)


def test_check_record_describes_a_valid_record(log: CommitLog) -> None:
    raw = _one_record(log)
    size, request = check_record(raw + bytes(50), 0, len(raw) + 50, True)
    assert size == len(raw)
    assert request is not None
    assert request.topic == "TopicTest" and request.queue_id == 2
    assert request.size == len(raw)
    assert request.tags_code == java_string_hash("TagA") == 2598919
    assert request.keys == "k1 k2" and request.uniq_key == "U1"
    assert request.store_timestamp == T0
    assert request.sys_flag == 0


def test_check_record_on_zeros_garbage_and_blank(log: CommitLog) -> None:
    assert check_record(bytes(4096), 0, 4096, True) == (-1, None)
    assert check_record(b"\xff" * 4096, 0, 4096, True) == (-1, None)
    assert check_record(os.urandom(4096), 0, 4096, True)[0] in (-1, 0)
    blank = struct.pack(">ii", 500, BLANK_MAGIC) + bytes(492)
    assert check_record(blank, 0, 500, True) == (0, None)
    assert check_record(b"\0\0\0", 0, 3, True) == (-1, None)
    raw = _one_record(log)
    assert check_record(raw, 0, 4, True) == (-1, None)  # 4 bytes or fewer remain


def test_check_record_rejects_a_torn_record(log: CommitLog) -> None:
    raw = _one_record(log)
    for cut in (5, 20, 88, len(raw) - 1):
        assert check_record(raw[:cut], 0, cut, True) == (-1, None)
        assert check_record(raw, 0, cut, True) == (-1, None)  # limit short of TOTALSIZE


def test_check_record_checks_the_body_crc_when_asked(log: CommitLog) -> None:
    raw = bytearray(_one_record(log))
    raw[88] ^= 0x01  # first body byte
    assert check_record(bytes(raw), 0, len(raw), True) == (-1, None)
    assert check_record(bytes(raw), 0, len(raw), False)[0] == len(raw)


def test_check_record_rejects_a_size_that_disagrees_with_the_fields(log: CommitLog) -> None:
    raw = bytearray(_one_record(log))
    raw[0:4] = struct.pack(">i", len(raw) - 1)
    assert check_record(bytes(raw), 0, len(raw), True) == (-1, None)
    raw = bytearray(_one_record(log))
    topic_len_at = 84 + 4 + 11
    raw[topic_len_at : topic_len_at + 16] = bytes(16)  # DefaultMessageStoreTest.damageCommitLog
    assert check_record(bytes(raw), 0, len(raw), True) == (-1, None)
    raw = bytearray(_one_record(log))
    raw[4:8] = struct.pack(">i", 0x12345678)  # unknown magic
    assert check_record(bytes(raw), 0, len(raw), False) == (-1, None)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=0, max_size=400), pos=st.integers(0, 64), check_crc=st.booleans())
def test_check_record_never_raises_on_random_bytes(data: bytes, pos: int, check_crc: bool) -> None:
    size, request = check_record(data, pos, len(data), check_crc)
    assert size in (-1, 0) or size > 0
    assert (request is not None) == (size > 0)
    if size > 0:
        assert size <= len(data) - pos


_VALID = rf.encode_record(topic="TopicTest", queue_id=1, body=b"payload-123", properties_raw="TAGS\x01A\x02",
                          queue_offset=4, physical_offset=0, born_timestamp=T0, store_timestamp=T0,
                          born_host=STORE_HOST, store_host=STORE_HOST)


def test_the_independent_encoder_agrees_with_check_record() -> None:
    size, request = check_record(_VALID, 0, len(_VALID), True)
    assert size == len(_VALID) and request is not None and request.queue_offset == 4


@settings(max_examples=300, deadline=None)
@given(at=st.integers(0, len(_VALID) - 1), value=st.integers(0, 255), check_crc=st.booleans())
def test_check_record_never_raises_on_a_damaged_record(at: int, value: int, check_crc: bool) -> None:
    damaged = bytearray(_VALID)
    damaged[at] = value
    size, request = check_record(bytes(damaged), 0, len(damaged), check_crc)
    assert size in (-1, 0, len(damaged))
    if size > 0:
        assert request is not None
        decode_message(bytes(damaged), "b")  # a record check_record accepts also decodes


# -- bad input ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["body_too_big", "body_not_bytes", "body_none", "properties_too_long",
                                  "topic_too_long", "topic_too_long_in_utf8"])
def test_bad_input_is_refused_before_anything_is_stored(tmp_path: Path, case: str) -> None:
    config = _config(commitlog_file_size=1 << 17, max_message_size=1000)
    with MessageStore(str(tmp_path / "s"), config) as store:
        store.put("T", 0, b"before")
        before = store.commitlog.max_offset
        args: dict[str, object] = {"topic": "T", "queue_id": 0, "body": b"x", "properties": None}
        if case == "body_too_big":
            args["body"] = b"x" * 1001
        elif case == "body_not_bytes":
            args["body"] = "text"
        elif case == "body_none":
            args["body"] = None
        elif case == "properties_too_long":
            args["properties"] = {"k": "v" * 32765}  # "k\1" + 32765 + "\2" = 32768 bytes
        elif case == "topic_too_long":
            args["topic"] = "t" * 256
        else:
            args["topic"] = "é" * 128  # 128 characters, 256 UTF-8 bytes
        with pytest.raises(MQClientError):
            store.put(**args)  # type: ignore[arg-type]
        assert store.commitlog.max_offset == before
        after = store.put("T", 0, b"after")
        assert after.queue_offset == 1  # the refused message consumed no queue offset
        assert after.commit_log_offset == before
        assert store.wait_dispatched()
        assert [m.body for m in store.get_messages("T", 0, 0).messages] == [b"before", b"after"]


def test_limits_are_inclusive(tmp_path: Path) -> None:
    config = _config(commitlog_file_size=1 << 17, max_message_size=1000)
    with MessageStore(str(tmp_path / "s"), config) as store:
        store.put("T", 0, b"x" * 1000)
        store.put("T", 0, b"x", {"k": "v" * 32764})  # exactly 32767 property bytes
        store.put("t" * 255, 0, b"x")
        store.put("T", 0, bytearray(b"mutable"))  # type: ignore[arg-type]  # any bytes-like body
        assert store.wait_dispatched()
        msgs = store.get_messages("T", 0, 0).messages
        assert [len(m.body) for m in msgs] == [1000, 1, 7]
        assert msgs[1].properties == {"k": "v" * 32764}
        assert store.get_messages("t" * 255, 0, 0).messages[0].topic == "t" * 255


# -- round trip through the store --------------------------------------------------------------------------------------------
_TOPIC = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_%|-", min_size=1, max_size=200)
_PROP_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"),
                     min_size=1, max_size=30)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=_TOPIC, queue_id=st.integers(0, 7), body=st.binary(max_size=2000),
       flag=st.integers(-(2**31), 2**31 - 1), properties=st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=8),
       born_timestamp=st.integers(1, 2**62), reconsume_times=st.integers(0, 2**31 - 1))
def test_put_then_read_back_equal(store: MessageStore, topic: str, queue_id: int, body: bytes, flag: int,
                                  properties: dict[str, str], born_timestamp: int, reconsume_times: int) -> None:
    r = store.put(topic, queue_id, body, properties, flag=flag, born_timestamp=born_timestamp,
                  reconsume_times=reconsume_times)
    assert store.wait_dispatched()
    result = store.get_messages(topic, queue_id, r.queue_offset, 1)
    assert len(result.messages) == 1
    by_offset = store.look_message_by_offset(r.commit_log_offset)
    for msg in (result.messages[0], by_offset):
        assert msg.topic == topic
        assert msg.queue_id == queue_id
        assert msg.body == body
        assert msg.flag == flag
        assert msg.properties == properties
        assert msg.born_timestamp == born_timestamp
        assert msg.reconsume_times == reconsume_times
        assert msg.queue_offset == r.queue_offset
        assert msg.commit_log_offset == r.commit_log_offset
        assert msg.store_timestamp == r.store_timestamp
        assert msg.store_size == r.wrote_bytes
        assert msg.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    # The independent decoder reads the same record.
    raw = _raw(store.commitlog, r.commit_log_offset, r.wrote_bytes)
    decoded = rf.decode_record(raw, 0)
    assert isinstance(decoded, dict)
    assert decoded["computed_crc_ok"] and decoded["computed_length_ok"]
    assert (decoded["topic"], decoded["body"], decoded["properties"]) == (topic, body, properties)
    assert decoded["version"] == (2 if len(topic) > 127 else 1)


def _unit_log(path: Path, clock: ManualClock) -> CommitLog:
    """A commit log that writes consume-queue units with each append, as a recovered store's does."""
    from mqlite.consumequeue import ConsumeQueue

    config = _config()
    queues: dict[tuple[str, int], ConsumeQueue] = {}

    def create(topic: str, queue_id: int) -> ConsumeQueue:
        queues[topic, queue_id] = ConsumeQueue(str(path / "consumequeue"), topic, queue_id,
                                               config.consumequeue_file_size)
        return queues[topic, queue_id]

    log = CommitLog(str(path / "commitlog"), config, clock,
                    tags_code_fn=lambda topic, props, now: len(props) * 1_000_000 + now % 997)
    log.unit_queues, log.create_unit_queue = queues, create
    return log


def _encoded_properties(properties: dict[str, str]) -> Any:
    """A producer's properties: encoded once, before the put."""
    from mqlite.message import EncodedProperties, encode_properties

    encoded = EncodedProperties(properties)
    encoded.encoded = encode_properties(encoded).encode()
    return encoded


ONE_MESSAGE_CASES = {
    "keys and tags": dict(properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A" * 16}, flag=7),
    "a producer's send": dict(properties=_encoded_properties({"UNIQ_KEY": "0B" * 16, "WAIT": "true"})),
    "no properties": dict(properties=None, born_timestamp=T0 - 9),
    "an ipv6 born host": dict(properties={"KEYS": "k"}, born_host="[::1]:4000"),
    "a v2 topic": dict(topic="\u00e9" * 70, properties={"TAGS": "\u00e9"}),
}


def test_a_put_refused_under_the_lock_leaves_it_free(store: MessageStore) -> None:
    """`append` holds the put lock with acquire/try/finally: a field that fails in the header's pack
    (under the lock) must release it, and take no offset, so the next put goes on."""
    with pytest.raises(struct.error):
        store.commitlog.append("T", 0, b"x", None, 1 << 40)  # a flag beyond a Java int
    with deadline(5):  # a lock left held would hang the put below
        assert store.put("T", 0, b"y").queue_offset == 0
    assert [m.body for m in store.get_messages("T", 0, 0, 10).messages] == [b"y"]


@pytest.mark.parametrize("case", list(ONE_MESSAGE_CASES))
def test_append_and_a_batch_of_one_write_the_same_record_unit_and_dispatch(tmp_path: Path, case: str) -> None:
    # The single append does inline what the batches share (`_append_placed`, `_batch_written`): the two
    # copies must not drift. The same message, at the same place of two logs, by each path.
    args: dict[str, Any] = dict(ONE_MESSAGE_CASES[case])
    topic = args.pop("topic", "T")
    properties = args.pop("properties")
    single, batch = _unit_log(tmp_path / "single", ManualClock(T0)), _unit_log(tmp_path / "batch", ManualClock(T0))
    try:
        for clog in (single, batch):  # both mid-segment, at queue offset 1
            clog.append(topic, 2, b"before", {"KEYS": "first"})
            clog.clock.advance(5)  # type: ignore[attr-defined]
        dispatched = len(single.dispatch_queue), len(batch.dispatch_queue)
        one = single.append(topic, 2, b"the body", properties, **args)
        many = batch.append_batch(topic, 2, [b"the body"], None if properties is None else [properties], **args)
        assert (one.commit_log_offset, one.wrote_bytes, one.queue_offset, one.store_timestamp, one.offset_msg_id) \
            == (many.commit_log_offset, many.wrote_bytes, many.queue_offset, many.store_timestamp, many.offset_msg_id)
        assert one.queue_offset == 1
        assert _raw(single, one.commit_log_offset, one.wrote_bytes) == _raw(batch, many.commit_log_offset,
                                                                             many.wrote_bytes)
        assert single.unit_queues is not None and batch.unit_queues is not None
        unit = single.unit_queues[topic, 2].unit_at(1)
        assert unit is not None and unit == batch.unit_queues[topic, 2].unit_at(1)
        new_single = list(single.dispatch_queue)[dispatched[0]:]
        new_batch = list(batch.dispatch_queue)[dispatched[1]:]
        keyed = bool(properties) and bool({"KEYS", "UNIQ_KEY"} & set(properties))  # type: ignore[arg-type]
        assert len(new_single) == keyed
        # Nothing to index, nothing queued for the reput thread: its units were written under the lock
        # (issue 14: a batch with properties but no KEYS/UNIQ_KEY queued a keyless entry before).
        assert len(new_batch) == keyed
        if keyed:
            request = DispatchRequest._make(new_single[0])
            entry = new_batch[0]
            assert isinstance(entry, BatchDispatch)
            assert (request.topic, request.queue_id, request.queue_offset, request.commit_log_offset, request.size,
                    request.tags_code, request.store_timestamp, request.keys, request.uniq_key) == \
                (entry.topic, entry.queue_id, entry.first_queue_offset, entry.first_commit_log_offset,
                 entry.sizes[0], entry.tags_codes[0], entry.store_timestamp,  # type: ignore[index]
                 entry.keys[0], entry.uniq_keys[0])  # type: ignore[index]
            assert request.tags_code == unit[2] != 0
    finally:
        single.close()
        batch.close()
