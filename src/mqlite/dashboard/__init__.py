"""A local web dashboard for a store or a serving broker: `mqlite dashboard PATH`, or `Dashboard` in-process.

Pages for topics, consumer groups and their lag over time, message search and
detail, traces, dead letters (with re-send where the dashboard may write) and
store health, from a single page (`static/`, no CDN) polling JSON routes; the
contract, the security rules and why the standard library serves it are in
docs/dashboard.md.

Layout: `server` (`Dashboard`: HTTP, request checks, static files, the sampler
thread), `api` (one method per JSON route), `source` (the broker behind it, its
lock and modes), `history` (samples and the bounded chart history), `messages`
(message JSON and the searches), `health` (store files and verify).

>>> import mqlite, tempfile
>>> from mqlite.dashboard import Dashboard
>>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
...     with Dashboard(broker, "127.0.0.1:0", interval=1.0) as dashboard:
...         dashboard.url.startswith("http://127.0.0.1:")
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Dashboard", "DEFAULT_INTERVAL", "DEFAULT_HISTORY", "MIN_INTERVAL", "MIN_CLI_INTERVAL"]

#: Seconds between two sampling rounds, and the rounds the charts keep (20 minutes at 2 s).
DEFAULT_INTERVAL = 2.0
DEFAULT_HISTORY = 600
#: The shortest interval `Dashboard` takes (tests sample fast), and the command's (below it the sampler
#: costs a core and the history spans too little to chart).
MIN_INTERVAL = 0.01
MIN_CLI_INTERVAL = 0.1

if TYPE_CHECKING:
    from .server import Dashboard


def __getattr__(name: str) -> Any:
    """`Dashboard` on first use: the command line imports this package for its defaults, and the HTTP
    server's modules (http.server, email) cost some 30 ms that other commands need not pay."""
    if name == "Dashboard":
        from .server import Dashboard

        return Dashboard
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
