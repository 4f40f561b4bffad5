"""Queue allocation strategies: which consumer of a group reads which queues.

A port of RocketMQ's ``AllocateMessageQueueStrategy`` family, giving the same
answer for the same input, so a mqlite consumer and a Java consumer agree on who
owns a queue. Every consumer of a group runs the same pure function over the same
view (all queues of the topic, all client ids of the group) and keeps only its own
share; no coordination is needed as long as the views agree.

Consumer *k* of *c* gets, by strategy (``name`` in brackets):

* ``AllocateMessageQueueAveragely`` (``AVG``, RocketMQ's default): one contiguous
  block; the first ``len(mq_all) % c`` blocks are one queue longer.
* ``AllocateMessageQueueAveragelyByCircle`` (``AVG_BY_CIRCLE``): queues k, k + c, ...
* ``AllocateMessageQueueConsistentHash`` (``CONSISTENT_HASH``): the queues whose hash
  lands on k's arcs of an MD5 ring; a join or leave moves only that consumer's queues.
* ``AllocateMessageQueueByConfig`` (``CONFIG``): a fixed list, the same for everyone.
* ``AllocateMessageQueueByMachineRoom`` (``MACHINE_ROOM``): blocks of the queues whose
  broker is named ``<room>@<name>`` for one of the given rooms.
* ``AllocateMachineRoomNearby`` (``MACHINE_ROOM_NEARBY-<inner name>``): an inner
  strategy run per machine room, local queues first.

The strategies do not sort their input, exactly like RocketMQ's: the rebalance loop
sorts ``mq_all`` (``MessageQueue`` orders by topic, broker name, queue id) and
``cid_all`` (string order) first. Call :func:`allocate` to get that for free.

>>> from mqlite.message import MessageQueue
>>> mqs = [MessageQueue("orders", "broker-a", q) for q in range(5)]
>>> [mq.queue_id for mq in allocate(AllocateMessageQueueAveragely(), "g", "c1", mqs, ["c2", "c1"])]
[0, 1, 2]

Everything here is pure computation: no I/O, no locks, safe from any thread.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from mqlite.errors import MQClientError
from mqlite.message import MessageQueue

__all__ = [
    "AllocateMessageQueueStrategy",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMachineRoomNearby",
    "MachineRoomResolver",
    "HashFunction",
    "md5_hash",
    "allocate",
]

log = logging.getLogger("mqlite")

#: A ring hash: key -> integer position. RocketMQ's ``HashFunction`` returns a Java long.
HashFunction = Callable[[str], int]


class AllocateMessageQueueStrategy(ABC):
    """Decides which queues of a topic one consumer of a group should read.

    Subclasses implement :meth:`allocate` and :attr:`name`. Implementations must be
    deterministic functions of their arguments: every consumer of the group runs the
    same strategy independently and the shares only fit together if they agree.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """RocketMQ's name for the strategy, e.g. ``"AVG"``."""

    @abstractmethod
    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return the queues `current_cid` should consume, as a new list.

        `mq_all` and `cid_all` must already be sorted (see :func:`allocate`); the
        order of the result follows `mq_all`. `consumer_group` is only used in log
        messages. Raises :class:`~mqlite.errors.MQClientError` when `current_cid`,
        `mq_all` or `cid_all` is empty (all but ``CONFIG``, which checks nothing).
        """

    def check(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> bool:
        """Validate the arguments of :meth:`allocate`; False if `current_cid` is not in the group.

        Empty arguments are caller bugs and raise :class:`~mqlite.errors.MQClientError`.
        A consumer missing from `cid_all` is normal for a moment (it registered after
        the group view was taken), so it is a status, not an error: the caller
        should allocate nothing this round. Cost: O(len(cid_all)).
        """
        if not current_cid:
            raise MQClientError(
                "current_cid is empty; pass the client id of the consumer being rebalanced"
            )
        if not mq_all:
            raise MQClientError(
                "mq_all is empty; pass every queue of the topic (create the topic or wait for its route)"
            )
        if not cid_all:
            raise MQClientError(
                "cid_all is empty; pass the client ids of every consumer in the group, including current_cid"
            )
        if current_cid not in cid_all:
            log.info(
                "consumer group %s: consumer id %s is not in cid_all %s; allocating nothing",
                consumer_group, current_cid, list(cid_all),
            )
            return False
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AllocateMessageQueueAveragely(AllocateMessageQueueStrategy):
    """RocketMQ's default ``AVG``: contiguous blocks, the first ones one queue longer.

    With 10 queues and 4 consumers the shares are [0,1,2] [3,4,5] [6,7] [8,9]; with
    more consumers than queues the last consumers get nothing. Cost: O(len(cid_all))
    for the index lookup plus the size of the share.

    >>> from mqlite.message import MessageQueue
    >>> mqs = [MessageQueue("T", "b", q) for q in range(10)]
    >>> cids = ["c0", "c1", "c2", "c3"]
    >>> [[mq.queue_id for mq in AllocateMessageQueueAveragely().allocate("g", c, mqs, cids)] for c in cids]
    [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    """

    @property
    def name(self) -> str:
        """``"AVG"``."""
        return "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return `current_cid`'s contiguous block of `mq_all` (see the class docstring)."""
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        n_mq, n_cid = len(mq_all), len(cid_all)
        mod = n_mq % n_cid
        longer = mod > 0 and index < mod  # one of the first `mod` consumers
        if n_mq <= n_cid:
            size = 1
        else:
            size = n_mq // n_cid + 1 if longer else n_mq // n_cid
        # The longer blocks come first, so later starts are shifted by all `mod` extras.
        start = index * size if longer else index * size + mod
        # With more consumers than queues `start` passes the end and the share is
        # empty; RocketMQ reaches the same result through a negative range.
        end = start + min(size, n_mq - start)
        return list(mq_all[start:end]) if end > start else []


class AllocateMessageQueueAveragelyByCircle(AllocateMessageQueueStrategy):
    """``AVG_BY_CIRCLE``: deal the queues round-robin, like cards.

    Consumer *k* of *c* takes queues k, k + c, k + 2c, ...; with 10 queues and 4
    consumers the shares are [0,4,8] [1,5,9] [2,6] [3,7]. Neighbouring queues (often
    on the same broker) go to different consumers. Cost: O(len(mq_all) / len(cid_all)).
    """

    @property
    def name(self) -> str:
        """``"AVG_BY_CIRCLE"``."""
        return "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return every ``len(cid_all)``-th queue starting at `current_cid`'s index."""
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return list(mq_all[index::len(cid_all)])


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the first 4 bytes of MD5(UTF-8 key), big-endian, unsigned.

    >>> md5_hash("")
    3558706393
    """
    # Java's MD5Hash folds digest[0..3] into a long, so the value is never negative.
    # It encodes with the platform charset; UTF-8 matches every JVM since Java 18
    # and every ASCII client id before that.
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateMessageQueueConsistentHash(AllocateMessageQueueStrategy):
    """``CONSISTENT_HASH``: each queue goes to the consumer owning its point on a hash ring.

    Every consumer puts `virtual_node_cnt` points on the ring, at the hashes of
    ``f"{cid}-{i}"``; a queue hashes ``str(mq)`` (``MessageQueue [topic=T,
    brokerName=B, queueId=N]``) and belongs to the first point at or after it,
    wrapping around. When a consumer joins or leaves, only the queues on its arcs
    move, which is the point of this strategy; the shares are less even than ``AVG``.

    If two points collide, the one added later (later in `cid_all`) wins, as in
    RocketMQ's ``TreeMap``. With ``virtual_node_cnt=0`` the ring is empty and nobody
    gets anything, which RocketMQ also allows. `hash_function` replaces :func:`md5_hash`
    (both consumers and Java peers must use the same one).

    Cost per call: ``len(cid_all) * virtual_node_cnt`` hashes to build the ring, then
    one hash and a binary search per queue.

    >>> from mqlite.message import MessageQueue
    >>> mqs = [MessageQueue("topic_test", "brokerName", q) for q in range(6)]
    >>> [mq.queue_id for mq in AllocateMessageQueueConsistentHash().allocate("g", "CID-1", mqs, ["CID-0", "CID-1"])]
    [0, 2]
    """

    def __init__(self, virtual_node_cnt: int = 10, hash_function: HashFunction | None = None) -> None:
        if virtual_node_cnt < 0:
            raise MQClientError(
                f"virtual_node_cnt is {virtual_node_cnt}; it must be 0 or more (RocketMQ's default is 10)"
            )
        self.virtual_node_cnt = virtual_node_cnt
        self.hash_function: HashFunction = hash_function if hash_function is not None else md5_hash

    @property
    def name(self) -> str:
        """``"CONSISTENT_HASH"``."""
        return "CONSISTENT_HASH"

    def _ring(self, cid_all: Sequence[str]) -> tuple[list[int], list[str]]:
        """The ring as parallel sorted lists: point positions and the cid owning each."""
        owner: dict[int, str] = {}
        for cid in cid_all:
            for i in range(self.virtual_node_cnt):
                # Plain assignment: a colliding later point replaces the earlier one.
                owner[self.hash_function(f"{cid}-{i}")] = cid
        points = sorted(owner)
        return points, [owner[p] for p in points]

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return the queues of `mq_all` that the ring routes to `current_cid`."""
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        points, owners = self._ring(cid_all)
        if not points:
            return []
        result: list[MessageQueue] = []
        for mq in mq_all:
            # First point >= the queue's hash (Java's tailMap), wrapping to the first point.
            at = bisect.bisect_left(points, self.hash_function(str(mq)))
            if owners[at % len(points)] == current_cid:
                result.append(mq)
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}(virtual_node_cnt={self.virtual_node_cnt})"


