"""A Hypothesis state machine: `MessageStore` against a list model, across clean and crash restarts.

The model keeps, per (topic, queue id), the messages in queue order, and every record ever
appended (prepared transaction records included, which have no queue offset but are indexed).
Rules put single messages, batches and prepared records, read with random offsets and counts
(checking RocketMQ's statuses: FOUND, OFFSET_TOO_SMALL, OFFSET_OVERFLOW_ONE,
OFFSET_OVERFLOW_BADLY, NO_MATCHED_LOGIC_QUEUE), query by key and by UNIQ_KEY, close and reopen
cleanly, and crash.

A crash is simulated without killing the process: once the store is dispatched and flushed the
directory is copied while the writer still holds it (so the copy keeps its `abort` marker), the
original is closed, and the copy is optionally damaged the way a crash leaves a store:

* ``cq_tail``: the newest units of one consume queue are zeroed (queue files not flushed);
* ``torn_tail``: the start of a half-written record follows the last record (a torn append);
* ``lost_tail``: the newest records of the last segment are zeroed (log pages not flushed), and the
  checkpoint is set back to before them. Those messages are gone from the model too; their queue
  offsets are handed out again.

Reopening the copy must take the abnormal-recovery path and agree with the model.
`verify_store` runs every few steps and after every reopen; the reference decoder
(`tests/refformat.py`) cross-checks the whole store at every clean close and at the end.

Time comes from a manual clock advanced by each put, so every record of an example lies within
RocketMQ's 3-second checkpoint margin and abnormal recovery always re-dispatches from the first
segment (the path that keeps the index complete; see reference section 5.3).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqlite.clock import ManualClock
from mqlite import GetMessageStatus
from mqlite.config import StoreConfig
from mqlite.store import MessageStore
from mqlite.verify import VerifyReport, verify_store

sys.path.insert(0, os.path.dirname(__file__))
import refformat as rf  # noqa: E402
from support import TINY_STORE  # noqa: E402

#: The tiny store (its segments, consume-queue files and index roll within an example), and never
#: let a full disk delete segments mid-test.
SETTINGS: dict[str, Any] = {**TINY_STORE, "clean_file_forcibly_enable": False}
TOPICS = ["TopicA", "TopicB"]
ABSENT_TOPIC = "TopicNeverWritten"
QUEUES = [0, 1]
KEY_POOL = ["k0", "k1", "k2", "k3", "k4"]
TAGS = [None, "TagA", "TagB"]
VERIFY_EVERY = 6
DAMAGE_KINDS = ["none", "cq_tail", "torn_tail", "lost_tail"]



@dataclass
class Rec:
    """One appended record as the model remembers it."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    commit_log_offset: int
    queue_offset: int  # 0 for prepared records
    store_timestamp: int
    prepared: bool = False
    keys: list[str] = field(default_factory=list)


