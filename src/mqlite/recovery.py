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

Consume queues are checked against the log at every open, clean or not, at a
cost independent of the store's size (a few units per file, a few records per
queue, the bounded tail above), and a damaged queue is rebuilt from the log
instead of being trusted or cut back at the damage:

- Its files, before `recover` could cut the queue back (`ConsumeQueue.load`,
  `unit_damage`): a file missing from the sequence, of the wrong size or
  misnamed; a file other than the last whose first or last unit is invalid
  (every file but the last is full); a non-last file among the last three that
  is not full; data behind the valid prefix of the last file (a crash tears at
  most the one unit it was writing); a queue whose files start after offset 0
  while the log still starts at 0 (files go only once their records aged out).
- Its tail, before the scan (which starts from the queues' ends, so one unit
  pointing far past the log would move it past every record): the last
  `TAIL_UNITS` units and the first and last unit of each file point at records
  whose header names this topic, queue id and queue offset and whose size is the
  unit's (units into aged-out segments are skipped). Units at the very end that
  point at no record are what a torn log tail leaves: cut, as the scan cuts the log.
- Its end, during the scan (`_guard`) and, on a clean open, over the re-checked
  tail the scan did not need to describe (`_check_queues`): a record of the queue
  at its end is put back (units lost from the end); one past it is a gap, and so
  is a record of a queue whose directory is gone while its topic's is there.

What this does not see: a wrong unit in the middle of an old file, a lost
leading file once segments were deleted, units lost from a queue none of whose
lost records is in the re-checked tail, a topic's whole directory (that is what
`delete_topic` leaves). A read that meets a unit that does not point at its own
record finds the record between its good neighbours' records (`find_queue_records`:
read repair; a writer's read rewrites the unit) or, when the record is gone, skips
the unit (never stalling); `mqlite verify` reports all of these until repaired, and
deleting the damaged file turns the damage into a gap this check finds.

