"""The Spark writer (issue 5, "Writing"): batch writes and the streaming sink into a store.

Real local Spark (one session for the run), read back with mqlite itself: every row stored once
with its topic, queue, tags, keys and properties; per-queue offsets contiguous; `verify_store`
clean; a failed job or a store held by a live process leaves nothing stored; a replayed
micro-batch is not stored twice. The checks that need no Spark (schemas, options, bad rows,
commit idempotency, concurrent committers) call the writer classes directly.

Benchmark (not part of the test run; results in docs/benchmarks.md, 5e):

    .venv/bin/python tests/test_spark_write.py --bench --rows 1000000 --rounds 3
    .venv/bin/python tests/test_spark_write.py --commit --rows 500000 --rounds 3   # the commit alone
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

import mqlite  # noqa: E402
from mqlite.message import java_string_hash  # noqa: E402
from mqlite.inbox import INBOX_DIR, SINK_DIR, STAGING_DIR, import_inbox  # noqa: E402
from mqlite.spark import writer as writer_module  # noqa: E402
from mqlite.spark.writer import MqliteBatchWriter, MqliteStreamWriter, StagedFiles  # noqa: E402
from mqlite.verify import verify_store  # noqa: E402

from _crashchild import Child, read_queue  # noqa: E402
from support import SMALL_STORE, deadline, wait_until  # noqa: E402

#: Jobs of many keyed rows: an index that holds them in one file.
SMALL: dict[str, Any] = {**SMALL_STORE, "max_index_num": 20000}
FORMAT = "mqlite"


@pytest.fixture
def session(spark: SparkSession) -> SparkSession:
    """The run's one session (tests/conftest.py); it finds "mqlite" by itself, registering is harmless."""
    from mqlite.spark import register

    register(spark)
    return spark


