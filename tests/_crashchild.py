"""Child process for the crash, reader and lock tests (run as a script, never collected).

    python tests/_crashchild.py DIR write FLUSH SEED FIRST_SEQ THREADS MAX_SECONDS [PAUSE [CLOCK_STEP_MS]]
        Open a writer store at DIR and append messages until MAX_SECONDS pass (then
        close cleanly and print DONE); PAUSE seconds between appends limit the rate;
        CLOCK_STEP_MS > 0 makes store times a manual clock that starts now and moves
        on by that much at every reading. After each acknowledged put it prints, flushed,
        one line per message: ``ACK <topic> <queue_id> <queue_offset> <seq>``.
        Sequence numbers start at FIRST_SEQ; THREADS > 1 appends from several threads
        (SYNC_FLUSH then exercises the group commit).
    python tests/_crashchild.py DIR hold
        Open a writer, print ``READY <pid>``, wait until stdin closes, close, print ``CLOSED``.
    python tests/_crashchild.py DIR trylock
        Try to open a writer and print ``LOCKED <err.pid>`` / ``MESSAGE <str(err)>``, or ``OPENED``.

The tests import the helpers below (`make_body`, `make_properties`, `parse_body`,
`SETTINGS`) so the child and the checks agree on what every message must look like,
and the parent-side helpers (`Child`, `read_queue`, `check_message`).
"""

from __future__ import annotations

import itertools
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

#: Small files so that a few thousand messages roll commit-log, consume-queue and index files.
SETTINGS: dict[str, Any] = {
    "commitlog_file_size": 256 * 1024,
    "consumequeue_file_size": 20 * 500,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
}

#: (topic, queue count) written by the child.
TOPICS = (("CrashA", 4), ("CrashB", 2), ("CrashC", 1))

_PATTERN = bytes(i & 0xFF for i in range(2048))


def make_body(topic: str, queue_id: int, seq: int) -> bytes:
    """The body of message `seq`: a readable header, then a seq-dependent byte pattern."""
    head = f"{topic}|{queue_id}|{seq}|".encode()
    start = (seq * 7) % 256
    length = 8 + (seq * 37) % 700
    return head + _PATTERN[start : start + length]


def parse_body(body: bytes) -> tuple[str, int, int]:
    """(topic, queue_id, seq) from a body made by `make_body`; ValueError when malformed."""
    topic, qid, seq, _ = body.split(b"|", 3)
    return topic.decode(), int(qid), int(seq)


def make_properties(seq: int) -> dict[str, str]:
    """Properties of message `seq`: always `seq` and TAGS; KEYS and UNIQ_KEY on some."""
    props = {"seq": str(seq), "TAGS": f"Tag{seq % 3}"}
    if seq % 5 == 0:
        props["KEYS"] = f"key-{seq} shard{seq % 10}"
    if seq % 7 == 0:
        props["UNIQ_KEY"] = f"{seq:032X}"
    return props


def check_message(msg: Any, topic: str, queue_id: int, queue_offset: int) -> int:
    """Assert `msg` is a complete, intact message at (topic, queue_id, queue_offset); returns its seq."""
    body = bytes(msg.body)
    b_topic, b_qid, seq = parse_body(body)
    where = f"{topic}/{queue_id}@{queue_offset}"
    assert (b_topic, b_qid) == (topic, queue_id), f"{where}: body says {b_topic}/{b_qid}"
    assert body == make_body(topic, queue_id, seq), f"{where}: body of seq {seq} is damaged"
    assert (msg.topic, msg.queue_id, msg.queue_offset) == (topic, queue_id, queue_offset), \
        f"{where}: message says {msg.topic}/{msg.queue_id}@{msg.queue_offset}"
    expected = make_properties(seq)
    props = dict(msg.properties)
    for name, value in expected.items():
        assert props.get(name) == value, f"{where}: property {name} is {props.get(name)!r}, not {value!r}"
    return seq


def read_queue(store: Any, topic: str, queue_id: int, batch: int = 256) -> list[Any]:
    """Every message of one queue from offset 0 to its max offset, checked to be contiguous."""
    high = store.max_offset(topic, queue_id)
    assert store.min_offset(topic, queue_id) == 0, f"{topic}/{queue_id} lost its head"
    messages: list[Any] = []
    offset = 0
    while offset < high:
        result = store.get_messages(topic, queue_id, offset, batch)
        assert result.messages, f"{topic}/{queue_id}: nothing at offset {offset} < max {high}: {result!r}"
        for msg in result.messages:
            assert msg.queue_offset == offset, f"{topic}/{queue_id}: expected offset {offset}, got {msg.queue_offset}"
            messages.append(msg)
            offset += 1
        assert result.next_begin_offset == offset, f"{topic}/{queue_id}: gap after offset {offset}: {result!r}"
    return messages


