"""What one `StoreReader.refresh()` costs on a store of many queues (a long-lived reader, the dashboard).

Builds (once, in `--dir`) a store of `--topics` topics x `--queues` queues with one message each,
opens a reader and times `--n` refreshes with nothing new written; prints the median in ms as one
JSON line. Compare two trees by running it interleaved with each tree on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from mqlite.reader import StoreReader
from mqlite.store import MessageStore, StoreConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.dir, "commitlog")):
        with MessageStore(args.dir, StoreConfig(commitlog_file_size=1 << 24)) as store:
            for t in range(args.topics):
                for q in range(args.queues):
                    store.put(f"T{t}", q, b"x", {"KEYS": f"k{t}"})
            store.wait_dispatched()
    with StoreReader(args.dir) as reader:
        times = []
        for _ in range(args.n):
            start = time.perf_counter()
            reader.refresh()
            times.append(time.perf_counter() - start)
    print(json.dumps({"refresh_ms": round(statistics.median(times) * 1000, 3), "n": args.n}))


if __name__ == "__main__":
    main()
