"""`Broker.serve` over the wire: a raw-frame client (a socket and the codec) against the server."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mqlite
from mqlite.record import decode_message
from mqlite.errors import ConfigError
from mqlite.message import MessageQueue, SysFlag, decode_offset_msg_id, decode_properties, encode_properties
from mqlite.remoting.protocol import (
    ACCESS_KEY,
    SIGNATURE,
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_batch,
    encode_frame,
    from_wire_json,
    message_queue_of,
    sign,
    to_wire_json,
)
from mqlite.remoting.handlers import HANDLERS
from mqlite.remoting.registry import holder_address
from support import broker_fixture, deadline, wait_until

PULL_COMMIT, PULL_SUSPEND, PULL_SUBSCRIPTION = 1, 2, 4


class Client:
    """A RocketMQ client reduced to frames: requests out, responses matched by opaque, server requests kept."""

    def __init__(self, address: str, serialize_type: SerializeType = SerializeType.JSON) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.decoder = FrameDecoder()
        self.kind = serialize_type
        self.received: list[RemotingCommand] = []

    def call(self, code: int, fields: dict[str, object] | None = None, body: bytes | None = None, *,
             version: int = 0, oneway: bool = False) -> RemotingCommand:
        cmd = RemotingCommand.request(code, fields, body, oneway=oneway, serialize_type=self.kind)
        cmd.version = version
        self.send(cmd)
        if oneway:
            return cmd
        return self.wait(lambda c: c.is_response and c.opaque == cmd.opaque)

    def send(self, cmd: RemotingCommand) -> None:
        self.sock.sendall(encode_frame(cmd))

    def wait(self, match: Callable[[RemotingCommand], bool]) -> RemotingCommand:
        while True:
            for i, cmd in enumerate(self.received):
                if match(cmd):
                    return self.received.pop(i)
            data = self.sock.recv(1 << 20)
            assert data, "the server closed the connection"
            self.received += self.decoder.feed(data)

    def server_request(self, code: int) -> RemotingCommand:
        return self.wait(lambda c: not c.is_response and c.code == code)

    def closed_by_server(self) -> bool:
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    return True
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


broker = broker_fixture()


@pytest.fixture
def server(broker: mqlite.Broker) -> Iterator[mqlite.Server]:
    server = broker.serve()
    yield server
    server.close()


@pytest.fixture
def client(server: mqlite.Server) -> Iterator[Client]:
    c = Client(server.address)
    yield c
    c.close()


def records(body: bytes) -> list[mqlite.MessageExt]:
    """The stored records of a pull or query body, decoded as RocketMQ's MessageDecoder.decodes does."""
    out, pos = [], 0
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        out.append(decode_message(body[pos:pos + size], "mqlite"))
        pos += size
    return out


def send_v1(c: Client, topic: str, body: bytes, properties: dict[str, str] | None = None, queue_id: int = 0,
            sys_flag: int = 0, version: int = 0, **extra: object) -> RemotingCommand:
    fields = {"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
              "queueId": queue_id, "sysFlag": sys_flag, "bornTimestamp": 1_700_000_000_000, "flag": 0,
              "properties": encode_properties(properties or {}), "reconsumeTimes": 0, **extra}
    return c.call(RequestCode.SEND_MESSAGE, fields, body, version=version)


def pull(c: Client, topic: str, queue_id: int, offset: int, *, sys_flag: int = PULL_SUBSCRIPTION,
         subscription: str = "*", expression_type: str = "TAG", group: str = "cg", suspend_ms: int = 0,
         commit_offset: int | None = None, max_nums: int = 32) -> RemotingCommand:
    fields: dict[str, object] = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                                 "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": commit_offset or 0,
                                 "suspendTimeoutMillis": suspend_ms, "subscription": subscription,
                                 "subVersion": 0, "expressionType": expression_type}
    return c.call(RequestCode.PULL_MESSAGE, fields)


