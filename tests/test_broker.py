"""`mqlite.open` and the storage part of the Broker admin surface (API.md), plus the CLI.

Messages are written through `broker.store.put` (the store facade): these tests are about what
the Broker answers, how it is opened, configured and closed, and what `mqlite verify` and
`mqlite storeInfo` print.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mqlite
from mqlite import ConfigError, MessageNotFoundError, MessageQueue, MessageStore
from support import TINY_STORE as SMALL, broker_fixture


def writer(broker: mqlite.Broker) -> MessageStore:
    """The writable store under a broker (messages go in through it until producers exist)."""
    assert isinstance(broker.store, MessageStore)
    return broker.store


@pytest.fixture()
def path(tmp_path: Path) -> str:
    return str(tmp_path / "mq")


broker = broker_fixture(**SMALL)  # at `path`


def _fill(broker: mqlite.Broker) -> dict[str, list]:
    """Messages in T/0 (5), T/1 (2), T/3 (1) and Other/0 (1); returns the PutResults per queue."""
    store = writer(broker)
    results: dict[str, list] = {"T0": [], "T1": [], "T3": [], "Other": []}
    for i in range(5):
        results["T0"].append(store.put("T", 0, f"t0-{i}".encode(),
                                       {"TAGS": "TagA", "KEYS": f"key-{i} shared", "UNIQ_KEY": f"UNIQ-T0-{i}"}))
    for i in range(2):
        results["T1"].append(store.put("T", 1, f"t1-{i}".encode(), {"KEYS": "shared"}))
    results["T3"].append(store.put("T", 3, b"t3-0"))
    results["Other"].append(store.put("Other", 0, b"other", {"KEYS": "shared"}))
    assert store.wait_dispatched()
    return results


# -- offsets -----------------------------------------------------------------------------------------------------
def test_topic_status_rows(broker: mqlite.Broker) -> None:
    results = _fill(broker)
    rows = broker.topic_status("T")
    # Every queue of the topic (auto-created with 4), 0/0 for queue 2 that got no message (as mqadmin).
    assert [(r.queue_id, r.min_offset, r.max_offset) for r in rows] == [(0, 0, 5), (1, 0, 2), (2, 0, 0), (3, 0, 1)]
    newest = {0: results["T0"][-1].store_timestamp, 1: results["T1"][-1].store_timestamp, 2: 0,
              3: results["T3"][-1].store_timestamp}
    for row in rows:
        assert row.last_update_timestamp == newest[row.queue_id]
    assert broker.topic_status("NoSuchTopic") == []
    assert [r.queue_id for r in broker.topic_status("Other")] == [0]  # stored without a topic config: its files


def test_min_max_and_search_offset(broker: mqlite.Broker) -> None:
    _fill(broker)
    mq = MessageQueue("T", broker.broker_name, 0)
    assert (broker.min_offset(mq), broker.max_offset(mq)) == (0, 5)
    absent = MessageQueue("T", broker.broker_name, 2)
    assert (broker.min_offset(absent), broker.max_offset(absent), broker.search_offset(absent, 0)) == (0, 0, 0)
    times = [broker.query_message_by_offset("T", 0, i).store_timestamp for i in range(5)]
    assert times == sorted(times)
    for probe in {t + d for t in times for d in (-1, 0, 1)}:
        later = [i for i, t in enumerate(times) if t >= probe]
        # LOWER boundary: the first offset stored at or after the time; all earlier -> max offset.
        assert broker.search_offset(mq, probe) == (later[0] if later else 5), probe
    assert broker.search_offset(mq, 0) == 0
    assert broker.search_offset(mq, 2**62) == 5


def test_the_public_methods_a_server_answers_from(broker: mqlite.Broker) -> None:
    # The serving adapter reaches a broker only through these (tests/test_layers.py).
    mq, absent = MessageQueue("T", broker.broker_name, 0), MessageQueue("T", broker.broker_name, 2)
    assert broker.earliest_store_time(absent) == -1
    _fill(broker)
    first = broker.query_message_by_offset("T", 0, 0)
    assert broker.earliest_store_time(mq) == first.store_timestamp
    low, high = broker.commit_log_range()
    assert low == 0 and high > first.commit_log_offset
    assert broker.look_message_by_offset(first.commit_log_offset).msg_id == first.msg_id
    with pytest.raises(MessageNotFoundError):
        broker.look_message_by_offset(high)
    assert broker.ensure_system_topic("RMQ_SYS_TRACE_TOPIC").read_queue_nums == 1
    assert broker.ensure_system_topic("RMQ_SYS_TRACE_TOPIC") is broker.topic_config("RMQ_SYS_TRACE_TOPIC")
    with pytest.raises(mqlite.MQClientError, match="not a system topic"):
        broker.ensure_system_topic("T")
    assert broker.consumer_members("g") == [] and broker.consuming_groups("T") == []
    broker.commit_offset("g", mq, 3)
    assert broker.offset_snapshot() == {"T@g": {0: 3}} and broker.consuming_groups("T") == ["g"]
    broker.request_rebalance("g")  # no member: nothing to wake


# -- messages ----------------------------------------------------------------------------------------------------
def test_view_message_by_offset_msg_id_and_by_uniq_key(broker: mqlite.Broker) -> None:
    results = _fill(broker)
    put = results["T0"][2]
    by_offset = broker.view_message(put.offset_msg_id)
    assert (by_offset.topic, by_offset.queue_id, by_offset.queue_offset, by_offset.body) == ("T", 0, 2, b"t0-2")
    assert by_offset.offset_msg_id == put.offset_msg_id and len(put.offset_msg_id) == 32
    assert by_offset.msg_id == "UNIQ-T0-2"  # the client id wins when set
    assert broker.view_message(put.offset_msg_id.lower()).body == b"t0-2"
    by_uniq = broker.view_message("UNIQ-T0-2")
    assert (by_uniq.commit_log_offset, by_uniq.body) == (put.commit_log_offset, b"t0-2")
    plain = broker.view_message(results["T3"][0].offset_msg_id)
    assert plain.body == b"t3-0" and plain.msg_id == plain.offset_msg_id  # no UNIQ_KEY


def test_view_message_unknown_ids_raise_message_not_found(broker: mqlite.Broker) -> None:
    results = _fill(broker)
    real = results["T0"][1]
    inside_a_record = mqlite.message.create_offset_msg_id(bytes([127, 0, 0, 1]), 10911, real.commit_log_offset + 1)
    past_the_end = mqlite.message.create_offset_msg_id(bytes([127, 0, 0, 1]), 10911, 10**9)
    other_host = mqlite.message.create_offset_msg_id(bytes([10, 0, 0, 9]), 10911, real.commit_log_offset)
    for msg_id in (inside_a_record, past_the_end, other_host, "UNIQ-NOPE", "not even hex"):
        with pytest.raises(MessageNotFoundError) as info:
            broker.view_message(msg_id)
        assert isinstance(info.value, KeyError) and isinstance(info.value, mqlite.MQLiteError)
        assert msg_id in str(info.value)
    with pytest.raises(KeyError):  # callers may catch it as a plain KeyError
        broker.view_message("UNIQ-NOPE")
    with pytest.raises(mqlite.MQClientError):
        broker.view_message("")


def test_query_message_and_query_message_by_offset(broker: mqlite.Broker) -> None:
    results = _fill(broker)
    found = broker.query_message("T", "shared")
    assert [m.body for m in found] == [b"t1-1", b"t1-0", b"t0-4", b"t0-3", b"t0-2", b"t0-1", b"t0-0"]  # newest first
    assert [m.body for m in broker.query_message("T", "shared", max_num=2)] == [b"t1-1", b"t1-0"]
    assert [m.body for m in broker.query_message("Other", "shared")] == [b"other"]
    assert [m.body for m in broker.query_message("T", "key-3")] == [b"t0-3"]
    assert [m.body for m in broker.query_message("T", "UNIQ-T0-4")] == [b"t0-4"]
    assert broker.query_message("T", "absent") == []
    # The index keeps store times in whole seconds after the file's first entry (time_diff), so the
    # [begin, end] filter is exact on the low side and up to a second generous on the high side.
    ts = results["T0"][3].store_timestamp
    until = broker.query_message("T", "shared", end=ts)
    assert b"t0-3" in [m.body for m in until]
    assert all(m.store_timestamp < ts + 1000 for m in until)
    assert all(m.store_timestamp >= ts for m in broker.query_message("T", "shared", begin=ts))
    msg = broker.query_message_by_offset("T", 1, 1)
    assert (msg.body, msg.queue_offset, msg.commit_log_offset) == (b"t1-1", 1, results["T1"][1].commit_log_offset)
    for topic, qid, offset in (("T", 1, 2), ("T", 1, -1), ("T", 2, 0), ("Nope", 0, 0)):
        with pytest.raises(MessageNotFoundError):
            broker.query_message_by_offset(topic, qid, offset)


# -- read-only beside a writer ---------------------------------------------------------------------------------
def test_read_only_broker_beside_a_writer(broker: mqlite.Broker, path: str) -> None:
    results = _fill(broker)
    with pytest.raises(mqlite.StoreLockedError):
        mqlite.open(path)  # one writer per directory
    with mqlite.open(path, read_only=True) as reader:
        assert reader.read_only and not broker.read_only
        assert [(r.queue_id, r.max_offset) for r in reader.topic_status("T")] == [(0, 5), (1, 2), (2, 0), (3, 1)]
        assert reader.view_message("UNIQ-T0-1").body == b"t0-1"
        assert reader.view_message(results["T1"][0].offset_msg_id).body == b"t1-0"
        assert [m.body for m in reader.query_message("Other", "shared")] == [b"other"]
        # The writer goes on; the reader sees what was dispatched since.
        writer(broker).put("T", 1, b"t1-2")
        writer(broker).put("Late", 0, b"late", {"KEYS": "late-key"})
        assert writer(broker).wait_dispatched()
        writer(broker).flush()
        assert [(r.queue_id, r.max_offset) for r in reader.topic_status("T")] == [(0, 5), (1, 3), (2, 0), (3, 1)]
        assert reader.query_message_by_offset("T", 1, 2).body == b"t1-2"
        assert [r.max_offset for r in reader.topic_status("Late")] == [1]
        assert reader.query_message_by_offset("Late", 0, 0).body == b"late"
    assert not broker.closed  # closing the reader leaves the writer alone
    assert broker.query_message_by_offset("Late", 0, 0).body == b"late"


def test_read_only_open_of_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(mqlite.StoreCorruptedError, match="does not exist"):
        mqlite.open(str(tmp_path / "nothing-here"), read_only=True)
    assert not (tmp_path / "nothing-here").exists()


# -- configuration ----------------------------------------------------------------------------------------------
def test_reopen_with_another_format_setting_names_both_values(path: str) -> None:
    with mqlite.open(path, **SMALL):
        pass
    with pytest.raises(ConfigError) as info:
        mqlite.open(path, commitlog_file_size=128 * 1024)
    text = str(info.value)
    assert "commitlog_file_size" in text and str(64 * 1024) in text and str(128 * 1024) in text
    assert isinstance(info.value, mqlite.MQClientError) and isinstance(info.value, ValueError)
    with mqlite.open(path, commitlog_file_size=64 * 1024) as again:  # the same value is fine
        assert again.store.config.commitlog_file_size == 64 * 1024
    with mqlite.open(path) as again:  # and so is no value: the stored one is used
        assert again.store.config.commitlog_file_size == 64 * 1024


def test_unknown_setting_suggests_the_right_name(path: str) -> None:
    with pytest.raises(ConfigError, match="did you mean 'commitlog_file_size'"):
        mqlite.open(path, commitlog_filesize=1 << 20)
    with pytest.raises(ConfigError, match="unknown setting 'no_such_thing'"):
        mqlite.open(path, read_only=False, no_such_thing=1)
    assert not os.path.exists(os.path.join(path, "config", "store.json"))
    with pytest.raises(ConfigError, match="flush_disk_type"):
        mqlite.open(path, flush_disk_type="SOMETIMES_FLUSH")


def test_store_json_is_written_and_reused(path: str) -> None:
    with mqlite.open(path, **SMALL, broker_name="b1", max_message_size=12345, flush_disk_type="SYNC_FLUSH"):
        pass
    stored_path = os.path.join(path, "config", "store.json")
    with open(stored_path) as f:
        stored = json.load(f)
    assert (stored["broker_name"], stored["max_message_size"], stored["commitlog_file_size"]) == ("b1", 12345, 64 * 1024)
    with mqlite.open(path) as again:  # no keywords: everything comes back from store.json
        assert again.broker_name == "b1"
        assert again.store.config.max_message_size == 12345
        assert again.store.config.flush_disk_type == "SYNC_FLUSH"
        assert again.store.config.max_hash_slot_num == 64
    with mqlite.open(path, broker_name="b2") as again:  # a non-format setting may be overridden ...
        assert again.broker_name == "b2" and again.store.config.max_message_size == 12345
    with open(stored_path) as f:
        assert json.load(f)["broker_name"] == "b2"  # ... and the override is what is stored now
    with mqlite.open(path, read_only=True) as reader:
        assert reader.broker_name == "b2" and reader.store.config.commitlog_file_size == 64 * 1024


def test_with_closes_and_close_is_idempotent(path: str) -> None:
    with mqlite.open(path, **SMALL) as b:
        writer(b).put("T", 0, b"x")
        assert not b.closed
    assert b.closed and writer(b).closed
    assert not os.path.exists(os.path.join(path, "abort"))  # a clean shutdown
    b.close()
    b.close()
    with pytest.raises(mqlite.IllegalStateError):
        b.topic_status("T")
    with pytest.raises(mqlite.IllegalStateError):
        writer(b).put("T", 0, b"y")
    assert "closed" in repr(b)
    # The lock went with the close: the directory opens again, and the message is there.
    with mqlite.open(path) as again:
        assert again.query_message_by_offset("T", 0, 0).body == b"x"
    reader = mqlite.open(path, read_only=True)
    reader.close()
    reader.close()
    assert reader.closed


_LOCKF_HOLDER = """
import fcntl, os, sys
fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a Java broker's FileChannel.tryLock: a POSIX lock, no pid
except OSError:
    print("BUSY", flush=True)
    sys.exit()
