"""CPU a message of each thread of a `PushConsumer` draining a backlog, for one or two source trees.

The consume phase's CPU per thread kind (the pull thread, the consume threads summed, the rest) from
/proc/self/task/<tid>/stat, so a change shows on which side it paid (the pull thread is the serial stage).
Each measurement runs in a fresh interpreter, trees and thread counts interleaved round by round.

  python3 push_threads_cpu.py SRC [SRC ...] [--threads 20,4,1] [--listener lock|free] [--n 400000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _cpu_by_thread() -> collections.Counter[str]:
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: collections.Counter[str] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        name = names.get(int(tid), "?")
        kind = "consume" if "-consume-" in name else "pull" if name.startswith("mqlite-pull-") else "other"
        out[kind] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


def measure(threads: int, listener: str, n: int) -> dict:
    """One drain in this process: msgs/s and CPU us a message, of the process and per thread kind."""
    sys.path.insert(0, HERE)
    import bench_consumer
    import mqlite
    from mqlite.consumer import ConsumeFromWhere, PushConsumer

    with tempfile.TemporaryDirectory(prefix="push-cpu-") as root, \
            mqlite.open(root, **bench_consumer.SETTINGS) as broker:
        bench_consumer.fill(broker, "T", n)
        counter = bench_consumer.LISTENERS[listener](n)
        before = _cpu_by_thread()
        t0, c0 = time.perf_counter(), time.process_time()
        with PushConsumer(broker, "bench", consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                          consume_thread_nums=threads, subscription={"T": "*"}, listener=counter):
            if not counter.done.wait(600):
                raise RuntimeError(f"push consumer did not see {n} messages in 600 s")
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            after = _cpu_by_thread()
    per = {kind: round((after[kind] - before.get(kind, 0)) / n * 1e6, 2) for kind in ("pull", "consume", "other")}
    return {"msgs_s": n / elapsed, "cpu_us": cpu / n * 1e6, **per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="*", help="src directories to compare (PYTHONPATH of each run)")
    parser.add_argument("--threads", default="20,4,1")
    parser.add_argument("--listener", default="lock", choices=("lock", "free"))
    parser.add_argument("--n", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: measure this thread count
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.listener, args.n)))
        return
    results: dict[tuple[str, int], list[dict]] = collections.defaultdict(list)
    counts = [int(t) for t in args.threads.split(",")]
    for rnd in range(args.rounds):
        trees = args.trees if rnd % 2 == 0 else args.trees[::-1]
        for tree in trees:
            for threads in counts:
                out = subprocess.run([sys.executable, __file__, "--one", str(threads), "--listener", args.listener,
                                      "--n", str(args.n)], capture_output=True, text=True, check=True,
                                     env={**os.environ, "PYTHONPATH": tree})
                row = json.loads(out.stdout.strip().splitlines()[-1])
                results[(tree, threads)].append(row)
                print(rnd, tree, threads, json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
    print(f"\nmedians over {args.rounds} rounds ({args.listener} listener, {args.n} messages): "
          "msgs/s, CPU us a message (process; pull thread; consume threads; other threads)")
    for (tree, threads), rows in sorted(results.items()):
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{tree:40} {threads:3} threads  {med['msgs_s']:9.0f}  {med['cpu_us']:.2f}; "
              f"{med['pull']:.2f}; {med['consume']:.2f}; {med['other']:.2f}")


if __name__ == "__main__":
    main()
