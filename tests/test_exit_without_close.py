"""A program that ends without `close()` still exits, and leaves a clean store behind.

Each test runs `_exitchild.py` in a subprocess (with a timeout: before the fix the
child hung forever on its non-daemon `mqlite-*` threads), then checks its warning,
that no `abort` marker is left and that every acknowledged message is in the store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mqlite
from _exitchild import LATE, SENT, TOPIC
from support import SMALL_STORE

CHILD = Path(__file__).with_name("_exitchild.py")
#: Generous for a loaded machine; a child that hangs is killed and fails the test.
EXIT_TIMEOUT = 60.0


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(mqlite.__file__).parents[1]),
                                                                     os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run([sys.executable, str(CHILD), *args], capture_output=True, text=True,
                              timeout=EXIT_TIMEOUT, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child did not exit within {EXIT_TIMEOUT} s without close(); stderr: {exc.stderr!r}")


def _bodies(path: Path) -> list[bytes]:
    """Every message of the topic; asserts the last writer exited cleanly (no abort marker)."""
    assert not (path / "abort").exists(), "the abort marker is left: the store was not closed"
    with mqlite.open(str(path), **SMALL_STORE) as broker:
        assert broker.store.last_exit_ok  # type: ignore[attr-defined]
        return [m.body for q in range(2) for m in broker.store.get_messages(TOPIC, q, 0, 1000).messages]


def _warned(stderr: str, path: Path) -> bool:
    return "was not closed; closing it at interpreter exit" in stderr and repr(str(path)) in stderr


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.parametrize("ending", ["end", "raise"])
def test_program_ending_without_close_exits_and_keeps_everything(tmp_path: Path, flush: str, ending: str) -> None:
    path = tmp_path / "mq"
    done = _run(str(path), "writer", flush, ending)
    assert "SENT" in done.stdout
    if ending == "raise":
        assert done.returncode == 1 and "RuntimeError: the program failed" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
    assert _warned(done.stderr, path), done.stderr
    assert sorted(_bodies(path)) == sorted(b"m%d" % i for i in range(SENT))


def test_clients_given_a_path_are_shut_down_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "mq"
    done = _run(str(path), "paths")
    assert done.returncode == 0, done.stderr
    assert _warned(done.stderr, path) and "shared by the clients given its path" in done.stderr
    assert sorted(_bodies(path)) == sorted(b"m%d" % i for i in range(SENT))


def test_program_threads_finish_before_the_broker_closes(tmp_path: Path) -> None:
    # Python waits for the program's non-daemon threads; the broker stays open for them.
    path = tmp_path / "mq"
    done = _run(str(path), "thread", "ASYNC_FLUSH")
    assert done.returncode == 0, done.stderr
    assert "LATE" in done.stdout, done.stderr
    assert _warned(done.stderr, path)
    expected = [b"m%d" % i for i in range(SENT)] + [b"late%d" % i for i in range(LATE)]
    assert sorted(_bodies(path)) == sorted(expected)


def test_a_forked_child_leaves_the_parents_broker_alone(tmp_path: Path) -> None:
    path = tmp_path / "mq"
    done = _run(str(path), "fork")
    assert done.returncode == 0, done.stderr
    assert "CHILD 0 ABORT True" in done.stdout  # the child closed nothing: the parent's store is still open
    assert done.stderr.count("was not closed") == 1  # the parent's own warning only
    assert sorted(_bodies(path)) == sorted([b"m%d" % i for i in range(SENT)] + [b"after-fork"])


def test_read_only_broker_is_closed_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "mq"
    with mqlite.open(str(path), **SMALL_STORE) as broker:
        broker.put_message(TOPIC, 0, b"x")
    done = _run(str(path), "reader")
    assert done.returncode == 0, done.stderr
    assert "READ 1" in done.stdout
    assert _warned(done.stderr, path) and "read-only" in done.stderr


def test_a_closed_broker_is_not_closed_again_at_exit(tmp_path: Path) -> None:
    code = ("import sys, mqlite\n"
            "with mqlite.open(sys.argv[1], commitlog_file_size=1 << 20) as b:\n"
            "    b.put_message('t', 0, b'x')\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "mq")], capture_output=True, text=True,
                          timeout=EXIT_TIMEOUT, env={**os.environ, "PYTHONPATH": str(Path(mqlite.__file__).parents[1])})
    assert done.returncode == 0 and done.stderr == ""



def test_a_signal_handler_may_close_a_broker_while_another_opens(tmp_path: Path) -> None:
    # A SIGTERM-style handler that closes a broker runs on the main thread between two bytecodes,
    # also while that thread registers another broker for exit. Before the fix the close waited for
    # a lock its own thread held: the child hung (and this test fails on the timeout).
    done = _run(str(tmp_path), "signal")
    assert done.returncode == 0, done.stderr
    assert "CLOSED BY HANDLER True" in done.stdout
    assert "was not closed" not in done.stderr  # both were closed by the program


def test_a_forked_child_never_writes_through_the_parents_shared_broker(tmp_path: Path) -> None:
    # A child forked while clients given a path share a broker (multiprocessing's default start
    # method on Linux) inherits that broker without its threads, and its maps of the parent's files.
    # A client the child builds on the same path must not write through it: the parent overwrites
    # what the child was told was stored. It gets a fresh broker, which the parent's lock refuses.
    import signal

    from support import deadline

    path = str(tmp_path / "mq")
    with mqlite.open(path, **SMALL_STORE) as broker:
        broker.create_topic(TOPIC, 1)
    producer = mqlite.Producer(path, "pg")
    producer.start()
    try:
        producer.send(mqlite.Message(TOPIC, b"before"))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave at once (no interpreter exit, no pytest)
            def send_from_a_new_producer() -> None:
                child = mqlite.Producer(path, "pg")
                child.start()
                child.send(mqlite.Message(TOPIC, b"child"))

            outcomes = []
            for send in (lambda: producer.send(mqlite.Message(TOPIC, b"inherited")),  # the parent's client
                         send_from_a_new_producer):
                try:
                    send()
                    outcomes.append("SENT")
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    outcomes.append(type(exc).__name__)
            os.write(write, " ".join(outcomes).encode())
            os._exit(0)
        os.close(write)
        try:
            with deadline(60):
                outcome = os.read(read, 100).decode()
                os.waitpid(pid, 0)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        finally:
            os.close(read)
        for i in range(5):
            producer.send(mqlite.Message(TOPIC, b"after%d" % i))
    finally:
        producer.shutdown()
    with mqlite.open(path, **SMALL_STORE) as broker:
        bodies = [m.body for m in broker.store.get_messages(TOPIC, 0, 0, 100).messages]
    assert "SENT" not in outcome or b"child" in bodies, f"the child's acknowledged message is lost: {bodies}"
    # The inherited broker counts as closed; a fresh one is refused: the parent holds the store.
    assert outcome == "IllegalStateError StoreLockedError", outcome
    assert bodies == [b"before"] + [b"after%d" % i for i in range(5)]
