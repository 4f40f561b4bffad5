"""`Producer.send_async` under SYNC_FLUSH on a local store: a pipeline over the store's group commit.

RocketMQ's `asyncPutMessage`: the caller's thread stores the message, the group commit completes its
future once a flush made it durable. Split from producer.py (which creates one per producer in
`start`, `DurableSends.of`) because it has threads and a lifecycle of its own.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .commitlog import PutMessageStatus, PutResult
from .errors import IllegalStateError
from .port import BrokerPort
from .storeservices import GroupCommit

if TYPE_CHECKING:
    from .producer import SendResult

log = logging.getLogger("mqlite")
_PUT_OK = PutMessageStatus.PUT_OK


def _run_callback(callback: Callable[[concurrent.futures.Future[SendResult]], None],
                  future: concurrent.futures.Future[SendResult]) -> None:
    """A user's send callback; what it raises is logged, as `Future.add_done_callback` does."""
    try:
        callback(future)
    except Exception:
        log.exception("exception calling callback for %r", future)


class DurableSends:
    """`Producer.send_async` under SYNC_FLUSH on a local store, as a pipeline (RocketMQ's
    `asyncPutMessage`: the put returns before its flush, and the group commit completes it).

    The caller's thread validates and stores the message as `send` does (the put inside
    `GroupCommit.deferring()`, so it does not wait), and registers (end offset, future) with the
    group commit. After each flush the group commit hands over every send it made durable in
    one call; one task per group on this pipeline's own thread (`mqlite-producer-<group>-results`)
    completes the futures in order, so a slow callback never delays a flush. `send_async`'s
    callbacks run one at a time on another thread (`mqlite-producer-<group>-callbacks`), in the
    order their sends completed, never on the results thread: a callback may send again and
    wait for that send. Measured (issue 14): one thread with up to 1000 sends in flight reached
    many times the rate of the pool, whose 4 workers each waited for a flush of their own.
    """

    def __init__(self, group_commit: GroupCommit, group: str, timed_out: Any) -> None:
        self._group_commit = group_commit
        self._timed_out = timed_out  # the send status of a send its flush did not confirm in time
        self._deferral = group_commit.deferring()
        self._group = group
        self._lock = threading.Lock()  # taken per send: a plain lock (a Condition's own is an RLock)
        self._cv = threading.Condition(self._lock)
        self._outstanding = 0  # sends stored and not yet settled
        self._closed = False
        self._resolver: concurrent.futures.ThreadPoolExecutor | None = None
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None
        self._idents: dict[str, int] = {}  # role ("results", "callbacks") -> its thread's ident, for `close`

    @classmethod
    def of(cls, broker: BrokerPort, group: str, timed_out: Any) -> DurableSends | None:
        """A pipeline for a producer of `broker` when it is local and flushes synchronously, else
        None. `timed_out` is the send status a send gets when its flush did not come in time
        (`SendStatus.FLUSH_DISK_TIMEOUT`: passed in, as producer.py imports this module)."""
        group_commit = getattr(broker, "group_commit", None)  # a third-party port may not have it
        return cls(group_commit, group, timed_out) if group_commit is not None else None

    def send(self, callback: Callable[[concurrent.futures.Future[SendResult]], None] | None,
             put: Callable[..., tuple[SendResult, PutResult]], *args: Any) -> concurrent.futures.Future[SendResult]:
        """Store with `put(*args)` now (the producer's `_send_plain` or `_send_put`); the future completes
        once the record is durable (or FLUSH_DISK_TIMEOUT). Raises `IllegalStateError` once closed."""
        future: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # the send has begun: it cannot be cancelled (as a pool task)
        if callback is not None:
            future.add_done_callback(functools.partial(self._call_back, callback))
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"producer {self._group!r} was shut down")
            self._outstanding += 1
        try:
            with self._deferral:
                result, stored = put(*args)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._settled(1)
                raise
            future.set_exception(exc)  # a full disk, a closed broker: the future's exception, as on the pool
            self._settled(1)  # (after: `close` then finds its callback queued)
            return future
        if stored.status is not _PUT_OK:
            future.set_result(result)
            self._settled(1)
            return future
        self._group_commit.when_durable(stored.commit_log_offset + stored.wrote_bytes, (future, result), self._sink)
        return future

    def _sink(self, durable: list[Any], failed: list[Any]) -> None:
        """On the flushing thread: hand the group to the resolver thread (one task a group)."""
        resolver = self._resolver
        if resolver is None:
            with self._cv:
                if self._resolver is None:
                    self._resolver = self._thread("results")
                resolver = self._resolver
        try:
            resolver.submit(self._resolve, durable, failed)
        except RuntimeError:  # shut down from one of its own callbacks: complete them here instead
            self._resolve(durable, failed)

    def _thread(self, role: str) -> concurrent.futures.ThreadPoolExecutor:
        """One worker thread `mqlite-producer-<group>-<role>` whose ident `close` recognises (`_cv` held)."""
        return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mqlite-producer-{self._group}-{role}",
                                                     initializer=lambda: self._idents.__setitem__(role, threading.get_ident()))

    def _call_back(self, callback: Callable[[concurrent.futures.Future[SendResult]], None],
                   future: concurrent.futures.Future[SendResult]) -> None:
        """Run a `send_async` callback on the callbacks thread (in completion order), never on the
        thread that completed the future: the results thread, or the caller's when the put raised."""
        callbacks = self._callbacks
        if callbacks is None:  # the lock only to start the thread (every send takes it: not once a callback)
            with self._cv:
                if self._callbacks is None:
                    self._callbacks = self._thread("callbacks")
                callbacks = self._callbacks
        try:
            callbacks.submit(_run_callback, callback, future)
        except RuntimeError:  # shut down (a send settled by the store's close after ours): run it here
            _run_callback(callback, future)

    def _resolve(self, durable: list[Any], failed: list[Any]) -> None:
        """Complete a group's futures in end order; their callbacks run here."""
        for future, result in durable:
            future.set_result(result)
        for future, result in failed:
            result.send_status = self._timed_out  # stored, its durability not confirmed in time
            future.set_result(result)
        self._settled(len(durable) + len(failed))

    def _settled(self, n: int) -> None:
        with self._lock:
            self._outstanding -= n
            if not self._outstanding:
                self._cv.notify_all()

    def close(self) -> None:
        """Refuse new sends, wait until every stored one is settled, run their callbacks and join
        both threads.

        Bounded: every registered send is settled by a flush, at its `sync_flush_timeout` (the
        group commit's watcher fails it even while a flush hangs), or when the store closes.
        From one of its own threads (a callback) it cannot wait for that thread.
        """
        me = threading.get_ident()
        on_resolver = self._idents.get("results") == me
        with self._cv:
            self._closed = True
            while self._outstanding and not on_resolver:  # (the callbacks thread can wait: the resolver settles)
                self._cv.wait()  # `_settled` notifies when the last one settles
            resolver, callbacks = self._resolver, self._callbacks
        if resolver is not None:
            resolver.shutdown(wait=not on_resolver)
        if callbacks is not None:  # last: completing the futures queued their callbacks
            callbacks.shutdown(wait=self._idents.get("callbacks") != me)
