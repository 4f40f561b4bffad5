#!/usr/bin/env python3
"""Profile mqlite's hot paths: function level (cProfile, sorted by own time) and
line level (line_profiler, if installed) for put, put_batch, get (max 32 and
1000), SYNC put, clean reopen and abnormal recovery.  Text report on stdout.

  .venv-bench/bin/python profile_mqlite.py                 # everything, ~1-2 min
  .venv-bench/bin/python profile_mqlite.py --only put,get32 --n 300000

Numbers under a profiler are inflated (cProfile adds ~0.3-1 us per Python call);
use them to rank costs, and bench_peers.py / bench_mqlite.py for rates.  cProfile
sees only the calling thread: the reput thread's dispatch work shows up as
GIL wait inside the put loop, so `put` also reports the put rate with the reput
thread held off (woken only by its 1 s timer) to size that cost.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

import mqlite  # noqa: E402
from mqlite import MessageStore, StoreConfig  # noqa: E402
from mqlite import commitlog as _cl  # noqa: E402
from mqlite import record as _rec  # noqa: E402
from mqlite import storebase as _sb  # noqa: E402
from mqlite import store as _st  # noqa: E402
from mqlite import storeservices as _ss  # noqa: E402
from mqlite import mappedfile as _mf  # noqa: E402
from mqlite import recovery as _rc  # noqa: E402

TOPIC = "bench"
# Source as imported (the tree may change while we run; line_profiler would read the new text).
_SRC = {}
for _m in (_cl, _rec, _sb, _st, _ss, _mf, _rc, mqlite):
    try:
        _SRC[os.path.abspath(_m.__file__)] = open(_m.__file__).read().splitlines()
    except OSError:
        pass
SECTIONS = ("put", "put_nodispatch", "put_batch", "get32", "get1000", "sync", "sync32", "reopen", "recovery")

try:
    import line_profiler
except ImportError:  # pragma: no cover
    line_profiler = None


def banner(title):
    print("\n" + "=" * 100 + f"\n{title}\n" + "=" * 100)


def cprofile(fn, top):
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    fn()
    pr.disable()
    wall = time.perf_counter() - t0
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(top)
    out = s.getvalue()
    # keep the table only
    i = out.find("   ncalls")
    print(f"cProfile (wall {wall:.2f}s under the profiler), top {top} by own time:")
    print(out[i:].rstrip() if i >= 0 else out)


def lprofile(fn, funcs, min_frac=0.02):
    if line_profiler is None:
        print("(line_profiler not installed: pip install line-profiler)")
        return
    lp = line_profiler.LineProfiler()
    for f in funcs:
        lp.add_function(f)
    lp.enable_by_count()
    fn()
    lp.disable_by_count()
    stats = lp.get_stats()
    unit = stats.unit
    print("line_profiler: lines taking >= %.0f%% of their function's time" % (min_frac * 100))
    for (filename, lineno, name), timings in sorted(stats.timings.items(), key=lambda kv: kv[0][1]):
        total = sum(t for _, _, t in timings)
        if not total:
            continue
        lines = _SRC.get(os.path.abspath(filename))
        if lines is None:
            try:
                lines = open(filename).read().splitlines()
            except OSError:
                lines = []
        print(f"  {os.path.relpath(filename, os.path.dirname(mqlite.__file__))}:{lineno} {name}  total {total * unit:.3f}s")
        for ln, hits, t in sorted(timings, key=lambda x: -x[2]):
            if t / total < min_frac:
                continue
            src = lines[ln - 1].strip() if 0 < ln <= len(lines) else ""
            print(f"    {100 * t / total:5.1f}%  {t * unit / max(hits, 1) * 1e9:8.0f} ns/hit  {hits:>9} hits  "
                  f"L{ln}: {src[:110]}")


def fresh(path, flush="ASYNC_FLUSH"):
    shutil.rmtree(path, ignore_errors=True)
    return MessageStore(path, StoreConfig(flush_disk_type=flush))


def filled(path, n, size=100):
    st = fresh(path)
    pool = bl.payload_pool(size)
    bodies = [pool[i % len(pool)] for i in range(1000)]
    for _ in range(n // 1000):
        st.put_batch(TOPIC, 0, bodies)
    st.wait_dispatched(600)
    return st


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--sync-n", type=int, default=500)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "mqlite-bench", "profile"))
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s] or list(SECTIONS)
    os.makedirs(args.dir, exist_ok=True)
    from bench_peers import mqlite_version
    print(f"mqlite {mqlite_version()}, Python {sys.version.split()[0]}, n={args.n}")
    pool = bl.payload_pool(100)
    mask = len(pool) - 1
    n = args.n
    d = args.dir
    try:
        if "put" in only:
            banner(f"put: {n} x store.put('bench', 0, 100 B), ASYNC_FLUSH")
            for prof in ("c", "line"):
                st = fresh(os.path.join(d, "put"))
                put = st.put

                def loop():
                    for i in range(n):
                        put(TOPIC, 0, pool[i & mask])
                if prof == "c":
                    cprofile(loop, args.top)
                else:
                    lprofile(loop, [MessageStore.put, _cl.CommitLog.append])
                st.close()

        if "put_nodispatch" in only:
            banner("put with vs without a concurrent reput thread (GIL share of dispatch), no profiler")
            for rnd in range(3):
                for variant in ("normal", "reput_deferred"):
                    st = fresh(os.path.join(d, "put2"))
                    if variant == "reput_deferred":
                        st._reput.idle = False          # put() then never wakes it
                        st._reput.wakeup = lambda: None  # nor does anything else; its 1 s timer still runs
                    put = st.put
                    t0 = time.perf_counter()
                    for i in range(n):
                        put(TOPIC, 0, pool[i & mask])
                    dt = time.perf_counter() - t0
                    t1 = time.perf_counter()
                    st.wait_dispatched(60) if variant == "normal" else None
                    st.close()
                    print(f"  round {rnd} {variant:15s} put {n / dt:10,.0f} msgs/s  (close incl. dispatch "
                          f"{time.perf_counter() - t1:.2f}s)")

        if "put_batch" in only:
            banner(f"put_batch: {n // 1000} x store.put_batch('bench', 0, 1000 x 100 B), ASYNC_FLUSH")
            bodies = [pool[i % len(pool)] for i in range(1000)]
            for prof in ("c", "line"):
                st = fresh(os.path.join(d, "putb"))

                def loop():
                    for _ in range(n // 1000):
                        st.put_batch(TOPIC, 0, bodies)
                if prof == "c":
                    cprofile(loop, args.top)
                else:
                    lprofile(loop, [MessageStore.put_batch, _cl.CommitLog.append_batch])
                st.close()

        if "get32" in only or "get1000" in only:
            st = filled(os.path.join(d, "get"), n)
            for k in (32, 1000):
                if f"get{k}" not in only:
                    continue
                banner(f"get: read {n} x 100 B with get_messages(max_count={k}), body of every message touched")

                def loop():
                    off = 0
                    gm = st.get_messages
                    while off < n:
                        r = gm(TOPIC, 0, off, k)
                        for m in r.messages:
                            m.body
                        off = r.next_begin_offset
                cprofile(loop, args.top)
                lprofile(loop, [_sb.StoreFiles.get_messages, _sb.StoreFiles._get_unfiltered, _rec.record_body,
                                _rec.StoredMessage.of, _rec.StoredMessage.body.fget])
            st.close()

        if "sync" in only:
            m = args.sync_n
            banner(f"sync: {m} x store.put('bench', 0, 100 B), SYNC_FLUSH, one writer")
            for prof in ("c", "line"):
                st = fresh(os.path.join(d, "sync"), "SYNC_FLUSH")
                put = st.put

                def loop():
                    for i in range(m):
                        put(TOPIC, 0, pool[i & mask])
                if prof == "c":
                    cprofile(loop, args.top)
                else:
                    lprofile(loop, [MessageStore.put, MessageStore._await_flush, _ss.GroupCommit.wait,
                                    MessageStore._flush_all_commitlog, _mf.MappedFileQueue.flush,
                                    _mf.MappedFile.flush])
                st.close()

        if "sync32" in only:
            threads, per = 32, max(50, args.sync_n // 4)
            banner(f"sync32: {threads} threads x {per} store.put (SYNC_FLUSH, group commit), cProfile per thread, merged")
            import threading
            st = fresh(os.path.join(d, "sync32"), "SYNC_FLUSH")
            profs = []
            barrier = threading.Barrier(threads)

            def worker(t):
                pr = cProfile.Profile()
                barrier.wait()
                pr.enable()
                for i in range(per):
                    st.put(TOPIC, t % 4, pool[i & mask])
                pr.disable()
                profs.append(pr)
            ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
            t0 = time.perf_counter()
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            wall = time.perf_counter() - t0
            st.close()
            s_ = io.StringIO()
            stats = pstats.Stats(profs[0], stream=s_)
            for pr in profs[1:]:
                stats.add(pr)
            stats.sort_stats("tottime").print_stats(args.top)
            out = s_.getvalue()
            print(f"{threads * per} puts in {wall:.2f}s = {threads * per / wall:,.0f} msgs/s under the profiler; "
                  f"times below are summed over threads (waits overlap)")
            print(out[out.find("   ncalls"):].rstrip())

        if "reopen" in only or "recovery" in only:
            path = os.path.join(d, "reopen")
            filled(path, min(n, 200_000)).close()
            if "reopen" in only:
                banner("reopen: MessageStore() of a cleanly closed store (warm cache)")
                MessageStore(path, StoreConfig()).close()
                box = []
                cprofile(lambda: box.append(MessageStore(path, StoreConfig())), args.top)
                box[0].close()
            if "recovery" in only:
                banner(f"recovery: MessageStore() after an abnormal exit (abort file), {min(n, 200_000)} records")
                open(os.path.join(path, "abort"), "w").close()
                box = []
                cprofile(lambda: box.append(MessageStore(path, StoreConfig())), args.top)
                print("  ", box[0].recovery)
                box[0].close()
                open(os.path.join(path, "abort"), "w").close()
                box = []
                lprofile(lambda: box.append(MessageStore(path, StoreConfig())),
                         [_rec.check_record, _rec._decode_into, _rc._scan, MessageStore._dispatch_one])
                box[0].close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
