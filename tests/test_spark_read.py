"""The Spark source, read side: options, planning, the Arrow reader, and reads through a local Spark.

Expected rows come from tests/refformat.py, an independent decoder of the files
(consume-queue units, then the records they point at), never from mqlite's own
read path. Most checks run the partition reader in this process (fast); the
Spark tests share one session (conftest.py) and combine several checks per query.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import refformat as rf  # noqa: E402
from support import TINY_STORE  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

import mqlite  # noqa: E402
from mqlite import Message, Producer  # noqa: E402
from mqlite.errors import ConfigError, MessageNotFoundError  # noqa: E402
from mqlite.reader import StoreReader  # noqa: E402
from mqlite.spark.arrowread import read_range  # noqa: E402
from mqlite.spark.options import parse_read_options  # noqa: E402
from mqlite.spark.plan import QueueRange, plan_batch  # noqa: E402
from mqlite.spark.schema import default_schema, full_schema  # noqa: E402

TAGS = ["TagA", "TagB", None, "Tag-é"]


# -- stores ------------------------------------------------------------------------------------------
def produce_varied(path: str, count: int, seed: int = 7) -> list[tuple[Message, Any]]:
    """`count` messages over topics orders (4 queues) and audit (2): tags, keys, user properties, odd bodies."""
    rng = random.Random(seed)
    sent = []
    with mqlite.open(path, **TINY_STORE) as broker, Producer(broker) as producer:
        for i in range(count):
            topic = "orders" if i % 3 else "audit"
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) + b"\x01\x02"
            keys = [f"k{i}", "shared"] if i % 4 == 0 else ([f"key-{i}"] if i % 4 == 1 else None)
            properties = {"n": str(i), "note": "é" * (i % 5 + 1)} if i % 2 else None
            msg = Message(topic, body, tags=TAGS[i % 4], keys=keys, properties=properties, flag=i % 3)
            sent.append((msg, producer.send(msg)))
        batch = [Message("orders", b"batched-%d" % j, tags="TagB") for j in range(40)]
        producer.send_batch(batch)
        sent += [(msg, None) for msg in batch]
    return sent


def produce_uniform(path: str, count: int) -> None:
    """Messages of one layout (send_batch of identical messages): the reader's template path."""
    with mqlite.open(path, **TINY_STORE) as broker, Producer(broker) as producer:
        for first in range(0, count, 100):
            producer.send_batch([Message("uniform", b"x" * 60) for _ in range(min(100, count - first))])


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[tuple[Message, Any]]]:
    path = str(tmp_path_factory.mktemp("varied") / "store")
    return path, produce_varied(path, 600)


@pytest.fixture(scope="module")
def uniform(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("uniform") / "store")
    produce_uniform(path, 1500)
    return path


def oracle(path: str, topic: str, queue_id: int, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
    """The rocketmq-schema rows of a queue range, decoded by tests/refformat.py."""
    records = {r["physical_offset"]: r for r in rf.decode_commitlog(path)}
    rows = []
    for queue_offset, commit_log_offset, size, _ in rf.decode_consumequeue(path, topic, queue_id):
        if queue_offset < start or (end is not None and queue_offset >= end):
            continue
        rec = records[commit_log_offset]
        props = rec["properties"]
        rows.append({
            "topic": topic, "queueId": queue_id, "queueOffset": queue_offset,
            "msgId": props.get("UNIQ_KEY") or rf.offset_msg_id(rec["store_host"], commit_log_offset),
            "tags": props.get("TAGS"), "keys": [k for k in props.get("KEYS", "").split(" ") if k],
            "body": rec["body_decompressed"] if rec["body_decompressed"] is not None else rec["body"],
            "properties": props, "flag": rec["flag"], "bornTimestamp": rec["born_timestamp"],
            "storeTimestamp": rec["store_timestamp"], "reconsumeTimes": rec["reconsume_times"],
            "commitLogOffset": commit_log_offset, "storeSize": size,
        })
    return rows


def normalise(table: Any) -> list[dict[str, Any]]:
    """Arrow rows as plain values: timestamps in epoch ms, maps as dicts, headers as tuples."""
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64()).to_numpy() // 1000
            columns[name] = column.tolist()
        else:
            columns[name] = column.to_pylist()
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    for row in rows:
        if "properties" in row and row["properties"] is not None:
            row["properties"] = dict(row["properties"])
        if "headers" in row and row["headers"] is not None:
            row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
    return rows


