"""Lite pull consumer with manual commit: poll, process, commit; what was not committed comes again.

With auto_commit=False nothing is committed until commit_sync(), so a consumer that dies
between poll() and commit_sync() gets that batch again when its group restarts: at least
once delivery. assign() + seek() read chosen queues from chosen offsets, outside any rebalance.

Run: python examples/lite_pull_manual_commit.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile

import mqlite

FIRST = mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def poll_at_least(consumer: mqlite.LitePullConsumer, count: int) -> list[mqlite.MessageExt]:
    """Poll until `count` messages arrived (each poll returns one batch from one queue)."""
    msgs: list[mqlite.MessageExt] = []
    while len(msgs) < count:
        batch = consumer.poll(timeout=5.0)
        if not batch:
            raise SystemExit(f"poll() timed out after {len(msgs)} of {count} messages")
        msgs += batch
    return msgs


def main(path: str) -> None:
    with mqlite.open(path) as broker:
        broker.create_topic("events", queue_nums=2)
        with mqlite.Producer(broker, group="event-producer") as producer:
            for i in range(20):
                producer.send(mqlite.Message("events", b"event %d" % i))
        print("sent 20 events to 2 queues")

        # First run: process and commit 10 messages, then take one more batch and "crash" before committing.
        with mqlite.LitePullConsumer(broker, "audit", auto_commit=False, pull_batch_size=5,
                                     consume_from_where=FIRST) as consumer:
            consumer.subscribe("events", "*")
            done = 0
            while done < 10:
                batch = poll_at_least(consumer, 1)
                done += len(batch)   # ... process the batch ...
                consumer.commit_sync()  # ... and only then record the progress
            lost = consumer.poll(timeout=5.0)  # handed out, never committed: the process dies here
            committed = {mq.queue_id: consumer.committed(mq) for mq in sorted(consumer.assignment())}
        print(f"first run: processed and committed {done}, then stopped holding {len(lost)} uncommitted; "
              f"committed offsets per queue {committed}")

        # Second run of the same group: it starts at the committed offsets, so the lost batch comes again.
        with mqlite.LitePullConsumer(broker, "audit", auto_commit=False, consume_from_where=FIRST) as consumer:
            consumer.subscribe("events", "*")
            rest = poll_at_least(consumer, 20 - done)
            consumer.commit_sync()
        again = {m.body for m in lost} <= {m.body for m in rest}
        print(f"second run: received the other {len(rest)}; the uncommitted batch was among them: {again}")

        # assign() + seek(): replay queue 0 from offset 3 under another group, without a rebalance.
        with mqlite.LitePullConsumer(broker, "replay", auto_commit=False) as consumer:
            queue0 = mqlite.MessageQueue("events", broker.broker_name, 0)
            consumer.assign([queue0])
            consumer.seek(queue0, 3)
            replay = consumer.poll(timeout=5.0)
        print(f"replay of queue 0 from offset 3: offsets {[m.queue_offset for m in replay]}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
