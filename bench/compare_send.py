"""`Producer.send` before/after (issue 14): two source trees and the prototype's put, interleaved.

    python3 bench/compare_send.py BASE_SRC HEAD_SRC [--rounds 5] [--n 100000]
    python3 bench/compare_send.py BASE_SRC HEAD_SRC --callgrind [--rounds 3]

Each measurement is a fresh process (`--one`): one thread sends `n` 100 B messages (`Message`
built in the loop, ASYNC_FLUSH, index on, `wait_dispatched()` inside the clock), or puts `n`
100 B bodies with the prototype (`proto_mqlite.CommitLogProto(fmt="full")`). The order of the
three flips each round. Printed: medians of msgs/s, CPU us a message for the whole process and
for the sending thread, and the median of the same-round wall ratios to the prototype.
`--callgrind` counts instructions instead (valgrind, `--separate-threads=yes`): the difference
between a run of 12000 and one of 2000 operations, for the sending thread and for all threads.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = b"x" * 100


def one(mode: str, n: int) -> None:
    """Run one measurement in this process and print `mode msgs/s cpu_us main_us`."""
    sys.path.insert(0, HERE)
    root = tempfile.mkdtemp(prefix="mqlite-compare-send-")
    try:
        if mode == "proto":
            from proto_mqlite import CommitLogProto

            proto = CommitLogProto(root, fmt="full")
            put = proto.put
            c0, m0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
            for _ in range(n):
                put(BODY)
            t1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
            proto.close()
        else:
            from mqlite import Message, Producer
            from mqlite.broker import open as open_broker

            with open_broker(root, flush_disk_type="ASYNC_FLUSH") as broker, Producer(broker, group="bench") as producer:
                send = producer.send
                send(Message("T", BODY))  # topic creation and the cached map, outside the clock
                c0, m0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                for _ in range(n):
                    send(Message("T", BODY))
                broker.wait_dispatched()
                t1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
        print(f"{mode} {n / (t1 - t0):.0f} {(c1 - c0) / n * 1e6:.3f} {(m1 - m0) / n * 1e6:.3f} "
              f"maxrss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
    finally:
        shutil.rmtree(root)


def _run(src: str, mode: str, n: int, wrap: list[str] | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [*(wrap or []), sys.executable, os.path.abspath(__file__), "--one", mode, "--n", str(n)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout


def _instructions(src: str, mode: str, n: int) -> tuple[int, int]:
    """Instructions of the sending thread and of all threads, for one run of `n` operations."""
    out = tempfile.mkdtemp(prefix="mqlite-callgrind-")
    try:
        _run(src, mode, n, ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                            f"--callgrind-out-file={out}/cg"])
        totals = {}
        for path in glob.glob(f"{out}/cg-*"):
            with open(path) as f:
                totals[path] = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
        return totals[f"{out}/cg-01"], sum(totals.values())
    finally:
        shutil.rmtree(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", nargs="?")
    parser.add_argument("head", nargs="?")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--one", choices=["send", "proto"], help=argparse.SUPPRESS)
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args()
    if args.one:
        one(args.one, args.n)
        return
    trees = {"base": args.base, "head": args.head, "proto": args.base}
    if args.callgrind:
        for r in range(args.rounds):
            for name, src in trees.items():
                mode = "proto" if name == "proto" else "send"
                small, large = _instructions(src, mode, 2000), _instructions(src, mode, 12000)
                print(f"round {r} {name}: main {(large[0] - small[0]) // 10000} all {(large[1] - small[1]) // 10000} "
                      "instructions an operation", flush=True)
        return
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            fields = _run(trees[name], "proto" if name == "proto" else "send", args.n).split()
            rows[name].append((float(fields[1]), float(fields[2]), float(fields[3])))
            print(f"round {r} {name}: {fields[1]} msgs/s, cpu {fields[2]} us, main thread {fields[3]} us", flush=True)
    for name, got in rows.items():
        rate, cpu, main_cpu = (statistics.median(x[i] for x in got) for i in range(3))
        ratio = statistics.median(got[r][0] / rows["proto"][r][0] for r in range(args.rounds))
        print(f"{name:5} median {rate:8.0f} msgs/s  cpu {cpu:5.2f} us  main thread {main_cpu:5.2f} us  "
              f"wall ratio to proto put (same-round median) {ratio:.3f}  cpu ratio {statistics.median(x[1] for x in rows['proto']) / cpu:.3f}")


if __name__ == "__main__":
    main()
