"""Bad input gets a clear error (issue 11): tables of bad values for every public constructor and method.

Each bad value must raise the mqlite exception named in its row (never a raw `TypeError`,
`struct.error`, `OverflowError` ...) and store nothing: the commit log's end and the consumer
offset table are the same after the call as before. Also: names that could become paths
(groups, client ids) never leave the store, and `open()` refuses a path that is a file.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mqlite
import mqlite.aio
from mqlite import (
    ConfigError,
    LitePullConsumer,
    Message,
    MessageModel,
    MessageQueue,
    MQClientError,
    Producer,
    PushConsumer,
    StoreConfig,
    TransactionProducer,
)
from mqlite.consumer.offsetstore import check_client_id, local_offsets_path
from mqlite.topics import TopicTable, check_group, check_topic
from support import TINY_STORE as SMALL

TOPIC = "T"
BAD_GROUPS = ["", "   ", "a/b", "../x", "..", "g\n", "a b", "é", "a" * 256, 5, None, b"g"]
INT32_MAX = (1 << 31) - 1


class Env:
    """One store for the whole module: a topic with messages, a running producer and consumer."""

    def __init__(self, root: Path) -> None:
        self.broker = mqlite.open(str(root), **SMALL)  # closed by close(), also when the rest fails
        self.producer = Producer(self.broker, "pg")
        self.consumer = LitePullConsumer(self.broker, "lg", auto_commit=False)
        try:
            self.producer.start()
            self.mq = MessageQueue(TOPIC, self.broker.broker_name, 0)
            for i in range(3):
                self.producer.send(Message(TOPIC, b"m%d" % i, keys=["k"]), queue=self.mq)
            self.consumer.assign([self.mq])
            self.consumer.start()
            self.consumer.commit_sync({self.mq: 1})
            self.broker.wait_idle(timeout=10)
            self.stored = self.broker.query_message_by_offset(TOPIC, 0, 0)
        except BaseException:
            self.close()
            raise

    def state(self) -> tuple[int, dict[str, dict[int, int]]]:
        """What a refused call must leave as it was: the commit log's end and the offset table."""
        assert self.broker.offsets is not None
        return self.broker.store.commitlog.max_offset, self.broker.offsets.snapshot()

    def close(self) -> None:
        self.consumer.shutdown()
        self.producer.shutdown()
        self.broker.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    env = Env(tmp_path_factory.mktemp("bad-input") / "store")
    yield env
    env.close()


def refused(env: Env, error: type[Exception], call: Callable[[], Any], match: str | None = None) -> None:
    """`call()` raises `error` (an mqlite error) and stores nothing."""
    before = env.state()
    with pytest.raises(error, match=match) as info:
        call()
    assert isinstance(info.value, mqlite.MQLiteError)
    env.broker.wait_idle(timeout=10)
    assert env.state() == before


# -- Message -----------------------------------------------------------------------------------------------
MESSAGE_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("str body", {"body": "text"}), ("int body", {"body": 5}), ("None body", {"body": None}),
    ("int topic", {"topic": 5}), ("None topic", {"topic": None}),
    ("int tags", {"tags": 5}), ("tags with \\x01", {"tags": "a\x01b"}),
    ("int keys", {"keys": [1, 2]}), ("None key", {"keys": ["a", None]}), ("keys not iterable", {"keys": 5}),
    ("key with \\x02", {"keys": ["a\x02"]}),
    ("str flag", {"flag": "1"}), ("float flag", {"flag": 1.5}), ("bool flag", {"flag": True}),
    ("flag above int32", {"flag": INT32_MAX + 1}), ("flag below int32", {"flag": -INT32_MAX - 2}),
    ("int property value", {"properties": {"a": 1}}), ("int property name", {"properties": {1: "a"}}),
    ("empty property name", {"properties": {"": "a"}}), ("name with \\x01", {"properties": {"a\x01": "v"}}),
    ("value with \\x02", {"properties": {"a": "v\x02"}}), ("properties not a map", {"properties": ["a"]}),
    ("str delay level", {"delay_time_level": "3"}), ("negative delay level", {"delay_time_level": -1}),
    ("delay level above int32", {"delay_time_level": INT32_MAX + 1}), ("float delay level", {"delay_time_level": 1.5}),
]