class AllocateMessageQueueByConfig(AllocateMessageQueueStrategy):
    """``CONFIG``: every consumer gets the same configured queues, whatever the group.

    No argument is checked, not even whether `current_cid` is in `cid_all`, as in
    RocketMQ. Useful to pin a consumer to fixed queues; with two consumers both get
    everything, so messages are consumed twice. Cost: a copy of the configured list.
    """

    def __init__(self, message_queue_list: Iterable[MessageQueue]) -> None:
        self.message_queue_list: list[MessageQueue] = list(message_queue_list)

    @property
    def name(self) -> str:
        """``"CONFIG"``."""
        return "CONFIG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return a copy of the configured queues; the arguments are ignored."""
        # A copy, so a caller editing its share cannot change the configuration.
        return list(self.message_queue_list)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message_queue_list!r})"


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split`` with a literal one-character separator: trailing empty parts dropped."""
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    # Java returns the input itself when the separator never occurs, even "".
    return parts if sep in text else [text]


class AllocateMessageQueueByMachineRoom(AllocateMessageQueueStrategy):
    """``MACHINE_ROOM``: share only the queues of brokers in the given machine rooms.

    A broker named ``"<room>@<name>"`` is in ``<room>``; queues whose broker name
    does not split on ``@`` into exactly two parts (Java's ``split``, which drops
    trailing empty parts) are never allocated. The kept queues are split into
    ``len(queues) // len(cid_all)`` contiguous ones per consumer, and the remainder
    is dealt one each to the first consumers. Cost: O(len(mq_all)).

    >>> from mqlite.message import MessageQueue
    >>> mqs = [MessageQueue("T", "room1@broker-a" if q < 5 else "room2@broker-b", q) for q in range(10)]
    >>> s = AllocateMessageQueueByMachineRoom({"room1"})
    >>> [[mq.queue_id for mq in s.allocate("g", c, mqs, ["c0", "c1"])] for c in ["c0", "c1"]]
    [[0, 1, 4], [2, 3]]
    """

    def __init__(self, consumeridcs: Iterable[str]) -> None:
        # A bare string is an iterable of one-letter rooms: almost surely a mistake.
        if isinstance(consumeridcs, str):
            raise MQClientError(
                f"consumeridcs is the string {consumeridcs!r}; pass a collection of rooms, e.g. [{consumeridcs!r}]"
            )
        self.consumeridcs: frozenset[str] = frozenset(consumeridcs)

    @property
    def name(self) -> str:
        """``"MACHINE_ROOM"``."""
        return "MACHINE_ROOM"

    def _in_rooms(self, mq: MessageQueue) -> bool:
        parts = _java_split(mq.broker_name, "@")
        return len(parts) == 2 and parts[0] in self.consumeridcs

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return `current_cid`'s block of the queues in :attr:`consumeridcs`, plus its remainder queue."""
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        kept = [mq for mq in mq_all if self._in_rooms(mq)]
        per, rem = divmod(len(kept), len(cid_all))
        result = kept[per * index: per * index + per]
        # Unlike AVG, the leftovers sit after all the full blocks, so consumer 0's
        # extra queue is not next to its block ([0,1,4] and [2,3], not [0,1,2] [3,4]).
        if rem > index:
            result.append(kept[index + per * len(cid_all)])
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({sorted(self.consumeridcs)!r})"


