"""`PULL_MESSAGE`: RocketMQ's `PullMessageProcessor` with long polling, over `Broker.pull`.

The request names a group, a queue and an offset; its `sysFlag` says whether it carries the
consumer's committed offset (bit 0: committed before reading, as RocketMQ does), whether it may be
suspended (bit 1) and whether it carries its subscription (bit 2; without it the subscription comes
from the group's heartbeat, which is how RocketMQ's push consumer pulls).

The response's body is the stored records, copied from the mapped commit log as they lie (no
decoding, no re-encoding); its header carries `nextBeginOffset`, `minOffset`, `maxOffset` and
`suggestWhichBrokerId` (0: this broker is the master). Status codes as `PullMessageProcessor`:

| store read | response |
|---|---|
| FOUND | SUCCESS |
| no matched message, message was removing | PULL_RETRY_IMMEDIATELY |
| offset at the end (nothing new) | PULL_NOT_FOUND, after parking when the request may be suspended |
| offset too small / too big, empty queue at an offset above 0 | PULL_OFFSET_MOVED |

A pull that finds nothing and may be suspended parks on the broker's arrival hub as a pending
response on the event loop (RocketMQ's `PullRequestHoldService`), not on a thread: the hub's
waker schedules a wake-up on the loop, which reads again, for up to `suspendTimeoutMillis`.
"""

from __future__ import annotations

import asyncio

from ..record import stored_record
from ..errors import FilterError, MQClientError
from ..filter import MessageSelector
from ..longpoll import PullResult, PullStatus
from ..message import MessageQueue
from .handlers import NAME_MAX, Mode, Request, RequestError, handles
from .codes import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND, RequestCode, ResponseCode
from .frames import RemotingCommand

__all__ = ["FLAG_COMMIT_OFFSET", "FLAG_SUSPEND", "FLAG_SUBSCRIPTION", "MAX_SUSPEND_MS", "MAX_TRANSFER_BYTES"]

#: Longest suspension: a longer request is held this long (RocketMQ's clients ask 15 s for push, 20-30 s
#: for lite pull), so a pull whose client went away does not linger.
MAX_SUSPEND_MS = 60_000
_MAX_NUMS = 1024
#: `maxTransferBytesOnMessageInMemory`: a pull reads (and its response carries) at most this many bytes of
#: records (and at least one record), so it stays far below the clients' 16 MiB frame limit.
MAX_TRANSFER_BYTES = 256 * 1024

_FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
_CODES = {PullStatus.FOUND: ResponseCode.SUCCESS, PullStatus.NO_MATCHED_MSG: ResponseCode.PULL_RETRY_IMMEDIATELY,
          PullStatus.NO_NEW_MSG: ResponseCode.PULL_NOT_FOUND, PullStatus.OFFSET_ILLEGAL: ResponseCode.PULL_OFFSET_MOVED}


