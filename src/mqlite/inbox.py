"""Staged Spark jobs: their file format, appending them to a broker, and the inbox a live broker imports.

The Spark writer (`mqlite.spark.writer`) stages a job's rows in files under
`<store>/spark-staging/<job>/` and appends them at commit through `Broker.put_encoded_records`.
When a live process holds the store, the job is handed off instead: fsynced and renamed, with
a manifest, into `<store>/spark-inbox/<time_ns>-<name>/`. Whoever holds the store's lock
appends the inbox, oldest entry first: a live `Broker` from its `mqlite-inbox` service (about
every second, and once more as it closes), a Spark commit before its own job. This module is
that protocol without pyspark or pyarrow (numpy and mqlite only), so the broker can import it.

The per-message work happens where the rows are staged, in Spark's parallel tasks: each row
becomes its whole commit-log record (`record.encode_records`: RocketMQ's bytes, with a new
`UNIQ_KEY` made by the task's own `UniqIdGenerator`, as RocketMQ's client makes it), plus the
hashes of its index keys. The commit, one process, only routes rows to queues, fills in the
fields the log decides (queue id and offset, commit-log offset, store time) and copies the
records, with numpy (`CommitLog.append_encoded_records`).

Staged file: chunks, each one topic's rows of one Arrow batch in row order.
Big-endian, `CHUNK`:

    offset size  field
     0      4    magic b"MQSB"
     4      1    format version (2; another version is refused, never appended)
     5      1    bits: 1 routes present
     6      2    T: topic length (UTF-8 bytes)
     8      4    N: rows
    12      8    R: record bytes
    20      4    H: tags table length (bytes)
    24      4    K: index keys
    28           topic (T) | tags table: JSON list of the distinct TAGS values, null for none
                 (H) | tags number of each row (N x u4) | record size of each row (N x u4)
                 | routes (N x i8, if present) | row of each index key (K x u4, ascending)
                 | hash of each index key (K x u4, `indexfile.index_key_hash` of
                 `topic#UNIQ_KEY` then of each `topic#KEY`) | records (R)

A record is what `record.encode_records` returns: complete but for QUEUEID, QUEUEOFFSET,
PHYSICALOFFSET and STORETIMESTAMP (zeros). A message's properties are its head (TAGS, KEYS,
WAIT and user properties) then, unless `producerProperties=false`, its `UNIQ_KEY`. A route is
a queue id (>= 0), -1 (round robin) or -(2 + |hash|) for a sharding key; a chunk's
round-robin rows go to the topic's queues in contiguous, nearly equal slices, the turn carried
on from chunk to chunk (so a job's queues get counts that differ by at most one). Tags codes are
computed at commit from the tags table with the store's own function (the writer's topics
are never the schedule or timer topics, whose codes depend on other properties).

Inbox entry: a directory holding the staged files and `MANIFEST.json`
(`{"version": 1, "files": [...], "rows": n, "sink": null | {"query_id", "batch_id"}, "created": ms}`).
An entry that cannot be stored whole is moved to `spark-inbox/failed/` and logged.
Streaming sinks record their last stored batch per query in `<store>/spark-sink/<queryId>.json`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ._service import Service
from .record import MIN_RECORD_SIZE, encode_records
from .config import read_json, write_json_atomic
from .errors import MQClientError, MQLiteError, StoreCorruptedError
from .indexfile import index_key_hashes, index_key_rows
from .message import (
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    UniqIdGenerator,
    encode_properties,
)
from .storebase import config_for
from .topics import TopicTable

if TYPE_CHECKING:
    from .broker import Broker

__all__ = [
    "CHUNK",
    "STAGING_DIR",
    "INBOX_DIR",
    "FAILED_DIR",
    "SINK_DIR",
    "MANIFEST",
    "ROUND_ROBIN",
    "InboxService",
    "append_staged",
    "check_staged",
    "write_chunk",
    "read_chunks",
    "hand_off",
    "import_inbox",
    "committed_batch",
    "mark_committed",
    "already_committed",
]

log = logging.getLogger("mqlite")

STAGING_DIR = "spark-staging"
INBOX_DIR = "spark-inbox"
FAILED_DIR = "failed"  # under INBOX_DIR: entries that could not be stored whole
SINK_DIR = "spark-sink"
MANIFEST = "MANIFEST.json"

CHUNK = struct.Struct(">4sBBHIQII")
_MAGIC = b"MQSB"
_VERSION = 2
HAS_ROUTES = 1
#: A row's route when it has no queue id and no sharding key: round robin over the topic's queues.
ROUND_ROBIN = -1

#: One put: about this many bytes (at least one record), further bounded by the segment size.
_PUT_BYTES = 4 << 20
#: Ids per `UniqIdGenerator.next_ids` call: its 16-bit counter must not wrap within one millisecond.
_IDS_PER_CALL = 1 << 16

_UNIQ_HEAD = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x01".encode()
_ID_GENERATOR: tuple[int, UniqIdGenerator] | None = None  # (pid, generator): see _new_ids

#: Imports in this process take turns: a broker's `mqlite-inbox` service and a Spark commit on the same broker.
_IMPORT_LOCK = threading.Lock()

#: How often a live broker looks at its inbox: a hand-off comes from another process, so no
#: in-process wakeup exists; this is the latency of an inbox job, one `listdir` a second when idle.
INBOX_INTERVAL = 1.0


# -- writing and reading staged files ------------------------------------------------------------------------------
def _new_ids(count: int) -> list[str]:
    """`count` new `UNIQ_KEY`s from this process's generator (one per process, as `MessageClientIDSetter`).

    Made on first use in each process, not at import: a Spark worker forked from a daemon
    that imported mqlite must not share the daemon's pid in its ids (nor its counter).
    """
    global _ID_GENERATOR
    pid = os.getpid()
    if _ID_GENERATOR is None or _ID_GENERATOR[0] != pid:
        _ID_GENERATOR = (pid, UniqIdGenerator())
    generator = _ID_GENERATOR[1]
    ids: list[str] = []
    for start in range(0, count, _IDS_PER_CALL):
        ids += generator.next_ids(min(_IDS_PER_CALL, count - start))
    return ids


def write_chunk(f: BinaryIO, topic: str, born_timestamp: int, lengths: Any, bodies: Any,
                heads: Sequence[dict[str, str]], head_index: Any, routes: Any = None, flags: Any = None, *,
                bare: bool = False) -> None:
    """Append one chunk to the staged file `f`: `len(lengths)` rows of `topic`, encoded as records.

    `lengths` are the body lengths and `bodies` their concatenation (any buffer: the Spark
    writer passes a slice of an Arrow data buffer); `head_index` gives each row's head (its
    property map, without `UNIQ_KEY`) in `heads`; `routes` (int64 per row) and `flags`
    (int32 per row) are optional. Unless `bare`, each row gets a new `UNIQ_KEY` after its
    head's properties. Raises `MQClientError` for a topic or properties too long.
    Cost: `encode_records` (about 1 us a row), new ids and numpy hashes of the index keys;
    Python work per head, not per row (but the ids).
    """
    count = len(lengths)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
    index = np.asarray(head_index, dtype=np.int64)
    blocks = [encode_properties(h).encode("utf-8") + (b"" if bare else _UNIQ_HEAD) for h in heads]
    suffixes = uniq_hashes = None
    if not bare and count:
        ids = np.frombuffer("".join(_new_ids(count)).encode("ascii"), dtype=np.uint8).reshape(count, -1)
        suffixes = np.empty((count, ids.shape[1] + 1), dtype=np.uint8)
        suffixes[:, :-1] = ids
        suffixes[:, -1] = 2  # "\x02" closes the UNIQ_KEY pair
        uniq_hashes = index_key_hashes(f"{topic}#", ids)
    records, sizes = encode_records(topic, bodies, offsets, blocks, index, suffixes, flags=flags,
                                    born_timestamp=born_timestamp)
    tags, tag_numbers = _tags_table(heads, index)
    key_rows, key_hashes = index_key_rows(topic, heads, index, uniq_hashes)
    topic_bytes = topic.encode("utf-8")
    tags_bytes = json.dumps(tags, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    f.write(CHUNK.pack(_MAGIC, _VERSION, HAS_ROUTES if routes is not None else 0, len(topic_bytes), count,
                       len(records), len(tags_bytes), len(key_rows)))
    f.write(topic_bytes)
    f.write(tags_bytes)
    f.write(tag_numbers.astype(">u4").tobytes())
    f.write(sizes.astype(">u4").tobytes())
    if routes is not None:
        f.write(np.ascontiguousarray(routes, dtype=">i8").tobytes())
    f.write(key_rows.astype(">u4").tobytes())
    f.write(key_hashes.astype(">u4").tobytes())
    f.write(records)


def _tags_table(heads: Sequence[dict[str, str]], head_index: Any) -> tuple[list[str | None], Any]:
    """The distinct TAGS values of the heads (None: no tags) and each row's number in that list."""
    values = [h.get(PROPERTY_TAGS) or None for h in heads]
    table = list(dict.fromkeys(values))
    numbers = {value: i for i, value in enumerate(table)}
    of_head = np.array([numbers[v] for v in values], dtype=np.int64)
    return table, of_head[head_index] if len(head_index) else np.zeros(0, dtype=np.int64)


