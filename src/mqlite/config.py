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
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError, MQClientError, StoreCorruptedError, disk_full_error

__all__ = ["StoreConfig", "FORMAT_SETTINGS", "DEFAULT_DELAY_LEVELS", "parse_delay_levels", "write_json_atomic", "read_json",
           "file_signature", "load_json_file", "resolve_config", "store_config_path", "check_int", "check_seconds",
           "MAX_MESSAGE_SIZE_LIMIT", "JAVA_INT_MAX", "check_store_path"]

log = logging.getLogger("mqlite")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
CQ_UNIT = 20  # ConsumeQueue unit size; consumequeue.py asserts its struct agrees

_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "bool": bool, "str": str}

JAVA_INT_MAX = (1 << 31) - 1
#: A record's TOTALSIZE is a Java int: the body and its header (properties up to 32 KiB) must fit.
MAX_MESSAGE_SIZE_LIMIT = JAVA_INT_MAX - (1 << 16)
#: The index file's byte size (header, slots, entries) is a Java int in RocketMQ.
_INDEX_HEADER, _INDEX_SLOT, _INDEX_ENTRY = 40, 4, 20

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


def check_int(name: str, value: Any, low: int, high: int, *,
              error: type[MQClientError] = MQClientError) -> int:
    """`value` if it is an int (not a bool) in [low, high]; else `error` naming the option.

    >>> check_int("async_thread_nums", 0, 1, 1024)
    Traceback (most recent call last):
    mqlite.errors.MQClientError: async_thread_nums must be an int from 1 to 1024, got 0
    """
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise error(f"{name} must be an int from {low} to {high}, got {value!r}")
    return value


