"""Spark writer: `df.write.format("mqlite")` and the streaming sink, all or nothing per job.

    df.write.format("mqlite").mode("append").option("topic", "orders").save("./mq")
    df.writeStream.format("mqlite").option("checkpointLocation", ck).start("./mq")

Columns, matched case-insensitively (others are ignored, as by Spark's Kafka sink): `body`
(binary or string; or `value`) required; `topic` (string; the `topic` option overrides it);
`tags` (string); `keys` (string: RocketMQ's KEYS, keys separated by spaces; or array<string>:
one key each, a key holding a space is refused); `properties` (map<string,string> of user
properties: RocketMQ's reserved names are refused); `queueId` (integer; null or absent: round
robin, a job's rows spread evenly over the topic's queues); `shardingKey` (string: the queue
`SelectMessageQueueByHash` picks, as `Producer.send_orderly`); `flag` (int). Spark's Kafka
columns map to RocketMQ's, so a frame read with `.option("schema", "kafka")` writes back:
`value` is the body, `key` (string or UTF-8 binary) one key (KEYS; no spaces), `headers`
(array<struct<key:string,value:binary>>, values UTF-8) the user properties, `partition` the
queue id; `offset`, `timestamp` and `timestampType` are ignored, as by Kafka's sink. An input
with both columns of a pair (`body`/`value`, `keys`/`key`, `properties`/`headers`,
`queueId`/`partition`) is refused. A stored message is what `Producer.send_batch` would
store: `WAIT=true`, a new `UNIQ_KEY` (the msgId, indexed), the body uncompressed.

Options (names case-insensitive; any other option is refused with `ConfigError`, so a typo
never falls back to a default; a bad value too, naming the option):

| option             | values                                                         | default  |
|--------------------|----------------------------------------------------------------|----------|
| path               | the store directory (`.save(path)` / `.start(path)` set it)    | required |
| topic              | a topic for every row (overrides the `topic` column)           | column   |
| whenLocked         | `fail`, `wait`, `inbox`: when a live process holds the store   | `fail`   |
| lockTimeout        | seconds to wait for the lock (`wait`, or another Spark commit) | 30       |
| producerProperties | `true`, `false`: `false` stores only the row's own properties, no WAIT and no UNIQ_KEY (msgId is then the offset id, nothing indexed unless keys are given) | `true` |
| checkpointLocation | (streaming only) Spark's checkpoint; names the query when its id is unknown | |

How a job writes. Spark runs `write()` in N worker processes at once and `commit()` in yet
another process, so the steps share nothing but files:

1. On the driver (`MqliteBatchWriter(...)`): schema and options are checked; a bad one raises
   `MQClientError` naming the column or option before any task runs.
2. In each task (`write()`): every row is checked with mqlite's own rules (the producer's
   `mqlite.validators.validate_message`: topic, body size, property names, separators and
   sizes; the first bad row fails the task with its column, row and partition) and the rows
   are *staged*: each row's whole commit-log record (with its new `UNIQ_KEY`, its body CRC
   and its index key hashes: `mqlite.inbox.write_chunk`) goes to one file per task in
   `<store>/spark-staging/<job>/`.
   The store is not touched. The per-message work is here, where Spark runs it in parallel.
3. In `commit()`: the staged files are appended by `Broker.append_staged` (the broker's
   ingest entry point) under the store's writer lock (`mqlite.broker.open`): rows routed to
   queues, queue offsets, commit-log offsets and the store time filled in and the records
   copied with numpy, no Python work per message. Every topic and queue is resolved first
   (topics auto-created as a producer would, `queueId`s checked), so a bad queue fails the
   job before anything is stored. Then the staging is removed.
4. `abort()` (a task failed, or commit raised) removes the staging and leaves a tombstone, so a
   task Spark did not stop in time drops its file when it ends; what a killed worker left is
   swept by the next commit.

So a failed job stores nothing. What remains is a failure inside step 3 (disk full, the
committing process killed): the puts done until then stay stored (whole puts of one queue),
and a raised error says how many messages that was.

Next to a live writer. A process holding the store open (`mqlite.open`) holds its lock, so
step 3 cannot take it; `whenLocked` says what then. `fail`: `StoreLockedError` naming the
process, at once (a Java broker's lock too: its lock file names no process); nothing stored. `wait`: retry for `lockTimeout` seconds, then fail. `inbox`: the
staged job is fsynced and renamed, with a manifest, into `<store>/spark-inbox/` and the job
succeeds, its rows readable once appended. Before the hand-off the job is checked as the import
would check it, without the lock: the staged files, the queue counts of existing topics
(`config/topics.json`), `auto_create_topic` for new ones (`config/store.json`); a refusal fails
the job (`MQClientError`), nothing handed over. Whoever holds the lock appends the inbox, oldest
entry first: the live `Broker` itself (its `mqlite-inbox` service, within about a second, and
once more as it closes), or else the next Spark commit, before its own job. A lock held by
another Spark commit is always waited for (up to `lockTimeout`): committers register in
`spark-staging/committers/`. An entry the holder still cannot store whole (its topics changed
after the hand-off, a disk error) is moved to `<store>/spark-inbox/failed/` and logged as an
error by the holder: its rows are not stored; run the job again, then delete the entry.

Streaming: the same per micro-batch (staging `spark-staging/stream-<query>-<batch>-<run>/`), and
the last stored batch id of each query is kept in `<store>/spark-sink/<queryId>.json` (the id
Spark keeps in the checkpoint), so a batch Spark replays after a restart is not stored twice:
exactly once, but for the step-3 window.

Cost (docs/benchmarks.md, 5e): a task spends about 1.2 us a row encoding records (more with a
key per row: about 3 us checking and 4 encoding its own properties); the commit about 0.4 us a
message plus the copy into the commit log, with the key index built from the tasks' hashes.

The staged file format, the inbox and the append are in `mqlite.inbox` (no pyspark there:
the broker imports the inbox with it). This module uses only the public ingest surface:
`write_chunk` in tasks, `check_staged` and `hand_off` for the inbox, `already_committed`,
and `Broker.append_staged` in the commit (tests/test_layers.py holds it to that).
"""

