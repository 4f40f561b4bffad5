"""Queue allocation strategies: RocketMQ's own tests, the reference tables, and properties.

RocketMQ's tests live in client/src/test/java/org/apache/rocketmq/client/consumer/rebalance/;
each section below says which one it follows. Exact expected shares come from
rocketmq-formats.md section 9 and were produced by the Java code.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqlite.errors import MQClientError
from mqlite.message import MessageQueue
from mqlite.rebalance import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    MachineRoomResolver,
    allocate,
    md5_hash,
)


# -- helpers -------------------------------------------------------------------------------
def queues(n: int, topic: str = "topic", broker: str = "brokerName") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, q) for q in range(n)]


def cids(n: int, prefix: str = "CID_PREFIX") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def shares(strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue],
           cid_all: Sequence[str]) -> dict[str, list[MessageQueue]]:
    """What every consumer of the group gets, in cid_all order."""
    return {cid: strategy.allocate("group", cid, mq_all, cid_all) for cid in cid_all}


def ids(share: list[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in share]


def owner_map(strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue],
              cid_all: Sequence[str]) -> dict[MessageQueue, str]:
    """Queue -> its consumer; fails if any queue is given out twice."""
    owner: dict[MessageQueue, str] = {}
    for cid, share in shares(strategy, mq_all, cid_all).items():
        for mq in share:
            assert mq not in owner, f"{mq} given to both {owner[mq]} and {cid}"
            owner[mq] = cid
    return owner


def assert_partition(strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue],
                     cid_all: Sequence[str]) -> None:
    """Shares are pairwise disjoint and together cover every queue exactly once."""
    every = [mq for share in shares(strategy, mq_all, cid_all).values() for mq in share]
    assert len(every) == len(set(every)), "a queue was given to two consumers"
    assert set(every) == set(mq_all), "some queue was given to nobody"


class SplitResolver:
    """AllocateMachineRoomNearByTest's resolver: the room is the text before the first '-'."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split("-")[0]


CHECKED = [
    AllocateMessageQueueAveragely(),
    AllocateMessageQueueAveragelyByCircle(),
    AllocateMessageQueueConsistentHash(),
    AllocateMessageQueueByMachineRoom({"room1"}),
    AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), SplitResolver()),
]
CHECKED_IDS = [s.name for s in CHECKED]


# -- names and the shared argument check ---------------------------------------------------
def test_names_are_rocketmqs() -> None:
    assert [s.name for s in CHECKED] == [
        "AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "MACHINE_ROOM", "MACHINE_ROOM_NEARBY-AVG",
    ]
    assert AllocateMessageQueueByConfig([]).name == "CONFIG"
    nearby_hash = AllocateMachineRoomNearby(AllocateMessageQueueConsistentHash(), SplitResolver())
    assert nearby_hash.name == "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"


def test_the_base_class_is_abstract() -> None:
    with pytest.raises(TypeError):
        AllocateMessageQueueStrategy()  # type: ignore[abstract]


@pytest.mark.parametrize("strategy", CHECKED, ids=CHECKED_IDS)
@pytest.mark.parametrize(("current", "mq_all", "cid_all", "named"), [
    ("", queues(6), cids(2), "current_cid"),
    ("CID_PREFIX0", [], cids(2), "mq_all"),
    ("CID_PREFIX0", None, cids(2), "mq_all"),
    ("CID_PREFIX0", queues(6), [], "cid_all"),
    ("CID_PREFIX0", queues(6), None, "cid_all"),
])
def test_empty_arguments_are_refused_by_name(strategy: AllocateMessageQueueStrategy, current: str,
                                             mq_all: list[MessageQueue], cid_all: list[str], named: str) -> None:
    with pytest.raises(MQClientError, match=rf"^{named} is empty; "):
        strategy.allocate("group", current, mq_all, cid_all)


@pytest.mark.parametrize("strategy", CHECKED, ids=CHECKED_IDS)
def test_a_consumer_missing_from_the_group_gets_nothing(strategy: AllocateMessageQueueStrategy) -> None:
    # RocketMQ's tests use String.valueOf(Integer.MAX_VALUE) and the bare prefix.
    for stranger in ("2147483647", "CID_PREFIX"):
        assert strategy.allocate("group", stranger, queues(6, broker="room1@b"), cids(2)) == []


