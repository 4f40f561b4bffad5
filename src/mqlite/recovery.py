"""Store recovery at open: `DefaultMessageStore.recover` and `CommitLog.recoverNormally/Abnormally`.

Order: recover every consume queue (valid prefix); find where the commit log
must be re-checked; walk records from there, dispatching any the consume queues
lack, until the first invalid one (a torn tail); cut consume queues and the log
at that point; rebuild the queue-offset table and correct min offsets.

Normal recovery (clean exit) re-checks a bounded tail: records from the last
1 MiB that the consume queues vouch for, found through their units, so a clean
reopen costs the same for 1 GiB as for 1 MiB. RocketMQ re-checks the whole
newest segment there; the tail is where a damaged record can be after a clean
exit, and is where its recovery test damages one. Abnormal recovery follows
RocketMQ: from the newest segment whose first record is older than the
checkpoint's safe time, everything is re-dispatched (idempotently).

Departure from RocketMQ: only a torn tail is cut. A record whose frame is whole
but whose body CRC fails, with a framed record (or a BLANK, or the segment's
end) after it, is set aside (`_classify`): its unit is kept so queue offsets
stay as acknowledged, it gets no index entry, `RecoveryReport.set_aside` and
`config/setAside.json` list it, reads skip it, and the scan goes on after it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping

from .commitlog import BLANK, CommitLog, DispatchRequest, TagsCodeFn, check_record, find_frame, framed_at
from .config import read_json, write_json_atomic
from .consumequeue import ConsumeQueue
from .mappedfile import MappedFile

__all__ = ["recover_store", "RecoveryReport", "NORMAL_TAIL_BYTES", "walk_records",
           "load_set_aside", "save_set_aside", "set_aside_path", "load_damaged",
           "log_head_path", "load_log_head", "save_log_head", "check_log_head"]

log = logging.getLogger("mqlite")

NORMAL_TAIL_BYTES = 1024 * 1024


class RecoveryReport:
    """What recovery did (for logs, `storeInfo` and tests)."""

    __slots__ = ("abnormal", "start_offset", "process_offset", "records_scanned", "records_dispatched",
                 "damaged_tail", "set_aside", "damaged", "lost_units", "lost_segments", "index_rebuilt_from",
                 "checkpoint_damage")

    def __init__(self, abnormal: bool) -> None:
        self.abnormal = abnormal
        self.start_offset = 0
        self.process_offset = 0
        self.records_scanned = 0
        self.records_dispatched = 0
        self.damaged_tail = False  # the log ended in something other than zeros: a torn or damaged record
        #: (commit_log_offset, size) of records set aside: whole frame, body CRC wrong, valid records after.
        self.set_aside: list[tuple[int, int]] = []
        #: [start, end) commit-log ranges of damaged bytes with valid records after them: the scan
        #: resynchronised at `end`; records inside are lost (their units are in `lost_units`).
        self.damaged: list[tuple[int, int]] = []
        #: (commit_log_offset, size) of consume-queue units pointing into a `damaged` range: never read.
        self.lost_units: list[tuple[int, int]] = []
        #: [start, end) commit-log ranges of oldest segments that vanished without expiring (the store
        #: recorded a smaller min offset when its clean service last deleted segments, `config/logHead.json`).
        self.lost_segments: list[tuple[int, int]] = []
        #: The commit-log offset the key index was rebuilt from (it was missing or damaged), or None.
        self.index_rebuilt_from: int | None = None
        #: Why the checkpoint was not trusted (recovery then started at the first segment), or None.
        self.checkpoint_damage: str | None = None

    @property
    def records_set_aside(self) -> int:
        """How many records were set aside."""
        return len(self.set_aside)

    def __repr__(self) -> str:
        def shown(value: object) -> str:
            # A damaged range can have thousands of units: their count says enough.
            return f"<{len(value)} items>" if isinstance(value, list) and len(value) > 8 else repr(value)

        fields = ", ".join(f"{name}={shown(getattr(self, name))}" for name in self.__slots__)
        return f"RecoveryReport({fields})"


def recover_store(commitlog: CommitLog, queues_now: Callable[[], dict[tuple[str, int], ConsumeQueue]], *,
                  last_exit_ok: bool, checkpoint_min_timestamp: int, check_crc: bool,
                  dispatch: Callable[[DispatchRequest], None],
                  set_aside: Callable[[DispatchRequest], None] | None = None,
                  report: RecoveryReport | None = None) -> RecoveryReport:
    """Recover the log and the queues in place; `dispatch` indexes a record the queues lack.

    `queues_now()` returns the current queue table: dispatching may create queues.
    `set_aside` receives each record set aside (its unit keeps the queue's offsets
    contiguous; it gets no index entry); without it such records are skipped.
    """
    report = report or RecoveryReport(abnormal=not last_exit_ok)
    queues = queues_now()
    for cq in queues.values():
        cq.recover()
    dispatched_to = max((cq.max_physic_offset for cq in queues.values()), default=-1)
    files = commitlog.mapped_files.files
    if not files:
        for cq in queues.values():
            cq.destroy()
        queues.clear()
        return report
    if last_exit_ok:
        start = _normal_start(commitlog, queues, dispatched_to)
    else:
        start = _abnormal_start(commitlog, checkpoint_min_timestamp)
    report.start_offset = start
    process_offset = _scan(commitlog, start, check_crc, dispatched_to, last_exit_ok,
                           _filling_gaps(dispatch, queues_now, report), set_aside, report,
                           lambda at: _resync(commitlog, queues_now(), at, check_crc))
    report.process_offset = process_offset
    queues = queues_now()  # dispatch may have created queues
    for damaged_start, damaged_end in report.damaged:
        for cq in queues.values():
            report.lost_units += _units_in(cq, damaged_start, damaged_end)
    if any(cq.max_physic_offset >= process_offset for cq in queues.values()):
        for cq in queues.values():
            cq.truncate_dirty(process_offset)
    # Zero what follows the cut in its segment, so old records behind a damaged or lost
    # page can never line up with new appends and come back (cheap when the rest of the
    # segment was never written: only data regions are read).
    commitlog.mapped_files.truncate_dirty_files(process_offset, commitlog.config.commitlog_file_size)
    commitlog.mapped_files.flushed_where = process_offset
    _rebuild_queue_table(commitlog, queues)
    return report


def _first_record(commitlog: CommitLog, mf: MappedFile) -> DispatchRequest | None:
    size, request = check_record(mf.mm, 0, mf.file_size, False, commitlog.tags_code_fn)
    return request if size > 0 else None


def _normal_start(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], dispatched_to: int) -> int:
    files = commitlog.mapped_files.files
    # RocketMQ: the newest segment whose first record the consume queues cover.
    start = files[0].file_from_offset
    for mf in reversed(files):
        first = _first_record(commitlog, mf)
        if first is not None and first.commit_log_offset <= dispatched_to:
            start = mf.file_from_offset
            break
    if dispatched_to - NORMAL_TAIL_BYTES <= start:
        return start
    # Bounded tail: the earliest unit at or after (dispatched_to - NORMAL_TAIL_BYTES) in any queue is a record start.
    floor = dispatched_to - NORMAL_TAIL_BYTES
    best = dispatched_to
    for cq in queues.values():
        offset = _first_unit_at_or_after(cq, floor)
        if offset is not None and floor <= offset < best:
            best = offset
    return best


def _first_unit_at_or_after(cq: ConsumeQueue, floor: int) -> int | None:
    queue_offset = _first_unit_index(cq, floor)
    unit = None if queue_offset is None else cq.unit_at(queue_offset)
    return unit[0] if unit else None


def _first_unit_index(cq: ConsumeQueue, floor: int) -> int | None:
    """The queue offset of the first unit pointing at or after commit-log offset `floor`, or None."""
    low, high = cq.min_offset, cq.max_offset - 1
    if high < low:
        return None
    last = cq.unit_at(high)
    if last is None or last[0] < floor:
        return None
    while low < high:
        mid = (low + high) // 2
        unit = cq.unit_at(mid)
        if unit is None or unit[0] < floor or unit[1] == 2**31 - 1:
            low = mid + 1
        else:
            high = mid
    return low


def _abnormal_start(commitlog: CommitLog, safe_timestamp: int) -> int:
    files = commitlog.mapped_files.files
    for mf in reversed(files):
        first = _first_record(commitlog, mf)
        if first is not None and 0 < first.store_timestamp <= safe_timestamp:
            log.info("abnormal recovery starts at segment %s", mf.path)
            return mf.file_from_offset
    return files[0].file_from_offset


# What `_classify` finds at a position of the commit log.
_RECORD, _BLANK, _SET_ASIDE, _INVALID = range(4)


def _classify(mm: object, pos: int, limit: int, check_crc: bool, fn: TagsCodeFn,
              describe: bool) -> tuple[int, int, DispatchRequest | None]:
    """`(kind, size, request)` of the bytes at `pos`: a valid record, a BLANK, a record to
    set aside, or invalid (a torn tail, zeros, garbage: the log is cut there).

    A record is set aside when only its body CRC fails: its frame is whole (total
    size, magic code and every length agree, see `check_record`) and the next position
    holds a framed record, a BLANK, or the segment's end. A page lost or a bit flipped
    in the middle of the log then costs that record only; a torn tail (nothing valid
    after it) is still cut. RocketMQ truncates at the first CRC failure instead.
    """
    size, request = check_record(mm, pos, limit, check_crc, fn, describe)
    if size > 0:
        return _RECORD, size, request
    if size == 0:
        # A BLANK fills its segment to the end (RocketMQ and mqlite write the remaining size):
        # one anywhere else is damage, never a reason to skip the rest of the segment.
        if BLANK.unpack_from(mm, pos)[0] == limit - pos:  # type: ignore[arg-type]
            return _BLANK, 0, None
        return _INVALID, 0, None
    if not check_crc:
        return _INVALID, 0, None
    size, request = check_record(mm, pos, limit, False, fn, True)
    if size <= 0:
        return _INVALID, 0, None
    after = pos + size
    if after < limit and check_record(mm, after, limit, False, fn, False)[0] < 0:
        return _INVALID, 0, None
    return _SET_ASIDE, size, request


def _scan(commitlog: CommitLog, start: int, check_crc: bool, dispatched_to: int, last_exit_ok: bool,
          dispatch: Callable[[DispatchRequest], None], set_aside: Callable[[DispatchRequest], None] | None,
          report: RecoveryReport, resync: Callable[[int], int | None]) -> int:
    """Walk records from `start`; returns the offset just after the last valid one.

    At an invalid record, `resync(offset)` says where the log goes on (`_resync`): the
    damaged range is reported and the walk resumes there; None means a torn tail.
    """
    find = commitlog.mapped_files.find
    fn = commitlog.tags_code_fn
    offset = start
    while True:
        mf = find(offset)
        if mf is None:
            return offset
        pos = offset - mf.file_from_offset
        # Records the consume queues already cover need validating, not describing.
        describe = not last_exit_ok or offset >= dispatched_to
        kind, size, request = _classify(mf.mm, pos, mf.file_size, check_crc, fn, describe)
        if kind == _RECORD or kind == _SET_ASIDE:
            report.records_scanned += 1
            if request is not None:
                if request.store_timestamp > commitlog.last_store_timestamp:
                    # Store times never go backwards, across restarts too.
                    commitlog.last_store_timestamp = request.store_timestamp
                if kind == _RECORD:
                    dispatch(request)
                    report.records_dispatched += 1
                else:
                    report.set_aside.append((offset, size))
                    log.warning("commit log: the record at offset %d (%s/%d, queue offset %d) has a wrong body CRC; "
                                "it is set aside (never delivered, not indexed) and recovery goes on after it",
                                offset, request.topic, request.queue_id, request.queue_offset)
                    if set_aside is not None:
                        set_aside(request)
            offset += size
        elif kind == _BLANK:
            next_file = mf.file_from_offset + mf.file_size
            if find(next_file) is None:
                return offset  # the blank closes the newest segment: appends continue before it
            offset = next_file
        else:
            resume = resync(offset)
            if resume is not None:
                report.damaged.append((offset, resume))
                log.error("commit log: bytes [%d, %d) are damaged and valid records follow them; the records "
                          "in that range are lost, recovery goes on at %d", offset, resume, resume)
                offset = resume
                continue
            if any(mf.mm[pos : pos + 8]):
                report.damaged_tail = True
                log.warning("commit log: invalid record at offset %d; truncating the log there", offset)
            return offset


def _resync(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], damaged_at: int,
            check_crc: bool) -> int | None:
    """Where the log goes on after the invalid record at `damaged_at`, or None when nothing
    valid follows it (a torn tail, the only thing recovery may cut).

    Evidence, cheapest first: the consume queues' units past `damaged_at` whose records
    check out (units are record boundaries), which bound the search; then the first
    valid record found by searching forward (`_next_record`), across later segments too,
    so a segment whose head is destroyed resumes at its first valid record. Cost: one
    pass over the data regions between `damaged_at` and the resume point (or the log's
    end); paid only when recovery meets an invalid record.
    """
    bound = _unit_evidence(commitlog, queues, damaged_at, check_crc)
    files = commitlog.mapped_files.files
    end = files[-1].file_from_offset + files[-1].file_size if bound is None else bound
    found = _next_record(commitlog, damaged_at + 1, end, check_crc)
    return found if found is not None else bound


#: Units tried per queue for resynchronising: their records may be damaged too.
_UNITS_TRIED = 16


def _unit_evidence(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], after: int,
                   check_crc: bool) -> int | None:
    """The smallest commit-log offset > `after` that a unit points at and whose record checks out."""
    best: int | None = None
    for cq in queues.values():
        queue_offset = _first_unit_index(cq, after + 1)
        if queue_offset is None:
            continue
        for qoff in range(queue_offset, min(queue_offset + _UNITS_TRIED, cq.max_offset)):
            unit = cq.unit_at(qoff)
            if unit is None or (best is not None and unit[0] >= best):
                break
            if unit[0] > after and _record_at(commitlog, unit[0], check_crc):
                best = unit[0]
                break
    return best


def _record_at(commitlog: CommitLog, offset: int, check_crc: bool) -> bool:
    """True when a valid record (or one recovery sets aside) starts at `offset` and says it lies there."""
    mf = commitlog.mapped_files.find(offset)
    if mf is None:
        return False
    pos = offset - mf.file_from_offset
    return (framed_at(mf.mm, pos, mf.file_size, offset)
            and _classify(mf.mm, pos, mf.file_size, check_crc, commitlog.tags_code_fn, False)[0] in (_RECORD, _SET_ASIDE))


def _next_record(commitlog: CommitLog, start: int, end: int, check_crc: bool) -> int | None:
    """The first offset in [start, end) where `_record_at` holds, searching every segment there."""
    for mf in commitlog.mapped_files.files:
        base = mf.file_from_offset
        if base + mf.file_size <= start or base >= end:
            continue
        pos = max(start - base, 0)
        limit = min(end - base, mf.file_size)
        while pos < limit:
            pos = find_frame(mf.mm, pos, limit, mf.file_size, base, mf.next_data)
            if pos < 0:
                break
            if _record_at(commitlog, base + pos, check_crc):
                return base + pos
            pos += 1
    return None


def _filling_gaps(dispatch: Callable[[DispatchRequest], None],
                  queues_now: Callable[[], dict[tuple[str, int], ConsumeQueue]],
                  report: RecoveryReport) -> Callable[[DispatchRequest], None]:
    """`dispatch`, first filling the units a queue lacks for records a damaged range destroyed.

    A queue that had not reached the disk when the log was damaged lacks the units of the
    destroyed records, and the next record's queue offset lies past its end. Placeholders
    keep queue offsets as acknowledged: the k-th points at `start + k` of the last damaged
    range (distinct, rising, inside the range: a range holds fewer records than bytes), so
    `_units_in` lists it in `lost_units` and reads skip it as set aside.
    """
    def dispatch_after_gap(request: DispatchRequest) -> None:
        if report.damaged:
            cq = queues_now().get((request.topic, request.queue_id))
            start, end = report.damaged[-1]
            # Placeholders go after the queue's last unit (it may point into the range too).
            low = max(start, cq.max_physic_offset) if cq is not None else end
            missing = request.queue_offset - cq.max_offset if cq is not None else 0
            if cq is not None and low < end <= request.commit_log_offset and 0 < missing <= end - low:
                log.error("consume queue %s/%d: queue offsets [%d, %d) were in the damaged range [%d, %d); "
                          "they stay (reads skip them)", request.topic, request.queue_id, cq.max_offset,
                          request.queue_offset, start, end)
                # Ends rise to `end` at most: below the record dispatched next, or its put is skipped.
                size = end - low - missing + 1
                for k in range(missing):
                    cq.put(low + k, size, 0, cq.max_offset)
        dispatch(request)
    return dispatch_after_gap


def _units_in(cq: ConsumeQueue, start: int, end: int) -> list[tuple[int, int]]:
    """(commit_log_offset, size) of `cq`'s units pointing into [start, end)."""
    units = []
    queue_offset = _first_unit_index(cq, start)
    while queue_offset is not None and queue_offset < cq.max_offset:
        unit = cq.unit_at(queue_offset)
        if unit is None or unit[0] >= end:
            break
        if unit[0] >= start:
            units.append((unit[0], unit[1]))
        queue_offset += 1
    return units


