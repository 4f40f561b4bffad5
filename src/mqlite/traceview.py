"""What a message's trace says: `TraceView` records in causal order and `MessageTrack` per group.

The admin side of message trace (`Broker.query_trace`, `Broker.message_track`,
`mqlite queryMsgTraceById`), over the records `mqlite.trace` writes: RocketMQ's
`TraceView.decodeFromTraceTransData` and `DefaultMQAdminExtImpl.messageTrackDetail`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .groups import GroupMember
from .message import MessageExt
from .offsetfile import TOPIC_GROUP_SEPARATOR
from .trace import ConsumeReturnType, TraceContext, TraceType, decode_trace_data

__all__ = ["TraceView", "trace_views", "TrackType", "MessageTrack", "track_message"]


@dataclass(frozen=True, slots=True)
class TraceView:
    """One trace record of one message (RocketMQ's `TraceView`), as `Broker.query_trace` returns it.

    `msg_type` is the record type (`Pub`, `SubBefore`, `SubAfter`,
    `EndTransaction`); `status` is `success` or `failed`; `client_host` is the
    host that wrote the record; `born_time` is when the trace message carrying
    it was written (RocketMQ leaves it 0). Missing tags and keys are "". The
    last three fields are mqlite's: the reconsume count of a SubBefore, the
    `ConsumeReturnType` name of a SubAfter and the state of an EndTransaction.
    Every field is a str or an int, so `dataclasses.asdict(view)` is JSON-ready.
    """

    msg_id: str
    tags: str
    keys: str
    store_host: str
    client_host: str
    cost_time: int
    msg_type: str
    offset_msg_id: str
    time_stamp: int
    born_time: int
    topic: str
    group_name: str
    status: str
    retry_times: int = 0
    consume_return_type: str = ""
    transaction_state: str = ""


def _host_of(address: str) -> str:
    """`getBornHostString()`: the address without its port."""
    return address.rpartition(":")[0] or address


def _return_type_name(ctx: TraceContext) -> str:
    if ctx.trace_type is not TraceType.SubAfter:
        return ""
    try:
        return ConsumeReturnType(ctx.context_code).name
    except ValueError:
        return str(ctx.context_code)


def trace_views(msg_id: str, trace_messages: Iterable[MessageExt]) -> list[TraceView]:
    """`TraceView.decodeFromTraceTransData` over trace messages: the records of `msg_id`, in causal order.

    Time stamps alone cannot order them: a failing listener and the retry it causes
    share a millisecond, and under a test's stopped clock everything does. So the order
    is by consume round, then by step within it (the send and the transaction's end,
    consume start, consume end, the retry or dead-letter copy), then by time and
    storage. A SubBefore's round is its retry count; a SubAfter belongs to the
    SubBefore before it in the same trace message; the k-th copy a group sent back
    follows the k-th failed consume of that group.
    """
    rows: list[list[Any]] = []  # [round, step, time, offset, position, view]
    for message in trace_messages:
        client_host = _host_of(message.born_host)
        text = message.body.decode("utf-8", errors="replace")
        round_ = 0
        for position, ctx in enumerate(decode_trace_data(text)):
            bean = ctx.beans[0]
            if bean.msg_id != msg_id:
                continue
            view = TraceView(bean.msg_id, bean.tags or "", bean.keys or "", bean.store_host, client_host,
                             ctx.cost_time, ctx.trace_type.value, bean.offset_msg_id, ctx.time_stamp,
                             message.born_timestamp, bean.topic, ctx.group_name,
                             "success" if ctx.success else "failed", bean.retry_times, _return_type_name(ctx),
                             bean.transaction_state)
            if view.msg_type == "SubBefore":
                round_ = view.retry_times
            step = _step(view)
            rows.append([round_ if step in (2, 3) else 0, step, ctx.time_stamp, message.commit_log_offset,
                         position, view])
    failed: dict[str, list[int]] = {}
    for row in sorted(rows, key=lambda r: r[:5]):
        if row[1] == 3 and row[5].status == "failed":
            failed.setdefault(row[5].group_name, []).append(row[0])
    copies: dict[str, int] = {}
    for row in sorted((r for r in rows if r[1] == 4), key=lambda r: r[2:5]):
        rounds = failed.get(row[5].group_name, [])
        k = copies[row[5].group_name] = copies.get(row[5].group_name, -1) + 1
        row[0] = rounds[min(k, len(rounds) - 1)] if rounds else 0
    rows.sort(key=lambda r: r[:5])
    return [row[5] for row in rows]


def _step(view: TraceView) -> int:
    """Where a record comes in one consume round (see `trace_views`)."""
    if view.msg_type == "Pub":
        return 4 if view.topic.startswith(("%RETRY%", "%DLQ%")) else 0
    return {"EndTransaction": 1, "SubBefore": 2, "SubAfter": 3}.get(view.msg_type, 5)


class TrackType(enum.StrEnum):
    """`TrackType` of RocketMQ's admin tools: where a message stands for one consumer group."""

    CONSUMED = "CONSUMED"
    CONSUMED_BUT_FILTERED = "CONSUMED_BUT_FILTERED"
    PULL = "PULL"
    NOT_CONSUME_YET = "NOT_CONSUME_YET"
    NOT_ONLINE = "NOT_ONLINE"
    CONSUME_BROADCASTING = "CONSUME_BROADCASTING"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class MessageTrack:
    """One group's view of a message (RocketMQ's `MessageTrack`); `track_type` is a str enum (JSON-ready)."""

    consumer_group: str
    track_type: TrackType
    exception_desc: str = ""


def track_message(msg: MessageExt, offset_table: Mapping[str, Mapping[int, int]],
                  members: Mapping[str, Sequence[GroupMember]] | None) -> list[MessageTrack]:
    """`DefaultMQAdminExtImpl.messageTrackDetail` for `msg`, one row per group, sorted by group.

    `offset_table` is the broker's committed offsets (`topic@group` -> queue
    id -> offset); `members` the live consumers of each group, or None when
    they cannot be known (a read-only broker in another process). The groups
    are those with offsets on the message's topic and the live ones
    subscribed to it. RocketMQ's rules: a group with no live member is
    NOT_ONLINE; a pulling (lite-pull) group is PULL; a broadcasting one
    CONSUME_BROADCASTING; otherwise CONSUMED when the committed offset of the
    message's queue is past its queue offset (CONSUMED_BUT_FILTERED when the
    subscription does not match it), else NOT_CONSUME_YET. Without `members`,
    every group is judged by its committed offset alone.
    """
    prefix = msg.topic + TOPIC_GROUP_SEPARATOR
    committed = {key[len(prefix):]: queues.get(msg.queue_id, -1) for key, queues in offset_table.items()
                 if key.startswith(prefix)}
    groups = set(committed)
    if members is not None:
        groups |= {g for g, live in members.items()
                   if any(msg.topic in m.subscribed_topics() for m in live)}
    tracks = []
    for group in sorted(groups):
        offset = committed.get(group, -1)
        consumed = offset > msg.queue_offset
        live = None if members is None else members.get(group, ())
        if live is None:
            track = MessageTrack(group, TrackType.CONSUMED if consumed else TrackType.NOT_CONSUME_YET)
        elif not live:
            track = MessageTrack(group, TrackType.NOT_ONLINE,
                                 f"CODE:206 DESC:the consumer group[{group}] not online "
                                 f"(committed offset {offset}, message queue offset {msg.queue_offset})")
        elif any(getattr(m, "consume_type", "") == "CONSUME_ACTIVELY" for m in live):
            track = MessageTrack(group, TrackType.PULL)
        elif not all(getattr(m, "clustering", True) for m in live):
            track = MessageTrack(group, TrackType.CONSUME_BROADCASTING)
        elif consumed:
            filtered = any(not _subscription_matches(m, msg) for m in live)
            track = MessageTrack(group, TrackType.CONSUMED_BUT_FILTERED if filtered else TrackType.CONSUMED)
        else:
            track = MessageTrack(group, TrackType.NOT_CONSUME_YET)
        tracks.append(track)
    return tracks


def _subscription_matches(member: object, msg: MessageExt) -> bool:
    """Whether `member`'s subscription of the message's topic selects it (True when it has none)."""
    subscription = getattr(member, "subscription", None)
    selector = subscription(msg.topic) if subscription is not None else None
    return selector is None or bool(selector.matches(msg.properties))
