"""What each writer open's recovery did, kept in `config/recoveryHistory.jsonl`.

One JSON object a line, oldest first, at most `RECOVERY_HISTORY_LIMIT` lines (the oldest go).
It is mqlite's own file: RocketMQ keeps no such history (its broker logs recovery), and a
RocketMQ broker opening the store ignores it. Each line is one `RecoveryRecord`:

    | field              | meaning                                                                 |
    |--------------------|-------------------------------------------------------------------------|
    | seq                | this open's number: 1 for the store's first writer open, then +1        |
    | abnormal_total     | abnormal recoveries up to and including this one (with `seq`: counters) |
    | time_ms            | when the open finished recovering (the store's clock, epoch ms)         |
    | pid                | the writer's process id                                                 |
    | abnormal           | the last writer did not close (`abort` present) or the checkpoint was bad |
    | checkpoint_damage  | why the checkpoint was not trusted, or null                             |
    | start_offset       | the commit-log offset the scan started at                               |
    | process_offset     | the log's end after recovery                                            |
    | records_scanned    | records read by the scan                                                |
    | records_dispatched | records whose units (or index entries) the scan wrote                   |
    | records_set_aside  | records set aside (damaged, with valid records after them)              |
    | damaged_bytes      | bytes of damaged ranges the scan stepped over                           |
    | damaged_tail       | the log ended in a torn or damaged record (cut off)                     |
    | lost_units         | consume-queue units pointing into damaged ranges                        |
    | lost_segments      | oldest segments that vanished without expiring                          |
    | index_rebuilt_from | the offset the key index was rebuilt from, or null                      |
    | queues_repaired    | consume queues rebuilt or cut back, with what was wrong                 |
    | duration_ms        | how long the open took up to here                                       |

The file is rewritten whole (a temporary file and a rename; a few KiB) once per writer open, without
`fsync`: it is a record for people and dashboards, not data. A line that does not read (a torn write
after a power loss) is skipped by the reader. A full disk skips the record with a warning; the open
goes on. Not hashed by tests/test_store_bytes.py (it lists `config/*.json` only).

>>> import tempfile
>>> from mqlite.recovery import RecoveryReport
>>> root = tempfile.mkdtemp()
>>> _ = record_recovery(root, RecoveryReport(abnormal=True), time_ms=1, pid=7, duration_ms=3)
>>> [(r.seq, r.abnormal, r.abnormal_total) for r in recovery_history(root)]
[(1, True, 1)]
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .recovery import RecoveryReport

__all__ = ["RecoveryRecord", "recovery_history", "record_recovery", "recovery_history_path",
           "RECOVERY_HISTORY_LIMIT"]

log = logging.getLogger("mqlite")

#: Lines kept: a store opened four times a day keeps two weeks of history in ~40 KiB.
RECOVERY_HISTORY_LIMIT = 64


@dataclass(frozen=True, slots=True)
class RecoveryRecord:
    """One writer open's recovery (see the module docstring for each field)."""

    seq: int
    abnormal_total: int
    time_ms: int
    pid: int
    abnormal: bool
    checkpoint_damage: str | None = None
    start_offset: int = 0
    process_offset: int = 0
    records_scanned: int = 0
    records_dispatched: int = 0
    records_set_aside: int = 0
    damaged_bytes: int = 0
    damaged_tail: bool = False
    lost_units: int = 0
    lost_segments: int = 0
    index_rebuilt_from: int | None = None
    queues_repaired: dict[str, str] = field(default_factory=dict)
    duration_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        """The record as the file's line holds it (also what a dashboard serves)."""
        return asdict(self)


def recovery_history_path(root: str) -> str:
    """`<root>/config/recoveryHistory.jsonl`."""
    return os.path.join(root, "config", "recoveryHistory.jsonl")


def recovery_history(root: str) -> list[RecoveryRecord]:
    """The recorded writer opens of the store at `root`, oldest first (empty when none were recorded).

    Safe beside a live writer (it replaces the file whole). Lines that do not read are skipped.
    Does I/O: one small read.
    """
    try:
        with open(recovery_history_path(root), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    records = []
    for line in lines:
        record = _parse(line)
        if record is not None:
            records.append(record)
    return records


def record_recovery(root: str, report: RecoveryReport, *, time_ms: int, pid: int,
                    duration_ms: int) -> RecoveryRecord | None:
    """Append what `report` says recovery did to the store's history (the writer, once an open); the
    record, or None when the disk had no room for it (logged; the open goes on).

    Keeps the last `RECOVERY_HISTORY_LIMIT` records. Does I/O: one small read, write and rename.
    """
    history = recovery_history(root)
    last = history[-1] if history else None
    record = RecoveryRecord(
        seq=(last.seq if last else 0) + 1,
        abnormal_total=(last.abnormal_total if last else 0) + int(report.abnormal),
        time_ms=time_ms, pid=pid, abnormal=report.abnormal,
        checkpoint_damage=report.checkpoint_damage,
        start_offset=report.start_offset, process_offset=report.process_offset,
        records_scanned=report.records_scanned, records_dispatched=report.records_dispatched,
        records_set_aside=report.records_set_aside,
        damaged_bytes=sum(end - start for start, end in report.damaged),
        damaged_tail=report.damaged_tail, lost_units=len(report.lost_units),
        lost_segments=len(report.lost_segments), index_rebuilt_from=report.index_rebuilt_from,
        queues_repaired=dict(report.queues_repaired), duration_ms=duration_ms)
    kept = [*history[-(RECOVERY_HISTORY_LIMIT - 1):], record]
    path = recovery_history_path(root)
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in kept)
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        log.warning("no room on the disk of %s to record this open's recovery; the history skips it", root)
        return None
    return record


def _parse(line: str) -> RecoveryRecord | None:
    """A line of the file as a record, or None when it is not one."""
    try:
        data = json.loads(line)
        record = RecoveryRecord(**{k: data[k] for k in RecoveryRecord.__dataclass_fields__ if k in data})
    except (ValueError, TypeError):
        return None
    counters = (record.seq, record.abnormal_total, record.time_ms)
    return record if all(type(n) is int for n in counters) else None
