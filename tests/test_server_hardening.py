"""The server under hostile or merely heavy input (the review of issue 12, findings 1-9, 15, 21, 22):
each test drives the wire as a client would and checks the server stays bounded and correct."""

from __future__ import annotations

import json
import struct
import threading
import zlib
from pathlib import Path

import pytest

import mqlite
from mqlite.errors import MQClientError
from mqlite.remoting.protocol import RemotingCommand, RequestCode, ResponseCode, encode_frame
from support import deadline, wait_until
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


def _pull_request(topic: str, queue_id: int = 0, *, suspend_ms: int = 0, max_nums: int = 32) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": queue_id, "queueOffset": 0, "maxMsgNums": max_nums,
        "sysFlag": PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0), "suspendTimeoutMillis": suspend_ms,
        "subscription": "*"})


def _wait_parked(b: mqlite.Broker, count: int) -> None:
    # Nothing signals a park to a client: look, briefly, until it shows.
    wait_until(lambda: b.arrivals.waiting == count, lambda: f"{count} parked pulls, {b.arrivals.waiting} are")


def test_pipelined_pulls_of_a_reading_client_are_all_answered(broker: mqlite.Broker, server: mqlite.Server,
                                                              client: Client) -> None:
    """Finding 1: 400 pulls of 32 x 8 KiB in one write, from a client that reads: every one answered, none dropped."""
    broker.create_topic("T", 1)
    for _ in range(40):
        broker.put_message("T", 0, b"x" * 8192)
    broker.wait_dispatched()
    pulls = [_pull_request("T") for _ in range(400)]
    sender = threading.Thread(target=client.sock.sendall, args=(b"".join(encode_frame(p) for p in pulls),))
    with deadline(60):
        sender.start()  # (the server stops reading while answers wait: the write blocks until this thread reads)
        answers = [client.wait(lambda r, o=p.opaque: r.opaque == o) for p in pulls]  # type: ignore[misc]
        sender.join()
    assert {a.code for a in answers} == {ResponseCode.SUCCESS}
    assert all(len(records(a.body)) == 31 for a in answers)  # 256 KiB of 8 KiB records (and their headers)


def test_a_closed_connection_takes_its_parked_pulls_with_it(broker: mqlite.Broker, server: mqlite.Server) -> None:
    """Finding 2: parked pulls end with their connection, not at their own (client-chosen) deadline."""
    broker.create_topic("T", 1)
    with deadline(30):
        for _ in range(3):
            c = Client(server.address)
            c.sock.sendall(b"".join(encode_frame(_pull_request("T", suspend_ms=3_600_000)) for _ in range(50)))
            _wait_parked(broker, 50)
            c.close()
            _wait_parked(broker, 0)


def test_parked_pulls_are_capped_server_wide_and_the_suspension_clamped(broker: mqlite.Broker) -> None:
    """Finding 2: past `max_parked` a pull answers PULL_NOT_FOUND at once; a suspension over MAX_SUSPEND_MS
    (a client asked an hour, or more) is held at most that long instead of refused."""
    broker.create_topic("T", 1)
    server = broker.serve(max_parked=3)
    c = Client(server.address)
    pulls = [_pull_request("T", suspend_ms=10_000_000_000) for _ in range(5)]
    with deadline(30):
        c.sock.sendall(b"".join(encode_frame(p) for p in pulls))
        at_once = [c.wait(lambda r, o=p.opaque: r.opaque == o) for p in pulls[3:]]  # type: ignore[misc]
        assert [a.code for a in at_once] == [ResponseCode.PULL_NOT_FOUND] * 2
        _wait_parked(broker, 3)
        send_v1(c, "T", b"wake")
        woken = [c.wait(lambda r, o=p.opaque: r.opaque == o) for p in pulls[:3]]  # type: ignore[misc]
    assert [[m.body for m in records(a.body)] for a in woken] == [[b"wake"]] * 3
    c.close()
    server.close()


