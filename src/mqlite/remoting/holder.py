"""Reaching the process that holds a store: `mqlite.open(path)` and clients given a path, from elsewhere.

A store has one writer process. When another process opens the same path,
the lock refuses it (`StoreLockedError`); if the holder serves the store
(`Broker.serve`, `mqlite serve`), it recorded its address beside the lock
(`registry.holder_address`), and the second process connects there instead.
Clients given a path in such a process share one connection per store, closed
with its last user, as clients given a path share one local `Broker`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..broker import Broker
from ..broker import open as open_broker
from ..clock import Clock
from ..errors import IllegalStateError, MQClientError, RemotingError, StoreLockedError
from .registry import holder_address
from .remote import RemoteBroker, connect

__all__ = ["open_store", "connect_to_holder"]

_SHARED: dict[str, RemoteBroker] = {}
_SHARED_LOCK = threading.Lock()


def open_store(path: str | os.PathLike[str], *, read_only: bool = False, clock: Clock | None = None,
               **config: Any) -> Broker | RemoteBroker:
    """`mqlite.open`: the store's `Broker`, or a `RemoteBroker` to the process holding it when that one serves.

    Settings and `clock` apply only when this process opens the store; a
    connection uses the holder's (a `clock` cannot cross processes, so with one
    the lock error stands). Without a serving holder: `StoreLockedError`, as before.
    """
    try:
        return open_broker(path, read_only=read_only, clock=clock, **config)
    except StoreLockedError as exc:
        if exc.pid == os.getpid() or clock is not None:
            raise  # this process holds it (share that Broker), or the caller needs its own clock
        address = holder_address(os.fspath(path))
        if address is None:
            raise
        return _connect(os.fspath(path), address, exc.pid)


def connect_to_holder(path: str) -> RemoteBroker:
    """The connector `Broker.acquire` uses for a store another process holds: one shared connection per path.

    Raises `StoreLockedError` when the holder does not serve the store.
    """
    address = holder_address(path)
    if address is None:
        raise StoreLockedError(f"{path} is held by another process that does not serve it; serve it there "
                               "(broker.serve(...) or mqlite serve) or stop that process", None)
    with _SHARED_LOCK:
        shared = _SHARED.get(path)
        if shared is not None and shared.address == address:
            try:
                return shared.share()
            except IllegalStateError:
                pass  # closing or closed: a new connection
        remote = _connect(path, address, None).share()
        _SHARED[path] = remote
        return remote


def _connect(path: str, address: str, pid: int | None) -> RemoteBroker:
    """`connect(address)`; a holder that refuses (ACL) or does not answer is still a held store."""
    try:
        return connect(address)
    except (RemotingError, MQClientError) as exc:
        raise StoreLockedError(f"{path} is held by another process, which serves it at {address} but the "
                               f"connection failed ({exc}); for a server with ACL use mqlite.connect({address!r}, "
                               "access_key=..., secret_key=...)", pid) from exc


def _forget_in_child() -> None:
    """A forked child must not write on its parent's sockets: it connects anew."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    _SHARED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
