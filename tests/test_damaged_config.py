"""Damaged or hand-edited config files, `lock` and `abort` (issue 11): a recovery or a clear error.

Every config JSON file, damaged every way (invalid JSON, binary bytes, empty, the wrong shape, a
directory in its place): with a good `.bak` the store opens on it (logged, as RocketMQ's
`ConfigManager.loadBak`); without one, `StoreCorruptedError` names the file and the fix. Never a
raw exception, in the API or in the CLI (in-process and as a real `python -m mqlite` process).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import mqlite
from mqlite import LitePullConsumer, Message, MessageModel, MessageQueue, StoreCorruptedError, StoreLockedError
from mqlite.cli import main
from mqlite.offsetfile import side_offset_path
from mqlite.offsets import ConsumerOffsets
from mqlite.spark.groupoffsets import commit_stream_offsets
from support import TINY_STORE as SMALL

BROADCAST = os.path.join("broadcast_offsets", "c1", "bc", "offsets.json")
CONFIG_FILES = [os.path.join("config", n) for n in ("store.json", "topics.json", "consumerOffset.json",
                                                    "delayOffset.json")] + [BROADCAST]
DAMAGE: dict[str, bytes | None] = {
    "invalid JSON": b'{"offsetTable": {', "binary": b"\xff\xfe\x00\x81garbage", "empty": b"",
    "a list": b"[1, 2]", "a string": b'"text"',
    "wrong shape": b'{"offsetTable": [1], "topicConfigTable": [1], "timerState": 5, "dataVersion": {"counter": "x"},'
                   b' "commitlog_file_size": "big"}',
    "directory": None,
}


def _damage(path: Path, data: bytes | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if data is None:
        (path / "inside").mkdir(parents=True)
    else:
        path.write_bytes(data)


def _open_everything(root: Path) -> None:
    """Open the store and start a broadcasting consumer (which reads its offsets file)."""
    with mqlite.open(str(root)) as broker:
        consumer = LitePullConsumer(broker, "bc", message_model=MessageModel.BROADCASTING, client_id="c1",
                                    offset_store_dir=str(root / "broadcast_offsets"))
        consumer.subscribe("T")
        consumer.start()
        consumer.shutdown()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cleanly closed store with every config file and its `.bak` (each written at least twice)."""
    root = tmp_path_factory.mktemp("damage") / "store"
    for round_ in range(2):
        # A setting that differs each round: store.json is written only when it changes.
        with mqlite.open(str(root), **SMALL, sync_flush_timeout=5.0 + round_) as broker:
            broker.create_topic("T", 2)
            with mqlite.Producer(broker, "pg") as producer:
                for i in range(2):
                    producer.send(Message("T", b"now"), queue=MessageQueue("T", broker.broker_name, i))
                producer.send(Message("T", b"later", delay_time_level=1))
            broker.commit_offset("cg", MessageQueue("T", broker.broker_name, 0), round_ + 1)
            consumer = LitePullConsumer(broker, "bc", message_model=MessageModel.BROADCASTING, client_id="c1",
                                        offset_store_dir=str(root / "broadcast_offsets"), auto_commit=False)
            consumer.assign([MessageQueue("T", broker.broker_name, 1)])
            consumer.start()
            consumer.commit_sync({MessageQueue("T", broker.broker_name, 1): round_ + 1})
            consumer.shutdown()
            broker.create_topic(f"U{round_}", 1)
    for name in CONFIG_FILES:
        assert (root / name).is_file() and (root / (name + ".bak")).is_file(), name
    return root


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(template, root)
    return root


# The broadcasting file's offsetTable is a list, so "wrong shape" is its right shape (rows are checked alone).
REFUSED = [(name, kind) for name in CONFIG_FILES for kind in DAMAGE if (name, kind) != (BROADCAST, "wrong shape")]


