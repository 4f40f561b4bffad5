"""Child process for tests/test_rocketmq_cpp.py: drives rocketmq-client-cpp (PyPI `rocketmq`, its
`librocketmq.so` through ctypes) and prints one JSON object per line.

    python _cppclient.py '{"mode": "produce", "nameSrv": ..., "topic": ..., "group": ...,
                           "messages": [{"tags": .., "keys": .., "body": .., "shard"?: n}],
                           "accessKey"?: .., "secretKey"?: ..}'
    python _cppclient.py '{"mode": "consume", "nameSrv": ..., "topic": ..., "group": ..., "expression": ..,
                           "expect": [keys], "failFirst": [keys], "orderly"?: true, "timeout": seconds}'

A failing first delivery answers RECONSUME_LATER (the consumer sends it back). The C++
library logs under $HOME/logs/rocketmq-cpp: the test gives it a temporary HOME. (`rocketmq` is
imported in the functions: pytest imports this file to look for doctests.)
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from typing import Any



_OUT = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields}) + "\n"
    with _OUT:  # the library calls the listener from several threads: one whole line at a time
        sys.stdout.write(line)
        sys.stdout.flush()


def text(value: bytes | str) -> str:
    """The binding returns some fields as bytes and some (the id, the topic) as str."""
    return value.decode() if isinstance(value, bytes) else value


def credentials(client: Any, cfg: dict[str, Any]) -> None:
    if cfg.get("accessKey"):
        client.set_session_credentials(cfg["accessKey"], cfg["secretKey"], "")


def produce(cfg: dict[str, Any]) -> int:
    from rocketmq.client import Message, Producer

    producer = Producer(cfg["group"], timeout=3000)
    producer.set_namesrv_addr(cfg["nameSrv"])
    credentials(producer, cfg)
    producer.start()
    try:
        for index, m in enumerate(cfg["messages"]):
            msg = Message(cfg["topic"])
            msg.set_keys(m["keys"])
            msg.set_tags(m["tags"])
            msg.set_body(m["body"])
            try:
                # "shard": send_orderly with the binding's hashing selector (queue = shard % queue count)
                result = producer.send_sync(msg) if "shard" not in m else producer.send_orderly(msg, m["shard"])
            except Exception as exc:  # the C++ client's failure, as the ctypes binding raises it
                emit("error", index=index, name=type(exc).__name__, message=str(exc))
                return 2
            emit("sent", index=index, status=int(result.status), msgId=result.msg_id, queueOffset=result.offset)
    finally:
        producer.shutdown()
    emit("done")
    return 0


def consume(cfg: dict[str, Any]) -> int:
    from rocketmq.client import MSG_CALLBACK_FUNC, PushConsumer, RecvMessage
    from rocketmq.ffi import dll

    expected = set(cfg["expect"])
    fail_first = set(cfg.get("failFirst", []))
    lock = threading.Lock()
    finished = threading.Event()

    def on_message(msg: Any) -> int:
        """0 CONSUME_SUCCESS, 1 RECONSUME_LATER (the C API's E_CConsumeStatus)."""
        key = text(msg.keys)
        with lock:
            failing = key in fail_first
            fail_first.discard(key)
        emit("message", key=key, tags=text(msg.tags), topic=text(msg.topic),
             bodyBase64=base64.b64encode(msg.body).decode(), msgId=text(msg.id),
             queueId=msg.queue_id, queueOffset=msg.queue_offset, reconsumeTimes=msg.reconsume_times,
             failed=failing)
        if failing:
            return 1
        with lock:
            expected.discard(key)
            if not expected:
                finished.set()
        return 0

    consumer = PushConsumer(cfg["group"], orderly=bool(cfg.get("orderly")))
    consumer.set_namesrv_addr(cfg["nameSrv"])
    credentials(consumer, cfg)
    # The binding's subscribe() turns a listener's exception into RECONSUME_LATER by raising it again
    # inside the ctypes callback, which leaves the returned status undefined; register a callback
    # that returns the status instead (what subscribe() does, minus the re-raise).
    if dll.Subscribe(consumer._handle, cfg["topic"].encode(), cfg.get("expression", "*").encode()) != 0:
        raise RuntimeError("Subscribe failed")
    callback = MSG_CALLBACK_FUNC(lambda _consumer, msg: on_message(RecvMessage(msg)))
    register = dll.RegisterMessageCallbackOrderly if cfg.get("orderly") else dll.RegisterMessageCallback
    if register(consumer._handle, callback) != 0:
        raise RuntimeError("RegisterMessageCallback failed")
    consumer.start()
    ok = finished.wait(cfg.get("timeout", 60))
    consumer.shutdown()  # persists the consume offsets
    if not ok:
        emit("timeout", missing=sorted(expected))
        return 3
    emit("done")
    return 0


def main() -> int:
    cfg = json.loads(sys.argv[1])
    return produce(cfg) if cfg["mode"] == "produce" else consume(cfg)


if __name__ == "__main__":
    sys.exit(main())
