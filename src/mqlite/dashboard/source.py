"""`Source`: the broker a dashboard shows, as the routes and the sampler reach it.

Three kinds of broker, one surface (`admin.AdminSurface`):

- a store opened read-only beside a live writer (`mqlite.open(path, read_only=True)`):
  every round and every request first picks up what the writer dispatched since
  (`refresh`), and the committed offsets are those the writer last persisted
  (`config/consumerOffset.json`, every `flush_consumer_offset_interval` seconds);
- the store's writer (this process holds it): live offsets and group members;
- a serving broker over the wire (`mqlite.connect`): its live offset table
  (`GET_ALL_CONSUMER_OFFSET`) and members (`GET_CONSUMER_LIST_BY_GROUP`).

Calls into the broker are serialised by one lock: a `StoreReader` is not meant
for several threads, and a dashboard serves one person, so nothing waits long.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TypeAlias

from ..admin import consumer_groups, consumer_progress, group_exists, offset_table
from ..broker import Broker, QueueProgress
from ..errors import ConfigError, MQLiteError
from ..metrics import MetricsSnapshot, QueueStatusLike, StoreFigures
from ..remoting.remote import RemoteBroker
from ..sendback import DLQ_GROUP_TOPIC_PREFIX, is_dlq_topic
from .history import Sample

__all__ = ["Source", "DashboardBroker", "NotFoundError", "ForbiddenError", "ConflictError"]

log = logging.getLogger("mqlite.dashboard")

#: What a dashboard can show: a local broker (writer or read-only) or a connection to a serving one.
DashboardBroker: TypeAlias = "Broker | RemoteBroker"


class NotFoundError(MQLiteError, LookupError):
    """A topic or consumer group the broker does not know (HTTP 404)."""


class ForbiddenError(MQLiteError):
    """A write this dashboard may not do, or a request from a page it does not serve (HTTP 403)."""


class ConflictError(MQLiteError):
    """A request that would repeat work already running (a second verify, HTTP 409)."""


#: The shortest span consume rates are taken over (seconds): consumers commit in bursts (RocketMQ's clients
#: every 5 s, `persistConsumerOffsetInterval`), and a reader sees offsets as the writer persists them.
MIN_OUT_WINDOW = 10.0


class Source:
    """The broker behind a dashboard, with the lock that serialises calls into it.

    `writable` enables the dead-letter re-send: only for a writer or a serving broker.
    """

    def __init__(self, broker: DashboardBroker, *, writable: bool = False) -> None:
        self.broker = broker
        self.local: Broker | None = broker if isinstance(broker, Broker) else None
        if writable and self.local is not None and self.local.read_only:
            raise ConfigError(f"the broker at {broker.path} is read-only: a dashboard on it cannot re-send dead "
                              "letters (open the store for writing, or pass writable=False)")
        self.writable = writable
        self.mode = "remote" if self.local is None else ("read-only" if self.local.read_only else "writer")
        #: The files' figures (`mqlite.metrics`): queue offsets of every topic in one pass after one refresh,
        #: where a reader's `topic_status` refreshes the whole store on each call. None over the wire.
        self.figures = StoreFigures(self.local.store) if self.local is not None else None
        #: Seconds consume rates are taken over: at least two of the writer's offset persists for a reader
        #: (its figures move only then), else `MIN_OUT_WINDOW`.
        persist = self.local.config.flush_consumer_offset_interval if self.local and self.local.read_only else 0.0
        self.out_window = max(MIN_OUT_WINDOW, 2 * persist)
        self.lock = threading.RLock()
        #: Why the last sampling round failed (a serving broker gone), or None.
        self.last_error: str | None = None

    # -- reading ------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """A read-only store: pick up the queues, units and records the writer added since the last look
        (key and id look-ups included). Caller holds `lock`."""
        if self.local is not None and self.local.read_only:
            self.local.store.refresh()

    def offsets(self) -> dict[str, dict[int, int]]:
        """The committed offset table (`admin.OffsetTable`). Caller holds `lock`."""
        if isinstance(self.broker, RemoteBroker):
            return self.broker.consumer_offset_table()
        return offset_table(self.broker)

    def members(self, group: str) -> list[str] | None:
        """Client ids of `group`'s live members; None for a read-only store (they live in the writer's
        process). Caller holds `lock`."""
        if self.mode == "read-only":
            return None
        return self.broker.consumer_ids(group)

    def progress(self, group: str, offsets: dict[str, dict[int, int]]) -> list[QueueProgress]:
        """`group`'s queues: broker and committed offsets. Caller holds `lock`."""
        return consumer_progress(self.broker, group, offsets=offsets)

    def require_topic(self, topic: str) -> None:
        """`NotFoundError` when the broker has no topic `topic`. Caller holds `lock`."""
        if topic not in self.broker.topic_list():
            raise NotFoundError(f"no topic {topic!r} in {self.broker.path}")

    def require_group(self, group: str, offsets: dict[str, dict[int, int]]) -> None:
        """`NotFoundError` when `group` has no committed offsets and no retry or dead-letter topic."""
        if not group_exists(self.broker, group, offsets):
            raise NotFoundError(f"no consumer group {group!r} in {self.broker.path} (no committed offsets, "
                                f"no retry or dead-letter topic)")

    def dlq_groups(self, topics: list[str]) -> list[str]:
        """The groups that have a dead-letter topic among `topics`."""
        return sorted(t[len(DLQ_GROUP_TOPIC_PREFIX):] for t in topics if is_dlq_topic(t))

    def require_writable(self) -> None:
        """`ForbiddenError` saying why, when this dashboard may not re-send dead letters."""
        if not self.writable:
            raise ForbiddenError(_READ_ONLY[self.mode])

    def metrics(self) -> MetricsSnapshot:
        """The `mqlite.metrics` figures: `Broker.metrics()` with the files, else `RemoteBroker.metrics()` (over
        the wire, with the serving broker's offset table); each keeps its counters between scrapes."""
        with self.lock:
            return self.broker.metrics()

    # -- sampling -----------------------------------------------------------------------------------------
    def sample(self) -> Sample:
        """One round's figures: every topic's queues, every group's progress and members.

        Cost: with the files, one refresh (a reader) and every queue's offsets and newest store time
        (`StoreFigures.queue_statuses`: 1,200 queues of a reader ~15 ms); over the wire one `topic_status`
        per topic. Then one read of the offset table and one `consumer_progress` per group (a request
        each over the wire). A topic deleted while the round runs is left out.
        """
        with self.lock:
            topics: dict[str, tuple[QueueStatusLike, ...]] = {}
            if self.figures is not None:
                self.figures.refresh()
                configs = {topic: self.broker.topic_config(topic) for topic in self.broker.topic_list()}
                topics = {topic: tuple(rows) for topic, rows in self.figures.queue_statuses(configs).items()}
            else:
                for topic in self.broker.topic_list():
                    try:
                        topics[topic] = tuple(self.broker.topic_status(topic))
                    except MQLiteError as exc:  # deleted meanwhile, or a name the broker refuses to show
                        log.debug("dashboard: topic %r left out of this round: %s", topic, exc)
            offsets = self.offsets()
            groups = consumer_groups(self.broker, offsets)
            progress = {g: tuple(self.progress(g, offsets)) for g in groups}
            members = {g: self.members(g) for g in groups}
        return Sample(now_ms(), topics, progress, members)


_READ_ONLY = {
    "read-only": "this dashboard opened the store read-only; to re-send dead letters run it with --write (it "
                 "then holds the store: stop the writer first), or serve the store and use -n HOST:PORT",
    "writer": "this dashboard was started with writable=False; re-sending dead letters needs writable=True",
    "remote": "this dashboard was started with writable=False; re-sending dead letters needs writable=True",
}


def now_ms() -> int:
    """Wall-clock time in epoch ms: when a round ran (the charts' x axis)."""
    return int(time.time() * 1000)
