"""`mqlite.testing`: THE way to unit-test code that uses mqlite queues.

A pytest plugin, registered by mqlite's `pytest11` entry point (its hooks and
fixtures live in `mqlite._pytest_plugin`, so this module imports without
pytest): installing mqlite is all it takes, no `conftest.py` needed. It gives
every test

- `mqlite_broker`: a fresh `Broker` in the test's `tmp_path`, opened on the
  test's clock and closed after the test, which then fails if an `mqlite-*`
  thread outlived the broker. Settings: `@pytest.mark.mqlite(**config)`.
- `mqlite_clock`: a `MockClock`. The broker's time stands still until the test
  moves it, and `advance` returns once what fell due is delivered:
  `mqlite_clock.advance(2 * 3600)` delivers a delay-level-18 message (2 h) at
  once, `advance(10)` the first retry of a message a listener failed (delay
  level 3 + reconsume times, RocketMQ's retry schedule), `advance(7)` the
  first check-back of a transaction left UNKNOW (older than `transaction_timeout`,
  6 s; later checks follow `transaction_check_interval`, as in RocketMQ). Consumers' timers follow it too: an orderly queue suspended by
  SUSPEND_CURRENT_QUEUE_A_MOMENT resumes once the clock passes its suspension.
- `wait_idle(broker, *consumers)`: returns when everything sent is readable,
  what is due is delivered and each consumer has consumed and committed all it
  can read (`PushConsumer.join`).
- `no_leaked_threads()`: a block after which no `mqlite-*` thread it started
  may still run (the check `mqlite_broker` makes, for brokers, servers and
  clients a test opens itself).

With `advance` and `wait_idle` no test sleeps or polls, and none waits for
real time to pass. A test module of your application::

    import mqlite
    from mqlite.testing import wait_idle

    def test_reminder_is_sent_two_hours_later(mqlite_broker, mqlite_clock):
        reminded = []
        consumer = mqlite.PushConsumer(mqlite_broker, "mailer", subscription={"reminders": "*"},
                                       listener=lambda msgs, ctx: reminded.extend(m.body for m in msgs))
        with consumer, mqlite.Producer(mqlite_broker, "shop") as producer:
            producer.send(mqlite.Message("reminders", b"order-1", delay_time_level=18))
            wait_idle(mqlite_broker, consumer)
            assert reminded == []                     # not due yet
            mqlite_clock.advance(2 * 3600)            # two hours, in no time
            wait_idle(mqlite_broker, consumer)
            assert reminded == [b"order-1"]

Outside pytest (unittest, scripts) `temporary_broker()` does what the fixture
does. `examples/unit_testing.py` runs a complete example.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any


from .broker import Broker, Joinable
from .broker import open as open_broker
from .clock import AdvanceListener, ManualClock

__all__ = ["MockClock", "temporary_broker", "wait_idle", "no_leaked_threads", "TEST_BROKER_CONFIG"]

#: Settings of a test broker: files sized for tests (opening and closing take milliseconds),
#: still room for a 4 MiB message. A `@pytest.mark.mqlite(...)` marker overrides them.
TEST_BROKER_CONFIG: dict[str, Any] = {
    "commitlog_file_size": 64 << 20,
    "consumequeue_file_size": 20 * 10_000,
    "max_hash_slot_num": 10_000,
    "max_index_num": 40_000,
}
#: How long `advance` and `wait_idle` wait before they fail a test that would otherwise hang.
DEFAULT_TIMEOUT = 10.0


class MockClock:
    """A clock for tests: wall time stands still until `advance(seconds)` moves it.

    Open a broker on it (`mqlite.open(path, clock=clock)`; the `mqlite_broker`
    fixture does) and `attach` the broker: `advance` then returns only once the
    broker delivered every delayed, timer and retry message due by the new time
    (dispatched, readable by consumers) and ran a transaction check that fell
    due (its check-backs answered). A consumer's delayed work (an orderly
    queue's suspension, a send-back retried later) falls due on this clock too. Monotonic time is the real one, so
    timeouts keep working. Thread-safe; `advance` blocks the calling thread for
    one round of the delay service (milliseconds).

    >>> clock = MockClock(start_ms=1_000)
    >>> clock.advance(1.5); clock.now_ms()
    2500
    """

    def __init__(self, start_ms: int | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        # Starts at the real time by default, so times the code under test takes from the
        # system (file names, logs) and broker times stay close.
        self._clock = ManualClock(time.time_ns() // 1_000_000 if start_ms is None else start_ms)
        self._brokers: list[Broker] = []
        self.timeout = timeout

    def now_ms(self) -> int:
        """The mock wall time in epoch milliseconds."""
        return self._clock.now_ms()

    def monotonic(self) -> float:
        """Real monotonic seconds (timeouts and intervals are not mocked)."""
        return self._clock.monotonic()

    def add_listener(self, listener: AdvanceListener) -> None:
        """Call `listener()` after every `advance` (how the broker's delay service is woken)."""
        self._clock.add_listener(listener)

    def remove_listener(self, listener: AdvanceListener) -> None:
        """Stop calling `listener`."""
        self._clock.remove_listener(listener)

    def attach(self, broker: Broker) -> None:
        """Make `advance` wait until `broker` delivered what fell due; the broker must run on this clock."""
        if broker.clock is not self:
            raise ValueError(f"{broker!r} does not run on this clock; open it with mqlite.open(path, clock=clock)")
        self._brokers.append(broker)

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` forward and wait until the attached brokers delivered what fell due.

        Raises `ValueError` for a negative or non-numeric amount (time never
        goes back) and `TimeoutError` when a broker is still busy after `timeout`
        seconds. Consumers pick the delivered messages up on their own threads:
        `wait_idle(broker, consumer)` waits for that too.
        """
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
            raise ValueError(f"advance takes a number of seconds >= 0, got {seconds!r}")
        self._clock.advance(round(seconds * 1000))
        self._brokers = [broker for broker in self._brokers if not broker.closed]
        for broker in self._brokers:
            if not broker.wait_idle(timeout=self.timeout):
                raise TimeoutError(f"{broker!r} was still delivering due messages {self.timeout} s after advance")

    def __repr__(self) -> str:
        return f"<mqlite.testing.MockClock now_ms={self._clock.ms}>"


def wait_idle(broker: Broker, *consumers: Joinable, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Return once `broker` and `consumers` have nothing left to do now; `TimeoutError` after `timeout` s.

    Everything sent is dispatched, every message due by the broker's clock is
    delivered, and each consumer consumed and committed all it can read,
    until a pass stores nothing new (`Broker.wait_idle`). Messages due later
    stay put: move a `MockClock` first. Call it from the test, not a listener.
    """
    if not broker.wait_idle(*consumers, timeout=timeout):
        names = ", ".join(repr(c) for c in consumers) or "no consumers"
        raise TimeoutError(f"{broker!r} ({names}) was not idle after {timeout} s: a listener may be stuck, "
                           "or a consumer cannot own its queues (another member of its group holds them)")


def _mqlite_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("mqlite-")}


@contextmanager
def no_leaked_threads() -> Iterator[None]:
    """Fail with `AssertionError` if an `mqlite-*` thread started in the block still runs after it.

    Every mqlite thread is named `mqlite-...` and joined by its owner's
    `close()`/`shutdown()`, so one left running is a broker, server, client or
    consumer the block did not close (or a bug). Threads running before the
    block are not counted. Cost: two `threading.enumerate()` calls.

    >>> with no_leaked_threads(), temporary_broker() as broker:
    ...     server = broker.serve("127.0.0.1:0")  # closed by broker.close()
    """
    before = _mqlite_threads()
    yield
    leaked = sorted(t.name for t in _mqlite_threads() - before if t.is_alive())
    assert not leaked, (f"mqlite threads still running after the block that started them: {', '.join(leaked)} "
                        "(close every broker, server, client and consumer it opened)")


@contextmanager
def temporary_broker(path: str | os.PathLike[str] | None = None, *, clock: MockClock | None = None,
                     **config: Any) -> Iterator[Broker]:
    """A broker for one test: opened (on `clock`, attached), yielded, closed, checked for leaked threads.

    `path` defaults to a new temporary directory, removed afterwards. Settings
    are `TEST_BROKER_CONFIG` updated with `config`. After the close, an
    `mqlite-*` thread started meanwhile and still alive raises `AssertionError`
    (a client the test started outside the broker's care, or a bug).
    """
    with no_leaked_threads(), ExitStack() as cleanup:  # closes the broker, removes the directory, then checks
        if path is None:
            path = os.path.join(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="mqlite-test-")), "mq")
        broker = open_broker(os.fspath(path), clock=clock, **{**TEST_BROKER_CONFIG, **config})
        cleanup.callback(broker.close)  # shuts down the consumers and producers still running, in order
        if clock is not None:
            clock.attach(broker)
        yield broker
