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
`delete_topic` leaves). Reads skip a unit that does not point at its own record
(never stalling), `mqlite verify` reports all of these, and deleting the damaged
file turns the damage into a gap this check finds.

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
import struct
from collections.abc import Callable, Iterator

from .commitlog import CommitLog, DispatchRequest, check_record
from .config import CQ_UNIT
from .consumequeue import BLANK_UNIT, ConsumeQueue
from .mappedfile import MappedFile, offset_to_file_name
from .message import SysFlag

__all__ = ["recover_store", "RecoveryReport", "NORMAL_TAIL_BYTES", "TAIL_UNITS"]

log = logging.getLogger("mqlite")

NORMAL_TAIL_BYTES = 1024 * 1024
#: Units at the end of every queue checked against their records at open.
TAIL_UNITS = 16
Key = tuple[str, int]
_NOT_IN_QUEUE = (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE)
_QUEUE_ID = struct.Struct(">i")
_QUEUE_ID_POS = 12  # QUEUEID in a record header


class RecoveryReport:
    """What recovery did (for logs, `storeInfo` and tests)."""

    __slots__ = ("abnormal", "start_offset", "process_offset", "records_scanned", "records_dispatched",
                 "damaged_tail",
                 "queues_repaired")

    def __init__(self, abnormal: bool) -> None:
        self.abnormal = abnormal
        self.start_offset = 0
        self.process_offset = 0
        self.records_scanned = 0
        self.records_dispatched = 0
        self.damaged_tail = False  # the log ended in something other than zeros: a torn or damaged record
        self.queues_repaired: dict[str, str] = {}  # consume queue ("consumequeue/T/0") -> what was wrong

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"RecoveryReport({fields})"


def recover_store(commitlog: CommitLog, queues_now: Callable[[], dict[tuple[str, int], ConsumeQueue]], *,
                  last_exit_ok: bool, checkpoint_min_timestamp: int, check_crc: bool,
                  dispatch: Callable[[DispatchRequest], None]) -> RecoveryReport:
    """Recover the log and the queues in place; `dispatch` indexes a record the queues lack.

    `queues_now()` returns the current queue table: dispatching may create queues.
    """
    report = RecoveryReport(abnormal=not last_exit_ok)
    queues = queues_now()
    damaged, ends = _recover_queues(commitlog, queues)
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
    cq_root = os.path.join(os.path.dirname(commitlog.mapped_files.directory), "consumequeue")
    guarded = _guard(dispatch, queues_now, damaged, cq_root)
    process_offset = _scan(commitlog, start, check_crc, dispatched_to, last_exit_ok, guarded, report)
    report.process_offset = process_offset
    queues = queues_now()  # dispatch may have created queues
    if any(cq.max_physic_offset >= process_offset for cq in queues.values()):
        for cq in queues.values():
            cq.truncate_dirty(process_offset)
    # Zero what follows the cut in its segment, so old records behind a damaged or lost
    # page can never line up with new appends and come back (cheap when the rest of the
    # segment was never written: only data regions are read).
    commitlog.mapped_files.truncate_dirty_files(process_offset, commitlog.config.commitlog_file_size)
    commitlog.mapped_files.flushed_where = process_offset
    mended: dict[Key, int] = {}
    _check_queues(commitlog, queues_now, damaged, mended, cq_root, start if last_exit_ok else process_offset,
                  process_offset)
    for (topic, qid), count in mended.items():
        why = f"{count} units missing at its end; put back from the commit log"
        log.warning("consumequeue/%s/%d: %s", topic, qid, why)
        report.queues_repaired[f"consumequeue/{topic}/{qid}"] = why
    if damaged:
        _rebuild_queues(commitlog, queues_now, damaged, ends, process_offset, dispatch)
        report.queues_repaired.update(
            {f"consumequeue/{topic}/{qid}": f"{why}; rebuilt" for (topic, qid), why in damaged.items()})
    _rebuild_queue_table(commitlog, queues_now())
    return report


# -- consume queues against the log (see the module docstring) ------------------------------------------------
def _recover_queues(commitlog: CommitLog, queues: dict[Key, ConsumeQueue]) -> tuple[dict[Key, str], dict[Key, int]]:
    """`recover` every sound queue, then check its tail units; discard the damaged ones.

    Before the scan, because the scan starts from the queues' ends: one unit pointing far
    past the log would move that start past every record. Returns {key: why} and {key: old end}.
    """
    damaged: dict[Key, str] = {}
    ends: dict[Key, int] = {}
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
            _discard(cq, ends)
    return damaged, ends


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
           damaged: dict[Key, str], cq_root: str) -> Callable[[DispatchRequest], None]:
    """`dispatch`, except records of damaged queues, or of queues they show to be damaged (rebuilt later)."""

    def guarded(request: DispatchRequest) -> None:
        key = (request.topic, request.queue_id)
        if key in damaged:
            return
        if request.sys_flag & SysFlag.TRANSACTION_MASK not in _NOT_IN_QUEUE:
            why = _gap(queues_now().get(key), request.topic, request.queue_offset, request.commit_log_offset,
                       cq_root)
            if why:
                damaged[key] = why
                return
        dispatch(request)

    return guarded


