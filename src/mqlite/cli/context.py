"""The store a command runs on, opened the way the command needs it.

Read commands call `Context.reader()`: a read-only broker (no lock, no
threads), safe beside a live writer in another process. Commands that change
the store call `Context.writer()`, which takes the writer lock; when a live
process holds it the command stops with one line and exit status 1.

With `-n HOST:PORT` (mqadmin's name server flag) the commands in
`REMOTE_COMMANDS` run over a connection to the process serving the store
(`mqlite.connect`): they call `Context.admin()`, typed `admin.AdminSurface`
(what `Broker` and `RemoteBroker` both offer); the others read the store's files.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from ..admin import AdminSurface, offset_table
from ..broker import Broker
from ..broker import open as open_broker
from ..errors import IllegalStateError, StoreLockedError
from ..remoting.remote import RemoteBroker, connect
from .output import Progress

__all__ = ["UsageError", "CommandError", "Context", "find_store", "lock_holder", "STORE_ENV", "REMOTE_COMMANDS"]

#: Commands that work over `-n HOST:PORT`: they use only the admin surface a `RemoteBroker` shares with
#: `Broker` (topics, offsets, messages by id, key and offset, queue reads, sends, resets, traces, dead-letter
#: re-sends) and the committed offset table (`Context.offset_table()`, `GET_ALL_CONSUMER_OFFSET` over the
#: wire). The others read files a connection cannot reach (storeInfo reads the store's files, verify checks them).
REMOTE_COMMANDS = frozenset({
    "topicList", "topicStatus", "updateTopic", "deleteTopic", "resetOffsetByTime", "skipAccumulatedMessage",
    "queryMsgById", "queryMsgByKey", "queryMsgByOffset", "printMsg", "sendMessage", "consumeMessage", "queryDlq",
    "consumerProgress", "statsAll", "queryMsgTraceById", "resendDlq", "dashboard",
})

#: The environment variable naming the store when neither PATH nor --store does.
STORE_ENV = "MQLITE_STORE"
#: What any store has once opened: a writer records its settings, a RocketMQ broker has a commit log.
_STORE_MARKERS = (os.path.join("config", "store.json"), "commitlog", "consumequeue", "checkpoint")


class UsageError(Exception):
    """A bad command line: exit status 2."""


class CommandError(Exception):
    """The command could not do its job on this store: exit status 1."""


def find_store(*given: str | None, create: bool = False) -> str:
    """The store directory PATH and `--store` name (the same one when both do), else `$MQLITE_STORE`.

    `UsageError` when they name different directories, or none fits. With `create` (a command that
    opens the store for writing and may start a new one: `serve`), a missing or empty directory fits.
    """
    named = [g for g in given if g]
    if len({os.path.realpath(g) for g in named}) > 1:
        raise UsageError(f"two stores given ({' and '.join(named)}): name one, as PATH or with --store")
    chosen = named[0] if named else os.environ.get(STORE_ENV)
    if not chosen:
        raise UsageError(f"no store given: pass PATH, --store PATH or set {STORE_ENV}")
    if create and (not os.path.exists(chosen) or (os.path.isdir(chosen) and not os.listdir(chosen))):
        return str(chosen)  # mqlite.open creates the store there
    if not os.path.isdir(chosen):
        raise UsageError(f"{chosen} is not a directory (no store there)")
    if not any(os.path.exists(os.path.join(chosen, marker)) for marker in _STORE_MARKERS):
        raise UsageError(f"{chosen} is not a store (it has no commitlog, consumequeue, checkpoint or "
                         "config/store.json); create one with mqlite.open(path)")
    return str(chosen)


def lock_holder(exc: StoreLockedError) -> str:
    """Who holds a store `exc` says is locked, for a one-line refusal: "process N", "this process" or
    "another process" (no pid recorded)."""
    if exc.pid == os.getpid():
        return "this process"
    return f"process {exc.pid}" if exc.pid else "another process"


class Context:
    """One command's run: its name, the store path, where output goes, and the broker it opened.

    Opens at most one broker, on first use, and closes it in `close()`.
    """

    def __init__(self, command: str, path: str, out: TextIO | None = None, *, address: str | None = None) -> None:
        self.command = command
        self.path = path
        self.address = address
        self.out = out if out is not None else sys.stdout
        self._broker: Broker | None = None
        self._remote: RemoteBroker | None = None
        if address is not None and command not in REMOTE_COMMANDS:
            raise UsageError(f"{command} reads the store's files and cannot run over -n {address}; give the store "
                             f"PATH instead (commands that run over -n: {', '.join(sorted(REMOTE_COMMANDS))})")

    def admin(self, *, write: bool = False) -> AdminSurface:
        """The broker of a command in `REMOTE_COMMANDS`: with `-n` the connection to the serving process
        (`mqlite.connect`), else the store opened read-only, or for writing with `write` (`writer()`).
        Typed as what both offer, so mypy checks that these commands use nothing a connection lacks."""
        if self.address is None:
            return self.writer() if write else self.reader()
        if self._remote is None:
            self._remote = connect(self.address)
        return self._remote

    def offset_table(self) -> dict[str, dict[int, int]]:
        """The committed offsets (`admin.OffsetTable`): with `-n` the serving process's live table
        (`GET_ALL_CONSUMER_OFFSET`), else the one the writer last persisted (or its live one, when open)."""
        if self.address is None:
            return offset_table(self._broker if self._broker is not None else self.reader())
        self.admin()
        assert self._remote is not None  # admin() connected
        return self._remote.consumer_offset_table()

    def reader(self) -> Broker:
        """The store opened read-only (sees what the writer had dispatched when it opened)."""
        self._files_only()
        if self._broker is None:
            self._broker = open_broker(self.path, read_only=True)
        return self._broker

    def _files_only(self) -> None:
        if self.address is not None:  # the constructor refused such commands: a command calls the wrong method
            raise IllegalStateError(f"{self.command} runs over -n {self.address}: it must use Context.admin()")

    def writer(self) -> Broker:
        """The store opened for writing; `CommandError` when a live process holds the writer lock."""
        self._files_only()
        if self._broker is None:
            try:
                self._broker = open_broker(self.path)
            except StoreLockedError as exc:
                raise CommandError(f"{self.path} is locked by a live writer ({lock_holder(exc)}); {self.command} "
                                   "changes the store and needs the writer lock: stop that process or make the "
                                   "change through its Broker") from None
        return self._broker

    def progress(self, label: str) -> Progress:
        """A progress line on stderr (drawn only when stderr is a terminal)."""
        return Progress(f"{self.command} {label}".strip())

    def close(self) -> None:
        """Close the broker or the connection, if one was opened."""
        if self._broker is not None:
            self._broker.close()
            self._broker = None
        if self._remote is not None:
            self._remote.close()
            self._remote = None