All damaged queues are rebuilt in one walk of the log (`_rebuild_queues`):
their files deleted, their records re-dispatched. A queue whose first records
aged out starts at its first record in the log (blank units before it, as
RocketMQ's `fillPreBlank`); one with no record left continues where its files
ended. `RecoveryReport.queues_repaired` and a warning name each queue and what
was wrong.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Container, Iterator, Mapping, Sequence

from .commitlog import CommitLog
from .record import (
    BLANK,
    RECORD_KEY,
    DispatchRequest,
    TagsCodeFn,
    check_record,
    find_frame,
    framed_at,
    unwritten_at,
)
from .config import CQ_UNIT, read_json, write_json_atomic
from .consumequeue import BLANK_UNIT, ConsumeQueue
from .indexfile import IndexFile
from .mappedfile import MappedFile, offset_to_file_name
from .message import SysFlag

__all__ = ["recover_store", "RecoveryReport", "NORMAL_TAIL_BYTES", "TAIL_UNITS", "walk_records",
           "load_set_aside", "save_set_aside", "set_aside_path", "load_damaged",
           "log_head_path", "load_log_head", "save_log_head", "check_log_head", "index_coverage_gap",
           "find_queue_records", "resync_noting"]

log = logging.getLogger("mqlite")

NORMAL_TAIL_BYTES = 1024 * 1024
#: Units at the end of every queue checked against their records at open.
TAIL_UNITS = 16
Key = tuple[str, int]
_NOT_IN_QUEUE = (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE)


class RecoveryReport:
    """What recovery did (for logs, `storeInfo` and tests)."""

    __slots__ = ("abnormal", "start_offset", "process_offset", "records_scanned", "records_dispatched",
                 "damaged_tail", "set_aside", "damaged", "lost_units", "lost_segments", "index_rebuilt_from",
                 "checkpoint_damage", "queues_repaired")

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
        self.queues_repaired: dict[str, str] = {}  # consume queue ("consumequeue/T/0") -> what was wrong

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
                  report: RecoveryReport | None = None,
                  index: Callable[[DispatchRequest], None] | None = None) -> RecoveryReport:
    """Recover the log and the queues in place; `dispatch` indexes a record the queues lack.

    `queues_now()` returns the current queue table: dispatching may create queues.
    `set_aside` receives each record set aside (its unit keeps the queue's offsets
    contiguous; it gets no index entry); without it such records are skipped.
    `index` indexes a record without writing its unit: the records of a queue that is
    rebuilt after the scan are indexed in log order during it, as the index demands.
    """
    report = report or RecoveryReport(abnormal=not last_exit_ok)
    queues = queues_now()
    damaged, ends, witnesses = _recover_queues(commitlog, queues)
    dispatched_to = max((cq.max_commit_log_offset for cq in queues.values()), default=-1)
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
    cq_root = os.path.join(os.path.dirname(commitlog.mapped_files.directory), "consumequeue")
    # Placeholders for records a damaged range destroyed go in first, so the guard sees no gap there.
    guarded = _filling_gaps(_guard(dispatch, queues_now, damaged, cq_root, index), queues_now, report,
                            skip=damaged)
    # Ranges an earlier recovery stepped over are known: their units are placeholders, no evidence.
    known = commitlog.damaged
    process_offset = _scan(commitlog, start, check_crc, dispatched_to, last_exit_ok, guarded, set_aside, report,
                           lambda at: known[at] if at in known else _resync(commitlog, queues_now(), at, check_crc,
                                                                           witnesses), known)
    report.process_offset = process_offset
    queues = queues_now()  # dispatch may have created queues
    if any(cq.max_commit_log_offset >= process_offset for cq in queues.values()):
        for cq in queues.values():
            cq.truncate_dirty(process_offset)
    # Zero what follows the cut in its segment, so old records behind a damaged or lost
    # page can never line up with new appends and come back (cheap when the rest of the
    # segment was never written: only data regions are read).
    commitlog.mapped_files.truncate_dirty_files(process_offset, commitlog.config.commitlog_file_size)
    commitlog.mapped_files.flushed_where = process_offset
    mended: dict[Key, int] = {}
    _check_queues(commitlog, queues_now, damaged, mended, cq_root, start if last_exit_ok else process_offset,
                  process_offset, report)
    for (topic, qid), count in mended.items():
        why = f"{count} units missing at its end; put back from the commit log"
        log.warning("consumequeue/%s/%d: %s", topic, qid, why)
        report.queues_repaired[f"consumequeue/{topic}/{qid}"] = why
    if damaged:
        _rebuild_queues(commitlog, queues_now, damaged, ends, process_offset,
                        _filling_gaps(dispatch, queues_now, report), dict(report.damaged),
                        lambda at: _resync_noted(commitlog, queues_now(), at, check_crc, report, witnesses))
        report.queues_repaired.update(
            {f"consumequeue/{topic}/{qid}": f"{why}; rebuilt" for (topic, qid), why in damaged.items()})
    # After the rebuild: a rebuilt queue's placeholders for destroyed records are lost units too.
    for damaged_start, damaged_end in report.damaged:
        for cq in queues_now().values():
            report.lost_units += _units_in(cq, damaged_start, damaged_end)
    _rebuild_queue_table(commitlog, queues_now())
    return report


# -- consume queues against the log (see the module docstring) ------------------------------------------------
def _recover_queues(commitlog: CommitLog,
                    queues: dict[Key, ConsumeQueue]) -> tuple[dict[Key, str], dict[Key, int], list[int]]:
    """`recover` every sound queue, then check its tail units; discard the damaged ones.

    Before the scan, because the scan starts from the queues' ends: one unit pointing far
    past the log would move that start past every record. Returns {key: why}, {key: old end}
    and the witnesses: commit-log offsets of whole records that a discarded queue's last
    units pointed at (completed writes, evidence for `_resync` that the log goes on).
    """
    damaged: dict[Key, str] = {}
    ends: dict[Key, int] = {}
    witnesses: list[int] = []
    min_log = commitlog.min_offset
    for key, cq in queues.items():
        if cq.is_light:
            cq.recover()  # its units cannot be checked against the log, nor rebuilt from it
            continue
        why = "; ".join(cq.damage) or cq.unit_damage() or _lost_first_file(cq, min_log)
        if not why:
            cq.recover()
            why = _tail_damage(commitlog, cq)
        if why:
            damaged[key] = why
            witnesses += _witnesses(commitlog, cq)
            _discard(cq, ends)
    return damaged, ends, sorted(witnesses)


