#!/usr/bin/env python3
"""`Producer.send_batch(1000)` of 100 B bodies against the prototype's `put_batch(1000)` (issue 14's row).

Each measurement runs in its own child process (so two source trees can be compared: a
side is `name=SRC_DIR`, imported with PYTHONPATH=SRC_DIR), opens a fresh ASYNC_FLUSH broker
(index on), builds the `Message`s inside the timed loop as an application would, and stops
the clock after `wait_dispatched()` (the reput thread's index work is paid for). The
prototype (`proto_mqlite.CommitLogProto(fmt="full")`, the same RocketMQ records with no API
around them) runs in the same rounds. Sides are interleaved and their order rotates every
round, so drift on a shared machine hits them alike. Printed per side: medians over the
rounds of messages a second (wall), CPU us a message of the whole process (every thread)
and of the sending thread alone, and the median of the same-round ratios to the prototype.

  PY=/work/main/.venv/bin/python
  $PY bench/bench_send_batch.py --rounds 5 base=/work/wt-base/src head=src
  $PY bench/bench_send_batch.py --bodies mixed --tags ...   # bodies of 50-150 B; tags and KEYS of 3 and 7 kinds

`--bodies mixed` gives each message of a batch its own size (50-150 B, the same sizes every
batch), `--tags` three TAGS and seven KEYS values that repeat through the batch.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = b"x" * 100
TOPIC = "BenchTopic"


def _bodies(kind: str) -> list[bytes]:
    if kind == "fixed":
        return [BODY] * 1000
    sizes = random.Random(14).choices(range(50, 151), k=1000)
    return [b"x" * size for size in sizes]


def _measure(kind: str, n: int, root: str, body_kind: str, tags: bool) -> dict[str, float]:
    perf, cpu, thread = time.perf_counter, time.process_time, time.thread_time
    bodies = _bodies(body_kind)
    if kind == "proto":
        sys.path.insert(0, HERE)
        from proto_mqlite import CommitLogProto

        proto = CommitLogProto(root, fmt="full")
        t0, c0, th0 = perf(), cpu(), thread()
        for _ in range(n // 1000):
            proto.put_batch(bodies)
        wall, used, own = perf() - t0, cpu() - c0, thread() - th0
        proto.close()
    else:
        import mqlite
        from mqlite import Message, Producer

        def batch() -> list[Message]:
            if tags:
                return [Message(TOPIC, body, tags=f"Tag{i % 3}", keys=f"key{i % 7}") for i, body in enumerate(bodies)]
            return [Message(TOPIC, body) for body in bodies]

        with mqlite.open(root, flush_disk_type="ASYNC_FLUSH") as broker, Producer(broker, group="bench") as producer:
            producer.send_batch(batch())  # topic, queues, caches: off the clock
            broker.wait_dispatched()
            t0, c0, th0 = perf(), cpu(), thread()
            for _ in range(n // 1000):
                producer.send_batch(batch())
            broker.wait_dispatched()
            wall, used, own = perf() - t0, cpu() - c0, thread() - th0
    sent = n // 1000 * 1000
    return {"msgs_per_s": sent / wall, "cpu_us": used / sent * 1e6, "main_us": own / sent * 1e6}


def _child(src: str, kind: str, n: int, body_kind: str, tags: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    root = tempfile.mkdtemp(prefix="bench-send-batch-")
    try:
        out = subprocess.run([sys.executable, __file__, "--child", src, kind, str(n), root, "--bodies", body_kind]
                             + (["--tags"] if tags else []), env=env, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=300_000, help="messages a measurement (batches of 1000)")
    parser.add_argument("--bodies", choices=("fixed", "mixed"), default="fixed")
    parser.add_argument("--tags", action="store_true", help="messages with TAGS and KEYS (the prototype has none)")
    parser.add_argument("--child", nargs=4, metavar=("SRC", "KIND", "N", "ROOT"), help=argparse.SUPPRESS)
    parser.add_argument("sides", nargs="*", help="name=SRC_DIR (default: head=src of this checkout)")
    args = parser.parse_args()
    if args.child:
        _, kind, n, root = args.child
        print(json.dumps(_measure(kind, int(n), root, args.bodies, args.tags)))
        return
    sides = [tuple(s.split("=", 1)) for s in args.sides] or [("head", os.path.join(HERE, "..", "src"))]
    runs = [("proto", "proto", HERE)] + [(name, "batch", os.path.abspath(src)) for name, src in sides]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in runs}
    for r in range(args.rounds):
        shift = r % len(runs)
        for name, kind, src in runs[shift:] + runs[:shift]:
            results[name].append(_child(src, kind, args.n, args.bodies, args.tags))
            got = results[name][-1]
            print(f"round {r} {name:6s} {got['msgs_per_s']:9.0f} msgs/s  cpu {got['cpu_us']:.2f} us  "
                  f"main {got['main_us']:.2f} us", flush=True)
    proto = results["proto"]
    for name, rows in results.items():
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        ratio = statistics.median(row["msgs_per_s"] / p["msgs_per_s"] for row, p in zip(rows, proto))
        cpu_ratio = statistics.median(p["cpu_us"] / row["cpu_us"] for row, p in zip(rows, proto))
        print(f"{name:6s} median {med['msgs_per_s']:9.0f} msgs/s  cpu {med['cpu_us']:.2f} us/msg  "
              f"main thread {med['main_us']:.2f} us/msg  x proto put_batch: wall {ratio:.2f}, cpu {cpu_ratio:.2f}")


if __name__ == "__main__":
    main()
