"""The README's demo: produce with mqlite's Producer, read back, look up by key and id.

Run: python examples/demo.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import time

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
            delayed = producer.send(mqlite.Message("orders", b"one second later", delay_time_level=1))
            batch = producer.send_batch([mqlite.Message("orders", b"batch %d" % i) for i in range(10)])
        print(f"sent 1000 messages, a batch of 10 to {batch.message_queue}, one delayed by 1 s, to {path}")
        with mqlite.TransactionProducer(broker, group="demo-tx", listener=Approve()) as tx:
            states = [tx.send_message_in_transaction(mqlite.Message("payments", b"pay %d" % i), i)
                      .local_transaction_state.name for i in range(4)]
        print(f"transactions: {states}")
        for row in broker.topic_status("orders"):
            print(f"  orders queue {row.queue_id}: offsets {row.min_offset}..{row.max_offset}")
        first = broker.store.get_messages("orders", 0, 0, 3)
        print(f"read back {len(first.messages)} from queue 0:", [m.body for m in first.messages])
        hit = broker.query_message("orders", "order-42")[0]
        print(f"by key order-42: {hit.body!r} at queue {hit.queue_id} offset {hit.queue_offset}, msg_id {hit.msg_id}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                msg = broker.view_message(delayed.msg_id)
            except mqlite.MessageNotFoundError:
                msg = None
            if msg is not None and msg.topic == "orders":
                print(f"the delayed message arrived in {msg.topic}: {msg.body!r}")
                break
            time.sleep(0.1)  # a demo polling for a due time; tests use a manual clock instead
        paid = sum(broker.max_offset(mq) for mq in
                   (mqlite.MessageQueue("payments", broker.broker_name, q) for q in range(4)))
        print(f"payments committed and readable: {paid} of 4")
    with mqlite.open(path, read_only=True) as reader:
        mq = mqlite.MessageQueue("orders", reader.broker_name, 3)
        print(f"reopened read-only from another handle: orders queue 3 holds {reader.max_offset(mq)} messages")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
