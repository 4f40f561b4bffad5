"""The broker port (`mqlite.port.BrokerPort`): the local `Broker` implements it, and clients reach
a broker only through it (tests/test_layers.py checks the second part in the source).

mypy checks the full signature match in `mqlite/broker.py` (`_broker_implements_the_port`);
these tests check it at run time and pin what the port methods do on a local broker.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import mqlite
from mqlite.broker import acquire, check_broker_target, set_remote_connector
from mqlite.groups import ConsumerData
from mqlite.port import BrokerPort
from mqlite.testing import MockClock, temporary_broker, wait_idle

from _crashchild import Child
from support import broker_fixture, deadline

broker = broker_fixture()


def test_a_broker_is_a_broker_port(broker: mqlite.Broker, tmp_path: Path) -> None:
    assert isinstance(broker, BrokerPort)
    with mqlite.open(tmp_path / "mq", read_only=True) as reader:
        assert isinstance(reader, BrokerPort)
    assert not isinstance(object(), BrokerPort)


def test_the_port_properties_of_a_local_broker(broker: mqlite.Broker) -> None:
    assert broker.clock is broker.store.clock
    assert broker.max_message_size == broker.config.max_message_size
    assert broker.client_state_dir == broker.path
    before = broker.routes_version
    broker.create_topic("orders", 2)
    assert broker.routes_version != before


class Member:
    """A group member that records the rebalance requests the broker sends it."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.asked = 0

    def request_rebalance(self) -> None:
        self.asked += 1

    def subscribed_topics(self) -> set[str]:
        return {"orders"}

    def assigned_queues(self) -> set[mqlite.MessageQueue]:
        return set()

    def reset_offsets(self, topic: str, offsets: dict[int, int]) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def consumer_data(self) -> ConsumerData:
        return ConsumerData("CLUSTERING", "CONSUME_ACTIVELY", "CONSUME_FROM_LAST_OFFSET", {"orders": ("TAG", "*")})


def test_unlock_asks_the_other_members_to_rebalance(broker: mqlite.Broker) -> None:
    mq = mqlite.MessageQueue("orders", broker.broker_name, 0)
    first, second = Member("b"), Member("a")
    broker.register_consumer("g", first)
    broker.register_consumer("g", second)
    assert broker.consumer_ids("g") == ["a", "b"]
    assert broker.lock_queues("g", [mq], "b") == {mq}
    assert broker.lock_queues("g", [mq], "a") == set()  # b holds it
    first.asked = second.asked = 0
    broker.unlock_queues("g", [mq], "b")
    assert (first.asked, second.asked) == (0, 1)  # the next owner, not the one that let go
    assert broker.lock_queues("g", [mq], "a") == {mq}
    broker.unregister_consumer("g", first)
    broker.unregister_consumer("g", second)
    assert broker.consumer_ids("g") == []


def test_watch_arrivals_wakes_on_a_put_and_unwatch_stops_it(broker: mqlite.Broker) -> None:
    woken = threading.Event()
    broker.watch_arrivals(woken, [("orders", 0)])
    broker.put_message("orders", 1, b"other queue")
    assert not woken.is_set()
    broker.put_message("orders", 0, b"x")
    assert woken.is_set()
    woken.clear()
    broker.unwatch_arrivals(woken)
    broker.put_message("orders", 0, b"y")
    assert not woken.is_set()


def test_wait_dispatched_makes_a_put_indexed(broker: mqlite.Broker) -> None:
    with deadline(10):
        for i in range(200):
            broker.put_message("orders", 0, b"x", {"KEYS": f"k{i}"})
        assert broker.wait_dispatched(5.0)
        # The store's own look-up does not wait for the reput service: the index is complete already.
        assert [m.queue_offset for m in broker.store.query_message("orders", "k199")] == [199]
    broker.close()
    with pytest.raises(mqlite.IllegalStateError, match="closed"):
        broker.wait_dispatched(1.0)


# -- acquire: what a client given a broker or a path gets ---------------------------------------------------
def test_acquire_returns_a_port_unchanged_and_shares_a_path(broker: mqlite.Broker, tmp_path: Path) -> None:
    assert acquire(broker) is broker
    other = tmp_path / "other"
    first, second = acquire(str(other)), acquire(other)
    try:
        assert first is second and isinstance(first, mqlite.Broker)
    finally:
        first.release()
        second.release()
    assert first.closed


