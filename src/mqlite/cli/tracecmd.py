"""queryMsgTraceById: a message's trace records and its track per consumer group."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

from ..admin import AdminSurface
from ..errors import MessageNotFoundError
from ..traceview import MessageTrack
from .context import Context
from .output import Column, Note, Report, Row, human_time_ms

__all__ = ["query_msg_trace_by_id"]


def query_msg_trace_by_id(ctx: Context, args: argparse.Namespace) -> Report:
    """Show a message's trace (send, consume start and end, retries, dead letter) and its track per group.

    The records come from RMQ_SYS_TRACE_TOPIC, written by clients opened with
    trace=True, in the order the message lived them. The track says per
    consumer group whether the message is CONSUMED, NOT_CONSUME_YET, ... (as
    the committed offsets on disk tell it).
    With --json each id gives its trace rows, then its track rows, each row
    with a "kind": "trace" rows have TraceView's fields (msg_type, group_name,
    time_stamp, ...); "track" rows have msg_id, consumer_group, track_type and
    exception_desc.
    Over `-n`: `QUERY_MESSAGE` on the trace topic by the id (mqadmin's way), the
    track by the serving process's committed offsets.
    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()

    def rows() -> Iterator[Row | Note]:
        for msg_id in args.msg_ids:
            # Broker.query_trace returns them in causal order; a sort by time would break same-millisecond ties.
            for view in broker.query_trace(msg_id):
                yield {"kind": "trace", **dataclasses.asdict(view)}
            for track in _tracks(broker, msg_id):
                text = (f"track of {msg_id} in group {track.consumer_group}: {track.track_type}"
                        + (f" ({track.exception_desc})" if track.exception_desc else ""))
                yield Note(text, {"kind": "track", "msg_id": msg_id, "consumer_group": track.consumer_group,
                                  "track_type": track.track_type.value, "exception_desc": track.exception_desc})

    return Report(rows(), columns=[
        Column("#Type", "msg_type"), Column("#Group", "group_name"), Column("#ClientHost", "client_host"),
        Column("#Time", "time_stamp", human_time_ms), Column("#CostTimes", "cost_time", lambda ms: f"{ms}ms"),
        Column("#Status", "status"), Column("#Topic", "topic"), Column("#MsgId", "msg_id")])


def _tracks(broker: AdminSurface, msg_id: str) -> list[MessageTrack]:
    """The message's track per group; none when the message itself is gone (its trace may outlive it)."""
    try:
        return broker.message_track(msg_id)
    except MessageNotFoundError:
        return []
