"""Transactional messages on the broker side: half/op topics, end transaction, check-back.

A `MessageStore` is driven directly, with a fake `check_listener` standing in for
the broker's hook to live producers and a `ManualClock` for every age: tests move
the clock and call `check()` instead of sleeping.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mqlite.clock import ManualClock
from mqlite.commitlog import PutResult
from mqlite.config import StoreConfig
from mqlite.errors import IllegalStateError, MQClientError
from mqlite.message import MessageExt, SysFlag, UniqIdGenerator
from mqlite.offsets import ConsumerOffsets
from mqlite.store import MessageStore
from mqlite.storebase import GetMessageStatus
from mqlite.txn import (
    CHECK_MAX_TOPIC,
    CID_SYS_TRANS,
    HALF_TOPIC,
    OP_TOPIC,
    REMOVE_TAG,
    TransactionalMessageService,
    TransactionCheckService,
    calculate_op_offset,
    get_immunity_time,
    op_body,
    parse_half_message,
    parse_op_body,
)
from support import SMALL_STORE as SETTINGS

T0 = 1_700_000_000_000
TIMEOUT_MS = 6000  # transaction_timeout default
IDS = UniqIdGenerator()


@dataclass
class Producers:
    """The broker's hook: live producer groups and what their check_local_transaction answers."""

    alive: set[str] = field(default_factory=lambda: {"tg"})
    answers: dict[str, str] = field(default_factory=dict)  # msg_id -> COMMIT / ROLLBACK / UNKNOW
    default: str = "UNKNOW"
    checks: list[MessageExt] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    txn: TransactionalMessageService | None = None
    asked: threading.Event = field(default_factory=threading.Event)

    def __call__(self, group: str, msg: MessageExt) -> bool:
        if group not in self.alive:
            self.refused.append(group)
            return False
        self.checks.append(msg)
        answer = self.answers.get(msg.msg_id, self.default)
        if answer != "UNKNOW":
            assert self.txn is not None
            self.txn.end_transaction(msg.commit_log_offset, answer == "COMMIT", group, from_check=True,
                                     transaction_id=msg.transaction_id)
        self.asked.set()
        return True


@dataclass
class Env:
    root: str
    clock: ManualClock
    store: MessageStore
    offsets: ConsumerOffsets
    producers: Producers
    txn: TransactionalMessageService

    def prepare(self, body: bytes = b"payload", topic: str = "orders", queue_id: int = 1, group: str = "tg",
                sys_flag: int = SysFlag.TRANSACTION_PREPARED_TYPE, flag: int = 0,
                born_timestamp: int | None = None, **extra: str) -> PutResult:
        """What the broker does with a prepared send: rewrite with parse_half_message, store."""
        props = {"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": IDS.next_id(), "TRAN_MSG": "true", "PGROUP": group,
                 "WAIT": "true", **extra}
        topic, queue_id, props, sys_flag = parse_half_message(topic, queue_id, props, sys_flag)
        return self.store.put(topic, queue_id, body, props, sys_flag=sys_flag, flag=flag,
                              born_timestamp=born_timestamp)

    def half(self, result: PutResult) -> MessageExt:
        return self.store.look_message_by_offset(result.commit_log_offset)

    def messages(self, topic: str, queue_id: int = 0) -> list[MessageExt]:
        return self.store.get_messages(topic, queue_id, 0, 1000).messages

    def ops(self) -> list[bytes]:
        return [m.body for m in self.messages(OP_TOPIC)]

    def pending_halves(self) -> list[MessageExt]:
        """Halves at or after the committed half offset that no op marks done."""
        done = {offset for body in self.ops() for offset in parse_op_body(body)}
        start = max(self.offsets_of_check()[0], 0)
        return [m for m in self.messages(HALF_TOPIC)[start:] if m.queue_offset not in done]

    def offsets_of_check(self) -> tuple[int, int]:
        """Committed (half, op) offsets of CID_RMQ_SYS_TRANS; -1 when none was committed."""
        return (self.offsets.query(CID_SYS_TRANS, HALF_TOPIC, 0), self.offsets.query(CID_SYS_TRANS, OP_TOPIC, 0))

    def later(self, ms: int) -> None:
        self.clock.advance(ms)


