"""mqlite's clients on a broker in another process: `mqlite.connect`, `RemoteBroker`, a held store's
path reaching its serving holder, and what happens when processes die.

Most tests serve a broker in this process (`broker.serve`) and talk to it over loopback, which
is exactly what another process sees; the cross-process ones run `tests/_remotechild.py`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mqlite
from _crashchild import Child
from mqlite.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, ConsumeOrderlyStatus
from mqlite.errors import (
    DiskFullError,
    IllegalStateError,
    MessageNotFoundError,
    MQClientError,
    RemotingError,
    SendTimeoutError,
)
from mqlite.message import EncodedProperties, encode_properties
from mqlite.producer import LocalTransactionState
from mqlite.remoting.faults import ERROR_FIELD
from mqlite.remoting.protocol import RemotingCommand, RequestCode, ResponseCode, decode_batch, encode_batch
from support import SMALL_STORE, broker_fixture, deadline, no_leftover_threads, wait_until  # noqa: F401 - autouse

FAST_LEVELS = " ".join(["100ms"] * 18)
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
HERE = os.path.dirname(os.path.abspath(__file__))


class RemoteChild(Child):
    """`tests/_remotechild.py` seen from the parent."""

    script = os.path.join(HERE, "_remotechild.py")


class ServeChild(Child):
    """`python -m mqlite serve ARGS...`, as users run a server (its first line is the address)."""

    script = "-m"

    def __init__(self, *args: str) -> None:
        super().__init__("mqlite", "serve", *args)


broker = broker_fixture(message_delay_level=FAST_LEVELS, transaction_timeout=0.05, transaction_check_interval=0.2)


@pytest.fixture
def server(broker: mqlite.Broker) -> Iterator[Any]:
    s = broker.serve("127.0.0.1:0")
    yield s
    s.close()


@pytest.fixture
def remote(server: Any) -> Iterator[mqlite.RemoteBroker]:
    with mqlite.connect(server.address) as r:
        yield r


class Collector:
    """A concurrent listener that records bodies; the test waits on its condition."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.bodies: list[bytes] = []

    def __call__(self, msgs: list[mqlite.MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        with self.cv:
            self.bodies += [m.body for m in msgs]
            self.cv.notify_all()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def wait_for(self, n: int, timeout: float = 10.0) -> list[bytes]:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.bodies) >= n, timeout), f"got {len(self.bodies)} of {n}"
            return list(self.bodies)


# -- sending ------------------------------------------------------------------------------------------
def test_a_delayed_message_waits_its_level_on_the_server(broker: mqlite.Broker, remote: mqlite.RemoteBroker) -> None:
    broker.create_topic("D", 1)
    collector = Collector()
    with mqlite.Producer(remote, group="pg") as producer, \
            mqlite.PushConsumer(remote, "cg", subscription={"D": "*"}, listener=collector,
                                consume_from_where=FIRST):
        sent_at = time.time()
        producer.send(mqlite.Message("D", b"later", delay_time_level=1))
        assert collector.wait_for(1) == [b"later"]
        stored = broker.query_message_by_offset("D", 0, 0)
        assert stored.store_timestamp >= sent_at * 1000 + 100 - 5  # delivered after its 100 ms level


def test_transactions_commit_roll_back_and_answer_check_backs(broker: mqlite.Broker,
                                                              remote: mqlite.RemoteBroker) -> None:
    broker.create_topic("X", 1)
    checked = threading.Event()

    class Listener:
        def execute_local_transaction(self, msg: mqlite.Message, arg: Any) -> LocalTransactionState:
            return LocalTransactionState(arg)

        def check_local_transaction(self, msg: mqlite.MessageExt) -> LocalTransactionState:
            checked.set()
            return LocalTransactionState.COMMIT_MESSAGE

    with mqlite.TransactionProducer(remote, group="tpg", listener=Listener()) as producer:
        producer.send_message_in_transaction(mqlite.Message("X", b"commit"), "COMMIT_MESSAGE")
        producer.send_message_in_transaction(mqlite.Message("X", b"rollback"), "ROLLBACK_MESSAGE")
        producer.send_message_in_transaction(mqlite.Message("X", b"checked"), "UNKNOW")
        # The server's check-back goes over the connection to this producer, which commits.
        assert checked.wait(10)
        wait_until(lambda: broker.max_offset(mqlite.MessageQueue("X", broker.broker_name, 0)) == 2, "the commit")
    bodies = [broker.query_message_by_offset("X", 0, i).body for i in range(2)]
    assert bodies == [b"commit", b"checked"]


