"""Where a consumer keeps its offsets: on the broker (clustering) or in a local file (broadcasting).

RocketMQ's `RemoteBrokerOffsetStore` keeps a client table and sends it to the
broker every 5 s; here updates go straight to the broker (`commit_offset`: in
one process a dict store, no I/O) and the broker's offset-persist service
writes `config/consumerOffset.json` every 5 s and on close.
`LocalFileOffsetStore` keeps broadcasting offsets per client instance, because
every member consumes every queue: `<dir>/<client_id>/<group>/offsets.json`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from ..config import load_json_file, write_json_atomic
from ..errors import IllegalStateError, MQClientError
from ..message import MessageQueue
from ..topics import check_group

if TYPE_CHECKING:
    from ..port import BrokerPort

__all__ = ["OffsetStore", "RemoteBrokerOffsetStore", "LocalFileOffsetStore", "local_offsets_path", "check_client_id"]

log = logging.getLogger("mqlite.consumer")


class OffsetStore(Protocol):
    """The client's `OffsetStore`."""

    def read(self, mq: MessageQueue) -> int:
        """The stored next offset of `mq`, or -1 when there is none."""
        ...

    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set `mq`'s next offset (ignored when `increase_only` and it would go back)."""
        ...

    def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        """Make the offsets durable (all queues when None)."""
        ...

    def remove(self, mq: MessageQueue) -> None:
        """Forget the client-side entry of a queue this consumer no longer owns."""
        ...


class RemoteBrokerOffsetStore:
    """Clustering offsets: the broker's consumer-offset table, shared by the whole group."""

    def __init__(self, broker: BrokerPort, group: str) -> None:
        if broker.read_only:
            raise IllegalStateError("consumers need a writable broker: its consumer offsets live there")
        self._broker = broker
        self._group = group

    def read(self, mq: MessageQueue) -> int:
        """The group's committed offset of `mq`, or -1."""
        return self._broker.query_offset(self._group, mq)

    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Commit to the broker's table (in memory; persisted by the broker)."""
        if offset >= 0:
            self._broker.commit_offset(self._group, mq, offset, increase_only=increase_only)

    def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        """Nothing to send: the broker's own service writes the table every 5 s and on close."""

    def remove(self, mq: MessageQueue) -> None:
        """The broker keeps the group's offset for the next owner; nothing to forget."""


_MAX_CLIENT_ID_LENGTH = 255


def check_client_id(client_id: object) -> str:
    """A client id usable as one directory name: a non-blank str of at most 255 printable
    characters, without a path separator, and not `.` or `..`; else `MQClientError`.

    RocketMQ's ids (`ip@instanceName`, mqlite's `ip@pid#n`) pass.

    >>> check_client_id("10.0.0.1@4242#0")
    '10.0.0.1@4242#0'
    """
    if not isinstance(client_id, str) or not client_id.strip():
        raise MQClientError(f"client_id must be a non-blank string, got {client_id!r}")
    if (len(client_id) > _MAX_CLIENT_ID_LENGTH or not client_id.isprintable() or client_id in (".", "..")
            or "/" in client_id or "\\" in client_id or (os.altsep and os.altsep in client_id)):
        raise MQClientError(f"client_id {client_id[:64]!r} must be at most {_MAX_CLIENT_ID_LENGTH} printable "
                            "characters without / or \\, and not . or .. (it names the directory of a "
                            "broadcasting consumer's offsets)")
    return client_id


def local_offsets_path(directory: str | os.PathLike[str], client_id: str, group: str, *,
                       within: str | os.PathLike[str] | None = None) -> str:
    """`<dir>/<client_id>/<group>/offsets.json` (RocketMQ: `~/.rocketmq_offsets/<clientId>/<group>/offsets.json`).

    The names are checked (`check_client_id`, `check_group`) and the result must lie inside
    `within` (default: `directory`) once resolved: no id or group ever names a file elsewhere,
    nor does a link planted in the tree (`MQClientError`). A directory inside a store passes the
    store as `within`, so a link in the directory's own place is caught too.
    """
    base = os.path.realpath(os.fspath(directory))
    bound = base if within is None else os.path.realpath(os.fspath(within))
    path = os.path.join(base, check_client_id(client_id), check_group(group), "offsets.json")
    if os.path.commonpath([bound, os.path.realpath(path)]) != bound:  # a symlink planted in the tree
        raise MQClientError(f"the offsets file of client {client_id!r}, group {group!r} would resolve to "
                            f"{os.path.realpath(path)}, outside {bound}; remove the link under {bound}")
    return path


def _check_rows(document: dict[str, Any]) -> None:
    if not isinstance(document.get("offsetTable", []), list):
        raise ValueError("offsetTable is not a list of rows")


class LocalFileOffsetStore:
    """Broadcasting offsets of one client instance, in a JSON file written atomically."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._table: dict[MessageQueue, int] = {}
        self._dirty = False
        document = load_json_file(path, check=_check_rows,
                                  fix="delete it (and its .bak): this consumer instance then starts where its "
                                      "consume_from_where says")
        for row in document.get("offsetTable", []) if document is not None else []:
            try:
                mq = MessageQueue(str(row["topic"]), str(row["brokerName"]), int(row["queueId"]))
                self._table[mq] = int(row["offset"])
            except (KeyError, TypeError, ValueError):
                # A damaged row costs that queue its offset, not the consumer its start.
                log.warning("%s: ignoring the damaged row %r", path, row)

    def read(self, mq: MessageQueue) -> int:
        """The stored next offset of `mq`, or -1."""
        with self._lock:
            return self._table.get(mq, -1)

    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set `mq`'s offset in memory (persisted by `persist`)."""
        if offset < 0:
            return
        with self._lock:
            current = self._table.get(mq)
            if current == offset or (increase_only and current is not None and current > offset):
                return
            self._table[mq] = offset
            self._dirty = True

    def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        """Write the table when it changed."""
        with self._lock:
            if not self._dirty:
                return
            rows = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
                    for mq, offset in sorted(self._table.items())]
            self._dirty = False
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            write_json_atomic(self.path, {"offsetTable": rows})

    def remove(self, mq: MessageQueue) -> None:
        """Keep the entry, as RocketMQ's `LocalFileOffsetStore.removeOffset` does.

        A broadcasting member owns every queue: a rebalance must not forget an
        offset loaded from the file, nor a shutdown empty the file.
        """
