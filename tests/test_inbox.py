"""The Spark inbox without Spark: staged jobs handed to a live broker are stored by its `mqlite-inbox` service.

Jobs are built with the staging format's own writer (`mqlite.inbox.write_chunk`) and handed over
with `hand_off`, as a Spark commit with `.option("whenLocked", "inbox")` does from another process.
Waits poll with a deadline (the service looks every second); no test sleeps for correctness.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mqlite
from mqlite.record import decode_message
from mqlite.errors import MessageNotFoundError, MQClientError, StoreCorruptedError
from mqlite.indexfile import index_key_hash, index_key_names
from mqlite.inbox import (
    FAILED_DIR,
    INBOX_DIR,
    STAGING_DIR,
    append_staged,
    committed_batch,
    hand_off,
    read_chunks,
    write_chunk,
)
from mqlite.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from mqlite.verify import verify_store

sys.path.insert(0, os.path.dirname(__file__))
import refformat as rf  # noqa: E402

from support import SMALL_STORE, no_leftover_threads, wait_until  # noqa: F401, E402 - no_leftover_threads: autouse

#: Hand-overs come from other processes, so nothing wakes the inbox service: it looks every second,
#: and a test looks (`wait_until`) until the import shows. Generous for a loaded machine.
DEADLINE = 30.0
#: Jobs of many keyed rows: an index that holds them in one file (smaller ones roll and cost seconds).
SMALL: dict[str, Any] = {**SMALL_STORE, "max_index_num": 20000}


def stage(root: str, name: str, topic: str, bodies: list[bytes], *, tags: str | None = None,
          routes: list[int] | None = None, flags: list[int] | None = None,
          keys: list[str | None] | None = None) -> tuple[str, list[str]]:
    """A staged job `<root>/spark-staging/<name>/` of one file, one chunk; returns (job dir, file names).

    `keys`: each row's KEYS (a head per row, as the writer makes for a key column).
    """
    job_dir = os.path.join(root, STAGING_DIR, name)
    os.makedirs(job_dir)
    base = {PROPERTY_TAGS: tags, "WAIT": "true"} if tags else {"WAIT": "true"}
    heads = [base] if keys is None else [{**base, PROPERTY_KEYS: k} if k else base for k in keys]
    head_index = np.zeros(len(bodies)) if keys is None else np.arange(len(bodies))
    with open(os.path.join(job_dir, "part-00000.mqsb"), "wb") as f:
        write_chunk(f, topic, int(time.time() * 1000), [len(b) for b in bodies], b"".join(bodies), heads,
                    head_index, None if routes is None else np.array(routes), flags)
    return job_dir, ["part-00000.mqsb"]


def hand_over(root: str, name: str, topic: str, bodies: list[bytes], *, sink: dict[str, Any] | None = None,
              **kw: Any) -> str:
    """Stage a job and hand it to the inbox, as a Spark commit that found the store locked does."""
    job_dir, files = stage(root, name, topic, bodies, **kw)
    return hand_off(root, job_dir, files, len(bodies), sink)


def queue_bodies(broker: mqlite.Broker, topic: str, queue_id: int) -> list[bytes]:
    """The bodies of one queue, read with `query_message_by_offset` until the first absent offset."""
    bodies = []
    while True:
        try:
            bodies.append(bytes(broker.query_message_by_offset(topic, queue_id, len(bodies)).body))
        except MessageNotFoundError:
            return bodies


def _queue_messages(broker: mqlite.Broker, topic: str, queue_id: int) -> list[Any]:
    """The messages of one queue, in queue order."""
    messages: list[Any] = []
    while True:
        try:
            messages.append(broker.query_message_by_offset(topic, queue_id, len(messages)))
        except MessageNotFoundError:
            return messages


def inbox_entries(root: str) -> list[str]:
    inbox = os.path.join(root, INBOX_DIR)
    return sorted(n for n in os.listdir(inbox) if n != FAILED_DIR) if os.path.isdir(inbox) else []


def failed_entries(root: str) -> list[str]:
    failed = os.path.join(root, INBOX_DIR, FAILED_DIR)
    return sorted(os.listdir(failed)) if os.path.isdir(failed) else []


# -- the staged format ----------------------------------------------------------------------------------------------
def test_staged_chunks_round_trip(tmp_path: Path) -> None:
    """A chunk holds each row's whole record (but the fields the commit fills in), its tags and index keys."""
    _, files = stage(str(tmp_path), "job", "T", [b"a", b"", b"ccc"], tags="x", routes=[2, -1, -5], flags=[0, 7, 1],
                     keys=[None, "k1 k2", "k3"])
    path = str(tmp_path / STAGING_DIR / "job" / files[0])
    [chunk] = list(read_chunks(path))
    assert (chunk.topic, chunk.rows, chunk.tags, chunk.tag_numbers.tolist()) == ("T", 3, ["x"], [0, 0, 0])
    assert chunk.routes.tolist() == [2, -1, -5] and chunk.records is not None
    starts = np.concatenate([[0], np.cumsum(chunk.sizes)])
    messages = [decode_message(bytes(chunk.records[a:b]), "b") for a, b in zip(starts[:-1], starts[1:])]
    assert [(m.body, m.flag, m.queue_id, m.queue_offset, m.commit_log_offset, m.store_timestamp)
            for m in messages] == [(b"a", 0, 0, 0, 0, 0), (b"", 7, 0, 0, 0, 0), (b"ccc", 1, 0, 0, 0, 0)]
    uniqs = [m.properties.pop(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) for m in messages]
    assert len(set(uniqs)) == 3 and all(len(u) == 32 for u in uniqs)
    assert [m.properties for m in messages] == [{"TAGS": "x", "WAIT": "true"},
                                                {"TAGS": "x", "WAIT": "true", "KEYS": "k1 k2"},
                                                {"TAGS": "x", "WAIT": "true", "KEYS": "k3"}]
    names = [index_key_names("T", u, m.properties.get(PROPERTY_KEYS)) for u, m in zip(uniqs, messages)]
    assert chunk.key_rows.tolist() == [i for i, n in enumerate(names) for _ in n] == [0, 1, 1, 1, 2, 2]
    assert chunk.key_hashes.tolist() == [index_key_hash(k) for n in names for k in n]
    [planned] = list(read_chunks(path, records=False))
    assert (planned.topic, planned.rows, planned.records) == ("T", 3, None)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "bad tags", "version"])
