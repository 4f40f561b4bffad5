"""The files of a store and the read path shared by the writer and read-only readers.

`StoreFiles` maps the commit log, the consume queues, the index and the
checkpoint, and answers reads: messages of a queue from an offset (with
RocketMQ's statuses), a record by commit-log offset, messages by key, queue
offsets and offsets by time. `MessageStore` (the writer) and `StoreReader`
(read-only, other processes) both build on it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol

from .checkpoint import StoreCheckpoint
from .clock import SYSTEM_CLOCK, Clock
from .commitlog import CommitLog
from .record import (
    BODY_LENGTH,
    BODY_LENGTH_POS,
    BODY_POS,
    HOST_V6_FLAGS,
    MAGIC_BYTES,
    RECORD_KEY,
    SYSFLAG_LOW_POS,
    SYSFLAG_POS,
    DispatchRequest,
    StoredMessage,
    TagsCodeFn,
)
from .config import CQ_UNIT, StoreConfig, resolve_config
from .consumequeue import CQ_UNIT_STRUCT, LOWER, ConsumeQueue
from .errors import IllegalStateError, MessageNotFoundError
from .indexfile import INDEX_ENTRY, INDEX_HEADER, INDEX_SLOT, IndexService
from .message import PROPERTY_KEYS, MessageExt, SysFlag
from .recovery import find_queue_records, load_damaged, load_set_aside

__all__ = ["StoreFiles", "GetMessageStatus", "GetMessageResult", "MessageFilter", "infer_format_settings", "config_for"]

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024  # DefaultMessageStore: a batch never exceeds this
_FILTER_SCAN_BYTES = 16000  # maxFilterMessageSize: CQ bytes scanned per filtered pull
_REPAIR_REACH = 1024  # units looked at on each side of a damaged unit for a good neighbour (read repair)
#: Records whose body a read does not cut at BODY_POS: compressed, or moved by IPv6 hosts.
_SLOW_BODY_FLAGS = SysFlag.COMPRESSED | HOST_V6_FLAGS
#: The default index shape (StoreConfig's defaults, RocketMQ's maxIndexNum / maxHashSlotNum: 4 entries a
#: slot), so a file of that shape is INDEX_HEADER.size + slots * (INDEX_SLOT.size + 4 * INDEX_ENTRY.size) bytes.
_ENTRIES_PER_SLOT, _ENTRIES_REST = divmod(StoreConfig.max_index_num, StoreConfig.max_hash_slot_num)
assert _ENTRIES_REST == 0, "infer_format_settings needs a whole number of index entries per hash slot"
_INDEX_BYTES_PER_SLOT = INDEX_SLOT.size + _ENTRIES_PER_SLOT * INDEX_ENTRY.size
_new_object = object.__new__
#: `RECORD_KEY`, then SYSFLAG and the body length: all an unfiltered read needs of a record, in one call.
_READ_HEAD = struct.Struct(f"{RECORD_KEY.format}{SYSFLAG_POS - RECORD_KEY.size}xi"
                           f"{BODY_LENGTH_POS - SYSFLAG_POS - 4}xi")
assert _READ_HEAD.size == BODY_POS

log = logging.getLogger("mqlite")


class GetMessageStatus(Enum):
    """`GetMessageStatus` of RocketMQ's store."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class GetMessageResult:
    """Messages read from one queue, with the offset to read from next."""

    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "messages")

    def __init__(self, status: GetMessageStatus, next_begin_offset: int, min_offset: int, max_offset: int,
                 messages: list[MessageExt] | None = None) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.messages: list[MessageExt] = messages if messages is not None else []

    def __repr__(self) -> str:
        return (f"GetMessageResult({self.status.name}, next_begin_offset={self.next_begin_offset}, "
                f"min={self.min_offset}, max={self.max_offset}, messages={len(self.messages)})")