def _witnesses(commitlog: CommitLog, cq: ConsumeQueue) -> list[int]:
    """Offsets of whole records the queue's last units point at (read before the queue is discarded)."""
    found = []
    min_log = commitlog.min_offset
    for qoff in range(max(cq.min_offset, cq.max_offset - TAIL_UNITS), cq.max_offset):
        unit = cq.unit_at(qoff)
        if unit is not None and unit[0] >= min_log and _record_starts_at(commitlog, unit[0], False):
            found.append(unit[0])
    return found


def _lost_first_file(cq: ConsumeQueue, min_log: int) -> str | None:
    """A queue's leading files go only once their records aged out; while the log still starts
    at offset 0 no record has, so every queue's files start at 0."""
    first = cq.mapped_files.files[0].file_from_offset if cq.mapped_files.files else 0
    if min_log == 0 and first > 0:
        return (f"{cq.name}: files before {os.path.basename(cq.mapped_files.files[0].path)} missing while the "
                f"commit log still holds every record")
    return None


def _discard(cq: ConsumeQueue, ends: dict[Key, int]) -> None:
    ends.setdefault((cq.topic, cq.queue_id), cq.apparent_end())
    cq.discard()


def _gap(cq: ConsumeQueue | None, topic: str, queue_offset: int, offset: int, cq_root: str) -> str | None:
    """What is wrong when the log holds a record of (topic, queue) at `queue_offset`, or None."""
    if cq is None:
        if queue_offset > 0 and os.path.isdir(os.path.join(cq_root, topic)):
            return (f"directory missing while the commit log holds its records (queue offset {queue_offset} "
                    f"at commit-log offset {offset})")
        return None  # a new queue, or a deleted topic (`delete_topic` removes the topic's directory)
    if queue_offset > cq.max_offset:
        return (f"ends at queue offset {cq.max_offset} but the commit log holds its record of queue offset "
                f"{queue_offset} at {offset}: {queue_offset - cq.max_offset} units or more lost")
    return None


def _guard(dispatch: Callable[[DispatchRequest], None], queues_now: Callable[[], dict[Key, ConsumeQueue]],
           damaged: dict[Key, str], cq_root: str,
           index: Callable[[DispatchRequest], None] | None = None) -> Callable[[DispatchRequest], None]:
    """`dispatch`, except records of damaged queues, or of queues they show to be damaged (rebuilt later):
    those get only `index` (their units come with the rebuild)."""

    def guarded(request: DispatchRequest) -> None:
        key = (request.topic, request.queue_id)
        if key in damaged:
            if index is not None:
                index(request)
            return
        if request.sys_flag & SysFlag.TRANSACTION_MASK not in _NOT_IN_QUEUE:
            why = _gap(queues_now().get(key), request.topic, request.queue_offset, request.commit_log_offset,
                       cq_root)
            if why:
                damaged[key] = why
                if index is not None:
                    index(request)
                return
        dispatch(request)

    return guarded


def _check_queues(commitlog: CommitLog, queues_now: Callable[[], dict[Key, ConsumeQueue]],
                  damaged: dict[Key, str], mended: dict[Key, int], cq_root: str, start: int, end: int,
                  report: RecoveryReport) -> None:
    """After a clean open's scan: queue ends against the records in [start, end) it did not describe.

    A queue's next record is put back (`mended`: units lost from its end, records in this
    tail); a record further on is a gap, and the queue is rebuilt.
    """
    queues = queues_now()
    for request in walk_records(commitlog, start, end, False, dict(report.damaged), warn=False):
        key = (request.topic, request.queue_id)
        if key in damaged or request.sys_flag & SysFlag.TRANSACTION_MASK in _NOT_IN_QUEUE:
            continue
        cq = queues.get(key)
        why = _gap(cq, request.topic, request.queue_offset, request.commit_log_offset, cq_root)
        if why:
            damaged[key] = why
        elif cq is not None and request.queue_offset == cq.max_offset:
            cq.put(request.commit_log_offset, request.size, request.tags_code, request.queue_offset)
            mended[key] = mended.get(key, 0) + 1


def _file_of(cq: ConsumeQueue, queue_offset: int) -> str:
    start = queue_offset * CQ_UNIT // cq.file_size * cq.file_size
    return f"{cq.name}/{offset_to_file_name(start)}"