def test_close_answers_every_request_it_stored(tmp_path: Path) -> None:
    """Finding 8: close() stops reading first; what was read is answered (stored, or SERVICE_NOT_AVAILABLE),
    so no message is stored unanswered (its client would send it again)."""
    from mqlite.remoting.protocol import FrameDecoder
    with mqlite.open(tmp_path / "sync", flush_disk_type="SYNC_FLUSH", commitlog_file_size=1 << 20) as b:
        b.create_topic("t", 1)
        server = b.serve()
        c = Client(server.address)
        bodies: dict[int, bytes] = {}
        answers: dict[int, int] = {}
        started = threading.Event()

        def flood() -> None:
            try:
                for n in range(100_000):
                    chunk = [_send("t", b"%d" % (n * 20 + i)) for i in range(20)]
                    bodies.update((cmd.opaque, cmd.body or b"") for cmd in chunk)
                    c.sock.sendall(b"".join(encode_frame(cmd) for cmd in chunk))
                    started.set()
            except OSError:
                pass  # the server closed the connection

        def read() -> None:
            decoder = FrameDecoder()
            try:
                while data := c.sock.recv(1 << 20):
                    answers.update((r.opaque, r.code) for r in decoder.feed(data))
            except OSError:
                pass

        threads = [threading.Thread(target=flood), threading.Thread(target=read)]
        with deadline(60):
            for t in threads:
                t.start()
            started.wait()
            wait_until(lambda: len(answers) >= 100, "100 answers (the server is busy with this client)")
            server.close()
            for t in threads:
                t.join()
        stored = {m.body for m in b.pull("g", mqlite.MessageQueue("t", b.broker_name, 0), 0, 1 << 20).msg_found_list}
        answered = {bodies[o] for o, code in answers.items() if code == ResponseCode.SUCCESS}
        assert stored == answered
        c.close()


def test_a_pull_reads_no_more_than_its_byte_budget(broker: mqlite.Broker, client: Client) -> None:
    """Finding 3: the store stops at the byte budget (at least one record), filtered or not, so a pull of big
    records never copies more than the 256 KiB it answers."""
    from mqlite import MessageSelector
    broker.create_topic("big", 1)
    for i in range(10):
        broker.put_message("big", 0, bytes([i]) * 100_000, {"TAGS": "a"})
    broker.wait_dispatched()
    mq = mqlite.MessageQueue("big", broker.broker_name, 0)
    for selector in (None, MessageSelector.by_tag("a")):
        read = broker.pull("g", mq, 0, 32, selector, max_bytes=256 * 1024)
        assert [m.queue_offset for m in read.msg_found_list] == [0, 1] and read.next_begin_offset == 2
        one = broker.pull("g", mq, 3, 32, selector, max_bytes=1)  # at least one record, whatever the budget
        assert [m.queue_offset for m in one.msg_found_list] == [3] and one.next_begin_offset == 4
    answer = pull(client, "big", 0, 0, max_nums=1024)
    assert [m.body[0] for m in records(answer.body)] == [0, 1] and answer.ext_fields["nextBeginOffset"] == "2"


def _executor_started() -> bool:
    """True once the server's executor ran something (its threads start with their first request)."""
    return any(t.name.startswith("mqlite-remoting-exec") for t in threading.enumerate())


def _heartbeat(c: Client, group: str) -> RemotingCommand:
    body = json.dumps({"clientID": "c1", "consumerDataSet": [
        {"groupName": group, "messageModel": "CLUSTERING", "subscriptionDataSet": []}]}).encode()
    return c.call(RequestCode.HEART_BEAT, {}, body)


def test_a_heartbeat_checks_its_group_before_creating_anything(broker: mqlite.Broker, client: Client) -> None:
    """Finding 4: an illegal group name is refused and leaves no retry topic behind (t1.py)."""
    answer = _heartbeat(client, "a/b")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "a/b" in (answer.remark or "")
    assert broker.topic_config("%RETRY%a/b") is None
    topics = Path(broker.path, "config", "topics.json")
    assert not topics.exists() or "%RETRY%a/b" not in topics.read_text()


def test_topics_are_created_on_the_executor_not_the_loop(broker: mqlite.Broker, client: Client) -> None:
    """Findings 4-5: a heartbeat of a known group and a send to an existing topic stay on the loop; a new
    group's retry topic and a send's auto-created topic (they persist the topic table) go to the executor."""
    broker.create_topic("known", 1)
    broker.ensure_group_topic("old", "%RETRY%old")
    assert _heartbeat(client, "old").code == ResponseCode.SUCCESS
    assert send_v1(client, "known", b"m").code == ResponseCode.SUCCESS
    assert not _executor_started()
    assert _heartbeat(client, "new").code == ResponseCode.SUCCESS
    assert broker.topic_config("%RETRY%new") is not None and _executor_started()


def test_a_send_that_creates_its_topic_runs_on_the_executor(broker: mqlite.Broker, client: Client) -> None:
    assert send_v1(client, "auto", b"m").code == ResponseCode.SUCCESS
    assert broker.topic_config("auto") is not None and _executor_started()


