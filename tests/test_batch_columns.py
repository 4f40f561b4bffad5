"""`Producer.send_batch` built column-wise (issue 14) writes what the per-record path writes.

A batch of messages whose property maps the producer validated before goes down as columns
(`record.EncodedBatchProperties`: distinct encodings, a head per message, the new ids) and is
encoded whole by `CommitLog._append_columns`: tags codes and KEYS per distinct map, UNIQ_KEY
index hashes with numpy. Each case sends a batch that way into one store, and the same
messages (same ids, same times: a manual clock) as property maps through `put_messages`,
which encodes map by map, into another; the commit logs, consume queues and index files must
be the same bytes, the messages found by KEYS, UNIQ_KEY and offset id in both, and the
`SendResult` must say where they went.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.clock import ManualClock
from mqlite.commitlog import BatchDispatch, CommitLog
from mqlite.config import StoreConfig
from mqlite.indexfile import index_key_hash, index_key_names
from mqlite.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as UNIQ_KEY
from mqlite.message import encode_properties, java_string_hash
from mqlite.record import EncodedBatchProperties

from support import SMALL_STORE

T0 = 1_760_000_000_000
TOPIC = "Cols"


def _mixed() -> list[mqlite.Message]:
    """Tags or none, KEYS (one, several, none), user properties (non-ASCII too), flags, bodies of many sizes."""
    shapes: list[dict[str, Any]] = [
        dict(tags="TagA", keys="k1"),
        dict(),
        dict(tags="TagB", keys=["k2", "k3"], properties={"user": "v"}),
        dict(properties={"\u65e5\u672c": "\u8a9e", "a": "1"}),
        dict(tags="TagA", keys="k1"),  # the first map again: one encoding, two messages
        dict(keys="solo", flag=-7),
    ]
    return [mqlite.Message(TOPIC, b"m%d-" % i + b"x" * (i * 37 % 300), **shapes[i % len(shapes)])
            for i in range(60)]


CASES: dict[str, Callable[[], list[mqlite.Message]]] = {
    "one map, one body size": lambda: [mqlite.Message(TOPIC, b"x" * 100) for _ in range(50)],
    "one map, tags and keys": lambda: [mqlite.Message(TOPIC, b"b%d" % i, tags="T", keys="same k") for i in range(30)],
    "maps of one length, bodies of many": lambda: [
        mqlite.Message(TOPIC, b"y" * (i + 1), tags="T%d" % (i % 3)) for i in range(30)],
    "mixed": _mixed,
    # Equal maps whose entries were set in another order encode differently: not one map.
    "equal maps, two orders": lambda: [mqlite.Message(TOPIC, b"o%d" % i, properties=dict(
        [("a", "1"), ("b", "2")][:: 1 if i % 2 else -1])) for i in range(20)],
    # Over COMPRESS_MSG_BODY_OVER_HOWMUCH: a batch stores bodies as sent (the Java client compresses no batch).
    "big bodies": lambda: [mqlite.Message(TOPIC, os.urandom(5000 + i), tags="big") for i in range(4)],
}


def _store_files(root: str) -> dict[str, bytes]:
    """Every file of the commit log, the consume queues and the index, by path under `root`."""
    files = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for directory, _, names in os.walk(os.path.join(root, sub)):
            for name in names:
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, root)] = f.read()
    return files


def _count_column_appends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches that go down column-wise (`CommitLog._append_columns`), as they are appended."""
    columns_used: list[int] = []
    column_append = CommitLog._append_columns

    def counted(self: CommitLog, *args: Any, **kwargs: Any) -> Any:
        columns_used.append(len(args[2]))
        return column_append(self, *args, **kwargs)

    monkeypatch.setattr(CommitLog, "_append_columns", counted)
    return columns_used