@dataclass
class Chunk:
    """One chunk of a staged file, decoded (`read_chunks`); arrays are int64."""

    topic: str
    rows: int
    routes: Any  # per row, or None: all round robin
    tags: list[str | None]
    tag_numbers: Any
    sizes: Any
    key_rows: Any
    key_hashes: Any
    records: memoryview | None = None  # writable; None when read without records


def _read_exact(f: BinaryIO, size: int, path: str, what: str) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise StoreCorruptedError(f"staged file {path} ends inside the {what} of a chunk")
    return data


def _read_array(f: BinaryIO, count: int, dtype: str, path: str, what: str) -> Any:
    size = np.dtype(dtype).itemsize
    return np.frombuffer(_read_exact(f, count * size, path, what), dtype=dtype).astype(np.int64)


def read_chunks(path: str, *, records: bool = True) -> Iterator[Chunk]:
    """The chunks of a staged file; with `records=False` everything but the records.

    Both modes check the file's structure (magic, format version, tags, sizes, keys, the
    file's end), so a damaged file or one of another format version raises
    `StoreCorruptedError` in the `records=False` pass that plans an append, before
    anything is stored. Costs a read per section. A chunk's records are a view of one
    buffer the file's chunks share (no allocation per chunk): use them before the next.
    """
    buffer = bytearray()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            while header := f.read(CHUNK.size):
                chunk = _read_chunk(f, path, header, size, records)
                if records:
                    record_bytes = int(chunk.sizes.sum())
                    if len(buffer) < record_bytes:
                        buffer = bytearray(record_bytes)
                    chunk.records = memoryview(buffer)[:record_bytes]
                    if f.readinto(chunk.records) != record_bytes:  # type: ignore[attr-defined]
                        raise StoreCorruptedError(f"staged file {path} ends inside the records of a chunk")
                yield chunk
        except (ValueError, TypeError, struct.error) as err:  # bad UTF-8 or JSON, odd-sized arrays
            raise StoreCorruptedError(f"staged file {path} is damaged: {err}") from None


