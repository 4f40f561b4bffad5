"""What the package wires into the broker layer at `import mqlite`, before that layer is imported.

The broker (layer L2) cannot import the remoting adapter (L4), yet `acquire` must reach a store another
process holds through it, and `Broker.serve` must build its servers. `mqlite/__init__.py` stores both
callables here; `mqlite.broker` takes them from here when it is first imported (and
`set_remote_connector` / `set_server_factory` replace them later). They live in this module of their own,
not in `mqlite.broker`, so `import mqlite` can install them without importing the broker, the store and
numpy: the package imports those on first use of a name that needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["remote_connector", "server_factory"]

#: `connector(path) -> BrokerPort`: how `mqlite.broker.acquire` reaches a store another process holds.
remote_connector: Callable[[str], Any] | None = None
#: `factory(broker, address, **options) -> Serving`: what `Broker.serve` builds servers with.
server_factory: Callable[..., Any] | None = None