from __future__ import annotations

import gc
import logging
import math
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from mqlite.broker import Broker
from mqlite.broker import open as open_broker
from mqlite.errors import ConfigError, MQClientError, MQLiteError, StoreLockedError
from mqlite.inbox import ROUND_ROBIN, STAGING_DIR, already_committed, check_staged, hand_off, write_chunk
from mqlite.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_WAIT_STORE_MSG_OK,
    RESERVED_PROPERTY_NAMES,
    Message,
    java_string_hash_array,
)
from mqlite.reader import store_config
from mqlite.spark.options import parse_bool
from mqlite.validators import check_send_topic, validate_message

__all__ = ["MqliteBatchWriter", "MqliteStreamWriter", "StagedFiles"]

log = logging.getLogger("mqlite")

_COMMITTERS = "committers"
_TOMBSTONE_SECONDS = 86400.0  # longer than any task of an aborted job can still run
#: A lock holder writes its pid right after it takes the lock: a lock without one for longer is
#: not a committer's (a Java broker's, or a moment's hold that never writes one).
_PID_GRACE = 0.1

#: Every option the writer reads (documented spellings; Spark hands them over lower-cased).
_WRITE_OPTIONS = ("path", "topic", "whenLocked", "lockTimeout", "producerProperties")
_STREAM_OPTIONS = ("checkpointLocation",)
_WHEN_LOCKED = ("fail", "wait", "inbox")
_DEFAULT_LOCK_TIMEOUT = 30.0
_VALIDATION_TOPIC = "mqlite_spark"  # heads are checked apart from topics, under a valid name
_CHECKED = frozenset({_VALIDATION_TOPIC})  # `validate_message` need not check that name again each row


# -- the driver's checks -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Columns:
    """Where each recognised column is in the input (None: absent) and its name there (for errors).

    A Kafka-style column stands in for its RocketMQ one: `key` for `keys` (then `one_key`: a
    single key, string or UTF-8 binary), `headers` for `properties`, `partition` for `queueId`.
    """

    body: str
    body_index: int
    topic: int | None
    tags: int | None
    keys: int | None
    keys_name: str
    one_key: bool
    properties: int | None
    properties_name: str
    queue_id: int | None
    queue_id_name: str
    sharding_key: int | None
    flag: int | None

    @property
    def headers(self) -> bool:
        """True when the properties come from Kafka's `headers` (key/value structs) column."""
        return self.properties_name.lower() == "headers"


@dataclass(frozen=True)
class _Settings:
    """Everything a task or the committer needs; checked on the driver, pickled to the others."""

    path: str
    topic: str | None
    when_locked: str
    lock_timeout: float
    max_message_size: int
    producer_properties: bool
    columns: _Columns


_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


def _find(schema: StructType, name: str) -> int | None:
    lowered = [f.name.lower() for f in schema.fields]
    return lowered.index(name.lower()) if name.lower() in lowered else None


def _check_type(schema: StructType, index: int | None, allowed: Sequence[str], ok: bool) -> None:
    if index is not None and not ok:
        field = schema.fields[index]
        raise MQClientError(f"column {field.name!r} is {field.dataType.simpleString()}; the mqlite writer "
                            f"takes {' or '.join(allowed)} there (cast it, or drop or rename the column)")


def _is(dtype: DataType, *types: type) -> bool:
    return isinstance(dtype, types)


