"""Delay levels (ScheduleMessageServiceTest ported) and timer messages, on a `MessageStore` with a
`DelayService` whose `deliver` puts into the real topic. A `ManualClock` stands in for waiting:
tests advance it, then `wait_round()` runs one full round of the service.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqlite.clock import ManualClock
from mqlite.commitlog import PutResult
from mqlite.record import default_tags_code
from mqlite.config import StoreConfig
from mqlite.delay import (
    DEFAULT_TIMER_MAX_DELAY_MS,
    PROPERTY_TIMER_OUT_MS,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    DelayService,
    compute_deliver_timestamp,
    delay_level_to_queue_id,
    delay_offset_path,
    delay_tags_code,
    queue_id_to_delay_level,
    rebuild_due_message,
    rewrite_for_delay,
)
from mqlite.errors import MQClientError
from mqlite.mappedfile import offset_to_file_name
from mqlite.message import SysFlag, UniqIdGenerator, tags_code
from mqlite.store import MessageStore
from mqlite.storebase import GetMessageStatus
from mqlite.testing import no_leaked_threads
from support import SMALL_STORE, wait_until

START_MS = 1_700_000_000_000
IDS = UniqIdGenerator()


class Env:
    """A store opened as the broker will open it, a delay service, and a deliver that puts."""

    def __init__(self, root: Path, levels: str = "5s 8s", **settings: Any) -> None:
        self.root = str(root)
        self.clock = ManualClock(START_MS)
        self.config = StoreConfig(message_delay_level=levels, **{**SMALL_STORE, **settings})
        self.levels = self.config.delay_levels_ms
        self.service: DelayService | None = None
        self.fail_next: list[BaseException] = []
        self.store = MessageStore(self.root, self.config, clock=self.clock,
                                  tags_code_fn=delay_tags_code(self.levels), on_arrival=self._arrival)

    def _arrival(self, topic: str, queue_id: int, next_offset: int) -> None:
        if self.service is not None:
            self.service.notify_arrival(topic, queue_id, next_offset)

    def deliver(self, topic: str, queue_id: int, body: bytes, properties: dict[str, str], flag: int,
                sys_flag: int, born_timestamp: int, born_host: str, reconsume_times: int) -> PutResult:
        if self.fail_next:
            raise self.fail_next.pop()
        return self.store.put(topic, queue_id, body, properties, flag=flag, sys_flag=sys_flag,
                              born_timestamp=born_timestamp, born_host=born_host, reconsume_times=reconsume_times)

    def send(self, topic: str, body: bytes, properties: dict[str, str] | None = None, queue_id: int = 0,
             sys_flag: int = 0) -> tuple[str, int, dict[str, str]]:
        props = {"UNIQ_KEY": IDS.next_id(), **(properties or {})}
        where = rewrite_for_delay(topic, queue_id, props, levels_ms=self.levels, now_ms=self.clock.now_ms())
        self.store.put(where[0], where[1], body, where[2], sys_flag=sys_flag)
        return where

    def start(self, **kwargs: Any) -> DelayService:
        kwargs.setdefault("flush_interval", self.config.flush_delay_offset_interval)
        self.service = DelayService(self.store, self.deliver, levels_ms=self.levels,
                                    offsets_path=delay_offset_path(self.root), clock=self.clock, **kwargs)
        self.service.start()
        assert self.service.wait_round()
        return self.service

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        assert self.service is not None and self.service.wait_round()

    def real(self, topic: str = "Real", queue_id: int = 0) -> list[Any]:
        return self.store.get_messages(topic, queue_id, 0, 100_000).messages

    def offsets_file(self) -> dict[str, Any]:
        with open(delay_offset_path(self.root), encoding="utf-8") as f:
            return json.load(f)

    def close(self) -> None:
        self.stop()
        self.store.close()


@pytest.fixture
def make_env(tmp_path: Path) -> Iterator[Any]:
    envs: list[Env] = []

    def make(levels: str = "5s 8s", **settings: Any) -> Env:
        env = Env(tmp_path / "store", levels, **settings)
        envs.append(env)
        return env

    with no_leaked_threads():
        yield make
        for env in envs:
            env.close()


# -- pure functions --------------------------------------------------------------------------------------
def test_level_queue_mapping_and_deliver_timestamp() -> None:
    assert delay_level_to_queue_id(3) == 2
    assert queue_id_to_delay_level(3) == 4  # ScheduleMessageServiceTest
    assert compute_deliver_timestamp((5000, 8000), 999, 0) == 1000  # unknown level: +1000 ms
    assert compute_deliver_timestamp((5000, 8000), 0, 0) == 1000
    assert compute_deliver_timestamp((5000, 8000), 2, 100) == 8100


def test_rewrite_levels_cap_keep_delay_and_do_not_mutate_input() -> None:
    levels = (5000, 8000)
    props = {"DELAY": "3", "TAGS": "A"}
    topic, qid, out = rewrite_for_delay("T", 7, props, levels_ms=levels, now_ms=0)
    assert (topic, qid) == (SCHEDULE_TOPIC, 1)  # level 3 capped to 2: queue 1
    assert out == {"DELAY": "2", "TAGS": "A", "REAL_TOPIC": "T", "REAL_QID": "7"}
    assert props == {"DELAY": "3", "TAGS": "A"} and out is not props
    for level in ("0", "-2"):
        same = {"DELAY": level}
        result = rewrite_for_delay("T", 1, same, levels_ms=levels, now_ms=0)
        assert result == ("T", 1, same) and result[2] is not same
    # Half and rollback records keep their topic: the commit record is the one delayed.
    for flag in (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
        assert rewrite_for_delay("T", 0, {"DELAY": "1"}, levels_ms=levels, now_ms=0, sys_flag=flag)[0] == "T"
    assert rewrite_for_delay("T", 0, {"DELAY": "1"}, levels_ms=levels, now_ms=0,
                             sys_flag=SysFlag.TRANSACTION_COMMIT_TYPE)[0] == SCHEDULE_TOPIC
    with pytest.raises(MQClientError, match="DELAY"):
        rewrite_for_delay("T", 0, {"DELAY": "soon"}, levels_ms=levels, now_ms=0)


def test_rewrite_timer_requests() -> None:
    levels, now = (1000,), START_MS

    def rewrite(**props: str) -> tuple[str, int, dict[str, str]]:
        return rewrite_for_delay("T", 2, props, levels_ms=levels, now_ms=now)

    topic, qid, out = rewrite(TIMER_DELAY_SEC="5")
    assert (topic, qid) == (TIMER_TOPIC, 0)
    assert out == {"TIMER_DELAY_SEC": "5", PROPERTY_TIMER_OUT_MS: str(now + 5000), "REAL_TOPIC": "T", "REAL_QID": "2"}
    assert rewrite(TIMER_DELAY_MS="1500")[2][PROPERTY_TIMER_OUT_MS] == str(now + 1500)  # exact ms, no rounding
    assert rewrite(TIMER_DELIVER_MS=str(now + 7))[2][PROPERTY_TIMER_OUT_MS] == str(now + 7)
    # RocketMQ's order: SEC before MS before DELIVER_MS.
    assert rewrite(TIMER_DELAY_SEC="1", TIMER_DELAY_MS="9", TIMER_DELIVER_MS=str(now + 99))[2][
        PROPERTY_TIMER_OUT_MS] == str(now + 1000)
    # Due now or in the past: stored in the real topic as it is.
    for props in ({"TIMER_DELIVER_MS": str(now)}, {"TIMER_DELIVER_MS": str(now - 5)}, {"TIMER_DELAY_SEC": "0"},
                  {"TIMER_DELAY_MS": "-10"}):
        assert rewrite_for_delay("T", 2, props, levels_ms=levels, now_ms=now) == ("T", 2, props)
    # A message already carrying TIMER_OUT_MS is not rewritten again.
    assert rewrite(TIMER_DELAY_SEC="5", TIMER_OUT_MS="1")[0] == "T"
    with pytest.raises(MQClientError, match="TIMER_DELAY_MS"):
        rewrite(TIMER_DELAY_MS="1.5")


def test_timer_max_delay_is_refused_with_a_fix() -> None:
    levels, now = (1000,), START_MS
    ok = rewrite_for_delay("T", 0, {"TIMER_DELIVER_MS": str(now + DEFAULT_TIMER_MAX_DELAY_MS)}, levels_ms=levels,
                           now_ms=now)
    assert ok[0] == TIMER_TOPIC  # exactly 3 days is allowed
    with pytest.raises(MQClientError, match="longest allowed delay is 259200000 ms"):
        rewrite_for_delay("T", 0, {"TIMER_DELIVER_MS": str(now + DEFAULT_TIMER_MAX_DELAY_MS + 1)}, levels_ms=levels,
                          now_ms=now)
    with pytest.raises(MQClientError, match="longest allowed delay is 60000 ms"):
        rewrite_for_delay("T", 0, {"TIMER_DELAY_SEC": "61"}, levels_ms=levels, now_ms=now, max_delay_ms=60_000)


def test_delay_level_wins_over_timer_properties() -> None:
    topic, qid, out = rewrite_for_delay("T", 0, {"DELAY": "1", "TIMER_DELAY_SEC": "100", "TIMER_DELAY_MS": "5",
                                                 "TIMER_DELIVER_MS": "9"}, levels_ms=(1000, 2000), now_ms=START_MS)
    assert (topic, qid) == (SCHEDULE_TOPIC, 0)
    assert out == {"DELAY": "1", "REAL_TOPIC": "T", "REAL_QID": "0"}
    # A DELAY of 0 does not win: the timer request applies.
    assert rewrite_for_delay("T", 0, {"DELAY": "0", "TIMER_DELAY_SEC": "1"}, levels_ms=(1000,),
                             now_ms=START_MS)[0] == TIMER_TOPIC


def test_delay_tags_code() -> None:
    fn = delay_tags_code((5000, 8000))
    assert fn(SCHEDULE_TOPIC, {"DELAY": "1", "TAGS": "A"}, 100) == 5100
    assert fn(SCHEDULE_TOPIC, {"DELAY": "7"}, 100) == 8100  # min(level, max)
    assert fn(SCHEDULE_TOPIC, {"TAGS": "A"}, 100) == tags_code("A")  # no DELAY: the tag hash
    assert fn(SCHEDULE_TOPIC, {"DELAY": "0", "TAGS": "A"}, 100) == tags_code("A")
    assert fn(TIMER_TOPIC, {PROPERTY_TIMER_OUT_MS: "123", "TAGS": "A"}, 100) == 123
    assert fn("T", {"DELAY": "1", "TAGS": "A"}, 100) == default_tags_code("T", {"TAGS": "A"}, 100)
    chained = delay_tags_code((1000,), fallback=lambda topic, props, ts: 77)
    assert chained("T", {}, 0) == 77 and chained(SCHEDULE_TOPIC, {"DELAY": "1"}, 0) == 1000


def test_rebuild_due_message(make_env: Any) -> None:
    env = make_env("1s 2s")
    store = env.store
    level = store.put(SCHEDULE_TOPIC, 0, b"L", {"DELAY": "1", "REAL_TOPIC": "Real", "REAL_QID": "3", "UNIQ_KEY": "U1",
                                                "TAGS": "A", "TIMER_DELAY_SEC": "4"}, flag=5, reconsume_times=2)
    timer = store.put(TIMER_TOPIC, 0, b"T", {PROPERTY_TIMER_OUT_MS: "9", "TIMER_DELIVER_MS": "9", "REAL_TOPIC": "Real",
                                             "REAL_QID": "1", "UNIQ_KEY": "U2"})
    half = store.put(SCHEDULE_TOPIC, 0, b"H", {"DELAY": "1", "REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0"})
    loop = store.put(SCHEDULE_TOPIC, 0, b"X", {"DELAY": "1", "REAL_TOPIC": SCHEDULE_TOPIC, "REAL_QID": "0"})
    due = rebuild_due_message(store.look_message_by_offset(level.commit_log_offset))
    assert due is not None
    assert (due.topic, due.queue_id, due.body, due.flag, due.reconsume_times) == ("Real", 3, b"L", 5, 2)
    assert due.properties == {"REAL_TOPIC": "Real", "REAL_QID": "3", "UNIQ_KEY": "U1", "TAGS": "A"}
    stored = store.look_message_by_offset(timer.commit_log_offset)
    due = rebuild_due_message(stored, dequeue_ms=42)
    assert due is not None and (due.topic, due.queue_id) == ("Real", 1)
    assert due.properties == {"UNIQ_KEY": "U2", "TIMER_ENQUEUE_MS": str(stored.store_timestamp),
                              "TIMER_DEQUEUE_MS": "42"}
    assert rebuild_due_message(store.look_message_by_offset(half.commit_log_offset)) is None
    assert rebuild_due_message(store.look_message_by_offset(loop.commit_log_offset)) is None


# -- the service: ScheduleMessageServiceTest -----------------------------------------------------------------
def test_schedule_message_service_delivers_capped_level(make_env: Any) -> None:
    env = make_env("5s 8s")
    assert env.levels == (5000, 8000)
    uniq = IDS.next_id()
    topic, qid, props = rewrite_for_delay("TopicA", 0, {"DELAY": "3", "UNIQ_KEY": uniq, "TAGS": "TagA"},
                                          levels_ms=env.levels, now_ms=env.clock.now_ms())
    assert (topic, qid, props["DELAY"]) == (SCHEDULE_TOPIC, 1, "2")
    stored = env.store.put(topic, qid, b"schedule message body", props)
    unit = env.store.consume_queue(SCHEDULE_TOPIC, 1).unit_at(0)
    assert unit is not None and unit[2] == stored.store_timestamp + 8000  # the tags code is the due time
    service = env.start()
    assert threading.current_thread().name != service.name == "mqlite-delay"
    assert "mqlite-delay" in {t.name for t in threading.enumerate()}
    env.advance(7999)
    result = env.store.get_messages("TopicA", 0, 0)
    assert result.status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE)
    assert not result.messages
    env.advance(15_000 - 7999)
    result = env.store.get_messages("TopicA", 0, 0)
    assert result.status is GetMessageStatus.FOUND
    [msg] = result.messages
    assert msg.body == b"schedule message body"
    assert msg.msg_id == uniq and msg.tags == "TagA"
    # messageTimeUp keeps REAL_TOPIC/REAL_QID and clears DELAY.
    assert msg.properties["REAL_TOPIC"] == "TopicA" and msg.properties["REAL_QID"] == "0"
    assert "DELAY" not in msg.properties
    assert service.offset_table() == {2: 1}
    env.stop()
    assert "mqlite-delay" not in {t.name for t in threading.enumerate()}
    assert env.offsets_file()["offsetTable"] == {"2": 1}


def test_correct_delay_offsets_with_empty_queues(make_env: Any) -> None:
    env = make_env("5s 8s")
    path = delay_offset_path(env.root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"offsetTable": {"1": random.randint(1, 100), "2": random.randint(1, 100)}}, f)
    service = DelayService(env.store, env.deliver, levels_ms=env.levels, offsets_path=path, clock=env.clock)
    assert service.offset_table() == {1: 0, 2: 0}


def test_fastjson_offset_file_with_bare_integer_keys_loads(make_env: Any) -> None:
    env = make_env("1s 2s")
    for _ in range(3):
        env.send("Real", b"m", {"DELAY": "2"})
    path = delay_offset_path(env.root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write('{"dataVersion":{"counter":7,"timestamp":1},"offsetTable":{1:0,2:2}}')
    service = DelayService(env.store, env.deliver, levels_ms=env.levels, offsets_path=path, clock=env.clock)
    assert service.offset_table() == {1: 0, 2: 2}
    service.persist()
    document = env.offsets_file()
    assert document["offsetTable"] == {"1": 0, "2": 2} and document["dataVersion"]["counter"] == 8


def test_levels_deliver_fifo_per_level_in_due_order(make_env: Any) -> None:
    env = make_env("1s 2s 3s")
    sent = []
    for i in range(12):
        level = 3 - i % 3
        env.send("Real", f"{level}:{i}".encode(), {"DELAY": str(level)})
        sent.append((level, i))
        env.clock.advance(1)
    env.start()
    delivered: list[bytes] = []
    for second, level in ((1000, 1), (1000, 2), (1000, 3)):
        env.advance(second)
        now = [m.body for m in env.real()][len(delivered):]
        assert now == [f"{lv}:{i}".encode() for lv, i in sent if lv == level]  # FIFO within the level
        delivered += now
    assert len(delivered) == 12
    assert env.service.offset_table() == {1: 4, 2: 4, 3: 4}


def test_clock_skew_due_time_beyond_level_delay_counts_as_now(make_env: Any) -> None:
    env = make_env("1s 2s")
    env.send("Real", b"skewed", {"DELAY": "2"})
    env.start()
    env.clock.ms -= 3_600_000  # the clock went back an hour after the store
    assert env.service.wait_round()
    assert [m.body for m in env.real()] == [b"skewed"]


def test_timer_messages_in_random_order_are_delivered_in_due_order(make_env: Any) -> None:
    env = make_env("1s")
    rng = random.Random(7)
    base = env.clock.now_ms()
    dues = rng.sample(range(base + 1, base + 60_000), 40)
    uniqs = {}
    for due in dues:
        _, _, props = env.send("Real", str(due).encode(), {"TIMER_DELIVER_MS": str(due)}, queue_id=1)
        uniqs[props["UNIQ_KEY"]] = due
    env.start()
    assert env.service.pending_timer_count == 40
    for _ in range(6):
        env.advance(10_000)
        now = env.clock.now_ms()
        got = [int(m.body) for m in env.real(queue_id=1)]
        assert got == sorted(got) and all(due <= now for due in got)
        assert sorted(got) == sorted(due for due in dues if due <= now)
    messages = env.real(queue_id=1)
    assert len(messages) == 40
    for msg in messages:
        assert uniqs[msg.msg_id] == int(msg.body)
        assert msg.store_timestamp >= int(msg.body)  # never early
        for gone in ("REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TIMER_DELIVER_MS"):
            assert gone not in msg.properties
        assert {"TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"} <= msg.properties.keys()
    assert env.service.timer_state() == (40, [])


def test_timer_delay_sec_ms_and_past_deliver_time(make_env: Any) -> None:
    env = make_env("1s")
    env.send("Real", b"sec", {"TIMER_DELAY_SEC": "3"})
    env.send("Real", b"ms", {"TIMER_DELAY_MS": "1500"})
    topic, _, _ = env.send("Real", b"past", {"TIMER_DELIVER_MS": str(env.clock.now_ms() - 1)})
    assert topic == "Real"
    env.start()
    assert [m.body for m in env.real()] == [b"past"]
    env.advance(1499)
    assert [m.body for m in env.real()] == [b"past"]
    env.advance(1)
    assert [m.body for m in env.real()] == [b"past", b"ms"]
    env.advance(1500)
    assert [m.body for m in env.real()] == [b"past", b"ms", b"sec"]


def test_arrival_wakes_the_service_for_an_earlier_timer(make_env: Any) -> None:
    env = make_env("1s")
    service = env.start(max_wait=30.0)  # only a wakeup can start a round within this test
    env.send("Real", b"late", {"TIMER_DELAY_SEC": "3600"})
    # The arrival is what wakes the service (wait_round would wake it itself): look until its round shows.
    wait_until(lambda: service.pending_timer_count == 1, "the arrival's round to take the first timer")
    env.send("Real", b"soon", {"TIMER_DELAY_MS": "10"})
    wait_until(lambda: service.pending_timer_count == 2, "the arrival's round to take the second timer")
    env.advance(10)
    assert [m.body for m in env.real()] == [b"soon"]


def test_compressed_body_is_delivered_as_stored(make_env: Any) -> None:
    env = make_env("1s")
    plain = b"compress me " * 100
    packed = zlib.compress(plain)
    env.send("Real", packed, {"DELAY": "1"}, sys_flag=SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB_TYPE)
    env.start()
    env.advance(1000)
    [msg] = env.real()
    assert msg.sys_flag & SysFlag.COMPRESSED and msg.body == plain
    assert msg.body_crc == zlib.crc32(packed) & 0x7FFFFFFF  # the stored bytes are the compressed ones


def test_half_topic_and_missing_records_are_skipped(make_env: Any) -> None:
    env = make_env("1s")
    env.store.put(SCHEDULE_TOPIC, 0, b"half", {"DELAY": "1", "REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0"})
    env.send("Real", b"ok", {"DELAY": "1"})
    env.start()
    env.advance(1000)
    assert [m.body for m in env.real()] == [b"ok"]
    assert env.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0
    assert env.service.offset_table() == {1: 2}


def test_failed_delivery_keeps_the_cursor_and_retries(make_env: Any) -> None:
    env = make_env("1s")
    env.send("Real", b"a", {"DELAY": "1"})
    env.send("Real", b"t", {"TIMER_DELAY_MS": "1000"})
    env.fail_next = [OSError("disk gone"), OSError("disk gone")]
    service = env.start()
    env.advance(1000)
    assert env.real() == [] and service.offset_table().get(1, 0) == 0 and service.timer_state() == (0, [])
    env.advance(10_000)  # DELAY_FOR_A_PERIOD later
    assert sorted(m.body for m in env.real()) == [b"a", b"t"]
    # A message the store refuses for good (MQClientError) is dropped, as RocketMQ drops it.
    env.send("Real", b"bad", {"DELAY": "1"})
    env.fail_next = [MQClientError("refused")]
    env.advance(1000)
    assert service.offset_table() == {1: 2} and len(env.real()) == 2


# -- persistence and recovery ---------------------------------------------------------------------------------
def test_state_persists_across_stop_and_start_without_double_delivery(make_env: Any) -> None:
    env = make_env("1s 2s")
    now = env.clock.now_ms()
    for i in range(3):
        env.send("Real", f"level{i}".encode(), {"DELAY": "1"})
    # Timer queue offsets 0, 1, 2 due at +10 s, +1 s, +2 s: after 3 s offsets 1 and 2 are delivered.
    for delta in (10_000, 1000, 2000):
        env.send("Real", f"timer{delta}".encode(), {"TIMER_DELIVER_MS": str(now + delta)})
    env.start()
    env.advance(3000)
    assert len(env.real()) == 5
    env.stop()
    document = env.offsets_file()
    assert document["offsetTable"] == {"1": 3}
    assert document["timerState"] == {"lowWater": 0, "deliveredRanges": [[1, 3]]}
    assert set(document["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    service = env.start()
    assert service.pending_timer_count == 1  # only the undelivered one is back in the heap
    env.advance(1)
    assert len(env.real()) == 5  # nothing delivered twice
    env.advance(7000)
    bodies = [m.body for m in env.real()]
    assert len(bodies) == 6 and bodies[-1] == b"timer10000"
    assert Counter(bodies).most_common(1)[0][1] == 1
    assert service.timer_state() == (3, [])


def test_persisted_every_flush_interval(make_env: Any) -> None:
    env = make_env("1s")
    env.send("Real", b"a", {"DELAY": "1"})
    env.start(flush_interval=0.05)
    env.advance(1000)
    path = delay_offset_path(env.root)
    wait_until(lambda: os.path.exists(path) and env.offsets_file()["offsetTable"] == {"1": 1},
               "the service to persist its cursor after its flush interval")


def test_every_due_message_delivered_at_least_once_after_a_crash(make_env: Any) -> None:
    env = make_env("1s 2s")
    path = delay_offset_path(env.root)

    def send_batch(tag: str) -> list[str]:
        keys = []
        for i in range(5):
            keys.append(env.send("Real", f"{tag}L{i}".encode(), {"DELAY": "1"})[2]["UNIQ_KEY"])
            keys.append(env.send("Real", f"{tag}T{i}".encode(), {"TIMER_DELAY_MS": str(500 + 100 * i)})[2]["UNIQ_KEY"])
        return keys

    first = send_batch("a")
    service = env.start()
    env.advance(2000)
    service.persist()
    shutil.copy(path, path + ".old")  # the last state written before the "crash"
    second = send_batch("b")
    env.advance(2000)
    assert len(env.real()) == 20
    env.stop()
    # kill -9 after delivering the second batch: its cursors never reached the file.
    os.replace(path + ".old", path)
    os.unlink(path + ".bak")
    env.start()
    env.advance(2000)
    counts = Counter(m.msg_id for m in env.real())
    assert all(counts[key] >= 1 for key in first + second)
    assert all(counts[key] == 1 for key in first)  # what was persisted is not delivered again
    assert env.service.offset_table() == {1: 10} and env.service.timer_state() == (10, [])


def test_a_large_backlog_costs_no_cpu_while_nothing_is_due(make_env: Any) -> None:
    env = make_env("1s 2h", commitlog_file_size=32 << 20, consumequeue_file_size=20 * 100_000)
    now = env.clock.now_ms()
    rng = random.Random(3)
    batch = 5000
    for start in range(0, 50_000, batch):
        level_props = [{"DELAY": "2", "REAL_TOPIC": "Real", "REAL_QID": "0"}] * batch
        env.store.put_batch(SCHEDULE_TOPIC, 1, [b"x" * 16] * batch, level_props)
        timer_props = [{PROPERTY_TIMER_OUT_MS: str(now + rng.randint(60_000, 86_400_000)), "REAL_TOPIC": "Real",
                        "REAL_QID": "0"} for _ in range(batch)]
        env.store.put_batch(TIMER_TOPIC, 0, [b"y" * 16] * batch, timer_props)
    service = env.start()  # the first round reads the 50,000 timer units into the heap
    assert service.pending_timer_count == 50_000
    cpu_before, rounds_before = service.cpu_time, service._rounds_finished
    threading.Event().wait(1.0)  # measuring idleness takes some real time
    assert service.cpu_time - cpu_before < 0.05
    assert service._rounds_finished - rounds_before <= 3  # about one per max_wait, no busy loop
    assert env.real() == [] and service.delivered_count == 0


_UNITS_A_FILE = 8  # level queue files of 8 units: the damaged units lie in old files


def _level_of_twenty(make_env: Any) -> tuple[Any, Any]:
    """An env whose level 1 holds m0..m19 (not started) and that level's consume queue."""
    env = make_env(consumequeue_file_size=_UNITS_A_FILE * 20)
    for i in range(20):
        env.send("Real", f"m{i}".encode(), {"DELAY": "1"})
    cq = env.store.consume_queue(SCHEDULE_TOPIC, 0)
    assert cq is not None and cq.max_offset == 20
    return env, cq


