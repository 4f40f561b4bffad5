"""A full disk: sends are refused with `DiskFullError`, nothing acknowledged is lost, nothing crashes.

The store runs on a small tmpfs (`mount -t tmpfs -o size=8m`; the suite runs as root, and a
test that cannot mount is skipped with the reason). A ballast file fills the disk to its
last page. Before mqlite reserved space ahead of its mapped writes, a store into a mapped
page with no block behind it killed the process with SIGBUS, so the scenarios run in a
child process (this file run as a script) and the parent checks how the child ended: a
regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import errno
import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import mqlite
from mqlite import DiskFullError, LocalTransactionState, Message, MessageExt, Producer, TransactionProducer
from mqlite.clock import ManualClock

TMPFS_SIZE = "8m"
TOPIC = "FullDisk"
DELAYED_TOPIC = "FullDiskDelayed"
#: Small files, so an 8 MiB disk holds the store, and index files roll (and fail to) while it is full.
#: No clean-up round runs during a scenario: refusals there come from the reservation itself.
SETTINGS: dict[str, Any] = {
    "commitlog_file_size": 1 << 20,
    "consumequeue_file_size": 20 * 500,
    "max_hash_slot_num": 64,
    "max_index_num": 400,
    "clean_resource_interval": 3600.0,
}


# -- the parent side ----------------------------------------------------------------------------------
@contextmanager
def _tmpfs() -> Iterator[str]:
    """A fresh tmpfs of `TMPFS_SIZE`, unmounted afterwards; skips the test where mounting is impossible."""
    where = tempfile.mkdtemp(prefix="mqlite-fulldisk-")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", where],
                              capture_output=True, text=True)
    except OSError as exc:
        os.rmdir(where)
        pytest.skip(f"cannot mount a tmpfs for the full-disk test: {exc}")
    if done.returncode != 0:
        os.rmdir(where)
        reason = f"cannot mount a tmpfs for the full-disk test: {done.stderr.strip() or done.returncode}"
        print(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", where], check=False)
        os.rmdir(where)


def _run_child(scenario: str, root: str) -> dict[str, Any]:
    """Run `scenario` in a child process; its last stdout line is a JSON report."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, os.path.abspath(__file__), scenario, root], capture_output=True,
                          text=True, env=env, timeout=120)
    if done.returncode < 0:
        pytest.fail(f"the child was killed by {signal.Signals(-done.returncode).name}:\n{done.stderr[-4000:]}")
    assert done.returncode == 0, f"the child failed:\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_full_disk_refuses_sends_keeps_acknowledged_messages_and_resumes() -> None:
    with _tmpfs() as root:
        report = _run_child("full", root)
    assert report["acked"] > 100  # the disk held this many before it was full
    message = report["error"]
    assert "no space left on the disk holding" in message and "% used" in message
    assert "Free space on that disk" in message and "nothing was written" in message
    assert report["async_error"] == "DiskFullError"
    assert report["delay_delivered_while_full"] == 0 and report["delay_delivered_after"] == 1
    assert report["index_stalled_while_full"]
    # Reopening on a full disk opened the store (reads work, sends are refused by the ratio check).
    assert report["reopen_full"] == "opened"
    assert "disk_space_warning_level_ratio 0.9" in report["reopen_error"]
    assert report["read_after_reopen"] == report["acked_total"]


def test_index_work_left_by_a_full_disk_at_close_is_done_at_the_next_open() -> None:
    with _tmpfs() as root:
        report = _run_child("index", root)
    assert report["acked"] > 100 and report["stalled_at_close"]
    assert report["pending"] >= 512 and not report["reput_has_work"]
    assert report["recovered_abnormally"] and report["missing_from_index"] == 0


def test_a_transaction_whose_end_the_full_disk_refuses_is_settled_by_the_check_back() -> None:
    with _tmpfs() as root:
        report = _run_child("txn", root)
    assert report["state"] == "COMMIT_MESSAGE" and report["real_while_full"] == 0
    assert report["check_while_full"] == "DiskFullError"
    assert report["checked"] >= 1 and report["real_after"] == [b"committed later".decode()]