def _one_of(schema: StructType, rocketmq: str, kafka: str, role: str) -> int | None:
    """The index of the RocketMQ-style or the Kafka-style column for one message field; both: refused."""
    first, second = _find(schema, rocketmq), _find(schema, kafka)
    if first is not None and second is not None:
        raise MQClientError(f"the input has both a {rocketmq!r} and a {kafka!r} column; the mqlite writer stores "
                            f"one of them as the message's {role}: drop or rename the other")
    return first if first is not None else second


def _is_header_array(dtype: DataType) -> bool:
    """array<struct<key:string,value:binary or string>>: Spark's Kafka `headers`."""
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dtype.elementType.fields}
    return (set(fields) == {"key", "value"} and _is(fields["key"], StringType)
            and _is(fields["value"], BinaryType, StringType))


def _columns(schema: StructType, topic_option: str | None) -> _Columns:
    """The recognised columns of `schema`, type-checked (`MQClientError` names the column)."""
    body_index = _one_of(schema, "body", "value", "body")
    if body_index is None:
        raise MQClientError(f"the mqlite writer needs a 'body' (or 'value') column of binary or string; "
                            f"the input has {', '.join(schema.fieldNames()) or 'no columns'}")
    fields = schema.fields
    _check_type(schema, body_index, ["binary", "string"], _is(fields[body_index].dataType, BinaryType, StringType))
    index = {name: _find(schema, name) for name in ("topic", "tags", "shardingKey", "flag")}
    index["keys"] = _one_of(schema, "keys", "key", "keys")
    index["properties"] = _one_of(schema, "properties", "headers", "user properties")
    index["queueId"] = _one_of(schema, "queueId", "partition", "queue id")
    dtype = {name: fields[i].dataType for name, i in index.items() if i is not None}
    name = {role: fields[i].name if i is not None else role for role, i in index.items()}
    if index["topic"] is None and topic_option is None:
        raise MQClientError("no topic: add a 'topic' column (string) or .option('topic', ...)")
    _check_type(schema, index["topic"], ["string"], _is(dtype.get("topic", StringType()), StringType))
    _check_type(schema, index["tags"], ["string"], _is(dtype.get("tags", StringType()), StringType))
    keys_type = dtype.get("keys", StringType())
    one_key = name["keys"].lower() == "key"
    if one_key:
        _check_type(schema, index["keys"], ["string", "binary (UTF-8)"], _is(keys_type, StringType, BinaryType))
    else:
        _check_type(schema, index["keys"], ["string", "array<string>"], _is(keys_type, StringType) or (
            isinstance(keys_type, ArrayType) and _is(keys_type.elementType, StringType)))
    props_type = dtype.get("properties", MapType(StringType(), StringType()))
    if name["properties"].lower() == "headers":
        _check_type(schema, index["properties"], ["array<struct<key:string,value:binary>>"],
                    _is_header_array(props_type))
    else:
        _check_type(schema, index["properties"], ["map<string,string>"],
                    isinstance(props_type, MapType) and _is(props_type.keyType, StringType)
                    and _is(props_type.valueType, StringType))
    _check_type(schema, index["queueId"], ["an integer type"], _is(dtype.get("queueId", IntegerType()), *_INTEGRAL))
    _check_type(schema, index["shardingKey"], ["string"], _is(dtype.get("shardingKey", StringType()), StringType))
    _check_type(schema, index["flag"], ["int", "short", "byte"],
                _is(dtype.get("flag", IntegerType()), ByteType, ShortType, IntegerType))
    return _Columns(fields[body_index].name, body_index, index["topic"], index["tags"], index["keys"], name["keys"],
                    one_key, index["properties"], name["properties"], index["queueId"], name["queueId"],
                    index["shardingKey"], index["flag"])


def _check_send_topic(topic: str, where: str) -> str:
    """`Validators.checkTopic` plus the broker's refusal of system topics; the error names `where`."""
    try:
        return check_send_topic(topic)
    except MQClientError as err:
        raise MQClientError(f"{where}: {err}") from None


