"""The command line's `-n HOST:PORT`: each command of `REMOTE_COMMANDS` run on a serving process gives
what the same command gives on the store's path; the others refuse with exit status 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.cli import main
from mqlite.cli.context import REMOTE_COMMANDS, Context
from mqlite.errors import IllegalStateError
from mqlite.message import decode_offset_msg_id
from support import no_leftover_threads  # noqa: F401 - an autouse fixture


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[mqlite.Broker, str]]:
    with mqlite.open(str(tmp_path / "mq"), commitlog_file_size=1 << 20) as broker:
        broker.create_topic("T", 2)
        with mqlite.Producer(broker, group="pg", trace=True) as producer:
            for i in range(4):
                producer.send(mqlite.Message("T", b"m%d" % i, tags="A" if i % 2 else "B", keys=[f"k{i}"]),
                              queue=mqlite.MessageQueue("T", broker.broker_name, i % 2))
            producer.send(mqlite.Message("%DLQ%g", b"dead"))
        # Group cg consumed queue 0 of T, group cg2 all of T: progress, stats and tracks have rows.
        broker.commit_offset("cg", mqlite.MessageQueue("T", broker.broker_name, 0), 1)
        for queue_id in (0, 1):
            broker.commit_offset("cg2", mqlite.MessageQueue("T", broker.broker_name, queue_id), 2)
        assert broker.offsets is not None
        broker.offsets.persist()  # what a reader of the path sees
        broker.query_trace("x")  # stores the producer's trace records
        broker.store.wait_dispatched()
        server = broker.serve("127.0.0.1:0")
        yield broker, server.address
        server.close()


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_read_commands_over_n_answer_as_on_the_path(served: tuple[mqlite.Broker, str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    broker, address = served
    msg = broker.query_message_by_offset("T", 1, 0)
    commands = [
        ["topicList"],
        ["topicStatus", "-t", "T"],
        ["queryMsgById", "-i", msg.msg_id],
        ["queryMsgById", "-i", msg.offset_msg_id],
        ["queryMsgByKey", "-t", "T", "-k", "k1"],
        ["queryMsgByOffset", "-t", "T", "-i", "1", "-o", "0"],
        ["printMsg", "-t", "T", "-s", "A"],
        ["consumeMessage", "-t", "T", "-c", "3"],
        ["queryDlq", "-g", "g"],
        ["consumerProgress"],
        ["consumerProgress", "-g", "cg"],
        ["consumerProgress", "-g", "cg2", "-t", "T"],
        ["statsAll"],
        ["statsAll", "-t", "T"],
        ["queryMsgTraceById", "-i", msg.msg_id],
    ]
    for argv in commands:
        over_the_wire = _json(capsys, "-n", address, *argv)
        on_the_path = _json(capsys, *argv, broker.path)
        assert over_the_wire == on_the_path, argv
        assert over_the_wire, argv  # something was found: the comparison is not of two empty lists
    assert {c[0] for c in commands} | {"updateTopic", "deleteTopic", "resetOffsetByTime", "skipAccumulatedMessage",
                                       "sendMessage", "resendDlq",
                                       "dashboard"} == REMOTE_COMMANDS  # dashboard -n: tests/test_dashboard.py


def test_write_commands_over_n_change_the_served_store(served: tuple[mqlite.Broker, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    broker, address = served
    _json(capsys, "-n", address, "updateTopic", "-t", "U", "-r", "3", "-w", "3")
    assert broker.topic_config("U") is not None and broker.topic_config("U").read_queue_nums == 3  # type: ignore[union-attr]
    [sent] = _json(capsys, "-n", address, "sendMessage", "-t", "U", "-p", "hello")
    assert broker.view_message(sent["msg_id"]).body == b"hello"
    rows = _json(capsys, "-n", address, "skipAccumulatedMessage", "-g", "cg", "-t", "T")
    assert {(r["queue_id"], r["offset"]) for r in rows} == {(0, 2), (1, 2)}
    rows = _json(capsys, "-n", address, "resetOffsetByTime", "-g", "cg", "-t", "T", "-s", "0")
    assert {(r["queue_id"], r["offset"]) for r in rows} == {(0, 0), (1, 0)}
    assert broker.query_offset("cg", mqlite.MessageQueue("T", broker.broker_name, 1)) == 0
    _json(capsys, "-n", address, "deleteTopic", "-t", "U")
    assert broker.topic_config("U") is None


def test_commands_that_read_files_refuse_n_and_bad_combinations_are_usage_errors(
        served: tuple[mqlite.Broker, str], capsys: pytest.CaptureFixture[str]) -> None:
    broker, address = served
    for argv in (["-n", address, "storeInfo"], ["-n", address, "verify"], ["storeInfo", "-n", address],
                 ["-n", address, "topicList", broker.path], ["-n", address, "topicList", "-n", "127.0.0.1:1"]):
        assert main(argv) == 2, argv
        _, err = capsys.readouterr()
        assert "-n" in err and len(err.strip().splitlines()) == 1, err
    assert main(["-n", address, "consumerProgress", "-g", "nobody"]) == 2  # as on the path: an unknown group
    _, err = capsys.readouterr()
    assert f"consumer group 'nobody' has no offsets, retry or dead-letter topic in {address}\n" in err
    assert main(["-n", "127.0.0.1:1", "topicList"]) == 1  # nothing serves there: one line, status 1
    _, err = capsys.readouterr()
    assert "cannot connect" in err


def test_a_command_run_over_n_gets_only_the_admin_surface() -> None:
    # Context.admin() is typed AdminSurface (what Broker and RemoteBroker share; mypy checks the commands
    # against it); reader()/writer() give a local Broker only, never a connection passed off as one.
    ctx = Context("topicList", "unused", address="127.0.0.1:1")
    for local in (ctx.reader, ctx.writer):
        with pytest.raises(IllegalStateError, match="Context.admin"):
            local()
    ctx.close()


_LETTER_IDS = ("0A00000100002A9F0000000000000001", "0A00000100002A9F0000000000000002")


def _dead_letters(path: str, **settings: Any) -> mqlite.Broker:
    """A store with two dead letters of group g2 (as a consumer's send-back leaves them) from topic T."""
    broker = mqlite.open(path, commitlog_file_size=1 << 20, **settings)
    broker.create_topic("T", 2)
    broker.ensure_group_topic("g2", "%DLQ%g2")
    for i, msg_id in enumerate(_LETTER_IDS):
        broker.put_message("%DLQ%g2", 0, b"dead%d" % i,
                           {"RETRY_TOPIC": "T", "UNIQ_KEY": msg_id, "KEYS": f"k{i}", "DLQ_ORIGIN_TOPIC": "T",
                            "DLQ_ORIGIN_MESSAGE_ID": msg_id, "RECONSUME_TIME": "17", "MAX_RECONSUME_TIMES": "16"},
                           flag=3, born_timestamp=1_000 + i, reconsume_times=17)
    broker.store.wait_dispatched()
    return broker


def test_resend_dlq_over_n_sends_the_copies_the_path_writes(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # resendDlq changes the store: run over -n on a served store and on the path of an identical one.
    path = str(tmp_path / "local")
    _dead_letters(path).close()
    with _dead_letters(str(tmp_path / "served")) as served:
        server = served.serve("127.0.0.1:0")
        try:
            resent = []
            for argv in (["resendDlq", "-g", "g2", "-i", _LETTER_IDS[1], "--to-origin"],
                         ["resendDlq", "-g", "g2", "--all"]):
                over_the_wire = _json(capsys, "-n", server.address, *argv)
                on_the_path = _json(capsys, *argv, path)
                # offset_msg_id names the store host: the serving address there, the store's default here.
                assert ([{**r, "offset_msg_id": decode_offset_msg_id(r["offset_msg_id"])[2]} for r in over_the_wire]
                        == [{**r, "offset_msg_id": decode_offset_msg_id(r["offset_msg_id"])[2]} for r in on_the_path]
                        ), argv
                resent += over_the_wire
        finally:
            server.close()
        assert [(r["msg_id"], r["topic"]) for r in resent] == [
            (_LETTER_IDS[1], "T"), (_LETTER_IDS[0], "%RETRY%g2"), (_LETTER_IDS[1], "%RETRY%g2")]
        served.store.wait_dispatched()
        with mqlite.open(path, read_only=True) as local:
            for row in resent:
                copies = [b.query_message_by_offset(row["topic"], row["queue_id"], row["queue_offset"])
                          for b in (served, local)]
                assert [(m.msg_id, m.body, m.properties, m.flag, m.sys_flag, m.born_timestamp, m.reconsume_times)
                        for m in copies] == [(copies[1].msg_id, copies[1].body, copies[1].properties, 3,
                                              copies[1].sys_flag, copies[1].born_timestamp, 0)] * 2, row


def test_resend_dlq_over_n_checks_the_destinations_as_on_the_path(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # The origin topic is gone and the broker creates no topics: --to-origin is refused before any send.
    path = str(tmp_path / "local")
    with _dead_letters(path, auto_create_topic=False) as local:
        local.delete_topic("T")
    with _dead_letters(str(tmp_path / "served"), auto_create_topic=False) as served:
        served.delete_topic("T")
        server = served.serve("127.0.0.1:0")
        try:
            errors = []
            for argv in (["-n", server.address, "resendDlq", "-g", "g2", "--all", "--to-origin"],
                         ["resendDlq", "-g", "g2", "--all", "--to-origin", path]):
                assert main(argv) == 1, argv
                errors.append(capsys.readouterr().err)
        finally:
            server.close()
        assert errors[0] == errors[1] and "topic 'T' does not exist" in errors[0], errors
        assert served.topic_config("T") is None
