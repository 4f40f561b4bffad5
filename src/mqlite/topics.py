"""The topic table: RocketMQ's `TopicConfigManager`, persisted in `config/topics.json`.

One `TopicConfig` per topic (read/write queue counts, permissions, order flag),
written in the broker's JSON shape so a RocketMQ broker reads the table back:

    {"topicConfigTable": {"orders": {"topicName": "orders", "readQueueNums": 4,
      "writeQueueNums": 4, "perm": 6, "topicFilterType": "SINGLE_TAG",
      "topicSysFlag": 0, "order": false}}, "dataVersion": {...}}

The topic-name rules of RocketMQ's client `Validators` and `TopicValidator` are in `mqlite.validators`
(re-exported here).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from .clock import SYSTEM_CLOCK, Clock
from .config import file_signature, load_json_file, write_json_atomic
from .errors import MQClientError
from .validators import (  # the name rules live in L0; re-exported here, where callers found them first
    MAX_TOPIC_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    SYSTEM_TOPICS,
    check_group,
    check_topic,
    is_system_topic,
)

__all__ = [
    "TopicConfig",
    "TopicTable",
    "PERM_READ",
    "PERM_WRITE",
    "PERM_INHERIT",
    "check_topic",
    "check_group",
    "is_system_topic",
    "SYSTEM_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "MAX_TOPIC_LENGTH",
]

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
log = logging.getLogger("mqlite")

#: Queue counts of the system topics mqlite creates on first use.
_SYSTEM_QUEUES = {"RMQ_SYS_TRANS_HALF_TOPIC": 1, "RMQ_SYS_TRANS_OP_HALF_TOPIC": 1, "TRANS_CHECK_MAX_TIME_TOPIC": 1,
                  "rmq_sys_wheel_timer": 1, "RMQ_SYS_TRACE_TOPIC": 1}


def _check_stored_name(name: object) -> None:
    """A topic name read from `topics.json` is safe as a directory name.

    Looser than `check_topic`: a RocketMQ broker's own table holds topics a client may not
    create (one named after the broker or its host, dots included), and they must load.
    """
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise MQClientError(f"topic {name!r} cannot name a directory")


def _check_topics_document(document: dict[str, Any]) -> None:
    """The shape `TopicTable` reads: `topicConfigTable` an object, `dataVersion.counter` an int."""
    if not isinstance(document.get("topicConfigTable") or {}, dict):
        raise ValueError("topicConfigTable is not an object")
    version = document.get("dataVersion") or {}
    counter = version.get("counter", 0) if isinstance(version, dict) else None
    if not isinstance(counter, int) or isinstance(counter, bool):
        raise ValueError(f"dataVersion.counter is not an int: {counter!r}")


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    """One topic's settings (`TopicConfig`)."""

    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def writable(self) -> bool:
        """True when messages may be sent to the topic."""
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        """True when the topic may be consumed."""
        return bool(self.perm & PERM_READ)

    def to_json(self) -> dict[str, Any]:
        """The broker's JSON field names."""
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TopicConfig:
        """Read the broker's JSON form (unknown fields ignored)."""
        return cls(topic_name=str(doc["topicName"]), read_queue_nums=int(doc.get("readQueueNums", 16)),
                   write_queue_nums=int(doc.get("writeQueueNums", 16)), perm=int(doc.get("perm", 6)),
                   topic_filter_type=str(doc.get("topicFilterType", "SINGLE_TAG")),
                   topic_sys_flag=int(doc.get("topicSysFlag", 0)), order=bool(doc.get("order", False)))