@pytest.mark.parametrize("kwargs", [k for _, k in MESSAGE_ARGS], ids=[i for i, _ in MESSAGE_ARGS])
def test_message_refuses_bad_arguments_at_construction(kwargs: dict[str, Any]) -> None:
    args = {"topic": TOPIC, "body": b"x", **kwargs}
    with pytest.raises(MQClientError):
        Message(**args)


MESSAGE_SETTERS: list[tuple[str, Any]] = [
    ("deliver_time_ms", -1), ("deliver_time_ms", 1 << 63), ("deliver_time_ms", "5"), ("deliver_time_ms", 1.5),
    ("delay_ms", -1), ("delay_ms", 1 << 63), ("delay_ms", True), ("tags", 5), ("keys", [1]),
    ("delay_time_level", -1), ("delay_time_level", 1 << 40),
]


@pytest.mark.parametrize(("attr", "value"), MESSAGE_SETTERS)
def test_message_setters_refuse_bad_values(attr: str, value: Any) -> None:
    msg = Message(TOPIC, b"x")
    before = dict(msg.properties)
    with pytest.raises(MQClientError):
        setattr(msg, attr, value)
    assert msg.properties == before


@pytest.mark.parametrize(("name", "value"), [(1, "x"), ("a", 1), ("a", "x\x01y"), ("a\x02", "x"), ("", "x"),
                                             ("a", " "), ("KEYS", "x"), (None, None)])
def test_put_user_property_refuses(name: Any, value: Any) -> None:
    with pytest.raises(MQClientError):
        Message(TOPIC, b"x").put_user_property(name, value)


def test_int_properties_read_only_ascii_digits() -> None:
    """A stored property of other digits ("²" passes str.isdigit) reads as absent, never a raw ValueError."""
    msg = Message(TOPIC, b"x", properties={"DELAY": "²", "TIMER_DELIVER_MS": "١٢"})
    assert (msg.delay_time_level, msg.deliver_time_ms) == (0, None)


# -- sending -----------------------------------------------------------------------------------------------
def _set(attr: str, value: Any) -> Callable[[Message], None]:
    return lambda msg: setattr(msg, attr, value)


def _prop(name: str, value: Any) -> Callable[[Message], None]:
    return lambda msg: msg.properties.__setitem__(name, value)


SEND_DAMAGE: list[tuple[str, Callable[[Message], None]]] = [
    ("flag above int32", _set("flag", INT32_MAX + 1)), ("flag below int32", _set("flag", -INT32_MAX - 2)),
    ("str flag", _set("flag", "1")), ("topic with a newline", _set("topic", "T\n")),
    ("topic with a slash", _set("topic", "a/b")), ("blank topic", _set("topic", " ")),
    ("long topic", _set("topic", "t" * 128)), ("system topic", _set("topic", "SCHEDULE_TOPIC_XXXX")),
    ("str body", _set("body", "text")), ("empty body", _set("body", b"")),
    ("int property", _prop("K", 5)), ("property with \\x01", _prop("K", "a\x01b")),
    ("bad delay property", _prop("DELAY", "x")), ("negative delay property", _prop("DELAY", "-1")),
    ("huge delay property", _prop("DELAY", str(1 << 40))),
    ("huge properties", _prop("K", "v" * 40000)),
]
SEND_PATHS: dict[str, Callable[[Env, Message], Any]] = {
    "send": lambda env, msg: env.producer.send(msg),
    "send_async": lambda env, msg: env.producer.send_async(msg).result(10),
    "send_oneway": lambda env, msg: env.producer.send_oneway(msg),
    "send_orderly": lambda env, msg: env.producer.send_orderly(msg, 7),
    "send_batch": lambda env, msg: env.producer.send_batch([Message(TOPIC, b"ok"), msg]),
    "queue": lambda env, msg: env.producer.send(msg, queue=MessageQueue(msg.topic, "mqlite", 0)),
}


