"""Serving a store over Apache RocketMQ's remoting protocol (layer L4: adapters).

`protocol` is the wire (frames, codes, body codecs, ACL signing); `server` runs the
asyncio loop that answers RocketMQ's clients and mqlite's own `RemoteBroker`; the
handler modules translate one concern's requests into calls on the `Broker`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..broker import Broker
    from .server import Server

__all__ = ["serve_broker"]


def serve_broker(broker: Broker, address: str, **options: Any) -> Server:
    """`Broker.serve`'s factory: a `Server` for `broker` (imports the server, asyncio and all, on first use)."""
    from .server import Server  # noqa: PLC0415 - `import mqlite` stays free of asyncio until something serves

    return Server(broker, address, **options)
