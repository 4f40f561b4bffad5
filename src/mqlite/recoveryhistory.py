"""What each writer open's recovery did, kept in `config/recoveryHistory.jsonl`.

One JSON object a line, oldest first, at most `RECOVERY_HISTORY_LIMIT` lines and about
`RECOVERY_HISTORY_MAX_BYTES` (the oldest go, clean opens before crashed ones: the last
`ABNORMAL_KEPT` abnormal recoveries stay however many clean opens came after them).
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
    | queues_repaired    | consume queues rebuilt or cut back, with what was wrong (the first      |
    |                    | `QUEUES_LISTED`, each reason cut at `REASON_CHARS`)                     |
    | queues_repaired_count | how many consume queues were rebuilt or cut back                     |
    | duration_ms        | how long the open took up to here                                       |

The file is rewritten whole (a temporary file and a rename; a few KiB) once per writer open, without
`fsync`: it is a record for people and dashboards, not data. A line that does not read (a torn write
after a power loss) is skipped by the reader. A file that cannot be written (a full disk, no
permission, anything) skips the record with one warning; the open goes on. Not hashed by tests/test_store_bytes.py (it lists `config/*.json` only).

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
import itertools
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .recovery import RecoveryReport

__all__ = ["RecoveryRecord", "recovery_history", "record_recovery", "recovery_history_path",
           "RECOVERY_HISTORY_LIMIT", "RECOVERY_HISTORY_MAX_BYTES", "ABNORMAL_KEPT", "QUEUES_LISTED"]

log = logging.getLogger("mqlite")

#: Lines kept: a store opened four times a day keeps two weeks of history in ~40 KiB.
RECOVERY_HISTORY_LIMIT = 64
#: Abnormal recoveries kept when trimming, however many clean opens followed them (a CLI run each minute
#: would otherwise push the crash a health page should show out within the hour).
ABNORMAL_KEPT = 16
#: The file's bytes, roughly: the oldest lines go (clean ones first) while it is larger.
RECOVERY_HISTORY_MAX_BYTES = 256 * 1024
#: Repaired queues a line names (a crash that lost every consume queue repairs thousands); the count is whole.
QUEUES_LISTED = 20
#: Characters of each repaired queue's reason kept in a line.
REASON_CHARS = 200


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
    queues_repaired_count: int = 0

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
    record, or None when the file could not be written (logged once; the open goes on).

    Keeps what `_trim` keeps. Does I/O: one small read, write and rename.
    """
    history = recovery_history(root)
    last = history[-1] if history else None
    repaired = report.queues_repaired
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
        queues_repaired={name: why[:REASON_CHARS] for name, why in itertools.islice(repaired.items(), QUEUES_LISTED)},
        queues_repaired_count=len(repaired), duration_ms=duration_ms)
    lines = _trim([(r, json.dumps(r.to_json(), sort_keys=True) + "\n") for r in [*history, record]])
    path = recovery_history_path(root)
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            log.warning("no room on the disk of %s to record this open's recovery; the history skips it", root)
        else:
            log.warning("cannot record this open's recovery in %s (%s: %s); the history skips it",
                        path, type(exc).__name__, exc)
        return None
    return record


def _trim(lines: list[tuple[RecoveryRecord, str]]) -> list[str]:
    """The lines to keep, oldest first: at most `RECOVERY_HISTORY_LIMIT`, about `RECOVERY_HISTORY_MAX_BYTES`
    (the newest line always), the oldest going first, but the last `ABNORMAL_KEPT` abnormal ones after the
    clean ones."""
    abnormal = [i for i, (r, _) in enumerate(lines) if r.abnormal][-ABNORMAL_KEPT:]
    protected = set(abnormal)
    # Drop order: clean lines oldest first, then abnormal ones oldest first; never the newest line.
    droppable = [i for i in range(len(lines) - 1) if i not in protected] + \
        [i for i in abnormal if i != len(lines) - 1]
    keep = set(range(len(lines)))
    size = sum(len(line.encode()) for _, line in lines)
    for i in droppable:
        if len(keep) <= RECOVERY_HISTORY_LIMIT and size <= RECOVERY_HISTORY_MAX_BYTES:
            break
        keep.discard(i)
        size -= len(lines[i][1].encode())
    return [line for i, (_, line) in enumerate(lines) if i in keep]


def _parse(line: str) -> RecoveryRecord | None:
    """A line of the file as a record, or None when it is not one."""
    try:
        data = json.loads(line)
        record = RecoveryRecord(**{k: data[k] for k in RecoveryRecord.__dataclass_fields__ if k in data})
    except (ValueError, TypeError):
        return None
    counters = (record.seq, record.abnormal_total, record.time_ms)
    return record if all(type(n) is int for n in counters) else None
