"""Helpers shared by the test modules (imported by name: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


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
