"""Topic commands: topicList, topicStatus, updateTopic, deleteTopic."""

from __future__ import annotations

import argparse
import dataclasses

from ..topics import PERM_INHERIT, PERM_READ, PERM_WRITE
from .checks import require_topic
from .context import Context
from .output import Column, Report, Row, human_time_ms

__all__ = ["topic_list", "topic_status", "update_topic", "delete_topic"]

#: mqadmin updateTopic's default queue counts.
DEFAULT_QUEUE_NUMS = 8


def topic_list(ctx: Context, args: argparse.Namespace) -> Report:
    """List every topic, retry, dead-letter and system topics included, one a line.

    Reads the store read-only: works beside a live writer.
    """
    return Report(({"topic": t} for t in ctx.reader().topic_list()), line=lambda row: row["topic"])


def topic_status(ctx: Context, args: argparse.Namespace) -> Report:
    """Show per queue of a topic the min and max offsets and the store time of its newest message.

    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.reader()
    require_topic(broker, args.topic)
    rows = [{"topic": args.topic, "broker_name": broker.broker_name, **dataclasses.asdict(status)}
            for status in broker.topic_status(args.topic)]
    return Report(rows, columns=[
        Column("#Broker Name", "broker_name"), Column("#QID", "queue_id"), Column("#Min Offset", "min_offset"),
        Column("#Max Offset", "max_offset"),
        Column("#Last Updated", "last_update_timestamp", lambda ms: human_time_ms(ms) if ms > 0 else "")])


def _perm_string(perm: int) -> str:
    """`PermName.perm2String`: `RW-`."""
    return "".join(c if perm & bit else "-" for c, bit in (("R", PERM_READ), ("W", PERM_WRITE), ("X", PERM_INHERIT)))


def _config_text(row: Row) -> str:
    return (f"TopicConfig [topicName={row['topic_name']}, readQueueNums={row['read_queue_nums']}, "
            f"writeQueueNums={row['write_queue_nums']}, perm={_perm_string(row['perm'])}, "
            f"topicFilterType={row['topic_filter_type']}, topicSysFlag={row['topic_sys_flag']}, "
            f"order={str(row['order']).lower()}]")


def update_topic(ctx: Context, args: argparse.Namespace) -> Report:
    """Create a topic or change its queue count, permission or order flag.

    A new topic gets 8 queues and read-write permission unless told otherwise;
    an existing one keeps its queue count unless -r/-w is given.
    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    """
    read, write = args.read_queue_nums, args.write_queue_nums
    broker = ctx.writer()
    current = broker.topic_config(args.topic)
    # mqadmin always sends 8 when no count is given, resizing an existing topic; keeping its counts is kinder.
    # One count given sets both; -r and -w together set each.
    if read is None and write is None and current is not None:
        read, write = current.read_queue_nums, current.write_queue_nums
    elif read is None or write is None:
        read = write = read or write or DEFAULT_QUEUE_NUMS
    config = broker.create_topic(args.topic, write, order=args.order, perm=args.perm, read_queue_nums=read,
                                 write_queue_nums=write)
    return Report([dataclasses.asdict(config)], header=[f"create topic to {broker.path} success."], line=_config_text)


def delete_topic(ctx: Context, args: argparse.Namespace) -> Report:
    """Delete a topic and its consume queues; its records age out of the commit log.

    System topics (SCHEDULE_TOPIC_XXXX, the transaction and trace topics, rmq_sys_*) are
    refused (exit 2): they hold the broker's pending work. Retry and DLQ topics may go.
    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    """
    broker = ctx.writer()
    broker.delete_topic(args.topic)
    return Report([{"topic": args.topic}],
                  line=lambda row: f"delete topic [{row['topic']}] from store [{broker.path}] success.")