def check_seconds(name: str, value: Any, *, positive: bool = False,
                  error: type[MQClientError] = MQClientError) -> float:
    """`value` as float seconds if it is a finite number >= 0 (> 0 with `positive`); else `error`.

    NaN and infinity are refused: a wait of NaN never ends and never times out.
    """
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        bound = "number of seconds > 0" if positive else "non-negative number of seconds"
        raise error(f"{name} must be a finite {bound}, got {value!r}")
    return float(value)


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
        # Sizes and positions are Java ints in RocketMQ's files (mappedFileSize, TOTALSIZE, index positions).
        for name, low, high in (("commitlog_file_size", 4096, JAVA_INT_MAX),
                                ("consumequeue_file_size", 1, JAVA_INT_MAX - CQ_UNIT),  # rounded up to whole units
                                ("max_message_size", 1, MAX_MESSAGE_SIZE_LIMIT),
                                ("max_hash_slot_num", 1, JAVA_INT_MAX),
                                ("max_index_num", 2, JAVA_INT_MAX),  # entry 0 is never used
                                ("max_msgs_num_batch", 1, JAVA_INT_MAX),
                                ("default_topic_queue_nums", 1, 1024),
                                ("transaction_check_max", 1, JAVA_INT_MAX),
                                ("disk_max_used_space_ratio", 1, 100),  # percent
                                ("delete_file_batch_max", 1, JAVA_INT_MAX),
                                ("flush_commitlog_least_pages", 0, JAVA_INT_MAX),
                                ("flush_consume_queue_least_pages", 0, JAVA_INT_MAX)):
            check_int(name, getattr(self, name), low, high, error=ConfigError)
        index_size = (_INDEX_HEADER + self.max_hash_slot_num * _INDEX_SLOT
                      + self.max_index_num * _INDEX_ENTRY)
        if index_size > JAVA_INT_MAX:
            raise ConfigError(f"an index file of max_hash_slot_num={self.max_hash_slot_num} and max_index_num="
                              f"{self.max_index_num} would be {index_size} bytes; RocketMQ's limit is "
                              f"{JAVA_INT_MAX}: lower them")
        for name in ("disk_space_warning_level_ratio", "disk_space_clean_forcibly_ratio"):
            ratio = getattr(self, name)
            if not (math.isfinite(ratio) and 0 < ratio <= 1):
                raise ConfigError(f"{name} is a fraction of the disk: a number in (0, 1], got {ratio!r}")
        for name in ("sync_flush_timeout", "flush_interval_commitlog", "clean_resource_interval",
                     "transaction_timeout", "transaction_check_interval", "flush_interval_consume_queue",
                     "flush_consumer_offset_interval", "flush_delay_offset_interval"):
            check_seconds(name, getattr(self, name), positive=True, error=ConfigError)
        for name in ("flush_commitlog_thorough_interval", "flush_consume_queue_thorough_interval"):
            check_seconds(name, getattr(self, name), error=ConfigError)  # 0: every flush round is thorough
        if not math.isfinite(self.file_reserved_time) or self.file_reserved_time < 0:
            raise ConfigError(f"file_reserved_time must be a finite number of hours >= 0, got "
                              f"{self.file_reserved_time!r}")
        self.delay_levels_ms  # validates the level string
        self.delete_hours  # validates delete_when
        if self.consumequeue_file_size % CQ_UNIT:
            # RocketMQ rounds the consume-queue file size up to whole units.
            size = -(-self.consumequeue_file_size // CQ_UNIT) * CQ_UNIT
            object.__setattr__(self, "consumequeue_file_size", size)

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


def file_signature(path: str) -> tuple[int, int, int] | None:
    """What tells one version of a file from the next: inode (`write_json_atomic` renames a new file in),
    size and modification time; None when it is missing. One `stat`: how a reader notices that another
    process rewrote a file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def write_json_atomic(path: str, document: Any) -> None:
    """Write JSON durably: temp file, fsync, keep the old file as `.bak`, rename.

    RocketMQ's `ConfigManager.persist` keeps `<file>.bak`; loaders fall back to it.
    """
    tmp = path + ".tmp"
    for name in (tmp, path, path + ".bak"):
        _move_directory_aside(name)
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


def _move_directory_aside(path: str) -> None:
    """A directory where a config file belongs (damage `load_json_file` read past) is renamed
    `<path>.damaged[N]`, kept for inspection, so the file can be written again."""
    if not os.path.isdir(path) or os.path.islink(path):
        return
    aside, n = path + ".damaged", 0
    while os.path.lexists(aside):
        n += 1
        aside = f"{path}.damaged{n}"
    os.replace(path, aside)
    log.warning("%s was a directory where a file belongs; moved it to %s", path, aside)


def read_json(path: str) -> Any | None:
    """Read a JSON file, falling back to `<path>.bak` when missing, empty or corrupt."""
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            continue
    return None


# fastjson (a RocketMQ broker's files) writes integer map keys bare (`{0:12}`); quoted, `json` reads them.
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def load_json_file(path: str, *, fix: str, check: Callable[[dict[str, Any]], None] | None = None,
                   lenient: bool = False) -> dict[str, Any] | None:
    """The JSON object in a store's config file, or in its `.bak` (RocketMQ's `ConfigManager.load`,
    `loadBak`); None when neither exists.

    A damaged file (a directory in its place, unreadable, not UTF-8, not JSON, empty, not an
    object, or refused by `check`, which raises `ValueError` saying what is wrong) is passed
    over for `.bak`, with a warning; when no candidate reads, `StoreCorruptedError` names each
    file, what is wrong with it and `fix`. `lenient` also reads fastjson's bare integer keys.
    Does I/O: one or two small reads.
    """
    problems: list[str] = []
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        except OSError as exc:  # IsADirectoryError, EACCES, EIO
            problems.append(f"{candidate} cannot be read ({exc.strerror or exc})")
            continue
        try:
            document = _parse_json(raw, lenient)
            if not isinstance(document, dict):
                raise ValueError(f"it holds a JSON {type(document).__name__}, not an object")
            if check is not None:
                check(document)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            problems.append(f"{candidate} is damaged ({_first_line(exc)})")
            continue
        if problems:
            log.warning("%s; using %s instead", "; ".join(problems), candidate)
        elif candidate != path:
            log.warning("%s is missing; using %s (a write was cut between its two renames)", path, candidate)
        return document
    if problems:
        raise StoreCorruptedError(f"{'; '.join(problems)}: {fix}")
    return None


def _parse_json(raw: bytes, lenient: bool) -> Any:
    if not raw.strip():
        raise ValueError("the file is empty")
    text = raw.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        if not lenient:
            raise
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _check_stored_settings(document: dict[str, Any]) -> None:
    """Stored settings must make a valid `StoreConfig` on their own (a hand edit may break one)."""
    names = {f.name for f in dataclasses.fields(StoreConfig)}
    try:
        StoreConfig.from_kwargs({k: v for k, v in document.items() if k in names})
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def check_store_path(path: object, *, create: bool) -> str:
    """`path` as a str naming a store directory (made when `create` and missing); `MQClientError` for a
    path that is no directory (a regular file, a parent that is a file) or cannot be made."""
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        raise MQClientError(f"the store path must be a str or os.PathLike, got {type(path).__name__}") from None
    if not isinstance(text, str) or not text:
        raise MQClientError(f"the store path must be a non-empty str, got {path!r}")
    existing = os.path.abspath(text)  # the path, or the nearest ancestor that exists
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if os.path.lexists(existing) and not os.path.isdir(existing):
        where = "" if existing == os.path.abspath(text) else f" ({existing} is)"
        raise MQClientError(f"{text} is a file, not a store directory{where}: pass a directory (new or a store's)")
    if create:
        try:
            os.makedirs(text, exist_ok=True)
        except OSError as exc:
            raise MQClientError(f"cannot make the store directory {text}: {exc.strerror or exc}") from None
    return text


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
    document = load_json_file(store_config_path(root), check=_check_stored_settings,
                              fix="delete it (and its .bak) to open with the settings you pass; the file "
                                  "sizes are read off the store's files")
    if document is not None:
        # A format setting missing from the file (a hand edit) is read off the files, as without one.
        return requested.merged_with_stored({**(inferred or {}), **document}, explicit)
    if inferred:
        # Sizes read off a broker's files are a best guess (an index file's size does
        # not say how it splits into slots and entries): explicit settings win.
        return StoreConfig.from_kwargs({**inferred, **explicit})
    return requested
