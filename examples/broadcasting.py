"""Broadcasting versus clustering: who in a consumer group gets which message.

CLUSTERING (the default): the members of a group share the topic's queues, so each message
goes to one member. BROADCASTING: every member gets every message, and each keeps its own
offsets in a local file (under <store>/broadcast_offsets/ by default) instead of the broker.

Run: python examples/broadcasting.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable

import mqlite

MESSAGES = 12


def run_group(broker: mqlite.Broker, model: mqlite.MessageModel, topic: str) -> Counter[str]:
    """Start two members of one group, send MESSAGES, wait for every delivery; returns deliveries per member."""
    broadcasting = model is mqlite.MessageModel.BROADCASTING
    wanted = MESSAGES * 2 if broadcasting else MESSAGES
    per_member: Counter[str] = Counter()
    deliveries: set[tuple[str, bytes]] = set()
    lock = threading.Lock()
    done = threading.Event()

    def listener_for(member: str) -> Callable[[list[mqlite.MessageExt], mqlite.ConsumeConcurrentlyContext], None]:
        def on_message(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
            with lock:
                per_member[member] += len(msgs)
                # Clustering delivers a message to one member, broadcasting to each member.
                deliveries.update((member if broadcasting else "", m.body) for m in msgs)
                if len(deliveries) == wanted:
                    done.set()
        return on_message

    group = f"{model.value.lower()}-group"
    with mqlite.PushConsumer(broker, group, message_model=model, subscription={topic: "*"},
                             listener=listener_for("member-a")), \
            mqlite.PushConsumer(broker, group, message_model=model, subscription={topic: "*"},
                                listener=listener_for("member-b")):
        with mqlite.Producer(broker, group="broadcast-producer") as producer:
            for i in range(MESSAGES):
                producer.send(mqlite.Message(topic, b"notice %d" % i))
        if not done.wait(timeout=10):
            raise SystemExit(f"{group}: only {len(deliveries)} of {wanted} deliveries")
    return per_member


def main(path: str) -> None:
    with mqlite.open(path) as broker:
        for topic in ("notices-a", "notices-b"):
            broker.create_topic(topic, queue_nums=4)

        shared = run_group(broker, mqlite.MessageModel.CLUSTERING, "notices-a")
        print(f"CLUSTERING, {MESSAGES} messages, 2 members: {dict(sorted(shared.items()))} (shared between them)")

        everyone = run_group(broker, mqlite.MessageModel.BROADCASTING, "notices-b")
        print(f"BROADCASTING, {MESSAGES} messages, 2 members: {dict(sorted(everyone.items()))} (each got all)")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
