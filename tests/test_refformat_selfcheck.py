"""Self-checks for tests/refformat.py, the independent reference implementation of RocketMQ's store.

These tests pin refformat against the reference's verified vectors and check that its writer and
decoders agree with each other. They do not touch mqlite.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import doctest  # noqa: E402
import struct  # noqa: E402
import zlib  # noqa: E402

import pytest  # noqa: E402
from hypothesis import given, settings, HealthCheck, strategies as st  # noqa: E402

import refformat as rf  # noqa: E402

TS = 1_700_000_000_000  # a fixed store time so runs are deterministic


# -- verified vectors ---------------------------------------------------------------------------

def test_doctests() -> None:
    assert doctest.testmod(rf).failed == 0


@pytest.mark.parametrize("data, crc", [
    (b"hello!q!", 1020379427), (b"a", 1756872259), (b"body", 1537739698),
    (b"Once, there was a chance for me!", 151131488), (b"", 0),
])
def test_body_crc_vectors(data: bytes, crc: int) -> None:
    assert rf.body_crc(data) == crc
    assert zlib.crc32(b"hello!q!") == 3167863075


@pytest.mark.parametrize("tags, code", [
    ("TAG1", 2567159), ("TagA", 2598919), ("tagA", 3552231), ("abc", 96354),
    ("*", 42), ("schedule_tag", 1162501618), ("", 0), (None, 0),
])
def test_tags_code_vectors(tags: str | None, code: int) -> None:
    assert rf.tags_code(tags) == code


def test_java_string_hash_is_32_bit_signed_over_utf16() -> None:
    assert rf.java_string_hash("TopicTest#KEY1") == -1656969516
    assert rf.java_string_hash("60") == 1722
    # A character outside the BMP counts as two UTF-16 code units (a surrogate pair).
    assert rf.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_index_slot_vectors() -> None:
    assert rf.index_key_hash("TopicTest#KEY1") == 1656969516
    assert rf.index_slot("TopicTest#KEY1", 100) == 16
    assert rf.index_slot("TopicTest#KEY1", 5_000_000) == 1969516
    assert rf.index_slot("60", 100) == 22


def test_index_key_hash_maps_int_min_to_zero() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, a well-known Java example.
    assert rf.java_string_hash("polygenelubricants") == -2**31
    assert rf.index_key_hash("polygenelubricants") == 0


def test_record_length_vector() -> None:
    assert rf.cal_msg_length(1, 0, 5, 9, 0) == 105
    record = rf.encode_record(topic="TopicTest", queue_id=0, body=b"Hello")
    assert len(record) == 105
    assert struct.unpack_from(">i", record, 84)[0] == 5  # body length sits at 84
    assert struct.unpack_from(">i", record, 4)[0] == rf.MESSAGE_MAGIC_CODE_V1


def test_record_bytes_match_the_field_table() -> None:
    # The 105-byte example built field by field from the table in section 1.1.
    expected = b"".join([
        struct.pack(">i", 105), struct.pack(">i", -626843481), struct.pack(">i", rf.body_crc(b"Hello")),
        struct.pack(">i", 3), struct.pack(">i", 9), struct.pack(">q", 11), struct.pack(">q", 4096),
        struct.pack(">i", 0), struct.pack(">q", TS - 5), bytes([10, 1, 2, 3]), struct.pack(">i", 777),
        struct.pack(">q", TS), bytes([127, 0, 0, 1]), struct.pack(">i", 10911), struct.pack(">i", 2),
        struct.pack(">q", 0), struct.pack(">i", 5), b"Hello", bytes([9]), b"TopicTest", struct.pack(">h", 0),
    ])
    record = rf.encode_record(topic="TopicTest", queue_id=3, body=b"Hello", flag=9, queue_offset=11,
                              physical_offset=4096, born_timestamp=TS - 5, born_host=("10.1.2.3", 777),
                              store_timestamp=TS, reconsume_times=2)
    assert record == expected
    assert struct.unpack_from(">q", record, 56)[0] == TS  # MESSAGE_STORE_TIMESTAMP_POSITION


def test_ipv6_born_host_shifts_store_timestamp_by_12() -> None:
    record = rf.encode_record(topic="T", queue_id=0, body=b"", born_host=("::1", 1), store_timestamp=TS)
    assert struct.unpack_from(">i", record, 36)[0] == rf.BORNHOST_V6_FLAG
    assert record[48:64] == bytes(15) + b"\x01" and struct.unpack_from(">i", record, 64)[0] == 1
    assert struct.unpack_from(">q", record, 68)[0] == TS


def test_record_length_with_ipv6_and_v2() -> None:
    v6 = rf.BORNHOST_V6_FLAG | rf.STOREHOSTADDRESS_V6_FLAG
    assert rf.cal_msg_length(1, v6, 5, 9, 0) == 105 + 24
    assert rf.cal_msg_length(2, 0, 5, 9, 0) == 106


def test_offset_msg_id_vector() -> None:
    assert rf.offset_msg_id(("127.0.0.1", 9103), 123456) == "7F0000010000238F000000000001E240"
    assert rf.offset_msg_id("100.81.0.250:10911", 311825178782) == "645100FA00002A9F000000489A3AA09E"


# -- properties (section 1.5) -------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("k1\x01v1", {"k1": "v1"}),
    ("", {}), (" ", {}), ("aaa", {}), ("k1\x01", {}), ("\x01v1", {}),
    ("k1\x01v1\x02k2\x01v2", {"k1": "v1", "k2": "v2"}),
    ("k1\x01v1\x02\x01v2", {"k1": "v1"}),
    ("k1\x01\x02k2\x01v2", {"k2": "v2"}),
    ("1\x011\x022\x012", {"1": "1", "2": "2"}),
    ("k1\x01v1\x02", {"k1": "v1"}),
    ("a\x01\x02b\x01x\x02", {"b": "x"}),
    ("k\x01a\x01b\x02", {"k": "a\x01b"}),  # only the first \x01 separates
])
def test_decode_properties(raw: str, expected: dict[str, str]) -> None:
    assert rf.decode_properties(raw) == expected


def test_encode_properties_has_trailing_separator() -> None:
    assert rf.encode_properties({"KeyB": "ValueB", "KeyA": "ValueA"}) == "KeyB\x01ValueB\x02KeyA\x01ValueA\x02"
    assert rf.encode_properties({"a": None, "b": "1"}) == "b\x011\x02"  # type: ignore[dict-item]
    assert rf.encode_properties({}) == "" and rf.encode_properties(None) == ""


# -- decode_record on odd input ---------------------------------------------------------------

def test_decode_record_blank_zero_and_truncated() -> None:
    blank = struct.pack(">i", 100) + struct.pack(">i", rf.BLANK_MAGIC_CODE) + bytes(92)
    assert rf.decode_record(blank, 0) == "BLANK"
    assert rf.decode_record(bytes(200), 0) is None
    assert rf.decode_record(b"\x00\x00\x00", 0) is None
    record = rf.encode_record(topic="T", queue_id=0, body=b"xyz")
    assert isinstance(rf.decode_record(record, 0), dict)
    assert rf.decode_record(record[:-1], 0) is None          # half-written
    assert rf.decode_record(record, len(record)) is None      # nothing left
    bad_magic = record[:4] + b"\x12\x34\x56\x78" + record[8:]
    assert rf.decode_record(bad_magic, 0) is None


def test_decode_record_reports_crc_and_length_problems() -> None:
    record = bytearray(rf.encode_record(topic="T", queue_id=0, body=b"xyz"))
    record[88] ^= 0xFF  # first body byte
    rec = rf.decode_record(bytes(record), 0)
    assert isinstance(rec, dict) and not rec["computed_crc_ok"] and rec["computed_length_ok"]
    longer = bytearray(rf.encode_record(topic="T", queue_id=0, body=b"xyz")) + bytes(4)
    struct.pack_into(">i", longer, 0, len(longer))
    rec = rf.decode_record(bytes(longer), 0)
    assert isinstance(rec, dict) and rec["computed_crc_ok"] and not rec["computed_length_ok"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=-5, max_value=320))
def test_decode_record_never_raises(data: bytes, pos: int) -> None:
    result = rf.decode_record(data, pos)
    assert result is None or result == "BLANK" or isinstance(result, dict)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=100, max_size=300), st.integers(min_value=0, max_value=99))
def test_decode_record_survives_corrupted_records(noise: bytes, cut: int) -> None:
    record = bytearray(rf.encode_record(topic="TopicTest", queue_id=1, body=b"Hello",
                                        properties_raw="KEYS\x01k\x02"))
    record[cut:cut + 8] = noise[:8]
    result = rf.decode_record(bytes(record) + noise, 0)
    assert result is None or result == "BLANK" or isinstance(result, dict)


# -- writer -> decoder round trips ---------------------------------------------------------------

def _write_mixed_store(store: str) -> list[dict]:
    """A small store with every feature the brief lists; returns the append results."""
    retry_topic = "%RETRY%" + "g" * 200
    results = []
    with rf.BrokerStyleWriter(store) as w:
        results.append(w.append("TopicTest", 0, b"Hello", {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"},
                                store_timestamp=TS))
        results.append(w.append("TopicTest", 0, b"v6", {"TAGS": "TAG1"}, born_host=("::1", 40000),
                                store_host=("fe80::1", 10911), store_timestamp=TS + 1))
        results.append(w.append("TopicTest", 1, b"x" * 5000, {"KEYS": "big"}, compress=True,
                                store_timestamp=TS + 2))
        results.append(w.append(retry_topic, 0, b"retry", {"RETRY_TOPIC": "TopicTest"}, store_timestamp=TS + 3,
                                reconsume_times=3))
        results.append(w.append("TopicTest", 0, b"odd", properties_raw="a\x01\x02b\x01x\x02",
                                store_timestamp=TS + 4))
        results.append(w.append("TopicTest", 0, b"half", {"TRAN_MSG": "true", "KEYS": "tx1"},
                                sys_flag=rf.TRANSACTION_PREPARED_TYPE, store_timestamp=TS + 5))
        results.append(w.append("TopicTest", 0, b"after", {"TAGS": "TagA"}, store_timestamp=TS + 6))
        results.append(w.append("TopicTest", 0, b"half", {"KEYS": "rb1"}, sys_flag=rf.TRANSACTION_ROLLBACK_TYPE,
                                prepared_transaction_offset=results[5]["physical_offset"], store_timestamp=TS + 7))
        results.append(w.append("TopicTest", 0, b"half", {"KEYS": "cm1"}, sys_flag=rf.TRANSACTION_COMMIT_TYPE,
                                prepared_transaction_offset=results[5]["physical_offset"], store_timestamp=TS + 8))
    return results


def test_round_trip_mixed_store(tmp_path) -> None:
    store = str(tmp_path)
    results = _write_mixed_store(store)
    scan = rf.scan_commitlog(store)
    assert scan.problems == []
    recs = scan.records
    assert len(recs) == len(results)
    for rec, res in zip(recs, results):
        assert rec["physical_offset"] == rec["found_at_offset"] == res["physical_offset"]
        assert rec["total_size"] == res["size"] and rec["queue_offset"] == res["queue_offset"]
        assert rec["computed_crc_ok"] and rec["computed_length_ok"]
    assert scan.end_offset == results[-1]["physical_offset"] + results[-1]["size"]

    first = recs[0]
    assert (first["topic"], first["queue_id"], first["body"], first["version"]) == ("TopicTest", 0, b"Hello", 1)
    assert first["properties"] == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}
    assert first["born_host"] == "127.0.0.1:54321" and first["store_host"] == "127.0.0.1:10911"
    assert first["store_timestamp"] == first["born_timestamp"] == TS

    v6 = recs[1]
    assert v6["sys_flag"] & 0x30 == 0x30 and v6["born_host"] == "::1:40000" and v6["store_host"] == "fe80::1:10911"
    assert v6["total_size"] == rf.cal_msg_length(1, 0x30, 2, 9, len(v6["properties_raw"].encode()))

    big = recs[2]
    assert big["sys_flag"] & 0x701 == 0x301
    assert big["body"] == zlib.compress(b"x" * 5000, 5) and big["body_decompressed"] == b"x" * 5000
    assert big["body_crc"] == rf.body_crc(big["body"])

    retry = recs[3]
    assert retry["version"] == 2 and retry["magic"] == rf.MESSAGE_MAGIC_CODE_V2
    assert retry["topic"] == "%RETRY%" + "g" * 200 and retry["reconsume_times"] == 3

    odd = recs[4]
    assert odd["properties_raw"] == "a\x01\x02b\x01x\x02" and odd["properties"] == {"b": "x"}

    # queue offsets: TopicTest/0 gets 0, 1, 2 (odd), PREPARED stores 0, 3 (after), ROLLBACK 0, COMMIT 4
    assert [r["queue_offset"] for r in recs if r["topic"] == "TopicTest" and r["queue_id"] == 0] == [0, 1, 2, 0, 3, 0, 4]
    assert [res["in_consume_queue"] for res in results] == [True] * 5 + [False, True, False, True]

    cq = rf.decode_consumequeue(store, "TopicTest", 0)
    expected = [(res["queue_offset"], res["physical_offset"], res["size"], res["tags_code"])
                for rec, res in zip(recs, results)
                if res["in_consume_queue"] and (rec["topic"], rec["queue_id"]) == ("TopicTest", 0)]
    assert cq == expected
    assert cq[0][3] == 2598919 and cq[1][3] == 2567159 and cq[2][3] == 0
    assert all(unit[1] != results[5]["physical_offset"] for unit in cq)  # no unit for PREPARED
    assert rf.decode_consumequeue(store, "TopicTest", 1) == [(0, results[2]["physical_offset"], results[2]["size"], 0)]
    assert rf.list_consumequeues(store) == sorted([("%RETRY%" + "g" * 200, 0), ("TopicTest", 0), ("TopicTest", 1)])
    assert rf.decode_consumequeue(store, "NoSuchTopic", 0) == []

    assert rf.cross_check_store(store) == []


def test_index_round_trip(tmp_path) -> None:
    store = str(tmp_path)
    results = _write_mixed_store(store)
    [path] = rf.index_files(store)
    assert os.path.getsize(path) == 40 + 1000 * 4 + 4000 * 20
    assert len(os.path.basename(path)) == 17
    # keys put: U1, k1, k2 (rec 0), big (rec 2), tx1 (PREPARED is indexed), cm1 (COMMIT); rb1 (ROLLBACK) is not
    assert rf.index_lookup(path, "TopicTest#U1") == [results[0]["physical_offset"]]
    assert rf.index_lookup(path, "TopicTest#k2") == [results[0]["physical_offset"]]
    assert rf.index_lookup(path, "TopicTest#big") == [results[2]["physical_offset"]]
    assert rf.index_lookup(path, "TopicTest#tx1") == [results[5]["physical_offset"]]
    assert rf.index_lookup(path, "TopicTest#cm1") == [results[8]["physical_offset"]]
    assert rf.index_lookup(path, "TopicTest#rb1") == []
    assert rf.index_lookup(path, "OtherTopic#k1") == []
    header = rf.decode_index_file(path)
    assert header["problems"] == []
    assert (header["hash_slot_num"], header["index_num"]) == (1000, 4000)
    assert header["index_count"] == 7  # 6 entries + 1
    assert len(header["entries"]) == 6 and header["hash_slot_count"] == len(header["slots"])
    assert header["begin_timestamp"] == TS and header["end_timestamp"] == TS + 8
    assert header["begin_phy_offset"] == 0 and header["end_phy_offset"] == results[8]["physical_offset"]
    assert all(e["time_diff"] == 0 for e in header["entries"])  # all within the first second


def test_index_same_key_newest_first_and_roll(tmp_path) -> None:
    store = str(tmp_path)
    offsets = []
    with rf.BrokerStyleWriter(store, hash_slot_num=4, index_num=6) as w:
        for i in range(12):
            offsets.append(w.append("T", 0, b"m", {"KEYS": "same"}, store_timestamp=TS + 1500 * i)["physical_offset"])
    paths = rf.index_files(store)
    assert len(paths) == 3  # capacity index_num - 1 = 5 entries per file
    found = [o for p in reversed(paths) for o in rf.index_lookup(p, "T#same", hash_slot_num=4)]
    assert found == offsets[::-1]
    assert rf.index_lookup(paths[0], "T#same", hash_slot_num=4, max_num=2) == offsets[4:2:-1]
    second = rf.decode_index_file(paths[1], hash_slot_num=4)
    assert second["problems"] == [] and second["index_count"] == 6
    # A new file starts from the previous file's end, so its first time_diff is relative to that.
    assert second["entries"][0]["time_diff"] == 1  # (TS+7500 - (TS+6000)) / 1000
    assert second["begin_timestamp"] == TS + 1500 * 5
    assert rf.decode_index_file(paths[0], hash_slot_num=4)["entries"][4]["time_diff"] == 6  # 6000 ms
    assert rf.index_lookup(paths[0], "T#same", hash_slot_num=4, begin=TS + 5000) == [offsets[4]]
    assert rf.cross_check_store(store, hash_slot_num=4) == []


def test_segment_roll_with_blank_record(tmp_path) -> None:
    store = str(tmp_path)
    results = []
    with rf.BrokerStyleWriter(store, commitlog_file_size=4096, consumequeue_file_size=5 * 20) as w:
        for i in range(100):
            results.append(w.append("TopicTest", i % 2, b"b" * (20 + 7 * (i % 11)), {"TAGS": "TAG1"},
                                    store_timestamp=TS + i))
    names = sorted(os.listdir(os.path.join(store, "commitlog")))
    assert len(names) >= 3
    assert names == [f"{i * 4096:020d}" for i in range(len(names))]
    assert all(os.path.getsize(os.path.join(store, "commitlog", n)) == 4096 for n in names)
    blanks = [res["blank_at"] for res in results if res["blank_at"] is not None]
    assert len(blanks) == len(names) - 1
    for blank_at in blanks:
        with open(os.path.join(store, "commitlog", f"{blank_at - blank_at % 4096:020d}"), "rb") as f:
            data = f.read()
        pos = blank_at % 4096
        assert struct.unpack_from(">i", data, pos)[0] == 4096 - pos >= 8
        assert struct.unpack_from(">i", data, pos + 4)[0] == rf.BLANK_MAGIC_CODE
        assert rf.decode_record(data, pos) == "BLANK"
    for res in results:
        assert res["physical_offset"] % 4096 + res["size"] + 8 <= 4096
    scan = rf.scan_commitlog(store)
    assert scan.problems == [] and [r["physical_offset"] for r in scan.records] == [r["physical_offset"] for r in results]
    cq_names = sorted(os.listdir(os.path.join(store, "consumequeue", "TopicTest", "0")))
    assert cq_names == [f"{i * 100:020d}" for i in range(10)]  # 50 units, 5 per file
    cq = rf.decode_consumequeue(store, "TopicTest", 0)
    assert [u[0] for u in cq] == list(range(50))
    assert [u[1] for u in cq] == [res["physical_offset"] for res in results[0::2]]
    assert rf.cross_check_store(store) == []


def test_blank_when_exactly_eight_bytes_would_remain(tmp_path) -> None:
    # A record fits only if at least 8 bytes remain after it.
    store = str(tmp_path)
    size = rf.cal_msg_length(1, 0, 10, 1, 0)  # 103
    file_size = 2 * size + 8
    with rf.BrokerStyleWriter(store, commitlog_file_size=file_size) as w:
        a = w.append("T", 0, b"0123456789", store_timestamp=TS)
        b = w.append("T", 0, b"0123456789", store_timestamp=TS)
        c = w.append("T", 0, b"0123456789", store_timestamp=TS)
    assert (a["physical_offset"], b["physical_offset"]) == (0, size) and b["blank_at"] is None
    assert c["blank_at"] == 2 * size and c["physical_offset"] == file_size
    assert len(rf.decode_commitlog(store)) == 3


def test_preallocated_next_file_is_a_normal_end(tmp_path) -> None:
    store = str(tmp_path)
    with rf.BrokerStyleWriter(store, commitlog_file_size=4096, preallocate_next_commitlog_file=True) as w:
        w.append("T", 0, b"x", store_timestamp=TS)
    assert sorted(os.listdir(os.path.join(store, "commitlog"))) == [f"{0:020d}", f"{4096:020d}"]
    scan = rf.scan_commitlog(store)
    assert scan.problems == [] and len(scan.records) == 1


def test_cq_prefilled_blank_units_are_skipped(tmp_path) -> None:
    store = str(tmp_path)
    with rf.BrokerStyleWriter(store, consumequeue_file_size=10 * 20) as w:
        w.set_next_queue_offset("T", 3, 7)
        r1 = w.append("T", 3, b"a", store_timestamp=TS)
        r2 = w.append("T", 3, b"b", store_timestamp=TS)
        r3 = w.append("T", 3, b"c", store_timestamp=TS)
    assert (r1["queue_offset"], r3["queue_offset"]) == (7, 9)
    with open(os.path.join(store, "consumequeue", "T", "3", f"{0:020d}"), "rb") as f:
        data = f.read()
    assert struct.unpack_from(">qiq", data, 0) == rf.CQ_BLANK_UNIT
    assert struct.unpack_from(">qiq", data, 6 * 20) == rf.CQ_BLANK_UNIT
    assert rf.decode_consumequeue(store, "T", 3) == [
        (7, r1["physical_offset"], r1["size"], 0), (8, r2["physical_offset"], r2["size"], 0),
        (9, r3["physical_offset"], r3["size"], 0)]
    assert rf.cross_check_store(store) == []


def test_delay_topic_tags_code_is_delivery_time(tmp_path) -> None:
    store = str(tmp_path)
    with rf.BrokerStyleWriter(store) as w:
        r3 = w.append("SCHEDULE_TOPIC_XXXX", 2, b"d", {"DELAY": "3", "TAGS": "x"}, store_timestamp=TS)
        r99 = w.append("SCHEDULE_TOPIC_XXXX", 17, b"d", {"DELAY": "99"}, store_timestamp=TS)
        r0 = w.append("SCHEDULE_TOPIC_XXXX", 0, b"d", {"DELAY": "0", "TAGS": "x"}, store_timestamp=TS)
    assert r3["tags_code"] == TS + 10_000
    assert r99["tags_code"] == TS + 7_200_000  # clamped to level 18
    assert r0["tags_code"] == rf.tags_code("x")
    assert rf.decode_consumequeue(store, "SCHEDULE_TOPIC_XXXX", 2)[0][3] == TS + 10_000
    assert rf.cross_check_store(store) == []


def test_checkpoint_and_no_config_files(tmp_path) -> None:
    store = str(tmp_path)
    results = _write_mixed_store(store)
    cp = rf.decode_checkpoint(store)
    assert cp["file_size"] == 4096 and cp["problems"] == []
    last = results[-1]["store_timestamp"]
    assert (cp["physic_msg_timestamp"], cp["logics_msg_timestamp"], cp["index_msg_timestamp"]) == (last, last, last)
    assert (cp["master_flushed_offset"], cp["confirm_phy_offset"]) == (0, 0)
    assert cp["min_timestamp"] == last - 3000
    assert sorted(os.listdir(store)) == ["checkpoint", "commitlog", "consumequeue", "index"]
    for _dirpath, _dirs, files in os.walk(store):
        assert not any(name.endswith(".json") for name in files)


def test_checkpoint_encoding_matches_reference_test(tmp_path) -> None:
    (tmp_path / "checkpoint").write_bytes(rf.encode_checkpoint(0xAABB, 0xCCDD, 7))
    cp = rf.decode_checkpoint(str(tmp_path))
    assert cp["physic_msg_timestamp"] - cp["min_timestamp"] == 3000
    (tmp_path / "checkpoint").write_bytes(b"\x00" * 12)
    cp = rf.decode_checkpoint(str(tmp_path))
    assert cp["physic_msg_timestamp"] == 0 and cp["logics_msg_timestamp"] is None and cp["problems"]


def test_store_timestamps_never_decrease(tmp_path) -> None:
    with rf.BrokerStyleWriter(str(tmp_path)) as w:
        w.append("T", 0, b"a", store_timestamp=TS)
        with pytest.raises(ValueError, match="never decrease"):
            w.append("T", 0, b"b", store_timestamp=TS - 1)
        auto = w.append("T", 0, b"c")
        assert auto["store_timestamp"] >= TS


def test_writer_refuses_what_a_broker_refuses(tmp_path) -> None:
    with rf.BrokerStyleWriter(str(tmp_path), commitlog_file_size=4096) as w:
        with pytest.raises(ValueError):
            w.append("T" * 256, 0, b"x")
        with pytest.raises(ValueError):
            w.append("T", 0, b"x", properties_raw="p" * 32768)
        with pytest.raises(ValueError):
            w.append("T", 0, b"x" * 5000)  # cannot fit a 4096-byte file


# -- the decoders report damage ------------------------------------------------------------------

def test_damaged_record_stops_scan_and_is_reported(tmp_path) -> None:
    store = str(tmp_path)
    with rf.BrokerStyleWriter(store) as w:
        offsets = [w.append("TopicTest", 0, b"Hello", store_timestamp=TS)["physical_offset"] for _ in range(5)]
    path = os.path.join(store, "commitlog", f"{0:020d}")
    with open(path, "r+b") as f:  # the reference's testRecover damage: zero 16 bytes at the topic length
        f.seek(offsets[3] + 84 + 5 + 4)
        f.write(bytes(16))
    scan = rf.scan_commitlog(store)
    assert [r["physical_offset"] for r in scan.records] == offsets[:3]
    assert scan.end_offset == offsets[3] and scan.problems
    problems = rf.cross_check_store(store)
    assert any("no matching record" in p for p in problems)


def test_bad_crc_stops_scan(tmp_path) -> None:
    store = str(tmp_path)
    with rf.BrokerStyleWriter(store) as w:
        offsets = [w.append("TopicTest", 0, b"Hello", store_timestamp=TS)["physical_offset"] for _ in range(3)]
    with open(os.path.join(store, "commitlog", f"{0:020d}"), "r+b") as f:
        f.seek(offsets[1] + 88)
        f.write(b"J")
    scan = rf.scan_commitlog(store)
    assert len(scan.records) == 1 and any("CRC" in p for p in scan.problems)


def test_cross_check_notices_a_wrong_cq_unit(tmp_path) -> None:
    store = str(tmp_path)
    with rf.BrokerStyleWriter(store) as w:
        w.append("TopicTest", 0, b"Hello", {"TAGS": "TagA"}, store_timestamp=TS)
    path = os.path.join(store, "consumequeue", "TopicTest", "0", f"{0:020d}")
    with open(path, "r+b") as f:
        f.seek(12)
        f.write(struct.pack(">q", 42))
    assert any("expected" in p for p in rf.cross_check_store(store))


def test_decoders_on_garbage_files(tmp_path) -> None:
    store = tmp_path
    (store / "commitlog").mkdir()
    (store / "commitlog" / f"{0:020d}").write_bytes(os.urandom(1000))
    (store / "commitlog" / "junk").write_bytes(b"x")
    scan = rf.scan_commitlog(str(store))
    assert scan.records == [] and scan.problems
    (store / "consumequeue" / "T" / "0").mkdir(parents=True)
    (store / "consumequeue" / "T" / "0" / f"{0:020d}").write_bytes(
        struct.pack(">qiq", 5, 10, 0) + struct.pack(">qiq", -1, 10, 0) + struct.pack(">qiq", 7, 10, 0))
    assert rf.decode_consumequeue(str(store), "T", 0) == [(0, 5, 10, 0)]
    (store / "index").mkdir()
    (store / "index" / "20240101000000000").write_bytes(os.urandom(84040))
    assert isinstance(rf.decode_index_file(str(store / "index" / "20240101000000000")), dict)
    assert isinstance(rf.index_lookup(str(store / "index" / "20240101000000000"), "T#k"), list)
    (store / "index" / "20240101000000001").write_bytes(b"short")
    assert rf.decode_index_file(str(store / "index" / "20240101000000001"))["problems"]
    assert rf.index_lookup(str(store / "index" / "20240101000000001"), "T#k") == []


# -- property: random writes round trip ----------------------------------------------------------

_message = st.fixed_dictionaries({
    "topic": st.sampled_from(["A", "TopicTest", "%RETRY%" + "r" * 150]),
    "queue_id": st.integers(0, 3),
    "body": st.binary(max_size=400),
    "tags": st.one_of(st.none(), st.text(min_size=1, max_size=8)),
    "keys": st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=4), max_size=3),
    "tran": st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC]),
    "v6": st.booleans(),
    "compress": st.booleans(),
    "dt": st.integers(0, 3000),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_message, max_size=40))
def test_random_writes_round_trip(tmp_path_factory, messages: list[dict]) -> None:
    store = str(tmp_path_factory.mktemp("store"))
    results, ts = [], TS
    with rf.BrokerStyleWriter(store, commitlog_file_size=2048, consumequeue_file_size=60,
                              hash_slot_num=8, index_num=32) as w:
        for m in messages:
            ts += m["dt"]
            props = {}
            if m["tags"] is not None:
                props["TAGS"] = m["tags"]
            if m["keys"]:
                props["KEYS"] = " ".join(m["keys"])
            born = ("2001:db8::7", 1234) if m["v6"] else ("10.0.0.1", 1234)
            results.append((m, w.append(m["topic"], m["queue_id"], m["body"], props, sys_flag=m["tran"],
                                        born_host=born, compress=m["compress"], store_timestamp=ts)))
    scan = rf.scan_commitlog(store)
    assert scan.problems == []
    assert len(scan.records) == len(results)
    for rec, (m, res) in zip(scan.records, results):
        assert rec["physical_offset"] == res["physical_offset"] and rec["topic"] == m["topic"]
        body = rec["body_decompressed"] if m["compress"] else rec["body"]
        assert body == m["body"]
        assert rec["born_host"] == ("2001:db8::7:1234" if m["v6"] else "10.0.0.1:1234")
        assert rec["sys_flag"] & 0xC == m["tran"]
    assert rf.cross_check_store(store, hash_slot_num=8) == []
