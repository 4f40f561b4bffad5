"""Spark source benchmarks (issue 5): batch read, its ceiling, Parquet, and the stream reader.

    .venv/bin/python bench/bench_spark.py [--n 1000000] [--queues 4] [--body 100] [--rounds 5]
                                          [--only read,ceiling,parquet,stream,python]

One store of N messages of BODY bytes (a `Producer.send_batch` of 1000 at a time, so
every message has `WAIT` and `UNIQ_KEY` properties) over QUEUES queues of one topic, read
on `local[2]` with the default JIT (the tests' C1-only flag costs throughput). Each
measurement runs the whole query into Spark's `noop` sink, which materialises every column:

* `read`: `spark.read.format("mqlite")` with the default (rocketmq) schema;
* `ceiling`: a minimal Python data source whose tasks yield *pre-built* Arrow batches
  from memory (the same batches `read` builds, cached in each worker on its first run):
  what PySpark's Python data source API can move at best, on the same partitions;
* `parquet`: the same rows written once to Parquet, then `spark.read.parquet(...)`;
* `stream`: `readStream` with `maxOffsetsPerTrigger` = 100000 and `Trigger.AvailableNow`
  into the `noop` sink, from the first offset to the end;
* `python`: the reader alone, in this process, without Spark (its own cost).

`--varied` gives every message a tag and a key of its own length, so the property
strings of a batch differ in layout and the reader takes its general parser.

Each Spark number is the best of ROUNDS warm runs (the first run of each kind, which pays
worker start-up, is not counted); the median is printed too. The rounds of `read`, `ceiling`
and `parquet` alternate, and the ratio is given both best-to-best and as the median of the
per-round pairs, which is steadier when other work shares the machine. Prints one JSON line
per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import mqlite
from mqlite import Message, Producer

TOPIC = "bench"


def emit(name: str, **fields: Any) -> dict[str, Any]:
    row = {"bench": name, **fields}
    print(json.dumps(row), flush=True)
    return row


def build_store(path: str, n: int, queues: int, body: int, varied: bool) -> float:
    """N messages in batches of 1000; `varied` gives each its own tag and key (properties of varying length)."""
    started = time.perf_counter()
    payload = b"x" * body
    with mqlite.open(path, flush_disk_type="ASYNC_FLUSH", message_index_enable=False) as broker:
        with Producer(broker, default_topic_queue_nums=queues) as producer:
            for first in range(0, n, 1000):
                count = min(1000, n - first)
                if varied:
                    batch = [Message(TOPIC, payload, tags=f"Tag{i % 7}", keys=[f"order-{i}"])
                             for i in range(first, first + count)]
                else:
                    batch = [Message(TOPIC, payload) for _ in range(count)]
                producer.send_batch(batch)
    return time.perf_counter() - started


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("mqlite-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ceiling_source() -> Any:
    """A data source that yields the batches mqlite's reader builds, cached per worker after its first run."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class CeilingReader(DataSourceReader):
        def __init__(self, options: Any, schema: Any) -> None:
            from mqlite.spark.options import parse_read_options

            self.options = parse_read_options(dict(options), streaming=False)
            self.schema = schema

        def partitions(self) -> Any:
            from mqlite.reader import StoreReader
            from mqlite.spark.plan import plan_batch

            with StoreReader(self.options.path) as store:
                return plan_batch(store, self.options)

        def read(self, partition: Any) -> Any:
            import sys as worker_sys
            import types

            from pyspark.sql.pandas.types import to_arrow_schema

            from mqlite.spark.arrowread import read_range

            cache = worker_sys.modules.setdefault("_mqlite_bench_cache", types.ModuleType("_mqlite_bench_cache"))
            key = (partition.topic, partition.queue_id, partition.start, partition.end)
            batches = cache.__dict__.get(key)
            if batches is None:
                arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
                batches = cache.__dict__[key] = list(read_range(self.options, arrow_schema, partition))
            return iter(batches)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "mqlite_ceiling"

        def schema(self) -> Any:
            from mqlite.spark.schema import default_schema

            return default_schema("rocketmq", True)

        def reader(self, schema: Any) -> Any:
            return CeilingReader(self.options, schema)

    return CeilingSource