def test_route_cluster_and_topic_list(broker: mqlite.Broker, server: mqlite.Server, client: Client) -> None:
    broker.create_topic("orders", 3)
    old = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, version=300)
    assert old.code == ResponseCode.SUCCESS
    route = from_wire_json(old.body)
    assert route["brokerDatas"] == [{"brokerAddrs": {0: server.address}, "brokerName": "mqlite",
                                     "cluster": "DefaultCluster", "enableActingMaster": False}]
    assert route["queueDatas"] == [{"brokerName": "mqlite", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0,
                                    "writeQueueNums": 3}]
    # RocketMQ 4.9.4+ clients get standard JSON (string map keys), as from the 5.0.0 name server.
    new = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, version=413)
    assert json.loads(new.body)["brokerDatas"][0]["brokerAddrs"] == {"0": server.address}
    default = from_wire_json(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body)
    assert default["queueDatas"][0]["perm"] == 7  # read, write, inherit: producers create topics from it
    missing = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "No topic route info" in (missing.remark or "")
    cluster = from_wire_json(client.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["mqlite"]}
    topics = from_wire_json(client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    assert "orders" in topics and "TBW102" in topics


def test_send_v1_v2_and_batch_then_pull_the_stored_records(broker: mqlite.Broker, client: Client) -> None:
    first = send_v1(client, "orders", b"one", {"TAGS": "a", "UNIQ_KEY": "U1", "KEYS": "k1"})
    assert first.code == ResponseCode.SUCCESS, first.remark
    assert first.ext_fields["queueId"] == "0" and first.ext_fields["queueOffset"] == "0"
    assert first.ext_fields["transactionId"] == "U1"
    assert broker.topic_config("orders") is not None  # created from defaultTopic, as a real broker does
    v2 = {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000001", "h": "3",
          "i": encode_properties({"TAGS": "b", "UNIQ_KEY": "U2"}), "j": "0", "k": "false"}
    assert client.call(RequestCode.SEND_MESSAGE_V2, v2, b"two").ext_fields["queueOffset"] == "1"
    batch = encode_batch([(0, b"three", {"UNIQ_KEY": "U3"}), (0, b"four", {"UNIQ_KEY": "U4", "TAGS": "c"})])
    # RocketMQ's client sends batches with the V2 header (one-letter names), its own properties appended to each.
    sent = client.call(RequestCode.SEND_BATCH_MESSAGE, {**v2, "i": encode_properties({"UNIQ_KEY": "B"}), "m": "true"},
                       batch)
    assert sent.code == ResponseCode.SUCCESS and sent.ext_fields["queueOffset"] == "2"
    assert len(sent.ext_fields["msgId"].split(",")) == 2
    broker.wait_dispatched()
    response = pull(client, "orders", 0, 0)
    assert response.code == ResponseCode.SUCCESS
    assert (response.ext_fields["nextBeginOffset"], response.ext_fields["maxOffset"]) == ("4", "4")
    got = records(response.body)
    assert [(m.body, m.tags, m.queue_offset, m.flag) for m in got] == [
        (b"one", "a", 0, 0), (b"two", "b", 1, 3), (b"three", None, 2, 0), (b"four", "c", 3, 0)]
    # Each message keeps its own UNIQ_KEY (RocketMQ 5.0.0 lets the batch's override them all).
    assert [m.properties["UNIQ_KEY"] for m in got[2:]] == ["U3", "U4"] and got[2].msg_id == "U3"
    assert got[0].offset_msg_id == first.ext_fields["msgId"] and got[0].keys == ["k1"]
    # Records name the serving address as their store host, as a RocketMQ broker writes brokerIP1:listenPort:
    # RocketMQ's consumers send their send-backs there.
    host, port = client.sock.getpeername()
    assert got[0].store_host == f"{host}:{port}" and decode_offset_msg_id(first.ext_fields["msgId"])[1] == port
    assert got[0].born_host == "%s:%d" % client.sock.getsockname()  # the sender's address, as RocketMQ's
    # The body is the commit log's bytes, not a re-encoding.
    assert response.body[:got[0].store_size] == broker.store.commitlog.read(got[0].commit_log_offset,
                                                                              got[0].store_size)


@pytest.mark.parametrize("text", ["A\x011\x02B\x012", "A\x011\x02B\x012\x02", "A\x011\x02A\x012\x02",
                                  "\x02A\x011\x02\x01x\x02B\x01\x02", "A\x01x\x01y", "",
                                  "A\x011\x02UNIQ_KEY\x01U1\x02", "UNIQ_KEY\x01U1\x02A\x011"])
def test_a_send_s_property_text_is_stored_as_its_decoded_map_encodes(broker: mqlite.Broker, client: Client,
                                                                     text: str) -> None:
    # The wire's text is stored as is when it is what the decoded map encodes to (no name twice, no empty
    # segment), else re-encoded: the record's property block is always encode(decode(text)), with the
    # UNIQ_KEY the server gives a message sent without one.
    v2 = {"a": "pg", "b": "props", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000001", "h": "0",
          "i": text, "j": "0", "k": "false"}
    sent = client.call(RequestCode.SEND_MESSAGE_V2, v2, b"body")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    broker.wait_dispatched()
    [got] = records(pull(client, "props", 0, int(sent.ext_fields["queueOffset"])).body)
    sent_map = decode_properties(text)
    if "UNIQ_KEY" not in sent_map:
        sent_map["UNIQ_KEY"] = got.properties["UNIQ_KEY"]
    expected = encode_properties(sent_map).encode()
    stored = broker.store.commitlog.read(got.commit_log_offset, got.store_size)
    assert stored.endswith(struct.pack(">h", len(expected)) + expected)
    assert got.properties == sent_map


@pytest.mark.parametrize("shared, own", [
    ("", "UNIQ_KEY\x01U1\x02WAIT\x01true"),  # no request properties: the message's text as it came
    ("UNIQ_KEY\x01B\x02WAIT\x01true", "UNIQ_KEY\x01U1\x02WAIT\x01true\x02TAGS\x01t"),  # RocketMQ's client
    ("WAIT\x01true\x02UNIQ_KEY\x01B", "UNIQ_KEY\x01U1\x02WAIT\x01false"),  # the request's order first
    ("X\x011", "UNIQ_KEY\x01U1\x02UNIQ_KEY\x01U2\x02\x01bad\x02"),  # request-only name; a name twice
    ("UNIQ_KEY\x01B", ""),
])
def test_a_batched_message_s_properties_are_stored_as_the_merged_map_encodes(broker: mqlite.Broker, client: Client,
                                                                            shared: str, own: str) -> None:
    v2 = {"a": "pg", "b": "bprops", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000001", "h": "0",
          "i": shared, "j": "0", "k": "false", "m": "true"}
    body = struct.pack(">iiiii", 0, 0, 0, 0, 1) + b"x" + struct.pack(">h", len(own.encode())) + own.encode()
    sent = client.call(RequestCode.SEND_BATCH_MESSAGE, v2, body + body)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    merged = {**decode_properties(shared), **decode_properties(own)}
    broker.wait_dispatched()
    got = records(pull(client, "bprops", 0, int(sent.ext_fields["queueOffset"])).body)
    expected = encode_properties(merged).encode()
    for record in got:
        stored = broker.store.commitlog.read(record.commit_log_offset, record.store_size)
        assert stored.endswith(struct.pack(">h", len(expected)) + expected) and record.properties == merged
    assert sent.ext_fields["msgId"] == ",".join(m.offset_msg_id for m in got)


def test_header_fields_under_aliases_and_numbers() -> None:
    from mqlite.remoting.handlers import Header, RequestError
    only_aliases = Header({"b": "t", "e": "3", "g": "1700000000000"})
    only_aliases.use_aliases({"topic": "b", "queueId": "e", "bornTimestamp": "g", "flag": "h"})
    assert (only_aliases.text("topic"), only_aliases.int32("queueId"), only_aliases.int64("bornTimestamp")) == \
           ("t", 3, 1700000000000)
    assert only_aliases.int32("flag", 0) == 0 and only_aliases.get("e") == "3"
    mixed = Header({"b": "alias", "topic": "own", "e": "-1", "flag": " 7"})
    mixed.use_aliases({"topic": "b", "queueId": "e", "flag": "h"})
    assert (mixed.text("topic"), mixed.int32("queueId"), mixed.int32("flag")) == ("own", -1, 7)  # own name first
    with pytest.raises(RequestError, match=r"<queueId> is -1; it must be in \[0, "):
        mixed.int32("queueId", low=0)
    with pytest.raises(RequestError, match="<big> is 2147483648"):
        Header({"big": "2147483648"}).int32("big")
    with pytest.raises(RequestError, match="<big> is not a number"):
        Header({"big": "12x"}).int64("big")
    with pytest.raises(RequestError, match="<missing> is null"):
        Header({}).int64("missing")


def test_pull_statuses_and_filters(broker: mqlite.Broker, client: Client) -> None:
    for i, tag in enumerate(["a", "b", "a"]):
        send_v1(client, "t", b"%d" % i, {"TAGS": tag, "n": str(i)})
    broker.wait_dispatched()
    assert [m.body for m in records(pull(client, "t", 0, 0, subscription="b").body)] == [b"1"]
    sql = pull(client, "t", 0, 0, subscription="n >= 1", expression_type="SQL92")
    assert [m.body for m in records(sql.body)] == [b"1", b"2"]
    not_found = pull(client, "t", 0, 3)
    assert not_found.code == ResponseCode.PULL_NOT_FOUND and not_found.remark == "OFFSET_OVERFLOW_ONE"
    assert not_found.ext_fields["nextBeginOffset"] == "3"  # ali-ons needs the offsets in every pull answer
    lite = client.call(RequestCode.LITE_PULL_MESSAGE, {"consumerGroup": "lg", "topic": "t", "queueId": 0,
                                                       "queueOffset": 1, "maxMsgNums": 10, "sysFlag": 22,
                                                       "commitOffset": 0, "suspendTimeoutMillis": 20000,
                                                       "subscription": "*", "subVersion": 0, "expressionType": "TAG",
                                                       "maxMsgBytes": 2147483647, "ReqT": 0})
    assert [m.body for m in records(lite.body)] == [b"1", b"2"]
    moved = pull(client, "t", 0, 99)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.ext_fields["nextBeginOffset"] == "3"
    assert pull(client, "t", 0, 0, subscription="zzz").code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert pull(client, "t", 0, 0, subscription="a >", expression_type="SQL92").code == \
        ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert pull(client, "t", 9, 0).code == ResponseCode.SYSTEM_ERROR  # no queue 9
    # A push consumer with an SQL92 subscription asks first whether the broker can filter with it.
    for expression, code in (("n >= 1", ResponseCode.SUCCESS), ("n >=", ResponseCode.SUBSCRIPTION_PARSE_FAILED)):
        body = to_wire_json({"clientId": "c", "group": "g", "subscriptionData": {
            "expressionType": "SQL92", "subString": expression, "topic": "t", "tagsSet": [], "codeSet": []}})
        assert client.call(RequestCode.CHECK_CLIENT_CONFIG, None, body).code == code
    assert pull(client, "absent", 0, 0).code == ResponseCode.TOPIC_NOT_EXIST
    # Without the subscription flag, a group that never sent a heartbeat has no subscription.
    assert pull(client, "t", 0, 0, sys_flag=0, group="stranger").code == ResponseCode.SUBSCRIPTION_NOT_EXIST


def test_long_poll_wakes_on_a_send_from_another_connection(broker: mqlite.Broker, server: mqlite.Server,
                                                           client: Client) -> None:
    send_v1(client, "t", b"x")
    broker.wait_dispatched()
    result: list[RemotingCommand] = []
    parked = threading.Thread(target=lambda: result.append(
        pull(client, "t", 0, 1, sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND, suspend_ms=30_000)))
    with deadline(20):
        parked.start()
        wait_until(lambda: broker.arrivals.waiting > 0, "the pull to park on the hub (no thread of the server waits)")
        assert not result
        other = Client(server.address)
        send_v1(other, "t", b"y")
        parked.join()
        other.close()
    [response] = result
    assert response.code == ResponseCode.SUCCESS and [m.body for m in records(response.body)] == [b"y"]
    assert broker.arrivals.waiting == 0


def test_offsets(broker: mqlite.Broker, client: Client) -> None:
    for i in range(3):
        send_v1(client, "t", b"%d" % i)
    broker.wait_dispatched()
    q = {"topic": "t", "queueId": 0}
    assert client.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", **q}).ext_fields == {"offset": "0"}
    assert client.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "setZeroIfNotFound": False,
                                                           **q}).code == ResponseCode.QUERY_NOT_FOUND
    assert client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "commitOffset": 2, **q}).code == 0
    assert client.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", **q}).ext_fields == {"offset": "2"}
    pull(client, "t", 0, 3, sys_flag=PULL_SUBSCRIPTION | PULL_COMMIT, group="g", commit_offset=3)
    assert broker.query_offset("g", MessageQueue("t", "mqlite", 0)) == 3
    assert client.call(RequestCode.GET_MAX_OFFSET, q).ext_fields == {"offset": "3"}
    assert client.call(RequestCode.GET_MIN_OFFSET, q).ext_fields == {"offset": "0"}
    assert client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": 0}).ext_fields == {"offset": "0"}
    earliest = int(client.call(RequestCode.GET_EARLIEST_MSG_STORETIME, q).ext_fields["timestamp"])
    assert earliest == broker.query_message_by_offset("t", 0, 0).store_timestamp
    bad = client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "commitOffset": "x", **q})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "commitOffset" in (bad.remark or "")
    assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": "t"}).remark == "the custom field <queueId> is null"


