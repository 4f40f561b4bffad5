"""Transactional messages on the broker side: half and op topics, end transaction, check-back.

RocketMQ's design, as rewrites above the store (`TransactionalMessageBridge`,
`TransactionalMessageServiceImpl`, `EndTransactionProcessor`):

* **Prepare.** The broker rewrites a prepared message with `parse_half_message`:
  the real topic and queue go into `REAL_TOPIC`/`REAL_QID`, the record lands in
  queue 0 of `RMQ_SYS_TRANS_HALF_TOPIC` (a normal consume queue, invisible to
  users) and consumers of the real topic see nothing.
* **End.** `end_transaction` looks the half up by commit-log offset. Commit
  stores the real message (same `UNIQ_KEY`, so the same `msg_id`); commit and
  rollback both write an *op* message that marks the half done:

      | field     | value                                                      |
      |-----------|------------------------------------------------------------|
      | topic     | RMQ_SYS_TRANS_OP_HALF_TOPIC, queue id = the half queue's   |
      | TAGS      | "d" (REMOVE_TAG)                                           |
      | body      | UTF-8 half-queue offsets, each followed by ",": b"5,6,"    |
      | UNIQ_KEY  | a fresh id                                                 |

  mqlite writes one op per end, at once (RocketMQ buffers them for up to 3 s in
  `TransactionalOpBatchService`; in one process the immediate write costs one
  small record and loses nothing on a crash). The reader accepts batched bodies.
* **Check.** `check()` is one round of `TransactionalMessageServiceImpl.check`:
  it walks the half queue from the offset committed for group
  `CID_RMQ_SYS_TRANS`, skipping halves an op marks done. A half older than
  `transaction_timeout` (or its `CHECK_IMMUNITY_TIME_IN_SECONDS`) is re-appended
  with `TRANSACTION_CHECK_TIMES` + 1 and handed to `check_listener`, which asks a
  live producer of its group. After `transaction_check_max` checks, or once older
  than `file_reserved_time`, the half moves to `TRANS_CHECK_MAX_TIME_TOPIC`.

Everything lives in the store and in `ConsumerOffsets`, so pending halves
survive a restart and are checked by the next round after it.

One deliberate difference from RocketMQ: when no producer of a half's group is
alive (`check_listener` returns False), RocketMQ drops the check request yet
counts it. mqlite does not count it: the counted copy is marked done with an op
and the half is re-appended with its count unchanged, so it waits for a producer
of its group without holding back halves of other groups.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal, NamedTuple

from ._service import Service
from .clock import Clock, moves_by_hand, on_advance
from .commitlog import PutMessageStatus, PutResult
from .record import stored_body
from .errors import IllegalStateError, MessageNotFoundError, MQClientError
from .message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    MessageExt,
    SysFlag,
    UniqIdGenerator,
)
from .offsets import ConsumerOffsets
from .storebase import GetMessageStatus
from .store import MessageStore

__all__ = [
    "HALF_TOPIC", "OP_TOPIC", "CHECK_MAX_TOPIC", "REMOVE_TAG", "CID_SYS_TRANS", "OFFSET_SEPARATOR",
    "OP_MSG_PULL_NUMS", "MAX_PROCESS_TIME_LIMIT", "CheckListener", "CheckReport",
    "TransactionalMessageService", "TransactionCheckService",
    "parse_half_message", "get_immunity_time", "op_body", "parse_op_body", "calculate_op_offset",
]

log = logging.getLogger("mqlite")

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG
CID_SYS_TRANS = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS: the check's consumer group
OFFSET_SEPARATOR = ","
OP_MSG_PULL_NUMS = 32  # op messages read per pull
MAX_PROCESS_TIME_LIMIT = 60.0  # seconds one queue's round may take (60000 ms in RocketMQ)
MAX_RETRY_COUNT_WHEN_HALF_NULL = 1
CHECK_MAX_QUEUE_ID = 0  # TRANS_CHECK_MAX_TIME_TOPIC has one queue (TCMT_QUEUE_NUMS = 1)

#: `(producer_group, half restored to its real topic and queue) -> a live producer was asked`.
CheckListener = Callable[[str, MessageExt], bool]
PutFn = Callable[..., PutResult]

_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_OK = (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)  # the record is in the log either way


# -- pure rewrites -----------------------------------------------------------------------------------------
def parse_half_message(topic: str, queue_id: int, properties: Mapping[str, str],
                       sys_flag: int) -> tuple[str, int, dict[str, str], int]:
    """`parseHalfMessageInner`: where and how the broker stores a prepared message.

    Returns `(HALF_TOPIC, 0, properties, sys_flag)` with `REAL_TOPIC`, `REAL_QID`
    and `__transactionId__` (= `UNIQ_KEY`) added and the transaction bits reset
    to NOT_TYPE, so the half enters the half topic's consume queue.
    Raises `MQClientError` without `PGROUP` (nobody could end or check it).

    >>> t, q, p, f = parse_half_message("orders", 3, {"PGROUP": "tg", "UNIQ_KEY": "AB", "TRAN_MSG": "true"}, 4)
    >>> t, q, p["REAL_TOPIC"], p["REAL_QID"], p["__transactionId__"], f
    ('RMQ_SYS_TRANS_HALF_TOPIC', 0, 'orders', '3', 'AB', 0)
    """
    if not properties.get(PROPERTY_PRODUCER_GROUP):
        raise MQClientError(f"a transactional message for {topic!r} needs the {PROPERTY_PRODUCER_GROUP} property "
                            "(the producer group that ends and checks it); send it with a TransactionProducer")
    props = dict(properties)
    uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq:
        props[PROPERTY_TRANSACTION_ID] = uniq
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return HALF_TOPIC, 0, props, SysFlag.reset_transaction_value(sys_flag, SysFlag.TRANSACTION_NOT_TYPE)


def get_immunity_time(properties: Mapping[str, str], transaction_timeout_ms: int) -> int:
    """`TransactionalMessageUtil.getImmunityTime`: ms before a half may be checked.

    `CHECK_IMMUNITY_TIME_IN_SECONDS` * 1000, or `transaction_timeout_ms` when the
    property is absent, not a Java long, or gives less than the timeout.

    >>> get_immunity_time({"CHECK_IMMUNITY_TIME_IN_SECONDS": "7"}, 6000), get_immunity_time({}, 6000)
    (7000, 6000)
    """
    text = properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    immunity = 0
    if text is not None and _JAVA_LONG.fullmatch(text):
        seconds = int(text)
        if -(1 << 63) <= seconds < 1 << 63:  # Long.parseLong overflows into an exception
            immunity = _java_long(seconds * 1000)
    return immunity if immunity >= transaction_timeout_ms else transaction_timeout_ms


def op_body(offsets: Iterable[int]) -> bytes:
    """The body of an op message: each half-queue offset followed by ",".

    >>> op_body([5, 6])
    b'5,6,'
    """
    return "".join(f"{offset}{OFFSET_SEPARATOR}" for offset in offsets).encode("utf-8")


def parse_op_body(body: bytes) -> list[int]:
    """Half-queue offsets of an op body; an unreadable entry gives -1 (Java's `getLong`).

    >>> parse_op_body(b"5,6,"), parse_op_body(b"7,x")
    ([5, 6], [7, -1])
    """
    text = body.decode("utf-8", "replace")
    parts = text.split(OFFSET_SEPARATOR)
    while parts and not parts[-1]:
        parts.pop()  # Java's String.split drops trailing empty strings
    return [int(p) if _JAVA_LONG.fullmatch(p) else -1 for p in parts]


def calculate_op_offset(done_op_offsets: list[int], old_offset: int) -> int:
    """`calculateOpOffset`: advance `old_offset` over the contiguous run of done op offsets.

    >>> calculate_op_offset([4, 2, 3, 6], 2)
    5
    """
    new_offset = old_offset
    for offset in sorted(done_op_offsets):
        if offset != new_offset:
            break
        new_offset += 1
    return new_offset


def _java_long(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


# -- pulls (TransactionalMessageBridge.getMessage) -------------------------------------------------------------
class PullStatus(Enum):
    """The client `PullStatus` the bridge maps store statuses to."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS = {
    GetMessageStatus.FOUND: PullStatus.FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
}