def _bench_session() -> SparkSession:
    """A session for `bench` (outside pytest): default JIT, quiet."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[2]").appName("mqlite-write-bench")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    from mqlite.spark import register

    register(session)
    return session


# -- helpers ------------------------------------------------------------------------------------------------
def stored(path: str) -> dict[str, list[list[Any]]]:
    """Every message of every user topic: topic -> per queue, in queue order (checked contiguous)."""
    with mqlite.open(path, read_only=True) as broker:
        store = broker.store
        return {topic: [read_queue(store, topic, q) for q in range(max(store.queue_ids(topic)) + 1)]
                for topic in store.topics() if not topic.startswith(("%", "RMQ_", "SCHEDULE_", "rmq_"))}


def all_bodies(path: str) -> list[bytes]:
    return [bytes(m.body) for queues in stored(path).values() for queue in queues for m in queue]


def assert_clean(path: str) -> None:
    report = verify_store(path)
    assert report.ok, report.summary()
    staging = os.path.join(path, STAGING_DIR)
    # Tombstones of aborted jobs stay a day (late tasks of those jobs look for them).
    leftovers = [n for n in os.listdir(staging) if n != "committers" and not n.endswith(".aborted")] \
        if os.path.isdir(staging) else []
    assert not leftovers, f"staging left behind: {leftovers}"
    committers = os.path.join(staging, "committers")
    assert not os.path.isdir(committers) or not os.listdir(committers)


def arrow_batch(**columns: Any) -> Any:
    return pa.record_batch(list(columns.values()), names=list(columns))


# -- the driver's checks (no Spark) ---------------------------------------------------------------------------------
BODY = StructField("body", BinaryType())
HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


@pytest.mark.parametrize("fields, options, overwrite, expected", [
    ([StructField("payload", BinaryType())], {"topic": "T"}, False, r"needs a 'body' \(or 'value'\) column"),
    ([StructField("body", IntegerType())], {"topic": "T"}, False, r"column 'body' is int"),
    ([BODY, StructField("value", StringType())], {"topic": "T"}, False, r"both a 'body' and a 'value'"),
    ([BODY], {}, False, r"add a 'topic' column \(string\) or \.option\('topic'"),
    ([BODY, StructField("topic", IntegerType())], {}, False, r"column 'topic' is int"),
    ([BODY, StructField("keys", ArrayType(IntegerType()))], {"topic": "T"}, False, r"column 'keys' is array<int>"),
    ([BODY, StructField("properties", MapType(StringType(), IntegerType()))], {"topic": "T"}, False,
     r"column 'properties' is map<string,int>"),
    ([BODY, StructField("queueId", StringType())], {"topic": "T"}, False, r"column 'queueId' is string"),
    ([BODY], {"topic": "T"}, True, r"only appends .*\.mode\('append'\)"),
    ([BODY], {"topic": "bad topic!"}, False, r"option 'topic': topic 'bad topic!' may only contain"),
    ([BODY], {"topic": "SCHEDULE_TOPIC_XXXX"}, False, r"option 'topic': sending to the system topic"),
    ([BODY], {"topic": "T", "whenLocked": "later"}, False, r"option 'whenLocked' is 'later'"),
    ([BODY], {"topic": "T", "lockTimeout": "soon"}, False, r"option 'lockTimeout' is 'soon'"),
    ([BODY], {"topic": "T", "producerProperties": "maybe"}, False,
     r"option 'producerProperties' must be 'true' or 'false', got 'maybe'"),
    ([BODY], {"topic": "T", "lockTimeout": "inf"}, False, r"option 'lockTimeout' is 'inf'"),
    ([BODY], {"topic": "T", "whenlock": "inbox"}, False, r"unknown option 'whenlock' for the mqlite .*writer; its "
                                                         r"options are path, topic, whenLocked"),
    ([BODY], {"topic": "T", "subscribe": "T", "lockTimeOut": "1"}, False, r"unknown option 'subscribe' "),
    ([BODY, StructField("keys", StringType()), StructField("key", StringType())], {"topic": "T"}, False,
     r"both a 'keys' and a 'key' column"),
    ([BODY, StructField("properties", MapType(StringType(), StringType())), StructField("headers", HEADERS)],
     {"topic": "T"}, False, r"both a 'properties' and a 'headers' column"),
    ([BODY, StructField("queueId", IntegerType()), StructField("partition", IntegerType())], {"topic": "T"}, False,
     r"both a 'queueId' and a 'partition' column"),
    ([BODY, StructField("key", IntegerType())], {"topic": "T"}, False, r"column 'key' is int; .* string or binary"),
    ([BODY, StructField("headers", MapType(StringType(), StringType()))], {"topic": "T"}, False,
     r"column 'headers' is map<string,string>; .* array<struct<key:string,value:binary>>"),
    ([BODY, StructField("partition", StringType())], {"topic": "T"}, False, r"column 'partition' is string"),
])
def test_bad_schema_or_option_is_refused_on_the_driver(tmp_path: Path, fields: list[StructField],
                                                       options: dict[str, str], overwrite: bool,
                                                       expected: str) -> None:
    for cls in (MqliteBatchWriter, MqliteStreamWriter):
        with pytest.raises(mqlite.MQClientError, match=expected) as raised:
            cls(str(tmp_path / "mq"), options, StructType(fields), overwrite)
        assert isinstance(raised.value, mqlite.ConfigError) == ("option '" in expected), raised.value
    assert not (tmp_path / "mq").exists()
    stream_only = {"topic": "T", "checkpointLocation": str(tmp_path / "ck")}
    MqliteStreamWriter(str(tmp_path / "mq"), stream_only, StructType([BODY]), False)
    with pytest.raises(mqlite.ConfigError, match=r"unknown option 'checkpointlocation' for the mqlite writer"):
        MqliteBatchWriter(str(tmp_path / "mq"), stream_only, StructType([BODY]), False)


def _stage_rows(path: str, options: dict[str, str], batch: Any) -> tuple[MqliteBatchWriter, StagedFiles]:
    schema = StructType([StructField(f.name, _spark_type(f.type)) for f in batch.schema])
    writer = MqliteBatchWriter(path, options, schema, False)
    return writer, writer.write(iter([batch]))


def _spark_type(arrow_type: Any) -> Any:
    if pa.types.is_binary(arrow_type):
        return BinaryType()
    if pa.types.is_integer(arrow_type):
        return IntegerType()
    if pa.types.is_list(arrow_type):
        return HEADERS if pa.types.is_struct(arrow_type.value_type) else ArrayType(StringType())
    if pa.types.is_map(arrow_type):
        return MapType(StringType(), StringType())
    return StringType()


@pytest.mark.parametrize("columns, expected", [
    ({"body": pa.array([b"ok", b""])}, r"column 'body', row 1 of partition 0: the message body is empty"),
    ({"body": pa.array([b"ok", None])}, r"column 'body', row 1 of partition 0: the body is null"),
    ({"body": pa.array([b"x" * 2000])}, r"column 'body', row 0 .*: message body is 2000 bytes; max_message_size is 1024"),
    ({"body": pa.array([b"a", b"b"]), "topic": pa.array(["T", None])}, r"column 'topic', row 1 .*: the topic is null"),
    ({"body": pa.array([b"a"]), "topic": pa.array(["RMQ_SYS_TRANS_HALF_TOPIC"])}, r"column 'topic', row 0 .*system topic"),
    ({"body": pa.array([b"a"]), "properties": pa.array([[("TAGS", "x")]], pa.map_(pa.string(), pa.string()))},
     r"column 'properties', row 0 .*'TAGS' is a reserved RocketMQ property name"),
    ({"body": pa.array([b"a"]), "properties": pa.array([[("a", " ")]], pa.map_(pa.string(), pa.string()))},
     r"column 'properties', row 0 .*non-blank"),
    ({"body": pa.array([b"a", b"b"]), "keys": pa.array([["k"], ["bad\x01key"]])}, r"column 'keys', row 1 .*separator"),
    ({"body": pa.array([b"a"]), "tags": pa.array(["t\x02"])}, r"column 'tags', row 0 .*separator"),
    ({"body": pa.array([b"a"]), "queueId": pa.array([-3], pa.int32())}, r"column 'queueId', row 0 .*negative"),
    ({"body": pa.array([b"a"]), "partition": pa.array([-3], pa.int32())}, r"column 'partition', row 0 .*negative"),
    ({"body": pa.array([b"a", b"b"]), "keys": pa.array([["k", None], ["k", "a b"]])},
     r"column 'keys', row 1 .*the key 'a b' holds a space"),
    ({"body": pa.array([b"a", b"b"]), "key": pa.array(["k", "a b"])}, r"column 'key', row 1 .*the key 'a b' holds a space"),
    ({"body": pa.array([b"a", b"b"]), "key": pa.array([b"k", b"\xff"])}, r"column 'key', row 1 .*not UTF-8"),
    ({"body": pa.array([b"a"]), "headers": pa.array([[{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}]],
                                                     pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))},
     r"column 'headers', row 0 .*header 'h' is given twice"),
    ({"body": pa.array([b"a"]), "headers": pa.array([[{"key": "h", "value": b"\xff"}]],
                                                     pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))},
     r"column 'headers', row 0 .*the value of header 'h' is not UTF-8"),
    ({"body": pa.array([b"a"]), "headers": pa.array([[{"key": "KEYS", "value": b"k"}]],
                                                     pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))},
     r"column 'headers', row 0 .*'KEYS' is a reserved .*F\.filter on headers"),
])
def test_bad_rows_fail_the_task_with_the_column_and_row(tmp_path: Path, columns: dict[str, Any],
                                                        expected: str) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, max_message_size=1024, **SMALL):
        pass
    options = {} if "topic" in columns else {"topic": "T"}
    with pytest.raises(mqlite.MQClientError, match=expected):
        _stage_rows(path, options, arrow_batch(**columns))


def test_commit_refuses_a_queue_the_topic_lacks_before_storing_anything(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL) as broker:
        broker.create_topic("T", 2)
    schema = StructType([BODY, StructField("queueId", IntegerType())])
    writer = MqliteBatchWriter(path, {"topic": "T"}, schema, False)
    good = writer.write(iter([arrow_batch(body=pa.array([b"a", b"b"]), queueId=pa.array([None, 1], pa.int32()))]))
    bad = writer.write(iter([arrow_batch(body=pa.array([b"c"]), queueId=pa.array([5], pa.int32()))]))
    with pytest.raises(mqlite.MQClientError, match=r"column 'queueId' is 5 for topic 'T', which has queues 0\.\.1"):
        writer.commit([good, bad])
    writer.abort([good, bad])
    assert all_bodies(path) == []
    assert_clean(path)


def test_stream_commit_stores_a_batch_id_once(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    schema = StructType([BODY])
    options = {"topic": "T", "checkpointLocation": str(tmp_path / "ck")}

    def run(batch_id: int, bodies: list[bytes]) -> None:
        writer = MqliteStreamWriter(path, options, schema, False)  # Spark makes one per process
        staged = writer.write(iter([arrow_batch(body=pa.array(bodies))]))
        writer.commit([staged], batch_id)

    run(0, [b"a0", b"a1"])
    run(1, [b"b0"])
    run(1, [b"b0"])  # replayed after a restart: already stored
    run(0, [b"a0", b"a1"])
    assert sorted(all_bodies(path)) == [b"a0", b"a1", b"b0"]
    marks = [n for n in os.listdir(os.path.join(path, SINK_DIR)) if n.endswith(".json")]
    assert len(marks) == 1 and json.loads(Path(path, SINK_DIR, marks[0]).read_text())["batchId"] == 1
    assert_clean(path)


_COMMITTER = textwrap.dedent("""
    import sys, pyarrow as pa
    from pyspark.sql.types import StructType, StructField, BinaryType
    from mqlite.spark.writer import MqliteBatchWriter
    path, name, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    writer = MqliteBatchWriter(path, {"topic": "C"}, StructType([StructField("body", BinaryType())]), False)
    bodies = pa.array([f"{name}-{i}".encode() for i in range(rows)])
    staged = [writer.write(iter([pa.record_batch([bodies[i::4]], names=["body"])])) for i in range(4)]
    print("STAGED", flush=True)
    sys.stdin.readline()
    writer.commit(staged)
    print("COMMITTED", flush=True)
