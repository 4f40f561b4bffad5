"""Delayed and transactional sends through the public clients, and a kill -9 in the middle of them.

Everything goes through `mqlite.open`, `Producer`, `TransactionProducer` and the
broker's methods. Time is a `ManualClock`: delay tests advance it and call
`broker.delay.wait_round()`; transaction tests advance it past
`transaction_timeout` and call `broker.transactions.check()` themselves (the
check service's own first round is ten minutes of real time away). No test
sleeps. The crash tests run `_sendchild.py`, kill it with SIGKILL and poll the
reopened store against deadlines on the real clock.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import mqlite
from _sendchild import DELAY_TOPIC, GROUP, TXN_TOPIC, SendChild, make_body
from _sendchild import SETTINGS as CHILD_SETTINGS
from mqlite.clock import ManualClock
from mqlite.txn import CheckReport
from mqlite.verify import verify_store
from support import SMALL_STORE, no_leftover_threads, wait_until  # noqa: F401 - no_leftover_threads: autouse

LocalState = mqlite.LocalTransactionState

LEVELS = "1s 5s 10s"
T0 = 1_700_000_000_000
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
THREE_DAYS_MS = 3 * 24 * 3600 * 1000
#: Long enough that the check service never runs a round of its own during a test.
TXN_TIMEOUT_S = 600.0
TXN_TIMEOUT_MS = int(TXN_TIMEOUT_S * 1000)


# -- helpers ----------------------------------------------------------------------------------------
def _open(root: Path, clock: ManualClock, **settings: Any) -> mqlite.Broker:
    config = {**SMALL_STORE, "message_delay_level": LEVELS, "transaction_timeout": TXN_TIMEOUT_S,
              "transaction_check_interval": 3600.0, **settings}
    return mqlite.open(str(root), clock=clock, **config)


def _readable(broker: mqlite.Broker, topic: str) -> list[mqlite.MessageExt]:
    """Every message a consumer of `topic` could read now, queue by queue."""
    store = broker.store
    store.wait_dispatched()  # type: ignore[attr-defined]
    out: list[mqlite.MessageExt] = []
    for queue_id in store.queue_ids(topic):
        out += store.get_messages(topic, queue_id, 0, 100_000).messages
    return out


def _ids(broker: mqlite.Broker, topic: str) -> list[str]:
    return [m.msg_id for m in _readable(broker, topic)]


def _advance(broker: mqlite.Broker, clock: ManualClock, ms: int) -> None:
    """Move the clock and let the delay service deliver everything due by then."""
    broker.store.wait_dispatched()  # type: ignore[attr-defined]  # the service reads dispatched units
    clock.advance(ms)
    assert broker.delay is not None and broker.delay.wait_round()


def _txn_clock() -> ManualClock:
    """A manual clock one minute ahead of the real one.

    The producer stamps `born_timestamp` with the real clock, not the broker's
    (see `test_transaction_ages_follow_the_brokers_clock`), and the check
    service measures a half's age from it. Starting the manual clock a minute
    ahead keeps every age in [0, 60 s] + what the test advances, which is below
    `transaction_timeout` until a test moves past it, with or without that bug.
    """
    return ManualClock(time.time_ns() // 1_000_000 + 60_000)


def _check(broker: mqlite.Broker) -> CheckReport:
    """One round of the broker's transaction check, on this thread."""
    assert broker.transactions is not None
    return broker.transactions.check()


@contextmanager
def _tx(broker: mqlite.Broker, listener: Any, group: str = "tg") -> Iterator[mqlite.TransactionProducer]:
    """A started `TransactionProducer` (typed as one: its `__enter__` says `Producer`)."""
    producer = mqlite.TransactionProducer(broker, group=group, listener=listener)
    with producer:
        yield producer


def _verify(root: Path) -> None:
    report = verify_store(str(root))
    assert report.ok, report.problems


@dataclass
class Listener:
    """A `TransactionListener`: `execute` answers by the `arg` of the send, `check` by msg_id."""

    check_answers: dict[str, LocalState] = field(default_factory=dict)
    default_check: LocalState = LocalState.UNKNOW
    checks: list[mqlite.MessageExt] = field(default_factory=list)
    executed: list[mqlite.Message] = field(default_factory=list)

    def execute_local_transaction(self, msg: mqlite.Message, arg: Any) -> LocalState:
        self.executed.append(msg)
        if isinstance(arg, BaseException):
            raise arg
        return arg if arg is not None else LocalState.UNKNOW

    def check_local_transaction(self, msg: mqlite.MessageExt) -> LocalState:
        self.checks.append(msg)
        return self.check_answers.get(msg.msg_id, self.default_check)

    @property
    def checked_ids(self) -> list[str]:
        return [m.msg_id for m in self.checks]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def broker(tmp_path: Path, clock: ManualClock) -> Iterator[mqlite.Broker]:
    with _open(tmp_path / "mq", clock) as b:
        yield b