def heartbeat(c: Client, client_id: str, group: str = "cg", topic: str = "t", producer: str | None = None) -> None:
    data = {"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "b", "expressionType": "TAG", "tagsSet": ["b"],
                                 "codeSet": [98], "subVersion": 1, "classFilterMode": False}]}],
        "producerDataSet": [{"groupName": producer}] if producer else []}
    assert c.call(RequestCode.HEART_BEAT, None, to_wire_json(data)).code == ResponseCode.SUCCESS


def test_heartbeat_membership_and_notifications(broker: mqlite.Broker, server: mqlite.Server,
                                                client: Client) -> None:
    broker.create_topic("t", 2)
    with deadline(20):
        heartbeat(client, "c1")
        client.server_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)  # itself, as RocketMQ notifies every channel
        assert broker.topic_config("%RETRY%cg") is not None  # the heartbeat creates the retry topic
        ids = client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
        assert from_wire_json(ids.body) == {"consumerIdList": ["c1"]}
        second = Client(server.address)
        heartbeat(second, "c2")
        notice = client.server_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
        assert notice.is_oneway and notice.ext_fields == {"consumerGroup": "cg"}
        assert broker.consumer_ids("cg") == ["c1", "c2"]
        heartbeat(second, "c2")  # a refresh is not a change: nobody is told
        # Pulls without the subscription flag use the heartbeat's subscription (tag b).
        send_v1(client, "t", b"a", {"TAGS": "a"})
        send_v1(client, "t", b"b", {"TAGS": "b"})
        broker.wait_dispatched()
        assert [m.body for m in records(pull(client, "t", 0, 0, sys_flag=0).body)] == [b"b"]
        second.close()  # a closed connection leaves the group at once
        client.server_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
        assert broker.consumer_ids("cg") == ["c1"]
        assert not [c for c in client.received if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
        client.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "cg"})
        assert broker.consumer_ids("cg") == []
        empty = client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
        assert empty.code == ResponseCode.SYSTEM_ERROR


