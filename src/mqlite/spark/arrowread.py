"""Reading one `QueueRange` into Arrow record batches, with numpy over the mapped files.

Runs in Spark's executor Python workers. Per task it maps only the
consume-queue files and commit-log segments the range touches (read-only,
no lock), and for each slice of up to `BATCH_ROWS` units:

1. views the 20-byte units as a numpy array (`CQ_DTYPE`) and drops blank
   units (a queue that starts mid-file) and, for `subExpression`, units whose
   tags code is not subscribed (the broker's consume-queue screen);
2. copies the 88-byte fixed header of every record in one fancy-indexing
   pass (`record.headers_at`: a view of the segment with one header-sized item
   per byte position) and checks it against the unit: size, magic, queue id and offset, and
   lengths that add up to the record's size; a record that fails the size or
   magic check is gone (data loss), any other oddity takes the slow path;
3. copies the variable-length fields (body, properties) out of the segment:
   with one memcpy per row when they are all of one length, else with one
   Arrow `take` (the wanted ranges are every other element of a binary array
   over the whole segment);
4. parses properties with the vectorised properties parser
   (`propertybatch.PropertyEntries`, numpy over their bytes): the positions of the
   0x01 and 0x02 separators give every entry. A batch whose property strings
   all share one layout (one producer's messages: same names, same value
   lengths) is parsed by arithmetic instead, and its values are columns of the
   rows. This module only builds the Arrow columns on it.

Every position and length in a record comes from `mqlite.record`.

Records the fast path does not handle (IPv6 hosts, compressed bodies, records
of another queue) send their slice through a per-record Python decoder with
the same output. Measured in bench/bench_spark.py (docs/benchmarks.md, 5d):
about 700 instructions a row on the default schema (2,200 with varied layouts).
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from ..record import (
    BODY_POS,
    HOST_V6_FLAGS,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH,
    decode_message,
    headers_at,
    properties_length_pos,
    properties_lengths,
)
from ..consumequeue import BLANK_UNIT, CQ_DTYPE
from ..errors import MQLiteError, StoreCorruptedError
from ..filter import MessageSelector
from ..message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SysFlag,
    decode_properties,
    encode_properties,
)
from ..propertybatch import PropertyEntries
from ..reader import StoreLayout
from .options import ReadOptions
from .plan import QueueRange, data_loss

log = logging.getLogger("mqlite")

__all__ = ["read_range", "BATCH_ROWS", "RangeReader"]

#: Units per record batch (measured: 64k rows amortise the per-batch Arrow calls).
BATCH_ROWS = 1 << 16

#: Records the fast path does not read: a compressed body, or IPv6 hosts (they move the body).
_SLOW_FLAGS = SysFlag.COMPRESSED | HOST_V6_FLAGS
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_BLANK_SIZE = BLANK_UNIT[1]
_UNIT = CQ_DTYPE.itemsize  # one consume-queue unit
#: Columns that need the properties parsed.
_PROPERTY_USERS = frozenset({"msgId", "tags", "keys", "properties", "key", "headers"})


class _Files:
    """Read-only maps of one directory's segment files, opened on first use and closed together."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._maps: dict[int, tuple[mmap.mmap, np.ndarray, pa.Buffer] | None] = {}

    def get(self, start: int) -> tuple[mmap.mmap, np.ndarray, pa.Buffer] | None:
        """The map of the file starting at `start`, as bytes, numpy uint8 and Arrow buffer (None if gone)."""
        if start in self._maps:
            return self._maps[start]
        entry = None
        try:
            fd = os.open(os.path.join(self.directory, StoreLayout.file_name(start)), os.O_RDONLY)
            try:
                mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            entry = (mm, np.frombuffer(mm, dtype=np.uint8), pa.py_buffer(mm))
        except (OSError, ValueError):  # missing (deleted by retention) or empty
            entry = None
        self._maps[start] = entry
        return entry

    def close(self) -> None:
        maps = [entry[0] for entry in self._maps.values() if entry is not None]
        self._maps.clear()  # drops the numpy and Arrow views first
        for mm in maps:
            try:
                mm.close()
            except BufferError:
                pass  # a view is still referenced somewhere; the map goes with it


