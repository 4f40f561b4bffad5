"""The README's demo: produce (plain, delayed, batch, transactional), consume (push and lite pull), look up,
read with Spark.

Run: python examples/demo.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading

import mqlite


class Approve:
    """A transaction listener: commits even order numbers, rolls back odd ones."""

    def execute_local_transaction(self, msg: mqlite.Message, arg: int) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.COMMIT_MESSAGE if arg % 2 == 0 else mqlite.LocalTransactionState.ROLLBACK_MESSAGE

    def check_local_transaction(self, msg: mqlite.MessageExt) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.COMMIT_MESSAGE


def main(path: str) -> None:
    with mqlite.open(path, commitlog_file_size=64 * 1024 * 1024, message_delay_level="1s 5s") as broker:
        with mqlite.Producer(broker, group="demo-producer") as producer:
            for i in range(1000):
                tag = "TagA" if i % 2 else "TagB"
                producer.send(mqlite.Message("orders", b"order %d" % i, tags=tag, keys=f"order-{i}"))
            producer.send(mqlite.Message("orders", b"one second later", delay_time_level=1))
            batch = producer.send_batch([mqlite.Message("orders", b"batch %d" % i) for i in range(10)])
        print(f"sent 1000 messages, a batch of 10 to {batch.message_queue}, one delayed by 1 s, to {path}")
        with mqlite.TransactionProducer(broker, group="demo-tx", listener=Approve()) as tx:
            states = [tx.send_message_in_transaction(mqlite.Message("payments", b"pay %d" % i), i)
                      .local_transaction_state.name for i in range(4)]
        print(f"transactions: {states}")
        for row in broker.topic_status("orders"):
            print(f"  orders queue {row.queue_id}: offsets {row.min_offset}..{row.max_offset}")
        hit = broker.query_message("orders", "order-42")[0]
        print(f"by key order-42: {hit.body!r} at queue {hit.queue_id} offset {hit.queue_offset}, msg_id {hit.msg_id}")

        # A push consumer: the listener runs on the consumer's threads; the delayed message arrives after 1 s.
        received = threading.Semaphore(0)
        tag_a: list[mqlite.MessageExt] = []

        def on_orders(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
            tag_a.extend(m for m in msgs if m.tags == "TagA")
            for _ in msgs:
                received.release()

        with mqlite.PushConsumer(broker, "demo-consumer", subscription={"orders": "*"}, listener=on_orders,
                                 consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
            got = sum(received.acquire(timeout=10) for _ in range(1011))
        print(f"push consumer received {got} of 1011 orders ({len(tag_a)} tagged TagA), the delayed one included")

        # A lite pull consumer with manual commit, filtered with SQL92 on a property.
        with mqlite.LitePullConsumer(broker, "demo-puller", auto_commit=False,
                                     consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as puller:
            puller.subscribe("payments", mqlite.MessageSelector.by_sql("TAGS IS NULL"))
            payments: list[mqlite.MessageExt] = []
            while len(payments) < 2:
                payments += puller.poll(timeout=5.0)
            puller.commit_sync()
        print(f"payments committed and pulled: {sorted(m.body.decode() for m in payments)}")
        for progress in broker.consumer_progress("demo-consumer"):
            if progress.topic == "orders":
                print(f"  demo-consumer on orders queue {progress.queue_id}: consumed {progress.consumer_offset}, "
                      f"lag {progress.diff}")
    with mqlite.open(path, read_only=True) as reader:
        mq = mqlite.MessageQueue("orders", reader.broker_name, 3)
        print(f"reopened read-only from another handle: orders queue 3 holds {reader.max_offset(mq)} messages")
    read_with_spark(path)


def read_with_spark(path: str) -> None:
    """Spark reads the same directory (pip install 'mqlite[spark]'; the source is found by name)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print("pyspark is not installed: pip install 'mqlite[spark]' to read the store with Spark")
        return
    # Spark's Python workers run `python3` from PATH unless told otherwise; they need this interpreter's mqlite.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[2]").appName("mqlite-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             # Faster JVM start for a short job (C1 JIT only); leave it out for long-running jobs.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.read.format("mqlite").option("subscribe", "orders").load(path)
        rows = df.groupBy("tags").count().orderBy("tags").collect()
        print("Spark read orders by tag:", {row["tags"]: row["count"] for row in rows})
    finally:
        spark.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
