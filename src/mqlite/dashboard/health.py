"""Store health for the dashboard: files, sizes, the checkpoint, the last shutdown, and `verify` on demand.

Read from the store directory (a connection over `-n` cannot reach its files:
then `available` is False and the file figures are None). Sizes are the
blocks the files occupy on disk (segments are sparse until written), found
with one `os.scandir` walk; nothing is opened but the checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..checkpoint import StoreCheckpoint
from ..errors import MQClientError
from ..store import writer_alive
from ..verify import verify_store
from .source import Source

__all__ = ["disk_bytes", "health", "clean_shutdown", "run_verify"]


def _files(path: str) -> Iterator[os.DirEntry[str]]:
    """Every regular file under `path` (symlinks not followed); none when it is missing."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _files(entry.path)
        elif entry.is_file(follow_symlinks=False):
            yield entry


def _allocated(entry: os.DirEntry[str]) -> int:
    """Bytes the file occupies on disk (a sparse segment counts what was written)."""
    try:
        return entry.stat(follow_symlinks=False).st_blocks * 512
    except OSError:  # removed meanwhile (retention, a topic deleted)
        return 0


def disk_bytes(path: str) -> int:
    """Bytes the files under `path` occupy on disk."""
    return sum(_allocated(e) for e in _files(path))


def clean_shutdown(path: str) -> bool | None:
    """True when the last writer closed the store cleanly (no `abort` file), False when it did not,
    None while a writer holds it (its `abort` file is there by design: the question is open)."""
    if writer_alive(path):
        return None
    return not os.path.exists(os.path.join(path, "abort"))


def health(source: Source) -> dict[str, Any]:
    """`GET /api/health`: flush mode, commit-log segments, consume-queue and index bytes, the checkpoint and
    the last shutdown. Caller holds `source.lock`."""
    local = source.local
    if local is None:
        return {"available": False, "flush_disk_type": None, "commitlog": None, "consume_queue_bytes": None,
                "index_files": None, "disk_bytes": None, "clean_shutdown": None, "checkpoint": None,
                "recovery_history": None}
    path = local.path
    config = local.config
    segments = sorted(_files(os.path.join(path, "commitlog")), key=lambda e: e.name)
    low, high = local.commit_log_range()
    index = sorted(_files(os.path.join(path, "index")), key=lambda e: e.name)
    with StoreCheckpoint(os.path.join(path, "checkpoint"), read_only=True) as checkpoint:
        checkpoint_fields = {"physic_msg_timestamp": checkpoint.physic_msg_timestamp,
                             "logics_msg_timestamp": checkpoint.logics_msg_timestamp,
                             "index_msg_timestamp": checkpoint.index_msg_timestamp}
    return {
        "available": True,
        "path": os.path.abspath(path),
        "flush_disk_type": config.flush_disk_type,
        "commitlog": {"file_size": config.commitlog_file_size, "min_offset": low, "max_offset": high,
                      "segments": [{"name": e.name, "bytes": _allocated(e)} for e in segments]},
        "consume_queue_bytes": disk_bytes(os.path.join(path, "consumequeue")),
        "index_files": [{"name": e.name, "bytes": _allocated(e)} for e in index],
        "disk_bytes": disk_bytes(path),
        "clean_shutdown": clean_shutdown(path),
        "checkpoint": checkpoint_fields,
        "recovery_history": None,
    }


def run_verify(source: Source) -> dict[str, Any]:
    """`POST /api/verify`: `verify_store` on the store's files (read-only; safe beside the writer).

    Cost: reads every record, unit and index entry (seconds per GiB). Does not hold `source.lock`:
    it reads the files through its own `StoreReader`, so the sampler and other requests go on.
    """
    local = source.local
    if local is None:
        raise MQClientError(f"verify reads the store's files; this dashboard reaches {source.broker.path} over "
                            "the wire: run `mqlite verify PATH` where the files are")
    report = verify_store(local.path)
    return {"ok": report.ok, "records": report.records, "units": report.units, "queues": report.queues,
            "index_files": report.index_files, "problems": list(report.problems), "summary": report.summary()}
