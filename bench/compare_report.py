"""Medians of `compare_trees.sh`'s rounds, base beside head, and their ratio.

    python3 bench/compare_report.py OUTDIR

Throughput rows are thousands of messages (rows) a second, `cpu_us` rows CPU microseconds a
message over every thread of the process (steadier than the wall clock on a shared machine).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

_PRODUCER = re.compile(r"(\w+)\s+median\s+([\d.]+)k msgs/s \(\s*([\d.]+) us CPU")


def collect(out: Path) -> dict[str, dict[str, list[float]]]:
    """{row: {side: [value per round]}} from OUTDIR/base.txt and OUTDIR/head.txt."""
    rows: dict[str, dict[str, list[float]]] = {}

    def add(name: str, side: str, value: float) -> None:
        rows.setdefault(name, {}).setdefault(side, []).append(value)

    for side in ("base", "head"):
        for line in (out / f"{side}.txt").read_text().splitlines():
            match = re.match(rf"{side} r\d+ (\w+): (.*)", line)
            if not match:
                continue
            kind, rest = match.groups()
            if kind == "producer":
                row = _PRODUCER.match(rest)
                if row:
                    add(f"{row[1]} k/s", side, float(row[2]))
                    add(f"{row[1]} cpu_us", side, float(row[3]))
            elif rest.startswith("{"):
                data = json.loads(rest)
                if kind == "consumer":
                    batch = data.get("batch", data.get("pull_batch_size"))
                    add(f"{data['bench']} threads={data.get('threads', '-')} batch={batch} k/s", side,
                        data["msgs_per_s"] / 1000)
                elif kind == "spark" and "rows_per_s" in data:
                    add("spark reader alone k rows/s", side, data["rows_per_s"] / 1000)
                elif kind == "mqlite" and data.get("msgs_per_s"):
                    add(data["name"].removeprefix("mqlite.") + " k/s", side, data["msgs_per_s"] / 1000)
    return rows


def main() -> None:
    rows = collect(Path(sys.argv[1]))
    print(f"| row | base | head | head/base | base rounds | head rounds |\n|---|---|---|---|---|---|")
    for name, sides in rows.items():
        base, head = statistics.median(sides["base"]), statistics.median(sides["head"])
        print(f"| {name} | {base:.1f} | {head:.1f} | {head / base:.2f} | "
              f"{', '.join(f'{v:.1f}' for v in sides['base'])} | {', '.join(f'{v:.1f}' for v in sides['head'])} |")


if __name__ == "__main__":
    main()
