#!/usr/bin/env python3
"""mqlite-specific benchmarks the peer harness (bench_peers.py) does not cover.

Same JSON-line format as the rest of the kit (benchlib.py); bench = "mqlite".
Sections (--only a,b,...; default all), each repeated --rounds times with the
variants interleaved inside a round, so that drift on this shared VM hits every
variant alike; compare medians and same-round ratios, not absolute numbers.

  get_backlog  get throughput through the consume queue as the backlog grows:
               stores of 10k / 100k / 1M records of 100 B (filled with
               put_batch), each read completely with get_messages(max_count=32)
               and with max_count=1000 (body of every message touched), beside
               the prototype (proto_mqlite) per-message get and get_batch(1000)
               over the same backlogs.  Small backlogs are read several times
               so that every measurement covers >= --min-read records.
  sync_single  SYNC_FLUSH, one writer thread: store.put of 100 B vs raw
               os.write(O_APPEND, len+body) + os.fdatasync, alternating in
               every round (order flipped each round), fresh files per round.
  sync_group   SYNC_FLUSH with --threads writer threads (group commit) vs one
               writer, same round, fresh store each; fdatasync calls counted
               (os.fdatasync wrapped) to give the mean group size.
  reopen       open time (MessageStore constructor only) of a cleanly closed
               store holding ~1 GiB of 1 KiB records (filled with put_batch)
               and one holding 64 MiB (and the 1M x 100 B store, ~190 MiB);
               warm page cache, and "cold" after posix_fadvise(DONTNEED) on
               the store's files.
  recovery     abnormal reopen: an `abort` file is created in the closed store,
               then MessageStore() is timed; records re-scanned per second from
               store.recovery.records_scanned (1 KiB store from `reopen`, and the
               1M x 100 B store from `get_backlog`, built if missing).

  .venv-bench/bin/python bench_mqlite.py --out results/scratch/mqlite.jsonl
  .venv-bench/bin/python bench_mqlite.py --only sync_single,sync_group --rounds 5
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

from mqlite import MessageStore, StoreConfig  # noqa: E402

TOPIC = "bench"
perf_ns = time.perf_counter_ns
SECTIONS = ("get_backlog", "sync_single", "sync_group", "reopen", "recovery")


def _version():
    from bench_peers import mqlite_version
    return mqlite_version()


VERSION = ""


def emit(name, op, n, seconds, payload, lat=None, **extra):
    rec = {"name": f"mqlite.{name}", "bench": "mqlite", "peer": extra.pop("peer", "mqlite"),
           "mode": extra.pop("mode", "async"), "op": op, "payload_bytes": payload}
    rec.update(bl.summarize(n, seconds, payload, lat))
    rec["version"] = VERSION
    rec.update(extra)
    return bl.emit(rec)


def open_store(path, flush="ASYNC_FLUSH", fresh=False):
    if fresh:
        shutil.rmtree(path, ignore_errors=True)
    return MessageStore(path, StoreConfig(flush_disk_type=flush))


def fill(store, n, size, batch=1000):
    """Append n records of `size` bytes with put_batch(batch); wait until all are dispatched."""
    pool = bl.payload_pool(size)
    bodies = [pool[i % len(pool)] for i in range(batch)]
    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(batch, n - done)
        store.put_batch(TOPIC, 0, bodies if k == batch else bodies[:k])
        done += k
    store.wait_dispatched(timeout=600)
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- get_backlog
def read_all_mqlite(store, n, k):
    """Read queue offsets [0, n) with get_messages(max_count=k), touching every body.
    Returns (ns, per-call latency array, last body)."""
    gm = store.get_messages
    lat = array("q")
    add = lat.append
    off = 0
    body = None
    t0 = prev = perf_ns()
    while off < n:
        r = gm(TOPIC, 0, off, k)
        msgs = r.messages
        if not msgs:
            raise RuntimeError(f"no messages at offset {off}: {r!r}")
        for m in msgs:
            body = m.body
        off = r.next_begin_offset
        t = perf_ns()
        add(t - prev)
        prev = t
    return prev - t0, lat, body


def read_all_proto(cl, n, k):
    lat = array("q")
    add = lat.append
    body = None
    off = 0
    if k == 1:
        get = cl.get
        t0 = perf_ns()
        for i in range(n):
            body = get(i)
        return perf_ns() - t0, None, body
    gb = cl.get_batch
    t0 = prev = perf_ns()
    while off < n:
        bodies = gb(off, min(k, n - off))
        body = bodies[-1]
        off += len(bodies)
        t = perf_ns()
        add(t - prev)
        prev = t
    return prev - t0, lat, body


def sec_get_backlog(args):
    import proto_mqlite as P
    size = 100
    pool = bl.payload_pool(size)
    backlogs = [int(x) for x in args.backlogs.split(",")]
    stores, protos = {}, {}
    for b in backlogs:
        path = os.path.join(args.dir, f"backlog-{b}")
        st = open_store(path, fresh=True)
        secs = fill(st, b, size)
        print(f"# filled mqlite backlog {b} in {secs:.1f}s", file=sys.stderr)
        stores[b] = st
        ppath = bl.fresh_dir(args.dir, f"proto-backlog-{b}")
        cl = P.CommitLogProto(ppath, fmt="full", flush="async")
        bodies = [pool[i % len(pool)] for i in range(1000)]
        for _ in range(b // 1000):
            cl.put_batch(bodies)
        protos[b] = cl
    settings = ("mqlite %s, ASYNC_FLUSH store of N x 100 B records in topic 'bench' queue 0 (put_batch of 1000, "
                "then wait_dispatched); read all N with get_messages(max_count=k) from offset 0 following "
                "next_begin_offset, m.body touched for every message; latency per get_messages call" % VERSION)
    psettings = ("proto_mqlite.CommitLogProto(fmt='full') with the same N records: get(i) per message (k=1) or "
                 "get_batch(i, 1000) (numpy CQ decode)")
    try:
        for rnd in range(args.rounds):
            for b in backlogs:
                reps = max(1, -(-args.min_read // b))
                exp = pool[((b - 1) % 1000) % len(pool)]  # fill() cycles 1000 bodies from the pool
                for k in (32, 1000):
                    bl.quiesce()
                    tot, lats = 0, array("q")
                    for _ in range(reps):
                        ns, lat, last = read_all_mqlite(stores[b], b, k)
                        tot += ns
                        lats.extend(lat)
                    emit(f"get_backlog.k{k}.backlog{b}.{size}B", f"get_cq_k{k}", b * reps, tot / 1e9, size, lats,
                         batch=k, backlog=b, reps=reps, round=rnd, check_last_item=last == exp,
                         latency_unit=f"per get_messages call (max_count={k})", settings=settings)
                for k in (1, 1000):
                    bl.quiesce()
                    tot, lats = 0, array("q")
                    for _ in range(reps):
                        ns, lat, last = read_all_proto(protos[b], b, k)
                        tot += ns
                        if lat is not None:
                            lats.extend(lat)
                    emit(f"get_backlog.proto_k{k}.backlog{b}.{size}B", f"get_proto_k{k}", b * reps, tot / 1e9, size,
                         lats if k > 1 else None, peer="proto", batch=k, backlog=b, reps=reps, round=rnd,
                         check_last_item=last == exp, settings=psettings)
    finally:
        for st in stores.values():
            st.close()
        for cl in protos.values():
            cl.close()
        for b in backlogs:
            shutil.rmtree(os.path.join(args.dir, f"proto-backlog-{b}"), ignore_errors=True)
            if b != max(backlogs):  # the biggest one is reused by `recovery`
                shutil.rmtree(os.path.join(args.dir, f"backlog-{b}"), ignore_errors=True)


# ----------------------------------------------------------------------------- sync_single
class SyncCounter:
    """Wrap os.fdatasync / os.fsync to count calls (mqlite's MappedFile.flush calls os.fdatasync)."""

    def __init__(self):
        self.n = 0
        self._orig = None

    def __enter__(self):
        self._orig = os.fdatasync
        orig = self._orig

        def counted(fd):
            self.n += 1
            return orig(fd)
        os.fdatasync = counted
        return self

    def __exit__(self, *exc):
        os.fdatasync = self._orig


def run_sync_mqlite(path, n, pool):
    st = open_store(path, flush="SYNC_FLUSH", fresh=True)
    put = st.put
    mask = len(pool) - 1
    try:
        with SyncCounter() as c:
            st.put(TOPIC, 0, b"warm-up")  # first fdatasync of a fresh segment
            c.n = 0
            tot, lat = bl.loop_put_timed(lambda b: put(TOPIC, 0, b), pool, n)
        statuses_ok = True
    finally:
        st.close()
    shutil.rmtree(path, ignore_errors=True)
    del mask
    return tot, lat, c.n, statuses_ok


def run_sync_raw(path, n, pool):
    os.makedirs(path, exist_ok=True)
    fn = os.path.join(path, "log.bin")
    if os.path.exists(fn):
        os.unlink(fn)
    fd = os.open(fn, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    hdr = struct.Struct(">I")
    wr, sync = os.write, os.fdatasync
    try:
        wr(fd, b"warm-up")
        sync(fd)

        def put(b):
            wr(fd, hdr.pack(len(b)) + b)
            sync(fd)
        tot, lat = bl.loop_put_timed(put, pool, n)
    finally:
        os.close(fd)
    shutil.rmtree(path, ignore_errors=True)
    return tot, lat


def sec_sync_single(args):
    size = 100
    pool = bl.payload_pool(size)
    n = args.sync_n
    ms = ("mqlite %s MessageStore(StoreConfig(flush_disk_type='SYNC_FLUSH')), one thread: store.put('bench', 0, "
          "100 B) returns after the group commit's fdatasync of the 1 GiB sparse mmap segment; fresh store per "
          "round (one warm-up put)" % VERSION)
    rs = ("raw os.write(O_APPEND, 4-byte len + 100 B body) + os.fdatasync per record, one thread, fresh file per "
          "round (one warm-up write+sync)")
    for rnd in range(args.rounds):
        order = ("mqlite", "raw") if rnd % 2 == 0 else ("raw", "mqlite")
        for who in order:
            bl.quiesce()
            if who == "mqlite":
                tot, lat, syncs, _ = run_sync_mqlite(os.path.join(args.dir, "sync-single"), n, pool)
                emit(f"sync_single.mqlite.{size}B", "put_sync", n, tot / 1e9, size, lat, mode="sync", round=rnd,
                     fdatasync_calls=syncs, settings=ms)
            else:
                tot, lat = run_sync_raw(os.path.join(args.dir, "sync-raw"), n, pool)
                emit(f"sync_single.raw_write_fdatasync.{size}B", "write_fdatasync", n, tot / 1e9, size, lat,
                     peer="raw", mode="fdatasync", round=rnd, settings=rs)


# ----------------------------------------------------------------------------- sync_group
def run_group(path, threads, per_thread, pool):
    st = open_store(path, flush="SYNC_FLUSH", fresh=True)
    put = st.put
    mask = len(pool) - 1
    lats = [None] * threads
    errors = []
    start = threading.Barrier(threads + 1)

    def worker(t):
        lat = array("q", bytes(8 * per_thread))
        try:
            start.wait()
            prev = perf_ns()
            for i in range(per_thread):
                r = put(TOPIC, t % 4, pool[(t * per_thread + i) & mask])
                if r.status.name != "PUT_OK":
                    errors.append(r.status.name)
                now = perf_ns()
                lat[i] = now - prev
                prev = now
        except Exception as e:  # pragma: no cover
            errors.append(repr(e))
        lats[t] = lat

    try:
        st.put(TOPIC, 0, b"warm-up")
        ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for th in ths:
            th.start()
        with SyncCounter() as c:
            start.wait()
            t0 = perf_ns()
            for th in ths:
                th.join()
            tot = perf_ns() - t0
    finally:
        st.close()
    shutil.rmtree(path, ignore_errors=True)
    allat = array("q")
    for lat in lats:
        if lat is not None:
            allat.extend(lat)
    return tot, allat, c.n, errors


def sec_sync_group(args):
    size = 100
    pool = bl.payload_pool(size)
    threads, per = args.threads, args.per_thread
    n_single = args.sync_n
    gs = ("mqlite %s SYNC_FLUSH, %d writer threads each doing %d x store.put('bench', t %% 4, 100 B) (4 queues), "
          "started together on a barrier; each put returns after its record is fdatasync'ed (group commit: the "
          "first waiter flushes for all); latency per put per thread; fdatasync calls counted" % (
              VERSION, threads, per))
    ss = ("mqlite %s SYNC_FLUSH, 1 writer thread, %d x store.put('bench', 0, 100 B), same round as the group run"
          % (VERSION, n_single))
    for rnd in range(args.rounds):
        order = ("single", "group") if rnd % 2 == 0 else ("group", "single")
        for who in order:
            bl.quiesce()
            if who == "single":
                tot, lat, syncs, _ = run_sync_mqlite(os.path.join(args.dir, "sync-g1"), n_single, pool)
                emit(f"sync_group.threads1.{size}B", "put_sync_1thread", n_single, tot / 1e9, size, lat,
                     mode="sync", threads=1, round=rnd, fdatasync_calls=syncs,
                     mean_group=n_single / syncs if syncs else None, settings=ss)
            else:
                n = threads * per
                tot, lat, syncs, errors = run_group(os.path.join(args.dir, "sync-gN"), threads, per, pool)
                emit(f"sync_group.threads{threads}.{size}B", f"put_sync_{threads}threads", n, tot / 1e9, size, lat,
                     mode="sync", threads=threads, round=rnd, fdatasync_calls=syncs,
                     mean_group=n / syncs if syncs else None, errors=errors[:5], settings=gs,
                     latency_unit="per put, per thread")


# ----------------------------------------------------------------------------- reopen / recovery
def store_files(root):
    for d, _, files in os.walk(root):
        for f in files:
            yield os.path.join(d, f)


def drop_cache(root):
    """posix_fadvise(DONTNEED) on every file of a closed store (its pages are clean after close)."""
    for p in store_files(root):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def data_bytes(root):
    st = MessageStore(root, StoreConfig())
    try:
        return st.commitlog.max_offset - max(st.commitlog.min_offset, 0), st.max_offset(TOPIC, 0)
    finally:
        st.close()


def build_kib_store(args, name, target_bytes):
    """A closed store holding ~target_bytes of commit log in 1 KiB records (reused if this run built it)."""
    path = os.path.join(args.dir, name)
    marker = os.path.join(path, ".bench-built")
    if os.path.exists(marker):
        return path
    st = open_store(path, fresh=True)
    rec = 1024 + 88 + 1 + len(TOPIC) + 2
    n = target_bytes // rec
    n -= n % 1000
    secs = fill(st, n, 1024)
    t0 = time.perf_counter()
    st.close()
    print(f"# filled {name}: {n} x 1 KiB in {secs:.1f}s, close (flush) {time.perf_counter() - t0:.1f}s",
          file=sys.stderr)
    open(marker, "w").close()
    return path


def build_backlog_store(args, n):
    path = os.path.join(args.dir, f"backlog-{n}")
    if os.path.exists(os.path.join(path, "commitlog")) and not os.path.exists(os.path.join(path, "abort")):
        try:
            if data_bytes(path)[1] == n:
                return path
        except Exception:
            pass
    st = open_store(path, fresh=True)
    fill(st, n, 100)
    st.close()
    return path


def timed_open(path):
    t0 = perf_ns()
    st = MessageStore(path, StoreConfig())
    dt = (perf_ns() - t0) / 1e9
    rep = st.recovery
    info = dict(abnormal=rep.abnormal, records_scanned=rep.records_scanned,
                records_dispatched=rep.records_dispatched, commitlog_bytes=st.commitlog.max_offset,
                messages=st.max_offset(TOPIC, 0))
    st.close()
    return dt, info


def sec_reopen(args):
    big = build_kib_store(args, "reopen-1GiB", int(args.reopen_gib * (1 << 30)))
    small = build_kib_store(args, "reopen-64MiB", args.small_mib << 20)
    tiny = build_backlog_store(args, max(int(x) for x in args.backlogs.split(",")))  # 100 B records
    settings = ("mqlite %s: time of MessageStore(path, StoreConfig()) only (lock, config, map files, normal "
                "recovery of the 4 MiB tail, start services), of a cleanly closed ASYNC store of 1 KiB records "
                "(put_batch of 1000; '100B-1M' = 1M records of 100 B, whose 4 MiB tail holds ~5.7x more records); 'warm' = page cache as left by the previous close, 'cold' = after "
                "posix_fadvise(DONTNEED) on every store file" % VERSION)
    for rnd in range(args.rounds):
        for label, path in (("1GiB", big), ("64MiB", small), ("100B-1M", tiny)):
            for cache in ("warm", "cold"):
                if cache == "cold":
                    drop_cache(path)
                else:
                    timed_open(path)  # warm the cache
                dt, info = timed_open(path)
                emit(f"reopen.{label}.{cache}", f"open_clean_{cache}", 1, dt, None, None, store=label, cache=cache,
                     open_s=dt, round=rnd, settings=settings, **info)


def sec_recovery(args):
    stores = [("1KiB-1GiB", build_kib_store(args, "reopen-1GiB", int(args.reopen_gib * (1 << 30))), 1024),
              ("100B-1M", build_backlog_store(args, max(int(x) for x in args.backlogs.split(","))), 100)]
    settings = ("mqlite %s: an `abort` file is created in a cleanly closed store, then MessageStore(path, "
                "StoreConfig()) is timed (abnormal recovery: re-scan from the newest segment older than the "
                "checkpoint, check_crc_on_recover=True, idempotent re-dispatch); msgs_per_s = "
                "recovery.records_scanned / open time; warm page cache" % VERSION)
    for rnd in range(args.rounds):
        for label, path, size in stores:
            open(os.path.join(path, "abort"), "w").close()
            bl.quiesce()
            dt, info = timed_open(path)
            emit(f"recovery.{label}", "recover_abnormal", info["records_scanned"], dt, size, None, store=label,
                 open_s=dt, round=rnd, settings=settings, **info)


# ----------------------------------------------------------------------------- main
def main():
    global VERSION
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma list of sections: " + ",".join(SECTIONS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backlogs", default="10000,100000,1000000")
    ap.add_argument("--min-read", type=int, default=500_000, help="records read per get_backlog measurement")
    ap.add_argument("--sync-n", type=int, default=1000, help="puts per single-writer SYNC measurement")
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--per-thread", type=int, default=250)
    ap.add_argument("--reopen-gib", type=float, default=1.0)
    ap.add_argument("--small-mib", type=int, default=64)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "mqlite-bench", "mqlite"))
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s] or list(SECTIONS)
    for s in only:
        if s not in SECTIONS:
            sys.exit(f"unknown section {s}; one of {', '.join(SECTIONS)}")
    os.makedirs(args.dir, exist_ok=True)
    VERSION = _version()
    bl.open_out(args.out)
    bl.meta("mqlite", argv=sys.argv[1:], scratch=args.dir, version=VERSION)
    try:
        for s in SECTIONS:
            if s in only:
                t0 = time.perf_counter()
                globals()["sec_" + s](args)
                print(f"# section {s}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
