"""Threads and lifecycle: nothing outlives `close()`, failed and read-only opens start nothing,
`close()` is idempotent, and a closed store refuses to be used with `IllegalStateError`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from support import TINY_STORE, no_leftover_threads  # noqa: F401 - an autouse fixture

STORE_SERVICES = {"mqlite-reput", "mqlite-flush", "mqlite-clean"}


def _mqlite_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("mqlite-")}


def _fill(broker: mqlite.Broker) -> None:
    store = broker.store
    for i in range(50):
        store.put("T", i % 2, b"m%d" % i, {"KEYS": f"k{i}"})
    store.put_batch("T", 1, [b"b1", b"b2", b"b3"])
    assert store.wait_dispatched(30.0)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_writer_threads_are_named_services_and_stop_on_close(tmp_path: Path, flush: str) -> None:
    broker = mqlite.open(str(tmp_path), flush_disk_type=flush, **TINY_STORE)
    try:
        running = _mqlite_threads()
        assert STORE_SERVICES <= {t.name for t in running}
        # Nothing relies on daemon threads for shutdown (DESIGN.md, "Threads and lifecycle").
        assert not [t.name for t in running if t.daemon]
        _fill(broker)
    finally:
        broker.close()
    assert not _mqlite_threads()


def test_puts_from_many_threads_then_close(tmp_path: Path) -> None:
    broker = mqlite.open(str(tmp_path), flush_disk_type="SYNC_FLUSH", **TINY_STORE)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(100):
                broker.store.put("T", n, b"%d-%d" % (n, i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,), name=f"user-{n}") for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    broker.close()
    assert not errors
    assert not _mqlite_threads()
    with mqlite.open(str(tmp_path), read_only=True) as reader:
        assert [reader.store.max_offset("T", n) for n in range(4)] == [100] * 4


# -- failed opens --------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings", [
    pytest.param({"commitlog_file_size": 1}, id="too-small"),
    pytest.param({"flush_disk_type": "SOMETIMES"}, id="bad-enum"),
    pytest.param({"commitlog_file_sise": 4096}, id="unknown-name"),
    pytest.param({"sync_flush_timeout": -1.0}, id="negative"),
])
def test_failed_open_bad_config_starts_nothing(tmp_path: Path, settings: dict[str, Any]) -> None:
    before = set(threading.enumerate())
    with pytest.raises(mqlite.ConfigError):
        mqlite.open(str(tmp_path), **settings)
    assert set(threading.enumerate()) == before
    with mqlite.open(str(tmp_path), **TINY_STORE):  # and left no lock behind
        pass


def test_failed_open_conflicting_format_setting(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **TINY_STORE):
        pass
    with pytest.raises(mqlite.ConfigError) as info:
        mqlite.open(str(tmp_path), commitlog_file_size=128 * 1024)
    assert str(64 * 1024) in str(info.value) and str(128 * 1024) in str(info.value)
    assert not _mqlite_threads()
    with mqlite.open(str(tmp_path)):
        pass


def test_failed_open_corrupted_store_starts_nothing(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **TINY_STORE) as broker:
        _fill(broker)
    segment = tmp_path / "commitlog" / ("0" * 20)
    os.truncate(segment, 1000)
    before = set(threading.enumerate())
    with pytest.raises(mqlite.StoreCorruptedError):
        mqlite.open(str(tmp_path))
    assert set(threading.enumerate()) == before
    with pytest.raises(mqlite.StoreCorruptedError):  # not StoreLockedError: the lock was released
        mqlite.open(str(tmp_path))


def test_failed_open_locked_store_starts_nothing(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **TINY_STORE):
        before = set(threading.enumerate())
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(str(tmp_path))
        assert set(threading.enumerate()) == before


# -- read-only opens -------------------------------------------------------------------------------------
def test_read_only_open_starts_no_thread(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **TINY_STORE) as broker:
        _fill(broker)
    before = set(threading.enumerate())
    with mqlite.open(str(tmp_path), read_only=True) as reader:
        assert reader.read_only
        assert len(reader.store.get_messages("T", 0, 0, 100).messages) == 25
        reader.topic_status("T")
        reader.query_message("T", "k3")
        assert set(threading.enumerate()) == before
    with mqlite.StoreReader(str(tmp_path)) as store_reader:
        store_reader.refresh()
        assert store_reader.max_offset("T", 1) == 28
        assert set(threading.enumerate()) == before
    assert set(threading.enumerate()) == before


def test_read_only_open_beside_a_writer_starts_no_thread(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **TINY_STORE) as broker:
        _fill(broker)
        before = set(threading.enumerate())
        with mqlite.open(str(tmp_path), read_only=True) as reader:
            assert reader.store.max_offset("T", 0) == 25
            assert set(threading.enumerate()) == before


# -- close ----------------------------------------------------------------------------------------------------
def test_close_is_idempotent(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **TINY_STORE) as broker:
        _fill(broker)
        broker.close()
        assert broker.closed
        broker.close()
        broker.store.close()
    broker.close()  # after the with block too
    assert not (tmp_path / "abort").exists()
    reader = mqlite.open(str(tmp_path), read_only=True)
    reader.close()
    reader.close()
    store_reader = mqlite.StoreReader(str(tmp_path))
    store_reader.close()
    store_reader.close()


def _closed_writer(tmp_path: Path) -> mqlite.Broker:
    broker = mqlite.open(str(tmp_path), **TINY_STORE)
    _fill(broker)
    broker.close()
    return broker


WRITER_USES: dict[str, Callable[[mqlite.Broker], object]] = {
    "put": lambda b: b.store.put("T", 0, b"late"),
    "put_batch": lambda b: b.store.put_batch("T", 0, [b"late", b"later"]),
    "store.query_message": lambda b: b.store.query_message("T", "k1"),
    "topic_status": lambda b: b.topic_status("T"),
    "min_offset": lambda b: b.min_offset(mqlite.MessageQueue("T", "mqlite", 0)),
    "max_offset": lambda b: b.max_offset(mqlite.MessageQueue("T", "mqlite", 0)),
    "search_offset": lambda b: b.search_offset(mqlite.MessageQueue("T", "mqlite", 0), 0),
    "view_message": lambda b: b.view_message("7F00000100002A9F0000000000000000"),
    "query_message": lambda b: b.query_message("T", "k1"),
    "query_message_by_offset": lambda b: b.query_message_by_offset("T", 0, 0),
}


@pytest.mark.parametrize("use", sorted(WRITER_USES))
def test_closed_writer_raises_illegal_state(tmp_path: Path, use: str) -> None:
    broker = _closed_writer(tmp_path)
    with pytest.raises(mqlite.IllegalStateError):
        WRITER_USES[use](broker)


@pytest.mark.parametrize("use", ["get_messages", "look_message_by_offset"])
def test_closed_writer_store_reads_raise_illegal_state(tmp_path: Path, use: str) -> None:
    store = _closed_writer(tmp_path).store
    with pytest.raises(mqlite.IllegalStateError):
        if use == "get_messages":
            store.get_messages("T", 0, 0)
        else:
            store.look_message_by_offset(0)


def test_closed_writer_refuses_delete_topic(tmp_path: Path) -> None:
    store = _closed_writer(tmp_path).store
    try:
        with pytest.raises(mqlite.IllegalStateError):
            store.delete_topic("T")
    finally:
        assert (tmp_path / "consumequeue" / "T").exists(), "a closed store deleted files"


def test_closed_read_only_broker_raises_illegal_state(tmp_path: Path) -> None:
    _closed_writer(tmp_path)
    reader = mqlite.open(str(tmp_path), read_only=True)
    reader.close()
    with pytest.raises(mqlite.IllegalStateError):
        reader.topic_status("T")
    with pytest.raises(mqlite.IllegalStateError):
        reader.query_message_by_offset("T", 0, 0)


@pytest.mark.parametrize("use", ["get_messages", "max_offset", "refresh"])
def test_closed_store_reader_raises_illegal_state(tmp_path: Path, use: str) -> None:
    _closed_writer(tmp_path)
    reader = mqlite.StoreReader(str(tmp_path))
    reader.close()
    with pytest.raises(mqlite.IllegalStateError):
        if use == "get_messages":
            reader.get_messages("T", 0, 0)
        elif use == "max_offset":
            reader.max_offset("T", 0)
        else:
            reader.refresh()
