"""The Spark source, streaming: offsets, read limits, AvailableNow, restarts, new queues, group progress.

The stream reader's offset logic is driven directly first (fast, no Spark);
then real queries on the shared local session check what Spark does with it:
micro-batches cut by maxOffsetsPerTrigger, AvailableNow, a restart from the
checkpoint that neither loses nor repeats a message, a topic created between
runs, and the consumer group's offsets.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402
from support import TINY_STORE  # noqa: E402

import mqlite  # noqa: E402
from mqlite import Message, Producer  # noqa: E402
from mqlite.errors import MessageNotFoundError  # noqa: E402
from mqlite.offsetfile import consumer_offset_path  # noqa: E402
from mqlite.offsets import ConsumerOffsets  # noqa: E402
from mqlite.spark import group_offsets  # noqa: E402
from mqlite.spark.groupoffsets import SIDE_FILE, commit_stream_offsets  # noqa: E402
from mqlite.spark.options import parse_read_options  # noqa: E402
from mqlite.spark.schema import default_schema  # noqa: E402
from mqlite.spark.stream import MqliteStreamReader, share_budget  # noqa: E402



def send(path: str, topic: str, count: int, first: int = 0) -> None:
    with mqlite.open(path, **TINY_STORE) as broker, Producer(broker) as producer:
        for i in range(first, first + count):
            producer.send(Message(topic, f"{topic}-{i}".encode(), tags=f"T{i % 2}"))


def stream_reader(path: str, schema: StructType | None = None, **options: str) -> MqliteStreamReader:
    opts = parse_read_options({"path": path, **options}, streaming=True)
    return MqliteStreamReader(opts, schema or default_schema("rocketmq", True))


def rows_of(reader: MqliteStreamReader, start: dict[str, int], end: dict[str, int]) -> list[tuple[str, int, int]]:
    rows = []
    for part in reader.partitions(start, end):
        for batch in pickle.loads(pickle.dumps(reader)).read(pickle.loads(pickle.dumps(part))):
            rows += zip(batch.column("topic").to_pylist(), batch.column("queueId").to_pylist(),
                        batch.column("queueOffset").to_pylist())
    return rows


# -- the offset logic, without Spark -----------------------------------------------------------------
def test_share_budget_is_proportional_and_exact() -> None:
    start = {"a/0": 10, "a/1": 0, "b/0": 5}
    end = {"a/0": 110, "a/1": 7, "b/0": 5, "c/0": 40}
    for budget in (1, 7, 50, 100, 146, 1000):
        cut = share_budget(start, end, budget)
        taken = {k: cut[k] - start.get(k, 0) for k in end}
        assert sum(taken.values()) == min(budget, 147) and all(0 <= taken[k] <= end[k] - start.get(k, 0) for k in end)
    assert share_budget(start, end, 147) == end


def test_offsets_limits_new_queues_and_available_now(tmp_path: Any) -> None:
    path = str(tmp_path / "store")
    send(path, "s1", 40)
    reader = stream_reader(path, subscribePattern="s.*", startingOffsets="earliest", maxOffsetsPerTrigger="15")
    start = reader.initialOffset()
    assert start == {f"s1/{q}": 0 for q in range(4)}
    assert reader.getDefaultReadLimit() == ReadMaxRows(15)
    seen = []
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert list(end) == sorted(end) and json.loads(json.dumps(end)) == end
        if end == start:
            break
        assert 0 < sum(end[k] - start.get(k, 0) for k in end) <= 15
        seen += rows_of(reader, start, end)
        start = end
    assert sorted(seen) == sorted(("s1", q, o) for q in range(4) for o in range(10))
    # A new topic matching the pattern is picked up from its first message; AvailableNow freezes the heads.
    send(path, "s2", 8)
    reader.prepareForTriggerAvailableNow()
    send(path, "s1", 4, first=40)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert sorted(rows_of(reader, start, end)) == sorted(("s2", q, o) for q in range(4) for o in range(2))
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    # ReadMinRows waits for enough rows; latest starts at the heads; timestamps resolve per queue.
    later = stream_reader(path, subscribe="s1")
    head = later.initialOffset()
    assert head == {f"s1/{q}": 11 for q in range(4)}
    assert later.latestOffset(head, ReadMinRows(5)) == head
    behind = {**head, "s1/0": 5}  # six waiting
    assert later.latestOffset(behind, ReadMinRows(6)) == head
    assert later.latestOffset(behind, ReadMinRows(7)) == behind
    assert later.latestOffset(behind, ReadAllAvailable()) == head
    chosen = stream_reader(path, subscribe="s1", startingOffsets='{"s1": {"0": 3, "1": -2}}')
    assert chosen.initialOffset() == {"s1/0": 3, "s1/1": 0, "s1/2": 11, "s1/3": 11}  # the rest: latest
    with mqlite.open(path) as broker:
        stamp = broker.store.store_timestamp("s1", 2, 6)
        timed = stream_reader(path, subscribe="s1", startingTimestamp=str(stamp))
        for key, offset in timed.initialOffset().items():  # each queue's first message stored at or after it
            queue_id = int(key.split("/")[1])
            assert offset == 11 or broker.store.store_timestamp("s1", queue_id, offset) >= stamp
            assert offset == 0 or broker.store.store_timestamp("s1", queue_id, offset - 1) < stamp
        assert timed.initialOffset()["s1/2"] <= 6
    for r in (reader, later, chosen, timed):
        r.stop()


def test_data_loss_in_a_stream(tmp_path: Any) -> None:
    path = str(tmp_path / "store")
    send(path, "s1", 40)
    strict = stream_reader(path, subscribe="s1", startingOffsets="earliest")
    with pytest.raises(MessageNotFoundError, match="failOnDataLoss"):
        strict.latestOffset({"s1/0": 50}, ReadAllAvailable())  # past the end: the queue shrank
    lenient = stream_reader(path, subscribe="s1", failOnDataLoss="false")
    assert lenient.latestOffset({"s1/0": 50}, ReadAllAvailable())["s1/0"] == 10
    strict.stop()
    lenient.stop()


def test_group_offsets_go_to_the_store_or_the_side_file(tmp_path: Any) -> None:
    path = str(tmp_path / "store")
    side = os.path.join(path, SIDE_FILE)
    send(path, "s1", 8)
    assert commit_stream_offsets(path, "etl", {"s1/0": 2, "s1/1": 1}) is True
    with mqlite.open(path) as broker:  # a live writer holds the lock: the side file takes the offsets
        assert commit_stream_offsets(path, "etl", {"s1/0": 2, "s1/1": 2}) is False
        assert os.path.exists(side)
        assert group_offsets(path, "etl") == {"s1": {0: 2, 1: 2}}
        assert broker.offsets is not None and broker.offsets.query("etl", "s1", 1) == 1
        # The live broker takes the side file in when asked for progress (and every persist round).
        assert {(p.queue_id, p.consumer_offset) for p in broker.consumer_progress("etl")} >= {(0, 2), (1, 2)}
        assert not os.path.exists(side) and broker.offsets.query("etl", "s1", 1) == 2
        assert commit_stream_offsets(path, "etl", {"s1/0": 3, "s1/1": 3}) is False
    assert not os.path.exists(side)  # absorbed when the broker stopped
    assert ConsumerOffsets(path).table_for("etl") == {"s1": {0: 3, 1: 3}}
    assert commit_stream_offsets(path, "etl", {"s1/0": 4, "s1/1": 4}) is True  # free again: straight to the store
    assert not os.path.exists(side)
    with mqlite.open(path) as broker:
        progress = {(p.queue_id, p.consumer_offset) for p in broker.consumer_progress("etl")}
        assert {(0, 4), (1, 4)} <= progress


def test_group_offsets_beside_a_writer_in_this_process_keep_its_posix_lock(tmp_path: Any) -> None:
    # Closing any descriptor of the lock file drops the process's lockf lock: the group-offset
    # commit must not open the file while this process holds the store.
    import subprocess
    import sys

    path = str(tmp_path / "store")
    send(path, "s1", 2)
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n")
    with mqlite.open(path):
        assert commit_stream_offsets(path, "etl", {"s1/0": 1}) is False
        child = subprocess.run([sys.executable, "-c", probe, os.path.join(path, "lock")], timeout=60)
        assert child.returncode == 3  # still held


# -- through Spark ------------------------------------------------------------------------------------
def run_stream(spark: Any, path: str, checkpoint: str, **options: str) -> list[tuple[int, list[tuple[Any, ...]]]]:
    """Run one AvailableNow query into foreachBatch; returns [(batch id, rows)]."""
    batches: list[tuple[int, list[tuple[Any, ...]]]] = []

    def collect(df: Any, batch_id: int) -> None:
        table = df.select("topic", "queueId", "queueOffset", "body").toArrow()
        batches.append((batch_id, list(zip(*(table.column(c).to_pylist() for c in table.column_names)))))

    reader = spark.readStream.format("mqlite")
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load(path).writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    query.stop()
    assert query.exception() is None
    return batches


def test_in_spark_available_now_restart_new_topic_and_group(spark: Any, tmp_path: Any) -> None:
    path, checkpoint = str(tmp_path / "store"), str(tmp_path / "checkpoint")
    send(path, "s1", 300)
    options = {"subscribePattern": "s[0-9]", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "120",
               "group": "spark-etl"}
    first = run_stream(spark, path, checkpoint, **options)
    rows = [row for _, batch in first for row in batch]
    assert len(first) >= 3 and all(len(batch) <= 120 for _, batch in first)
    assert sorted(r[3] for r in rows) == sorted(f"s1-{i}".encode() for i in range(300))
    assert len(set((r[0], r[1], r[2]) for r in rows)) == 300
    with mqlite.open(path) as broker:  # the group's offsets are the query's progress: no lag left
        progress = broker.consumer_progress("spark-etl")
        assert len(progress) == 4 and all(p.consumer_offset == p.broker_offset == 75 for p in progress)
        with open(consumer_offset_path(path)) as f:
            assert "s1@spark-etl" in json.load(f)["offsetTable"]
    # More messages, and a new topic the pattern matches; the restart reads exactly those.
    send(path, "s1", 50, first=300)
    send(path, "s2", 30)
    second = run_stream(spark, path, checkpoint, **options)
    assert min(batch_id for batch_id, _ in second) > max(batch_id for batch_id, _ in first)
    again = sorted(r[3] for _, batch in second for r in batch)
    assert again == sorted([f"s1-{i}".encode() for i in range(300, 350)] + [f"s2-{i}".encode() for i in range(30)])
    recorded = group_offsets(path, "spark-etl")
    assert sum(recorded["s2"].values()) == 30 and sum(recorded["s1"].values()) == 350
    # A new query with the default startingOffsets (latest, as Kafka's) starts at the end.
    latest = run_stream(spark, path, str(tmp_path / "checkpoint-latest"), subscribe="s1")
    assert [row for _, batch in latest for row in batch] == []