def _open(root: str, clock: ManualClock, producers: Producers, **kwargs: object) -> Env:
    store = MessageStore(root, StoreConfig(**SETTINGS), clock=clock)
    offsets = ConsumerOffsets(root, clock=clock)
    txn = TransactionalMessageService(store, offsets, check_listener=producers, **kwargs)  # type: ignore[arg-type]
    producers.txn = txn
    return Env(root, clock, store, offsets, producers, txn)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = _open(str(tmp_path), ManualClock(T0), Producers())
    yield e
    e.store.close()


# -- pure functions -------------------------------------------------------------------------------------------
def test_parse_half_message() -> None:
    props = {"PGROUP": "tg", "UNIQ_KEY": "ABC", "TRAN_MSG": "true", "TAGS": "A"}
    flags = SysFlag.TRANSACTION_PREPARED_TYPE | SysFlag.MULTI_TAGS
    topic, queue_id, out, sys_flag = parse_half_message("orders", 3, props, flags)
    assert (topic, queue_id) == (HALF_TOPIC, 0)
    assert out == {**props, "REAL_TOPIC": "orders", "REAL_QID": "3", "__transactionId__": "ABC"}
    assert sys_flag == SysFlag.MULTI_TAGS  # transaction bits reset to NOT_TYPE
    assert props == {"PGROUP": "tg", "UNIQ_KEY": "ABC", "TRAN_MSG": "true", "TAGS": "A"}  # input untouched
    with pytest.raises(MQClientError, match="PGROUP"):
        parse_half_message("orders", 0, {"UNIQ_KEY": "ABC"}, flags)


def test_get_immunity_time_as_transactional_message_util() -> None:
    # TransactionalMessageUtilTest.testGetImmunityTime
    cases = {"1": 6000, "5": 6000, "7": 7000, None: 6000, "-1": 6000, "60": 60_000, "100": 100_000,
             "100.5": 6000, "abc": 6000, "": 6000, "99999999999999999999": 6000}
    for text, expected in cases.items():
        props = {} if text is None else {"CHECK_IMMUNITY_TIME_IN_SECONDS": text}
        assert get_immunity_time(props, 6000) == expected, text


def test_op_body_format() -> None:
    assert op_body([5, 6]) == b"5,6,"
    assert op_body([0]) == b"0,"
    assert parse_op_body(b"5,6,") == [5, 6]
    assert parse_op_body(b"5") == [5]
    assert parse_op_body(b"") == []
    assert parse_op_body(b"x,7,") == [-1, 7]


def test_calculate_op_offset_takes_only_the_contiguous_prefix() -> None:
    assert calculate_op_offset([], 3) == 3
    assert calculate_op_offset([3, 4, 5], 3) == 6
    assert calculate_op_offset([5, 3], 3) == 4
    assert calculate_op_offset([4, 5], 3) == 3