# -- consuming ----------------------------------------------------------------------------------------
def test_orderly_locks_are_handed_over_between_processes(broker: mqlite.Broker, server: Any) -> None:
    broker.create_topic("O", 2)
    consumed: list[tuple[int, int, str]] = []  # (queue id, value, consumer) in consumption order
    lock = threading.Lock()

    def listener(msgs: list[mqlite.MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        with lock:
            consumed.extend((m.queue_id, int(m.body), "a") for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    def queue(q: int) -> mqlite.MessageQueue:
        return mqlite.MessageQueue("O", broker.broker_name, q)

    def holders() -> list[str | None]:
        return [broker.queue_locks.holder("og", queue(q)) for q in (0, 1)]

    def send(values: range, queues: tuple[int, ...]) -> None:
        for i in values:
            for q in queues:
                producer.send(mqlite.Message("O", b"%d" % i), queue=queue(q))

    with mqlite.connect(server.address) as remote, mqlite.Producer(remote, group="pg") as producer, \
            mqlite.PushConsumer(remote, "og", subscription={"O": "*"}, listener=listener, orderly=True,
                                consume_from_where=FIRST, client_id="a") as a, deadline(60):
        send(range(10), (0, 1))
        wait_until(lambda: len(consumed) == 20 and holders() == ["a", "a"], "a to consume and lock both queues")
        # "b" (another process) joins: queue 1 moves over, with its lock, once "a" has given it back.
        with RemoteChild("orderly", server.address, "og", "O", "b") as child:
            assert child.readline(time.monotonic() + 30) == "STARTED", child.stderr()
            wait_until(lambda: holders() == ["a", "b"], "the lock hand-over to b")
            send(range(10, 30), (0, 1))
            end = time.monotonic() + 20
            for _ in range(20):  # b consumes queue 1 from where a stopped (its committed offset), in order
                line = child.readline(end)
                assert line is not None, child.stderr()
                _, q, value = line.split()
                consumed.append((int(q), int(value), "b"))
            child.close_stdin()  # b shuts down and gives its lock back
            assert child.readline(time.monotonic() + 30) is None, child.stderr()
        wait_until(lambda: holders() == ["a", "a"], "queue 1 back to a")
        send(range(30, 35), (1,))
        assert a.join(10)
        assert len(consumed) == 65  # everything consumed
    for q in (0, 1):
        values = [v for queue_id, v, _ in consumed if queue_id == q]
        assert values == sorted(values) and len(set(values)) == len(values), f"queue {q}: {values}"
    assert [v for q, v, name in consumed if q == 1 and name == "b"] == list(range(10, 30))


def test_offsets_over_the_wire(broker: mqlite.Broker, remote: mqlite.RemoteBroker) -> None:
    broker.create_topic("F", 1)
    mq = mqlite.MessageQueue("F", broker.broker_name, 0)
    assert remote.query_offset("g", mq) == -1
    assert remote.offset_for_new_group(mq) == broker.offset_for_new_group(mq) == 0
    with mqlite.Producer(remote, group="pg") as producer:
        for i in range(3):
            producer.send(mqlite.Message("F", b"%d" % i))
    remote.commit_offset("g", mq, 2)
    assert remote.query_offset("g", mq) == broker.query_offset("g", mq) == 2
    assert (remote.min_offset(mq), remote.max_offset(mq)) == (0, 3)
    assert remote.search_offset(mq, 0) == 0
    with pytest.raises(MQClientError):
        remote.commit_offset("g", mq, -1)


def test_an_increase_only_commit_never_moves_the_offset_back(broker: mqlite.Broker,
                                                             remote: mqlite.RemoteBroker) -> None:
    # The broker's UPDATE_CONSUMER_OFFSET is a plain set: the client's table decides, as the local broker does.
    broker.create_topic("F", 1)
    mq = mqlite.MessageQueue("F", broker.broker_name, 0)
    remote.commit_offset("g", mq, 5)
    remote.commit_offset("g", mq, 3, increase_only=True)  # a late commit of a batch consumed before
    assert broker.query_offset("g", mq) == 5
    broker.commit_offset("g", mq, 9)  # another client moved it on; this one reads it
    assert remote.query_offset("g", mq) == 9
    remote.commit_offset("g", mq, 7, increase_only=True)
    assert broker.query_offset("g", mq) == 9
    remote.commit_offset("g", mq, 10, increase_only=True)
    assert broker.query_offset("g", mq) == 10
    remote.commit_offset("g", mq, 1)  # a plain set (a reset) still goes back
    assert broker.query_offset("g", mq) == 1


def test_an_increase_only_commit_of_the_same_offset_sends_nothing(broker: mqlite.Broker,
                                                                  remote: mqlite.RemoteBroker) -> None:
    # A push consumer re-commits its position after every empty pull (correctTagsOffset); over the wire
    # each would be a round trip. The client's table already holds that offset, so nothing is sent:
    # seen here because a commit made behind the client's back is not overwritten.
    broker.create_topic("E", 1)
    mq = mqlite.MessageQueue("E", broker.broker_name, 0)
    remote.commit_offset("g", mq, 5)
    broker.commit_offset("g", mq, 2)  # behind the client's back
    remote.commit_offset("g", mq, 5, increase_only=True)
    assert broker.query_offset("g", mq) == 2
    remote.commit_offset("g", mq, 6, increase_only=True)  # a real move is sent
    assert broker.query_offset("g", mq) == 6


def test_what_a_client_stored_is_found_by_its_next_pull_and_key_query(broker: mqlite.Broker,
                                                                        remote: mqlite.RemoteBroker) -> None:
    # RemoteBroker.wait_dispatched asks nothing: puts are answered with their units written, and the
    # server's key look-up waits for its own index (here 2000 keys, just stored in one batch).
    broker.create_topic("K", 1)
    mq = mqlite.MessageQueue("K", broker.broker_name, 0)
    for round_ in range(3):
        keys = [f"r{round_}k{i}" for i in range(2000)]
        bodies = [b"%d" % i for i in range(2000)]
        props = [{"KEYS": k} for k in keys]
        remote.put_messages("K", 0, bodies, props)
        assert remote.wait_dispatched()
        assert [m.keys for m in remote.query_message("K", keys[-1])] == [[keys[-1]]]
        found = remote.pull("g", mq, round_ * 2000 + 1999, 1)
        assert [m.body for m in found.msg_found_list] == [b"1999"]


def test_a_consumer_process_killed_hands_its_queues_to_the_others(broker: mqlite.Broker, server: Any,
                                                                  tmp_path: Path) -> None:
    broker.create_topic("R", 4)
    mine: list[set[int]] = [set()]
    cv = threading.Condition()

    def changed(topic: str, mq_all: set[mqlite.MessageQueue], divided: set[mqlite.MessageQueue]) -> None:
        with cv:
            mine[0] = {mq.queue_id for mq in divided}
            cv.notify_all()

    with mqlite.connect(server.address) as remote, deadline(60):
        consumer = mqlite.LitePullConsumer(remote, "rg")
        consumer.subscribe("R", "*", queue_listener=changed)
        consumer.start()
        with cv:
            assert cv.wait_for(lambda: mine[0] == {0, 1, 2, 3}, 10)
        with RemoteChild("consume", server.address, "rg", "R") as child:
            end = time.monotonic() + 20
            while True:  # the child's share: two queues (which two depends on how the client ids sort)
                line = child.readline(end)
                assert line is not None, child.stderr()
                theirs = set() if line == "ASSIGNED -" else {int(q) for q in line.split()[1].split(",")}
                if len(theirs) == 2:
                    break
            with cv:
                assert cv.wait_for(lambda: mine[0] == {0, 1, 2, 3} - theirs, 10), (mine, theirs)
            child.kill()  # kill -9: its connection closes, the server drops it and tells the group
            with cv:
                assert cv.wait_for(lambda: mine[0] == {0, 1, 2, 3}, 10), mine
        consumer.shutdown()


# -- a held store's path ------------------------------------------------------------------------------
def test_a_second_process_opening_the_path_reaches_the_serving_holder(broker: mqlite.Broker, server: Any) -> None:
    with RemoteChild("open", broker.path, "P", "from-child") as child, deadline(60):
        end = time.monotonic() + 30
        assert child.readline(end) == "RemoteBroker", child.stderr()
        sent = child.readline(end)
        assert sent is not None and sent.startswith("SENT "), child.stderr()
        msg_id = sent.split()[1]
        assert child.readline(end) == "METRICS 1", child.stderr()
    assert broker.view_message(msg_id).body == b"from-child"


def test_without_serving_the_lock_error_stands(tmp_path: Path) -> None:
    path = str(tmp_path / "held")
    with Child(path, "hold") as holder, deadline(60):
        line = holder.readline(time.monotonic() + 30)
        assert line is not None and line.startswith("READY"), holder.stderr()
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(path)
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.Producer(path, group="pg").start()


def test_clients_given_a_held_path_share_one_connection(broker: mqlite.Broker, server: Any) -> None:
    from mqlite.remoting.holder import connect_to_holder

    first = connect_to_holder(os.path.realpath(broker.path))
    second = connect_to_holder(os.path.realpath(broker.path))
    assert first is second and not first.closed
    first.release()
    assert not second.closed
    second.release()
    assert first.closed
    server.close()
    with pytest.raises(mqlite.StoreLockedError, match="does not serve"):
        connect_to_holder(os.path.realpath(broker.path))


# -- failures -------------------------------------------------------------------------------------------
def test_sends_fail_fast_while_the_server_is_down_and_work_again_after_it_restarts(broker: mqlite.Broker) -> None:
    server = broker.serve("127.0.0.1:0")
    address = server.address
    collector = Collector()
    with deadline(60), mqlite.connect(address, timeout=2) as remote:
        with mqlite.Producer(remote, group="pg") as producer, \
                mqlite.PushConsumer(remote, "cg", subscription={"S": "*"}, listener=collector,
                                    consume_from_where=FIRST):
            producer.send(mqlite.Message("S", b"before"))
            assert collector.wait_for(1) == [b"before"]
            server.close()
            with pytest.raises((SendTimeoutError, RemotingError)):
                producer.send(mqlite.Message("S", b"while down"))
            server = broker.serve(address)  # the same port: the client reconnects on its next request
            producer.send(mqlite.Message("S", b"after"))
            # The consumer re-registered on the reconnect and its parked pulls came back: it consumes again.
            assert collector.wait_for(2)[-1] == b"after"
    server.close()


def test_connecting_to_nothing_and_using_a_closed_connection(tmp_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as s:
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(RemotingError, match="cannot connect"):
        mqlite.connect(address, timeout=1)
    with mqlite.open(str(tmp_path / "mq")) as broker:
        server = broker.serve("127.0.0.1:0")
        remote = mqlite.connect(server.address)
        remote.close()
        with pytest.raises(IllegalStateError):
            remote.max_offset(mqlite.MessageQueue("T", "mqlite", 0))
        with pytest.raises(IllegalStateError):
            mqlite.Producer(remote, group="pg").start()
        server.close()


# -- admin surface --------------------------------------------------------------------------------------
def test_the_admin_surface_answers_as_the_local_broker(broker: mqlite.Broker, remote: mqlite.RemoteBroker) -> None:
    config = remote.create_topic("A", 2)
    assert config == broker.topic_config("A")
    assert "A" in remote.topic_list() and remote.topic_list() == broker.topic_list()
    with mqlite.Producer(remote, group="pg") as producer:
        sent = [producer.send(mqlite.Message("A", b"m%d" % i, keys=["k%d" % i]),
                              queue=mqlite.MessageQueue("A", broker.broker_name, 0)) for i in range(3)]
    broker.store.wait_dispatched()
    assert remote.topic_status("A") == broker.topic_status("A")
    assert remote.view_message(sent[1].offset_msg_id).body == b"m1"
    assert remote.view_message(sent[2].msg_id).body == b"m2"
    with pytest.raises(MessageNotFoundError):
        remote.view_message("0" * 32)
    assert [m.body for m in remote.query_message("A", "k0")] == [b"m0"]
    assert remote.query_message_by_offset("A", 0, 2).body == b"m2"
    with pytest.raises(MessageNotFoundError):
        remote.query_message_by_offset("A", 0, 9)
    remote.commit_offset("ag", mqlite.MessageQueue("A", broker.broker_name, 0), 1)
    assert remote.consumer_progress("ag") == broker.consumer_progress("ag")
    table = remote.reset_offset_by_time("ag", "A", -1)
    assert table == broker.reset_offset_by_time("ag", "A", -1)
    remote.delete_topic("A")
    assert "A" not in broker.topic_list()
    with pytest.raises(MQClientError):
        remote.delete_topic("SCHEDULE_TOPIC_XXXX")


# -- kill -9 of the serving process ------------------------------------------------------------------------
def test_every_send_acknowledged_before_a_kill_9_of_the_server_is_in_the_store(tmp_path: Path) -> None:
    path = str(tmp_path / "served")
    acked: list[int] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    with ServeChild(path, "--listen", "127.0.0.1:0", "--set", "flush_disk_type=SYNC_FLUSH") as child, deadline(90):
        address = child.readline(time.monotonic() + 30)
        assert address is not None and address.startswith("127.0.0.1:"), child.stderr()
        remote = mqlite.connect(address, timeout=2)
        remote.create_topic("K", 2)
        enough = threading.Event()

        def send(first: int) -> None:
            try:
                with mqlite.Producer(remote, group="kpg") as producer:  # its shutdown must not fail either
                    for seq in range(first, first + 100_000, 2):
                        try:
                            producer.send(mqlite.Message("K", b"%d" % seq))
                        except (SendTimeoutError, RemotingError) as exc:
                            failures.append(exc)  # the server died: the outcome of this send is unknown
                            return
                        with lock:
                            acked.append(seq)
                            if len(acked) >= 300:
                                enough.set()
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                failures.append(exc)

        senders = [threading.Thread(target=send, args=(i,), name=f"test-send-{i}") for i in range(2)]
        for sender in senders:
            sender.start()
        assert enough.wait(30), child.stderr()
        child.kill()  # SIGKILL mid-stream: no close, no flush beyond what SYNC_FLUSH already did
        for sender in senders:
            sender.join()  # every send in flight failed fast instead of hanging
        remote.close()
    assert len(failures) == 2 and all(isinstance(f, (SendTimeoutError, RemotingError)) for f in failures), failures
    with mqlite.open(path) as broker:
        stored = set()
        for q in (0, 1):
            mq = mqlite.MessageQueue("K", broker.broker_name, q)
            offset = 0
            while True:
                result = broker.pull("check", mq, offset, 256)
                if not result.msg_found_list:
                    break
                stored |= {int(m.body) for m in result.msg_found_list}
                offset = result.next_begin_offset
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} acknowledged sends lost, e.g. {sorted(missing)[:5]}"


def test_refusals_arrive_as_the_local_brokers_errors(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path / "mq"), auto_create_topic=False, **SMALL_STORE) as broker:
        server = broker.serve("127.0.0.1:0")
        with mqlite.connect(server.address) as remote, mqlite.Producer(remote, group="pg") as producer:
            with pytest.raises(MQClientError, match="create_topic"):
                producer.send(mqlite.Message("nowhere", b"x"))
            broker.create_topic("E", 1)
            with pytest.raises(MQClientError, match="MESSAGE_ILLEGAL|max_message_size|body"):
                remote.put_message("E", 0, b"x" * (broker.config.max_message_size + 1))
            with pytest.raises(MQClientError, match="system topic"):
                remote.delete_topic("SCHEDULE_TOPIC_XXXX")
        server.close()


def test_a_full_disk_on_the_server_is_a_disk_full_error_named_in_the_answer_not_read_from_its_text(
        tmp_path: Path) -> None:
    # A ratio below any real disk's usage: the server's store refuses every put with DiskFullError.
    with mqlite.open(str(tmp_path / "mq"), disk_space_warning_level_ratio=0.01, **SMALL_STORE) as broker:
        broker.create_topic("E", 1)
        server = broker.serve("127.0.0.1:0")
        with mqlite.connect(server.address) as remote:
            with pytest.raises(DiskFullError, match="SERVICE_NOT_AVAILABLE"):
                remote.put_message("E", 0, b"x")
            answer = remote.remote.request(RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2,
                {"a": "pg", "b": "E", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "i": "",
                 "j": "0", "k": "false", "m": "false"}, b"x"))
            assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert answer.ext_fields[ERROR_FIELD] == "DiskFullError"
        server.close()


def test_acl_signed_connections_work_and_unsigned_ones_are_refused(broker: mqlite.Broker) -> None:
    server = broker.serve("127.0.0.1:0", acl={"ak": "secret"})
    try:
        with mqlite.connect(server.address, access_key="ak", secret_key="secret") as remote, \
                mqlite.Producer(remote, group="pg") as producer:
            sent = producer.send(mqlite.Message("acl", b"signed"))
            assert broker.view_message(sent.offset_msg_id).body == b"signed"
        for keys in ({}, {"access_key": "ak", "secret_key": "wrong"}):
            with pytest.raises(MQClientError, match="NO_PERMISSION"):
                mqlite.connect(server.address, **keys)
    finally:
        server.close()


def test_closing_the_connection_shuts_its_consumers_down_with_their_offsets_committed(
        broker: mqlite.Broker, server: Any) -> None:
    broker.create_topic("C", 1)
    with mqlite.Producer(broker, group="pg") as producer:
        for i in range(10):
            producer.send(mqlite.Message("C", b"%d" % i))
    remote = mqlite.connect(server.address)
    collector = Collector()
    consumer = mqlite.PushConsumer(remote, "close-cg", subscription={"C": "*"}, listener=collector,
                                   consume_from_where=FIRST)
    consumer.start()
    collector.wait_for(10)
    remote.close()  # as Broker.close: the consumer stops and commits before the connection goes
    assert broker.query_offset("close-cg", mqlite.MessageQueue("C", broker.broker_name, 0)) == 10
    assert broker.consumer_ids("close-cg") == []


def test_clients_given_the_path_of_a_store_this_process_opened_share_its_broker(tmp_path: Path) -> None:
    path = str(tmp_path / "mine")
    with mqlite.open(path) as broker:
        with mqlite.Producer(path, group="pg") as producer:
            assert producer.broker is broker  # not StoreLockedError from this process's own lock
            producer.send(mqlite.Message("own", b"x"))
        assert not broker.closed  # the producer's release leaves the owner's broker open
        assert broker.max_offset(mqlite.MessageQueue("own", broker.broker_name, 0)) + sum(
            broker.max_offset(mqlite.MessageQueue("own", broker.broker_name, q)) for q in range(1, 4)) == 1


def test_traced_clients_store_their_trace_on_the_server(broker: mqlite.Broker, remote: mqlite.RemoteBroker) -> None:
    with mqlite.Producer(remote, group="tpg", trace=True) as producer:
        sent = producer.send(mqlite.Message("traced", b"x"))
    # The producer's shutdown sent what it recorded; the server stored it in its trace topic.
    views = broker.query_trace(sent.msg_id)
    assert [(v.msg_type, v.group_name) for v in views][:1] == [("Pub", "tpg")]


def test_the_connection_knows_the_servers_max_message_size(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path / "mq"), max_message_size=64 * 1024, **SMALL_STORE) as broker:
        server = broker.serve("127.0.0.1:0")
        with mqlite.connect(server.address) as remote, mqlite.Producer(remote, group="pg") as producer:
            assert remote.max_message_size == 64 * 1024
            with pytest.raises(MQClientError, match="max_message_size"):  # refused before it is sent
                producer.send(mqlite.Message("big", b"x" * (64 * 1024 + 1)))
        server.close()