@pytest.fixture
def producer(broker: mqlite.Broker) -> Iterator[mqlite.Producer]:
    with mqlite.Producer(broker, group="pg") as p:
        yield p


# -- 1. delay levels --------------------------------------------------------------------------------
def test_level_delays_are_hidden_until_due_and_keep_their_id(broker: mqlite.Broker, clock: ManualClock,
                                                              producer: mqlite.Producer) -> None:
    mq = producer.fetch_publish_message_queues("Orders")[2]
    sent: dict[int, mqlite.SendResult] = {}
    for level in (1, 2, 3, 7):  # 7 is above the highest level (3): capped to it
        msg = mqlite.Message("Orders", f"level {level}".encode(), tags="TagA", keys=f"k{level}",
                             properties={"region": "eu"}, delay_time_level=level)
        sent[level] = producer.send(msg, queue=mq)
        assert sent[level].send_status is mqlite.SendStatus.SEND_OK
    assert _readable(broker, "Orders") == []
    for level, result in sent.items():
        parked = broker.view_message(result.msg_id)  # before delivery: the schedule-topic copy
        assert (parked.topic, parked.queue_id) == (SCHEDULE_TOPIC, min(level, 3) - 1)
        assert parked.properties["REAL_TOPIC"] == "Orders" and parked.properties["REAL_QID"] == "2"
        assert parked.properties["DELAY"] == str(min(level, 3))

    def delivered() -> list[str]:
        return _ids(broker, "Orders")

    _advance(broker, clock, 999)
    assert delivered() == []
    _advance(broker, clock, 1)  # 1 s
    assert delivered() == [sent[1].msg_id]
    _advance(broker, clock, 3999)
    assert delivered() == [sent[1].msg_id]
    _advance(broker, clock, 1)  # 5 s
    assert delivered() == [sent[1].msg_id, sent[2].msg_id]
    _advance(broker, clock, 4999)
    assert len(delivered()) == 2
    _advance(broker, clock, 1)  # 10 s: level 3 and the capped level 7, in send order
    assert delivered() == [sent[1].msg_id, sent[2].msg_id, sent[3].msg_id, sent[7].msg_id]

    for level, result in sent.items():
        msg = broker.view_message(result.msg_id)  # now the user-topic copy, with the same id
        assert (msg.topic, msg.queue_id, msg.body) == ("Orders", 2, f"level {level}".encode())
        assert msg.msg_id == result.msg_id and msg.offset_msg_id != result.offset_msg_id
        assert msg.tags == "TagA" and msg.keys == [f"k{level}"] and msg.get_user_property("region") == "eu"
        # RocketMQ's messageTimeUp keeps REAL_TOPIC/REAL_QID and clears DELAY.
        assert msg.properties["REAL_TOPIC"] == "Orders" and msg.properties["REAL_QID"] == "2"
        assert "DELAY" not in msg.properties
        assert [m.msg_id for m in broker.query_message("Orders", f"k{level}")] == [result.msg_id]
    _advance(broker, clock, 60_000)
    assert len(delivered()) == 4  # nothing twice


def test_level_zero_is_not_delayed_and_negative_is_refused(broker: mqlite.Broker,
                                                           producer: mqlite.Producer) -> None:
    result = producer.send(mqlite.Message("Orders", b"now", delay_time_level=0))
    assert _ids(broker, "Orders") == [result.msg_id]
    with pytest.raises(mqlite.MQClientError, match="delay_time_level"):
        producer.send(mqlite.Message("Orders", b"bad", delay_time_level=-1))
    assert _ids(broker, "Orders") == [result.msg_id] and _readable(broker, SCHEDULE_TOPIC) == []