def test_a_damaged_staged_file_is_refused_before_anything_is_stored(tmp_path: Path, damage: str) -> None:
    root = str(tmp_path / "mq")
    os.makedirs(root)
    _, files = stage(root, "job", "T", [b"x" * 100, b"y" * 100], tags="t")
    path = os.path.join(root, STAGING_DIR, "job", files[0])
    data = Path(path).read_bytes()
    if damage == "truncated":
        data = data[:-10]
    elif damage == "garbage":
        data = b"not a staged file at all, no" + data
    elif damage == "bad tags":
        data = data.replace(b'["t"]', b'["t"}')  # same length, no longer JSON
    else:  # a file staged by another mqlite version: refused, never appended as if it were this one's
        data = data[:4] + bytes([1]) + data[5:]
    Path(path).write_bytes(data)
    with pytest.raises(StoreCorruptedError, match="format version 1" if damage == "version" else None):
        list(read_chunks(path, records=False))
    with mqlite.open(root, **SMALL) as broker:
        with pytest.raises(StoreCorruptedError):
            append_staged(broker, [path])
        assert broker.store.topics() == [] or all(broker.store.max_offset("T", q) == 0 for q in range(4))


# -- appending staged jobs --------------------------------------------------------------------------------------------
def test_staged_rows_are_found_by_unique_key_and_by_keys(tmp_path: Path) -> None:
    """The index entries come hashed from the task: look-ups by UNIQ_KEY and by each of KEYS find the
    row, for rows appended whole and rows routed to queues one by one."""
    root = str(tmp_path / "mq")
    bodies = [f"row-{i}".encode() for i in range(300)]
    keys = [f"order-{i} shared{i % 7}" if i % 3 else None for i in range(300)]
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 4)
        broker.create_topic("R", 4)
        _, files = stage(root, "plain", "T", bodies, tags="red", keys=keys)
        _, routed = stage(root, "routed", "R", bodies, keys=keys, routes=[i % 4 if i % 5 else -1 for i in range(300)])
        assert append_staged(broker, [os.path.join(root, STAGING_DIR, "plain", files[0]),
                                      os.path.join(root, STAGING_DIR, "routed", routed[0])]) == 600
        broker.store.wait_dispatched()
        for topic in ("T", "R"):
            by_body = {bytes(m.body): m for q in range(4) for m in _queue_messages(broker, topic, q)}
            assert sorted(by_body) == sorted(bodies)
            for i, body in enumerate(bodies):
                msg = by_body[body]
                uniq = msg.properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
                assert [bytes(m.body) for m in broker.query_message(topic, uniq)] == [body]
                assert broker.view_message(uniq).body == body
                if keys[i]:
                    assert [bytes(m.body) for m in broker.query_message(topic, f"order-{i}")] == [body]
            assert len(broker.query_message(topic, "shared3", max_num=1000)) == sum(
                1 for k in keys if k and k.endswith("shared3"))
        assert {m.tags for q in range(4) for m in _queue_messages(broker, "T", q)} == {"red"}
    assert verify_store(root).ok
    assert rf.cross_check_store(root, hash_slot_num=SMALL["max_hash_slot_num"]) == []