def _settings(path: str, options: dict[str, str], schema: StructType, overwrite: bool, *,
              streaming: bool = False) -> _Settings:
    """Check a write's path, options and schema on the driver.

    `ConfigError` names a bad or unknown option, `MQClientError` a bad mode or column.
    """
    if overwrite:
        raise MQClientError("the mqlite writer only appends (a RocketMQ log is append-only): "
                            "use .mode('append'), not 'overwrite' or outputMode('complete')")
    opts = {k.lower(): v for k, v in options.items()}
    known = _WRITE_OPTIONS + _STREAM_OPTIONS if streaming else _WRITE_OPTIONS
    unknown = sorted(k for k in opts if k not in (name.lower() for name in known))
    if unknown:
        # A typo (`whenlock`) must not fall back to the default; Spark lower-cases the names.
        raise ConfigError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for "
                          f"the mqlite {'stream ' if streaming else ''}writer; its options are {', '.join(known)}")
    if not path:
        raise ConfigError("no store directory: call .save('/path/to/store') (or .option('path', ...))")
    topic = opts.get("topic")
    if topic is not None:
        try:
            _check_send_topic(topic, "option 'topic'")
        except MQClientError as err:
            raise ConfigError(str(err)) from None
    when_locked = opts.get("whenlocked", "fail").strip().lower()
    if when_locked not in _WHEN_LOCKED:
        raise ConfigError(f"option 'whenLocked' is {opts['whenlocked']!r}; use one of {', '.join(_WHEN_LOCKED)}")
    try:
        lock_timeout = float(opts.get("locktimeout", _DEFAULT_LOCK_TIMEOUT))
    except ValueError:
        lock_timeout = -1.0
    if not 0 <= lock_timeout < math.inf:  # also refuses NaN
        raise ConfigError(f"option 'lockTimeout' is {opts['locktimeout']!r}; give seconds as a number >= 0")
    producer_properties = parse_bool(opts, "producerproperties", True, spelling="'producerProperties'")
    try:  # the limit the committing broker will apply: the store's own setting (or the default)
        max_size = store_config(os.fspath(path)).max_message_size
    except MQLiteError as err:
        raise ConfigError(f"cannot read the settings of the store at {path}: {err}") from None
    return _Settings(os.path.abspath(path), topic, when_locked, lock_timeout, max_size, producer_properties,
                     _columns(schema, topic))


# -- the task side: checking and staging rows -------------------------------------------------------------------
def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _body_array(array: Any) -> Any:
    """The body column as a binary Arrow array (strings are their UTF-8 bytes; no copy)."""
    if pa.types.is_string(array.type):
        return array.cast(pa.binary())
    if pa.types.is_large_string(array.type):
        return array.cast(pa.large_binary())
    return array


def _buffers(array: Any) -> tuple[Any, Any]:
    """(offsets as numpy, data buffer) of a binary array, honouring its slice offset."""
    large = pa.types.is_large_binary(array.type)
    dtype = np.int64 if large else np.int32
    _, offsets, data = array.buffers()
    view = np.frombuffer(offsets, dtype=dtype, count=len(array) + 1, offset=array.offset * dtype().itemsize)
    return view, data


