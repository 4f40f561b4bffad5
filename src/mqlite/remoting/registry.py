"""Where the process holding a store serves it: `<store>/serving`, beside the `lock` file.

The holder writes `{"pid": ..., "address": "host:port"}` there while it serves and removes it when
it stops. The lock file itself keeps only the pid (other tools, and `writer_alive`, read it as a
number), so the address lives next to it. A reader believes the file only while that pid is alive
and a live writer holds the store's lock: a file left by a killed holder names nobody.
"""

from __future__ import annotations

import json
import os

from ..store import writer_alive

__all__ = ["SERVING_FILE", "holder_address", "record_address", "clear_address"]

SERVING_FILE = "serving"


def _path(store_path: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(store_path), SERVING_FILE)


def record_address(store_path: str | os.PathLike[str], address: str) -> None:
    """Record that this process serves the store at `address` (atomically replaces an older record)."""
    path = _path(store_path)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "address": address}, f)
    os.replace(tmp, path)


def clear_address(store_path: str | os.PathLike[str], address: str) -> None:
    """Remove the record if it is this process's record of `address` (another server's stays)."""
    path = _path(store_path)
    if _read(path) == (os.getpid(), address):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _read(path: str) -> tuple[int, str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    pid, address = record.get("pid"), record.get("address")
    if type(pid) is not int or pid <= 0 or not isinstance(address, str) or not address:
        return None
    return pid, address


def holder_address(store_path: str | os.PathLike[str]) -> str | None:
    """The `host:port` where the process holding the store at `store_path` serves it, or None when
    nobody serves it (not held, held without `serve()`, or the recorded holder is gone).

    Reads one small file and checks two pids; never touches the lock file's locks.
    """
    record = _read(_path(store_path))
    if record is None:
        return None
    pid, address = record
    if pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, another user's
    return address if writer_alive(os.fspath(store_path)) else None
