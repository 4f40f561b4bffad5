"""The mqlite exception tree.

One root (`MQLiteError`) and a few leaves named for what the caller can do about
them. Expected outcomes (no message yet, offset too small) are status values
elsewhere, never exceptions. Every message says what was wrong and how to fix it.
"""

from __future__ import annotations

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