@pytest.mark.parametrize("path", list(SEND_PATHS))
@pytest.mark.parametrize("damage", [d for _, d in SEND_DAMAGE], ids=[i for i, _ in SEND_DAMAGE])
def test_sends_refuse_bad_messages(env: Env, path: str, damage: Callable[[Message], None]) -> None:
    # A valid message with the same properties first: the plain send then knows the map (its cached path).
    env.producer.send(Message(TOPIC, b"warm-up", tags="A"))
    msg = Message(TOPIC, b"x", tags="A")
    damage(msg)
    refused(env, MQClientError, lambda: SEND_PATHS[path](env, msg))


def test_a_send_refuses_a_body_above_the_producers_limit(env: Env) -> None:
    with Producer(env.broker, "pg-small", max_message_size=16) as producer:
        refused(env, MQClientError, lambda: producer.send(Message(TOPIC, b"x" * 17)), "max_message_size")


@pytest.mark.parametrize("msgs", [5, None, [b"x"], ["x"], []])
def test_send_batch_refuses_what_is_no_batch(env: Env, msgs: Any) -> None:
    refused(env, MQClientError, lambda: env.producer.send_batch(msgs))


class RollBack:
    """A transaction listener that rolls every half message back."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.ROLLBACK_MESSAGE

    def check_local_transaction(self, msg: Any) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.ROLLBACK_MESSAGE


def test_a_transaction_refuses_a_bad_message(env: Env) -> None:
    with TransactionProducer(env.broker, "tpg", listener=RollBack()) as producer:
        msg = Message(TOPIC, b"x")
        msg.flag = 1 << 40
        refused(env, MQClientError, lambda: producer.send_message_in_transaction(msg))


# -- constructors --------------------------------------------------------------------------------------------
PRODUCER_OPTIONS: list[dict[str, Any]] = [
    {"send_msg_timeout": 0}, {"send_msg_timeout": -1}, {"send_msg_timeout": math.nan},
    {"send_msg_timeout": math.inf}, {"send_msg_timeout": "3"}, {"compress_msg_body_over_howmuch": -1},
    {"compress_msg_body_over_howmuch": "4k"}, {"default_topic_queue_nums": 0}, {"default_topic_queue_nums": 1025},
    {"async_thread_nums": 0}, {"async_thread_nums": 1.5}, {"max_message_size": 0}, {"max_message_size": 1 << 31},
    {"trace": "yes"},
]


@pytest.mark.parametrize("group", BAD_GROUPS)
def test_producers_refuse_bad_groups(env: Env, group: Any) -> None:
    with pytest.raises(MQClientError, match="group"):
        Producer(env.broker, group)
    with pytest.raises(MQClientError, match="group"):
        mqlite.aio.Producer(env.broker, group)


@pytest.mark.parametrize("options", PRODUCER_OPTIONS)
def test_producer_refuses_bad_options(env: Env, options: dict[str, Any]) -> None:
    with pytest.raises(MQClientError):
        Producer(env.broker, "pg2", **options)


@pytest.mark.parametrize("broker", [5, None, b"/tmp/x"])
def test_clients_refuse_what_is_no_broker(broker: Any) -> None:
    for make in (lambda: Producer(broker), lambda: LitePullConsumer(broker, "g"), lambda: PushConsumer(broker, "g")):
        with pytest.raises(MQClientError, match="broker"):
            make()


def test_transaction_producer_refuses_a_bad_group_and_listener(env: Env) -> None:
    with pytest.raises(MQClientError, match="group"):
        TransactionProducer(env.broker, "a/b", listener=RollBack())
    with pytest.raises(MQClientError, match="listener"):
        TransactionProducer(env.broker, "tg", listener=None)  # type: ignore[arg-type]


CONSUMERS: dict[str, Callable[..., Any]] = {"push": PushConsumer, "lite": LitePullConsumer,
                                            "aio-lite": mqlite.aio.LitePullConsumer,
                                            "aio-push": mqlite.aio.PushConsumer}


@pytest.mark.parametrize("kind", list(CONSUMERS))
@pytest.mark.parametrize("group", BAD_GROUPS)
def test_consumers_refuse_bad_groups(env: Env, kind: str, group: Any) -> None:
    with pytest.raises(MQClientError, match="group"):
        CONSUMERS[kind](env.broker, group)


BAD_CLIENT_IDS = ["", " ", "a/b", "..", ".", "../../etc", "x\n", "a\\b", "a" * 256, 5]
CONSUMER_OPTIONS: list[dict[str, Any]] = [
    *({"client_id": c} for c in BAD_CLIENT_IDS), {"consume_timestamp": "20241399000000"},
    {"consume_timestamp": 1.5}, {"message_model": "BROADCASTING"}, {"offset_store_dir": 5}, {"trace": 1},
]


@pytest.mark.parametrize("kind", ["push", "lite"])
@pytest.mark.parametrize("options", CONSUMER_OPTIONS)
def test_consumers_refuse_bad_options(env: Env, kind: str, options: dict[str, Any]) -> None:
    with pytest.raises(MQClientError):
        CONSUMERS[kind](env.broker, "cg", **options)


@pytest.mark.parametrize("options", [{"consume_timeout": 0}, {"consume_timeout": math.nan},
                                     {"pull_interval": math.inf}, {"suspend_current_queue_time": -1},
                                     {"max_reconsume_times": -2}, {"max_reconsume_times": "3"},
                                     {"consume_thread_nums": 0}, {"pull_batch_size": 0},
                                     {"subscription": ["T"]}])  # a list: was a raw AttributeError
def test_push_consumer_refuses_bad_options(env: Env, options: dict[str, Any]) -> None:
    with pytest.raises(MQClientError):
        PushConsumer(env.broker, "cg", **options)


@pytest.mark.parametrize("options", [{"poll_timeout": math.nan}, {"poll_timeout": -1},
                                     {"auto_commit_interval": math.inf}, {"long_polling_wait": 0},
                                     {"pull_batch_size": 0}, {"consumer_timeout": "1"}])
def test_lite_pull_consumer_refuses_bad_options(env: Env, options: dict[str, Any]) -> None:
    with pytest.raises(MQClientError):
        LitePullConsumer(env.broker, "cg", **options)


# -- names never become paths outside the store ---------------------------------------------------------------
def test_group_and_client_id_rules() -> None:
    assert check_group("%RETRY%cg|x-1_2") == "%RETRY%cg|x-1_2"
    assert check_client_id("10.0.0.1@4242#0") == "10.0.0.1@4242#0"
    with pytest.raises(MQClientError):
        check_topic("T\n")  # `re.match` with `$` let this through
    with pytest.raises(MQClientError):
        check_group("g\n")


@pytest.mark.parametrize(("client_id", "group"), [("../..", "g"), ("c", "../../x"), ("/abs", "g"), ("c", "/abs")])
def test_offsets_path_refuses_names_that_leave_the_directory(tmp_path: Path, client_id: str, group: str) -> None:
    with pytest.raises(MQClientError):
        local_offsets_path(str(tmp_path), client_id, group)


def test_offsets_path_refuses_a_link_out_of_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "c1").symlink_to(outside)
    with pytest.raises(MQClientError, match="outside"):
        local_offsets_path(str(tmp_path / "dir"), "c1", "g")
    assert local_offsets_path(str(tmp_path / "dir"), "c2", "g") == str(tmp_path / "dir" / "c2" / "g" / "offsets.json")


def test_a_broadcasting_consumer_writes_nothing_outside_its_directory(env: Env, tmp_path: Path) -> None:
    """Before issue 11 the group `../../x` wrote `offsets.json` two levels above the offsets directory."""
    outside = tmp_path / "outside"
    outside.mkdir()
    offsets_dir = tmp_path / "offsets"
    (offsets_dir / "c1").mkdir(parents=True)
    for group, client_id in (("../../outside", "c0"), ("g", "../outside")):
        with pytest.raises(MQClientError):
            LitePullConsumer(env.broker, group, message_model=MessageModel.BROADCASTING, client_id=client_id,
                             offset_store_dir=str(offsets_dir))
    (offsets_dir / "c1" / "g").symlink_to(outside)
    consumer = LitePullConsumer(env.broker, "g", message_model=MessageModel.BROADCASTING, client_id="c1",
                                offset_store_dir=str(offsets_dir))
    with pytest.raises(MQClientError, match="outside"):
        consumer.start()
    assert list(outside.iterdir()) == []


def test_a_broadcasting_consumer_does_not_follow_a_link_out_of_the_store(env: Env, tmp_path: Path) -> None:
    # Without offset_store_dir the offsets live under <store>/broadcast_offsets: a link planted there
    # (the store's files are data, not code) must not carry them outside the store.
    outside = tmp_path / "outside"
    outside.mkdir()
    Path(env.broker.path, "broadcast_offsets").symlink_to(outside)
    consumer = LitePullConsumer(env.broker, "g", message_model=MessageModel.BROADCASTING, client_id="c1")
    with pytest.raises(MQClientError, match="outside"):
        consumer.start()
    assert list(outside.iterdir()) == []


# -- Broker methods ----------------------------------------------------------------------------------------------
Call = Callable[[Env], Any]
BROKER_CALLS: list[tuple[str, Call]] = []
for _group in ("../x", "a/b", "", 5, "g\n"):
    BROKER_CALLS += [
        (f"commit_offset group {_group!r}", lambda e, g=_group: e.broker.commit_offset(g, e.mq, 1)),
        (f"query_offset group {_group!r}", lambda e, g=_group: e.broker.query_offset(g, e.mq)),
        (f"consumer_progress group {_group!r}", lambda e, g=_group: e.broker.consumer_progress(g)),
        (f"reset_offset_by_time group {_group!r}", lambda e, g=_group: e.broker.reset_offset_by_time(g, TOPIC, 0)),
        (f"send_message_back group {_group!r}", lambda e, g=_group: e.broker.send_message_back(g, e.stored)),
        (f"pull group {_group!r}", lambda e, g=_group: e.broker.pull(g, e.mq, 0)),
        (f"trace_dispatcher group {_group!r}", lambda e, g=_group: e.broker.trace_dispatcher(g)),
        (f"end_transaction group {_group!r}", lambda e, g=_group: e.broker.end_transaction(0, True, g)),
    ]
BROKER_CALLS += [
    ("commit_offset -1", lambda e: e.broker.commit_offset("cg", e.mq, -1)),
    ("commit_offset str", lambda e: e.broker.commit_offset("cg", e.mq, "1")),
    ("commit_offset float", lambda e: e.broker.commit_offset("cg", e.mq, 1.0)),
    ("commit_offset beyond a long", lambda e: e.broker.commit_offset("cg", e.mq, 1 << 63)),
    ("commit_offset no queue", lambda e: e.broker.commit_offset("cg", "T/0", 1)),
    ("query_offset no queue", lambda e: e.broker.query_offset("cg", ("T", 0))),
    ("pull str offset", lambda e: e.broker.pull("cg", e.mq, "0")),
    ("pull no queue", lambda e: e.broker.pull("cg", None, 0)),
    ("reset_offset_by_time topic newline", lambda e: e.broker.reset_offset_by_time("cg", "T\n", 0)),
    ("reset_offset_by_time str time", lambda e: e.broker.reset_offset_by_time("cg", TOPIC, "0")),
    ("reset_offset_by_time negative time", lambda e: e.broker.reset_offset_by_time("cg", TOPIC, -5)),
    ("reset_offset_by_time unknown topic", lambda e: e.broker.reset_offset_by_time("cg", "Nope", 0)),
    ("send_message_back no message", lambda e: e.broker.send_message_back("cg", "msg")),
    ("send_message_back str level", lambda e: e.broker.send_message_back("cg", e.stored, "3")),
    ("send_message_back huge level", lambda e: e.broker.send_message_back("cg", e.stored, 1 << 40)),
    ("create_topic newline", lambda e: e.broker.create_topic("T2\n")),
    ("create_topic no queues", lambda e: e.broker.create_topic("T2", 0)),
    ("create_topic str order", lambda e: e.broker.create_topic("T2", 4, order="yes")),
    ("view_message int", lambda e: e.broker.view_message(5)),
    ("fetch_publish_queues newline", lambda e: e.broker.fetch_publish_queues("T\n")),
    ("fetch_publish_queues str count", lambda e: e.broker.fetch_publish_queues("New", "4")),
    ("put_message str queue id", lambda e: e.broker.put_message(TOPIC, "0", b"x")),
    ("put_message negative queue id", lambda e: e.broker.put_message(TOPIC, -1, b"x")),
    ("put_message queue id above int32", lambda e: e.broker.put_message(TOPIC, 1 << 40, b"x")),
    ("put_message topic newline", lambda e: e.broker.put_message("T\n", 0, b"x")),
    ("put_message int topic", lambda e: e.broker.put_message(5, 0, b"x")),
    ("put_message str body", lambda e: e.broker.put_message(TOPIC, 0, "x")),
    ("put_message flag above int32", lambda e: e.broker.put_message(TOPIC, 0, b"x", flag=1 << 40)),
    ("put_message sys_flag above int32", lambda e: e.broker.put_message(TOPIC, 0, b"x", sys_flag=1 << 40)),
    ("put_message str born time", lambda e: e.broker.put_message(TOPIC, 0, b"x", born_timestamp="1")),
    ("put_message born time beyond a long", lambda e: e.broker.put_message(TOPIC, 0, b"x", born_timestamp=1 << 70)),
    ("put_message reconsume above int32", lambda e: e.broker.put_message(TOPIC, 0, b"x", reconsume_times=1 << 40)),
    ("put_message int property", lambda e: e.broker.put_message(TOPIC, 0, b"x", {"a": 1})),
    ("put_message property separator", lambda e: e.broker.put_message(TOPIC, 0, b"x", {"a": "\x01"})),
    ("put_messages str bodies", lambda e: e.broker.put_messages(TOPIC, 0, ["x"], [None])),
    ("put_messages no batch", lambda e: e.broker.put_messages(TOPIC, 0, 5, 5)),
    ("put_messages flag above int32", lambda e: e.broker.put_messages(TOPIC, 0, [b"x"], [None], flags=[1 << 40])),
    ("put_messages negative queue id", lambda e: e.broker.put_messages(TOPIC, -1, [b"x"], [None])),
    ("query_message str count", lambda e: e.broker.query_message(TOPIC, "k", "5")),
    ("query_message_by_offset str queue", lambda e: e.broker.query_message_by_offset(TOPIC, "0", 0)),
    ("search_offset str time", lambda e: e.broker.search_offset(e.mq, "x")),
    ("min_offset no queue", lambda e: e.broker.min_offset("T/0")),
    ("max_offset no queue", lambda e: e.broker.max_offset(None)),
    ("offset_for_new_group no queue", lambda e: e.broker.offset_for_new_group("T/0")),
    ("pull str wait", lambda e: e.broker.pull("cg", e.mq, 0, 5, None, "1")),
    ("pull nan wait", lambda e: e.broker.pull("cg", e.mq, 0, 5, None, math.nan)),
    ("pull no filter", lambda e: e.broker.pull("cg", e.mq, 0, 5, 5)),
    ("wait_idle str timeout", lambda e: e.broker.wait_idle(timeout="1")),
    ("send_async callback not callable", lambda e: e.producer.send_async(Message(TOPIC, b"x"), callback=5)),
    ("send selector not callable", lambda e: e.producer.send(Message(TOPIC, b"x"), selector=5)),  # raw TypeError
    ("send_oneway selector not callable", lambda e: e.producer.send_oneway(Message(TOPIC, b"x"), selector="q")),
    ("add_send_hook not callable", lambda e: Producer(e.broker, "pgh").add_send_hook(5)),
    ("open with no clock", lambda e: mqlite.open(e.broker.path + "-clock", clock=5)),
    ("MessageStore of no path", lambda e: mqlite.MessageStore(5)),
    # A topic of the wrong type (a list is unhashable) was a raw TypeError from a dict look-up.
    ("create_topic list topic", lambda e: e.broker.create_topic([TOPIC])),
    ("delete_topic list topic", lambda e: e.broker.delete_topic([TOPIC])),
    ("fetch_subscribe_queues list topic", lambda e: e.broker.fetch_subscribe_queues([TOPIC])),
    ("topic_status list topic", lambda e: e.broker.topic_status([TOPIC])),
    ("query_message_by_offset list topic", lambda e: e.broker.query_message_by_offset([TOPIC], 0, 0)),
]


@pytest.mark.parametrize("call", [c for _, c in BROKER_CALLS], ids=[i for i, _ in BROKER_CALLS])
def test_broker_methods_refuse_bad_arguments(env: Env, call: Call) -> None:
    refused(env, MQClientError, lambda: call(env))


# -- LitePullConsumer methods -----------------------------------------------------------------------------------
def _other(env: Env, topic: str = TOPIC, queue_id: int = 0, broker_name: str | None = None) -> MessageQueue:
    return MessageQueue(topic, broker_name or env.mq.broker_name, queue_id)


LITE_CALLS: list[tuple[str, Call]] = [
    ("commit_sync negative", lambda e: e.consumer.commit_sync({e.mq: -2})),
    ("commit_sync str", lambda e: e.consumer.commit_sync({e.mq: "1"})),
    ("commit_sync float", lambda e: e.consumer.commit_sync({e.mq: 1.0})),
    ("commit_sync beyond the queue", lambda e: e.consumer.commit_sync({e.mq: e.broker.max_offset(e.mq) + 1})),
    ("commit_sync unknown topic", lambda e: e.consumer.commit_sync({_other(e, "Nope"): 0})),
    ("commit_sync unknown queue id", lambda e: e.consumer.commit_sync({_other(e, queue_id=99): 0})),
    ("commit_sync other broker", lambda e: e.consumer.commit_sync({_other(e, broker_name="other"): 0})),
    ("commit_sync not a queue", lambda e: e.consumer.commit_sync({"T/0": 0})),
    ("commit_sync not a map", lambda e: e.consumer.commit_sync([(e.mq, 1)])),
    ("commit_sync one bad entry", lambda e: e.consumer.commit_sync({e.mq: 2, _other(e, "Nope"): 0})),
    ("poll negative", lambda e: e.consumer.poll(-1)),
    ("poll nan", lambda e: e.consumer.poll(math.nan)),
    ("poll str", lambda e: e.consumer.poll("1")),
    ("pause int", lambda e: e.consumer.pause(5)),
    ("pause ints", lambda e: e.consumer.pause([1])),
    ("resume None", lambda e: e.consumer.resume(None)),
    ("assign int", lambda e: e.consumer.assign(5)),
    ("assign ints", lambda e: e.consumer.assign([1])),
    ("seek str", lambda e: e.consumer.seek(e.mq, "0")),
    ("seek list queue", lambda e: e.consumer.seek([TOPIC], 0)),  # was a raw TypeError (unhashable)
    ("seek beyond", lambda e: e.consumer.seek(e.mq, e.broker.max_offset(e.mq) + 1)),
    ("offset_for_timestamp str", lambda e: e.consumer.offset_for_timestamp(e.mq, "0")),
]


@pytest.mark.parametrize("call", [c for _, c in LITE_CALLS], ids=[i for i, _ in LITE_CALLS])
def test_lite_pull_consumer_methods_refuse_bad_arguments(env: Env, call: Call) -> None:
    committed, assignment = env.consumer.committed(env.mq), env.consumer.assignment()
    refused(env, MQClientError, lambda: call(env))
    assert (env.consumer.committed(env.mq), env.consumer.assignment()) == (committed, assignment)


# -- settings and open() ---------------------------------------------------------------------------------------
CONFIG_VALUES: list[dict[str, Any]] = [
    {"commitlog_file_size": 1 << 31}, {"commitlog_file_size": 100}, {"commitlog_file_size": "1g"},
    {"consumequeue_file_size": 0}, {"consumequeue_file_size": 1 << 31}, {"max_message_size": 0},
    {"max_message_size": 1 << 31}, {"disk_max_used_space_ratio": 0}, {"disk_max_used_space_ratio": 101},
    {"disk_space_warning_level_ratio": 0}, {"disk_space_warning_level_ratio": 1.5},
    {"disk_space_warning_level_ratio": math.nan}, {"disk_space_clean_forcibly_ratio": -0.1},
    {"sync_flush_timeout": math.nan}, {"sync_flush_timeout": math.inf}, {"sync_flush_timeout": 0},
    {"flush_consumer_offset_interval": 0}, {"flush_commitlog_thorough_interval": -1},
    {"file_reserved_time": math.nan}, {"file_reserved_time": -1}, {"max_hash_slot_num": 1 << 31},
    {"max_index_num": 1}, {"max_hash_slot_num": 1 << 28, "max_index_num": 1 << 27},
    {"flush_commitlog_least_pages": -1}, {"delete_file_batch_max": 0}, {"default_topic_queue_nums": 1025},
    {"transaction_check_max": True}, {"message_delay_level": "1x"}, {"delete_when": "25"},
    {"flush_disk_type": "SYNC"}, {"commit_log_size": 1 << 20},
]


@pytest.mark.parametrize("settings", CONFIG_VALUES)
def test_settings_out_of_range_are_refused(tmp_path: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        StoreConfig.from_kwargs(settings)
    with pytest.raises(ConfigError):
        mqlite.open(str(tmp_path / "new"), **settings)
    assert not (tmp_path / "new").exists()  # a refused open leaves nothing behind


@pytest.mark.parametrize("read_only", [False, True])
def test_open_refuses_a_path_that_is_a_file(tmp_path: Path, read_only: bool) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    for path in (file, file / "store"):
        with pytest.raises(MQClientError, match="file"):
            mqlite.open(str(path), read_only=read_only)
    assert file.read_text() == "x"


@pytest.mark.parametrize("path", [5, None, b"/tmp/x", ""])
def test_open_refuses_what_is_no_path(path: Any) -> None:
    with pytest.raises(MQClientError, match="path"):
        mqlite.open(path)


def test_clients_given_a_file_path_refuse_at_start(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    producer = Producer(str(file), "pg")
    with pytest.raises(MQClientError, match="file"):
        producer.start()

    async def open_it() -> None:
        async with mqlite.aio.open(file):
            raise AssertionError("opened a file")

    with pytest.raises(MQClientError, match="file"):
        asyncio.run(open_it())


def test_a_stored_setting_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    root = tmp_path / "s"
    mqlite.open(str(root), **SMALL).close()
    path = root / "config" / "store.json"
    path.write_text(path.read_text().replace('"max_message_size": 4194304', '"max_message_size": "big"'))
    (root / "config" / "store.json.bak").unlink(missing_ok=True)
    with pytest.raises(mqlite.StoreCorruptedError, match="store.json is damaged.*max_message_size"):
        mqlite.open(str(root))


def test_huge_delay_level_is_clamped_like_rocketmq(env: Env) -> None:
    """Within a Java int, a level above the highest is delivered at the highest (RocketMQ's rule)."""
    result = env.producer.send(Message(TOPIC, b"later", delay_time_level=INT32_MAX))
    assert result.send_status is mqlite.SendStatus.SEND_OK
    assert os.path.isdir(os.path.join(env.broker.path, "consumequeue", "SCHEDULE_TOPIC_XXXX", "17"))


@pytest.mark.parametrize("timeout", ["1", math.nan, -1, math.inf])
def test_push_consumer_join_refuses_bad_timeouts(env: Env, timeout: Any) -> None:
    consumer = PushConsumer(env.broker, "pj", listener=lambda msgs, ctx: None)
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        with pytest.raises(MQClientError, match="timeout"):
            consumer.join(timeout)
    finally:
        consumer.shutdown()


def test_is_paused_of_what_is_no_queue_is_false(env: Env) -> None:
    assert env.consumer.is_paused([1]) is False  # type: ignore[arg-type]


def test_topics_json_from_a_rocketmq_broker_keeps_its_host_named_topic(tmp_path: Path) -> None:
    # A RocketMQ broker's table holds topics named after the broker or its host (dots included),
    # which a client may not create; loading them must not drop them as damage. A name that is a
    # path is still dropped (topics name directories).
    config = tmp_path / "config"
    config.mkdir()

    table = {"rmq-broker-0.rmq.default.svc": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                                              "topicName": "rmq-broker-0.rmq.default.svc"},
             "../escape": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6, "topicName": "../escape"}}
    (config / "topics.json").write_text(json.dumps({"topicConfigTable": table, "dataVersion": {"counter": 1}}))
    topics = TopicTable(str(tmp_path))
    assert topics.get("rmq-broker-0.rmq.default.svc") is not None
    assert topics.get("../escape") is None
