#!/usr/bin/env python3
"""Peer benchmark: enqueue and dequeue+ack throughput / latency of embeddable
Python queues, side by side, with the same payloads and output format.

For every (peer, mode, payload size) it
  1. runs a short pilot on a scratch dir to pick N so that the slower of
     enqueue / dequeue+ack takes ~--target-s seconds (or uses --n),
  2. enqueues N messages into a fresh queue (closed loop, one thread),
  3. dequeues + acks the same N messages (queue depth starts at N),
and prints one JSON line per phase (see benchlib.py for the schema).

Adding a peer = one function decorated with @peer that returns H(put, get, ...).
The mqlite adapters (mqlite, mqlite-batch1000) are at the bottom (enable: --mqlite,
or name them in --peers / --configs).

  .venv-bench/bin/python bench_peers.py --out results/peers.jsonl
  .venv-bench/bin/python bench_peers.py --peers litequeue,proto --payloads 100
  .venv-bench/bin/python bench_peers.py --mqlite --n-from results/peers.jsonl
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import shutil
import sqlite3
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

PEERS: dict[str, dict] = {}


class H:
    """Handle returned by a peer factory."""

    def __init__(self, put, get, close=lambda: None, settings="", batch=1,
                 wants_str=False, timed=True, norm=None):
        self.put, self.get, self.close = put, get, close
        self.settings = settings      # exact settings, goes into the JSON line
        self.batch = batch            # >1: put(list_of_payloads), get() -> list
        self.wants_str = wants_str    # peer only accepts str payloads
        self.timed = timed            # per-op latency (False for in-memory)
        self.norm = norm or (lambda x: x)  # dequeued item -> payload (for the check)


def peer(name, modes, group="disk", optional=False):
    def deco(fn):
        PEERS[name] = dict(fn=fn, modes=modes, group=group, optional=optional)
        return fn
    return deco


# =========================================================== in-memory baselines
@peer("deque", ["default"], group="memory")
def p_deque(path, mode):
    d = collections.deque()
    return H(d.append, d.popleft, timed=False,
             settings="collections.deque append()/popleft(); no ack, no persistence")


@peer("queue.Queue", ["default"], group="memory")
def p_queue(path, mode):
    q = queue.Queue()
    g, td = q.get, q.task_done

    def get():
        x = g()
        td()
        return x
    return H(q.put, get, timed=False,
             settings="queue.Queue() put()/get()+task_done(); no persistence")


# =========================================================== persist-queue
@peer("persistqueue.Queue", ["default", "autosave"])
def p_pq_file(path, mode):
    import persistqueue
    q = persistqueue.Queue(path, autosave=(mode == "autosave"))
    g, td = q.get_nowait, q.task_done

    def get():
        x = g()
        td()
        return x
    s = ("persistqueue.Queue(path, chunksize=100, serializer=pickle, autosave=%s); "
         "put() = pickle.dump+flush() (no fsync; fsync only when a 100-item chunk "
         "file is rolled) + rewrite 'info' file via mkstemp+rename each put; "
         "get_nowait()+task_done()%s" % (
             mode == "autosave",
             " (info saved in get)" if mode == "autosave" else " (info saved in task_done)"))
    return H(q.put, get, settings=s, close=lambda: q.__del__())


def _pq_sqlite_tune(q, mode):
    if mode == "normal":
        q._putter.execute("PRAGMA synchronous=NORMAL")
        q._getter.execute("PRAGMA synchronous=NORMAL")
    return {"synchronous": q._getter.execute("PRAGMA synchronous").fetchone()[0]}


@peer("persistqueue.SQLiteQueue", ["default", "normal"])
def p_pq_sqlite(path, mode):
    import persistqueue
    q = persistqueue.SQLiteQueue(path, auto_commit=True, multithreading=False)
    sync = _pq_sqlite_tune(q, mode)
    s = ("persistqueue.SQLiteQueue(path, auto_commit=True) WAL, synchronous=%s%s "
         "(one commit per put and per get; get deletes the row = implicit ack)" % (
             sync.get("synchronous"), " [library default FULL=2; 'normal' is our PRAGMA tweak]" if mode == "normal"
             else " (library default = SQLite default FULL: fsync of WAL per commit)"))
    return H(q.put, q.get_nowait, settings=s, close=q.close)


@peer("persistqueue.SQLiteAckQueue", ["default", "normal"])
def p_pq_ack(path, mode):
    import persistqueue
    q = persistqueue.SQLiteAckQueue(path, multithreading=False)
    sync = _pq_sqlite_tune(q, mode)
    g, ack = q.get, q.ack

    def get():
        it = g(block=False, raw=True)
        ack(id=it["pqid"])
        return it["data"]
    s = ("persistqueue.SQLiteAckQueue(path) WAL, synchronous=%s%s; get(raw=True)+ack(id) "
         "= 2 commits per message; acked rows are kept (no clear_acked_data)" % (
             sync.get("synchronous"), " [our PRAGMA tweak]" if mode == "normal" else " (library default)"))
    return H(q.put, get, settings=s, close=q.close)


# =========================================================== litequeue
@peer("litequeue", ["default", "full"])
def p_litequeue(path, mode):
    import litequeue
    q = litequeue.LiteQueue(os.path.join(path, "q.sqlite3"))
    if mode == "full":
        q.conn.execute("PRAGMA synchronous=FULL")
    sync = q.conn.execute("PRAGMA synchronous").fetchone()[0]
    pop, done = q.pop, q.done

    def get():
        m = pop()
        done(m.message_id)
        return m.data
    s = ("litequeue %s LiteQueue(file) WAL, synchronous=%s%s, autocommit; put(str) (uuid7 id, "
         "2 indexes); pop() (UPDATE..RETURNING txn) + done(message_id) (UPDATE) = 2 commits/msg" % (
             litequeue.__version__, sync,
             " [our PRAGMA tweak]" if mode == "full" else " (library sets NORMAL)"))
    return H(q.put, get, settings=s, wants_str=True, close=q.close)


# =========================================================== diskcache
@peer("diskcache.Deque", ["default", "full"])
def p_diskcache(path, mode):
    import diskcache
    if mode == "full":
        d = diskcache.Deque.fromcache(diskcache.Cache(path, eviction_policy="none", sqlite_synchronous=2))
    else:
        d = diskcache.Deque(directory=path)
    s = ("diskcache %s Deque: Cache(eviction_policy='none', sqlite_journal_mode=wal, "
         "sqlite_synchronous=%d) append()/popleft() (bytes < 32 KiB stored raw as BLOB; popleft deletes = implicit ack)" % (
             diskcache.__version__, 2 if mode == "full" else 1))
    return H(d.append, d.popleft, settings=s, close=lambda: d.cache.close())


# =========================================================== queuelib
@peer("queuelib.FifoDiskQueue", ["default"])
def p_ql_disk(path, mode):
    from queuelib import FifoDiskQueue
    q = FifoDiskQueue(os.path.join(path, "q"))
    s = ("queuelib FifoDiskQueue(path, chunksize=100000): push = os.write(len+data); pop = os.read; "
         "no fsync ever; info.json only written at close() (not crash-safe); no ack")
    return H(q.push, q.pop, settings=s, close=q.close)


@peer("queuelib.FifoSQLiteQueue", ["default"])
def p_ql_sqlite(path, mode):
    from queuelib.queue import FifoSQLiteQueue
    q = FifoSQLiteQueue(os.path.join(path, "q.db"))
    jm = q._db.execute("PRAGMA journal_mode").fetchone()[0]
    sy = q._db.execute("PRAGMA synchronous").fetchone()[0]
    jm = jm.decode() if isinstance(jm, bytes) else jm
    s = ("queuelib FifoSQLiteQueue: journal_mode=%s synchronous=%s (SQLite defaults => fsyncs per commit); "
         "push = 1 txn; pop = SELECT+DELETE txn" % (jm, sy))
    return H(q.push, q.pop, settings=s, close=q.close)


# =========================================================== LMDB (hand-rolled)
@peer("lmdb-queue", ["default", "nosync"])
def p_lmdb(path, mode):
    import lmdb
    env = lmdb.open(path, map_size=1 << 34, sync=(mode != "nosync"), metasync=(mode != "nosync"))
    key = struct.Struct(">Q").pack
    st = [0, 0]  # head, tail

    def put(b):
        with env.begin(write=True) as t:
            t.put(key(st[1]), b, append=True)
        st[1] += 1

    def get():
        with env.begin(write=True) as t:
            v = t.pop(key(st[0]))
        st[0] += 1
        return v
    s = ("hand-rolled queue on lmdb %s (py-lmdb): env sync=%s metasync=%s, 1 write txn per put (append=True, 8-byte BE seq key) "
         "and per get (pop(head key)); 'default' = LMDB default (durable)" % (
             lmdb.__version__, mode != "nosync", mode != "nosync"))
    return H(put, get, settings=s, close=env.close)


# =========================================================== plain SQLite, batches of 1000
@peer("sqlite-batch1000", ["default", "full"])
def p_sqlite_batch(path, mode):
    con = sqlite3.connect(os.path.join(path, "q.db"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=%s" % ("FULL" if mode == "full" else "NORMAL"))
    con.execute("CREATE TABLE IF NOT EXISTS q(id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    con.execute("CREATE TABLE IF NOT EXISTS off(grp TEXT PRIMARY KEY, v INTEGER NOT NULL)")
    con.execute("INSERT OR IGNORE INTO off VALUES('g', 0)")
    ex, exm = con.execute, con.executemany
    st = [0]

    def put(bodies):
        ex("BEGIN")
        exm("INSERT INTO q(body) VALUES (?)", zip(bodies))
        ex("COMMIT")

    def get():
        ex("BEGIN")
        rows = ex("SELECT id, body FROM q WHERE id > ? ORDER BY id LIMIT 1000", (st[0],)).fetchall()
        st[0] = rows[-1][0]
        ex("UPDATE off SET v=? WHERE grp='g'", (st[0],))
        ex("COMMIT")
        return [r[1] for r in rows]
    s = ("sqlite3 %s WAL synchronous=%s; enqueue: BEGIN; executemany INSERT x1000; COMMIT. "
         "dequeue: BEGIN; SELECT 1000 rows WHERE id>offset; UPDATE consumer offset; COMMIT "
         "(RocketMQ-style offset ack, rows retained)" % (sqlite3.sqlite_version, "FULL" if mode == "full" else "NORMAL"))
    return H(put, get, settings=s, batch=1000, close=con.close)


# =========================================================== raw file floor (durability reference)
@peer("file-append", ["nosync", "fdatasync"])
def p_file(path, mode):
    fn = os.path.join(path, "log.bin")
    fd = os.open(fn, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    rfd = os.open(fn, os.O_RDONLY)
    hdr = struct.Struct(">I")
    sync = os.fdatasync if mode == "fdatasync" else None
    wr, rd = os.write, os.read

    def put(b):
        wr(fd, hdr.pack(len(b)) + b)
        if sync:
            sync(fd)

    def get():
        (n,) = hdr.unpack(rd(rfd, 4))
        return rd(rfd, n)

    def close():
        os.close(fd)
        os.close(rfd)
    s = ("raw os.write(O_APPEND, 4-byte len + body)%s; get = os.read sequential; no index, no ack state "
         "(physical floor/ceiling for one message per syscall)" % (" + os.fdatasync per put" if sync else ", no sync"))
    return H(put, get, settings=s, close=close)


# =========================================================== our pure-Python prototype
@peer("proto", ["async", "sync"])
def p_proto(path, mode):
    import proto_mqlite as P
    cl = P.CommitLogProto(path, fmt="full", flush=mode)
    st = [0]

    def get():
        b = cl.get(st[0])
        st[0] += 1
        return b
    s = ("proto_mqlite.CommitLogProto(fmt='full' 88B RocketMQ header+topic, crc32, threading.Lock, "
         "1 GiB sparse mmap segments, 20B CQ entries, flush=%s%s); get = CQ lookup + body slice copy, "
         "offset ack kept in memory" % (mode, " = msync per put" if mode == "sync" else " = none on put path"))
    return H(cl.put, get, settings=s, close=cl.close)


@peer("proto-batch1000", ["async", "sync"])
def p_proto_batch(path, mode):
    import proto_mqlite as P
    cl = P.CommitLogProto(path, fmt="full", flush=mode)
    st = [0]

    def get():
        b = cl.get_batch(st[0], 1000)
        st[0] += len(b)
        return b
    s = ("proto_mqlite.CommitLogProto(fmt='full', flush=%s) put_batch(1000) / get_batch(1000) "
         "(numpy CQ decode)" % mode)
    return H(cl.put_batch, get, settings=s, batch=1000, close=cl.close)


# =========================================================== mqlite
MQLITE_TOPIC = "bench"


def mqlite_version():
    """mqlite.__version__ plus the git commit of the tree it was imported from (+dirty)."""
    import subprocess
    import mqlite
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(mqlite.__file__))))
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        git = f" (git {rev}{'+dirty src' if dirty else ''})" if rev else ""
    except (OSError, subprocess.SubprocessError):
        git = ""
    return mqlite.__version__ + git


_MQLITE_VERSION = []


def _mqlite_store(path, mode):
    from mqlite import MessageStore, StoreConfig
    if not _MQLITE_VERSION:
        _MQLITE_VERSION.append(mqlite_version())
    from mqlite import MessageStore, StoreConfig
    flush = {"async": "ASYNC_FLUSH", "sync": "SYNC_FLUSH"}[mode]
    store = MessageStore(path, StoreConfig(flush_disk_type=flush))
    cfg = store.config
    s = ("mqlite %s MessageStore(StoreConfig(flush_disk_type=%s)): commitlog_file_size=%d (sparse mmap), "
         "consumequeue_file_size=%d, message_index_enable=%s, check_crc_on_recover=%s; RocketMQ v1 record "
         "(88 B header + body + topic + empty props), crc32, reput thread builds the CQ%s" % (
             _MQLITE_VERSION[0], flush, cfg.commitlog_file_size, cfg.consumequeue_file_size,
             cfg.message_index_enable, cfg.check_crc_on_recover,
             "; SYNC = group commit, fdatasync before put returns" if mode == "sync"
             else "; ASYNC = flush thread every %.1f s, nothing on the put path" % cfg.flush_interval_commitlog))
    return store, s


class _MqliteReader:
    """Consumer side: next offset kept in memory (the 'ack'), buffer refilled by get_messages."""

    def __init__(self, store, max_count):
        self.store, self.max_count = store, max_count
        self.offset = 0

    def fetch(self, want):
        """Return a list of up to `want` (>=1) messages from the current offset, advancing it."""
        store, gm = self.store, self.store.get_messages
        for attempt in range(1000):
            r = gm(MQLITE_TOPIC, 0, self.offset, want)
            if r.messages:
                self.offset = r.next_begin_offset
                return r.messages
            if r.next_begin_offset > self.offset:      # skipped removed records (not expected here)
                self.offset = r.next_begin_offset
                continue
            store.wait_dispatched()                    # reput thread is behind: let it catch up
        raise RuntimeError("mqlite: no message at offset %d (%r)" % (self.offset, r))


@peer("mqlite", ["async", "sync"], optional=True)
def p_mqlite(path, mode):
    """put = store.put("bench", 0, body); get = next body from a local buffer that is refilled
    with get_messages(..., max_count=32), advancing the in-memory consumer offset (= ack)."""
    store, s = _mqlite_store(path, mode)
    reader = _MqliteReader(store, 32)
    put_ = store.put
    buf = collections.deque()
    pop, extend = buf.popleft, buf.extend

    def put(b):
        put_(MQLITE_TOPIC, 0, b)

    def get():
        if not buf:
            extend(reader.fetch(32))
        return pop().body
    return H(put, get, close=store.close,
             settings=s + "; put = store.put('bench', 0, body); get = buffered get_messages(max_count=32) "
             "+ .body, consumer offset advanced in memory")


@peer("mqlite-batch1000", ["async", "sync"], optional=True)
def p_mqlite_batch(path, mode):
    """put = store.put_batch("bench", 0, bodies[1000]); get = get_messages(max_count=1000) bodies."""
    store, s = _mqlite_store(path, mode)
    reader = _MqliteReader(store, 1000)
    put_batch = store.put_batch

    def put(bodies):
        put_batch(MQLITE_TOPIC, 0, bodies)

    def get():
        out = []
        while len(out) < 1000:
            out.extend(m.body for m in reader.fetch(1000 - len(out)))
        return out
    return H(put, get, batch=1000, close=store.close,
             settings=s + "; put = store.put_batch('bench', 0, 1000 bodies); get = get_messages(max_count=1000) "
             "-> [m.body], consumer offset advanced in memory")


# ============================================================== driver
def run_one(name, mode, size, args, n_fixed=None, rnd=0):
    spec = PEERS[name]
    pool = bl.payload_pool(size)
    scratch = args.dir

    def open_h(tag):
        return spec["fn"](bl.fresh_dir(scratch, f"{name}.{mode}.{size}.{tag}".replace("/", "_")), mode)

    def items_for(h):
        items = [p.decode() for p in pool] if h.wants_str else pool
        if h.batch > 1:
            big = [items[i % len(items)] for i in range(h.batch)]
            return [big]  # len 1 -> mask 0
        return items

    # ---- choose N
    if n_fixed:
        n = n_fixed
    else:
        h = open_h("pilot")
        it = items_for(h)
        pilot_ops = 1
        rate_p = rate_g = None
        deadline = args.pilot_s
        # grow pilot until it takes >= pilot_s (put side), then time the same number of gets
        k = 16
        total_put = 0
        t_put = 0.0
        while t_put < deadline and total_put < 2_000_000:
            dt = bl.loop_put_untimed(h.put, it, k) / 1e9
            total_put += k
            t_put += dt
            k *= 2
        t0 = time.perf_counter()
        for _ in range(total_put):
            h.get()
        t_get = time.perf_counter() - t0
        h.close()
        shutil.rmtree(os.path.join(scratch, f"{name}.{mode}.{size}.pilot".replace("/", "_")), ignore_errors=True)
        rate_p = total_put / max(t_put, 1e-9)
        rate_g = total_put / max(t_get, 1e-9)
        ops = bl.nice(args.target_s * min(rate_p, rate_g))
        max_ops = args.max_n // h.batch
        if spec["group"] == "memory":
            max_ops = min(max_ops, args.max_n_mem)
        ops = max(args.min_ops, min(max_ops, ops))
        n = ops * h.batch
        del pilot_ops

    # ---- measure
    h = open_h("run")
    it = items_for(h)
    ops = n // h.batch
    n = ops * h.batch
    base = {"bench": "peers", "peer": name, "mode": mode, "payload_bytes": size,
            "batch": h.batch, "settings": h.settings, "dir": scratch, "round": rnd}
    bl.quiesce()
    if h.timed:
        tot, lat = bl.loop_put_timed(h.put, it, ops)
    else:
        tot, lat = bl.loop_put_untimed(h.put, it, ops), None
    rec = dict(base, name=f"peers.{name}.{mode}.enqueue.{size}B", op="enqueue")
    rec.update(bl.summarize(n, tot / 1e9, size, lat))
    if h.batch > 1 and lat is not None:
        rec["latency_unit"] = f"per batch of {h.batch}"
    bl.emit(rec)

    bl.quiesce()
    if h.timed:
        tot, lat, last = bl.loop_get_timed(h.get, ops)
    else:
        (tot, last), lat = bl.loop_get_untimed(h.get, ops), None
    # correctness check on the last dequeued item
    exp = it[(ops - 1) & (len(it) - 1)]
    if h.batch > 1:
        got, exp = h.norm(last)[-1], exp[-1]
    else:
        got = h.norm(last)
    if isinstance(got, str) != isinstance(exp, str):
        got = got.encode() if isinstance(got, str) else got
        exp = exp.encode() if isinstance(exp, str) else exp
    ok = got == exp
    rec = dict(base, name=f"peers.{name}.{mode}.dequeue_ack.{size}B", op="dequeue_ack", check_last_item=ok)
    rec.update(bl.summarize(n, tot / 1e9, size, lat))
    if h.batch > 1 and lat is not None:
        rec["latency_unit"] = f"per batch of {h.batch}"
    bl.emit(rec)
    # disk footprint
    try:
        h.close()
    except Exception as e:  # pragma: no cover
        print(f"# close failed for {name}: {e}", file=sys.stderr)
    if not args.keep:
        shutil.rmtree(os.path.join(scratch, f"{name}.{mode}.{size}.run".replace("/", "_")), ignore_errors=True)
    if not ok:
        print(f"# WARNING: {name}/{mode}/{size}: last dequeued item mismatch", file=sys.stderr)


def load_n_from(path):
    out = {}
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("bench") == "peers" and r.get("op") == "enqueue":
            out[(r["peer"], r["mode"], r["payload_bytes"])] = r["n"]
            out.setdefault(("*", r["mode"], r["payload_bytes"]), r["n"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="", help="comma list (default: all non-optional); see --list")
    ap.add_argument("--modes", default="", help="comma list filter, e.g. default,async")
    ap.add_argument("--payloads", default="100,1024")
    ap.add_argument("--target-s", type=float, default=6.0, help="seconds for the slower phase")
    ap.add_argument("--pilot-s", type=float, default=0.4)
    ap.add_argument("--n", type=int, default=0, help="fixed N messages (overrides calibration)")
    ap.add_argument("--n-from", default="", help="reuse N per (peer,mode,payload) from a results JSONL")
    ap.add_argument("--min-ops", type=int, default=500)
    ap.add_argument("--max-n", type=int, default=5_000_000)
    ap.add_argument("--max-n-mem", type=int, default=5_000_000)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "mqlite-bench"), help="scratch directory ")
    ap.add_argument("--out", default="", help="append JSON lines here too")
    ap.add_argument("--keep", action="store_true", help="keep queue files")
    ap.add_argument("--mqlite", action="store_true", help="also run the mqlite adapter")
    ap.add_argument("--configs", default="", help="explicit list peer:mode[:n],... (overrides --peers/--modes)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole list R times (interleaved)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for k, v in PEERS.items():
            print(f"{k:32s} modes={','.join(v['modes'])} group={v['group']}{' (optional)' if v['optional'] else ''}")
        return
    os.makedirs(args.dir, exist_ok=True)
    bl.open_out(args.out)
    names = [p for p in args.peers.split(",") if p] or [k for k, v in PEERS.items() if not v["optional"]]
    if args.mqlite:
        names += [p for p in ("mqlite", "mqlite-batch1000") if p not in names]
    modes_f = set(m for m in args.modes.split(",") if m)
    sizes = [int(x) for x in args.payloads.split(",")]
    n_from = load_n_from(args.n_from) if args.n_from else {}
    bl.meta("peers", argv=sys.argv[1:], scratch=args.dir)
    plan = []
    if args.configs:
        for c in args.configs.split(","):
            parts = c.split(":")
            plan.append((parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0))
    else:
        for name in names:
            if name not in PEERS:
                sys.exit(f"unknown peer {name}; --list")
            for mode in PEERS[name]["modes"]:
                if not modes_f or mode in modes_f:
                    plan.append((name, mode, 0))
    for rnd in range(args.rounds):
        for name, mode, n_cfg in plan:
            if name not in PEERS or mode not in PEERS[name]["modes"]:
                sys.exit(f"unknown peer/mode {name}:{mode}; --list")
            for size in sizes:
                nf = n_cfg or args.n or n_from.get((name, mode, size)) or n_from.get(("*", mode, size))
                try:
                    run_one(name, mode, size, args, nf, rnd)
                except Exception as e:
                    bl.emit({"name": f"peers.{name}.{mode}.error.{size}B", "bench": "peers", "peer": name,
                             "mode": mode, "payload_bytes": size, "error": repr(e), "round": rnd})


if __name__ == "__main__":
    main()