class _Stager:
    """One task's staged file: checks each Arrow batch's rows and appends them as chunks.

    Not thread-safe (one per task). Raises `MQClientError` naming the column and row of the
    first bad value; the file is then left for `abort()` to remove with the job.
    """

    def __init__(self, settings: _Settings, job_dir: str, partition_id: int, attempt: int) -> None:
        self.settings = settings
        self.columns = settings.columns
        self.partition_id = partition_id
        self.job_dir = job_dir
        self.name = f"part-{partition_id:05d}-{attempt}-{uuid.uuid4().hex[:12]}.mqsb"
        self.rows = 0
        self._file: Any = None
        self._heads: dict[tuple[Any, ...], tuple[dict[str, str], dict[str, str], dict[str, str]]] = {}  # per task
        self._topics: set[str] = set()

    def _where(self, column: str, row: int) -> str:
        return f"column {column!r}, row {self.rows + row} of partition {self.partition_id}"

    def add(self, batch: Any) -> None:
        """Check and stage one Arrow record batch."""
        n = batch.num_rows
        if n == 0:
            return
        cols = self.columns
        bodies = self._bodies(batch.column(cols.body_index))
        heads, head_index = self._head_rows(batch)
        routes = self._routes(batch)
        flags = None
        if cols.flag is not None:
            flags = pc.fill_null(batch.column(cols.flag), 0).to_numpy(zero_copy_only=False).astype(">i4")
        born = int(time.time() * 1000)
        for topic, rows in self._topic_groups(batch):
            if rows is None:
                self._write_chunk(topic, born, bodies, heads, head_index, routes, flags)
            else:
                self._write_chunk(topic, born, bodies.take(pa.array(rows)), heads, head_index[rows],
                                  None if routes is None else routes[rows], None if flags is None else flags[rows])
        self.rows += n

    # -- columns ------------------------------------------------------------------------------------------
    def _bodies(self, column: Any) -> Any:
        array = _body_array(column)
        name = self.columns.body
        if array.null_count:
            row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
            raise MQClientError(f"{self._where(name, row)}: the body is null; RocketMQ refuses empty bodies")
        offsets, _ = _buffers(array)
        lengths = np.diff(offsets)
        bad = np.flatnonzero((lengths == 0) | (lengths > self.settings.max_message_size))
        if len(bad):
            row = int(bad[0])
            try:  # the producer's own message for an empty or oversized body
                validate_message(Message(_VALIDATION_TOPIC, array[row].as_py()), self.settings.max_message_size)
            except MQClientError as err:
                raise MQClientError(f"{self._where(name, row)}: {err}") from None
            raise MQClientError(f"{self._where(name, row)}: a body of {lengths[row]} bytes is refused")
        return array

    def _topic_groups(self, batch: Any) -> Iterator[tuple[str, Any]]:
        """(topic, row indices or None for all rows) of the batch."""
        if self.settings.topic is not None:
            yield self.settings.topic, None
            return
        column = batch.column(self.columns.topic)
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise MQClientError(f"{self._where('topic', row)}: the topic is null; "
                                f"fill it or give .option('topic', ...)")
        names = pc.unique(column).to_pylist()
        for name in names:
            if name not in self._topics:
                row = int(np.flatnonzero(pc.equal(column, name).to_numpy(zero_copy_only=False))[0])
                self._topics.add(_check_send_topic(name, self._where("topic", row)))
        if len(names) == 1:
            yield names[0], None
            return
        codes = pc.dictionary_encode(column)
        indices = codes.indices.to_numpy(zero_copy_only=False)
        for code, name in enumerate(codes.dictionary.to_pylist()):
            yield name, np.flatnonzero(indices == code)

    def _head_rows(self, batch: Any) -> tuple[list[dict[str, str]], Any]:
        """The distinct heads (property maps) of the batch and each row's head number.

        A head is checked once per task; with keys that differ per row, each row's map is built
        from its checked (tags, properties) part and checked again by the producer's rules
        (3 us a row, measured; a `Message` built per row took 10).
        """
        cols = self.columns
        n = batch.num_rows
        if cols.tags is None and cols.keys is None and cols.properties is None:
            return [self._base((None, None), 0)[2]], np.zeros(n, dtype=">u4")
        none = [None] * n
        tags = batch.column(cols.tags).to_pylist() if cols.tags is not None else none
        keys = self._keys(batch.column(cols.keys)) if cols.keys is not None else none
        props = batch.column(cols.properties).to_pylist() if cols.properties is not None else none
        if cols.headers:
            props = [self._header_pairs(h, row) if h else None for row, h in enumerate(props)]
        numbers: dict[tuple[Any, ...], int] = {}
        heads: list[dict[str, str]] = []
        index: list[int] = []
        probe = Message(_VALIDATION_TOPIC, b"\0")
        for row, (t, k, p) in enumerate(zip(tags, keys, props)):
            key = (t, tuple(p) if p else None, k or None)
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(heads)
                before, after, head = self._base(key[:2], row)
                if k:
                    head = {**before, PROPERTY_KEYS: k, **after}  # Message's order: TAGS, KEYS, the rest
                    probe.properties = head
                    try:
                        validate_message(probe, self.settings.max_message_size, _CHECKED)
                    except MQClientError as err:
                        raise MQClientError(f"{self._where(cols.keys_name, row)}: {err}") from None
                heads.append(head)
            index.append(number)
        return heads, np.array(index, dtype=">u4")

    def _keys(self, column: Any) -> list[str | None]:
        """Each row's KEYS value (RocketMQ's format: keys joined by spaces) or None.

        A key of an array or of Kafka's one-key `key` column may not hold a space: it would
        read back as several keys. A binary `key` must be UTF-8.
        """
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            self._refuse_spaces(pc.list_flatten(column), pc.list_parent_indices(column).to_numpy())
            # Message.keys: a list is stored space-joined
            return [" ".join(filter(None, k)) if k else None for k in column.to_pylist()]
        if not self.columns.one_key:
            return column.to_pylist()  # already RocketMQ's KEYS format: spaces separate keys
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            try:
                column = column.cast(pa.large_string())  # checks UTF-8
            except pa.ArrowInvalid:
                row = next(i for i, v in enumerate(column.to_pylist()) if v is not None and not _is_utf8(v))
                raise MQClientError(f"{self._where(self.columns.keys_name, row)}: the key is not UTF-8; "
                                    f"RocketMQ keys are strings") from None
        self._refuse_spaces(column, None)
        return column.to_pylist()

    def _refuse_spaces(self, values: Any, rows: Any) -> None:
        """`MQClientError` for the first of `values` (keys; row of each: `rows`, None: their own) with a space."""
        spaced = pc.fill_null(pc.match_substring(values, " "), False).to_numpy(zero_copy_only=False)
        if spaced.any():
            at = int(np.flatnonzero(spaced)[0])
            row = at if rows is None else int(rows[at])
            raise MQClientError(f"{self._where(self.columns.keys_name, row)}: the key {values[at].as_py()!r} "
                                f"holds a space; RocketMQ's KEYS property separates keys with spaces, so it would "
                                f"read back as several keys (replace the space, e.g. with '_')")

    def _header_pairs(self, headers: list[Any], row: int) -> list[tuple[str, Any]]:
        """Kafka headers as user properties: (key, value as UTF-8 text); a null or repeated key is refused.

        A null value is kept here and refused with the properties' own rule (`_base`).
        """
        where = self._where(self.columns.properties_name, row)
        pairs: list[tuple[str, Any]] = []
        for header in headers:
            name = header["key"] if header else None
            if name is None:
                raise MQClientError(f"{where}: a header is null or has a null key")
            if any(name == seen for seen, _ in pairs):
                raise MQClientError(f"{where}: header {name!r} is given twice; a message's properties are a map")
            value = header["value"]
            if isinstance(value, bytes):
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError:
                    raise MQClientError(f"{where}: the value of header {name!r} is not UTF-8 "
                                        f"(RocketMQ properties are strings)") from None
            pairs.append((name, value))
        return pairs

    def _base(self, key: tuple[Any, ...], row: int) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """(the TAGS entry, the other entries, the whole map) of rows with these tags and user
        properties, checked as `Message.put_user_property` and the producer's `Validators` do;
        cached per task."""
        cached = self._heads.get(key)
        if cached is not None:
            return cached
        tags, props = key
        column = "tags"
        try:
            msg = Message(_VALIDATION_TOPIC, b"\0", tags=tags)  # which checks the tags (separators)
            column = self.columns.properties_name
            for name, value in props or ():
                if value is None:
                    raise MQClientError(f"property {name!r} is null; RocketMQ stores only non-blank strings")
                try:
                    msg.put_user_property(name, value)
                except MQClientError as err:
                    if name not in RESERVED_PROPERTY_NAMES:
                        raise
                    keep = "F.filter on headers" if self.columns.headers else "F.map_filter"
                    raise MQClientError(f"{err} (rows read from mqlite carry the system properties too: keep "
                                        f"the user ones with {keep}; tags and keys have their columns)") from None
            column = "tags" if not props else f"tags or {self.columns.properties_name}"
            validate_message(msg, self.settings.max_message_size, _CHECKED)
        except MQClientError as err:
            raise MQClientError(f"{self._where(column, row)}: {err}") from None
        head = msg.properties
        if not self.settings.producer_properties:
            head.pop(PROPERTY_WAIT_STORE_MSG_OK, None)  # bare: only what the row gives
        before = {PROPERTY_TAGS: head[PROPERTY_TAGS]} if PROPERTY_TAGS in head else {}
        parts = (before, {name: value for name, value in head.items() if name != PROPERTY_TAGS}, head)
        if len(self._heads) < 65536:
            self._heads[key] = parts
        return parts

    def _routes(self, batch: Any) -> Any:
        """Each row's route (queue id, round robin or sharding hash) as int64, or None when all round robin."""
        cols = self.columns
        if cols.queue_id is None and cols.sharding_key is None:
            return None
        routes = np.full(batch.num_rows, ROUND_ROBIN, dtype=np.int64)
        if cols.sharding_key is not None:
            keys = batch.column(cols.sharding_key)
            if keys.null_count < len(keys):
                present = np.flatnonzero(keys.is_valid().to_numpy(zero_copy_only=False))
                values = keys.take(pa.array(present)).to_pylist()
                # SelectMessageQueueByHash: abs(hashCode) % queues, resolved at commit when the count is known.
                routes[present] = -2 - np.abs(java_string_hash_array(values))
        if cols.queue_id is not None:
            ids = batch.column(cols.queue_id)
            given = ids.is_valid().to_numpy(zero_copy_only=False)
            values = pc.fill_null(ids, 0).to_numpy(zero_copy_only=False).astype(np.int64)
            negative = np.flatnonzero(given & (values < 0))
            if len(negative):
                row = int(negative[0])
                raise MQClientError(f"{self._where(cols.queue_id_name, row)}: queue id {values[row]} is negative; "
                                    f"leave it null for round robin")
            routes[given] = values[given]
        return None if (routes == ROUND_ROBIN).all() else routes

    # -- the file -------------------------------------------------------------------------------------------
    def _write_chunk(self, topic: str, born: int, bodies: Any, heads: list[dict[str, str]], head_index: Any,
                     routes: Any, flags: Any) -> None:
        offsets, data = _buffers(bodies)
        start, end = int(offsets[0]), int(offsets[-1])
        write_chunk(self._open(), topic, born, np.diff(offsets), memoryview(data)[start:end], heads, head_index,
                    routes, flags, bare=not self.settings.producer_properties)

    def _open(self) -> Any:
        if self._file is None:
            os.makedirs(self.job_dir, exist_ok=True)
            self._file = open(os.path.join(self.job_dir, self.name), "wb", buffering=1 << 20)  # noqa: SIM115
        return self._file

    def close(self) -> list[str]:
        """Finish the file; the names to put in the commit message (none when no row was staged).

        A task Spark did not stop in time may finish after `abort()` removed its job: it then
        finds the job's tombstone and removes its own file.
        """
        if self._file is None:
            return []
        self._file.close()
        if os.path.exists(_tombstone(self.job_dir)):
            _remove(self.job_dir)
            return []
        return [self.name]


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Cyclic GC off while a task stages rows: the loop makes many small acyclic objects.

    Its passes over a growing heap cost 12% of staging rows with keys (measured,
    docs/benchmarks.md 5e); reference counting still frees everything. Only ever used
    in Spark's Python workers, which run nothing else meanwhile: a library must not
    switch the collector off in its user's process.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _stage(settings: _Settings, job_dir: str, iterator: Iterable[Any], query_id: str | None = None,
           batch_id: int | None = None) -> StagedFiles:
    """A task's `write()`: stage every batch of `iterator` into one file of `job_dir`."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
    stager = _Stager(settings, job_dir, partition, attempt)
    try:
        with _no_cyclic_gc():
            for batch in iterator:
                stager.add(batch)
    finally:
        files = stager.close()
    return StagedFiles(job_dir, files, stager.rows, partition, query_id, batch_id)


@dataclass
class StagedFiles(WriterCommitMessage):
    """What a task tells the committer: the files it staged in `job_dir` and their rows."""

    job_dir: str
    files: list[str]
    rows: int
    partition_id: int
    query_id: str | None = None
    batch_id: int | None = None


# -- the commit: store lock, inbox, staging clean-up ------------------------------------------------------------------
def _committer_path(root: str, pid: int) -> str:
    return os.path.join(root, STAGING_DIR, _COMMITTERS, str(pid))


def _open_writer(settings: _Settings) -> Broker | StoreLockedError:
    """`mqlite.open` the store, waiting for other Spark committers; the refusal when another process keeps it.

    Committers register (`spark-staging/committers/<pid>`) before they try the lock and
    leave after they let it go, so a holder that is a committer is always recognised. Any
    other holder (a live `Broker`, a Java broker, whose lock file holds no pid, a stream
    planner holding the lock for a moment) is waited for only with `whenLocked=wait`:
    `fail` refuses at once and `inbox` hands off at once. A holder with no pid yet may be a
    committer that has just taken the lock: it is looked at again for `_PID_GRACE` seconds.
    """
    start = time.monotonic()
    deadline = start + settings.lock_timeout
    pause = 0.02
    while True:
        try:
            return open_broker(settings.path)  # this process must hold the lock: never a connection
        except StoreLockedError as err:
            now = time.monotonic()
            committer = err.pid is not None and os.path.exists(_committer_path(settings.path, err.pid))
            unnamed = err.pid is None and now < start + _PID_GRACE
            if (committer or unnamed or settings.when_locked == "wait") and now < deadline:
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
                continue
            return err


def _commit(settings: _Settings, job_dir: str, staged: list[StagedFiles], sink: dict[str, Any] | None) -> None:
    """Append a job's staged files (or hand them to the inbox); raises with what happened."""
    files = [name for s in staged for name in s.files]
    rows = sum(s.rows for s in staged)
    if not files:
        return  # nothing to store: the store is not even opened
    marker = _committer_path(settings.path, os.getpid())
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w"):
        pass
    try:
        _commit_registered(settings, job_dir, files, rows, sink)
    finally:
        os.unlink(marker)


