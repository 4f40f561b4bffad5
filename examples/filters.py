"""Filters: subscribe by tag expression or by an SQL92 expression over message properties.

A tag expression ("TagA || TagB", "*" for all) matches the message's single tag. An SQL92
expression (RocketMQ's grammar: = <> > >= < <=, BETWEEN, IN, IS NULL, AND OR NOT,
CONTAINS, STARTSWITH, ENDSWITH) is evaluated against the message's properties; the tag is
the property TAGS. Filtering happens in the broker: the consumer never receives the rest.

Run: python examples/filters.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading

import mqlite


def orders() -> list[mqlite.Message]:
    """Twelve orders with a tag (their kind) and two user properties."""
    msgs = []
    for i in range(12):
        msg = mqlite.Message("shop", b"order %d" % i, tags=("TagA", "TagB", "TagC")[i % 3])
        msg.put_user_property("region", "eu" if i % 2 else "us")
        msg.put_user_property("amount", str(10 * i))  # properties are strings; SQL92 compares them as numbers
        msgs.append(msg)
    return msgs


def consume(broker: mqlite.Broker, group: str, selector: mqlite.MessageSelector, expected: int) -> list[bytes]:
    """Consume `shop` from the start with `selector` until `expected` messages arrived."""
    got: list[bytes] = []
    lock = threading.Lock()
    done = threading.Event()

    def on_message(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
        with lock:
            got.extend(m.body for m in msgs)
            if len(got) >= expected:
                done.set()

    with mqlite.PushConsumer(broker, group, subscription={"shop": selector}, listener=on_message,
                             consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
        if not done.wait(timeout=10):
            raise SystemExit(f"{group}: {len(got)} of {expected} messages arrived")
    return sorted(got, key=lambda body: int(body.split()[1]))


def main(path: str) -> None:
    with mqlite.open(path) as broker:
        with mqlite.Producer(broker, group="shop-producer") as producer:
            sent = orders()
            for msg in sent:
                producer.send(msg)
        print(f"sent {len(sent)} orders tagged TagA/TagB/TagC with properties region and amount")

        by_tag = mqlite.MessageSelector.by_tag("TagA || TagB")  # a plain string "TagA || TagB" works too
        by_sql = mqlite.MessageSelector.by_sql("region = 'eu' AND amount BETWEEN 20 AND 80 AND TAGS <> 'TagC'")

        for group, selector in (("tag-consumer", by_tag), ("sql-consumer", by_sql)):
            # selector.matches() applies the same rule locally: here it predicts what the broker delivers.
            expected = [m.body for m in sent if selector.matches(m.properties)]
            got = consume(broker, group, selector, len(expected))
            if got != expected:
                raise SystemExit(f"{group}: expected {expected}, got {got}")
            print(f"{selector.expression_type.value} {selector.expression!r}: {len(got)} messages, "
                  f"{[b.decode() for b in got]}")

        # A bad expression is refused when the selector is built, not when messages flow.
        try:
            mqlite.MessageSelector.by_sql("amount >")
        except mqlite.FilterError as exc:
            print(f"a bad SQL92 expression raises FilterError: {exc}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
