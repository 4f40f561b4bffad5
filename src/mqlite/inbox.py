"""Staged Spark jobs: their file format, appending them to a broker, and the inbox a live broker imports.

The Spark writer (`mqlite.spark.writer`) stages a job's rows in files under
`<store>/spark-staging/<job>/` and appends them at commit through `Broker.put_messages`.
When a live process holds the store, the job is handed off instead: fsynced and renamed, with
a manifest, into `<store>/spark-inbox/<time_ns>-<name>/`. Whoever holds the store's lock
appends the inbox, oldest entry first: a live `Broker` from its `mqlite-inbox` service (about
every second, and once more as it closes), a Spark commit before its own job. This module is
that protocol without pyspark or pyarrow (numpy and mqlite only), so the broker can import it.

Staged file: chunks, each one topic's rows of one Arrow batch in row order.
Big-endian, `CHUNK`:

    offset size  field
     0      4    magic b"MQSB"
     4      1    version (1)
     5      1    bits: 1 routes present, 2 flags present, 4 bare (producerProperties=false)
     6      2    T: topic length (UTF-8 bytes)
     8      4    N: rows
    12      8    born timestamp (ms, when the task staged the chunk)
    20      8    B: body bytes
    28      4    H: heads length (bytes)
    32           topic (T) | heads: JSON list of property maps (H) | head of each row (N x u4)
                 | body lengths (N x u4) | routes (N x i8, if present) | flags (N x i4, if
                 present) | bodies (B)

A row's properties are its head (TAGS, KEYS, WAIT and user properties; rows that share them
share one head) plus the `UNIQ_KEY` given at commit. A route is a queue id (>= 0), -1
(round robin) or -(2 + |hash|) for a sharding key.

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
from itertools import repeat
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ._service import Service
from .config import read_json, write_json_atomic
from .errors import MQClientError, MQLiteError, StoreCorruptedError
from .message import PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, UniqIdGenerator, encode_properties

if TYPE_CHECKING:
    from .broker import Broker

__all__ = [
    "CHUNK",
    "STAGING_DIR",
    "INBOX_DIR",
    "FAILED_DIR",
    "SINK_DIR",
    "MANIFEST",
    "InboxService",
    "append_staged",
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

CHUNK = struct.Struct(">4sBBHIqQI")
_MAGIC = b"MQSB"
_VERSION = 1
HAS_ROUTES, HAS_FLAGS, BARE = 1, 2, 4
ROUND_ROBIN = -1

#: One put: at most this many messages and (about) this many bytes, further bounded by the segment size.
_PUT_ROWS = 2048
_PUT_BYTES = 4 << 20
_RECORD_OVERHEAD = 160  # header, topic and UNIQ_KEY of a record, for the byte bound of a put

_UNIQ_HEAD = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x01".encode()
_ID_GENERATOR = UniqIdGenerator()  # one per process, as MessageClientIDSetter

#: Imports in this process take turns: a broker's `mqlite-inbox` service and a Spark commit on the same broker.
_IMPORT_LOCK = threading.Lock()

#: How often a live broker looks at its inbox: a hand-off comes from another process, so no
#: in-process wakeup exists; this is the latency of an inbox job, one `listdir` a second when idle.
INBOX_INTERVAL = 1.0


# -- writing and reading staged files ------------------------------------------------------------------------------
def write_chunk(f: BinaryIO, topic: str, born_timestamp: int, lengths: Any, bodies: Any,
                heads: Sequence[dict[str, str]], head_index: Any, routes: Any = None, flags: Any = None, *,
                bare: bool = False) -> None:
    """Append one chunk to the staged file `f`: `len(lengths)` rows of `topic`.

    `lengths` are the body lengths and `bodies` their concatenation (any buffer: the Spark
    writer passes a slice of an Arrow data buffer, no copy); `head_index` gives each row's
    head number in `heads`; `routes` (int64 per row) and `flags` (int32 per row) are optional.
    Costs one write per section; no per-row Python work.
    """
    lengths = np.ascontiguousarray(lengths, dtype=">u4")
    topic_bytes = topic.encode("utf-8")
    heads_bytes = json.dumps(list(heads), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    body_view = memoryview(bodies).cast("B")
    bits = (HAS_ROUTES if routes is not None else 0) | (HAS_FLAGS if flags is not None else 0) | (BARE if bare else 0)
    f.write(CHUNK.pack(_MAGIC, _VERSION, bits, len(topic_bytes), len(lengths), born_timestamp, len(body_view),
                       len(heads_bytes)))
    f.write(topic_bytes)
    f.write(heads_bytes)
    f.write(np.ascontiguousarray(head_index, dtype=">u4").tobytes())
    f.write(lengths.tobytes())
    if routes is not None:
        f.write(np.ascontiguousarray(routes, dtype=">i8").tobytes())
    if flags is not None:
        f.write(np.ascontiguousarray(flags, dtype=">i4").tobytes())
    f.write(body_view)


@dataclass
class Chunk:
    """One chunk of a staged file, decoded (`read_chunks`)."""

    topic: str
    born_timestamp: int
    rows: int
    bare: bool  # no WAIT and no UNIQ_KEY: only the row's own properties
    routes: Any  # int64 array or None
    heads: list[dict[str, str]] | None = None
    head_index: list[int] | None = None
    flags: list[int] | None = None
    bodies: list[bytes] | None = None


def _read_exact(f: BinaryIO, size: int, path: str, what: str) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise StoreCorruptedError(f"staged file {path} ends inside the {what} of a chunk")
    return data


def read_chunks(path: str, *, full: bool = True) -> Iterator[Chunk]:
    """The chunks of a staged file; with `full=False` only topics, row counts and routes.

    Both modes check the file's structure (magic, heads, head numbers, body lengths, the
    file's end), so a damaged file raises `StoreCorruptedError` in the `full=False` pass
    that plans an append, before anything is stored; `full=False` skips the bodies.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            while header := f.read(CHUNK.size):
                yield _read_chunk(f, path, header, size, full)
        except (ValueError, TypeError, struct.error) as err:  # bad UTF-8 or JSON, odd-sized arrays
            raise StoreCorruptedError(f"staged file {path} is damaged: {err}") from None


