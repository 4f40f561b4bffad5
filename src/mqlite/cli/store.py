"""Whole-store commands: statsAll, storeInfo, verify."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Iterator
from typing import Any

from ..admin import topic_stats
from ..reader import StoreReader
from ..sendback import is_dlq_topic, is_retry_topic
from ..verify import verify_store
from .checks import require_topic
from .context import Context
from .output import Column, Report, Row

__all__ = ["stats_all", "store_info", "verify"]


def _or_no_consumer(value: Any, fmt: str = "{}") -> str:
    return "NO_CONSUMER" if value is None else fmt.format(value)


def stats_all(ctx: Context, args: argparse.Namespace) -> Report:
    """Show per topic and consumer group the backlog and messages in and out over the last minute and day.

    Computed from the store (store times and committed offsets), not from
    runtime counters: "out" counts messages of the window the group's offsets
    have passed. Over `-n` the same, from the serving process's offsets
    (`GET_ALL_CONSUMER_OFFSET`) and its queues' offsets by time.
    Reads the store read-only: works beside a live writer.
    """
    broker = ctx.admin()
    if args.topic is not None:
        require_topic(broker, args.topic)
    topics = [t for t in broker.topic_list() if not (is_retry_topic(t) or is_dlq_topic(t))
              and args.topic in (None, t)]
    now = int(time.time() * 1000)
    offsets = ctx.offset_table()

    def rows() -> Iterator[Row]:
        progress = ctx.progress("reading")
        try:
            for done, topic in enumerate(topics):
                progress.update(done, len(topics), topic)
                for stats in topic_stats(broker, topic, now, offsets):
                    if not args.active_topic or stats.in_msg_24h or stats.out_msg_24h:
                        yield dataclasses.asdict(stats)
        finally:
            progress.close()

    return Report(rows(), columns=[
        Column("#Topic", "topic"), Column("#Consumer Group", "consumer_group", lambda g: g or ""),
        Column("#Accumulation", "accumulation"), Column("#InTPS", "in_tps", "{:.2f}".format),
        Column("#OutTPS", "out_tps", lambda v: "" if v is None else f"{v:.2f}"),
        Column("#InMsg24Hour", "in_msg_24h"), Column("#OutMsg24Hour", "out_msg_24h", _or_no_consumer),
    ])


def store_info(ctx: Context, args: argparse.Namespace) -> Report:
    """Summarise a store: settings, files, the checkpoint and every queue's offsets.

    Reads the store read-only: works beside a live writer.
    """
    path = ctx.path
    with StoreReader(path) as reader:
        checkpoint = reader.checkpoint
        queues = [{"topic": topic, "queue_id": queue_id, "min_offset": reader.min_offset(topic, queue_id),
                   "max_offset": reader.max_offset(topic, queue_id)}
                  for topic in reader.topics() for queue_id in reader.queue_ids(topic)]
        info = {
            "path": os.path.abspath(path),
            "commitlog_file_size": reader.config.commitlog_file_size,
            "consumequeue_file_size": reader.config.consumequeue_file_size,
            "commitlog_segments": len(reader.commitlog.mapped_files.files),
            "commitlog_min_offset": reader.commitlog.min_offset,
            "commitlog_max_offset": max((cq.max_commit_log_offset for cq in reader.consume_queues.values()), default=0),
            "index_files": len(reader.index.files),
            "clean_shutdown": not os.path.exists(os.path.join(path, "abort")),
            "checkpoint_physic_msg_timestamp": checkpoint.physic_msg_timestamp,
            "checkpoint_logics_msg_timestamp": checkpoint.logics_msg_timestamp,
            "checkpoint_index_msg_timestamp": checkpoint.index_msg_timestamp,
            "queues": queues,
        }
    return Report([info], line=_store_info_text)


def _store_info_text(info: Row) -> str:
    lines = [f"{key:34s} {value}" for key, value in info.items() if key != "queues"]
    lines.append(f"{'#Topic':32s} {'#QueueId':>8s} {'#MinOffset':>12s} {'#MaxOffset':>12s}")
    lines += [f"{q['topic']:32s} {q['queue_id']:>8d} {q['min_offset']:>12d} {q['max_offset']:>12d}"
              for q in info["queues"]]
    return "\n".join(lines)


def verify(ctx: Context, args: argparse.Namespace) -> Report:
    """Check every record, consume-queue unit and index chain; exit status 1 when something is wrong.

    Progress shows on stderr when it is a terminal. Reads the store read-only: works beside a live writer.
    """
    progress = ctx.progress("commit log")
    try:
        report = verify_store(ctx.path, lambda done, total: progress.update(done, total))
    finally:
        progress.close()
    row = {"path": report.path, "ok": report.ok, "records": report.records, "units": report.units,
           "queues": report.queues, "index_files": report.index_files, "problems": report.problems}
    return Report([row], line=lambda _: report.summary(), status=0 if report.ok else 1)
