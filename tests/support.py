"""Helpers shared by the test modules (imported by name: pytest puts tests/ on sys.path).

- `SMALL_STORE`: the settings of the small store most tests open; `TINY_STORE` rolls its files sooner.
- `broker_fixture(**settings)`: a module's `broker` fixture (a small store in `tmp_path`, closed after
  the test; a test marked `@over_the_wire` also runs on a connection to it).
- `no_leftover_threads`: an autouse fixture a module imports to fail a test that leaves an `mqlite-*`
  thread running (`mqlite.testing.no_leaked_threads`).
- `wait_until(predicate, what)`: the suite's one polling loop, for a state nothing signals.
- `deadline(seconds)`: turns a hang into a failure.

Waiting is on events wherever one exists: `Broker.wait_idle`/`wait_dispatched`, `PushConsumer.join`,
a thread's `join`, a listener's `threading.Event`/`Condition`, `queue.get(timeout)`, and the manual
clock for time itself. No test sleeps for something to happen, and none asserts how long something took.

Running client tests over the wire: a test marked `@over_the_wire` runs once on the local `Broker`
and once on a `RemoteBroker` connected to that broker served in this process. The module's `broker`
fixture reads the parameter (`request.param`, "local" when absent) and hands what `reached(kind,
broker)` yields to the test: the broker itself, or a connection to it. Semantics are the same by
contract (the broker port), so the assertions are too.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.testing import no_leaked_threads

#: The small store of most tests: 1 MiB commit-log segments, 1000-unit consume-queue files and a
#: small index, so opening and closing take milliseconds and files roll within a test that wants it.
SMALL_STORE: dict[str, Any] = {"commitlog_file_size": 1 << 20, "consumequeue_file_size": 20 * 1000,
                               "max_hash_slot_num": 1000, "max_index_num": 4000}
#: A tinier store, for tests of the files themselves: 64 KiB segments, 64-unit consume-queue files and
#: a 256-entry index, so a few dozen messages roll each of them.
TINY_STORE: dict[str, Any] = {"commitlog_file_size": 1 << 16, "consumequeue_file_size": 20 * 64,
                              "max_hash_slot_num": 64, "max_index_num": 256}


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Turn a hang into a TimeoutError (SIGALRM; pytest runs tests on the main thread)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def wait_until(predicate: Callable[[], object], what: str | Callable[[], str], timeout: float = 10.0) -> None:
    """Return once `predicate()` is true; AssertionError naming `what` after `timeout` seconds.

    The suite's one polling loop, for states no event announces (a rebalance's outcome, a lock's
    holder, a pull parked on the broker, a child process's files). Where something can wake the
    test (a listener, `join`, `wait_idle`, a clock), wait on that instead. `what` may be a callable,
    asked only on failure, to report the state reached.
    """
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            raise AssertionError(f"waited {timeout} s for {what() if callable(what) else what}")
        time.sleep(0.005)  # a look every 5 ms: the state shows within a look of being reached


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    """Every mqlite thread a test started (brokers, services, consumers, servers, clients) is gone when it ends.

    Autouse in the modules that import it: `from support import no_leftover_threads  # noqa: F401`.
    """
    with no_leaked_threads():
        yield


# -- over the wire ------------------------------------------------------------------------------------
#: The broker each live connection made by `reached` reaches (by the connection's id).
_SERVED: dict[int, mqlite.Broker] = {}

#: Parametrize a test's `broker` fixture over the embedded broker and a connection to it.
over_the_wire = pytest.mark.parametrize("broker", ["local", "remote"], indirect=True)


def kind_of(request: pytest.FixtureRequest) -> str:
    """"local" or "remote": the parameter `over_the_wire` gave the `broker` fixture (local without one)."""
    return str(getattr(request, "param", "local"))


@contextmanager
def reached(kind: str, broker: mqlite.Broker) -> Iterator[Any]:
    """`broker` itself ("local"), or a `RemoteBroker` connected to it served on a loopback port ("remote")."""
    if kind == "local":
        yield broker
        return
    server = broker.serve("127.0.0.1:0")
    remote = mqlite.connect(server.address)
    _SERVED[id(remote)] = broker
    try:
        yield remote
    finally:
        del _SERVED[id(remote)]
        remote.close()
        server.close()


def local(broker: Any) -> mqlite.Broker:
    """The embedded broker behind `broker` (itself, or the one a `reached` connection is served by):
    a test reads the store back through it."""
    return _SERVED.get(id(broker), broker)


def broker_fixture(*, topics: dict[str, int] | None = None, **settings: Any) -> Any:
    """A module's `broker` fixture: `broker = broker_fixture(message_delay_level=...)`.

    The broker is opened at `tmp_path / "mq"` with `SMALL_STORE` updated with `settings`, gets
    `topics` (name: queue count) created, and is closed after the test. A test marked
    `@over_the_wire` runs twice: on the broker, and on a connection to it served in this process
    (`local(broker)` is the embedded broker behind either).
    """

    @pytest.fixture(name="broker")
    def fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        with mqlite.open(str(tmp_path / "mq"), **{**SMALL_STORE, **settings}) as opened:
            for topic, queues in (topics or {}).items():
                opened.create_topic(topic, queues)
            with reached(kind_of(request), opened) as target:
                yield target

    return fixture
