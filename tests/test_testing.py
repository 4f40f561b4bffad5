"""`mqlite.testing`: the pytest plugin in a fresh run, `MockClock.advance`, `wait_idle` and `PushConsumer.join`.

No test here sleeps: time moves with the mock clock, and waiting is on conditions
the broker and consumers signal. `JOIN_BACKSTOP` is raised far above every
timeout used, so a join that relied on its periodic re-check instead of being
woken would fail instead of passing slowly.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mqlite
import mqlite.testing
from mqlite.clock import ManualClock
from mqlite.consumer import push
from mqlite.errors import IllegalStateError
from mqlite.rebalance import AllocateMessageQueueByConfig
from mqlite.sendback import retry_topic
from mqlite.testing import MockClock, no_leaked_threads, temporary_broker, wait_idle

pytest_plugins = ["pytester"]

FIRST = mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture(autouse=True)
def _no_join_backstop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(push, "JOIN_BACKSTOP", 3600.0)


class Recorder:
    """A push listener that records bodies and fails each message its first `failures` attempts."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.attempts: list[tuple[bytes, int]] = []  # (body, reconsume_times) per call
        self.done: list[bytes] = []

    def __call__(self, msgs: list[mqlite.MessageExt], context: Any) -> None:
        with self.lock:
            for msg in msgs:
                self.attempts.append((msg.body, msg.reconsume_times))
                if msg.reconsume_times < self.failures:
                    raise RuntimeError(f"payment service down (attempt {msg.reconsume_times + 1})")
                self.done.append(msg.body)


def _push(broker: mqlite.Broker, group: str, topic: str, listener: Any, **options: Any) -> mqlite.PushConsumer:
    return mqlite.PushConsumer(broker, group, subscription={topic: "*"}, listener=listener,
                               consume_from_where=FIRST, **options)


def _send(broker: mqlite.Broker, topic: str, bodies: list[bytes], **fields: Any) -> None:
    with mqlite.Producer(broker, "pg") as producer:
        for body in bodies:
            producer.send(mqlite.Message(topic, body, **fields))


