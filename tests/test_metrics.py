"""mqlite.metrics: the snapshot's figures against the store, the Prometheus text, readers, connections,
the flush latency histogram and the recovery history.

The expected figures are computed from what the test sent, committed and read back (each message's
`store_size` and `store_timestamp`), never from the code under test.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import SMALL_STORE, deadline
from support import no_leftover_threads  # noqa: F401

import mqlite
from mqlite import recoveryhistory
from mqlite.clock import ManualClock
from mqlite.metrics import Counters, MetricsSnapshot, StoreFigures, collect, render_prometheus
from mqlite.recovery import RecoveryReport
from mqlite.recoveryhistory import record_recovery, recovery_history, recovery_history_path

#: Topics and their queue counts; "orders" gets more messages than "audit".
TOPICS = {"orders": 3, "audit": 2}
NOW_MS = 4_000_000_000_000  # a fixed "now" after every store time, for the lag latency


def _send(broker: mqlite.Broker, counts: dict[str, int], start: int = 0) -> None:
    """Send `counts[topic]` messages of growing sizes to each topic, round-robin over its queues."""
    with mqlite.Producer(broker, group="pg") as producer:
        for topic, n in counts.items():
            for i in range(start, start + n):
                mq = mqlite.MessageQueue(topic, broker.broker_name, i % TOPICS[topic])
                producer.send(mqlite.Message(topic, b"x" * (10 + 7 * i), tags=f"t{i % 3}", keys=f"k{i}"),
                              queue=mq)


def _stored(broker: mqlite.Broker, topic: str, queue_id: int) -> list[mqlite.MessageExt]:
    """Every message of a queue, read back with a pull (size and store time as stored)."""
    mq = mqlite.MessageQueue(topic, broker.broker_name, queue_id)
    found: list[mqlite.MessageExt] = []
    while True:
        result = broker.pull("reader", mq, len(found), 32)
        if not result.msg_found_list:
            return found
        found += result.msg_found_list


def _commit(broker: mqlite.Broker, group: str, topic: str, offsets: dict[int, int]) -> None:
    for queue_id, offset in offsets.items():
        broker.commit_offset(group, mqlite.MessageQueue(topic, broker.broker_name, queue_id), offset)


def _expected(broker: mqlite.Broker, committed: dict[tuple[str, str], dict[int, int]],
              before: tuple[dict[tuple[str, str], dict[int, int]], ...] = ()) -> dict[str, Any]:
    """Messages and bytes in per topic, and out, bytes out, lag and lag latency per (group, topic), from
    the messages themselves. `before`: the offsets committed before (out counts the highest seen); a queue
    without a committed offset lags by nothing (RocketMQ's ConsumerLagCalculator)."""
    stored = {(t, q): _stored(broker, t, q) for t, n in TOPICS.items() for q in range(n)}
    topics = {t: (sum(len(stored[t, q]) for q in range(n)), sum(m.store_size for q in range(n) for m in stored[t, q]))
              for t, n in TOPICS.items()}
    groups = {}
    for (group, topic), table in committed.items():
        queues = range(TOPICS[topic])
        out = {q: max(t.get((group, topic), {}).get(q, 0) for t in (*before, committed)) for q in queues}
        unconsumed = [stored[topic, q][table[q]] for q in queues if q in table and table[q] < len(stored[topic, q])]
        groups[group, topic] = (
            sum(out.values()),
            sum(m.store_size for q in queues for m in stored[topic, q][: out[q]]),
            sum(len(stored[topic, q]) - table[q] for q in queues if q in table),
            NOW_MS - min(m.store_timestamp for m in unconsumed) if unconsumed else 0)
    return {"topics": topics, "groups": groups}


def _figures(snap: MetricsSnapshot) -> dict[str, Any]:
    """The snapshot's figures in `_expected`'s shape."""
    return {"topics": {t.topic: (t.messages_in, t.bytes_in) for t in snap.topics if t.topic in TOPICS},
            "groups": {(g.group, g.topic): (g.messages_out, g.bytes_out, g.lag_messages, g.lag_latency_ms)
                       for g in snap.groups}}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[mqlite.Broker]:
    # Every reading of the clock moves it on by 1 ms: each message has a store time of its own.
    with mqlite.open(str(tmp_path / "mq"), clock=ManualClock(step_ms=1), **SMALL_STORE) as opened:
        for topic, queues in TOPICS.items():
            opened.create_topic(topic, queues)
        yield opened


COMMITTED = {("cg1", "orders"): {0: 3, 1: 1, 2: 0}, ("cg1", "audit"): {0: 2, 1: 2}, ("cg2", "orders"): {1: 4}}


def _commit_all(broker: mqlite.Broker, committed: dict[tuple[str, str], dict[int, int]]) -> None:
    for (group, topic), table in committed.items():
        _commit(broker, group, topic, table)


def test_snapshot_matches_the_store(broker: mqlite.Broker) -> None:
    _send(broker, {"orders": 12, "audit": 4})
    _commit_all(broker, COMMITTED)
    figures = StoreFigures(broker.store)  # kept between calls, as Broker.metrics() keeps its own
    snap = collect(broker, broker.offset_snapshot(), store=figures, now_ms=NOW_MS)
    assert _figures(snap) == _expected(broker, COMMITTED)
    assert snap.topic_number == len(broker.topic_list()) and snap.consumer_group_number == 2
    assert {t.topic: t.messages_stored for t in snap.topics if t.topic in TOPICS} == {"orders": 12, "audit": 4}
    assert _figures(broker.metrics())["topics"] == _figures(snap)["topics"]

    # More sends and commits: the byte sums and store times read before are reused only where still true.
    _send(broker, {"orders": 7, "audit": 3}, start=12)
    moved = {**COMMITTED, ("cg1", "orders"): {0: 5, 1: 6, 2: 1}, ("cg2", "orders"): {1: 2}}  # cg2 went back
    _commit_all(broker, moved)
    again = collect(broker, broker.offset_snapshot(), store=figures, now_ms=NOW_MS)
    assert _figures(again) == _expected(broker, moved, before=(COMMITTED,))  # cg2's out stays at 4
    assert _figures(broker.metrics())["topics"] == _figures(again)["topics"]


def test_byte_sums_follow_a_deleted_and_refilled_topic(broker: mqlite.Broker) -> None:
    """The byte sums kept between calls count a deleted and written again queue's units afresh, on top."""
    _send(broker, {"audit": 4})
    first = _expected(broker, {})["topics"]["audit"]
    assert _figures(broker.metrics())["topics"]["audit"] == first
    broker.delete_topic("audit")
    broker.create_topic("audit", TOPICS["audit"])
    _send(broker, {"audit": 6}, start=50)  # the same queue offsets again, and more, of other sizes
    messages, size = _expected(broker, {})["topics"]["audit"]
    assert _figures(broker.metrics())["topics"]["audit"] == (messages, first[1] + size)


#: Small segments and queue files, so 600 messages of ~330 bytes fill several; retention deletes at once.
RETENTION_STORE = {"commitlog_file_size": 1 << 16, "consumequeue_file_size": 20 * 64,
                   "max_hash_slot_num": 64, "max_index_num": 256, "file_reserved_time": 0.0}


def test_counters_keep_what_retention_deleted_writer_and_reader(tmp_path: Path) -> None:
    """After retention deleted the oldest segments, the counters of a writer and of a long-lived reader keep
    the bytes they counted, and the reader's min offsets (messages stored, the oldest message's age) follow
    the writer's."""
    path = str(tmp_path / "mq")
    # A day ahead of the files' modification times, so every full segment has expired.
    clock = ManualClock(int(time.time() * 1000) + 86_400_000)
    with mqlite.open(path, clock=clock, **RETENTION_STORE) as writer, \
            mqlite.open(path, read_only=True) as reader:
        for _ in range(6):
            writer.put_messages("T", 0, [b"x" * 300] * 100, [None] * 100)
        _commit(writer, "g", "T", {0: 550})
        assert writer.offsets is not None and writer.offsets.persist()
        sizes = [m.store_size for m in _stored(writer, "T", 0)]
        before = {"writer": writer.metrics(), "reader": reader.metrics()}
        assert writer.store.delete_expired_files(force=True) > 0
        low = writer.store.min_offset("T", 0)
        assert 0 < low < 550
        oldest = writer.store.look_message_by_offset(writer.store.commitlog.min_offset).store_timestamp
        for name, snap in (("writer", writer.metrics()), ("reader", reader.metrics())):
            (topic,) = [t for t in snap.topics if t.topic == "T"]
            (group,) = snap.groups
            assert (topic.messages_in, topic.messages_stored, topic.bytes_in) == (600, 600 - low, sum(sizes)), name
            assert (group.messages_out, group.bytes_out, group.lag_messages) == (550, sum(sizes[:550]), 50), name
            assert snap.store is not None and before[name].store is not None
            assert snap.store.earliest_store_timestamp == oldest, name
            assert _counters(render_prometheus(before[name])) == _counters(render_prometheus(snap)), name


def _counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of the counter families of a Prometheus text (histograms left out)."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) if family.type == "counter"
            for sample in family.samples}