def test_an_undefined_compression_type_or_a_broker_only_bit_is_refused(broker: mqlite.Broker, client: Client) -> None:
    """Finding 6: a record that could never be read back is not stored (t2.py), over the wire or locally."""
    broker.create_topic("T", 1)
    for sys_flag in (0x1 | 0x400, 0x1 | 0x700, 0x80, 0x40, 0x800):
        answer = send_v1(client, "T", b"plain", sys_flag=sys_flag)
        assert answer.code == ResponseCode.MESSAGE_ILLEGAL, hex(sys_flag)
        with pytest.raises(MQClientError, match="sys_flag"):
            broker.put_message("T", 0, b"plain", sys_flag=sys_flag)
    assert broker.max_offset(mqlite.MessageQueue("T", broker.broker_name, 0)) == 0
    assert send_v1(client, "T", zlib.compress(b"z"), sys_flag=0x1 | 0x300).code == ResponseCode.SUCCESS
    assert [m.body for m in records(pull(client, "T", 0, 0).body)] == [b"z"]


def test_a_look_up_by_offset_needs_a_record_that_starts_there(broker: mqlite.Broker, client: Client) -> None:
    """Finding 7: an offset inside a body that happens to show a magic number is not a record."""
    from mqlite.record import MAGIC_V2
    fake = struct.pack(">ii", 200, MAGIC_V2) + b"\xee" * 192
    assert send_v1(client, "T", b"<" + fake + b">").code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    segment = min(Path(broker.path, "commitlog").iterdir())
    inside = int(segment.name) + segment.read_bytes().index(fake)
    view = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": inside})
    assert view.code == ResponseCode.SYSTEM_ERROR and "can not find message" in (view.remark or "")
    back = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": inside, "group": "cg", "delayLevel": 0,
                                                            "originMsgId": "", "originTopic": "T"})
    assert back.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in (back.remark or "")
    assert broker.topic_config("%RETRY%cg") is None


def test_query_message_answers_at_most_64_and_what_fits_in_a_frame(broker: mqlite.Broker) -> None:
    """Finding 15: maxNum is capped at RocketMQ's 64, and the answer stops before the frame limit."""
    broker.create_topic("T", 1)
    for _ in range(70):
        broker.put_message("T", 0, b"s", {"KEYS": "small"})
    for _ in range(10):
        broker.put_message("T", 0, b"b" * 10_000, {"KEYS": "big"})
    broker.wait_dispatched()
    server = broker.serve(max_frame_size=32 * 1024)
    c = Client(server.address)

    def query(key: str) -> RemotingCommand:
        return c.call(RequestCode.QUERY_MESSAGE, {"topic": "T", "key": key, "maxNum": 1000, "beginTimestamp": 0,
                                                  "endTimestamp": 1 << 62})

    assert len(records(query("small").body)) == 64
    big = query("big")
    assert len(records(big.body)) == 2 and len(big.body) <= 32 * 1024
    c.close()
    server.close()


def test_closing_one_of_two_servers_keeps_the_other_s_store_host(broker: mqlite.Broker) -> None:
    """Finding 21: records name the server still serving, not 127.0.0.1:10911, once another one closed."""
    broker.create_topic("T", 1)
    first, second = broker.serve(), broker.serve()
    first.close()
    c = Client(second.address)
    assert send_v1(c, "T", b"m").code == ResponseCode.SUCCESS
    assert [m.store_host for m in records(pull(c, "T", 0, 0).body)] == [second.address]
    c.close()
    second.close()
    broker.put_message("T", 0, b"after")
    assert broker.pull("g", mqlite.MessageQueue("T", broker.broker_name, 0), 1).msg_found_list[0].store_host == \
        "127.0.0.1:10911"


def test_a_send_back_runs_on_the_executor(broker: mqlite.Broker, client: Client) -> None:
    """Finding 5: a send-back reads any offset the client names (a cold page) and may create the group's
    retry or dead-letter topic: not on the loop thread."""
    broker.create_topic("T", 1)
    sent = send_v1(client, "T", b"m")
    assert not _executor_started()
    offset = int(sent.ext_fields["msgId"][-16:], 16)
    back = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": offset, "group": "cg", "delayLevel": 0,
                                                            "originMsgId": "", "originTopic": "T"})
    assert back.code == ResponseCode.SUCCESS and _executor_started()
    assert broker.topic_config("%RETRY%cg") is not None
