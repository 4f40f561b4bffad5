"""The `mqlite` command line: every command's table and JSON output, every bad argument, the writer lock.

Most tests call `mqlite.cli.main([...])` in this process against real stores
(fast); the last ones run `python -m mqlite` in a child process, beside a live
writer in another process and with stderr piped.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.cli import dlq as cli_dlq
from mqlite.cli import main
from mqlite.cli.args import parse_time
from mqlite.cli.commands import COMMANDS
from mqlite.clock import ManualClock
from support import SMALL_STORE as SMALL

HOUR_MS = 3_600_000
SRC = str(Path(__file__).resolve().parent.parent / "src")


@dataclass(frozen=True)
class Facts:
    """What the template store holds."""

    path: str
    start_ms: int  # store time of message 0; message i is stored at start_ms + 1000 * i
    msg_ids: list[str]  # msg_id of message i (queue i % 2, offset i // 2, tags TagA/TagB, key k<i>)
    offset_ids: list[str]
    dlq_offset_id: str  # the dead-letter copy of message 0 (group cg)


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQLITE_STORE", raising=False)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Facts:
    """orders (2 queues, 6 messages an hour ago), empty (4 queues), groups cg and cg2, one dead letter of cg.

    cg has consumed message 0 (queue 0 at offset 1); cg2 has consumed everything.
    """
    path = str(tmp_path_factory.mktemp("cli") / "store")
    start = int(time.time() * 1000) - HOUR_MS
    clock = ManualClock(start - 1000)
    msg_ids, offset_ids = [], []
    with mqlite.open(path, clock=clock, **SMALL) as broker:
        broker.create_topic("orders", 2)
        broker.create_topic("empty", 4)
        with mqlite.Producer(broker, group="pg") as producer:
            for i in range(6):
                clock.advance(1000)
                msg = mqlite.Message("orders", f"body-{i}".encode(), tags="TagB" if i % 2 else "TagA", keys=[f"k{i}"])
                result = producer.send(msg, queue=mqlite.MessageQueue("orders", broker.broker_name, i % 2))
                msg_ids.append(result.msg_id)
                offset_ids.append(result.offset_msg_id)
        q0, q1 = (mqlite.MessageQueue("orders", broker.broker_name, q) for q in (0, 1))
        broker.commit_offset("cg", q0, 1)
        broker.commit_offset("cg2", q0, 3)
        broker.commit_offset("cg2", q1, 3)
        clock.advance(1000)
        dead = broker.send_message_back("cg", broker.query_message_by_offset("orders", 0, 0), delay_level=-1)
    return Facts(path, start, msg_ids, offset_ids, dead.offset_msg_id)


@pytest.fixture()
def store(template: Facts, tmp_path: Path) -> Facts:
    """A private copy of the template, for commands that change the store."""
    path = str(tmp_path / "store")
    shutil.copytree(template.path, path)
    return Facts(path, template.start_ms, template.msg_ids, template.offset_ids, template.dlq_offset_id)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit status, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """stdout of a run that must succeed."""
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == "", (code, err)
    return out


def rows(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    """The JSON document of a run with --json (one list of objects)."""
    doc = json.loads(ok(capsys, *argv, "--json"))
    assert isinstance(doc, list) and all(isinstance(r, dict) for r in doc)
    return doc


def header(out: str) -> list[str]:
    """The `#` columns of the first table header line in `out`."""
    line = next(line for line in out.splitlines() if line.startswith("#"))
    return [h.strip() for h in line.split("  ") if h.strip()]


# -- topics ------------------------------------------------------------------------------------------------------
def test_topic_list(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "--store", template.path, "topicList")
    assert {"orders", "empty", "%DLQ%cg"} <= set(out.split())
    assert {r["topic"] for r in rows(capsys, "topicList", template.path)} == set(out.split())


def test_topic_status(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "--store", template.path, "topicStatus", "-t", "orders")
    assert header(out) == ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"]
    assert out.splitlines()[1].split()[:4] == ["mqlite", "0", "0", "3"]
    got = rows(capsys, "--store", template.path, "topicStatus", "-t", "orders")
    assert [(r["queue_id"], r["min_offset"], r["max_offset"], r["last_update_timestamp"]) for r in got] == [
        (0, 0, 3, template.start_ms + 4000), (1, 0, 3, template.start_ms + 5000)]
    assert got[0]["topic"] == "orders" and got[0]["broker_name"] == "mqlite"


def test_update_topic(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "updateTopic", store.path, "-t", "news", "-w", "3")
    assert out.splitlines() == [f"create topic to {store.path} success.",
                                "TopicConfig [topicName=news, readQueueNums=3, writeQueueNums=3, perm=RW-, "
                                "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]"]
    [row] = rows(capsys, "updateTopic", store.path, "-t", "news", "-p", "4", "-o", "true")
    assert row == {"topic_name": "news", "read_queue_nums": 3, "write_queue_nums": 3, "perm": 4,
                   "topic_filter_type": "SINGLE_TAG", "topic_sys_flag": 0, "order": True}
    [row] = rows(capsys, "updateTopic", store.path, "-t", "fresh")
    assert row["read_queue_nums"] == 8  # mqadmin's default for a new topic
    assert [(r["queue_id"], r["max_offset"]) for r in rows(capsys, "topicStatus", store.path, "-t", "news")] == [
        (0, 0), (1, 0), (2, 0)]  # every queue, as mqadmin, before any send
    with mqlite.open(store.path) as broker:
        config = broker.topic_config("news")
        assert config is not None and (config.write_queue_nums, config.perm, config.order) == (3, 4, True)
    # Read and write counts apart (RocketMQ's way to shrink a topic); an update without counts keeps both.
    [row] = rows(capsys, "updateTopic", store.path, "-t", "news", "-r", "3", "-w", "2")
    assert (row["read_queue_nums"], row["write_queue_nums"]) == (3, 2)
    [row] = rows(capsys, "updateTopic", store.path, "-t", "news", "-p", "6")
    assert (row["read_queue_nums"], row["write_queue_nums"], row["perm"]) == (3, 2, 6)


def test_delete_topic(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    assert ok(capsys, "deleteTopic", store.path, "-t", "empty") == \
        f"delete topic [empty] from store [{store.path}] success.\n"
    assert rows(capsys, "deleteTopic", store.path, "-t", "orders") == [{"topic": "orders"}]
    assert not {"orders", "empty"} & set(ok(capsys, "topicList", store.path).split())


# -- consumer groups ----------------------------------------------------------------------------------------------
def test_consumer_progress_of_one_group(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "consumerProgress", template.path, "-g", "cg")
    assert header(out) == ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Client IP",
                           "#Diff", "#LastTime"]
    assert out.splitlines()[1].split()[:7] == ["orders", "mqlite", "0", "3", "1", "N/A", "2"]
    assert out.rstrip().endswith("Consume Diff Total: 5")
    got = rows(capsys, "consumerProgress", template.path, "-g", "cg")
    assert got[0] == {"topic": "orders", "broker_name": "mqlite", "queue_id": 0, "broker_offset": 3,
                      "consumer_offset": 1, "client_id": "", "last_timestamp": template.start_ms, "diff": 2}
    assert [(r["queue_id"], r["diff"]) for r in got] == [(0, 2), (1, 3)]
    assert rows(capsys, "consumerProgress", template.path, "-g", "cg", "-t", "empty") == []


def test_consumer_progress_of_every_group(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "consumerProgress", template.path)
    assert header(out) == ["#Group", "#Diff Total"]
    assert rows(capsys, "consumerProgress", template.path) == [{"group": "cg", "diff_total": 5},
                                                               {"group": "cg2", "diff_total": 0}]


def test_reset_offset_by_time(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    # Message 2 (queue 0, offset 1) and message 3 (queue 1, offset 1) are the first at or after start + 2 s.
    when = datetime.fromtimestamp((store.start_ms + 2000) / 1000).strftime("%Y-%m-%d#%H:%M:%S:000")
    out = ok(capsys, "resetOffsetByTime", store.path, "-g", "cg", "-t", "orders", "-s", when)
    assert header(out) == ["#brokerName", "#queueId", "#offset"]
    assert [line.split() for line in out.splitlines()[2:]] == [["mqlite", "0", "1"], ["mqlite", "1", "1"]]
    assert rows(capsys, "resetOffsetByTime", store.path, "-g", "cg", "-t", "orders", "-s", "0") == [
        {"topic": "orders", "broker_name": "mqlite", "queue_id": 0, "offset": 0},
        {"topic": "orders", "broker_name": "mqlite", "queue_id": 1, "offset": 0}]
    assert rows(capsys, "resetOffsetByTime", store.path, "-g", "cg", "-t", "orders", "-q", "1", "-o", "2") == [
        {"topic": "orders", "broker_name": "mqlite", "queue_id": 1, "offset": 2}]
    assert rows(capsys, "resetOffsetByTime", store.path, "-g", "cg", "-t", "orders", "-q", "0", "-o", "3")[0][
        "offset"] == 3  # the end of the queue: nothing left to consume
    progress = rows(capsys, "consumerProgress", store.path, "-g", "cg")
    assert [r["consumer_offset"] for r in progress] == [3, 2]


def test_skip_accumulated_message(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "skipAccumulatedMessage", store.path, "-g", "cg", "-t", "orders")
    assert header(out) == ["#brokerName", "#queueId", "#offset"]
    assert [r["offset"] for r in rows(capsys, "skipAccumulatedMessage", store.path, "-g", "new", "-t", "orders")] \
        == [3, 3]
    assert [r["diff"] for r in rows(capsys, "consumerProgress", store.path, "-g", "cg")] == [0, 0]


# -- messages ------------------------------------------------------------------------------------------------------
def test_query_msg_by_id(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    msg_id = template.msg_ids[0]
    out = ok(capsys, "queryMsgById", template.path, "-i", msg_id)
    assert out.startswith(f"{'OffsetID:':20s} {template.offset_ids[0]}\n")
    assert "Topic:               orders" in out and "Tags:                [TagA]" in out
    assert "Store Host:" in out and "Message Body:" not in out  # mqadmin prints the body only with -f
    assert "Message Body:        body-0" in ok(capsys, "queryMsgById", template.path, "-i", msg_id, "-f", "UTF-8")
    # The original, not its dead-letter copy (same msg_id); -t names the copy's topic; several ids at once.
    [row] = rows(capsys, "queryMsgById", template.path, "-i", msg_id.lower())
    assert (row["topic"], row["msg_id"], row["offset_msg_id"], row["body"]) == \
        ("orders", msg_id, template.offset_ids[0], "body-0")
    [row] = rows(capsys, "queryMsgById", template.path, "-i", msg_id, "-t", "%DLQ%cg")
    assert row["offset_msg_id"] == template.dlq_offset_id and row["properties"]["RETRY_TOPIC"] == "orders"
    both = rows(capsys, "queryMsgById", template.path, "-i", f"{template.offset_ids[3]},{template.dlq_offset_id}")
    assert [(r["topic"], r["queue_offset"]) for r in both] == [("orders", 1), ("%DLQ%cg", 0)]


def test_query_msg_trace_by_id(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    path = str(tmp_path / "traced")
    consumed = threading.Event()
    with mqlite.open(path) as broker:
        with mqlite.Producer(broker, "pg", trace=True) as producer:
            msg_id = producer.send(mqlite.Message("orders", b"x", tags="TagA", keys="k1")).msg_id
        consumer = mqlite.PushConsumer(broker, "cg", subscription={"orders": "*"}, trace=True,
                                       listener=lambda msgs, ctx: consumed.set(),
                                       consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        with consumer:
            assert consumed.wait(10) and consumer.join(10)
    out = ok(capsys, "queryMsgTraceById", path, "-i", msg_id)
    assert header(out) == ["#Type", "#Group", "#ClientHost", "#Time", "#CostTimes", "#Status", "#Topic", "#MsgId"]
    assert [line.split()[:2] for line in out.splitlines()[1:4]] == [["Pub", "pg"], ["SubBefore", "cg"],
                                                                     ["SubAfter", "cg"]]
    assert f"track of {msg_id} in group cg: CONSUMED" in out
    found = rows(capsys, "queryMsgTraceById", path, "-i", msg_id)
    assert [(r["kind"], r["msg_type"], r["group_name"], r["status"]) for r in found[:3]] == [
        ("trace", "Pub", "pg", "success"), ("trace", "SubBefore", "cg", "success"),
        ("trace", "SubAfter", "cg", "success")]
    assert found[0]["tags"] == "TagA" and found[0]["keys"] == "k1" and found[0]["topic"] == "orders"
    assert found[3:] == [{"kind": "track", "msg_id": msg_id, "consumer_group": "cg", "track_type": "CONSUMED",
                          "exception_desc": ""}]
    assert rows(capsys, "queryMsgTraceById", path, "-i", "0" * 32) == []  # never traced
    # The records keep Broker.query_trace's order (causal), whatever their time stamps say.
    query_trace = mqlite.Broker.query_trace
    monkeypatch.setattr(mqlite.Broker, "query_trace", lambda self, i: query_trace(self, i)[::-1])
    assert [r.get("msg_type") for r in rows(capsys, "queryMsgTraceById", path, "-i", msg_id)] == [
        "SubAfter", "SubBefore", "Pub", None]


def test_query_msg_by_key(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "queryMsgByKey", template.path, "-t", "orders", "-k", "k3")
    assert header(out) == ["#Message ID", "#QID", "#Offset"]
    assert out.splitlines()[1].split() == [template.msg_ids[3], "1", "1"]
    [row] = rows(capsys, "queryMsgByKey", template.path, "-t", "orders", "-k", "k3")
    assert (row["msg_id"], row["keys"], row["body"]) == (template.msg_ids[3], ["k3"], "body-3")
    assert rows(capsys, "queryMsgByKey", template.path, "-t", "orders", "-k", "k3",
                "-b", str(template.start_ms + 3001)) == []


def test_query_msg_by_offset(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "queryMsgByOffset", template.path, "-t", "orders", "-b", "mqlite", "-i", "1", "-o", "2")
    assert f"OffsetID:            {template.offset_ids[5]}" in out and "Queue Offset:        2" in out
    [row] = rows(capsys, "queryMsgByOffset", template.path, "-t", "orders", "-i", "1", "-o", "2")
    assert (row["msg_id"], row["queue_id"], row["queue_offset"], row["tags"]) == (template.msg_ids[5], 1, 2, "TagB")


def test_print_msg(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "printMsg", template.path, "-t", "orders")
    lines = out.splitlines()
    assert lines[0] == "minOffset=0, maxOffset=3, MessageQueue [topic=orders, brokerName=mqlite, queueId=0]"
    messages = [line for line in lines if line.startswith("MSGID: ")]
    assert len(messages) == 6 and messages[0].startswith(f"MSGID: {template.msg_ids[0]} MessageExt [brokerName=")
    assert messages[0].endswith("BODY: body-0")
    got = rows(capsys, "printMsg", template.path, "-t", "orders")
    assert sorted(r["body"] for r in got) == [f"body-{i}" for i in range(6)]
    tagged = rows(capsys, "printMsg", template.path, "-t", "orders", "-s", "TagB")
    assert sorted(r["msg_id"] for r in tagged) == sorted(template.msg_ids[i] for i in (1, 3, 5))
    # A window of store times (ISO-8601 with a zone, and epoch ms): messages 2 and 3 only.
    begin = datetime.fromtimestamp((template.start_ms + 2000) / 1000).astimezone().isoformat()
    window = rows(capsys, "printMsg", template.path, "-t", "orders", "-b", begin, "-e", str(template.start_ms + 4000))
    assert sorted(r["body"] for r in window) == ["body-2", "body-3"]
    hidden = ok(capsys, "printMsg", template.path, "-t", "orders", "-d", "false", "-e", str(template.start_ms + 1))
    assert hidden.count("BODY: NOT PRINT BODY") == 1
    assert "body" not in rows(capsys, "printMsg", template.path, "-t", "orders", "-d", "false")[0]


def test_send_message(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "sendMessage", store.path, "-t", "orders", "-p", "héllo", "-c", "TagC", "-k", "a b")
    assert header(out) == ["#Broker Name", "#QID", "#Send Result", "#MsgId"]
    broker_name, queue_id, status, msg_id = out.splitlines()[1].split()
    assert (broker_name, status) == ("mqlite", "SEND_OK")
    [row] = rows(capsys, "queryMsgById", store.path, "-i", msg_id)
    assert (row["body"], row["tags"], row["keys"], row["queue_id"]) == ("héllo", "TagC", ["a", "b"], int(queue_id))
    [sent] = rows(capsys, "sendMessage", store.path, "-t", "orders", "-p", "x", "-b", "mqlite", "-i", "1")
    expected_offset = 4 if queue_id == "1" else 3  # the first send went to a queue the producer chose
    assert (sent["queue_id"], sent["queue_offset"], sent["send_status"], sent["topic"]) == \
        (1, expected_offset, "SEND_OK", "orders")
    assert sent["offset_msg_id"] == rows(capsys, "queryMsgById", store.path, "-i", sent["msg_id"])[0]["offset_msg_id"]


def test_consume_message(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "consumeMessage", store.path, "-t", "orders", "-c", "2")
    assert [line.split()[1] for line in out.splitlines()] == store.msg_ids[0:4:2]
    got = rows(capsys, "consumeMessage", store.path, "-t", "orders", "-b", "mqlite", "-i", "1", "-o", "1")
    assert [r["body"] for r in got] == ["body-3", "body-5"]
    # --commit: as group cg (queue 0 at 1, queue 1 at 0), committing past what was read.
    got = rows(capsys, "consumeMessage", store.path, "-t", "orders", "-g", "cg", "--commit", "-c", "3")
    assert [r["body"] for r in got] == ["body-2", "body-4", "body-1"]
    assert [r["consumer_offset"] for r in rows(capsys, "consumerProgress", store.path, "-g", "cg")] == [3, 1]
    out = ok(capsys, "consumeMessage", store.path, "-t", "orders", "-g", "cg", "--commit")
    assert out.splitlines()[-1] == "committed offset 3 of MessageQueue [topic=orders, brokerName=mqlite, queueId=1] " \
                                   "for group cg"


# -- dead letters -------------------------------------------------------------------------------------------------
def test_query_dlq(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "queryDlq", template.path, "-g", "cg")
    assert header(out) == ["#Message ID", "#Origin Topic", "#Tag", "#Key", "#Reconsume Times", "#Store Time"]
    assert out.splitlines()[1].split()[:5] == [template.msg_ids[0], "orders", "TagA", "k0", "1"]
    [row] = rows(capsys, "queryDlq", template.path, "-g", "cg")
    assert (row["topic"], row["msg_id"], row["offset_msg_id"], row["body"]) == \
        ("%DLQ%cg", template.msg_ids[0], template.dlq_offset_id, "body-0")
    assert rows(capsys, "queryDlq", template.path, "-g", "cg2") == []  # no DLQ topic: an empty page
    assert rows(capsys, "queryDlq", template.path, "-g", "cg", "-e", str(template.start_ms)) == []


def test_resend_dlq(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    msg_id = store.msg_ids[0]
    out = ok(capsys, "resendDlq", store.path, "-g", "cg", "--all")
    assert header(out) == ["#Message ID", "#Resent To", "#QID", "#Offset"]
    assert out.splitlines()[1].split() == [msg_id, "%RETRY%cg", "0", "0"]
    [copy] = rows(capsys, "printMsg", store.path, "-t", "%RETRY%cg")
    assert (copy["msg_id"], copy["reconsume_times"], copy["properties"]["RETRY_TOPIC"], copy["body"]) == \
        (msg_id, 0, "orders", "body-0")
    assert "DLQ_ORIGIN_TOPIC" not in copy["properties"]
    [row] = rows(capsys, "resendDlq", store.path, "-g", "cg", "-i", msg_id, "--to-origin")
    assert (row["msg_id"], row["topic"], row["queue_id"], row["queue_offset"]) == (msg_id, "orders", 0, 3)
    [again] = rows(capsys, "queryMsgByOffset", store.path, "-t", "orders", "-i", "0", "-o", "3")
    assert (again["msg_id"], again["body"], again["offset_msg_id"]) == (msg_id, "body-0", row["offset_msg_id"])
    assert "RETRY_TOPIC" not in again["properties"]
    # A live consumer of cg gets the retried copy under its original topic.
    with mqlite.LitePullConsumer(store.path, group="cg") as consumer:
        consumer.subscribe("%RETRY%cg", "*")
        polled = consumer.poll(timeout=2.0)
    assert [(m.msg_id, m.body) for m in polled] == [(msg_id, b"body-0")]


def test_resend_dlq_checks_every_destination_first(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    with mqlite.open(store.path) as broker:  # a second dead letter of cg, from the message at orders/1 offset 0
        broker.send_message_back("cg", broker.query_message_by_offset("orders", 1, 0), delay_level=-1)
    ok(capsys, "updateTopic", store.path, "-t", "orders", "-p", "4")
    code, out, err = run(capsys, "resendDlq", store.path, "-g", "cg", "--all", "--to-origin")
    assert (code, out) == (1, "")
    assert err == ("mqlite resendDlq: topic 'orders' is not writable (perm 4): make it writable with "
                   "`mqlite updateTopic -t orders -p 6`; nothing was re-sent\n")
    assert [r["max_offset"] for r in rows(capsys, "topicStatus", store.path, "-t", "orders")] == [3, 3]


def test_resend_dlq_shows_what_was_sent_before_a_store_failure(
        store: Facts, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with mqlite.open(store.path) as broker:
        broker.send_message_back("cg", broker.query_message_by_offset("orders", 1, 0), delay_level=-1)
    real = cli_dlq.resend_dlq_message
    calls: list[str] = []

    def disk_full_on_the_second(broker: mqlite.Broker, msg: mqlite.MessageExt, *args: Any, **kwargs: Any) -> Any:
        calls.append(msg.msg_id)
        if len(calls) % 2 == 0:
            raise OSError(28, "No space left on device")
        return real(broker, msg, *args, **kwargs)

    monkeypatch.setattr(cli_dlq, "resend_dlq_message", disk_full_on_the_second)
    code, out, err = run(capsys, "resendDlq", store.path, "-g", "cg", "--all")
    assert code == 1 and header(out) == ["#Message ID", "#Resent To", "#QID", "#Offset"]
    assert [line.split() for line in out.splitlines()[1:]] == [[store.msg_ids[0], "%RETRY%cg", "0", "0"]]
    assert err == (f"mqlite resendDlq: re-sent 1 of 2 dead letters, then {store.msg_ids[1]} failed: "
                   "[Errno 28] No space left on device\n")
    code, out, err = run(capsys, "resendDlq", store.path, "-g", "cg", "--all", "--json")
    assert code == 1 and [r["queue_offset"] for r in json.loads(out)] == [1]  # valid JSON of what was done


# -- the store -------------------------------------------------------------------------------------------------------
def test_stats_all(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "statsAll", template.path)
    assert header(out) == ["#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour",
                           "#OutMsg24Hour"]
    assert ["empty", "0", "0.00", "0", "NO_CONSUMER"] in [line.split() for line in out.splitlines()]
    got = rows(capsys, "statsAll", template.path, "-t", "orders")
    assert got == [
        {"topic": "orders", "consumer_group": "cg", "accumulation": 5, "in_tps": 0.0, "out_tps": 0.0,
         "in_msg_24h": 6, "out_msg_24h": 1},
        {"topic": "orders", "consumer_group": "cg2", "accumulation": 0, "in_tps": 0.0, "out_tps": 0.0,
         "in_msg_24h": 6, "out_msg_24h": 6}]
    active = {r["topic"] for r in rows(capsys, "statsAll", template.path, "-a")}
    assert "orders" in active and "empty" not in active


def test_stats_all_clamps_offsets_past_the_end(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    with mqlite.open(store.path) as broker:  # an offset past the end of queue 0 (3 messages)
        broker.commit_offset("cg3", mqlite.MessageQueue("orders", broker.broker_name, 0), 99)
    [row] = [r for r in rows(capsys, "statsAll", store.path, "-t", "orders") if r["consumer_group"] == "cg3"]
    assert (row["in_msg_24h"], row["out_msg_24h"], row["accumulation"]) == (6, 3, 3)


def test_store_info(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "storeInfo", template.path)
    assert "commitlog_file_size                1048576" in out and "#Topic" in out
    [info] = rows(capsys, "storeInfo", template.path)
    assert info["clean_shutdown"] is True and info["commitlog_file_size"] == 1 << 20
    assert {(q["topic"], q["queue_id"]): q["max_offset"] for q in info["queues"]} == \
        {("orders", 0): 3, ("orders", 1): 3, ("%DLQ%cg", 0): 1}


def test_verify(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "verify", template.path)
    assert "7 records" in out and out.rstrip().endswith("OK: no problems found")
    [report] = rows(capsys, "verify", template.path)
    assert report["ok"] is True and report["records"] == 7 and report["problems"] == []


def test_store_from_environment(template: Facts, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQLITE_STORE", template.path)
    assert "orders" in ok(capsys, "topicList").split()
    assert {r["max_offset"] for r in rows(capsys, "--json", "topicStatus", "-t", "empty")} == {0}  # --json first too


# -- help, bad arguments, the lock ---------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, command, "--help")
    assert out.startswith(f"usage: mqlite {command} ") and "--json" in out and "--store" in out


def test_main_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "--help")
    assert all(c.name in out for c in COMMANDS) and "Exit status" in out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert ok(capsys, "--version") == f"mqlite {mqlite.__version__}\n"


MISSING = "/nonexistent/mqlite-store"
BAD_ARGUMENTS: list[tuple[list[str], int, str]] = [
    ([], 2, "no command given"),
    (["nosuchCommand"], 2, "invalid choice"),
    (["topicList", "--bogus"], 2, "unrecognized arguments"),
    (["topicStatus"], 2, "required: -t"),
    (["topicStatus", "-t", "nope"], 2, "topic 'nope' does not exist"),
    (["statsAll", "-t", "nope"], 2, "does not exist"),
    (["queryMsgByOffset", "-t", "orders", "-i", "x", "-o", "0"], 2, "bad number 'x'"),
    (["queryMsgByOffset", "-t", "orders", "-i", "-1", "-o", "0"], 2, "-i"),
    (["queryMsgByOffset", "-t", "orders", "-i", "7", "-o", "0"], 2, "has no queue 7"),
    (["queryMsgByOffset", "-t", "orders", "-i", "0", "-o", "99"], 1, "no message at orders/0 offset 99"),
    (["queryMsgByOffset", "-t", "orders", "-b", "other", "-i", "0", "-o", "0"], 2, "broker 'other'"),
    (["queryMsgByKey", "-t", "orders", "-k", "k1", "-m", "0"], 2, "bad number '0'"),
    (["queryMsgById", "-i", "zz"], 2, "bad message id 'ZZ'"),
    (["queryMsgById", "-i", "0" * 32], 1, "no message with id"),
    (["queryMsgById", "-i", "0" * 32, "-t", "orders"], 1, "no message with id"),
    (["printMsg", "-t", "orders", "-b", "yesterday"], 2, "bad time 'yesterday'"),
    (["printMsg", "-t", "orders", "-b", "2024-01-02", "-e", "2024-01-01"], 2, "begin time is after the end"),
    (["printMsg", "-t", "orders", "-c", "no-such-charset"], 2, "unknown charset"),
    (["printMsg", "-t", "orders", "-d", "maybe"], 2, "bad boolean"),
    (["printMsg", "-t", "orders", "-s", "||"], 2, "names no tag"),
    (["consumerProgress", "-g", "nobody"], 2, "consumer group 'nobody'"),
    (["consumeMessage", "-t", "orders", "-o", "1"], 2, "-o needs -i"),
    (["consumeMessage", "-t", "orders", "--commit"], 2, "--commit needs -g"),
    (["updateTopic", "-t", "bad topic!"], 2, "may only contain"),
    (["updateTopic", "-t", "x", "-p", "5"], 2, "invalid choice"),
    (["updateTopic", "-t", "x", "-o", "yes"], 2, "bad boolean"),
    (["deleteTopic", "-t", "nope"], 2, "does not exist"),
    (["resetOffsetByTime", "-g", "cg", "-t", "orders"], 2, "-s"),
    (["resetOffsetByTime", "-g", "cg", "-t", "orders", "-o", "1"], 2, "-o needs -q"),
    (["resetOffsetByTime", "-g", "cg", "-t", "nope", "-s", "now"], 2, "does not exist"),
    (["resetOffsetByTime", "-g", "cg", "-t", "orders", "-s", "2024-13-01"], 2, "bad time"),
    (["resetOffsetByTime", "-g", "cg", "-t", "orders", "-q", "0", "-o", "4"], 2, "give -o in [0, 3]"),
    (["resetOffsetByTime", "-g", "cg", "-t", "orders", "-q", "0", "-o", "9" * 20], 2, "give -o in [0, 3]"),
    (["resetOffsetByTime", "-g", "", "-t", "orders", "-s", "now"], 2, "consumer group must be a non-blank"),
    (["resetOffsetByTime", "-g", "c@g", "-t", "orders", "-s", "now"], 2, "may only contain"),
    (["skipAccumulatedMessage", "-g", "g" * 256, "-t", "orders"], 2, "the limit is 255"),
    (["consumeMessage", "-t", "orders", "-g", " ", "--commit"], 2, "consumer group must be a non-blank"),
    (["skipAccumulatedMessage", "-g", "cg"], 2, "required: -t"),
    (["sendMessage", "-t", "orders"], 2, "required: -p"),
    (["sendMessage", "-t", "orders", "-p", ""], 2, "body"),
    (["sendMessage", "-t", "SCHEDULE_TOPIC_XXXX", "-p", "x"], 2, "system topic"),
    (["sendMessage", "-t", "orders", "-p", "x", "-i", "9"], 2, "has no queue 9"),
    (["resendDlq", "-g", "cg"], 2, "--all"),
    (["resendDlq", "-g", "cg", "--all", "-i", "0" * 32], 2, "--all"),
    (["resendDlq", "-g", "cg", "-i", "0" * 32], 1, "no message with id"),
    (["--store", MISSING, "topicList"], 2, f"{MISSING} is not a directory"),
    (["verify", MISSING], 2, MISSING),
    (["topicList", "--store", "EMPTY_DIR"], 2, "is not a store"),
    (["topicList", "--store", ""], 2, "no store given"),
    (["topicList", "EMPTY_DIR", "--store", MISSING], 2, "two stores given"),
    (["--store", "EMPTY_DIR", "topicList", "--store", MISSING], 2, "two stores given"),
    (["printMsg", "-t", "orders", "-b", "0001-01-01"], 2, "out of range (1970 to epoch ms 9223372036854775807); "
                                                         "give epoch milliseconds, now, yyyy-MM-dd#HH:mm:ss:SSS"),
]


@pytest.mark.parametrize(("argv", "status", "says"), BAD_ARGUMENTS, ids=[" ".join(a[0]) or "-" for a in BAD_ARGUMENTS])
def test_bad_arguments_give_one_line_and_a_status(store: Facts, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  argv: list[str], status: int, says: str) -> None:
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    argv = [str(empty) if a == "EMPTY_DIR" else a for a in argv]
    if argv and argv[0] != "--store" and MISSING not in argv and "--store" not in argv:
        argv = ["--store", store.path, *argv]
    code, out, err = run(capsys, *argv)
    assert (code, out) == (status, ""), err
    assert len(err.splitlines()) == 1 and err.startswith("mqlite") and "Traceback" not in err, err
    assert says in err


WRITE_COMMANDS = [
    ["updateTopic", "-t", "x"], ["deleteTopic", "-t", "empty"],
    ["resetOffsetByTime", "-g", "cg", "-t", "orders", "-s", "now"],
    ["skipAccumulatedMessage", "-g", "cg", "-t", "orders"], ["sendMessage", "-t", "orders", "-p", "x"],
    ["resendDlq", "-g", "cg", "--all"], ["consumeMessage", "-t", "orders", "-g", "cg", "--commit"],
]


def test_write_commands_refuse_a_locked_store_and_read_commands_do_not(
        store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    with mqlite.open(store.path) as writer:
        writer.put_message("orders", 0, b"late")
        for argv in WRITE_COMMANDS:
            code, out, err = run(capsys, "--store", store.path, *argv)
            assert (code, out) == (1, ""), (argv, err)
            assert err == (f"mqlite {argv[0]}: {store.path} is locked by a live writer (this process); {argv[0]} "
                           "changes the store and needs the writer lock: stop that process or make the change "
                           "through its Broker\n")
        # Read commands open it read-only beside the writer and see what it dispatched.
        writer.store.wait_dispatched()  # type: ignore[attr-defined]
        assert [r["max_offset"] for r in rows(capsys, "--store", store.path, "topicStatus", "-t", "orders")] == [4, 3]
        assert len(rows(capsys, "--store", store.path, "consumeMessage", "-t", "orders")) == 7


def test_progress_shows_on_a_terminal_only(template: Facts, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    for argv in (["verify"], ["printMsg", "-t", "orders"], ["statsAll"]):
        assert main(["--store", template.path, *argv]) == 0
    shown = terminal.getvalue()
    assert "\rverify commit log: 100%" in shown and "printMsg reading:" in shown and "statsAll reading:" in shown
    assert all(not line.strip() for line in shown.split("\r")[-1:])  # the last draw is wiped
    capsys.readouterr()


def test_a_closed_pipe_is_not_a_problem_found(template: Facts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    class ClosedPipe(io.StringIO):  # stdout of `mqlite ... | head` once head has exited
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:  # what main() points at /dev/null, here a file of our own
            return fd

    fd = os.open(tmp_path / "stdout", os.O_WRONLY | os.O_CREAT)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", ClosedPipe())
            assert main(["printMsg", template.path, "-t", "orders"]) == 0
    finally:
        os.close(fd)
    assert capsys.readouterr() == ("", "")
    assert main(["topicList", template.path, "--store", os.path.join(template.path, ".")]) == 0  # one store
    capsys.readouterr()


# -- time arguments --------------------------------------------------------------------------------------------------
@pytest.fixture()
def shanghai(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC+8 (no DST), so "local" is checked against known numbers."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("text", "expected"), [
    ("1700000000000", 1_700_000_000_000),
    (" 0 ", 0),
    ("2023-11-15#06:13:20:123", 1_700_000_000_123),  # mqadmin's form, local time
    ("2023-11-15T06:13:20.123", 1_700_000_000_123),  # ISO-8601 without a zone: local time
    ("2023-11-15 06:13:20", 1_700_000_000_000),
    ("2023-11-15#06:13:20", 1_700_000_000_000),  # mqadmin's form without milliseconds (ISO allows any separator)
    ("2023-11-14T22:13:20Z", 1_700_000_000_000),
    ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
    ("2023-11-15", 1_699_977_600_000),
])
def test_parse_time(shanghai: None, text: str, expected: int) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "15/11/2023", "2023-02-30", "-5", "1.5e12", "0001-01-01",
                                  "1969-12-31T23:59:59Z", "9" * 20])
def test_parse_time_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="bad time"):
        parse_time(text)


def test_parse_time_now() -> None:
    assert parse_time("now", now=lambda: 12.3456) == 12345


# -- in another process --------------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (SRC, os.environ.get("PYTHONPATH"))))}
    env.pop("MQLITE_STORE", None)
    return subprocess.run([sys.executable, "-m", "mqlite", *args], capture_output=True, text=True, env=env, timeout=60)


WRITER = textwrap.dedent("""
    import sys, mqlite
    with mqlite.open(sys.argv[1]) as broker:
        broker.put_message("orders", 1, b"from the writer")
        broker.store.wait_dispatched()
        print("ready", flush=True)
        sys.stdin.read()  # hold the lock until the parent closes our stdin
""")


def test_beside_a_live_writer_process(store: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, store.path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        status = _cli("--store", store.path, "topicStatus", "-t", "orders", "--json")
        assert status.returncode == 0, status.stderr
        assert [r["max_offset"] for r in json.loads(status.stdout)] == [3, 4]
        locked = _cli("updateTopic", store.path, "-t", "x")
        assert locked.returncode == 1 and locked.stdout == ""
        assert locked.stderr.splitlines() == [
            f"mqlite updateTopic: {store.path} is locked by a live writer (process {writer.pid}); updateTopic changes "
            "the store and needs the writer lock: stop that process or make the change through its Broker"]
    finally:
        writer.communicate("", timeout=30)
    assert writer.returncode == 0
    assert main(["updateTopic", store.path, "-t", "x"]) == 0  # the lock went with the writer


def test_piped_runs_show_no_progress(template: Facts) -> None:
    for argv in (["verify"], ["printMsg", "-t", "orders"]):
        done = _cli("--store", template.path, *argv)
        assert done.returncode == 0 and done.stderr == "", (argv, done.stderr)
        assert done.stdout
