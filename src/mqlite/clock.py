"""An injectable clock, so tests can move time without sleeping.

Everything in mqlite that reads wall time (store timestamps, delay due times,
file expiry) asks a `Clock`; nothing calls `time.time()` directly. A service
that sleeps until a clock time (the delay service, the transaction check-back,
a consumer's timers such as an orderly queue's suspension) registers with
`on_advance`, so moving a `ManualClock` wakes it at once instead of after its
longest wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK", "ManualClock", "on_advance", "moves_by_hand"]

#: Called with no arguments after a manual clock moved.
AdvanceListener = Callable[[], None]


class Clock(Protocol):
    """What mqlite needs from a clock."""

    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for intervals and timeouts."""
        ...


class SystemClock:
    """The real clock: `time.time_ns()` and `time.monotonic()`."""

    __slots__ = ()

    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds."""
        return time.time_ns() // 1_000_000

    #: Monotonic seconds: `time.monotonic` itself, so a deadline read through the clock on a hot path
    #: (the SYNC_FLUSH group commit) costs no more than calling it directly.
    monotonic = staticmethod(time.monotonic)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """Wall time that moves only when told; for tests that need exact store times.

    Monotonic time stays the real one, so timeouts and service intervals keep
    working. `step_ms` moves the clock on after every reading (distinct store
    times without calling `advance`). Thread-safe. `advance` calls the
    listeners registered with `add_listener`, so services waiting for a clock
    time notice at once (`mqlite.testing.MockClock` wraps this in seconds).

    >>> clock = ManualClock(1_000)
    >>> clock.advance(250); clock.now_ms()
    1250
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, step_ms: int = 0) -> None:
        self.ms = start_ms
        self.step_ms = step_ms
        self._lock = threading.Lock()
        self._listeners: list[AdvanceListener] = []

    def now_ms(self) -> int:
        """The current manual time in epoch ms (then moved on by `step_ms`)."""
        with self._lock:
            now = self.ms
            self.ms += self.step_ms
            return now

    def monotonic(self) -> float:
        """Real monotonic seconds."""
        return time.monotonic()

    def advance(self, ms: int) -> None:
        """Move the clock forward by `ms` milliseconds, then call every listener (on this thread).

        Listeners run with no lock held, so one may read the clock; the clock is
        already moved when they run. Cost: one call per listener.
        """
        with self._lock:
            self.ms += ms
            listeners = tuple(self._listeners)
        for listener in listeners:
            listener()

    def add_listener(self, listener: AdvanceListener) -> None:
        """Call `listener()` after every `advance` until `remove_listener`."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: AdvanceListener) -> None:
        """Stop calling `listener`; a listener not registered is ignored."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)


def moves_by_hand(clock: Clock) -> bool:
    """True for a clock `on_advance` can watch (a `ManualClock`, a `MockClock`): its time jumps when told.

    >>> moves_by_hand(ManualClock(0)), moves_by_hand(SYSTEM_CLOCK)
    (True, False)
    """
    return hasattr(clock, "add_listener") and hasattr(clock, "remove_listener")


def _nothing_to_undo() -> None:
    """What `on_advance` returns for a clock that nobody moves by hand."""


def on_advance(clock: Clock, listener: AdvanceListener) -> Callable[[], None]:
    """Call `listener()` whenever `clock` is moved by hand; returns the function that stops it.

    Any clock with `add_listener`/`remove_listener` (a `ManualClock`, a
    `mqlite.testing.MockClock`) is watched; a clock that moves by itself
    (`SystemClock`) needs no watching, and this does nothing for it.

    >>> clock, calls = ManualClock(0), []
    >>> stop = on_advance(clock, lambda: calls.append(clock.now_ms()))
    >>> clock.advance(5); stop(); clock.advance(5); calls
    [5]
    """
    if not moves_by_hand(clock):
        return _nothing_to_undo
    clock.add_listener(listener)  # type: ignore[attr-defined]
    return lambda: clock.remove_listener(listener)  # type: ignore[attr-defined]
