"""An injectable clock, so tests can move time without sleeping.

Everything in mqlite that reads wall time (store timestamps, delay due times,
file expiry) asks a `Clock`; nothing calls `time.time()` directly.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK"]


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