""")


def test_concurrent_committers_wait_for_each_other(tmp_path: Path) -> None:
    """Four processes commit at once: each waits for the store while another committer holds it."""
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL) as broker:
        broker.create_topic("C", 3)
    procs = [subprocess.Popen([sys.executable, "-c", _COMMITTER, path, f"job{i}", "3000"], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(4)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "STAGED", p.stderr
        for p in procs:  # release all at once
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and "COMMITTED" in out, err
    finally:
        for p in procs:
            p.kill()
    bodies = all_bodies(path)
    assert sorted(bodies) == sorted(f"job{j}-{i}".encode() for j in range(4) for i in range(3000))
    assert_clean(path)


def test_bare_messages_carry_only_the_rows_properties(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    schema = StructType([BODY, StructField("tags", StringType())])
    writer = MqliteBatchWriter(path, {"topic": "T", "producerProperties": "false"}, schema, False)
    batch = arrow_batch(body=pa.array([b"a", b"b", b"c"]), tags=pa.array(["x", None, "x"]))
    writer.commit([writer.write(iter([batch]))])
    messages = {bytes(m.body): m for q in stored(path)["T"] for m in q}
    assert {b: m.properties for b, m in messages.items()} == {b"a": {"TAGS": "x"}, b"b": {}, b"c": {"TAGS": "x"}}
    assert all(m.msg_id == m.offset_msg_id for m in messages.values())
    assert_clean(path)


def _wait_inbox_imported(path: str) -> None:
    """Until the live holder (another process: nothing here can be woken) has imported every entry
    (the bad ones go to `failed/`)."""
    wait_until(lambda: not [n for n in os.listdir(os.path.join(path, INBOX_DIR)) if n != "failed"],
               "the live holder to import its inbox", 60)


def test_inbox_hand_off_then_import_in_order(tmp_path: Path) -> None:
    """A live process holds the store: jobs (a stream batch among them) handed to its inbox are
    stored by that process, in hand-off order, and the stream batch is not stored twice."""
    path, schema = str(tmp_path / "mq"), StructType([BODY])
    options = {"topic": "I", "whenLocked": "inbox"}
    stream = MqliteStreamWriter(path, {**options, "checkpointLocation": str(tmp_path / "ck")}, schema, False)
    with Child(path, "hold") as child:
        assert (child.readline(time.monotonic() + 60) or "").startswith("READY"), child.stderr()
        for name in ("one", "two"):
            writer = MqliteBatchWriter(path, options, schema, False)
            writer.commit([writer.write(iter([arrow_batch(body=pa.array([f"{name}-{i}".encode() for i in range(5)]))]))])
        staged = stream.write(iter([arrow_batch(body=pa.array([b"s-0", b"s-1"]))]))
        stream.commit([staged], 0)
        stream.commit([stream.write(iter([arrow_batch(body=pa.array([b"s-0", b"s-1"]))]))], 0)  # replayed
        # Queue 9 of a 4-queue topic: the hand-off checks it first and fails the job, nothing handed over.
        queued = MqliteBatchWriter(path, options, StructType([BODY, StructField("queueId", IntegerType())]), False)
        staged_queued = queued.write(iter([arrow_batch(body=pa.array([b"q-0"]), queueId=pa.array([9], pa.int32()))]))
        with pytest.raises(mqlite.MQClientError, match=r"inbox would refuse this Spark job's 1 rows.*"
                                                       r"column 'queueId' is 9 for topic 'I', which has queues 0\.\.3"):
            queued.commit([staged_queued])
        queued.abort([staged_queued])
        _wait_inbox_imported(path)  # by the holder, while it holds the store
        # Read-only, next to the holder: once its reput dispatched them.
        wait_until(lambda: len(all_bodies(path)) >= 12, lambda: f"12 bodies, got {all_bodies(path)}", 60)
        child.close_stdin()
        assert child.readline(time.monotonic() + 60) == "CLOSED", child.stderr()
    with mqlite.open(path) as broker:
        assert import_inbox(broker) == 0  # nothing left for the next holder
    assert not Path(path, INBOX_DIR, "failed").exists()  # the queueId 9 job never reached the inbox
    names = [bytes(m.body).split(b"-")[0] for q in stored(path)["I"] for m in q]
    assert sorted(names) == [b"one"] * 5 + [b"s"] * 2 + [b"two"] * 5
    by_queue = [[bytes(m.body).split(b"-")[0] for m in q] for q in stored(path)["I"]]
    for queue in by_queue:
        assert queue == sorted(queue, key=[b"one", b"two", b"s"].index)
    stream.commit([stream.write(iter([arrow_batch(body=pa.array([b"s-0", b"s-1"]))]))], 0)  # replayed again
    assert len(all_bodies(path)) == 12 and os.listdir(os.path.join(path, INBOX_DIR)) == []
    assert_clean(path)


_LOCKER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    if sys.argv[2] == "both":
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a Java broker's FileChannel.tryLock: no pid written
    print("LOCKED", flush=True)
    sys.stdin.read()
""")


