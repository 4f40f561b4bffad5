"""mqlite's files against an independent reading of RocketMQ's format (`tests/refformat.py`).

Two directions:

* (a) mqlite writes a store; the reference decoders read every record, consume-queue unit,
  index entry and the checkpoint, and must agree field by field with what was put and with
  mqlite's own decoding.
* (b) the reference `BrokerStyleWriter` writes a store the way a RocketMQ broker leaves it
  (no `config/store.json`, a pre-allocated next segment, pre-filled blank units, a compressed
  body, ...); mqlite must read it, verify it, recover it as a writer and append to it, and the
  reference decoders must still find the combined store consistent.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite import GetMessageStatus, MessageQueue, StoreReader
from mqlite.config import StoreConfig
from mqlite.store import MessageStore
from mqlite.verify import verify_store

sys.path.insert(0, os.path.dirname(__file__))
import refformat as rf  # noqa: E402

SLOTS, INDEX_NUM = 16, 64  # 63 keys per index file: the keyed puts below roll it
SEGMENT = 4096  # the smallest commit-log segment mqlite allows; many rolls
CQ_FILE = 20 * 8
RETRY_TOPIC = "%RETRY%" + "consumer-group-with-a-very-long-name-" * 4  # > 127 chars: magic V2
IPV6_BORN = "[2001:db8::1]:4000"
STORE_HOST = "127.0.0.1:10911"
PREPARED = 0x4


def host(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """'1.2.3.4:5', '[v6]:5' (mqlite) and 'v6:5' (refformat) as one comparable value."""
    addr, _, port = text.rpartition(":")
    return ipaddress.ip_address(addr.strip("[]")), int(port)


def crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


# ------------------------------------------------------------------------------------------------
# (a) mqlite writes, the reference reads
# ------------------------------------------------------------------------------------------------

def _puts() -> list[dict[str, Any]]:
    """What test (a) stores: each dict is put(**kwargs) plus the batch marker."""
    puts: list[dict[str, Any]] = [
        dict(topic="TopicA", queue_id=0, body=b"Hello",
             properties={"TAGS": "TagA", "KEYS": "key-1 key-2", "UNIQ_KEY": "7F0000010001000000000000AAAA0001"}),
        dict(topic="TopicA", queue_id=1, body="héllo wörld".encode(), properties={"TAGS": "TagB", "région": "ü€"},
             flag=7, born_host=IPV6_BORN, born_timestamp=1_600_000_000_123, reconsume_times=3),
        dict(topic=RETRY_TOPIC, queue_id=0, body=b"retry me",
             properties={"KEYS": "retry-key", "RETRY_TOPIC": "TopicA", "RECONSUME_TIME": "1"}, reconsume_times=1),
        dict(topic="TopicB", queue_id=3, body=b"no properties", properties={}),
        dict(topic="TopicB", queue_id=3, body=b"", properties=None),  # empty body and no properties
        dict(topic="TopicA", queue_id=0, body=b"half message", sys_flag=PREPARED,
             properties={"KEYS": "half-key", "TRAN_MSG": "true", "PGROUP": "pg"}),
        dict(topic="TopicA", queue_id=0, body=b"commit of the half", sys_flag=0x8, prepared_transaction_offset=0,
             properties={"KEYS": "commit-key", "TAGS": "TagA"}),
    ]
    for i in range(48):  # ~6 KiB per 40 messages: several 4 KiB segments, two index files
        puts.append(dict(topic=["TopicA", "TopicB"][i % 2], queue_id=i % 3, body=bytes([i]) * (100 + i),
                         properties={"TAGS": f"Tag{i % 4}", "KEYS": f"bulk-{i}", "UNIQ_KEY": f"U{i:04d}"}))
    return puts


BATCH: dict[str, Any] = dict(topic="TopicC", queue_id=0, bodies=[b"b0", b"b11", b"b222"],
             properties=[{"TAGS": "TagX", "KEYS": "batch-0"}, None, {"KEYS": "batch-2 batch-x"}])


@pytest.fixture(scope="module")
def mqlite_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    """A closed mqlite store plus, per record in commit-log order, what was put and its PutResult."""
    path = str(tmp_path_factory.mktemp("mqlite-written"))
    config = StoreConfig(commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE,
                         max_hash_slot_num=SLOTS, max_index_num=INDEX_NUM)
    written: list[dict[str, Any]] = []
    with MessageStore(path, config) as store:
        for i, put in enumerate(_puts()):
            result = store.put(**put)
            written.append({**put, "result": result, "offset": result.commit_log_offset,
                            "queue_offset": result.queue_offset, "size": result.wrote_bytes,
                            "store_timestamp": result.store_timestamp})
            if i == 20:
                batch = store.put_batch(**BATCH)
                assert batch.commit_log_offsets is not None
                sizes = [b - a for a, b in zip(batch.commit_log_offsets, batch.commit_log_offsets[1:])]
                sizes.append(batch.commit_log_offset + batch.wrote_bytes - batch.commit_log_offsets[-1])
                for j, body in enumerate(BATCH["bodies"]):
                    written.append(dict(topic=BATCH["topic"], queue_id=BATCH["queue_id"], body=body,
                                        properties=BATCH["properties"][j], result=batch,
                                        offset=batch.commit_log_offsets[j], queue_offset=batch.queue_offset + j,
                                        size=sizes[j], store_timestamp=batch.store_timestamp))
        assert store.wait_dispatched()
    return path, written


def _expected_sys_flag(put: dict[str, Any]) -> int:
    flag = put.get("sys_flag", 0)
    if put.get("born_host") and host(put["born_host"])[0].version == 6:
        flag |= 0x10
    return flag


def test_reference_scan_is_clean_and_rolls_segments(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, written = mqlite_store
    scan = rf.scan_commitlog(path)
    assert scan.problems == []
    assert len(scan.files) >= 3, "the store should span several 4 KiB segments"
    assert all(size == SEGMENT for _, size in scan.files)
    assert [rec["found_at_offset"] for rec in scan.records] == sorted(w["offset"] for w in written)
    assert scan.end_offset == max(w["offset"] + w["size"] for w in written)
    # Every segment but the last ends with an 8-byte BLANK record right after its last record.
    for start, _ in scan.files[:-1]:
        last = max((w for w in written if start <= w["offset"] < start + SEGMENT), key=lambda w: w["offset"])
        with open(os.path.join(path, "commitlog", f"{start:020d}"), "rb") as f:
            data = f.read()
        pos = last["offset"] + last["size"] - start
        assert struct.unpack_from(">ii", data, pos) == (SEGMENT - pos, rf.BLANK_MAGIC_CODE)
        assert SEGMENT - pos >= rf.END_FILE_MIN_BLANK_LENGTH


def test_every_record_field_matches_what_was_put(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, written = mqlite_store
    records = {rec["found_at_offset"]: rec for rec in rf.decode_commitlog(path)}
    assert len(records) == len(written)
    for put in written:
        rec = records[put["offset"]]
        body = put["body"]
        what = f"{put['topic'][:20]}/{put['queue_id']} at {put['offset']}"
        assert rec["computed_crc_ok"] and rec["computed_length_ok"], what
        assert rec["total_size"] == put["size"], what
        assert rec["magic"] == (rf.MESSAGE_MAGIC_CODE_V2 if len(put["topic"]) > 127 else rf.MESSAGE_MAGIC_CODE_V1)
        assert rec["physical_offset"] == put["offset"], what
        assert rec["topic"] == put["topic"], what
        assert rec["queue_id"] == put["queue_id"], what
        assert rec["queue_offset"] == (0 if put.get("sys_flag") == PREPARED else put["queue_offset"]), what
        assert rec["flag"] == put.get("flag", 0), what
        assert rec["sys_flag"] == _expected_sys_flag(put), what
        assert rec["body"] == body and rec["body_crc"] == crc(body), what
        assert rec["properties"] == (put["properties"] or {}), what
        if not put["properties"]:
            assert rec["properties_raw"] == "", what  # a zero properties length, nothing else
        assert rec["store_timestamp"] == put["store_timestamp"], what
        assert rec["born_timestamp"] == (put.get("born_timestamp") or put["store_timestamp"]), what
        assert host(rec["born_host"]) == host(put.get("born_host") or STORE_HOST), what
        assert host(rec["store_host"]) == host(STORE_HOST), what
        assert rec["reconsume_times"] == put.get("reconsume_times", 0), what
        assert rec["prepared_transaction_offset"] == put.get("prepared_transaction_offset", 0), what
        if put["result"].msg_num == 1:
            assert put["result"].offset_msg_id == rf.offset_msg_id(rec["store_host"], put["offset"])


def test_mqlite_decoding_agrees_with_the_reference(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, _ = mqlite_store
    with StoreReader(path) as reader:
        for rec in rf.decode_commitlog(path):
            msg = reader.look_message_by_offset(rec["found_at_offset"])
            assert (msg.topic, msg.queue_id, msg.queue_offset, msg.commit_log_offset, msg.store_size) == (
                rec["topic"], rec["queue_id"], rec["queue_offset"], rec["physical_offset"], rec["total_size"])
            assert (msg.body_crc, msg.sys_flag, msg.flag, msg.reconsume_times) == (
                rec["body_crc"], rec["sys_flag"], rec["flag"], rec["reconsume_times"])
            assert (msg.born_timestamp, msg.store_timestamp, msg.prepared_transaction_offset) == (
                rec["born_timestamp"], rec["store_timestamp"], rec["prepared_transaction_offset"])
            assert host(msg.born_host) == host(rec["born_host"])
            assert host(msg.store_host) == host(rec["store_host"])
            assert msg.properties == rec["properties"]
            assert msg.body == rec["body"]
            assert msg.offset_msg_id == rf.offset_msg_id(rec["store_host"], rec["physical_offset"])


def test_consume_queue_units_agree(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, written = mqlite_store
    expected: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for put in written:
        if put.get("sys_flag") == PREPARED:
            continue  # a half message never enters a consume queue
        tags = (put["properties"] or {}).get("TAGS")
        expected.setdefault((put["topic"], put["queue_id"]), []).append(
            (put["queue_offset"], put["offset"], put["size"], rf.tags_code(tags)))
    assert rf.list_consumequeues(path) == sorted(expected)
    with StoreReader(path) as reader:
        for (topic, queue_id), units in expected.items():
            assert rf.decode_consumequeue(path, topic, queue_id) == units
            cq = reader.consume_queue(topic, queue_id)
            assert cq is not None
            assert list(cq.iter_units(cq.min_offset, cq.max_offset)) == units
    # TopicA/0 has more than 8 units: its queue rolled to a second 160-byte file.
    cq_dir = os.path.join(path, "consumequeue", "TopicA", "0")
    assert sorted(os.listdir(cq_dir))[:2] == [f"{0:020d}", f"{CQ_FILE:020d}"]
    assert all(os.path.getsize(os.path.join(cq_dir, n)) == CQ_FILE for n in os.listdir(cq_dir))


def test_checkpoint_decodes(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, written = mqlite_store
    cp = rf.decode_checkpoint(path)
    assert cp["file_size"] == rf.CHECKPOINT_FILE_SIZE == 4096
    assert cp["problems"] == []
    last_ts = max(w["store_timestamp"] for w in written)
    assert cp["physic_msg_timestamp"] == last_ts  # a clean close flushed everything
    assert 0 < cp["logics_msg_timestamp"] <= last_ts
    assert 0 <= cp["index_msg_timestamp"] <= last_ts
    assert cp["confirm_phy_offset"] == rf.scan_commitlog(path).end_offset
    with StoreReader(path) as reader:
        ours = reader.checkpoint
        assert (ours.physic_msg_timestamp, ours.logics_msg_timestamp, ours.index_msg_timestamp,
                ours.master_flushed_offset, ours.confirm_commit_log_offset) == tuple(
            cp[k] for k in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
                            "master_flushed_offset", "confirm_phy_offset"))


def test_index_lookups_find_every_key(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, written = mqlite_store
    paths = rf.index_files(path)
    assert len(paths) >= 2, "the keyed puts should fill a 63-entry index file"
    for p in paths:
        decoded = rf.decode_index_file(p, hash_slot_num=SLOTS)
        assert decoded["problems"] == []
        assert (decoded["hash_slot_num"], decoded["index_num"]) == (SLOTS, INDEX_NUM)
        assert os.path.getsize(p) == 40 + SLOTS * 4 + INDEX_NUM * 20
    for put in written:
        props = put["properties"] or {}
        keys = [k for k in props.get("KEYS", "").split(" ") if k]
        if "UNIQ_KEY" in props:
            keys.append(props["UNIQ_KEY"])
        for key in keys:
            hits = [o for p in reversed(paths) for o in rf.index_lookup(p, f"{put['topic']}#{key}", hash_slot_num=SLOTS)]
            assert put["offset"] in hits, (put["topic"], key)
    with StoreReader(path) as reader:
        assert [m.body for m in reader.query_message("TopicA", "key-2")] == [b"Hello"]
        assert [m.body for m in reader.query_message("TopicA", "half-key")] == [b"half message"]
        assert [m.body for m in reader.query_message(RETRY_TOPIC, "retry-key")] == [b"retry me"]
        assert [m.body for m in reader.query_message("TopicC", "batch-x")] == [b"b222"]


def test_reference_cross_check_is_clean(mqlite_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, _ = mqlite_store
    assert rf.cross_check_store(path, hash_slot_num=SLOTS) == []
    assert verify_store(path).ok


def test_non_ascii_topic_is_refused_or_readable_by_rocketmq(tmp_path: Path) -> None:
    # A 1-byte (V1) topic length over 127 would read as negative in Java.
    topic = "主题" * 30  # 60 characters, 180 UTF-8 bytes
    with MessageStore(str(tmp_path), StoreConfig(commitlog_file_size=SEGMENT)) as store:
        try:
            store.put(topic, 0, b"x")
        except mqlite.MQClientError:
            return  # refusing it, as the broker's HookUtils does for > 127 bytes, is fine too
    scan = rf.scan_commitlog(str(tmp_path))
    assert scan.problems == []
    assert [rec["topic"] for rec in scan.records] == [topic]


def test_an_explicit_zero_born_timestamp_is_stored(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(commitlog_file_size=SEGMENT)) as store:
        store.put("T", 0, b"x", born_timestamp=0)
        store.put_batch("T", 0, [b"y"], born_timestamp=0)
    assert [rec["born_timestamp"] for rec in rf.decode_commitlog(str(tmp_path))] == [0, 0]


# ------------------------------------------------------------------------------------------------
# (b) a broker writes, mqlite reads, recovers and appends
# ------------------------------------------------------------------------------------------------

T0 = 1_700_000_000_000
PREFILLED = 5  # queue T/1 starts at queue offset 5 behind pre-filled blank units


def _write_broker_store(path: str, *, preallocate: bool) -> list[dict[str, Any]]:
    """A broker-style store; returns per record what was appended and the writer's answer."""
    out: list[dict[str, Any]] = []
    with rf.BrokerStyleWriter(path, commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE,
                              hash_slot_num=SLOTS, index_num=INDEX_NUM,
                              preallocate_next_commitlog_file=preallocate) as w:
        w.set_next_queue_offset("T", 1, PREFILLED)

        def append(topic: str, queue_id: int, body: bytes, props: dict[str, str] | None = None,
                   **kwargs: Any) -> None:
            ts = T0 + 10 * len(out)
            answer = w.append(topic, queue_id, body, props, store_timestamp=ts, **kwargs)
            parsed = rf.decode_properties(kwargs["properties_raw"]) if "properties_raw" in kwargs else (props or {})
            out.append({"topic": topic, "queue_id": queue_id, "body": body, "properties": parsed,
                        "flag": kwargs.get("flag", 0), "born_host": kwargs.get("born_host", "127.0.0.1:54321"),
                        "born_timestamp": kwargs.get("born_timestamp", ts),
                        "reconsume_times": kwargs.get("reconsume_times", 0),
                        "compressed": kwargs.get("compress", False), **answer})

        append("T", 0, b"from ipv6", {"TAGS": "TagA", "KEYS": "k-a k-b", "UNIQ_KEY": "AC110001000100000000000011110000"},
               born_host=IPV6_BORN, flag=3, born_timestamp=T0 - 5)
        append("T", 1, b"compressible " * 400, {"TAGS": "TagZ", "KEYS": "zipped"}, compress=True)
        append(RETRY_TOPIC, 0, b"retried", {"KEYS": "retry-key", "RETRY_TOPIC": "T"}, reconsume_times=2)
        append("T", 0, b"odd properties", properties_raw="a\x01\x02b\x01x\x02")
        append("T", 0, b"half", {"KEYS": "half-key", "TRAN_MSG": "true"}, sys_flag=PREPARED)
        append("T", 0, b"committed", {"KEYS": "commit-key"}, sys_flag=0x8, prepared_transaction_offset=out[-1]["physical_offset"])
        append("T", 0, b"rolled back", {"KEYS": "rollback-key"}, sys_flag=0xC)
        append("T", 1, b"", {})  # empty body, no properties
        for i in range(40):
            append("T", i % 2, bytes([65 + i % 26]) * (90 + 7 * i), {"TAGS": f"Tag{i % 3}", "KEYS": f"bulk-{i}"})
    return out