def test_a_backlog_comes_prefetched_in_order_one_pull_at_a_time(broker: mqlite.Broker,
                                                                 remote: mqlite.RemoteBroker) -> None:
    broker.create_topic("B", 1)
    mq = mqlite.MessageQueue("B", broker.broker_name, 0)
    with mqlite.Producer(broker, group="pg") as producer:
        producer.send_batch([mqlite.Message("B", b"%d" % i) for i in range(500)], queue=mq)
    consumer = mqlite.LitePullConsumer(remote, "bg", pull_batch_size=32, auto_commit=False)
    with consumer, deadline(30):
        consumer.assign([mq])
        got: list[int] = []
        while len(got) < 500:
            batch = consumer.poll(5.0)
            assert 0 < len(batch) <= 32  # a prefetch of several pulls' worth is handed out a pull at a time
            got += [int(m.body) for m in batch]
        assert got == list(range(500)) and [m.queue_offset for m in batch] == list(range(500 - len(batch), 500))
        consumer.seek(mq, 100)  # what was fetched ahead is dropped
        assert [int(m.body) for m in consumer.poll(5.0)][:3] == [100, 101, 102]


def test_a_held_path_whose_server_refuses_the_connection_is_still_a_held_store(broker: mqlite.Broker) -> None:
    from mqlite.remoting.holder import connect_to_holder

    server = broker.serve("127.0.0.1:0", acl={"ak": "secret"})
    try:
        with pytest.raises(mqlite.StoreLockedError, match="access_key"):
            connect_to_holder(os.path.realpath(broker.path))
    finally:
        server.close()


def test_a_batch_body_takes_a_producers_encoded_properties_as_they_are() -> None:
    plain = {"PGROUP": "pg", "UNIQ_KEY": "id-1", "KEYS": "k\u00e9"}
    encoded = EncodedProperties(plain)
    encoded.encoded = encode_properties(plain).encode()
    messages = [(0, b"a", plain), (7, b"bc", {}), (1, bytearray(b"d"), plain)]
    body = encode_batch(messages)
    assert encode_batch([(0, b"a", encoded), (7, b"bc", {}), (1, bytearray(b"d"), encoded)]) == body
    assert [tuple(e) for e in decode_batch(body)] == [(0, b"a", plain), (7, b"bc", {}), (1, b"d", plain)]
    with pytest.raises(MQClientError, match="at most 32767 fit"):
        encode_batch([(0, b"a", {"big": "x" * 40000})])
