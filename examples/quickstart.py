"""Quickstart: open a store, send messages, consume them with a push consumer, look one up by key.

Run: python examples/quickstart.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading

import mqlite


def main(path: str) -> None:
    # One directory is one broker. Opening it takes the writer lock and starts the background
    # services; the `with` block closes it (flush, checkpoint, unlock).
    with mqlite.open(path) as broker:
        # A producer sends synchronously: send() returns once the message is stored.
        with mqlite.Producer(broker, group="quickstart-producer") as producer:
            for i in range(10):
                msg = mqlite.Message("orders", f"order {i}".encode(), tags="created", keys=f"order-{i}")
                result = producer.send(msg)
            print(f"sent 10 messages to topic 'orders'; the last went to queue {result.message_queue.queue_id} "
                  f"at offset {result.queue_offset} ({result.send_status.name})")

        # Any message can be found again by its key (the index) or its msg_id.
        found = broker.query_message("orders", "order-7")[0]
        print(f"by key order-7: {found.body!r}, msg_id {found.msg_id}")

        # A push consumer calls the listener on its own threads. Returning None means success;
        # raising an exception means "retry later". The main thread waits for an event, not a sleep.
        received: list[bytes] = []
        lock = threading.Lock()
        all_in = threading.Event()

        def on_message(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
            with lock:
                received.extend(m.body for m in msgs)
                if len(received) == 10:
                    all_in.set()

        with mqlite.PushConsumer(broker, "quickstart-consumer", subscription={"orders": "created"},
                                 listener=on_message,
                                 consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
            if not all_in.wait(timeout=10):
                raise SystemExit(f"only {len(received)} of 10 messages arrived")
        print(f"push consumer received {len(received)} messages: {sorted(received)[:3]} ...")

        # The group's progress: every queue consumed to its end.
        lag = sum(row.diff for row in broker.consumer_progress("quickstart-consumer") if row.topic == "orders")
        print(f"consumer group 'quickstart-consumer' has {lag} messages left to consume")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
