"""The dashboard's JSON routes: one method per route of the contract in docs/dashboard.md.

Each takes the decoded path parameters and query string, and returns a
JSON-ready dict; errors are exceptions the server turns into
`{"error", "kind"}` with their HTTP status (`MQClientError` 400,
`ForbiddenError` 403, `NotFoundError`/`MessageNotFoundError` 404). Overview,
groups and dead-letter lists come from the sampler's latest round (the page
polls them); a topic, a group, searches and messages are read live.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from ..admin import check_resend, dlq_messages, find_message, resend_dlq_message
from ..errors import MQClientError, MQLiteError
from ..metrics import topic_kind
from ..offsetfile import group_table
from ..sendback import dlq_topic
from .health import Verifier, health, shutdown_state, total_disk_bytes
from .history import History, Point, Sample, series
from .messages import detail, find_one, int_param, limit_param, msg_id_param, origin_topic, search, summary
from .source import Source

__all__ = ["Api", "MAX_RESEND"]

#: Dead letters one re-send request may name.
MAX_RESEND = 1000
Query = Mapping[str, str]


class Api:
    """The routes over one `Source` and its `History` (see the module docstring)."""

    def __init__(self, source: Source, history: History) -> None:
        self.source = source
        self.history = history
        #: Runs `verify` in a child process that `Dashboard.close()` ends (`abandon`).
        self.verifier = Verifier()

    def _latest(self) -> Sample:
        """The newest sample; taken now when the sampler has not run yet."""
        latest = self.history.latest
        if latest is None:
            self.history.add(self.source.sample())
            latest = self.history.latest
            assert latest is not None
        return latest

    # -- overview -----------------------------------------------------------------------------------------
    def overview(self, query: Query) -> dict[str, Any]:
        """`GET /api/overview`: the store, totals, health, every topic and group, and the total rates' history."""
        sample = self._latest()
        source = self.source
        broker = source.broker
        last = self.history.last()
        points = self.history.points()
        topics = [self._topic_row(sample, name, last) for name in sorted(sample.topics)]
        local = source.local
        return {
            "store": {"path": local.path if local else None, "address": None if local else broker.path,
                      "mode": source.mode, "writable": source.writable, "broker_name": broker.broker_name,
                      "flush_disk_type": local.config.flush_disk_type if local else None},
            "totals": {"topics": len(topics), "queues": sum(t["queues"] for t in topics),
                       "messages": sum(t["messages"] for t in topics),
                       "disk_bytes": total_disk_bytes(local.path) if local else None,
                       "in_per_s": _in_total(last), "out_per_s": _out_total(last)},
            "health": self._health_summary(),
            "topics": topics,
            "groups": sorted(sample.progress),
            "sampled_at": sample.t,
            "history": {"t": [p.t for p in points], "in_per_s": series(_in_total(p) for p in points),
                        "out_per_s": series(_out_total(p) for p in points)},
        }

    @staticmethod
    def _topic_row(sample: Sample, topic: str, last: Point | None) -> dict[str, Any]:
        queues = sample.topics[topic]
        rate = last.topic_in.get(topic) if last is not None else None
        return {"topic": topic, "kind": topic_kind(topic), "queues": len(queues), "messages": sample.stored(topic),
                "max_offset_sum": sum(q.max_offset for q in queues),
                "last_store_time": max((q.last_update_timestamp for q in queues), default=0),
                "in_per_s": None if rate is None else round(rate, 3)}

    def _health_summary(self) -> dict[str, Any]:
        source = self.source
        notes: list[str] = []
        clean: bool | None = None
        alive: bool | None = None
        if source.last_error is not None:
            notes.append(source.last_error)
        if source.local is not None:
            clean, alive = shutdown_state(source.local.path)
            if clean is False:
                notes.append("the store was not closed cleanly by the writer before the current one, which recovered "
                             "it when it opened (see the recovery history)" if alive else
                             "the store was not closed cleanly by its last writer, and no writer has opened it since: "
                             "the next one recovers it")
            if source.mode == "read-only" and alive:
                notes.append("a writer holds the store: figures follow it (committed offsets as it last persisted "
                             "them)")
        status = "warn" if source.last_error is not None or clean is False else "ok"
        return {"clean_shutdown": clean, "writer_alive": alive, "status": status, "notes": notes}

    # -- topics ---------------------------------------------------------------------------------------------
    def topic(self, query: Query, topic: str) -> dict[str, Any]:
        """`GET /api/topics/<topic>`: the topic's settings and queues (live), its groups and rate history."""
        source = self.source
        with source.lock:
            source.refresh()
            source.require_topic(topic)
            rows = source.broker.topic_status(topic)
            config = source.broker.topic_config(topic)
        sample = self._latest()
        points = self.history.points()
        return {"topic": topic, "kind": topic_kind(topic),
                "read_queues": config.read_queue_nums if config else None,
                "write_queues": config.write_queue_nums if config else None,
                "perm": config.perm if config else None, "order": config.order if config else None,
                "queues": [{"queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
                            "messages": q.max_offset - q.min_offset, "last_store_time": q.last_update_timestamp}
                           for q in rows],
                "groups": sorted(g for g, progress in sample.progress.items() if any(p.topic == topic for p in progress)),
                "history": {"t": [p.t for p in points], "in_per_s": series(p.topic_in.get(topic) for p in points)}}

    # -- consumer groups ---------------------------------------------------------------------------------------
    def groups(self, query: Query) -> dict[str, Any]:
        """`GET /api/groups`: every group with its topics, total lag, members and dead letters."""
        sample = self._latest()
        last = self.history.last()
        return {"groups": [{"group": group, "topics": sorted({p.topic for p in progress}),
                            "lag": sum(sample.lag(group).values()), "members": sample.members.get(group),
                            "out_per_s": _rounded(last.group_out.get(group)) if last is not None else None,
                            "dlq": sample.stored(dlq_topic(group))}
                           for group, progress in sorted(sample.progress.items())]}

    def group(self, query: Query, group: str) -> dict[str, Any]:
        """`GET /api/groups/<group>`: lag per queue (live), members, and the lag history by topic and queue.

        A queue without a committed offset counts from 0 here (`committed` false), as mqadmin's
        `consumerProgress` does; `/metrics` follows RocketMQ's `ConsumerLagCalculator` (no lag for it)."""
        source = self.source
        with source.lock:
            source.refresh()
            offsets = source.offsets()
            source.require_group(group, offsets)
            progress = source.progress(group, offsets)
            members = source.members(group)
        committed = group_table(offsets, group)
        points = self.history.points()
        queues = sorted({ref for point in points for ref in point.group_lag.get(group, {})})
        topics = sorted({topic for topic, _ in queues})

        def lag_of(point: Point, keep: Any) -> int | None:
            lags = point.group_lag.get(group)
            if lags is None:
                return None
            return sum(v for ref, v in lags.items() if keep(ref))

        return {"group": group, "members": members,
                "lag": sum(max(p.broker_offset - p.consumer_offset, 0) for p in progress),
                "queues": [{"topic": p.topic, "queue_id": p.queue_id, "broker_offset": p.broker_offset,
                            "consumer_offset": p.consumer_offset, "lag": max(p.broker_offset - p.consumer_offset, 0),
                            "committed": committed.get(p.topic, {}).get(p.queue_id, -1) >= 0,
                            "client_id": p.client_id or None, "last_timestamp": p.last_timestamp}
                           for p in progress],
                "history": {"t": [p.t for p in points],
                            "lag": [lag_of(p, lambda ref: True) for p in points],
                            "out_per_s": series(p.group_out.get(group) for p in points),
                            "by_topic": {t: [lag_of(p, lambda ref, t=t: ref[0] == t) for p in points] for t in topics},
                            "by_queue": {f"{t}/{q}": [_queue_lag(p, group, (t, q)) for p in points]
                                         for t, q in queues}}}

    # -- messages ---------------------------------------------------------------------------------------------
    def messages(self, query: Query) -> dict[str, Any]:
        """`GET /api/messages?...`: a search (see `messages.search` for its forms)."""
        with self.source.lock:
            self.source.refresh()
            found, truncated = search(self.source, query)
        return {"messages": [summary(m) for m in found], "truncated": truncated}

    def message(self, query: Query) -> dict[str, Any]:
        """`GET /api/message?...`: one message with headers, properties and body."""
        with self.source.lock:
            self.source.refresh()
            return detail(find_one(self.source, query))

    def trace(self, query: Query) -> dict[str, Any]:
        """`GET /api/trace?msg_id=ID`: the message's trace records and where it stands for each group."""
        if "msg_id" not in query:
            raise MQClientError("parameter msg_id is missing")
        msg_id = msg_id_param(query["msg_id"])
        broker = self.source.broker
        with self.source.lock:
            self.source.refresh()
            traces = [dataclasses.asdict(view) for view in broker.query_trace(msg_id)]
            tracks = [dataclasses.asdict(track) for track in broker.message_track(msg_id)]
        return {"msg_id": msg_id, "traces": traces, "tracks": tracks}

    # -- dead letters -------------------------------------------------------------------------------------------
    def dlq(self, query: Query) -> dict[str, Any]:
        """`GET /api/dlq`: every dead-letter topic with its message count, and whether re-sending is allowed."""
        sample = self._latest()
        return {"writable": self.source.writable,
                "queues": [{"group": group, "topic": dlq_topic(group), "messages": sample.stored(dlq_topic(group))}
                           for group in self.source.dlq_groups(list(sample.topics))]}

    def dlq_group(self, query: Query, group: str) -> dict[str, Any]:
        """`GET /api/dlq/<group>?limit=N&offset=O`: the group's dead letters from queue offset `O` of the
        dead-letter topic's queues on (default: the oldest stored), oldest first, with their original topic.
        An `O` past the newest gives an empty list (a later page that emptied), not a 404."""
        limit = limit_param(query)
        start = int_param(query, "offset") if "offset" in query else 0
        source = self.source
        with source.lock:
            source.refresh()
            source.require_group(group, source.offsets())
            # One queue, as RocketMQ's dead-letter topics have (each read from `start`).
            letters = list(itertools.islice(dlq_messages(source.broker, group, from_offset=start), limit + 1))
        return {"group": group, "topic": dlq_topic(group), "truncated": len(letters) > limit,
                "messages": [{**summary(m), "origin_topic": origin_topic(m)} for m in letters[:limit]]}

    def resend(self, body: Mapping[str, Any], group: str) -> dict[str, Any]:
        """`POST /api/dlq/<group>/resend`: re-send the named dead letters (to the retry topic, or with
        `to_origin` to their original topic). Every destination is checked before the first copy is sent."""
        source = self.source
        source.require_writable()
        msg_ids = body.get("msg_ids")
        if not isinstance(msg_ids, list) or not msg_ids or not all(isinstance(i, str) for i in msg_ids):
            raise MQClientError('"msg_ids" must be a non-empty list of message ids')
        if len(msg_ids) > MAX_RESEND:
            raise MQClientError(f'"msg_ids" names {len(msg_ids)} messages; at most {MAX_RESEND} a request')
        to_origin = body.get("to_origin", False)
        if not isinstance(to_origin, bool):
            raise MQClientError('"to_origin" must be true or false')
        ids = list(dict.fromkeys(msg_id_param(i, "msg_ids") for i in msg_ids))  # each checked, then looked up once
        with source.lock:
            source.require_group(group, source.offsets())
            # Found by msg_id or offset_msg_id; one copy named by both (or twice) is sent once.
            letters = list({m.offset_msg_id: m for m in (find_message(source.broker, msg_id, dlq_topic(group))
                                                         for msg_id in ids)}.values())
            check_resend(source.broker, letters, group, to_origin=to_origin)
            results: list[dict[str, Any]] = []
            for i, msg in enumerate(letters):
                try:
                    results.append(dataclasses.asdict(resend_dlq_message(source.broker, msg, group,
                                                                         to_origin=to_origin, sequence=i)))
                except (MQLiteError, OSError) as exc:
                    raise PartialResend(f"re-sent {len(results)} of {len(letters)} dead letters "
                                        f"({', '.join(r['msg_id'] for r in results) or 'none'}), then {msg.msg_id} "
                                        f"failed: {exc}") from exc
        return {"results": results}

    # -- store health --------------------------------------------------------------------------------------------
    def health(self, query: Query) -> dict[str, Any]:
        """`GET /api/health`: files, sizes, checkpoint, last shutdown (see `health.health`)."""
        with self.source.lock:
            self.source.refresh()
            return health(self.source)

    def verify(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """`POST /api/verify`: check every record, unit and index entry, in a child process the dashboard's
        close ends; one run at a time (409 while one runs: a second would double the reading and answer
        the same)."""
        return self.verifier.run(self.source)


class PartialResend(MQLiteError):
    """A re-send failed part-way (the store refused a write after the checks passed): HTTP 500."""


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _in_total(point: Point | None) -> float | None:
    """Messages sent per second at `point`: user topics only (retry, dead-letter and system copies are no sends)."""
    if point is None:
        return None
    rates = [r for t, r in point.topic_in.items() if topic_kind(t) == "user"]
    known = [r for r in rates if r is not None]
    if rates and not known:  # every topic new in this round: no rate yet, not a rate of 0
        return None
    return round(sum(known), 3)


def _out_total(point: Point | None) -> float | None:
    """Messages consumed per second at `point`, over every group."""
    if point is None:
        return None
    known = [r for r in point.group_out.values() if r is not None]
    if point.group_out and not known:  # the window is not spanned yet (docs/dashboard.md): unknown, not 0
        return None
    return round(sum(known), 3)


def _queue_lag(point: Point, group: str, ref: tuple[str, int]) -> int | None:
    return point.group_lag.get(group, {}).get(ref)
