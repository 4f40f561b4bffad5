"""The test clock (`mqlite_clock`) drives transaction check-backs and orderly suspensions:
moving it runs what fell due at once, so their tests need no sleep."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import mqlite
from mqlite import ConsumeOrderlyStatus, LocalTransactionState, Message
from mqlite.testing import MockClock, wait_idle

TOPIC = "orders"


class _Undecided:
    """A local transaction that cannot tell at once; the check-back commits it (after `unknown` UNKNOWs)."""

    def __init__(self, unknown: int = 0) -> None:
        self.checked: list[str] = []
        self.unknown = unknown

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: mqlite.MessageExt) -> LocalTransactionState:
        self.checked.append(msg.msg_id)
        if len(self.checked) <= self.unknown:
            return LocalTransactionState.UNKNOW
        return LocalTransactionState.COMMIT_MESSAGE


def _bodies(broker: mqlite.Broker) -> list[bytes]:
    return [m.body for q in broker.fetch_subscribe_queues(TOPIC)
            for m in broker.store.get_messages(TOPIC, q.queue_id, 0, 100).messages]


def test_advance_past_transaction_timeout_runs_the_check_back(mqlite_broker: mqlite.Broker,
                                                              mqlite_clock: MockClock) -> None:
    mqlite_broker.create_topic(TOPIC, 1)
    listener = _Undecided()
    with mqlite.TransactionProducer(mqlite_broker, "tg", listener=listener) as producer:
        sent = producer.send_message_in_transaction(Message(TOPIC, b"order-1"))
        assert sent.local_transaction_state is LocalTransactionState.UNKNOW
        mqlite_clock.advance(5)  # younger than transaction_timeout (6 s): not checked yet
        assert listener.checked == [] and _bodies(mqlite_broker) == []
        mqlite_clock.advance(2)  # 7 s old: advance returns once the check-back committed it
        assert listener.checked == [sent.msg_id]
        assert _bodies(mqlite_broker) == [b"order-1"]


def test_the_next_check_follows_transaction_check_interval_on_the_clock(mqlite_broker: mqlite.Broker,
                                                                        mqlite_clock: MockClock) -> None:
    mqlite_broker.create_topic(TOPIC, 1)
    listener = _Undecided(unknown=1)
    with mqlite.TransactionProducer(mqlite_broker, "tg", listener=listener) as producer:
        sent = producer.send_message_in_transaction(Message(TOPIC, b"order-1"))
        mqlite_clock.advance(7)  # the first check: still UNKNOW
        assert listener.checked == [sent.msg_id] and _bodies(mqlite_broker) == []
        mqlite_clock.advance(29)  # transaction_check_interval (30 s) not over since that check
        assert len(listener.checked) == 1
        mqlite_clock.advance(1)
        assert listener.checked == [sent.msg_id] * 2
        assert _bodies(mqlite_broker) == [b"order-1"]


@pytest.mark.parametrize("how", ["consumer-setting", "context"])
def test_advance_resumes_an_orderly_queue_suspended_a_moment(mqlite_broker: mqlite.Broker, mqlite_clock: MockClock,
                                                             how: str) -> None:
    calls: list[bytes] = []
    suspended = threading.Event()

    def listener(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        calls.extend(m.body for m in msgs)
        if len(calls) > 1:
            return ConsumeOrderlyStatus.SUCCESS
        if how == "context":
            context.suspend_current_queue_time_millis = 20_000
        suspended.set()
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    # Suspensions far longer than the test may wait: only moving the clock resumes the queue.
    consumer = mqlite.PushConsumer(mqlite_broker, "cg", subscription={TOPIC: "*"}, listener=listener, orderly=True,
                                   suspend_current_queue_time=30.0)
    mqlite_broker.create_topic(TOPIC, 1)
    with consumer, mqlite.Producer(mqlite_broker, "pg") as producer:
        producer.send(Message(TOPIC, b"step-1"))
        assert suspended.wait(10)
        mqlite_clock.advance(20 if how == "context" else 30)
        wait_idle(mqlite_broker, consumer)  # TimeoutError (after 10 s) while the queue stays suspended
    assert calls == [b"step-1", b"step-1"]
