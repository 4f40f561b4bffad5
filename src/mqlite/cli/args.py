"""Argument types and the options commands share (mqadmin's letters and long names).

Every type raises `argparse.ArgumentTypeError` with a sentence saying what is
accepted, so a bad value ends as one line and exit status 2.
"""

from __future__ import annotations

import argparse
import codecs
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..errors import MQClientError
from ..topics import check_group

__all__ = ["parse_time", "Opt", "time_arg", "non_negative", "positive", "msg_ids", "charset", "boolean",
           "group_name", "TOPIC", "GROUP", "QUEUE_ID", "OFFSET", "BROKER", "BEGIN", "END", "MSG_ID", "KEY",
           "MAX_NUM", "CHARSET", "PRINT_BODY"]

_ROCKETMQ_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})")
_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}")
_MAX_MS = (1 << 63) - 1  # Java's Long.MAX_VALUE: mqadmin's times are longs
_TIME_FORMS = "give epoch milliseconds, now, yyyy-MM-dd#HH:mm:ss:SSS or ISO-8601 (2024-05-01T12:00:00)"


def parse_time(text: str, now: Callable[[], float] = time.time) -> int:
    """A point in time as epoch milliseconds, from what mqadmin and ISO-8601 accept.

    Epoch ms, `now`, RocketMQ's `yyyy-MM-dd#HH:mm:ss:SSS`, or ISO-8601; the
    last two are local time when they name no zone, as mqadmin's. Raises
    `ValueError` saying what is accepted.

    >>> parse_time("1700000000000"), parse_time("now", now=lambda: 1700000000.5)
    (1700000000000, 1700000000500)
    >>> parse_time("2023-11-14T22:13:20.123Z"), parse_time("2023-11-15T06:13:20+08:00")
    (1700000000123, 1700000000000)
    >>> parse_time("2023-11-14#22:13:20:123") == int(datetime(2023, 11, 14, 22, 13, 20, 123000).timestamp() * 1000)
    True
    >>> parse_time("2023-11-14") == int(datetime(2023, 11, 14).timestamp() * 1000)
    True
    >>> parse_time("yesterday")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: bad time 'yesterday': give epoch milliseconds, now, yyyy-MM-dd#HH:mm:ss:SSS or ISO-8601 ...
    """
    text = text.strip()
    if text == "now":
        return int(now() * 1000)
    out_of_range = ValueError(f"bad time {text!r}: out of range (1970 to epoch ms {_MAX_MS}); {_TIME_FORMS}")
    if text.isascii() and text.isdigit():
        ms = int(text)
    else:
        try:
            moment = _parse_datetime(text)
        except ValueError:
            raise ValueError(f"bad time {text!r}: {_TIME_FORMS}") from None
        try:
            # A naive datetime's timestamp() is local time: mqadmin's SimpleDateFormat does the same.
            ms = round(moment.timestamp() * 1000)
        except (ValueError, OverflowError, OSError):  # year 1 in a zone east of UTC, or beyond the C library's
            raise out_of_range from None
    if not 0 <= ms <= _MAX_MS:
        raise out_of_range
    return ms


def _parse_datetime(text: str) -> datetime:
    """RocketMQ's `yyyy-MM-dd#HH:mm:ss:SSS` or ISO-8601; `ValueError` when it is neither."""
    rocketmq = _ROCKETMQ_TIME.fullmatch(text)
    if rocketmq:
        y, mo, d, h, mi, s, ms = map(int, rocketmq.groups())
        return datetime(y, mo, d, h, mi, s, ms * 1000)
    return datetime.fromisoformat(text)


# -- argparse types -------------------------------------------------------------------------------------------
def time_arg(text: str) -> int:
    """argparse type: `parse_time`."""
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"bad number {text!r}: give {what}")
    return value


def non_negative(text: str) -> int:
    """argparse type: an int >= 0 (queue ids, offsets)."""
    return _int_at_least(text, 0, "an integer >= 0")