class _Rows:
    """Rows of one batch: fixed fields as numpy arrays, variable ones built on demand."""

    def __init__(self, qoff: np.ndarray, commit_log_offset: np.ndarray, size: np.ndarray,
                 header: np.ndarray | None) -> None:
        self.qoff, self.commit_log_offset, self.size = qoff, commit_log_offset, size
        self.header = header  # record.HEADER_DTYPE records (fast path)
        self.n = len(qoff)
        self.flag: np.ndarray = np.empty(0)
        self.born: np.ndarray = np.empty(0)
        self.stored: np.ndarray = np.empty(0)
        self.reconsume: np.ndarray = np.empty(0)
        self.body: pa.Array | None = None
        self.props: pa.Array | None = None
        self.offset_ids: pa.Array | None = None
        self._parsed: _Properties | None = None

    def select(self, mask: np.ndarray) -> _Rows:
        rows = _Rows(self.qoff[mask], self.commit_log_offset[mask], self.size[mask],
                     self.header[mask] if self.header is not None else None)
        rows.flag, rows.born, rows.stored, rows.reconsume = (
            self.flag[mask], self.born[mask], self.stored[mask], self.reconsume[mask])
        arrow_mask = pa.array(mask)
        rows.body = self.body.filter(arrow_mask) if self.body is not None else None
        rows.props = self.props.filter(arrow_mask) if self.props is not None else None
        rows.offset_ids = self.offset_ids.filter(arrow_mask) if self.offset_ids is not None else None
        return rows

    @property
    def parsed(self) -> _Properties:
        if self._parsed is None:
            assert self.props is not None
            self._parsed = _Properties(self.props)
        return self._parsed


def _tiled(data: bytes | np.ndarray, lengths: list[int], n: int) -> pa.Array:
    """A string array of `n` repetitions of items of these `lengths`, whose bytes are `data`.

    `data` is the items of one repetition (repeated here) or of all of them.
    """
    if isinstance(data, bytes):
        data = data * n
    k, step = len(lengths), sum(lengths)
    rows = np.arange(0, n * step, step, dtype=np.int32)
    offsets = np.empty(n * k + 1, dtype=np.int32)
    inner = 0
    for j, length in enumerate(lengths):  # one strided pass per item of a repetition
        offsets[j : n * k : k] = rows + inner
        inner += length
    offsets[-1] = n * step
    return pa.Array.from_buffers(pa.string(), n * k, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


class _Properties(PropertyEntries):
    """A batch's properties strings as Arrow columns: names, values, per-row offsets, one property.

    The entries are found by the vectorised properties parser (`propertybatch.PropertyEntries`); this adds
    only the Arrow arrays built from their positions.
    """

    def __init__(self, props: pa.Array) -> None:
        n = len(props)
        _, offsets_buffer, buffer = props.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=n + 1, offset=props.offset * 4).astype(np.int64)
        super().__init__(buffer, offsets)
        self._names: pa.Array | None = None
        self._values: pa.Array | None = None

    @property
    def names(self) -> pa.Array:
        if self._names is None:
            slots = self.slot_names()
            if slots is not None:
                self._names = _tiled(b"".join(slots), [len(name) for name in slots], self.n)
            else:
                self._names = _gather(self.buffer, self.starts, self.splits, pa.string())
        return self._names

    @property
    def values(self) -> pa.Array:
        if self._values is None:
            t = self.template
            if t is not None:
                self._values = _tiled(t.values(), [e - p - 1 for p, e in zip(t.splits, t.ends)], self.n)
            else:
                self._values = _gather(self.buffer, self.splits + 1, self.ends, pa.string())
        return self._values

    def offsets(self) -> pa.Array:
        """Per-row entry offsets (the map and headers columns)."""
        offsets = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(self.counts(), out=offsets[1:])
        return pa.array(offsets)

    def get(self, name: str) -> pa.Array:
        """The value of property `name` per row (null where absent; the last one where repeated)."""
        t = self.template
        key = name.encode("utf-8")
        n, k = self.n, self.per_row
        names = self.slot_names()
        if names is not None:  # the same names in every row: the property is every k-th entry
            slots = [j for j, other in enumerate(names) if other == key]
            if not slots:
                return pa.nulls(n, type=pa.string())
            j = slots[-1]  # a name repeated in a row: the last one, as RocketMQ's map keeps
            if t is not None:  # one layout: a column of the rows
                p, e = t.splits[j], t.ends[j]
                return _tiled(np.array(t.column(p + 1, e - p - 1)), [e - p - 1], n)
            return _gather(self.buffer, self.splits[j::k] + 1, self.ends[j::k], pa.string())
        hits = self.matching(key)
        if not len(hits):
            return pa.nulls(n, type=pa.string())
        rows = np.searchsorted(self.row_offsets, self.starts[hits], side="right") - 1
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # a name repeated in a row: keep the last
            last = np.flatnonzero(np.append(rows[1:] != rows[:-1], True))
            hits, rows = hits[last], rows[last]
        found = _gather(self.buffer, self.splits[hits] + 1, self.ends[hits], pa.string())
        if len(rows) == n:
            return found
        index = np.full(n, -1, dtype=np.int64)
        index[rows] = np.arange(len(rows))
        return found.take(pa.array(index, mask=index < 0))


