"""An injectable clock, so tests can move time without sleeping.

Everything in mqlite that reads wall time (store timestamps, delay due times,
file expiry) asks a `Clock`; nothing calls `time.time()` directly.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK", "ManualClock"]


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

    def monotonic(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """Wall time that moves only when told; for tests that need exact store times.

    Monotonic time stays the real one, so timeouts and service intervals keep
    working. `step_ms` moves the clock on after every reading (distinct store
    times without calling `advance`).

    >>> clock = ManualClock(1_000)
    >>> clock.advance(250); clock.now_ms()
    1250
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, step_ms: int = 0) -> None:
        self.ms = start_ms
        self.step_ms = step_ms

    def now_ms(self) -> int:
        """The current manual time in epoch ms (then moved on by `step_ms`)."""
        now = self.ms
        self.ms += self.step_ms
        return now

    def monotonic(self) -> float:
        """Real monotonic seconds."""
        return time.monotonic()

    def advance(self, ms: int) -> None:
        """Move the clock forward by `ms` milliseconds."""
        self.ms += ms