def _read_chunk(f: BinaryIO, path: str, header: bytes, size: int, full: bool) -> Chunk:
    if len(header) < CHUNK.size:
        raise StoreCorruptedError(f"staged file {path} ends inside a chunk header")
    magic, version, bits, topic_len, rows, born, body_bytes, heads_len = CHUNK.unpack(header)
    if magic != _MAGIC or version != _VERSION:
        raise StoreCorruptedError(f"staged file {path}: not an mqlite staged chunk (magic {magic!r})")
    topic = _read_exact(f, topic_len, path, "topic").decode("utf-8")
    chunk = Chunk(topic, born, rows, bool(bits & BARE), None)
    heads = json.loads(_read_exact(f, heads_len, path, "heads"))
    if not isinstance(heads, list) or not all(isinstance(h, dict) for h in heads):
        raise StoreCorruptedError(f"staged file {path}: the heads of a chunk are not a list of property maps")
    head_index = np.frombuffer(_read_exact(f, 4 * rows, path, "head numbers"), dtype=">u4")
    if rows and int(head_index.max()) >= len(heads):
        raise StoreCorruptedError(f"staged file {path}: a row's head number is beyond the chunk's heads")
    lengths = np.frombuffer(_read_exact(f, 4 * rows, path, "body lengths"), dtype=">u4")
    if int(lengths.sum(dtype=np.int64)) != body_bytes:
        raise StoreCorruptedError(f"staged file {path}: a chunk's body lengths do not add up to its body bytes")
    if bits & HAS_ROUTES:
        chunk.routes = np.frombuffer(_read_exact(f, 8 * rows, path, "routes"), dtype=">i8").astype(np.int64)
    if full:
        chunk.heads = heads
        chunk.head_index = head_index.tolist()
        if bits & HAS_FLAGS:
            chunk.flags = np.frombuffer(_read_exact(f, 4 * rows, path, "flags"), dtype=">i4").tolist()
        data = _read_exact(f, body_bytes, path, "bodies")
        ends = np.cumsum(lengths, dtype=np.int64).tolist()
        chunk.bodies = [data[s:e] for s, e in zip([0, *ends[:-1]], ends)]
    else:
        f.seek((4 * rows if bits & HAS_FLAGS else 0) + body_bytes, os.SEEK_CUR)
        if f.tell() > size:
            raise StoreCorruptedError(f"staged file {path} ends inside the bodies of a chunk")
    return chunk


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

        Raises `MQClientError` (a topic or queue refused) or `StoreCorruptedError` (a damaged
        file) before anything is stored. Returns the rows to append.
        """
        rows = 0
        for path in paths:
            for chunk in read_chunks(path, full=False):
                rows += chunk.rows
                nums = self._queue_nums(chunk.topic)
                if chunk.routes is not None:
                    high = int(chunk.routes.max())
                    if high >= nums:
                        raise MQClientError(f"column 'queueId' is {high} for topic {chunk.topic!r}, which has "
                                            f"queues 0..{nums - 1}; nothing was stored "
                                            f"(create the topic with more queues first)")
        return rows

    def _queue_nums(self, topic: str) -> int:
        nums = self.queue_nums.get(topic)
        if nums is None:
            nums = self.queue_nums[topic] = len(self.broker.fetch_publish_queues(topic))
            self._round_robin[topic] = random.randrange(nums)
        return nums

    def _next_queue(self, topic: str) -> int:
        queue = self._round_robin[topic] % self.queue_nums[topic]
        self._round_robin[topic] = queue + 1
        return queue

    def append(self, paths: Sequence[str]) -> int:
        """Append every chunk of `paths` (after `plan`); returns the messages stored."""
        for path in paths:
            for chunk in read_chunks(path):
                heads = _Heads(self.broker, chunk)
                for queue_id, rows in self._queues_of(chunk):
                    self._put(chunk, heads, queue_id, rows)
        return self.appended

    def _queues_of(self, chunk: Chunk) -> Iterator[tuple[int, Any]]:
        """(queue id, row indices or None for all rows) of a chunk, queues in ascending order."""
        routes = chunk.routes
        if routes is None:
            yield self._next_queue(chunk.topic), None
            return
        nums = self.queue_nums[chunk.topic]
        queues = routes.copy()
        hashed = routes <= -2
        queues[hashed] = (-routes[hashed] - 2) % nums
        queues[routes == ROUND_ROBIN] = self._next_queue(chunk.topic)
        order = np.argsort(queues, kind="stable")  # keeps each queue's rows in row order
        ordered = queues[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        for rows in np.split(order, cuts):
            yield int(queues[rows[0]]), rows

    def _put(self, chunk: Chunk, heads: _Heads, queue_id: int, rows: Any) -> None:
        assert chunk.bodies is not None and chunk.head_index is not None
        bodies, head_index, flags = chunk.bodies, chunk.head_index, chunk.flags
        if rows is not None:
            picked = rows.tolist()
            bodies = [bodies[i] for i in picked]
            head_index = [head_index[i] for i in picked]
            flags = [flags[i] for i in picked] if flags is not None else None
        sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=len(bodies)) + _RECORD_OVERHEAD
        start = 0
        while start < len(bodies):
            end = min(len(bodies), start + _PUT_ROWS)
            cut = int(np.searchsorted(np.cumsum(sizes[start:end]), self._put_bytes, side="right"))
            end = start + max(1, cut)
            blocks, codes, keys, uniqs = heads.columns(head_index[start:end])
            self.broker.put_encoded_messages(chunk.topic, queue_id, bodies[start:end], blocks, codes, keys, uniqs,
                                             flags=flags[start:end] if flags is not None else None,
                                             born_timestamp=chunk.born_timestamp)
            self.appended += end - start
            start = end


class _Heads:
    """A chunk's property heads, encoded once, and the store's columns for rows that use them.

    Rows share a few heads (the writer's `tags`, `keys` and `properties`, or the producer's
    `WAIT`): each head's property block, tags code and `KEYS` are worked out once here, and
    a message then costs a list lookup per column plus, unless bare, its new `UNIQ_KEY`
    appended to the head's block (C-level `map` passes: no property map per message).
    """

    def __init__(self, broker: Broker, chunk: Chunk) -> None:
        assert chunk.heads is not None
        self.bare = chunk.bare
        uniq = b"" if chunk.bare else _UNIQ_HEAD
        self.blocks = [encode_properties(h).encode("utf-8") + uniq for h in chunk.heads]
        self.codes = [broker.tags_code(chunk.topic, h) if h else 0 for h in chunk.heads]
        self.keys: list[str | None] = [h.get(PROPERTY_KEYS) for h in chunk.heads]

    def columns(self, numbers: list[int]) -> tuple[list[bytes], list[int], list[str | None] | None,
                                                   list[str] | None]:
        """Property blocks, tags codes, KEYS (None: no row has any) and UNIQ_KEYs of the rows using heads `numbers`."""
        n = len(numbers)
        if len(self.blocks) == 1:  # one head for the chunk: shared objects, no lookups
            blocks, codes, keys = [self.blocks[0]] * n, [self.codes[0]] * n, [self.keys[0]] * n
        else:
            blocks = list(map(self.blocks.__getitem__, numbers))
            codes = list(map(self.codes.__getitem__, numbers))
            keys = list(map(self.keys.__getitem__, numbers))
        if self.bare:
            return blocks, codes, keys if any(self.keys) else None, None
        ids = _ID_GENERATOR.next_ids(n)
        # The id closes the block: "UNIQ_KEY\x01" ends each head's block, "\x02" ends the pair.
        blocks = list(map(bytes.__add__, blocks, map(str.encode, map(str.__add__, ids, repeat("\x02")))))
        return blocks, codes, keys if any(self.keys) else None, ids


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
    messages were stored before it. Costs about one `Broker.put_messages` per 2048 messages
    (or 4 MiB), plus a pass over each file's headers and heads to check it first.
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