def test_routes_pick_the_queues_and_keep_row_order(tmp_path: Path) -> None:
    """queueId, sharding-key hash and round robin as before: each queue gets its rows in row order."""
    root = str(tmp_path / "mq")
    routes = [i % 3 if i % 4 == 0 else (-2 - (i * 7919) % 1000 if i % 4 == 1 else -1) for i in range(400)]
    bodies = [f"r{i}".encode() for i in range(400)]
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("Q", 5)
        _, files = stage(root, "job", "Q", bodies, routes=routes)
        append_staged(broker, [os.path.join(root, STAGING_DIR, "job", files[0])])
        got = {q: queue_bodies(broker, "Q", q) for q in range(5)}
    unrouted = [i for i, route in enumerate(routes) if route == -1]
    spread = {q: [int(body[1:]) for body in b if routes[int(body[1:])] == -1] for q, b in got.items()}
    assert sorted(len(rows) for rows in spread.values()) == [40] * 5  # 200 round-robin rows, 5 queues
    slices = sorted(spread.values())
    assert [i for rows in slices for i in rows] == unrouted  # contiguous slices of them, in row order
    expected: dict[int, list[bytes]] = {q: [] for q in range(5)}
    for i, route in enumerate(routes):
        queue = route if route >= 0 else ((-route - 2) % 5 if route <= -2 else
                                          next(q for q, rows in spread.items() if i in rows))
        expected[queue].append(bodies[i])
    assert got == expected
    assert verify_store(root).ok


def test_round_robin_spreads_each_chunk_over_the_queues(tmp_path: Path) -> None:
    """Unrouted rows go to every queue in contiguous slices, the turn going on across chunks and
    files: 1,000 rows in 4 queues are 250 each; odd-sized chunks leave counts at most one apart."""
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("A", 4)
        broker.create_topic("B", 4)
        _, files = stage(root, "even", "A", [f"a{i}".encode() for i in range(1000)])
        append_staged(broker, [os.path.join(root, STAGING_DIR, "even", files[0])])
        counts = [len(queue_bodies(broker, "A", q)) for q in range(4)]
        assert counts == [250] * 4
        for q in range(4):  # one slice per queue: consecutive rows, in row order
            rows = [int(body[1:]) for body in queue_bodies(broker, "A", q)]
            assert rows == list(range(rows[0], rows[0] + 250))
        paths = []
        for n, size in enumerate((7, 1, 2, 13, 5, 3)):
            _, files = stage(root, f"odd{n}", "B", [f"b{n}-{i}".encode() for i in range(size)])
            paths.append(os.path.join(root, STAGING_DIR, f"odd{n}", files[0]))
        append_staged(broker, paths)
        counts = [len(queue_bodies(broker, "B", q)) for q in range(4)]
        assert sum(counts) == 31 and max(counts) - min(counts) <= 1, counts
    assert verify_store(root).ok