print("LOCKED", flush=True)
sys.stdin.read()
"""


def _lockf_holder(path: str) -> subprocess.Popen[str]:
    """A child process that tries a POSIX `lockf` on the store's lock file and, if it gets it, holds it."""
    return subprocess.Popen([sys.executable, "-c", _LOCKF_HOLDER, path], text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)


def test_a_java_brokers_posix_lock_keeps_the_store(path: str) -> None:
    """`lockf` and `flock` do not see each other on Linux: the store takes both, so a store a Java
    broker holds is refused, and a Java broker cannot take a store mqlite holds."""
    with mqlite.open(path, **SMALL):
        pass
    child = _lockf_holder(path)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "LOCKED"
        with pytest.raises(mqlite.StoreLockedError, match=r"open for writing by another process") as raised:
            mqlite.open(path)
        assert raised.value.pid is None
    finally:
        child.kill()
        child.wait()
    with mqlite.open(path):
        # A second lock from this process is refused before it opens (and closes) a descriptor of the
        # file, which would drop the POSIX lock: the store stays locked for the Java broker.
        with pytest.raises(mqlite.StoreLockedError, match=r"this process"):
            mqlite.open(path)
        busy = _lockf_holder(path)
        assert busy.communicate(timeout=60)[0].strip() == "BUSY"
    free = _lockf_holder(path)
    try:
        assert free.stdout is not None and free.stdout.readline().strip() == "LOCKED"  # released on close
    finally:
        free.kill()
        free.wait()


