"""What `mqlite serve` records and answers where a real RocketMQ 5.0.0 broker was seen to differ
(the Java kit's end-to-end runs against both): born hosts of batches, trace store hosts, admin
answers, pull subscription versions, topics' read and write queue counts, ACL on the name server's requests."""

from __future__ import annotations

import zlib
from pathlib import Path

import mqlite
from mqlite.record import decode_message, encode_record, stored_record
from mqlite.message import SysFlag, encode_properties
from mqlite.remoting.protocol import (
    ACCESS_KEY,
    SIGNATURE,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_batch,
    from_wire_json,
    sign,
    to_wire_json,
)
# The raw-frame client and test_server's fixtures (a broker, its server, a client connected to it).
from support import deadline
from test_server import Client, broker, client, pull, records, server  # noqa: F401


def _batch_header(topic: str) -> dict[str, object]:
    """SEND_BATCH_MESSAGE's header as RocketMQ 5.0.0's client sends it (V2 one-letter names)."""
    return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000001", "h": "0",
            "i": encode_properties({"UNIQ_KEY": "B"}), "j": "0", "k": "false", "m": "true"}


def test_a_batch_records_the_senders_address_as_born_host(broker: mqlite.Broker, client: Client) -> None:
    body = encode_batch([(0, b"one", {"UNIQ_KEY": "U1"}), (0, b"two", {"UNIQ_KEY": "U2"})])
    assert client.call(RequestCode.SEND_BATCH_MESSAGE, _batch_header("orders"), body).code == ResponseCode.SUCCESS
    got = records(pull(client, "orders", 0, 0).body)
    sender = "%s:%d" % client.sock.getsockname()
    # RocketMQ's broker stamps every message of a batch with the channel's remote address, as a single send.
    assert [(m.body, m.born_host) for m in got] == [(b"one", sender), (b"two", sender)]


def test_a_batch_from_an_ipv6_sender_keeps_its_address(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "mq") as broker:
        result = broker.put_messages("T", 0, [b"a", b"bb"], [{"KEYS": "k"}, None], born_host="[::1]:4567")
        broker.put_message("T", 0, b"after")
        assert result.msg_num == 2
        broker.wait_dispatched()
        pulled = broker.pull("g", mqlite.MessageQueue("T", broker.broker_name, 0), 0, 32).msg_found_list
        assert [(m.body, m.born_host) for m in pulled] == [(b"a", "[::1]:4567"), (b"bb", "[::1]:4567"),
                                                            (b"after", "127.0.0.1:10911")]
        assert [m.keys for m in pulled[:2]] == [["k"], []]
    with mqlite.open(tmp_path / "mq") as broker:  # recovery reads the longer headers too
        assert [m.body for m in broker.pull("g", mqlite.MessageQueue("T", broker.broker_name, 0), 0, 32).msg_found_list] == [b"a", b"bb", b"after"]


def test_trace_records_name_the_serving_address_as_store_host(broker: mqlite.Broker, server: mqlite.Server) -> None:
    class Commit:
        def execute_local_transaction(self, msg: object, arg: object) -> mqlite.LocalTransactionState:
            return mqlite.LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg: object) -> mqlite.LocalTransactionState:
            return mqlite.LocalTransactionState.COMMIT_MESSAGE

    broker.create_topic("T", 1)
    with mqlite.connect(server.address) as remote:  # a traced producer here and one in another process
        for target in (broker, remote):
            with mqlite.Producer(target, "pg", trace=True) as producer, \
                    mqlite.TransactionProducer(target, "tg", listener=Commit(), trace=True) as tx:
                sent = producer.send(mqlite.Message("T", b"x"))
                half = tx.send_message_in_transaction(mqlite.Message("T", b"y"))
            # RocketMQ's hooks record the address the request went to: the broker's brokerIP1:listenPort.
            views = broker.query_trace(sent.msg_id) + broker.query_trace(half.msg_id)
            assert [v.msg_type for v in views] == ["Pub", "Pub", "EndTransaction"]
            assert {v.store_host for v in views} == {server.address}


def test_an_offset_reset_with_no_consumer_online(broker: mqlite.Broker, server: mqlite.Server,
                                                 client: Client) -> None:
    broker.create_topic("T", 2)
    for i in range(3):
        broker.put_message("T", i % 2, b"m%d" % i)
    mq0, mq1 = (mqlite.MessageQueue("T", broker.broker_name, q) for q in (0, 1))
    broker.commit_offset("g", mq0, 0)
    fields = {"topic": "T", "group": "g", "timestamp": -1, "isForce": "true"}
    # 5.0.0's broker refuses and moves nothing; mqadmin then sets each queue's offset itself.
    refused = client.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    assert (refused.code, refused.remark) == (
        ResponseCode.CONSUMER_NOT_ONLINE, "Consumer not online, so can not reset offset, Group: g Topic: T Timestamp: -1")
    assert broker.query_offset("g", mq0) == 0
    missing = client.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**fields, "topic": "nope"})
    assert missing.code == ResponseCode.SYSTEM_ERROR and "no topic in this broker" in (missing.remark or "")
    with mqlite.connect(server.address) as remote:  # does what mqadmin does: the same result as a local reset
        assert remote.reset_offset_by_time("g", "T", -1) == {mq0: 2, mq1: 1}
        assert (broker.query_offset("g", mq0), broker.query_offset("g", mq1)) == (2, 1)
        assert remote.reset_offset_by_time("g", "T", 0) == {mq0: 0, mq1: 0}
        assert (broker.query_offset("g", mq0), broker.query_offset("g", mq1)) == (0, 0)