@runtime_checkable
class MachineRoomResolver(Protocol):
    """Tells :class:`AllocateMachineRoomNearby` where brokers and consumers run.

    Both methods must return a non-empty room name, the same for every consumer of
    the group (they all compute the allocation independently).
    """

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        """The machine room of the broker holding `mq`."""
        ...

    def consumer_deploy_in(self, client_id: str) -> str:
        """The machine room the consumer `client_id` runs in."""
        ...


class AllocateMachineRoomNearby(AllocateMessageQueueStrategy):
    """``MACHINE_ROOM_NEARBY-<inner>``: read queues in your own machine room first.

    Queues and consumers are grouped by room with `resolver`. A consumer gets
    `strategy`'s share of the queues in its own room among the consumers of that
    room, plus, for every other room that has no consumer at all, its share of that
    room's queues among all consumers. So a room's queues stay local while it has a
    live consumer and are spread over everyone when it has none.

    Cost: one resolver call per queue and per consumer (two for `current_cid`), then
    the inner strategy once per room that contributes.
    """

    def __init__(self, strategy: AllocateMessageQueueStrategy, resolver: MachineRoomResolver) -> None:
        if strategy is None:
            raise MQClientError(
                "strategy is None; pass the strategy to run inside each machine room, e.g. AllocateMessageQueueAveragely()"
            )
        if not isinstance(strategy, AllocateMessageQueueStrategy):
            raise MQClientError(
                f"strategy is a {type(strategy).__name__}; pass an AllocateMessageQueueStrategy"
            )
        if resolver is None or not isinstance(resolver, MachineRoomResolver):
            raise MQClientError(
                f"resolver is {resolver!r}; pass an object with broker_deploy_in(mq) and consumer_deploy_in(client_id)"
            )
        self.strategy = strategy
        self.resolver = resolver

    @property
    def name(self) -> str:
        """``"MACHINE_ROOM_NEARBY-"`` followed by the inner strategy's name."""
        return f"MACHINE_ROOM_NEARBY-{self.strategy.name}"

    def _room(self, room: str, what: str) -> str:
        if not room:
            raise MQClientError(
                f"machine room is empty for {what}; the resolver must return a room name for every queue and consumer"
            )
        return room

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return the inner strategy's share of the local room's queues and of unattended rooms' queues."""
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        # Rooms keep the order they are first seen within mq_all / cid_all, so the inner
        # strategy gets sorted input; the rooms themselves are visited in sorted order
        # like RocketMQ's TreeMap, which fixes the order of the result.
        mqs_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            mqs_by_room.setdefault(self._room(self.resolver.broker_deploy_in(mq), f"queue {mq}"), []).append(mq)
        cids_by_room: dict[str, list[str]] = {}
        for cid in cid_all:
            cids_by_room.setdefault(self._room(self.resolver.consumer_deploy_in(cid), f"consumer {cid}"), []).append(cid)

        result: list[MessageQueue] = []
        home = self.resolver.consumer_deploy_in(current_cid)
        local = mqs_by_room.pop(home, None)
        if local:
            result += self.strategy.allocate(consumer_group, current_cid, local, cids_by_room[home])
        for room in sorted(mqs_by_room):
            if room not in cids_by_room:  # nobody lives there: everyone shares its queues
                result += self.strategy.allocate(consumer_group, current_cid, mqs_by_room[room], cid_all)
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.strategy!r}, {self.resolver!r})"


def allocate(
    strategy: AllocateMessageQueueStrategy,
    consumer_group: str,
    current_cid: str,
    mq_all: Iterable[MessageQueue],
    cid_all: Iterable[str],
) -> list[MessageQueue]:
    """Sort `mq_all` and `cid_all` as RocketMQ's rebalance does, then run `strategy`.

    This is what consumers call: the strategies themselves rely on every consumer
    passing the same order, and sorting is how RocketMQ guarantees it. Queues sort
    by (topic, broker name, queue id), client ids as strings. Cost: the sorts plus
    the strategy's own cost. Raises :class:`~mqlite.errors.MQClientError` like
    :meth:`AllocateMessageQueueStrategy.allocate`.

    >>> from mqlite.message import MessageQueue
    >>> mqs = [MessageQueue("T", "b", q) for q in (2, 0, 1)]
    >>> [mq.queue_id for mq in allocate(AllocateMessageQueueAveragelyByCircle(), "g", "a", mqs, ["b", "a"])]
    [0, 2]
    """
    return strategy.allocate(consumer_group, current_cid, sorted(mq_all), sorted(cid_all))
