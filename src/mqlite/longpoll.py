"""Long polling: who is waiting for which queue, woken when the queue grows.

RocketMQ's `PullRequestHoldService` parks a pull that found nothing and
re-runs it when `NotifyMessageArrivingListener` reports the queue grew. Here
the "network" is a function call, so a parked pull is just a thread waiting on
a `Waker`, and the store's arrival listener (which runs on the putting thread,
after the consume-queue unit is visible) wakes every waker registered for that
queue. A consumer that serves many queues from one pull thread registers one
waker for all of them.

The arrival path is the send hot path: with nobody waiting it costs one dict
look-up and no lock. Registrations copy the tuple of wakers, so `notify`
iterates without a lock.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from typing import Protocol

from .message import MessageExt
from .storebase import GetMessageResult, GetMessageStatus

__all__ = ["ArrivalHub", "Waker", "PullStatus", "PullResult", "pull_result_of"]

QueueKey = tuple[str, int]


class Waker(Protocol):
    """Anything with `set()`: a `threading.Event`, or a consumer's own wake-up."""

    def set(self) -> None:
        """Wake the waiting thread; must not block."""
        ...


class ArrivalHub:
    """Wakers per (topic, queue id); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakers: dict[QueueKey, tuple[Waker, ...]] = {}
        self._closed = False

    def watch(self, waker: Waker, queues: Iterable[QueueKey]) -> None:
        """Wake `waker` whenever one of `queues` grows (until `unwatch`)."""
        with self._lock:
            for key in queues:
                current = self._wakers.get(key, ())
                if waker not in current:
                    self._wakers[key] = (*current, waker)
            closed = self._closed
        if closed:
            waker.set()

    def unwatch(self, waker: Waker, queues: Iterable[QueueKey] | None = None) -> None:
        """Stop waking `waker` for `queues` (all of its queues when None)."""
        with self._lock:
            keys = list(self._wakers) if queues is None else list(queues)
            for key in keys:
                current = self._wakers.get(key)
                if current and waker in current:
                    rest = tuple(w for w in current if w is not waker)
                    if rest:
                        self._wakers[key] = rest
                    else:
                        del self._wakers[key]

    def watches(self, topic: str, queue_id: int) -> bool:
        """True while some waker watches the queue. Lock-free."""
        return (topic, queue_id) in self._wakers

    def notify(self, topic: str, queue_id: int) -> None:
        """The queue grew: wake everyone watching it. Lock-free; runs on the putting thread."""
        wakers = self._wakers.get((topic, queue_id))
        if wakers:
            for waker in wakers:
                waker.set()

    def wait(self, topic: str, queue_id: int, ready: _Ready, timeout: float) -> bool:
        """Park until `ready()` is true, the queue grows, or `timeout` seconds pass.

        `ready` is re-checked after registering, so an arrival between the
        caller's own check and the registration is not missed. Returns `ready()`.
        """
        if ready() or timeout <= 0:
            return ready()
        event = threading.Event()
        key = ((topic, queue_id),)
        self.watch(event, key)
        try:
            if not ready():
                event.wait(timeout)
        finally:
            self.unwatch(event, key)
        return ready()

    def close(self) -> None:
        """Wake every waiter (the broker is closing); later `watch` calls wake at once."""
        with self._lock:
            self._closed = True
            wakers = {w for group in self._wakers.values() for w in group}
        for waker in wakers:
            waker.set()

    @property
    def waiting(self) -> int:
        """How many (queue, waker) registrations there are (for tests and stats)."""
        return sum(len(group) for group in self._wakers.values())


class PullStatus(enum.Enum):
    """The client's `PullStatus`."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class PullResult:
    """What a pull returns (`PullResult`): status, the offset to pull from next, the queue's bounds, messages."""

    __slots__ = ("pull_status", "next_begin_offset", "min_offset", "max_offset", "msg_found_list")

    def __init__(self, pull_status: PullStatus, next_begin_offset: int, min_offset: int, max_offset: int,
                 msg_found_list: list[MessageExt]) -> None:
        self.pull_status = pull_status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.msg_found_list = msg_found_list

    def __repr__(self) -> str:
        return (f"PullResult({self.pull_status.name}, next_begin_offset={self.next_begin_offset}, "
                f"min={self.min_offset}, max={self.max_offset}, found={len(self.msg_found_list)})")


def pull_result_of(result: GetMessageResult, offset: int) -> PullResult:
    """The broker's status mapping (`PullMessageProcessor`, then `MQClientAPIImpl`) for a store read."""
    status = result.status
    if status is GetMessageStatus.FOUND:
        pull = PullStatus.FOUND
    elif status in _NO_MATCH:
        pull = PullStatus.NO_MATCHED_MSG
    elif status is GetMessageStatus.OFFSET_OVERFLOW_ONE or status is GetMessageStatus.OFFSET_FOUND_NULL:
        pull = PullStatus.NO_NEW_MSG
    elif status in _EMPTY_QUEUE:
        # An empty or unknown queue: "no new message" at offset 0, a moved offset otherwise.
        pull = PullStatus.NO_NEW_MSG if offset == 0 else PullStatus.OFFSET_ILLEGAL
    else:  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY
        pull = PullStatus.OFFSET_ILLEGAL
    return PullResult(pull, result.next_begin_offset, result.min_offset, result.max_offset, result.messages)


_NO_MATCH = frozenset({GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING})
_EMPTY_QUEUE = frozenset({GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE})


class _Ready(Protocol):
    def __call__(self) -> bool: ...
