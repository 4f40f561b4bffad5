"""Crash tests: `kill -9` a writer mid-stream, reopen, and find every acknowledged message.

A child process (`_crashchild.py`) appends messages (single puts and batches, several
topics and queues, bodies that encode their sequence number, some with KEYS and
UNIQ_KEY) and prints one line per acknowledged message. The parent reads a random
number of acknowledgements, kills the child with SIGKILL while it is still writing,
lets a second child recover and write on, kills that one too, and then checks the
store: every acknowledged message is in its queue at its acknowledged offset with its
body and properties, nothing is duplicated, queue offsets are contiguous from 0, the
key index finds keyed messages, appends continue, and `verify_store` is clean.

Set MQLITE_CRASH_SEED to replay a run; the seed is printed on failure.
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from mqlite.clock import ManualClock as _Clock
import mqlite
from _crashchild import TOPICS, Child, check_message, make_body, make_properties, read_queue

ACK_DEADLINE = 60.0  # seconds for the child to print its acknowledgements (a loaded CI machine)
SEQ_STRIDE = 1_000_000  # sequence numbers of run r start at r * SEQ_STRIDE


def _seed() -> int:
    text = os.environ.get("MQLITE_CRASH_SEED")
    return int(text) if text else random.SystemRandom().randrange(2**32)


Ack = tuple[str, int, int, int]  # topic, queue id, queue offset, seq


def _run_and_kill(root: Path, flush: str, threads: int, run: int, acks_wanted: int, seed: int) -> list[Ack]:
    """Start a writer child, read `acks_wanted` acks, SIGKILL it, return every ack it printed."""
    acks: list[Ack] = []
    with Child(str(root), "write", flush, str(seed), str(run * SEQ_STRIDE), str(threads), "120") as child:
        deadline = time.monotonic() + ACK_DEADLINE

        def take(line: str) -> None:
            kind, topic, qid, qoff, seq = line.split()
            assert kind == "ACK", line
            acks.append((topic, int(qid), int(qoff), int(seq)))

        while len(acks) < acks_wanted:
            line = child.readline(deadline)
            assert line is not None, f"writer exited early after {len(acks)} acks:\n{child.stderr()}"
            assert line != "DONE", "the writer finished before it was killed; raise its time limit"
            take(line)
        child.kill()
        # Lines already in the pipe were acknowledged before the kill: they count too.
        for line in child.lines_until_eof(time.monotonic() + ACK_DEADLINE):
            take(line)
        assert child.proc.returncode == -9, f"child ended with {child.proc.returncode}:\n{child.stderr()}"
    return acks


def _read_store(store: Any) -> dict[tuple[str, int], list[int]]:
    """{(topic, queue id): [seq at queue offset 0, 1, ...]} with every message checked.

    Even the message being written at the kill must be whole or absent: recovery cuts a torn record.
    """
    queues: dict[tuple[str, int], list[int]] = {}
    for topic in store.topics():
        for qid in store.queue_ids(topic):
            messages = read_queue(store, topic, qid)
            queues[(topic, qid)] = [check_message(m, topic, qid, i) for i, m in enumerate(messages)]
    return queues


def _queues_restarted(acks: list[Ack]) -> list[str]:
    """Queues where a later run was acknowledged offsets an earlier run already had."""
    seen: dict[tuple[str, int], int] = defaultdict(int)  # acked offsets per queue in earlier runs
    restarted = []
    for run in sorted({seq // SEQ_STRIDE for *_, seq in acks}):
        mine = [a for a in acks if a[3] // SEQ_STRIDE == run]
        for topic, qid, qoff, seq in mine:
            if qoff < seen[(topic, qid)]:
                restarted.append(f"run {run} got {topic}/{qid}@{qoff} again (seq {seq})")
        for topic, qid, qoff, _ in mine:
            seen[(topic, qid)] = max(seen[(topic, qid)], qoff + 1)
    return restarted


def _check_against_acks(queues: dict[tuple[str, int], list[int]], acks: list[Ack],
                        runs: dict[int, int]) -> None:
    all_seqs = [seq for seqs in queues.values() for seq in seqs]
    assert len(all_seqs) == len(set(all_seqs)), "a message is stored twice"
    missing = []
    for topic, qid, qoff, seq in acks:
        seqs = queues.get((topic, qid), [])
        if qoff >= len(seqs) or seqs[qoff] != seq:
            found = seqs[qoff] if qoff < len(seqs) else None
            missing.append(f"seq {seq} acked at {topic}/{qid}@{qoff}, found {found}")
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    # One writer thread appends in sequence order, so what survives of its run is a
    # prefix of that run's sequence numbers (a torn tail loses only unacknowledged ones).
    present = set(all_seqs)
    for run, threads in runs.items():
        mine = sorted(s for s in present if run * SEQ_STRIDE <= s < (run + 1) * SEQ_STRIDE)
        if threads == 1 and mine:
            assert mine == list(range(run * SEQ_STRIDE, mine[-1] + 1)), f"run {run} has holes"


def _index_problems(broker: mqlite.Broker, acks: list[Ack], rng: random.Random) -> list[str]:
    """Keyed acknowledged messages the index does not find exactly once (a sample)."""
    keyed = [a for a in acks if "KEYS" in make_properties(a[3])]
    problems = []
    for topic, qid, qoff, seq in rng.sample(keyed, min(40, len(keyed))):
        found = [(m.queue_id, m.queue_offset) for m in broker.query_message(topic, f"key-{seq}")]
        if found != [(qid, qoff)]:
            problems.append(f"key-{seq} of {topic}/{qid}@{qoff} found at {found}")
    return problems


def _append_more(store: Any, queues: dict[tuple[str, int], list[int]]) -> None:
    """Appends continue at each queue's recovered end, and are readable."""
    seq = 99 * SEQ_STRIDE
    for topic, count in TOPICS:
        for qid in range(count):
            expected = len(queues.get((topic, qid), []))
            result = store.put(topic, qid, make_body(topic, qid, seq), make_properties(seq))
            assert result.queue_offset == expected
            assert store.wait_dispatched(30.0)
            got = store.get_messages(topic, qid, expected, 1).messages
            assert len(got) == 1 and check_message(got[0], topic, qid, expected) == seq
            seq += 1