def _commit_registered(settings: _Settings, job_dir: str, files: list[str], rows: int,
                       sink: dict[str, Any] | None) -> None:
    opened = _open_writer(settings)
    if isinstance(opened, StoreLockedError):
        if settings.when_locked == "inbox":
            try:  # what the holder's import would refuse fails the job now, not later in failed/
                check_staged(settings.path, [os.path.join(job_dir, name) for name in files])
            except MQLiteError as err:
                raise type(err)(f"{settings.path} is open for writing by {_holder(opened)} and its inbox would "
                                f"refuse this Spark job's {rows} rows, so they were not handed over (nothing "
                                f"was stored): {err}") from None
            target = hand_off(settings.path, job_dir, files, rows, sink)
            log.info("store %s is held by process %s: %d rows handed to its inbox %s",
                     settings.path, opened.pid, rows, target)
            return
        raise StoreLockedError(
            f"{settings.path} is open for writing by {_holder(opened)}, so this Spark job's {rows} rows were not "
            f"stored (nothing was written). Close that broker and run the job again, or write with "
            f".option('whenLocked', 'inbox') to hand the rows to it, or 'wait' "
            f"(with .option('lockTimeout', seconds)) if it closes soon", pid=opened.pid)
    with opened as broker:
        _sweep(settings.path)
        # The inbox goes first (jobs accepted earlier), then this job whole, at most once per streaming batch.
        query_id, batch_id = (sink["query_id"], sink["batch_id"]) if sink is not None else (None, None)
        if broker.append_staged([os.path.join(job_dir, name) for name in files], query_id=query_id,
                                batch_id=batch_id) is None:
            log.info("Spark batch %s of query %s was stored before: not appended again", batch_id, query_id)