def test_acquire_refuses_a_closed_broker_and_other_objects(tmp_path: Path) -> None:
    closed = mqlite.open(tmp_path / "mq")
    closed.close()
    with pytest.raises(mqlite.IllegalStateError, match="closed"):
        acquire(closed)
    with pytest.raises(mqlite.MQClientError, match="broker must be"):
        check_broker_target(42)
    with pytest.raises(mqlite.MQClientError, match="broker must be"):
        mqlite.Producer(42, "pg")  # type: ignore[arg-type]


def test_a_locked_path_goes_to_the_remote_connector(broker: mqlite.Broker, tmp_path: Path) -> None:
    path = str(tmp_path / "held")
    asked: list[str] = []

    def connector(store: str) -> BrokerPort:
        asked.append(store)
        return broker  # stands in for the port of the process that holds the store

    # Another process holds the store (this process's own broker would be shared, not refused).
    with Child(path, "hold") as holder:
        line = holder.readline(time.monotonic() + 30)
        assert line is not None and line.startswith("READY"), holder.stderr()
        previous = set_remote_connector(None)
        try:
            with pytest.raises(mqlite.StoreLockedError):  # no connector installed: as before
                mqlite.Producer(path, "pg").start()
            set_remote_connector(connector)
            with mqlite.Producer(path, "pg") as producer:
                assert producer.broker is broker
                producer.send(mqlite.Message("orders", b"via the holder"))
        finally:
            set_remote_connector(previous)
    assert asked == [os.path.realpath(path)]
    assert not broker.closed  # release() of a broker the client did not open leaves it open
    assert sum(broker.max_offset(mq) for mq in broker.fetch_subscribe_queues("orders")) == 1


def test_set_remote_connector_refuses_a_non_callable() -> None:
    with pytest.raises(mqlite.MQClientError, match="callable"):
        set_remote_connector("tcp://x")  # type: ignore[arg-type]


# -- producers as the broker sees them (TransactionChecker) --------------------------------------------------
class Undecided:
    """A transaction listener that leaves every transaction UNKNOW and commits on check-back."""

    def __init__(self) -> None:
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: mqlite.Message, arg: object) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: mqlite.MessageExt) -> mqlite.LocalTransactionState:
        self.checked.append(msg.msg_id)
        return mqlite.LocalTransactionState.COMMIT_MESSAGE


def test_a_check_back_passes_over_a_plain_producer_of_the_group() -> None:
    clock = MockClock()
    listener = Undecided()
    with temporary_broker(clock=clock) as broker, deadline(30):
        # The plain producer registers first: it answers False, so the broker asks the next one.
        with mqlite.Producer(broker, "tg") as plain, \
                mqlite.TransactionProducer(broker, "tg", listener=listener) as transactional:
            sent = transactional.send_message_in_transaction(mqlite.Message("orders", b"decided later"))
            clock.advance(7)  # past transaction_timeout (6 s): the check-back runs
            assert listener.checked == [sent.msg_id]
            wait_idle(broker)
            [mq] = [q for q in broker.fetch_subscribe_queues("orders") if broker.max_offset(q)]
            assert broker.query_message_by_offset("orders", mq.queue_id, 0).body == b"decided later"


# -- the lite pull consumer's take / hand-out steps (what mqlite.aio builds on) ---------------------------------
def test_take_moves_no_offset_until_hand_out_and_give_back_returns_the_rest(broker: mqlite.Broker) -> None:
    mq = mqlite.MessageQueue("orders", broker.broker_name, 0)
    for body in (b"a", b"b", b"c"):
        broker.put_message("orders", 0, body)
    consumer = mqlite.LitePullConsumer(broker, "lg", auto_commit=False)
    with pytest.raises(mqlite.IllegalStateError):
        consumer.check_running()
    with consumer, deadline(20):
        consumer.check_running()
        consumer.assign([mq])
        consumer.seek(mq, 0)
        request = consumer.take(10.0)
        assert request is not None and [m.body for m in request.msgs] == [b"a", b"b", b"c"]
        consumer.commit_sync()
        assert consumer.committed(mq) == 0  # taken, not handed out: the consume offset did not move
        assert consumer.hand_out(request, request.msgs[:1])
        consumer.give_back(request, request.msgs[1:])
        consumer.commit_sync()
        assert consumer.committed(mq) == 1
        assert [m.body for m in consumer.poll(10.0)] == [b"b", b"c"]  # given back: polled first