def test_a_silent_connection_expires(broker: mqlite.Broker) -> None:
    server = broker.serve(channel_expired_timeout=0.2)
    try:
        silent = Client(server.address)
        heartbeat(silent, "quiet")
        with deadline(20):
            assert silent.closed_by_server()
            wait_until(lambda: not broker.consumer_ids("cg"), "the expired connection's consumer to leave its group")
        silent.close()
    finally:
        server.close()


def test_locks(broker: mqlite.Broker, server: mqlite.Server, client: Client) -> None:
    broker.create_topic("t", 2)
    mqs = [MessageQueue("t", "mqlite", 0), MessageQueue("t", "mqlite", 1)]

    def lock(c: Client, client_id: str, queues: list[MessageQueue]) -> list[MessageQueue]:
        body = to_wire_json({"consumerGroup": "og", "clientId": client_id, "mqSet": queues, "onlyThisBroker": False})
        response = c.call(RequestCode.LOCK_BATCH_MQ, None, body)
        return [message_queue_of(m) for m in from_wire_json(response.body)["lockOKMQSet"]]

    assert lock(client, "c1", mqs) == mqs
    other = Client(server.address)
    assert lock(other, "c2", mqs) == []
    body = to_wire_json({"consumerGroup": "og", "clientId": "c1", "mqSet": mqs[:1]})
    assert client.call(RequestCode.UNLOCK_BATCH_MQ, None, body).code == ResponseCode.SUCCESS
    assert lock(other, "c2", mqs) == mqs[:1]
    bad = client.call(RequestCode.LOCK_BATCH_MQ, None, b"{not json")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    other.close()