def _holder(locked: StoreLockedError) -> str:
    return f"process {locked.pid}" if locked.pid else "another process"


def _remove(job_dir: str) -> None:
    shutil.rmtree(job_dir, ignore_errors=True)


def _tombstone(job_dir: str) -> str:
    return job_dir + ".aborted"


def _abort(job_dirs: Iterable[str]) -> None:
    """Drop aborted jobs' staging; a tombstone tells their late tasks to drop their files too."""
    for job_dir in job_dirs:
        os.makedirs(os.path.dirname(job_dir), exist_ok=True)
        with open(_tombstone(job_dir), "w"):
            pass
        _remove(job_dir)


def _sweep(root: str) -> None:
    """Remove what tasks of aborted jobs left (a worker killed mid-file), day-old tombstones and
    the registrations of committers that died."""
    staging = os.path.join(root, STAGING_DIR)
    now = time.time()
    committers = os.path.join(staging, _COMMITTERS)
    for name in os.listdir(committers) if os.path.isdir(committers) else ():
        try:
            os.kill(int(name), 0)
        except ProcessLookupError:
            with suppress(FileNotFoundError):
                os.unlink(os.path.join(committers, name))
        except (ValueError, OSError):
            continue  # alive (another user's process) or not a pid
    for name in os.listdir(staging) if os.path.isdir(staging) else ():
        if name.endswith(".aborted"):
            tombstone = os.path.join(staging, name)
            _remove(tombstone[: -len(".aborted")])
            with suppress(FileNotFoundError):
                if now - os.path.getmtime(tombstone) > _TOMBSTONE_SECONDS:
                    os.unlink(tombstone)