def _read_chunk(f: BinaryIO, path: str, header: bytes, size: int, with_records: bool) -> Chunk:
    if len(header) < CHUNK.size:
        raise StoreCorruptedError(f"staged file {path} ends inside a chunk header")
    magic, version, bits, topic_len, rows, record_bytes, tags_len, keys = CHUNK.unpack(header)
    if magic != _MAGIC:
        raise StoreCorruptedError(f"staged file {path}: not an mqlite staged chunk (magic {magic!r})")
    if version != _VERSION:
        raise StoreCorruptedError(f"staged file {path} is in staging format version {version}; this mqlite reads "
                                  f"version {_VERSION} only (staged by another mqlite version: run the job again)")
    topic = _read_exact(f, topic_len, path, "topic").decode("utf-8")
    tags = json.loads(_read_exact(f, tags_len, path, "tags table"))
    if not isinstance(tags, list) or not all(t is None or isinstance(t, str) for t in tags):
        raise StoreCorruptedError(f"staged file {path}: the tags table of a chunk is not a list of strings")
    tag_numbers = _read_array(f, rows, ">u4", path, "tags numbers")
    sizes = _read_array(f, rows, ">u4", path, "record sizes")
    routes = _read_array(f, rows, ">i8", path, "routes") if bits & HAS_ROUTES else None
    key_rows = _read_array(f, keys, ">u4", path, "index key rows")
    key_hashes = _read_array(f, keys, ">u4", path, "index key hashes")
    if rows and (int(tag_numbers.max()) >= len(tags) or int(sizes.min()) < MIN_RECORD_SIZE):
        raise StoreCorruptedError(f"staged file {path}: a row's tags number or record size is out of range")
    if int(sizes.sum()) != record_bytes:
        raise StoreCorruptedError(f"staged file {path}: a chunk's record sizes do not add up to its record bytes")
    if keys and (int(key_rows[-1]) >= rows or (np.diff(key_rows) < 0).any() or int(key_hashes.max()) >= 1 << 31):
        raise StoreCorruptedError(f"staged file {path}: a chunk's index keys are out of order or range")
    if not with_records:
        f.seek(record_bytes, os.SEEK_CUR)
        if f.tell() > size:
            raise StoreCorruptedError(f"staged file {path} ends inside the records of a chunk")
    return Chunk(topic, rows, routes, tags, tag_numbers, sizes, key_rows, key_hashes)