INDEX_CONFIG: dict[str, Any] = {"commitlog_file_size": 64 * 1024, "max_hash_slot_num": 64, "max_index_num": 256}  # 255 entries


def _index_counts(root: Path, clock: _Clock, keys: list[str]) -> dict[str, int]:
    """Reopen after a simulated crash and count what the index finds for each key."""
    from mqlite.store import MessageStore

    (root / "abort").write_text("1")
    with MessageStore(str(root), clock=clock) as store:
        assert store.recovery.abnormal
        assert store.wait_dispatched(30.0)
        return {key: len(store.query_message("Idx", key)) for key in keys}


def index_duplicates_after_empty_file(root: Path) -> dict[str, int]:
    """Index files [full, empty]: the empty one left by a crash while creating it."""
    from mqlite.config import StoreConfig
    from mqlite.store import MessageStore

    clock = _Clock()
    with MessageStore(str(root), StoreConfig(**INDEX_CONFIG), clock=clock) as store:
        for i in range(255):  # fills the first index file
            store.put("Idx", 0, b"m%d" % i, {"KEYS": f"k{i}"})
        clock.ms += 1000
        store.put("Idx", 0, b"m255", {"KEYS": "k255"})  # opens the second; the checkpoint vouches for the first
    newest = sorted((root / "index").iterdir())[-1]
    os.truncate(newest, 0)  # killed between creating the file and sizing it
    return _index_counts(root, clock, ["k0", "k100", "k254", "k255"])


def index_keys_lost_at_file_boundary(root: Path) -> dict[str, int]:
    """A record whose keys straddle two index files, then a crash before the checkpoint vouches for the second."""
    from mqlite.config import StoreConfig
    from mqlite.store import MessageStore

    clock = _Clock()
    with MessageStore(str(root), StoreConfig(**INDEX_CONFIG), clock=clock) as store:
        for i in range(128):  # two keys each: a127 is the first file's last entry, b127 the second's first
            store.put("Idx", 0, b"m%d" % i, {"KEYS": f"a{i} b{i}"})
        clock.ms += 5000
        for i in range(128, 140):
            store.put("Idx", 0, b"m%d" % i, {"KEYS": f"a{i} b{i}"})
    return _index_counts(root, clock, ["a126", "b126", "a127", "b127", "a128", "b139"])


def test_abnormal_recovery_with_an_empty_index_file_indexes_each_record_once(tmp_path: Path) -> None:
    assert index_duplicates_after_empty_file(tmp_path / "store") == {"k0": 1, "k100": 1, "k254": 1, "k255": 1}


def test_abnormal_recovery_keeps_keys_that_straddle_index_files(tmp_path: Path) -> None:
    counts = index_keys_lost_at_file_boundary(tmp_path / "store")
    assert counts == {"a126": 1, "b126": 1, "a127": 1, "b127": 1, "a128": 1, "b139": 1}