@pytest.mark.parametrize("case", list(CASES))
def test_a_column_wise_batch_writes_the_bytes_of_the_per_record_path(tmp_path: Path, case: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    columns_used = _count_column_appends(monkeypatch)
    roots = str(tmp_path / "columns"), str(tmp_path / "maps")
    settings = dict(SMALL_STORE, flush_disk_type="ASYNC_FLUSH")
    with mqlite.open(roots[0], clock=ManualClock(T0), **settings) as by_columns, \
            mqlite.open(roots[1], clock=ManualClock(T0), **settings) as by_maps:
        queues = [mqlite.MessageQueue(TOPIC, b.broker_name, 1) for b in (by_columns, by_maps)]
        with mqlite.Producer(by_columns, group="pg") as producer:
            warm = CASES[case]()
            producer.send_batch(warm, queue=queues[0])  # validates and caches the maps: the general path
            assert not columns_used
            msgs = CASES[case]()
            result = producer.send_batch(msgs, queue=queues[0])
            assert columns_used == [len(msgs)]  # this one went down as columns
        # The same messages, ids and times, as maps: encoded one by one by the commit log.
        for sent in (warm, msgs):
            by_maps.put_messages(TOPIC, 1, [m.body for m in sent], [dict(m.properties) for m in sent],
                                 flags=[m.flag for m in sent], born_timestamp=T0)
        ids = [m.properties[UNIQ_KEY] for m in msgs]
        assert len(set(ids)) == len(msgs) and result.msg_id == ",".join(ids)
        assert result.message_queue == queues[0] and result.queue_offset == len(warm)
        assert result.send_status is mqlite.SendStatus.SEND_OK
        for broker in (by_columns, by_maps):
            broker.wait_dispatched()
            stored = broker.store.get_messages(TOPIC, 1, len(warm), len(msgs) + 1).messages
            assert [m.msg_id for m in stored] == ids
            assert [m.offset_msg_id for m in stored] == result.offset_msg_id.split(",")
            assert [m.queue_offset for m in stored] == list(range(len(warm), len(warm) + len(msgs)))
            assert [(m.body, m.properties, m.flag, m.sys_flag) for m in stored] == \
                [(m.body, m.properties, m.flag, 0) for m in msgs]
            for msg, offset_id in zip(msgs[:12], result.offset_msg_id.split(",")):
                assert broker.view_message(offset_id).msg_id == msg.properties[UNIQ_KEY]
                found = broker.query_message(TOPIC, msg.properties[UNIQ_KEY])
                assert [m.offset_msg_id for m in found] == [offset_id]
                for key in msg.keys:
                    with_key = {m.offset_msg_id for m in broker.query_message(TOPIC, key, max_num=200)}
                    assert offset_id in with_key
                    expected = [m for m in warm + msgs if key in m.keys]
                    assert len(with_key) == len(expected)
    assert _store_files(roots[0]) == _store_files(roots[1])


def _columns(heads: list[dict[str, str]], head_index: list[int] | None, ids: list[str]) -> EncodedBatchProperties:
    """What the producer passes down: each head encoded with the UNIQ_KEY name after it, copies of the maps."""
    blocks = [encode_properties(h).encode() + UNIQ_KEY.encode() + b"\x01" for h in heads]
    return EncodedBatchProperties(blocks, [dict(h) for h in heads], head_index, ids)


FALLBACK_CASES: dict[str, dict[str, Any]] = {
    # Read by the general path, as the maps they stand for: an IPv6 born host (a longer header) ...
    "ipv6 born host": dict(ids=[f"{i:032X}" for i in range(4)], born_host="[::1]:4000"),
    # ... ids of several lengths, or not ASCII (not rows of one array).
    "ids of two lengths": dict(ids=["A1", "B22", "C1", "D1"]),
    "non-ASCII ids": dict(ids=["\u00e91", "\u00e92", "\u00e93", "\u00e94"]),
    "column-wise": dict(ids=[f"{i:032X}" for i in range(4)]),
}


@pytest.mark.parametrize("case", list(FALLBACK_CASES))
def test_append_batch_of_columns_writes_what_the_maps_write(tmp_path: Path, case: str) -> None:
    args = dict(FALLBACK_CASES[case])
    ids = args.pop("ids")
    heads = [{"TAGS": "A", "KEYS": "k1 k2"}, {"WAIT": "true"}]
    columns = _columns(heads, [0, 1, 1, 0], ids)
    maps = [dict(m) for m in columns]  # the maps it stands for, as plain dicts: encoded one by one
    assert maps[3] == {"TAGS": "A", "KEYS": "k1 k2", UNIQ_KEY: ids[3]} and list(maps[3])[-1] == UNIQ_KEY
    assert [p.encoded for p in columns] == [encode_properties(m).encode() for m in maps]
    bodies = [b"one", b"two" * 40, b"3", b"four"]
    logs = [CommitLog(str(tmp_path / name), StoreConfig(commitlog_file_size=1 << 20), ManualClock(T0))
            for name in ("columns", "maps")]
    try:
        results = [log.append_batch("T", 1, bodies, props, flags=[0, 5, -1, 0], born_timestamp=T0 - 3, **args)
                   for log, props in zip(logs, (columns, maps))]
        assert results[0] == results[1]
        end = results[0].commit_log_offset + results[0].wrote_bytes
        raws = [bytes(log.mapped_files.find(0).mm[:end]) for log in logs]  # type: ignore[union-attr]
        assert raws[0] == raws[1]
        by_columns, by_maps = logs[0].dispatch_queue[-1], logs[1].dispatch_queue[-1]
        assert isinstance(by_columns, BatchDispatch) and isinstance(by_maps, BatchDispatch)
        assert list(by_columns.tags_codes) == list(by_maps.tags_codes)  # type: ignore[arg-type]
        assert list(by_columns.tags_codes)[:2] == [java_string_hash("A"), 0]  # type: ignore[index]
        offsets = results[0].commit_log_offsets or []
        names = [index_key_names("T", m[UNIQ_KEY], m.get("KEYS")) for m in maps]
        if by_columns.key_hashes is not None:  # column-wise: the index keys come hashed, in log order
            assert case == "column-wise" and by_columns.key_offsets is not None
            assert by_columns.key_hashes.tolist() == [index_key_hash(k) for n in names for k in n]
            assert by_columns.key_offsets.tolist() == [o for o, n in zip(offsets, names) for _ in n]
        else:
            assert case != "column-wise"
            assert (by_columns.keys, by_columns.uniq_keys) == (by_maps.keys, by_maps.uniq_keys)
    finally:
        for log in logs:
            log.close()


def test_a_batch_sent_with_a_before_hook_stores_what_the_hook_changed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A before-hook may change bodies and properties: with one registered, a batch of maps the producer has
    # cached takes the map-by-map path, encoded after the hooks, and stores what the hook changed.
    seen: list[tuple[str, Any]] = []

    def before(ctx: Any) -> None:
        seen.append(("before", ctx.message.body))
        ctx.message.body = b"changed by the hook"
        ctx.message.properties["HOOKED"] = "yes"

    columns_used = _count_column_appends(monkeypatch)
    with mqlite.open(str(tmp_path), **SMALL_STORE) as broker, mqlite.Producer(broker) as producer:
        producer.send_batch([mqlite.Message(TOPIC, b"warm", tags="A")])
        producer.send_batch([mqlite.Message(TOPIC, b"cached", tags="A")])
        assert columns_used == [1]  # the second batch of a cached map went column-wise
        producer.add_send_hook(before=before, after=lambda ctx: seen.append(("after", ctx.send_result.msg_id)))
        msgs = [mqlite.Message(TOPIC, b"b%d" % i, tags="A") for i in range(3)]
        result = producer.send_batch(msgs)
        assert columns_used == [1]
        assert seen == [("before", b"b0"), ("after", result.msg_id)]
        stored = broker.store.get_messages(TOPIC, result.message_queue.queue_id, result.queue_offset, 3).messages
        assert [m.body for m in stored] == [b"changed by the hook", b"b1", b"b2"]
        assert [m.properties.get("HOOKED") for m in stored] == ["yes", None, None]
        assert [m.tags for m in stored] == ["A", "A", "A"]