def test_messages_out_keeps_the_highest_offset_committed(broker: mqlite.Broker) -> None:
    """A group resetting its offsets back lowers the lag, never the counters (with the files or without)."""
    _send(broker, {"orders": 12})
    _commit(broker, "cg", "orders", {0: 4, 1: 3})
    stored = {q: _stored(broker, "orders", q) for q in range(3)}
    counters = Counters()
    for snap in (broker.metrics(), collect(broker, broker.offset_snapshot(), counters=counters)):
        assert [(g.messages_out, g.lag_messages) for g in snap.groups] == [(7, 1)]  # queue 2: no offset, no lag
    _commit(broker, "cg", "orders", {0: 1, 1: 0})  # reset back
    for snap in (broker.metrics(), collect(broker, broker.offset_snapshot(), counters=counters)):
        assert [(g.messages_out, g.lag_messages) for g in snap.groups] == [(7, 7)]
    (group,) = broker.metrics().groups
    assert group.bytes_out == sum(m.store_size for m in stored[0][:4] + stored[1][:3])
    # Consumed past the old mark again: counted from there.
    _commit(broker, "cg", "orders", {0: 4, 1: 4})
    (group,) = broker.metrics().groups
    assert (group.messages_out, group.lag_messages) == (8, 0)
    assert group.bytes_out == sum(m.store_size for m in stored[0][:4] + stored[1][:4])
    # Without a kept collector each call stands alone: what is committed now.
    _commit(broker, "cg", "orders", {0: 0, 1: 0})
    assert [g.messages_out for g in collect(broker, broker.offset_snapshot()).groups] == [0]