def test_abnormal_recovery_indexes_each_record_once(tmp_path: Path) -> None:
    # After an abnormal exit, an index file whose end time equals the checkpoint's index time
    # is kept; re-dispatch must not index its last record a second time.
    from mqlite.config import StoreConfig
    from mqlite.store import MessageStore

    root = tmp_path / "store"
    clock = _Clock()  # every message in the same millisecond
    with MessageStore(str(root), StoreConfig(**INDEX_CONFIG), clock=clock) as store:
        for i in range(300):  # fills the first index file (255 entries) and starts a second
            store.put("Idx", 0, b"m%d" % i, {"KEYS": f"k{i}"})
    assert _index_counts(root, clock, ["k0", "k254", "k255", "k299"]) == {"k0": 1, "k254": 1, "k255": 1, "k299": 1}


def _verify_clean(root: Path) -> None:
    from mqlite.verify import verify_store

    report = verify_store(str(root))
    assert report.ok, report.problems


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
@pytest.mark.parametrize("threads", [1, 3], ids=["one-writer", "three-writers"])
def test_kill9_keeps_every_acknowledged_message(tmp_path: Path, flush: str, threads: int) -> None:
    seed = _seed()
    print(f"MQLITE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    acks: list[Ack] = []
    runs: dict[int, int] = {}
    # Two crashes in a row: the second child recovers the first one's torn store, then dies too.
    for run in range(2):
        acks += _run_and_kill(root, flush, threads, run, rng.randint(300, 3000), rng.randrange(2**31))
        runs[run] = threads
    assert (root / "abort").exists(), "a killed writer leaves its abort marker"
    assert len(os.listdir(root / "commitlog")) >= 2, "the runs should cross a segment boundary"

    restarted = _queues_restarted(acks)
    assert not restarted, f"the second writer reused queue offsets after recovering: {restarted[:5]}"
    with mqlite.open(str(root)) as broker:
        store = broker.store
        assert store.recovery.abnormal
        queues = _read_store(store)
        _check_against_acks(queues, acks, runs)
        index_problems = _index_problems(broker, acks, rng)
        _append_more(store, queues)
    assert not (root / "abort").exists()
    _verify_clean(root)

    # A clean reopen sees the same messages plus the appended ones.
    with mqlite.open(str(root), read_only=True) as reader:
        again = _read_store(reader.store)
    for key, seqs in queues.items():
        assert again[key][: len(seqs)] == seqs
        assert len(again[key]) == len(seqs) + 1

    assert not index_problems, f"the key index is wrong after recovery: {index_problems[:5]}"



def _segment_first_store_time(path: Path) -> int:
    """STORETIMESTAMP of a commit-log segment's first record (0 while it has none)."""
    from mqlite.record import HEADER

    with open(path, "rb") as f:
        head = f.read(HEADER.size)
    return HEADER.unpack(head)[11] if len(head) == HEADER.size else 0


def test_kill9_under_sync_flush_leaves_a_current_checkpoint(tmp_path: Path) -> None:
    # The checkpoint is what RocketMQ's own recovery (a real broker taking the directory
    # over) starts from: after a kill -9 it must vouch for recent records, not read 0.
    from mqlite.checkpoint import StoreCheckpoint

    root = tmp_path / "store"
    acks: list[Ack] = []
    # Store times 20 ms apart at every clock reading: segments are seconds of store time apart.
    with Child(str(root), "write", "SYNC_FLUSH", "11", "0", "1", "120", "0", "20") as child:
        deadline = time.monotonic() + ACK_DEADLINE
        while True:
            line = child.readline(deadline)
            assert line is not None and line != "DONE", f"the writer stopped early:\n{child.stderr()}"
            kind, topic, qid, qoff, seq = line.split()
            acks.append((topic, int(qid), int(qoff), int(seq)))
            if len(acks) % 50:
                continue
            segments = sorted((root / "commitlog").iterdir())
            if len(segments) < 3:
                continue
            cp = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
            # Wait (on acknowledgements, not time) until the checkpoint vouches for the second segment.
            if cp.index_msg_timestamp and cp.min_timestamp() >= _segment_first_store_time(segments[1]) > 0:
                break
        child.kill()
        for line in child.lines_until_eof(time.monotonic() + ACK_DEADLINE):
            kind, topic, qid, qoff, seq = line.split()
            acks.append((topic, int(qid), int(qoff), int(seq)))

    cp = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
    with mqlite.StoreReader(str(root)) as reader:
        newest = max(reader.store_timestamp(topic, qid, reader.max_offset(topic, qid) - 1)
                     for topic in reader.topics() for qid in reader.queue_ids(topic))
    for name in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
        assert 0 < getattr(cp, name) <= newest, f"checkpoint {name} is {getattr(cp, name)}, newest record {newest}"
    with mqlite.open(str(root)) as broker:
        report = broker.store.recovery
        assert report.abnormal and report.checkpoint_damage is None
        assert report.start_offset > 0, "recovery went back to the first segment"
        _check_against_acks(_read_store(broker.store), acks, {0: 1})
