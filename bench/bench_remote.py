#!/usr/bin/env python3
"""mqlite served over loopback (issue 12 "Performance"): its own remote client against `mqlite serve`.

    PYTHONPATH=src .venv/bin/python bench/bench_remote.py [--rounds 3] [--only send,send4,...] [--out FILE]

Every remote measurement starts a server as users start it, `python -m mqlite serve PATH --listen
127.0.0.1:0 --set flush_disk_type=ASYNC_FLUSH` (SYNC_FLUSH in the `*_sync` rows), other settings at their
defaults, on a fresh store, in a subprocess; this process (and, where a row says so, other client
processes) connect to the address it prints. The local rows run the same client code on an embedded
broker in this process (same settings), in the same round. 100 B bodies. Measurements are interleaved:
every round runs every variant once, in reverse order every other round, and the summary takes the
median over rounds of each rate and of each same-round remote/local ratio.

Variants (each a `local` and a `remote` row):

  send        `Producer.send(Message)` in a loop from one thread (sync send: one round trip each).
  send4       the same from 4 client processes together (remote; started on a signal, rate = all
              messages / (last end - first start)); local: 4 threads of this process, one producer each.
  send_sync   `send` with SYNC_FLUSH (a group commit per send).
  batch       `Producer.send_batch` of 1000 messages, one thread.
  drain       a `LitePullConsumer` (pull_batch_size 32, RocketMQ's in-memory transfer cap) draining a
              backlog of 200k messages written before the server started, from the first offset.
  lat_lite    delivery latency across processes: a producer process sends one message every 2 ms with
              `time.monotonic_ns()` in the body; this process waits in `LitePullConsumer.poll` (long
              poll over the connection) and takes now - stamp. The first 50 are warm-up. Local: the
              producer is a thread of this process.
  lat_push    the same with a `PushConsumer` listener.

CPU per message, in microseconds: of the server process (utime + stime from /proc/<pid>/stat around the
timed window) and of the client (this process's `time.process_time()`, every thread; the client processes'
own in `send4`); "(sys)" is the kernel's share of each.

Prints one JSON line per measurement (also appended to --out), then a table and one JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import mqlite
from mqlite.consumer import ConsumeFromWhere

BODY = b"x" * 100
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TICK = os.sysconf("SC_CLK_TCK")
WARMUP = 50  # latency samples dropped at the start (connections, rebalance, the first parked pull)
perf = time.perf_counter
cpu = time.process_time

# A sending client process of `send4`: connects, warms up, says "ready", waits for a line on stdin, sends,
# then prints its start, end (CLOCK_MONOTONIC is system-wide) and CPU seconds.
_SENDER = """
import os, sys, time, mqlite
address, n = sys.argv[1], int(sys.argv[2])
body = b"x" * 100
with mqlite.connect(address) as remote, mqlite.Producer(remote, group="pg") as producer:
    producer.send(mqlite.Message("s4", body))
    print("ready", flush=True)
    sys.stdin.readline()
    send, Message = producer.send, mqlite.Message
    t0, c0, k0 = time.monotonic(), time.process_time(), os.times().system
    for _ in range(n):
        send(Message("s4", body))
    print(t0, time.monotonic(), time.process_time() - c0, os.times().system - k0, flush=True)
"""

# The stamping producer process of the latency rows: one message every `gap` seconds.
_STAMPER = """
import sys, time, mqlite
address, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with mqlite.connect(address) as remote, mqlite.Producer(remote, group="lat-pg") as producer:
    for _ in range(n):
        producer.send(mqlite.Message("lat", b"%d" % time.monotonic_ns()))
        time.sleep(gap)
"""


def _env() -> dict[str, str]:
    """The environment of child processes: they import the same mqlite as this process."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(mqlite.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


def _proc_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user, system; every thread) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


class Server:
    """`python -m mqlite serve PATH --listen 127.0.0.1:0` in a subprocess, stopped with SIGTERM."""

    def __init__(self, path: str, flush: str, wrap: list[str] | None = None) -> None:
        cmd = [sys.executable, "-m", "mqlite", "serve", path, "--listen", "127.0.0.1:0",
               "--set", f"flush_disk_type={flush}"]
        self.proc = subprocess.Popen((wrap or []) + cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=_env(), text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # the address is the first line with a ":" (a wrapper may print a banner)
            if ":" in line and not line.startswith("py-spy>"):
                self.address = line.strip()
                break
        else:
            raise RuntimeError(f"mqlite serve exited with {self.proc.wait()} before printing its address")
        self.pid = self._server_pid() if wrap else self.proc.pid

    def _server_pid(self) -> int:
        """The python process under a wrapper (py-spy record -- python ...): the child of the wrapper."""
        for _ in range(100):
            for task in os.listdir(f"/proc/{self.proc.pid}/task"):
                with open(f"/proc/{self.proc.pid}/task/{task}/children") as f:
                    children = f.read().split()
                if children:
                    return int(children[0])
            time.sleep(0.05)
        raise RuntimeError(f"no child process under {self.proc.pid}")

    def cpu(self) -> tuple[float, float]:
        return _proc_cpu(self.pid)

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGTERM)
        self.proc.wait(60)