class Child:
    """A `_crashchild.py` process seen from the parent: line reading with deadlines, sure cleanup.

    Use as a context manager; leaving it kills the process if it still runs.
    Subclasses run another child script by setting `script`.
    """

    script = os.path.abspath(__file__)

    def __init__(self, *args: str) -> None:
        import mqlite

        env = dict(os.environ)
        src = os.path.dirname(os.path.dirname(os.path.abspath(mqlite.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, self.script, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
        )
        self._buffer = b""
        self.eof = False
        self._drainer: threading.Thread | None = None
        self.drained_lines = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def readline(self, deadline: float) -> str | None:
        """The next complete line (without newline); None at end of output.

        Raises AssertionError when `deadline` (time.monotonic) passes first.
        """
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if self.eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"child {self.pid} printed nothing in time; stderr:\n{self.stderr()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.eof = True  # a torn last line (no newline) is dropped below
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def lines_until_eof(self, deadline: float) -> Iterator[str]:
        """Every remaining complete line."""
        while (line := self.readline(deadline)) is not None:
            yield line

    def drain(self) -> None:
        """Read and count the rest of the output on a thread, so the child never blocks on a full pipe."""
        assert self.proc.stdout is not None and self._drainer is None
        fd = self.proc.stdout.fileno()

        def run() -> None:
            while chunk := os.read(fd, 1 << 16):
                self.drained_lines += chunk.count(b"\n")

        self._drainer = threading.Thread(target=run, name="test-drain-child-stdout")
        self._drainer.start()

    def kill(self) -> None:
        """SIGKILL the child and reap it (no-op when it already exited)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def close_stdin(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-5000:]

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.kill()
        finally:
            if self._drainer is not None:
                self._drainer.join(30)  # the pipe hit EOF when the child died
            self.close_stdin()
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()


def _writer(store: Any, rng: random.Random, seqs: Iterator[int], out_lock: threading.Lock, deadline: float,
            pause: float) -> None:
    from mqlite.commitlog import PutMessageStatus

    out = sys.stdout
    while time.monotonic() < deadline:
        topic, nqueues = rng.choice(TOPICS)
        qid = rng.randrange(nqueues)
        if rng.random() < 0.3:
            batch = [next(seqs) for _ in range(rng.randint(2, 8))]
            result = store.put_batch(topic, qid, [make_body(topic, qid, s) for s in batch],
                                     [make_properties(s) for s in batch])
        else:
            batch = [next(seqs)]
            result = store.put(topic, qid, make_body(topic, qid, batch[0]), make_properties(batch[0]))
        if result.status is not PutMessageStatus.PUT_OK:
            continue  # not acknowledged (FLUSH_DISK_TIMEOUT): the test may or may not find it
        lines = "".join(f"ACK {topic} {qid} {result.queue_offset + i} {s}\n" for i, s in enumerate(batch))
        with out_lock:
            out.write(lines)
            out.flush()
        if pause:
            time.sleep(pause)  # rate limit for readers that re-read everything, not a synchronisation


def _write(root: str, flush: str, seed: int, first_seq: int, threads: int, max_seconds: float,
           pause: float, clock_step_ms: int = 0) -> None:
    import mqlite
    from mqlite.clock import ManualClock

    clock = ManualClock(int(time.time() * 1000), clock_step_ms) if clock_step_ms else None
    broker = mqlite.open(root, flush_disk_type=flush, clock=clock, **SETTINGS)
    try:
        seqs = itertools.count(first_seq)  # next() on a count is atomic under the GIL
        out_lock = threading.Lock()
        deadline = time.monotonic() + max_seconds
        workers = [
            threading.Thread(target=_writer, args=(broker.store, random.Random(seed * 1000 + i), seqs, out_lock,
                                                   deadline, pause))
            for i in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        broker.close()
    print("DONE", flush=True)


def _hold(root: str) -> None:
    import mqlite

    with mqlite.open(root, **SETTINGS):
        print(f"READY {os.getpid()}", flush=True)
        sys.stdin.read()  # until the parent closes our stdin (or dies)
    print("CLOSED", flush=True)


def _trylock(root: str) -> None:
    import mqlite

    try:
        broker = mqlite.open(root)
    except mqlite.StoreLockedError as err:
        print(f"LOCKED {err.pid}", flush=True)
        print(f"MESSAGE {err}", flush=True)
        return
    broker.close()
    print("OPENED", flush=True)


def main(argv: list[str]) -> None:
    root, mode, *rest = argv
    if mode == "write":
        flush, seed, first_seq, threads, max_seconds, *extra = rest
        _write(root, flush, int(seed), int(first_seq), int(threads), float(max_seconds),
               float(extra[0]) if extra else 0.0, int(extra[1]) if len(extra) > 1 else 0)
    elif mode == "hold":
        _hold(root)
    elif mode == "trylock":
        _trylock(root)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