def _records(commitlog: CommitLog, start: int, end: int,
             wanted: Callable[[int], bool] | None = None) -> Iterator[DispatchRequest]:
    """Describe the records in [start, end) (those of a queue id `wanted` allows); a broken one ends the walk.

    The body CRC is not checked: a record set aside for a CRC mismatch keeps its queue
    offset's place (its unit exists; without it the queue's later units could not follow).
    """
    find = commitlog.mapped_files.find
    offset = start
    while offset < end:
        mf = find(offset)
        if mf is None:
            return
        pos = offset - mf.file_from_offset
        describe = wanted is None or (pos + _QUEUE_ID_POS + 4 <= mf.file_size
                                      and wanted(_QUEUE_ID.unpack_from(mf.mm, pos + _QUEUE_ID_POS)[0]))
        size, request = check_record(mf.mm, pos, mf.file_size, False, commitlog.tags_code_fn, describe)
        if size > 0:
            if request is not None:
                yield request
            offset += size
        elif size == 0:
            offset = mf.file_from_offset + mf.file_size
        else:
            return


def _check_queues(commitlog: CommitLog, queues_now: Callable[[], dict[Key, ConsumeQueue]],
                  damaged: dict[Key, str], mended: dict[Key, int], cq_root: str, start: int, end: int) -> None:
    """After a clean open's scan: queue ends against the records in [start, end) it did not describe.

    A queue's next record is put back (`mended`: units lost from its end, records in this
    tail); a record further on is a gap, and the queue is rebuilt.
    """
    queues = queues_now()
    for request in _records(commitlog, start, end):
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
    found: list[tuple[int, tuple[int, int], tuple[str, int, int, int] | str]] = []
    for qoff in sorted(checked):
        unit = cq.unit_at(qoff)
        if unit is None:
            return f"{_file_of(cq, qoff)}: queue offset {qoff}: invalid unit"
        offset, size, _ = unit
        if (offset, size) == BLANK_UNIT[:2] or offset < min_log:
            continue  # a blank before the queue's first unit, or a record that aged out
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
                    dispatch: Callable[[DispatchRequest], None]) -> None:
    """Rebuild the damaged queues from the log in one walk (see the module docstring)."""
    queues = queues_now()
    for key, why in sorted(damaged.items()):
        cq = queues.get(key)
        name = cq.name if cq is not None else f"consumequeue/{key[0]}/{key[1]}"
        log.warning("%s: %s; rebuilding the queue from the commit log", name, why)
        if cq is not None and cq.mapped_files.files:
            _discard(cq, ends)
    queue_ids = {queue_id for _, queue_id in damaged}
    for request in _records(commitlog, commitlog.min_offset, end, queue_ids.__contains__):
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
    unit = cq.unit_at(low)
    return unit[0] if unit else None


def _abnormal_start(commitlog: CommitLog, safe_timestamp: int) -> int:
    files = commitlog.mapped_files.files
    for mf in reversed(files):
        first = _first_record(commitlog, mf)
        if first is not None and 0 < first.store_timestamp <= safe_timestamp:
            log.info("abnormal recovery starts at segment %s", mf.path)
            return mf.file_from_offset
    return files[0].file_from_offset


def _scan(commitlog: CommitLog, start: int, check_crc: bool, dispatched_to: int, last_exit_ok: bool,
          dispatch: Callable[[DispatchRequest], None], report: RecoveryReport) -> int:
    """Walk records from `start`; returns the offset just after the last valid one."""
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
        size, request = check_record(mf.mm, pos, mf.file_size, check_crc, fn, describe)
        if size > 0:
            report.records_scanned += 1
            if request is not None:
                if request.store_timestamp > commitlog.last_store_timestamp:
                    # Store times never go backwards, across restarts too.
                    commitlog.last_store_timestamp = request.store_timestamp
                dispatch(request)
                report.records_dispatched += 1
            offset += size
        elif size == 0:
            next_file = mf.file_from_offset + mf.file_size
            if find(next_file) is None:
                return offset  # the blank closes the newest segment: appends continue before it
            offset = next_file
        else:
            if any(mf.mm[pos : pos + 8]):
                report.damaged_tail = True
                log.warning("commit log: invalid record at offset %d; truncating the log there", offset)
            return offset


def _rebuild_queue_table(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue]) -> None:
    """`recoverTopicQueueTable`: next queue offsets from the queues, then min offsets from the log."""
    table = {key: cq.max_offset for key, cq in queues.items()}
    commitlog.topic_queue_table = table
    min_phys = commitlog.min_offset
    if min_phys > 0:
        for cq in queues.values():
            cq.correct_min_offset(min_phys)
