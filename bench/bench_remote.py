"""Remote client benchmarks (issue 12): mqlite's own clients over loopback to a serving process.

    .venv/bin/python bench/bench_remote.py [--n 20000] [--only send,batch,drain,latency]

The server runs in its own process (`broker.serve`), as users run it; this process is the client.
Same-run local numbers (an embedded broker in this process) are printed beside the remote ones.
Prints one JSON line per measurement and a summary table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import mqlite
from mqlite.consumer import ConsumeFromWhere

BODY = b"x" * 100
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SETTINGS = {"flush_disk_type": "ASYNC_FLUSH", "message_index_enable": False}

_SERVER = """
import sys, mqlite
with mqlite.open(sys.argv[1], flush_disk_type="ASYNC_FLUSH", message_index_enable=False) as broker:
    print(broker.serve("127.0.0.1:0").address, flush=True)
    sys.stdin.read()
"""

_SENDER = """
import sys, time, mqlite
with mqlite.connect(sys.argv[1]) as remote, mqlite.Producer(remote, group="lat-pg") as producer:
    for i in range(int(sys.argv[2])):
        producer.send(mqlite.Message("lat", b"%d" % time.monotonic_ns()))
        time.sleep(0.002)
"""


def emit(name: str, **fields: object) -> dict[str, object]:
    row = {"bench": name, **fields}
    print(json.dumps(row), flush=True)
    return row


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(mqlite.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


@contextmanager
def served() -> Iterator[str]:
    """A serving process over a fresh store; yields its address."""
    path = tempfile.mkdtemp(prefix="mqlite-bench-remote-")
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=_env(), text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def local_broker() -> Iterator[mqlite.Broker]:
    path = tempfile.mkdtemp(prefix="mqlite-bench-local-")
    try:
        with mqlite.broker.open(path, **SETTINGS) as broker:
            yield broker
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sync_send(target: object, n: int) -> float:
    with mqlite.Producer(target, group="pg") as producer:
        producer.send(mqlite.Message("s", BODY))  # route and connection warm
        start = time.perf_counter()
        for _ in range(n):
            producer.send(mqlite.Message("s", BODY))
        return n / (time.perf_counter() - start)


def batch_send(target: object, batches: int, size: int = 1000) -> float:
    msgs = [mqlite.Message("b", BODY) for _ in range(size)]
    with mqlite.Producer(target, group="pg") as producer:
        producer.send_batch(msgs)
        start = time.perf_counter()
        for _ in range(batches):
            producer.send_batch(msgs)
        return batches * size / (time.perf_counter() - start)


def drain(target: object, n: int) -> float:
    with mqlite.Producer(target, group="pg") as producer:
        msgs = [mqlite.Message("d", BODY) for _ in range(1000)]
        for _ in range(n // 1000):
            producer.send_batch(msgs)
    got = 0
    consumer = mqlite.LitePullConsumer(target, "drain-cg", consume_from_where=FIRST, pull_batch_size=32)
    consumer.subscribe("d", "*")
    with consumer:
        start = time.perf_counter()
        while got < n:
            got += len(consumer.poll(1.0))
        return got / (time.perf_counter() - start)


def latency(address: str, n: int) -> dict[str, float]:
    """Send (another process) to consume (this process) through the server (a third): ms per message."""
    seen: list[float] = []
    with mqlite.connect(address) as remote:
        remote.create_topic("lat", 1)
        consumer = mqlite.LitePullConsumer(remote, "lat-cg")
        consumer.subscribe("lat", "*")
        with consumer:
            while not consumer.assignment():
                consumer.poll(0.05)
            sender = subprocess.Popen([sys.executable, "-c", _SENDER, address, str(n)], env=_env())
            while len(seen) < n:
                for msg in consumer.poll(1.0):
                    seen.append((time.monotonic_ns() - int(msg.body)) / 1e6)
            sender.wait(60)
    seen.sort()
    return {"p50_ms": statistics.median(seen), "p99_ms": seen[int(len(seen) * 0.99) - 1], "max_ms": seen[-1]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--only", default="send,batch,drain,latency")
    args = parser.parse_args()
    only = set(args.only.split(","))
    rows = []
    if "send" in only:
        with local_broker() as broker:
            rows.append(emit("sync_send_local", msgs_per_s=round(sync_send(broker, args.n))))
        with served() as address, mqlite.connect(address) as remote:
            rows.append(emit("sync_send_remote", msgs_per_s=round(sync_send(remote, args.n))))
    if "batch" in only:
        with local_broker() as broker:
            rows.append(emit("send_batch_1000_local", msgs_per_s=round(batch_send(broker, 50))))
        with served() as address, mqlite.connect(address) as remote:
            rows.append(emit("send_batch_1000_remote", msgs_per_s=round(batch_send(remote, 50))))
    if "drain" in only:
        with local_broker() as broker:
            rows.append(emit("lite_pull_drain_local", msgs_per_s=round(drain(broker, 10 * args.n))))
        with served() as address, mqlite.connect(address) as remote:
            rows.append(emit("lite_pull_drain_remote", msgs_per_s=round(drain(remote, 10 * args.n))))
    if "latency" in only:
        with served() as address:
            rows.append(emit("long_poll_wakeup_cross_process", **latency(address, 1000)))
    print()
    for row in rows:
        print(f"{row.pop('bench'):<34} " + "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
