"""The commit log: every message of every topic, appended in one sequence of segment files.

A record's bytes (the byte table, structs, numpy dtypes, field positions, encode, decode,
check) belong to `record.py`; this module owns where records lie: the segments, the put
lock, queue offsets and store times, rolling a segment with a BLANK record, the units and
dispatch entries written with each append, and reads by offset.
"""

from __future__ import annotations

import itertools
import logging
import socket
import struct
from time import time_ns as _time_ns
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from .clock import Clock, SystemClock
from .config import StoreConfig
from .errors import MQClientError, StoreCorruptedError
from .consumequeue import ConsumeQueue
from .indexfile import index_key_hashes, index_key_rows
from .mappedfile import MappedFile, MappedFileQueue
from .message import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    EncodedProperties,
    SysFlag,
    create_offset_msg_id,
    encode_properties,
)
from .record import (
    BLANK,
    BLANK_MAGIC,
    COMMIT_LOG_OFFSET,
    COMMIT_LOG_OFFSET_POS,
    EMPTY_PROPERTIES,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER,
    HOST_V6_EXTRA,
    HOST_V6_FLAGS,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_LENGTH,
    PREFIX,
    PROPERTIES_LENGTH,
    STORE_HOST,
    TOTAL_AND_MAGIC,
    ByteRows,
    DispatchRequest,
    EncodedBatchProperties,
    StoredMessage,
    TagsCodeFn,
    check_encoded_records,
    check_record,
    default_tags_code,
    encode_batch,
    host_bytes,
    pack_header_born_v6,
    pack_headers,
    place_headers,
    record_tail,
    topic_prefix,
)

__all__ = ["CommitLog", "BatchDispatch", "PutResult", "PutMessageStatus"]

log = logging.getLogger("mqlite")


class PutMessageStatus(Enum):
    """Outcome of a stored put (faults raise exceptions instead)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class PutResult(NamedTuple):
    """Where a put (or a batch) landed.

    For a batch, `commit_log_offset`/`queue_offset` are the first record's and
    `commit_log_offsets` lists every record's offset.
    """

    commit_log_offset: int
    wrote_bytes: int
    queue_offset: int
    store_timestamp: int
    msg_num: int = 1
    commit_log_offsets: list[int] | None = None
    status: PutMessageStatus = PutMessageStatus.PUT_OK
    store_host: tuple[bytes, int] = (socket.inet_aton(STORE_HOST[0]), STORE_HOST[1])
    """The records' store host (IPv4 bytes, port): part of their offset message ids."""

    @property
    def offset_msg_id(self) -> str:
        """The offset id(s) of the stored record(s), comma-joined for a batch."""
        offsets = self.commit_log_offsets or [self.commit_log_offset]
        ip, port = self.store_host
        return ",".join(create_offset_msg_id(ip, port, o) for o in offsets)


_PUT_OK = PutMessageStatus.PUT_OK


class BatchDispatch(NamedTuple):
    """One dispatch entry for a whole batch of one queue (records are contiguous in the log).

    Its index keys are either strings (`keys`, `uniq_keys`: each record's KEYS and
    UNIQ_KEY) or already hashed (`key_hashes` as `IndexFile` stores them, with each
    key's record offset in `key_offsets`, in log order: `append_encoded_records`).
    """

    topic: str
    queue_id: int
    first_queue_offset: int
    first_commit_log_offset: int
    sizes: Sequence[int] | np.ndarray
    tags_codes: Sequence[int] | np.ndarray | None  # None: every record has tags code 0
    store_timestamp: int
    keys: Sequence[str | None] | None
    uniq_keys: Sequence[str | None] | None
    key_hashes: np.ndarray | None = None
    key_offsets: np.ndarray | None = None


_new_tuple = tuple.__new__
_INT = struct.Struct(">i")  # the range of a header's int fields (`_INT.pack` raises as `HEADER.pack` would)
# `record.PROPERTIES_LENGTH.pack` bound once: `append` builds a record's tail inline with it (see there).
_pack_properties_length = PROPERTIES_LENGTH.pack
_STORE_IP = socket.inet_aton(STORE_HOST[0])
_STORE_PORT = STORE_HOST[1]
_HOST_V6_FLAGS = HOST_V6_FLAGS
# SysFlag and HEADER values as module constants: the append path reads them for every record.
_BORNHOST_V6 = SysFlag.BORNHOST_V6
_TRANSACTION_MASK = SysFlag.TRANSACTION_MASK
_PREPARED = SysFlag.TRANSACTION_PREPARED_TYPE
_ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE
_HEADER_SIZE = HEADER.size
_DICT_TYPES = frozenset({dict, EncodedProperties})