class _LoopWaker:
    """A hub waker that wakes a coroutine on the server's loop (`set` runs on the putting thread)."""

    __slots__ = ("loop", "event")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()

    def set(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:
            pass  # the loop closed: the pull was answered already


def _selector(request: Request, group: str, topic: str, sys_flag: int) -> MessageSelector | None:
    h = request.header
    if sys_flag & FLAG_SUBSCRIPTION:
        expression = h.text("subscription", "*")
        kind = h.text("expressionType", "TAG")
    else:
        found = request.server.clients.subscription(group, topic)
        if found is None:
            if request.broker.consumer_ids(group):
                return None  # a member in this process (or one without this topic): read everything
            raise RequestError(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                               f"the consumer's group info not exist{_FAQ}")
        kind, expression, version = found
        if version < h.int64("subVersion", 0):  # the client subscribed anew; its heartbeat has not come yet
            raise RequestError(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    if kind.upper() == "TAG" and expression.strip() in ("", "*"):
        return None
    try:
        return MessageSelector(kind.upper(), expression)
    except (FilterError, MQClientError) as exc:
        raise RequestError(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                           f"parse the consumer's subscription[{expression}] failed, group: {group}: {exc}") from None


def _queue(request: Request) -> MessageQueue:
    """The queue, checked as `PullMessageProcessor` checks it (topic exists, readable, queue id in range)."""
    broker = request.broker
    mq = request.header.queue(broker.broker_name)
    queues = broker.fetch_subscribe_queues(mq.topic)
    if not queues:
        config = broker.topic_config(mq.topic)
        if config is None:
            raise RequestError(ResponseCode.TOPIC_NOT_EXIST,
                               f"topic[{mq.topic}] not exist, apply first please!")
        raise RequestError(ResponseCode.NO_PERMISSION, f"the topic[{mq.topic}] pulling message is forbidden")
    if mq.queue_id >= len(queues):
        raise RequestError(ResponseCode.SYSTEM_ERROR,
                           f"queueId[{mq.queue_id}] is illegal, topic:[{mq.topic}] topicConfig.readQueueNums:"
                           f"[{len(queues)}] consumer:[{request.peer.remote_address}]")
    return mq


@handles(RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, mode=Mode.ASYNC)
async def pull_message(request: Request) -> RemotingCommand | None:
    """Read from a queue; park when nothing is there and the request may be suspended.

    `LITE_PULL_MESSAGE` (5.0.0's `DefaultLitePullConsumer`) is the same request."""
    h, broker = request.header, request.broker
    group = h.text("consumerGroup", max_length=NAME_MAX)
    mq = _queue(request)
    offset = h.int64("queueOffset")
    max_nums = min(h.int32("maxMsgNums", low=1), _MAX_NUMS)
    sys_flag = h.int32("sysFlag", 0)
    suspend_ms = min(h.int64("suspendTimeoutMillis", 0, low=0), MAX_SUSPEND_MS) if sys_flag & FLAG_SUSPEND else 0
    selector = _selector(request, group, mq.topic, sys_flag)
    if sys_flag & FLAG_COMMIT_OFFSET:
        commit = h.int64("commitOffset", -1)
        if commit >= 0:
            broker.commit_offset(group, mq, commit)
    # The store stops reading at the budget: a pull never copies more than it answers (on the loop thread).
    max_bytes = min(h.int32("maxMsgBytes", MAX_TRANSFER_BYTES, low=1), MAX_TRANSFER_BYTES)
    result = broker.pull(group, mq, offset, max_nums, selector, max_bytes=max_bytes)
    if result.pull_status is PullStatus.NO_NEW_MSG and suspend_ms > 0 and not request.server.closing:
        result = await _park(request, group, mq, result, max_nums, selector, suspend_ms / 1000, max_bytes)
    return _response(request, result)


async def _park(request: Request, group: str, mq: MessageQueue, result: PullResult, max_nums: int,
                selector: MessageSelector | None, wait: float, max_bytes: int) -> PullResult:
    """Wait on the arrival hub until the queue has something for this pull, or `wait` seconds pass."""
    broker, server = request.broker, request.server
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    waker = _LoopWaker(loop)
    key = ((mq.topic, mq.queue_id),)
    offset = result.next_begin_offset
    if not server.park(waker, request.peer):
        return result  # past the caps on parked pulls: PULL_NOT_FOUND now, as without long polling
    broker.watch_arrivals(waker, key)
    try:
        while True:
            # Registered before this check: an arrival after it sets the event.
            if broker.max_offset(mq) > offset:
                found = broker.pull(group, mq, offset, max_nums, selector, max_bytes=max_bytes)
                if found.pull_status is PullStatus.NO_MATCHED_MSG and found.next_begin_offset > offset:
                    offset = found.next_begin_offset  # nothing for this subscription: park on from there
                    result = PullResult(PullStatus.NO_NEW_MSG, offset, found.min_offset, found.max_offset, [])
                    continue
                if found.pull_status is not PullStatus.NO_NEW_MSG:
                    return found
                result = found
            remaining = deadline - loop.time()
            if remaining <= 0 or server.closing:
                return result
            waker.event.clear()
            try:
                await asyncio.wait_for(waker.event.wait(), remaining)
            except TimeoutError:
                pass
    finally:
        server.unpark(waker, request.peer)
        broker.unwatch_arrivals(waker, key)


def _response(request: Request, result: PullResult) -> RemotingCommand:
    body = None
    if result.pull_status is PullStatus.FOUND:
        records = [stored_record(msg) for msg in result.msg_found_list]
        if None in records:  # a store hands out records only; anything else is a bug here
            raise RequestError(ResponseCode.SYSTEM_ERROR, "a pulled message has no stored record")
        body = b"".join(records)  # type: ignore[arg-type]
    fields = {"suggestWhichBrokerId": 0, "nextBeginOffset": result.next_begin_offset, "minOffset": result.min_offset,
              "maxOffset": result.max_offset, "topicSysFlag": 0, "groupSysFlag": 0}
    return request.reply(_CODES[result.pull_status], fields, body, _remark(result))


def _remark(result: PullResult) -> str:
    """The store's `GetMessageStatus` name, which RocketMQ's broker puts in the remark."""
    status = result.pull_status
    if status is PullStatus.FOUND:
        return "FOUND"
    if status is PullStatus.NO_MATCHED_MSG:
        return "NO_MATCHED_MESSAGE"
    if status is PullStatus.NO_NEW_MSG:
        return "NO_MESSAGE_IN_QUEUE" if result.max_offset == 0 else "OFFSET_OVERFLOW_ONE"
    return "OFFSET_TOO_SMALL" if result.next_begin_offset == result.min_offset else "OFFSET_OVERFLOW_BADLY"