@contextmanager
def _store(flush: str, fill: int = 0) -> Iterator[str]:
    """A fresh store directory, holding `fill` messages on topic "d" (written locally, closed) if asked."""
    path = tempfile.mkdtemp(prefix="mqlite-bench-remote-")
    try:
        if fill:
            with mqlite.open(path, flush_disk_type=flush) as broker, \
                    mqlite.Producer(broker, group="fill") as producer:
                msgs = [mqlite.Message("d", BODY) for _ in range(1000)]
                for _ in range(fill // 1000):
                    producer.send_batch(msgs)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Target:
    """Where one measurement runs: an embedded broker here, or a served one (`open()` yields the server too)."""

    def __init__(self, remote: bool, flush: str, fill: int = 0, wrap: list[str] | None = None) -> None:
        self.remote, self.flush, self.fill, self.wrap = remote, flush, fill, wrap

    @contextmanager
    def open(self) -> Iterator[tuple[Any, Server | None]]:
        with _store(self.flush, self.fill) as path:
            if not self.remote:
                with mqlite.open(path, flush_disk_type=self.flush) as broker:
                    yield broker, None
                return
            server = Server(path, self.flush, self.wrap)
            try:
                with mqlite.connect(server.address) as remote:
                    yield remote, server
            finally:
                server.stop()


def _window(server: Server | None) -> Callable[[int], dict[str, float]]:
    """Start the clocks; the returned function stops them for `n` messages and gives rate and CPU per message."""
    t0, c0, k0, s0 = perf(), cpu(), os.times().system, server.cpu() if server else (0.0, 0.0)

    def stop(n: int) -> dict[str, float]:
        elapsed, client, kernel = perf() - t0, cpu() - c0, os.times().system - k0
        row = {"msgs_per_s": n / elapsed, "seconds": elapsed, "client_cpu_us": client / n * 1e6,
               "client_sys_us": kernel / n * 1e6}
        if server:
            row.update(_server_cpu(s0, server.cpu(), n))
        return row
    return stop


def _server_cpu(before: tuple[float, float], after: tuple[float, float], n: int) -> dict[str, float]:
    user, system = after[0] - before[0], after[1] - before[1]
    return {"server_cpu_us": (user + system) / n * 1e6, "server_sys_us": system / n * 1e6}


# -- measurements ---------------------------------------------------------------------------------------
def m_send(target: Target, n: int) -> dict[str, float]:
    with target.open() as (broker, server), mqlite.Producer(broker, group="pg") as producer:
        send, Message = producer.send, mqlite.Message
        send(Message("s", BODY))  # route, topic creation, connection: outside the clock
        stop = _window(server)
        for _ in range(n):
            send(Message("s", BODY))
        return stop(n)


def m_send4(target: Target, n: int, clients: int = 4) -> dict[str, float]:
    per = n // clients
    with target.open() as (broker, server):
        if server is None:
            return _send_threads(broker, per, clients)
        procs = [subprocess.Popen([sys.executable, "-c", _SENDER, server.address, str(per)], env=_env(), text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(clients)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        s0 = server.cpu()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        spans = []
        for p in procs:
            assert p.stdout is not None
            spans.append([float(v) for v in p.stdout.readline().split()])
            p.wait(60)
        s1 = server.cpu()
        elapsed = max(s[1] for s in spans) - min(s[0] for s in spans)
        total = per * clients
        return {"msgs_per_s": total / elapsed, "seconds": elapsed,
                "client_cpu_us": sum(s[2] for s in spans) / total * 1e6,
                "client_sys_us": sum(s[3] for s in spans) / total * 1e6, **_server_cpu(s0, s1, total)}


def _send_threads(broker: Any, per: int, clients: int) -> dict[str, float]:
    barrier = threading.Barrier(clients + 1)

    def run(i: int) -> None:
        with mqlite.Producer(broker, group="pg") as producer:
            producer.send(mqlite.Message("s4", BODY))
            barrier.wait()
            for _ in range(per):
                producer.send(mqlite.Message("s4", BODY))
            barrier.wait()
    threads = [threading.Thread(target=run, args=(i,), name=f"bench-send-{i}") for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    stop = _window(None)
    barrier.wait()
    for t in threads:
        t.join()
    return stop(per * clients)


def m_batch(target: Target, n: int, size: int = 1000) -> dict[str, float]:
    msgs = [mqlite.Message("b", BODY) for _ in range(size)]
    with target.open() as (broker, server), mqlite.Producer(broker, group="pg") as producer:
        producer.send_batch(msgs)
        stop = _window(server)
        for _ in range(n // size):
            producer.send_batch(msgs)
        return stop(n // size * size)


def m_drain(target: Target, n: int) -> dict[str, float]:
    with target.open() as (broker, server):
        consumer = mqlite.LitePullConsumer(broker, "drain-cg", consume_from_where=FIRST, pull_batch_size=32)
        consumer.subscribe("d", "*")
        with consumer:
            stop = _window(server)
            got = 0
            while got < n:
                got += len(consumer.poll(1.0))
            return stop(got)


def _latency(target: Target, n: int, push: bool, gap: float = 0.002) -> dict[str, float]:
    total = n + WARMUP
    seen: list[int] = []
    done = threading.Event()

    def take(msgs: list[Any], *_: Any) -> Any:
        now = time.monotonic_ns()
        seen.extend(now - int(m.body) for m in msgs)
        if len(seen) >= total:
            done.set()
        return mqlite.ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with target.open() as (broker, server):
        broker.create_topic("lat", 4)
        if push:
            consumer: Any = mqlite.PushConsumer(broker, "lat-cg", listener=take)
        else:
            consumer = mqlite.LitePullConsumer(broker, "lat-cg")
        consumer.subscribe("lat", "*")
        with consumer:
            if not push:
                while not consumer.assignment():
                    consumer.poll(0.05)
            stop = _window(server)
            stamper = threading.Thread(target=_stamp, args=(broker, server, total, gap), name="bench-stamper")
            stamper.start()
            while not done.is_set():
                if push:
                    done.wait(1.0)
                else:
                    take(consumer.poll(1.0))
            row = stop(total)
            stamper.join()
    lat = sorted(seen[WARMUP:total])
    del row["msgs_per_s"]
    row.update(p50_ms=statistics.median(lat) / 1e6, p99_ms=lat[int(len(lat) * 0.99) - 1] / 1e6, max_ms=lat[-1] / 1e6)
    return row


def _stamp(broker: Any, server: Server | None, n: int, gap: float) -> None:
    """The stamping producer: another process (waited for here) for a served broker, this thread locally."""
    if server is not None:
        subprocess.run([sys.executable, "-c", _STAMPER, server.address, str(n), str(gap)], env=_env(), check=True)
        return
    with mqlite.Producer(broker, group="lat-pg") as producer:
        for _ in range(n):
            producer.send(mqlite.Message("lat", b"%d" % time.monotonic_ns()))
            time.sleep(gap)


ASYNC, SYNC = "ASYNC_FLUSH", "SYNC_FLUSH"
# name -> (flush, measure, count of messages as a multiple of --n, backlog to write first)
VARIANTS: dict[str, tuple[str, Callable[[Target, int], dict[str, float]], float, int]] = {
    "send": (ASYNC, m_send, 1, 0),
    "send4": (ASYNC, m_send4, 2, 0),
    "send_sync": (SYNC, m_send, 0.2, 0),
    "batch": (ASYNC, m_batch, 5, 0),
    "drain": (ASYNC, m_drain, 10, -1),  # backlog = the count
    "lat_lite": (ASYNC, lambda t, n: _latency(t, n, push=False), 0.05, 0),
    "lat_push": (ASYNC, lambda t, n: _latency(t, n, push=True), 0.05, 0),
}
# (row, key, bound, kind): "min" rate, "ratio" remote/local at least, "max" at most
TARGETS = [
    ("send.remote", "msgs_per_s", 5000, "min"),
    ("send4.remote", "msgs_per_s", 15000, "min"),
    ("batch", "ratio", 0.5, "min"),
    ("drain.remote", "msgs_per_s", 150000, "min"),
    ("lat_lite.remote", "p50_ms", 1.0, "max"),
    ("lat_lite.remote", "p99_ms", 5.0, "max"),
    ("lat_push.remote", "p50_ms", 1.0, "max"),
    ("lat_push.remote", "p99_ms", 5.0, "max"),
]


def _emit(row: dict[str, Any], out: Any) -> None:
    line = json.dumps({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()})
    print(line, flush=True)
    if out:
        out.write(line + "\n")


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=20_000, help="sends per `send` row; others scale from it")
    parser.add_argument("--only", default=",".join(VARIANTS), help="comma-separated variants")
    parser.add_argument("--side", default="local,remote", help="local, remote, or local,remote (the default)")
    parser.add_argument("--out", help="append the JSON lines to this file")
    parser.add_argument("--wrap", help="prefix of the server command, e.g. 'py-spy record -o prof.svg --'")
    args = parser.parse_args()
    names = [v for v in args.only.split(",") if v]
    sides = [s for s in args.side.split(",") if s]
    wrap = args.wrap.split() if args.wrap else None
    out = open(args.out, "a", buffering=1) if args.out else None
    rows: dict[str, list[dict[str, Any]]] = {}
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for r in range(args.rounds):
        plan = [(name, side) for name in names for side in sides]
        for name, side in plan if r % 2 == 0 else plan[::-1]:
            flush, measure, scale, fill = VARIANTS[name]
            n = int(args.n * scale)
            target = Target(side == "remote", flush, n if fill < 0 else fill, wrap)
            load = os.getloadavg()[0]
            row: dict[str, Any] = {"run_id": run_id, "round": r, "row": f"{name}.{side}", "flush": flush, "n": n,
                                   "load1": load, **measure(target, n)}
            rows.setdefault(row["row"], []).append(row)
            _emit(row, out)
    summary = _summarise(rows, names, sides, args.rounds)
    summary["load1_after"] = os.getloadavg()[0]
    _emit({"run_id": run_id, "summary": summary}, out)


def _summarise(rows: dict[str, list[dict[str, Any]]], names: list[str], sides: list[str],
               rounds: int) -> dict[str, Any]:
    """Print the table (medians over rounds, same-round remote/local ratios) and the target verdicts."""
    summary: dict[str, Any] = {}
    print(f"\n{rounds} rounds; medians (range)")
    print(f"{'row':18s} {'msgs/s':>22s} {'remote/local':>18s} {'server CPU':>11s} {'(sys)':>6s} {'client CPU':>11s} {'(sys)':>6s}"
          f" {'p50 ms':>7s} {'p99 ms':>7s} {'load':>5s}")
    for name in names:
        for side in sides:
            key = f"{name}.{side}"
            got = rows.get(key, [])
            if not got:
                continue
            s: dict[str, Any] = {k: _median(got, k) for k in ("msgs_per_s", "server_cpu_us", "server_sys_us",
                                                               "client_cpu_us", "client_sys_us", "p50_ms", "p99_ms",
                                                               "load1")}
            rates = [g["msgs_per_s"] for g in got if "msgs_per_s" in g]
            ratio_text = ""
            if side == "remote" and rates and f"{name}.local" in rows:
                local = {g["round"]: g["msgs_per_s"] for g in rows[f"{name}.local"]}
                ratios = [g["msgs_per_s"] / local[g["round"]] for g in got if g["round"] in local]
                if ratios:
                    s["ratio"] = statistics.median(ratios)
                    summary[f"{name}.ratio"] = s["ratio"]
                    ratio_text = f"{s['ratio']:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            rate_text = (f"{s['msgs_per_s'] / 1000:.1f}k ({min(rates) / 1000:.1f}-{max(rates) / 1000:.1f}k)"
                         if rates else "")
            print(f"{key:18s} {rate_text:>22s} {ratio_text:>18s} " + " ".join(
                f"{s[k]:{w}.{p}f}" if s[k] is not None else " " * w
                for k, w, p in (("server_cpu_us", 11, 1), ("server_sys_us", 6, 1), ("client_cpu_us", 11, 1),
                                ("client_sys_us", 6, 1), ("p50_ms", 7, 2), ("p99_ms", 7, 2), ("load1", 5, 1))))
            summary[key] = {k: v for k, v in s.items() if v is not None}
    print("\ntarget                                   median      verdict")
    for row, key, bound, kind in TARGETS:
        value = summary.get(f"{row}.ratio") if key == "ratio" else summary.get(row, {}).get(key)
        if value is None:
            continue
        ok = value >= bound if kind == "min" else value < bound
        label = f"{row} {key} {'>=' if kind == 'min' else '<'} {bound:g}"
        print(f"{label:40s} {value:10.4g}  {'PASS' if ok else 'MISS'}")
        summary.setdefault("targets", {})[label] = {"median": value, "met": ok}
    return summary


if __name__ == "__main__":
    main()