def test_client_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        AllocateMessageQueueAveragely().allocate("group", "", queues(1), cids(1))


# -- AVG (AllocateMessageQueueAveragelyTest) -----------------------------------------------
def test_averagely_rocketmq_sizes() -> None:
    got = shares(AllocateMessageQueueAveragely(), queues(10), cids(4))
    assert [len(share) for share in got.values()] == [3, 3, 2, 2]


@pytest.mark.parametrize(("n_mq", "n_cid", "expected"), [
    (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (3, 5, [[0], [1], [2], [], []]),
    (5, 2, [[0, 1, 2], [3, 4]]),
    (4, 4, [[0], [1], [2], [3]]),
    (1, 1, [[0]]),
])
def test_averagely_reference_table(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    got = shares(AllocateMessageQueueAveragely(), queues(n_mq), cids(n_cid))
    assert [ids(share) for share in got.values()] == expected


# -- AVG_BY_CIRCLE (AllocateMessageQueueAveragelyByCircleTest) ----------------------------
@pytest.mark.parametrize(("n_mq", "n_cid", "expected"), [
    (10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
    (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (3, 5, [[0], [1], [2], [], []]),
])
def test_by_circle_reference_table(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    got = shares(AllocateMessageQueueAveragelyByCircle(), queues(n_mq), cids(n_cid))
    assert [ids(share) for share in got.values()] == expected


# -- CONSISTENT_HASH (AllocateMessageQueueConsitentHashTest) ------------------------------
def test_md5_ring_hash_is_the_first_four_digest_bytes_unsigned() -> None:
    assert md5_hash("") == 0xD41D8CD9  # MD5("") = d41d8cd98f00b204e9800998ecf8427e
    assert md5_hash("abc") == 0x90015098  # MD5("abc") = 900150983cd24fb0...; high bit set, still positive
    assert md5_hash("é") == 0x66DDCD97  # hashed as UTF-8 (c3 a9); Latin-1 would give 0x34068776


@pytest.mark.parametrize(("vn", "topic", "broker", "n_mq", "cid_all", "expected"), [
    (10, "topic_test", "brokerName", 6, ["CID-0", "CID-1"], [[1, 3, 4, 5], [0, 2]]),
    (3, "topic_test", "brokerName", 6, ["CID-0", "CID-1"], [[0, 3, 5], [1, 2, 4]]),
    (10, "TopicTest", "broker-a", 8, ["c1", "c2", "c3"], [[0, 4, 5, 7], [1, 6], [2, 3]]),
])
def test_consistent_hash_reference_table(vn: int, topic: str, broker: str, n_mq: int,
                                         cid_all: list[str], expected: list[list[int]]) -> None:
    got = shares(AllocateMessageQueueConsistentHash(vn), queues(n_mq, topic, broker), cid_all)
    assert [ids(share) for share in got.values()] == expected


def test_consistent_hash_default_is_ten_virtual_nodes() -> None:
    assert AllocateMessageQueueConsistentHash().virtual_node_cnt == 10


def test_consistent_hash_refuses_a_negative_virtual_node_count() -> None:
    with pytest.raises(MQClientError, match="virtual_node_cnt is -1"):
        AllocateMessageQueueConsistentHash(-1)


def test_consistent_hash_with_no_virtual_nodes_gives_nothing_to_anyone() -> None:
    got = shares(AllocateMessageQueueConsistentHash(0), queues(4), cids(2))
    assert got == {"CID_PREFIX0": [], "CID_PREFIX1": []}


def test_consistent_hash_later_colliding_point_wins() -> None:
    # Every point lands on 0, so the ring keeps one point: the last consumer added.
    strategy = AllocateMessageQueueConsistentHash(3, hash_function=lambda key: 0)
    got = shares(strategy, queues(4), ["a", "b", "c"])
    assert [ids(share) for share in got.values()] == [[], [], [0, 1, 2, 3]]


def test_consistent_hash_uses_a_custom_hash_for_points_and_queues() -> None:
    seen: list[str] = []

    def spy(key: str) -> int:
        seen.append(key)
        return md5_hash(key)

    strategy = AllocateMessageQueueConsistentHash(2, hash_function=spy)
    strategy.allocate("group", "x", queues(1, "T", "B"), ["x", "y"])
    assert seen == ["x-0", "x-1", "y-0", "y-1", "MessageQueue [topic=T, brokerName=B, queueId=0]"]


def test_consistent_hash_wraps_past_the_last_point() -> None:
    points = {"a-0": 100, "b-0": 200}
    strategy = AllocateMessageQueueConsistentHash(1, hash_function=lambda key: points.get(key, 10**6))
    # Every queue hashes beyond both points, so it wraps to the first one, a's.
    assert ids(strategy.allocate("group", "a", queues(3), ["a", "b"])) == [0, 1, 2]


def _check_join_and_leave(strategy: AllocateMessageQueueStrategy, n_mq: int, n_cid: int) -> None:
    """RocketMQ's testAllocate: full cover, then remove the first consumer, then add CID-NEW."""
    mq_all = queues(n_mq, "topic_test")
    group = cids(n_cid, "CID-")
    before = owner_map(strategy, mq_all, group)
    assert set(before) == set(mq_all)

    leaver, rest = group[0], group[1:]
    after_leave = owner_map(strategy, mq_all, rest)
    assert set(after_leave) == set(mq_all) or not rest
    for mq, cid in before.items():
        if cid != leaver:
            assert after_leave[mq] == cid, f"{mq} moved from {cid} though only {leaver} left"

    joined = rest + ["CID-NEW"]
    after_join = owner_map(strategy, mq_all, joined)
    assert set(after_join) == set(mq_all)
    for mq, cid in after_join.items():
        if cid != "CID-NEW":
            assert after_leave[mq] == cid, f"{mq} moved to {cid} though only CID-NEW joined"


@pytest.mark.parametrize(("n_mq", "n_cid"), [(20, 10), (10, 20)])
def test_consistent_hash_rocketmq_join_and_leave(n_mq: int, n_cid: int) -> None:
    _check_join_and_leave(AllocateMessageQueueConsistentHash(3), n_mq, n_cid)


# -- CONFIG (AllocateMessageQueueByConfigTest) ---------------------------------------------
def test_by_config_gives_everyone_the_configured_queues() -> None:
    mq_all = queues(4)
    strategy = AllocateMessageQueueByConfig(mq_all)
    got = shares(strategy, mq_all, cids(2))
    assert [ids(share) for share in got.values()] == [[0, 1, 2, 3], [0, 1, 2, 3]]


def test_by_config_checks_nothing_and_returns_a_fresh_list() -> None:
    configured = queues(2, "other")
    strategy = AllocateMessageQueueByConfig(iter(configured))
    share = strategy.allocate("", "", [], [])  # no check, unlike every other strategy
    assert share == configured
    assert strategy.allocate("group", "stranger", queues(5), cids(2)) == configured
    share.clear()
    configured.clear()
    assert ids(strategy.allocate("group", "c", queues(1), ["c"])) == [0, 1]


# -- MACHINE_ROOM (AllocateMessageQueueByMachineRoomTest) ----------------------------------
def _two_rooms(n: int) -> list[MessageQueue]:
    """The first half on room1@broker-a, the rest on room2@broker-b, ids running on."""
    return [MessageQueue("topic", "room1@broker-a" if q < n // 2 else "room2@broker-b", q) for q in range(n)]


def test_by_machine_room_rocketmq_example() -> None:
    got = shares(AllocateMessageQueueByMachineRoom({"room1"}), _two_rooms(10), cids(2))
    assert got.keys() == {"CID_PREFIX0", "CID_PREFIX1"}
    assert [ids(share) for share in got.values()] == [[0, 1, 4], [2, 3]]


def test_by_machine_room_refuses_empty_queues_with_rocketmqs_reason() -> None:
    with pytest.raises(MQClientError, match="mq_all is empty"):
        AllocateMessageQueueByMachineRoom({"room1"}).allocate("", "CID_PREFIX0", [], cids(2))


def test_by_machine_room_takes_any_iterable_of_rooms_but_not_a_bare_string() -> None:
    both = AllocateMessageQueueByMachineRoom(room for room in ["room1", "room2"])
    got = shares(both, _two_rooms(10), cids(3))
    assert [ids(share) for share in got.values()] == [[0, 1, 2, 9], [3, 4, 5], [6, 7, 8]]
    with pytest.raises(MQClientError, match="pass a collection of rooms"):
        AllocateMessageQueueByMachineRoom("room1")


@pytest.mark.parametrize(("broker", "kept"), [
    ("room1@broker", True),
    ("room1@broker@", True),   # Java's split drops trailing empty parts: ["room1", "broker"]
    ("room1@broker@@", True),
    ("room1@", False),         # ["room1"]
    ("room1", False),
    ("room1@a@b", False),      # three parts
    ("room2@broker", False),   # not one of the rooms
    ("@broker", False),        # ["", "broker"]: room "" is not configured
])
def test_by_machine_room_splits_broker_names_like_java(broker: str, kept: bool) -> None:
    mq = MessageQueue("topic", broker, 0)
    got = AllocateMessageQueueByMachineRoom({"room1"}).allocate("group", "c", [mq], ["c"])
    assert got == ([mq] if kept else [])


def test_by_machine_room_with_no_queue_in_its_rooms_gives_nothing() -> None:
    got = shares(AllocateMessageQueueByMachineRoom({"room9"}), _two_rooms(10), cids(2))
    assert list(got.values()) == [[], []]


# -- MACHINE_ROOM_NEARBY (AllocateMachineRoomNearByTest) -----------------------------------
NEARBY = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), SplitResolver())
RESOLVER = SplitResolver()


def _idc_queues(n_rooms: int, per_room: int) -> list[MessageQueue]:
    return [MessageQueue("topic_test", f"IDC{r}-brokerName", q)
            for r in range(1, n_rooms + 1) for q in range(per_room)]


def _idc_consumers(n_rooms: int, per_room: int) -> list[str]:
    return [f"IDC{r}-CID-{i}" for r in range(1, n_rooms + 1) for i in range(per_room)]


def _allocated_exactly_once(mq_all: list[MessageQueue], got: dict[str, list[MessageQueue]]) -> None:
    every = [mq for share in got.values() for mq in share]
    if got:
        assert sorted(every) == sorted(mq_all)


def when_rooms_match(rooms: int, per_room_mq: int, per_room_cid: int) -> None:
    """Every room has consumers: each consumer only reads its own room's queues."""
    mq_all, cid_all = _idc_queues(rooms, per_room_mq), _idc_consumers(rooms, per_room_cid)
    got = shares(NEARBY, mq_all, cid_all)
    for cid, share in got.items():
        assert all(RESOLVER.broker_deploy_in(mq) == RESOLVER.consumer_deploy_in(cid) for mq in share)
    _allocated_exactly_once(mq_all, got)


def when_consumer_rooms_are_more(rooms: int, extra: int, per_room_mq: int, per_room_cid: int) -> None:
    """Some consumer rooms have no broker: brokers' rooms still keep their queues local."""
    mq_all, cid_all = _idc_queues(rooms, per_room_mq), _idc_consumers(rooms + extra, per_room_cid)
    broker_rooms = {RESOLVER.broker_deploy_in(mq) for mq in mq_all}
    got = shares(NEARBY, mq_all, cid_all)
    for cid, share in got.items():
        for mq in share:
            if RESOLVER.broker_deploy_in(mq) in broker_rooms:
                assert RESOLVER.broker_deploy_in(mq) == RESOLVER.consumer_deploy_in(cid)
    _allocated_exactly_once(mq_all, got)


def when_consumer_rooms_are_fewer(rooms: int, missing: int, per_room_mq: int, per_room_cid: int) -> None:
    """Some broker rooms have no consumer: their queues are shared by everyone."""
    mq_all, cid_all = _idc_queues(rooms, per_room_mq), _idc_consumers(rooms - missing, per_room_cid)
    got = shares(NEARBY, mq_all, cid_all)
    by_room: dict[str, list[MessageQueue]] = {}
    for cid, share in got.items():
        by_room.setdefault(RESOLVER.consumer_deploy_in(cid), []).extend(share)
    for room, share in by_room.items():
        local = [mq for mq in mq_all if RESOLVER.broker_deploy_in(mq) == room]
        assert set(local) <= set(share)
    _allocated_exactly_once(mq_all, got)


@pytest.mark.parametrize("per_room_cid", [10, 20, 30, 0])
def test_nearby_rocketmq_test1_rooms_match(per_room_cid: int) -> None:
    when_rooms_match(5, 20, per_room_cid)


@pytest.mark.parametrize("per_room_cid", [10, 5, 20, 0])
def test_nearby_rocketmq_test2_more_consumer_rooms(per_room_cid: int) -> None:
    when_consumer_rooms_are_more(5, 1, 10, per_room_cid)


@pytest.mark.parametrize("per_room_cid", [10, 5, 20, 0])
def test_nearby_rocketmq_test3_fewer_consumer_rooms(per_room_cid: int) -> None:
    when_consumer_rooms_are_fewer(5, 2, 10, per_room_cid)


def test_nearby_rocketmq_random_cases() -> None:
    rng = random.Random(20240501)  # fixed seed: the same cases on every run
    for _ in range(10):
        per_room_cid, per_room_mq = rng.randint(1, 20), rng.randint(1, 20)
        broker_rooms, consumer_rooms = rng.randint(1, 10), rng.randint(1, 10)
        if broker_rooms == consumer_rooms:
            when_rooms_match(broker_rooms, per_room_mq, per_room_cid)
        elif broker_rooms > consumer_rooms:
            when_consumer_rooms_are_fewer(broker_rooms, broker_rooms - consumer_rooms, per_room_mq, per_room_cid)
        else:
            when_consumer_rooms_are_more(broker_rooms, consumer_rooms - broker_rooms, per_room_mq, per_room_cid)


def test_nearby_exact_shares_own_room_first_then_orphan_rooms_in_room_order() -> None:
    # Rooms A and C have consumers; room B has only a broker, so A-1 and C-1 split its queues.
    mq_all = [MessageQueue("t", f"{room}-b", q) for room in ("C", "A", "B") for q in range(2)]
    got = shares(NEARBY, mq_all, ["A-1", "C-1"])
    assert [(mq.broker_name, mq.queue_id) for mq in got["A-1"]] == [("A-b", 0), ("A-b", 1), ("B-b", 0)]
    assert [(mq.broker_name, mq.queue_id) for mq in got["C-1"]] == [("C-b", 0), ("C-b", 1), ("B-b", 1)]


def test_nearby_refuses_missing_strategy_or_resolver() -> None:
    with pytest.raises(MQClientError, match="strategy is None"):
        AllocateMachineRoomNearby(None, SplitResolver())  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="strategy is a str"):
        AllocateMachineRoomNearby("AVG", SplitResolver())  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="resolver is None"):
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), None)  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="broker_deploy_in"):
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), object())  # type: ignore[arg-type]