@pytest.fixture()
def broker_store(tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    path = str(tmp_path / "broker")
    records = _write_broker_store(path, preallocate=True)
    files = sorted(os.listdir(os.path.join(path, "commitlog")))
    last = Path(path, "commitlog", files[-1])
    assert len(files) >= 3 and not any(last.read_bytes()), "expected a pre-allocated, all-zero next segment"
    assert rf.cross_check_store(path, hash_slot_num=SLOTS) == []
    assert not os.path.exists(os.path.join(path, "config", "store.json"))
    return path, records


def _in_queue(records: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    queues: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        if r["in_consume_queue"]:
            queues.setdefault((r["topic"], r["queue_id"]), []).append(r)
    return queues


def _check_message(msg: Any, r: dict[str, Any]) -> None:
    what = f"{r['topic'][:20]}/{r['queue_id']} at {r['physical_offset']}"
    assert msg.topic == r["topic"] and msg.queue_id == r["queue_id"], what
    assert msg.queue_offset == r["queue_offset"], what
    assert msg.commit_log_offset == r["physical_offset"] and msg.store_size == r["size"], what
    assert msg.body == r["body"], what  # compressed bodies come back inflated
    assert msg.sys_flag == r["sys_flag"], what  # ... but the stored flags are kept
    assert msg.properties == r["properties"], what
    assert msg.flag == r["flag"] and msg.reconsume_times == r["reconsume_times"], what
    assert msg.store_timestamp == r["store_timestamp"] and msg.born_timestamp == r["born_timestamp"], what
    assert host(msg.born_host) == host(r["born_host"]), what
    assert host(msg.store_host) == host("127.0.0.1:10911"), what
    assert msg.offset_msg_id == r["offset_msg_id"], what


def _check_all_readable(store: Any, records: list[dict[str, Any]], *, more_appended: bool = False) -> None:
    for (topic, queue_id), expected in _in_queue(records).items():
        first = expected[0]["queue_offset"]
        result = store.get_messages(topic, queue_id, first, 64)
        assert result.status is GetMessageStatus.FOUND
        if more_appended:
            assert result.max_offset >= first + len(expected)
        else:
            assert result.max_offset == first + len(expected)
        got = result.messages[: len(expected)]
        assert [m.queue_offset for m in got] == [r["queue_offset"] for r in expected]
        for msg, r in zip(got, expected):
            _check_message(msg, r)
    for r in records:  # half and rolled-back messages too, by commit-log offset
        _check_message(store.look_message_by_offset(r["physical_offset"]), r)


def test_broker_store_sizes_are_inferred(broker_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, _ = broker_store
    with StoreReader(path) as reader:
        assert (reader.config.commitlog_file_size, reader.config.consumequeue_file_size,
                reader.config.max_hash_slot_num, reader.config.max_index_num) == (SEGMENT, CQ_FILE, SLOTS, INDEX_NUM)
    with mqlite.open(path, read_only=True) as broker:
        assert broker.read_only
        assert broker.store.config.commitlog_file_size == SEGMENT
    assert not os.path.exists(os.path.join(path, "config")), "a reader writes nothing"


def test_broker_store_every_message_is_readable(broker_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, records = broker_store
    assert any(r["compressed"] and r["sys_flag"] & 0x301 == 0x301 for r in records)
    assert any(r["sys_flag"] & 0x10 for r in records)
    with StoreReader(path) as reader:
        _check_all_readable(reader, records)
        # The queue that starts at 5: offsets below are blank units, never messages.
        below = reader.get_messages("T", 1, 0, 64)
        assert all(m.queue_offset >= PREFILLED for m in below.messages)
        assert [m.queue_offset for m in below.messages][:1] == [PREFILLED]


def test_broker_store_query_by_key(broker_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, records = broker_store
    with mqlite.open(path, read_only=True) as broker:
        assert [m.body for m in broker.query_message("T", "k-b")] == [b"from ipv6"]
        assert [m.body for m in broker.query_message("T", "AC110001000100000000000011110000")] == [b"from ipv6"]
        assert [m.body for m in broker.query_message("T", "zipped")] == [b"compressible " * 400]
        assert [m.body for m in broker.query_message(RETRY_TOPIC, "retry-key")] == [b"retried"]
        assert [m.sys_flag & 0xC for m in broker.query_message("T", "half-key")] == [PREPARED]
        assert broker.query_message("T", "rollback-key") == []  # rolled-back records are not indexed
        assert [m.queue_offset for m in broker.query_message("T", "bulk-7")] == [
            r["queue_offset"] for r in records if r["properties"].get("KEYS") == "bulk-7"]
        ipv6 = records[0]
        assert broker.view_message(ipv6["offset_msg_id"]).body == b"from ipv6"
        statuses = {row.queue_id: (row.min_offset, row.max_offset) for row in broker.topic_status("T")}
        queues = _in_queue(records)
        assert statuses[0] == (0, len(queues[("T", 0)]))
        assert statuses[1][1] == PREFILLED + len(queues[("T", 1)])
        mq = MessageQueue("T", broker.broker_name, 0)
        assert broker.search_offset(mq, records[-1]["store_timestamp"] + 1) == broker.max_offset(mq)


def test_broker_store_without_preallocation_verifies(tmp_path: Path) -> None:
    path = str(tmp_path / "broker")
    _write_broker_store(path, preallocate=False)
    report = verify_store(path)
    assert report.ok, report.summary()


def test_broker_store_with_a_preallocated_segment_verifies(broker_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, _ = broker_store
    report = verify_store(path)
    assert report.ok, report.summary()


def test_writer_recovers_a_broker_store_and_appends(broker_store: tuple[str, list[dict[str, Any]]]) -> None:
    path, records = broker_store
    queues = _in_queue(records)
    with mqlite.open(path) as broker:  # sizes inferred from the files; no abort file: normal recovery
        store = broker.store
        assert isinstance(store, MessageStore)
        assert store.last_exit_ok and not store.recovery.abnormal and not store.recovery.damaged_tail
        assert store.config.commitlog_file_size == SEGMENT and store.config.max_hash_slot_num == SLOTS
        _check_all_readable(store, records)
        next_t1 = PREFILLED + len(queues[("T", 1)])
        appended = [
            store.put("T", 1, b"after the broker", {"TAGS": "TagN", "KEYS": "new-key", "UNIQ_KEY": "NEWUNIQ"}),
            store.put("T", 0, b"from v6 again", {"KEYS": "new-key"}, born_host=IPV6_BORN),
            store.put(RETRY_TOPIC, 0, b"retry again", {"KEYS": "retry-key"}),
            store.put("Fresh", 2, b"a new topic", {"TAGS": "TagF"}),
        ]
        store.put_batch("T", 1, [b"x" * 1000, b"y" * 1000, b"z" * 1000], [{"KEYS": "batch-key"}, None, None])
        assert appended[0].queue_offset == next_t1
        assert appended[1].queue_offset == len(queues[("T", 0)])
        assert appended[2].queue_offset == len(queues[(RETRY_TOPIC, 0)])
        assert appended[3].queue_offset == 0
        assert appended[0].commit_log_offset == max(r["physical_offset"] + r["size"] for r in records)
        assert store.wait_dispatched()
        assert [m.body for m in broker.query_message("T", "new-key")] == [b"from v6 again", b"after the broker"]
        assert [m.body for m in broker.query_message(RETRY_TOPIC, "retry-key")] == [b"retry again", b"retried"]
        assert broker.view_message("NEWUNIQ").body == b"after the broker"
    assert os.path.exists(os.path.join(path, "config", "store.json"))
    # The combined store is one consistent broker store, for the reference and for mqlite.
    assert rf.cross_check_store(path, hash_slot_num=SLOTS) == []
    report = verify_store(path)
    assert report.ok, report.summary()
    decoded = rf.decode_commitlog(path)
    assert len(decoded) == len(records) + 4 + 3
    assert decoded[len(records)]["sys_flag"] == 0 and decoded[len(records) + 1]["sys_flag"] == 0x10
    with mqlite.open(path, read_only=True) as broker:
        _check_all_readable(broker.store, records, more_appended=True)
        assert broker.query_message_by_offset("T", 1, next_t1).body == b"after the broker"
        assert broker.max_offset(MessageQueue("T", broker.broker_name, 1)) == next_t1 + 4


def test_writer_opens_a_broker_store_with_another_index_shape(tmp_path: Path) -> None:
    # index_num = 10 * hash_slot_num: the file size does not reveal the shape, so pass it.
    path = str(tmp_path / "broker")
    with rf.BrokerStyleWriter(path, commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE,
                              hash_slot_num=10, index_num=100) as w:
        first = w.append("T", 0, b"a", {"KEYS": "k"}, store_timestamp=T0)
    with mqlite.open(path, max_hash_slot_num=10, max_index_num=100) as broker:
        assert [m.commit_log_offset for m in broker.query_message("T", "k")] == [first["physical_offset"]]
        store = broker.store
        assert isinstance(store, MessageStore)
        store.put("T", 0, b"b", {"KEYS": "k"})
        assert store.wait_dispatched()
        assert [m.body for m in broker.query_message("T", "k")] == [b"b", b"a"]
    assert rf.cross_check_store(path, hash_slot_num=10) == []


def test_a_failed_open_does_not_record_settings(tmp_path: Path) -> None:
    path = str(tmp_path / "broker")
    with rf.BrokerStyleWriter(path, commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE,
                              hash_slot_num=10, index_num=100) as w:
        w.append("T", 0, b"a", {"KEYS": "k"}, store_timestamp=T0)
    with pytest.raises(mqlite.StoreCorruptedError, match="index"):
        mqlite.open(path)  # the default index shape does not fit the files: refused, as it should be
    with mqlite.open(path, max_hash_slot_num=10, max_index_num=100) as broker:
        assert [m.body for m in broker.query_message("T", "k")] == [b"a"]


def test_explicit_index_shape_overrides_a_wrong_guess(tmp_path: Path) -> None:
    # 40 + 1*4 + 25*20 = 544 = 40 + 6*84: the file also looks like 6 slots and 24 entries.
    path = str(tmp_path / "broker")
    with rf.BrokerStyleWriter(path, commitlog_file_size=SEGMENT, consumequeue_file_size=CQ_FILE,
                              hash_slot_num=1, index_num=25) as w:
        w.append("T", 0, b"a", {"KEYS": "k"}, store_timestamp=T0)
    with StoreReader(path, max_hash_slot_num=1, max_index_num=25) as reader:
        assert [m.body for m in reader.query_message("T", "k")] == [b"a"]