# -- command line ---------------------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.path.join(os.path.dirname(__file__), "..", "src"),
                                                                    os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("MQLITE_STORE", None)
    return subprocess.run([sys.executable, "-m", "mqlite", *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture()
def closed_store(path: str) -> tuple[str, dict[str, list]]:
    with mqlite.open(path, **SMALL) as b:
        results = _fill(b)
    return path, results


def test_cli_verify_good_store(closed_store: tuple[str, dict[str, list]]) -> None:
    path, _ = closed_store
    done = _cli("verify", path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout and "9 records" in done.stdout
    done = _cli("verify", path, "--json")
    assert done.returncode == 0
    [row] = json.loads(done.stdout)
    assert row["ok"] is True and row["records"] == 9 and row["problems"] == []


def test_cli_verify_damaged_store(closed_store: tuple[str, dict[str, list]]) -> None:
    path, results = closed_store
    victim = results["T0"][3].commit_log_offset
    with open(os.path.join(path, "commitlog", f"{0:020d}"), "r+b") as f:
        f.seek(victim + 4)  # MAGICCODE
        magic = f.read(4)
        f.seek(victim + 4)
        f.write(bytes(b ^ 0xFF for b in magic))
    done = _cli("verify", path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "PROBLEMS" in done.stdout and f"damaged record at offset {victim}" in done.stdout
    done = _cli("verify", path, "--json")
    assert done.returncode == 1
    [row] = json.loads(done.stdout)
    assert row["ok"] is False and any(str(victim) in p for p in row["problems"])


def test_cli_verify_missing_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-store")
    done = _cli("verify", missing)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0] and "Traceback" not in done.stderr


def test_cli_store_info_json(closed_store: tuple[str, dict[str, list]]) -> None:
    path, _ = closed_store
    done = _cli("storeInfo", path, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, list) and len(doc) == 1
    info = doc[0]
    assert info["commitlog_file_size"] == 64 * 1024 and info["clean_shutdown"] is True
    rows = {(q["topic"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in info["queues"]}
    assert rows == {("T", 0): (0, 5), ("T", 1): (0, 2), ("T", 3): (0, 1), ("Other", 0): (0, 1)}
    done = _cli("--store", path, "storeInfo")  # the plain table, store given with --store
    assert done.returncode == 0 and "#Topic" in done.stdout


def test_a_read_only_broker_maps_a_queue_created_after_it_opened(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path) as writer, mqlite.Producer(writer, "pg") as producer:
        writer.create_topic("T", 2)
        producer.send(mqlite.Message("T", b"a"), queue=mqlite.MessageQueue("T", writer.broker_name, 1))
        with mqlite.open(path, read_only=True) as reader:
            producer.send(mqlite.Message("T", b"b"), queue=mqlite.MessageQueue("T", writer.broker_name, 0))
            q0 = mqlite.MessageQueue("T", reader.broker_name, 0)
            assert reader.max_offset(q0) == 1  # queue 0 did not exist when the reader opened
            assert reader.query_message_by_offset("T", 0, 0).body == b"b"
            assert reader.max_offset(mqlite.MessageQueue("T", reader.broker_name, 7)) == 0  # no such queue


def test_topic_status_lists_every_queue_of_the_topic_even_unwritten_ones(tmp_path: Path) -> None:
    # mqadmin topicStatus shows each read queue, 0/0 for one that never got a message.
    with mqlite.open(str(tmp_path / "mq")) as broker:
        broker.create_topic("z", 4)
        broker.put_message("z", 1, b"x")
        rows = broker.topic_status("z")
        assert [(r.queue_id, r.min_offset, r.max_offset) for r in rows] == [(0, 0, 0), (1, 0, 1), (2, 0, 0), (3, 0, 0)]
        assert rows[1].last_update_timestamp > 0 and rows[0].last_update_timestamp == 0
