"""What the dashboard's sampler saw: one `Sample` per round, and the bounded `History` of rates and lag.

A sample holds the raw figures of one moment (every queue's offsets, every
group's committed offsets); the history keeps, per round, only what the
charts draw (messages in per topic, messages consumed per group, lag per
group and queue). Rates are deltas of offsets over time, so they are the same
from any process that reads the store and need no counter in the broker's hot
paths: messages in per topic between two successive samples (queue offsets
move with every send), messages consumed per group over the last
`out_window` seconds (consumers commit offsets in bursts, and a reader sees
them only when the writer persists them, every 5 s: a per-round delta would
draw 0, 0, 0 and a spike). A consume rate is None until the history spans the
window.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..broker import QueueProgress
from ..metrics import QueueStatusLike

__all__ = ["Sample", "Point", "History"]

#: A queue of a group's progress: (topic, queue id).
QueueRef = tuple[str, int]


@dataclass(frozen=True)
class Sample:
    """The figures of one sampling round (epoch ms `t`)."""

    t: int
    topics: Mapping[str, tuple[QueueStatusLike, ...]]
    """Every topic's queues, as `topic_status` gives them (from the files, or over the wire)."""
    progress: Mapping[str, tuple[QueueProgress, ...]]
    """Every consumer group's queues, as `consumer_progress` gave them."""
    members: Mapping[str, list[str] | None] = field(default_factory=dict)
    """Client ids of each group's live members; None where they cannot be known (a read-only store)."""

    def stored(self, topic: str) -> int:
        """Messages of `topic` still stored: the sum over its queues of max minus min offset."""
        return sum(q.max_offset - q.min_offset for q in self.topics.get(topic, ()))

    def lag(self, group: str) -> dict[QueueRef, int]:
        """`group`'s messages not consumed yet, per queue (never below 0: an offset reset past the end)."""
        return {(p.topic, p.queue_id): max(p.broker_offset - p.consumer_offset, 0) for p in self.progress.get(group, ())}


def _rate(now: int, before: int | None, seconds: float) -> float | None:
    """Messages per second between two offset sums; None without an earlier sum; never below 0 (a topic
    deleted and made again, an offset reset backwards)."""
    if before is None:
        return None
    return max(now - before, 0) / seconds


@dataclass(frozen=True)
class Point:
    """One round of the history: what the charts draw at time `t` (epoch ms)."""

    t: int
    topic_in: Mapping[str, float | None]
    """Messages stored per second per topic since the previous round (None: the topic is new)."""
    group_out: Mapping[str, float | None]
    """Messages consumed per second per group over the last `out_window` seconds (committed offsets moved;
    None until the history spans the window, or for a group new in it)."""
    group_lag: Mapping[str, Mapping[QueueRef, int]]
    """Lag per group and queue."""

    @staticmethod
    def between(before: Sample, now: Sample, base: Sample | None = None) -> Point:
        """The point of `now`, its send rates measured from `before`, its consume rates from `base` (None:
        not known yet)."""
        seconds = max(now.t - before.t, 1) / 1000

        def max_sum(sample: Sample, topic: str) -> int | None:
            queues = sample.topics.get(topic)
            return None if queues is None else sum(q.max_offset for q in queues)

        def consumed_sum(sample: Sample, group: str) -> int | None:
            rows = sample.progress.get(group)
            return None if rows is None else sum(p.consumer_offset for p in rows)

        topic_in = {t: _rate(max_sum(now, t) or 0, max_sum(before, t), seconds) for t in now.topics}
        group_out: dict[str, float | None] = dict.fromkeys(now.progress)
        if base is not None:
            span = max(now.t - base.t, 1) / 1000
            group_out = {g: _rate(consumed_sum(now, g) or 0, consumed_sum(base, g), span) for g in now.progress}
        return Point(now.t, topic_in, group_out, {g: now.lag(g) for g in now.progress})


class History:
    """The last `capacity` points and the latest sample; thread-safe (the sampler adds, requests read).

    Memory: one dict entry per topic, group and consumed queue per point
    (600 points of 100 queues is some 60,000 small ints).
    """

    def __init__(self, capacity: int = 600, out_window: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._points: deque[Point] = deque(maxlen=capacity)
        self._latest: Sample | None = None
        self._window_ms = int(out_window * 1000)
        #: The samples of the last `out_window` (and the one just before it: the consume rates' base).
        self._recent: deque[Sample] = deque()

    def add(self, sample: Sample) -> None:
        """Record a round: a point from the previous sample to this one (none for the very first)."""
        with self._lock:
            if self._latest is not None and sample.t > self._latest.t:
                recent = self._recent
                while len(recent) > 1 and recent[1].t <= sample.t - self._window_ms:
                    recent.popleft()  # the next one is old enough to be the base
                base = recent[0] if recent and recent[0].t <= sample.t - self._window_ms else None
                self._points.append(Point.between(self._latest, sample, base))
            if self._latest is None or sample.t > self._latest.t:
                self._recent.append(sample)
            self._latest = sample

    @property
    def latest(self) -> Sample | None:
        """The newest sample, or None before the first round."""
        return self._latest

    def points(self) -> list[Point]:
        """The recorded points, oldest first (a copy)."""
        with self._lock:
            return list(self._points)

    def last(self) -> Point | None:
        """The newest point, or None before the second round."""
        with self._lock:
            return self._points[-1] if self._points else None


def series(values: Iterable[float | int | None]) -> list[float | int | None]:
    """A chart series: floats rounded to 3 decimals (JSON stays small), None kept (a gap in the chart)."""
    return [round(v, 3) if isinstance(v, float) else v for v in values]
