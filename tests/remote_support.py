"""Running client tests over the wire too: a test marked `@over_the_wire` runs once on the local
`Broker` and once on a `RemoteBroker` connected to that broker served in this process.

The test module's `broker` fixture reads the parameter (`request.param`, "local" when absent) and
hands what `reached(kind, broker)` yields to the test: the broker itself, or a connection to it.
Semantics are the same by contract (the broker port), so the assertions are too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import mqlite

@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    """Every mqlite thread a test started (connections, servers, clients) is gone when it ends."""
    yield
    leaked = sorted(t.name for t in threading.enumerate() if t.name.startswith("mqlite-"))
    assert not leaked, f"mqlite threads alive after the test: {leaked}"


#: The broker each live connection made by `reached` reaches (by the connection's id).
_SERVED: dict[int, mqlite.Broker] = {}

#: Parametrize a test's `broker` fixture over the embedded broker and a connection to it.
over_the_wire = pytest.mark.parametrize("broker", ["local", "remote"], indirect=True)


def kind_of(request: pytest.FixtureRequest) -> str:
    """"local" or "remote": the parameter `over_the_wire` gave the `broker` fixture (local without one)."""
    return str(getattr(request, "param", "local"))


@contextmanager
def reached(kind: str, broker: mqlite.Broker) -> Iterator[Any]:
    """`broker` itself ("local"), or a `RemoteBroker` connected to it served on a loopback port ("remote")."""
    if kind == "local":
        yield broker
        return
    server = broker.serve("127.0.0.1:0")
    remote = mqlite.connect(server.address)
    _SERVED[id(remote)] = broker
    try:
        yield remote
    finally:
        del _SERVED[id(remote)]
        remote.close()
        server.close()


def local(broker: Any) -> mqlite.Broker:
    """The embedded broker behind `broker` (itself, or the one a `reached` connection is served by):
    a test reads the store back through it."""
    return _SERVED.get(id(broker), broker)
