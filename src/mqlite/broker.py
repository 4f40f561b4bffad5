"""`Broker`: what `mqlite.open` returns; owns the store and answers admin questions.

This layer will also own topics, consumer offsets, delay and transaction
services; today it carries the storage part of the admin surface of API.md.
A read-only broker (`mqlite.open(path, read_only=True)`) runs over a
`StoreReader`: no lock, no threads, safe beside a live writer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .errors import IllegalStateError, MessageNotFoundError, MQClientError
from .message import MessageExt, MessageQueue, decode_offset_msg_id
from .reader import StoreReader
from .store import MessageStore, open_store_config
from .storebase import StoreFiles

__all__ = ["Broker", "QueueStatus", "open"]

log = logging.getLogger("mqlite")


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's offsets (`TopicOffset` of mqadmin's topicStatus)."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


class Broker:
    """An embedded RocketMQ broker over one directory. Use `mqlite.open()` to get one.

    Thread-safe. `close()` is idempotent and also runs at the end of a `with` block.
    """

    def __init__(self, store: StoreFiles) -> None:
        self._store = store
        self._closed = False

    # -- properties ---------------------------------------------------------------------------------
    @property
    def store(self) -> StoreFiles:
        """The underlying store (`MessageStore`, or `StoreReader` when read-only)."""
        return self._store

    @property
    def path(self) -> str:
        """The store directory."""
        return self._store.root

    @property
    def broker_name(self) -> str:
        """The name in every `MessageQueue` of this broker."""
        return self._store.broker_name

    @property
    def read_only(self) -> bool:
        """True for a reader opened with `read_only=True`."""
        return self._store.read_only

    def _check(self) -> StoreFiles:
        if self._closed:
            raise IllegalStateError(f"the broker at {self.path} is closed")
        return self._store

    # -- offsets ------------------------------------------------------------------------------------------
    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of `topic`: min and max offsets and the store time of the newest message."""
        store = self._check()
        if store.read_only:
            store.refresh()  # type: ignore[attr-defined]
        rows = []
        for queue_id in store.queue_ids(topic):
            high = store.max_offset(topic, queue_id)
            last = store.store_timestamp(topic, queue_id, high - 1) if high > 0 else 0
            rows.append(QueueStatus(queue_id, store.min_offset(topic, queue_id), high, max(last, 0)))
        return rows

    def min_offset(self, mq: MessageQueue) -> int:
        """Smallest readable offset of the queue."""
        return self._check().min_offset(mq.topic, mq.queue_id)

    def max_offset(self, mq: MessageQueue) -> int:
        """Next offset to be written in the queue."""
        return self._check().max_offset(mq.topic, mq.queue_id)

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        """First offset whose message was stored at or after `timestamp` (epoch ms)."""
        return self._check().offset_by_time(mq.topic, mq.queue_id, timestamp)

    # -- messages -------------------------------------------------------------------------------------------
    def view_message(self, msg_id: str) -> MessageExt:
        """A message by `offset_msg_id` or by `msg_id` (client unique id); `MessageNotFoundError` if none."""
        store = self._check()
        if not isinstance(msg_id, str) or not msg_id:
            raise MQClientError("msg_id must be a non-empty string")
        try:
            _, _, offset = decode_offset_msg_id(msg_id)
        except MQClientError:
            offset = -1
        if offset >= 0:
            try:
                stored = store.look_message_by_offset(offset)
                if stored.offset_msg_id == msg_id.upper():
                    return stored
            except MessageNotFoundError:
                pass
        for topic in store.topics():
            for msg in store.query_message(topic, msg_id, 1):
                if msg.msg_id == msg_id:
                    return msg
        raise MessageNotFoundError(f"no message with id {msg_id!r} in {self.path}")

    def query_message(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """Messages of `topic` with key (or unique id) `key`, stored in [begin, end], newest first."""
        return self._check().query_message(topic, key, max_num, begin, end)

    def query_message_by_offset(self, topic: str, queue_id: int, offset: int) -> MessageExt:
        """The message at a queue offset; `MessageNotFoundError` when absent."""
        result = self._check().get_messages(topic, queue_id, offset, 1)
        if not result.messages:
            raise MessageNotFoundError(
                f"no message at {topic}/{queue_id} offset {offset} "
                f"(readable offsets are {result.min_offset}..{result.max_offset - 1})")
        return result.messages[0]

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Ordered shutdown: services, final flush, checkpoint, unlock. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._store.close()  # type: ignore[attr-defined]

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"<mqlite.Broker {self.path!r} {mode}{' closed' if self._closed else ''}>"


def open(path: str, *, read_only: bool = False, **config: Any) -> Broker:  # noqa: A001 - mirrors mqlite.open
    """Open (creating if needed) the store at `path` and return its `Broker`.

    Writers take the directory's lock, recover after a crash and start the
    background services. `read_only=True` takes no lock and starts no thread.
    Unknown or invalid settings raise `ConfigError`; see `StoreConfig` for them all.
    """
    import os

    path = os.fspath(path)
    if read_only:
        return Broker(StoreReader(path, **config))
    return Broker(MessageStore(path, open_store_config(path, config)))
