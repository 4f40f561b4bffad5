#!/usr/bin/env python3
"""Check mqlite against its performance targets (RESULTS.md section 7) from JSONL files
written in one session by bench_peers.py (interleaved rounds) and bench_mqlite.py.

  python3 targets.py results/scratch/<stamp>/peers.jsonl results/scratch/<stamp>/mqlite.jsonl

Ratios are the median over rounds of the same-round ratio (rows are paired by
run_id and round), which cancels most of the drift of this shared VM; the
"medians" column gives both sides' medians over rounds.  Prints a markdown table.
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def load(paths):
    rows = []
    for p in paths:
        for line in open(p):
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("kind") != "meta" and "error" not in r and r.get("msgs_per_s"):
                    rows.append(r)
    return rows


ROWS = []
BY = defaultdict(list)


def vals(name, key="msgs_per_s"):
    return [r[key] for r in BY.get(name, []) if r.get(key) is not None]


def med(name, key="msgs_per_s"):
    v = vals(name, key)
    return statistics.median(v) if v else None


def ratio(a, b):
    """Median over rounds of a/b, pairing rows by (run_id, round); falls back to median(a)/median(b)."""
    ra = {(r.get("run_id"), r.get("round")): r["msgs_per_s"] for r in BY.get(a, [])}
    rb = {(r.get("run_id"), r.get("round")): r["msgs_per_s"] for r in BY.get(b, [])}
    pairs = [ra[k] / rb[k] for k in ra if k in rb and rb[k]]
    if pairs:
        return statistics.median(pairs), pairs
    ma, mb = med(a), med(b)
    return (ma / mb if ma and mb else None), []


def f(x, nd=3):
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{nd}g}"


def line(target_id, what, value, target, ok, detail):
    verdict = "n/a" if ok is None else ("PASS" if ok else "**FAIL**")
    print(f"| {target_id} | {what} | {value} | {target} | {verdict} | {detail} |")


def ratio_row(tid, what, a, b, need, extra=""):
    r, pairs = ratio(a, b)
    rng = f" (rounds {min(pairs):.2f}..{max(pairs):.2f})" if len(pairs) > 1 else ""
    line(tid, what, f"{f(r)}x{rng}" if r is not None else "n/a", f">= {need}x", None if r is None else r >= need,
         f"{f(med(a))} vs {f(med(b))} msgs/s{extra}")


def peer(p, mode, op, size=100):
    return f"peers.{p}.{mode}.{op}.{size}B"


def main():
    for r in load(sys.argv[1:]):
        BY[r["name"]].append(r)
    print("| # | metric (100 B unless noted) | measured | target | verdict | medians / notes |")
    print("|---|---|---:|---|---|---|")
    # T1 async put
    ratio_row("T1", "async put, 1 msg: mqlite vs proto put", peer("mqlite", "async", "enqueue"),
              peer("proto", "async", "enqueue"), 0.6)
    m = med(peer("mqlite", "async", "enqueue"))
    line("T1", "async put, absolute", f"{f(m)} msgs/s", ">= 265k msgs/s (anchor-day number)",
         None if m is None else m >= 265_000, f"p99 {f(med(peer('mqlite', 'async', 'enqueue'), 'p99_us'))} us "
         "(target p99 <= 10 us)")
    for other, mode in (("persistqueue.SQLiteQueue", "normal"), ("litequeue", "default")):
        ratio_row("T1", f"async put vs {other}:{mode}", peer("mqlite", "async", "enqueue"),
                  peer(other, mode, "enqueue"), 10)
    # T3 batch put
    ratio_row("T3", "put_batch(1000) vs SQLite executemany(1000) WAL NORMAL",
              peer("mqlite-batch1000", "async", "enqueue"), peer("sqlite-batch1000", "default", "enqueue"), 1.5)
    ratio_row("T3", "put_batch(1000) vs proto put_batch(1000)", peer("mqlite-batch1000", "async", "enqueue"),
              peer("proto-batch1000", "async", "enqueue"), 0.7)
    # T4 / T5 get
    ratio_row("T4", "get+ack 1 msg (buffer of get_messages(32)) vs proto get", peer("mqlite", "async", "dequeue_ack"),
              peer("proto", "async", "dequeue_ack"), 0.6)
    ratio_row("T5", "get_messages(max 1000) batch read+ack vs SQLite offset-batch SELECT (peer harness)",
              peer("mqlite-batch1000", "async", "dequeue_ack"), peer("sqlite-batch1000", "default", "dequeue_ack"), 1.3)
    backlogs = sorted({r["backlog"] for r in ROWS_ALL() if r.get("op", "").startswith("get_cq_k")})
    for k, need_abs, proto_k, need_rel in ((32, 740_000, 1, 0.6), (1000, 1_500_000, 1000, 0.7)):
        rates = []
        for b in backlogs:
            name = f"mqlite.get_backlog.k{k}.backlog{b}.100B"
            m = med(name)
            rates.append(m)
            r, _ = ratio(name, f"mqlite.get_backlog.proto_k{proto_k}.backlog{b}.100B")
            line("T4" if k == 32 else "T5", f"get through CQ, get_messages(max {k}), backlog {b:,}",
                 f"{f(m)} rec/s", f">= {need_abs / 1000:,.0f}k rec/s; >= {need_rel}x proto", None if m is None
                 else (m >= need_abs), f"{f(r)}x proto {'get' if proto_k == 1 else 'get_batch(1000)'} same round")
        if rates and None not in rates:
            flat = rates[-1] / rates[0]
            line("T4" if k == 32 else "T5", f"flat with backlog (max {k}): rate at {backlogs[-1]:,} / at {backlogs[0]:,}",
                 f"{flat:.2f}", ">= 0.8 (backlog-independent)", flat >= 0.8, "")
    # T6 sync single
    ratio_row("T6", "SYNC_FLUSH single writer vs raw write+fdatasync (bench_mqlite, alternating)",
              "mqlite.sync_single.mqlite.100B", "mqlite.sync_single.raw_write_fdatasync.100B", 0.9,
              f"; p99 {f(med('mqlite.sync_single.mqlite.100B', 'p99_us'))} vs "
              f"{f(med('mqlite.sync_single.raw_write_fdatasync.100B', 'p99_us'))} us")
    ratio_row("T6", "SYNC_FLUSH single writer vs file-append:fdatasync (peer harness)",
              peer("mqlite", "sync", "enqueue"), peer("file-append", "fdatasync", "enqueue"), 0.9)
    ratio_row("T6", "SYNC_FLUSH single writer vs litequeue:full", peer("mqlite", "sync", "enqueue"),
              peer("litequeue", "full", "enqueue"), 1.1)
    # T7 group commit
    tn = sorted({r.get("threads") for r in ROWS_ALL() if r.get("op", "").startswith("put_sync_") and r.get("threads", 1) > 1})
    for t in tn:
        a, b = f"mqlite.sync_group.threads{t}.100B", "mqlite.sync_group.threads1.100B"
        g = med(a, "mean_group")
        ratio_row("T7", f"SYNC_FLUSH {t} writer threads vs 1 writer (group commit)", a, b, 15,
                  f"; mean group {f(g)} puts per fdatasync")
    # T8 sync batch
    ratio_row("T8", "SYNC_FLUSH put_batch(1000) vs SQLite FULL batch of 1000", peer("mqlite-batch1000", "sync", "enqueue"),
              peer("sqlite-batch1000", "full", "enqueue"), 1.2)
    # reopen / recovery
    for store in ("1GiB", "64MiB", "100B-1M"):
        for cache in ("warm", "cold"):
            name = f"mqlite.reopen.{store}.{cache}"
            v = vals(name, "open_s")
            if not v:
                continue
            m = statistics.median(v)
            mb = statistics.median(vals(name, "commitlog_bytes")) / 2**20
            kind = "100 B" if store.startswith("100B") else "1 KiB"
            line("reopen", f"clean reopen, {store} store ({mb:,.0f} MiB of {kind} records), {cache} cache",
                 f"{m:.3f} s", "< 0.5 s", m < 0.5, f"rounds {min(v):.3f}..{max(v):.3f} s; "
                 f"{f(statistics.median(vals(name, 'records_scanned')))} records re-checked")
    for label in ("1KiB-1GiB", "100B-1M"):
        name = f"mqlite.recovery.{label}"
        if name in BY:
            line("recovery", f"abnormal reopen, {label} store: records re-scanned per second",
                 f"{f(med(name))} rec/s", "(report)", None,
                 f"{f(statistics.median(vals(name, 'records_scanned')))} records in "
                 f"{statistics.median(vals(name, 'open_s')):.2f} s")


def ROWS_ALL():
    return [r for rs in BY.values() for r in rs]


if __name__ == "__main__":
    main()
