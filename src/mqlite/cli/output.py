"""What commands print: a `Report` of rows, as mqadmin's text or as one JSON document.

A command returns a `Report`; `write_report` prints it. With `--json` the
output is one JSON list of the row objects (one row a line, so a long
`printMsg` streams); `Note` lines are text-only unless they carry a row.
Without it, rows print as an aligned table under mqadmin's `#`-headed
columns, or through the report's own `line` function (mqadmin's key-value
blocks and `MSGID: ...` lines). Rows that fail part-way still print what
came before the failure (valid JSON, a table of the rows so far).
`Progress` draws on stderr, and only when stderr is a terminal.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ..message import MessageExt

__all__ = ["Row", "Note", "Column", "Report", "write_report", "Progress", "message_row", "body_text",
           "java_message_line", "message_block", "human_time", "human_time_ms"]

Row = dict[str, Any]


@dataclass(frozen=True)
class Note:
    """A text line between a table's rows (mqadmin's per-queue remarks).

    In JSON it is `row` when given (a row the table's columns do not fit,
    such as queryMsgTraceById's tracks), and left out otherwise.
    """

    text: str
    row: Row | None = None


@dataclass(frozen=True)
class Column:
    """A table column: mqadmin's header, the row key, and how to show the value."""

    header: str
    key: str
    show: Callable[[Any], str] = str


@dataclass
class Report:
    """A command's result. Set `columns` for a table, or `line` to print each row as text.

    `footer` runs after the rows were printed (so it can report totals the
    rows' generator counted); `status` is the exit status.
    """

    rows: Iterable[Row | Note]
    columns: Sequence[Column] = ()
    line: Callable[[Row], str] | None = None
    header: Sequence[str] = ()
    footer: Callable[[], Iterable[str]] | None = None
    status: int = 0


def write_report(report: Report, as_json: bool, out: TextIO) -> int:
    """Print `report` to `out`; returns its exit status."""
    if as_json:
        _write_json(report.rows, out)
        return report.status
    for text in report.header:
        print(text, file=out)
    if report.columns:
        _write_table(report.columns, report.rows, out)
    else:
        line = report.line or _default_line
        for row in report.rows:
            print(row.text if isinstance(row, Note) else line(row), file=out)
    for text in report.footer() if report.footer is not None else ():
        print(text, file=out)
    return report.status


def _write_json(rows: Iterable[Row | Note], out: TextIO) -> None:
    written = False
    try:
        for row in rows:
            if isinstance(row, Note):
                if row.row is None:
                    continue
                row = row.row
            out.write(",\n  " if written else "[\n  ")
            out.write(json.dumps(row, ensure_ascii=False))
            written = True
    except BaseException:
        if written:  # the rows failed part-way: close the list, so it is valid JSON of what was done
            out.write("\n]\n")
        raise
    out.write("\n]\n" if written else "[]\n")


def _write_table(columns: Sequence[Column], rows: Iterable[Row | Note], out: TextIO) -> None:
    # Widths come from the values, so every row is formatted before the first is printed.
    cells: list[list[str] | str] = []
    try:
        for row in rows:
            cells.append(row.text if isinstance(row, Note) else [c.show(row[c.key]) for c in columns])
    except BaseException:
        if cells:  # the rows failed part-way: show what was done (resendDlq's copies) before the error
            _print_table(columns, cells, out)
        raise
    _print_table(columns, cells, out)


def _print_table(columns: Sequence[Column], cells: Sequence[list[str] | str], out: TextIO) -> None:
    widths = [len(c.header) for c in columns]
    for cell in cells:
        if isinstance(cell, list):
            widths = [max(w, len(v)) for w, v in zip(widths, cell)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    print(line([c.header for c in columns]), file=out)
    for cell in cells:
        print(cell if isinstance(cell, str) else line(cell), file=out)


def _default_line(row: Row) -> str:
    """A row without a `line` function: its values, two spaces apart."""
    return "  ".join(str(v) for v in row.values())


# -- progress ---------------------------------------------------------------------------------------------------
class Progress:
    """A one-line progress display on `stream` (stderr), drawn only when it is a terminal.

    Redraws at most ten times a second; `close()` wipes the line. Piped or
    redirected runs stay quiet.
    """

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.label = label
        self._last = 0.0
        self._width = 0

    def update(self, done: int, total: int, detail: str = "") -> None:
        """Show `done` of `total` (a percentage) and an optional detail."""
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        percent = 100 * done // total if total else 100
        text = f"\r{self.label}: {percent:3d}%" + (f" {detail}" if detail else "")
        self._width = max(self._width, len(text))
        self.stream.write(text.ljust(self._width))
        self.stream.flush()

    def close(self) -> None:
        """Wipe the progress line."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


# -- messages and times ---------------------------------------------------------------------------------------------
def human_time_ms(ms: int) -> str:
    """`UtilAll.timeMillisToHumanString2`: local `yyyy-MM-dd HH:mm:ss,SSS`."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


def human_time(ms: int) -> str:
    """mqadmin's `yyyy-MM-dd HH:mm:ss` (local), `N/A` for 0."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "N/A"


def message_row(msg: MessageExt, charset: str | None = "utf-8") -> Row:
    """A message as a JSON row: `MessageExt`'s field names; the body when `charset` is given.

    `body` is the text when it decodes with `charset`; otherwise `body_base64`
    holds the bytes.
    """
    row: Row = {
        "topic": msg.topic, "msg_id": msg.msg_id, "offset_msg_id": msg.offset_msg_id, "tags": msg.tags,
        "keys": msg.keys, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "commit_log_offset": msg.commit_log_offset, "store_size": msg.store_size, "body_crc": msg.body_crc,
        "flag": msg.flag, "sys_flag": msg.sys_flag, "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp, "born_host": msg.born_host, "store_host": msg.store_host,
        "reconsume_times": msg.reconsume_times, "prepared_transaction_offset": msg.prepared_transaction_offset,
        "broker_name": msg.broker_name, "properties": dict(msg.properties),
    }
    if charset is not None:
        try:
            row["body"] = msg.body.decode(charset)
        except UnicodeDecodeError:
            row["body_base64"] = base64.b64encode(msg.body).decode("ascii")
    return row


def body_text(row: Mapping[str, Any]) -> str:
    """The body of a `message_row` for text output (base64 marked as such)."""
    if "body" in row:
        return str(row["body"])
    if "body_base64" in row:
        return f"base64:{row['body_base64']}"
    return "NOT PRINT BODY"


def java_message_line(row: Row) -> str:
    """mqadmin's `MSGID: <id> MessageExt [...] BODY: <body>` line for a `message_row`."""
    props = ", ".join(f"{k}={v}" for k, v in row["properties"].items())
    return (f"MSGID: {row['msg_id']} MessageExt [brokerName={row['broker_name']}, queueId={row['queue_id']}, "
            f"storeSize={row['store_size']}, queueOffset={row['queue_offset']}, sysFlag={row['sys_flag']}, "
            f"bornTimestamp={row['born_timestamp']}, bornHost=/{row['born_host']}, "
            f"storeTimestamp={row['store_timestamp']}, storeHost=/{row['store_host']}, "
            f"msgId={row['offset_msg_id']}, commitLogOffset={row['commit_log_offset']}, bodyCRC={row['body_crc']}, "
            f"reconsumeTimes={row['reconsume_times']}, preparedTransactionOffset={row['prepared_transaction_offset']}, "
            f"toString()=Message{{topic='{row['topic']}', flag={row['flag']}, properties={{{props}}}}}] "
            f"BODY: {body_text(row)}")


def message_block(row: Row, with_body: bool = False) -> str:
    """mqadmin `queryMsgById`'s key-value block for a `message_row` (the body with `-f`, as mqadmin's)."""
    props = ", ".join(f"{k}={v}" for k, v in row["properties"].items())
    fields: list[tuple[str, Any]] = [
        ("OffsetID:", row["offset_msg_id"]), ("MsgId:", row["msg_id"]), ("Topic:", row["topic"]),
        ("Tags:", f"[{row['tags']}]"), ("Keys:", f"[{' '.join(row['keys']) or None}]"),
        ("Queue ID:", row["queue_id"]), ("Queue Offset:", row["queue_offset"]),
        ("CommitLog Offset:", row["commit_log_offset"]), ("Reconsume Times:", row["reconsume_times"]),
        ("Born Timestamp:", human_time_ms(row["born_timestamp"])),
        ("Store Timestamp:", human_time_ms(row["store_timestamp"])),
        ("Born Host:", row["born_host"]), ("Store Host:", row["store_host"]), ("System Flag:", row["sys_flag"]),
        ("Properties:", f"{{{props}}}"),
    ]
    if with_body:
        fields.append(("Message Body:", body_text(row)))
    return "\n".join(f"{name:<20s} {value}" for name, value in fields) + "\n"
