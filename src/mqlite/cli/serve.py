"""`mqlite serve PATH [--listen HOST:PORT] [--set NAME=VALUE ...]`: a serving broker in the foreground."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any

from ..broker import open as open_broker
from ..errors import StoreLockedError
from .context import CommandError, Context, UsageError
from .output import Report

__all__ = ["serve", "parse_setting"]


def parse_setting(text: str) -> tuple[str, Any]:
    """`NAME=VALUE` -> (name, value): `true`/`false` as bools, integers and decimals as numbers, else text."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"--set takes NAME=VALUE (a store setting such as flush_disk_type=SYNC_FLUSH), got {text!r}")
    value = value.strip()
    if value.lower() in ("true", "false"):
        return name.strip(), value.lower() == "true"
    for kind in (int, float):
        try:
            return name.strip(), kind(value)
        except ValueError:
            pass
    return name.strip(), value


def _acl(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            acl = json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--acl-file {path}: {exc}") from None
    if not isinstance(acl, dict):
        raise UsageError(f"--acl-file {path} must hold a JSON object {{\"access key\": \"secret key\", ...}}")
    return acl


def serve(ctx: Context, args: argparse.Namespace) -> Report:
    """Serve the store over Apache RocketMQ's remoting protocol until SIGINT or SIGTERM.

    Prints the address it listens on (first line of stdout), then serves in the foreground:
    RocketMQ's clients connect with namesrvAddr set to it, mqlite's with mqlite.connect(address) or
    mqlite.open(PATH) from another process. On SIGINT/SIGTERM it stops accepting, finishes the
    requests in flight, closes the connections and closes the broker in order. Loopback by default;
    another address needs --acl-file (RocketMQ ACL signatures) or --allow-anonymous.
    """
    settings = dict(parse_setting(s) for s in args.settings or ())
    acl = _acl(args.acl_file)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            broker = open_broker(ctx.path, **settings)
        except StoreLockedError as exc:
            raise CommandError(f"{ctx.path} is held by process {exc.pid or '?'}; serve it from there "
                               "(Broker.serve) or stop that process first") from None
        with broker:
            server = broker.serve(args.listen, acl=acl, allow_anonymous=args.allow_anonymous)
            print(server.address, flush=True)
            print(f"mqlite serve: serving {ctx.path} on {server.address} (pid {os.getpid()}); "
                  "SIGINT or SIGTERM stops", file=sys.stderr, flush=True)
            while not stop.wait(1.0):
                pass
            server.close()  # broker.close() would too; first, so the log says which step is slow
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return Report(rows=())