def walk_records(commitlog: CommitLog, start: int, end: int, check_crc: bool,
                 damaged: Mapping[int, int] | None = None) -> Iterator[DispatchRequest]:
    """The records from `start` (a record's offset) to `end`, described, in log order.

    For rebuilding the key index after recovery: records to set aside are skipped,
    BLANKs move to the next segment, a damaged range (`damaged`: {start: end}, what
    recovery resynchronised over) is stepped over, and the walk stops early at any
    other invalid record.
    """
    find = commitlog.mapped_files.find
    fn = commitlog.tags_code_fn
    offset = start
    while offset < end:
        mf = find(offset)
        if mf is None:
            return
        pos = offset - mf.file_from_offset
        kind, size, request = _classify(mf.mm, pos, mf.file_size, check_crc, fn, True)
        if kind == _RECORD:
            assert request is not None
            yield request
        elif kind == _BLANK:
            offset = mf.file_from_offset + mf.file_size
            continue
        elif kind == _INVALID and damaged and offset in damaged:
            offset = damaged[offset]
            continue
        elif kind == _INVALID:
            log.warning("commit log: invalid record at offset %d; the index is rebuilt up to there", offset)
            return
        offset += size


def _rebuild_queue_table(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue]) -> None:
    """`recoverTopicQueueTable`: next queue offsets from the queues, then min offsets from the log."""
    table = {key: cq.max_offset for key, cq in queues.items()}
    commitlog.topic_queue_table = table
    min_phys = commitlog.min_offset
    if min_phys > 0:
        for cq in queues.values():
            cq.correct_min_offset(min_phys)


