"""Pulls a `RemoteBroker` issues ahead of its consumers: long polling across processes, no thread per queue.

mqlite's consumers pull each of their queues with `wait=0` and sleep on one
waker for all of them (`watch_arrivals`). Over the wire that alone would
poll. So for a watched queue, `PullAhead` follows each pull with one issued
asynchronously (`RemotingClient.request_async`) for the offset where the next
pull will start:

- after an empty pull, a long-polling pull parked on the server (RocketMQ's
  push consumer's `PULL_MESSAGE` with `FLAG_SUSPEND`, 15 s). While it waits, the
  consumer's pull of that (group, queue, offset) answers NO_NEW_MSG without a
  round trip; when it comes back, the queue's wakers are set and the next pull
  takes its result;
- after a full pull (a backlog), a prefetch of the next messages, up to
  `PREFETCH_BATCHES` pulls' worth in one answer (the server caps an answer at
  256 KiB), handed out one pull's worth at a time: a backlog costs a round trip
  per several pulls instead of one per pull.

At most one pull is ahead per (group, queue). One whose offset, size or
subscription no longer matches the consumer's next pull (a seek, a reset) is
dropped, as is one for a queue nobody watches any more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ..errors import IllegalStateError, RemotingError
from ..longpoll import ArrivalHub, PullResult, PullStatus, Waker
from ..port import QueueKey, Subscription
from .client import RemotingClient
from .frames import RemotingCommand

__all__ = ["PullAhead", "PARKED_PULL_SUSPEND"]

#: How long a parked pull is suspended on the server (`BROKER_SUSPEND_MAX_TIME_MILLIS`: 15 s).
PARKED_PULL_SUSPEND = 15.0
#: A prefetch asks for this many pulls' worth of messages (at most 1024, the server's cap on a pull).
PREFETCH_BATCHES = 8
_MAX_PULL_NUMS = 1024

#: (group, topic, queue id): whose next pull a pull ahead answers.
Key = tuple[str, str, int]
#: A pull's (expression type, expression), None for every message.
Expression = tuple[str, str] | None
#: The PULL_MESSAGE request for (offset, seconds to suspend it (0: not at all), most messages).
RequestFor = Callable[[int, float, int], RemotingCommand]
#: A PULL_MESSAGE answer read as a `PullResult` (for the pull that started at the given offset).
ResultOf = Callable[[RemotingCommand, int, "Subscription | None"], PullResult]


class _Ahead:
    """One pull issued ahead and, once it came back, its result."""

    __slots__ = ("offset", "max_nums", "expression", "suspended", "result", "done", "ready")

    def __init__(self, offset: int, max_nums: int, expression: Expression, suspended: bool) -> None:
        self.offset = offset
        self.max_nums = max_nums
        self.expression = expression
        self.suspended = suspended
        self.result: PullResult | None = None
        self.done = False
        self.ready = threading.Event()

    def matches(self, offset: int, max_nums: int, expression: Expression) -> bool:
        return self.offset == offset and self.max_nums == max_nums and self.expression == expression


class PullAhead:
    """The watched queues of one connection and the pulls issued ahead for them; thread-safe."""

    def __init__(self, remote: RemotingClient, timeout: float, result_of: ResultOf) -> None:
        self._remote = remote
        self._timeout = timeout
        self._result_of = result_of
        self._lock = threading.Lock()
        self._hub = ArrivalHub()  # the watchers; set by parked pulls instead of a store's arrivals
        self._ahead: dict[Key, _Ahead] = {}

    # -- watchers ---------------------------------------------------------------------------------------
    def watch(self, waker: Waker, queues: Iterable[QueueKey]) -> None:
        """Set `waker` when one of `queues` may have grown."""
        self._hub.watch(waker, queues)

    def unwatch(self, waker: Waker, queues: Iterable[QueueKey] | None = None) -> None:
        """Stop setting `waker` for `queues` (all when None); pulls ahead nobody watches are dropped."""
        self._hub.unwatch(waker, queues)
        with self._lock:
            for key in [k for k in self._ahead if not self._hub.watches(k[1], k[2])]:
                del self._ahead[key]

    def close(self) -> None:
        """Wake every watcher (the connection is closing); later watches wake at once."""
        self._hub.close()

    # -- pulls -------------------------------------------------------------------------------------------
    def answer(self, key: Key, offset: int, max_nums: int, expression: Expression) -> PullResult | None:
        """The answer a pull ahead gives this pull, or None when it has to go to the server itself.

        Blocks only for a prefetch still in flight (it comes back within a round trip).
        """
        with self._lock:
            ahead = self._ahead.get(key)
            if ahead is None:
                return None
            if not ahead.matches(offset, max_nums, expression):
                del self._ahead[key]  # a seek or a reset moved the consumer: its answer is dropped
                return None
            if ahead.suspended and not ahead.done:
                # Still parked on the server: nothing arrived yet (its answer will wake the watchers).
                return PullResult(PullStatus.NO_NEW_MSG, offset, 0, offset, [])
            del self._ahead[key]
        ahead.ready.wait(self._timeout)
        result = ahead.result
        if result is None or result.pull_status is PullStatus.NO_NEW_MSG:
            return None  # failed, timed out, or a parked pull that ran out: ask again
        messages = result.msg_found_list
        if len(messages) <= max_nums:
            return result
        # A prefetch of several pulls' worth: this pull's share now, the rest for the next pulls.
        rest_offset = messages[max_nums].queue_offset
        rest = _Ahead(rest_offset, max_nums, expression, suspended=False)
        rest.result = PullResult(PullStatus.FOUND, result.next_begin_offset, result.min_offset, result.max_offset,
                                 messages[max_nums:])
        rest.done = True
        rest.ready.set()
        with self._lock:
            self._ahead.setdefault(key, rest)
        return PullResult(PullStatus.FOUND, rest_offset, result.min_offset, result.max_offset, messages[:max_nums])

    def follow(self, key: Key, result: PullResult, max_nums: int, expression: Expression,
               request_for: RequestFor, message_filter: Subscription | None) -> None:
        """After a pull of a watched queue: park a long poll if it was empty, prefetch if it was full."""
        if not self._hub.watches(key[1], key[2]):
            return
        if result.pull_status is PullStatus.NO_NEW_MSG:
            self._issue(key, result.next_begin_offset, max_nums, expression, request_for, message_filter, True)
        elif result.pull_status is PullStatus.FOUND and len(result.msg_found_list) >= max_nums:
            self._issue(key, result.next_begin_offset, max_nums, expression, request_for, message_filter, False)

    def _issue(self, key: Key, offset: int, max_nums: int, expression: Expression, request_for: RequestFor,
               message_filter: Subscription | None, suspended: bool) -> None:
        ahead = _Ahead(offset, max_nums, expression, suspended)
        with self._lock:
            if key in self._ahead:
                return
            self._ahead[key] = ahead
        wait = PARKED_PULL_SUSPEND if suspended else 0.0
        nums = max_nums if suspended else max(max_nums, min(max_nums * PREFETCH_BATCHES, _MAX_PULL_NUMS))

        def arrived(response: RemotingCommand | None, error: BaseException | None) -> None:
            # On the connection's I/O thread: decode, keep, wake. Errors reach the consumer's own next pull.
            try:
                ahead.result = None if response is None else self._result_of(response, offset, message_filter)
            except Exception:
                ahead.result = None
            ahead.done = True  # after the result: a reader that sees done sees the result
            ahead.ready.set()
            if suspended:
                self._hub.notify(key[1], key[2])

        try:
            self._remote.request_async(request_for(offset, wait, nums), wait + self._timeout, arrived)
        except (RemotingError, IllegalStateError):
            with self._lock:
                if self._ahead.get(key) is ahead:
                    del self._ahead[key]