class TopicTable:
    """The topics of a broker. Thread-safe; every change is persisted at once (changes are rare)."""

    def __init__(self, root: str, *, read_only: bool = False, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = os.path.join(root, "config", "topics.json")
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.Lock()
        #: Changes with every create, delete or resize (lets clients cache queue lists). A plain
        #: attribute, not a property: every send reads it (`Broker.routes_version`).
        self.version = 0
        self._seen = file_signature(self.path)  # read-only: the file as last read (`reload`)
        self._topics: dict[str, TopicConfig] = self._read()

    def _read(self) -> dict[str, TopicConfig]:
        """The table in the file (sets `version` from it); empty when there is none."""
        topics: dict[str, TopicConfig] = {}
        document = load_json_file(self.path, check=_check_topics_document,
                                  fix="delete it (and its .bak): topics are learned back from the consume "
                                      "queues, with 4 queues or as many as found and read-write permission")
        if document is not None:
            for name, doc in (document.get("topicConfigTable") or {}).items():
                try:
                    _check_stored_name(name)  # a topic names directories: never a path
                    topics[name] = TopicConfig.from_json(doc)
                except (KeyError, TypeError, ValueError, AttributeError):  # MQClientError is a ValueError
                    # The queues on disk still say the topic exists: it is learned back from them.
                    log.warning("%s: ignoring the damaged entry of topic %r: %r", self.path, name, doc)
            self.version = max(self.version, int((document.get("dataVersion") or {}).get("counter", 0) or 0))
        return topics

    def reload(self) -> bool:
        """Read-only: take the table as the writer last saved it, when the file changed since it was read
        (a topic created or deleted in the writer's process). True when it was re-read; topics learned
        from the disk are dropped then (learn them again). Cost: one `stat` when nothing changed."""
        if not self.read_only:
            return False
        seen = file_signature(self.path)
        if seen == self._seen:
            return False
        self._seen = seen
        topics = self._read()
        with self._lock:
            self._topics = topics
            self.version += 1
        return True

    # -- reads ----------------------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self._topics.get(topic)

    def names(self) -> list[str]:
        """Every topic in the table, sorted."""
        return sorted(self._topics)

    def __contains__(self, topic: object) -> bool:
        return topic in self._topics

    # -- changes ------------------------------------------------------------------------------------------
    def create(self, topic: str, queue_nums: int, *, perm: int = PERM_READ | PERM_WRITE, order: bool = False,
               system: bool = False, read_queue_nums: int | None = None,
               write_queue_nums: int | None = None) -> TopicConfig:
        """Create or update a topic (mqadmin `updateTopic`); user topics are validated. `queue_nums` read and
        write queues, unless `read_queue_nums` / `write_queue_nums` say otherwise."""
        if not system:
            check_topic(topic)
            if is_system_topic(topic):
                raise MQClientError(f"topic {topic!r} is a RocketMQ system topic; choose another name")
        read = queue_nums if read_queue_nums is None else read_queue_nums
        write = queue_nums if write_queue_nums is None else write_queue_nums
        for name, value in (("queue_nums", queue_nums), ("read_queue_nums", read), ("write_queue_nums", write)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1024:
                raise MQClientError(f"{name} must be an int from 1 to 1024, got {value!r}")
        if not isinstance(order, bool):
            raise MQClientError(f"order must be True or False, got {order!r}")
        config = TopicConfig(topic, read, write, perm, order=order)
        with self._lock:
            if self._topics.get(topic) == config:
                return config
            self._topics[topic] = config
            self._persist_locked()
        return config

    def ensure_system(self, topic: str, queue_nums: int | None = None) -> TopicConfig:
        """The config of a system or retry topic, created on first use."""
        config = self._topics.get(topic)
        if config is not None:
            return config
        return self.create(topic, queue_nums or _SYSTEM_QUEUES.get(topic, 1), system=True)

    def delete(self, topic: str) -> bool:
        """Remove a topic from the table; False when it was not there."""
        with self._lock:
            if self._topics.pop(topic, None) is None:
                return False
            self._persist_locked()
        return True

    def learn(self, topics: Iterable[tuple[str, int]]) -> None:
        """Add topics found on disk (consume queues) that the table lacks: (topic, queue count)."""
        with self._lock:
            added = False
            for topic, count in topics:
                if topic not in self._topics:
                    self._topics[topic] = TopicConfig(topic, count, count)
                    added = True
            if added:
                self._persist_locked()

    def _persist_locked(self) -> None:
        self.version += 1
        if self.read_only:
            return
        document = {"topicConfigTable": {n: c.to_json() for n, c in sorted(self._topics.items())},
                    "dataVersion": {"counter": self.version, "timestamp": self._clock.now_ms()}}
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        write_json_atomic(self.path, document)
