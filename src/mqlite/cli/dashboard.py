"""`mqlite dashboard [PATH | -n HOST:PORT] [--listen HOST:PORT] [--write] [--interval SECONDS] [--allow-host NAME]`:
the web dashboard."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from ..broker import Broker
from ..broker import open as open_broker
from ..dashboard import DEFAULT_INTERVAL, MIN_CLI_INTERVAL
from ..errors import ConfigError, StoreLockedError
from ..remoting.address import parse_address
from ..remoting.remote import RemoteBroker
from .context import CommandError, Context, UsageError, lock_holder
from .output import Report

__all__ = ["dashboard", "interval_arg", "listen_arg", "host_arg", "DEFAULT_INTERVAL"]


def interval_arg(text: str) -> float:
    """argparse type: seconds between two samples, from 0.1 (below, sampling costs a core and the chart's
    history spans too little) to 3600."""
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not MIN_CLI_INTERVAL <= value <= 3600:
        raise argparse.ArgumentTypeError(f"bad interval {text!r}: give seconds, from {MIN_CLI_INTERVAL:g} to 3600")
    return value


def host_arg(text: str) -> str:
    """argparse type: a host name (or IP address) the page may also be reached by, e.g. a reverse proxy's."""
    from ..dashboard.server import allowed_host

    try:
        return allowed_host(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def listen_arg(text: str) -> str:
    """argparse type: `HOST:PORT` to listen on (`[v6]:port` for IPv6; port 0 picks a free one)."""
    try:
        parse_address(text, allow_port_0=True)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _writer(ctx: Context) -> Broker:
    try:
        return open_broker(ctx.path)
    except StoreLockedError as exc:
        raise CommandError(f"{ctx.path} is held by a live writer ({lock_holder(exc)}); --write needs the store to "
                           "itself: drop --write to watch it read-only, or serve it from that process (Broker.serve, "
                           "mqlite serve) and run the dashboard with -n HOST:PORT") from None


def dashboard(ctx: Context, args: argparse.Namespace) -> Report:
    """Serve a web dashboard of the store (or of a serving broker, with -n) until SIGINT or SIGTERM.

    Prints its URL (first line of stdout), then serves in the foreground: topics, queues,
    consumer groups and their lag over time, message search by key, id, queue offset or time,
    traces, dead letters and store health, with Prometheus metrics at /metrics.
    PATH is opened read-only, beside a live writer; --write opens it as the writer (refused
    while another process holds it) and allows re-sending dead letters, as -n does.
    Loopback by default; the dashboard has no login, so another --listen address shows the
    store to everyone who can reach it (a warning says so). --allow-host NAME (repeatable)
    accepts requests for NAME too, e.g. the public name of a reverse proxy in front.
    The first SIGINT or SIGTERM stops it (a running verify is abandoned); a second one while
    it closes ends the process at once.
    """
    from ..dashboard.server import Dashboard  # here: other commands do not pay for the HTTP modules

    if getattr(args, "json", False):
        raise UsageError("--json: the dashboard prints its URL and serves; its JSON is the API (docs/dashboard.md)")
    if ctx.address is not None and args.write:
        raise UsageError("--write is for a store PATH; over -n the serving process writes, and re-sending is on")
    stop = threading.Event()
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        for sig, handler in previous.items():  # a second signal while closing acts as it did before us
            signal.signal(sig, handler)

    previous.update({sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)})
    try:
        own = _writer(ctx) if args.write else None
        try:
            broker = own if own is not None else ctx.admin()
            assert isinstance(broker, Broker | RemoteBroker)  # what Context.admin opens
            with Dashboard(broker, args.listen, interval=args.interval,
                           writable=args.write or ctx.address is not None,
                           allow_hosts=args.allow_hosts or ()) as board:
                print(board.url, flush=True)
                print(f"mqlite dashboard: {board.url} shows {ctx.address or ctx.path} (pid {os.getpid()}, "
                      f"{'re-sending dead letters allowed' if board.writable else 'read-only'}); SIGINT or SIGTERM "
                      "stops", file=sys.stderr, flush=True)
                if not board.loopback:
                    print(f"mqlite dashboard: warning: {board.address} is reachable from other machines and the "
                          "dashboard has no login: anyone who reaches it reads every message", file=sys.stderr,
                          flush=True)
                while not stop.wait(1.0):
                    pass
        finally:
            if own is not None:
                own.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return Report(rows=())