class _Pull(NamedTuple):
    status: PullStatus
    next_begin_offset: int
    messages: list[MessageExt]  # empty unless FOUND (Java's null msgFoundList)


@dataclass
class CheckReport:
    """What one `check()` round did (for logs and tests)."""

    checked: int = 0  # check-backs handed to a live producer
    discarded: int = 0  # halves moved to TRANS_CHECK_MAX_TIME_TOPIC
    waiting: int = 0  # halves re-appended uncounted: no producer of their group is alive
    immunity: int = 0  # halves inside their CHECK_IMMUNITY_TIME: re-appended, or found done by their first offset


class _Round:
    """The state of one queue's round: RocketMQ's removeMap, opMsgMap and doneOpOffset."""

    def __init__(self, queue_id: int, half_offset: int, start_ms: int) -> None:
        self.queue_id = queue_id
        self.half_offset = half_offset
        self.new_offset = half_offset  # where the next round starts
        self.start_ms = start_ms
        self.remove_map: dict[int, int] = {}  # half offset -> op offset that marks it done
        self.op_msg_map: dict[int, set[int]] = {}  # op offset -> half offsets still to meet
        self.done_op_offsets: list[int] = []
        self.dead_groups: set[str] = set()  # producer groups with no live producer this round

    def consume(self, half: int, op_offset: int) -> None:
        """Half `half` was met done: once all offsets of its op are met, the op is done."""
        pending = self.op_msg_map.get(op_offset)
        if pending is not None:
            pending.discard(half)
            if not pending:
                del self.op_msg_map[op_offset]
                self.done_op_offsets.append(op_offset)


