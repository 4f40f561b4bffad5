"""Child process for the delay and transaction crash tests (run as a script, never collected).

    python tests/_sendchild.py DIR SEED MAX_SECONDS SETTLE MIX

Opens a writer at DIR with `SETTINGS`, prints ``OPENED <time.monotonic()>`` and
sends, through the public clients, delayed messages (`Producer`, level 1 = 1 s)
and transactional ones (`TransactionProducer` of group `GROUP`); MIX is `all`,
`delay` or `txn`. After each acknowledged send it prints, flushed, one line::

    ACK <msg_id> <kind> <expect>

`kind` is `delay` or `txn`; `expect` is what the parent must find after the crash
(`EXPECTS`). Every message also carries its `expect` as user property `expect`, so
the parent can answer a check-back even for a send that was in flight at the kill.
The local transaction of a `*-on-check` message returns UNKNOW (every fifth one
raises instead, which the producer treats as UNKNOW); this process answers every
check-back with UNKNOW and prints ``CHECK <msg_id>``, so only the parent decides.

SETTLE = 0: send until killed (or until MAX_SECONDS pass, then print DONE and close).
SETTLE = n > 0: in two phases of n / 2 messages, send, then wait until the delay
service delivered every delayed message and the check service asked about every
pending transaction; then print ``SETTLED <1 if all that happened> <seconds since
open>`` and wait to be killed.

The parent side is `SendChild`.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Any

from _crashchild import Child  # tests/ is on sys.path both under pytest and when run as a script

#: Small commit-log files and short transaction intervals, so the crash test runs in seconds.
SETTINGS: dict[str, Any] = {
    "flush_disk_type": "ASYNC_FLUSH",
    "commitlog_file_size": 1 << 20,
    "consumequeue_file_size": 20 * 1000,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
    "transaction_timeout": 0.5,
    "transaction_check_interval": 0.5,
}
GROUP = "crash-tg"
DELAY_TOPIC = "CrashDelay"
TXN_TOPIC = "CrashTxn"
#: kind -> the outcomes the child asks for, each with its weight in the stream.
EXPECTS = {
    "delay": (("deliver", 4),),
    "txn": (("commit", 2), ("rollback", 1), ("commit-on-check", 2), ("rollback-on-check", 2)),
}


def make_body(kind: str, expect: str, seq: int) -> bytes:
    """A body that says what the message is (the parent checks it)."""
    return f"{kind}|{expect}|{seq}|".encode() + bytes(seq % 251 for _ in range(seq % 97))


def _choose(rng: random.Random, mix: str) -> tuple[str, str]:
    kind = mix if mix in EXPECTS else "delay" if rng.random() < 0.4 else "txn"
    choices = EXPECTS[kind]
    expect = rng.choices([c[0] for c in choices], [c[1] for c in choices])[0]
    return kind, expect


class _Listener:
    """The child's transaction listener: decide by `expect`, never answer a check-back."""

    def __init__(self, out_lock: threading.Lock) -> None:
        self._out_lock = out_lock
        self.checked: set[str] = set()
        self.executed = 0

    def execute_local_transaction(self, msg: Any, arg: Any) -> Any:
        from mqlite import LocalTransactionState as S

        self.executed += 1
        expect = msg.properties["expect"]
        if expect == "commit":
            return S.COMMIT_MESSAGE
        if expect == "rollback":
            return S.ROLLBACK_MESSAGE
        if self.executed % 5 == 0:
            raise RuntimeError("local transaction failed; the broker checks back later")
        return S.UNKNOW

    def check_local_transaction(self, msg: Any) -> Any:
        from mqlite import LocalTransactionState as S

        self.checked.add(msg.msg_id)
        _emit(self._out_lock, f"CHECK {msg.msg_id}\n")
        return S.UNKNOW


def _emit(lock: threading.Lock, text: str) -> None:
    with lock:
        sys.stdout.write(text)
        sys.stdout.flush()


def _wait(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    tick = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.01)
    return True


def run(root: str, seed: int, max_seconds: float, settle: int, mix: str) -> None:
    import mqlite

    rng = random.Random(seed)
    out_lock = threading.Lock()
    listener = _Listener(out_lock)
    broker = mqlite.open(root, **SETTINGS)
    opened = time.monotonic()
    # CLOCK_MONOTONIC is one clock for every process of the machine: the parent compares it
    # with its own time of the kill to know an upper bound of how long this broker ran.
    _emit(out_lock, f"OPENED {opened!r}\n")
    tx = mqlite.TransactionProducer(broker, group=GROUP, listener=listener)
    try:
        with mqlite.Producer(broker, group="crash-pg") as producer, tx:
            deadline = opened + max_seconds
            seqs = iter(range(1 << 30))
            delayed = 0
            pending: list[str] = []  # *-on-check transactions

            def send_one() -> None:
                nonlocal delayed
                seq = next(seqs)
                kind, expect = _choose(rng, mix)
                msg = mqlite.Message(DELAY_TOPIC if kind == "delay" else TXN_TOPIC, make_body(kind, expect, seq),
                                     keys=f"seq-{seq}", properties={"expect": expect, "seq": str(seq)})
                if kind == "delay":
                    msg.delay_time_level = 1
                    msg_id = producer.send(msg).msg_id
                    delayed += 1
                else:
                    msg_id = tx.send_message_in_transaction(msg).msg_id
                    if expect.endswith("-on-check"):
                        pending.append(msg_id)
                _emit(out_lock, f"ACK {msg_id} {kind} {expect}\n")

            if not settle:
                while time.monotonic() < deadline:
                    send_one()
            else:
                assert broker.delay is not None
                ok = True
                for _ in range(2):  # the second phase acts after the first persisted what it did
                    for _ in range(settle // 2):
                        send_one()
                    ok &= _wait(lambda: broker.delay.delivered_count >= delayed, 30.0)
                    ok &= _wait(lambda: listener.checked.issuperset(pending), 30.0)
                _emit(out_lock, f"SETTLED {int(ok)} {time.monotonic() - opened:.3f}\n")
                sys.stdin.read()  # until the parent kills us (or closes our stdin)
    finally:
        broker.close()
    _emit(out_lock, "DONE\n")


class SendChild(Child):
    """This script run as a child process, seen from the parent (see `_crashchild.Child`)."""

    script = os.path.abspath(__file__)


def main(argv: list[str]) -> None:
    root, seed, max_seconds, settle, mix = argv
    run(root, int(seed), float(max_seconds), int(settle), mix)


if __name__ == "__main__":
    main(sys.argv[1:])