def test_a_commit_rolls_commit_log_segments(tmp_path: Path) -> None:
    """A job of several segments: puts of a quarter segment, each moving whole to the next segment."""
    root = str(tmp_path / "mq")
    bodies = [bytes([65 + i % 26]) * (100 + i % 300) for i in range(12_000)]  # about 3.5 segments of 1 MiB
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("S", 1)
        broker.store.put("S", 0, b"first")  # the commit starts mid-segment
        _, files = stage(root, "job", "S", bodies, tags="t")
        assert append_staged(broker, [os.path.join(root, STAGING_DIR, "job", files[0])]) == len(bodies)
        assert len(broker.store.commitlog.mapped_files.files) >= 4
        assert queue_bodies(broker, "S", 0) == [b"first", *bodies]
    assert verify_store(root).ok
    assert rf.cross_check_store(root, hash_slot_num=SMALL["max_hash_slot_num"]) == []


@pytest.mark.parametrize("torn_at", ["header", "body", "properties"])
def test_recovery_cuts_a_commit_torn_mid_copy(tmp_path: Path, torn_at: str) -> None:
    """A commit killed while copying a put leaves whole records, then part of one, then the zeros of a
    fresh segment: recovery keeps the whole records (queue offsets consecutive) and cuts the rest."""
    root = str(tmp_path / "mq")
    bodies = [f"torn-{i:04d}".encode() * 20 for i in range(50)]
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("C", 1)
        _, files = stage(root, "job", "C", bodies, keys=[f"k{i}" for i in range(50)])
        append_staged(broker, [os.path.join(root, STAGING_DIR, "job", files[0])])
        messages = _queue_messages(broker, "C", 0)
    cut = messages[30]
    tear = cut.commit_log_offset + {"header": 40, "body": 100, "properties": cut.store_size - 3}[torn_at]
    end = messages[-1].commit_log_offset + messages[-1].store_size
    with open(os.path.join(root, "commitlog", f"{0:020d}"), "r+b") as f:
        f.seek(tear)
        f.write(bytes(end - tear))  # the put's bytes after the tear never reached the segment
    Path(root, "abort").write_text("12345")  # the committing process died
    with mqlite.open(root, **SMALL) as broker:
        assert broker.store.commitlog.max_offset == cut.commit_log_offset
        assert queue_bodies(broker, "C", 0) == bodies[:30]
        assert [bytes(m.body) for m in broker.query_message("C", "k29")] == [bodies[29]]
        assert broker.query_message("C", "k30") == []
        broker.store.put("C", 0, b"after")  # the queue goes on at the next offset
        assert queue_bodies(broker, "C", 0) == [*bodies[:30], b"after"]
    assert verify_store(root).ok
    assert rf.cross_check_store(root, hash_slot_num=SMALL["max_hash_slot_num"]) == []


_KILLED_COMMITTER = textwrap.dedent("""
    import os, sys, numpy as np
    sys.path.insert(0, sys.argv[2])
    import mqlite
    from test_inbox import SMALL, stage
    from mqlite.inbox import append_staged
    root, rows = sys.argv[1], int(sys.argv[3])
    broker = mqlite.open(root, **SMALL)
    _, files = stage(root, "job", "K", [b"%06d-" % i + b"k" * (i % 200) for i in range(rows)],
                     keys=[f"key{i}" for i in range(rows)], routes=[i % 3 for i in range(rows)])
    put = broker.put_encoded_records
    def reported(*args, **kw):
        result = put(*args, **kw)
        print("PUT", flush=True)
        return result
    broker.put_encoded_records = reported
    append_staged(broker, [os.path.join(root, "spark-staging", "job", files[0])])
    print("DONE", flush=True)
""")