@contextmanager
def foreign_lock(path: str, kind: str = "both") -> Iterator[subprocess.Popen[str]]:
    """A process that is neither mqlite nor a Spark committer holds the store's lock (no pid in the file)."""
    proc = subprocess.Popen([sys.executable, "-c", _LOCKER, path, kind], text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "LOCKED", proc.stderr
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_fail_refuses_at_once_a_holder_that_is_not_a_committer(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock with no pid in the file (a Java broker's): `fail` does not wait out `lockTimeout`; `wait`
    keeps trying until the holder lets go, then stores the job."""
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL):
        pass
    with foreign_lock(path):
        writer = MqliteBatchWriter(path, {"topic": "T", "whenLocked": "fail", "lockTimeout": "600"},
                                   StructType([BODY]), False)
        staged = writer.write(iter([arrow_batch(body=pa.array([b"a"]))]))
        with deadline(60), pytest.raises(mqlite.StoreLockedError, match=r"open for writing by another process") \
                as raised:  # a hang (waiting out the 600 s) fails here
            writer.commit([staged])
        assert raised.value.pid is None
        writer.abort([staged])
    assert all_bodies(path) == []

    # `wait`: no grace for a holder without a pid, so a second try of the lock is `wait` waiting, not the grace.
    monkeypatch.setattr(writer_module, "_PID_GRACE", 0.0)
    tries = []

    def counted_open(root: str) -> mqlite.Broker:
        tries.append(root)
        return mqlite.broker.open(root)

    monkeypatch.setattr(writer_module, "open_broker", counted_open)
    with foreign_lock(path) as holder:
        writer = MqliteBatchWriter(path, {"topic": "T", "whenLocked": "wait", "lockTimeout": "600"},
                                   StructType([BODY]), False)
        staged = writer.write(iter([arrow_batch(body=pa.array([b"b"]))]))
        committing = threading.Thread(target=writer.commit, args=([staged],), name="test-commit")
        committing.start()
        wait_until(lambda: len(tries) >= 2, "the waiting writer to try the held lock a second time")
        holder.kill()  # the holder lets go: the waiting writer gets the lock and stores the job
        holder.wait()
        committing.join(60)
        assert not committing.is_alive()
    assert all_bodies(path) == [b"b"]


def test_inbox_hand_off_refuses_what_the_holder_would_refuse(tmp_path: Path) -> None:
    """Checked before the hand-off, without the lock: an unknown topic when auto-create is off, a
    queue the topic lacks, a damaged staged file fail the job; nothing reaches the inbox."""
    path = str(tmp_path / "mq")
    with mqlite.open(path, auto_create_topic=False, **SMALL) as broker:
        broker.create_topic("K", 2)
    schema = StructType([BODY, StructField("queueId", IntegerType())])
    options = {"whenLocked": "inbox", "lockTimeout": "0"}

    def job(topic: str, queue_id: int | None) -> tuple[MqliteBatchWriter, StagedFiles]:
        writer = MqliteBatchWriter(path, {**options, "topic": topic}, schema, False)
        return writer, writer.write(iter([arrow_batch(body=pa.array([b"a", b"b"]),
                                                      queueId=pa.array([None, queue_id], pa.int32()))]))

    with foreign_lock(path):
        for topic, queue_id, expected in [
                ("New", None, r"topic 'New' does not exist and the store at .* has auto_create_topic off"),
                ("K", 2, r"column 'queueId' is 2 for topic 'K', which has queues 0\.\.1")]:
            writer, staged = job(topic, queue_id)
            with pytest.raises(mqlite.MQClientError, match=r"its inbox would refuse this Spark job's 2 rows.*"
                                                           + expected):
                writer.commit([staged])
            writer.abort([staged])
        writer, staged = job("K", 1)
        part = Path(staged.job_dir, staged.files[0])
        part.write_bytes(part.read_bytes()[:-5])
        with pytest.raises(mqlite.StoreCorruptedError, match="ends inside the records"):
            writer.commit([staged])
        writer.abort([staged])
        assert not os.path.exists(os.path.join(path, INBOX_DIR))
        writer, staged = job("K", 1)
        writer.commit([staged])  # a good job is handed over
        assert len(os.listdir(os.path.join(path, INBOX_DIR))) == 1
    with mqlite.open(path) as broker:
        import_inbox(broker)  # at once, unless its inbox service was first
    assert sorted(all_bodies(path)) == [b"a", b"b"]
    assert_clean(path)


# -- through Spark ----------------------------------------------------------------------------------------------
ROWS_SCHEMA = StructType([
    StructField("body", BinaryType()), StructField("topic", StringType()), StructField("tags", StringType()),
    StructField("keys", ArrayType(StringType())), StructField("properties", MapType(StringType(), StringType())),
    StructField("queueId", IntegerType()), StructField("shardingKey", StringType()),
    StructField("flag", IntegerType()), StructField("extra", StringType()),  # extra: not a message field, ignored
])


def _row(i: int) -> tuple[Any, ...]:
    return (f"body-{i}".encode(), f"Topic{i % 2}", f"Tag{i % 3}" if i % 4 else None,
            [f"key-{i}", f"k{i % 5}"] if i % 3 else None, {"seq": str(i), "odd": str(i % 2)} if i % 5 else None,
            i % 4 if i % 7 == 0 else None, f"shard{i % 11}" if i % 7 == 1 else None, i % 3, "x")


def test_batch_write_round_trip(session: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL) as broker:
        broker.create_topic("Topic0", 4)
        broker.create_topic("Topic1", 4)
    rows = [_row(i) for i in range(600)]
    df = session.createDataFrame(rows, ROWS_SCHEMA).repartition(3)
    df.write.format(FORMAT).mode("append").save(path)

    with mqlite.open(path) as broker, mqlite.LitePullConsumer(
            broker, group="check", auto_commit=False,
            consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as consumer:
        queues = [mq for t in ("Topic0", "Topic1") for mq in broker.fetch_subscribe_queues(t)]
        consumer.assign(queues)
        got: dict[bytes, Any] = {}
        deadline = time.monotonic() + 30
        while len(got) < len(rows) and time.monotonic() < deadline:
            for msg in consumer.poll(timeout=0.5):
                assert msg.body not in got, f"stored twice: {msg.body!r}"
                got[bytes(msg.body)] = msg
    assert len(got) == len(rows)
    for i, (body, topic, tags, keys, props, queue_id, shard, flag, _) in enumerate(rows):
        msg = got[body]
        assert (msg.topic, msg.tags, msg.keys, msg.flag) == (topic, tags, keys or [], flag), i
        user = {k: v for k, v in msg.properties.items() if k not in ("TAGS", "KEYS", "WAIT", "UNIQ_KEY")}
        assert user == (props or {}), i
        assert msg.properties["WAIT"] == "true" and msg.msg_id == msg.properties["UNIQ_KEY"], i
        if queue_id is not None:
            assert msg.queue_id == queue_id, i
        elif shard is not None:  # SelectMessageQueueByHash, as Producer.send_orderly
            assert msg.queue_id == abs(java_string_hash(shard)) % 4, i
    assert_clean(path)


def test_replay_what_the_reader_returns(session: SparkSession, tmp_path: Path) -> None:
    """Read a store with the "mqlite" source and write it to another: same messages, same queues."""
    source, target = str(tmp_path / "a"), str(tmp_path / "b")
    with mqlite.open(source, **SMALL) as broker, mqlite.Producer(broker) as producer:
        for i in range(40):
            producer.send(mqlite.Message("R", f"r{i}".encode(), tags=f"t{i % 2}", keys=[f"k{i}"],
                                         properties={"n": str(i)}), queue=mqlite.MessageQueue("R", "mqlite", i % 4))
    with pytest.raises(Exception, match=r"'TAGS' is a reserved RocketMQ property name.*F\.map_filter"):
        session.read.format(FORMAT).option("subscribe", "R").load(source).write.format(FORMAT).mode("append").save(target)
    system = F.array(*[F.lit(n) for n in ("TAGS", "KEYS", "WAIT", "UNIQ_KEY")])
    (session.read.format(FORMAT).option("subscribe", "R").load(source)
     .withColumn("properties", F.map_filter("properties", lambda k, v: ~F.array_contains(system, k)))
     .write.format(FORMAT).mode("append").save(target))
    before, after = stored(source)["R"], stored(target)["R"]
    assert [[(bytes(m.body), m.tags, m.keys, m.properties["n"]) for m in q] for q in after] == \
        [[(bytes(m.body), m.tags, m.keys, m.properties["n"]) for m in q] for q in before]
    assert_clean(target)


def test_kafka_columns_round_trip(session: SparkSession, tmp_path: Path) -> None:
    """Read with `schema=kafka`, write back: `key` is the message's key, `headers` its user
    properties, `partition` its queue; read again, they survive."""
    source, target = str(tmp_path / "a"), str(tmp_path / "b")
    with mqlite.open(source, **SMALL) as broker, mqlite.Producer(broker) as producer:
        for i in range(40):
            producer.send(mqlite.Message("K", f"r{i}".encode(), keys=[f"k{i}"] if i % 5 else None,
                                         properties={"n": str(i), "ü": "ß"} if i % 3 else None),
                          queue=mqlite.MessageQueue("K", "mqlite", i % 3))

    def read(path: str) -> Any:
        return session.read.format(FORMAT).options(subscribe="K", schema="kafka", includeProperties="true").load(path)

    system = F.array(*[F.lit(n) for n in ("KEYS", "WAIT", "UNIQ_KEY")])
    read(source).withColumn("headers", F.filter("headers", lambda h: ~F.array_contains(system, h["key"]))) \
        .write.format(FORMAT).mode("append").save(target)
    before, after = stored(source)["K"], stored(target)["K"]
    user = ("n", "ü")
    assert [[(bytes(m.body), m.keys, {k: m.properties.get(k) for k in user}) for m in q] for q in after] == \
        [[(bytes(m.body), m.keys, {k: m.properties.get(k) for k in user}) for m in q] for q in before]
    again = {bytes(r["value"]): (r["key"], r["partition"], dict(r["headers"])) for r in read(target).collect()}
    assert again[b"r7"] == (b"k7", 1, {"n": b"7", "\u00fc": "ß".encode(), "KEYS": b"k7", "WAIT": b"true",
                                        "UNIQ_KEY": again[b"r7"][2]["UNIQ_KEY"]})
    assert_clean(target)


def test_parallel_tasks_and_jobs_store_every_row_once(session: SparkSession, tmp_path: Path) -> None:
    """8 partitions on 2 executor cores, and two jobs committing at the same time."""
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL) as broker:
        broker.create_topic("P", 4)
    errors: list[BaseException] = []

    def job(name: str) -> None:
        try:
            # PySpark 4.3 finds a Python data source only on a JVM thread with an active session:
            # the main thread has one, a new Python thread (a new JVM thread) does not.
            session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)  # type: ignore
            (session.range(20_000, numPartitions=8).select(F.concat(F.lit(name), F.col("id").cast("string"))
                                                          .alias("value"))
             .write.format(FORMAT).mode("append").option("topic", "P").save(path))
        except BaseException as exc:  # reported on the test thread
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    queues = stored(path)["P"]  # read_queue checked each queue's offsets are contiguous from 0
    bodies = [bytes(m.body) for q in queues for m in q]
    assert sorted(bodies) == sorted(f"{n}{i}".encode() for n in "ab" for i in range(20_000))
    assert all(len(q) > 0 for q in queues)
    assert_clean(path)


def test_failed_job_stores_nothing(session: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL):
        pass

    # Partition 3 fails (id 1777) while the others stage their rows: the job is aborted.
    df = session.range(2_000, numPartitions=4).select(
        F.when(F.col("id") == 1_777, F.raise_error(F.lit("task boom")))
        .otherwise(F.concat(F.lit("b"), F.col("id").cast("string"))).cast("binary").alias("body"))
    with pytest.raises(Exception, match="task boom"):
        df.write.format(FORMAT).mode("append").option("topic", "T").save(path)
    bad = session.range(100, numPartitions=2).select(
        F.when(F.col("id") == 70, F.lit("")).otherwise(F.col("id").cast("string")).alias("value"))
    with pytest.raises(Exception, match=r"column 'value', row \d+ of partition 1: the message body is empty"):
        bad.write.format(FORMAT).mode("append").option("topic", "T").save(path)
    assert all_bodies(path) == []
    # Tasks Spark was still stopping may finish later: they find their job's tombstone and drop
    # their files; the next commit sweeps what a killed worker left.
    session.range(1).selectExpr("'ok' as body").write.format(FORMAT).mode("append").option("topic", "T").save(path)
    staging = Path(path, STAGING_DIR)
    # A late task's file appears and goes within its own run, on a Spark worker: nothing to wait on here.
    wait_until(lambda: not any(p.is_dir() and p.name.startswith("job-") for p in staging.iterdir()),
               "late tasks to drop their files", 30)
    assert all_bodies(path) == [b"ok"]
    assert len(list(staging.glob("*.aborted"))) == 2
    assert_clean(path)


def test_bad_schema_fails_before_any_task(session: SparkSession, tmp_path: Path) -> None:
    df = session.range(3).selectExpr("cast(id as string) as body")
    with pytest.raises(Exception, match=r"add a 'topic' column"):
        df.write.format(FORMAT).mode("append").save(str(tmp_path / "mq"))
    with pytest.raises(Exception, match=r"only appends"):
        df.write.format(FORMAT).mode("overwrite").option("topic", "T").save(str(tmp_path / "mq"))
    assert not (tmp_path / "mq").exists()


def test_next_to_a_live_writer(session: SparkSession, tmp_path: Path) -> None:
    """A process holds the store: `fail` stores nothing; `inbox` hands the job over and the
    holder (a live `Broker`) stores it, before the next Spark commit's rows."""
    path = str(tmp_path / "mq")
    first = session.range(300, numPartitions=2).selectExpr("concat('first-', id) as body")
    second = session.range(200, numPartitions=2).selectExpr("concat('second-', id) as body")
    with Child(path, "hold") as child:
        line = child.readline(time.monotonic() + 60)
        assert line is not None and line.startswith("READY"), child.stderr()
        with pytest.raises(Exception, match=rf"open for writing by process {child.pid}, so this Spark job's 300 rows "
                                            r"were not stored"):
            first.write.format(FORMAT).mode("append").option("topic", "L").save(path)
        assert not os.path.exists(os.path.join(path, INBOX_DIR))
        first.write.format(FORMAT).mode("append").option("topic", "L").option("whenLocked", "inbox").save(path)
        child.close_stdin()
        assert child.readline(time.monotonic() + 60) == "CLOSED", child.stderr()
    # The holder stored the handed-over job (its inbox service, at the latest as it closed).
    assert sorted(all_bodies(path)) == sorted(f"first-{i}".encode() for i in range(300))
    assert os.listdir(os.path.join(path, INBOX_DIR)) == []
    second.write.format(FORMAT).mode("append").option("topic", "L").save(path)
    assert os.listdir(os.path.join(path, INBOX_DIR)) == []
    for queue in stored(path)["L"]:  # the handed-over job went first, in every queue
        names = [bytes(m.body).split(b"-")[0] for m in queue]
        assert names == sorted(names, key=lambda n: n != b"first")
    assert sorted(all_bodies(path)) == sorted([f"first-{i}".encode() for i in range(300)]
                                              + [f"second-{i}".encode() for i in range(200)])
    assert_clean(path)


def test_streaming_sink_available_now_exactly_once(session: SparkSession, tmp_path: Path) -> None:
    path, source, checkpoint = str(tmp_path / "mq"), tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    schema = StructType([StructField("n", IntegerType()), StructField("tags", StringType())])

    def add_file(k: int) -> None:
        lines = [json.dumps({"n": k * 100 + i, "tags": f"T{k}"}) for i in range(50)]
        (source / f"f{k}.json").write_text("\n".join(lines))

    def run() -> None:
        stream = (session.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
                  .selectExpr("cast(n as string) as body", "tags"))
        query = (stream.writeStream.format(FORMAT).option("topic", "S").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start(path))
        assert query.awaitTermination(120)
        assert query.exception() is None

    for k in range(3):
        add_file(k)
    run()  # three micro-batches
    assert sorted(int(b) for b in all_bodies(path)) == [k * 100 + i for k in range(3) for i in range(50)]
    mark = json.loads(next(Path(path, SINK_DIR).glob("*.json")).read_text())
    assert mark["batchId"] == 2
    # Spark replays a batch whose commit it did not record: drop that record and restart.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    add_file(3)
    run()
    bodies = sorted(int(b) for b in all_bodies(path))
    assert bodies == [k * 100 + i for k in range(4) for i in range(50)], "a replayed batch was stored twice"
    assert {m.tags for q in stored(path)["S"] for m in q} == {"T0", "T1", "T2", "T3"}
    assert_clean(path)


# -- benchmark (python tests/test_spark_write.py --bench) --------------------------------------------------------------
def _append_window(path: str) -> float:
    """Seconds between the first and the last store timestamp of a written store (the commit's puts)."""
    with mqlite.open(path, read_only=True) as broker:
        store = broker.store
        stamps = [store.store_timestamp(t, q, o) for t in store.topics() for q in store.queue_ids(t)
                  for o in (0, store.max_offset(t, q) - 1)]
    return (max(stamps) - min(stamps)) / 1000
def bench(rows: int, rounds: int, only: str = "") -> None:
    """Write `rows` 100-byte bodies on local[2]; print rows/s per mode (best and median of `rounds`)."""
    import statistics
    import tempfile

    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage

    class DiscardArrow(DataSourceArrowWriter):
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class DiscardRows(DataSourceWriter):
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class DiscardSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "discard_bench"

        def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
            return DiscardRows() if self.options.get("rows") else DiscardArrow()

    spark = _bench_session()
    spark.dataSource.register(DiscardSource)
    df = spark.range(rows, numPartitions=4).select(F.expr("cast(repeat('x', 100) as binary)").alias("body")).cache()
    df.count()
    keyed = spark.range(rows, numPartitions=4).select(
        F.expr("cast(repeat('x', 100) as binary)").alias("body"), F.concat(F.lit("Tag"), F.col("id") % 3).alias("tags"),
        F.array(F.concat(F.lit("order-"), F.col("id").cast("string"))).alias("keys")).cache()
    keyed.count()
    cases = [
        ("ceiling: a Python Row writer that discards", df, "discard_bench", {"rows": "1"}),
        ("ceiling: a Python Arrow writer that discards", df, "discard_bench", {}),
        ("mqlite, defaults (WAIT + UNIQ_KEY, indexed)", df, FORMAT, {"topic": "B"}),
        ("mqlite, producerProperties=false", df, FORMAT, {"topic": "B", "producerProperties": "false"}),
        ("mqlite, defaults, tags + a unique key per row", keyed, FORMAT, {"topic": "B"}),
    ]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        for label, frame, fmt, options in cases:
            if only and only not in label:
                continue
            rates: list[float] = []
            shares: list[float] = []
            for r in range(rounds + 1):  # the first round warms the workers up
                path = os.path.join(tmp, f"round-{r}")
                start = time.perf_counter()
                frame.write.format(fmt).mode("append").options(**options).save(path)
                elapsed = time.perf_counter() - start
                if r:
                    rates.append(rows / elapsed)
                    if fmt == FORMAT:
                        shares.append(_append_window(path) / elapsed)
                shutil.rmtree(path, ignore_errors=True)
            commit = f"; the commit's appends took {statistics.median(shares):.0%} of it" if shares else ""
            print(f"{label:48s} best {max(rates) / 1e6:.3f}M rows/s, median {statistics.median(rates) / 1e6:.3f}M "
                  f"({', '.join(f'{x / 1e6:.3f}' for x in rates)}){commit}", flush=True)
    spark.stop()


def commit_bench(rows: int, rounds: int) -> None:
    """The commit without Spark: stage `rows` 100-byte bodies in chunks of 10,000 with `write_chunk` (a
    task's work), then time `append_staged` into a fresh store, key index on and off; CPU time of all
    threads per message."""
    import tempfile

    import numpy as np

    from mqlite.inbox import append_staged, write_chunk

    chunk = 10_000
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        path = os.path.join(tmp, "part.mqsb")
        start = time.process_time()
        with open(path, "wb") as f:
            for _ in range(rows // chunk):
                write_chunk(f, "B", int(time.time() * 1000), np.full(chunk, 100), b"x" * 100 * chunk,
                            [{"WAIT": "true"}], np.zeros(chunk))
        staged = rows // chunk * chunk
        print(f"task: staging {(time.process_time() - start) / staged * 1e6:.2f} us a row", flush=True)
        for r in range(rounds):
            for index in (True, False):
                with mqlite.open(os.path.join(tmp, f"store-{r}-{index}"), message_index_enable=index) as broker:
                    cpu, wall = time.process_time(), time.perf_counter()
                    append_staged(broker, [path])
                    broker.store.wait_dispatched()
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                print(f"commit, key index {'on ' if index else 'off'}: {cpu / staged * 1e6:.2f} us a message CPU, "
                      f"{wall / staged * 1e6:.2f} wall", flush=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="run the cases whose label contains this text")
    parser.add_argument("--commit", action="store_true", help="time the commit in-process, without Spark")
    args = parser.parse_args()
    if args.bench:
        bench(args.rows, args.rounds, args.only)
    if args.commit:
        commit_bench(args.rows, args.rounds)
