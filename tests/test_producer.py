"""Producer: send modes, queue choice, validation, compression, hooks, batches, ids and topics."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

import mqlite
from support import SMALL_STORE, broker_fixture, local, over_the_wire
from mqlite.clock import ManualClock
from mqlite.message import SysFlag, UniqIdGenerator, create_offset_msg_id, decode_offset_msg_id
from mqlite.producer import SelectMessageQueueByHash, SendMessageContext
from mqlite.validators import validate_message

broker = broker_fixture()  # a test marked @over_the_wire also runs over a connection


@pytest.fixture
def producer(broker: Any) -> Any:
    with mqlite.Producer(broker, group="pg") as p:
        yield p


def _all(broker: Any, topic: str) -> list[mqlite.MessageExt]:
    out: list[mqlite.MessageExt] = []
    for queue_id in local(broker).store.queue_ids(topic):
        out += local(broker).store.get_messages(topic, queue_id, 0, 10_000).messages
    return out


# -- send modes -----------------------------------------------------------------------------------
@over_the_wire
def test_send_returns_ids_that_find_the_message(broker: Any, producer: Any) -> None:
    msg = mqlite.Message("orders", b"hello", tags="TagA", keys=["o-1", "o-2"], properties={"region": "eu"})
    result = producer.send(msg)
    assert result.send_status is mqlite.SendStatus.SEND_OK
    assert len(result.msg_id) == 32 and result.msg_id == msg.properties["UNIQ_KEY"]
    assert result.message_queue.topic == "orders" and result.queue_offset == 0
    for ident in (result.msg_id, result.offset_msg_id):
        found = broker.view_message(ident)
        assert found.body == b"hello" and found.msg_id == result.msg_id
        assert found.tags == "TagA" and found.keys == ["o-1", "o-2"] and found.get_user_property("region") == "eu"
    assert [m.msg_id for m in broker.query_message("orders", "o-2")] == [result.msg_id]


@over_the_wire
def test_round_robin_over_the_topics_queues(producer: Any) -> None:
    queues = [producer.send(mqlite.Message("rr", b"x")).message_queue.queue_id for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all((b - a) % 4 == 1 for a, b in zip(queues, queues[1:]))


@over_the_wire
def test_explicit_queue_selector_and_orderly(producer: Any) -> None:
    mqs = producer.fetch_publish_message_queues("sel")
    assert producer.send(mqlite.Message("sel", b"x"), queue=mqs[2]).message_queue == mqs[2]
    r = producer.send(mqlite.Message("sel", b"x"), selector=lambda qs, m, arg: qs[arg % len(qs)], arg=7)
    assert r.message_queue.queue_id == 3
    # SelectMessageQueueByHash uses Java's hashCode: "order-1".hashCode() % 4
    expected = abs(mqlite.message.java_string_hash("order-1")) % 4
    assert {producer.send_orderly(mqlite.Message("sel", b"y"), "order-1").message_queue.queue_id
            for _ in range(5)} == {expected}
    with pytest.raises(mqlite.MQClientError):
        producer.send(mqlite.Message("sel", b"x"), queue=mqlite.MessageQueue("sel", "mqlite", 9))
    with pytest.raises(mqlite.MQClientError):
        producer.send(mqlite.Message("sel", b"x"), selector=lambda qs, m, arg: "not a queue")


def test_hash_selector_matches_java_for_ints_and_negative_hashes() -> None:
    mqs = [mqlite.MessageQueue("t", "b", i) for i in range(3)]
    select = SelectMessageQueueByHash()
    assert select(mqs, mqlite.Message("t", b"x"), 10).queue_id == 1
    assert select(mqs, mqlite.Message("t", b"x"), -10).queue_id == 1  # abs(-10 % 3) in Java is 1
    assert select(mqs, mqlite.Message("t", b"x"), "polygenelubricants").queue_id == abs(-2147483648) % 3


@over_the_wire
def test_send_async_and_callback(producer: Any) -> None:
    done = threading.Event()
    seen: list[concurrent.futures.Future[mqlite.SendResult]] = []

    def callback(future: concurrent.futures.Future[mqlite.SendResult]) -> None:
        seen.append(future)
        done.set()

    future = producer.send_async(mqlite.Message("async", b"a"), callback=callback)
    assert future.result(timeout=10).send_status is mqlite.SendStatus.SEND_OK
    assert done.wait(10) and seen == [future]
    with pytest.raises(mqlite.MQClientError):  # bad input fails at once, nothing queued
        producer.send_async(mqlite.Message("async", b""))


@over_the_wire
def test_shutdown_drains_every_queued_async_and_oneway_send(broker: Any, producer: Any) -> None:
    futures = [producer.send_async(mqlite.Message("drain", b"a%d" % i)) for i in range(100)]
    for i in range(200):
        producer.send_oneway(mqlite.Message("drain", b"o%d" % i))
    producer.shutdown()  # sends accepted before it still run; new ones are refused
    assert all(f.result(timeout=0).send_status is mqlite.SendStatus.SEND_OK for f in futures)
    assert len(_all(broker, "drain")) == 300
    with pytest.raises(mqlite.IllegalStateError, match="shut down"):
        producer.send_oneway(mqlite.Message("drain", b"late"))


@over_the_wire
def test_send_oneway_stores_without_a_result(broker: Any, producer: Any) -> None:
    assert producer.send_oneway(mqlite.Message("oneway", b"fire")) is None
    producer.shutdown()  # waits for the pending oneway send
    assert [m.body for m in _all(broker, "oneway")] == [b"fire"]


@over_the_wire
def test_send_batch_ids_and_offsets(broker: Any, producer: Any) -> None:
    msgs = [mqlite.Message("batch", b"m%d" % i, keys=f"k{i}") for i in range(5)]
    result = producer.send_batch(msgs)
    ids = result.msg_id.split(",")
    assert len(ids) == 5 and ids == [m.properties["UNIQ_KEY"] for m in msgs]
    offset_ids = result.offset_msg_id.split(",")
    stored = local(broker).store.get_messages("batch", result.message_queue.queue_id, 0, 10).messages
    assert [m.body for m in stored] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m.offset_msg_id for m in stored] == offset_ids  # AppendCallback batch ids
    assert [m.queue_offset for m in stored] == list(range(result.queue_offset, result.queue_offset + 5))


@pytest.mark.parametrize("bad, message", [
    ([mqlite.Message("a", b"x"), mqlite.Message("b", b"y")], "same"),
    ([mqlite.Message("a", b"x", delay_time_level=2)], "TimeDelayLevel"),
    ([mqlite.Message("%RETRY%g", b"x")], "Retry"),
    ([], "at least one"),
])
def test_send_batch_rules(producer: Any, bad: list[mqlite.Message], message: str) -> None:
    with pytest.raises(mqlite.MQClientError, match=message):
        producer.send_batch(bad)


def test_plain_sends_store_what_the_full_path_stores(broker: Any, producer: Any) -> None:
    """Sends without hooks reuse a cached encoding of the property map; what is stored must not differ."""
    shapes = [dict(), dict(tags="A"), dict(tags="B", keys=["k1", "k2"]), dict(properties={"日本": "語", "a": "1"})]
    sent = [mqlite.Message("plain", b"m%d" % i, **shapes[i % len(shapes)]) for i in range(12)]  # type: ignore[arg-type]
    sent.append(mqlite.Message("plain", bytearray(b"array"), tags="A"))  # converted on the full path
    for msg in sent:
        producer.send(msg)
    resent = sent[0]
    first_id = resent.properties["UNIQ_KEY"]
    assert producer.send(resent).msg_id == first_id  # a resent message keeps its id
    unique_keys = [mqlite.Message("plain", b"u", keys=f"key-{i}") for i in range(300)]  # more than the cache keeps
    for msg in unique_keys:
        producer.send(msg)
    stored = {m.msg_id: m for m in _all(broker, "plain")}
    for msg in sent + unique_keys:
        got = stored[msg.properties["UNIQ_KEY"]]
        assert got.properties == msg.properties and list(got.properties) == list(msg.properties)
        assert got.body == bytes(msg.body)
    assert len(stored) == len(sent) + len(unique_keys)  # the resend is a second record with the same id
    assert sum(1 for m in _all(broker, "plain") if m.msg_id == first_id) == 2


def test_plain_path_still_refuses_bad_input_and_runs_hooks(broker: Any, producer: Any) -> None:
    producer.send(mqlite.Message("plain2", b"x", tags="A"))  # the map {TAGS, WAIT} is cached now
    with pytest.raises(mqlite.MQClientError, match="empty"):
        producer.send(mqlite.Message("plain2", b"", tags="A"))
    with pytest.raises(mqlite.MQClientError, match="flag"):
        producer.send(mqlite.Message("plain2", b"x", tags="A", flag="1"))  # type: ignore[arg-type]
    with pytest.raises(mqlite.MQClientError, match="letters, digits"):
        producer.send(mqlite.Message("bad topic", b"x", tags="A"))
    with pytest.raises(mqlite.MQClientError, match="TimeDelayLevel"):
        producer.send_batch([mqlite.Message("plain2", b"x", tags="A"), mqlite.Message("plain2", b"y", delay_time_level=1)])
    with pytest.raises(mqlite.MQClientError, match="waitStoreMsgOK"):
        late = mqlite.Message("plain2", b"y", tags="A")
        late.properties["WAIT"] = "false"
        producer.send_batch([mqlite.Message("plain2", b"x", tags="A"), late])
    seen: list[str] = []
    producer.add_send_hook(before=lambda ctx: seen.append(ctx.communication_mode))
    producer.send(mqlite.Message("plain2", b"x", tags="A"))
    assert seen == ["SYNC"]


def test_plain_send_result_has_the_full_paths_fields(broker: Any, producer: Any) -> None:
    """The plain send (cached map, no hook) returns the same fields as the full path."""
    producer.send(mqlite.Message("plainres", b"warm"))  # the empty map is cached from here on
    plain = producer.send(mqlite.Message("plainres", b"plain"))
    full = producer.send(mqlite.Message("plainres", b"full"), queue=plain.message_queue)  # the full path
    for result in (plain, full):
        assert type(result) is mqlite.SendResult and result.send_status is mqlite.SendStatus.SEND_OK
        assert result.transaction_id is None and result.region_id == "DefaultRegion"
        assert result.message_queue == plain.message_queue
        assert broker.view_message(result.offset_msg_id).msg_id == result.msg_id
        assert repr(result).startswith("SendResult(send_status=SEND_OK")
    assert full.queue_offset == plain.queue_offset + 1


def test_plain_send_born_time_follows_the_brokers_clock(tmp_path: Path) -> None:
    """The plain send reads `time_ns` itself only under the system clock; a manual clock is still asked."""
    clock = ManualClock(1_500_000_000_000)  # far from now: a born time from the real clock would show
    with mqlite.open(tmp_path / "manual", clock=clock, **SMALL_STORE) as manual, \
            mqlite.Producer(manual, group="pg") as producer:
        for body in (b"first", b"plain"):  # the second send takes the plain path
            assert manual.view_message(producer.send(mqlite.Message("born", body)).msg_id).born_timestamp == clock.now_ms()
    with mqlite.open(tmp_path / "system", **SMALL_STORE) as real, mqlite.Producer(real, group="pg") as producer:
        producer.send(mqlite.Message("born", b"first"))
        before = time.time_ns() // 1_000_000
        result = producer.send(mqlite.Message("born", b"plain"))
        after = time.time_ns() // 1_000_000
        assert before <= real.view_message(result.msg_id).born_timestamp <= after


def test_send_batch_of_cached_maps_matches_message_by_message(broker: Any, producer: Any) -> None:
    for _ in range(2):  # the second batch takes the cached path
        msgs = [mqlite.Message("plainb", b"b%d" % i, tags="T%d" % (i % 2), keys=f"k{i}" if i % 3 == 0 else None,
                               flag=i) for i in range(20)]
        result = producer.send_batch(msgs)
        stored = local(broker).store.get_messages("plainb", result.message_queue.queue_id, result.queue_offset, 20).messages
        assert [m.properties for m in stored] == [m.properties for m in msgs]
        assert [m.flag for m in stored] == list(range(20)) and [m.body for m in stored] == [m.body for m in msgs]
        assert [m.offset_msg_id for m in stored] == result.offset_msg_id.split(",")
    found = [m.msg_id for m in broker.query_message("plainb", "k3")]  # the index covers both batches
    assert len(found) == 2 and msgs[3].properties["UNIQ_KEY"] in found


# -- validation: every bad input raises before anything is stored ------------------------------------------
@pytest.mark.parametrize("make, fragment", [
    (lambda: mqlite.Message("", b"x"), "non-blank"),
    (lambda: mqlite.Message("bad topic", b"x"), "letters, digits"),
    (lambda: mqlite.Message("t" * 128, b"x"), "127"),
    (lambda: mqlite.Message("SCHEDULE_TOPIC_XXXX", b"x"), "system topic"),
    (lambda: mqlite.Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"), "system topic"),
    (lambda: mqlite.Message("t", b""), "empty"),
    (lambda: mqlite.Message("t", "text"), "bytes"),  # type: ignore[arg-type]
    (lambda: mqlite.Message("t", None), "bytes"),  # type: ignore[arg-type]
    (lambda: mqlite.Message("t", b"x" * (64 * 1024 + 1)), "max_message_size"),
    (lambda: mqlite.Message("t", b"x", delay_time_level=-1), "delay_time_level"),
    (lambda: mqlite.Message("t", b"x", properties={"a\x01b": "v"}), "separator"),
    (lambda: mqlite.Message("t", b"x", properties={"big": "v" * 40_000}), "PROPERTIES_SIZE_EXCEEDED"),
    (lambda: "not a message", "mqlite.Message"),
])
def test_bad_input_is_refused_before_storing(tmp_path: Path, make: Any, fragment: str) -> None:
    with mqlite.open(str(tmp_path), max_message_size=64 * 1024, **SMALL_STORE) as broker:
        with mqlite.Producer(broker) as producer:
            end = local(broker).store.commitlog.max_offset
            for send in (producer.send, producer.send_async, producer.send_oneway):
                with pytest.raises(mqlite.MQClientError, match=fragment):
                    send(make())
            assert local(broker).store.commitlog.max_offset == end
            assert not isinstance(mqlite.MQClientError("x"), mqlite.IllegalStateError)


_BAD_MESSAGES = [
    lambda: mqlite.Message("", b"x"),
    lambda: mqlite.Message("bad topic", b"x"),
    lambda: mqlite.Message("t", b""),
    lambda: mqlite.Message("t", "text"),  # type: ignore[arg-type]
    lambda: mqlite.Message("t", b"x" * (64 * 1024 + 1)),
    lambda: mqlite.Message("t", b"x", flag=1 << 31),
    lambda: mqlite.Message("t", b"x", delay_time_level=-1),
    lambda: mqlite.Message("t", b"x", properties={"a\x01b": "v"}),
    lambda: mqlite.Message("t", b"x", properties={"big": "v" * 40_000}),
    lambda: "not a message",
]


@pytest.mark.parametrize("make", _BAD_MESSAGES)
def test_validate_message_is_the_producers_check(tmp_path: Path, make: Any) -> None:
    # The public function (the Spark writer's tasks call it without a broker) says what the producer says.
    with mqlite.open(str(tmp_path), max_message_size=64 * 1024, **SMALL_STORE) as broker, mqlite.Producer(broker) as producer:
        with pytest.raises(mqlite.MQClientError) as sent:
            producer.send(make())
    with pytest.raises(mqlite.MQClientError) as validated:
        validate_message(make(), 64 * 1024)
    assert str(validated.value) == str(sent.value)


def test_validate_message_skips_known_topics_only() -> None:
    validate_message(mqlite.Message("t", b"x" * 10), 10)
    with pytest.raises(mqlite.MQClientError, match="max_message_size is 9"):
        validate_message(mqlite.Message("t", b"x" * 10), 9)
    with pytest.raises(mqlite.MQClientError, match="letters, digits"):
        validate_message(mqlite.Message("a b", b"x"), 10)
    validate_message(mqlite.Message("a b", b"x"), 10, known_topics={"a b"})  # a caller's cache of checked names
    with pytest.raises(mqlite.MQClientError, match="empty"):
        validate_message(mqlite.Message("a b", b""), 10, known_topics={"a b"})


def test_reserved_property_names_are_refused() -> None:
    msg = mqlite.Message("t", b"x")
    for name in ("TAGS", "UNIQ_KEY", "DELAY", "REAL_TOPIC"):
        with pytest.raises(mqlite.MQClientError, match="reserved"):
            msg.put_user_property(name, "v")
    with pytest.raises(mqlite.MQClientError):
        msg.put_user_property(" ", "v")


def test_unknown_topic_with_auto_create_off(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), auto_create_topic=False, **SMALL_STORE) as broker:
        with mqlite.Producer(broker) as producer:
            with pytest.raises(mqlite.MQClientError, match="create_topic"):
                producer.send(mqlite.Message("nope", b"x"))
            broker.create_topic("nope", 2)
            assert producer.send(mqlite.Message("nope", b"x")).message_queue.queue_id in (0, 1)


def test_lifecycle_errors(broker: Any) -> None:
    producer = mqlite.Producer(broker, group="life")
    with pytest.raises(mqlite.IllegalStateError, match="start"):
        producer.send(mqlite.Message("t", b"x"))
    producer.start()
    producer.shutdown()
    producer.shutdown()  # idempotent
    with pytest.raises(mqlite.IllegalStateError, match="shut down"):
        producer.send(mqlite.Message("t", b"x"))
    with pytest.raises(mqlite.IllegalStateError):
        producer.start()


# -- compression, hooks ---------------------------------------------------------------------------------------
@over_the_wire
def test_bodies_over_4_kib_are_stored_zlib_compressed(broker: Any, producer: Any) -> None:
    big = bytes(range(256)) * 40  # 10 KiB
    small = b"s" * 4096
    producer.send(mqlite.Message("z", big), queue=mqlite.MessageQueue("z", "mqlite", 0))
    producer.send(mqlite.Message("z", small), queue=mqlite.MessageQueue("z", "mqlite", 0))
    first, second = local(broker).store.get_messages("z", 0, 0, 2).messages
    assert first.body == big and second.body == small  # consumers see the original bytes
    assert first.sys_flag & 0x701 == SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB_TYPE
    assert second.sys_flag & SysFlag.COMPRESSED == 0
    raw = first._raw  # the store keeps the compressed bytes and their CRC
    assert zlib.compress(big, 5) in raw
    assert first.store_size < len(big)


@over_the_wire
def test_send_hooks_see_before_and_after(producer: Any) -> None:
    events: list[tuple[str, Any]] = []

    def before(ctx: SendMessageContext) -> None:
        events.append(("before", ctx.send_result))

    def after(ctx: SendMessageContext) -> None:
        events.append(("after", ctx.send_result.send_status if ctx.send_result else ctx.exception))

    producer.add_send_hook(before=before, after=after)
    producer.send(mqlite.Message("hooks", b"x"))
    assert events == [("before", None), ("after", mqlite.SendStatus.SEND_OK)]


def test_flush_disk_timeout_is_reported(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), flush_disk_type="SYNC_FLUSH", sync_flush_timeout=0.2, **SMALL_STORE) as broker:
        local(broker).store._group_commit._flush_to = lambda: 0  # a disk that never confirms
        with mqlite.Producer(broker) as producer:
            result = producer.send(mqlite.Message("t", b"x"))
        assert result.send_status is mqlite.SendStatus.FLUSH_DISK_TIMEOUT
        assert broker.view_message(result.msg_id).body == b"x"  # stored all the same


# -- concurrency, sharing -------------------------------------------------------------------------------------
@over_the_wire
def test_eight_threads_store_every_message_once(broker: Any, producer: Any) -> None:
    def worker(n: int) -> None:
        for i in range(250):
            producer.send(mqlite.Message("mt", b"%d-%d" % (n, i)))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = _all(broker, "mt")
    assert sorted(m.body for m in stored) == sorted(b"%d-%d" % (n, i) for n in range(8) for i in range(250))
    for queue_id in local(broker).store.queue_ids("mt"):
        offsets = [m.queue_offset for m in local(broker).store.get_messages("mt", queue_id, 0, 10_000).messages]
        assert offsets == list(range(len(offsets)))


def test_producers_given_a_path_share_one_broker(tmp_path: Path) -> None:
    path = str(tmp_path / "shared")
    with mqlite.Producer(path, group="a") as a, mqlite.Producer(path, group="b") as b:
        assert a.broker is b.broker
        a.send(mqlite.Message("t", b"1"))
        b.send(mqlite.Message("t", b"2"))
    # the last user closed it: the directory can be opened again
    with mqlite.open(path) as broker:
        assert sorted(m.body for m in _all(broker, "t")) == [b"1", b"2"]


def test_topics_are_persisted_and_listed(tmp_path: Path) -> None:
    path = str(tmp_path)
    with mqlite.open(path, **SMALL_STORE) as broker:
        broker.create_topic("orders", 3)
        with mqlite.Producer(broker) as producer:
            producer.send(mqlite.Message("auto", b"x"))
        assert {"orders", "auto"} <= set(broker.topic_list())
        with pytest.raises(mqlite.MQClientError, match="system topic"):
            broker.create_topic("SCHEDULE_TOPIC_XXXX", 1)
    with mqlite.open(path) as broker:
        assert broker.topic_config("orders").write_queue_nums == 3
        assert broker.topic_config("auto").write_queue_nums == 4
        broker.delete_topic("auto")
        assert "auto" not in broker.topic_list()
        assert not os.path.exists(os.path.join(path, "consumequeue", "auto"))
        with pytest.raises(mqlite.MQClientError):
            broker.delete_topic("auto")


# -- ids (MessageClientIDSetterTest, MessageDecoderTest) ----------------------------------------------------------
def test_client_ids_count_up_and_carry_pid_and_time() -> None:
    gen = UniqIdGenerator()
    a, b = gen.next_id(), gen.next_id()
    assert len(a) == 32 and a.isupper() or a.isdigit()
    assert int(b[-4:], 16) == (int(a[-4:], 16) + 1) % 65536
    assert int(a[8:12], 16) == os.getpid() & 0xFFFF
    lt = time.localtime()
    month_start = time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000
    assert abs(month_start + int(a[20:28], 16) - time.time() * 1000) < 1000


def test_offset_message_id_vectors() -> None:
    assert create_offset_msg_id(bytes([127, 0, 0, 1]), 9103, 123456) == "7F0000010000238F000000000001E240"
    assert decode_offset_msg_id("645100FA00002A9F000000489A3AA09E") == ("100.81.0.250", 10911, 311825178782)
    with pytest.raises(mqlite.MQClientError):
        decode_offset_msg_id("xyz")


def test_a_refused_start_leaves_no_thread_and_no_hold_on_the_broker(tmp_path: Path) -> None:
    path = str(tmp_path / "ro")
    mqlite.open(path).close()
    with mqlite.open(path, read_only=True) as reader:
        producer = mqlite.Producer(reader, "pg", trace=True)
        with pytest.raises(mqlite.IllegalStateError, match="read-only"):
            producer.start()  # a reader cannot store traces
        assert not [t for t in threading.enumerate() if t.name.startswith("mqlite-trace-")]
        with pytest.raises(mqlite.IllegalStateError):
            producer.send(mqlite.Message("T", b"x"))
    assert reader.closed  # nothing kept it open