# -- planning: every file and queue checked before anything is stored ------------------------------------------------
def _plan(paths: Sequence[str], queue_nums: Callable[[str], int]) -> int:
    """Check every chunk of `paths` (but its records) against `queue_nums(topic)`; returns the rows.

    `queue_nums` raises `MQClientError` for a topic it refuses; a route beyond a topic's
    queues raises `MQClientError`, a damaged file `StoreCorruptedError`.
    """
    rows = 0
    for path in paths:
        for chunk in read_chunks(path, records=False):
            rows += chunk.rows
            nums = queue_nums(chunk.topic)
            if chunk.routes is not None:
                high = int(chunk.routes.max())
                if high >= nums:
                    raise MQClientError(f"column 'queueId' is {high} for topic {chunk.topic!r}, which has "
                                        f"queues 0..{nums - 1}; nothing was stored "
                                        f"(create the topic with more queues first)")
    return rows


def check_staged(root: str, paths: Sequence[str]) -> int:
    """Plan staged files against the store's files, without its lock: what `append_staged` would refuse.

    For a job about to be handed to the inbox: the topic table (`config/topics.json`) gives
    the queues of existing topics, the store's settings (`config/store.json`) whether an
    unknown topic would be auto-created and with how many queues. Raises `MQClientError`
    (an unknown topic with auto-create off, a topic not writable, a queue id beyond the
    topic's queues) or `StoreCorruptedError` (a damaged file); returns the rows. The holder
    may still change its topics before it imports the entry: then the entry goes to
    `spark-inbox/failed/`. Costs a read of the two JSON files and a pass over each file but
    its records.
    """
    config = config_for(root, {})
    table = TopicTable(root, read_only=True)

    def queue_nums(topic: str) -> int:
        topic_config = table.get(topic)
        if topic_config is None:
            if not config.auto_create_topic:
                raise MQClientError(f"topic {topic!r} does not exist and the store at {root} has auto_create_topic "
                                    f"off; nothing was stored (create the topic first)")
            return config.default_topic_queue_nums
        if not topic_config.writable:
            raise MQClientError(f"topic {topic!r} is not writable (perm {topic_config.perm}); nothing was stored")
        return topic_config.write_queue_nums

    return _plan(paths, queue_nums)


