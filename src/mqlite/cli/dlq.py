"""Dead-letter commands, as RocketMQ's dashboard offers them: queryDlq and resendDlq."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

from ..admin import AdminSurface, check_resend, dlq_messages, find_message, resend_dlq_message
from ..errors import MessageNotFoundError, MQClientError, MQLiteError
from ..message import PROPERTY_RETRY_TOPIC, MessageExt
from ..sendback import dlq_topic
from .checks import check_window
from .context import CommandError, Context, UsageError
from .output import Column, Report, Row, human_time_ms, message_row

__all__ = ["query_dlq", "resend_dlq"]


def query_dlq(ctx: Context, args: argparse.Namespace) -> Report:
    """List the dead letters of a group (`%DLQ%<group>`) stored in a time range, oldest first.

    A group without a dead-letter topic has none (the dashboard shows an empty page).
    Reads the store read-only: works beside a live writer.
    """
    check_window(args)
    broker = ctx.admin()
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
    Every destination is checked (exists, writable, has queues) before the first
    copy is sent; each row prints as its copy is stored, so a failure part-way
    (exit 1) still shows what was re-sent.
    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    Over `-n` the same: each dead letter is read (`QUERY_MESSAGE`, or pulled for
    --all) and its copy sent with `SEND_MESSAGE_V2`, carrying what the local
    re-send writes (properties, flag, sys flag, born time).
    """
    if bool(args.msg_ids) == args.all:
        raise UsageError("name the dead letters to re-send with -i ID[,ID...], or pass --all")
    if args.msg_ids and (args.begin is not None or args.end is not None):
        raise UsageError("-b/-e select a time range for --all; with -i the ids say which messages")
    check_window(args)
    broker = ctx.admin(write=True)
    if args.msg_ids:
        letters = [find_message(broker, msg_id, dlq_topic(args.group)) for msg_id in args.msg_ids]
    else:
        letters = list(dlq_messages(broker, args.group, args.begin, args.end))
    _check_destinations(broker, letters, args.group, args.to_origin)
    sent: list[Row] = []

    def rows() -> Iterator[Row]:
        for i, msg in enumerate(letters):
            try:
                result = resend_dlq_message(broker, msg, args.group, to_origin=args.to_origin, sequence=i)
            except (MQLiteError, OSError) as exc:
                # The destinations were checked: what fails now is the store itself (disk, a damaged file).
                raise CommandError(f"re-sent {len(sent)} of {len(letters)} dead letters, then {msg.msg_id} "
                                   f"failed: {exc}") from exc
            sent.append(dataclasses.asdict(result))
            yield sent[-1]

    return Report(rows(), columns=[
        Column("#Message ID", "msg_id"), Column("#Resent To", "topic"), Column("#QID", "queue_id"),
        Column("#Offset", "queue_offset"),
    ], footer=lambda: ["", f"{len(sent)} dead letters of {args.group} re-sent"])


def _check_destinations(broker: AdminSurface, letters: list[MessageExt], group: str, to_origin: bool) -> None:
    """`CommandError` naming the first topic a re-send of `letters` would be refused by, before any is sent."""
    try:
        check_resend(broker, letters, group, to_origin=to_origin)
    except MessageNotFoundError as exc:
        raise CommandError(f"{exc}; nothing was re-sent (name the others with -i)") from None
    except MQClientError as exc:
        raise CommandError(f"{exc}; nothing was re-sent") from None