def test_resolver_protocol_is_structural() -> None:
    assert isinstance(SplitResolver(), MachineRoomResolver)


@pytest.mark.parametrize(("broker", "consumer", "named"), [
    ("-b", "A-1", "queue MessageQueue"),
    ("A-b", "-1", "consumer -1"),
])
def test_nearby_refuses_an_empty_room(broker: str, consumer: str, named: str) -> None:
    with pytest.raises(MQClientError, match=f"machine room is empty for {named}"):
        NEARBY.allocate("group", consumer, [MessageQueue("t", broker, 0)], [consumer])


# -- the allocate() helper ------------------------------------------------------------------
def test_allocate_helper_sorts_queues_and_consumers_first() -> None:
    mq_all = [MessageQueue(t, b, q) for t in ("T2", "T1") for b in ("b", "a") for q in (1, 0)]
    group = ["c", "a", "b"]
    shuffled = list(mq_all)
    random.Random(7).shuffle(shuffled)
    for cid in group:
        assert allocate(AllocateMessageQueueAveragely(), "g", cid, shuffled, reversed(group)) == \
            AllocateMessageQueueAveragely().allocate("g", cid, sorted(mq_all), sorted(group))
    first = allocate(AllocateMessageQueueAveragely(), "g", "a", shuffled, group)
    assert [(mq.topic, mq.broker_name, mq.queue_id) for mq in first] == [("T1", "a", 0), ("T1", "a", 1), ("T1", "b", 0)]