def set_aside_path(root: str) -> str:
    """`config/setAside.json`: the records recovery set aside, so reads skip them after any later reopen."""
    return os.path.join(root, "config", "setAside.json")


def load_set_aside(root: str) -> dict[int, int]:
    """{commit_log_offset: size} of the records set aside in this store (empty when none).

    A missing file means none. A damaged file (and `.bak`) is logged and read as none:
    the records stay in the log and recovery sets them aside again when it meets them.
    """
    path = set_aside_path(root)
    document = read_json(path)
    if document is None:
        if os.path.exists(path):
            log.warning("%s is unreadable; reads no longer skip the records it listed", path)
        return {}
    try:
        return {int(offset): int(size) for offset, size in document["setAside"]}
    except (KeyError, TypeError, ValueError):
        log.warning("%s has an unexpected shape; reads no longer skip the records it listed", path)
        return {}


def load_damaged(root: str) -> dict[int, int]:
    """{start: end} of the damaged commit-log ranges recovery resynchronised over (`RecoveryReport.damaged`),
    from `config/setAside.json` (empty when none, or when the file is unreadable: `load_set_aside` logs that).

    Units pointing into them are listed as set aside too, so reads skip them; `verify` reports the ranges.
    """
    document = read_json(set_aside_path(root))
    try:
        return {int(start): int(end) for start, end in (document or {}).get("damaged", [])}
    except (AttributeError, TypeError, ValueError):
        return {}