class MessageFilter(Protocol):
    """RocketMQ's `MessageFilter`: a cheap check on the unit, an exact one on the message."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        """False rules the message out from its 20-byte unit alone."""
        ...

    def is_matched_by_commit_log(self, message: MessageExt) -> bool:
        """The exact match, on the stored message."""
        ...


def infer_format_settings(root: str) -> dict[str, Any]:
    """File sizes read off a store without `config/store.json` (one a RocketMQ broker wrote)."""
    inferred: dict[str, Any] = {}
    commitlog = os.path.join(root, "commitlog")
    for name in sorted(_listdir(commitlog)):
        size = os.path.getsize(os.path.join(commitlog, name))
        if len(name) == 20 and name.isdigit() and size > 0:
            inferred["commitlog_file_size"] = size
            break
    cq_root = os.path.join(root, "consumequeue")
    for topic in _listdir(cq_root):
        for qid in _listdir(os.path.join(cq_root, topic)):
            for name in _listdir(os.path.join(cq_root, topic, qid)):
                size = os.path.getsize(os.path.join(cq_root, topic, qid, name))
                if size > 0 and size % CQ_UNIT == 0:
                    inferred["consumequeue_file_size"] = size
                    break
            if "consumequeue_file_size" in inferred:
                break
        if "consumequeue_file_size" in inferred:
            break
    index_dir = os.path.join(root, "index")
    for name in _listdir(index_dir):
        size = os.path.getsize(os.path.join(index_dir, name))
        slots, rest = divmod(size - INDEX_HEADER.size, _INDEX_BYTES_PER_SLOT)  # the default shape
        if size > INDEX_HEADER.size and rest == 0:
            inferred["max_hash_slot_num"], inferred["max_index_num"] = slots, slots * _ENTRIES_PER_SLOT
            break
    return inferred


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


class StoreFiles:
    """The mapped files of one store directory and every read on them."""

    def __init__(self, root: str, config: StoreConfig, *, read_only: bool, clock: Clock = SYSTEM_CLOCK,
                 tags_code_fn: TagsCodeFn | None = None) -> None:
        self.root = root
        self.config = config
        self.clock = clock
        self.read_only = read_only
        self.broker_name = config.broker_name
        self._files_closed = False
        self.commitlog = CommitLog(os.path.join(root, "commitlog"), config, clock, read_only=read_only,
                                   tags_code_fn=tags_code_fn)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_lock = threading.Lock()
        self.commitlog.set_aside = load_set_aside(root)
        self.commitlog.damaged = load_damaged(root)
        self.checkpoint = StoreCheckpoint(os.path.join(root, "checkpoint"), read_only=read_only)
        self.index = IndexService(os.path.join(root, "index"), config.max_hash_slot_num, config.max_index_num,
                                  max_msgs_num_batch=config.max_msgs_num_batch, read_only=read_only,
                                  on_file_full=self._on_index_file_full, name_clock=clock.now_ms)

    def _on_index_file_full(self, end_timestamp: int) -> None:
        self.checkpoint.index_msg_timestamp = end_timestamp

    # -- loading ---------------------------------------------------------------------------
    def load_files(self, last_exit_ok: bool) -> None:
        """Map every commit-log, consume-queue and index file (`DefaultMessageStore.load`)."""
        self.commitlog.mapped_files.load(strict=not self.read_only)
        self._load_consume_queues()
        if self.config.message_index_enable or self.read_only:
            self.index.load(last_exit_ok, self.checkpoint.index_msg_timestamp)

    def _queues_on_disk(self) -> tuple[list[tuple[str, int]], bool]:
        """`(topic, queue id)` of the consume-queue directories on disk, sorted, and whether the listing
        is whole (a directory that could not be listed for another reason than being gone is no proof
        that its queues went). One `listdir` per topic."""
        cq_root = os.path.join(self.root, "consumequeue")
        found: list[tuple[str, int]] = []
        try:
            topics = sorted(os.listdir(cq_root))
        except OSError:
            return found, False
        whole = True
        for topic in topics:
            try:
                qids = os.listdir(os.path.join(cq_root, topic))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                whole = False
                continue
            found += [(topic, int(qid)) for qid in sorted(qids) if qid.isdigit()]
        return found, whole

    def _load_consume_queues(self, on_disk: list[tuple[str, int]] | None = None) -> list[ConsumeQueue]:
        """Map the consume queues on disk (`on_disk`, else listed now) that are not mapped yet; returns the new ones."""
        cq_root = os.path.join(self.root, "consumequeue")
        fresh: dict[tuple[str, int], ConsumeQueue] = {}
        for topic, qid in self._queues_on_disk()[0] if on_disk is None else on_disk:
            if (topic, qid) not in self.consume_queues:
                cq = ConsumeQueue(cq_root, topic, qid, self.config.consumequeue_file_size, read_only=self.read_only)
                cq.load()
                fresh[(topic, qid)] = cq
        if fresh:
            self.consume_queues = {**self.consume_queues, **fresh}
        return list(fresh.values())

    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        """The consume queue of (topic, queue id); created on demand by the writer."""
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None and create and not self.read_only:
            with self._cq_lock:
                cq = self.consume_queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(os.path.join(self.root, "consumequeue"), topic, queue_id,
                                      self.config.consumequeue_file_size)
                    self.consume_queues = {**self.consume_queues, (topic, queue_id): cq}
        return cq

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The consume queue of (topic, queue id), or None. A reader that meets a queue the writer
        created after it last looked maps it then (with `refresh`, which also extends the log's end)."""
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None and self.read_only and os.path.isdir(
                os.path.join(self.root, "consumequeue", topic, str(queue_id))):
            self.refresh()
            cq = self.consume_queues.get((topic, queue_id))
        return cq

    def refresh(self) -> None:
        """Pick up what another process wrote since this view looked (a reader's job; a writer knows)."""

    # -- topics and offsets -------------------------------------------------------------------
    def topics(self) -> list[str]:
        """Topics that have consume queues, sorted."""
        self._require_open()
        return sorted({topic for topic, _ in self.consume_queues})

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of `topic` that have consume queues, sorted."""
        self._require_open()
        return sorted(qid for t, qid in self.consume_queues if t == topic)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest readable queue offset (0 for an unknown queue)."""
        self._require_open()
        cq = self._queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written (0 for an unknown queue); a reader sees what its consume queues hold."""
        self._require_open()
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        cq.refresh()
        return cq.max_offset

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: str = LOWER) -> int:
        """`getOffsetInQueueByTime` (0 for an unknown queue)."""
        self._require_open()
        cq = self._queue(topic, queue_id)
        return cq.offset_by_time(timestamp, self.commitlog.store_timestamp_at, boundary) if cq else 0

    def store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time of the message at `queue_offset` (-1 when absent)."""
        self._require_open()
        cq = self._queue(topic, queue_id)
        unit = cq.unit_at(queue_offset) if cq else None
        return self.commitlog.store_timestamp_at(unit[0], unit[1]) if unit else -1

    # -- messages ----------------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     message_filter: MessageFilter | None = None, max_bytes: int = MAX_PULL_MSG_SIZE) -> GetMessageResult:
        """Up to `max_count` messages of a queue from `offset` (`DefaultMessageStore.getMessage`), of at
        most `max_bytes` of records together (at least one record: RocketMQ's
        `maxTransferBytesOnMessageInMemory`, checked before a record is copied).

        Never blocks; returns RocketMQ's status when there is nothing to return.
        Cost: one slice of units plus one record copy per message; filters
        first test the tags code on the unit, then the message.
        """
        self._require_open()
        cq = self._queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        cq.refresh()
        low, high = cq.min_offset, cq.max_offset
        if high == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, low, high)
        if offset < low:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, low, low, high)
        if offset == high:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
        if offset > high:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
        if message_filter is None:
            return self._get_unfiltered(cq, offset, min(max_count, high - offset), low, high, max_bytes)
        return self._get_filtered(cq, offset, max_count, message_filter, low, high, max_bytes)

    def _get_unfiltered(self, cq: ConsumeQueue, offset: int, count: int, low: int, high: int,
                        max_bytes: int) -> GetMessageResult:
        # The read hot path (measured in bench/): no calls per message but two slices;
        # a plain record's body is cut here, so `.body` costs nothing later.
        messages: list[MessageExt] = []
        append = messages.append
        broker = self.broker_name
        new = _new_object
        cls = StoredMessage
        find = self.commitlog.mapped_files.find
        unpack_len = BODY_LENGTH.unpack_from
        unpack_head = _READ_HEAD.unpack_from
        head_size = _READ_HEAD.size  # a valid record is longer: topic, properties
        slow = _SLOW_BODY_FLAGS
        queue_id = cq.queue_id
        own = not cq.is_light  # a light message queue's units point at other queues' records
        min_log = self.commitlog.min_offset
        qoff = offset
        removed = 0
        bad: list[int] = []
        aside: list[int] = []
        total_bytes = 0
        mf = None
        mm = None
        start = end = 0
        stop = offset + count
        set_aside = self.commitlog.set_aside  # records recovery set aside (wrong body CRC): never handed out
        repair: _ReadRepair | None = None  # made at the first bad unit: good units cost nothing more
        while qoff < stop:
            data = cq.read_units(qoff, stop - qoff)
            if not data:
                break
            for commit_log_offset, size, _ in CQ_UNIT_STRUCT.iter_unpack(data):
                if not start <= commit_log_offset < end:
                    mf = find(commit_log_offset) if commit_log_offset >= 0 else None
                    if mf is None:
                        mm, start, end = None, 0, 0
                    else:
                        mm, start, end = mf.mm, mf.file_from_offset, mf.file_from_offset + mf.file_size
                raw = (mm[commit_log_offset - start : commit_log_offset - start + size]
                       if mm is not None and size > 0 else b"")
                # The unit must point at its own record (units below max offset are all written,
                # so anything else is damage, or a record retention deleted): skip it, never stall.
                if len(raw) == size > head_size:
                    total, magic, record_qid, record_qoff, sysflag, body_length = unpack_head(raw)
                    good = total == size and magic in MAGIC_BYTES and (
                        (record_qoff == qoff and record_qid == queue_id) or not own)
                else:
                    good = False
                if not good or (set_aside and commit_log_offset in set_aside):
                    if set_aside and commit_log_offset in set_aside:
                        aside.append(qoff)  # recovery set it aside: known, reported, never handed out
                        raw = b""
                    elif mm is not None or commit_log_offset >= min_log or size <= 0:
                        if repair is None:
                            repair = _ReadRepair(self, cq)
                        raw = repair.record(qoff)  # the log still holds the record: hand it out
                        if not raw:
                            bad.append(qoff)
                    else:
                        raw = b""  # retention deleted the record
                    if not raw:
                        qoff += 1
                        removed += 1
                        continue
                    size = len(raw)
                    sysflag, body_length = raw[SYSFLAG_LOW_POS], unpack_len(raw, BODY_LENGTH_POS)[0]
                if total_bytes + size > max_bytes and messages:
                    stop = qoff  # the budget is spent: this record comes with the next read
                    break
                msg = new(cls)
                msg._raw = raw
                msg.broker_name = broker
                # Known from the unit: consumers' process queues key on it without decoding the record.
                msg.queue_offset = qoff
                qoff += 1
                # SYSFLAG's low byte holds the compression and IPv6 host bits.
                msg._body = raw[BODY_POS : BODY_POS + body_length] if not sysflag & slow else None
                append(msg)
                total_bytes += size
        _log_skips(cq, bad, aside, repair)
        if messages:
            status = GetMessageStatus.FOUND
        elif removed:
            status = GetMessageStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, qoff, low, high, messages)

    def _get_filtered(self, cq: ConsumeQueue, offset: int, max_count: int, message_filter: MessageFilter,
                      low: int, high: int, max_bytes: int) -> GetMessageResult:
        messages: list[MessageExt] = []
        total_bytes = 0
        scan_limit = max(_FILTER_SCAN_BYTES // CQ_UNIT, max_count)
        qoff = offset
        read = self.commitlog.read
        min_log = self.commitlog.min_offset
        bad: list[int] = []
        aside: list[int] = []
        set_aside = self.commitlog.set_aside
        repair: _ReadRepair | None = None
        stop = min(high, offset + scan_limit)
        while qoff < stop:
            data = cq.read_units(qoff, stop - qoff)
            if not data:
                break
            done = False
            for commit_log_offset, size, code in CQ_UNIT_STRUCT.iter_unpack(data):
                qoff += 1
                if commit_log_offset >= 0 and size > 0 and not message_filter.is_matched_by_consume_queue(code):
                    continue
                if set_aside and commit_log_offset in set_aside:
                    aside.append(qoff - 1)  # as `get_messages`: known, one line per read, never handed out
                    continue
                raw = read(commit_log_offset, size) if commit_log_offset >= 0 and size > 0 else None
                if raw is None or len(raw) < RECORD_KEY.size or (
                        RECORD_KEY.unpack_from(raw)[2:] != (cq.queue_id, qoff - 1) and not cq.is_light):
                    if raw is not None or commit_log_offset >= min_log or size <= 0:
                        if repair is None:
                            repair = _ReadRepair(self, cq)
                        raw = repair.record(qoff - 1)
                        if not raw:
                            bad.append(qoff - 1)  # skipped like a filtered-out message: never stall on it
                            continue
                        if not message_filter.is_matched_by_consume_queue(repair.tags_code(qoff - 1)):
                            continue
                    else:
                        continue
                if total_bytes + len(raw) > max_bytes and messages:
                    qoff -= 1  # the budget is spent: this unit is read again next time
                    done = True
                    break
                msg = StoredMessage(raw, self.broker_name)
                if not message_filter.is_matched_by_commit_log(msg):
                    continue
                total_bytes += len(raw)
                messages.append(msg)
                if len(messages) >= max_count:
                    done = True
                    break
            if done:
                break
        _log_skips(cq, bad, aside, repair)
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, qoff, low, high, messages)

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage:
        """The message whose record starts at `commit_log_offset`; `MessageNotFoundError` when none."""
        self._require_open()
        size = self.commitlog.record_size_at(commit_log_offset)
        msg = self.commitlog.read_message(commit_log_offset, size, self.broker_name) if size else None
        if msg is None:
            raise MessageNotFoundError(f"no message starts at commit-log offset {commit_log_offset}")
        return msg

    def query_message(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """Messages of `topic` whose UNIQ_KEY or one of whose KEYS equals `key`, newest first.

        The index compares only hashes; the keys are checked here, as
        RocketMQ's `MQAdminImpl.queryMessage` does on the client.
        """
        self._require_open()
        end = end if end is not None else 2**63 - 1
        found: list[MessageExt] = []
        for offset in self.index.query_offsets(topic, key, max_num, begin, end):
            try:
                msg = self.look_message_by_offset(offset)
            except MessageNotFoundError:
                continue
            if msg.topic != topic:
                continue
            keys = msg.properties.get(PROPERTY_KEYS, "")
            if msg.msg_id == key or key in keys.split(" "):
                found.append(msg)
        return found

    def _require_open(self) -> None:
        if self._files_closed:
            raise IllegalStateError(f"the store at {self.root} is closed")

    def close_files(self) -> None:
        """Unmap everything. Reads afterwards raise `IllegalStateError`."""
        if self._files_closed:
            return
        self._files_closed = True
        self.commitlog.close()
        for cq in self.consume_queues.values():
            cq.close()
        self.index.close()
        self.checkpoint.close()


class _ReadRepair:
    """Records found in the log for damaged units met by one read (read repair; see `find_queue_records`).

    A queue's units point at increasing log offsets, so the record a bad unit lost lies between the
    records of the nearest good units before and after the bad run (looked for within `_REPAIR_REACH`
    units; beyond that, the log's ends). One walk of that span per bad run finds every record of the
    run. A writer also rewrites each unit found (under the commit log's put lock, as every unit write);
    a reader only hands the record out. Records the damage destroyed stay missing: the unit is skipped.
    """

    __slots__ = ("files", "cq", "found", "fixed", "rewritten")

    def __init__(self, files: StoreFiles, cq: ConsumeQueue) -> None:
        self.files = files
        self.cq = cq
        self.found: dict[int, DispatchRequest] = {}
        self.fixed: list[int] = []
        self.rewritten = 0

    def record(self, queue_offset: int) -> bytes:
        """The record of `queue_offset` (b"" when the log does not hold it)."""
        if self.cq.is_light:
            return b""  # its units point at other queues' records: nothing to match them with
        if queue_offset not in self.found:
            self.found.update(self._walk(queue_offset))
        request = self.found.get(queue_offset)
        commitlog = self.files.commitlog
        raw = commitlog.read(request.commit_log_offset, request.size) if request is not None else None
        if not raw:
            return b""
        self.fixed.append(queue_offset)
        assert request is not None
        if not self.files.read_only:
            with commitlog.put_lock:
                self.rewritten += self.cq.rewrite_unit(queue_offset, request.commit_log_offset, request.size,
                                                       request.tags_code)
        return raw

    def tags_code(self, queue_offset: int) -> int:
        """The tags code of a record `record` found."""
        return self.found[queue_offset].tags_code

    def _walk(self, queue_offset: int) -> dict[int, DispatchRequest]:
        cq, commitlog = self.cq, self.files.commitlog
        low, high = max(cq.min_offset, queue_offset - _REPAIR_REACH), min(cq.max_offset, queue_offset + _REPAIR_REACH)
        after, end = queue_offset + 1, commitlog.max_offset
        while after < high:
            unit = self._good_unit(after)
            if unit is not None:
                end = unit[0]
                break
            after += 1
        before, start = queue_offset - 1, commitlog.min_offset
        while before >= low:
            unit = self._good_unit(before)
            if unit is not None:
                start = unit[0] + unit[1]
                break
            before -= 1
        return find_queue_records(commitlog, commitlog.damaged, cq.topic, cq.queue_id,
                                  max(start, commitlog.min_offset), end, range(before + 1, after))

    def _good_unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        """The unit at `queue_offset` when it points at its own record."""
        unit = self.cq.unit_at(queue_offset)
        commitlog = self.files.commitlog
        if unit is None or unit[0] in commitlog.set_aside:
            return None  # not read: `read` would log each set-aside one (a damaged range has thousands)
        raw = commitlog.read(unit[0], unit[1])
        if raw is None or len(raw) < RECORD_KEY.size:
            return None
        _, _, record_qid, record_qoff = RECORD_KEY.unpack_from(raw)
        return unit if (record_qid, record_qoff) == (self.cq.queue_id, queue_offset) else None

    def log(self) -> None:
        """One warning line for the read (none when nothing was found)."""
        if self.fixed:
            done = (f"rewrote {self.rewritten} unit(s)" if not self.files.read_only
                    else "a writer's read rewrites them")
            log.warning("%s: %d unit(s) from queue offset %d did not point at their records (damaged consume "
                        "queue); found the records in the commit log and handed them out; %s",
                        self.cq.name, len(self.fixed), self.fixed[0], done)


def _log_skips(cq: ConsumeQueue, bad: list[int], aside: list[int], repair: _ReadRepair | None) -> None:
    """A read's log lines: one each for the damaged units it skipped, the set-aside records it
    skipped and the units it repaired (never a line per unit)."""
    if bad:
        _log_bad_units(cq, bad)
    if aside:
        _log_set_aside_units(cq, aside)
    if repair is not None:
        repair.log()


def _log_bad_units(cq: ConsumeQueue, bad: list[int]) -> None:
    """One error line per read for the damaged units it skipped (`mqlite verify` names the cause)."""
    log.error("%s: %d unit(s) from queue offset %d do not point at their records (damaged consume queue); "
              "skipped them. Run `mqlite verify` on the store; reopening it rebuilds a queue whose damage "
              "open detects (deleting the damaged file makes it so)", cq.name, len(bad), bad[0])


def _log_set_aside_units(cq: ConsumeQueue, aside: list[int]) -> None:
    """One warning per read for the units whose records recovery set aside (a wrong body CRC, or
    bytes a damaged range destroyed: `config/setAside.json`); consumers never get those bodies."""
    log.warning("%s: skipped %d message(s) from queue offset %d whose records recovery set aside "
                "(damaged; `mqlite verify` names them)", cq.name, len(aside), aside[0])


def config_for(root: str, settings: Mapping[str, Any]) -> StoreConfig:
    """Settings for opening `root`: stored (or inferred from a broker's files), then `settings`."""
    return resolve_config(root, settings, infer_format_settings(root))
