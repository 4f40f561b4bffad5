"""Readers beside a live writer in another process, and the writer lock across processes.

A writer child (`_crashchild.py ... write ASYNC_FLUSH`) appends continuously while this
process opens `StoreReader`s, refreshes them and reads every queue from offset 0: every
message must be complete and valid, offsets contiguous from 0, and what was read once
must stay the same (counts only grow). A second writer, in another process or in this
one, gets `StoreLockedError` naming the holder's pid.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import mqlite
from _crashchild import SETTINGS, Child, check_message, read_queue

STARTUP = 60.0  # seconds a child may take to start and print its first line (loaded CI machine)
OBSERVE = 2.5  # seconds of reading beside the live writer
MIN_ROUNDS = 4


def _snapshot(reader: mqlite.StoreReader) -> dict[tuple[str, int], list[int]]:
    """Every queue read from 0: {(topic, queue id): [seq, ...]}, each message checked."""
    seen: dict[tuple[str, int], list[int]] = {}
    for topic in reader.topics():
        for qid in reader.queue_ids(topic):
            messages = read_queue(reader, topic, qid)
            seen[(topic, qid)] = [check_message(m, topic, qid, i) for i, m in enumerate(messages)]
    return seen


def _grows_from(before: dict[tuple[str, int], list[int]], after: dict[tuple[str, int], list[int]]) -> None:
    for key, seqs in before.items():
        assert key in after, f"queue {key} vanished"
        assert after[key][: len(seqs)] == seqs, f"queue {key} changed under the reader"


def _wait_for_acks(child: Child, count: int) -> None:
    deadline = time.monotonic() + STARTUP
    for _ in range(count):
        line = child.readline(deadline)
        assert line is not None and line.startswith("ACK"), f"writer failed: {line!r}\n{child.stderr()}"


def test_reader_beside_live_writer(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with Child(root, "write", "ASYNC_FLUSH", "7", "0", "1", "120", "0.0005") as child:
        _wait_for_acks(child, 20)
        child.drain()
        total_seqs: set[int] = set()
        previous: dict[tuple[str, int], list[int]] = {}
        rounds = 0
        first_round = -1
        kept = mqlite.StoreReader(root)  # one long-lived reader, refreshed each round
        try:
            end = time.monotonic() + OBSERVE
            while rounds < MIN_ROUNDS or time.monotonic() < end:
                with mqlite.StoreReader(root) as fresh:  # and a new one each round
                    now = _snapshot(fresh)
                _grows_from(previous, now)
                kept.refresh()
                later = _snapshot(kept)
                _grows_from(now, later)
                for seqs in later.values():
                    total_seqs.update(seqs)
                assert sum(map(len, later.values())) == len(total_seqs), "a message appears twice"
                previous = later
                if first_round < 0:
                    first_round = len(total_seqs)
                rounds += 1
                assert child.proc.poll() is None, f"the writer died:\n{child.stderr()}"
        finally:
            kept.close()
        last_count = sum(map(len, previous.values()))
        print(f"{rounds} rounds, {first_round} then {last_count} messages, "
              f"{len(os.listdir(os.path.join(root, 'commitlog')))} segments")
        assert first_round < last_count, "the writer should have kept writing while we read"
    # After the writer is gone (killed), a reader still sees a consistent prefix.
    with mqlite.StoreReader(root) as reader:
        _grows_from(previous, _snapshot(reader))


def test_writer_in_another_process_holds_the_lock(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with Child(root, "hold") as holder:
        line = holder.readline(time.monotonic() + STARTUP)
        assert line == f"READY {holder.pid}", f"{line!r}\n{holder.stderr()}"
        with pytest.raises(mqlite.StoreLockedError) as info:
            mqlite.open(root)
        assert info.value.pid == holder.pid
        assert str(holder.pid) in str(info.value)
        assert "read_only" in str(info.value)  # the message says how to read beside the writer
        with mqlite.open(root, read_only=True) as reader:  # readers take no lock
            assert reader.read_only
        holder.close_stdin()  # the holder closes its broker and exits
        assert holder.readline(time.monotonic() + STARTUP) == "CLOSED"
        assert holder.proc.wait(timeout=STARTUP) == 0
    with mqlite.open(root) as broker:  # the lock is free again
        assert not broker.read_only


def test_writer_lock_is_freed_when_the_holder_is_killed(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with Child(root, "hold") as holder:
        assert holder.readline(time.monotonic() + STARTUP) == f"READY {holder.pid}"
        holder.kill()
    assert os.path.exists(os.path.join(root, "abort"))
    with mqlite.open(root) as broker:  # the stale lock file does not block; recovery is abnormal
        assert broker.store.recovery.abnormal


def test_other_process_sees_this_process_as_holder(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with mqlite.open(root, **SETTINGS):
        with Child(root, "trylock") as other:
            deadline = time.monotonic() + STARTUP
            lines = list(other.lines_until_eof(deadline))
            assert lines[:1] == [f"LOCKED {os.getpid()}"], f"{lines}\n{other.stderr()}"
            assert str(os.getpid()) in lines[1]
    with Child(root, "trylock") as other:
        assert list(other.lines_until_eof(time.monotonic() + STARTUP)) == ["OPENED"], other.stderr()


def test_second_writer_in_the_same_process(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with mqlite.open(root, **SETTINGS) as first:
        with pytest.raises(mqlite.StoreLockedError) as info:
            mqlite.open(root)
        assert info.value.pid == os.getpid()
        assert str(os.getpid()) in str(info.value)
        # The refused open took nothing from the first writer.
        result = first.store.put("T", 0, b"still mine")
        assert first.store.wait_dispatched(30.0)
        assert first.store.get_messages("T", 0, result.queue_offset, 1).messages[0].body == b"still mine"
    with mqlite.open(root) as again:
        assert again.store.max_offset("T", 0) == 1


def test_verify_beside_live_writer_finds_nothing_wrong(tmp_path: Path) -> None:
    """Units and index entries the writer adds while `verify_store` walks are not reported as damage."""
    from mqlite.verify import verify_store

    root = str(tmp_path / "store")
    with Child(root, "write", "ASYNC_FLUSH", "7", "0", "1", "120", "0.0005") as child:
        _wait_for_acks(child, 20)
        child.drain()
        end = time.monotonic() + OBSERVE
        rounds = 0
        while rounds < MIN_ROUNDS or time.monotonic() < end:
            report = verify_store(root)
            assert report.ok, report.summary()
            assert report.index_skipped == (1 if report.index_files else 0)  # the live file is left out
            rounds += 1
            assert child.proc.poll() is None, f"the writer died:\n{child.stderr()}"
    report = verify_store(root)  # the writer is gone: everything is checked
    assert report.unchecked == 0 and report.index_skipped == 0
