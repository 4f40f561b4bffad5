"""`host:port` addresses, as the server binds them and the client dials them (`[v6]:port` for IPv6)."""

from __future__ import annotations

import re

from ..errors import ConfigError

__all__ = ["parse_address"]

_ADDRESS = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.%]*:[0-9A-Fa-f:.%]*)\]|(?P<host>[^\s:\[\]]+)):(?P<port>[0-9]{1,5})")


def parse_address(address: str, *, allow_port_0: bool = False) -> tuple[str, int]:
    """`"host:port"` (or `"[v6]:port"`) -> (host, port); `ConfigError` (an `MQClientError`) for anything else.

    The port is ASCII digits in 1..65535 (0 too with `allow_port_0`: a server binding any free port);
    an IPv6 host must be bracketed, since `::1:9876` could end in its port or not.

    >>> parse_address("[::1]:9876"), parse_address("localhost:0", allow_port_0=True)
    (('::1', 9876), ('localhost', 0))
    """
    low = 0 if allow_port_0 else 1
    match = _ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if match is None or not low <= int(match["port"]) <= 65535:
        raise ConfigError(f"an address is HOST:PORT (or [IPv6]:PORT) with a port in {low}..65535, for example "
                          f"127.0.0.1:9876; got {address!r}")
    return match["v6"] or match["host"], int(match["port"])