def _gather(buffer: pa.Buffer, starts: np.ndarray, ends: np.ndarray, kind: pa.DataType = pa.binary()) -> pa.Array:
    """The byte ranges [starts[i], ends[i]) of `buffer` as a binary (or string) array.

    The ranges must be ascending and disjoint: they and the gaps between them
    are the elements of one array over the whole buffer, and `take` of the
    even elements copies the ranges out (C++, one memcpy each).
    """
    n = len(starts)
    if n == 0:
        return pa.array([], type=kind)
    width = int(ends[0] - starts[0])
    if 0 < width <= 4096 and (ends - starts == width).all() and n * width < 2**31:
        # All of one length (ids, fixed-size bodies): one `width`-byte item per buffer position, copied whole.
        items = np.ndarray((buffer.size - width + 1,), dtype=f"V{width}", buffer=buffer, strides=(1,))[starts]
        offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(items)])
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2], bounds[1::2] = starts, ends
    even = pa.array(np.arange(0, 2 * n, 2, dtype=np.int64))
    if buffer.size < 2**31:
        spread = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(bounds.astype(np.int32)), buffer])
        return spread.take(even)
    large = pa.large_string() if kind == pa.string() else pa.large_binary()
    spread = pa.Array.from_buffers(large, 2 * n - 1, [None, pa.py_buffer(bounds), buffer])
    return spread.take(even).cast(kind)