def _tail_damage(commitlog: CommitLog, cq: ConsumeQueue) -> str | None:
    """The first of the queue's checked units that does not point at its own record, described; or None.

    Units at the very end pointing at no record are what a torn log tail leaves (the scan
    cuts the log there): they are cut now, so the scan starts from the units that hold.
    """
    low, high = cq.min_offset, cq.max_offset
    if high <= low:
        return None
    checked = set(range(max(low, high - TAIL_UNITS), high))
    for mf in cq.mapped_files.files:
        first = max(low, mf.file_from_offset // CQ_UNIT)
        last = min(high, (mf.file_from_offset + cq.file_size) // CQ_UNIT) - 1
        if first <= last:
            checked.update((first, last))
    min_log = commitlog.min_offset
    known_lost = commitlog.set_aside  # units an earlier recovery set aside (reads skip them): not new damage
    found: list[tuple[int, tuple[int, int], tuple[str, int, int, int] | str]] = []
    for qoff in sorted(checked):
        unit = cq.unit_at(qoff)
        if unit is None:
            return f"{_file_of(cq, qoff)}: queue offset {qoff}: invalid unit"
        offset, size, _ = unit
        if (offset, size) == BLANK_UNIT[:2] or offset < min_log or offset in known_lost:
            continue  # a blank before the queue's first unit, a record that aged out, or one set aside
        found.append((qoff, (offset, size), _record_at(commitlog, offset, size)))
    cut = high
    while found and isinstance(found[-1][2], str) and found[-1][0] == cut - 1 and cut > high - TAIL_UNITS:
        cut = found.pop()[0]
    if cut < high:
        log.info("%s: units from queue offset %d point past the log's records; cut", cq.name, cut)
        cq.cut(cut)
    for qoff, (offset, size), what in found:
        if what != (cq.topic, cq.queue_id, qoff, size):
            return f"{_file_of(cq, qoff)}: queue offset {qoff}: unit ({offset}, {size}) points at {_describe(what)}"
    return None


def _record_at(commitlog: CommitLog, offset: int, size: int) -> tuple[str, int, int, int] | str:
    """(topic, queue id, queue offset, size) of the record at `offset`, or why there is none."""
    mf = commitlog.mapped_files.find(offset)
    if mf is None:
        return "no commit-log segment"
    found, request = check_record(mf.mm, offset - mf.file_from_offset, mf.file_size, False)
    if found <= 0 or request is None:
        return "no record"
    return request.topic, request.queue_id, request.queue_offset, found


def _describe(what: tuple[str, int, int, int] | str) -> str:
    if isinstance(what, str):
        return what
    topic, queue_id, queue_offset, size = what
    return f"a record of {topic}/{queue_id} queue offset {queue_offset}, {size} bytes"


def _rebuild_queues(commitlog: CommitLog, queues_now: Callable[[], dict[Key, ConsumeQueue]],
                    damaged: dict[Key, str], ends: dict[Key, int], end: int,
                    dispatch: Callable[[DispatchRequest], None], damaged_ranges: Mapping[int, int],
                    resync: Callable[[int], int | None]) -> None:
    """Rebuild the damaged queues from the log in one walk (see the module docstring); damage the
    walk meets in older segments (a clean open re-checks only the tail) is stepped over (`resync`)."""
    queues = queues_now()
    for key, why in sorted(damaged.items()):
        cq = queues.get(key)
        name = cq.name if cq is not None else f"consumequeue/{key[0]}/{key[1]}"
        log.warning("%s: %s; rebuilding the queue from the commit log", name, why)
        if cq is not None and cq.mapped_files.files:
            _discard(cq, ends)
    queue_ids = {queue_id for _, queue_id in damaged}
    for request in walk_records(commitlog, commitlog.min_offset, end, False, damaged_ranges, resync,
                                wanted=queue_ids.__contains__, warn=False):
        if (request.topic, request.queue_id) in damaged:
            dispatch(request)
    queues = queues_now()
    for key, old_end in ends.items():
        cq = queues.get(key)
        if cq is not None and cq.max_offset == 0 and old_end > 0:
            cq.start_at(old_end)  # every record aged out: continue where the queue ended


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
        if unit is None or unit[0] < floor or unit[1] == BLANK_UNIT[1]:
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
          report: RecoveryReport, resync: Callable[[int], int | None],
          known: Mapping[int, int] | None = None) -> int:
    """Walk records from `start`; returns the offset just after the last valid one.

    `known`: damaged ranges an earlier recovery reported ({start: end}), stepped over quietly.

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
                if not known or offset not in known:
                    log.error("commit log: bytes [%d, %d) are damaged and valid records follow them; the records "
                              "in that range are lost, recovery goes on at %d", offset, resume, resume)
                offset = resume
                continue
            if not unwritten_at(mf.mm, pos):
                report.damaged_tail = True
                log.warning("commit log: invalid record at offset %d; truncating the log there", offset)
            return offset


def _resync(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], damaged_at: int,
            check_crc: bool, witnesses: Sequence[int] = ()) -> int | None:
    """Where the log goes on after the invalid record at `damaged_at`, or None when nothing
    valid follows it (a torn tail, the only thing recovery may cut).

    The log goes on only where a write completed after the damage says so: a consume-queue
    unit past `damaged_at` whose record checks out (a unit is written once its record and
    every record before it are whole), or a valid record in a later segment (the writer
    moved past this one). Valid frames found only by searching the same segment are not
    enough: a batch cut off mid-copy by a crash can leave whole records behind a broken
    first one (a large memcpy stores its first bytes last), and none of it was
    acknowledged; that is a torn tail, cut. With evidence, the first valid record after
    `damaged_at` (`_next_record`, up to the evidence) is where the scan goes on, so a
    segment whose head is destroyed resumes at its first valid record. Cost: one pass over
    the data regions between `damaged_at` and the resume point; paid only when recovery
    meets an invalid record.
    """
    bound = _unit_evidence(commitlog, queues, damaged_at, check_crc)
    # Units of queues discarded as damaged, read before they went (`_recover_queues`).
    witness = next((w for w in witnesses if w > damaged_at), None)
    if witness is not None and (bound is None or witness < bound):
        bound = witness
    if bound is None:
        files = commitlog.mapped_files.files
        mf = commitlog.mapped_files.find(damaged_at)
        next_segment = mf.file_from_offset + mf.file_size if mf is not None else damaged_at
        bound = _next_record(commitlog, next_segment, files[-1].file_from_offset + files[-1].file_size, check_crc)
        if bound is None:
            return None
    found = _next_record(commitlog, damaged_at + 1, bound, check_crc)
    return found if found is not None else bound


def _resync_noted(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], damaged_at: int,
                  check_crc: bool, report: RecoveryReport, witnesses: Sequence[int] = ()) -> int | None:
    """`_resync` for a walk after the scan: a damaged range found is logged and listed in the report."""
    resume = _resync(commitlog, queues, damaged_at, check_crc, witnesses)
    if resume is not None and (damaged_at, resume) not in report.damaged:
        log.error("commit log: bytes [%d, %d) are damaged and valid records follow them; the records in that "
                  "range are lost, the walk goes on at %d", damaged_at, resume, resume)
        report.damaged.append((damaged_at, resume))
        report.damaged.sort()
    return resume


#: The largest size a consume-queue unit can hold (a signed 32-bit int).
_MAX_UNIT_SIZE = BLANK_UNIT[1] - 1  # 2**31 - 1 marks a blank unit

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
            if unit[0] > after and _record_starts_at(commitlog, unit[0], check_crc):
                best = unit[0]
                break
    return best


def _record_starts_at(commitlog: CommitLog, offset: int, check_crc: bool) -> bool:
    """True when a valid record (or one recovery sets aside) starts at `offset` and says it lies there."""
    mf = commitlog.mapped_files.find(offset)
    if mf is None:
        return False
    pos = offset - mf.file_from_offset
    return (framed_at(mf.mm, pos, mf.file_size, offset)
            and _classify(mf.mm, pos, mf.file_size, check_crc, commitlog.tags_code_fn, False)[0] in (_RECORD, _SET_ASIDE))


def _next_record(commitlog: CommitLog, start: int, end: int, check_crc: bool) -> int | None:
    """The first offset in [start, end) where `_record_starts_at` holds, searching every segment there."""
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
            if _record_starts_at(commitlog, base + pos, check_crc):
                return base + pos
            pos += 1
    return None


def _filling_gaps(dispatch: Callable[[DispatchRequest], None],
                  queues_now: Callable[[], dict[tuple[str, int], ConsumeQueue]],
                  report: RecoveryReport, skip: Container[Key] = ()) -> Callable[[DispatchRequest], None]:
    """`dispatch`, first filling the units a queue lacks for records a damaged range destroyed.

    A queue that had not reached the disk when the log was damaged lacks the units of the
    destroyed records, and the next record's queue offset lies past its end. Placeholders
    keep queue offsets as acknowledged: the k-th points at `start + k` of the newest damaged
    range before the record (distinct, rising, inside the range: a range holds fewer records than bytes), so
    `_units_in` lists it in `lost_units` and reads skip it as set aside.
    """
    def dispatch_after_gap(request: DispatchRequest) -> None:
        if (request.topic, request.queue_id) in skip:  # a queue to be rebuilt: its walk fills its gaps
            dispatch(request)
            return
        # The newest damaged range before this record (a queue rebuilt later walks past several).
        before = [span for span in report.damaged if span[1] <= request.commit_log_offset]
        if before:
            cq = queues_now().get((request.topic, request.queue_id))
            start, end = before[-1]
            # Placeholders go after the queue's last unit (it may point into the range too).
            low = max(start, cq.max_commit_log_offset) if cq is not None else end
            missing = request.queue_offset - cq.max_offset if cq is not None else 0
            if cq is not None and low < end <= request.commit_log_offset and 0 < missing <= end - low:
                log.error("consume queue %s/%d: queue offsets [%d, %d) were in the damaged range [%d, %d); "
                          "they stay (reads skip them)", request.topic, request.queue_id, cq.max_offset,
                          request.queue_offset, start, end)
                # Ends rise to `end` at most: below the record dispatched next, or its put is skipped.
                # A unit's size is a Java int: a range of more than 2 GiB gets shorter placeholders
                # (still inside the range, and still distinct by their offsets).
                size = min(end - low - missing + 1, _MAX_UNIT_SIZE)
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


def find_queue_records(commitlog: CommitLog, damaged: Mapping[int, int], topic: str, queue_id: int,
                       start: int, end: int, queue_offsets: range) -> dict[int, DispatchRequest]:
    """Read repair: {queue offset: record} of the records of (topic, queue id) with a queue offset in
    `queue_offsets` that lie in [start, end) of the log.

    Units of a queue point at increasing offsets, so the record a damaged unit lost lies between
    the records its good neighbours point at: reads pass that span here. BLANKs, the ranges
    recovery resynchronised over (`damaged`) and other invalid bytes are stepped over (a frame
    search). Cost: a header check per record in the span (the records of other queues are only
    framed), the walk stops once every wanted record is found; runs only on a damaged unit.
    """
    found: dict[int, DispatchRequest] = {}
    if not queue_offsets:
        return found

    def resync(offset: int) -> int | None:
        return _next_record(commitlog, offset + 1, end, False)

    for request in walk_records(commitlog, start, end, False, damaged, resync, wanted=lambda qid: qid == queue_id,
                                warn=False):
        if (request.topic == topic and request.queue_id == queue_id and request.queue_offset in queue_offsets
                and request.sys_flag & SysFlag.TRANSACTION_MASK not in _NOT_IN_QUEUE):
            found[request.queue_offset] = request
            if len(found) == len(queue_offsets):
                break
    return found


def walk_records(commitlog: CommitLog, start: int, end: int, check_crc: bool,
                 damaged: Mapping[int, int] | None = None,
                 resync: Callable[[int], int | None] | None = None, *,
                 wanted: Callable[[int], bool] | None = None, warn: bool = True) -> Iterator[DispatchRequest]:
    """The records from `start` (a record's offset) to `end`, described, in log order.

    The one walk of the log after the scan (rebuilding queues and the key index, read repair,
    index coverage): BLANKs move to the next segment; with `check_crc` records to set aside are
    skipped (without it they keep their queue offset's place: their unit exists); a damaged range
    (`damaged`: {start: end}, what recovery resynchronised over) is stepped over, other damage too
    where `resync(offset)` says the log goes on (`resync_noting`: a clean open re-checks only the
    log's tail, so a walk then crosses segments the scan did not); the walk stops at any other
    invalid record (logged when `warn` and the bytes are not zeros, the log's end). Only records
    of a queue id `wanted` allows are described (the others are only framed).
    """
    find = commitlog.mapped_files.find
    fn = commitlog.tags_code_fn
    offset = start
    while offset < end:
        mf = find(offset)
        if mf is None:
            return
        pos = offset - mf.file_from_offset
        # RECORD_KEY's third field is QUEUEID (a shorter rest of the segment holds no record anyway).
        describe = wanted is None or (pos + RECORD_KEY.size <= mf.file_size
                                      and wanted(RECORD_KEY.unpack_from(mf.mm, pos)[2]))
        kind, size, request = _classify(mf.mm, pos, mf.file_size, check_crc, fn, describe)
        if kind == _RECORD:
            if request is not None:
                yield request
        elif kind == _BLANK:
            offset = mf.file_from_offset + mf.file_size
            continue
        elif kind == _INVALID:
            if damaged and offset in damaged:
                resume: int | None = damaged[offset]
            else:
                resume = resync(offset) if resync is not None else None
            if resume is None:
                if warn and not unwritten_at(mf.mm, pos):  # zeros are the log's end, not damage
                    log.warning("commit log: invalid record at offset %d; the walk stops there", offset)
                return
            offset = resume
            continue
        offset += size


def resync_noting(commitlog: CommitLog, queues_now: Callable[[], dict[Key, ConsumeQueue]], check_crc: bool,
                  report: RecoveryReport) -> Callable[[int], int | None]:
    """A `resync` for a walk after recovery (`walk_records`): damage stepped over is logged and listed
    in `report.damaged`, and the units pointing into it in `report.lost_units` (read as set aside)."""
    def resync(damaged_at: int) -> int | None:
        known = len(report.damaged)
        resume = _resync_noted(commitlog, queues_now(), damaged_at, check_crc, report)
        if resume is not None and len(report.damaged) > known:
            for cq in queues_now().values():
                report.lost_units += _units_in(cq, damaged_at, resume)
        return resume
    return resync


def _rebuild_queue_table(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue]) -> None:
    """`recoverTopicQueueTable`: next queue offsets from the queues, then min offsets from the log."""
    table = {key: cq.max_offset for key, cq in queues.items()}
    commitlog.topic_queue_table = table
    min_commit_log_offset = commitlog.min_offset
    if min_commit_log_offset > 0:
        for cq in queues.values():
            cq.correct_min_offset(min_commit_log_offset)


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


def index_coverage_gap(commitlog: CommitLog, index_files: Sequence[IndexFile]) -> tuple[int, int, str] | None:
    """Where the index files on disk leave records with keys unindexed: (position of the first file
    to drop, commit-log offset from which records lack entries, what bounds the gap), or None.

    Files missing before, between or after the ones on disk (deleted by hand, lost with a disk,
    dropped after a crash) are found from the headers: a file begins at its first entry, at or
    after the previous file's end (RocketMQ's ``endPhyOffset`` is the last indexed record
    itself), so a keyed record in between that is not the previous file's last means entries
    are missing; the same before the first file (from the log's start) and after the last (to
    the log's end). A file without entries marks everything below its end as indexed. Cost: a
    walk of the records between files, nothing when the files meet (every record mqlite's
    producers write carries a key, so keyless stretches are short). Reads only.
    """
    segments = commitlog.mapped_files.files
    if not index_files or not segments:
        return None
    start, first = segments[0].file_from_offset, True
    log_end = segments[-1].file_from_offset + segments[-1].file_size
    for position, index_file in enumerate([*index_files, None]):
        if index_file is not None and index_file.index_count <= 1:
            start, first = max(start, index_file.end_commit_log_offset), True
            continue
        end = index_file.begin_commit_log_offset if index_file is not None else log_end
        if end > start and _keyed_record_in(commitlog, start, end, include_start=first):
            return position, start, "the log's end" if index_file is None else f"index file {index_file.file_name}"
        if index_file is not None:
            start, first = max(start, index_file.end_commit_log_offset), False
    return None


def _keyed_record_in(commitlog: CommitLog, start: int, end: int, *, include_start: bool) -> bool:
    """Whether a record in [start, end) (after the one at `start` unless `include_start`) gets index entries."""
    # Quietly: the last gap runs to the end of the newest segment, whose zeros end the walk.
    for request in walk_records(commitlog, start, end, False, warn=False):
        if request.commit_log_offset == start and not include_start:
            continue
        if ((request.keys or request.uniq_key)
                and request.sys_flag & SysFlag.TRANSACTION_MASK != SysFlag.TRANSACTION_ROLLBACK_TYPE):
            return True
    return False
