"""`verify_store`: check every structure of a store without changing it.

Checks, in order: every commit-log record (size, magic, body CRC, stored
PHYSICALOFFSET = its position, BLANK records closing segments); every
consume queue against the records of its queue in the log (its files: gaps,
sizes, names; each unit: the record of its queue offset, size, tags code);
every index file's header and hash chains, and its entries against the log's
records (each entry's key hash is one of its record's keys', each keyed record
inside the file's range has all its entries). Reads through a `StoreReader`, so
it is safe beside a live writer: units the writer added after the walk of the
log passed their place are counted as not yet checked (`unchecked`), never as
damaged, and the index file it is filling is left out (`index_skipped`).

Findings name the root cause once and count its consequences, never one line
per unit: `consumequeue/T/0/00000000000000000000: 2000 bytes short (100 units
missing); 100 messages of T/0 unreachable`. A record whose frame is whole but
whose body CRC fails is one finding (recovery sets such a record aside and
keeps the records after it); a broken record ends the walk of its segment, and
units pointing past it are counted in that finding.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .record import check_record, default_tags_code, unwritten_at
from .consumequeue import BLANK_UNIT, CQ_UNIT_STRUCT, LMQ_PREFIX, file_problems, queue_files
from .indexfile import IndexFile, index_key_hash_array, index_key_names
from .mappedfile import offset_to_file_name
from .message import SysFlag
from .errors import MQLiteError
from .reader import StoreReader
from .recovery import check_log_head, index_coverage_gap, load_damaged
from .store import writer_alive

__all__ = ["verify_store", "VerifyReport"]

_MAX_EXAMPLES = 20
#: Topics whose units hold due times instead of tag hashes (the broker's delay topics).
_DUE_TIME_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"})
#: Records that get no consume-queue unit (RocketMQ's CommitLogDispatcherBuildConsumeQueue).
_NOT_IN_QUEUE = (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE)
_UNIT = CQ_UNIT_STRUCT.size
#: {commit-log offset: (size, topic, queue id, queue offset, tags code, sys flag)}
Records = dict[int, tuple[int, str, int, int, int, int]]


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
        _verify_log_head(reader, report)
        walk = _verify_commitlog(reader, report, progress, live)
        _verify_queues(reader, report, walk, live)
        for damage in walk.damages:
            report.add(damage.finding())
        files = reader.index.files
        gap = index_coverage_gap(reader.commitlog, files) if not live else None
        if gap is not None:
            _, start, where = gap
            report.add(f"index: records with keys from commit-log offset {start} up to {where} have no index "
                       f"entries (index files missing); opening the store for writing rebuilds them")
        for index_file in files:
            report.index_files += 1
            if live and index_file is files[-1]:
                # A live writer changes slots and entries while they are read (no snapshot
                # of a hash table is atomic): the file being written is left out.
                report.index_skipped = 1
                continue
            problems = index_file.verify() or _index_entry_problems(index_file, walk, report.log_end if live else None)
            if problems:
                report.add(f"index {index_file.file_name}: {'; '.join(problems)}; keys it holds may not be found "
                           f"(delete the file: the next open for writing rebuilds it from the commit log)")
    return report


_PAIR = np.dtype([("offset", "<i8"), ("key_hash", "<i8")])  # sorts by offset, then hash


def _index_entry_problems(index_file: IndexFile, walk: _LogWalk, live_end: int | None) -> list[str]:
    """Entries that do not match the log: a `keyHash` that is none of its record's keys' hashes, a
    `phyOffset` where no keyed record starts, keyed records inside the file's range without all their
    entries. What the hash chains cannot show (a changed hash that stays in its bucket, a changed
    offset). Entries of records aged out, set aside or inside damaged log ranges are not judged.
    Cost: numpy sorts and binary searches, O(entries log keys).
    """
    key_hashes, commit_log_offsets = index_file.entries()
    expected = walk.expected_entries
    entries = np.empty(len(key_hashes), _PAIR)
    entries["offset"], entries["key_hash"] = commit_log_offsets, key_hashes
    found = _contains(expected, entries)
    problems = []
    if not found.all():
        numbers = np.flatnonzero(~found) + 1
        keyed = np.isin(commit_log_offsets[numbers - 1], expected["offset"])
        stray = [int(n) for n in numbers[~keyed] if not walk.unjudged(int(commit_log_offsets[n - 1]), live_end)]
        wrong_hash = numbers[keyed]
        if stray:
            problems.append(f"entries pointing where no record with keys starts: {len(stray)} (first: entry {stray[0]})")
        if wrong_hash.size:
            problems.append(f"entries whose keyHash is none of its record's keys: {wrong_hash.size} "
                            f"(first: entry {int(wrong_hash[0])})")
    # A file that fills mid-record holds part of that record's keys: its first and last records are not judged.
    begin, end = index_file.begin_commit_log_offset, index_file.end_commit_log_offset
    low, high = np.searchsorted(expected["offset"], [begin, end], side="right")
    inside = expected[low:high]
    inside = inside[inside["offset"] < end]
    entries.sort()
    missing = inside[~_contains(entries, inside)]
    if missing.size:
        problems.append(f"records with keys in its range lacking entries: {np.unique(missing['offset']).size} "
                        f"(first: commit-log offset {int(missing['offset'][0])})")
    return problems


def _contains(sorted_pairs: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """For each of `pairs`, whether `sorted_pairs` holds it."""
    if not sorted_pairs.size:
        return np.zeros(pairs.size, bool)
    at = np.minimum(np.searchsorted(sorted_pairs, pairs), sorted_pairs.size - 1)
    return np.asarray(sorted_pairs[at] == pairs)


def _verify_log_head(reader: StoreReader, report: VerifyReport) -> None:
    """Oldest segments that vanished without expiring (`recovery.check_log_head`; reads only)."""
    files = reader.commitlog.mapped_files.files
    try:
        _, lost, new = check_log_head(reader.root, files[0].file_from_offset if files else 0)
    except MQLiteError as exc:
        report.add(f"config/logHead.json: {exc}")
        return
    for start, end in lost + ([new] if new is not None else []):
        report.add(f"commit log: the segments holding offsets [{start}, {end}) are missing but never expired; "
                   f"their records are lost")


@dataclass
class _LogDamage:
    """A broken record: the walk of its segment stopped there; units pointing past it are its consequence."""

    text: str
    start: int
    end: int
    units: int = 0

    def finding(self) -> str:
        if not self.units:
            return self.text
        return f"{self.text}; {self.units} consume-queue units point past it (their messages unreachable)"


@dataclass
class _LogWalk:
    records: Records = field(default_factory=dict)
    #: The index keys (`index_key_names`) of the records that get index entries, and their offsets.
    key_names: list[str] = field(default_factory=list)
    key_offsets: list[int] = field(default_factory=list)
    min_offset: int = 0
    set_aside: set[int] = field(default_factory=set)
    damages: list[_LogDamage] = field(default_factory=list)

    @functools.cached_property
    def expected_entries(self) -> np.ndarray:
        """(offset, key hash) of every index entry the walked records call for, sorted."""
        pairs = np.empty(len(self.key_names), _PAIR)
        pairs["offset"] = self.key_offsets
        pairs["key_hash"] = index_key_hash_array(self.key_names) if self.key_names else 0
        pairs.sort()
        return pairs

    def unjudged(self, offset: int, live_end: int | None) -> bool:
        """Whether an index entry at `offset` cannot be judged: aged out, set aside, in damage, or
        past where the walk stopped beside a live writer."""
        return (offset < self.min_offset or offset in self.set_aside or self.damage_at(offset) is not None
                or (live_end is not None and offset >= live_end))

    def damage_at(self, offset: int) -> _LogDamage | None:
        return next((d for d in self.damages if d.start <= offset < d.end), None)


def _verify_commitlog(reader: StoreReader, report: VerifyReport, progress: Callable[[int, int], None] | None,
                      live: bool) -> _LogWalk:
    """Walk the log: its records, the records set aside for a body CRC mismatch, the broken ones.

    Beside a live writer the walk stops where the consume queues confirmed records when the
    reader opened (`StoreReader` marks it): past it, a record may be half copied.
    """
    files = reader.commitlog.mapped_files.files
    walk = _LogWalk()
    if not files:
        return walk
    walk.min_offset = files[0].file_from_offset
    total = files[-1].file_from_offset + files[-1].file_size - files[0].file_from_offset
    try:
        known = load_damaged(reader.root)  # ranges recovery resynchronised over: {start: end}
    except MQLiteError as exc:
        report.add(f"config/setAside.json: {exc}")
        known = {}
    resume = files[0].file_from_offset
    for index, mf in enumerate(files):
        if resume >= mf.file_from_offset + mf.file_size:
            continue  # inside a known damaged range
        pos = max(0, resume - mf.file_from_offset)
        limit = mf.wrote_position if live and index == len(files) - 1 else mf.file_size
        while pos < limit:
            offset = mf.file_from_offset + pos
            size, request = check_record(mf.mm, pos, limit, True, default_tags_code)
            if size > 0 and request is not None:
                if request.commit_log_offset != offset:
                    report.add(f"commit log: record at {offset} says its offset is {request.commit_log_offset}")
                walk.records[offset] = (size, request.topic, request.queue_id, request.queue_offset,
                                        request.tags_code, request.sys_flag)
                if (request.keys or request.uniq_key) and request.sys_flag & SysFlag.TRANSACTION_MASK != \
                        SysFlag.TRANSACTION_ROLLBACK_TYPE:
                    names = index_key_names(request.topic, request.uniq_key, request.keys)
                    walk.key_names += names
                    walk.key_offsets += [offset] * len(names)
                report.records += 1
                pos += size
                report.log_end = offset + size
                continue
            if size == 0:
                report.blanks += 1
                break  # the blank closes this segment
            whole, _ = check_record(mf.mm, pos, limit, False, None, False)
            if whole > 0:
                # The frame is whole, the body is not what was written: recovery sets it aside.
                report.add(f"record at commit-log offset {offset}: body CRC mismatch; set aside")
                walk.set_aside.add(offset)
                report.records += 1
                pos += whole
                report.log_end = offset + whole
                continue
            end = mf.file_from_offset + mf.file_size
            if offset in known:
                walk.damages.append(_LogDamage(
                    f"commit log: bytes [{offset}, {known[offset]}) are damaged; recovery stepped over them "
                    f"and the records there are lost", offset, known[offset]))
                resume = known[offset]
                if resume < end:
                    pos = resume - mf.file_from_offset
                    continue
                break
            if not unwritten_at(mf.mm, pos):
                walk.damages.append(_LogDamage(
                    f"commit log: damaged record at offset {offset} (segment {os.path.basename(mf.path)})",
                    offset, end))
            elif any(not unwritten_at(later.mm, 0) for later in files[index + 1 :]):
                # Zeros are the end of the log only if no later segment holds data (a broker
                # pre-allocates the next, empty segment).
                walk.damages.append(_LogDamage(
                    f"commit log: segment {os.path.basename(mf.path)} ends at {offset} without a BLANK record",
                    offset, end))
            break
        if progress:
            progress(mf.file_from_offset + mf.file_size - files[0].file_from_offset, total)
    return walk


def _verify_queues(reader: StoreReader, report: VerifyReport, walk: _LogWalk, live: bool) -> None:
    """Every queue on disk or in the log against the log's records of it (see the module docstring)."""
    expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    for offset, (size, topic, queue_id, queue_offset, code, sys_flag) in walk.records.items():
        if sys_flag & SysFlag.TRANSACTION_MASK not in _NOT_IN_QUEUE:
            expected.setdefault((topic, queue_id), {})[queue_offset] = (offset, size, code)
    root = os.path.join(reader.root, "consumequeue")
    on_disk = {(topic, int(qid)) for topic in _listdir(root) for qid in _listdir(os.path.join(root, topic))
               if qid.isdigit() and os.path.isdir(os.path.join(root, topic, qid))}
    for key in sorted(on_disk | expected.keys()):
        report.queues += 1
        _QueueCheck(reader, report, walk, live, key, expected.get(key, {})).run(os.path.join(root, key[0], str(key[1])))


