"""The threads a consumer owns: a worker pool and a pull loop with a timer queue.

`WorkerPool` is a fixed set of named threads over one `SimpleQueue` (cheaper
per task than `ThreadPoolExecutor`, which builds a `Future` per call; a push
consumer submits one task per batch). `PullLoop` is a `Service` whose rounds
the consumer defines; it also runs delayed tasks (an orderly queue suspended
for a moment, a failed send-back retried after 5 s) so no extra thread sleeps.
A delayed task is due once its delay has passed in real time or on the
broker's clock, whichever comes first: moving a test's `MockClock` runs it at once.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .._service import Service
from ..clock import SYSTEM_CLOCK, Clock, moves_by_hand, on_advance

__all__ = ["WorkerPool", "PullLoop"]

log = logging.getLogger("mqlite.consumer")

Task = Callable[[], None]
_STOP = object()


class WorkerPool:
    """`n` threads named `<name>-<i>` running submitted tasks in order of submission."""

    def __init__(self, name: str, threads: int) -> None:
        self._tasks: queue.SimpleQueue[object] = queue.SimpleQueue()
        #: `backlog` as a bound C call (a hot path asks it once a message).
        self.queued: Callable[[], int] = self._tasks.qsize
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}") for i in range(threads)]
        self._started = False

    def start(self) -> None:
        """Start the threads."""
        self._started = True
        for thread in self._threads:
            thread.start()

    def submit(self, task: Task) -> None:
        """Run `task` on a worker; exceptions are logged, never raised."""
        self._tasks.put((task, None))

    def submit_call(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Run `fn(arg)` on a worker (no closure to build per task)."""
        self._tasks.put((fn, arg))

    def stop(self) -> None:
        """Let each worker finish what it runs and the tasks queued before this call, then join."""
        if not self._started:
            return
        for _ in self._threads:
            self._tasks.put(_STOP)
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:
                thread.join()

    @property
    def size(self) -> int:
        """Number of worker threads."""
        return len(self._threads)

    @property
    def backlog(self) -> int:
        """Tasks submitted and not taken by a worker yet (approximate while workers run)."""
        return self.queued()

    def _work(self) -> None:
        get = self._tasks.get
        while True:
            item = get()
            if item is _STOP:
                return
            fn: Callable[..., None]
            arg: Any
            fn, arg = item  # type: ignore[misc]
            try:
                fn() if arg is None else fn(arg)
            except Exception:
                log.exception("consume task failed")


class PullLoop(Service):
    """The consumer's pull thread: `round()` until stopped, sleeping when a round found nothing.

    `round` returns True when it made progress (another round follows at
    once). Anything that may give the next round work (an arrival, a freed
    flow-control slot, a rebalance request) calls `poke()`: lock-free unless
    the loop is asleep. `clock` is the broker's: a delayed task also falls due
    when a hand-moved clock passes its time.
    """

    def __init__(self, name: str, round_fn: Callable[[], bool], idle_wait: float,
                 on_stop: Callable[[], None] | None = None, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(name, idle_wait)
        self._round = round_fn
        self._idle_wait = idle_wait
        self._poked = True
        self._progress = False
        # (monotonic due time, seq, clock due time in ms or None, task), a heap on the monotonic time.
        self._timers: list[tuple[float, int, int | None, Task]] = []
        self._timer_lock = threading.Lock()
        self._seq = itertools.count()
        self._final = on_stop
        # A clock that only moves when told (a test's) is read when it moved, never on every round:
        # a stepping ManualClock moves on each reading.
        self._clock: Clock | None = clock if moves_by_hand(clock) else None
        self._clock_moved = False
        self._stop_watching_clock: Callable[[], None] = lambda: None

    def start(self) -> None:
        """Start the thread, watching a hand-moved clock until it stops."""
        if self._clock is not None:
            self._stop_watching_clock = on_advance(self._clock, self._on_clock_moved)
        super().start()

    # `set` makes the loop a `longpoll.Waker`.
    def set(self) -> None:
        """Wake the loop: there may be work (an arrival, a freed slot, a request)."""
        self._poked = True
        if self.idle:
            self.wakeup()

    poke = set

    def _on_clock_moved(self) -> None:
        self._clock_moved = True
        self.set()

    def call_later(self, delay: float, task: Task) -> None:
        """Run `task` on the pull thread after `delay` seconds (of real time, or of the clock's if sooner)."""
        clock_due = None if self._clock is None else self._clock.now_ms() + round(delay * 1000)
        with self._timer_lock:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), clock_due, task))
        self.set()

    def has_work(self) -> bool:
        return self._poked or self._progress

    def run_once(self) -> None:
        self._poked = False
        self._progress = False  # a round that raises must not leave the loop spinning
        self._run_timers()
        self._progress = bool(self._round())
        self.interval = self._next_wait()

    def on_stop(self) -> None:
        self._stop_watching_clock()
        if self._final is not None:
            self._final()

    def _run_timers(self) -> None:
        now = time.monotonic()
        now_ms: int | None = None
        if self._clock_moved and self._clock is not None:
            self._clock_moved = False
            now_ms = self._clock.now_ms()
        due: list[Task] = []
        with self._timer_lock:
            timers = self._timers
            while timers and timers[0][0] <= now:
                due.append(heapq.heappop(timers)[3])
            if now_ms is not None:  # the clock was moved: tasks due by its time run too, in order
                by_clock = sorted(t for t in timers if t[2] is not None and t[2] <= now_ms)
                if by_clock:
                    due.extend(t[3] for t in by_clock)
                    self._timers = [t for t in timers if t[2] is None or t[2] > now_ms]
                    heapq.heapify(self._timers)
        for task in due:
            try:
                task()
            except Exception:
                log.exception("%s: delayed task failed", self.name)

    def _next_wait(self) -> float:
        with self._timer_lock:
            if self._timers:
                return max(0.0, min(self._idle_wait, self._timers[0][0] - time.monotonic()))
        return self._idle_wait