# -- the service -----------------------------------------------------------------------------------------------
class TransactionalMessageService:
    """Half messages of one store: end transactions and run check rounds.

    `put` is the broker's raw put (`MessageStore.put`'s signature, default
    `store.put`); every record this service writes goes through it.
    `check_listener(group, msg)` is called on the checking thread with the
    half restored to its real topic and queue (`transaction_id` set,
    `commit_log_offset`/`queue_offset` those of the re-appended half); it asks
    a live producer of `group` and applies its answer with `end_transaction(...,
    from_check=True)`, returning False when no producer of the group is alive.
    Durations default to `store.config` (seconds, hours for `file_reserved_time`).
    Thread-safe; `check()` rounds never overlap.
    """

    def __init__(self, store: MessageStore, offsets: ConsumerOffsets, *, put: PutFn | None = None,
                 clock: Clock | None = None, transaction_timeout: float | None = None,
                 check_max: int | None = None, file_reserved_time: float | None = None,
                 check_listener: CheckListener | None = None) -> None:
        config = store.config
        self.store = store
        self.offsets = offsets
        self.put: PutFn = put if put is not None else store.put
        self.clock: Clock = clock if clock is not None else store.clock
        self.transaction_timeout_ms = round(1000 * (config.transaction_timeout if transaction_timeout is None
                                                    else transaction_timeout))
        self.check_max = config.transaction_check_max if check_max is None else check_max
        hours = config.file_reserved_time if file_reserved_time is None else file_reserved_time
        self.file_reserved_ms = round(hours * 3_600_000)
        self.check_listener = check_listener
        self._ids = UniqIdGenerator()
        self._round_lock = threading.Lock()
        self._round_thread: int | None = None

    # -- end transaction (EndTransactionProcessor) ---------------------------------------------------------------
    def end_transaction(self, half_commit_log_offset: int, commit: bool, producer_group: str, *,
                        from_check: bool, transaction_id: str | None = None,
                        tran_state_table_offset: int | None = None) -> PutResult | None:
        """Commit or roll back the half at `half_commit_log_offset`.

        Commit stores the real message (its `PutResult` is returned) and then
        the op; rollback writes only the op (returns None). A non-check end
        arriving after the half's `CHECK_IMMUNITY_TIME_IN_SECONDS` is refused as
        RocketMQ refuses it (ILLEGAL_OPERATION): logged, nothing written, None;
        the check-back decides. Raises `MQClientError` for an offset that holds
        no half message, or a producer group, transaction id or state-table
        offset that does not match the half. Blocks for one or two puts.
        """
        half = self._half_at(half_commit_log_offset)
        props = half.properties
        group = props.get(PROPERTY_PRODUCER_GROUP)
        if group != producer_group:
            raise MQClientError(
                f"the half message at commit-log offset {half_commit_log_offset} belongs to producer group "
                f"{group!r}, not {producer_group!r}; end it from a producer of its own group")
        if transaction_id is not None and transaction_id not in (
                props.get(PROPERTY_TRANSACTION_ID), props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)):
            raise MQClientError(
                f"transaction id {transaction_id!r} does not match the half message at commit-log offset "
                f"{half_commit_log_offset} (its id is {props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)!r})")
        if tran_state_table_offset is not None and tran_state_table_offset != half.queue_offset:
            raise MQClientError(
                f"the half message at commit-log offset {half_commit_log_offset} has half-queue offset "
                f"{half.queue_offset}, not {tran_state_table_offset}")
        if not from_check and self._reject_late_end(half):
            log.warning("end transaction of %s refused: it came after CHECK_IMMUNITY_TIME_IN_SECONDS; "
                        "the check-back will decide", half.msg_id)
            return None
        result = None
        if commit and not (from_check and self._already_committed(half)):
            result = self._put_real_message(half)
        self.delete_prepare_message(half)
        return result

    def _already_committed(self, half: MessageExt) -> bool:
        """True when a commit record of this transaction is already in its real topic.

        A crash between a check-back's commit and the saving of the check
        position replays that check-back; the answer must not commit a second
        copy (RocketMQ leaves this window open). Looked up by the message key
        index (`UNIQ_KEY` is kept by the commit).
        """
        real_topic = half.properties.get(PROPERTY_REAL_TOPIC)
        uniq = half.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if not real_topic or not uniq:
            return False
        wait = getattr(self.store, "wait_dispatched", None)
        if wait is not None:
            wait()  # the index is built by the reput thread
        return any(m.sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT_TYPE
                   for m in self.store.query_message(real_topic, uniq, 4))

    def _half_at(self, commit_log_offset: int) -> MessageExt:
        try:
            half = self.store.look_message_by_offset(commit_log_offset)
        except MessageNotFoundError:
            raise MQClientError(
                f"no half message at commit-log offset {commit_log_offset}; pass the commit_log_offset of the "
                "prepared message (from its send result or the check-back message)") from None
        if half.topic != HALF_TOPIC:
            raise MQClientError(
                f"the message at commit-log offset {commit_log_offset} is in topic {half.topic!r}, "
                f"not a half message ({HALF_TOPIC})")
        return half

    def _reject_late_end(self, half: MessageExt) -> bool:
        """`rejectCommitOrRollback`: a producer's own end after its custom immunity time."""
        if not half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS):
            return False
        age = self.clock.now_ms() - half.born_timestamp
        return age > get_immunity_time(half.properties, self.transaction_timeout_ms)

    def _put_real_message(self, half: MessageExt) -> PutResult:
        """`endMessageTransaction` + `sendFinalMessage`: the real message, committed."""
        props = dict(half.properties)
        topic = props.pop(PROPERTY_REAL_TOPIC, None)
        queue_text = props.pop(PROPERTY_REAL_QUEUE_ID, None)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        if not topic or queue_text is None or not queue_text.isdigit():
            raise MQClientError(f"the half message at commit-log offset {half.commit_log_offset} has no "
                                f"{PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QUEUE_ID}; it was not stored by parse_half_message")
        body, sys_flag = stored_body(half)
        return self.put(topic, int(queue_text), body, props, flag=half.flag,
                        sys_flag=SysFlag.reset_transaction_value(sys_flag, SysFlag.TRANSACTION_COMMIT_TYPE),
                        born_timestamp=half.born_timestamp, born_host=half.born_host,
                        reconsume_times=half.reconsume_times,
                        prepared_transaction_offset=half.commit_log_offset)

    def delete_prepare_message(self, half: MessageExt) -> PutResult:
        """Write the op that marks `half` done (`deletePrepareMessage`, written at once)."""
        return self._write_op(half.queue_id, [half.queue_offset])

    def _write_op(self, queue_id: int, half_offsets: Iterable[int]) -> PutResult:
        props = {PROPERTY_TAGS: REMOVE_TAG, PROPERTY_WAIT_STORE_MSG_OK: "false",
                 PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: self._ids.next_id()}
        return self.put(OP_TOPIC, queue_id, op_body(half_offsets), props)

    # -- check (TransactionalMessageServiceImpl.check) ---------------------------------------------------------------
    def check(self) -> CheckReport:
        """One check round over every half queue; returns what it did.

        Runs on the calling thread (the `mqlite-txn-check` service's, or a
        test's) and calls `check_listener` there, holding no store lock. Bounded
        by `MAX_PROCESS_TIME_LIMIT` per queue. Raises `IllegalStateError` when
        called from inside `check_listener`.
        """
        if self._round_thread == threading.get_ident():
            raise IllegalStateError("check() was called from inside check_listener; a round cannot nest")
        report = CheckReport()
        with self._round_lock:
            self._round_thread = threading.get_ident()
            try:
                for queue_id in self.store.queue_ids(HALF_TOPIC):
                    self._check_queue(queue_id, report)
            finally:
                self._round_thread = None
            # Written at once (RocketMQ: within 5 s), so a crash cannot replay a round's
            # check-backs and commit a transaction twice.
            self.offsets.persist()
        return report

    def _fetch_offset(self, topic: str, queue_id: int) -> int:
        offset = self.offsets.query(CID_SYS_TRANS, topic, queue_id)
        return self.store.min_offset(topic, queue_id) if offset == -1 else offset

    def _pull(self, topic: str, queue_id: int, offset: int, nums: int) -> _Pull:
        result = self.store.get_messages(topic, queue_id, offset, nums)
        status = _PULL_STATUS.get(result.status, PullStatus.OFFSET_ILLEGAL)
        return _Pull(status, result.next_begin_offset, result.messages if status is PullStatus.FOUND else [])

    def _check_queue(self, queue_id: int, report: CheckReport) -> None:
        half_offset = self._fetch_offset(HALF_TOPIC, queue_id)
        op_offset = self._fetch_offset(OP_TOPIC, queue_id)
        if half_offset < 0 or op_offset < 0:
            log.error("half queue %d: illegal offsets %d/%d, skipped", queue_id, half_offset, op_offset)
            return
        rnd = _Round(queue_id, half_offset, self.clock.now_ms())
        try:
            self._scan(rnd, self._fill_op_remove_map(rnd, op_offset), report)
        finally:
            # Also after a failed put: the halves passed so far were handled (RocketMQ
            # commits nothing then, and checks them all again next round).
            if rnd.new_offset != half_offset:
                self.offsets.commit(CID_SYS_TRANS, HALF_TOPIC, queue_id, rnd.new_offset)
            new_op_offset = calculate_op_offset(rnd.done_op_offsets, op_offset)
            if new_op_offset != op_offset:
                self.offsets.commit(CID_SYS_TRANS, OP_TOPIC, queue_id, new_op_offset)

    def _scan(self, rnd: _Round, pull: _Pull, report: CheckReport) -> None:
        """The scan loop from `rnd.half_offset`; leaves the half offset to commit in `rnd.new_offset`."""
        deadline = self.clock.monotonic() + MAX_PROCESS_TIME_LIMIT
        null_count = 1
        i = rnd.half_offset
        empty_op_pulls = 0  # op pulls in a row that found nothing for the same half
        while self.clock.monotonic() <= deadline:
            op_offset = rnd.remove_map.pop(i, None)
            if op_offset is not None:
                rnd.consume(i, op_offset)  # committed or rolled back already
            else:
                got = self._pull(HALF_TOPIC, rnd.queue_id, i, 1)
                if not got.messages:
                    null_count += 1
                    if null_count - 1 > MAX_RETRY_COUNT_WHEN_HALF_NULL or got.status is PullStatus.NO_NEW_MSG:
                        break
                    i = rnd.new_offset = got.next_begin_offset  # an illegal offset: jump
                    continue
                msg = got.messages[0]
                step = self._examine(rnd, msg, pull, report)
                if step == "stop":
                    break
                if step == "more-ops":
                    # RocketMQ sleeps 1 s when the op queue is drained, then looks again. mqlite
                    # looks again at once, and a second empty pull in a row ends the round
                    # (RocketMQ would spin here until MAX_PROCESS_TIME_LIMIT).
                    pull = self._fill_op_remove_map(rnd, pull.next_begin_offset)
                    empty_op_pulls = 0 if pull.messages else empty_op_pulls + 1
                    if empty_op_pulls > 1:
                        break
                    continue
            empty_op_pulls = 0
            i = rnd.new_offset = i + 1

    def _examine(self, rnd: _Round, msg: MessageExt, pull: _Pull,
                 report: CheckReport) -> Literal["next", "stop", "more-ops"]:
        """Decide about one pending half: "next" (done with it), "stop" the round, or read "more-ops"."""
        prior_times = msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES)
        now = self.clock.now_ms()
        if self._need_discard(msg) or now - msg.born_timestamp > self.file_reserved_ms:
            self._resolve_discard(msg)
            report.discarded += 1
            return "next"
        if msg.store_timestamp >= rnd.start_ms:
            return "stop"  # fresh: stored after the round began
        age = now - msg.born_timestamp
        immunity = self.transaction_timeout_ms
        if msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS) is not None:
            immunity = get_immunity_time(msg.properties, self.transaction_timeout_ms)
            if age <= immunity and self._check_prepare_queue_offset(rnd, msg):
                report.immunity += 1
                return "next"
        elif 0 <= age <= immunity:
            return "stop"  # new arrival: too young to check
        ops = pull.messages
        need_check = (not ops and age > immunity) \
            or (bool(ops) and ops[-1].born_timestamp - rnd.start_ms > self.transaction_timeout_ms) \
            or age <= -1
        if not need_check:
            return "more-ops"
        self._check_back(rnd, msg, prior_times, report)
        return "next"

    def _need_discard(self, msg: MessageExt) -> bool:
        """`needDiscard`: count this check in the message's properties, or say it had enough."""
        text = msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES)
        times = 1
        if text is not None:
            times = int(text) if _JAVA_LONG.fullmatch(text) else -1
            if times >= self.check_max:
                return True
            times += 1
        msg.properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
        return False

    def _fill_op_remove_map(self, rnd: _Round, op_offset: int) -> _Pull:
        """`fillOpRemoveMap`: read up to 32 op messages from `op_offset` into the round's maps."""
        pull = self._pull(OP_TOPIC, rnd.queue_id, op_offset, OP_MSG_PULL_NUMS)
        if pull.status in (PullStatus.OFFSET_ILLEGAL, PullStatus.NO_MATCHED_MSG):
            self.offsets.commit(CID_SYS_TRANS, OP_TOPIC, rnd.queue_id, pull.next_begin_offset)
            return pull
        for op in pull.messages:
            halves: set[int] = set()
            if op.properties.get(PROPERTY_TAGS) == REMOVE_TAG:
                for offset in parse_op_body(op.body):
                    if offset >= rnd.half_offset:
                        rnd.remove_map[offset] = op.queue_offset
                        halves.add(offset)
            else:
                log.error("op message with tag %r at %d ignored", op.properties.get(PROPERTY_TAGS), op.queue_offset)
            if halves:
                rnd.op_msg_map[op.queue_offset] = halves
            else:
                rnd.done_op_offsets.append(op.queue_offset)
        return pull

    def _check_prepare_queue_offset(self, rnd: _Round, msg: MessageExt) -> bool:
        """`checkPrepareQueueOffset`: True when the half is done with for this round."""
        text = msg.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
        if text is not None:
            prepare_offset = int(text) if _JAVA_LONG.fullmatch(text) else -1
            if prepare_offset == -1:
                return False
            op_offset = rnd.remove_map.pop(prepare_offset, None)
            if op_offset is not None:
                rnd.done_op_offsets.append(op_offset)
                return True
        # `putImmunityMsgBackToHalfQueue`: re-append, remembering the first half-queue offset.
        props = dict(msg.properties)
        props.setdefault(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, str(msg.queue_offset))
        return self._renew_half(msg, props).status in _OK

    def _check_back(self, rnd: _Round, msg: MessageExt, prior_times: str | None, report: CheckReport) -> None:
        """Put the half back counted and ask its producer; with none alive, requeue it uncounted."""
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP, "")
        if group not in rnd.dead_groups and self.check_listener is not None:
            copy = self._renew_half(msg, msg.properties)
            if self._ask_producer(group, copy):
                report.checked += 1
                return
            rnd.dead_groups.add(group)
            self._write_op(msg.queue_id, [copy.queue_offset])  # the counted copy is void
        props = dict(msg.properties)
        if prior_times is None:
            props.pop(PROPERTY_TRANSACTION_CHECK_TIMES, None)
        else:
            props[PROPERTY_TRANSACTION_CHECK_TIMES] = prior_times
        self._renew_half(msg, props)
        report.waiting += 1

    def _renew_half(self, msg: MessageExt, props: Mapping[str, str]) -> PutResult:
        """`renewHalfMessageInner` + put: a copy of the half appended to its half queue.

        Unlike RocketMQ's copy, the user `flag` is kept (RocketMQ's renew loses it).
        """
        body, sys_flag = stored_body(msg)
        return self.put(msg.topic, msg.queue_id, body, dict(props), flag=msg.flag, sys_flag=sys_flag,
                        born_timestamp=msg.born_timestamp, born_host=msg.born_host)

    def _ask_producer(self, group: str, copy: PutResult) -> bool:
        """`resolveHalfMsg`: hand the re-appended half, restored to its real queue, to the listener."""
        listener = self.check_listener
        if listener is None:
            return False
        msg = self.store.look_message_by_offset(copy.commit_log_offset)
        props = msg.properties  # decodes every field, so the assignments below stick
        msg.topic = props.get(PROPERTY_REAL_TOPIC, msg.topic)
        queue_text = props.get(PROPERTY_REAL_QUEUE_ID, "")
        if queue_text.isdigit():
            msg.queue_id = int(queue_text)
        msg.transaction_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        try:
            return bool(listener(group, msg))
        except Exception:
            # A producer was there but its check failed: as a lost answer in RocketMQ, it counts.
            log.exception("transaction check of %s (group %r) failed", msg.msg_id, group)
            return True

    def _resolve_discard(self, msg: MessageExt) -> PutResult:
        """`resolveDiscardMsg`: keep the half in TRANS_CHECK_MAX_TIME_TOPIC, where nobody consumes it."""
        log.error("half message %s was checked %s times or outlived file_reserved_time; moved to %s",
                  msg.msg_id, msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES), CHECK_MAX_TOPIC)
        body, sys_flag = stored_body(msg)
        return self.put(CHECK_MAX_TOPIC, CHECK_MAX_QUEUE_ID, body, dict(msg.properties), flag=msg.flag,
                        sys_flag=sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                        reconsume_times=msg.reconsume_times)


