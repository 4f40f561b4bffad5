"""Checks of arguments against the store: each raises `UsageError` with what exists instead."""

from __future__ import annotations

import argparse

from ..admin import AdminSurface
from ..message import MessageQueue
from .context import UsageError

__all__ = ["require_topic", "queue_of", "check_broker_name", "check_window"]


def require_topic(broker: AdminSurface, topic: str) -> None:
    """`UsageError` unless `topic` exists in the store."""
    if topic not in broker.topic_list():
        raise UsageError(f"topic {topic!r} does not exist in {broker.path} (see mqlite topicList)")


def queue_of(broker: AdminSurface, topic: str, queue_id: int, *, publish: bool = False) -> MessageQueue:
    """Queue `queue_id` of `topic` (a read queue, or a write queue with `publish`); `UsageError` if there is none."""
    queues = broker.fetch_publish_queues(topic) if publish else broker.fetch_subscribe_queues(topic)
    ids = [mq.queue_id for mq in queues]
    if queue_id not in ids:
        raise UsageError(f"topic {topic!r} has no queue {queue_id} (its queues are 0..{max(ids, default=-1)})")
    return MessageQueue(topic, broker.broker_name, queue_id)


def check_broker_name(broker: AdminSurface, name: str | None) -> None:
    """`UsageError` when `-b NAME` is given and is not this store's broker name."""
    if name is not None and name != broker.broker_name:
        raise UsageError(f"broker {name!r} is not this store's; its broker name is {broker.broker_name!r}")


def check_window(args: argparse.Namespace) -> None:
    """`UsageError` when the begin time (`args.begin`) is after the end time (`args.end`)."""
    if args.begin is not None and args.end is not None and args.begin > args.end:
        raise UsageError("the begin time is after the end time")
