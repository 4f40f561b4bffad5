"""Serving: one process holds the store and serves it; worker processes send and consume through it.

The usual Python deployment has several processes (web workers, a worker service, a cron job). Only
one can hold a store, so that one serves it over RocketMQ's remoting protocol, and the others use the
same mqlite clients on `mqlite.connect(address)`. RocketMQ's own clients (Java, Go, C++, ali-ons)
connect to the same address as their name server.

Run: python examples/serving.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import threading

import mqlite

WORKERS = 3
PER_WORKER = 5


def web_worker(address: str, worker: int) -> None:
    """Another process: sends through the serving broker, as a web worker would."""
    with mqlite.connect(address) as remote, mqlite.Producer(remote, group="web") as producer:
        for i in range(PER_WORKER):
            producer.send(mqlite.Message("orders", f"order {worker}-{i}".encode(), tags="created",
                                         keys=f"order-{worker}-{i}"))


def main(path: str) -> None:
    with mqlite.open(path) as broker:
        # Loopback and a free port; `mqlite serve PATH --listen 127.0.0.1:9876` does the same from a shell.
        server = broker.serve("127.0.0.1:0")
        print(f"serving {path} on {server.address}")

        # A consumer in this process sees what the other processes send (it could run anywhere too).
        received: list[bytes] = []
        lock = threading.Lock()
        all_in = threading.Event()

        def on_message(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
            with lock:
                received.extend(m.body for m in msgs)
                if len(received) == WORKERS * PER_WORKER:
                    all_in.set()

        with mqlite.PushConsumer(broker, "billing", subscription={"orders": "created"}, listener=on_message,
                                 consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
            # "spawn" starts clean interpreters, as separate programs would be.
            context = multiprocessing.get_context("spawn")
            workers = [context.Process(target=web_worker, args=(server.address, n)) for n in range(WORKERS)]
            for process in workers:
                process.start()
            for process in workers:
                process.join()
                if process.exitcode != 0:
                    raise SystemExit(f"a worker process failed with exit code {process.exitcode}")
            if not all_in.wait(30):
                raise SystemExit(f"only {len(received)} of {WORKERS * PER_WORKER} messages arrived")
        print(f"{WORKERS} worker processes sent {len(received)} messages; the consumer got all of them")

        # The admin surface works over the wire too.
        with mqlite.connect(server.address) as remote:
            total = sum(q.max_offset for q in remote.topic_status("orders"))
            print(f"topic 'orders' holds {total} messages (asked over the wire)")
    # Closing the broker closed its server first.


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mqlite-serving-"))
