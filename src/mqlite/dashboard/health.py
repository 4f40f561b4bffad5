"""Store health for the dashboard: files, sizes, the checkpoint, recoveries, and `verify` on demand.

Read from the store directory (a connection over `-n` cannot reach its files:
then `available` is False and the file figures are None). Sizes are the
blocks the files occupy on disk (segments are sparse until written), as
`mqlite.metrics.disk_bytes` counts them; nothing is opened but the checkpoint
and the recovery history.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..checkpoint import StoreCheckpoint
from ..errors import IllegalStateError, MQClientError, MQLiteError
from ..metrics import disk_bytes
from ..recoveryhistory import recovery_history
from ..store import writer_alive
from ..verify import verify_store
from .source import ConflictError, Source

__all__ = ["health", "clean_shutdown", "shutdown_state", "total_disk_bytes", "Verifier"]


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


def clean_shutdown(path: str, writer: bool) -> bool | None:
    """Whether the store was closed cleanly before its current (or next) writer; `writer`: whether a live
    process holds it (`store.writer_alive`, asked once by the caller, so the answer and the figure agree).

    Without a live writer: no `abort` file. With one (its `abort` file is there by design): what
    its open recorded in the recovery history (`abnormal`), None when nothing was recorded.
    """
    if not writer:
        return not os.path.exists(os.path.join(path, "abort"))
    history = recovery_history(path)
    return not history[-1].abnormal if history else None


def shutdown_state(path: str) -> tuple[bool | None, bool]:
    """`(clean_shutdown, writer_alive)` of the store at `path`: after a crash, whether the writer that holds
    it now recovered it (True) or no writer has opened it since and the next one will (False)."""
    alive = writer_alive(path)
    return clean_shutdown(path, alive), alive


def health(source: Source) -> dict[str, Any]:
    """`GET /api/health`: flush mode, commit-log segments, bytes per kind of file, the checkpoint and the
    recovery history. Caller holds `source.lock`."""
    local = source.local
    if local is None:
        return {"available": False, "path": None, "flush_disk_type": None, "commitlog": None,
                "consume_queue_bytes": None, "index_files": None, "disk_bytes": None, "disk_bytes_by_kind": None,
                "clean_shutdown": None, "writer_alive": None, "checkpoint": None, "recovery_history": None}
    path = local.path
    config = local.config
    low, high = local.commit_log_range()
    kinds = disk_bytes(path)
    clean, alive = shutdown_state(path)
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
        "clean_shutdown": clean,
        "writer_alive": alive,
        "checkpoint": checkpoint_fields,
        "recovery_history": [record.to_json() for record in recovery_history(path)],
    }


def _verify_json(path: str) -> dict[str, Any]:
    """`verify_store` on the store's files (read-only; safe beside the writer) as the route's JSON.
    Cost: reads every record, unit and index entry (seconds per GiB)."""
    report = verify_store(path)
    return {"ok": report.ok, "records": report.records, "units": report.units, "queues": report.queues,
            "index_files": report.index_files, "problems": list(report.problems), "summary": report.summary()}


class Verifier:
    """The dashboard's `verify`: one run at a time, in a child process that `abandon()` ends at once.

    A whole store takes seconds per GiB, and `verify_store` checks for nothing between records, so a
    run in a thread would hold `close()` (and SIGTERM) until it ended. In a child process it also
    leaves this process' GIL to the page and the sampler. The child is this Python with this `mqlite`
    (`sys.path` passed on), started per run (some 0.2 s), read-only like the in-process check, and
    reaped by the request that started it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._abandoned = False

    def run(self, source: Source) -> dict[str, Any]:
        """`POST /api/verify`: `verify_store` in the child; `ConflictError` while a run is going,
        `IllegalStateError` once abandoned, `MQClientError` over the wire (the files are out of reach)."""
        local = source.local
        if local is None:
            raise MQClientError(f"verify reads the store's files; this dashboard reaches {source.broker.path} over "
                                "the wire: run `mqlite verify PATH` where the files are")
        with self._lock:
            if self._abandoned:
                raise IllegalStateError("the dashboard is closing")
            if self._child is not None:
                raise ConflictError("a verify is running already: wait for its answer")
            package_root = str(Path(__file__).resolve().parents[2])  # this mqlite, wherever it was imported from
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH"))
                                                               if p)}
            self._child = child = subprocess.Popen(
                [sys.executable, "-c", "from mqlite.dashboard.health import _child_main; _child_main()",
                 local.path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            out, err = child.communicate()
        finally:
            with self._lock:
                self._child = None
        if self._abandoned:
            raise IllegalStateError(f"verify of {local.path} abandoned: the dashboard is closing")
        if child.returncode != 0:
            raise MQLiteError(f"verify of {local.path} failed (exit {child.returncode}): "
                                    f"{err.strip().splitlines()[-1] if err.strip() else 'no message'}")
        answer: dict[str, Any] = json.loads(out)
        return answer

    def abandon(self) -> None:
        """End a running verify at once (the dashboard closes); later runs are refused."""
        with self._lock:
            self._abandoned = True
            if self._child is not None:
                self._child.kill()  # its request thread reaps it and answers


def _child_main() -> None:
    """The verify child: `_verify_json(argv[1])` as one JSON line on stdout."""
    print(json.dumps(_verify_json(sys.argv[1])))
