"""Child process for the consumer crash test (run as a script, never collected).

    python tests/_consumechild.py DIR GROUP TOPIC

Opens a writer at DIR (`SETTINGS` of `_crashchild`), starts a PushConsumer of GROUP on
TOPIC from the first offset, and for every message prints, flushed, ``OK <body>``
before its listener returns success; the parent kills it with SIGKILL mid-way.
"""

from __future__ import annotations

import sys
import threading
import time

from _crashchild import SETTINGS  # tests/ is on sys.path both under pytest and when run as a script

import mqlite


def main(path: str, group: str, topic: str) -> None:
    out_lock = threading.Lock()

    def listener(msgs: list[mqlite.MessageExt], context: object) -> None:
        time.sleep(0.0005)  # some work, so the parent can kill the process mid-way
        with out_lock:
            for msg in msgs:
                sys.stdout.write(f"OK {msg.body.decode()}\n")
            sys.stdout.flush()

    with mqlite.open(path, **SETTINGS) as broker:
        consumer = mqlite.PushConsumer(broker, group, subscription={topic: "*"}, listener=listener,
                                       consume_thread_nums=4, pull_batch_size=8,
                                       consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        print("STARTED", flush=True)  # before the listener can print
        with consumer:
            sys.stdin.read()  # until the parent closes stdin (or kills us)


if __name__ == "__main__":
    main(*sys.argv[1:4])