def _write_unit(env: Any, queue_offset: int, data: bytes) -> None:
    """Overwrite the start of a level-1 unit in its file (the map is shared: the open store sees it)."""
    file_size = _UNITS_A_FILE * 20
    name = offset_to_file_name(queue_offset * 20 // file_size * file_size)
    with open(os.path.join(env.root, "consumequeue", SCHEDULE_TOPIC, "0", name), "r+b") as f:
        f.seek(queue_offset * 20 % file_size)
        f.write(data)


def _all_twenty_delivered_once(env: Any) -> None:
    env.start()
    env.advance(5_000)
    wait_until(lambda: len(env.real()) >= 20, lambda: f"20 delivered, got {[m.body for m in env.real()]}")
    env.stop()
    assert sorted(m.body for m in env.real()) == sorted(f"m{i}".encode() for i in range(20))


def test_a_damaged_unit_in_a_level_never_stalls_it(make_env: Any) -> None:
    # Issue 11: a unit in the middle of an old consume-queue file that does not point at its
    # record (open checks only the tails) stopped the level's delivery at it forever. Now the
    # service reads it through the store, which repairs the unit from the log.
    env, cq = _level_of_twenty(make_env)
    _write_unit(env, 3, bytes(20))
    assert cq.unit_at(3) is None
    _all_twenty_delivered_once(env)


def test_a_unit_pointing_at_another_record_is_repaired_not_trusted(make_env: Any) -> None:
    # A level unit damaged into another record's offset (a valid record start, not its own) was
    # trusted: that record was delivered twice and the unit's own message lost, though the log
    # holds it. The service now checks the record is the unit's and reads it through the store.
    env, cq = _level_of_twenty(make_env)
    for damaged, other in ((3, 2), (11, 12)):  # an earlier record's offset, a later one's
        unit = cq.unit_at(other)
        assert unit is not None
        _write_unit(env, damaged, unit[0].to_bytes(8, "big"))
    _all_twenty_delivered_once(env)