# -- the half message ------------------------------------------------------------------------------------------
def test_half_is_invisible_in_its_real_topic(env: Env) -> None:
    result = env.prepare()
    assert env.store.get_messages("orders", 1, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    [half] = env.messages(HALF_TOPIC)
    assert half.commit_log_offset == result.commit_log_offset
    assert half.properties["REAL_TOPIC"] == "orders" and half.properties["REAL_QID"] == "1"
    assert SysFlag.transaction_value(half.sys_flag) == SysFlag.TRANSACTION_NOT_TYPE


# -- end transaction --------------------------------------------------------------------------------------------
def test_commit_exposes_the_real_message_with_the_same_uniq_key_and_writes_an_op(env: Env) -> None:
    env.prepare(b"x")
    result = env.prepare(b"payload", flag=7)
    half = env.half(result)
    put = env.txn.end_transaction(result.commit_log_offset, True, "tg", from_check=False)
    assert put is not None
    [real] = env.messages("orders", 1)
    assert real.commit_log_offset == put.commit_log_offset
    assert real.body == b"payload" and real.flag == 7 and real.tags == "TagA" and real.keys == ["k1"]
    assert real.msg_id == half.msg_id == half.properties["UNIQ_KEY"]
    assert real.properties["PGROUP"] == "tg"
    for name in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG"):
        assert name not in real.properties
    assert SysFlag.transaction_value(real.sys_flag) == SysFlag.TRANSACTION_COMMIT_TYPE
    assert real.prepared_transaction_offset == result.commit_log_offset
    assert real.born_timestamp == half.born_timestamp
    [op] = env.messages(OP_TOPIC)
    assert op.body == b"1,"  # the half's queue offset in the half queue
    assert op.tags == REMOVE_TAG and op.properties["UNIQ_KEY"]
    assert op.queue_id == 0 and op.sys_flag == 0


def test_rollback_never_exposes_the_message_and_writes_an_op(env: Env) -> None:
    result = env.prepare()
    assert env.txn.end_transaction(result.commit_log_offset, False, "tg", from_check=False) is None
    assert env.messages("orders", 1) == []
    assert env.ops() == [b"0,"]
    env.later(TIMEOUT_MS + 1)
    report = env.txn.check()
    assert report.checked == 0 and env.producers.checks == []
    assert env.messages("orders", 1) == []
    assert env.offsets_of_check() == (1, 1)


def test_end_transaction_refuses_a_wrong_group_or_offset(env: Env) -> None:
    result = env.prepare(group="tg")
    with pytest.raises(MQClientError, match="'tg', not 'other'"):
        env.txn.end_transaction(result.commit_log_offset, True, "other", from_check=False)
    with pytest.raises(MQClientError, match="no half message at commit-log offset 999999"):
        env.txn.end_transaction(999_999, True, "tg", from_check=False)
    plain = env.store.put("orders", 0, b"plain", {"PGROUP": "tg"})
    with pytest.raises(MQClientError, match="not a half message"):
        env.txn.end_transaction(plain.commit_log_offset, True, "tg", from_check=False)
    with pytest.raises(MQClientError, match="transaction id"):
        env.txn.end_transaction(result.commit_log_offset, True, "tg", from_check=False, transaction_id="nope")
    with pytest.raises(MQClientError, match="half-queue offset"):
        env.txn.end_transaction(result.commit_log_offset, True, "tg", from_check=False, tran_state_table_offset=5)
    assert env.ops() == [] and env.messages("orders", 1) == []
    env.txn.end_transaction(result.commit_log_offset, True, "tg", from_check=False,
                            transaction_id=env.half(result).msg_id, tran_state_table_offset=0)
    assert len(env.messages("orders", 1)) == 1


def test_compressed_body_is_committed_as_stored(env: Env) -> None:
    body = b"abc" * 5000
    flags = SysFlag.TRANSACTION_PREPARED_TYPE | SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB_TYPE
    result = env.prepare(zlib.compress(body, 5), sys_flag=flags)
    env.later(TIMEOUT_MS + 1)
    env.producers.default = "COMMIT"
    assert env.txn.check().checked == 1  # through the re-appended copy too
    [real] = env.messages("orders", 1)
    assert real.body == body
    assert real.sys_flag & SysFlag.COMPRESSED
    assert real.store_size < len(body)
    assert real.prepared_transaction_offset != result.commit_log_offset  # the copy was committed


def test_a_late_end_after_the_immunity_time_is_refused(env: Env) -> None:
    result = env.prepare(CHECK_IMMUNITY_TIME_IN_SECONDS="10")
    env.later(10_001)
    assert env.txn.end_transaction(result.commit_log_offset, True, "tg", from_check=False) is None
    assert env.ops() == [] and env.messages("orders", 1) == []
    assert env.txn.end_transaction(result.commit_log_offset, True, "tg", from_check=True) is not None


# -- check-back ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("answer", ["COMMIT", "ROLLBACK"])
def test_an_unknown_half_is_checked_after_the_timeout_and_the_answer_applied(env: Env, answer: str) -> None:
    result = env.prepare(b"pending")
    uniq = env.half(result).msg_id
    env.producers.answers[uniq] = answer
    assert env.txn.check().checked == 0  # stored in this very millisecond: fresh
    env.later(TIMEOUT_MS)
    assert env.txn.check().checked == 0  # age == transaction_timeout: still new
    assert env.offsets_of_check() == (-1, 0)  # no half passed yet; the missing op queue reads as offset 0
    env.later(1)
    report = env.txn.check()
    assert report.checked == 1
    [msg] = env.producers.checks
    assert (msg.topic, msg.queue_id) == ("orders", 1)  # restored to its real queue
    assert msg.transaction_id == uniq == msg.msg_id
    assert msg.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert msg.queue_offset == 1  # the re-appended half (tranStateTableOffset)
    assert msg.commit_log_offset > result.commit_log_offset
    real = env.messages("orders", 1)
    if answer == "COMMIT":
        assert [m.msg_id for m in real] == [uniq] and real[0].body == b"pending"
    else:
        assert real == []
    assert env.ops() == [b"1,"]
    assert env.offsets_of_check() == (1, 0)  # stopped at the fresh copy
    env.later(TIMEOUT_MS + 1)
    assert env.txn.check().checked == 0
    assert env.offsets_of_check() == (2, 1)
    assert len(env.producers.checks) == 1


def test_at_most_check_max_check_backs_then_moved_to_the_check_max_topic(tmp_path: Path) -> None:
    e = _open(str(tmp_path), ManualClock(T0), Producers(), check_max=3)
    try:
        e.prepare(b"never decided")
        for _ in range(6):
            e.later(TIMEOUT_MS + 1)
            e.txn.check()
        assert [m.properties["TRANSACTION_CHECK_TIMES"] for m in e.producers.checks] == ["1", "2", "3"]
        [parked] = e.messages(CHECK_MAX_TOPIC)
        assert parked.body == b"never decided"
        assert parked.properties["REAL_TOPIC"] == "orders"
        assert parked.properties["TRANSACTION_CHECK_TIMES"] == "3"
        assert e.messages("orders", 1) == []
        half_offset, _ = e.offsets_of_check()
        assert half_offset == e.store.max_offset(HALF_TOPIC, 0)  # nothing left to check
    finally:
        e.store.close()


def test_the_default_check_max_is_15(env: Env) -> None:
    env.prepare()
    for _ in range(18):
        env.later(TIMEOUT_MS + 1)
        env.txn.check()
    assert len(env.producers.checks) == 15
    assert len(env.messages(CHECK_MAX_TOPIC)) == 1


def test_check_immunity_time_is_honoured(env: Env) -> None:
    env.producers.default = "COMMIT"
    env.prepare(CHECK_IMMUNITY_TIME_IN_SECONDS="20")
    env.later(7000)
    report = env.txn.check()  # past transaction_timeout, inside the immunity
    assert report.checked == 0 and report.immunity == 1
    env.later(8000)
    assert env.txn.check().checked == 0
    assert env.producers.checks == []
    env.later(5001)  # 20.001 s after birth
    assert env.txn.check().checked == 1
    [msg] = env.producers.checks
    assert msg.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
    # RocketMQ counts each pass inside the immunity too (needDiscard runs first).
    assert msg.properties["TRANSACTION_CHECK_TIMES"] == "3"
    assert len(env.messages("orders", 1)) == 1


def test_no_live_producer_waits_uncounted_without_holding_back_other_groups(tmp_path: Path) -> None:
    e = _open(str(tmp_path), ManualClock(T0), Producers(alive={"other"}), check_max=2)
    try:
        first = e.prepare(b"a", group="tg")
        e.prepare(b"b", group="tg")
        e.prepare(b"c", group="other")
        e.producers.default = "COMMIT"
        for _ in range(5):  # more rounds than check_max
            e.later(TIMEOUT_MS + 1)
            report = e.txn.check()
            assert report.discarded == 0
        assert e.producers.refused == ["tg"] * 5  # asked once per round for the group, not per half
        assert [m.body for m in e.producers.checks] == [b"c"]  # the other group was not held back
        assert e.messages(CHECK_MAX_TOPIC) == []
        pending = e.pending_halves()
        assert sorted(m.body for m in pending) == [b"a", b"b"]
        assert all("TRANSACTION_CHECK_TIMES" not in m.properties for m in pending)  # never counted

        e.producers.alive.add("tg")
        e.later(TIMEOUT_MS + 1)
        report = e.txn.check()
        assert report.checked == 2 and report.waiting == 0
        assert sorted(m.body for m in e.messages("orders", 1)) == [b"a", b"b", b"c"]
        checked = {m.body: m for m in e.producers.checks}
        assert checked[b"a"].properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert checked[b"a"].msg_id == e.half(first).msg_id
        e.later(TIMEOUT_MS + 1)
        assert e.txn.check().checked == 0
        half_offset, op_offset = e.offsets_of_check()
        assert half_offset == e.store.max_offset(HALF_TOPIC, 0)
        assert op_offset == e.store.max_offset(OP_TOPIC, 0)
    finally:
        e.store.close()


def test_without_a_listener_halves_wait(tmp_path: Path) -> None:
    e = _open(str(tmp_path), ManualClock(T0), Producers())
    try:
        e.txn.check_listener = None
        e.prepare()
        e.later(TIMEOUT_MS + 1)
        report = e.txn.check()
        assert report.waiting == 1 and report.checked == 0
        assert e.ops() == []  # no counted copy was written, so none to void
    finally:
        e.store.close()


def test_pending_halves_are_checked_after_a_restart(tmp_path: Path) -> None:
    root = str(tmp_path)
    e = _open(root, ManualClock(T0), Producers())
    committed = e.prepare(b"committed")
    pending = e.prepare(b"pending")
    e.txn.end_transaction(committed.commit_log_offset, True, "tg", from_check=False)
    uniq = e.half(pending).msg_id
    e.later(TIMEOUT_MS + 1)
    e.producers.alive.clear()
    assert e.txn.check().waiting == 1
    e.offsets.persist()
    e.store.close()

    again = _open(root, ManualClock(T0 + 2 * TIMEOUT_MS), Producers(default="COMMIT"))
    try:
        assert again.offsets_of_check()[0] >= 1
        assert again.txn.check().checked == 1
        [msg] = again.producers.checks
        assert msg.msg_id == uniq and msg.body == b"pending"
        assert sorted(m.body for m in again.messages("orders", 1)) == [b"committed", b"pending"]
    finally:
        again.store.close()


def test_an_op_body_with_several_offsets_marks_each_done(env: Env) -> None:
    env.prepare(b"0")
    env.prepare(b"1")
    env.store.put(OP_TOPIC, 0, op_body([0, 1]), {"TAGS": REMOVE_TAG, "UNIQ_KEY": IDS.next_id()})
    assert env.ops() == [b"0,1,"]
    env.later(TIMEOUT_MS + 1)
    assert env.txn.check().checked == 0
    assert env.offsets_of_check() == (2, 1)


def test_op_offset_advances_only_over_the_contiguous_done_prefix(env: Env) -> None:
    halves = [env.prepare(str(i).encode()) for i in range(4)]
    env.txn.end_transaction(halves[2].commit_log_offset, False, "tg", from_check=False)  # op 0: "2,"
    env.txn.end_transaction(halves[0].commit_log_offset, True, "tg", from_check=False)  # op 1: "0,"
    assert env.ops() == [b"2,", b"0,"]
    env.later(1000)
    env.txn.check()  # half 0 done (op 1), half 1 too young: the round stops there
    assert env.offsets_of_check() == (1, -1)  # op 1 is done but op 0 is not: no op offset yet
    env.txn.end_transaction(halves[1].commit_log_offset, False, "tg", from_check=False)  # op 2: "1,"
    env.txn.check()  # halves 1 and 2 done; half 3 still young
    assert env.offsets_of_check() == (3, 3)
    env.later(TIMEOUT_MS)
    env.producers.default = "ROLLBACK"
    assert env.txn.check().checked == 1
    assert [m.body for m in env.producers.checks] == [b"3"]


def test_a_half_older_than_file_reserved_time_is_moved_away(env: Env) -> None:
    env.prepare(b"ancient", born_timestamp=T0 - 72 * 3_600_000 - 1)
    env.later(1)
    report = env.txn.check()
    assert report.discarded == 1 and report.checked == 0
    assert [m.body for m in env.messages(CHECK_MAX_TOPIC)] == [b"ancient"]


def test_check_cannot_nest_inside_the_listener(env: Env) -> None:
    seen: list[BaseException] = []

    def listener(group: str, msg: MessageExt) -> bool:
        try:
            env.txn.check()
        except IllegalStateError as exc:
            seen.append(exc)
        return True

    env.txn.check_listener = listener
    env.prepare()
    env.later(TIMEOUT_MS + 1)
    assert env.txn.check().checked == 1
    assert len(seen) == 1


# -- the service thread ---------------------------------------------------------------------------------------------
def test_check_service_thread_checks_and_stops(env: Env) -> None:
    env.producers.default = "COMMIT"
    env.prepare()
    env.later(TIMEOUT_MS + 1)
    service = TransactionCheckService(env.txn, interval=0.05, first_delay=0.01)
    service.start()
    try:
        assert service.name == "mqlite-txn-check"
        assert env.producers.asked.wait(10.0)
    finally:
        service.stop()
    assert not service.is_alive
    assert len(env.messages("orders", 1)) == 1


def test_check_service_wakeup_runs_a_round_at_once(env: Env) -> None:
    env.prepare()
    env.later(TIMEOUT_MS + 1)
    service = TransactionCheckService(env.txn, interval=3600.0, first_delay=3600.0)
    service.start()
    try:
        service.wakeup()
        assert env.producers.asked.wait(10.0)
    finally:
        service.stop()
