"""Child process for tests/test_exit_without_close.py (run as a script, never collected).

    python tests/_exitchild.py DIR writer FLUSH end|raise
        Open a writer with a push consumer and a producer, send `SENT` messages, print
        ``SENT``, then end normally or by an uncaught exception, closing nothing.
    python tests/_exitchild.py DIR thread FLUSH
        As `writer ... end`, but a thread of the program waits for the main thread to end
        and only then sends `LATE` more messages (Python waits for that thread before exiting).
    python tests/_exitchild.py DIR paths
        As `writer ASYNC_FLUSH end`, but the consumer and the producer are given the store's
        path (they share a broker the program never holds).
    python tests/_exitchild.py DIR fork
        As `writer ASYNC_FLUSH end`, but first fork a child that ends at once; the parent
        prints ``CHILD <status> ABORT <True|False>`` (the store's abort marker after the child
        exited) and sends one more message.
    python tests/_exitchild.py DIR signal
        Open a writer in DIR/a with a SIGUSR1 handler that closes it; open DIR/b with the signal
        raised while the exit machinery registers it; print ``CLOSED BY HANDLER <bool>``, close b.
    python tests/_exitchild.py DIR reader
        Open the store read-only, print ``READ <n>`` (messages in topic `t`), end without close.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import mqlite
from support import SMALL_STORE  # run as a script: tests/ is sys.path[0]

TOPIC = "t"
SENT = 20
LATE = 10
READER: mqlite.Broker | None = None


def _clients(target: mqlite.Broker | str) -> mqlite.Producer:
    """Start a push consumer and a producer on `target`, send `SENT` messages; the producer."""
    consumer = mqlite.PushConsumer(target, "cg", subscription={TOPIC: "*"}, listener=lambda msgs, ctx: None)
    consumer.start()
    producer = mqlite.Producer(target, "pg")
    producer.start()
    for i in range(SENT):
        producer.send(mqlite.Message(TOPIC, b"m%d" % i))
    print("SENT", flush=True)
    return producer


def _writer(path: str, flush: str) -> mqlite.Producer:
    broker = mqlite.open(path, flush_disk_type=flush, **SMALL_STORE)
    broker.create_topic(TOPIC, 2)
    return _clients(broker)


def _signal_during_open(path: str) -> None:
    from mqlite import _service

    first = mqlite.open(os.path.join(path, "a"), **SMALL_STORE)
    register = _service._hook_interpreter_exit

    def interrupted_register() -> None:  # runs under the exit machinery's lock
        signal.raise_signal(signal.SIGUSR1)  # the handler runs before the next bytecode
        register()

    signal.signal(signal.SIGUSR1, lambda signum, frame: first.close())
    _service._hook_interpreter_exit = interrupted_register  # type: ignore[assignment]
    second = mqlite.open(os.path.join(path, "b"), **SMALL_STORE)
    print("CLOSED BY HANDLER", first.closed, flush=True)
    second.close()


def main(path: str, mode: str, *args: str) -> None:
    if mode == "writer":
        _writer(path, args[0])
        if args[1] == "raise":
            raise RuntimeError("the program failed without closing its broker")
    elif mode == "thread":
        producer = _writer(path, args[0])

        def send_after_main() -> None:
            threading.main_thread().join()  # returns once the interpreter began its exit
            for i in range(LATE):
                producer.send(mqlite.Message(TOPIC, b"late%d" % i))
            print("LATE", flush=True)

        threading.Thread(target=send_after_main, name="late-sender").start()
    elif mode == "paths":  # clients given the store's path share a broker the program never sees
        with mqlite.open(path, **SMALL_STORE) as broker:  # the store's settings, recorded for the reopen
            broker.create_topic(TOPIC, 2)
        _clients(path)
    elif mode == "fork":
        producer = _writer(path, "ASYNC_FLUSH")
        pid = os.fork()
        if pid == 0:
            return  # the child ends through the interpreter's exit: it must not close the parent's broker
        _, status = os.waitpid(pid, 0)
        alive = os.path.exists(os.path.join(path, "abort"))  # a close in the child would have removed it
        producer.send(mqlite.Message(TOPIC, b"after-fork"))
        print("CHILD", os.waitstatus_to_exitcode(status), "ABORT", alive, flush=True)
    elif mode == "signal":
        _signal_during_open(path)
    elif mode == "reader":
        global READER  # a script's top-level variable: still open when the interpreter exits
        READER = mqlite.open(path, read_only=True)
        print("READ", sum(s.max_offset for s in READER.topic_status(TOPIC)), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
