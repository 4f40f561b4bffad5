"""Store configuration: one frozen dataclass, validated at construction.

Defaults are RocketMQ's (`MessageStoreConfig`, `BrokerConfig`), converted to
mqlite's units: durations in float seconds, sizes in bytes. The settings are
written to `config/store.json` beside the data. Settings that shape the files
(segment and index sizes) are fixed when the store is created: a reopen that
asks for a different value is refused, naming both values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import json
import os
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, disk_full_error

__all__ = ["StoreConfig", "FORMAT_SETTINGS", "DEFAULT_DELAY_LEVELS", "parse_delay_levels", "write_json_atomic", "read_json", "resolve_config", "store_config_path"]

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
CQ_UNIT = 20  # ConsumeQueue unit size; consumequeue.py asserts its struct agrees

_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "bool": bool, "str": str}

#: Settings that decide file sizes and layout; they cannot change after creation.
FORMAT_SETTINGS = ("commitlog_file_size", "consumequeue_file_size", "max_hash_slot_num", "max_index_num")


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """Parse RocketMQ's `messageDelayLevel` ("1s 5s 1m 2h ...") into milliseconds per level.

    >>> parse_delay_levels("500ms 1s 2m")
    (500, 1000, 120000)
    """
    levels = []
    for word in spec.split():
        unit = "ms" if word.endswith("ms") else word[-1:]
        number = word[: -len(unit)]
        if unit not in _UNIT_MS or not number.isdigit():
            raise ConfigError(
                f"message_delay_level: cannot read {word!r}; write levels like '1s 5s 10m 2h' (units ms, s, m, h, d)"
            )
        levels.append(int(number) * _UNIT_MS[unit])
    if not levels:
        raise ConfigError("message_delay_level is empty; give at least one level such as '1s'")
    return tuple(levels)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """Every setting of a store. Build with keywords; all have RocketMQ's defaults.

    >>> StoreConfig(flush_disk_type="SYNC_FLUSH").sync_flush_timeout
    5.0
    """

    flush_disk_type: str = "ASYNC_FLUSH"
    commitlog_file_size: int = 1 << 30
    consumequeue_file_size: int = 300_000 * CQ_UNIT
    max_message_size: int = 4 * 1024 * 1024
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # clean-up (CleanCommitLogService)
    file_reserved_time: float = 72.0  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: float = 0.90
    disk_space_clean_forcibly_ratio: float = 0.85
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: float = 10.0
    delete_file_batch_max: int = 10
    # flush (FlushRealTimeService / GroupCommitService)
    flush_interval_commitlog: float = 0.5
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval: float = 10.0
    flush_interval_consume_queue: float = 1.0
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: float = 60.0
    sync_flush_timeout: float = 5.0
    check_crc_on_recover: bool = True
    # index
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_msgs_num_batch: int = 64
    # broker-level settings (used by the layers above the store)
    broker_name: str = "mqlite"
    auto_create_topic: bool = True
    default_topic_queue_nums: int = 4
    transaction_timeout: float = 6.0
    transaction_check_interval: float = 30.0
    transaction_check_max: int = 15
    flush_consumer_offset_interval: float = 5.0
    flush_delay_offset_interval: float = 10.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            expected = _FIELD_TYPES[str(field.type)]
            if isinstance(value, bool) and field.type != "bool" or not isinstance(value, expected):
                raise ConfigError(f"{field.name} must be {field.type}, got {value!r}")
        if self.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ConfigError(f"flush_disk_type is {self.flush_disk_type!r}; use 'ASYNC_FLUSH' or 'SYNC_FLUSH'")
        self._check_min("commitlog_file_size", 4096)
        self._check_min("consumequeue_file_size", 1)
        self._check_min("max_message_size", 1)
        self._check_min("max_hash_slot_num", 1)
        self._check_min("max_index_num", 2)
        self._check_min("max_msgs_num_batch", 1)
        self._check_min("default_topic_queue_nums", 1)
        self._check_min("transaction_check_max", 1)
        for name in ("sync_flush_timeout", "flush_interval_commitlog", "clean_resource_interval",
                     "transaction_timeout", "transaction_check_interval", "flush_interval_consume_queue"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.file_reserved_time < 0:
            raise ConfigError(f"file_reserved_time must be >= 0 hours, got {self.file_reserved_time!r}")
        self.delay_levels_ms  # validates the level string
        self.delete_hours  # validates delete_when
        if self.consumequeue_file_size % CQ_UNIT:
            # RocketMQ rounds the consume-queue file size up to whole units.
            size = -(-self.consumequeue_file_size // CQ_UNIT) * CQ_UNIT
            object.__setattr__(self, "consumequeue_file_size", size)

    def _check_min(self, name: str, low: int) -> None:
        if getattr(self, name) < low:
            raise ConfigError(f"{name} must be >= {low}, got {getattr(self, name)!r}")

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """Delay per level in ms; level n is index n - 1."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def delete_hours(self) -> frozenset[int]:
        """Hours of the day (local time) when expired commit-log files are deleted."""
        hours = set()
        for part in self.delete_when.split(";"):
            part = part.strip()
            if not part.isdigit() or not 0 <= int(part) <= 23:
                raise ConfigError(f"delete_when is {self.delete_when!r}; use hours like '04' or '04;16'")
            hours.add(int(part))
        return frozenset(hours)

    @property
    def sync_flush(self) -> bool:
        """True under SYNC_FLUSH."""
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def cq_units_per_file(self) -> int:
        """Consume-queue units per file."""
        return self.consumequeue_file_size // CQ_UNIT

    # -- construction and persistence -------------------------------------------
    @classmethod
    def from_kwargs(cls, settings: Mapping[str, Any]) -> StoreConfig:
        """Build from user keywords, refusing unknown names with a suggestion."""
        names = {f.name for f in dataclasses.fields(cls)}
        for key in settings:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown setting {key!r}{hint}")
        return cls(**settings)

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return dataclasses.asdict(self)

    def merged_with_stored(self, stored: Mapping[str, Any], explicit: Mapping[str, Any]) -> StoreConfig:
        """Combine stored settings with this process's explicit keywords.

        Stored values are kept unless the caller set them explicitly; a
        format-shaping setting that differs from the stored one is refused.
        """
        names = {f.name for f in dataclasses.fields(self)}
        merged = {k: v for k, v in stored.items() if k in names}  # ignore settings of other versions
        for key in FORMAT_SETTINGS:
            if key in explicit and key in stored and stored[key] != getattr(self, key):
                raise ConfigError(
                    f"{key} is {stored[key]} in this store but {getattr(self, key)} was asked for; "
                    f"files are laid out with the first value, so open without {key}= or use a new directory"
                )
        merged.update(explicit)
        return StoreConfig.from_kwargs(merged)


