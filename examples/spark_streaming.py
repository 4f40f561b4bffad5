"""Spark Structured Streaming: read a live store incrementally with Trigger.AvailableNow and a checkpoint.

The stream's offsets (one per queue) live in Spark's checkpoint, so each run of the query
reads exactly what arrived since the last one. The store stays open for writing the whole
time: Spark reads the files beside the live broker without taking its lock. With
`.option("group", ...)` the query's progress is also recorded as a consumer group's offsets.

Run: python examples/spark_streaming.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from typing import Any

import mqlite


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    # Spark's Python workers run `python3` from PATH unless told otherwise; they need this
    # interpreter, which has mqlite and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[2]").appName("mqlite-spark-streaming")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             # Faster JVM start for a short job (C1 JIT only); leave it out for long-running jobs.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_once(spark: Any, path: str, checkpoint: str) -> list[tuple[int, int]]:
    """Run the query until everything available now is read; returns (batch id, rows) per micro-batch."""
    batches: list[tuple[int, int]] = []

    def record(batch: Any, batch_id: int) -> None:  # runs on the driver for each micro-batch
        batches.append((batch_id, batch.count()))

    clicks = (spark.readStream.format("mqlite")
              .option("subscribe", "clicks")
              .option("startingOffsets", "earliest")   # for the first run; later runs resume from the checkpoint
              .option("maxOffsetsPerTrigger", 20)      # at most 20 messages per micro-batch
              .option("group", "click-counter")        # record progress as this consumer group's offsets
              .load(path))
    query = (clicks.writeStream.foreachBatch(record)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)                # read what is there now, in micro-batches, then stop
             .start())
    if not query.awaitTermination(120):
        query.stop()
        raise SystemExit("the streaming query did not finish within 120 s")
    return batches


def main(path: str) -> None:
    if importlib.util.find_spec("pyspark") is None:
        print("pyspark is not installed: pip install 'mqlite[spark]' to run this example")
        return
    checkpoint = os.path.abspath(path) + "-checkpoint"  # Spark's own files, beside the store
    with mqlite.open(path) as broker, mqlite.Producer(broker, group="click-producer") as producer:
        broker.create_topic("clicks", queue_nums=2)
        for i in range(30):
            producer.send(mqlite.Message("clicks", b"click %d" % i))
        print("stored 30 clicks; the broker stays open while Spark reads")

        spark = spark_session()
        try:
            print(f"first run: (batch id, rows) = {run_once(spark, path, checkpoint)}")
            for i in range(30, 45):
                producer.send(mqlite.Message("clicks", b"click %d" % i))
            print(f"15 more clicks; second run, same checkpoint: (batch id, rows) = "
                  f"{run_once(spark, path, checkpoint)}")
        finally:
            spark.stop()

        # The query's progress, recorded as consumer group click-counter: the live broker takes it
        # in from the side file Spark leaves beside it (Spark cannot write the broker's own table).
        progress = {row.queue_id: (row.consumer_offset, row.diff) for row in broker.consumer_progress("click-counter")}
        print(f"group click-counter, per queue (consumed offset, lag): {progress}")

if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(os.path.join(tmp, "store"))