def test_delays_survive_close_and_reopen_and_none_is_delivered_twice(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    root = tmp_path / "mq"
    with _open(root, clock) as broker, mqlite.Producer(broker, group="pg") as producer:
        first = producer.send(mqlite.Message("Orders", b"1s", delay_time_level=1)).msg_id
        third = producer.send(mqlite.Message("Orders", b"10s", delay_time_level=3)).msg_id
        _advance(broker, clock, 1000)
        assert _ids(broker, "Orders") == [first]
    with _open(root, clock) as broker, mqlite.Producer(broker, group="pg") as producer:
        _advance(broker, clock, 0)
        assert _ids(broker, "Orders") == [first]  # the delivered one is not delivered again
        second = producer.send(mqlite.Message("Orders", b"5s later", delay_time_level=2)).msg_id
        _advance(broker, clock, 4000)  # 5 s after the first send: not yet due for the 10 s level
        assert _ids(broker, "Orders") == [first]
    with _open(root, clock) as broker:
        _advance(broker, clock, 5000)  # 10 s after the first send, 5 s after the second
        assert sorted(_ids(broker, "Orders")) == sorted([first, second, third])
    with _open(root, clock) as broker:
        _advance(broker, clock, 60_000)
        assert Counter(_ids(broker, "Orders")) == Counter({first: 1, second: 1, third: 1})
    _verify(root)


# -- 2. arbitrary delays (RocketMQ 5 timer messages) ------------------------------------------------------
def test_timer_messages_are_delivered_in_due_order(broker: mqlite.Broker, clock: ManualClock,
                                                   producer: mqlite.Producer) -> None:
    mq = producer.fetch_publish_message_queues("Timers")[1]
    now = clock.now_ms()
    c = mqlite.Message("Timers", b"c")
    c.delay_ms = 3000
    a = mqlite.Message("Timers", b"a")
    a.deliver_time_ms = now + 1000
    d = mqlite.Message("Timers", b"d", properties={"TIMER_DELAY_SEC": "4"})
    b = mqlite.Message("Timers", b"b")
    b.delay_ms = 2000
    ids = {m.body: producer.send(m, queue=mq).msg_id for m in (c, a, d, b)}  # sent out of order
    assert _readable(broker, "Timers") == []
    assert broker.view_message(ids[b"a"]).topic == TIMER_TOPIC
    _advance(broker, clock, 999)
    assert _readable(broker, "Timers") == []
    _advance(broker, clock, 1)
    assert [m.body for m in _readable(broker, "Timers")] == [b"a"]
    _advance(broker, clock, 10_000)  # the rest fall due together: delivered in due order
    got = _readable(broker, "Timers")
    assert [m.body for m in got] == [b"a", b"b", b"c", b"d"]
    assert all(m.queue_id == 1 and m.msg_id == ids[m.body] for m in got)
    for m in got:
        assert broker.view_message(m.msg_id).topic == "Timers"
        assert not {"TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_OUT_MS"} & set(m.properties)
    _advance(broker, clock, 10_000)
    assert len(_readable(broker, "Timers")) == 4


def test_a_deliver_time_in_the_past_is_stored_directly(broker: mqlite.Broker, clock: ManualClock,
                                                       producer: mqlite.Producer) -> None:
    for when in (clock.now_ms() - 1, clock.now_ms()):
        msg = mqlite.Message("Timers", b"late")
        msg.deliver_time_ms = when
        result = producer.send(msg)
        found = broker.view_message(result.msg_id)
        assert found.topic == "Timers" and found.queue_offset == result.queue_offset
    assert len(_readable(broker, "Timers")) == 2  # no wait_round: already readable
    assert _readable(broker, TIMER_TOPIC) == []


@pytest.mark.parametrize("ask", ["delay_ms", "deliver_time_ms", "TIMER_DELAY_SEC"])
def test_more_than_three_days_is_refused_and_nothing_is_stored(broker: mqlite.Broker, clock: ManualClock,
                                                               producer: mqlite.Producer, ask: str) -> None:
    def make(delay_ms: int) -> mqlite.Message:
        msg = mqlite.Message("Far", b"far")
        if ask == "delay_ms":
            msg.delay_ms = delay_ms
        elif ask == "deliver_time_ms":
            msg.deliver_time_ms = clock.now_ms() + delay_ms
        else:
            msg.properties["TIMER_DELAY_SEC"] = str(delay_ms // 1000)
        return msg

    step = 1000 if ask == "TIMER_DELAY_SEC" else 1
    with pytest.raises(mqlite.MQClientError, match="longest allowed delay"):
        producer.send(make(THREE_DAYS_MS + step))
    assert _readable(broker, "Far") == [] and _readable(broker, TIMER_TOPIC) == []
    accepted = producer.send(make(THREE_DAYS_MS))  # exactly three days is allowed
    assert [m.msg_id for m in _readable(broker, TIMER_TOPIC)] == [accepted.msg_id]


def test_a_store_with_timer_messages_verifies_clean(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    with _open(root, ManualClock(T0)) as broker, mqlite.Producer(broker, group="pg") as producer:
        msg = mqlite.Message("Timers", b"t", tags="TagA")
        msg.delay_ms = 5000
        producer.send(msg)
    _verify(root)


# -- 3. transactions --------------------------------------------------------------------------------
@pytest.fixture
def txn_clock() -> ManualClock:
    return _txn_clock()


@pytest.fixture
def txn_broker(tmp_path: Path, txn_clock: ManualClock) -> Iterator[mqlite.Broker]:
    with _open(tmp_path / "mq", txn_clock) as b:
        yield b


def _later(clock: ManualClock, ms: int = TXN_TIMEOUT_MS + 1) -> None:
    clock.advance(ms)


def test_commit_exposes_the_message_and_rollback_never_does(txn_broker: mqlite.Broker,
                                                            txn_clock: ManualClock) -> None:
    listener = Listener()
    with _tx(txn_broker, listener) as tx:
        msg = mqlite.Message("Orders", b"commit me", keys="c1", properties={"region": "eu"})
        committed = tx.send_message_in_transaction(msg, LocalState.COMMIT_MESSAGE)
        rolled = tx.send_message_in_transaction(mqlite.Message("Orders", b"roll me back", keys="r1"),
                                                LocalState.ROLLBACK_MESSAGE)
        assert committed.local_transaction_state is LocalState.COMMIT_MESSAGE
        assert rolled.local_transaction_state is LocalState.ROLLBACK_MESSAGE
        assert committed.transaction_id == committed.msg_id and msg.transaction_id == committed.msg_id
        assert listener.executed[0] is msg  # the local transaction sees the message it was given
        [real] = _readable(txn_broker, "Orders")
        assert (real.msg_id, real.body, real.get_user_property("region")) == (committed.msg_id, b"commit me", "eu")
        assert real.message_queue == committed.message_queue
        assert "TRAN_MSG" not in real.properties and "REAL_TOPIC" not in real.properties
        assert txn_broker.view_message(committed.msg_id).topic == "Orders"
        assert [m.msg_id for m in txn_broker.query_message("Orders", "c1")] == [committed.msg_id]
        assert txn_broker.query_message("Orders", "r1") == []
        for _ in range(3):  # later check rounds find both ended: nobody is asked
            _later(txn_clock)
            _check(txn_broker)
        assert listener.checks == []
        assert _ids(txn_broker, "Orders") == [committed.msg_id]


@pytest.mark.parametrize("answer", [LocalState.COMMIT_MESSAGE, LocalState.ROLLBACK_MESSAGE])
def test_unknow_is_checked_back_after_the_timeout_and_the_answer_applied(
        txn_broker: mqlite.Broker, txn_clock: ManualClock, answer: LocalState) -> None:
    listener = Listener(default_check=answer)
    with _tx(txn_broker, listener) as tx:
        result = tx.send_message_in_transaction(mqlite.Message("Orders", b"later", tags="TagT"), LocalState.UNKNOW)
        assert result.local_transaction_state is LocalState.UNKNOW
        assert _check(txn_broker).checked == 0  # younger than transaction_timeout
        assert listener.checks == [] and _readable(txn_broker, "Orders") == []
        _later(txn_clock)
        assert _check(txn_broker).checked == 1
        [asked] = listener.checks
        assert (asked.msg_id, asked.transaction_id, asked.body) == (result.msg_id, result.msg_id, b"later")
        assert (asked.topic, asked.queue_id) == ("Orders", result.message_queue.queue_id)  # its real queue
        assert asked.tags == "TagT" and asked.properties["PGROUP"] == "tg"
        _later(txn_clock)
        assert _check(txn_broker).checked == 0  # resolved: never asked again
        expected = [result.msg_id] if answer is LocalState.COMMIT_MESSAGE else []
        assert _ids(txn_broker, "Orders") == expected


def test_an_exception_in_the_local_transaction_counts_as_unknow(txn_broker: mqlite.Broker,
                                                                txn_clock: ManualClock) -> None:
    listener = Listener(default_check=LocalState.COMMIT_MESSAGE)
    with _tx(txn_broker, listener) as tx:
        result = tx.send_message_in_transaction(mqlite.Message("Orders", b"x"), RuntimeError("db down"))
        assert result.local_transaction_state is LocalState.UNKNOW
        assert _readable(txn_broker, "Orders") == []
        _later(txn_clock)
        _check(txn_broker)
        assert listener.checked_ids == [result.msg_id]
        assert _ids(txn_broker, "Orders") == [result.msg_id]


def test_a_half_waits_for_a_live_producer_of_its_group(txn_broker: mqlite.Broker,
                                                       txn_clock: ManualClock) -> None:
    gone = Listener(default_check=LocalState.COMMIT_MESSAGE)
    with _tx(txn_broker, gone) as tx:
        result = tx.send_message_in_transaction(mqlite.Message("Orders", b"orphan"), LocalState.UNKNOW)
    other = Listener(default_check=LocalState.COMMIT_MESSAGE)
    with _tx(txn_broker, other, "other-tg"):
        for _ in range(4):  # a live producer of another group does not help: the half waits, uncounted
            _later(txn_clock)
            report = _check(txn_broker)
            assert report.checked == 0 and report.waiting == 1 and report.discarded == 0
    assert gone.checks == [] and other.checks == [] and _readable(txn_broker, "Orders") == []

    back = Listener(default_check=LocalState.COMMIT_MESSAGE)
    with _tx(txn_broker, back):
        _later(txn_clock)
        assert _check(txn_broker).checked == 1
        [asked] = back.checks
        assert asked.msg_id == result.msg_id
        assert asked.properties["TRANSACTION_CHECK_TIMES"] == "1"  # the waiting rounds were not counted
        assert _ids(txn_broker, "Orders") == [result.msg_id]


def test_at_most_transaction_check_max_check_backs_then_parked(tmp_path: Path) -> None:
    clock = _txn_clock()
    with _open(tmp_path / "mq", clock, transaction_check_max=3) as broker:
        listener = Listener(default_check=LocalState.UNKNOW)
        with _tx(broker, listener) as tx:
            result = tx.send_message_in_transaction(mqlite.Message("Orders", b"undecided"), LocalState.UNKNOW)
            reports = []
            for _ in range(6):
                _later(clock)
                reports.append(_check(broker))
            assert listener.checked_ids == [result.msg_id] * 3
            assert [m.properties["TRANSACTION_CHECK_TIMES"] for m in listener.checks] == ["1", "2", "3"]
            assert sum(r.discarded for r in reports) == 1
            [parked] = _readable(broker, CHECK_MAX_TOPIC)
            assert (parked.msg_id, parked.body, parked.properties["REAL_TOPIC"]) == (result.msg_id, b"undecided",
                                                                                     "Orders")
            listener.default_check = LocalState.COMMIT_MESSAGE  # too late: it is never asked again
            _later(clock)
            _check(broker)
            assert len(listener.checks) == 3
            assert _readable(broker, "Orders") == []


def test_check_immunity_time_is_honoured(txn_broker: mqlite.Broker, txn_clock: ManualClock) -> None:
    listener = Listener(default_check=LocalState.COMMIT_MESSAGE)
    immunity_s = 2 * TXN_TIMEOUT_S
    with _tx(txn_broker, listener) as tx:
        msg = mqlite.Message("Orders", b"immune")
        msg.put_user_property("CHECK_IMMUNITY_TIME_IN_SECONDS", str(int(immunity_s)))
        result = tx.send_message_in_transaction(msg, LocalState.UNKNOW)
        _later(txn_clock, TXN_TIMEOUT_MS + 100_000)  # past transaction_timeout, inside the immunity
        report = _check(txn_broker)
        assert report.checked == 0 and report.immunity == 1
        assert listener.checks == [] and _readable(txn_broker, "Orders") == []
        _later(txn_clock, int(immunity_s * 1000) - TXN_TIMEOUT_MS - 100_000 + 1)  # past the immunity
        assert _check(txn_broker).checked == 1
        assert listener.checked_ids == [result.msg_id]
        assert _ids(txn_broker, "Orders") == [result.msg_id]


def test_half_messages_survive_close_and_reopen(tmp_path: Path) -> None:
    clock = _txn_clock()
    root = tmp_path / "mq"
    with _open(root, clock) as broker:
        with _tx(broker, Listener()) as tx:
            done = tx.send_message_in_transaction(mqlite.Message("Orders", b"done"), LocalState.COMMIT_MESSAGE)
            yes = tx.send_message_in_transaction(mqlite.Message("Orders", b"yes"), LocalState.UNKNOW)
            no = tx.send_message_in_transaction(mqlite.Message("Orders", b"no"), LocalState.UNKNOW)
    with _open(root, clock) as broker:
        assert _ids(broker, "Orders") == [done.msg_id]
        listener = Listener(check_answers={yes.msg_id: LocalState.COMMIT_MESSAGE,
                                           no.msg_id: LocalState.ROLLBACK_MESSAGE})
        with _tx(broker, listener):
            _later(clock)
            assert _check(broker).checked == 2
            assert sorted(listener.checked_ids) == sorted([yes.msg_id, no.msg_id])
    with _open(root, clock) as broker:
        listener = Listener(default_check=LocalState.COMMIT_MESSAGE)
        with _tx(broker, listener):
            _later(clock)
            _check(broker)
        assert listener.checks == []  # both were resolved before the close
        assert sorted(_ids(broker, "Orders")) == sorted([done.msg_id, yes.msg_id])
    _verify(root)


def test_a_delay_level_on_a_transactional_message_is_ignored(txn_broker: mqlite.Broker,
                                                             txn_clock: ManualClock) -> None:
    listener = Listener(default_check=LocalState.COMMIT_MESSAGE)
    with _tx(txn_broker, listener) as tx:
        now = tx.send_message_in_transaction(mqlite.Message("Orders", b"now", delay_time_level=3),
                                             LocalState.COMMIT_MESSAGE)
        assert _ids(txn_broker, "Orders") == [now.msg_id]  # at once: no clock moved, no delay round
        checked = tx.send_message_in_transaction(mqlite.Message("Orders", b"checked", delay_time_level=2),
                                                 LocalState.UNKNOW)
        _later(txn_clock)
        _check(txn_broker)
        assert "DELAY" not in listener.checks[0].properties
        assert sorted(_ids(txn_broker, "Orders")) == sorted([now.msg_id, checked.msg_id])
        assert all("DELAY" not in m.properties for m in _readable(txn_broker, "Orders"))
        assert _readable(txn_broker, SCHEDULE_TOPIC) == []


def test_a_deliver_time_on_a_transactional_message_applies_after_commit(txn_broker: mqlite.Broker,
                                                                        txn_clock: ManualClock) -> None:
    # RocketMQ 5's HookUtils.handleScheduleMessage runs on TRANSACTION_COMMIT_TYPE records too, and
    # rewrite_for_delay's docstring says the commit record is rewritten.
    with _tx(txn_broker, Listener()) as tx:
        msg = mqlite.Message("Orders", b"at noon")
        msg.deliver_time_ms = txn_clock.now_ms() + 5000
        result = tx.send_message_in_transaction(msg, LocalState.COMMIT_MESSAGE)
        assert _readable(txn_broker, "Orders") == []
        _advance(txn_broker, txn_clock, 5000)
        assert _ids(txn_broker, "Orders") == [result.msg_id]


def test_transaction_ages_follow_the_brokers_clock(tmp_path: Path) -> None:
    clock = ManualClock(T0)  # a clock in the past, as a test or a replay would use
    with _open(tmp_path / "past", clock) as broker:
        listener = Listener(default_check=LocalState.COMMIT_MESSAGE)
        with _tx(broker, listener) as tx:
            result = tx.send_message_in_transaction(mqlite.Message("Orders", b"young"), LocalState.UNKNOW)
            born = broker.view_message(result.msg_id).born_timestamp
            clock.advance(1000)  # far below transaction_timeout
            _check(broker)
            assert listener.checks == [], "a half one second old was checked back"
            assert born == T0


# -- 4. topics at the client and at the broker --------------------------------------------------------
def test_topic_length_rules(broker: mqlite.Broker, producer: mqlite.Producer) -> None:
    ok = "T" * 127
    assert producer.send(mqlite.Message(ok, b"x")).message_queue.topic == ok
    with pytest.raises(mqlite.MQClientError, match="127"):  # the client's Validators
        producer.send(mqlite.Message("T" * 128, b"x"))
    assert "T" * 128 not in broker.topic_list()
    # The broker itself takes up to 255 bytes (RocketMQ's V2 record with a 2-byte topic length) ...
    long_topic = "L" * 200
    put = broker.put_message(long_topic, 0, b"long", {"UNIQ_KEY": "A" * 32})
    broker.store.wait_dispatched()  # type: ignore[attr-defined]
    got = broker.query_message_by_offset(long_topic, 0, put.queue_offset)
    assert (got.topic, got.body) == (long_topic, b"long")
    # ... and refuses longer ones before writing anything.
    with pytest.raises(mqlite.MQClientError, match="255"):
        broker.put_message("L" * 256, 0, b"too long")
    assert "L" * 256 not in broker.topic_list()


@pytest.mark.parametrize("topic", [SCHEDULE_TOPIC, HALF_TOPIC, "RMQ_SYS_TRANS_OP_HALF_TOPIC", CHECK_MAX_TOPIC,
                                   "TBW102", "SELF_TEST_TOPIC"])
def test_system_topics_are_refused_for_user_sends(broker: mqlite.Broker, producer: mqlite.Producer,
                                                  topic: str) -> None:
    # Create the delay and transaction system topics first: existing ones are refused too.
    producer.send(mqlite.Message("Orders", b"d", delay_time_level=1))
    with _tx(broker, Listener()) as tx:
        tx.send_message_in_transaction(mqlite.Message("Orders", b"t"), LocalState.COMMIT_MESSAGE)
    before = {t: len(_readable(broker, t)) for t in broker.topic_list()}
    with pytest.raises(mqlite.MQClientError, match="system topic"):
        producer.send(mqlite.Message(topic, b"x"))
    with pytest.raises(mqlite.MQClientError, match="system topic"):
        producer.send_batch([mqlite.Message(topic, b"x")])
    with _tx(broker, Listener()) as tx, \
            pytest.raises(mqlite.MQClientError, match="system topic"):
        tx.send_message_in_transaction(mqlite.Message(topic, b"x"), LocalState.COMMIT_MESSAGE)
    assert {t: len(_readable(broker, t)) for t in broker.topic_list()} == before


def test_the_timer_topic_is_refused_for_user_sends_once_it_exists(broker: mqlite.Broker,
                                                                  producer: mqlite.Producer) -> None:
    timer = mqlite.Message("Orders", b"t")
    timer.delay_ms = 5000
    producer.send(timer)  # creates rmq_sys_wheel_timer
    with pytest.raises(mqlite.MQClientError, match="system topic"):
        producer.send(mqlite.Message(TIMER_TOPIC, b"x"))
    assert len(_readable(broker, TIMER_TOPIC)) == 1


# -- 5. kill -9 while sending delayed and transactional messages ------------------------------------
ACK_DEADLINE = 60.0  # seconds for the child to print (a loaded CI machine)
RESOLVE_DEADLINE = 30.0  # seconds for the reopened broker to deliver and resolve everything
COMMITTED = ("commit", "commit-on-check", "deliver")
#: Before this many seconds of a broker's life no check-back and no delivery can happen: the
#: check service's first round comes transaction_timeout after the open and finds every half
#: younger than that, and a level-1 message falls due 1 s after it was sent.
QUIET_SECONDS = CHILD_SETTINGS["transaction_timeout"]


@dataclass(frozen=True)
class Ack:
    msg_id: str
    kind: str  # delay | txn
    expect: str  # deliver | commit | rollback | commit-on-check | rollback-on-check


@dataclass
class ChildRun:
    acks: list[Ack] = field(default_factory=list)
    opened: float = 0.0  # the child's time.monotonic() once its broker was open
    killed: float = 0.0  # our time.monotonic() just after the kill: an upper bound
    killed_ms: int = 0  # epoch ms just after the kill
    settled: tuple[bool, float] | None = None  # (all acted, seconds since open)

    @property
    def lived(self) -> float:
        """At least how long the child's broker ran."""
        return self.killed - self.opened


def _run_and_kill(root: Path, seed: int, *, mix: str = "all", acks_wanted: int = 0, settle: int = 0) -> ChildRun:
    """Run `_sendchild.py`; SIGKILL it after `acks_wanted` acks, or once it settled when `settle` > 0."""
    run = ChildRun()

    def take(line: str) -> None:
        word, *rest = line.split()
        if word == "ACK":
            run.acks.append(Ack(*rest))
        elif word == "OPENED":
            run.opened = float(rest[0])
        elif word == "SETTLED":
            run.settled = (rest[0] == "1", float(rest[1]))
        else:
            assert word == "CHECK", f"unexpected line from the child: {line!r}"

    with SendChild(str(root), str(seed), "60", str(settle), mix) as child:
        deadline = time.monotonic() + ACK_DEADLINE
        while (run.settled is None) if settle else (len(run.acks) < acks_wanted):
            line = child.readline(deadline)
            assert line is not None, f"the child exited early after {len(run.acks)} acks:\n{child.stderr()}"
            assert line != "DONE", "the child finished before it was killed; raise its time limit"
            take(line)
        child.kill()
        run.killed, run.killed_ms = time.monotonic(), time.time_ns() // 1_000_000
        # Lines already in the pipe were printed before the kill: those sends were acknowledged too.
        while (line := child.readline(time.monotonic() + ACK_DEADLINE)) is not None:
            take(line)
        assert child.proc.returncode == -9, f"child ended with {child.proc.returncode}:\n{child.stderr()}"
    assert run.opened > 0
    return run


class CrashListener:
    """The restarted application: answers check-backs by the `expect` the child put on each message."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: mqlite.Message, arg: Any) -> LocalState:
        raise AssertionError("the parent sends nothing")

    def check_local_transaction(self, msg: mqlite.MessageExt) -> LocalState:
        with self._lock:
            self.asked[msg.msg_id] += 1
        # A "commit" asked about here was in flight at the kill: its local transaction did commit.
        return LocalState.COMMIT_MESSAGE if msg.properties["expect"] in COMMITTED else LocalState.ROLLBACK_MESSAGE


def _real_messages(broker: mqlite.Broker) -> list[mqlite.MessageExt]:
    return _readable(broker, DELAY_TOPIC) + _readable(broker, TXN_TOPIC)


def _recover(root: Path, run: ChildRun) -> tuple[list[mqlite.MessageExt], CrashListener]:
    """Reopen with a live producer of the group; wait until every delay and transaction is settled."""
    listener = CrashListener()
    timeout_ms = int(CHILD_SETTINGS["transaction_timeout"] * 1000)
    with mqlite.open(str(root), **CHILD_SETTINGS) as broker, \
            mqlite.TransactionProducer(broker, group=GROUP, listener=listener):
        assert broker.store.recovery.abnormal  # type: ignore[attr-defined]
        delay = broker.delay
        assert delay is not None
        schedule = mqlite.MessageQueue(SCHEDULE_TOPIC, broker.broker_name, 0)

        def unresolved() -> list[Ack]:
            readable = {m.msg_id for m in _real_messages(broker)}
            return [a for a in run.acks if (a.expect in COMMITTED and a.msg_id not in readable)
                    or (a.expect == "rollback-on-check" and not listener.asked[a.msg_id])]

        def settled() -> bool:
            # Every half is older than transaction_timeout, a whole check round found nothing
            # to do, and level 1 has delivered up to the end of its schedule queue.
            if time.time_ns() // 1_000_000 <= run.killed_ms + timeout_ms or unresolved():
                return False
            report = _check(broker)
            if report.checked or report.waiting or report.discarded or report.immunity:
                return False
            assert delay.wait_round()
            return delay.offset_table().get(1, 0) >= broker.max_offset(schedule)

        # Settling waits for real time to pass (the child's transaction timeout): look until it shows.
        wait_until(settled, lambda: f"every delay and transaction to settle; unresolved: {unresolved()[:5]}",
                   RESOLVE_DEADLINE)
        messages = _real_messages(broker)
    _verify(root)
    return messages, listener


def _problems(run: ChildRun, messages: list[mqlite.MessageExt], listener: CrashListener, *,
              exactly_once: bool) -> list[str]:
    acks = {a.msg_id: a for a in run.acks}
    counts = Counter(m.msg_id for m in messages)
    problems = [] if len(acks) == len(run.acks) else ["the child acknowledged one msg_id twice"]
    for ack in run.acks:
        found = counts[ack.msg_id]
        if ack.expect not in COMMITTED and found:
            problems.append(f"{ack}: readable {found} times, expected never")
        elif ack.expect in COMMITTED and found != 1 and (exactly_once or not found):
            problems.append(f"{ack}: readable {found} times, expected once")
        if ack.expect in ("commit", "rollback") and listener.asked[ack.msg_id]:
            problems.append(f"{ack}: ended before the kill, yet checked back {listener.asked[ack.msg_id]} times")
    for msg in messages:
        kind, expect, seq = msg.body.decode(errors="replace").split("|")[:3]
        if msg.body != make_body(kind, expect, int(seq)) or msg.properties.get("expect") != expect:
            problems.append(f"{msg.msg_id}: damaged {msg!r}")
        if expect not in COMMITTED:
            problems.append(f"{msg.msg_id}: a {expect} message is readable")
        # A send in flight at the kill was not acknowledged: it may be missing, never doubled (except a
        # commit killed between its real message and its op: RocketMQ commits that one again too).
        if exactly_once and msg.msg_id not in acks and counts[msg.msg_id] > 1 and expect != "commit":
            problems.append(f"{msg.msg_id}: an unacknowledged {expect} is readable {counts[msg.msg_id]} times")
    return sorted(set(problems))


def _seed() -> int:
    text = os.environ.get("MQLITE_CRASH_SEED")
    return int(text) if text else random.SystemRandom().randrange(2**32)


def test_kill9_while_sending_delayed_and_transactional_messages(tmp_path: Path) -> None:
    seed = _seed()
    print(f"MQLITE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "mq"
    run = _run_and_kill(root, seed, acks_wanted=rng.randint(100, 300))
    kinds = Counter(a.expect for a in run.acks)
    assert all(kinds[e] for e in ("deliver", "commit", "rollback", "commit-on-check", "rollback-on-check")), kinds
    messages, listener = _recover(root, run)
    # Killed before any delivery or check-back could happen, nothing may be doubled. A machine too
    # slow for that is in the case of the xfail tests below: then only "nothing lost" is checked.
    quiet = run.lived < QUIET_SECONDS
    problems = _problems(run, messages, listener, exactly_once=quiet)
    assert not problems, f"{len(problems)} problems, e.g. {problems[:8]}"
    if not quiet:
        pytest.xfail(f"the child ran {run.lived:.2f} s, long enough to deliver or check before the kill: "
                     "exactly-once not checked (see test_kill9_after_*)")


@dataclass
class SettledCrash:
    """A child killed after its services delivered and checked, and the store recovered."""

    run: ChildRun
    messages: list[mqlite.MessageExt]
    listener: CrashListener


def _kill_after_settling(root: Path, mix: str) -> SettledCrash:
    seed = _seed()
    print(f"MQLITE_CRASH_SEED={seed}")
    run = _run_and_kill(root, seed, mix=mix, settle=40)
    assert run.settled is not None and run.settled[0], f"the child's services did not act in time: {run.settled}"
    if run.settled[1] > 4.0:
        # The first persist of the consumer offsets comes 5 s after the open, the second of the
        # delay offsets 10 s after the first delivery: past those, the windows below may close.
        pytest.skip(f"the child took {run.settled[1]:.1f} s to settle; too slow a machine for this case")
    return SettledCrash(run, *_recover(root, run))


@pytest.fixture(scope="module", params=["delay", "txn"])
def settled_crash(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SettledCrash:
    """One run per kind, shared by the two tests below (each costs a child and a recovery)."""
    mix: str = request.param
    return _kill_after_settling(tmp_path_factory.mktemp(f"settled-{mix}") / "mq", mix)


def test_kill9_after_delays_and_checks_in_the_child_loses_nothing(settled_crash: SettledCrash) -> None:
    crash = settled_crash
    problems = _problems(crash.run, crash.messages, crash.listener, exactly_once=False)
    assert not problems, f"{len(problems)} problems, e.g. {problems[:8]}"


def test_kill9_after_delays_and_checks_in_the_child_doubles_nothing(settled_crash: SettledCrash) -> None:
    crash = settled_crash
    problems = _problems(crash.run, crash.messages, crash.listener, exactly_once=True)
    assert not problems, f"{len(problems)} problems, e.g. {problems[:8]}"
