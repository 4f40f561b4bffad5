"""Helpers for tests that point real RocketMQ clients (ali-ons, rocketmq-client-cpp) at `mqlite serve`.

`serving(path)` runs `python -m mqlite serve PATH --listen 127.0.0.1:0` in a subprocess, as a user
would, and yields the address it prints; `run_lines(argv, ...)` runs a client program that prints
one JSON object per line and returns those objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

SRC = str(Path(__file__).resolve().parent.parent / "src")
#: Delay levels 1-4 of one second: a first retry (level 3) comes back after 1 s, not RocketMQ's 10 s.
QUICK_RETRY_LEVELS = "1s 1s 1s 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


@contextlib.contextmanager
def serving(path: str, *args: str, startup: float = 60.0, stop: float = 60.0) -> Iterator[str]:
    """Serve the store at `path` from another process for the `with` block; yields "host:port".

    Extra `args` go to the command line (`--set NAME=VALUE`, ACL options). On leaving the block the
    server gets SIGTERM and must exit 0 within `stop` seconds (graceful stop: the store is closed,
    so the test may open it afterwards).
    """
    cmd = [sys.executable, "-m", "mqlite", "serve", path, "--listen", "127.0.0.1:0", *args]
    # stderr to a file: a pipe nobody reads while the test runs could fill up and stall the server.
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=_env(), text=True)
        try:
            yield _first_address(proc, log, startup)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=stop)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise AssertionError(f"`mqlite serve` did not stop within {stop} s of SIGTERM; stderr:\n{_tail(log)}")
        if proc.returncode != 0:
            raise AssertionError(f"`mqlite serve` exited with {proc.returncode}; stderr:\n{_tail(log)}")


def _tail(log: IO[str]) -> str:
    log.seek(0)
    return log.read()[-3000:]


def _first_address(proc: subprocess.Popen[str], log: IO[str], timeout: float) -> str:
    """The "host:port" of the first line `mqlite serve` prints (it prints the address it listens on)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"`mqlite serve` printed no address within {timeout} s")
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"`mqlite serve` exited ({proc.wait()}) before printing its address; "
                                     f"stderr:\n{_tail(log)}")
            found = re.search(r"\b(\d{1,3}(?:\.\d{1,3}){3}:\d{1,5})\b", line)
            if found:
                return found.group(1)


def run_lines(argv: Sequence[str], *, timeout: float = 120.0, cwd: str | None = None,
              env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """Run a client program; its exit status, the JSON objects it printed one per line, and its stderr."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env if env is not None else _env())
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr
