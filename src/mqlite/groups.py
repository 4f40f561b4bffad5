"""Consumer groups inside one broker: who is a member, and who holds which queue lock.

RocketMQ's broker keeps a `ConsumerManager` (the live members of each group,
from their heartbeats) and a `RebalanceLockManager` (orderly consumers lock
the queues they own, so two members never consume one queue at once during a
hand-over). In one process a member registers when it starts and unregisters
when it shuts down, and every other member of the group is told to rebalance
at once (RocketMQ's `NOTIFY_CONSUMER_IDS_CHANGED`), so nobody waits for the
20 s timer to notice a join or a leave.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .clock import SYSTEM_CLOCK, Clock
from .errors import IllegalStateError
from .message import MessageQueue

__all__ = ["add_member", "GroupMember", "ConsumerData", "ConsumerGroups", "QueueLocks", "LOCK_MAX_LIVE_MS"]

#: `RebalanceLockManager.REBALANCE_LOCK_MAX_LIVE_TIME`: a lock nobody renews expires after 60 s.
LOCK_MAX_LIVE_MS = 60_000


class GroupMember(Protocol):
    """What the broker needs of a registered consumer."""

    @property
    def client_id(self) -> str:
        """Unique per consumer instance."""
        ...

    def request_rebalance(self) -> None:
        """Membership or topic layout changed: rebalance soon (must not block)."""
        ...

    def subscribed_topics(self) -> set[str]:
        """Topics the member consumes (its retry topic included)."""
        ...

    def assigned_queues(self) -> set[MessageQueue]:
        """Queues the member consumes right now."""
        ...

    def reset_offsets(self, topic: str, offsets: dict[int, int]) -> None:
        """An admin reset `topic`'s offsets (queue id -> offset): drop cached messages, pull from there.

        Every member of the group is told (whatever it subscribes); one that holds none of the
        queues does nothing."""
        ...

    def shutdown(self) -> None:
        """Stop consuming (the broker is closing); idempotent."""
        ...

    def consumer_data(self) -> ConsumerData:
        """What a heartbeat to a remote broker carries about this member."""
        ...


@dataclass(frozen=True)
class ConsumerData:
    """RocketMQ's `ConsumerData` of a heartbeat: how a member consumes and what it subscribes."""

    message_model: str
    """`"CLUSTERING"` or `"BROADCASTING"`."""
    consume_type: str
    """`"CONSUME_PASSIVELY"` (push) or `"CONSUME_ACTIVELY"` (lite pull)."""
    consume_from_where: str
    """The `ConsumeFromWhere` name new queues start from."""
    subscriptions: dict[str, tuple[str, str]]
    """Topic -> (expression type, expression), the retry topic's included."""


def add_member(table: dict[str, GroupMember], group: str, member: GroupMember) -> None:
    """Put `member` into `table` (the members of `group` by client id; the caller holds its lock).
    `IllegalStateError` when another member already has its client id: two members with one id would
    compute the same share and consume everything twice."""
    holder = table.get(member.client_id)
    if holder is not None and holder is not member:
        raise IllegalStateError(f"consumer group {group!r} already has a member with client_id "
                                f"{member.client_id!r}; give each consumer its own client_id")
    table[member.client_id] = member


class ConsumerGroups:
    """Live members per consumer group; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, dict[str, GroupMember]] = {}

    def register(self, group: str, member: GroupMember) -> None:
        """Add `member` to `group` and ask every member (itself included) to rebalance."""
        with self._lock:
            table = self._members.setdefault(group, {})
            add_member(table, group, member)
            members = list(table.values())
        for other in members:
            other.request_rebalance()

    def unregister(self, group: str, member: GroupMember) -> None:
        """Remove `member`; the members left rebalance and take over its queues."""
        with self._lock:
            table = self._members.get(group)
            if not table or table.get(member.client_id) is not member:
                return
            del table[member.client_id]
            if not table:
                del self._members[group]
            members = list(table.values())
        for other in members:
            other.request_rebalance()

    def client_ids(self, group: str) -> list[str]:
        """The members' client ids, sorted (as `RebalanceImpl` sorts them)."""
        with self._lock:
            return sorted(self._members.get(group, ()))

    def members(self, group: str) -> list[GroupMember]:
        """The live members of `group`."""
        with self._lock:
            return list(self._members.get(group, {}).values())

    def groups(self) -> list[str]:
        """Groups with at least one live member, sorted."""
        with self._lock:
            return sorted(self._members)

    def notify(self, group: str) -> None:
        """Ask every member of `group` to rebalance (one of its topics appeared)."""
        for member in self.members(group):
            member.request_rebalance()

    def notify_all(self) -> None:
        """Ask every member of every group to rebalance (a topic's queues changed)."""
        with self._lock:
            members = [m for table in self._members.values() for m in table.values()]
        for member in members:
            member.request_rebalance()


class QueueLocks:
    """`RebalanceLockManager`: per (group, queue), the client holding it and when it last renewed."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._max_live_ms = max_live_ms
        self._table: dict[tuple[str, MessageQueue], tuple[str, int]] = {}

    def try_lock(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock or renew each queue for `client_id`; returns the queues it now holds."""
        now = self._clock.now_ms()
        held: set[MessageQueue] = set()
        with self._lock:
            for mq in mqs:
                entry = self._table.get((group, mq))
                if entry is None or entry[0] == client_id or now - entry[1] > self._max_live_ms:
                    self._table[(group, mq)] = (client_id, now)
                    held.add(mq)
        return held

    def unlock(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues `client_id` holds (others' locks are left alone)."""
        with self._lock:
            for mq in mqs:
                entry = self._table.get((group, mq))
                if entry is not None and entry[0] == client_id:
                    del self._table[(group, mq)]

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding an unexpired lock on `mq`, or None."""
        with self._lock:
            entry = self._table.get((group, mq))
        if entry is None or self._clock.now_ms() - entry[1] > self._max_live_ms:
            return None
        return entry[0]