def write_json_atomic(path: str, document: Any) -> None:
    """Write JSON durably: temp file, fsync, keep the old file as `.bak`, rename.

    RocketMQ's `ConfigManager.persist` keeps `<file>.bak`; loaders fall back to it.
    """
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # the old file stays as it was
        raise disk_full_error(path, f"writing {path}") from None
    if os.path.exists(path):
        os.replace(path, path + ".bak")
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: str) -> Any | None:
    """Read a JSON file, falling back to `<path>.bak` when missing, empty or corrupt."""
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            continue
    return None


def store_config_path(root: str) -> str:
    """Where a store keeps its settings."""
    return os.path.join(root, "config", "store.json")


def resolve_config(root: str, explicit: Mapping[str, Any], inferred: Mapping[str, Any] | None = None) -> StoreConfig:
    """The settings for opening `root`: stored ones, overridden by `explicit` keywords.

    `inferred` holds format settings read off the files of a store that has no
    `config/store.json` (one written by a RocketMQ broker); they count as stored.
    A format setting in `explicit` that differs from the stored one raises `ConfigError`.
    """
    requested = StoreConfig.from_kwargs(explicit)  # validates the caller's keywords first
    document = read_json(store_config_path(root))
    if isinstance(document, dict):
        return requested.merged_with_stored(document, explicit)
    if inferred:
        # Sizes read off a broker's files are a best guess (an index file's size does
        # not say how it splits into slots and entries): explicit settings win.
        return StoreConfig.from_kwargs({**inferred, **explicit})
    return requested