def make_body(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def make_properties(tags: str | None, keys: list[str], uniq: str | None) -> dict[str, str]:
    props: dict[str, str] = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = " ".join(keys)
    if uniq:
        props["UNIQ_KEY"] = uniq
    return props


body_sizes = st.one_of(st.integers(0, 64), st.integers(1500, 9000))
message_specs = st.tuples(
    body_sizes,
    st.integers(0, 2**16),
    st.sampled_from(TAGS),
    st.lists(st.sampled_from(KEY_POOL), max_size=2, unique=True),
    st.booleans(),  # with a UNIQ_KEY
)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="mqlite-stateful-")
        self.generation = 0
        self.path = os.path.join(self.tmp, "store0")
        self.clock = ManualClock(time.time_ns() // 1_000_000)
        self.queues: dict[tuple[str, int], list[Rec]] = {}
        self.records: list[Rec] = []  # every live record in commit-log order
        self.uniq_counter = 0
        self.steps = 0
        self.store: MessageStore | None = self._open()

    # -- helpers ---------------------------------------------------------------------------------------
    def _open(self) -> MessageStore:
        return MessageStore(self.path, StoreConfig(**SETTINGS), clock=self.clock)

    def _next_uniq(self) -> str:
        self.uniq_counter += 1
        return f"UNIQ{self.generation:02d}{self.uniq_counter:06d}"

    def _tick(self) -> None:
        self.clock.ms += 1

    def _remember(self, rec: Rec) -> None:
        self.records.append(rec)
        if not rec.prepared:
            queue = self.queues.setdefault((rec.topic, rec.queue_id), [])
            assert rec.queue_offset == len(queue), (rec, len(queue))
            queue.append(rec)

    def _check_verify(self) -> None:
        assert self.store is not None
        assert self.store.wait_dispatched()
        self._assert_verified()

    def _assert_verified(self) -> None:
        report = verify_store(self.path)
        assert report.ok, report.summary()

    def _cross_check(self) -> None:
        assert rf.cross_check_store(self.path, hash_slot_num=SETTINGS["max_hash_slot_num"]) == []

    # -- writing -----------------------------------------------------------------------------------------
    @rule(topic=st.sampled_from(TOPICS), queue_id=st.sampled_from(QUEUES), spec=message_specs)
    def put(self, topic: str, queue_id: int, spec: tuple) -> None:
        assert self.store is not None
        size, seed, tags, keys, with_uniq = spec
        body = make_body(size, seed)
        props = make_properties(tags, keys, self._next_uniq() if with_uniq else None)
        self._tick()
        result = self.store.put(topic, queue_id, body, props or None)
        expected_qoff = len(self.queues.get((topic, queue_id), []))
        assert result.queue_offset == expected_qoff
        assert result.store_timestamp == self.clock.ms
        self._remember(Rec(topic, queue_id, body, props, result.commit_log_offset, result.queue_offset,
                           result.store_timestamp, keys=keys))

    @rule(topic=st.sampled_from(TOPICS), queue_id=st.sampled_from(QUEUES),
          specs=st.lists(message_specs, min_size=1, max_size=6))
    def put_batch(self, topic: str, queue_id: int, specs: list[tuple]) -> None:
        assert self.store is not None
        bodies, props_list, keys_list = [], [], []
        for size, seed, tags, keys, with_uniq in specs:
            bodies.append(make_body(size, seed))
            props_list.append(make_properties(tags, keys, self._next_uniq() if with_uniq else None))
            keys_list.append(keys)
        self._tick()
        result = self.store.put_batch(topic, queue_id, bodies, props_list)
        first = len(self.queues.get((topic, queue_id), []))
        assert result.queue_offset == first
        assert result.msg_num == len(bodies)
        assert result.commit_log_offsets is not None and len(result.commit_log_offsets) == len(bodies)
        for i, (body, props, keys) in enumerate(zip(bodies, props_list, keys_list)):
            self._remember(Rec(topic, queue_id, body, props, result.commit_log_offsets[i], first + i,
                               result.store_timestamp, keys=keys))

    @rule(topic=st.sampled_from(TOPICS), queue_id=st.sampled_from(QUEUES), key=st.sampled_from(KEY_POOL),
          seed=st.integers(0, 2**16))
    def put_prepared(self, topic: str, queue_id: int, key: str, seed: int) -> None:
        """A half message: stored and indexed, but no queue offset and no consume-queue unit."""
        assert self.store is not None
        body = make_body(32, seed)
        props = {"KEYS": key, "TRAN_MSG": "true"}
        self._tick()
        result = self.store.put(topic, queue_id, body, props, sys_flag=0x4)
        assert result.queue_offset == 0
        self._remember(Rec(topic, queue_id, body, props, result.commit_log_offset, 0, result.store_timestamp,
                           prepared=True, keys=[key]))

    # -- reading -------------------------------------------------------------------------------------------
    @rule(topic=st.sampled_from([*TOPICS, ABSENT_TOPIC]), queue_id=st.sampled_from([*QUEUES, 2]),
          offset=st.integers(-2, 40), count=st.integers(1, 32))
    def get(self, topic: str, queue_id: int, offset: int, count: int) -> None:
        assert self.store is not None
        assert self.store.wait_dispatched()
        result = self.store.get_messages(topic, queue_id, offset, count)
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            assert result.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, result
            assert result.next_begin_offset == 0 and not result.messages
            return
        n = len(queue)
        if n == 0:
            # Every message of the queue was lost in a crash. RocketMQ keeps the (now empty) queue:
            # NO_MESSAGE_IN_QUEUE; a queue whose directory went too is NO_MATCHED_LOGIC_QUEUE.
            assert result.status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                                     GetMessageStatus.NO_MATCHED_LOGIC_QUEUE), result
            assert result.next_begin_offset == 0 and not result.messages
            return
        assert (result.min_offset, result.max_offset) == (0, n), result
        if offset < 0:
            expected = (GetMessageStatus.OFFSET_TOO_SMALL, 0)
        elif offset == n:
            expected = (GetMessageStatus.OFFSET_OVERFLOW_ONE, n)
        elif offset > n:
            expected = (GetMessageStatus.OFFSET_OVERFLOW_BADLY, n)
        else:
            want = queue[offset : offset + count]
            assert result.status is GetMessageStatus.FOUND, result
            assert result.next_begin_offset == offset + len(want)
            got = [(m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.body, m.properties)
                   for m in result.messages]
            assert got == [(r.topic, r.queue_id, r.queue_offset, r.commit_log_offset, r.body, r.properties)
                           for r in want]
            return
        assert (result.status, result.next_begin_offset) == expected, result
        assert not result.messages

    @rule(topic=st.sampled_from(TOPICS), key=st.sampled_from([*KEY_POOL, "never-used"]))
    def query_key(self, topic: str, key: str) -> None:
        assert self.store is not None
        assert self.store.wait_dispatched()
        found = self.store.query_message(topic, key, 64)
        want = sorted((r.commit_log_offset for r in self.records if r.topic == topic and key in r.keys),
                      reverse=True)[:64]
        assert [m.commit_log_offset for m in found] == want
        for m in found:
            assert key in m.properties["KEYS"].split(" ")

    @precondition(lambda self: any("UNIQ_KEY" in r.properties for r in self.records))
    @rule(data=st.data())
    def query_uniq_key(self, data: st.DataObject) -> None:
        assert self.store is not None
        assert self.store.wait_dispatched()
        rec = data.draw(st.sampled_from([r for r in self.records if "UNIQ_KEY" in r.properties]))
        found = self.store.query_message(rec.topic, rec.properties["UNIQ_KEY"])
        assert [(m.commit_log_offset, m.body, m.msg_id) for m in found] == [
            (rec.commit_log_offset, rec.body, rec.properties["UNIQ_KEY"])]

    # -- restarts ----------------------------------------------------------------------------------------------
    @rule()
    def close_reopen(self) -> None:
        assert self.store is not None
        self.store.close()
        self.store = None
        self._cross_check()
        assert not os.path.exists(os.path.join(self.path, "abort"))
        self.store = self._open()
        assert self.store.last_exit_ok and not self.store.recovery.abnormal
        self._check_verify()

    @rule(damage=st.sampled_from(DAMAGE_KINDS), pick=st.integers(0, 2**16))
    def crash_reopen(self, damage: str, pick: int) -> None:
        store = self.store
        assert store is not None
        assert store.wait_dispatched()
        store.flush()
        self.generation += 1
        copy = os.path.join(self.tmp, f"store{self.generation}")
        shutil.copytree(self.path, copy)  # the writer is idle: every file is consistent
        store.close()
        self.store = None
        assert os.path.exists(os.path.join(copy, "abort")), "an open store keeps its abort marker"
        if damage == "cq_tail":
            self._zero_queue_tail(copy, pick)
        elif damage == "torn_tail":
            self._tear_log_tail(copy)
        elif damage == "lost_tail":
            self._lose_log_tail(copy, pick)
        self.path = copy
        self.store = self._open()
        assert not self.store.last_exit_ok and self.store.recovery.abnormal
        assert self.store.recovery.damaged_tail == (damage == "torn_tail" and bool(self.records))
        # Recovery cut the log where the model's records end, and left nothing of the damage behind.
        self._check_verify()

    def _zero_queue_tail(self, copy: str, pick: int) -> None:
        live = sorted(key for key, recs in self.queues.items() if recs)
        if not live:
            return
        topic, queue_id = live[pick % len(live)]
        size = SETTINGS["consumequeue_file_size"]
        n = len(self.queues[(topic, queue_id)])
        for qoff in range(max(0, n - 1 - pick % 3), n):
            start = qoff * 20 - (qoff * 20) % size
            path = os.path.join(copy, "consumequeue", topic, str(queue_id), f"{start:020d}")
            with open(path, "r+b") as f:
                f.seek(qoff * 20 - start)
                f.write(bytes(20))

    def _log_end(self, copy: str) -> tuple[int, int]:
        scan = rf.scan_commitlog(copy)
        assert scan.problems == []
        return scan.end_offset, SETTINGS["commitlog_file_size"]

    def _tear_log_tail(self, copy: str) -> None:
        if not self.records:
            return
        end, seg = self._log_end(copy)
        start = end - end % seg
        # The first 8 bytes of a 300-byte record whose remaining bytes never reached the disk.
        with open(os.path.join(copy, "commitlog", f"{start:020d}"), "r+b") as f:
            f.seek(end - start)
            f.write(struct.pack(">ii", 300, rf.MESSAGE_MAGIC_CODE_V1))

    def _lose_log_tail(self, copy: str, pick: int) -> None:
        if not self.records:
            return
        end, seg = self._log_end(copy)
        last_start = end - end % seg
        in_last = [r for r in self.records if r.commit_log_offset >= last_start]
        if not in_last:
            return
        cut = in_last[-1 - pick % min(len(in_last), 4)].commit_log_offset
        with open(os.path.join(copy, "commitlog", f"{last_start:020d}"), "r+b") as f:
            f.seek(cut - last_start)
            f.write(bytes(end - cut))
        self.records = [r for r in self.records if r.commit_log_offset < cut]
        # Pages that were never flushed: the checkpoint on disk predates them too (the consume-queue
        # pages, written back by the OS on their own, may still hold units for them).
        kept_ts = self.records[-1].store_timestamp if self.records else 0
        cp = rf.decode_checkpoint(copy)
        with open(os.path.join(copy, "checkpoint"), "wb") as f:
            f.write(rf.encode_checkpoint(min(cp["physic_msg_timestamp"], kept_ts),
                                         min(cp["logics_msg_timestamp"], kept_ts),
                                         min(cp["index_msg_timestamp"], kept_ts),
                                         cp["master_flushed_offset"], min(cp["confirm_phy_offset"], cut)))
        for key, recs in self.queues.items():
            self.queues[key] = [r for r in recs if r.commit_log_offset < cut]

    # -- invariants and teardown ---------------------------------------------------------------------------------
    @invariant()
    def verify_every_few_steps(self) -> None:
        self.steps += 1
        if self.store is not None and self.steps % VERIFY_EVERY == 0:
            self._check_verify()

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.close()
                self.store = None
                self._assert_verified()
                self._cross_check()
        finally:
            if self.store is not None:
                self.store.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreStateMachine = StoreMachine.TestCase