def test_recovery_after_a_crash_on_a_full_disk_opens_or_refuses_and_loses_nothing() -> None:
    with _tmpfs() as root:
        report = _run_child("crash", root)
    assert report["acked"] > 100
    assert report["reopen_full"] == "opened" or (
        "no space left on the disk" in report["reopen_error"] and "read_only=True" in report["reopen_error"])
    assert report["missing_from_index"] == 0


def test_ratio_above_usage_refuses_sends_until_space_returns() -> None:
    with _tmpfs() as root:
        report = _run_child("ratio", root)
    assert "fuller" in report["error"] and "disk_space_warning_level_ratio 0.05" in report["error"]
    assert report["refused_state_unchanged"]
    assert report["sent_after_space_returned"]


# -- the child side -----------------------------------------------------------------------------------
def _fill(path: str) -> None:
    """Write `path` until the disk refuses more (to its last page)."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12):
            while True:
                try:
                    f.write(bytes(chunk))
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break


def _state(broker: mqlite.Broker) -> tuple[Any, ...]:
    """What a refused send must not change: the log's end, the queue offsets, the queues' ends
    (a queue first tried by the refused send may now exist, empty: its end reads 0 as before)."""
    store = broker.store
    queues = {key: store.max_offset(*key) for key in store.consume_queues if store.max_offset(*key)}
    return store.commitlog.max_offset, dict(store.commitlog.topic_queue_table), queues


def _bodies(broker: mqlite.Broker, topic: str) -> dict[str, bytes]:
    """msg_id -> body of every message of `topic`, read through the consume queues."""
    store = broker.store
    found: dict[str, bytes] = {}
    for queue_id in store.queue_ids(topic):
        offset = store.min_offset(topic, queue_id)
        while True:
            got = store.get_messages(topic, queue_id, offset, 256)
            if not got.messages:
                break
            found.update((m.msg_id, m.body) for m in got.messages)
            offset = got.next_begin_offset
    return found


def _send_some(producer: Producer, acked: dict[str, bytes], count: int) -> None:
    for i in range(count):
        body = f"small {len(acked)}".encode()
        acked[producer.send(Message(TOPIC, body)).msg_id] = body


def _send_until_refused(producer: Producer, acked: dict[str, bytes], start: int) -> DiskFullError:
    for i in range(start, start + 100_000):
        body = f"message {i} ".encode() * 20
        try:
            acked[producer.send(Message(TOPIC, body)).msg_id] = body
        except DiskFullError as exc:
            return exc
    raise AssertionError("100000 sends on an 8 MiB disk and none refused")


def _scenario_full(root: str) -> dict[str, Any]:
    store_dir, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    clock = ManualClock()
    report: dict[str, Any] = {}
    acked: dict[str, bytes] = {}
    with mqlite.open(store_dir, clock=clock, **SETTINGS) as broker, Producer(broker, "full-disk") as producer:
        producer.send(Message(DELAYED_TOPIC, b"delayed", delay_time_level=1))
        broker.create_topic(TOPIC, 4)
        _send_some(producer, acked, 8)  # the topic's queues have files
        _fill(ballast)
        try:  # a topic created on a full disk: its config cannot be written
            broker.create_topic("FullDiskNew", 4)
            raise AssertionError("a topic was created on a full disk")
        except DiskFullError as exc:
            report["topic_error"] = str(exc)
        error = _send_until_refused(producer, acked, 0)
        report["acked"] = len(acked)
        report["error"] = str(error)
        before = _state(broker)
        # Every send path refuses, and none of them changes anything.
        for attempt in range(3):
            try:
                producer.send(Message(TOPIC, b"x" * 300))
            except DiskFullError:
                pass
            else:
                raise AssertionError("a send went through on a full disk")
        try:
            producer.send_batch([Message(TOPIC, b"y" * 300) for _ in range(10)])
            raise AssertionError("a batch went through on a full disk")
        except DiskFullError:
            pass
        report["async_error"] = type(producer.send_async(Message(TOPIC, b"z" * 300)).exception(30)).__name__
        producer.send_oneway(Message(TOPIC, b"w" * 300))  # logged, not raised
        producer.send_async(Message(TOPIC, b"v" * 300)).exception(30)  # the pool ran the oneway before it
        assert _state(broker) == before, (before, _state(broker))
        assert _bodies(broker, TOPIC) == acked, "an acknowledged message is missing or changed"
        # The delay service cannot put the due message: it keeps it and tries again later.
        clock.advance(2_000)
        assert broker.delay is not None and broker.delay.wait_round(30)
        report["delay_delivered_while_full"] = len(_bodies(broker, DELAYED_TOPIC))
        assert broker.delay.is_alive
        report["index_stalled_while_full"] = not broker.store.wait_dispatched(30)
        # Space returns: sends, the delay service and the index go on.
        os.unlink(ballast)
        _send_some(producer, acked, 50)
        clock.advance(20_000)
        assert broker.delay.wait_round(30)
        report["delay_delivered_after"] = len(_bodies(broker, DELAYED_TOPIC))
        assert broker.store.wait_dispatched(30)
        missing = [msg_id for msg_id in acked if not broker.query_message(TOPIC, msg_id)]
        assert not missing, f"{len(missing)} acknowledged messages are not in the key index"
        assert _bodies(broker, TOPIC) == acked
    report["acked_total"] = len(acked)
    # Full again, then reopen: the store opens and reads, and refuses sends.
    _fill(ballast)
    try:
        broker = mqlite.open(store_dir, clock=clock, **SETTINGS)
    except DiskFullError as exc:
        report["reopen_full"] = f"refused: {exc}"
    else:
        with broker, Producer(broker, "full-disk") as producer:
            report["reopen_full"] = "opened"
            assert _bodies(broker, TOPIC) == acked
            try:
                producer.send(Message(TOPIC, b"refused"))
                raise AssertionError("a send went through on a full disk after reopening")
            except DiskFullError as exc:
                report["reopen_error"] = str(exc)
    os.unlink(ballast)
    with mqlite.open(store_dir, clock=clock, **SETTINGS) as broker:
        bodies = _bodies(broker, TOPIC)
        assert bodies == acked
        report["read_after_reopen"] = len(bodies)
    return report


def _scenario_index(root: str) -> dict[str, Any]:
    store_dir, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    report: dict[str, Any] = {}
    acked: dict[str, bytes] = {}
    with mqlite.open(store_dir, **SETTINGS) as broker, Producer(broker, "index") as producer:
        broker.create_topic(TOPIC, 4)
        _send_some(producer, acked, 8)
        _fill(ballast)
        _send_until_refused(producer, acked, 0)
        report["stalled_at_close"] = not broker.store.wait_dispatched(30) and broker.store.index_stalled
        # Work waits, but a stalled index does not keep the reput thread spinning on it.
        report["pending"] = len(broker.store.commitlog.dispatch_queue)
        report["reput_has_work"] = broker.store._reput.has_work()
    # Closed on the full disk with index work left: the next open (space back) indexes it.
    os.unlink(ballast)
    with mqlite.open(store_dir, **SETTINGS) as broker:
        report["recovered_abnormally"] = broker.store.recovery.abnormal
        assert broker.store.wait_dispatched(30)
        missing = [msg_id for msg_id in acked if not broker.query_message(TOPIC, msg_id)]
        report["missing_from_index"] = len(missing)
        assert _bodies(broker, TOPIC) == acked
    report["acked"] = len(acked)
    return report


class _FillingListener:
    """A local transaction that fills the disk before it commits (the broker's end is then refused)."""

    def __init__(self, broker: mqlite.Broker, ballast: str) -> None:
        self.broker, self.ballast = broker, ballast
        self.checked = 0

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        _fill(self.ballast)
        self.broker.store.check_disk_space()  # what the clean-up round does
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked += 1
        return LocalTransactionState.COMMIT_MESSAGE


def _scenario_txn(root: str) -> dict[str, Any]:
    store_dir, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    clock = ManualClock()
    report: dict[str, Any] = {}
    with mqlite.open(store_dir, clock=clock, **SETTINGS) as broker:
        listener = _FillingListener(broker, ballast)
        with TransactionProducer(broker, "full-disk-tx", listener=listener) as producer:
            broker.create_topic(TOPIC, 4)
            sent = producer.send_message_in_transaction(Message(TOPIC, b"committed later"))
            report["state"] = sent.local_transaction_state.name
            report["real_while_full"] = len(_bodies(broker, TOPIC))
            assert broker.transactions is not None
            clock.advance(60_000)
            try:  # the check-back cannot re-append the half while the disk is full
                broker.transactions.check()
                report["check_while_full"] = "ran"
            except DiskFullError:
                report["check_while_full"] = "DiskFullError"
            os.unlink(ballast)
            clock.advance(60_000)
            broker.transactions.check()
            report["checked"] = listener.checked
            report["real_after"] = [body.decode() for body in _bodies(broker, TOPIC).values()]
    return report


def _scenario_crash_writer(root: str) -> dict[str, Any]:
    """Send, fill the disk, send until refused, then die without closing (as a kill -9 would)."""
    acked: dict[str, bytes] = {}
    broker = mqlite.open(os.path.join(root, "store"), **SETTINGS)
    producer = Producer(broker, "crash")
    producer.start()
    broker.create_topic(TOPIC, 4)
    _send_some(producer, acked, 8)
    _fill(os.path.join(root, "ballast"))
    _send_until_refused(producer, acked, 0)
    print(json.dumps({"acked": {msg_id: body.decode() for msg_id, body in acked.items()}}), flush=True)
    os._exit(0)


def _scenario_crash(root: str) -> dict[str, Any]:
    store_dir, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    writer = subprocess.run([sys.executable, os.path.abspath(__file__), "crash-writer", root], capture_output=True,
                            text=True, timeout=120)
    assert writer.returncode == 0, f"the writer failed ({writer.returncode}):\n{writer.stderr[-4000:]}"
    acked = {msg_id: body.encode() for msg_id, body in
             json.loads(writer.stdout.strip().splitlines()[-1])["acked"].items()}
    report: dict[str, Any] = {"acked": len(acked)}
    try:  # recovery after the crash, on the full disk
        broker = mqlite.open(store_dir, **SETTINGS)
    except DiskFullError as exc:
        report["reopen_full"] = "refused"
        report["reopen_error"] = str(exc)
        with mqlite.open(store_dir, read_only=True) as reader:  # what the error suggests
            assert _bodies(reader, TOPIC) == acked
    else:
        with broker:
            report["reopen_full"] = "opened"
            assert _bodies(broker, TOPIC) == acked
    os.unlink(ballast)
    with mqlite.open(store_dir, **SETTINGS) as broker:
        assert _bodies(broker, TOPIC) == acked
        assert broker.store.wait_dispatched(30)
        report["missing_from_index"] = sum(1 for msg_id in acked if not broker.query_message(TOPIC, msg_id))
    return report


def _scenario_ratio(root: str) -> dict[str, Any]:
    store_dir, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    report: dict[str, Any] = {}
    with open(ballast, "wb") as f:
        f.write(bytes(1 << 20))  # 1 MiB of 8: 12.5% used
    with mqlite.open(store_dir, disk_space_warning_level_ratio=0.05, **SETTINGS) as broker, \
            Producer(broker, "ratio") as producer:
        before = _state(broker)
        try:
            producer.send(Message(TOPIC, b"refused"))
            raise AssertionError("a send went through above disk_space_warning_level_ratio")
        except DiskFullError as exc:
            report["error"] = str(exc)
        report["refused_state_unchanged"] = _state(broker) == before and not _bodies(broker, TOPIC)
        os.unlink(ballast)
        result = producer.send(Message(TOPIC, b"accepted"))
        report["sent_after_space_returned"] = _bodies(broker, TOPIC) == {result.msg_id: b"accepted"}
    return report


if __name__ == "__main__":
    # A child killed by a signal (SIGBUS: a write into a page the full disk could not give) prints where it
    # was, so the failure says more than the signal's name.
    faulthandler.enable()
    scenarios = {"full": _scenario_full, "index": _scenario_index, "txn": _scenario_txn, "ratio": _scenario_ratio,
                 "crash": _scenario_crash, "crash-writer": _scenario_crash_writer}
    print(json.dumps(scenarios[sys.argv[1]](sys.argv[2])))
