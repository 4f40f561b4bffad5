"""Consumer benchmarks (issue 4): push throughput, lite-pull poll throughput, long-poll wake-up latency,
and end-to-end produce->consume against persist-queue's ack queue and litequeue in the same run.

    .venv-bench/bin/python bench/bench_consumer.py [--n 200000] [--only push_backlog,push_e2e,poll,latency,peers]
        [--push-threads 1,4,20] [--listeners lock,free]

Prints one JSON line per measurement (msgs/s or latency in ms) and a summary table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import tempfile
import threading
import time

import mqlite
from mqlite.consumer import ConsumeFromWhere, PushConsumer

BODY = b"x" * 100
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SETTINGS = {"flush_disk_type": "ASYNC_FLUSH", "message_index_enable": False}


def emit(name: str, **fields: object) -> dict:
    row = {"bench": name, **fields}
    print(json.dumps(row), flush=True)
    return row


def fill(broker: mqlite.Broker, topic: str, n: int, queues: int = 4) -> None:
    broker.create_topic(topic, queues)
    per = n // queues
    for q in range(queues):
        for start in range(0, per, 1000):
            count = min(1000, per - start)
            broker.put_messages(topic, q, [BODY] * count, [None] * count)
    broker.store.wait_dispatched()


class Counter:
    """A counting listener that takes a `threading.Lock` per call: a fair model of a user's listener."""

    def __init__(self, target: int) -> None:
        self.n = 0
        self.target = target
        self.done = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, msgs: list, ctx: object) -> None:
        with self.lock:
            self.n += len(msgs)
            if self.n >= self.target:
                self.done.set()


