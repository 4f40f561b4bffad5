"""Cost of the dashboard (issue 15): one sampling round, and the routes the page polls, on many queues.

    PYTHONPATH=src python bench/bench_dashboard.py [--topics 300] [--queues 4] [--rounds 7]

Builds a store of `--topics` topics of `--queues` queues (one message each, ten groups with committed
offsets), opens it as the writer and read-only beside it, and times, interleaved round by round:

- `sample_writer` / `sample_reader`: one sampler round (`Source.sample`) on each broker;
- `topic_status_reader`: what a round cost before it read the files in one pass: `topic_status` of
  every topic on the reader (each call refreshes the reader's whole store);
- `GET <route>`: one request to a `Dashboard` on the reader (sampling stopped: interval 3600 s).

Prints one JSON line per round and the medians (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from collections import defaultdict

import mqlite
from mqlite.dashboard import Dashboard
from mqlite.dashboard.source import Source

ROUTES = ["api/overview", "api/groups", "api/topics/t5", "api/messages?key=k5&topic=t5", "api/health", "metrics"]


def _get(url: str) -> None:
    with urllib.request.urlopen(url) as response:
        response.read()


def _ms(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    path = tempfile.mkdtemp(prefix="bench-dashboard-")
    settings = {"commitlog_file_size": 1 << 24, "consumequeue_file_size": 20 * 1000}
    with mqlite.open(path, **settings) as writer:
        for t in range(args.topics):
            writer.create_topic(f"t{t}", args.queues)
            for q in range(args.queues):
                writer.put_message(f"t{t}", q, b"x", {"KEYS": f"k{t}"})
        for g in range(10):
            writer.commit_offset(f"g{g}", mqlite.MessageQueue("t1", writer.broker_name, 0), 1)
        writer.wait_dispatched()
        with mqlite.open(path, read_only=True) as reader, Dashboard(reader, interval=3600) as board:
            sources = {"writer": Source(writer), "reader": Source(reader)}
            medians: dict[str, list[float]] = defaultdict(list)
            for round_no in range(args.rounds):
                row = {f"sample_{name}": _ms(source.sample) for name, source in sources.items()}
                row["topic_status_reader"] = _ms(lambda: [reader.topic_status(t) for t in reader.topic_list()])
                for route in ROUTES:
                    row[f"GET {route}"] = _ms(lambda r=route: _get(board.url + r))
                print(json.dumps({"round": round_no, **{k: round(v, 2) for k, v in row.items()}}))
                for key, value in row.items():
                    medians[key].append(value)
    print(json.dumps({"median_ms": {k: round(statistics.median(v), 2) for k, v in medians.items()},
                      "topics": args.topics, "queues": args.queues}))


if __name__ == "__main__":
    main()