def test_dead_letters_retries_and_system_topics_are_labelled(broker: mqlite.Broker) -> None:
    _send(broker, {"orders": 2})
    broker.create_topic("sequenced", 2, order=True)  # an orderly topic: RocketMQ's FIFO message type
    broker.put_message("sequenced", 1, b"in order")
    msg = _stored(broker, "orders", 0)[0]
    broker.send_message_back("cg1", msg, delay_level=-1)  # straight to %DLQ%cg1
    broker.send_message_back("cg1", msg)  # creates %RETRY%cg1 (the message waits in the delay topic)
    broker.commit_offset("cg1", mqlite.MessageQueue("%RETRY%cg1", broker.broker_name, 0), 0)
    snap = broker.metrics()
    kinds = {t.topic: t.kind for t in snap.topics}
    assert kinds["orders"] == "user" and kinds["%DLQ%cg1"] == "dlq" and kinds["%RETRY%cg1"] == "retry"
    assert [g.is_retry for g in snap.groups if g.topic == "%RETRY%cg1"] == [True]
    families = {f.name: f for f in text_string_to_metric_families(render_prometheus(snap))}
    dlq = [(s.labels, s.value) for s in families["rocketmq_send_to_dlq_messages"].samples]
    assert dlq == [({"consumer_group": "cg1", "is_system": "false"}, 1)]
    # RocketMQ's in-counters leave retry and dead-letter topics out; the delay topic is a system topic.
    assert {s.labels["topic"]: (s.labels["message_type"], s.labels["is_system"], s.value)
            for s in families["rocketmq_messages_in"].samples} == \
        {"orders": ("normal", "false", 2), "audit": ("normal", "false", 0), "SCHEDULE_TOPIC_XXXX": ("delay", "true", 1),
         "sequenced": ("fifo", "false", 1)}


