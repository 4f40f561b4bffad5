"""The Spark inbox without Spark: staged jobs handed to a live broker are stored by its `mqlite-inbox` service.

Jobs are built with the staging format's own writer (`mqlite.inbox.write_chunk`) and handed over
with `hand_off`, as a Spark commit with `.option("whenLocked", "inbox")` does from another process.
Waits poll with a deadline (the service looks every second); no test sleeps for correctness.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mqlite
from mqlite.errors import MessageNotFoundError, StoreCorruptedError
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
from mqlite.message import PROPERTY_TAGS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from mqlite.verify import verify_store

SMALL: dict[str, Any] = {"commitlog_file_size": 1 << 20, "consumequeue_file_size": 20 * 1000,
                         "max_hash_slot_num": 1000, "max_index_num": 20000}
DEADLINE = 30.0  # generous: the service looks every second


def _mqlite_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("mqlite-"))


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    assert not _mqlite_threads(), "an earlier test left mqlite threads running"
    yield
    assert not _mqlite_threads(), f"mqlite threads alive after the test: {_mqlite_threads()}"


def stage(root: str, name: str, topic: str, bodies: list[bytes], *, tags: str | None = None,
          routes: list[int] | None = None, flags: list[int] | None = None) -> tuple[str, list[str]]:
    """A staged job `<root>/spark-staging/<name>/` of one file, one chunk; returns (job dir, file names)."""
    job_dir = os.path.join(root, STAGING_DIR, name)
    os.makedirs(job_dir)
    heads = [{PROPERTY_TAGS: tags, "WAIT": "true"} if tags else {"WAIT": "true"}]
    with open(os.path.join(job_dir, "part-00000.mqsb"), "wb") as f:
        write_chunk(f, topic, int(time.time() * 1000), [len(b) for b in bodies], b"".join(bodies), heads,
                    np.zeros(len(bodies)), None if routes is None else np.array(routes), flags)
    return job_dir, ["part-00000.mqsb"]


def hand_over(root: str, name: str, topic: str, bodies: list[bytes], *, sink: dict[str, Any] | None = None,
              **kw: Any) -> str:
    """Stage a job and hand it to the inbox, as a Spark commit that found the store locked does."""
    job_dir, files = stage(root, name, topic, bodies, **kw)
    return hand_off(root, job_dir, files, len(bodies), sink)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # a poll interval, not a wait for correctness


def queue_bodies(broker: mqlite.Broker, topic: str, queue_id: int) -> list[bytes]:
    """The bodies of one queue, read with `query_message_by_offset` until the first absent offset."""
    bodies = []
    while True:
        try:
            bodies.append(bytes(broker.query_message_by_offset(topic, queue_id, len(bodies)).body))
        except MessageNotFoundError:
            return bodies


def inbox_entries(root: str) -> list[str]:
    inbox = os.path.join(root, INBOX_DIR)
    return sorted(n for n in os.listdir(inbox) if n != FAILED_DIR) if os.path.isdir(inbox) else []


def failed_entries(root: str) -> list[str]:
    failed = os.path.join(root, INBOX_DIR, FAILED_DIR)
    return sorted(os.listdir(failed)) if os.path.isdir(failed) else []


# -- the staged format ----------------------------------------------------------------------------------------------
def test_staged_chunks_round_trip(tmp_path: Path) -> None:
    _, files = stage(str(tmp_path), "job", "T", [b"a", b"", b"ccc"], tags="x", routes=[2, -1, -5], flags=[0, 7, 1])
    path = str(tmp_path / STAGING_DIR / "job" / files[0])
    [chunk] = list(read_chunks(path))
    assert (chunk.topic, chunk.rows, chunk.bare, chunk.flags) == ("T", 3, False, [0, 7, 1])
    assert chunk.bodies == [b"a", b"", b"ccc"] and chunk.head_index == [0, 0, 0]
    assert chunk.heads == [{PROPERTY_TAGS: "x", "WAIT": "true"}] and chunk.routes.tolist() == [2, -1, -5]
    [planned] = list(read_chunks(path, full=False))
    assert (planned.topic, planned.rows, planned.bodies) == ("T", 3, None)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "bad heads"])
def test_a_damaged_staged_file_is_refused_before_anything_is_stored(tmp_path: Path, damage: str) -> None:
    root = str(tmp_path / "mq")
    os.makedirs(root)
    _, files = stage(root, "job", "T", [b"x" * 100, b"y" * 100])
    path = os.path.join(root, STAGING_DIR, "job", files[0])
    data = Path(path).read_bytes()
    if damage == "truncated":
        data = data[:-10]
    elif damage == "garbage":
        data = b"not a staged file at all, no" + data
    else:
        data = data.replace(b'"WAIT":', b'"WAIT";')  # same length, no longer JSON
    Path(path).write_bytes(data)
    with pytest.raises(StoreCorruptedError):
        list(read_chunks(path, full=False))
    with mqlite.open(root, **SMALL) as broker:
        with pytest.raises(StoreCorruptedError):
            append_staged(broker, [path])
        assert broker.store.topics() == [] or all(broker.store.max_offset("T", q) == 0 for q in range(4))


# -- a live broker imports its inbox --------------------------------------------------------------------------------
def test_live_broker_imports_a_handed_over_job(tmp_path: Path) -> None:
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        broker.create_topic("T", 4)
        bodies = [f"m-{i}".encode() for i in range(10)]
        hand_over(root, "job-1", "T", bodies, tags="red", routes=[i % 2 for i in range(10)])
        wait_for(lambda: not inbox_entries(root), "the inbox to be imported")
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
        wait_for(lambda: len(queue_bodies(broker, "T", 0)) == 9, "three jobs in queue 0")
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


def test_stream_batch_from_the_inbox_is_marked_stored(tmp_path: Path) -> None:
    root = str(tmp_path / "mq")
    with mqlite.open(root, **SMALL) as broker:
        hand_over(root, "stream-q1-4-run", "S", [b"s-0"], routes=[0], sink={"query_id": "q1", "batch_id": 4})
        wait_for(lambda: committed_batch(root, "q1") == 4, "batch 4 of q1 to be recorded")
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
        Path(part).write_bytes(Path(part).read_bytes()[:-1])  # the last body byte is missing
        hand_over(root, "job-2-queue", "T", [b"q-0"], routes=[9])  # topic T has queues 0..3
        no_manifest = os.path.join(root, INBOX_DIR, f"{time.time_ns():020d}-job-3-foreign")
        os.makedirs(no_manifest)
        with caplog.at_level(logging.ERROR, logger="mqlite"):
            hand_over(root, "job-4-good", "T", [b"g-0", b"g-1"], routes=[0, 0])
            wait_for(lambda: not inbox_entries(root), "the inbox to be emptied")
            assert queue_bodies(broker, "T", 0) == [b"g-0", b"g-1"]
        assert [n.split("-", 1)[1] for n in failed_entries(root)] == ["job-1-corrupt", "job-2-queue",
                                                                      "job-3-foreign"]
        logged = [r.getMessage() for r in caplog.records if r.name == "mqlite" and r.levelno == logging.ERROR]
        assert len(logged) == 3 and all("moved to" in m for m in logged)
        assert "ends inside the bodies" in logged[0] and "queues 0..3" in logged[1]
        assert not [r for r in caplog.records if "round failed" in r.getMessage()]  # never an error in the loop
        assert all(broker.store.max_offset("T", q) == 0 for q in (1, 2, 3))
        # The service is still alive and imports the next job.
        hand_over(root, "job-5-good", "T", [b"g-2"], routes=[0])
        wait_for(lambda: len(queue_bodies(broker, "T", 0)) == 3, "a job after the bad ones")
    assert verify_store(root).ok