def test_a_commit_killed_mid_way_recovers_to_whole_puts_of_each_queue(tmp_path: Path) -> None:
    """kill -9 of a committing process after a few puts: on reopen every queue holds a prefix of its rows,
    records, units and index agree, and appends go on."""
    root = str(tmp_path / "mq")
    rows = 60_000  # about 10 MiB: some 40 puts of a quarter segment
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("K", 3)
    child = subprocess.Popen([sys.executable, "-c", _KILLED_COMMITTER, root, os.path.dirname(__file__), str(rows)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        for _ in range(5):
            assert child.stdout.readline().strip() == "PUT", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
        child.wait()
    expected = {q: [b"%06d-" % i + b"k" * (i % 200) for i in range(q, rows, 3)] for q in range(3)}
    with mqlite.open(root, **SMALL) as broker:
        assert broker.store.recovery.abnormal
        got = {q: queue_bodies(broker, "K", q) for q in range(3)}
        assert 0 < sum(map(len, got.values())) < rows, "the kill should land mid-commit"
        for q in range(3):
            assert got[q] == expected[q][: len(got[q])]
        last = max((b for q in got.values() for b in q[-1:]), default=None)
        if last is not None:
            i = int(last[:6])
            assert [bytes(m.body) for m in broker.query_message("K", f"key{i}")] == [last]
        broker.store.put("K", 0, b"after")
    assert verify_store(root).ok
    assert rf.cross_check_store(root, hash_slot_num=SMALL["max_hash_slot_num"]) == []


# -- a live broker imports its inbox --------------------------------------------------------------------------------
def test_live_broker_imports_a_handed_over_job(tmp_path: Path) -> None:
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 4)
        bodies = [f"m-{i}".encode() for i in range(10)]
        hand_over(root, "job-1", "T", bodies, tags="red", routes=[i % 2 for i in range(10)])
        wait_until(lambda: not inbox_entries(root), "the inbox to be imported", DEADLINE)
        assert queue_bodies(broker, "T", 0) == bodies[0::2]
        assert queue_bodies(broker, "T", 1) == bodies[1::2]
        msg = broker.query_message_by_offset("T", 0, 0)
        assert msg.tags == "red" and msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        assert broker.import_inbox() == 0  # nothing left
        assert not os.listdir(os.path.join(root, INBOX_DIR))  # entry and files removed after the puts
    assert verify_store(root).ok


def test_jobs_waiting_before_open_are_imported_oldest_first(tmp_path: Path) -> None:
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 2)
    for name in ("a", "b", "c"):
        hand_over(root, f"job-{name}", "T", [f"{name}-{i}".encode() for i in range(3)], routes=[0, 0, 0])
    with mqlite.open(root, **SMALL) as broker:
        wait_until(lambda: len(queue_bodies(broker, "T", 0)) == 9, "three jobs in queue 0", DEADLINE)
        assert queue_bodies(broker, "T", 0) == [f"{n}-{i}".encode() for n in "abc" for i in range(3)]
    assert inbox_entries(root) == []


def test_close_imports_a_job_handed_over_just_before(tmp_path: Path) -> None:
    """The service's last round runs on close, while the store is still open and locked."""
    root = str(tmp_path / "mq")
    broker = mqlite.open(root, **SMALL)
    hand_over(root, "job-late", "L", [b"late-0", b"late-1"], routes=[1, 1])
    broker.close()
    assert inbox_entries(root) == []
    with mqlite.open(root, read_only=True) as reader:
        assert queue_bodies(reader, "L", 1) == [b"late-0", b"late-1"]