def test_send_back_and_end_transaction(broker: mqlite.Broker, server: mqlite.Server, client: Client) -> None:
    sent = send_v1(client, "t", b"x", {"UNIQ_KEY": "U"})
    offset = decode_offset_msg_id(sent.ext_fields["msgId"])[2]
    back = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": offset, "group": "cg", "delayLevel": 0,
                                                            "originMsgId": "U", "originTopic": "t",
                                                            "maxReconsumeTimes": 0})
    assert back.code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert broker.query_message_by_offset("%DLQ%cg", 0, 0).body == b"x"  # max 0 reconsumes: dead letter
    missing = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 1 << 40, "group": "cg", "delayLevel": 0})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    # The client's fallback re-sends to the retry topic itself; past its max reconsume times it is a dead letter.
    again = send_v1(client, "%RETRY%cg", b"y", {"RETRY_TOPIC": "t"}, reconsumeTimes=2, maxReconsumeTimes=1,
                    version=413)  # 5.0.0 reads maxReconsumeTimes from version 3.4.9 on
    assert again.code == ResponseCode.SUCCESS and again.ext_fields["queueOffset"] == "1"
    broker.wait_dispatched()
    assert broker.query_message_by_offset("%DLQ%cg", 0, 1).body == b"y"
    # A half message, then its commit (oneway, as RocketMQ's producers end transactions).
    half = send_v1(client, "t", b"tx", {"TRAN_MSG": "true", "PGROUP": "pg", "UNIQ_KEY": "T1"},
                   sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE)
    assert half.code == ResponseCode.SUCCESS
    half_offset = decode_offset_msg_id(half.ext_fields["msgId"])[2]
    client.call(RequestCode.END_TRANSACTION, {"producerGroup": "pg", "tranStateTableOffset": 0,
                                              "commitLogOffset": half_offset, "commitOrRollback": 8,
                                              "fromTransactionCheck": False, "msgId": "T1"}, oneway=True)
    wait_until(lambda: broker.max_offset(MessageQueue("t", "mqlite", 0)) >= 2, "the oneway commit to be stored")
    assert broker.query_message_by_offset("t", 0, 1).body == b"tx"
    # A check-back goes to a connected producer of the group, with the half message as a record.
    checker = Client(server.address)
    heartbeat(checker, "p1", group="unused", producer="pg")
    [proxy] = [p for p in broker.producers("pg")]
    proxy.check_transaction(broker.store.look_message_by_offset(half_offset))
    check = checker.server_request(RequestCode.CHECK_TRANSACTION_STATE)
    assert check.ext_fields["commitLogOffset"] == str(half_offset) and check.ext_fields["msgId"] == "T1"
    assert decode_message(check.body, "mqlite").body == b"tx"
    checker.close()


def test_admin_codes(broker: mqlite.Broker, server: mqlite.Server, client: Client) -> None:
    created = client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "adm", "readQueueNums": 2,
                                                               "writeQueueNums": 2, "perm": 6})
    assert created.code == ResponseCode.SUCCESS and broker.topic_config("adm").write_queue_nums == 2
    config = from_wire_json(client.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert config["adm"]["writeQueueNums"] == 2
    one = from_wire_json(client.call(RequestCode.GET_TOPIC_CONFIG, {"topic": "adm", "lo": True}).body)
    assert (one["topicName"], one["readQueueNums"], one["perm"]) == ("adm", 2, 6)
    assert client.call(RequestCode.GET_TOPIC_CONFIG, {"topic": "nope"}).code == ResponseCode.TOPIC_NOT_EXIST
    send_v1(client, "adm", b"x", {"KEYS": "key1"}, queue_id=1)
    broker.wait_dispatched()
    stats = from_wire_json(client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "adm"}).body)["offsetTable"]
    assert {message_queue_of(k).queue_id: v["maxOffset"] for k, v in stats.items()} == {0: 0, 1: 1}
    broker.commit_offset("cg", MessageQueue("adm", "mqlite", 1), 1)
    consume = from_wire_json(client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "cg",
                                                                         "topic": "adm"}).body)
    assert {message_queue_of(k).queue_id: (v["brokerOffset"], v["consumerOffset"])
            for k, v in consume["offsetTable"].items()} == {1: (1, 1)}
    heartbeat(client, "c1", topic="adm")
    reset = client.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "adm", "group": "cg",
                                                                    "timestamp": 0, "isForce": True})
    assert reset.code == ResponseCode.SUCCESS
    assert {message_queue_of(k).queue_id: v for k, v in from_wire_json(reset.body)["offsetTable"].items()} == {1: 0}
    told = client.server_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
    assert told.ext_fields["group"] == "cg" and list(from_wire_json(told.body)["offsetTable"].values()) == [0]
    connections = from_wire_json(client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                             {"consumerGroup": "cg"}).body)
    assert [c["clientId"] for c in connections["connectionSet"]] == ["c1"]
    found = client.call(RequestCode.QUERY_MESSAGE, {"topic": "adm", "key": "key1", "maxNum": 8,
                                                    "beginTimestamp": 0, "endTimestamp": 1 << 62})
    [msg] = records(found.body)
    assert msg.body == b"x"
    viewed = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": msg.commit_log_offset})
    assert records(viewed.body)[0].keys == ["key1"]
    assert client.call(RequestCode.QUERY_MESSAGE, {"topic": "adm", "key": "nope", "maxNum": 8}).code == \
        ResponseCode.QUERY_NOT_FOUND
    config = client.call(RequestCode.GET_BROKER_CONFIG)
    settings = dict(line.split("=", 1) for line in config.body.decode().splitlines())
    assert settings["maxMessageSize"] == str(broker.config.max_message_size) and settings["brokerId"] == "0"
    assert settings["autoCreateTopicEnable"] == "true" and settings["commitlog_file_size"] == str(1 << 20)
    info = from_wire_json(client.call(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert info["brokerVersionDesc"] == "V5_0_0"
    assert client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "adm"}).code == ResponseCode.SUCCESS
    assert client.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "adm"}).code == ResponseCode.SUCCESS
    # mqadmin deleteTopic then drops the topic's order config from the name server's KV store.
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "adm"}
    assert client.call(RequestCode.DELETE_KV_CONFIG, kv).code == ResponseCode.SUCCESS
    assert client.call(RequestCode.GET_KV_CONFIG, kv).code == ResponseCode.QUERY_NOT_FOUND
    assert broker.topic_config("adm") is None


