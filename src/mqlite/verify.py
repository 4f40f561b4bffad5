"""`verify_store`: check every structure of a store without changing it.

Checks, in order: every commit-log record (size, magic, body CRC, stored
physical offset = its position, BLANK records closing segments); every
consume-queue unit against the record it points to (size, topic, queue id,
queue offset, tags code); every index file's header and hash chains. Reads
through a `StoreReader`, so it is safe beside a live writer: units the writer
added after the walk of the log passed their place are counted as not yet
checked (`unchecked`), never as damaged, and the index file it is filling is
left out (`index_skipped`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .commitlog import check_record, default_tags_code
from .reader import StoreReader
from .store import writer_alive

__all__ = ["verify_store", "VerifyReport"]

_MAX_EXAMPLES = 20
#: Topics whose units hold due times instead of tag hashes (the broker's delay topics).
_DUE_TIME_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"})


@dataclass
class VerifyReport:
    """What `verify_store` found. `ok` is True when `problems` is empty."""

    path: str
    records: int = 0
    blanks: int = 0
    units: int = 0
    queues: int = 0
    index_files: int = 0
    log_end: int = 0
    unchecked: int = 0  # units past the walked end of the log, written by a live writer meanwhile
    index_skipped: int = 0  # the index file a live writer is filling, not checked
    problems: list[str] = field(default_factory=list)
    suppressed: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems

    def add(self, problem: str) -> None:
        """Record a problem (the first few verbatim, then a count)."""
        if len(self.problems) < _MAX_EXAMPLES * 5:
            self.problems.append(problem)
        else:
            self.suppressed += 1

    def summary(self) -> str:
        """A readable multi-line report."""
        lines = [
            f"store {self.path}",
            f"  commit log: {self.records} records, {self.blanks} segment ends, data ends at offset {self.log_end}",
            f"  consume queues: {self.queues} queues, {self.units} units"
            + (f" ({self.unchecked} written during the check, not checked)" if self.unchecked else ""),
            f"  index: {self.index_files} files"
            + (" (the newest, being written by a live process, not checked)" if self.index_skipped else ""),
        ]
        if self.ok:
            lines.append("OK: no problems found")
        else:
            lines.append(f"PROBLEMS: {len(self.problems) + self.suppressed}")
            lines += [f"  - {p}" for p in self.problems]
            if self.suppressed:
                lines.append(f"  ... and {self.suppressed} more")
        return "\n".join(lines)


def verify_store(path: str, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check the store at `path`; returns a report and never raises on damage.

    Cost: one pass over the commit log (a CRC per record), one look-up per
    consume-queue unit, and the index files' chains. `progress(done, total)`
    is called with commit-log bytes as the walk advances.
    """
    report = VerifyReport(os.path.abspath(path))
    if not os.path.isdir(path):
        report.add(f"{path} does not exist or is not a directory")
        return report
    try:
        reader = StoreReader(path)
    except Exception as exc:  # a store too damaged to open at all is a finding, not a crash
        report.add(f"cannot open the store: {exc}")
        return report
    live = writer_alive(path)
    with reader:
        records = _verify_commitlog(reader, report, progress, live)
        _verify_queues(reader, report, records, live)
        files = reader.index.files
        for index_file in files:
            report.index_files += 1
            if live and index_file is files[-1]:
                # A live writer changes slots and entries while they are read (no snapshot
                # of a hash table is atomic): the file being written is left out.
                report.index_skipped = 1
                continue
            for problem in index_file.verify():
                report.add(f"index {index_file.file_name}: {problem}")
    return report


def _verify_commitlog(reader: StoreReader, report: VerifyReport, progress: Callable[[int, int], None] | None,
                      live: bool) -> dict[int, tuple[int, str, int, int, int]]:
    """Walk the log; returns {offset: (size, topic, queue_id, queue_offset, tags_code)}.

    Beside a live writer the walk stops where the consume queues confirmed records when the
    reader opened (`StoreReader` marks it): past it, a record may be half copied.
    """
    files = reader.commitlog.mapped_files.files
    records: dict[int, tuple[int, str, int, int, int]] = {}
    if not files:
        return records
    total = files[-1].file_from_offset + files[-1].file_size - files[0].file_from_offset
    for index, mf in enumerate(files):
        pos = 0
        limit = mf.wrote_position if live and index == len(files) - 1 else mf.file_size
        while pos < limit:
            offset = mf.file_from_offset + pos
            size, request = check_record(mf.mm, pos, limit, True, default_tags_code)
            if size > 0 and request is not None:
                if request.commit_log_offset != offset:
                    report.add(f"commit log: record at {offset} says its offset is {request.commit_log_offset}")
                records[offset] = (size, request.topic, request.queue_id, request.queue_offset, request.tags_code)
                report.records += 1
                pos += size
                report.log_end = offset + size
                continue
            if size == 0:
                report.blanks += 1
                if index == len(files) - 1:
                    break
                break  # the blank closes this segment
            if any(mf.mm[pos : pos + 8]):
                report.add(f"commit log: damaged record at offset {offset} (segment {os.path.basename(mf.path)})")
            elif any(any(later.mm[:8]) for later in files[index + 1 :]):
                # Zeros are the end of the log only if no later segment holds data (a broker
                # pre-allocates the next, empty segment).
                report.add(f"commit log: segment {os.path.basename(mf.path)} ends at {offset} without a BLANK record")
            break
        if progress:
            progress(mf.file_from_offset + mf.file_size - files[0].file_from_offset, total)
    return records


def _verify_queues(reader: StoreReader, report: VerifyReport,
                   records: dict[int, tuple[int, str, int, int, int]], writer_alive: bool) -> None:
    min_log = reader.commitlog.min_offset
    for (topic, queue_id), cq in sorted(reader.consume_queues.items()):
        report.queues += 1
        for qoff, offset, size, code in cq.iter_units(cq.min_offset, cq.max_offset):
            report.units += 1
            if size == 2**31 - 1 and offset == 0:
                continue  # pre-filled blank unit
            where = f"consume queue {topic}/{queue_id} offset {qoff}"
            record = records.get(offset)
            if record is None:
                if writer_alive and offset >= report.log_end:
                    report.unchecked += 1  # the writer stored it after the walk passed
                    continue
                if offset >= min_log:
                    report.add(f"{where}: points to {offset}, where no record starts")
                continue
            r_size, r_topic, r_qid, r_qoff, r_code = record
            if (r_size, r_topic, r_qid, r_qoff) != (size, topic, queue_id, qoff):
                report.add(f"{where}: unit ({offset}, {size}) does not match the record "
                           f"({r_topic}/{r_qid} offset {r_qoff}, {r_size} bytes)")
            elif r_code != code and topic not in _DUE_TIME_TOPICS:
                report.add(f"{where}: tags code {code} but the record's TAGS hash to {r_code}")