def _parsed(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_prometheus_text_parses_and_equals_the_snapshot(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path / "mq"), flush_disk_type="SYNC_FLUSH", **SMALL_STORE) as broker:
        for topic, queues in TOPICS.items():
            broker.create_topic(topic, queues)
        _send(broker, {"orders": 6, "audit": 3})
        _commit_all(broker, COMMITTED)
        snap = broker.metrics()
        first_stored = _stored(broker, "orders", 0)[0].store_timestamp  # the first message sent
    text = render_prometheus(snap)
    families = _parsed(text)
    for name in ("rocketmq_messages_in", "rocketmq_throughput_in", "rocketmq_messages_out", "rocketmq_throughput_out"):
        assert families[name].type == "counter" and all(s.name == name + "_total" for s in families[name].samples)
    assert "# TYPE rocketmq_messages_in_total counter\n" in text and "# HELP rocketmq_messages_in_total " in text

    def samples(name: str) -> dict[tuple[str, ...], float]:
        return {tuple(s.labels.values()): s.value for s in families[name].samples}

    assert samples("rocketmq_messages_in") == {(t.topic, t.message_type, "false"): t.messages_in for t in snap.topics}
    assert samples("rocketmq_throughput_in") == {(t.topic, t.message_type, "false"): t.bytes_in for t in snap.topics}
    by_group = {(g.topic, g.group, "false", "false"): g for g in snap.groups}
    assert samples("rocketmq_messages_out") == {k: g.messages_out for k, g in by_group.items()}
    assert samples("rocketmq_throughput_out") == {k: g.bytes_out for k, g in by_group.items()}
    assert samples("rocketmq_consumer_lag_messages") == {k: g.lag_messages for k, g in by_group.items()}
    assert samples("rocketmq_consumer_lag_latency") == {k: g.lag_latency_ms for k, g in by_group.items()}
    assert samples("rocketmq_topic_number") == {(): snap.topic_number}
    assert samples("rocketmq_consumer_group_number") == {(): snap.consumer_group_number}
    facts = snap.store
    assert facts is not None and facts.flush_latency is not None and facts.flush_behind_bytes is not None
    assert samples("rocketmq_storage_size") == {("local", "disk"): facts.total_disk_bytes}
    assert samples("rocketmq_storage_flush_behind_bytes") == {("local", "disk"): facts.flush_behind_bytes}
    assert samples("mqlite_storage_file_bytes") == {(k,): v for k, v in facts.disk_bytes.items()}
    assert facts.disk_bytes["commitlog"] > 0 and facts.disk_bytes["consumequeue"] > 0
    assert samples("mqlite_store_info") == {("mqlite", "SYNC_FLUSH"): 1}
    assert facts.earliest_store_timestamp == first_stored
    assert samples("rocketmq_storage_message_reserve_time") == {("local", "disk"): snap.timestamp_ms - first_stored}
    # The flush histogram: cumulative buckets up to +Inf, which equals _count; _sum as observed.
    histogram = families["mqlite_storage_flush_latency_seconds"]
    assert histogram.type == "histogram"
    buckets = [(float(s.labels["le"]), s.value) for s in histogram.samples if s.name.endswith("_bucket")]
    assert [b for b, _ in buckets] == [*facts.flush_latency.bounds, float("inf")]
    assert [n for _, n in buckets] == sorted(n for _, n in buckets)
    assert buckets[-1][1] == facts.flush_latency.count > 0
    sums = {s.name: s.value for s in histogram.samples if not s.name.endswith("_bucket")}
    assert sums == {"mqlite_storage_flush_latency_seconds_count": facts.flush_latency.count,
                    "mqlite_storage_flush_latency_seconds_sum": pytest.approx(facts.flush_latency.sum)}


