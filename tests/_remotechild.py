"""Child process for the remote tests (run as a script, never collected).

    python tests/_remotechild.py consume TARGET GROUP TOPIC
        A LitePullConsumer of GROUP on TOPIC, given TARGET (a store path another process holds and
        serves, or HOST:PORT); prints ``ASSIGNED <queue ids>`` whenever its share changes and polls
        until stdin closes.
    python tests/_remotechild.py orderly ADDRESS GROUP TOPIC CLIENT_ID
        An orderly PushConsumer with CLIENT_ID; prints ``GOT <queue id> <body>`` per message, in
        consumption order, until stdin closes (then it shuts down, giving its locks back).
    python tests/_remotechild.py open DIR TOPIC BODY
        `mqlite.open(DIR)` while another process holds it: prints the broker's class name, sends
        BODY to TOPIC and prints ``SENT <msg_id>``, then ``METRICS <messages in of TOPIC>`` (`metrics()`).
"""

from __future__ import annotations

import sys
import threading

import mqlite


def _print(*words: object) -> None:
    print(*words, flush=True)


def _until_stdin_closes() -> None:
    sys.stdin.read()


def consume(target: str, group: str, topic: str) -> None:
    broker = mqlite.connect(target) if ":" in target else target
    stop = threading.Event()

    def changed(topic: str, mq_all: set[mqlite.MessageQueue], mine: set[mqlite.MessageQueue]) -> None:
        _print("ASSIGNED", ",".join(str(mq.queue_id) for mq in sorted(mine)) or "-")

    consumer = mqlite.LitePullConsumer(broker, group)
    consumer.subscribe(topic, "*", queue_listener=changed)
    consumer.start()

    def poll() -> None:
        while not stop.is_set():
            consumer.poll(0.1)

    poller = threading.Thread(target=poll, name="child-poll")
    poller.start()
    _until_stdin_closes()
    stop.set()
    poller.join()
    consumer.shutdown()
    if isinstance(broker, mqlite.RemoteBroker):
        broker.close()


def orderly(address: str, group: str, topic: str, client_id: str) -> None:
    def listener(msgs: list[mqlite.MessageExt], ctx: object) -> mqlite.ConsumeOrderlyStatus:
        for msg in msgs:
            _print("GOT", msg.queue_id, msg.body.decode())
        return mqlite.ConsumeOrderlyStatus.SUCCESS

    with mqlite.connect(address) as remote, \
            mqlite.PushConsumer(remote, group, subscription={topic: "*"}, listener=listener, orderly=True,
                                consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                client_id=client_id):
        _print("STARTED")
        _until_stdin_closes()


def open_held(path: str, topic: str, body: str) -> None:
    broker = mqlite.open(path)
    _print(type(broker).__name__)
    with mqlite.Producer(broker, group="child-pg") as producer:
        result = producer.send(mqlite.Message(topic, body.encode()))
    _print("SENT", result.msg_id)
    # The same code as on an embedded broker: `metrics()` whichever `mqlite.open` returned.
    _print("METRICS", *[t.messages_in for t in broker.metrics().topics if t.topic == topic])
    broker.close()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"consume": consume, "orderly": orderly, "open": open_held}[mode](*args)
