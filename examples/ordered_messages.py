"""Ordered messages: every step of one order goes to one queue, and an orderly consumer sees them in order.

RocketMQ orders messages per queue, not per topic. The producer picks the queue with a
selector (here: order id modulo the number of queues), so all steps of an order share a
queue; the orderly listener consumes each queue on one thread at a time, in offset order.

Run: python examples/ordered_messages.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading

import mqlite

STEPS = ["created", "paid", "shipped", "delivered"]
ORDERS = 20


def by_order_id(queues: list[mqlite.MessageQueue], msg: mqlite.Message, order_id: int) -> mqlite.MessageQueue:
    """A queue selector (RocketMQ's MessageQueueSelector): the same order id, the same queue."""
    return queues[order_id % len(queues)]


def main(path: str) -> None:
    with mqlite.open(path) as broker:
        broker.create_topic("order-steps", queue_nums=4)

        # Interleave the orders (step 0 of every order, then step 1, ...) so ordering matters.
        with mqlite.Producer(broker, group="order-producer") as producer:
            for step in STEPS:
                for order_id in range(ORDERS):
                    msg = mqlite.Message("order-steps", f"{order_id}:{step}".encode(), tags=step,
                                         keys=f"order-{order_id}")
                    producer.send(msg, selector=by_order_id, arg=order_id)
                    # producer.send_orderly(msg, order_id) does the same with a hash selector.
        print(f"sent {len(STEPS)} steps for each of {ORDERS} orders to 4 queues")

        seen: dict[int, list[str]] = {}
        lock = threading.Lock()
        done = threading.Event()
        total = len(STEPS) * ORDERS

        def on_steps(msgs: list[mqlite.MessageExt],
                     context: mqlite.ConsumeOrderlyContext) -> mqlite.ConsumeOrderlyStatus:
            # Orderly listener: never called for one queue on two threads at once.
            with lock:
                for msg in msgs:
                    order_id, step = msg.body.decode().split(":")
                    seen.setdefault(int(order_id), []).append(step)
                if sum(map(len, seen.values())) == total:
                    done.set()
            return mqlite.ConsumeOrderlyStatus.SUCCESS

        consumer = mqlite.PushConsumer(broker, "order-consumer",
                                       consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                       consume_thread_nums=4)
        consumer.subscribe("order-steps", "*")
        consumer.register_message_listener(on_steps, orderly=True)
        with consumer:
            if not done.wait(timeout=10):
                raise SystemExit(f"only {sum(map(len, seen.values()))} of {total} steps arrived")

        out_of_order = [order_id for order_id, steps in seen.items() if steps != STEPS]
        if out_of_order:
            raise SystemExit(f"orders consumed out of order: {out_of_order}")
        print(f"orderly consumer saw all {ORDERS} orders with their steps in order: {' -> '.join(seen[0])}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