def test_broker_append_staged_stores_the_inbox_first_and_each_stream_batch_once(tmp_path: Path) -> None:
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 2)
    hand_over(root, "job-early", "T", [b"early-0", b"early-1"], routes=[0, 0])  # accepted before this commit
    with mqlite.open(root, **SMALL) as broker:
        job_dir, files = stage(root, "stream-q-1", "T", [b"own-0", b"own-1", b"own-2"], routes=[0, 0, 0])
        paths = [os.path.join(job_dir, f) for f in files]
        assert broker.append_staged(paths, query_id="q", batch_id=1) == 3
        assert queue_bodies(broker, "T", 0) == [b"early-0", b"early-1", b"own-0", b"own-1", b"own-2"]
        assert committed_batch(root, "q") == 1 and inbox_entries(root) == []
        assert broker.append_staged(paths, query_id="q", batch_id=1) is None  # a replayed batch: not again
        assert broker.append_staged(paths, query_id="q", batch_id=0) is None  # nor an older one
        assert len(queue_bodies(broker, "T", 0)) == 5
        assert broker.append_staged(paths) == 3  # a batch job: no marker, stored each time it is given
        assert len(queue_bodies(broker, "T", 0)) == 8 and committed_batch(root, "q") == 1
    assert verify_store(root).ok


@pytest.mark.parametrize("ids", [{"query_id": "q"}, {"batch_id": 1}])
def test_broker_append_staged_refuses_half_a_stream_batch_id(tmp_path: Path, ids: dict[str, Any]) -> None:
    """Only one of query_id/batch_id would store the job with no at-most-once check: refused, nothing stored."""
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 1)
        job_dir, files = stage(root, "stream-q-1", "T", [b"own-0"], routes=[0])
        with pytest.raises(MQClientError, match="give both query_id and batch_id"):
            broker.append_staged([os.path.join(job_dir, f) for f in files], **ids)
        assert queue_bodies(broker, "T", 0) == [] and committed_batch(root, "q") == -1


def test_stream_batch_from_the_inbox_is_marked_stored(tmp_path: Path) -> None:
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        hand_over(root, "stream-q1-4-run", "S", [b"s-0"], routes=[0], sink={"query_id": "q1", "batch_id": 4})
        wait_until(lambda: committed_batch(root, "q1") == 4, "batch 4 of q1 to be recorded", DEADLINE)
        assert queue_bodies(broker, "S", 0) == [b"s-0"]


def test_bad_entries_are_set_aside_and_the_service_goes_on(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A corrupt file, a queue the topic lacks, a missing manifest: each logged and moved to
    `failed/`, nothing of it stored; jobs after them are still imported."""
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 4)
        corrupt = hand_over(root, "job-1-corrupt", "T", [b"c-0", b"c-1"], routes=[0, 0])
        part = os.path.join(corrupt, "part-00000.mqsb")
        Path(part).write_bytes(Path(part).read_bytes()[:-1])  # the last record byte is missing
        hand_over(root, "job-2-queue", "T", [b"q-0"], routes=[9])  # topic T has queues 0..3
        no_manifest = os.path.join(root, INBOX_DIR, f"{time.time_ns():020d}-job-3-foreign")
        os.makedirs(no_manifest)
        with caplog.at_level(logging.ERROR, logger="mqlite"):
            hand_over(root, "job-4-good", "T", [b"g-0", b"g-1"], routes=[0, 0])
            wait_until(lambda: not inbox_entries(root), "the inbox to be emptied", DEADLINE)
            assert queue_bodies(broker, "T", 0) == [b"g-0", b"g-1"]
        assert [n.split("-", 1)[1] for n in failed_entries(root)] == ["job-1-corrupt", "job-2-queue",
                                                                      "job-3-foreign"]
        logged = [r.getMessage() for r in caplog.records if r.name == "mqlite" and r.levelno == logging.ERROR]
        assert len(logged) == 3 and all("moved to" in m for m in logged)
        assert "ends inside the records" in logged[0] and "queues 0..3" in logged[1]
        assert not [r for r in caplog.records if "round failed" in r.getMessage()]  # never an error in the loop
        assert all(broker.store.max_offset("T", q) == 0 for q in (1, 2, 3))
        # The service is still alive and imports the next job.
        hand_over(root, "job-5-good", "T", [b"g-2"], routes=[0])
        wait_until(lambda: len(queue_bodies(broker, "T", 0)) == 3, "a job after the bad ones", DEADLINE)
    assert verify_store(root).ok