def timed(run: Any, rounds: int) -> tuple[float, float, list[float]]:
    run()  # warm-up (worker start-up, JIT, page cache, the ceiling's cache)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="read,ceiling,parquet,stream,python")
    parser.add_argument("--varied", action="store_true",
                        help="a tag and a key per message: properties of varying length (the general parser)")
    args = parser.parse_args()
    only = set(args.only.split(","))
    work = tempfile.mkdtemp(prefix="mqlite-bench-spark-")
    try:
        store = os.path.join(work, "store")
        seconds = build_store(store, args.n, args.queues, args.body, args.varied)
        emit("spark.setup", n=args.n, queues=args.queues, body=args.body, produce_s=round(seconds, 2),
             load_average=os.getloadavg()[0])
        common = {"n": args.n, "queues": args.queues, "body": args.body, "varied": args.varied, "master": "local[2]"}
        results: dict[str, float] = {}
        times: dict[str, list[float]] = {}
        if "python" in only:
            results["python"] = python_only(store, args, common)
        if not only & {"read", "ceiling", "parquet", "stream"}:
            return
        spark = session()

        def mqlite_df() -> Any:
            return spark.read.format("mqlite").option("subscribe", TOPIC).load(store)

        runs: dict[str, Any] = {}
        if "read" in only:
            runs["read"] = lambda: mqlite_df().write.format("noop").mode("overwrite").save()
        if "ceiling" in only:
            spark.dataSource.register(ceiling_source())
            runs["ceiling"] = lambda: (spark.read.format("mqlite_ceiling").option("subscribe", TOPIC).load(store)
                                       .write.format("noop").mode("overwrite").save())
        if "parquet" in only:
            parquet = os.path.join(work, "parquet")
            mqlite_df().write.parquet(parquet)
            runs["parquet"] = lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()
        # Rounds alternate between the kinds, so a load change on the machine hits them alike.
        times.update({kind: [] for kind in runs})
        for run in runs.values():
            run()  # warm-up (worker start-up, JIT, page cache, the ceiling's cache)
        for _ in range(args.rounds):
            for kind, run in runs.items():
                started = time.perf_counter()
                run()
                times[kind].append(time.perf_counter() - started)
        for kind, measured in times.items():
            best = min(measured)
            results[kind] = args.n / best
            emit(f"spark.read.{'mqlite' if kind == 'read' else kind}", rows_per_s=round(args.n / best),
                 best_s=round(best, 3), median_s=round(statistics.median(measured), 3),
                 times=[round(t, 3) for t in measured], **common)
        if "stream" in only:
            results["stream"] = stream(spark, store, work, args, common)
        if "read" in times and "ceiling" in times:
            # Best against best, and the median of each round's pair (rounds alternate, so a pair saw
            # about the same load on this shared machine).
            pairs = [c / r for r, c in zip(times["read"], times["ceiling"])]
            emit("spark.read.ratio", mqlite_over_ceiling=round(results["read"] / results["ceiling"], 3),
                 median_of_round_pairs=round(statistics.median(pairs), 3), pairs=[round(p, 3) for p in pairs],
                 load_average=os.getloadavg()[0], **common)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def python_only(store: str, args: argparse.Namespace, common: dict[str, Any]) -> float:
    """The reader without Spark: every partition read in this process."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from mqlite.reader import StoreReader
    from mqlite.spark.arrowread import read_range
    from mqlite.spark.options import parse_read_options
    from mqlite.spark.plan import plan_batch
    from mqlite.spark.schema import default_schema

    options = parse_read_options({"path": store, "subscribe": TOPIC}, streaming=False)
    arrow_schema = to_arrow_schema(default_schema("rocketmq", True), timezone="UTC")
    with StoreReader(store) as reader:
        parts = plan_batch(reader, options)

    def run() -> None:
        rows = sum(b.num_rows for p in parts for b in read_range(options, arrow_schema, p))
        assert rows == args.n, rows

    best, median, _ = timed(run, args.rounds)
    emit("python.read.mqlite", rows_per_s=round(args.n / best), best_s=round(best, 3), median_s=round(median, 3),
         **common)
    return args.n / best


def stream(spark: Any, store: str, work: str, args: argparse.Namespace, common: dict[str, Any]) -> float:
    """AvailableNow from the first offset, 100k offsets a trigger, into the noop sink (best of ROUNDS)."""
    def run() -> int:
        checkpoint = tempfile.mkdtemp(dir=work)
        query = (spark.readStream.format("mqlite").option("subscribe", TOPIC)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100000").load(store)
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination(600)
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert sum(p["numInputRows"] for p in batches) == args.n
        return len(batches)

    best, median, times = timed(run, args.rounds)
    emit("spark.stream.mqlite", rows_per_s=round(args.n / best), best_s=round(best, 3), median_s=round(median, 3),
         max_offsets_per_trigger=100000, times=[round(t, 3) for t in times], **common)
    return args.n / best


if __name__ == "__main__":
    main()