@pytest.mark.parametrize("damage", DAMAGE_KINDS)
def test_each_crash_kind_once(damage: str) -> None:
    """A fixed walk through every crash kind, so each is exercised whatever Hypothesis draws."""
    machine = StoreMachine()
    try:
        for i in range(40):
            machine.put(TOPICS[i % 2], i % 2, (3000 if i % 3 else 10, i, TAGS[i % 3], [KEY_POOL[i % 5]], i % 2 == 0))
        machine.put_batch("TopicA", 1, [(100, 7, "TagA", ["k1"], True), (5000, 8, None, [], False)])
        machine.put_prepared("TopicB", 0, "k2", 9)
        machine.crash_reopen(damage, 5)
        machine.put("TopicA", 0, (20, 1, "TagB", ["k3"], True))
        for topic in TOPICS:
            for qid in QUEUES:
                machine.get(topic, qid, 0, 32)
        for key in KEY_POOL:
            machine.query_key("TopicA", key)
        machine.close_reopen()
        machine.get("TopicA", 0, 0, 32)
    finally:
        machine.teardown()


# -- recovery leaves nothing of the damage behind -------------------------------------------------------------
def _crash_copy(store: MessageStore, src: str, dst: str) -> None:
    """The crash simulation of the machine: copy an idle, flushed, still-open store (abort included)."""
    assert store.wait_dispatched()
    store.flush()
    shutil.copytree(src, dst)
    store.close()
    assert os.path.exists(os.path.join(dst, "abort"))


