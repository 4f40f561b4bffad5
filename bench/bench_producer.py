#!/usr/bin/env python3
"""Producer send path (issue 3): `Producer.send` and `send_batch(1000)` of 100 B bodies, one thread.

Each measurement opens a fresh ASYNC_FLUSH broker in a temporary directory,
builds a `Message` per send inside the timed loop (as an application would),
and stops the clock after `wait_dispatched()` (so index work the reput thread
still owes is paid for). Variants are interleaved inside each round so that
drift on a shared machine hits them alike; the median of `--rounds` is printed,
as messages a second (wall clock) and CPU microseconds a message (every thread
of the process, so the reput thread's index work counts; less sensitive to
other load on the machine than the wall clock).

  floor_put    `MessageStore.put` of the same body and the two properties a
               producer adds (WAIT, UNIQ_KEY with a precomputed id), handed down
               pre-encoded as the producer does: the store's share of every send
               (index included), below which the producer cannot go.
  floor_batch  the same through `MessageStore.put_batch` of 1000.
  send         `Producer.send(Message(topic, body))`, key index on (the default).
  send_noidx   the same with `message_index_enable=False`.
  batch        `Producer.send_batch([Message(...) x 1000])`, index on.
  batch_noidx  the same, index off.

  .venv-bench/bin/python bench/bench_producer.py --rounds 5
  .venv-bench/bin/python bench/bench_producer.py --only send,batch --n 100000
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import mqlite
from mqlite import Message, Producer
from mqlite.message import UniqIdGenerator, encode_properties

try:
    from mqlite.message import EncodedProperties
except ImportError:  # mqlite before the producer pass: the store encodes the map itself
    EncodedProperties = None  # type: ignore[assignment,misc]

TOPIC = "BenchTopic"
BODY = b"x" * 100
perf = time.perf_counter
cpu = time.process_time  # CPU time of every thread of this process: robust to other load on the machine


def _open(root: str, index: bool) -> mqlite.Broker:
    return mqlite.open(root, flush_disk_type="ASYNC_FLUSH", message_index_enable=index)


def _encoded_properties(n: int) -> list[dict[str, str]]:
    """What a producer hands the store for a plain `Message(TOPIC, BODY)`: WAIT, a new UNIQ_KEY, pre-encoded."""
    ids = UniqIdGenerator()
    out = []
    for _ in range(n):
        props = {"WAIT": "true", "UNIQ_KEY": ids.next_id()}
        if EncodedProperties is not None:
            props = EncodedProperties(props)
            props.encoded = encode_properties(props).encode()
        out.append(props)
    return out


def floor_put(root: str, n: int, index: bool = True) -> tuple[float, float]:
    with _open(root, index) as broker:
        broker.create_topic(TOPIC, 4)
        store = broker.store
        put = store.put
        props = _encoded_properties(n)  # built outside the clock
        t0, c0 = perf(), cpu()
        for i in range(n):
            put(TOPIC, i & 3, BODY, props[i])
        store.wait_dispatched()
        return n / (perf() - t0), (cpu() - c0) / n * 1e6


def floor_batch(root: str, n: int, index: bool = True, size: int = 1000) -> tuple[float, float]:
    with _open(root, index) as broker:
        broker.create_topic(TOPIC, 4)
        store = broker.store
        props = _encoded_properties(n)
        batches = [props[i : i + size] for i in range(0, n - size + 1, size)]
        bodies = [BODY] * size
        t0, c0 = perf(), cpu()
        for i, batch_props in enumerate(batches):
            store.put_batch(TOPIC, i & 3, bodies, batch_props)
        store.wait_dispatched()
        sent = len(batches) * size
        return sent / (perf() - t0), (cpu() - c0) / sent * 1e6


def send(root: str, n: int, index: bool = True) -> tuple[float, float]:
    with _open(root, index) as broker, Producer(broker, group="bench") as producer:
        producer.send(Message(TOPIC, BODY))  # topic creation and queue cache, outside the clock
        s = producer.send
        t0, c0 = perf(), cpu()
        for _ in range(n):
            s(Message(TOPIC, BODY))
        broker.store.wait_dispatched()
        return n / (perf() - t0), (cpu() - c0) / n * 1e6


def batch(root: str, n: int, index: bool = True, size: int = 1000) -> tuple[float, float]:
    with _open(root, index) as broker, Producer(broker, group="bench") as producer:
        producer.send(Message(TOPIC, BODY))
        t0, c0 = perf(), cpu()
        for _ in range(n // size):
            producer.send_batch([Message(TOPIC, BODY) for _ in range(size)])
        broker.store.wait_dispatched()
        sent = n // size * size
        return sent / (perf() - t0), (cpu() - c0) / sent * 1e6


VARIANTS = {
    "floor_put": lambda root, n: floor_put(root, n),
    "floor_batch": lambda root, n: floor_batch(root, n * 4),
    "send": lambda root, n: send(root, n, True),
    "send_noidx": lambda root, n: send(root, n, False),
    "batch": lambda root, n: batch(root, n * 4, True),
    "batch_noidx": lambda root, n: batch(root, n * 4, False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=50_000, help="sends per measurement (batches: 4x)")
    parser.add_argument("--only", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = [v for v in args.only.split(",") if v]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    base = tempfile.mkdtemp(prefix="mqlite-bench-producer-")
    load = os.getloadavg()[0]
    try:
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                root = os.path.join(base, f"{name}-{r}")
                results[name].append(VARIANTS[name](root, args.n))
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{args.rounds} rounds, n={args.n}; load average before {load:.2f}, after {os.getloadavg()[0]:.2f}")
    for name in names:
        rates = [rate for rate, _ in results[name]]
        cpus = [c for _, c in results[name]]
        print(f"{name:12s} median {statistics.median(rates) / 1000:6.1f}k msgs/s "
              f"({statistics.median(cpus):5.2f} us CPU a message)   runs {' '.join(f'{v / 1000:.0f}k' for v in rates)}")

if __name__ == "__main__":
    main()