def test_unknown_codes_bad_headers_and_binary_headers(server: mqlite.Server, client: Client) -> None:
    unknown = client.call(RequestCode.POP_MESSAGE)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "not supported" in (unknown.remark or "")
    bad = client.call(RequestCode.SEND_MESSAGE, {"topic": "t"}, b"x")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in (bad.remark or "")
    assert client.call(RequestCode.HEART_BEAT, None, b"[1]").code == ResponseCode.SYSTEM_ERROR
    binary = Client(server.address, SerializeType.ROCKETMQ)
    response = binary.call(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": 0})
    assert response.serialize_type is SerializeType.ROCKETMQ and response.ext_fields == {"offset": "0"}
    binary.close()


def test_acl(broker: mqlite.Broker) -> None:
    with pytest.raises(ConfigError, match="acl"):
        broker.serve("0.0.0.0:0")
    server = broker.serve(acl={"ak": "secret"})
    try:
        c = Client(server.address)
        assert c.call(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": 0}).code == ResponseCode.NO_PERMISSION
        fields = {"topic": "t", "queueId": "0", ACCESS_KEY: "ak"}
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {**fields, SIGNATURE: sign(fields, None, "secret")})
        c.send(cmd)
        assert c.wait(lambda r: r.opaque == cmd.opaque).code == ResponseCode.SUCCESS
        wrong = c.call(RequestCode.GET_MAX_OFFSET, {**fields, SIGNATURE: sign(fields, None, "guess")})
        assert wrong.code == ResponseCode.NO_PERMISSION
        c.close()
    finally:
        server.close()


def test_a_bad_frame_closes_only_its_connection(broker: mqlite.Broker) -> None:
    server = broker.serve(max_frame_size=4096)
    try:
        good = Client(server.address)
        oversized = Client(server.address)
        oversized.sock.sendall(struct.pack(">i", 1 << 20))
        garbage = Client(server.address)
        garbage.sock.sendall(struct.pack(">i", 8) + bytes([0, 0, 0, 4]) + b"{{{{")
        truncated = Client(server.address)
        truncated.sock.sendall(encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT))[:-3])
        truncated.sock.shutdown(socket.SHUT_WR)
        with deadline(20):
            assert oversized.closed_by_server() and garbage.closed_by_server() and truncated.closed_by_server()
            assert good.call(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": 0}).code == ResponseCode.SUCCESS
        for c in (good, oversized, garbage, truncated):
            c.close()
    finally:
        server.close()


def test_close_leaves_no_thread_and_clears_the_holder_address(broker: mqlite.Broker) -> None:
    server = broker.serve()
    assert holder_address(broker.path) == server.address
    c = Client(server.address)
    heartbeat(c, "c1")
    send_v1(c, "t", b"x")
    server.close()
    server.close()  # idempotent
    assert holder_address(broker.path) is None
    assert broker.put_message("t", 0, b"y").offset_msg_id[8:16] == "00002A9F"  # 127.0.0.1:10911 again
    assert broker.consumer_ids("cg") == []  # its consumers left with their connection
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mqlite-remoting")]
    c.close()
    served = broker.serve()
    broker.close()  # closes its servers first
    assert served.closed  # type: ignore[attr-defined]
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mqlite-")]


def test_mqlite_serve_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "mq"  # a new store: serve creates it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "mqlite", "serve", str(path), "--listen", "127.0.0.1:0",
                             "--set", "auto_create_topic=true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    try:
        with deadline(30):
            address = proc.stdout.readline().strip()  # type: ignore[union-attr]
            c = Client(address)
            assert send_v1(c, "t", b"x").code == ResponseCode.SUCCESS
            assert holder_address(path) == address
            proc.send_signal(signal.SIGTERM)
            assert proc.wait() == 0, proc.stderr.read()  # type: ignore[union-attr]
            assert c.closed_by_server()
            c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    with mqlite.open(path, read_only=True) as reader:
        assert reader.query_message_by_offset("t", 0, 0).body == b"x"
    assert holder_address(path) is None


_FIELDS = ["topic", "queueId", "consumerGroup", "producerGroup", "group", "offset", "queueOffset", "maxMsgNums",
           "sysFlag", "commitOffset", "subscription", "expressionType", "timestamp", "commitLogOffset",
           "commitOrRollback", "delayLevel", "maxReconsumeTimes", "key", "maxNum", "readQueueNums", "writeQueueNums",
           "perm", "clientID", "properties", "bornTimestamp", "flag", "defaultTopicQueueNums", "batch", "a", "b", "e",
           "setZeroIfNotFound", "beginTimestamp", "endTimestamp", "maxMsgBytes", "namespace"]
_VALUES = ["", "0", "1", "-1", "7", "22", "2147483648", "-9223372036854775809", "99999999999999999999", "t", "%RETRY%x",
           "a b", "true", "TAG", "SQL92", "a >", "*", "\x01\x02", "é", "9" * 300]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzzed_headers_always_get_an_answer(fuzz_server: tuple[mqlite.Broker, Client], data: st.DataObject) -> None:
    """Any request code the server handles, with any header values and a junk body: an answer, never a crash."""
    _, c = fuzz_server
    code = data.draw(st.sampled_from(sorted(HANDLERS)))
    fields = data.draw(st.dictionaries(st.sampled_from(_FIELDS), st.sampled_from(_VALUES), max_size=8))
    body = data.draw(st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"{}", b"[]", b'{"mqSet":[1]}'])))
    cmd = RemotingCommand.request(code, fields, body)
    c.send(cmd)
    expected = {cmd.opaque}
    if code == RequestCode.END_TRANSACTION:
        # RocketMQ answers nothing to an end that is neither a commit nor a rollback (TRANSACTION_NOT_TYPE),
        # nor does mqlite: then the answer to a request sent after it shows the connection is alive.
        probe = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": "0"})
        c.send(probe)
        expected.add(probe.opaque)
    with deadline(10):
        response = c.wait(lambda r: r.is_response and r.opaque in expected)
    assert response.code in set(ResponseCode), response
    assert "Error:" not in (response.remark or "") and "Exception" not in (response.remark or ""), response