def test_label_values_are_escaped(tmp_path: Path) -> None:
    """RocketMQ's store takes any topic name (the clients' rules are the clients'); quotes, backslashes and
    newlines in topic and group names come back from the parser unchanged."""
    topic, group = 'we"ird\\topic\nname', 'gr"oup\\\nx'
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL_STORE) as broker:
        for size in (5, 50, 500):
            broker.store.put(topic, 0, b"b" * size)  # the store's own put: no client name rules
    with mqlite.open(path, read_only=True) as reader:
        snap = collect(reader, {f"{topic}@{group}": {0: 1}}, store=reader.store, now_ms=NOW_MS)
    families = _parsed(render_prometheus(snap))
    (sample,) = families["rocketmq_messages_in"].samples
    assert sample.labels["topic"] == topic and sample.value == 3
    (lag,) = families["rocketmq_consumer_lag_messages"].samples
    assert (lag.labels["topic"], lag.labels["consumer_group"], lag.value) == (topic, group, 2)


def test_a_reader_beside_the_live_writer_sees_the_same_figures(broker: mqlite.Broker) -> None:
    _send(broker, {"orders": 9, "audit": 5})
    _commit_all(broker, COMMITTED)
    assert broker.offsets is not None and broker.offsets.persist()  # what the writer does every few seconds
    written = broker.metrics()
    with mqlite.open(broker.path, read_only=True) as reader:
        seen = reader.metrics()
        # (Lag latency counts from each call's own "now".)
        assert _figures(seen)["topics"] == _figures(written)["topics"]
        assert {k: v[:3] for k, v in _figures(seen)["groups"].items()} == \
            {k: v[:3] for k, v in _figures(written)["groups"].items()}
        assert seen.store is not None and written.store is not None
        assert seen.store.flush_latency is None and seen.store.flush_behind_bytes is None  # the writer's own
        assert written.store.flush_latency is not None
        _send(broker, {"audit": 2}, start=5)  # the writer goes on; the reader follows on its next look
        broker.create_topic("late", 2)
        broker.put_message("late", 1, b"new queue files")
        later = {t.topic: (t.queues, t.messages_in) for t in reader.metrics().topics}
        assert later["audit"] == (2, 7) and later["late"] == (2, 1)


def test_over_a_connection(broker: mqlite.Broker) -> None:
    broker.create_topic("idle", 2)  # queues without messages count as queues (0/0), as topicStatus lists them
    _send(broker, {"orders": 5, "audit": 2})
    _commit_all(broker, COMMITTED)
    local = collect(broker, broker.offset_snapshot(), store=broker.store, now_ms=NOW_MS)
    server = broker.serve("127.0.0.1:0")
    try:
        with deadline(60), mqlite.connect(server.address) as remote:
            snap = collect(remote, remote.consumer_offset_table(), now_ms=NOW_MS)
            own = remote.metrics()  # `Broker.metrics()`'s counterpart: the same figures
            assert dataclasses.replace(own, timestamp_ms=NOW_MS, groups=snap.groups) == snap
            assert [g.messages_out for g in own.groups] == [g.messages_out for g in snap.groups]
    finally:
        server.close()
    assert snap.store is None and all(t.bytes_in is None for t in snap.topics)
    # Queue offsets from `topic_status` over the wire, from the files locally: the same figures.
    assert [t for t in snap.topics] == [dataclasses.replace(t, bytes_in=None) for t in local.topics]
    assert {(g.group, g.topic): (g.messages_out, g.lag_messages, g.lag_latency_ms) for g in snap.groups} == \
        {(g.group, g.topic): (g.messages_out, g.lag_messages, g.lag_latency_ms) for g in local.groups}
    families = _parsed(render_prometheus(snap))
    # What needs the files is left out, not rendered as zero.
    assert "rocketmq_throughput_in" not in families and "rocketmq_storage_size" not in families
    assert "rocketmq_messages_in" in families and "rocketmq_consumer_lag_messages" in families


