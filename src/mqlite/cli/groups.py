"""Consumer-group commands: consumerProgress, resetOffsetByTime, skipAccumulatedMessage.

A read-only run sees the offsets a live writer last persisted (every
`flush_consumer_offset_interval` seconds, 5 by default) and no client ids;
over `-n` the serving process's live offsets.
"""

from __future__ import annotations

import argparse
import dataclasses

from .. import admin
from ..admin import AdminSurface, OffsetTable
from ..message import MessageQueue
from .checks import queue_of, require_topic
from .context import Context, UsageError
from .output import Column, Report, Row, human_time

__all__ = ["consumer_progress", "reset_offset_by_time", "skip_accumulated_message"]

_RESET_COLUMNS = (Column("#brokerName", "broker_name"), Column("#queueId", "queue_id"), Column("#offset", "offset"))


def consumer_progress(ctx: Context, args: argparse.Namespace) -> Report:
    """Show a consumer group's progress per queue (-g), or list every group with its total diff.

    Offsets are the ones a live writer last persisted (every 5 s by default);
    client ids are known only inside the writer's process. Over `-n`: the
    serving process's offsets (`GET_CONSUME_STATS` per group, as mqadmin; the
    groups from `GET_ALL_CONSUMER_OFFSET` and the retry and dead-letter topics).
    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()
    table = ctx.offset_table()
    if args.group is None:
        return _all_groups(broker, table)
    if not admin.group_exists(broker, args.group, table):
        # Read from the path, the offsets are the ones last persisted; a serving process has its live ones.
        lag = "" if ctx.address else " (a live writer persists new offsets every few seconds)"
        raise UsageError(f"consumer group {args.group!r} has no offsets, retry or dead-letter topic in "
                         f"{broker.path}{lag}")
    if args.topic is not None:
        require_topic(broker, args.topic)
    rows: list[Row] = [{**dataclasses.asdict(p), "diff": p.diff}
                       for p in admin.consumer_progress(broker, args.group, args.topic, offsets=table)]
    return Report(rows, columns=[
        Column("#Topic", "topic"), Column("#Broker Name", "broker_name"), Column("#QID", "queue_id"),
        Column("#Broker Offset", "broker_offset"), Column("#Consumer Offset", "consumer_offset"),
        Column("#Client IP", "client_id", lambda cid: cid or "N/A"), Column("#Diff", "diff"),
        Column("#LastTime", "last_timestamp", human_time),
    ], footer=lambda: ["", f"Consume Diff Total: {sum(r['diff'] for r in rows)}"])


def _all_groups(broker: AdminSurface, table: OffsetTable) -> Report:
    rows = [{"group": g, "diff_total": sum(p.diff for p in admin.consumer_progress(broker, g, offsets=table))}
            for g in admin.consumer_groups(broker, table)]
    return Report(rows, columns=[Column("#Group", "group"), Column("#Diff Total", "diff_total")])


def _reset_rows(table: dict[MessageQueue, int]) -> list[Row]:
    return [{"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id, "offset": offset}
            for mq, offset in sorted(table.items())]


def reset_offset_by_time(ctx: Context, args: argparse.Namespace) -> Report:
    """Move a group's offsets on a topic to the first message stored at or after a time.

    With -q only that queue moves, to -o OFFSET when given.
    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    """
    if args.offset is not None and args.queue_id is None:
        raise UsageError("-o needs -q: an offset belongs to one queue")
    if args.timestamp is None and args.offset is None:
        raise UsageError("give the time to reset to with -s (or -q QID -o OFFSET for one queue)")
    broker = ctx.admin(write=True)
    require_topic(broker, args.topic)
    if args.queue_id is None:
        table = broker.reset_offset_by_time(args.group, args.topic, args.timestamp)
    else:
        mq = queue_of(broker, args.topic, args.queue_id)
        if args.offset is None:
            offset = broker.search_offset(mq, args.timestamp)
        else:
            offset = _check_offset(broker, mq, args.offset)
        broker.commit_offset(args.group, mq, offset)
        table = {mq: offset}
    return Report(_reset_rows(table), columns=_RESET_COLUMNS, header=[
        f"reset consumer offset, group[{args.group}], topic[{args.topic}], timestamp[{args.timestamp}]"])


def _check_offset(broker: AdminSurface, mq: MessageQueue, offset: int) -> int:
    """`offset` if a consumer of `mq` could stand there (min to max offset, the end included); `UsageError` if not."""
    low, high = broker.min_offset(mq), broker.max_offset(mq)
    if not low <= offset <= high:
        raise UsageError(f"offset {offset} is outside queue {mq.queue_id} of {mq.topic!r}: give -o in "
                         f"[{low}, {high}] (its min and max offset)")
    return offset


def skip_accumulated_message(ctx: Context, args: argparse.Namespace) -> Report:
    """Skip a group's backlog on a topic: its offsets move to the end of each queue.

    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    """
    broker = ctx.admin(write=True)
    require_topic(broker, args.topic)
    return Report(_reset_rows(broker.reset_offset_by_time(args.group, args.topic, -1)), columns=_RESET_COLUMNS)
