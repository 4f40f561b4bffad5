#!/usr/bin/env python3
"""Render benchmark JSONL files as markdown tables.

  python3 report.py results/peers.jsonl results/physical.jsonl > tables.md
  python3 report.py --ref proto:async results/peers.jsonl results/mqlite.jsonl
  python3 report.py results/mqlite-bench.jsonl      (bench_mqlite.py rows: second table)

Rows with the same name (e.g. several --rounds, or several files) are merged:
the median msgs_per_s is shown, with min..max and the count.  --ref peer:mode
adds a column "x ref" = this row's median msgs/s divided by the ref peer's for
the same op and payload size.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import OrderedDict


def fmt(x, nd=3):
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{nd}g}"


def load(paths):
    rows = []
    for p in paths:
        for line in open(p):
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            r["_file"] = p
            rows.append(r)
    return rows


def merge(rows):
    g = OrderedDict()
    for r in rows:
        if r.get("kind") == "meta" or "error" in r:
            continue
        g.setdefault(r["name"], []).append(r)
    out = []
    for name, rs in g.items():
        vals = [r["msgs_per_s"] for r in rs if r.get("msgs_per_s")]
        m = dict(rs[0])
        if vals:
            med = statistics.median(vals)
            m["msgs_per_s"] = med
            m["_min"], m["_max"], m["_k"] = min(vals), max(vals), len(vals)
            pl = m.get("payload_bytes")
            if pl and m.get("MB_per_s") is not None:
                m["MB_per_s"] = med * pl / 1e6
            for k in ("p50_us", "p99_us"):
                xs = [r[k] for r in rs if r.get(k) is not None]
                m[k] = statistics.median(xs) if xs else None
        out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ref", default="", help="peer:mode to compute ratios against")
    ap.add_argument("--settings", action="store_true", help="include full settings column")
    a = ap.parse_args()
    rows = merge(load(a.files))
    errs = [r for r in load(a.files) if "error" in r]

    peers = [r for r in rows if r.get("bench") == "peers"]
    phys = [r for r in rows if r.get("bench") not in (None, "peers")]  # physical, mqlite, ...
    ref = {}
    if a.ref:
        rp, rm = a.ref.split(":")
        for r in peers:
            if r["peer"] == rp and r["mode"] == rm:
                ref[(r["op"], r["payload_bytes"])] = r["msgs_per_s"]

    if peers:
        print("| peer | mode | op | payload B | N | msgs/s (median) | min..max (k) | MB/s | p50 us | p99 us |"
              + (" x ref |" if ref else "") + (" settings |" if a.settings else ""))
        print("|---|---|---|---:|---:|---:|---|---:|---:|---:|" + ("---:|" if ref else "") + ("---|" if a.settings else ""))
        for r in peers:
            rng = f"{fmt(r.get('_min'))}..{fmt(r.get('_max'))} ({r.get('_k')})" if r.get("_k", 1) > 1 else ""
            lat_note = " /batch" if r.get("latency_unit") else ""
            line = (f"| {r['peer']} | {r['mode']} | {r['op']} | {r['payload_bytes']} | {r.get('n')} | "
                    f"{fmt(r.get('msgs_per_s'))} | {rng} | {fmt(r.get('MB_per_s'))} | "
                    f"{fmt(r.get('p50_us'))}{lat_note} | {fmt(r.get('p99_us'))}{lat_note} |")
            if ref:
                rv = ref.get((r["op"], r["payload_bytes"]))
                line += f" {fmt(r['msgs_per_s'] / rv) if rv else ''} |"
            if a.settings:
                line += f" {r.get('settings', '')} |"
            print(line)
        print()
    if phys:
        print("| measurement | ops/s (median) | min..max | MB/s | p50 us | p99 us | settings |")
        print("|---|---:|---|---:|---:|---:|---|")
        for r in phys:
            rng = ""
            if r.get("rate_min"):
                rng = f"{fmt(r['rate_min'])}..{fmt(r['rate_max'])}"
            elif r.get("_k", 1) > 1:
                rng = f"{fmt(r['_min'])}..{fmt(r['_max'])} ({r['_k']})"
            print(f"| {r['name']} | {fmt(r.get('msgs_per_s'))} | {rng} | {fmt(r.get('MB_per_s'))} | "
                  f"{fmt(r.get('p50_us'))} | {fmt(r.get('p99_us'))} | {r.get('settings', '')} |")
        print()
    for e in errs:
        print(f"- ERROR {e['name']}: {e['error']}", file=sys.stderr)


if __name__ == "__main__":
    main()