def _lose_and_reuse(tmp_path: Path, bodies: list[bytes], lost_index: int) -> tuple[VerifyReport, list[tuple[str, bytes]]]:
    """Crash after `bodies` went to T/0, losing records `lost_index`.. from the log (their units were
    flushed); recover; append a same-sized record of topic U at the lost offset; restart cleanly.
    Returns verify's report right after recovery and what T/0 serves after the restart."""
    config = StoreConfig(**SETTINGS)
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    store = MessageStore(src, config)
    results = [store.put("T", 0, body) for body in bodies]
    _crash_copy(store, src, dst)
    lost = results[lost_index]
    end = results[-1].commit_log_offset + results[-1].wrote_bytes
    with open(os.path.join(dst, "commitlog", f"{0:020d}"), "r+b") as f:
        f.seek(lost.commit_log_offset)
        f.write(bytes(end - lost.commit_log_offset))
    with MessageStore(dst, config) as store:
        assert store.recovery.abnormal
        assert store.recovery.process_offset == lost.commit_log_offset
        assert store.max_offset("T", 0) == lost_index
        report = verify_store(dst)
        reused = store.put("U", 0, bodies[lost_index])  # another topic's record where the lost one was
        assert (reused.commit_log_offset, reused.wrote_bytes) == (lost.commit_log_offset, lost.wrote_bytes)
    with MessageStore(dst, config) as store:
        served = [(m.topic, m.body) for m in store.get_messages("T", 0, 0).messages]
    return report, served


