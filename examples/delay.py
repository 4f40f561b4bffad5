"""Delayed messages: RocketMQ's delay levels, and an arbitrary delay in milliseconds.

A delay level picks a delay from `message_delay_level` (default
"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h": level 1 is one second).
`delay_ms` (RocketMQ 5's timer) and `deliver_time_ms` take any delay. Until it is due, a
delayed message waits in a system topic; consumers of its topic see it only then.

Run: python examples/delay.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

import mqlite


def main(path: str) -> None:
    with mqlite.open(path) as broker:
        # Create the topic up front, so the consumer below owns its queues before the first send.
        broker.create_topic("reminders", queue_nums=4)
        arrived: list[mqlite.MessageExt] = []
        lock = threading.Lock()
        all_in = threading.Event()

        def on_message(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
            with lock:
                arrived.extend(msgs)
                if len(arrived) == 4:
                    all_in.set()

        # Start the consumer first, from the end of the topic, so it sees each message as it becomes due.
        with mqlite.PushConsumer(broker, "delay-consumer", subscription={"reminders": "*"}, listener=on_message):
            with mqlite.Producer(broker, group="delay-producer") as producer:
                producer.send(mqlite.Message("reminders", b"now"))
                producer.send(mqlite.Message("reminders", b"level 1 (1 s)", delay_time_level=1))
                later = mqlite.Message("reminders", b"delay_ms 1500")
                later.delay_ms = 1500
                producer.send(later)
                at = mqlite.Message("reminders", b"deliver_time_ms now + 2 s")
                at.deliver_time_ms = int(time.time() * 1000) + 2000
                producer.send(at)
            print("sent one message now and three delayed ones")
            if not all_in.wait(timeout=10):
                raise SystemExit(f"only {len(arrived)} of 4 messages arrived")

        # born_timestamp is when the producer sent it; store_timestamp is when it was stored in
        # its real topic, that is when it became due.
        for msg in sorted(arrived, key=lambda m: m.store_timestamp):
            waited = (msg.store_timestamp - msg.born_timestamp) / 1000
            print(f"  {msg.body.decode():28s} became visible {waited:.1f} s after it was sent")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