class _QueueCheck:
    """One queue's files and units against the log; adds one finding per damaged file."""

    def __init__(self, reader: StoreReader, report: VerifyReport, walk: _LogWalk, live: bool, key: tuple[str, int],
                 expected: dict[int, tuple[int, int, int]]) -> None:
        self.report = report
        self.walk = walk
        self.live = live
        self.topic, self.queue_id = key
        self.name = f"consumequeue/{self.topic}/{self.queue_id}"
        self.light = self.topic.startswith(LMQ_PREFIX)
        self.expected = expected
        self.file_size = reader.config.consumequeue_file_size
        self.min_log = reader.commitlog.min_offset
        self.matched: set[int] = set()  # queue offsets whose unit points at their record
        self.kinds: dict[int, dict[str, list[int]]] = {}  # file start -> kind -> queue offsets

    def run(self, directory: str) -> None:
        if not os.path.isdir(directory):
            self._add(None, ["missing"], len(self.expected))
            return
        files = queue_files(directory)
        problems: dict[str, list[str]] = {}
        for name, what in file_problems(directory, self.file_size):
            problems.setdefault(name, []).append(what)
        for start, size in files:
            if start % self.file_size == 0:
                self._check_file(directory, start, min(size, self.file_size))
        # Messages whose unit is not right, attributed to the file their unit belongs in.
        lost: dict[int, int] = {}
        for queue_offset in self.expected.keys() - self.matched:
            file_start = queue_offset * _UNIT // self.file_size * self.file_size
            lost[file_start] = lost.get(file_start, 0) + 1
        existing = {start for start, _ in files}
        last_end = max(existing) + self.file_size if existing else 0
        past_end = sum(n for start, n in lost.items() if start >= last_end)
        gap_of = self._gaps(sorted(existing))
        findings: dict[str, tuple[list[str], int]] = {}
        for start in sorted(existing | set(lost) | set(self.kinds)):
            if start >= last_end:
                continue
            name = offset_to_file_name(gap_of.get(start, start))
            parts, count = findings[name] if name in findings else (problems.pop(name, []), 0)
            findings[name] = (parts + self._describe(start), count + lost.get(start, 0))
        for name, (parts, count) in findings.items():
            if parts or count:
                self._add(name, parts or ["units missing"], count)
        for name, parts in problems.items():
            self._add(name, parts, 0)
        if past_end:
            first = min(q for q in self.expected.keys() - self.matched if q * _UNIT >= last_end)
            self._add(offset_to_file_name(last_end), [f"missing (the commit log holds records of queue offsets "
                                                      f"{first} to {max(self.expected)})"], past_end)

    def _gaps(self, existing: list[int]) -> dict[int, int]:
        """{missing file start: first start of its gap}, so a gap of several files is one finding."""
        gap_of: dict[int, int] = {}
        for before, after in zip(existing, existing[1:]):
            for start in range(before + self.file_size, after, self.file_size):
                gap_of[start] = before + self.file_size
        return gap_of

    def _check_file(self, directory: str, start: int, size: int) -> None:
        with open(os.path.join(directory, offset_to_file_name(start)), "rb") as f:
            data = f.read(size - size % _UNIT)
        kinds: dict[str, list[int]] = {}
        expected, matched, walk = self.expected, self.matched, self.walk
        first = start // _UNIT
        for i, (offset, size_, code) in enumerate(CQ_UNIT_STRUCT.iter_unpack(data)):
            queue_offset = first + i
            record = expected.get(queue_offset)
            if offset == 0 and size_ == 0 and code == 0:
                if record is not None:
                    kinds.setdefault("zeroed", []).append(queue_offset)
                continue  # zeros past the end: not written yet
            self.report.units += 1
            if record is not None and (offset, size_) == record[:2]:
                matched.add(queue_offset)
                if code != record[2] and self.topic not in _DUE_TIME_TOPICS:
                    kinds.setdefault("tags", []).append(queue_offset)
                continue
            if (offset, size_) == BLANK_UNIT[:2] and record is None:
                continue  # a blank before the queue's first unit
            if offset < 0 or size_ <= 0:
                kinds.setdefault("invalid", []).append(queue_offset)
                continue
            if record is None:
                if self.light and offset in walk.records:
                    continue  # a light message queue's unit: another queue's record
                if offset < self.min_log or offset in walk.set_aside:
                    continue  # aged out of the log, or a record set aside (reported once, as such)
                if self.live and offset >= self.report.log_end:
                    self.report.unchecked += 1  # the writer stored it after the walk passed
                    continue
                damage = walk.damage_at(offset)
                if damage is not None:
                    damage.units += 1
                    continue
            kinds.setdefault("wrong", []).append(queue_offset)
        if kinds:
            self.kinds[start] = kinds

    def _describe(self, start: int) -> list[str]:
        texts = {"zeroed": "zeroed", "invalid": "invalid (negative offset or size)",
                 "wrong": "pointing at no record of this queue offset",
                 "tags": "with a tags code the record's TAGS do not hash to"}
        return [f"{_span(offsets)} {texts[kind]}" for kind, offsets in self.kinds.get(start, {}).items()]

    def _add(self, file_name: str | None, parts: list[str], unreachable: int) -> None:
        where = self.name if file_name is None else f"{self.name}/{file_name}"
        text = f"{where}: {'; '.join(parts)}"
        if unreachable:
            text += f"; {unreachable} messages of {self.topic}/{self.queue_id} unreachable"
        self.report.add(text)


def _span(offsets: list[int]) -> str:
    """`unit at queue offset 5`, `units at queue offsets 100-199`, `12 units from queue offset 17`."""
    if len(offsets) == 1:
        return f"unit at queue offset {offsets[0]}"
    if offsets[-1] - offsets[0] == len(offsets) - 1:
        return f"units at queue offsets {offsets[0]}-{offsets[-1]}"
    return f"{len(offsets)} units from queue offset {offsets[0]}"


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
