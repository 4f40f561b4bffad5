"""The server under hostile or merely heavy input (the review of issue 12, findings 1-9, 15, 21, 22):
each test drives the wire as a client would and checks the server stays bounded and correct."""

from __future__ import annotations

import threading
from pathlib import Path

import mqlite
from mqlite.remoting.protocol import RemotingCommand, RequestCode, ResponseCode, encode_frame
from support import deadline
# The raw-frame client and test_server's fixtures (a broker, its server, a client connected to it).
from test_server import PULL_SUBSCRIPTION, PULL_SUSPEND, Client, broker, client, pull, records, send_v1, server  # noqa: F401


def _send(topic: str, body: bytes, queue_id: int = 0, **extra: object) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 1, "flag": 0, **extra}, body)


def test_a_full_executor_queue_answers_system_busy(tmp_path: Path) -> None:
    """Finding 9: SYNC_FLUSH puts queue for the executor up to a bound, then fail fast (RocketMQ's SYSTEM_BUSY)."""
    with mqlite.open(tmp_path / "sync", flush_disk_type="SYNC_FLUSH", commitlog_file_size=1 << 20) as b:
        b.create_topic("t", 1)
        server = b.serve(executor_queue=2, executor_threads=1)
        c = Client(server.address)
        sends = [_send("t", b"%d" % i) for i in range(40)]
        c.sock.sendall(b"".join(encode_frame(cmd) for cmd in sends))  # decoded in a few reads: many at once
        with deadline(20):
            answers = [c.wait(lambda r, o=cmd.opaque: r.opaque == o) for cmd in sends]  # type: ignore[misc]
        codes = [a.code for a in answers]
        assert set(codes) == {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY}
        stored = [m.body for m in b.pull("g", mqlite.MessageQueue("t", b.broker_name, 0), 0, 64).msg_found_list]
        assert stored == [cmd.body for cmd, code in zip(sends, codes) if code == ResponseCode.SUCCESS]
        c.close()
        server.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mqlite-")]
