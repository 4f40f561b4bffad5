"""Store health for the dashboard: files, sizes, the checkpoint, recoveries, and `verify` on demand.

Read from the store directory (a connection over `-n` cannot reach its files:
then `available` is False and the file figures are None). Sizes are the
blocks the files occupy on disk (segments are sparse until written), as
`mqlite.metrics.disk_bytes` counts them; nothing is opened but the checkpoint
and the recovery history.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..checkpoint import StoreCheckpoint
from ..errors import IllegalStateError, MQClientError
from ..metrics import disk_bytes
from ..recoveryhistory import recovery_history
from ..store import writer_alive
from ..verify import verify_store
from .source import Source

__all__ = ["health", "clean_shutdown", "run_verify", "total_disk_bytes"]


def total_disk_bytes(path: str) -> int:
    """Bytes the store's files occupy on disk (one `stat` per file)."""
    return sum(disk_bytes(path).values())


def _files_of(directory: str) -> list[dict[str, Any]]:
    """`[{"name", "bytes"}]` of the files in one flat directory (commit-log segments, index files), by name."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []
    files = []
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                files.append({"name": entry.name, "bytes": entry.stat(follow_symlinks=False).st_blocks * 512})
        except OSError:  # removed meanwhile (retention)
            continue
    return files


def clean_shutdown(path: str) -> bool | None:
    """Whether the store was closed cleanly before its current (or next) writer.

    Without a live writer: no `abort` file. With one (its `abort` file is there by design): what
    its open recorded in the recovery history (`abnormal`), None when nothing was recorded.
    """
    if not writer_alive(path):
        return not os.path.exists(os.path.join(path, "abort"))
    history = recovery_history(path)
    return not history[-1].abnormal if history else None


def health(source: Source) -> dict[str, Any]:
    """`GET /api/health`: flush mode, commit-log segments, bytes per kind of file, the checkpoint and the
    recovery history. Caller holds `source.lock`."""
    local = source.local
    if local is None:
        return {"available": False, "path": None, "flush_disk_type": None, "commitlog": None,
                "consume_queue_bytes": None, "index_files": None, "disk_bytes": None, "disk_bytes_by_kind": None,
                "clean_shutdown": None, "checkpoint": None, "recovery_history": None}
    path = local.path
    config = local.config
    low, high = local.commit_log_range()
    kinds = disk_bytes(path)
    with StoreCheckpoint(os.path.join(path, "checkpoint"), read_only=True) as checkpoint:
        checkpoint_fields = {"physic_msg_timestamp": checkpoint.physic_msg_timestamp,
                             "logics_msg_timestamp": checkpoint.logics_msg_timestamp,
                             "index_msg_timestamp": checkpoint.index_msg_timestamp}
    return {
        "available": True,
        "path": os.path.abspath(path),
        "flush_disk_type": config.flush_disk_type,
        "commitlog": {"file_size": config.commitlog_file_size, "min_offset": low, "max_offset": high,
                      "segments": _files_of(os.path.join(path, "commitlog"))},
        "consume_queue_bytes": kinds["consumequeue"],
        "index_files": _files_of(os.path.join(path, "index")),
        "disk_bytes": sum(kinds.values()),
        "disk_bytes_by_kind": kinds,
        "clean_shutdown": clean_shutdown(path),
        "checkpoint": checkpoint_fields,
        "recovery_history": [record.to_json() for record in recovery_history(path)],
    }


def run_verify(source: Source, stopping: threading.Event | None = None) -> dict[str, Any]:
    """`POST /api/verify`: `verify_store` on the store's files (read-only; safe beside the writer).

    Cost: reads every record, unit and index entry (seconds per GiB). Does not hold `source.lock`:
    it reads the files through its own `StoreReader`, so the sampler and other requests go on.
    `stopping` set (the dashboard closes) abandons the run after the commit-log segment being read
    (`IllegalStateError`): closing waits for one segment, not for the whole store.
    """
    local = source.local
    if local is None:
        raise MQClientError(f"verify reads the store's files; this dashboard reaches {source.broker.path} over "
                            "the wire: run `mqlite verify PATH` where the files are")

    def check_stop(done: int, total: int) -> None:
        if stopping is not None and stopping.is_set():
            raise IllegalStateError(f"verify of {local.path} abandoned: the dashboard is closing")

    check_stop(0, 0)
    report = verify_store(local.path, check_stop)
    return {"ok": report.ok, "records": report.records, "units": report.units, "queues": report.queues,
            "index_files": report.index_files, "problems": list(report.problems), "summary": report.summary()}