# -- appending staged files to an open store ------------------------------------------------------------------------
class _Appender:
    """Appends staged chunks to a writer `Broker`: queues resolved for every file first, then the puts."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.queue_nums: dict[str, int] = {}
        self._round_robin: dict[str, int] = {}
        segment = broker.config.commitlog_file_size
        self._put_bytes = max(1, min(_PUT_BYTES, segment // 4))
        self.appended = 0

    def plan(self, paths: Sequence[str]) -> int:
        """Check every file and resolve every topic's queues (auto-creating topics as a producer would).

        Raises `MQClientError` (a topic or queue refused: system topics among them) or
        `StoreCorruptedError` (a damaged file) before anything is stored. Returns the rows to append.
        """
        return _plan(paths, self._queue_nums)

    def _queue_nums(self, topic: str) -> int:
        nums = self.queue_nums.get(topic)
        if nums is None:
            nums = self.queue_nums[topic] = len(self.broker.fetch_publish_queues(topic))
            self._round_robin[topic] = random.randrange(nums)
        return nums

    def _spread(self, topic: str, count: int) -> Any:
        """The queue of each of `count` round-robin rows: contiguous, nearly equal slices, the round robin going on.

        Every queue gets `count // queues` rows; the `count % queues` queues next in turn get
        one more, and the turn moves past them, so over a job the queues' counts differ by at
        most one. Contiguous slices keep a chunk's copy to one run per queue.
        """
        nums = self.queue_nums[topic]
        first = self._round_robin[topic]
        turn = (first + np.arange(nums)) % nums  # queues in round-robin order from the next one
        sizes = np.full(nums, count // nums, dtype=np.int64)
        sizes[: count % nums] += 1
        self._round_robin[topic] = (first + count % nums) % nums
        return np.repeat(turn, sizes)

    def append(self, paths: Sequence[str]) -> int:
        """Append every chunk of `paths` (after `plan`); returns the messages stored."""
        for path in paths:
            for chunk in read_chunks(path):
                # The store's own tags-code function, once per distinct TAGS value of the chunk.
                codes = np.array([self.broker.tags_code(chunk.topic, {PROPERTY_TAGS: t}) if t else 0
                                  for t in chunk.tags], dtype=np.int64)[chunk.tag_numbers]
                for queue_id, rows in self._queues_of(chunk):
                    self._put(chunk, codes, queue_id, rows)
        return self.appended

    def _queues_of(self, chunk: Chunk) -> Iterator[tuple[int, Any]]:
        """(queue id, row indices) of a chunk, queues in ascending order, each queue's rows in row order."""
        routes = chunk.routes
        nums = self.queue_nums[chunk.topic]
        if routes is None:
            queues = self._spread(chunk.topic, chunk.rows)
        else:
            queues = routes.copy()
            hashed = routes <= -2
            queues[hashed] = (-routes[hashed] - 2) % nums
            unrouted = routes == ROUND_ROBIN
            queues[unrouted] = self._spread(chunk.topic, int(unrouted.sum()))
        if not len(queues):
            return
        order = np.argsort(queues, kind="stable")  # keeps each queue's rows in row order
        ordered = queues[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        for rows in np.split(order, cuts):
            yield int(queues[rows[0]]), rows

    def _put(self, chunk: Chunk, codes: Any, queue_id: int, rows: Any) -> None:
        """Append the chunk's `rows` (ascending) to one queue, in puts of about `_put_bytes`."""
        assert chunk.records is not None
        first, last = int(rows[0]), int(rows[-1]) + 1
        if last - first == len(rows):  # one run (every round-robin slice): a view of the records, no copy
            begin = int(chunk.sizes[:first].sum())
            sizes = chunk.sizes[first:last]
            view = chunk.records[begin : begin + int(sizes.sum())]
            first_key, last_key = (int(k) for k in np.searchsorted(chunk.key_rows, [first, last]))
            key_rows, key_hashes = chunk.key_rows[first_key:last_key] - first, chunk.key_hashes[first_key:last_key]
            codes = codes[first:last]
        else:
            selected, sizes, key_rows, key_hashes = _select(chunk, rows)
            view, codes = memoryview(selected), codes[rows]
        ends = np.cumsum(sizes)
        key_cuts = np.searchsorted(key_rows, np.arange(len(sizes) + 1))  # each row's first key
        start, done = 0, 0
        while start < len(sizes):
            end = max(start + 1, int(np.searchsorted(ends, done + self._put_bytes, side="right")))
            first_key, last_key = int(key_cuts[start]), int(key_cuts[end])
            self.broker.put_encoded_records(chunk.topic, queue_id, view[done : int(ends[end - 1])], sizes[start:end],
                                            codes[start:end], key_hashes[first_key:last_key],
                                            key_rows[first_key:last_key] - start)
            self.appended += end - start
            start, done = end, int(ends[end - 1])


def _select(chunk: Chunk, rows: Any) -> tuple[bytearray, Any, Any, Any]:
    """The records (copied, in one join of runs of consecutive rows), sizes and index keys of `rows` (ascending)."""
    assert chunk.records is not None
    firsts = np.zeros(chunk.rows, dtype=np.int64)
    np.cumsum(chunk.sizes[:-1], out=firsts[1:])
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    run_first = rows[np.concatenate(([0], breaks))]
    run_last = rows[np.concatenate((breaks - 1, [len(rows) - 1]))]
    view = memoryview(chunk.records)
    records = bytearray().join([view[a:b] for a, b in zip(firsts[run_first].tolist(),
                                                        (firsts[run_last] + chunk.sizes[run_last]).tolist())])
    key_counts = np.bincount(chunk.key_rows, minlength=chunk.rows)
    key_first = np.zeros(chunk.rows, dtype=np.int64)
    np.cumsum(key_counts[:-1], out=key_first[1:])
    counts = key_counts[rows]
    local = np.repeat(np.arange(len(rows), dtype=np.int64), counts)  # each key's row among `rows`
    at = np.zeros(len(rows), dtype=np.int64)
    np.cumsum(counts[:-1], out=at[1:])
    picked = key_first[rows][local] + np.arange(len(local), dtype=np.int64) - at[local]
    return records, chunk.sizes[rows], local, chunk.key_hashes[picked]


def _append_planned(appender: _Appender, paths: Sequence[str], total: int) -> int:
    try:
        return appender.append(paths)
    except Exception as err:
        raise MQLiteError(f"appending a staged Spark job to {appender.broker.path} failed after "
                          f"{appender.appended} of {total} messages were stored: {err}") from err


def append_staged(broker: Broker, paths: Sequence[str]) -> int:
    """Append staged files to `broker` (a writer), all queues resolved first; returns messages stored.

    Bad queues or topics raise `MQClientError`, a damaged file `StoreCorruptedError`, before
    anything is stored; a failure during the puts raises `MQLiteError` saying how many
    messages were stored before it. Costs one `Broker.put_encoded_records` per 4 MiB of
    records of one queue (numpy work, no Python per message unless rows are routed to
    queues one by one: then a slice per run of a queue's consecutive rows), plus a pass
    over each file's sections but the records to check it first.
    """
    appender = _Appender(broker)
    return _append_planned(appender, paths, appender.plan(paths))


# -- the inbox: jobs handed to whoever holds the store ----------------------------------------------------------------
def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hand_off(root: str, job_dir: str, files: list[str], rows: int, sink: dict[str, Any] | None) -> str:
    """Move a staged job, fsynced and with its manifest, into `<root>/spark-inbox/` (one atomic rename).

    Returns the entry's path. The lock holder imports it (`import_inbox`); its files must
    not be touched after this.
    """
    for name in files:
        with open(os.path.join(job_dir, name), "rb") as f:
            os.fsync(f.fileno())
    manifest = {"version": 1, "files": files, "rows": rows, "sink": sink, "created": int(time.time() * 1000)}
    write_json_atomic(os.path.join(job_dir, MANIFEST), manifest)
    inbox = os.path.join(root, INBOX_DIR)
    os.makedirs(inbox, exist_ok=True)
    # Names sort by hand-off time, so entries are imported in the order they were accepted.
    name = f"stream-{sink['query_id']}-{sink['batch_id']}" if sink else os.path.basename(job_dir)
    target = os.path.join(inbox, f"{time.time_ns():020d}-{name}")
    os.rename(job_dir, target)
    _fsync_dir(inbox)
    return target


def _set_aside(broker: Broker, inbox: str, name: str, reason: object) -> None:
    failed = os.path.join(inbox, FAILED_DIR)
    os.makedirs(failed, exist_ok=True)
    os.rename(os.path.join(inbox, name), os.path.join(failed, name))
    log.error("Spark job %s in the inbox of %s was not stored (whole) and was moved to %s: %s",
              name, broker.path, failed, reason)


def import_inbox(broker: Broker) -> int:
    """Append every job waiting in `<store>/spark-inbox/`, oldest first; returns the messages stored.

    Call with a writer `Broker` (it holds the store's lock; `Broker.import_inbox` is the
    same); callers in this process take turns (its `mqlite-inbox` service and a Spark
    commit), so it blocks while another import runs. Each entry is planned whole first; one
    whose manifest, topics or queues are refused, or whose files are damaged, is moved to
    `spark-inbox/failed/` and logged, and the next is imported. One that fails while being
    appended (disk full) is moved there too and the error raised: a retry would store its
    prefix twice. After all its puts an entry leaves the queue in one rename (to
    `.imported-<name>`), then its streaming batch id is recorded and its files removed.
    Costs one `listdir` when the inbox is empty or absent.
    """
    with _IMPORT_LOCK:
        return _import_entries(broker)


def _import_entries(broker: Broker) -> int:
    inbox = os.path.join(broker.path, INBOX_DIR)
    try:
        names = sorted(n for n in os.listdir(inbox) if n != FAILED_DIR and not n.startswith("."))
    except FileNotFoundError:
        return 0
    stored = 0
    for name in names:
        entry = os.path.join(inbox, name)
        manifest = _manifest(entry)
        if manifest is None:
            # `hand_off` renames an entry only after writing its manifest: this one is damaged or foreign.
            _set_aside(broker, inbox, name, "no valid MANIFEST.json")
            continue
        paths = [os.path.join(entry, f) for f in manifest["files"]]
        appender = _Appender(broker)
        try:
            total = appender.plan(paths)
        except (MQLiteError, OSError) as err:  # a refused topic or queue, a damaged or missing file
            _set_aside(broker, inbox, name, err)
            continue  # refused before anything was stored
        try:
            stored += _append_planned(appender, paths, total)
        except MQLiteError as err:
            _set_aside(broker, inbox, name, err)
            raise
        # Out of the queue at once, so no failure below can make a later round store it again; the
        # name still ends in `-stream-<query>-<batch>`, so `already_committed` sees it until marked.
        done = os.path.join(inbox, f".imported-{name}")
        os.rename(entry, done)
        sink = manifest["sink"]
        if sink:
            mark_committed(broker.path, sink["query_id"], sink["batch_id"], manifest["rows"])
        shutil.rmtree(done, ignore_errors=True)
    return stored


def _manifest(entry: str) -> dict[str, Any] | None:
    """The entry's manifest when it is well formed (file names inside the entry, a valid sink), else None."""
    manifest = read_json(os.path.join(entry, MANIFEST))
    if not isinstance(manifest, dict):
        return None
    files, sink, rows = manifest.get("files"), manifest.get("sink"), manifest.get("rows", 0)
    if not isinstance(files, list) or not all(isinstance(f, str) and f and os.sep not in f for f in files):
        return None
    if sink is not None and not (isinstance(sink, dict) and isinstance(sink.get("query_id"), str)
                                 and isinstance(sink.get("batch_id"), int)):
        return None
    if not isinstance(rows, int):
        return None
    return {"files": files, "sink": sink, "rows": rows}


class InboxService(Service):
    """`mqlite-inbox`: a live broker imports Spark jobs handed to its inbox, and once more as it stops.

    `import_inbox` is the owner's serialised import (`Broker.import_inbox`). A hand-off comes
    from another process, so the loop polls every `interval` seconds (one `listdir` when
    idle); `wakeup()` imports at once.
    """

    def __init__(self, import_inbox: Callable[[], int], interval: float = INBOX_INTERVAL) -> None:
        super().__init__("inbox", interval)
        self._import = import_inbox

    def run_once(self) -> None:
        self._import()

    def on_stop(self) -> None:
        self._import()  # jobs accepted while this process held the lock are stored before it lets go


# -- streaming: batches committed per query ------------------------------------------------------------------------
def _mark_path(root: str, query_id: str) -> str:
    return os.path.join(root, SINK_DIR, f"{query_id}.json")


def committed_batch(root: str, query_id: str) -> int:
    """The last batch id of `query_id` stored; -1 when none."""
    mark = read_json(_mark_path(root, query_id))
    if isinstance(mark, dict) and isinstance(mark.get("batchId"), int):
        return int(mark["batchId"])
    return -1


def mark_committed(root: str, query_id: str, batch_id: int, rows: int) -> None:
    """Record `batch_id` as the last batch of `query_id` stored (durably)."""
    os.makedirs(os.path.join(root, SINK_DIR), exist_ok=True)
    write_json_atomic(_mark_path(root, query_id), {"queryId": query_id, "batchId": batch_id, "rows": rows,
                                                   "time": int(time.time() * 1000)})


def already_committed(root: str, query_id: str, batch_id: int) -> bool:
    """True when batch `batch_id` of `query_id` is stored, or waits in the inbox."""
    # The inbox first: its importer records the batch before it removes the entry, so one of
    # the two looks sees a batch that a live broker is importing meanwhile.
    try:
        names = os.listdir(os.path.join(root, INBOX_DIR))
    except FileNotFoundError:
        names = []
    if any(n.endswith(f"-stream-{query_id}-{batch_id}") for n in names):
        return True
    return committed_batch(root, query_id) >= batch_id
