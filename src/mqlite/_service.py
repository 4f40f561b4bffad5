"""`Service`: the one way mqlite runs a background thread.

A service has one owner, a name (`mqlite-<name>`), a loop that waits on a
condition with a timeout (a missed wakeup costs latency, never liveness), and a
`stop()` that wakes it, lets it finish its last round and joins it. Threads are
never daemons: if an owner forgets to stop one, interpreter exit waits, and the
thread-leak test catches it.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable

__all__ = ["Service"]

log = logging.getLogger("mqlite")


class Service(abc.ABC):
    """Base class for background services.

    Subclasses implement `run_once()` (one round of work) and may override
    `on_stop()` (final work after the loop ends, on the service thread).
    `interval` is the longest the loop sleeps between rounds; `wakeup()`
    starts a round at once.
    """

    def __init__(self, name: str, interval: float) -> None:
        self.name = f"mqlite-{name}"
        self.interval = interval
        self._cv = threading.Condition()
        self._woken = False
        self._stopping = False
        # True while the loop sleeps; producers of work read it without the lock
        # and wake the service only then (`has_work` closes the race, see below).
        self.idle = False
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        """Start the thread. Calling it twice is a bug and raises."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._main, name=self.name)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end, wait for its last round and `on_stop()`. Idempotent."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def is_stopping(self) -> bool:
        """True once `stop()` was called."""
        return self._stopping

    @property
    def is_alive(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def wakeup(self) -> None:
        """Start the next round now instead of after `interval`."""
        with self._cv:
            if not self._woken:
                self._woken = True
                self._cv.notify_all()

    # -- loop ----------------------------------------------------------------
    def wait_for_running(self, timeout: float) -> bool:
        """Sleep up to `timeout` or until woken; False once stopping."""
        with self._cv:
            # Publish `idle` before the last look for work: a producer that
            # queued work before seeing idle=True is caught by has_work().
            self.idle = True
            if not self._woken and not self._stopping and not self.has_work():
                self._cv.wait(timeout)
            self.idle = False
            self._woken = False
            return not self._stopping

    def has_work(self) -> bool:
        """True when work is already waiting (the loop then skips its sleep)."""
        return False

    @abc.abstractmethod
    def run_once(self) -> None:
        """One round of work."""

    def on_stop(self) -> None:
        """Final work after the loop ends (on the service thread)."""

    def _main(self) -> None:
        while self.wait_for_running(self.interval):
            self._guarded(self.run_once)
        self._guarded(self.on_stop)

    def _guarded(self, fn: Callable[[], None]) -> None:
        # A failing round must not kill the service: log it and go on, as
        # RocketMQ's ServiceThread loops do.
        try:
            fn()
        except Exception:
            log.exception("%s: round failed", self.name)