def _subscribe(client: Client, expression: str, version: int) -> None:
    """A push consumer's heartbeat: group "cg" subscribes topic "T" with `expression` at time `version`."""
    data = {"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "T", "subString": expression, "expressionType": "TAG", "tagsSet": [],
                                 "codeSet": [], "subVersion": version, "classFilterMode": False}]}]}
    assert client.call(RequestCode.HEART_BEAT, None, to_wire_json(data)).code == ResponseCode.SUCCESS


def test_a_pull_newer_than_the_heartbeats_subscription_is_refused(broker: mqlite.Broker, client: Client) -> None:
    broker.create_topic("T", 1)
    broker.put_message("T", 0, b"a", {"TAGS": "a"})
    broker.put_message("T", 0, b"b", {"TAGS": "b"})

    def push_pull(version: int) -> RemotingCommand:  # RocketMQ's push consumer: no subscription, its version
        return client.call(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "cg", "topic": "T", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": version, "expressionType": "TAG"})

    _subscribe(client, "a", 100)
    assert [m.body for m in records(push_pull(100).body)] == [b"a"]
    # The consumer subscribed anew at 200 and pulls before its heartbeat says so: 5.0.0 refuses the pull
    # (the client retries), rather than filter with the old expression.
    stale = push_pull(200)
    assert (stale.code, stale.remark) == (ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    _subscribe(client, "b", 200)
    assert [m.body for m in records(push_pull(200).body)] == [b"b"]


def test_a_topic_with_fewer_write_queues_than_read_queues(broker: mqlite.Broker, server: mqlite.Server,
                                                           client: Client) -> None:
    fields = {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 2, "perm": 6,
              "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
    assert client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields).code == ResponseCode.SUCCESS
    [queues] = from_wire_json(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).body)["queueDatas"]
    assert (queues["readQueueNums"], queues["writeQueueNums"]) == (4, 2)
    refused = client.call(RequestCode.SEND_MESSAGE_V2, {**_batch_header("T"), "e": "3", "m": "false"}, b"x")
    assert refused.code == ResponseCode.SYSTEM_ERROR and "writeQueueNums: 2" in (refused.remark or "")
    assert pull(client, "T", 3, 0).code == ResponseCode.PULL_NOT_FOUND  # queue 3 is still read
    with mqlite.connect(server.address) as remote:
        remote.create_topic("U", 2, read_queue_nums=3)
        assert {q.queue_id for q in remote.fetch_publish_queues("U")} == {0, 1}
        assert {q.queue_id for q in remote.fetch_subscribe_queues("U")} == {0, 1, 2}
        with mqlite.Producer(remote, "pg") as producer:
            assert {producer.send(mqlite.Message("U", b"m")).message_queue.queue_id for _ in range(8)} == {0, 1}
    config = broker.topic_config("U")
    assert config is not None and (config.read_queue_nums, config.write_queue_nums) == (3, 2)


def test_with_acl_the_name_servers_requests_are_signed_too(broker: mqlite.Broker) -> None:
    broker.create_topic("T", 1)
    server = broker.serve(acl={"ak": "secret"})
    try:
        c = Client(server.address)
        # One port serves the name server and the broker: an unsigned client learns no route either
        # (5.0.0's name server has no ACL), and the answer is NO_PERMISSION (5.0.0's broker: SYSTEM_ERROR).
        for code, fields in ((RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}),
                             (RequestCode.GET_BROKER_CLUSTER_INFO, {}),
                             (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})):
            assert c.call(code, fields).code == ResponseCode.NO_PERMISSION
            signed = {**fields, ACCESS_KEY: "ak"}
            assert c.call(code, {**signed, SIGNATURE: sign(signed, None, "secret")}).code == ResponseCode.SUCCESS
        c.close()
    finally:
        server.close()


def test_the_brokers_requests_to_clients_are_headed_as_a_5_0_0_brokers(client: Client) -> None:
    with deadline(20):
        _subscribe(client, "*", 1)
        notify = client.server_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
    assert (notify.language, notify.version, notify.is_oneway) == ("JAVA", 413, True)


def test_a_send_without_a_body_is_illegal(broker: mqlite.Broker, client: Client) -> None:
    header = {**_batch_header("T"), "m": "false"}
    refused = client.call(RequestCode.SEND_MESSAGE_V2, header)
    assert (refused.code, refused.remark) == (ResponseCode.MESSAGE_ILLEGAL, (
        "the message is illegal, maybe msg body or properties length not matched. msg body length limit "
        f"{broker.config.max_message_size}B, msg properties length limit 32KB."))
    assert all(q.max_offset == 0 for q in broker.topic_status("T"))  # nothing stored
    assert client.call(RequestCode.SEND_MESSAGE_V2, header, b"x").code == ResponseCode.SUCCESS


