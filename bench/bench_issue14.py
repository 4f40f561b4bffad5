#!/usr/bin/env python3
"""Issue 14's table in one run: every row beside its reference, interleaved round by round.

100 B bodies. Each round measures every picked row once (the order flips every round, so drift on a
shared machine hits the rows alike); the report takes, per row, the median msgs/s and CPU us a message
over the rounds, and the median (min-max) of its SAME-ROUND ratio to its reference row.

  rows (reference of the ratio in brackets)
  proto_put        `CommitLogProto(fmt="full").put` of the prototype (proto_mqlite.py)
  proto_batch      `CommitLogProto(fmt="full").put_batch` of 1000
  send             `Producer.send`, one thread, ASYNC_FLUSH, index on (bench_producer.send)      [proto_put]
  batch            `Producer.send_batch(1000)`, ASYNC_FLUSH (bench_producer.batch)             [proto_batch]
  poll             `LitePullConsumer.poll` draining a backlog, pull_batch_size 32              [proto_put]
  push_{def,1,4}_lock / push_{def,1,4}_free
                   `PushConsumer` draining a backlog at its default thread count, 1 and 4
                   threads; listener `lock` counts under a threading.Lock (the table's rows,
                   as in the issue's measurements), `free` counts lock-free               [proto_put]
  floor_append     os.write of one record-sized buffer (the size of the SYNC send's record) to
                   a fresh O_APPEND file (it grows) + os.fdatasync, one thread
  floor_mmap       the same buffer stored into an mmap of a posix_fallocate'd file at the next
                   offset + os.fdatasync of the file (how the commit log writes), one thread
  sync1            `Producer.send`, SYNC_FLUSH, one thread       [floor_append and floor_mmap]
  sync4 / sync32   `Producer.send`, SYNC_FLUSH, 4 / 32 threads on one Producer, barrier start  [sync1]
  async1000        SYNC_FLUSH `Producer.send_async` from one thread, at most 1000 futures
                   outstanding (wait for the oldest when full), then wait for all            [sync1]
  aio1000          the same through `mqlite.aio.Producer.send_async` on an asyncio loop      [sync1]
  pq_sqlite        persist-queue `SQLiteQueue(path, auto_commit=True)` puts (library defaults:
                   WAL, synchronous FULL), needs the bench venv               [floor_append]
  pq_file          persist-queue `Queue(path)` puts (pickle + flush, no fsync per put)

msgs/s is wall clock over the measured span; CPU us a message is `time.process_time()` over the
same span (every thread of the process: the reput thread, consumers' pull and consume threads, the
flush service). ASYNC and consumer rows have fixed counts; SYNC and persist-queue rows stop at
their count or after --sync-seconds, whichever comes first (the rate is over what was done).

  PY=../.venv-bench/bin/python     # or /work/main/.venv/bin/python (persist-queue rows skip)
  PYTHONPATH=/path/to/src $PY bench_issue14.py [--rounds 5] [--scale 0.1] [--only send,sync1,...]
  python3 bench_issue14.py --report results/scratch/issue14-<stamp>.jsonl   # the markdown again

Output: one JSON line per row and round (benchlib's format plus `row`, `cpu_us_per_msg`, `tree`)
appended to --out (default results/scratch/issue14-<stamp>.jsonl), then the markdown report of the
file's rows. Rows of several runs in one file are grouped by the source tree measured (mqlite's
version, git commit and src path), so rounds run alternately on two trees (PYTHONPATH) into one file
give a before/after table as well.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

perf = time.perf_counter
cpu = time.process_time
BODY = b"x" * 100
TOPIC = "BenchTopic"
RowRun = Callable[[str, int, argparse.Namespace], dict]  # (scratch dir, count, options) -> measurement


# --------------------------------------------------------------------------- what each row is
class Row:
    """One row: its default count, what it runs, and the rows its ratio is taken against."""

    def __init__(self, name: str, n: int, run: RowRun, refs: tuple[str, ...] = (), goal: str = "", label: str = "",
                 minimum: int = 1) -> None:
        self.name, self.n, self.run, self.refs = name, n, run, refs
        self.goal, self.label, self.minimum = goal, label or name, minimum


def _timed(n: int, body: Callable[[], Any]) -> dict:
    """Run body() once under the wall and CPU clocks; it returns how many messages it did (or None: n)."""
    t0, c0 = perf(), cpu()
    done = body()
    elapsed, used = perf() - t0, cpu() - c0
    done = n if done is None else done
    return {"n": done, "seconds": elapsed, "msgs_per_s": done / elapsed, "cpu_us_per_msg": used / done * 1e6}


# ---------------------------------------------------------------- prototype (the reference of the fast rows)
def proto_put(root: str, n: int, args: argparse.Namespace) -> dict:
    import proto_mqlite
    cl = proto_mqlite.CommitLogProto(root, fmt="full")
    put = cl.put

    def body() -> None:
        for _ in range(n):
            put(BODY)
    try:
        return _timed(n, body)
    finally:
        cl.close()


def proto_batch(root: str, n: int, args: argparse.Namespace) -> dict:
    import proto_mqlite
    cl = proto_mqlite.CommitLogProto(root, fmt="full")
    bodies = [BODY] * 1000
    put_batch = cl.put_batch

    def body() -> None:
        for _ in range(n // 1000):
            put_batch(bodies)
    try:
        return _timed(n // 1000 * 1000, body)
    finally:
        cl.close()


# ---------------------------------------------------------------- ASYNC producer and consumer rows (others' loops)
def send(root: str, n: int, args: argparse.Namespace) -> dict:
    import bench_producer
    return _rate_cpu(n, bench_producer.send(root, n))


def batch(root: str, n: int, args: argparse.Namespace) -> dict:
    import bench_producer
    return _rate_cpu(n // 1000 * 1000, bench_producer.batch(root, n))


def _rate_cpu(n: int, rate_cpu: tuple[float, float]) -> dict:
    rate, cpu_us = rate_cpu
    return {"n": n, "seconds": n / rate, "msgs_per_s": rate, "cpu_us_per_msg": cpu_us}


def _backlog(root: str, n: int) -> Any:
    """An ASYNC_FLUSH broker holding n messages of 100 B on topic T (4 queues), dispatched."""
    import bench_consumer
    import mqlite
    broker = mqlite.open(root, **bench_consumer.SETTINGS)
    bench_consumer.fill(broker, "T", n)
    return broker


def poll(root: str, n: int, args: argparse.Namespace) -> dict:
    import bench_consumer
    with _backlog(root, n) as broker:
        return _rate_cpu(n, bench_consumer.drain_poll(broker, "T", n))


def push(threads: int | None, listener: str) -> RowRun:
    def run(root: str, n: int, args: argparse.Namespace) -> dict:
        import bench_consumer
        with _backlog(root, n) as broker:
            rate, cpu_us, used = bench_consumer.drain_push(broker, "T", n, threads, listener=listener)
        return dict(_rate_cpu(n, (rate, cpu_us)), threads=used, listener=listener)
    return run


# ---------------------------------------------------------------- durable floors
RECORD_SIZE: list[int] = []


def record_size(root: str) -> int:
    """Bytes of the commit-log record of one SYNC send of a 100 B body (from two sends' offset ids)."""
    if not RECORD_SIZE:
        import mqlite
        with mqlite.open(root, flush_disk_type="ASYNC_FLUSH") as broker, \
                mqlite.Producer(broker, group="bench") as producer:
            first, second = (producer.send(mqlite.Message(TOPIC, BODY), queue=mqlite.MessageQueue(
                TOPIC, broker.broker_name, 0)) for _ in range(2))
            RECORD_SIZE.append(int(second.offset_msg_id[-16:], 16) - int(first.offset_msg_id[-16:], 16))
        shutil.rmtree(root, ignore_errors=True)
    return RECORD_SIZE[0]


def _until(n: int, seconds: float, step: Callable[[], None]) -> int:
    """Call step() n times or until `seconds` have passed; return how many calls were made."""
    deadline = perf() + seconds
    for i in range(n):
        step()
        if perf() > deadline:
            return i + 1
    return n


def _floor(n: int, args: argparse.Namespace, size: int, step: Callable[[], None]) -> dict:
    """Time up to n durable writes of one record (the first one, which allocates, outside the clock)."""
    step()
    return dict(_timed(n, lambda: _until(n, args.sync_seconds, step)), record_bytes=size)


def floor_append(root: str, n: int, args: argparse.Namespace) -> dict:
    os.makedirs(root, exist_ok=True)
    size = record_size(root + "-size")
    buf = b"y" * size
    fd = os.open(os.path.join(root, "append.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    write, fdatasync = os.write, os.fdatasync

    def step() -> None:
        write(fd, buf)
        fdatasync(fd)
    try:
        return _floor(n, args, size, step)
    finally:
        os.close(fd)


def floor_mmap(root: str, n: int, args: argparse.Namespace) -> dict:
    os.makedirs(root, exist_ok=True)
    size = record_size(root + "-size")
    buf = b"y" * size
    length = -(-(n + 1) * size // mmap.PAGESIZE) * mmap.PAGESIZE
    fd = os.open(os.path.join(root, "mapped.bin"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, length)
    mm = mmap.mmap(fd, length)
    fdatasync = os.fdatasync
    position = [0]

    def step() -> None:
        at = position[0]
        mm[at:at + size] = buf
        position[0] = at + size
        fdatasync(fd)
    try:
        return _floor(n, args, size, step)
    finally:
        mm.close()
        os.close(fd)


# ---------------------------------------------------------------- SYNC_FLUSH producer rows
class _SyncBroker:
    """A fresh SYNC_FLUSH broker and Producer, topic created by one send outside the clock; counts
    fdatasync calls and sends that did not come back SEND_OK."""

    def __init__(self, root: str) -> None:
        import bench_mqlite
        import mqlite
        self.mqlite = mqlite
        self.broker = mqlite.open(root, flush_disk_type="SYNC_FLUSH")
        self.producer = mqlite.Producer(self.broker, group="bench")
        self.producer.start()
        self.producer.send(mqlite.Message(TOPIC, BODY))
        self.not_ok: collections.Counter[str] = collections.Counter()
        self.syncs = bench_mqlite.SyncCounter()

    def check(self, result: Any) -> None:
        if result.send_status.name != "SEND_OK":
            self.not_ok[result.send_status.name] += 1

    def measure(self, n: int, body: Callable[[], int | None]) -> dict:
        with self.syncs:
            row = _timed(n, body)
        row["fdatasync_calls"] = self.syncs.n
        if self.syncs.n:
            row["mean_group"] = row["n"] / self.syncs.n
        if self.not_ok:
            row["not_send_ok"] = dict(self.not_ok)
        return row

    def close(self) -> None:
        self.producer.shutdown()
        self.broker.close()


def sync_threads(threads: int) -> RowRun:
    def run(root: str, n: int, args: argparse.Namespace) -> dict:
        sb = _SyncBroker(root)
        per = max(1, n // threads)
        start = threading.Barrier(threads + 1)
        counts = [0] * threads
        errors: list[str] = []
        send, message, check = sb.producer.send, sb.mqlite.Message, sb.check

        def worker(t: int) -> None:
            try:
                start.wait()
                counts[t] = _until(per, args.sync_seconds, lambda: check(send(message(TOPIC, BODY))))
            except Exception as exc:  # reported in the row, the run goes on
                errors.append(repr(exc))

        workers = [threading.Thread(target=worker, args=(t,), name=f"bench-sync-{t}") for t in range(threads)]
        for thread in workers:
            thread.start()

        def body() -> int:
            start.wait()
            for thread in workers:
                thread.join()
            return sum(counts)
        try:
            row = sb.measure(per * threads, body)
        finally:
            sb.close()
        row["threads"] = threads
        if errors:
            row["errors"] = errors[:3]
        return row
    return run


def async1000(root: str, n: int, args: argparse.Namespace) -> dict:
    sb = _SyncBroker(root)
    send_async, message, check = sb.producer.send_async, sb.mqlite.Message, sb.check
    inflight = args.inflight

    pending: collections.deque[Any] = collections.deque()

    def step() -> None:
        if len(pending) >= inflight:
            check(pending.popleft().result())
        pending.append(send_async(message(TOPIC, BODY)))

    def body() -> int:
        sent = _until(n, args.sync_seconds, step)
        for future in pending:
            check(future.result())
        return sent
    try:
        return dict(sb.measure(n, body), inflight=inflight)
    finally:
        sb.close()


def aio1000(root: str, n: int, args: argparse.Namespace) -> dict:
    import mqlite.aio
    sb = _SyncBroker(root)
    message, check, inflight = sb.mqlite.Message, sb.check, args.inflight
    loop = asyncio.new_event_loop()
    producer = mqlite.aio.Producer(sb.broker, "bench-aio")

    async def body() -> int:
        deadline = perf() + args.sync_seconds
        pending: collections.deque[Any] = collections.deque()
        sent = 0
        while sent < n and perf() <= deadline:
            if len(pending) >= inflight:
                check(await pending.popleft())
            pending.append(producer.send_async(message(TOPIC, BODY)))
            sent += 1
        for future in pending:
            check(await future)
        return sent
    try:
        loop.run_until_complete(producer.start())  # its send pool's first thread, outside the clock
        check(loop.run_until_complete(producer.send(message(TOPIC, BODY))))
        return dict(sb.measure(n, lambda: loop.run_until_complete(body())), inflight=inflight)
    finally:
        loop.run_until_complete(producer.shutdown())
        loop.close()
        sb.close()


# ---------------------------------------------------------------- persist-queue (bench_peers' adapters)
class Skip(Exception):
    """The row cannot run here (a module is missing); the reason goes into the output."""


def persist_queue(adapter: str) -> RowRun:
    def run(root: str, n: int, args: argparse.Namespace) -> dict:
        try:
            import persistqueue  # noqa: F401
        except ImportError:
            raise Skip("persist-queue is not installed in this interpreter: use the bench venv "
                       "(bench/README.md, Setup)") from None
        import benchlib
        import bench_peers
        os.makedirs(root, exist_ok=True)
        handle = bench_peers.PEERS[adapter]["fn"](root, "default")
        items = benchlib.payload_pool(100)
        put = handle.put
        try:
            put(items[0])  # create the table / first chunk outside the clock
            index = iter(range(1, n + 1))
            row = _timed(n, lambda: _until(n, args.sync_seconds, lambda: put(items[next(index) & 255])))
        finally:
            handle.close()
        return dict(row, settings=handle.settings)
    return run


# ---------------------------------------------------------------- the table
ROWS = [
    Row("proto_put", 200_000, proto_put, label="proto put"),
    Row("proto_batch", 400_000, proto_batch, label="proto put_batch(1000)", minimum=1000),
    Row("send", 100_000, send, ("proto_put",), ">= 0.30x", "`Producer.send`, one thread, ASYNC_FLUSH"),
    Row("batch", 400_000, batch, ("proto_batch",), ">= 0.60x", "`Producer.send_batch(1000)`", minimum=1000),
    Row("poll", 200_000, poll, ("proto_put",), ">= 0.80x", "`LitePullConsumer.poll` draining a backlog"),
    Row("push_def_lock", 200_000, push(None, "lock"), ("proto_put",), ">= 0.40x",
        "`PushConsumer` draining, default threads (Lock listener)"),
    Row("push1_lock", 200_000, push(1, "lock"), ("proto_put",), "", "`PushConsumer`, 1 thread (Lock listener)"),
    Row("push4_lock", 200_000, push(4, "lock"), ("proto_put", "push1_lock"), "4 threads >= 1.0x 1 thread",
        "`PushConsumer`, 4 threads (Lock listener)"),
    Row("push_def_free", 200_000, push(None, "free"), ("proto_put",), "",
        "`PushConsumer` draining, default threads (lock-free listener)"),
    Row("push1_free", 200_000, push(1, "free"), ("proto_put",), "", "`PushConsumer`, 1 thread (lock-free listener)"),
    Row("push4_free", 200_000, push(4, "free"), ("proto_put", "push1_free"), "",
        "`PushConsumer`, 4 threads (lock-free listener)"),
    Row("floor_append", 10_000, floor_append, label="floor: write(O_APPEND) + fdatasync"),
    Row("floor_mmap", 10_000, floor_mmap, label="floor: mmap store (fallocated) + fdatasync"),
    Row("sync1", 10_000, sync_threads(1), ("floor_append", "floor_mmap"), ">= 0.95x write+fdatasync",
        "SYNC_FLUSH send, one thread"),
    Row("sync4", 20_000, sync_threads(4), ("sync1",), "", "SYNC_FLUSH send, 4 threads"),
    Row("sync32", 32_000, sync_threads(32), ("sync1",), ">= 5x one thread", "SYNC_FLUSH send, 32 threads"),
    Row("async1000", 50_000, async1000, ("sync1",), ">= 10x", "SYNC_FLUSH `send_async`, one thread, <= 1000 in flight",
        minimum=2000),
    Row("aio1000", 50_000, aio1000, ("sync1",), ">= 10x", "SYNC_FLUSH `mqlite.aio` send_async, <= 1000 in flight",
        minimum=2000),
    Row("pq_sqlite", 10_000, persist_queue("persistqueue.SQLiteQueue"), ("floor_append",), "",
        "persist-queue `SQLiteQueue` put (WAL, synchronous FULL)"),
    Row("pq_file", 20_000, persist_queue("persistqueue.Queue"), (), "",
        "persist-queue `Queue` put (pickle + flush + info file rename; fsync per 100-item chunk)"),
]
BY_NAME = {row.name: row for row in ROWS}
NOTES = ("""100 B bodies. msgs/s: wall clock over the measured span; CPU us/msg: `time.process_time()` over the """
         """same span (user + system time of every thread of the process, so the reput, pull, consume and flush """
         """threads count, and so does the kernel's time inside fdatasync). Ratio: the row's msgs/s over its """
         """reference's msgs/s measured in the same round; median over the rounds (min-max). The push rows the """
         """issue's table means are the Lock-listener ones (a `threading.Lock` per call, as in bench_consumer and """
         """the issue's own numbers); the lock-free rows show what the consumer does without that lock. """
         """`fdatasync group`: messages per os.fdatasync call (os.fdatasync wrapped during the row).""")
# Same-round ratios the report adds beside the rows' own: mqlite against persist-queue.
EXTRA_RATIOS = (("send", "pq_sqlite"), ("sync1", "pq_sqlite"), ("send", "pq_file"))


# ---------------------------------------------------------------- settings of the run
def mount_of(path: str) -> str:
    """'fstype device (mount point, options)' of the filesystem holding path (longest /proc/mounts prefix)."""
    real, best = os.path.realpath(path), None
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                device, point, fstype, options = line.split()[:4]
                if (real == point or real.startswith(point.rstrip("/") + "/")) and (
                        best is None or len(point) > len(best[1])):
                    best = (device, point, fstype, options)
    except OSError:
        return "unknown filesystem"
    if best is None:
        return "unknown filesystem"
    device, point, fstype, options = best
    return f"{fstype} on {device} (mounted at {point}, {options})"


def tree() -> str:
    """mqlite's version, the git commit of the tree it was imported from, and that tree's src path."""
    import bench_peers
    import mqlite
    return f"mqlite {bench_peers.mqlite_version()} from {os.path.dirname(os.path.dirname(mqlite.__file__))}"


# ---------------------------------------------------------------- run
def default_out() -> str:
    import benchlib
    return os.path.join(HERE, "results", "scratch", f"issue14-{benchlib.RUN_ID}.jsonl")


def run(args: argparse.Namespace, names: list[str]) -> str:
    import benchlib
    scratch = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="mqlite-bench-issue14-"))
    os.makedirs(scratch, exist_ok=True)
    out = args.out or default_out()
    benchlib.open_out(out)
    measured = tree()
    settings = (f"{measured}; python {sys.version.split()[0]} ({sys.executable}); scratch {scratch}: "
                f"{mount_of(scratch)}; rounds {args.rounds}, scale {args.scale}, --sync-seconds {args.sync_seconds}")
    print(f"# settings: {settings}", file=sys.stderr, flush=True)
    benchlib.meta("issue14", tree=measured, settings=settings, scratch=scratch, filesystem=mount_of(scratch),
                  argv=sys.argv[1:])
    try:
        for rnd in range(args.round_offset, args.round_offset + args.rounds):
            order = names if rnd % 2 == 0 else names[::-1]
            load = os.getloadavg()[0]
            for name in order:
                row = BY_NAME[name]
                n = max(row.minimum, int(row.n * args.scale))
                root = os.path.join(scratch, f"{name}-{rnd}")
                benchlib.quiesce()
                record: dict[str, Any] = {"name": f"issue14.{name}", "bench": "issue14", "row": name, "round": rnd,
                          "payload_bytes": len(BODY), "tree": measured}
                try:
                    result = row.run(root, n, args)
                    result.setdefault("settings", row.label)
                    record.update(result)
                    record["MB_per_s"] = record["msgs_per_s"] * len(BODY) / 1e6
                except Skip as skip:
                    record["skipped"] = str(skip)
                except Exception as exc:  # one failing row does not end the run: the report names it
                    traceback.print_exc()
                    record["error"] = repr(exc)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                    shutil.rmtree(root + "-size", ignore_errors=True)
                benchlib.emit(record)
            benchlib.emit({"name": "issue14.round", "bench": "issue14", "kind": "meta", "round": rnd,
                           "tree": measured, "loadavg_before": load, "loadavg_after": os.getloadavg()[0]})
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    return out


# ---------------------------------------------------------------- report
def _rate(value: float) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.1f}k" if value >= 1e3 else f"{value:.0f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}"


def _times(value: float) -> str:
    return f"{value:.1f}"


def _median_range(values: list[float], fmt: Callable[[float], str], unit: str = "") -> str:
    """'median<unit> (min-max)', or the value alone for one round."""
    median = statistics.median(values)
    if len(values) == 1:
        return fmt(median) + unit
    return f"{fmt(median)}{unit} ({fmt(min(values))}-{fmt(max(values))})"


def load(paths: Iterable[str]) -> tuple[dict[str, dict[str, dict[tuple[str, int], dict]]], dict[str, list[dict]]]:
    """{tree: {row: {(run_id, round): record}}} and {tree: [meta records]} from JSON-line files."""
    rows: dict[str, dict[str, dict[tuple[str, int], dict]]] = {}
    metas: dict[str, list[dict]] = {}
    for path in paths:
        with open(path) as lines:
            for line in lines:
                if not line.startswith("{"):
                    continue
                record = json.loads(line)
                if record.get("bench") != "issue14":
                    continue
                if record.get("kind") == "meta":
                    metas.setdefault(record.get("tree", "?"), []).append(record)
                elif "row" in record:
                    rows.setdefault(record["tree"], {}).setdefault(record["row"], {})[
                        (record["run_id"], record["round"])] = record
    return rows, metas


def ratios(by_row: dict[str, dict[tuple[str, int], dict]], num: str, den: str) -> list[float]:
    """num's msgs/s over den's, one per round both ran in (skipped rows have none)."""
    a, b = by_row.get(num, {}), by_row.get(den, {})
    return [a[k]["msgs_per_s"] / b[k]["msgs_per_s"] for k in a
            if k in b and a[k].get("msgs_per_s") and b[k].get("msgs_per_s")]


def report(paths: list[str]) -> str:
    rows, metas = load(paths)
    out: list[str] = []
    for measured, by_row in rows.items():
        settings = [m for m in metas.get(measured, []) if "settings" in m]
        loads = [m for m in metas.get(measured, []) if "loadavg_before" in m]
        rounds = sorted({key for recs in by_row.values() for key in recs})
        out.append(f"**{measured}**, {len(rounds)} round(s)")
        if settings:
            out.append(f"settings: {settings[-1]['settings']}; host {settings[-1].get('host')}, "
                       f"{settings[-1].get('ncpu')} CPUs ({settings[-1].get('cpu')})")
        if loads:
            out.append("load average (1 min) before/after each round: " +
                       ", ".join(f"{m['loadavg_before']:.2f}/{m['loadavg_after']:.2f}" for m in loads))
        out.append("")
        out.append("| row | msgs/s, median (min-max) | CPU us/msg | same-round ratio, median (min-max) | goal |")
        out.append("|---|---|---|---|---|")
        for row in ROWS:
            recs = by_row.get(row.name)
            if not recs:
                continue
            done = [r for r in recs.values() if r.get("msgs_per_s")]
            if not done:
                first = next(iter(recs.values()))
                reason = f"skipped: {first['skipped']}" if "skipped" in first else f"failed: {first.get('error')}"
                out.append(f"| {row.label} | {reason} | | | {row.goal} |")
                continue
            rate = _median_range([r["msgs_per_s"] for r in done], _rate)
            cpu_us = statistics.median(r["cpu_us_per_msg"] for r in done)
            cells = []
            for ref in row.refs:
                values = ratios(by_row, row.name, ref)
                if values:
                    cells.append(f"{_median_range(values, _ratio, 'x')} {BY_NAME[ref].label}")
            extra = ""
            groups = [r["mean_group"] for r in done if r.get("mean_group")]
            if groups:
                extra = f" (fdatasync group {statistics.median(groups):.1f})"
            bad = [r["not_send_ok"] for r in done if r.get("not_send_ok")] + [r["errors"] for r in done
                                                                                if r.get("errors")]
            if bad:
                extra += f" **not ok: {bad[0]}**"
            out.append(f"| {row.label}{extra} | {rate} | {cpu_us:.2f} | {'; '.join(cells)} | {row.goal} |")
        extras = [(num, den, ratios(by_row, num, den)) for num, den in EXTRA_RATIOS]
        extras = [(num, den, values) for num, den, values in extras if values]
        if extras:
            out.append("")
            out.append("mqlite against persist-queue, same-round ratios: " + "; ".join(
                f"{BY_NAME[num].label} / {BY_NAME[den].label} = {_median_range(values, _times, 'x')}"
                for num, den, values in extras))
        sizes = {r["record_bytes"] for recs in by_row.values() for r in recs.values() if r.get("record_bytes")}
        if sizes:
            out.append(f"Floors write {'/'.join(map(str, sorted(sizes)))} B a record: the commit-log record of "
                       "one SYNC send of a 100 B body.")
        out.append("")
    out.append(NOTES)
    out.append("")
    if len(rows) == 2:
        out.extend(_before_after(rows))
    return "\n".join(out)


def _before_after(rows: dict[str, dict[str, dict[tuple[str, int], dict]]]) -> list[str]:
    """Two trees in one file: medians side by side (the rounds of each tree; run them alternately)."""
    (tree_a, a), (tree_b, b) = rows.items()
    out = [f"Before/after (medians over each tree's rounds): A = {tree_a}; B = {tree_b}", "",
           "| row | A msgs/s | B msgs/s | B/A | A CPU us/msg | B CPU us/msg | ratio to reference, A -> B |",
           "|---|---|---|---|---|---|---|"]
    for row in ROWS:
        ra = [r for r in a.get(row.name, {}).values() if r.get("msgs_per_s")]
        rb = [r for r in b.get(row.name, {}).values() if r.get("msgs_per_s")]
        if not ra or not rb:
            continue
        ma, mb = (statistics.median(r["msgs_per_s"] for r in rs) for rs in (ra, rb))
        ca, cb = (statistics.median(r["cpu_us_per_msg"] for r in rs) for rs in (ra, rb))
        refs = [(ref, ratios(a, row.name, ref), ratios(b, row.name, ref)) for ref in row.refs]
        moved = "; ".join(f"{statistics.median(va):.2f}x -> {statistics.median(vb):.2f}x {BY_NAME[ref].label}"
                          for ref, va, vb in refs if va and vb)
        out.append(f"| {row.label} | {_rate(ma)} | {_rate(mb)} | {mb / ma:.2f} | {ca:.2f} | {cb:.2f} | {moved} |")
    return out + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (every row once a round)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row's count (0.1: a quick check)")
    parser.add_argument("--only", default="", help="comma list of rows (default all): " + ",".join(BY_NAME))
    parser.add_argument("--sync-seconds", type=float, default=5.0,
                        help="a SYNC or persist-queue row stops after this many seconds even short of its count")
    parser.add_argument("--inflight", type=int, default=1000, help="futures outstanding in async1000 / aio1000")
    parser.add_argument("--dir", default="", help="scratch directory (default: a new one under the system tmp, "
                        "removed at the end)")
    parser.add_argument("--out", default="",
                        help="JSON lines appended here (default results/scratch/issue14-<stamp>.jsonl)")
    parser.add_argument("--report", nargs="+", metavar="FILE", help="only print the markdown report of these files")
    parser.add_argument("--trees", default="", metavar="SRC,SRC",
                        help="before/after: run every round once per source tree (a src directory each, put on "
                        "PYTHONPATH of a child process), alternating, into one --out file; then report both")
    parser.add_argument("--round-offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.report:
        print(report(args.report))
        return
    names = [name for name in args.only.split(",") if name] or list(BY_NAME)
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown row(s) {', '.join(unknown)}; rows are {', '.join(BY_NAME)}")
    out = run_trees(args, args.trees.split(",")) if args.trees else run(args, names)
    if not args.no_report:
        print(f"\nJSON lines in {out}; the report again: python3 {sys.argv[0]} --report {out}\n")
        print(report([out]))


def run_trees(args: argparse.Namespace, trees: list[str]) -> str:
    """Each round once per source tree (PYTHONPATH=tree, a child process each), the order flipped every round."""
    import subprocess
    out = os.path.abspath(args.out or default_out())
    passed = ["--scale", str(args.scale), "--sync-seconds", str(args.sync_seconds), "--inflight", str(args.inflight),
              "--out", out, "--rounds", "1", "--no-report"] + (["--only", args.only] if args.only else []) + (
              ["--dir", args.dir] if args.dir else [])
    for rnd in range(args.rounds):
        for src in trees if rnd % 2 == 0 else trees[::-1]:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
            subprocess.run([sys.executable, os.path.abspath(__file__), *passed, "--round-offset", str(rnd)],
                           env=env, check=True, stdout=subprocess.DEVNULL)
    return out


if __name__ == "__main__":
    main()
