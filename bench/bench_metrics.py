"""Scrape cost of `mqlite.metrics` (issue 15) on a store of a million messages.

    PYTHONPATH=src python bench/bench_metrics.py [--messages 1000000] [--rounds 5] [--dir DIR]

Builds (once, or reuses `--dir`) a store of `--messages` 50-150 B messages over 8 topics of 4
queues, two consumer groups with committed offsets half-way. Then, interleaved round by round:

- `cold`: a read-only broker opened fresh and its first `metrics()` (every stored unit summed);
- `warm`: a second `metrics()` on the same broker (only the units added since: none);
- `nocache`: `collect` with the bare `StoreFiles` (a fresh `StoreFigures`: every unit summed again), warm maps;
- `render`: `render_prometheus` of that snapshot;
- `append`: 10,000 more messages by the writer process (this one), then the reader's `metrics()`.

Prints one JSON line per round and the medians (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import mqlite
from mqlite.metrics import collect, render_prometheus
from mqlite.offsets import ConsumerOffsets

TOPICS = [f"bench{i}" for i in range(8)]
QUEUES = 4
BATCH = 1000


def build(path: str, messages: int) -> None:
    """Fill the store: batches of `BATCH` messages, round-robin over topics and queues."""
    bodies = [b"x" * (50 + (i * 37) % 101) for i in range(BATCH)]
    with mqlite.open(path, flush_disk_type="ASYNC_FLUSH") as broker:
        for topic in TOPICS:
            broker.create_topic(topic, QUEUES)
        for n in range(messages // BATCH):
            topic, queue = TOPICS[n % len(TOPICS)], (n // len(TOPICS)) % QUEUES
            broker.put_messages(topic, queue, bodies, [None] * BATCH)
        for group in ("cg1", "cg2"):
            for topic in TOPICS:
                for queue in range(QUEUES):
                    mq = mqlite.MessageQueue(topic, broker.broker_name, queue)
                    broker.commit_offset(group, mq, broker.max_offset(mq) // 2)


def one_round(path: str) -> dict[str, float]:
    times: dict[str, float] = {}
    with mqlite.open(path, read_only=True) as reader:
        start = time.perf_counter()
        reader.metrics()
        times["cold"] = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        snap = reader.metrics()
        times["warm"] = (time.perf_counter() - start) * 1000
        offsets = ConsumerOffsets(path).snapshot()
        start = time.perf_counter()
        collect(reader, offsets, store=reader.store)
        times["nocache"] = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        render_prometheus(snap)
        times["render"] = (time.perf_counter() - start) * 1000
        with mqlite.open(path) as writer:
            bodies = [b"y" * 100] * BATCH
            for n in range(10):
                writer.put_messages(TOPICS[n % len(TOPICS)], n % QUEUES, bodies, [None] * BATCH)
            start = time.perf_counter()
            reader.metrics()
            times["append"] = (time.perf_counter() - start) * 1000
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="a store built by an earlier run (built here when empty)")
    args = parser.parse_args()
    path = args.dir or tempfile.mkdtemp(prefix="mqlite-metrics-bench-")
    if not os.path.isdir(os.path.join(path, "commitlog")):
        start = time.perf_counter()
        build(path, args.messages)
        print(json.dumps({"built": path, "messages": args.messages, "seconds": round(time.perf_counter() - start, 1)}))
    rounds = []
    for i in range(args.rounds):
        times = one_round(path)
        rounds.append(times)
        print(json.dumps({"round": i, **{k: round(v, 2) for k, v in times.items()}}))
    print(json.dumps({"median_ms": {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}}))


if __name__ == "__main__":
    main()
