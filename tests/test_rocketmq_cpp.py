"""rocketmq-client-cpp, Apache's C++ RocketMQ client (PyPI `rocketmq` 0.4.4: its `librocketmq.so`
through ctypes), against `mqlite serve` in another process.

A second real client that this project did not write, next to ali-ons: its own remoting codec,
heartbeats, rebalance and offset store. Each client runs in a child process (tests/_cppclient.py):
the library starts threads of its own and writes logs under $HOME, which the child gets as a
temporary directory.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import mqlite
from served import QUICK_RETRY_LEVELS, run_lines, serving

pytest.importorskip("rocketmq.client", reason="the rocketmq wheel (rocketmq-client-cpp) is for x86-64 Linux only")

CHILD = str(Path(__file__).resolve().parent / "_cppclient.py")


def cpp(tmp_path: Path, config: dict[str, Any], timeout: float = 120.0) -> tuple[int, list[dict[str, Any]], str]:
    home = tmp_path / "cpp-home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home)}
    return run_lines([sys.executable, CHILD, json.dumps(config)], timeout=timeout, env=env)


def new_store(tmp_path: Path, topic: str) -> str:
    path = str(tmp_path / "mq")
    with mqlite.open(path) as broker:
        broker.create_topic(topic, 4)
    return path


def by_event(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def test_produce_then_push_consume_with_a_tag_filter(tmp_path: Path) -> None:
    path = new_store(tmp_path, "CppOrders")
    sent_msgs = [{"tags": ["TagA", "TagB", "TagC"][i % 3], "keys": f"c{i}", "body": f"cpp body {i}"}
                 for i in range(9)]
    wanted = [m["keys"] for m in sent_msgs if m["tags"] != "TagC"]
    with serving(path) as address:
        rc, events, err = cpp(tmp_path, {"mode": "produce", "nameSrv": address, "topic": "CppOrders",
                                         "group": "cpp-pg", "messages": sent_msgs})
        assert rc == 0 and by_event(events, "done"), (events, err[-3000:])
        sent = by_event(events, "sent")
        assert [e["status"] for e in sent] == [0] * 9  # SEND_OK
        rc, events, err = cpp(tmp_path, {"mode": "consume", "nameSrv": address, "topic": "CppOrders",
                                         "group": "cpp-cg", "expression": "TagA || TagB", "expect": wanted,
                                         "timeout": 60})
        assert rc == 0, (events[-3:], err[-3000:])
    got = by_event(events, "message")
    assert sorted(e["key"] for e in got) == sorted(wanted)  # each once; TagC never delivered
    for e in got:
        m = sent_msgs[int(e["key"][1:])]
        assert (e["topic"], e["tags"], base64.b64decode(e["bodyBase64"]).decode()) == ("CppOrders", m["tags"], m["body"])
        assert e["msgId"] == sent[int(e["key"][1:])]["msgId"]  # the client's UNIQ_KEY, kept by the store
    with mqlite.open(path, read_only=True) as broker:
        for e, m in zip(sent, sent_msgs):
            stored = broker.view_message(e["msgId"])
            assert (stored.body.decode(), stored.tags, stored.keys) == (m["body"], m["tags"], [m["keys"]])
        progress = {p.queue_id: p for p in broker.consumer_progress("cpp-cg") if p.topic == "CppOrders"}
        for queue_id, p in progress.items():  # the offsets the client persisted when it shut down
            consumed = [e["queueOffset"] for e in got if e["queueId"] == queue_id]
            assert max(consumed, default=-1) < p.consumer_offset <= p.broker_offset, (queue_id, p, consumed)


def test_acl_a_signed_producer_passes_and_unsigned_or_wrongly_signed_ones_store_nothing(tmp_path: Path) -> None:
    path = new_store(tmp_path, "CppSecure")
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"cpp-ak": "cpp-secret"}))
    tries = {"signed": {"accessKey": "cpp-ak", "secretKey": "cpp-secret"}, "unsigned": {},
             "wrong-secret": {"accessKey": "cpp-ak", "secretKey": "not-it"}}
    outcomes = {}
    with serving(path, "--acl-file", str(acl)) as address:
        for name, creds in tries.items():
            one = [{"tags": "TagA", "keys": name, "body": f"from the {name} producer"}]
            rc, events, err = cpp(tmp_path, {"mode": "produce", "nameSrv": address, "topic": "CppSecure",
                                             "group": "cpp-pg", "messages": one, **creds})
            outcomes[name] = (rc, [e["event"] for e in events])
    assert outcomes == {"signed": (0, ["sent", "done"]), "unsigned": (2, ["error"]), "wrong-secret": (2, ["error"])}
    with mqlite.open(path, read_only=True) as broker:
        assert [m.body for m in broker.query_message("CppSecure", "signed")] == [b"from the signed producer"]
        assert broker.query_message("CppSecure", "unsigned") == broker.query_message("CppSecure", "wrong-secret") == []


def test_a_failed_delivery_comes_back_through_the_retry_topic(tmp_path: Path) -> None:
    """The C++ client sends CONSUMER_SEND_MSG_BACK to the record's store host (the Java client asks
    the route), so the records must name the serving address."""
    path = new_store(tmp_path, "CppRetry")
    with mqlite.open(path) as broker:
        # As if the group had run before: the C++ client asks for the retry topic's route before its
        # first heartbeat creates the topic, and without a route it waits for its next rebalance (10 s).
        broker.create_topic("%RETRY%cpp-retry", 1)
    sent_msgs = [{"tags": "TagA", "keys": f"r{i}", "body": f"retry body {i}"} for i in range(3)]
    with serving(path, "--set", f"message_delay_level={QUICK_RETRY_LEVELS}") as address:
        rc, events, err = cpp(tmp_path, {"mode": "produce", "nameSrv": address, "topic": "CppRetry",
                                         "group": "cpp-pg", "messages": sent_msgs})
        assert rc == 0, err[-3000:]
        rc, events, err = cpp(tmp_path, {"mode": "consume", "nameSrv": address, "topic": "CppRetry",
                                         "group": "cpp-retry", "expect": ["r0", "r1", "r2"], "failFirst": ["r1"],
                                         "timeout": 60})
    got = by_event(events, "message")
    assert rc == 0, (got, err[-3000:])
    first, again = [e for e in got if e["key"] == "r1"]
    assert (first["failed"], first["reconsumeTimes"], first["topic"]) == (True, 0, "CppRetry")
    assert (again["failed"], again["reconsumeTimes"], again["bodyBase64"]) == (False, 1, first["bodyBase64"])
    assert again["msgId"] == first["msgId"]  # the UNIQ_KEY travels with the retry
    with mqlite.open(path, read_only=True) as broker:
        (retried,) = broker.query_message("%RETRY%cpp-retry", "r1")
        assert retried.reconsume_times == 1 and retried.properties["RETRY_TOPIC"] == "CppRetry"


def test_orderly_send_and_orderly_consume(tmp_path: Path) -> None:
    """send_orderly picks the queue by shard; the orderly consumer locks its queues (LOCK_BATCH_MQ)
    before it consumes and gets each queue's messages in the order they were sent."""
    path = new_store(tmp_path, "CppOrderly")
    sent_msgs = [{"tags": "TagO", "keys": f"o{i}", "body": f"step {i // 3} of order {i % 3}", "shard": i % 3}
                 for i in range(12)]
    with serving(path) as address:
        rc, events, err = cpp(tmp_path, {"mode": "produce", "nameSrv": address, "topic": "CppOrderly",
                                         "group": "cpp-pg", "messages": sent_msgs})
        assert rc == 0, err[-3000:]
        assert [e["queueOffset"] for e in by_event(events, "sent")] == [i // 3 for i in range(12)]
        rc, events, err = cpp(tmp_path, {"mode": "consume", "nameSrv": address, "topic": "CppOrderly",
                                         "group": "cpp-orderly", "orderly": True,
                                         "expect": [m["keys"] for m in sent_msgs], "timeout": 60})
        assert rc == 0, (events[-3:], err[-3000:])
    got = by_event(events, "message")
    assert sorted(e["key"] for e in got) == sorted(m["keys"] for m in sent_msgs)
    for shard in range(3):
        in_queue = [e for e in got if e["queueId"] == shard]
        assert [e["key"] for e in in_queue] == [f"o{i}" for i in range(shard, 12, 3)]
        assert [e["queueOffset"] for e in in_queue] == [0, 1, 2, 3]