# -- the plugin, in a fresh pytest process --------------------------------------------------------------
def test_entry_point_gives_a_fresh_pytest_run_the_fixtures_and_the_documented_example(
        pytester: pytest.Pytester) -> None:
    example = mqlite.testing.__doc__.split("::\n", 1)[1].split("\nOutside pytest", 1)[0]
    pytester.makepyfile(test_example=textwrap.dedent(example), test_fixtures="""
        import threading
        import pytest
        import mqlite

        @pytest.mark.mqlite(default_topic_queue_nums=2)
        def test_marker_settings_and_clock(mqlite_broker, mqlite_clock):
            assert mqlite_broker.config.default_topic_queue_nums == 2
            assert mqlite_broker.store.clock is mqlite_clock
            before = mqlite_clock.now_ms()
            mqlite_clock.advance(60)
            assert mqlite_clock.now_ms() == before + 60_000

        def test_a_consumer_left_running_is_closed_with_the_broker(mqlite_broker):
            consumer = mqlite.PushConsumer(mqlite_broker, "g", subscription={"t": "*"},
                                           listener=lambda msgs, ctx: None)
            consumer.start()
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_temporary_broker_fails_when_a_thread_outlives_it() -> None:
    release = threading.Event()
    leak = threading.Thread(target=release.wait, name="mqlite-leaked-by-test")
    try:
        with pytest.raises(AssertionError, match="mqlite-leaked-by-test"):
            with temporary_broker() as broker:
                assert not broker.closed
                leak.start()
    finally:
        release.set()
        leak.join()
    assert broker.closed


def test_no_leaked_threads_names_a_thread_the_block_left_running_and_ignores_older_ones() -> None:
    release = threading.Event()
    older = threading.Thread(target=release.wait, name="mqlite-older-than-the-block")
    leak = threading.Thread(target=release.wait, name="mqlite-left-by-the-block")
    joined = threading.Thread(target=lambda: None, name="mqlite-joined-in-the-block")
    older.start()
    try:
        with no_leaked_threads():  # a thread started and joined inside, one running since before: fine
            joined.start()
            joined.join()
        with pytest.raises(AssertionError, match="mqlite-left-by-the-block") as failed:
            with no_leaked_threads():
                leak.start()
        assert "mqlite-older-than-the-block" not in str(failed.value)
    finally:
        release.set()
        older.join()
        leak.join()


# -- the clock ----------------------------------------------------------------------------------------------
def test_delay_level_18_is_delivered_by_advance(mqlite_broker: mqlite.Broker, mqlite_clock: MockClock) -> None:
    recorder = Recorder()
    with _push(mqlite_broker, "mailer", "reminders", recorder) as consumer:
        _send(mqlite_broker, "reminders", [b"in two hours"], delay_time_level=18)
        wait_idle(mqlite_broker, consumer)
        mqlite_clock.advance(2 * 3600 - 1)
        assert sum(q.max_offset for q in mqlite_broker.topic_status("reminders")) == 0
        mqlite_clock.advance(1)  # due now: in its real queue before advance returns
        assert sum(q.max_offset for q in mqlite_broker.topic_status("reminders")) == 1
        wait_idle(mqlite_broker, consumer)
        assert recorder.done == [b"in two hours"]


def test_advancing_a_manual_clock_wakes_the_delay_service(tmp_path: Path) -> None:
    """Without `advance`'s own wait: the clock's listener alone wakes a service asleep for an hour."""
    clock = ManualClock(1_700_000_000_000)
    with mqlite.open(str(tmp_path / "mq"), clock=clock, **mqlite.testing.TEST_BROKER_CONFIG) as broker:
        assert broker.delay is not None
        # The service's own re-checks (backstop, cursor persist) would come long after the test gave up.
        broker.delay.max_wait = broker.delay.flush_interval = 3600.0
        with mqlite.Producer(broker, "pg") as producer:
            producer.send(mqlite.Message("T", b"later", delay_time_level=18))
        assert broker.wait_idle(timeout=10)  # the service has seen it and sleeps min(3600 s, 2 h)
        with mqlite.LitePullConsumer(broker, "lg", auto_commit=False) as consumer:
            consumer.subscribe("T")
            clock.advance(2 * 3600 * 1000)
            assert [m.body for m in consumer.poll(timeout=5)] == [b"later"]


def test_a_failing_listener_is_retried_on_rocketmqs_schedule_by_advance(
        mqlite_broker: mqlite.Broker, mqlite_clock: MockClock) -> None:
    recorder = Recorder(failures=2)
    consumer = _push(mqlite_broker, "billing", "orders", recorder)
    with consumer:
        _send(mqlite_broker, "orders", [b"o-1"])
        wait_idle(mqlite_broker, consumer)
        assert recorder.attempts == [(b"o-1", 0)] and recorder.done == []
        mqlite_clock.advance(9)  # the first retry is at delay level 3: 10 s
        wait_idle(mqlite_broker, consumer)
        assert len(recorder.attempts) == 1
        mqlite_clock.advance(1)
        wait_idle(mqlite_broker, consumer)
        assert recorder.attempts[1:] == [(b"o-1", 1)]
        mqlite_clock.advance(30)  # the second at level 4: 30 s
        wait_idle(mqlite_broker, consumer)
        assert recorder.attempts[2:] == [(b"o-1", 2)] and recorder.done == [b"o-1"]
        for row in mqlite_broker.consumer_progress("billing"):
            assert row.diff == 0, row  # consumed and committed, retries included
        assert any(row.topic == retry_topic("billing") for row in mqlite_broker.consumer_progress("billing"))


def test_mock_clock_refuses_going_back_and_foreign_brokers(tmp_path: Path) -> None:
    clock = MockClock(start_ms=0)
    with pytest.raises(ValueError, match="seconds >= 0"):
        clock.advance(-1)
    with temporary_broker(tmp_path / "other") as broker, pytest.raises(ValueError, match="clock=clock"):
        clock.attach(broker)


# -- join and wait_idle -----------------------------------------------------------------------------------------
def test_join_waits_for_the_listener_and_the_commit(mqlite_broker: mqlite.Broker) -> None:
    gate = threading.Event()
    seen: list[bytes] = []

    def listener(msgs: list[mqlite.MessageExt], context: Any) -> None:
        gate.wait(10)
        seen.extend(m.body for m in msgs)

    mqlite_broker.create_topic("T", 4)
    _send(mqlite_broker, "T", [b"%d" % i for i in range(20)])
    consumer = _push(mqlite_broker, "g", "T", listener, consume_thread_nums=4)
    with consumer:
        assert consumer.join(timeout=0.05) is False  # four listeners are stuck at the gate
        gate.set()
        assert consumer.join(timeout=10)
        assert sorted(seen) == sorted(b"%d" % i for i in range(20))
        assert [row.diff for row in mqlite_broker.consumer_progress("g") if row.topic == "T"] == [0] * 4


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
@pytest.mark.parametrize("model", [mqlite.MessageModel.CLUSTERING, mqlite.MessageModel.BROADCASTING])
def test_join_after_a_burst_leaves_nothing_unconsumed_or_uncommitted(
        mqlite_broker: mqlite.Broker, orderly: bool, model: mqlite.MessageModel) -> None:
    recorder = Recorder()
    consumer = mqlite.PushConsumer(mqlite_broker, "g", subscription={"T": "*"}, consume_from_where=FIRST,
                                   message_model=model, consume_message_batch_max_size=3, pull_batch_size=8)
    consumer.register_message_listener(recorder, orderly=orderly)
    with consumer:
        for round_ in range(3):  # joins with fresh messages each time, not only the first
            bodies = [b"%d-%d" % (round_, i) for i in range(60)]
            _send(mqlite_broker, "T", bodies)
            assert consumer.join(timeout=10)
            assert set(bodies) <= set(recorder.done)
            assert consumer.offset_store is not None
            for mq in mqlite_broker.fetch_subscribe_queues("T"):
                assert consumer.offset_store.read(mq) == mqlite_broker.max_offset(mq)
    assert len(recorder.done) == 180


def test_join_counts_only_this_members_share_of_the_queues(mqlite_broker: mqlite.Broker) -> None:
    mqlite_broker.create_topic("T", 4)
    mqs = mqlite_broker.fetch_subscribe_queues("T")
    gate = threading.Event()
    free, gated = Recorder(), Recorder()

    def gated_listener(msgs: list[mqlite.MessageExt], context: Any) -> None:
        gate.wait(10)
        gated(msgs, context)

    # Fixed shares, so neither member ever holds the other's queues.
    with _push(mqlite_broker, "g", "T", free, allocate_strategy=AllocateMessageQueueByConfig(mqs[:2])) as a, \
            _push(mqlite_broker, "g", "T", gated_listener, allocate_strategy=AllocateMessageQueueByConfig(mqs[2:])) as b:
        _send(mqlite_broker, "T", [b"%d" % i for i in range(40)])
        assert a.join(timeout=10)
        assert len(free.done) == 20
        assert b.join(timeout=0.05) is False
        gate.set()
        assert b.join(timeout=10)
        assert len(gated.done) == 20


def test_wait_idle_follows_a_chain_of_consumers(mqlite_broker: mqlite.Broker) -> None:
    producer = mqlite.Producer(mqlite_broker, "relay")
    shipped = Recorder()

    def relay(msgs: list[mqlite.MessageExt], context: Any) -> None:
        for msg in msgs:
            producer.send(mqlite.Message("shipments", msg.body + b"-shipped"))

    with producer, _push(mqlite_broker, "packing", "orders", relay) as packer, \
            _push(mqlite_broker, "shipping", "shipments", shipped) as shipper:
        _send(mqlite_broker, "orders", [b"o-%d" % i for i in range(10)])
        wait_idle(mqlite_broker, packer, shipper)
        assert sorted(shipped.done) == sorted(b"o-%d-shipped" % i for i in range(10))


def test_join_refuses_a_consumer_not_started_and_wait_idle_times_out(mqlite_broker: mqlite.Broker) -> None:
    consumer = _push(mqlite_broker, "g", "T", Recorder())
    with pytest.raises(IllegalStateError):
        consumer.join()
    gate = threading.Event()

    def stuck_listener(msgs: list[mqlite.MessageExt], context: Any) -> None:
        gate.wait(10)

    stuck = _push(mqlite_broker, "stuck", "T", stuck_listener)
    with stuck:
        _send(mqlite_broker, "T", [b"x"])
        with pytest.raises(TimeoutError, match="not idle"):
            wait_idle(mqlite_broker, stuck, timeout=0.05)
        gate.set()
        wait_idle(mqlite_broker, stuck)


@pytest.fixture
def shop(mqlite_broker: mqlite.Broker) -> Iterator[mqlite.Producer]:
    with mqlite.Producer(mqlite_broker, "shop") as producer:
        yield producer


def test_fixtures_compose_with_application_fixtures(mqlite_broker: mqlite.Broker, mqlite_clock: MockClock,
                                                    shop: mqlite.Producer) -> None:
    shop.send(mqlite.Message("orders", b"o-1", delay_time_level=1))
    with mqlite.LitePullConsumer(mqlite_broker, "lg", auto_commit=False) as consumer:
        consumer.subscribe("orders")
        mqlite_clock.advance(1)
        assert [m.body for m in consumer.poll(timeout=10)] == [b"o-1"]


def test_the_helpers_import_without_pytest() -> None:
    """unittest suites and scripts use `temporary_broker`, `MockClock` and `wait_idle` without pytest installed."""
    code = ("import sys; sys.modules['pytest'] = None\n"
            "from mqlite.testing import MockClock, no_leaked_threads, temporary_broker, wait_idle\n"
            "with temporary_broker(clock=MockClock()) as broker: print(broker.read_only)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