def test_allocate_helper_passes_errors_through() -> None:
    with pytest.raises(MQClientError, match="cid_all is empty"):
        allocate(AllocateMessageQueueAveragely(), "g", "a", queues(2), [])


# -- properties -----------------------------------------------------------------------------
PARTITIONING = [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(),
                AllocateMessageQueueConsistentHash(), AllocateMessageQueueConsistentHash(3)]

queue_sets = st.sets(st.builds(MessageQueue, st.sampled_from(["t1", "t2"]), st.sampled_from(["a", "b@x"]),
                               st.integers(0, 15)), min_size=1, max_size=24)
client_sets = st.sets(st.text(alphabet="abcXYZ-@09.é", min_size=1, max_size=8), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(mq_set=queue_sets, cid_set=client_sets, which=st.sampled_from(range(len(PARTITIONING))))
def test_shares_partition_the_queues(mq_set: set[MessageQueue], cid_set: set[str], which: int) -> None:
    assert_partition(PARTITIONING[which], sorted(mq_set), sorted(cid_set))


@settings(max_examples=40, deadline=None)
@given(mq_set=queue_sets, cid_set=client_sets, which=st.sampled_from([0, 1]))
def test_even_strategies_differ_by_at_most_one_queue(mq_set: set[MessageQueue], cid_set: set[str],
                                                     which: int) -> None:
    sizes = [len(s) for s in shares(PARTITIONING[which], sorted(mq_set), sorted(cid_set)).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(mq_set=queue_sets, cid_set=client_sets, data=st.data())
def test_consistent_hash_moves_only_the_leaver_or_joiner_queues(mq_set: set[MessageQueue], cid_set: set[str],
                                                                data: st.DataObject) -> None:
    strategy = AllocateMessageQueueConsistentHash(data.draw(st.integers(1, 10), label="vn"))
    mq_all, group = sorted(mq_set), sorted(cid_set)
    before = owner_map(strategy, mq_all, group)
    leaver = data.draw(st.sampled_from(group), label="leaver")
    rest = [cid for cid in group if cid != leaver]
    if rest:
        after = owner_map(strategy, mq_all, rest)
        assert set(after) == set(mq_all)
        # Read forwards this is "a leaver moves only its own queues"; read backwards
        # (from `rest` to `group`) it is "a joiner takes queues and moves nothing else".
        for mq, cid in before.items():
            if cid != leaver:
                assert after[mq] == cid


@settings(max_examples=40, deadline=None)
@given(n_mq=st.integers(1, 20), n_cid=st.integers(1, 20))
def test_consistent_hash_rocketmq_random_join_and_leave(n_mq: int, n_cid: int) -> None:
    _check_join_and_leave(AllocateMessageQueueConsistentHash(3), n_mq, n_cid)


@settings(max_examples=40, deadline=None)
@given(rooms=st.lists(st.sampled_from("ABCD"), min_size=1, max_size=12),
       consumer_rooms=st.sets(st.sampled_from("ABCDE"), min_size=1), per_room=st.integers(1, 3))
def test_nearby_partitions_and_keeps_attended_rooms_local(rooms: list[str], consumer_rooms: set[str],
                                                          per_room: int) -> None:
    mq_all = sorted(MessageQueue("t", f"{room}-b", q) for q, room in enumerate(rooms))
    cid_all = sorted(f"{room}-{i}" for room in consumer_rooms for i in range(per_room))
    assert_partition(NEARBY, mq_all, cid_all)
    for cid, share in shares(NEARBY, mq_all, cid_all).items():
        for mq in share:
            if RESOLVER.broker_deploy_in(mq) in consumer_rooms:
                assert RESOLVER.broker_deploy_in(mq) == RESOLVER.consumer_deploy_in(cid)
