"""Message commands: queryMsgById, queryMsgByKey, queryMsgByOffset, printMsg, sendMessage, consumeMessage."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from ..admin import find_message, offset_range, scan_queue
from ..filter import MessageSelector
from ..message import Message, MessageQueue
from ..producer import Producer
from .checks import check_broker_name, check_window, queue_of, require_topic
from .context import Context, UsageError
from .output import Column, Note, Report, Row, java_message_line, message_block, message_row

__all__ = ["query_msg_by_id", "query_msg_by_key", "query_msg_by_offset", "print_msg", "send_message",
           "consume_message"]

#: The producer group of sendMessage (mqadmin names it after the clock; one fixed name is easier to find).
CLI_PRODUCER_GROUP = "mqlite-cli"


# -- look-ups -----------------------------------------------------------------------------------------------
def query_msg_by_id(ctx: Context, args: argparse.Namespace) -> Report:
    """Show messages by id: msg_id (UNIQ_KEY) or offset_msg_id.

    Retry and dead-letter copies share the original's msg_id: the original is
    shown, unless -t names the copy's topic. -f CHARSET prints the body too.
    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()
    if args.topic is not None:
        require_topic(broker, args.topic)
    rows = [message_row(find_message(broker, msg_id, args.topic), args.body_format or "utf-8")
            for msg_id in args.msg_ids]
    return Report(rows, line=lambda row: message_block(row, with_body=args.body_format is not None))


def query_msg_by_key(ctx: Context, args: argparse.Namespace) -> Report:
    """List the messages of a topic with a key (or unique id), through the index, newest first.

    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()
    require_topic(broker, args.topic)
    check_window(args)
    found = broker.query_message(args.topic, args.key, args.max_num, args.begin or 0, args.end)
    return Report([message_row(m) for m in found], columns=[
        Column("#Message ID", "msg_id"), Column("#QID", "queue_id"), Column("#Offset", "queue_offset")])


def query_msg_by_offset(ctx: Context, args: argparse.Namespace) -> Report:
    """Show the message at a queue offset (-f CHARSET prints the body too).

    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()
    require_topic(broker, args.topic)
    check_broker_name(broker, args.broker_name)
    msg = broker.query_message_by_offset(args.topic, queue_of(broker, args.topic, args.queue_id).queue_id, args.offset)
    return Report([message_row(msg, args.body_format or "utf-8")],
                  line=lambda row: message_block(row, with_body=args.body_format is not None))


# -- reading ranges --------------------------------------------------------------------------------------------
def print_msg(ctx: Context, args: argparse.Namespace) -> Report:
    """Print every message of a topic stored in a time range, or only those matching a tag expression.

    Reads queue by queue from -b to -e (store times; default: everything), with
    progress on stderr when it is a terminal.
    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()
    require_topic(broker, args.topic)
    check_window(args)
    selector = MessageSelector.by_tag(args.sub_expression) if args.sub_expression not in (None, "*") else None
    charset = args.charset if args.print_body else None

    def rows() -> Iterator[Row | Note]:
        queues = broker.fetch_subscribe_queues(args.topic)
        progress = ctx.progress("reading")
        try:
            for done, mq in enumerate(queues):
                progress.update(done, len(queues), str(mq))
                low, high = offset_range(broker, mq, args.begin, args.end)
                yield Note(f"minOffset={low}, maxOffset={high}, {mq}")
                for msg in scan_queue(broker, mq, low, high, selector):
                    yield message_row(msg, charset)
                yield Note("-" * 56)
        finally:
            progress.close()

    return Report(rows(), line=java_message_line)


def consume_message(ctx: Context, args: argparse.Namespace) -> Report:
    """Read up to -c messages of a topic, or of one queue with -i, from the start or -o/-s.

    Like mqadmin it commits nothing and reads the store read-only, beside a live
    writer. With --commit (and -g) it starts at the group's committed offsets
    and commits past what it printed: that changes the store and needs the
    writer lock (exit 1 while a live process holds it).
    """
    if args.offset is not None and args.queue_id is None:
        raise UsageError("-o needs -i: an offset belongs to one queue")
    if args.commit and args.group is None:
        raise UsageError("--commit needs -g: offsets are committed for a consumer group")
    check_window(args)
    broker = ctx.admin(write=args.commit)
    require_topic(broker, args.topic)
    check_broker_name(broker, args.broker_name)
    queues = ([queue_of(broker, args.topic, args.queue_id)] if args.queue_id is not None
              else broker.fetch_subscribe_queues(args.topic))

    def start(mq: MessageQueue, low: int) -> int:
        if args.offset is not None:
            return max(low, args.offset)
        if args.commit and args.begin is None:
            committed = broker.query_offset(args.group, mq)
            return max(low, committed) if committed >= 0 else low
        return low

    def rows() -> Iterator[Row | Note]:
        left = args.count
        for mq in queues:
            if left <= 0:
                return
            low, high = offset_range(broker, mq, args.begin, args.end)
            offset = first = start(mq, low)
            for msg in scan_queue(broker, mq, offset, min(high, offset + left)):
                left -= 1
                offset = msg.queue_offset + 1
                yield message_row(msg)
            if args.commit and offset > first:
                broker.commit_offset(args.group, mq, offset)
                yield Note(f"committed offset {offset} of {mq} for group {args.group}")

    return Report(rows(), line=java_message_line)


# -- sending ------------------------------------------------------------------------------------------------------
def send_message(ctx: Context, args: argparse.Namespace) -> Report:
    """Send one message with a UTF-8 body, to a queue the producer picks or to -i QID.

    A missing topic is created when the store allows auto-creation.
    Changes the store: needs the writer lock (exit 1 while a live process holds it).
    """
    broker = ctx.admin(write=True)
    check_broker_name(broker, args.broker_name)
    msg = Message(args.topic, args.body.encode("utf-8"), tags=args.tags, keys=args.keys.split() if args.keys else None)
    with Producer(broker, group=CLI_PRODUCER_GROUP) as producer:
        queue = None if args.queue_id is None else queue_of(broker, args.topic, args.queue_id, publish=True)
        result = producer.send(msg, queue=queue)
    row = {"topic": args.topic, "broker_name": result.message_queue.broker_name,
           "queue_id": result.message_queue.queue_id, "send_status": result.send_status.name,
           "msg_id": result.msg_id, "offset_msg_id": result.offset_msg_id, "queue_offset": result.queue_offset}
    return Report([row], columns=[Column("#Broker Name", "broker_name"), Column("#QID", "queue_id"),
                                  Column("#Send Result", "send_status"), Column("#MsgId", "msg_id")])
