"""The mqlite exception tree.

One root (`MQLiteError`) and a few leaves named for what the caller can do about
them. Expected outcomes (no message yet, offset too small) are status values
elsewhere, never exceptions. Every message says what was wrong and how to fix it.
"""

from __future__ import annotations

import errno
import os

__all__ = [
    "MQLiteError",
    "MQClientError",
    "FilterError",
    "ConfigError",
    "IllegalStateError",
    "StoreLockedError",
    "StoreCorruptedError",
    "MessageNotFoundError",
    "SendTimeoutError",
    "RemotingError",
    "ProtocolError",
    "DiskFullError",
    "disk_full_error",
    "disk_used_ratio",
]


class MQLiteError(Exception):
    """Base of every exception mqlite raises on purpose."""


class MQClientError(MQLiteError, ValueError):
    """Bad input from the caller, refused before anything was stored."""


class FilterError(MQClientError):
    """A tag or SQL92 filter expression that cannot be parsed."""


class ConfigError(MQClientError):
    """An unknown, invalid or conflicting configuration setting."""


class IllegalStateError(MQLiteError, RuntimeError):
    """An object used in a state that does not allow it (closed, not started)."""


class StoreLockedError(MQLiteError):
    """Another process holds the store's writer lock."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class StoreCorruptedError(MQLiteError):
    """A store file is damaged in a way recovery cannot repair on its own."""


class MessageNotFoundError(MQLiteError, KeyError):
    """A message looked up by id, key or offset does not exist."""

    def __str__(self) -> str:
        # KeyError quotes its argument; a readable sentence is better here.
        return str(self.args[0]) if self.args else ""


class SendTimeoutError(MQLiteError, TimeoutError):
    """A send did not complete within its timeout."""


class RemotingError(MQLiteError, ConnectionError):
    """A server cannot be reached, a connection broke, or a remote request timed out (sends keep
    `SendTimeoutError`)."""


class ProtocolError(MQLiteError):
    """Bytes that are not a well-formed RocketMQ remoting frame (malformed, truncated or oversized).

    The connection that sent them is closed; other connections are not affected.
    """


class DiskFullError(MQLiteError, OSError):
    """The disk holding the store is full (or fuller than `disk_space_warning_level_ratio`).

    Nothing of the refused write was stored; writes succeed again once space is
    freed. `errno` is `ENOSPC`; `path` names the file or directory that could not
    grow and `used_ratio` how full its disk was (None when unknown).
    """

    def __init__(self, message: str, *, path: str | None = None, used_ratio: float | None = None) -> None:
        super().__init__(errno.ENOSPC, message)
        self.path = path
        self.used_ratio = used_ratio

    def __str__(self) -> str:
        # OSError would print "[Errno 28] ..."; the sentence alone reads better.
        return str(self.strerror)

    def __reduce__(self) -> tuple[object, ...]:
        # OSError pickles its (errno, strerror) args; rebuild with the keywords instead.
        return _rebuild_disk_full, (self.strerror, self.path, self.used_ratio)


def _rebuild_disk_full(message: str, path: str | None, used_ratio: float | None) -> DiskFullError:
    return DiskFullError(message, path=path, used_ratio=used_ratio)


def disk_used_ratio(path: str) -> float:
    """The used fraction of the disk holding `path`: used / (used + available), as `df` and
    RocketMQ's `UtilAll.getDiskPartitionSpaceUsedPercent` count it (blocks kept for root excluded).

    One `statvfs`; 0.0 when the file system reports no size.
    """
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    available = st.f_bavail * st.f_frsize
    return used / (used + available) if used + available > 0 else 0.0


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def disk_full_error(path: str, doing: str, *, limit: float | None = None) -> DiskFullError:
    """A `DiskFullError` for `doing` (what could not be written) at `path`, saying how full its disk
    is, the `disk_space_warning_level_ratio` (`limit`, when that is the reason) and the fix."""
    where = path if os.path.isdir(path) else os.path.dirname(path) or "."
    try:
        st = os.statvfs(where)
        ratio: float | None = disk_used_ratio(where)
        state = f"{ratio:.1%} used, {_mib(st.f_bavail * st.f_frsize)} free of {_mib(st.f_blocks * st.f_frsize)}"
    except OSError:
        ratio, state = None, "its usage could not be read"
    if limit is None:
        reason = f"no space left on the disk holding {where} ({state})"
    else:
        reason = (f"the disk holding {where} is fuller ({state}) than disk_space_warning_level_ratio "
                  f"{limit:g}, above which the store refuses writes as RocketMQ does")
    return DiskFullError(
        f"{doing} refused: {reason}; nothing was written. Free space on that disk (delete other files, or "
        f"old messages: a lower file_reserved_time deletes commit-log segments sooner) and writes succeed again",
        path=path, used_ratio=ratio)