@pytest.mark.parametrize(("name", "kind"), REFUSED)
def test_a_damaged_file_without_bak_is_refused_by_name(store: Path, name: str, kind: str) -> None:
    _damage(store / name, DAMAGE[kind])
    (store / (name + ".bak")).unlink()
    with pytest.raises(StoreCorruptedError, match=f"{os.path.basename(name)}.*delete it"):
        _open_everything(store)


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_damaged_file_falls_back_to_its_bak(store: Path, name: str, kind: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    bak = json.loads((store / (name + ".bak")).read_text())
    _damage(store / name, DAMAGE[kind])
    with caplog.at_level(logging.WARNING, logger="mqlite"):
        _open_everything(store)
    if not (kind == "wrong shape" and name == BROADCAST):
        assert any(os.path.basename(name) in r.getMessage() and ".bak" in r.getMessage() for r in caplog.records)
    if name == os.path.join("config", "consumerOffset.json"):
        assert ConsumerOffsets(str(store)).query("cg", "T", 0) == bak["offsetTable"]["T@cg"]["0"]


def test_a_missing_file_with_a_bak_uses_it(store: Path) -> None:
    """The crash window of `write_json_atomic`: the old file renamed to `.bak`, the new one not yet in place."""
    (store / "config" / "consumerOffset.json").unlink()
    assert ConsumerOffsets(str(store)).query("cg", "T", 0) == 1


def test_damaged_entries_are_skipped_and_the_rest_loads(store: Path) -> None:
    topics = store / "config" / "topics.json"
    document = json.loads(topics.read_text())
    table = document["topicConfigTable"]
    table["../../escape"] = {"topicName": "../../escape"}
    table["T"]["readQueueNums"] = "many"
    topics.write_text(json.dumps(document))
    with mqlite.open(str(store)) as broker:
        assert "../../escape" not in broker.topic_list()
        assert broker.topic_config("U0") is not None
        assert "T" in broker.topic_list()  # learned back from its consume queues


def test_the_spark_side_file_damaged(store: Path) -> None:
    side = Path(side_offset_path(str(store)))
    _damage(side, b"\x00\x01binary")
    with pytest.raises(StoreCorruptedError, match="sparkConsumerOffset.json.*delete it"):
        ConsumerOffsets(str(store))
    with pytest.raises(StoreCorruptedError, match="sparkConsumerOffset.json"):
        with mqlite.open(str(store)) as broker:
            commit_stream_offsets(str(store), "sg", {"T/0": 1})  # the store is held: the side file is written
            broker.close()


# -- lock and abort -----------------------------------------------------------------------------------------------
def test_a_lock_directory_is_refused_by_name(store: Path) -> None:
    _damage(store / "lock", None)
    with pytest.raises(StoreCorruptedError, match="lock is a directory"):
        mqlite.open(str(store))


def test_a_lock_file_of_garbage_bytes_is_taken_over(store: Path) -> None:
    (store / "lock").write_bytes(b"\xff\xfe\x00garbage")
    with mqlite.open(str(store)) as broker:
        assert (store / "lock").read_text() == str(os.getpid())
        assert broker.query_offset("cg", MessageQueue("T", broker.broker_name, 0)) == 2


def test_a_held_lock_with_garbage_bytes_reports_the_holder_unknown(store: Path) -> None:
    """Before issue 11 the pid was decoded as UTF-8: a binary lock file raised UnicodeDecodeError."""
    child = subprocess.Popen([sys.executable, "-c", _HOLD, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"held"
        with open(store / "lock", "r+b") as f:  # no lock taken: this process holds no store
            f.write(b"\xff\xfe\xfd\xfc")
        with pytest.raises(StoreLockedError) as info:
            mqlite.open(str(store))
        assert info.value.pid is None
        status, out, err = _cli("topicList", str(store))  # a reader beside the writer: fine
        assert status == 0 and "Traceback" not in err
        status, out, err = _cli("updateTopic", "-t", "V", str(store))
        assert status == 1 and "locked" in err and "Traceback" not in err
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


_HOLD = "import sys, mqlite\nb = mqlite.open(sys.argv[1])\nprint('held', flush=True)\nsys.stdin.read()\nb.close()\n"


def test_an_empty_abort_directory_means_a_crash(store: Path) -> None:
    _damage(store / "abort", None)
    (store / "abort" / "inside").rmdir()
    with mqlite.open(str(store)) as broker:
        assert broker.store.last_exit_ok is False  # type: ignore[attr-defined]
        assert (store / "abort").is_file()
        assert broker.query_message_by_offset("T", 0, 0).body in (b"now", b"later")
    assert not (store / "abort").exists()


def test_an_abort_directory_with_contents_is_refused_by_name(store: Path) -> None:
    _damage(store / "abort", None)
    with pytest.raises(StoreCorruptedError, match="abort"):
        mqlite.open(str(store))
    assert (store / "abort" / "inside").is_dir()


# -- the command line -----------------------------------------------------------------------------------------------
def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


COMMANDS: list[list[str]] = [
    ["topicList"], ["topicStatus", "-t", "T"], ["updateTopic", "-t", "V"], ["deleteTopic", "-t", "U0"],
    ["consumerProgress", "-g", "cg"], ["resetOffsetByTime", "-g", "cg", "-t", "T", "-s", "now"],
    ["skipAccumulatedMessage", "-g", "cg", "-t", "T"], ["queryMsgByKey", "-t", "T", "-k", "k"],
    ["queryMsgByOffset", "-t", "T", "-i", "0", "-o", "0"], ["printMsg", "-t", "T"],
    ["sendMessage", "-t", "T", "-p", "hi"], ["consumeMessage", "-t", "T", "-g", "cg2"], ["queryDlq", "-g", "cg"],
    ["statsAll"], ["storeInfo"], ["verify"],
]
CLI_DAMAGE: list[tuple[str, bytes | None]] = [
    (os.path.join("config", "store.json"), b"{garbage"), (os.path.join("config", "topics.json"), None),
    (os.path.join("config", "consumerOffset.json"), b"\xff\xfe"), (os.path.join("config", "delayOffset.json"), b"[]"),
    ("lock", None), ("abort", None),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize(("name", "data"), CLI_DAMAGE, ids=[n for n, _ in CLI_DAMAGE])
def test_no_command_prints_a_traceback_on_a_damaged_store(store: Path, argv: list[str], name: str,
                                                          data: bytes | None) -> None:
    _damage(store / name, data)
    for bak in (store / (name + ".bak"),):
        if bak.exists():
            bak.unlink()
    status, out, err = _cli(*argv, str(store))
    assert "Traceback" not in err + out and "unexpected" not in err
    if status != 0:
        assert status == 1 and os.path.basename(name) in err + out, err  # verify reports on stdout
        assert len(err.strip().splitlines()) <= 1, err


@pytest.mark.parametrize("argv", [["updateTopic", "-t", "T\n"], ["consumerProgress", "-g", "a/b"],
                                  ["resetOffsetByTime", "-g", "../x", "-t", "T", "-s", "now"],
                                  ["sendMessage", "-t", "a b", "-p", "hi"], ["queryMsgByOffset", "-t", "T", "-i", "x"]])
def test_bad_arguments_exit_2_with_one_line(store: Path, argv: list[str]) -> None:
    status, out, err = _cli(*argv, str(store))
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_real_process_on_a_damaged_store(store: Path) -> None:
    _damage(store / "config" / "topics.json", b"\x89PNG\r\n\x1a\n")
    (store / "config" / "topics.json.bak").unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for argv in (["topicList"], ["sendMessage", "-t", "T", "-p", "x"]):
        done = subprocess.run([sys.executable, "-m", "mqlite", *argv, str(store)], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and "topics.json is damaged" in done.stderr
    file = store / "commitlog" / os.listdir(store / "commitlog")[0]
    done = subprocess.run([sys.executable, "-m", "mqlite", "sendMessage", "-t", "T", "-p", "x", str(file)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "not a directory" in done.stderr