def positive(text: str) -> int:
    """argparse type: an int >= 1 (counts)."""
    return _int_at_least(text, 1, "an integer >= 1")


def msg_ids(text: str) -> list[str]:
    """argparse type: one message id or several, comma-separated (mqadmin's `-i id1,id2`), upper-cased.

    An id is 32 hex characters (`msg_id` or an IPv4 `offset_msg_id`) or 56 (IPv6).
    """
    ids = [part.strip().upper() for part in text.split(",") if part.strip()]
    bad = [i for i in ids if not _MSG_ID.fullmatch(i)]
    if not ids or bad:
        raise argparse.ArgumentTypeError(
            f"bad message id {(bad or [text])[0]!r}: give 32 or 56 hexadecimal characters (msg_id or offset_msg_id)")
    return ids


def charset(text: str) -> str:
    """argparse type: a codec name Python knows (mqadmin's charsetName, e.g. UTF-8, GBK)."""
    try:
        return codecs.lookup(text.strip()).name
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown charset {text!r} (try UTF-8)") from None


def group_name(text: str) -> str:
    """argparse type: a consumer group name RocketMQ accepts (`check_group`: non-blank, [%|a-zA-Z0-9_-], <= 255)."""
    try:
        return check_group(text)
    except MQClientError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def boolean(text: str) -> bool:
    """argparse type: `true` or `false` (mqadmin takes Java's `Boolean.parseBoolean` values)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"bad boolean {text!r}: give true or false")
    return value == "true"


# -- option specs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Opt:
    """One option of a command: argparse's flags and keywords, reusable across commands."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def but(self, **changes: Any) -> Opt:
        """The same option with some keywords changed (`TOPIC.but(required=False)`)."""
        return replace(self, kwargs={**self.kwargs, **changes})

    def renamed(self, *flags: str) -> Opt:
        """The same option under other flags (mqadmin gives one meaning different letters per command)."""
        return replace(self, flags=flags)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Declare the option on `parser`."""
        parser.add_argument(*self.flags, **self.kwargs)


def opt(*flags: str, **kwargs: Any) -> Opt:
    """Shorthand for `Opt(flags, kwargs)`."""
    return Opt(flags, kwargs)


TOPIC = opt("-t", "--topic", dest="topic", required=True, metavar="TOPIC", help="topic name")
GROUP = opt("-g", "--consumerGroup", "--group", dest="group", type=group_name, required=True, metavar="GROUP",
            help="consumer group name")
QUEUE_ID = opt("-i", "--queueId", dest="queue_id", type=non_negative, metavar="QID", help="queue id")
OFFSET = opt("-o", "--offset", dest="offset", type=non_negative, metavar="OFFSET", help="queue offset")
BROKER = opt("-b", "--brokerName", dest="broker_name", metavar="NAME",
             help="broker name (optional: a store has one; checked when given)")
BEGIN = opt("-b", "--beginTimestamp", dest="begin", type=time_arg, metavar="TIME",
            help="begin time: epoch ms, yyyy-MM-dd#HH:mm:ss:SSS or ISO-8601 (local time unless a zone is given)")
END = opt("-e", "--endTimestamp", dest="end", type=time_arg, metavar="TIME",
          help="end time, exclusive (same forms as the begin time)")
MSG_ID = opt("-i", "--msgId", dest="msg_ids", type=msg_ids, required=True, metavar="ID[,ID...]",
             help="message id: msg_id (UNIQ_KEY) or offset_msg_id; several comma-separated")
KEY = opt("-k", "--msgKey", dest="key", required=True, metavar="KEY", help="message key")
MAX_NUM = opt("-m", "--maxNum", dest="max_num", type=positive, default=64, metavar="N",
              help="most messages to return (default 64)")
CHARSET = opt("-c", "--charsetName", dest="charset", type=charset, default="utf-8", metavar="CHARSET",
              help="charset of the bodies (default UTF-8)")
PRINT_BODY = opt("-d", "--printBody", dest="print_body", type=boolean, default=True, metavar="true|false",
                 help="print the bodies (default true)")