class FreeCounter:
    """A lock-free counting listener (`next` of an `itertools.count` is atomic under the GIL)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.done = threading.Event()
        self._count = itertools.count(1)

    def __call__(self, msgs: list, ctx: object) -> None:
        seen = 0
        for _ in msgs:
            seen = next(self._count)
        if seen >= self.target:
            self.done.set()


LISTENERS = {"lock": Counter, "free": FreeCounter}


def drain_push(broker: mqlite.Broker, topic: str, n: int, threads: int | None = 4, batch: int = 1,
               listener: str = "lock", group: str = "bench") -> tuple[float, float, int]:
    """Consume a backlog of n with a PushConsumer (None threads: its default); msgs/s, CPU us a message, threads.

    The clock runs from the consumer's start until the listener has seen n messages (process CPU: every thread).
    """
    counter = LISTENERS[listener](n)
    options = {} if threads is None else {"consume_thread_nums": threads}
    t0, c0 = time.perf_counter(), time.process_time()
    with PushConsumer(broker, group, consume_from_where=FIRST, consume_message_batch_max_size=batch,
                      subscription={topic: "*"}, listener=counter, **options) as consumer:
        if not counter.done.wait(600):
            raise RuntimeError(f"push consumer did not see {n} messages in 600 s")
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        return n / elapsed, cpu / n * 1e6, consumer.consume_thread_nums


def drain_poll(broker: mqlite.Broker, topic: str, n: int, batch: int = 32,
               group: str = "bench") -> tuple[float, float]:
    """Consume a backlog of n with `LitePullConsumer.poll`; msgs/s and CPU us a message (every thread)."""
    from mqlite.consumer.litepull import LitePullConsumer

    got = 0
    t0, c0 = time.perf_counter(), time.process_time()
    with LitePullConsumer(broker, group, consume_from_where=FIRST, pull_batch_size=batch,
                          auto_commit=True) as consumer:
        consumer.subscribe(topic, "*")
        while got < n:
            got += len(consumer.poll(timeout=5.0))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return n / elapsed, cpu / n * 1e6


def push_backlog(root: str, n: int, threads: int = 4, batch: int = 1, listener: str = "lock") -> dict:
    """`listener` "lock" (the bench's `Counter`) or "free" (`FreeCounter`, reported as push_backlog_free)."""
    with mqlite.open(os.path.join(root, "pb"), **SETTINGS) as broker:
        fill(broker, "T", n)
        rate, cpu, _ = drain_push(broker, "T", n, threads, batch, listener)
        name = "push_backlog" if listener == "lock" else "push_backlog_free"
        return emit(name, n=n, threads=threads, batch=batch, msgs_per_s=round(rate),
                    cpu_us_per_msg=round(cpu, 2))


def push_e2e(root: str, n: int, threads: int = 4) -> dict:
    with mqlite.open(os.path.join(root, "pe"), **SETTINGS) as broker:
        broker.create_topic("T", 4)
        counter = Counter(n)
        with PushConsumer(broker, "bench", consume_thread_nums=threads, subscription={"T": "*"},
                          listener=counter), mqlite.Producer(broker, "p") as producer:
            t0 = time.perf_counter()
            msgs = [mqlite.Message("T", BODY) for _ in range(1000)]
            for start in range(0, n, 1000):
                for q in range(4):
                    producer.send_batch(msgs[: 1000 // 4], queue=mqlite.MessageQueue("T", broker.broker_name, q))
            counter.done.wait(600)
            elapsed = time.perf_counter() - t0
        return emit("push_e2e_send_batch", n=n, threads=threads, msgs_per_s=round(n / elapsed))


def poll_backlog(root: str, n: int, batch: int = 32) -> dict | None:
    try:
        from mqlite.consumer.litepull import LitePullConsumer  # noqa: F401 - trees before the lite pull consumer
    except ImportError:
        return None
    with mqlite.open(os.path.join(root, "lp"), **SETTINGS) as broker:
        fill(broker, "T", n)
        rate, cpu = drain_poll(broker, "T", n, batch)
        return emit("litepull_poll", n=n, pull_batch_size=batch, msgs_per_s=round(rate), cpu_us_per_msg=round(cpu, 2))


def latency(root: str, samples: int = 2000) -> dict:
    with mqlite.open(os.path.join(root, "lat"), **SETTINGS) as broker:
        broker.create_topic("T", 1)
        arrived: list[float] = []
        got = threading.Semaphore(0)

        def listener(msgs: list, ctx: object) -> None:
            arrived.append(time.perf_counter())
            got.release()

        with PushConsumer(broker, "bench", consume_thread_nums=4, subscription={"T": "*"}, listener=listener), \
                mqlite.Producer(broker, "p") as producer:
            time.sleep(0.2)
            lat = []
            for _ in range(samples):
                time.sleep(0.001)  # the consumer is parked again before each send
                sent = time.perf_counter()
                producer.send(mqlite.Message("T", BODY))
                got.acquire()
                lat.append((arrived[-1] - sent) * 1000)
        lat.sort()
        return emit("long_poll_latency", samples=samples, p50_ms=round(lat[len(lat) // 2], 3),
                    p99_ms=round(lat[int(len(lat) * 0.99)], 3), max_ms=round(lat[-1], 3),
                    mean_ms=round(statistics.fmean(lat), 3))


def peers(root: str, n: int) -> list[dict]:
    """Producer thread puts n 100 B items while a consumer thread gets and acks them."""
    rows = []
    try:
        import persistqueue

        q = persistqueue.SQLiteAckQueue(os.path.join(root, "pq"), multithreading=True, auto_commit=True)

        def pq_get() -> None:
            item = q.get(block=True, raw=True)
            q.ack(id=item["pqid"])

        rows.append(_peer_e2e("persistqueue.SQLiteAckQueue", n, q.put, pq_get))
    except ImportError:
        pass
    try:
        import litequeue

        lq = litequeue.LiteQueue(os.path.join(root, "lq.sqlite3"))

        def lq_get() -> None:
            while True:
                m = lq.pop()
                if m is not None:
                    lq.done(m.message_id)
                    return

        rows.append(_peer_e2e("litequeue", n, lambda b: lq.put(b.decode()), lq_get))
    except ImportError:
        pass
    return rows


def _peer_e2e(name: str, n: int, put, get) -> dict:
    t0 = time.perf_counter()
    producer = threading.Thread(target=lambda: [put(BODY) for _ in range(n)])
    producer.start()
    for _ in range(n):
        get()
    producer.join()
    elapsed = time.perf_counter() - t0
    return emit("peer_e2e", peer=name, n=n, msgs_per_s=round(n / elapsed))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--peer-n", type=int, default=20_000)
    parser.add_argument("--only", default="push_backlog,push_e2e,poll,latency,peers")
    parser.add_argument("--push-threads", default="1,4,20", help="consume_thread_nums of the push_backlog rows")
    parser.add_argument("--listeners", default="lock,free", help="push_backlog listeners: lock (Counter), free")
    args = parser.parse_args()
    only = set(args.only.split(","))
    root = tempfile.mkdtemp(prefix="mqlite-bench-consumer-")
    try:
        if "push_backlog" in only:
            for listener in args.listeners.split(","):
                for threads in map(int, args.push_threads.split(",")):
                    push_backlog(f"{root}/{listener}{threads}", args.n, threads=threads, listener=listener)
            push_backlog(root + "/b32", args.n, batch=32)
        if "push_e2e" in only:
            push_e2e(root, args.n)
        if "poll" in only:
            poll_backlog(root, args.n)
        if "latency" in only:
            latency(root)
        if "peers" in only:
            peers(root, args.peer_n)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
