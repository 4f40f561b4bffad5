"""Spark batch: read a store with options (topics, tags, SQL92, offset ranges, Kafka columns) and write to it.

The "mqlite" data source is found by name once `pip install 'mqlite[spark]'` is done (no
register call). Reads go through the files alone (read-only, no lock), so they also work
beside a live writer; a write appends under the store's writer lock, so here the broker
is closed first (`.option("whenLocked", "inbox")` hands the rows to a live broker instead).

Run: python examples/spark_batch.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from typing import Any

import mqlite


def produce(path: str) -> None:
    """100 orders in 4 queues: tags TagA/TagB, a key each, a property `region`."""
    with mqlite.open(path) as broker, mqlite.Producer(broker, group="order-producer") as producer:
        broker.create_topic("orders", queue_nums=4)
        for i in range(100):
            msg = mqlite.Message("orders", b"order %d" % i, tags="TagA" if i % 2 else "TagB", keys=f"order-{i}")
            msg.put_user_property("region", "eu" if i % 5 == 0 else "us")
            producer.send(msg, queue=mqlite.MessageQueue("orders", broker.broker_name, i % 4))
    print("stored 100 orders, 25 in each of 4 queues")


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    # Spark's Python workers run `python3` from PATH unless told otherwise; they need this
    # interpreter, which has mqlite and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[2]").appName("mqlite-spark-batch")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             # Faster JVM start for a short job (C1 JIT only); leave it out for long-running jobs.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(path: str) -> None:
    if importlib.util.find_spec("pyspark") is None:
        print("pyspark is not installed: pip install 'mqlite[spark]' to run this example")
        return
    produce(path)
    spark = spark_session()
    try:
        orders = spark.read.format("mqlite").option("subscribe", "orders").load(path)
        print("columns:", ", ".join(orders.columns))
        by_tag = {row["tags"]: row["count"] for row in orders.groupBy("tags").count().collect()}
        print(f"all orders by tag: {dict(sorted(by_tag.items()))}")

        # Filters run in the reader, as a consumer's would: a tag expression and an SQL92 expression.
        eu_a = (spark.read.format("mqlite").option("subscribe", "orders")
                .option("subExpression", "TagA").option("filter", "region = 'eu'").load(path))
        print(f"TagA orders in region eu: {sorted(r.queueOffset for r in eu_a.collect())} (queue offsets)")

        # Offset ranges as Spark's Kafka source (per queue; endingOffsets exclusive; -2 earliest, -1 latest),
        # here with Kafka's column names too, for code written against Spark's Kafka source.
        window = (spark.read.format("mqlite").option("assign", '{"orders": [0]}')
                  .option("startingOffsets", '{"orders": {"0": 10}}').option("endingOffsets", '{"orders": {"0": 13}}')
                  .option("schema", "kafka").load(path))
        rows = window.selectExpr("partition", "offset", "CAST(key AS STRING) AS key").orderBy("offset").collect()
        print(f"queue 0, offsets 10..12, Kafka columns: {[(r.partition, r.offset, r.key) for r in rows]}")

        # Write: the eu orders go to another topic (auto-created). Columns: body (or value), and
        # optionally topic, tags, keys, properties, queueId, shardingKey, flag.
        eu = (spark.read.format("mqlite").option("subscribe", "orders").option("filter", "region = 'eu'")
              .load(path).select("body", "tags", "keys"))
        eu.write.format("mqlite").mode("append").option("topic", "orders-eu").save(path)
    finally:
        spark.stop()

    # The written messages are ordinary messages: any consumer, query or Spark read sees them.
    with mqlite.open(path, read_only=True) as broker:
        stored = sum(row.max_offset for row in broker.topic_status("orders-eu"))
        hit = broker.query_message("orders-eu", "order-35")
        print(f"topic orders-eu now holds {stored} messages; by key order-35: {[m.body for m in hit]}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