def _staged(messages: Iterable[WriterCommitMessage | None]) -> list[StagedFiles]:
    return [m for m in messages if isinstance(m, StagedFiles)]


class MqliteBatchWriter(DataSourceArrowWriter):
    """`df.write.format("mqlite").mode("append").save(path)`: all rows of a job stored, or none.

    Built on the driver (checks the schema and options there, `MQClientError` naming the
    column or option); `write()` stages a task's rows; `commit()` appends them under the
    store's lock; `abort()` drops them. See the module docstring for the protocol.
    """

    def __init__(self, path: str, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = _settings(path, dict(options), schema, overwrite)
        self.job_dir = os.path.join(self.settings.path, STAGING_DIR, f"job-{uuid.uuid4().hex}")

    def write(self, iterator: Iterator[Any]) -> StagedFiles:
        """Runs in a task: check and stage this partition's rows (no store access)."""
        return _stage(self.settings, self.job_dir, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Runs on the driver side once every task succeeded: append the job, then drop the staging."""
        try:
            _commit(self.settings, self.job_dir, _staged(messages), None)
        finally:
            _remove(self.job_dir)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task (or the commit) failed: drop the staging; nothing of this job is stored."""
        _abort([self.job_dir])


class MqliteStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink: each micro-batch stored once, all of it or none.

    Committed batch ids are recorded per query (`<store>/spark-sink/<queryId>.json`), so a
    batch that Spark replays after a restart from its checkpoint is not stored twice.
    """

    def __init__(self, path: str, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = _settings(path, dict(options), schema, overwrite, streaming=True)
        opts = {k.lower(): v for k, v in options.items()}
        # The query id comes from the tasks; this fallback names the query by its checkpoint.
        self._fallback_query = "ck-" + uuid.uuid5(uuid.NAMESPACE_URL, opts.get("checkpointlocation", "")).hex
        # Tasks get this object pickled once per run of the query: a replayed batch stages apart.
        self._run = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[Any]) -> StagedFiles:
        """Runs in a task: stage this partition's rows of the micro-batch."""
        from pyspark import TaskContext

        context = TaskContext.get()
        query_id = (context.getLocalProperty("sql.streaming.queryId") if context else None) or self._fallback_query
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        batch_id = int(batch) if batch is not None else -1
        job_dir = os.path.join(self.settings.path, STAGING_DIR, f"stream-{query_id}-{batch_id}-{self._run}")
        return _stage(self.settings, job_dir, iterator, query_id, batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Store micro-batch `batchId` unless this query stored it before; then drop its staging."""
        staged = _staged(messages)  # every task of a micro-batch stages into the same directory
        if not staged:
            return
        query_id = staged[0].query_id or self._fallback_query
        try:
            if already_committed(self.settings.path, query_id, batchId):
                log.info("Spark batch %s of query %s was stored before: not appended again", batchId, query_id)
                return
            _commit(self.settings, staged[0].job_dir, staged, {"query_id": query_id, "batch_id": batchId})
        finally:
            for job_dir in {s.job_dir for s in staged}:
                _remove(job_dir)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """The micro-batch failed: drop its staging (Spark runs it again on restart)."""
        _abort({s.job_dir for s in _staged(messages)})
