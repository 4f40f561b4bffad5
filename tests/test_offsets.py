"""ConsumerOffsets (config/consumerOffset.json) and its persist service."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from mqlite.clock import ManualClock
from mqlite.errors import StoreCorruptedError
from mqlite.offsetfile import consumer_offset_path
from mqlite.offsets import ConsumerOffsets, OffsetPersistService


def _document(root: Path) -> dict:
    return json.loads(Path(consumer_offset_path(str(root))).read_text())


def test_round_trip(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    assert offsets.query("cg", "orders", 0) == -1
    offsets.commit("cg", "orders", 0, 12)
    offsets.commit("cg", "orders", 1, 3)
    offsets.commit("other", "orders", 0, 7)
    offsets.commit("cg", "%RETRY%cg", 0, 1)
    assert offsets.persist() is True

    again = ConsumerOffsets(str(tmp_path))
    assert again.query("cg", "orders", 0) == 12
    assert again.query("cg", "orders", 1) == 3
    assert again.query("cg", "orders", 2) == -1
    assert again.query("nobody", "orders", 0) == -1
    assert again.groups() == ["cg", "other"]
    assert again.table_for("cg") == {"orders": {0: 12, 1: 3}, "%RETRY%cg": {0: 1}}
    assert again.table_for("other") == {"orders": {0: 7}}
    assert again.table_for("nobody") == {}


def test_file_has_rocketmq_shape_and_topic_at_group_keys(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    offsets = ConsumerOffsets(str(tmp_path), clock=clock)
    offsets.commit("cg", "orders", 0, 12)
    offsets.commit("cg", "orders", 1, 3)
    offsets.persist()
    document = _document(tmp_path)
    assert document["offsetTable"] == {"orders@cg": {"0": 12, "1": 3}}
    assert document["dataVersion"] == {"counter": 1, "stateVersion": 0, "timestamp": 1_700_000_000_000}
    offsets.commit("cg", "orders", 0, 13)
    offsets.persist()
    assert _document(tmp_path)["dataVersion"]["counter"] == 2


def test_persist_only_when_changed(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    assert offsets.persist() is False  # nothing to write: no file at all
    assert not os.path.exists(offsets.path)
    offsets.commit("cg", "t", 0, 1)
    assert offsets.dirty
    assert offsets.persist() is True
    assert not offsets.dirty
    assert offsets.persist() is False
    offsets.commit("cg", "t", 0, 1)  # the same value is no change
    assert offsets.persist() is False
    offsets.commit("cg", "t", 0, 2)
    assert offsets.persist() is True


def test_corrupt_file_falls_back_to_bak(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    offsets.commit("cg", "orders", 0, 5)
    offsets.persist()
    offsets.commit("cg", "orders", 0, 9)
    offsets.persist()  # the file with 5 is now consumerOffset.json.bak
    assert ConsumerOffsets(str(tmp_path)).query("cg", "orders", 0) == 9
    Path(offsets.path).write_text('{"offsetTable": {"orders@cg": {"0": ')  # torn write
    assert ConsumerOffsets(str(tmp_path)).query("cg", "orders", 0) == 5
    Path(offsets.path).write_text("")
    assert ConsumerOffsets(str(tmp_path)).query("cg", "orders", 0) == 5
    os.unlink(offsets.path)
    assert ConsumerOffsets(str(tmp_path)).query("cg", "orders", 0) == 5


def test_reads_a_brokers_file_with_bare_integer_keys(tmp_path: Path) -> None:
    path = Path(consumer_offset_path(str(tmp_path)))
    path.parent.mkdir(parents=True)
    # fastjson (RocketMQ's serializer) writes Integer map keys without quotes.
    path.write_text('{\n\t"offsetTable":{\n\t\t"orders@cg":{0:12,1:3\n\t\t}\n\t},"dataVersion":{"counter":4}\n}')
    offsets = ConsumerOffsets(str(tmp_path))
    assert offsets.table_for("cg") == {"orders": {0: 12, 1: 3}}
    offsets.commit("cg", "orders", 0, 13)
    offsets.persist()
    assert _document(tmp_path)["dataVersion"]["counter"] == 5


def test_remove_group_and_topic(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    offsets.commit("cg", "a", 0, 1)
    offsets.commit("cg", "b", 0, 2)
    offsets.commit("other", "a", 0, 3)
    assert offsets.remove_group("cg") is True
    assert offsets.remove_group("cg") is False
    assert offsets.groups() == ["other"]
    assert offsets.remove_topic("a") is True
    assert offsets.groups() == []
    offsets.persist()
    assert _document(tmp_path)["offsetTable"] == {}


def test_group_names_are_not_suffix_matched(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    offsets.commit("g", "t", 0, 1)
    offsets.commit("xg", "t", 0, 2)  # key t@xg ends with "g" but not with "@g"
    assert offsets.table_for("g") == {"t": {0: 1}}
    offsets.remove_group("g")
    assert offsets.query("xg", "t", 0) == 2


def test_concurrent_commits(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    threads_n, rounds = 8, 500
    start = threading.Barrier(threads_n + 1)

    def commit(n: int) -> None:
        start.wait()
        for i in range(rounds):
            offsets.commit(f"g{n}", "t", n % 4, i + 1)
            offsets.commit("shared", "t", n, i + 1)
            offsets.query("shared", "t", (n + 1) % threads_n)

    def persist() -> None:
        start.wait()
        for _ in range(20):
            offsets.persist()

    workers = [threading.Thread(target=commit, args=(n,)) for n in range(threads_n)]
    persister = threading.Thread(target=persist)
    for t in workers:
        t.start()
    persister.start()
    for t in workers + [persister]:
        t.join()
    offsets.persist()
    again = ConsumerOffsets(str(tmp_path))
    for n in range(threads_n):
        assert again.query(f"g{n}", "t", n % 4) == rounds
        assert again.query("shared", "t", n) == rounds
    assert len(again.groups()) == threads_n + 1


def test_service_persists_on_stop(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    service = OffsetPersistService(offsets, interval=3600.0)
    service.start()
    assert service.name == "mqlite-offset-persist"
    assert "mqlite-offset-persist" in {t.name for t in threading.enumerate()}
    offsets.commit("cg", "orders", 0, 42)
    service.stop()
    assert not service.is_alive
    assert ConsumerOffsets(str(tmp_path)).query("cg", "orders", 0) == 42


def test_service_persists_every_interval(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    written = threading.Event()
    original = offsets.persist

    def persist() -> bool:
        done = original()
        if done:
            written.set()
        return done

    offsets.persist = persist  # type: ignore[method-assign]
    service = OffsetPersistService(offsets, interval=0.01)
    offsets.commit("cg", "orders", 0, 7)
    service.start()
    try:
        assert written.wait(10.0)
        assert ConsumerOffsets(str(tmp_path)).query("cg", "orders", 0) == 7
    finally:
        service.stop()


def test_damaged_entries_are_skipped(tmp_path: Path) -> None:
    """A queue entry that is no offset costs that queue its offset (logged); the rest loads."""
    path = Path(consumer_offset_path(str(tmp_path)))
    path.parent.mkdir(parents=True)
    path.write_text('{"offsetTable": {"t@g": {"x": 1, "0": true, "1": 5}}}')
    offsets = ConsumerOffsets(str(tmp_path))
    assert (offsets.query("g", "t", 0), offsets.query("g", "t", 1)) == (-1, 5)


@pytest.mark.parametrize("text", ['[1, 2]', '{"offsetTable": [1]}', '{"offsetTable": {"t@g": 3}}'])
def test_a_file_of_the_wrong_shape_is_refused(tmp_path: Path, text: str) -> None:
    """Loading it as empty would move every group to its consume_from_where silently: refused, named."""
    path = Path(consumer_offset_path(str(tmp_path)))
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(StoreCorruptedError, match="consumerOffset.json is damaged.*delete it"):
        ConsumerOffsets(str(tmp_path))


# -- the side file: offsets other processes leave for the store's owner ------------------------------------
def _leave_in_side_file(root: Path, table: dict) -> None:
    from mqlite.config import write_json_atomic
    from mqlite.offsetfile import side_file_lock

    with side_file_lock(str(root)) as path:
        write_json_atomic(path, {"offsetTable": table})


def test_side_file_offsets_are_read_on_top_and_absorbed_by_the_owner(tmp_path: Path) -> None:
    from mqlite.offsetfile import side_offset_path

    offsets = ConsumerOffsets(str(tmp_path))
    offsets.commit("etl", "orders", 0, 5)
    offsets.commit("cg", "orders", 0, 9)
    offsets.persist()
    _leave_in_side_file(tmp_path, {"orders@etl": {"0": 7, "1": 2}})
    _leave_in_side_file(tmp_path, {"orders@etl": {"0": 8, "1": 2}})  # twice: the .bak holds the older one
    assert ConsumerOffsets(str(tmp_path)).table_for("etl") == {"orders": {0: 8, 1: 2}}  # a reader's view

    assert offsets.absorb_side_file() is True
    assert offsets.table_for("etl") == {"orders": {0: 8, 1: 2}} and offsets.query("cg", "orders", 0) == 9
    side = side_offset_path(str(tmp_path))
    assert not os.path.exists(side) and not os.path.exists(side + ".bak")
    assert _document(tmp_path)["offsetTable"]["orders@etl"] == {"0": 8, "1": 2}  # persisted before removal
    assert offsets.absorb_side_file() is False


def test_the_persist_service_absorbs_the_side_file_each_round(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path))
    service = OffsetPersistService(offsets, interval=3600)
    _leave_in_side_file(tmp_path, {"orders@etl": {"3": 4}})
    service.run_once()
    assert offsets.query("etl", "orders", 3) == 4
    assert _document(tmp_path)["offsetTable"] == {"orders@etl": {"3": 4}}


# -- the group offsets API for processes that do not hold the store (a Spark stream's `group`) -------------------------
def test_group_offsets_go_to_the_table_when_the_store_is_free_and_beside_a_writer_otherwise(tmp_path: Path) -> None:
    from mqlite.offsetfile import commit_group_offsets, read_group_offsets, side_offset_path
    from mqlite.store import try_lock_store

    root = str(tmp_path)
    assert commit_group_offsets(root, "etl", {"orders": {0: 2, 1: 1}}) is True  # free: the store's own table
    assert _document(tmp_path)["offsetTable"] == {"orders@etl": {"0": 2, "1": 1}}
    assert not os.path.exists(side_offset_path(root))

    writer = try_lock_store(root)  # a live writer holds the store
    assert writer is not None
    try:
        assert commit_group_offsets(root, "etl", {"orders": {0: 5, 1: 3}}) is False
        assert _document(tmp_path)["offsetTable"] == {"orders@etl": {"0": 2, "1": 1}}  # the owner's file untouched
        assert read_group_offsets(root, "etl") == {"orders": {0: 5, 1: 3}}  # the side file on top
    finally:
        writer.release()

    assert commit_group_offsets(root, "etl", {"orders": {0: 6, 1: 3}}) is True  # free again: the group leaves the side file
    assert _document(tmp_path)["offsetTable"] == {"orders@etl": {"0": 6, "1": 3}}
    with open(side_offset_path(root)) as f:
        assert json.load(f)["offsetTable"] == {}
    assert read_group_offsets(root, "etl") == {"orders": {0: 6, 1: 3}}


def test_a_repeated_commit_keeps_the_offsets_a_stopped_writer_left_in_the_side_file(tmp_path: Path) -> None:
    """The group's side-file entries are dropped when the store is free, so the store's file must take them
    even when the commit repeats them (a writer that stopped without absorbing them left them there)."""
    from mqlite.offsetfile import commit_group_offsets, read_group_offsets
    from mqlite.store import try_lock_store

    root = str(tmp_path)
    assert commit_group_offsets(root, "etl", {"orders": {0: 2}}) is True
    writer = try_lock_store(root)
    assert writer is not None
    try:
        assert commit_group_offsets(root, "etl", {"orders": {0: 5}}) is False  # beside the writer: the side file
    finally:
        writer.release()  # and the writer goes without absorbing it
    assert commit_group_offsets(root, "etl", {"orders": {0: 5}}) is True  # the same progress, store free
    assert _document(tmp_path)["offsetTable"] == {"orders@etl": {"0": 5}}
    assert read_group_offsets(root, "etl") == {"orders": {0: 5}}