def test_flush_latency_counts_flushes_not_messages(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path / "mq"), flush_disk_type="SYNC_FLUSH", **SMALL_STORE) as broker:
        def flushes() -> int:
            facts = broker.metrics().store
            assert facts is not None and facts.flush_latency is not None
            return facts.flush_latency.count

        before = flushes()
        with mqlite.Producer(broker, group="pg") as producer:
            for i in range(5):
                producer.send(mqlite.Message("orders", b"x" * 100))
        after_sends = flushes()
        assert after_sends >= before + 5  # one thread: each send waits for its own flush
        # One batch of 300 messages is one append and one flush (the periodic flush may add a round).
        broker.put_messages("orders", 0, [b"y" * 50] * 300, [None] * 300)
        after_batch = flushes()
        assert after_sends < after_batch <= after_sends + 3


def test_recovery_history_records_clean_and_crashed_opens(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL_STORE) as broker:
        broker.put_messages("orders", 0, [b"a"] * 10, [None] * 10)
    with mqlite.open(path, **SMALL_STORE):
        pass
    Path(path, "abort").write_bytes(b"")  # as a crashed writer leaves it
    with mqlite.open(path, **SMALL_STORE) as broker:
        snap = broker.metrics()
    history = recovery_history(path)
    assert [(r.seq, r.abnormal, r.abnormal_total) for r in history] == [(1, False, 0), (2, False, 0), (3, True, 1)]
    assert history[2].records_scanned >= 10 and history[2].process_offset > 0
    assert all(r.pid == os.getpid() for r in history)
    assert snap.store is not None and (snap.store.recoveries, snap.store.abnormal_recoveries) == (3, 1)
    samples = {s.labels["abnormal"]: s.value for s in _parsed(render_prometheus(snap))["mqlite_recoveries"].samples}
    assert samples == {"false": 2, "true": 1}
    # A reader writes nothing; a torn line is skipped, and the file keeps its last few records.
    with mqlite.open(path, read_only=True):
        pass
    assert len(recovery_history(path)) == 3
    with open(recovery_history_path(path), "a", encoding="utf-8") as f:
        f.write('{"seq": "4", "abnormal_total": 1, "time_ms": 1, "pid": 1, "abnormal": false}\n{"seq": 4, "abnor')
    assert [r.seq for r in recovery_history(path)] == [1, 2, 3]


def test_recovery_history_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recoveryhistory, "RECOVERY_HISTORY_LIMIT", 3)
    path = str(tmp_path / "mq")
    for _ in range(5):
        with mqlite.open(path, **SMALL_STORE):
            pass
    with open(recovery_history_path(path), encoding="utf-8") as f:
        assert [json.loads(line)["seq"] for line in f] == [3, 4, 5]


def _report(queues: int, abnormal: bool = True) -> RecoveryReport:
    """A recovery that repaired `queues` consume queues (a crash that lost them all), with long reasons."""
    report = RecoveryReport(abnormal=abnormal)
    report.queues_repaired = {f"consumequeue/topic-{i}/0": "units past the log's end: " + "x" * 300
                              for i in range(queues)}
    return report