# -- the log -------------------------------------------------------------------------------
class CommitLog:
    """Appends records under one lock and reads them back by offset.

    Queue offsets are assigned at append, per (topic, queue id), except for
    prepared and rollback transaction records, which never enter a consume
    queue. Once the store has recovered it hands over its queue table
    (`unit_queues`): from then on each record's consume-queue unit is written
    under the same lock, and only records with keys leave a `DispatchRequest`
    (or `BatchDispatch`) in `dispatch_queue` for the reput service's index
    work (none when `message_index_enable` is off), so nothing just written is parsed again.
    """

    def __init__(self, directory: str, config: StoreConfig, clock: Clock, *, read_only: bool = False,
                 tags_code_fn: TagsCodeFn | None = None) -> None:
        self.config = config
        self.clock = clock
        self.mapped_files = MappedFileQueue(directory, config.commitlog_file_size, read_only=read_only)
        self.put_lock = threading.Lock()
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.dispatch_queue: deque[DispatchRequest | BatchDispatch] = deque()
        self.tags_code_fn: TagsCodeFn = tags_code_fn or default_tags_code
        self.last_store_timestamp = 0
        self.appended_count = 0  # dispatch entries appended by this process; reput counts the ones it did
        #: {offset: size} of records recovery set aside (body CRC wrong): reads treat them as removed.
        self.set_aside: dict[int, int] = {}
        #: {start: end} of damaged ranges recovery stepped over; walks of the log step over them too.
        self.damaged: dict[int, int] = {}
        # Set by the store once recovered: consume-queue units are then written under
        # the put lock (into `unit_queues`, the store's queue table), and only index
        # work goes through `dispatch_queue`.
        self.unit_queues: Mapping[tuple[str, int], ConsumeQueue] | None = None
        self.create_unit_queue: Callable[[str, int], ConsumeQueue] | None = None
        self._topic_bytes: dict[str, bytes] = {}
        self._empty_tails: dict[str, bytes] = {}
        self._v2_topics: set[str] = set()  # topics written with MAGIC_V2 (filled by _topic_prefix)
        self._born_default = (_STORE_IP, _STORE_PORT)  # producer and broker share a process: same host
        #: The store host written into new records (`set_store_host`; RocketMQ's brokerIP1:listenPort).
        self.store_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT)
        self._max_body = config.max_message_size
        # Once units are written with the append, dispatch entries only feed the key index:
        # with the index off none are queued (nothing would read them).
        self._index_keys = config.message_index_enable
        self._system_clock = isinstance(clock, SystemClock)  # lets the put path read time_ns directly
        self._active: MappedFile | None = None  # the segment appends go to (set by _room_for)

    # -- offsets -------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """First readable offset (`-1` when empty)."""
        return self.mapped_files.min_offset

    @property
    def max_offset(self) -> int:
        """Offset after the last written byte."""
        return self.mapped_files.max_offset

    # -- append ----------------------------------------------------------------------
    def _topic_prefix(self, topic: str) -> bytes:
        """Length-prefixed topic bytes, cached (topics repeat on every put)."""
        cached = self._topic_bytes.get(topic)
        if cached is not None:
            return cached
        prefix, v2 = topic_prefix(topic)
        if v2:
            self._v2_topics.add(topic)
        if len(self._topic_bytes) < 100_000:
            self._topic_bytes[topic] = prefix
        return prefix

    def _encode_tail(self, topic: str, properties: Mapping[str, str] | None) -> tuple[bytes, bytes]:
        prefix = self._topic_prefix(topic)
        props = encode_properties(properties).encode("utf-8") if properties else b""
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise MQClientError(
                f"message properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH} "
                f"(RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values into the body"
            )
        return prefix, props

    def _check_body(self, body: bytes) -> None:
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise MQClientError(f"message body must be bytes, got {type(body).__name__}")
        if len(body) > self.config.max_message_size:
            raise MQClientError(
                f"message body is {len(body)} bytes; max_message_size is {self.config.max_message_size} "
                f"(raise it with mqlite.open(..., max_message_size=...))"
            )

    def append(self, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None = None,
               flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None, born_host: str | None = None,
               reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> PutResult:
        """Append one record; returns where it landed. Bad input raises `MQClientError` first.

        The hot path of every send: measured with bench/, so it avoids calls
        and keyword arguments (one `pack_into`, two slice copies, one lock).
        That is why it does inline what the batch appends share through
        `_append_placed` (store time, space via `_place_batch`, the place's
        fields, the copy) and `_batch_written` (the unit, the dispatch entry):
        the same steps in the same order, with one record's `HEADER` packed in
        one call (`record.pack_header_born_v6` for an IPv6 born host) where a
        batch fills numpy columns (`record.pack_headers`, `record.place_headers`).
        """
        if type(body) is not bytes or len(body) > self._max_body:
            self._check_body(body)
        if properties:
            if type(properties) is EncodedProperties and len(properties.encoded) <= MAX_PROPERTIES_LENGTH:
                props = properties.encoded  # a producer's send: encoded already
                # `record.record_tail` inline: a call per send costs more than the concatenation.
                tail = ((self._topic_bytes.get(topic) or self._topic_prefix(topic))
                        + _pack_properties_length(len(props)) + props)
            else:
                prefix, props = self._encode_tail(topic, properties)
                tail = prefix + _pack_properties_length(len(props)) + props
            keys = properties.get(PROPERTY_KEYS)
            uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        else:
            tail = self._empty_tails.get(topic) or self._empty_tail(topic)
            keys = uniq = None
        v6 = 0  # extra header bytes of an IPv6 born host
        born_ip, born_port = self._born_default
        in_queue = True
        if sys_flag or born_host:
            sys_flag &= ~_HOST_V6_FLAGS  # the addresses decide these bits, not the caller
            if born_host:
                born_ip, born_port = host_bytes(born_host)
                if len(born_ip) == 16:
                    sys_flag |= _BORNHOST_V6
                    v6 = HOST_V6_EXTRA
            trans = sys_flag & _TRANSACTION_MASK
            in_queue = trans != _PREPARED and trans != _ROLLBACK
        total = _HEADER_SIZE + len(body) + len(tail) + v6
        crc = zlib.crc32(body) & 0x7FFFFFFF
        key = (topic, queue_id)
        put_lock = self.put_lock
        # acquire/try/finally, not `with`: the same hold, at about half the cost (measured 90 ns against 180).
        put_lock.acquire()
        try:
            now = _time_ns() // 1_000_000 if self._system_clock else self.clock.now_ms()
            if now < self.last_store_timestamp:
                now = self.last_store_timestamp  # store times never decrease along the log
            self.last_store_timestamp = now
            # Space first, for the unit and then the record: a full disk raises DiskFullError
            # here, before anything is written or any offset moves.
            queues = self.unit_queues
            if in_queue:
                qoff = self.topic_queue_table.get(key, 0)
                if queues is not None:
                    cq = queues.get(key) or self.create_unit_queue(topic, queue_id)  # type: ignore[misc]
                    if qoff >= cq.room:
                        cq.make_room(qoff, 1)
            else:
                qoff = 0
            mf = self._active
            # `reserved` <= the file size: the record and a later BLANK fit, on allocated blocks.
            if mf is None or mf.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > mf.reserved:
                mf = self._room_for(total)
            pos = mf.wrote_position
            commit_log_offset = mf.file_from_offset + pos
            mm = mf.mm
            born = now if born_timestamp is None else born_timestamp
            # Body and tail first, header last: a writer killed mid-copy leaves no
            # TOTALSIZE/magic, so recovery never takes a half-written record for whole.
            body_pos = pos + _HEADER_SIZE + v6
            end = body_pos + len(body)
            mm[body_pos:end] = body
            mm[end : end + len(tail)] = tail
            # The store host as two names: a `*` in the call would build the argument tuple per put.
            store_ip, store_port = self.store_host
            if not v6:
                HEADER.pack_into(mm, pos, total, MAGIC_V2 if topic in self._v2_topics else MAGIC_V1, crc,
                                 queue_id, flag, qoff, commit_log_offset, sys_flag, born, born_ip, born_port,
                                 now, store_ip, store_port, reconsume_times, prepared_transaction_offset,
                                 len(body))
            else:
                pack_header_born_v6(mm, pos, total, MAGIC_V2 if topic in self._v2_topics else MAGIC_V1, crc,
                                    queue_id, flag, qoff, commit_log_offset, sys_flag, born, born_ip, born_port,
                                    now, store_ip, store_port, reconsume_times, prepared_transaction_offset,
                                    len(body))
            mf.wrote_position = pos + total
            code = self.tags_code_fn(topic, properties, now) if properties else 0
            if in_queue:
                self.topic_queue_table[key] = qoff + 1
                if queues is not None and not cq.put(commit_log_offset, total, code, qoff):
                    log.error("consume queue %s/%d out of step at queue offset %d", topic, queue_id, qoff)
            if queues is None or (self._index_keys and (keys is not None or uniq is not None)):
                self.appended_count += 1
                # A plain tuple in DispatchRequest's field order: cheaper than building the NamedTuple.
                self.dispatch_queue.append((topic, queue_id, commit_log_offset, total, code, now, qoff, keys, uniq,
                                            sys_flag))  # type: ignore[arg-type]
        finally:
            put_lock.release()
        # tuple.__new__ skips the NamedTuple's Python-level __new__ (measurable per put).
        return _new_tuple(PutResult, (commit_log_offset, total, qoff, now, 1, None, _PUT_OK, self.store_host))

    def _empty_tail(self, topic: str) -> bytes:
        """Topic bytes plus an empty property block, cached per topic."""
        tail = record_tail(self._topic_prefix(topic), b"")
        if len(self._empty_tails) < 100_000:
            self._empty_tails[topic] = tail
        return tail

    def append_batch(self, topic: str, queue_id: int, bodies: Sequence[bytes],
                     properties: Sequence[Mapping[str, str] | None] | None = None, *, flag: int = 0,
                     born_timestamp: int | None = None, flags: Sequence[int] | None = None,
                     born_host: str | None = None) -> PutResult:
        """Append records of one queue together, under one lock, in one segment.

        `born_host` (`ip:port`) is the sender's address (default: the store's), as in `append`.

        As RocketMQ's batch: if the batch does not fit in what is left of the
        segment, the whole batch moves to the next one. The reput service gets
        one `BatchDispatch` for all of it.
        """
        count = len(bodies)
        if not count:
            raise MQClientError("a batch needs at least one message")
        if properties is not None and len(properties) != count:
            raise MQClientError(f"{count} bodies but {len(properties)} property maps")
        if flags is not None and len(flags) != count:
            raise MQClientError(f"{count} bodies but {len(flags)} flags")
        max_body = self._max_body
        if set(map(type, bodies)) != {bytes} or max(map(len, bodies)) > max_body:
            for body in bodies:
                if type(body) is not bytes or len(body) > max_body:
                    self._check_body(body)
            bodies = [b if type(b) is bytes else bytes(b) for b in bodies]
        # The numpy header fields take any int: out-of-range ones raise here, as HEADER.pack would.
        for value in (queue_id, flag) if flags is None else (queue_id, min(flags), max(flags)):
            _INT.pack(value)
        if type(properties) is EncodedBatchProperties:
            suffixes = properties.id_suffixes()
            if suffixes is not None and not born_host:
                return self._append_columns(topic, queue_id, bodies, properties, suffixes,
                                            flag if flags is None else flags, born_timestamp)
            properties = list(properties)  # read as the maps it stands for
        # Each record ends with the topic, the property block's length and the block: the first two
        # are one shared object when every block has the same length (no bytes built per record).
        prefix = self._topic_prefix(topic)
        tail_lengths: Any
        keys: list[str | None] | None = None
        uniqs: list[str | None] | None = None
        blocks: list[bytes] | None = None
        if properties is None or not any(properties):
            properties = None
            tail_heads: Iterable[bytes] = itertools.repeat(prefix + EMPTY_PROPERTIES, count)
            tail_lengths = len(prefix) + len(EMPTY_PROPERTIES)
        else:
            blocks = self._property_blocks(properties)
            if set(map(type, properties)) <= _DICT_TYPES:  # C-level gets (most batches)
                maps: Sequence[dict[str, str]] = properties  # type: ignore[assignment]
                keys = list(map(dict.get, maps, itertools.repeat(PROPERTY_KEYS)))
                uniqs = list(map(dict.get, maps, itertools.repeat(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)))
            else:
                keys = [p.get(PROPERTY_KEYS) if p else None for p in properties]
                uniqs = [p.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) if p else None for p in properties]
            if not any(keys) and not any(uniqs):
                keys = uniqs = None  # no index key (an empty id alone is not indexed): no dispatch entry
            block_lengths = np.fromiter(map(len, blocks), dtype=np.int64, count=count)
            shortest, longest = int(block_lengths.min()), int(block_lengths.max())
            # `record.record_tail` without the block (joined after it, not copied into it).
            pack_len = PROPERTIES_LENGTH.pack
            if shortest == longest:
                tail_heads = itertools.repeat(prefix + pack_len(shortest), count)
            else:
                tail_heads = list(map(prefix.__add__, map(pack_len, block_lengths.tolist())))
            tail_lengths = block_lengths + (len(prefix) + PROPERTIES_LENGTH.size)
        born = self._born_default if not born_host else host_bytes(born_host)
        header_size = HEADER.size if len(born[0]) == 4 else HEADER.size + HOST_V6_EXTRA
        body_lengths = np.fromiter(map(len, bodies), dtype=np.int64, count=count)
        size_array = body_lengths + tail_lengths + header_size
        sizes: list[int] = size_array.tolist()
        total_all = sum(sizes)
        if total_all + END_FILE_MIN_BLANK_LENGTH > self.config.commitlog_file_size:
            raise MQClientError(
                f"the batch is {total_all} bytes and cannot fit one commit-log segment of "
                f"{self.config.commitlog_file_size} bytes; send smaller batches"
            )
        flag_column = (flag or None) if flags is None else np.fromiter(flags, dtype=np.int64, count=count)
        headers = pack_headers(size_array, MAGIC_V2 if topic in self._v2_topics else MAGIC_V1,
                               map(zlib.crc32, bodies), body_lengths, queue_id=queue_id, flag=flag_column,
                               sys_flag=0 if header_size == HEADER.size else _BORNHOST_V6,
                               born_timestamp=born_timestamp, born_host=born, store_host=self.store_host)
        record_starts = np.zeros(count, dtype=np.int64)
        np.cumsum(size_array[:-1], out=record_starts[1:])
        pieces = (bodies, tail_heads) if blocks is None else (bodies, tail_heads, blocks)
        return self._append_placed(topic, queue_id, headers, record_starts, total_all, sizes, pieces,
                                   properties=properties, keys=keys, uniqs=uniqs, born_now=born_timestamp is None,
                                   store_host=self.store_host)

    def _append_columns(self, topic: str, queue_id: int, bodies: Sequence[bytes], columns: EncodedBatchProperties,
                        suffixes: np.ndarray, flag: int | Sequence[int], born_timestamp: int | None) -> PutResult:
        """`append_batch` of a producer's batch given column-wise: the same bytes, units and index keys,
        with Python work per distinct property map (tags code, KEYS), not per message.

        The records are built whole outside the lock (`record.encode_batch`: the id suffixes
        are rows of one array, the headers numpy columns), their UNIQ_KEY index hashes with
        numpy (`index_key_hashes`); under the lock `_append_placed` fills in the place and
        copies them into the segment at once. `append_batch` has checked the bodies and flags.
        """
        self._topic_prefix(topic)  # a topic too long raises here; a V2 one is remembered
        count = len(bodies)
        index = np.zeros(count, dtype=np.int64) if columns.head_index is None \
            else np.asarray(columns.head_index, dtype=np.int64)
        records, sizes, headers = encode_batch(
            topic, bodies, columns.heads, index, suffixes, flags=None if type(flag) is int and not flag else flag,
            born_timestamp=0 if born_timestamp is None else born_timestamp, queue_id=queue_id,
            store_host=self.store_host)
        total = int(sizes.sum())
        if total + END_FILE_MIN_BLANK_LENGTH > self.config.commitlog_file_size:
            raise MQClientError(f"the batch is {total} bytes and cannot fit one commit-log segment of "
                                f"{self.config.commitlog_file_size} bytes; send smaller batches")
        starts = np.zeros(count, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        one_size = int(sizes.min()) == int(sizes.max())
        header_rows = ByteRows(records, starts, HEADER.size, int(sizes[0]) if one_size else None)
        key_rows = key_hashes = None
        if self._index_keys:  # UNIQ_KEY and KEYS hashed here, once per head for KEYS (the reput thread's work)
            key_rows, key_hashes = index_key_rows(topic, columns.head_maps, index,
                                                  index_key_hashes(f"{topic}#", suffixes[:, :-1]))
        # A tags code per distinct map, from the map of its first message (the code reads no UNIQ_KEY).
        samples: list[Mapping[str, str] | None]
        if columns.head_index is None:
            samples = [columns[0]]
        else:
            heads_used, first_of = np.unique(index, return_index=True)
            samples = [None] * len(columns.heads)
            for head, first_message in zip(heads_used.tolist(), first_of.tolist()):
                samples[head] = columns[first_message]
        return self._append_placed(topic, queue_id, headers, starts, total, sizes, records, header_rows,
                                   properties=samples, code_index=index, key_hashes=key_hashes, key_rows=key_rows,
                                   born_now=born_timestamp is None, store_host=self.store_host)

    def append_encoded_records(self, topic: str, queue_id: int, records: Any, sizes: Any, codes: Any = None,
                               key_hashes: Any = None, key_rows: Any = None) -> PutResult:
        """Append whole records `encode_records` built (a Spark task did), as one batch of one queue.

        `records` is a writable buffer of the records back to back, `sizes` their sizes;
        QUEUEID, QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are filled in, in place,
        then the bytes go into the segment with one copy: the same bytes, units and
        dispatch as `append_batch` of the same messages. `codes` are the records' tags codes
        (None: 0); `key_hashes` are index-key hashes (`index_key_hash`) of record
        `key_rows[i]`, in log order, for the reput thread's key index. Every record's
        structure (size, magic, host flags, topic, lengths) is checked first:
        `MQClientError` and nothing stored when one is wrong. Costs numpy passes over the
        headers, no Python per record.
        """
        sizes = np.asarray(sizes, dtype=np.int64)
        count = len(sizes)
        if not count:
            raise MQClientError("a batch needs at least one message")
        buf = np.frombuffer(records, dtype=np.uint8)
        if not buf.flags.writeable:
            raise MQClientError("encoded records must be in a writable buffer (they are filled in place)")
        total_all = int(sizes.sum())
        if total_all != len(buf) or int(sizes.min()) < HEADER.size:
            raise MQClientError(f"{count} record sizes add up to {total_all} bytes, but the buffer holds {len(buf)}")
        if total_all + END_FILE_MIN_BLANK_LENGTH > self.config.commitlog_file_size:
            raise MQClientError(f"the batch is {total_all} bytes and cannot fit one commit-log segment of "
                                f"{self.config.commitlog_file_size} bytes; send smaller batches")
        _INT.pack(queue_id)
        starts = np.zeros(count, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        headers, header_rows, v2 = check_encoded_records(buf, sizes, starts, topic)
        if v2:
            self._v2_topics.add(topic)
        codes = np.zeros(count, dtype=np.int64) if codes is None else np.asarray(codes, dtype=np.int64)
        if len(codes) != count:
            raise MQClientError(f"{count} records but {len(codes)} tags codes")
        hashes = None if key_hashes is None or not len(key_hashes) else np.asarray(key_hashes, dtype=np.int64)
        rows = None if hashes is None else np.asarray(key_rows, dtype=np.int64)
        if rows is not None and (len(rows) != len(hashes) or int(rows.min()) < 0  # type: ignore[arg-type]
                                 or int(rows.max()) >= count):
            raise MQClientError("every index key hash needs the number of its record in the batch")
        headers["queue_id"] = queue_id
        # encode_records writes the default store host (a Spark task knows no server): its PutResult says so.
        return self._append_placed(topic, queue_id, headers, starts, total_all, sizes, buf.data, header_rows,
                                   codes=codes, key_hashes=hashes, key_rows=rows)

    def _property_blocks(self, properties: Sequence[Mapping[str, str] | None]) -> list[bytes]:
        """Each message's encoded property block (empty for none); a producer's `EncodedProperties` are reused."""
        if set(map(type, properties)) == {EncodedProperties}:
            blocks: list[bytes] = [p.encoded for p in properties]  # type: ignore[union-attr]
        else:
            blocks = [encode_properties(p).encode("utf-8") if p else b"" for p in properties]
        if max(map(len, blocks)) > MAX_PROPERTIES_LENGTH:
            raise MQClientError(
                f"message properties are {max(map(len, blocks))} bytes encoded; the limit is "
                f"{MAX_PROPERTIES_LENGTH} (RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values into the body")
        return blocks

    def set_store_host(self, host: str, port: int) -> None:
        """Write `host:port` (IPv4) as the store host of records appended from now on, and in their
        offset message ids. A server sets the address it serves at: RocketMQ's clients send a
        consumer's send-back, and an admin's view by offset id, to the host in the record."""
        self.store_host = (socket.inet_aton(host), port)

    def _append_placed(self, topic: str, queue_id: int, headers: np.ndarray, starts: Any, total: int, sizes: Any,
                       records: Any, header_rows: ByteRows | None = None, *, properties: Any = None, codes: Any = None,
                       code_index: Any = None, keys: Any = None, uniqs: Any = None, key_hashes: Any = None,
                       key_rows: Any = None, born_now: bool = False,
                       store_host: tuple[bytes, int] = (_STORE_IP, _STORE_PORT)) -> PutResult:
        """The batch appends' one place-and-pack core, for records of one queue whose `headers` (`record.pack_headers`)
        start `starts` apart and add up to `total` bytes.

        Under `put_lock`: the store time and the space (`_place_batch`), the fields the place
        decides (`record.place_headers`; BORNTIMESTAMP too when `born_now`), the copy, then the
        units and the dispatch entry (`_batch_written`). `records` is either a buffer of the
        records back to back whose headers lie at `header_rows` (overwritten once placed), or,
        without `header_rows`, a tuple of iterables of what follows each header (body, tail, ...),
        joined after the headers. The dispatch entry takes each record's tags code from `codes`,
        or from `properties` by the store's function (a delayed message's code is its due time:
        known only under the lock): one map a record, or with `code_index` one map per distinct
        property block, record i's being `properties[code_index[i]]` (the whole batch has one
        store time, so a code per block is each of its records' code), and index keys as strings
        (`keys`, `uniqs`) or hashes (`key_hashes` of records `key_rows`); with neither, the
        reput thread gets no entry. Data, not callbacks: with a copy and a dispatch
        closure a batch of ten cost 0.5% more instructions than before the core (callgrind).

        The single `append` does the same steps inline (the hot path of every send: see its docstring).
        """
        key = (topic, queue_id)
        count = len(headers)
        with self.put_lock:
            now, mf, first_qoff = self._place_batch(key, total, count)
            start = mf.wrote_position
            first = mf.file_from_offset + start
            commit_log_offsets = starts + first
            # The fields that depend on the log's place, filled before the copy: a torn copy
            # never leaves a valid-looking record with placeholder offsets.
            place_headers(headers, first_qoff, commit_log_offsets, now)
            if born_now:
                headers["born_timestamp"] = now
            if header_rows is None:
                size = headers.itemsize
                raw = headers.tobytes()
                slices = [raw[i : i + size] for i in range(0, count * size, size)]
                # One slice assignment for the whole batch (measured: cheaper than three copies per
                # record). A torn batch (killed mid-copy) shows whole records then garbage, which the
                # per-record checks of recovery cut; nothing of it was acknowledged.
                mf.mm[start : start + total] = b"".join(itertools.chain.from_iterable(zip(slices, *records)))
            else:
                header_rows.set(headers.view(np.uint8).reshape(count, headers.itemsize))
                mf.mm[start : start + total] = records
            mf.wrote_position = start + total
            self.topic_queue_table[key] = first_qoff + count
            if properties is not None:
                fn = self.tags_code_fn
                codes = [fn(topic, p, now) if p else 0 for p in properties]
                if code_index is not None:
                    codes = np.asarray(codes, dtype=np.int64)[code_index] if any(codes) else None
            indexed = key_hashes is not None and self._index_keys
            self._batch_written(BatchDispatch(topic, queue_id, first_qoff, first, sizes, codes, now, keys, uniqs,
                                              key_hashes if indexed else None,
                                              commit_log_offsets[key_rows] if indexed else None),
                                keys is not None or uniqs is not None or key_hashes is not None)
        return PutResult(first, total, first_qoff, now, count, commit_log_offsets.tolist(), store_host=store_host)

    def _batch_written(self, batch: BatchDispatch, has_keys: bool) -> None:
        """With `put_lock` held, once a batch's bytes are in place: its consume-queue units, and its
        dispatch entry when the reput thread has work for it (index keys, or units to write in recovery)."""
        key = (batch.topic, batch.queue_id)
        queues = self.unit_queues
        if queues is not None:
            cq = queues.get(key) or self.create_unit_queue(*key)  # type: ignore[misc]
            if not cq.put_batch(batch.first_commit_log_offset, batch.sizes, batch.tags_codes,
                                batch.first_queue_offset):
                log.error("consume queue %s/%d out of step at queue offset %d", batch.topic, batch.queue_id,
                          batch.first_queue_offset)
        if queues is None or (self._index_keys and has_keys):
            self.appended_count += 1
            self.dispatch_queue.append(batch)

    def _place_batch(self, key: tuple[str, int], total: int, count: int) -> tuple[int, MappedFile, int]:
        """A batch's store time, segment (it writes at `wrote_position`) and first queue offset.

        Called with `put_lock` held; store times never go back, even when the clock does.
        The space of its `count` units and `total` bytes is reserved first (`DiskFullError`
        before anything is written).
        """
        now = max(self.clock.now_ms(), self.last_store_timestamp)
        self.last_store_timestamp = now
        first_qoff = self.topic_queue_table.get(key, 0)
        queues = self.unit_queues
        if queues is not None:
            cq = queues.get(key) or self.create_unit_queue(*key)  # type: ignore[misc]
            if first_qoff + count > cq.room:
                cq.make_room(first_qoff, count)
        mf = self._active
        if mf is None or mf.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > mf.reserved:
            mf = self._room_for(total)
        return now, mf, first_qoff

    def _room_for(self, total: int) -> MappedFile:
        """The segment to write `total` bytes to, its space reserved; the active one is closed
        with a BLANK when the record does not fit.

        Called with `put_lock` held; the record goes at the returned file's `wrote_position`.
        The next segment is created and reserved before the BLANK is written, so a full
        disk raises `DiskFullError` with the log as it was.
        """
        need = total + END_FILE_MIN_BLANK_LENGTH  # a record always leaves room for a BLANK
        size = self.config.commitlog_file_size
        if need > size:
            raise MQClientError(f"a {total}-byte record cannot fit a {size}-byte commit-log segment")
        files = self.mapped_files
        mf = files.last_for_append(reserve=need)
        pos = mf.wrote_position
        if pos + need > size:
            mf.reserve(pos + END_FILE_MIN_BLANK_LENGTH)
            following = files.create_file(mf.file_from_offset + size, need)
            BLANK.pack_into(mf.mm, pos, size - pos, BLANK_MAGIC)
            mf.wrote_position = size
            mf = following
        else:
            mf.reserve(pos + need)
        self._active = mf
        return mf

    # -- read -----------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """The bytes of the record at `offset` (None when outside the log or not a record)."""
        mf = self.mapped_files.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        raw = mf.mm[pos : pos + size]
        if len(raw) != size or size < TOTAL_AND_MAGIC.size:
            return None
        total, magic = TOTAL_AND_MAGIC.unpack_from(raw, 0)
        if total != size or (magic != MAGIC_V1 and magic != MAGIC_V2):
            return None
        if self.set_aside and offset in self.set_aside:
            log.warning("commit log: not reading the record at offset %d: recovery set it aside (a wrong body CRC, "
                        "or it lies in a damaged range)", offset)
            return None
        return raw

    def read_message(self, offset: int, size: int, broker_name: str) -> StoredMessage | None:
        """The message at `offset` with the given record size, or None."""
        raw = self.read(offset, size)
        return None if raw is None else StoredMessage(raw, broker_name)

    def record_size_at(self, offset: int) -> int:
        """TOTALSIZE of the record that starts at `offset`; 0 when none does. Any offset may be asked
        (a client's message id): a record starts there only if its magic is one, its PHYSICALOFFSET
        field names `offset` and it lies in its file, below the write position."""
        mf = self.mapped_files.find(offset)
        if mf is None or offset < 0:
            return 0
        pos = offset - mf.file_from_offset
        if pos + PREFIX.size > mf.file_size:
            return 0
        total, magic = TOTAL_AND_MAGIC.unpack_from(mf.mm, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or total < PREFIX.size or pos + total > mf.file_size \
                or offset + total > self.max_offset \
                or COMMIT_LOG_OFFSET.unpack_from(mf.mm, pos + COMMIT_LOG_OFFSET_POS)[0] != offset:
            return 0
        return total

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at `offset` (-1 when absent)."""
        raw = self.read(offset, size)
        if raw is None:
            return -1
        msg = StoredMessage(raw, "")
        try:
            return msg.store_timestamp
        except StoreCorruptedError:
            return -1

    def scan(self, start: int, check_crc: bool = True) -> Iterator[tuple[int, int, DispatchRequest]]:
        """Walk records from `start`: yields `(offset, size, request)`; stops at the first bad record.

        BLANK records move on to the next segment.
        """
        offset = start
        fn = self.tags_code_fn
        while True:
            mf = self.mapped_files.find(offset)
            if mf is None:
                return
            pos = offset - mf.file_from_offset
            size, request = check_record(mf.mm, pos, mf.file_size, check_crc, fn)
            if size > 0:
                assert request is not None  # described: check_record was asked to
                yield offset, size, request
                offset += size
            elif size == 0:
                offset = mf.file_from_offset + mf.file_size
            else:
                return

    def close(self) -> None:
        """Unmap the segments."""
        self.mapped_files.close()