@pytest.fixture
def fuzz_server(tmp_path: Path) -> Iterator[tuple[mqlite.Broker, Client]]:
    """One server for all of a Hypothesis test's examples (a function-scoped fixture runs once per test)."""
    with mqlite.open(tmp_path / "fuzz", commitlog_file_size=1 << 20) as b:
        b.create_topic("t", 2)
        server = b.serve()
        c = Client(server.address)
        yield b, c
        c.close()


def test_a_client_that_does_not_read_does_not_hold_up_others(broker: mqlite.Broker, server: mqlite.Server) -> None:
    greedy = Client(server.address)
    for i in range(16):
        send_v1(greedy, "big", bytes([i]) * 60_000)
    broker.wait_dispatched()
    greedy.sock.setblocking(False)
    request = encode_frame(RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": "big", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
        "sysFlag": PULL_SUBSCRIPTION, "subscription": "*"}))
    sent = 0
    try:
        for _ in range(400):  # ~400 answers of ~256 KiB each, never read: far more than socket buffers hold
            greedy.sock.sendall(request)
            sent += 1
    except BlockingIOError:
        pass  # the server stopped reading this client: its answers wait unsent
    other = Client(server.address)
    with deadline(20):
        for _ in range(20):
            assert other.call(RequestCode.GET_MAX_OFFSET, {"topic": "big", "queueId": 0}).ext_fields == \
                {"offset": "16"}
    assert sent > 0
    other.close()
    greedy.close()


def test_parked_pulls_do_not_stop_a_connection(broker: mqlite.Broker, server: mqlite.Server,
                                               client: Client) -> None:
    """A push consumer parks one pull per queue it owns: more than the executor's in-flight cap."""
    broker.create_topic("many", 80)
    with deadline(20):
        for queue_id in range(80):
            client.send(RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "g", "topic": "many", "queueId": queue_id, "queueOffset": 0, "maxMsgNums": 32,
                "sysFlag": PULL_SUBSCRIPTION | PULL_SUSPEND, "suspendTimeoutMillis": 30_000, "subscription": "*"}))
        assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": "many", "queueId": 79}).ext_fields == {"offset": "0"}
        # Every pull parked (their tasks start after the inline answer).
        wait_until(lambda: broker.arrivals.waiting >= 80, lambda: f"80 parked pulls, {broker.arrivals.waiting} are")
        send_v1(client, "many", b"wake", queue_id=79)
        woken = client.wait(lambda r: r.is_response and r.code == ResponseCode.SUCCESS and bool(r.body))
    assert [m.body for m in records(woken.body)] == [b"wake"]


def test_trace_records_of_a_traced_client_create_the_trace_topic(broker: mqlite.Broker, client: Client) -> None:
    # RocketMQ's trace dispatcher finds no route for RMQ_SYS_TRACE_TOPIC and sends with defaultTopic TBW102.
    assert send_v1(client, "RMQ_SYS_TRACE_TOPIC", b"Pub\x01...").code == ResponseCode.SUCCESS
    assert broker.topic_config("RMQ_SYS_TRACE_TOPIC") is not None


