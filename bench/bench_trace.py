"""Message trace cost (issue 6): CPU per message with and without `trace=True`.

    .venv/bin/python bench/bench_trace.py [--n 20000] [--rounds 5]

Interleaved rounds of: sync sends of 100 B messages (untraced / traced producer), and a
push consumer draining a backlog of the same size with a listener that reads each
message's properties (untraced / traced). CPU time of the whole process (every thread:
the trace dispatcher, the pull and consume threads, the reput thread) per message, with
the key index on, as a user would run it. Prints one JSON line per round and the medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time

import mqlite

BODY = b"x" * 100
FIRST = mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def send_round(n: int, traced: bool) -> float:
    """CPU microseconds a message for `n` sync sends, flushed and dispatched (traces stored)."""
    root = tempfile.mkdtemp(prefix="mqlite-trace-bench-")
    try:
        with mqlite.open(root) as broker:
            broker.create_topic("bench", 4)
            start = time.process_time()
            with mqlite.Producer(broker, "pg", trace=traced) as producer:
                for i in range(n):
                    producer.send(mqlite.Message("bench", BODY, keys=f"k{i}"))
            broker.store.wait_dispatched()  # the trace messages' index entries too
            return (time.process_time() - start) / n * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def consume_round(n: int, traced: bool) -> float:
    """CPU microseconds a message for a push consumer draining `n` messages."""
    root = tempfile.mkdtemp(prefix="mqlite-trace-bench-")
    try:
        with mqlite.open(root) as broker:
            broker.create_topic("bench", 4)
            with mqlite.Producer(broker, "pg") as producer:
                for first in range(0, n, 1000):
                    producer.send_batch([mqlite.Message("bench", BODY, keys="k") for _ in range(min(1000, n - first))])
            broker.store.wait_dispatched()
            done = threading.Event()
            seen = [0]
            lock = threading.Lock()

            def listener(msgs: list[mqlite.MessageExt], context: object) -> None:
                for msg in msgs:
                    msg.properties  # what a real listener touches
                with lock:
                    seen[0] += len(msgs)
                    if seen[0] >= n:
                        done.set()

            start = time.process_time()
            consumer = mqlite.PushConsumer(broker, "cg", subscription={"bench": "*"}, listener=listener,
                                           consume_from_where=FIRST, trace=traced)
            with consumer:
                if not done.wait(300):
                    raise RuntimeError(f"consumed {seen[0]} of {n}")
            return (time.process_time() - start) / n * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        for name, run, traced in (("send", send_round, False), ("send traced", send_round, True),
                                  ("consume", consume_round, False), ("consume traced", consume_round, True)):
            us = run(args.n, traced)
            results.setdefault(name, []).append(us)
            print(json.dumps({"bench": name, "round": round_, "n": args.n, "cpu_us_per_msg": round(us, 2)}),
                  flush=True)
    print("median CPU us a message (all threads):")
    for name, values in results.items():
        print(f"  {name:16s} {statistics.median(values):7.2f}  (range {min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
