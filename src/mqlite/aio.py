"""`mqlite.aio`: mqlite's clients for asyncio code.

`await producer.send(msg)`, `await consumer.poll()`, `async for msg in consumer`
and `async with` over the same objects as the blocking API: each class wraps
one client (its `.sync` attribute) and runs every call that may block on a
thread, so the event loop never waits for a flush. Sends run on the
producer's own send pool, or under SYNC_FLUSH in its pipeline (`Producer.send_async`;
completions reach the loop as `asyncio.wrap_future` would, one loop call per group).
That pipeline stores the message on the loop's thread: microseconds, but a put
that fills the commit-log segment creates and maps the next file there, and
one may wait for the put lock behind another thread's `send_batch` copy;
everything else runs on the loop's default executor, or on the `executor=` you pass (a long `poll` holds one of its threads while it
waits). No behaviour is re-implemented here: options, defaults and errors are
those of `mqlite.Producer`, `mqlite.LitePullConsumer` and `mqlite.PushConsumer`.

    async with mqlite.aio.open("./mq") as broker:
        async with mqlite.aio.Producer(broker, "pg") as producer:
            await producer.send(mqlite.Message("orders", b"hello"))
        async with mqlite.aio.LitePullConsumer(broker, "lg", consumer_timeout=1.0) as consumer:
            consumer.subscribe("orders")
            async for msg in consumer:
                ...

Cancellation:

- `poll` and `async for` never lose a message to a cancellation. The thread
  only *takes* the next pull result; the messages are handed out (their
  queue's consume offset moves past them, so a commit or auto-commit may
  include them) only when the coroutine that asked is still there to return
  them. If it was cancelled meanwhile, the result is put back in front of the
  consumer's queue and the next `poll` (async or blocking) returns it; a take
  still waiting ends at once, freeing its thread. A shutdown ends a waiting
  take too. The messages of a batch `async for` has
  not reached yet are kept for the next `poll` or iteration, and are not
  committed before that.
- `send` may still store its message when cancelled after the send began (a
  send cannot be taken back); cancelled before, it is not sent.
- `open` cancelled while opening closes the broker once the open finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import CancelledError as ConcurrentCancelledError
from concurrent.futures import Executor
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, Generic, Protocol, TypeVar

from .broker import Broker
from .broker import open as open_broker
from .consumer.litepull import LITE_LONG_POLLING_WAIT, ConsumeRequest
from .consumer.litepull import LitePullConsumer as _LitePullConsumer
from .consumer.push import PUSH_LONG_POLLING_WAIT
from .consumer.push import PushConsumer as _PushConsumer
from .consumer.types import ConsumeConcurrentlyContext, ConsumeFromWhere, ConsumeOrderlyContext, MessageModel
from .errors import IllegalStateError, MQClientError
from .filter import MessageSelector
from .message import Message, MessageExt, MessageQueue
from .port import BrokerPort
from .rebalance import AllocateMessageQueueStrategy
from .producer import COMPRESS_MSG_BODY_OVER_HOWMUCH, DEFAULT_PRODUCER_GROUP, MessageQueueSelector, SendResult
from .producer import Producer as _Producer

__all__ = ["open", "Producer", "LitePullConsumer", "PushConsumer", "AsyncMessageListener"]

T = TypeVar("T")
BrokerLike = BrokerPort | str | os.PathLike[str]

# Each client's constructor spells out the keywords of the blocking client it wraps (same names, types and
# defaults, RocketMQ's), so a type checker refuses a misspelt one and help() lists them;
# tests/test_aio.py compares the signatures, so the two cannot drift apart.


class AsyncMessageListener(Protocol):
    """A push listener as a coroutine function: `async def listener(msgs, context) -> status`."""

    def __call__(self, msgs: list[MessageExt], context: Any, /) -> Coroutine[Any, Any, Any]: ...


async def _run(executor: Executor | None, fn: Callable[[], T]) -> T:
    """`fn()` on `executor` (None: the loop's default one), awaited."""
    return await asyncio.get_running_loop().run_in_executor(executor, fn)


class _Completions:
    """Completes a loop's futures from the producer's (`asyncio.wrap_future`, grouped).

    `wrap_future` costs one `call_soon_threadsafe` (a lock and a write to the
    loop's self-pipe) per future. Sends complete in groups (under SYNC_FLUSH a
    whole flush's worth at once), so the futures completed before the loop
    runs the last call are handed over together: one call per group.
    Cancelling the loop's future cancels the send's, as `wrap_future` does, while the
    send can still be cancelled: a pipelined send is running from the start, and its
    loop future gets no done-callback (which the loop would schedule as one more
    handle a future when it completes).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._done: list[tuple[ConcurrentFuture[Any], asyncio.Future[Any]]] = []
        self._scheduled = False

    def bridge(self, source: ConcurrentFuture[T]) -> asyncio.Future[T]:
        """A future of `self.loop` that completes as `source` does (call it on the loop's thread)."""
        target: asyncio.Future[T] = self.loop.create_future()
        if not source.running():  # (a running or done future cannot be cancelled)
            target.add_done_callback(functools.partial(_cancel_source, source))
        source.add_done_callback(functools.partial(self._completed, target))
        return target

    def _completed(self, target: asyncio.Future[Any], source: ConcurrentFuture[Any]) -> None:
        """On the thread that completed `source`: queue it; one loop call drains the queue."""
        with self._lock:
            self._done.append((source, target))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop was closed: nobody awaits these futures any more
            pass

    def _drain(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._scheduled = False
        for source, target in done:
            if target.cancelled():
                continue
            try:
                exc = source.exception()  # (done: no wait)
            except ConcurrentCancelledError:
                target.cancel()
                continue
            if exc is not None:
                target.set_exception(exc)
            else:
                target.set_result(source.result())


def _cancel_source(source: ConcurrentFuture[Any], target: asyncio.Future[Any]) -> None:
    if target.cancelled():
        source.cancel()


class _Handoff(Generic[T]):
    """A value made on a worker thread for a coroutine that may be cancelled meanwhile.

    Exactly one side ends up owning the value: the coroutine, when `offer`
    returned True and it was not cancelled; otherwise the side that learns of
    the cancellation undoes it (the worker when `offer` returns False, the
    coroutine when `abandon` returns the value).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: T | None = None
        self._abandoned = False

    def offer(self, value: T) -> bool:
        """On the worker: True when the coroutine still waits for `value`; False when the worker must undo it."""
        with self._lock:
            if self._abandoned:
                return False
            self._value = value
            return True

    def abandon(self) -> T | None:
        """On cancellation: the value offered but never received (the caller undoes it), or None."""
        with self._lock:
            self._abandoned = True
            value, self._value = self._value, None
            return value

    def abandoned(self) -> bool:
        """True once the coroutine was cancelled (the worker may stop waiting)."""
        return self._abandoned


@contextlib.asynccontextmanager
async def open(path: str | os.PathLike[str], *, executor: Executor | None = None,  # noqa: A001 - mirrors mqlite.open
               **config: Any) -> AsyncIterator[Broker]:
    """`async with mqlite.aio.open(path, **config) as broker:` opens and closes a `Broker` off the loop.

    Opening (lock, recovery, services) and closing (ordered shutdown, flush)
    run on `executor`. The broker's own methods are the blocking ones of
    `mqlite.Broker`; its admin calls are in-memory and quick.
    """
    loop = asyncio.get_running_loop()
    handoff: _Handoff[Broker] = _Handoff()

    def open_on_thread() -> Broker:
        broker = open_broker(path, **config)  # which checks the path (MQClientError)
        if not handoff.offer(broker):
            broker.close()  # the caller was cancelled while the store opened
        return broker

    try:
        broker = await loop.run_in_executor(executor, open_on_thread)
    except asyncio.CancelledError:
        opened = handoff.abandon()
        if opened is not None:
            loop.run_in_executor(executor, opened.close)  # not awaited: this task is being cancelled
        raise
    try:
        yield broker
    finally:
        await _run(executor, broker.close)


def _message_list(msgs: Iterable[Message]) -> list[Message]:
    try:
        return list(msgs)
    except TypeError:
        raise MQClientError(f"send_batch takes an iterable of Message, got {type(msgs).__name__}") from None


class Producer:
    """`mqlite.Producer` for asyncio: `async with`, `await send(...)`, `await send_batch(...)`.

    The keywords are `mqlite.Producer`'s, with its defaults (RocketMQ's: a
    3 s `send_msg_timeout`, bodies over 4 KiB compressed, 4 send threads ...);
    `executor` runs `start`, `shutdown` and `send_batch` (None: the loop's
    default executor). Sends run on the producer's
    send pool (`async_thread_nums` threads, joined by `shutdown`); a send waits
    for the store there, never on the loop. Under SYNC_FLUSH on a local store the
    loop's thread appends the message (microseconds, as `Producer.send_async`;
    a segment roll maps a new file) and awaits the group commit that makes it durable.
    """

    def __init__(self, broker: BrokerLike, group: str = DEFAULT_PRODUCER_GROUP, *,
                 send_msg_timeout: float = 3.0, compress_msg_body_over_howmuch: int = COMPRESS_MSG_BODY_OVER_HOWMUCH,
                 default_topic_queue_nums: int = 4, async_thread_nums: int = 4,
                 max_message_size: int | None = None, trace: bool = False,
                 executor: Executor | None = None) -> None:
        self.sync = _Producer(broker, group, send_msg_timeout=send_msg_timeout,
                              compress_msg_body_over_howmuch=compress_msg_body_over_howmuch,
                              default_topic_queue_nums=default_topic_queue_nums, async_thread_nums=async_thread_nums,
                              max_message_size=max_message_size, trace=trace)
        self._executor = executor
        self._completions: _Completions | None = None  # for the running loop (send_async)

    async def start(self) -> None:
        """Start the producer (opens the broker when given a path)."""
        await _run(self._executor, self.sync.start)

    async def shutdown(self) -> None:
        """Finish the sends in flight, then shut the producer down. Idempotent."""
        await _run(self._executor, self.sync.shutdown)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def send_async(self, msg: Message, selector: MessageQueueSelector | None = None, arg: Any = None, *,
                   queue: MessageQueue | None = None) -> asyncio.Future[SendResult]:
        """Start sending now; the returned future completes with the `SendResult`.

        Bad input raises `MQClientError` here, before anything is queued. Start
        many sends and `asyncio.gather` them to keep the send pool busy. Call it
        from a coroutine (the future belongs to the running loop).
        """
        loop = asyncio.get_running_loop()
        future = self.sync.send_async(msg, selector=selector, arg=arg, queue=queue)
        completions = self._completions
        if completions is None or completions.loop is not loop:
            completions = self._completions = _Completions(loop)
        return completions.bridge(future)

    async def send(self, msg: Message, selector: MessageQueueSelector | None = None, arg: Any = None, *,
                   queue: MessageQueue | None = None) -> SendResult:
        """Send and wait until stored (`Producer.send`'s contract); see the module notes on cancellation."""
        return await self.send_async(msg, selector, arg, queue=queue)

    async def send_batch(self, msgs: Iterable[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic together (`Producer.send_batch`), on the executor."""
        batch = _message_list(msgs)
        return await _run(self._executor, functools.partial(self.sync.send_batch, batch, queue=queue))

    async def send_oneway(self, msg: Message, selector: MessageQueueSelector | None = None, arg: Any = None, *,
                          queue: MessageQueue | None = None) -> None:
        """Queue a send and return at once (`Producer.send_oneway`: failures are only logged)."""
        self.sync.send_oneway(msg, selector, arg, queue=queue)

    def __repr__(self) -> str:
        return f"<mqlite.aio.Producer {self.sync!r}>"


class LitePullConsumer:
    """`mqlite.LitePullConsumer` for asyncio: `await poll()`, `async for msg in consumer`, `await commit_sync()`.

    The keywords are `mqlite.LitePullConsumer`'s, with its defaults (`auto_commit`,
    `poll_timeout`, `consumer_timeout`, ...: RocketMQ's, in seconds); `executor`
    runs the waiting polls, `start`, `shutdown` and `commit_sync` (None: the
    loop's default executor). `subscribe`/`assign` return at
    once; the other blocking methods are on `.sync` (seek, pause, committed...).
    Several tasks may poll one consumer; each waiting poll holds one executor
    thread. Cancelling a poll loses nothing (module notes).
    """

    def __init__(self, broker: BrokerLike, group: str, *,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0, pull_batch_size: int = 10,
                 poll_timeout: float = 5.0, consumer_timeout: float | None = None,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | int | None = None,
                 allocate_strategy: AllocateMessageQueueStrategy | None = None,
                 client_id: str | None = None,
                 pull_threshold_for_all: int = 10000, pull_threshold_for_queue: int = 1000,
                 pull_threshold_size_for_queue: int = 100, consume_max_span: int = 2000,
                 long_polling_wait: float = LITE_LONG_POLLING_WAIT,
                 offset_store_dir: str | None = None, trace: bool = False,
                 executor: Executor | None = None) -> None:
        self.sync = _LitePullConsumer(
            broker, group, auto_commit=auto_commit, auto_commit_interval=auto_commit_interval,
            pull_batch_size=pull_batch_size, poll_timeout=poll_timeout, consumer_timeout=consumer_timeout,
            message_model=message_model, consume_from_where=consume_from_where, consume_timestamp=consume_timestamp,
            allocate_strategy=allocate_strategy, client_id=client_id, pull_threshold_for_all=pull_threshold_for_all,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue, consume_max_span=consume_max_span,
            long_polling_wait=long_polling_wait, offset_store_dir=offset_store_dir, trace=trace)
        self._executor = executor
        # Messages of the batch `async for` is in, taken but not handed out yet (see __anext__).
        self._rest: tuple[ConsumeRequest, list[MessageExt]] | None = None

    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*") -> None:
        """`LitePullConsumer.subscribe` (returns at once; queues are rebalanced on the pull thread)."""
        self.sync.subscribe(topic, expression)

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """`LitePullConsumer.assign`: consume exactly these queues."""
        self.sync.assign(message_queues)

    async def start(self) -> None:
        """Join the group and start the pull thread."""
        await _run(self._executor, self.sync.start)

    async def shutdown(self) -> None:
        """`LitePullConsumer.shutdown`: waiting polls return `[]`; with `auto_commit`, commits what was handed out."""
        self._rest = None  # never handed out, so never committed: the group gets them again
        await _run(self._executor, self.sync.shutdown)

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next pull result's messages, or `[]` after `timeout` seconds (default `poll_timeout`).

        `LitePullConsumer.poll`'s contract (auto-commit first, one queue per
        result); the rest of a batch `async for` stopped in comes first.
        """
        sync = self.sync
        sync.check_running()  # raises IllegalStateError before start or after shutdown
        wait = sync.poll_timeout if timeout is None else timeout
        if not isinstance(wait, (int, float)) or isinstance(wait, bool) or wait < 0:
            raise MQClientError(f"Timeout must not be negative: poll(timeout) takes seconds >= 0, got {timeout!r}")
        if self._rest is not None:
            batch, rest = self._rest
            self._rest = None
            if sync.hand_out(batch, rest):
                return rest
        request = await self._take(float(wait))
        if request is None:
            return []
        sync.hand_out(request, request.msgs)
        return request.msgs

    async def commit_sync(self, offsets: Mapping[MessageQueue, int] | None = None, persist: bool = True) -> None:
        """`LitePullConsumer.commit_sync`: what was handed out, or the explicit `offsets`."""
        await _run(self._executor, functools.partial(self.sync.commit_sync, offsets, persist))

    def __aiter__(self) -> LitePullConsumer:
        return self

    async def __anext__(self) -> MessageExt:
        """The next message; stops after `consumer_timeout` seconds without one (None: at shutdown).

        A message counts as handed out when it is returned, so leaving the loop
        early leaves the rest of its batch for the next `poll` or iteration.
        """
        sync = self.sync
        loop = asyncio.get_running_loop()
        idle_until = None if sync.consumer_timeout is None else loop.time() + sync.consumer_timeout
        while sync.running:
            if self._rest is not None:
                batch, msgs = self._rest
                self._rest = (batch, msgs[1:]) if len(msgs) > 1 else None
                if sync.hand_out(batch, msgs[:1]):
                    return msgs[0]
                self._rest = None  # seeked or given up meanwhile: the rest of the batch is stale
                continue
            wait = max(sync.poll_timeout, 0.1)
            if idle_until is not None:
                wait = min(wait, idle_until - loop.time())
                if wait <= 0:
                    break
            request = await self._take(wait)
            if request is not None:
                self._rest = (request, list(request.msgs))
        raise StopAsyncIteration

    async def _take(self, timeout: float) -> ConsumeRequest | None:
        """The next pull result, taken on a thread but not handed out; put back if this call is cancelled.

        Uses the take / hand-out split of `LitePullConsumer` (`take`, `hand_out`,
        `give_back`: the one its own iterator uses), so the consume offset only
        moves past messages a live caller receives.
        """
        sync = self.sync
        handoff: _Handoff[ConsumeRequest] = _Handoff()

        def take_on_thread() -> ConsumeRequest | None:
            sync.commit_if_due()  # what poll() does before it waits
            request = sync.take(timeout, handoff.abandoned)
            if request is not None and not handoff.offer(request):
                sync.give_back(request, request.msgs)  # the caller was cancelled while we waited
            return request

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, take_on_thread)
        except asyncio.CancelledError:
            taken = handoff.abandon()
            if taken is not None:  # taken, but this task was cancelled before it resumed
                sync.give_back(taken, taken.msgs)
            else:  # still waiting: end the wait now rather than hold an executor thread until timeout
                sync.wake_takers()
            raise

    def __repr__(self) -> str:
        return f"<mqlite.aio.LitePullConsumer {self.sync!r}>"


class PushConsumer:
    """`mqlite.PushConsumer` whose listener is a coroutine function, run on your event loop.

    `start()` must be awaited on the loop that is to run the listener. Each
    batch is consumed by `asyncio.run_coroutine_threadsafe(listener(msgs,
    context), loop)` from a consume thread, which waits for the coroutine's
    status: statuses, retries, ordering and offsets are exactly
    `mqlite.PushConsumer`'s (a raised exception means RECONSUME_LATER, or
    SUSPEND_CURRENT_QUEUE_A_MOMENT when orderly).

    The trade-off: at most `consume_thread_nums` listener coroutines run at
    once, each holding a consume thread while it awaits; they all share the
    loop, so a listener that blocks instead of awaiting stalls every one of them
    and the rest of your program. Shut the consumer down with
    `await consumer.shutdown()` (or `async with`) before the loop ends: a
    blocking `shutdown()` on the loop thread would wait for listeners that need
    that very loop. A listener still waiting when the loop is gone fails after
    `consume_timeout` and is retried.

    The keywords are `mqlite.PushConsumer`'s, with its defaults (RocketMQ's,
    in seconds), but `listener` is a coroutine function (or
    `register_message_listener` later); `executor` runs `start`, `shutdown`
    and `join` (None: the loop's default executor).
    """

    def __init__(self, broker: BrokerLike, group: str, *,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | int | None = None,
                 allocate_strategy: AllocateMessageQueueStrategy | None = None,
                 client_id: str | None = None,
                 consume_thread_nums: int = 20, consume_message_batch_max_size: int = 1, pull_batch_size: int = 32,
                 pull_threshold_for_queue: int = 1000, pull_threshold_size_for_queue: int = 100,
                 consume_concurrently_max_span: int = 2000, max_reconsume_times: int = -1,
                 suspend_current_queue_time: float = 1.0, consume_timeout: float = 900.0,
                 pull_interval: float = 0.0, long_polling_wait: float = PUSH_LONG_POLLING_WAIT,
                 subscription: Mapping[str, MessageSelector | str | None] | None = None,
                 listener: AsyncMessageListener | None = None, orderly: bool = False,
                 offset_store_dir: str | None = None, trace: bool = False,
                 executor: Executor | None = None) -> None:
        self.sync = _PushConsumer(
            broker, group, message_model=message_model, consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp, allocate_strategy=allocate_strategy, client_id=client_id,
            consume_thread_nums=consume_thread_nums, consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size, pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            consume_concurrently_max_span=consume_concurrently_max_span, max_reconsume_times=max_reconsume_times,
            suspend_current_queue_time=suspend_current_queue_time, consume_timeout=consume_timeout,
            pull_interval=pull_interval, long_polling_wait=long_polling_wait, subscription=subscription,
            offset_store_dir=offset_store_dir, trace=trace)
        self._executor = executor
        self._listener: AsyncMessageListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if listener is not None:
            self.register_message_listener(listener, orderly=orderly)

    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*") -> None:
        """`PushConsumer.subscribe` (before or after start)."""
        self.sync.subscribe(topic, expression)

    def register_message_listener(self, listener: AsyncMessageListener, *, orderly: bool = False) -> None:
        """Set the coroutine function `async (msgs, context) -> status`; before `start()`."""
        if not (inspect.iscoroutinefunction(listener)
                or inspect.iscoroutinefunction(getattr(listener, "__call__", None))):
            raise MQClientError(f"listener must be a coroutine function (async def), got {listener!r}; "
                                "use mqlite.PushConsumer for a plain function")
        self.sync.register_message_listener(self._consume, orderly=orderly)
        self._listener = listener

    def _consume(self, msgs: list[MessageExt], context: ConsumeConcurrentlyContext | ConsumeOrderlyContext) -> Any:
        """The blocking listener the consume threads call: runs the coroutine on the loop and waits for it."""
        loop, listener = self._loop, self._listener
        if loop is None or listener is None:
            raise IllegalStateError("the async listener has no event loop: await consumer.start() on it")
        coroutine = listener(msgs, context)
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError:  # the loop is closed
            coroutine.close()  # no 'never awaited' warning
            raise
        try:
            return future.result(self.sync.consume_timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def start(self) -> None:
        """Start consuming; the listener runs on the loop that awaits this."""
        self._loop = asyncio.get_running_loop()
        await _run(self._executor, self.sync.start)

    async def shutdown(self) -> None:
        """Stop pulling, let the listeners in flight finish (on this loop), commit, leave the group."""
        await _run(self._executor, self.sync.shutdown)

    async def join(self, timeout: float | None = None) -> bool:
        """`PushConsumer.join`: True once everything readable now is consumed and committed."""
        return await _run(self._executor, functools.partial(self.sync.join, timeout))

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def __repr__(self) -> str:
        return f"<mqlite.aio.PushConsumer {self.sync!r}>"