def save_set_aside(root: str, records: dict[int, int], damaged: Mapping[int, int] | None = None) -> None:
    """Write the set-aside records and the damaged ranges (atomically, keeping `.bak`)."""
    os.makedirs(os.path.dirname(set_aside_path(root)), exist_ok=True)
    document: dict[str, object] = {"setAside": sorted(records.items())}
    if damaged:
        document["damaged"] = sorted(damaged.items())
    write_json_atomic(set_aside_path(root), document)


def log_head_path(root: str) -> str:
    """`config/logHead.json` (mqlite only): the commit log's min offset as the clean service left it, and
    the ranges of segments found lost since. RocketMQ has no such record; a store without it is not checked."""
    return os.path.join(root, "config", "logHead.json")


def load_log_head(root: str) -> tuple[int | None, list[tuple[int, int]]]:
    """(recorded min offset or None when unknown, lost ranges [start, end)) from `config/logHead.json`."""
    document = read_json(log_head_path(root))
    try:
        if document is None:
            return None, []
        return int(document["minOffset"]), [(int(a), int(b)) for a, b in document.get("lost", [])]
    except (KeyError, TypeError, ValueError, AttributeError):
        log.warning("%s has an unexpected shape; lost oldest segments cannot be told from expired ones this once",
                    log_head_path(root))
        return None, []


def save_log_head(root: str, min_offset: int, lost: list[tuple[int, int]]) -> None:
    """Record the commit log's min offset (atomically, keeping `.bak`): the clean service calls this
    before it deletes segments, with the offset of the first segment it keeps."""
    os.makedirs(os.path.dirname(log_head_path(root)), exist_ok=True)
    write_json_atomic(log_head_path(root), {"minOffset": min_offset, "lost": sorted(lost)})


def check_log_head(root: str, first_offset: int) -> tuple[int | None, list[tuple[int, int]], tuple[int, int] | None]:
    """Compare the first segment's offset with the recorded min offset.

    Returns (recorded min offset, lost ranges recorded before, the newly lost range or None).
    A first segment that starts after the recorded min offset means segments vanished
    without expiring (deleted by hand, lost with a disk): `[recorded, first_offset)` is lost.
    Only the clean service moves the head legitimately, and it records the new min offset
    before it deletes. Reads only; `verify` can call it on a store it must not change.
    """
    recorded, lost = load_log_head(root)
    if recorded is not None and first_offset > recorded:
        return recorded, lost, (recorded, first_offset)
    return recorded, lost, None