def test_recovery_history_is_bounded_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path)
    for i in range(70):
        record_recovery(root, _report(10_000 if i % 10 == 0 else 3), time_ms=i + 1, pid=7, duration_ms=1)
    size = os.path.getsize(recovery_history_path(root))
    history = recovery_history(root)
    assert size <= recoveryhistory.RECOVERY_HISTORY_MAX_BYTES
    assert len(history) == recoveryhistory.RECOVERY_HISTORY_LIMIT and history[-1].seq == 70
    big = [r for r in history if r.queues_repaired_count == 10_000]
    assert big and all(len(r.queues_repaired) == recoveryhistory.QUEUES_LISTED for r in big)
    assert all(len(why) <= recoveryhistory.REASON_CHARS for r in history for why in r.queues_repaired.values())
    # A tighter byte bound: the oldest lines go until the file fits.
    monkeypatch.setattr(recoveryhistory, "RECOVERY_HISTORY_MAX_BYTES", 20_000)
    record_recovery(root, _report(10_000), time_ms=71, pid=7, duration_ms=1)
    assert os.path.getsize(recovery_history_path(root)) <= 20_000
    assert recovery_history(root)[-1].seq == 71


def test_recovery_history_keeps_crashes_longer_than_clean_opens(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recoveryhistory, "RECOVERY_HISTORY_LIMIT", 6)
    monkeypatch.setattr(recoveryhistory, "ABNORMAL_KEPT", 2)
    root = str(tmp_path)
    for i in range(13):  # three crashes, then ten clean opens
        record_recovery(root, _report(0, abnormal=i < 3), time_ms=i + 1, pid=7, duration_ms=1)
    history = recovery_history(root)
    assert [(r.seq, r.abnormal) for r in history] == [(2, True), (3, True), (10, False), (11, False), (12, False),
                                                      (13, False)]
    assert history[-1].abnormal_total == 3


def test_a_history_that_cannot_be_written_never_fails_the_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL_STORE):
        pass
    os.mkdir(recovery_history_path(path) + ".tmp")  # EISDIR where the history is written first
    with caplog.at_level("WARNING", logger="mqlite"), mqlite.open(path, **SMALL_STORE) as broker:
        broker.put_message("orders", 0, b"still opens")
    warnings = [r.getMessage() for r in caplog.records if "history skips it" in r.getMessage()]
    assert len(warnings) == 1 and "IsADirectoryError" in warnings[0]
    assert [r.seq for r in recovery_history(path)] == [1]
    os.rmdir(recovery_history_path(path) + ".tmp")
    # A full disk: its own wording, no temporary file left behind.

    def no_room(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", dst)

    monkeypatch.setattr(recoveryhistory.os, "replace", no_room)
    caplog.clear()
    with caplog.at_level("WARNING", logger="mqlite"):
        assert record_recovery(path, RecoveryReport(abnormal=False), time_ms=1, pid=7, duration_ms=1) is None
    assert [r.getMessage() for r in caplog.records if "no room on the disk" in r.getMessage()]
    assert not os.path.exists(recovery_history_path(path) + ".tmp")
    assert [r.seq for r in recovery_history(path)] == [1]


def test_a_scrape_reads_the_recovery_history_only_when_it_changed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import mqlite.metrics as metrics_module

    reads: list[str] = []

    def counted(root: str) -> list[recoveryhistory.RecoveryRecord]:
        reads.append(root)
        return recovery_history(root)

    monkeypatch.setattr(metrics_module, "recovery_history", counted)
    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL_STORE) as broker:
        for _ in range(3):
            facts = broker.metrics().store
            assert facts is not None and (facts.recoveries, facts.abnormal_recoveries) == (1, 0)
        assert len(reads) == 1
        record_recovery(path, RecoveryReport(abnormal=True), time_ms=1, pid=7, duration_ms=1)
        facts = broker.metrics().store
        assert facts is not None and (facts.recoveries, facts.abnormal_recoveries) == (2, 1)
        assert len(reads) == 2
