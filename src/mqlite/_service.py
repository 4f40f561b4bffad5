"""`Service`: the one way mqlite runs a background thread.

A service has one owner, a name (`mqlite-<name>`), a loop that waits on a
condition with a timeout (a missed wakeup costs latency, never liveness), and a
`stop()` that wakes it, lets it finish its last round and joins it. Threads are
never daemons: an owner that is not closed would keep the process alive, so
`close_at_exit` closes what the program forgot when the interpreter exits
(after the program's own threads ended, before Python waits for mqlite's).
"""

from __future__ import annotations

import abc
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["Service", "Closeable", "close_at_exit", "forget_at_exit"]

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


# -- closing what the program forgot -------------------------------------------------------------------------
class Closeable(Protocol):
    """What `close_at_exit` can close: an owner of threads (a `Broker`); its repr names it in the warning."""

    def close(self) -> None:
        """Stop every thread, make everything durable, release the files. Idempotent."""
        ...


_open_owners: weakref.WeakSet[Closeable] = weakref.WeakSet()
# Reentrant: a signal handler (closing a broker at SIGTERM, say) runs on the main thread between
# any two bytecodes, also while that thread holds this lock to register or forget another owner.
_exit_lock = threading.RLock()
_exit_hooked = False


def close_at_exit(owner: Closeable) -> None:
    """Close `owner` at interpreter exit if it is still open then (with a logged warning naming it).

    Call it when `owner` starts threads or opens files; call `forget_at_exit`
    from its `close()`. Holds a weak reference. Cost: one set insertion.
    """
    with _exit_lock:
        _open_owners.add(owner)
        _hook_interpreter_exit()


def forget_at_exit(owner: Closeable) -> None:
    """`owner` was closed: nothing is left to do for it at exit."""
    with _exit_lock:
        _open_owners.discard(owner)


def _hook_interpreter_exit() -> None:
    """Register `_at_exit` once (caller holds `_exit_lock`).

    Why `threading._register_atexit`, a CPython internal: Python joins every
    non-daemon thread in `threading._shutdown` *before* it runs `atexit`
    handlers, so an `atexit` hook would never run while mqlite's threads live
    (the process would hang). `_register_atexit` runs its callbacks at the start
    of `_shutdown`, before that join; `concurrent.futures` relies on it the same
    way. Where it is missing (another interpreter), `atexit` is the fallback.
    """
    global _exit_hooked
    if _exit_hooked:
        return
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(_at_exit)
        else:  # pragma: no cover - CPython and PyPy have it
            import atexit

            atexit.register(_close_open_owners)
    except RuntimeError:  # the interpreter is already shutting down: nothing can be hooked any more
        log.warning("mqlite: opened while the interpreter shuts down; close() it yourself")
        return
    _exit_hooked = True


def _at_exit() -> None:
    """Interpreter exit: close forgotten owners once the program's own threads have ended.

    Runs on the main thread before Python joins the non-daemon threads. The
    program's own non-daemon threads may still be working (Python waits for
    them: that is what non-daemon means), possibly sending through a broker, so
    closing now would fail them. A thread `mqlite-exit` therefore waits for
    them and then closes what is still open; Python's join waits for it and
    then for mqlite's threads, which end with their owners. (A program thread
    that waits for mqlite forever, say iterating a consumer without
    `consumer_timeout`, keeps the process alive, as any non-daemon thread does.)
    """
    with _exit_lock:
        if not _open_owners and not _program_threads():
            return  # everything was closed and nothing can open more: the common case costs nothing
    threading.Thread(target=_close_after_program_threads, name="mqlite-exit").start()


def _program_threads() -> list[threading.Thread]:
    """Live non-daemon threads that belong to the program (not mqlite's, not the main thread)."""
    me, main = threading.current_thread(), threading.main_thread()
    return [t for t in threading.enumerate()
            if t is not me and t is not main and not t.daemon and not t.name.startswith("mqlite-")]


def _close_after_program_threads() -> None:
    while True:
        threads = _program_threads()
        if not threads:
            break
        for thread in threads:  # threads they start meanwhile are found by the next pass
            thread.join()
    _close_open_owners()


def _close_open_owners() -> None:
    """Close every owner still open, each with a warning; a listener may open another: repeat."""
    while True:
        with _exit_lock:
            owners = list(_open_owners)
            _open_owners.clear()
        if not owners:
            return
        for owner in owners:
            log.warning("mqlite: %r was not closed; closing it at interpreter exit (close what you open, and "
                        "shut down the clients you start, before the program ends; a with block does)", owner)
            try:
                owner.close()
            except Exception:
                log.exception("mqlite: closing %r at interpreter exit failed", owner)


def _forget_all_in_child() -> None:
    """A forked child inherits the parent's open owners but not their threads; closing them there would
    release the parent's store lock (an flock is shared across fork), so the child forgets them."""
    global _exit_lock
    _exit_lock = threading.RLock()  # the parent may have held it while forking
    _open_owners.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all_in_child)