def read_local(path: str, options: dict[str, str] | None = None, columns: list[str] | None = None,
               streaming: bool = False) -> list[dict[str, Any]]:
    """Plan and read like Spark would, in this process."""
    opts = parse_read_options({"path": path, **(options or {})}, streaming=streaming)
    schema = default_schema(opts.schema_name, opts.include_properties)
    if columns:
        schema = type(schema)([full_schema(opts.schema_name)[c] for c in columns])
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    with StoreReader(path) as store:
        parts = plan_batch(store, opts)
    batches = [b for part in parts for b in read_range(opts, arrow_schema, pickle.loads(pickle.dumps(part)))]
    for batch in batches:
        assert batch.schema.equals(arrow_schema)
    return normalise(pa.Table.from_batches(batches, schema=arrow_schema))


def key(row: dict[str, Any]) -> tuple[str, int, int]:
    return row["topic"], row["queueId"], row["queueOffset"]


# -- the partition reader, in this process ---------------------------------------------------------
def test_reader_matches_the_independent_decoder(varied: tuple[str, list[Any]]) -> None:
    path, sent = varied
    got = sorted(read_local(path, {"subscribe": "orders,audit"}), key=key)
    expected = sorted((row for t, q in rf.list_consumequeues(path) for row in oracle(path, t, q)), key=key)
    assert len(got) == len(expected) == len(sent)
    assert got == expected
    # And what was sent: bodies, tags, keys, user properties, queues and offsets.
    by_id = {row["msgId"]: row for row in got}
    for msg, result in sent:
        if result is None:
            continue
        row = by_id[result.msg_id]
        assert (row["topic"], row["queueId"], row["queueOffset"]) == (
            msg.topic, result.message_queue.queue_id, result.queue_offset)
        assert (row["body"], row["tags"], row["keys"], row["flag"]) == (msg.body, msg.tags, msg.keys, msg.flag)
        assert {k: v for k, v in row["properties"].items() if k in ("n", "note")} == {
            k: v for k, v in msg.properties.items() if k in ("n", "note")}


def test_template_path_matches_the_decoder(uniform: str) -> None:
    got = sorted(read_local(uniform, {"subscribe": "uniform"}), key=key)
    expected = sorted((row for q in range(4) for row in oracle(uniform, "uniform", q)), key=key)
    assert len(got) == 1500 and got == expected


def test_projection_kafka_schema_and_filters(varied: tuple[str, list[Any]]) -> None:
    path, _ = varied
    everything = {key(r): r for r in read_local(path, {"subscribe": "orders,audit"})}
    narrow = read_local(path, {"subscribe": "orders"}, columns=["body", "queueOffset", "tags"])
    assert narrow and set(narrow[0]) == {"body", "queueOffset", "tags"}
    kafka = read_local(path, {"subscribe": "audit", "schema": "kafka", "includeProperties": "true"})
    assert len(kafka) == sum(1 for k in everything if k[0] == "audit")
    for row in kafka:
        source = everything[("audit", row["partition"], row["offset"])]
        assert row["value"] == source["body"] and row["timestamp"] == source["storeTimestamp"]
        assert row["key"] == (source["properties"]["KEYS"].encode() if source["keys"] else None)
        assert dict((k, v.decode()) for k, v in row["headers"]) == source["properties"]
        assert row["timestampType"] == 1
    tagged = read_local(path, {"subscribe": "orders,audit", "subExpression": "TagA || Tag-é"})
    assert {key(r) for r in tagged} == {k for k, r in everything.items() if r["tags"] in ("TagA", "Tag-é")}
    sql = read_local(path, {"subscribe": "orders,audit", "filter": "n IS NOT NULL AND n < 100"})
    assert {key(r) for r in sql} == {k for k, r in everything.items() if "n" in r["properties"]
                                     and int(r["properties"]["n"]) < 100}
    both = read_local(path, {"subscribe": "orders", "subExpression": "TagB", "filter": "n > 300"})
    assert {key(r) for r in both} == {k for k, r in everything.items() if k[0] == "orders" and r["tags"] == "TagB"
                                      and int(r["properties"].get("n", "-1")) > 300}


