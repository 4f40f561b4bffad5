"""Dead-letter commands, as RocketMQ's dashboard offers them: queryDlq and resendDlq."""

from __future__ import annotations

import argparse
import dataclasses

from ..admin import dlq_messages, find_message, resend_dlq_message
from ..message import PROPERTY_RETRY_TOPIC
from ..sendback import dlq_topic
from .checks import check_window
from .context import Context, UsageError
from .output import Column, Report, human_time_ms, message_row

__all__ = ["query_dlq", "resend_dlq"]


def query_dlq(ctx: Context, args: argparse.Namespace) -> Report:
    """List the dead letters of a group (`%DLQ%<group>`) stored in a time range, oldest first.

    A group without a dead-letter topic has none (the dashboard shows an empty page).
    Reads the store read-only: works beside a live writer.
    """
    check_window(args)
    broker = ctx.reader()
    charset = args.charset if args.print_body else None
    rows = [message_row(msg, charset) for msg in dlq_messages(broker, args.group, args.begin, args.end)]
    return Report(rows, columns=[
        Column("#Message ID", "msg_id"),
        Column("#Origin Topic", "properties", lambda props: props.get(PROPERTY_RETRY_TOPIC, "")),
        Column("#Tag", "tags", lambda tags: tags or ""), Column("#Key", "keys", " ".join),
        Column("#Reconsume Times", "reconsume_times"), Column("#Store Time", "store_timestamp", human_time_ms),
    ], footer=lambda: ["", f"{len(rows)} dead letters in {dlq_topic(args.group)}"])


def resend_dlq(ctx: Context, args: argparse.Namespace) -> Report:
    """Re-send dead letters to their group's retry topic, or with --to-origin to their original topic.

    The dashboard has a live consumer of the group consume the message again; here
    the copy goes to `%RETRY%<group>`, which only that group reads (and which shows
    the original topic), keeping its msg_id and starting over at reconsume_times 0.
    Name the messages with -i, or pass --all (optionally within -b/-e).
    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    """
    if bool(args.msg_ids) == args.all:
        raise UsageError("name the dead letters to re-send with -i ID[,ID...], or pass --all")
    if args.msg_ids and (args.begin is not None or args.end is not None):
        raise UsageError("-b/-e select a time range for --all; with -i the ids say which messages")
    check_window(args)
    broker = ctx.writer()
    if args.msg_ids:
        letters = [find_message(broker, msg_id, dlq_topic(args.group)) for msg_id in args.msg_ids]
    else:
        letters = list(dlq_messages(broker, args.group, args.begin, args.end))
    rows = [dataclasses.asdict(resend_dlq_message(broker, msg, args.group, to_origin=args.to_origin, sequence=i))
            for i, msg in enumerate(letters)]
    return Report(rows, columns=[
        Column("#Message ID", "msg_id"), Column("#Resent To", "topic"), Column("#QID", "queue_id"),
        Column("#Offset", "queue_offset"),
    ], footer=lambda: ["", f"{len(rows)} dead letters of {args.group} re-sent"])