def test_lost_tail_recovery_leaves_no_stale_queue_units(tmp_path: Path) -> None:
    # The OS lost the last record's pages; the consume queue had been flushed. Abnormal recovery
    # cuts the log before B and must drop B's unit from the queue file, not only from memory.
    report, served = _lose_and_reuse(tmp_path, [b"A" * 10, b"B" * 10], lost_index=1)
    assert served == [("T", b"A" * 10)], "queue T/0 serves topic U's record through the stale unit"
    assert report.ok, report.summary()


def test_lost_tail_recovery_drops_a_queue_file_whose_first_unit_is_cut(tmp_path: Path) -> None:
    report, served = _lose_and_reuse(tmp_path, [b"only" * 3], lost_index=0)
    assert served == [], "queue T/0 serves topic U's record through the stale unit"
    assert report.ok, report.summary()


def test_recovery_from_a_torn_append_leaves_a_store_that_verifies(tmp_path: Path) -> None:
    config = StoreConfig(**SETTINGS)
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    store = MessageStore(src, config)
    last = store.put("T", 0, b"x" * 50)
    _crash_copy(store, src, dst)
    end = last.commit_log_offset + last.wrote_bytes
    with open(os.path.join(dst, "commitlog", f"{0:020d}"), "r+b") as f:
        f.seek(end)
        f.write(struct.pack(">ii", 300, rf.MESSAGE_MAGIC_CODE_V1))  # a header whose body never arrived
    with MessageStore(dst, config) as store:
        assert store.recovery.abnormal and store.recovery.damaged_tail
        assert store.recovery.process_offset == end
    report = verify_store(dst)
    assert report.ok, report.summary()
    assert rf.scan_commitlog(dst).problems == []


# -- the index after restarts -----------------------------------------------------------------------------------
def test_clean_reopen_does_not_index_a_trailing_prepared_record_twice(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with MessageStore(path, StoreConfig(**SETTINGS)) as store:
        store.put("T", 0, b"normal", {"KEYS": "n"})
        half = store.put("T", 0, b"half", {"KEYS": "k"}, sys_flag=0x4)
    for _ in range(2):
        with MessageStore(path, StoreConfig(**SETTINGS)) as store:
            pass
    with MessageStore(path, StoreConfig(**SETTINGS)) as store:
        found = [m.commit_log_offset for m in store.query_message("T", "k")]
    assert found == [half.commit_log_offset]
