"""ali-ons, npm's pure-JavaScript RocketMQ remoting client, against `mqlite serve`.

The node scripts in tests/js (installed by the README's set-up: `npm ci --prefix tests/js`) produce
and push-consume with ali-ons 3.12.0 and print JSON lines; the server runs as users start it,
`python -m mqlite serve PATH --listen 127.0.0.1:0`, in its own process. Afterwards the store is
opened read-only to check what the server stored and which offsets ali-ons committed.

ali-ons reaches the server as its name server (`nameSrv`) and then as the broker the route names.
It never asks for TBW102, so the topics exist before the clients start (as on a real broker).
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from served import QUICK_RETRY_LEVELS, run_lines, serving

NODE = shutil.which("node")
JS = Path(__file__).resolve().parent / "js"

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed: the ali-ons tests run node scripts")


@pytest.fixture(autouse=True)
def _ali_ons_installed() -> None:
    if not (JS / "node_modules" / "ali-ons" / "package.json").is_file():
        pytest.fail("ali-ons is not installed: run `npm ci --prefix tests/js` (the README's test set-up does)")


def node(script: str, config: dict[str, Any], timeout: float = 120.0) -> tuple[int, list[dict[str, Any]], str]:
    assert NODE is not None
    return run_lines([NODE, str(JS / script), json.dumps(config)], cwd=str(JS), timeout=timeout)


def new_store(tmp_path: Path, *topics: str) -> str:
    path = str(tmp_path / "mq")
    with mqlite.open(path) as broker:
        for topic in topics:
            broker.create_topic(topic, 4)
    return path


def messages(count: int, tags: list[str], prefix: str = "k") -> list[dict[str, Any]]:
    """`count` messages with tags in turn, a key each (every third has two), UTF-8 bodies; the
    fifth body is 6 KiB, which ali-ons sends zlib-compressed (its compressMsgBodyOverHowmuch is 4 KiB)."""
    out = []
    for i in range(count):
        keys = [f"{prefix}{i}"] + (["shared"] if i % 3 == 0 else [])
        body = f"body {i} é {'x' * 6000 if i == 4 else ''}"
        out.append({"tags": tags[i % len(tags)], "keys": keys, "body": body})
    return out


def by_event(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def test_produce_then_push_consume_with_a_tag_filter(tmp_path: Path) -> None:
    path = new_store(tmp_path, "JsOrders")
    sent_msgs = messages(12, ["TagA", "TagB", "TagC"])
    wanted = [m for m in sent_msgs if m["tags"] != "TagC"]
    with serving(path) as address:
        rc, events, err = node("produce.js", {"nameSrv": address, "topic": "JsOrders", "group": "js-pg",
                                             "messages": sent_msgs})
        assert rc == 0 and by_event(events, "done"), err[-3000:]
        sent = by_event(events, "sent")
        assert [e["index"] for e in sent] == list(range(12))
        assert {e["sendStatus"] for e in sent} == {"SEND_OK"} and {e["brokerName"] for e in sent} == {"mqlite"}
        assert len({e["msgId"] for e in sent}) == 12 and {e["queueId"] for e in sent} <= {0, 1, 2, 3}

        rc, events, err = node("consume.js", {
            "nameSrv": address, "topic": "JsOrders", "group": "js-cg", "expression": "TagA || TagB",
            "expect": [" ".join(m["keys"]) for m in wanted], "timeoutMs": 60000})
        assert rc == 0, (events[-3:], err[-3000:])
        (done,) = by_event(events, "done")
        got = by_event(events, "message")
    # Every wanted message arrived once, as sent; TagC never left the server (the client-side
    # tag check dropped nothing, so the server filtered).
    assert sorted(e["key"] for e in got) == sorted(" ".join(m["keys"]) for m in wanted)
    assert done["clientFiltered"] == 0
    sent_by_index = {e["index"]: e for e in sent}
    for e in got:
        i = int(e["key"].split()[0][1:])
        assert (e["topic"], e["tags"], e["reconsumeTimes"]) == ("JsOrders", sent_msgs[i]["tags"], 0)
        assert base64.b64decode(e["bodyBase64"]).decode() == sent_msgs[i]["body"]
        assert (e["msgId"], e["queueId"], e["queueOffset"]) == (
            sent_by_index[i]["msgId"], sent_by_index[i]["queueId"], sent_by_index[i]["queueOffset"])

    with mqlite.open(path, read_only=True) as broker:
        for i, m in enumerate(sent_msgs):
            stored = broker.query_message_by_offset("JsOrders", sent_by_index[i]["queueId"],
                                                    sent_by_index[i]["queueOffset"])
            assert (stored.body.decode(), stored.tags, stored.keys) == (m["body"], m["tags"], m["keys"])
            assert stored.offset_msg_id == sent_by_index[i]["msgId"]  # ali-ons sets no UNIQ_KEY
            # The 6 KiB body came zlib-deflated with the compressed flag and no type bits (type 0: ZLIB).
            assert stored.sys_flag & 0x701 == (0x1 if len(m["body"]) > 4096 else 0)
        shared = sorted(m.body.decode() for m in broker.query_message("JsOrders", "shared"))
        assert shared == sorted(m["body"] for m in sent_msgs if "shared" in m["keys"])  # the index has every key
        # ali-ons committed its offsets (UPDATE_CONSUMER_OFFSET on close): a restart resumes after the
        # last message it consumed. (Past trailing TagC messages only when its pull that skipped them
        # answered before it closed: it moves the offset over filtered messages once idle.)
        progress = {p.queue_id: p for p in broker.consumer_progress("js-cg") if p.topic == "JsOrders"}
        assert sorted(progress) == [0, 1, 2, 3]
        for queue_id, p in progress.items():
            consumed = [e["queueOffset"] for e in got if e["queueId"] == queue_id]
            assert max(consumed, default=-1) < p.consumer_offset <= p.broker_offset, (queue_id, p, consumed)


def test_a_failed_delivery_comes_back_through_the_retry_topic(tmp_path: Path) -> None:
    path = new_store(tmp_path, "JsRetry")
    sent_msgs = messages(3, ["TagA"], prefix="r")
    with serving(path, "--set", f"message_delay_level={QUICK_RETRY_LEVELS}") as address:
        rc, events, err = node("produce.js", {"nameSrv": address, "topic": "JsRetry", "group": "js-pg",
                                             "messages": sent_msgs})
        assert rc == 0, err[-3000:]
        rc, events, err = node("consume.js", {
            "nameSrv": address, "topic": "JsRetry", "group": "js-retry", "expression": "*",
            "expect": ["r0 shared", "r1", "r2"], "failFirst": ["r1"], "timeoutMs": 60000})
        assert rc == 0, (events[-3:], err[-3000:])
    got = by_event(events, "message")
    assert sorted(e["key"] for e in got) == ["r0 shared", "r1", "r1", "r2"]
    first, again = [e for e in got if e["key"] == "r1"]
    assert (first["failed"], first["reconsumeTimes"], first["retryTopic"]) == (True, 0, None)
    # Sent back (CONSUMER_SEND_MSG_BACK), stored in %RETRY%js-retry, delivered to the same handler.
    assert (again["failed"], again["reconsumeTimes"], again["retryTopic"]) == (False, 1, "JsRetry")
    assert again["topic"] == "JsRetry" and again["bodyBase64"] == first["bodyBase64"]
    with mqlite.open(path, read_only=True) as broker:
        (retried,) = broker.query_message("%RETRY%js-retry", "r1")
        assert retried.reconsume_times == 1 and retried.properties["RETRY_TOPIC"] == "JsRetry"
        progress = [p for p in broker.consumer_progress("js-retry")]
        assert progress and all(p.consumer_offset == p.broker_offset for p in progress), progress


NO_PERMISSION = 16


def test_acl_signed_clients_pass_and_unsigned_or_wrongly_signed_ones_are_refused(tmp_path: Path) -> None:
    path = new_store(tmp_path, "JsSecure")
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"js-ak": "js-secret"}))
    signed = {"accessKey": "js-ak", "secretKey": "js-secret"}
    wrong = {"unsigned": {}, "wrong-secret": {"accessKey": "js-ak", "secretKey": "not-it"},
             "unknown-key": {"accessKey": "nobody", "secretKey": "js-secret"}}
    with serving(path, "--acl-file", str(acl)) as address:
        base = {"nameSrv": address, "topic": "JsSecure", "group": "js-pg"}
        rc, events, err = node("produce.js", {**base, **signed, "messages": messages(3, ["TagA"], prefix="s")})
        assert rc == 0 and len(by_event(events, "sent")) == 3, err[-3000:]
        for name, creds in wrong.items():
            one = [{"tags": "TagA", "keys": [f"bad-{name}"], "body": "must not be stored"}]
            rc, events, err = node("produce.js", {**base, **creds, "messages": one})
            assert rc == 2 and not by_event(events, "sent"), (name, events, err[-2000:])
            refused = by_event(events, "refused")
            assert refused and {e["code"] for e in refused} == {NO_PERMISSION}, (name, refused)
        consumer = {"nameSrv": address, "topic": "JsSecure", "group": "js-secure-cg", "expression": "*",
                    "timeoutMs": 60000}
        rc, events, err = node("consume.js", {**consumer, **wrong["wrong-secret"], "expect": ["s1"],
                                              "stopOnRefusal": True})
        assert rc == 4 and by_event(events, "refused")[0]["code"] == NO_PERMISSION, (events, err[-2000:])
        assert not by_event(events, "message")
        rc, events, err = node("consume.js", {**consumer, **signed, "expect": ["s0 shared", "s1", "s2"]})
        assert rc == 0, (events[-3:], err[-3000:])
        assert sorted(e["key"] for e in by_event(events, "message")) == ["s0 shared", "s1", "s2"]
    with mqlite.open(path, read_only=True) as broker:
        assert sorted(k for m in broker.query_message("JsSecure", "shared") for k in m.keys) == ["s0", "shared"]
        for name in wrong:
            assert broker.query_message("JsSecure", f"bad-{name}") == []


def test_long_polling_sql92_filter_and_a_restart_that_resumes(tmp_path: Path) -> None:
    """The consumer starts first: its pulls park on the empty queues (suspended for 60 s here) and
    the sends wake them. It filters with SQL92, which ali-ons leaves to the server (it checks only
    tags itself). A second run of the group resumes at the committed offsets: nothing twice."""
    path = new_store(tmp_path, "JsSql")
    sent_msgs = [{"tags": "TagA", "keys": [f"q{i}"], "body": f"sql {i}",
                  "properties": {"n": str(i), "kind": "odd" if i % 2 else "even"}} for i in range(40)]
    sql = {"expressionType": "SQL92", "subString": "n >= 10 AND kind = 'odd'"}
    first, later = [f"q{i}" for i in range(11, 30, 2)], [f"q{i}" for i in range(31, 40, 2)]
    long_polls = {"brokerSuspendMaxTimeMillis": 60000, "consumerTimeoutMillisWhenSuspend": 90000}
    with serving(path) as address:
        consumer = {"nameSrv": address, "topic": "JsSql", "group": "js-sql", "expression": sql,
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "options": long_polls, "timeoutMs": 30000}
        producer = {"nameSrv": address, "topic": "JsSql", "group": "js-pg"}
        with Consumers(1, {**consumer, "expect": first, "untilStdinEnds": True}) as waiting:
            waiting.read_until(lambda: bool(waiting.events("ready")))
            rc, events, err = node("produce.js", {**producer, "messages": sent_msgs[:30]})
            assert rc == 0, err[-3000:]
            # Woken by the sends: well before the 60 s suspension would have answered the pulls.
            waiting.read_until(lambda: {e["key"] for e in waiting.events("message")} >= set(first), timeout=30)
            waiting.finish()
        got = waiting.events("message")
        assert sorted(e["key"] for e in got) == sorted(first)
        assert all(e["properties"]["kind"] == "odd" and int(e["properties"]["n"]) >= 10 for e in got)

        rc, events, err = node("produce.js", {**producer, "messages": sent_msgs[30:]})
        assert rc == 0, err[-3000:]
        rc, events, err = node("consume.js", {**consumer, "expect": later})
        assert rc == 0, (events[-3:], err[-3000:])
        assert sorted(e["key"] for e in by_event(events, "message")) == sorted(later)  # nothing from the first run


def test_two_consumer_processes_of_a_group_split_the_queues(tmp_path: Path) -> None:
    """GET_CONSUMER_LIST_BY_GROUP names both ali-ons processes, each takes half of the queues
    (AllocateMessageQueueAveragely over the sorted client ids), and every message is consumed once."""
    path = new_store(tmp_path, "JsShared")
    sent_msgs = messages(40, ["TagA"], prefix="m")
    keys = {" ".join(m["keys"]) for m in sent_msgs}
    with serving(path) as address:
        config = {"nameSrv": address, "topic": "JsShared", "group": "js-shared", "expression": "*", "expect": [],
                  "untilStdinEnds": True, "timeoutMs": 60000, "options": {"rebalanceInterval": 200}}
        with Consumers(2, config) as consumers:
            held = consumers.held
            # Both rebalanced to disjoint halves before anything is sent (so no queue changes hands
            # while it has messages: each message then has one consumer).
            consumers.read_until(lambda: bool(held(0) and held(1)) and held(0) | held(1) == {0, 1, 2, 3}
                                 and not held(0) & held(1))
            rc, events, err = node("produce.js", {"nameSrv": address, "topic": "JsShared", "group": "js-pg",
                                                 "messages": sent_msgs})
            assert rc == 0, err[-3000:]
            consumers.read_until(lambda: {e["key"] for e in consumers.events("message")} >= keys)
            consumers.finish()
    got = [by_event(s, "message") for s in consumers.seen]
    assert sorted(e["key"] for g in got for e in g) == sorted(keys)  # once each
    assert len(held(0)) == len(held(1)) == 2
    for i in range(2):
        assert {e["queueId"] for e in got[i]} == held(i)


class Consumers:
    """`count` consume.js processes that run until their standard input closes; their JSON lines."""

    def __init__(self, count: int, config: dict[str, Any]) -> None:
        assert NODE is not None
        self.procs = [subprocess.Popen([NODE, str(JS / "consume.js"), json.dumps(config)], cwd=str(JS),
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                      for _ in range(count)]
        self.seen: list[list[dict[str, Any]]] = [[] for _ in range(count)]
        self._partial = [b"" for _ in range(count)]

    def __enter__(self) -> Consumers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for s in self.seen for e in by_event(s, name)]

    def held(self, i: int) -> set[int]:
        """The queue ids consumer `i` said it holds last."""
        changes = by_event(self.seen[i], "queues")
        return set(changes[-1]["queueIds"]) if changes else set()

    def read_until(self, done: Callable[[], bool], timeout: float = 60.0) -> None:
        """Read what the processes print until `done()` holds. Reads the pipes' descriptors: a
        buffered readline would pull lines into Python's buffer, where select() no longer sees them."""
        with selectors.DefaultSelector() as sel:
            for i, proc in enumerate(self.procs):
                assert proc.stdout is not None
                sel.register(proc.stdout.fileno(), selectors.EVENT_READ, i)
            end = time.monotonic() + timeout
            while not done():
                ready = sel.select(max(0.0, end - time.monotonic()))
                assert ready, f"still waiting after {timeout} s; seen: {[s[-3:] for s in self.seen]}"
                for key, _ in ready:
                    chunk = os.read(key.fd, 65536)
                    assert chunk, f"consumer {key.data} exited: {self.seen[key.data][-3:]}"
                    self._take(key.data, chunk)

    def finish(self) -> None:
        """Close each one's standard input (it closes its consumer and exits 0) and read the rest."""
        for i, proc in enumerate(self.procs):
            out, _ = proc.communicate(timeout=60)
            self._take(i, out + b"\n")
            assert proc.returncode == 0 and by_event(self.seen[i], "done"), self.seen[i][-3:]

    def _take(self, i: int, chunk: bytes) -> None:
        *lines, self._partial[i] = (self._partial[i] + chunk).split(b"\n")
        self.seen[i] += [json.loads(line) for line in lines if line.startswith(b"{")]