class TransactionCheckService(Service):
    """Thread `mqlite-txn-check`: `txn.check()` first after `first_delay`, then every `interval` seconds.

    Defaults: `transaction_timeout` and `transaction_check_interval` of the
    store's config. `wakeup()` starts a round at once; `stop()` lets a running
    round finish and joins. RocketMQ's `TransactionalMessageCheckService`.

    A check falls due once its delay has passed in real time or on the store's
    clock, whichever comes first (the clock also decides which halves are old
    enough). The service runs the checks real time makes due; one that a
    hand-moved clock made due runs when `wait_round` asks for it, which
    `Broker.wait_idle` and so `MockClock.advance` do: a test decides when
    check-backs happen, and none runs behind the back of a test that drives
    `TransactionalMessageService.check` itself.
    """

    def __init__(self, txn: TransactionalMessageService, *, interval: float | None = None,
                 first_delay: float | None = None) -> None:
        config = txn.store.config
        delay = config.transaction_timeout if first_delay is None else first_delay
        super().__init__("txn-check", delay)
        self.txn = txn
        self._check_interval = config.transaction_check_interval if interval is None else interval
        self.last_report: CheckReport | None = None
        # A clock that only moves when told (a test's) is read once it moved, not on every look:
        # a stepping ManualClock moves on each reading. Real time is the monotonic clock's.
        self._clock: Clock | None = txn.clock if moves_by_hand(txn.clock) else None
        self._clock_moved = False
        self._due_monotonic = 0.0
        self._due_ms = 0
        self._schedule(delay)
        self._round_cv = threading.Condition()  # guards the three below
        self._check_requested = False
        self._checks_started = 0
        self._checks_finished = 0
        self._stop_watching_clock: Callable[[], None] = lambda: None

    def _schedule(self, delay: float) -> None:
        """The next check falls due `delay` seconds from now, in real time and on the clock."""
        self._due_monotonic = time.monotonic() + delay
        if self._clock is not None:
            self._clock_moved = False
            self._due_ms = self._clock.now_ms() + round(delay * 1000)

    def start(self) -> None:
        """Start the thread (and note when a hand-moved clock moves)."""
        if self._clock is not None:
            self._stop_watching_clock = on_advance(self._clock, self._on_clock_moved)
        super().start()

    def _on_clock_moved(self) -> None:
        self._clock_moved = True

    def wakeup(self) -> None:
        """Run a check now, due or not."""
        with self._round_cv:
            self._check_requested = True
        super().wakeup()

    @property
    def check_due(self) -> bool:
        """True when the next check's time has come (by real time or by the clock)."""
        if time.monotonic() >= self._due_monotonic:
            return True
        clock = self._clock
        return clock is not None and self._clock_moved and clock.now_ms() >= self._due_ms

    def wait_round(self, timeout: float | None = 10.0) -> bool:
        """If a check is due, have one run now and block until it ended; False on timeout.

        For `Broker.wait_idle` (and so `MockClock.advance`): after the clock
        passed `transaction_timeout`, the check-backs are done when this returns.
        The check waited for begins after this call, so it sees the clock as it
        is now. From the service's own thread (a check-back listener) it returns at once.
        """
        if not self.check_due or not self.is_alive or threading.current_thread() is self._thread:
            return True  # nothing due, or asked from a check-back (it would wait for itself)
        with self._round_cv:
            target = self._checks_started + 1
        self.wakeup()
        with self._round_cv:
            return self._round_cv.wait_for(lambda: self._checks_finished >= target or self.is_stopping, timeout)

    def run_once(self) -> None:
        with self._round_cv:
            run = self._check_requested or time.monotonic() >= self._due_monotonic
            self._check_requested = False
            if run:
                self._checks_started += 1
        if run:
            try:
                self.last_report = self.txn.check()
            finally:
                self._schedule(self._check_interval)
                with self._round_cv:
                    self._checks_finished += 1
                    self._round_cv.notify_all()
        # Sleep until the next check in real time (`wakeup` and `wait_round` run one sooner).
        self.interval = max(0.0, min(self._due_monotonic - time.monotonic(), self._check_interval))

    def on_stop(self) -> None:
        self._stop_watching_clock()
        with self._round_cv:
            self._round_cv.notify_all()  # a wait_round in progress sees the service stopping
