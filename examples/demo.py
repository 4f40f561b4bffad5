"""The README's demo: open an embedded store, append messages, read them back.

Run: python examples/demo.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile

import mqlite
from mqlite.message import MessageQueue


def main(path: str) -> None:
    with mqlite.open(path, commitlog_file_size=64 * 1024 * 1024) as broker:
        store = broker.store
        for i in range(1000):
            store.put("orders", i % 4, b"order %d" % i, {"TAGS": "TagA" if i % 2 else "TagB", "KEYS": f"order-{i}"})
        store.wait_dispatched()
        print(f"stored 1000 messages in {path}")
        for row in broker.topic_status("orders"):
            print(f"  queue {row.queue_id}: offsets {row.min_offset}..{row.max_offset}")
        first = store.get_messages("orders", 0, 0, 3)
        print(f"read back {len(first.messages)} from queue 0:", [m.body for m in first.messages])
        hit = broker.query_message("orders", "order-42")[0]
        print(f"by key order-42: {hit.body!r} at queue {hit.queue_id} offset {hit.queue_offset}, "
              f"offset_msg_id {hit.offset_msg_id}")
    with mqlite.open(path, read_only=True) as reader:
        mq = MessageQueue("orders", reader.broker_name, 3)
        print(f"reopened read-only: queue 3 holds {reader.max_offset(mq)} messages")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