def test_sync_flush_sends_wait_on_the_executor(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "sync", flush_disk_type="SYNC_FLUSH", commitlog_file_size=1 << 20) as broker:
        server = broker.serve()
        clients = [Client(server.address) for _ in range(4)]  # four connections, 25 pipelined sends each
        sent = {}
        for n, c in enumerate(clients):
            pipelined = [RemotingCommand.request(RequestCode.SEND_MESSAGE, {
                "producerGroup": "pg", "topic": "t", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
                "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0}, b"%d-%d" % (n, i)) for i in range(25)]
            c.sock.sendall(b"".join(encode_frame(cmd) for cmd in pipelined))
            sent[c] = pipelined
        with deadline(20):
            answers = [c.wait(lambda r, o=cmd.opaque: r.opaque == o)  # type: ignore[misc]
                       for c, cmds in sent.items() for cmd in cmds]
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 100
        assert sorted(int(a.ext_fields["queueOffset"]) for a in answers) == list(range(100))
        names = {t.name for t in threading.enumerate()}
        assert "mqlite-remoting-exec_0" in names and not any(n.startswith("ThreadPoolExecutor") for n in names)
        for c in clients:
            c.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mqlite-")]


def test_check_back_over_the_wire_commits_once(tmp_path: Path) -> None:
    """A half left UNKNOW: the broker asks the producer's connection, whose oneway answer commits it."""
    with mqlite.open(tmp_path / "tx", transaction_timeout=0.05, transaction_check_interval=0.05,
                     commitlog_file_size=1 << 20) as broker:
        server = broker.serve()
        producer = Client(server.address)
        heartbeat(producer, "p1", group="unused", producer="txg")
        half = send_v1(producer, "txt", b"tx", {"TRAN_MSG": "true", "PGROUP": "txg", "UNIQ_KEY": "TX1"},
                       sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE, bornTimestamp=int(time.time() * 1000))
        assert half.code == ResponseCode.SUCCESS
        with deadline(20):
            check = producer.server_request(RequestCode.CHECK_TRANSACTION_STATE)
            record = decode_message(check.body, "mqlite")
            assert (record.topic, record.body, record.properties["UNIQ_KEY"]) == ("txt", b"tx", "TX1")
            producer.call(RequestCode.END_TRANSACTION, {
                "producerGroup": "txg", "tranStateTableOffset": check.ext_fields["tranStateTableOffset"],
                "commitLogOffset": check.ext_fields["commitLogOffset"], "commitOrRollback": 8,
                "fromTransactionCheck": True, "msgId": check.ext_fields["msgId"],
                "transactionId": check.ext_fields["transactionId"]}, oneway=True)
            mq = MessageQueue("txt", "mqlite", 0)
            wait_until(lambda: broker.max_offset(mq) >= 1, "the oneway commit to be stored")
        assert broker.query_message_by_offset("txt", 0, 0).body == b"tx"
        producer.close()
        server.close()


def test_a_busy_or_bad_address_is_refused_and_leaves_no_thread(broker: mqlite.Broker, server: mqlite.Server,
                                                               tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "other", commitlog_file_size=1 << 20) as other:
        with pytest.raises(mqlite.RemotingError, match="port 0 picks a free one"):
            other.serve(server.address)
        for bad in ("nonsense", "127.0.0.1:70000", "127.0.0.1:x"):
            with pytest.raises(ConfigError):
                other.serve(bad)
        with pytest.raises(ConfigError, match="acl"):
            other.serve("127.0.0.1:0", acl={"": "x"})
    assert [t.name for t in threading.enumerate() if t.name.startswith("mqlite-remoting")] == ["mqlite-remoting"]


def test_a_long_group_s_retry_topic_is_served(broker: mqlite.Broker, client: Client) -> None:
    group = "g" * 250  # RocketMQ allows 255-character groups: the retry topic is longer than any user topic
    heartbeat(client, "c1", group=group)
    retry = "%RETRY%" + group
    assert client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": retry}).code == ResponseCode.SUCCESS
    assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": retry, "queueId": 0}).ext_fields == {"offset": "0"}
    assert pull(client, retry, 0, 0, group=group).code == ResponseCode.PULL_NOT_FOUND


def test_serve_command_settings_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mqlite.cli import main
    from mqlite.cli.serve import parse_setting

    assert [parse_setting(s) for s in ("a=true", "b=5", "c=0.5", "d=SYNC_FLUSH", "e= x ")] == [
        ("a", True), ("b", 5), ("c", 0.5), ("d", "SYNC_FLUSH"), ("e", "x")]
    store = str(tmp_path / "mq")
    assert main(["serve", store, "--set", "nonsense"]) == 2
    (tmp_path / "acl.json").write_text("[1]")
    assert main(["serve", store, "--acl-file", str(tmp_path / "acl.json")]) == 2
    assert main(["serve", store, "--listen", "10.9.9.9:0"]) == 1  # not loopback: needs ACL
    assert main(["serve", store, "--set", "no_such_setting=1"]) == 1
    err = capsys.readouterr().err
    assert "NAME=VALUE" in err and "acl-file" in err and "allow_anonymous" in err and "no_such_setting" in err


def test_a_consumer_that_stops_heartbeating_is_dropped_while_its_connection_lives(broker: mqlite.Broker) -> None:
    # One RocketMQ client instance, one connection: a consumer dies (no unregister) while a sibling heartbeats.
    server = broker.serve(channel_expired_timeout=1.0)
    try:
        c = Client(server.address)
        heartbeat(c, "dead", group="quiet")
        with deadline(20):
            while broker.consumer_ids("quiet"):
                heartbeat(c, "alive", group="busy")  # traffic that keeps the connection, and one member, alive
        assert broker.consumer_ids("busy") == ["alive"]
        assert c.call(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": 0}).is_response  # still connected
        c.close()
    finally:
        server.close()


def test_a_producer_that_stops_heartbeating_is_forgotten_while_its_connection_lives(broker: mqlite.Broker) -> None:
    # ProducerManager.scanNotActiveChannel: check-backs must not go to a producer group nobody heartbeats.
    server = broker.serve(channel_expired_timeout=1.0)
    try:
        c = Client(server.address)
        heartbeat(c, "p1", group="g1", producer="gone")
        assert len(broker.producers("gone")) == 1
        with deadline(20):
            while broker.producers("gone"):
                heartbeat(c, "p1", group="g1", producer="kept")  # the connection and the other group live on
        assert len(broker.producers("kept")) == 1
        c.close()
    finally:
        server.close()


def test_consumer_offsets_and_topic_consumers(broker: mqlite.Broker, server: mqlite.Server, client: Client) -> None:
    # GET_ALL_CONSUMER_OFFSET: ConsumerOffsetSerializeWrapper, `topic@group` -> queue id -> offset (int keys).
    broker.create_topic("t", 2)
    broker.create_topic("u", 1)
    broker.commit_offset("cg", MessageQueue("t", broker.broker_name, 1), 3)
    broker.commit_offset("other", MessageQueue("u", broker.broker_name, 0), 0)
    answer = client.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert b'"t@cg":{1:3}' in answer.body
    assert from_wire_json(answer.body)["offsetTable"] == {"t@cg": {1: 3}, "u@other": {0: 0}}
    # QUERY_TOPIC_CONSUME_BY_WHO: GroupList of the online groups subscribed to the topic and those with offsets.
    heartbeat(client, "c1", group="live", topic="t")
    by_who = client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "t"})
    assert from_wire_json(by_who.body) == {"groupList": ["cg", "live"]}
    assert from_wire_json(client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "u"}).body) == {
        "groupList": ["other"]}