class RangeReader:
    """Reads queue ranges of one store into Arrow batches of `columns` (one task, one instance)."""

    def __init__(self, options: ReadOptions, arrow_schema: pa.Schema) -> None:
        self.options = options
        self.schema = arrow_schema
        self.columns = arrow_schema.names
        tags = options.tag_selector()
        self.tags = tags
        self.tag_codes = np.array(sorted(c & 0xFFFFFFFF for c in tags.codes), dtype=np.int64) if tags else None
        self.sql: MessageSelector | None = options.sql_selector()
        self.need_props = bool(_PROPERTY_USERS.intersection(self.columns)) or tags is not None or self.sql is not None
        self.need_body = "body" in self.columns or "value" in self.columns
        self.lost = 0
        self.set_aside = np.zeros(0, dtype=np.int64)

    def read(self, part: QueueRange) -> Iterator[pa.RecordBatch]:
        """Yield the batches of `part`; raises the data-loss error when messages are gone (failOnDataLoss)."""
        layout = StoreLayout.of(part.path)
        cq_size = layout.consumequeue_file_size - layout.consumequeue_file_size % _UNIT
        self.cl_size = layout.commitlog_file_size
        self.topic = part.topic
        self.topic_bytes = part.topic.encode("utf-8")
        self.queue_id = part.queue_id
        cqs = _Files(layout.consume_queue_dir(part.topic, part.queue_id))
        self.segments = _Files(layout.commitlog_dir)
        self.lost = 0
        # Records recovery set aside for a wrong body CRC: lost, never handed out.
        self.set_aside = np.array(sorted(layout.set_aside()), dtype=np.int64)
        try:
            qoff = part.start
            while qoff < part.end:
                file_start = qoff * _UNIT // cq_size * cq_size
                count = min(part.end, (file_start + cq_size) // _UNIT, qoff + BATCH_ROWS) - qoff
                entry = cqs.get(file_start)
                if entry is None or len(entry[1]) < qoff * _UNIT - file_start + count * _UNIT:
                    self._lose(count, f"consume queue {part.topic}/{part.queue_id} offsets {qoff}..{qoff + count}")
                else:
                    units = np.frombuffer(entry[0], dtype=CQ_DTYPE, count=count, offset=qoff * _UNIT - file_start)
                    yield from self._units(qoff, units)
                    del units
                qoff += count
        finally:
            cqs.close()
            self.segments.close()
            if self.lost:  # as Kafka's source warns: failOnDataLoss=false skipped what was gone
                log.warning("skipped %d messages of %s/%d offsets %d..%d that the store no longer holds "
                            "(failOnDataLoss=false)", self.lost, part.topic, part.queue_id, part.start, part.end)

    def _lose(self, count: int, what: str) -> None:
        if count and self.options.fail_on_data_loss:
            raise data_loss(f"reading {what}")
        self.lost += count

    def _units(self, first: int, units: np.ndarray) -> Iterator[pa.RecordBatch]:
        commit_log_offset = units["offset"].astype(np.int64)
        size = units["size"].astype(np.int64)
        qoff = np.arange(first, first + len(commit_log_offset), dtype=np.int64)
        blank = (commit_log_offset == 0) & (size == _BLANK_SIZE)  # fillPreBlank units before a queue's first message
        bad = ((commit_log_offset < 0) | (size <= 0)) & ~blank
        if bad.any():
            self._lose(int(bad.sum()), f"{self.topic}/{self.queue_id} units from offset {first}")
        if len(self.set_aside):
            aside = np.isin(commit_log_offset, self.set_aside)
            if aside.any():
                self._lose(int(aside.sum()), f"{self.topic}/{self.queue_id} units from offset {first} "
                                             f"(records set aside by recovery for a wrong body CRC)")
                bad |= aside
        keep = ~blank & ~bad
        if self.tag_codes is not None:
            keep &= np.isin(units["tags_code"].astype(np.int64) & 0xFFFFFFFF, self.tag_codes)
        if not keep.all():
            commit_log_offset, size, qoff = commit_log_offset[keep], size[keep], qoff[keep]
        if not len(commit_log_offset):
            return
        segment = commit_log_offset // self.cl_size
        cuts = np.flatnonzero(segment[1:] != segment[:-1]) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(commit_log_offset)]):
            rows = self._records(int(segment[lo]) * self.cl_size, qoff[lo:hi], commit_log_offset[lo:hi], size[lo:hi])
            if rows is not None and rows.n:
                rows = self._filter(rows)
                if rows.n:
                    yield self._batch(rows)

    # -- records ---------------------------------------------------------------------------------------
    def _records(self, seg_start: int, qoff: np.ndarray, commit_log_offset: np.ndarray,
                 size: np.ndarray) -> _Rows | None:
        """Check and decode the fixed fields of the records the units point at in one segment."""
        entry = self.segments.get(seg_start)
        where = f"{self.topic}/{self.queue_id} offsets {int(qoff[0])}..{int(qoff[-1]) + 1}"
        if entry is None:
            self._lose(len(qoff), f"{where} (commit-log segment {StoreLayout.file_name(seg_start)} is gone)")
            return None
        mm, u8, buffer = entry
        local = commit_log_offset - seg_start
        ok = (size >= MIN_RECORD_SIZE) & (local + size <= len(u8))
        if not ok.all():
            self._lose(int((~ok).sum()), f"{where} (units point outside the commit log)")
            qoff, commit_log_offset, size, local = qoff[ok], commit_log_offset[ok], size[ok], local[ok]
            if not len(qoff):
                return None
        # Every header copied whole in one fancy-indexing pass (`headers_at`).
        header = headers_at(mm, len(u8), local)
        magic = header["magic"].astype(np.int64)  # big-endian fields are converted once each
        good = (header["total"].astype(np.int64) == size) & ((magic == MAGIC_V1) | (magic == MAGIC_V2))
        if not good.all():
            self._lose(int((~good).sum()), f"{where} (records overwritten or removed)")
            qoff, commit_log_offset, size, local, header, magic = (
                qoff[good], commit_log_offset[good], size[good], local[good], header[good], magic[good])
            if not len(qoff):
                return None
        if (header["sys_flag"] & _SLOW_FLAGS).any():
            return self._records_slowly(mm, local, qoff, commit_log_offset, size)
        # The record says it is this queue's message at this offset, and its lengths add up to its size.
        body_length = header["body_length"].astype(np.int64)
        body_start = local + BODY_POS
        body_end = body_start + body_length
        record_end = local + size
        props_len_pos = properties_length_pos(body_end, len(self.topic_bytes), magic)
        props_start = props_len_pos + PROPERTIES_LENGTH.size
        sane = ((header["queue_id"] == self.queue_id) & (header["queue_offset"].astype(np.int64) == qoff)
                & (body_length >= 0) & (props_start <= record_end))
        props_end = props_start + properties_lengths(u8, props_len_pos if sane.all()
                                                     else np.where(sane, props_len_pos, 0))
        if not (sane & (props_end == record_end)).all() or not (body_start[1:] >= record_end[:-1]).all():
            # Another queue's record (a light message queue's), or something odd: decode one by one.
            return self._records_slowly(mm, local, qoff, commit_log_offset, size)
        rows = _Rows(qoff, commit_log_offset, size, header)
        rows.flag = header["flag"].astype(np.int32)
        rows.born = header["born_timestamp"].astype(np.int64)
        rows.stored = header["store_timestamp"].astype(np.int64)
        rows.reconsume = header["reconsume_times"].astype(np.int32)
        if self.need_body:
            rows.body = _gather(buffer, body_start, body_end)
        if self.need_props:
            # Not validated as UTF-8 (Java wrote it; Spark keeps strings as bytes): the filter decodes leniently.
            rows.props = _gather(buffer, props_start, props_end, pa.string())
        return rows

    def _records_slowly(self, mm: mmap.mmap, local: np.ndarray, qoff: np.ndarray, commit_log_offset: np.ndarray,
                        size: np.ndarray) -> _Rows | None:
        """The per-record decoder: IPv6 hosts, compressed bodies, anything odd."""
        keep = np.ones(len(qoff), dtype=bool)
        flag, born, stored, reconsume, bodies, props, ids = [], [], [], [], [], [], []
        for i, (start, length) in enumerate(zip(local.tolist(), size.tolist())):
            try:
                # The unit vouches for the record (size and magic were checked); a light message
                # queue's units point at records of another topic and queue, which are its messages.
                msg = decode_message(mm[start : start + length], "")
                body = msg.body
            except Exception as exc:  # any decoding fault: the unit does not point at a message ...
                if isinstance(exc, MQLiteError) and not isinstance(exc, StoreCorruptedError):
                    raise  # ... but a missing codec package: the message is there, this worker cannot read it
                keep[i] = False
                continue
            flag.append(msg.flag)
            born.append(msg.born_timestamp)
            stored.append(msg.store_timestamp)
            reconsume.append(msg.reconsume_times)
            bodies.append(body)
            props.append(encode_properties(msg.properties))
            ids.append(msg.offset_msg_id)
        if not keep.all():
            self._lose(int((~keep).sum()), f"{self.topic}/{self.queue_id} (records that do not decode)")
        rows = _Rows(qoff[keep], commit_log_offset[keep], size[keep], None)
        rows.flag = np.array(flag, dtype=np.int32)
        rows.born = np.array(born, dtype=np.int64)
        rows.stored = np.array(stored, dtype=np.int64)
        rows.reconsume = np.array(reconsume, dtype=np.int32)
        rows.body = pa.array(bodies, type=pa.binary())
        rows.props = pa.array(props, type=pa.string())
        rows.offset_ids = pa.array(ids, type=pa.string())
        return rows

    def _filter(self, rows: _Rows) -> _Rows:
        """`subExpression`'s exact tag check (the units' codes may collide) and the SQL92 `filter`."""
        if self.tags is None and self.sql is None:
            return rows
        mask = np.ones(rows.n, dtype=bool)
        if self.tags is not None:
            tags = rows.parsed.get(PROPERTY_TAGS)
            wanted = pc.is_in(tags, value_set=pa.array(sorted(self.tags.tags), type=pa.string()))
            mask &= wanted.fill_null(False).to_numpy(zero_copy_only=False)
        if self.sql is not None:
            assert rows.props is not None
            matches = self.sql.matches
            texts = (raw.decode("utf-8", "replace") for raw in rows.props.cast(pa.binary()).to_pylist())
            mask &= np.fromiter((matches(decode_properties(text)) for text in texts), dtype=bool, count=rows.n)
        return rows if mask.all() else rows.select(mask)

    # -- columns -----------------------------------------------------------------------------------------
    def _batch(self, rows: _Rows) -> pa.RecordBatch:
        arrays = []
        for field in self.schema:
            array = self._column(field.name, rows)
            arrays.append(array if array.type == field.type else array.cast(field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _column(self, name: str, rows: _Rows) -> pa.Array:
        n = rows.n
        if name == "topic":
            data = self.topic_bytes * n
            step = len(self.topic_bytes)
            offsets = np.arange(0, (n + 1) * step, step, dtype=np.int32) if step else np.zeros(n + 1, np.int32)
            return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        if name in ("queueId", "partition"):
            return pa.array(np.full(n, self.queue_id, dtype=np.int32))
        if name in ("queueOffset", "offset"):
            return pa.array(rows.qoff)
        if name in ("body", "value"):
            assert rows.body is not None
            return rows.body
        if name == "flag":
            return pa.array(rows.flag)
        if name == "bornTimestamp":
            return pa.array(rows.born * 1000).view(_TIMESTAMP)
        if name in ("storeTimestamp", "timestamp"):
            return pa.array(rows.stored * 1000).view(_TIMESTAMP)
        if name == "timestampType":
            return pa.array(np.ones(n, dtype=np.int32))  # LogAppendTime: the broker's store time
        if name == "reconsumeTimes":
            return pa.array(rows.reconsume)
        if name == "commitLogOffset":
            return pa.array(rows.commit_log_offset)
        if name == "storeSize":
            return pa.array(rows.size.astype(np.int32))
        parsed = rows.parsed
        if name == "msgId":
            uniq = parsed.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            return pc.coalesce(uniq, self._offset_ids(rows)) if uniq.null_count else uniq
        if name == "tags":
            return parsed.get(PROPERTY_TAGS)
        if name == "keys":
            return _split_keys(parsed.get(PROPERTY_KEYS))
        if name == "key":
            return parsed.get(PROPERTY_KEYS).cast(pa.binary())
        if name == "properties":
            return pa.MapArray.from_arrays(parsed.offsets(), parsed.names, parsed.values)
        if name == "headers":
            pairs = pa.StructArray.from_arrays([parsed.names, parsed.values.cast(pa.binary())], names=["key", "value"])
            return pa.ListArray.from_arrays(parsed.offsets(), pairs)
        raise AssertionError(f"unknown column {name!r}")  # the schema was checked on the driver

    def _offset_ids(self, rows: _Rows) -> pa.Array:
        """`create_offset_msg_id` for every row: store host, port and offset as 32 hex digits."""
        if rows.offset_ids is not None:
            return rows.offset_ids
        assert rows.header is not None
        raw = np.empty(rows.n, dtype=[("ip", "S4"), ("port", ">i4"), ("offset", ">i8")])
        header = rows.header
        raw["ip"], raw["port"], raw["offset"] = header["store_host"], header["store_port"], rows.commit_log_offset
        digits = raw.view(np.uint8).reshape(rows.n, 16)
        text = np.empty((rows.n, 32), dtype=np.uint8)
        text[:, 0::2], text[:, 1::2] = _HEX[digits >> 4], _HEX[digits & 15]
        offsets = np.arange(0, 32 * (rows.n + 1), 32, dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), rows.n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _split_keys(keys: pa.Array) -> pa.Array:
    """`KEYS` values split on spaces, empty pieces dropped (an absent property gives an empty list)."""
    n = len(keys)
    if keys.null_count == n:
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], type=pa.string()))
    _, offsets_buffer, data_buffer = keys.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]] if data_buffer else np.empty(0)
    if not np.count_nonzero(data == 0x20):  # one key each (values are never empty)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(keys.is_valid().to_numpy(zero_copy_only=False), out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), keys.drop_null())
    lists = pc.split_pattern(keys.fill_null(""), " ")
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    flat = lists.flatten()
    ok = pc.greater(pc.binary_length(flat), 0)
    parents = parents[ok.to_numpy(zero_copy_only=False)]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents, minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(ok))


def read_range(options: ReadOptions, arrow_schema: pa.Schema, part: Any) -> Iterator[pa.RecordBatch]:
    """What `read(partition)` returns: Spark's empty `InputPartition(None)` reads nothing."""
    if not isinstance(part, QueueRange):
        return iter(())
    return RangeReader(options, arrow_schema).read(part)