def test_all_topic_config_is_5_0_0s_wrapper(broker: mqlite.Broker, client: Client) -> None:
    broker.create_topic("T", 2)
    body = from_wire_json(client.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)
    assert sorted(body) == ["dataVersion", "mappingDataVersion", "topicConfigTable", "topicQueueMappingDetailMap",
                            "topicQueueMappingInfoMap"]
    assert body["topicConfigTable"]["T"] == {
        "attributes": {}, "order": False, "perm": 6, "readQueueNums": 2, "topicFilterType": "SINGLE_TAG",
        "topicName": "T", "topicSysFlag": 0, "writeQueueNums": 2}


def test_a_message_sent_without_an_id_gets_one(broker: mqlite.Broker, client: Client) -> None:
    header = {**_batch_header("T"), "i": encode_properties({"TAGS": "a"}), "m": "false"}  # as ali-ons sends
    sent = client.call(RequestCode.SEND_MESSAGE_V2, header, b"x")
    [got] = records(pull(client, "T", 0, 0).body)
    uniq = got.properties["UNIQ_KEY"]  # 5.0.0's broker gives it one: its msg id, answered as transactionId
    assert len(uniq) == 32 and got.msg_id == uniq == sent.ext_fields["transactionId"]
    assert got.offset_msg_id == sent.ext_fields["msgId"] and got.tags == "a"


def test_a_retry_send_is_a_dead_letter_only_past_its_max_and_then_not_delayed(broker: mqlite.Broker,
                                                                              client: Client) -> None:
    # sendMessageBackAsNormalMessage: the client counted this attempt already and asks DELAY 3 + times.
    def resend(body: bytes, times: int, version: int = 413) -> RemotingCommand:
        fields = {"producerGroup": "pg", "topic": "%RETRY%cg", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
                  "queueId": 0, "sysFlag": 0, "bornTimestamp": 1_700_000_000_000, "flag": 0,
                  "properties": encode_properties({"RETRY_TOPIC": "t", "DELAY": str(3 + times)}),
                  "reconsumeTimes": times, "maxReconsumeTimes": 2}
        return client.call(RequestCode.SEND_MESSAGE, fields, body, version=version)

    assert resend(b"at max", 2).code == ResponseCode.SUCCESS  # 5.0.0: '>' max, so one more retry
    assert resend(b"past max", 3).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    delayed = broker.query_message_by_offset("SCHEDULE_TOPIC_XXXX", 4, 0)  # level 5 is queue 4
    assert (delayed.body, delayed.properties["REAL_TOPIC"]) == (b"at max", "%RETRY%cg")
    dead = broker.pull("g", mqlite.MessageQueue("%DLQ%cg", broker.broker_name, 0), 0, 32).msg_found_list
    # A request older than 3.4.9 carries no max of its own: the group's (16) holds.
    assert resend(b"old client", 3, version=120).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert broker.query_message_by_offset("SCHEDULE_TOPIC_XXXX", 5, 0).body == b"old client"
    assert [(m.body, m.reconsume_times, m.delay_time_level) for m in dead] == [(b"past max", 3, 0)]
    assert broker.topic_config("%DLQ%cg") is not None


def test_a_record_encodes_back_to_its_stored_bytes(tmp_path: Path) -> None:
    # What CHECK_TRANSACTION_STATE sends (a half message restored to its real topic) is encoded by the
    # record codec: a stored record decodes and encodes back to the same bytes, hosts of either form.
    with mqlite.open(tmp_path / "mq") as broker:
        broker.put_message("T", 0, b"v4", {"KEYS": "k", "TAGS": "a"}, flag=7, born_host="10.1.2.3:4567",
                           reconsume_times=2)
        broker.put_message("T" * 200, 0, b"v6 and a V2 topic", None, born_host="[::1]:9")
        broker.put_message("T", 0, zlib.compress(b"z" * 1000), {"UNIQ_KEY": "U"}, sys_flag=SysFlag.COMPRESSED)
        broker.wait_dispatched()
        plain = broker.pull("g", mqlite.MessageQueue("T", broker.broker_name, 0), 0, 32).msg_found_list
        long = broker.pull("g", mqlite.MessageQueue("T" * 200, broker.broker_name, 0), 0, 32).msg_found_list
        first, compressed = plain
        for msg in (first, long[0]):
            assert encode_record(msg) == stored_record(msg)
        assert compressed.sys_flag & SysFlag.COMPRESSED
        again = decode_message(encode_record(compressed), broker.broker_name)
        assert again.body == b"z" * 1000 and not again.sys_flag & SysFlag.COMPRESSED
        assert (again.msg_id, again.queue_offset, again.commit_log_offset, again.store_host) == \
               (compressed.msg_id, compressed.queue_offset, compressed.commit_log_offset, compressed.store_host)
    odd = decode_message(encode_record(first), "b")
    odd.born_host = "not an address"
    assert decode_message(encode_record(odd), "b").born_host == "0.0.0.0:0"
