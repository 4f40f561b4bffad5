"""The command table: mqadmin's command names, their functions and their options.

Adding a command is one function `(Context, argparse.Namespace) -> Report`
(its docstring is the command's help) and one `Command` entry below. Every
command also gets `[PATH]`, `--store PATH` and `--json`.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from .args import (
    BEGIN,
    BROKER,
    CHARSET,
    END,
    GROUP,
    KEY,
    MAX_NUM,
    MSG_ID,
    OFFSET,
    PRINT_BODY,
    QUEUE_ID,
    TOPIC,
    Opt,
    boolean,
    charset,
    non_negative,
    opt,
    positive,
    time_arg,
)
from .context import Context
from .dlq import query_dlq, resend_dlq
from .groups import consumer_progress, reset_offset_by_time, skip_accumulated_message
from .messages import consume_message, print_msg, query_msg_by_id, query_msg_by_key, query_msg_by_offset, send_message
from .output import Report
from .dashboard import DEFAULT_INTERVAL, dashboard, host_arg, interval_arg, listen_arg
from .serve import serve
from .store import stats_all, store_info, verify
from .topics import delete_topic, topic_list, topic_status, update_topic
from .tracecmd import query_msg_trace_by_id

__all__ = ["Command", "COMMANDS"]

Run = Callable[[Context, argparse.Namespace], Report]


@dataclass(frozen=True)
class Command:
    """One command: its mqadmin name, the function that runs it and its options."""

    name: str
    run: Run
    options: tuple[Opt, ...] = ()
    creates_store: bool = False
    """True when the command may start a new store (a missing or empty directory is accepted)."""

    @property
    def description(self) -> str:
        """The function's docstring, without reST backticks: the command's `--help` text."""
        return inspect.cleandoc(self.run.__doc__ or self.name).replace("`", "")

    @property
    def summary(self) -> str:
        """The docstring's first line: the command's entry in `mqlite --help` (argparse %-formats it)."""
        return self.description.splitlines()[0].replace("%", "%%")


BODY_FORMAT = opt("-f", "--bodyFormat", dest="body_format", type=charset, metavar="CHARSET",
                  help="print the body decoded with this charset (JSON always has it, as UTF-8 by default)")
OPTIONAL_TOPIC = TOPIC.but(required=False, help="only this topic")
OPTIONAL_GROUP = GROUP.but(required=False)

COMMANDS: tuple[Command, ...] = (
    # topics
    Command("topicList", topic_list),
    Command("topicStatus", topic_status, (TOPIC,)),
    Command("updateTopic", update_topic, (
        TOPIC,
        opt("-r", "--readQueueNums", dest="read_queue_nums", type=positive, metavar="N",
            help="read queue count (default 8; one of -r and -w alone sets both)"),
        opt("-w", "--writeQueueNums", dest="write_queue_nums", type=positive, metavar="N",
            help="write queue count"),
        opt("-p", "--perm", dest="perm", type=int, choices=(2, 4, 6), default=6,
            help="permission: 2 write, 4 read, 6 both (default)"),
        opt("-o", "--order", dest="order", type=boolean, default=False, metavar="true|false",
            help="ordered topic (default false)"),
    )),
    Command("deleteTopic", delete_topic, (TOPIC,)),
    # consumer groups
    Command("consumerProgress", consumer_progress, (
        OPTIONAL_GROUP.but(help="consumer group (default: list every group with its total diff)"), OPTIONAL_TOPIC)),
    Command("resetOffsetByTime", reset_offset_by_time, (
        GROUP, TOPIC,
        opt("-s", "--timestamp", dest="timestamp", type=time_arg, metavar="TIME",
            help="reset to the first message stored at or after TIME: now, epoch ms, "
                 "yyyy-MM-dd#HH:mm:ss:SSS or ISO-8601"),
        opt("-q", "--queue", dest="queue_id", type=non_negative, metavar="QID", help="only this queue"),
        OFFSET.but(help="with -q: reset the queue to this offset instead of a time"),
    )),
    Command("skipAccumulatedMessage", skip_accumulated_message, (GROUP, TOPIC)),
    # messages
    Command("queryMsgById", query_msg_by_id, (MSG_ID, TOPIC.but(required=False, help="look in this topic only "
                                                                 "(finds retry and dead-letter copies)"),
                                              BODY_FORMAT)),
    Command("queryMsgByKey", query_msg_by_key, (TOPIC, KEY, BEGIN, END, MAX_NUM)),
    Command("queryMsgByOffset", query_msg_by_offset, (
        TOPIC, BROKER, QUEUE_ID.but(required=True), OFFSET.but(required=True), BODY_FORMAT)),
    Command("printMsg", print_msg, (
        TOPIC, CHARSET,
        opt("-s", "--subExpression", dest="sub_expression", default="*", metavar="EXPR",
            help="tag expression, e.g. 'TagA || TagB' (default *)"),
        BEGIN, END, PRINT_BODY)),
    Command("sendMessage", send_message, (
        TOPIC,
        opt("-p", "--body", dest="body", required=True, metavar="TEXT", help="message body (UTF-8 text)"),
        opt("-k", "--key", dest="keys", metavar="KEYS", help="message keys, space-separated"),
        opt("-c", "--tags", dest="tags", metavar="TAG", help="message tag"),
        BROKER, QUEUE_ID.but(help="send to this queue"))),
    Command("consumeMessage", consume_message, (
        TOPIC, BROKER, QUEUE_ID.but(help="read this queue only"), OFFSET.but(help="with -i: start at this offset"),
        OPTIONAL_GROUP.but(help="consumer group (with --commit: start at and commit its offsets)"),
        BEGIN.but(help="begin time (same forms as -e)").renamed("-s", "--beginTimestamp"),
        END.renamed("-e", "--endTimestamp"),
        opt("-c", "--MessageNumber", dest="count", type=positive, default=128, metavar="N",
            help="most messages to read (default 128)"),
        opt("--commit", action="store_true",
            help="commit the group's offsets past what was read (changes the store: needs the writer lock)"))),
    Command("queryMsgTraceById", query_msg_trace_by_id, (MSG_ID,)),
    # dead letters (RocketMQ dashboard)
    Command("queryDlq", query_dlq, (GROUP, BEGIN, END, CHARSET, PRINT_BODY)),
    Command("resendDlq", resend_dlq, (
        GROUP, MSG_ID.but(required=False, default=[], help="dead letters to re-send (msg_id or offset_msg_id)"),
        opt("--all", action="store_true", help="re-send every dead letter of the group (in -b/-e when given)"),
        BEGIN, END,
        opt("--to-origin", dest="to_origin", action="store_true",
            help="send to the original topic (every group consuming it sees the message again) "
                 "instead of the group's retry topic"))),
    # the store
    Command("statsAll", stats_all, (
        opt("-a", "--activeTopic", dest="active_topic", action="store_true",
            help="only topics with messages in or out in the last 24 hours"),
        OPTIONAL_TOPIC)),
    Command("storeInfo", store_info),
    Command("verify", verify),
    # serving
    Command("serve", serve, (
        opt("--listen", dest="listen", default="127.0.0.1:9876", metavar="HOST:PORT",
            help="address to listen on (default 127.0.0.1:9876; port 0 picks a free one)"),
        opt("--set", dest="settings", action="append", metavar="NAME=VALUE",
            help="a store setting, as mqlite.open takes it (repeatable), e.g. flush_disk_type=SYNC_FLUSH"),
        opt("--acl-file", dest="acl_file", metavar="FILE",
            help='JSON {"access key": "secret key"}: requests must carry RocketMQ ACL signatures'),
        opt("--allow-anonymous", dest="allow_anonymous", action="store_true",
            help="serve a non-loopback address without ACL (only on a trusted network)")), creates_store=True),
    Command("dashboard", dashboard, (
        opt("--listen", dest="listen", type=listen_arg, default="127.0.0.1:8080", metavar="HOST:PORT",
            help="address to serve the page on (default 127.0.0.1:8080; port 0 picks a free one)"),
        opt("--write", action="store_true",
            help="open the store as its writer (refused while another process holds it): allows re-sending "
                 "dead letters"),
        opt("--interval", dest="interval", type=interval_arg, default=DEFAULT_INTERVAL, metavar="SECONDS",
            help=f"seconds between two samples of the charts (default {DEFAULT_INTERVAL:g}, at least 0.1)"),
        opt("--allow-host", dest="allow_hosts", action="append", type=host_arg, metavar="NAME",
            help="also accept requests naming NAME (repeatable): a reverse proxy's public name"))),
)