def test_offsets_timestamps_assign_and_partitions(varied: tuple[str, list[Any]]) -> None:
    path, _ = varied
    rows = read_local(path, {"subscribe": "orders,audit"})
    ranged = read_local(path, {"assign": '{"orders": [1, 2]}', "startingOffsets": '{"orders": {"1": 5, "2": -2}}',
                               "endingOffsets": '{"orders/1": 20, "orders/2": -1}'})
    assert {key(r) for r in ranged} == {key(r) for r in rows if r["topic"] == "orders" and (
        (r["queueId"] == 1 and 5 <= r["queueOffset"] < 20) or r["queueId"] == 2)}
    times = sorted(r["storeTimestamp"] for r in rows)
    low, high = times[len(times) // 3], times[2 * len(times) // 3]
    windowed = read_local(path, {"subscribePattern": "ord.*|aud.*", "startingTimestamp": str(low),
                                 "endingTimestamp": str(high)})
    assert {key(r) for r in windowed} == {key(r) for r in rows if low <= r["storeTimestamp"] < high}
    opts = parse_read_options({"path": path, "subscribe": "orders", "minPartitions": "10"}, streaming=False)
    with StoreReader(path) as store:
        parts = plan_batch(store, opts)
    assert len(parts) >= 10 and sum(len(p) for p in parts) == sum(1 for r in rows if r["topic"] == "orders")
    covered = sorted((p.queue_id, o) for p in parts for o in range(p.start, p.end))
    assert len(covered) == len(set(covered))


@pytest.mark.parametrize("seed", range(12))
def test_properties_parser_agrees_with_the_decoder(seed: int) -> None:
    """Both parsers (one layout for a batch, and the general one) give RocketMQ's reading of every string."""
    from mqlite.spark.arrowread import _Properties

    rng = random.Random(seed)
    names = ["WAIT", "TAGS", "KEYS", "UNIQ_KEY", "n", "é"][: rng.randrange(1, 7)]
    widths = [rng.randrange(1, 12) for _ in names]
    rows = []
    # seed % 3: 0 one layout for the batch (`_Template`), 1 the same names with values of varying
    # length (`slot_names`), 2 some odd rows (the general parser).
    clean = seed % 3 == 0
    for _ in range(rng.choice([1, 2, 50])):
        letters = "abcd" if clean else "abcdé"
        values = [letters[0] * width if clean else rng.choice(letters) * rng.randrange(1, width + 1)
                  for width in widths]
        text = "".join(f"{name}\x01{value}\x02" for name, value in zip(names, values))
        if seed % 3 == 2 and rng.random() < 0.3:  # separators in values, empty parts, NULs, no last 0x02
            text = rng.choice([text.replace("a", "\x01", 1), text.replace("b", "\x02", 1), text[:-1],
                               text.replace("\x01", "\x01\x01", 1), "\x02" + text, text.replace("c", "\x00", 1),
                               text.replace(names[0], names[0][:-1] + "Z", 1), ""])
        rows.append(text)
    parsed = _Properties(pa.array(rows, type=pa.string()))
    if clean:
        assert parsed.template is not None
    elif seed % 3 == 1:
        assert parsed.slot_names() == [n.encode() for n in names]
    offsets = parsed.offsets().to_pylist()
    names_out, values_out = parsed.names.to_pylist(), parsed.values.to_pylist()
    for i, text in enumerate(rows):
        expected = rf.decode_properties(text)
        entries = list(zip(names_out[offsets[i] : offsets[i + 1]], values_out[offsets[i] : offsets[i + 1]]))
        assert dict(entries) == expected, (text, entries)
    for name in ("TAGS", "UNIQ_KEY", "n", "absent"):
        assert parsed.get(name).to_pylist() == [rf.decode_properties(text).get(name) for text in rows]


def test_reader_handles_the_empty_partition_and_pickles(varied: tuple[str, list[Any]]) -> None:
    from pyspark.sql.datasource import InputPartition

    from mqlite.spark.source import MqliteDataSource

    path, _ = varied
    opts = parse_read_options({"path": path, "subscribe": "orders"}, streaming=False)
    schema = to_arrow_schema(default_schema("rocketmq", True), timezone="UTC")
    assert list(read_range(opts, schema, InputPartition(None))) == []
    assert pickle.loads(pickle.dumps(opts)) == opts
    part = QueueRange(path, "orders", 0, 1, 3)
    assert pickle.loads(pickle.dumps(part)) == part
    source = MqliteDataSource({"path": path + "-missing", "subscribe": "orders"})
    with pytest.raises(ConfigError, match="no store at"):
        source.reader(source.schema())


def test_data_loss_fails_or_skips(tmp_path: Any) -> None:
    path = str(tmp_path / "store")
    produce_uniform(path, 400)
    full = read_local(path, {"subscribe": "uniform"})
    from_zero = json.dumps({"uniform": {str(q): 0 for q in range(4)}})
    # Retention removed the first commit-log segment: its messages are gone.
    os.unlink(os.path.join(path, "commitlog", "0" * 20))
    rest = read_local(path, {"subscribe": "uniform"})  # earliest is what is left (as a writer sees it)
    assert 0 < len(rest) < len(full) and all(r in full for r in rest)
    with pytest.raises(MessageNotFoundError, match="failOnDataLoss"):
        read_local(path, {"subscribe": "uniform", "startingOffsets": from_zero})
    assert read_local(path, {"subscribe": "uniform", "startingOffsets": from_zero, "failOnDataLoss": "false"}) == rest
    past_end = json.dumps({"uniform": {"0": 1000}})
    with pytest.raises(MessageNotFoundError, match=r"next offset \d+"):
        read_local(path, {"subscribe": "uniform", "startingOffsets": past_end})
    assert read_local(path, {"assign": json.dumps({"uniform": [0]}), "startingOffsets": past_end,
                             "failOnDataLoss": "false"}) == []


def test_a_record_set_aside_by_recovery_is_never_read(tmp_path: Any) -> None:
    path = str(tmp_path / "store")
    produce_uniform(path, 200)
    with StoreReader(path) as store:
        qid = next(q for q in store.queue_ids("uniform") if store.max_offset("uniform", q) > 30)
        victim = store.get_messages("uniform", qid, 20, 1).messages[0]
    with open(os.path.join(path, "commitlog", "0" * 20), "r+b") as f:  # a body byte: only the CRC notices
        f.seek(victim.commit_log_offset + 88 + 5)
        f.write(b"!")
    open(os.path.join(path, "abort"), "w").close()
    with mqlite.open(path) as broker:
        assert broker.store.recovery.set_aside == [(victim.commit_log_offset, victim.store_size)]
    with pytest.raises(MessageNotFoundError, match="failOnDataLoss"):
        read_local(path, {"subscribe": "uniform"})
    rows = read_local(path, {"subscribe": "uniform", "failOnDataLoss": "false"})
    assert len(rows) == 199 and ("uniform", qid, 20) not in {key(r) for r in rows}


BAD_OPTIONS = [
    ({}, "subscribe, subscribePattern and assign"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one"),
    ({"subscribePattern": "("}, "subscribePattern"),
    ({"assign": "[1]"}, "assign"),
    ({"assign": '{"a": [-1]}'}, "assign"),
    ({"subscribe": "a", "startingOffsets": "newest"}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets='latest' is not allowed"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "queue id 'x'"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -5}}'}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "names topic(s) b"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"subscribe": "a", "startingTimestamp": "5", "startingOffsets": "earliest"}, "only one of"),
    ({"subscribe": "a", "startingTimestamp": "5", "endingTimestamp": "4"}, "endingTimestamp"),
    ({"subscribe": "a", "subExpression": "|| ||"}, "subExpression must be a tag expression"),
    ({"subscribe": "a", "filter": "a >"}, "filter"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be a positive integer"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss must be 'true' or 'false'"),
    ({"subscribe": "a", "includeProperties": "1"}, "includeProperties"),
    ({"subscribe": "a", "schema": "avro"}, "schema must be one of rocketmq, kafka"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger applies to streaming"),
    ({"subscribe": "a", "group": "g"}, "group applies to streaming"),
    ({"subscribe": "a", "subscibe": "b"}, "unknown read option(s) subscibe"),
    ({"subscribe": "\u8ba2\u5355"}, "option subscribe: topic"),
    ({"subscribe": "a,bad topic!"}, "option subscribe: topic 'bad topic!'"),
    ({"assign": '{"\u8ba2\u5355": [0]}'}, "option assign: topic"),
    ({"subscribePattern": "a.*", "startingOffsets": '{"a b": {"0": 1}}'}, "option startingOffsets: topic 'a b'"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_read_options({"path": "/tmp/mq", **options}, streaming=False)
    assert message in str(info.value)


def test_a_user_schema_may_not_declare_a_nullable_column_not_null() -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from mqlite.spark.schema import check_user_schema

    check_user_schema(StructType([StructField("queueOffset", LongType(), False)]), "rocketmq")  # never null
    with pytest.raises(ConfigError, match="column 'tags' can be null"):
        check_user_schema(StructType([StructField("tags", StringType(), False)]), "rocketmq")


def test_stream_only_checks() -> None:
    with pytest.raises(ConfigError, match="endingOffsets applies to batch"):
        parse_read_options({"path": "/p", "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger must be a positive integer"):
        parse_read_options({"path": "/p", "subscribe": "a", "maxOffsetsPerTrigger": "-3"}, streaming=True)
    with pytest.raises(ConfigError, match="group"):
        parse_read_options({"path": "/p", "subscribe": "a", "group": "a@b"}, streaming=True)
    opts = parse_read_options({"path": "/p", "subscribe": "a", "startingOffsets": "latest"}, streaming=True)
    assert opts.starting.default == -1


@pytest.mark.parametrize("group", ["etl.daily", "etl job", "../etl", "x" * 256])
def test_stream_group_follows_rocketmq_group_rule(group: str) -> None:
    # The stream's progress is recorded as the group's offsets, which `Broker.consumer_progress`
    # and every consumer check with `Validators.checkGroup`: a name they refuse is refused here.
    with pytest.raises(ConfigError, match="option group"):
        parse_read_options({"path": "/p", "subscribe": "a", "group": group}, streaming=True)
    opts = parse_read_options({"path": "/p", "subscribe": "a", "group": "etl_daily-1"}, streaming=True)
    assert opts.group == "etl_daily-1"


# -- through Spark --------------------------------------------------------------------------------------
def spark_rows(df: Any) -> list[dict[str, Any]]:
    return normalise(df.toArrow())


def test_in_spark_round_trip_with_the_options(spark: Any, varied: tuple[str, list[Any]]) -> None:
    """No register call: `pyspark_mqlite` is found by name. Every row equals the decoder's."""
    path, sent = varied
    expected = sorted((row for t, q in rf.list_consumequeues(path) for row in oracle(path, t, q)), key=key)
    reader = spark.read.format("mqlite")
    df = reader.option("subscribe", "orders,audit").load(path)
    assert df.schema == default_schema("rocketmq", True)
    assert sorted(spark_rows(df), key=key) == expected
    assert len(expected) == len(sent)
    # Several options in one query each (a query costs ~0.5 s once the session is warm).
    parted = spark.read.format("mqlite").option("subscribePattern", "orders").option("minPartitions", "7").load(path)
    assert parted.rdd.getNumPartitions() >= 7
    narrow = (spark.read.format("mqlite").schema("queueOffset long, body binary, storeTimestamp timestamp")
              .option("assign", '{"orders": [3]}').option("startingOffsets", '{"orders": {"3": 2}}')
              .option("endingOffsets", '{"orders": {"3": 9}}').load(path))
    assert spark_rows(narrow) == [{"queueOffset": r["queueOffset"], "body": r["body"],
                                   "storeTimestamp": r["storeTimestamp"]}
                                  for r in expected if r["topic"] == "orders" and r["queueId"] == 3
                                  and 2 <= r["queueOffset"] < 9]
    filtered = (spark.read.format("mqlite").option("subscribe", "orders,audit").option("subExpression", "TagA")
                .option("filter", "n IS NOT NULL").option("includeProperties", "false")
                .option("failOnDataLoss", "false").load(path))
    assert "properties" not in filtered.columns
    assert sorted(r["msgId"] for r in spark_rows(filtered)) == sorted(
        r["msgId"] for r in expected if r["tags"] == "TagA" and "n" in r["properties"])
    kafka = spark.read.format("mqlite").option("subscribe", "audit").option("schema", "kafka").load(path)
    assert kafka.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert sorted((r["partition"], r["offset"], r["value"]) for r in spark_rows(kafka)) == sorted(
        (r["queueId"], r["queueOffset"], r["body"]) for r in expected if r["topic"] == "audit")
    times = sorted(r["storeTimestamp"] for r in expected)
    since = spark.read.format("mqlite").option("subscribe", "orders,audit").option(
        "startingTimestamp", str(times[300])).load(path)
    assert since.count() == sum(1 for t in times if t >= times[300])


def test_in_spark_register_and_bad_options(spark: Any, varied: tuple[str, list[Any]]) -> None:
    from mqlite.spark import register

    path, _ = varied
    register(spark)
    with pytest.raises(Exception, match="startingOffsets"):
        spark.read.format("mqlite").option("subscribe", "orders").option("startingOffsets", "{").load(path).collect()
    with pytest.raises(Exception, match="subscribe, subscribePattern and assign"):
        spark.read.format("mqlite").load(path).collect()
    with pytest.raises(Exception, match="column 'partition' is not a column of the rocketmq schema"):
        spark.read.format("mqlite").schema("partition int").option("subscribe", "orders").load(path).collect()


def test_in_spark_reads_a_store_written_like_a_broker(spark: Any, tmp_path: Any) -> None:
    """BLANK-ended segments, V2 topic records, IPv6 hosts, compressed bodies, a queue that starts mid-file."""
    path = str(tmp_path / "broker")
    long_topic = "T" * 130  # more than 127 characters: MAGIC_V2
    rng = random.Random(3)
    with rf.BrokerStyleWriter(path, commitlog_file_size=8 * 1024, consumequeue_file_size=20 * 40) as writer:
        writer.set_next_queue_offset("BrokerTopic", 1, 25)
        for i in range(300):
            props = {"TAGS": f"t{i % 3}", "KEYS": f"key{i} other", "UNIQ_KEY": f"{i:032X}"} if i % 5 else {}
            body = bytes(rng.randrange(256) for _ in range(i % 97 + 1))
            writer.append("BrokerTopic" if i % 4 else long_topic, i % 2, body, props, flag=i % 7,
                          born_host=("::1", 4000) if i % 6 == 0 else ("10.0.0.1", 5000),
                          store_host=("fe80::1", 10911) if i % 9 == 0 else ("127.0.0.1", 10911),
                          compress=i % 8 == 0, store_timestamp=1_700_000_000_000 + i, reconsume_times=i % 2)
            if i % 50 == 0:  # a prepared transaction's half: in the log, not in a consume queue
                writer.append("BrokerTopic", 0, b"half", {"TRAN_MSG": "true"}, sys_flag=0x4,
                              store_timestamp=1_700_000_000_000 + i)
    expected = sorted((row for t, q in rf.list_consumequeues(path) for row in oracle(path, t, q)), key=key)
    assert len(expected) == 300 and any(r["queueOffset"] >= 25 for r in expected)
    assert sorted(read_local(path, {"subscribePattern": "BrokerTopic|T+"}), key=key) == expected
    df = spark.read.format("mqlite").option("subscribe", f"BrokerTopic,{long_topic}").load(path)
    assert sorted(spark_rows(df), key=key) == expected


LIVE_WRITER = textwrap.dedent("""
    import sys, mqlite
    from mqlite import Message, Producer
    path = sys.argv[1]
    with mqlite.open(path, commitlog_file_size=256 * 1024, consumequeue_file_size=20 * 500,
                     flush_disk_type="ASYNC_FLUSH") as broker, Producer(broker) as producer:
        for i in range(10**9):
            producer.send(Message("live", b"%08d" % i * (1 + i % 13), tags="T%d" % (i % 3), keys=["k%d" % i]))
            if i == 2000:
                print("READY", flush=True)
""")


def test_in_spark_read_beside_a_live_writer_is_a_consistent_prefix(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "live")
    child = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, path], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
        df = spark.read.format("mqlite").option("subscribe", "live").load(path)
        counts = []
        for _ in range(2):
            rows = spark_rows(df.select("queueId", "queueOffset", "body", "tags", "keys"))
            counts.append(len(rows))
            by_queue: dict[int, list[dict[str, Any]]] = {}
            for row in rows:
                by_queue.setdefault(row["queueId"], []).append(row)
            seqs = []
            for queue_rows in by_queue.values():
                queue_rows.sort(key=lambda r: r["queueOffset"])
                assert [r["queueOffset"] for r in queue_rows] == list(range(len(queue_rows)))  # no gap
                steps = {int(b["body"][:8]) - int(a["body"][:8]) for a, b in zip(queue_rows, queue_rows[1:])}
                assert steps <= {len(by_queue)}  # each queue holds every len(queues)-th message
                for row in queue_rows:
                    seq = int(row["body"][:8])
                    assert row["body"] == b"%08d" % seq * (1 + seq % 13)  # whole records only
                    assert (row["tags"], row["keys"]) == (f"T{seq % 3}", [f"k{seq}"])
                    seqs.append(seq)
            # Round robin over the queues: what was read is every message up to about one point
            # (the queues' heads are read one after another while the writer goes on).
            assert len(seqs) == len(set(seqs)) and max(seqs) + 1 - len(seqs) < 500
            time.sleep(0.2)
        assert counts[1] >= counts[0] > 2000
    finally:
        child.kill()
        child.wait()
