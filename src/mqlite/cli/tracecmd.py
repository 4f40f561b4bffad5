"""queryMsgTraceById: a message's trace records and its track per consumer group."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

from ..broker import Broker
from ..errors import MessageNotFoundError
from ..trace import MessageTrack
from .context import Context
from .output import Column, Note, Report, Row, human_time_ms

__all__ = ["query_msg_trace_by_id"]

#: A message's life in order, for records stamped in the same millisecond.
_ORDER = {"Pub": 0, "SubBefore": 1, "SubAfter": 2, "EndTransaction": 3}


def query_msg_trace_by_id(ctx: Context, args: argparse.Namespace) -> Report:
    """Show a message's trace (send, consume start and end, retries, dead letter) and its track per group.

    The records come from RMQ_SYS_TRACE_TOPIC, written by clients opened with
    trace=True. The track says per consumer group whether the message is
    CONSUMED, NOT_CONSUME_YET, ... (as the committed offsets on disk tell it).
    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.reader()
    views = [view for msg_id in args.msg_ids for view in broker.query_trace(msg_id)]
    tracks = [(msg_id, track) for msg_id in args.msg_ids for track in _tracks(broker, msg_id)]

    def rows() -> Iterator[Row | Note]:
        for view in sorted(views, key=lambda v: (v.time_stamp, _ORDER.get(v.msg_type, len(_ORDER)))):
            yield dataclasses.asdict(view)
        for msg_id, track in tracks:
            yield Note(f"track of {msg_id} in group {track.consumer_group}: {track.track_type}"
                       + (f" ({track.exception_desc})" if track.exception_desc else ""))

    return Report(rows(), columns=[
        Column("#Type", "msg_type"), Column("#Group", "group_name"), Column("#ClientHost", "client_host"),
        Column("#Time", "time_stamp", human_time_ms), Column("#CostTimes", "cost_time", lambda ms: f"{ms}ms"),
        Column("#Status", "status"), Column("#Topic", "topic"), Column("#MsgId", "msg_id")])


def _tracks(broker: Broker, msg_id: str) -> list[MessageTrack]:
    """The message's track per group; none when the message itself is gone (its trace may outlive it)."""
    try:
        return broker.message_track(msg_id)
    except MessageNotFoundError:
        return []
