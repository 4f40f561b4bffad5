"""Properties strings of many messages at once (`name\x01value\x02...`), split with numpy over their bytes.

The batch twin of `message.decode_properties` (RocketMQ's rules: an entry ends at a 0x02 or
the row's end, its first 0x01 splits name from value, entries with an empty name or value are
dropped). The Spark reader (`mqlite.spark.arrowread`) builds its Arrow property columns on it:
`mqlite.record` says where each record's properties lie (`properties_length_pos`,
`properties_lengths`), this module splits what lies there. Measured in bench/bench_spark.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PropertyLayout", "PropertyEntries"]


class PropertyLayout:
    """One layout shared by every properties string of a batch (one producer's messages, say).

    Applies when every row has the same length and its separators at the same
    places as the first row, whose entries are all well-formed: then entries
    are found by arithmetic, and a value or name "column" is a strided view of
    the rows (`column`), copied with one memcpy per row. `buffer` is any object
    with the buffer protocol (a mapped file, an Arrow buffer).
    """

    __slots__ = ("buffer", "base", "n", "width", "starts", "splits", "ends", "names", "same_names", "_values")

    def __init__(self, buffer: Any, base: int, n: int, width: int, starts: list[int], splits: list[int],
                 ends: list[int], names: list[bytes]) -> None:
        self.buffer, self.base, self.n, self.width = buffer, base, n, width
        self.starts, self.splits, self.ends, self.names = starts, splits, ends, names
        self.same_names = all(self._equal(s, name) for s, name in zip(starts, names))
        self._values: np.ndarray | None = None

    @classmethod
    def of(cls, buffer: Any, data: np.ndarray, offsets: np.ndarray) -> PropertyLayout | None:
        """The layout of the rows [offsets[i], offsets[i + 1]) of `buffer` (`data`: their bytes), or None."""
        n = len(offsets) - 1
        width = int(offsets[1] - offsets[0]) if n else 0
        if width < 8 or len(data) != width * n or not (np.diff(offsets) == width).all():
            return None
        first = data[:width].tobytes()
        if not first.endswith(b"\x02"):
            return None
        starts, splits, ends, names = [], [], [], []
        position = 0
        for entry in first[:-1].split(b"\x02"):
            name, _, value = entry.partition(b"\x01")
            if not name or not value or b"\x01" in value or b"\x00" in entry:
                return None  # an entry the general parser drops or splits differently
            starts.append(position)
            splits.append(position + len(name))
            ends.append(position + len(entry))
            names.append(name)
            position += len(entry) + 1
        for column, byte in [*((p, 1) for p in splits), *((e, 2) for e in ends)]:
            if not (data[column::width] == byte).all():
                return None
        template = cls(buffer, int(offsets[0]), n, width, starts, splits, ends, names)
        # No separator (nor NUL) anywhere else: with every name equal to the first row's, only the
        # values need looking at, and they are copied out anyway (a word-wise test, 8 bytes a step).
        if template.same_names:
            if _has_byte_below_3(template.values()):
                return None
        elif np.count_nonzero(data < 3) != n * 2 * len(names):
            return None
        return template

    def column(self, start: int, length: int) -> np.ndarray:
        """Bytes [start, start + length) of every row, as a strided view (one item per row)."""
        return np.ndarray((self.n,), dtype=f"V{length}", buffer=self.buffer, offset=self.base + start,
                          strides=(self.width,))

    def _equal(self, start: int, key: bytes) -> bool:
        """Whether every row holds `key` at `start` (compared 8 bytes at a time, as integers)."""
        n, width = self.n, self.width
        last = self.base + (n - 1) * width + start
        if bytes(memoryview(self.buffer)[last : last + len(key)]) != key:
            return False
        for c in range(0, len(key), 8):  # the rows before the last: 8 bytes from there stay in the buffer
            chunk = key[c : c + 8]
            words = np.ndarray((n - 1,), dtype="<u8", buffer=self.buffer, offset=self.base + start + c,
                               strides=(width,))
            mask = np.uint64((1 << 8 * len(chunk)) - 1)
            if not ((words & mask) == np.uint64(int.from_bytes(chunk, "little"))).all():
                return False
        return True

    def values(self) -> np.ndarray:
        """Every row's values, row after row, as one byte array (copied once)."""
        if self._values is None:
            lengths = [e - p - 1 for p, e in zip(self.splits, self.ends)]
            out = np.empty(self.n, dtype=[(f"v{j}", f"V{w}") for j, w in enumerate(lengths)])
            for j, (p, w) in enumerate(zip(self.splits, lengths)):
                out[f"v{j}"] = self.column(p + 1, w)
            self._values = out.view(np.uint8)
        return self._values


def _has_byte_below_3(data: np.ndarray) -> bool:
    """Whether any byte is 0, 1 or 2; a word-wise test (`hasless(x, 3)`, exact for "any")."""
    whole = len(data) // 8 * 8
    words = data[:whole].view("<u8")
    low = np.uint64(0x0303030303030303)
    high = np.uint64(0x8080808080808080)
    return bool(((words - low) & ~words & high).any()) or bool((data[whole:] < 3).any())


class PropertyEntries:
    """Properties strings (`name 0x01 value 0x02`...) split with numpy over their bytes.

    An entry runs from a row start or a 0x02 to the next 0x02 or the row end;
    its first 0x01 splits name from value; RocketMQ drops entries with an empty
    name or value. `starts`, `splits`, `ends` are byte positions in `buffer`
    (names are [start, split), values [split + 1, end)), in row order, so
    every gather is of ascending, disjoint ranges. Java writes a 0x02 after
    every entry and names hold no 0x01: that common case takes no sort and no
    search. Shortcuts, each checked before it is taken: one layout for the
    whole batch (`PropertyLayout`), and the same names in the same order in every
    row (`slot_names`: names are then repeated, not copied, and a property's
    values are every k-th entry). The Spark reader builds Arrow columns on it
    (`mqlite.spark.arrowread`); measured in bench/bench_spark.py.

    `buffer` holds the rows (any object with the buffer protocol); row i is
    bytes [offsets[i], offsets[i + 1]), `offsets` int64 and ascending.
    """

    def __init__(self, buffer: Any, offsets: np.ndarray) -> None:
        self.n = n = len(offsets) - 1
        self.row_offsets = offsets
        self.buffer = buffer
        self.size = memoryview(buffer).nbytes
        base, stop = int(offsets[0]), int(offsets[-1])
        data = np.frombuffer(buffer, dtype=np.uint8)[base:stop] if stop > base else np.empty(0, np.uint8)
        self._prefix: np.ndarray | None = None
        self._positions: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._slots: list[bytes] | None | bool = False  # False: not looked at yet
        self.template = PropertyLayout.of(buffer, data, offsets)
        if self.template is not None:
            t = self.template
            self.per_row = len(t.names)
            return  # entry positions only if asked for (`_entries`)
        # One pass over the bytes finds both separators (measured: a fifth cheaper than one pass each).
        marks = np.flatnonzero(data < 3)
        kinds = data[marks]
        seps = marks[np.flatnonzero(kinds == 2)] + base
        ones = marks[np.flatnonzero(kinds == 1)] + base
        rows_end = offsets[1:][offsets[1:] > offsets[:-1]]
        #: Entries in every row when all rows have as many (the usual batch), else 0.
        self.per_row = 0
        self._counts: np.ndarray | None = None
        if (data[rows_end - base - 1] == 2).all():  # every row ends with 0x02: entries end at the 0x02s
            starts, ends = np.empty_like(seps), seps
            starts[:1], starts[1:] = base, seps[:-1] + 1
            per_row = len(seps) // n if n else 0
            if per_row and len(seps) == per_row * n and (seps[per_row - 1 :: per_row] == offsets[1:] - 1).all():
                self.per_row = per_row
            else:
                self._counts = np.diff(np.searchsorted(seps, offsets))
        else:
            starts = np.sort(np.concatenate([offsets[:-1], seps + 1]), kind="stable")
            ends = np.sort(np.concatenate([seps, offsets[1:]]), kind="stable")
        if len(ones) == len(starts) and ((ones >= starts) & (ones < ends)).all():
            splits = ones  # exactly one 0x01 in every entry
        else:
            splits = np.append(ones, stop + 1)[np.searchsorted(ones, starts)]
        ok = (splits > starts) & (splits + 1 < ends)
        if not ok.all():
            starts, splits, ends = starts[ok], splits[ok], ends[ok]
            self.per_row, self._counts = 0, None
        self._positions = (starts, splits, ends)

    @property
    def starts(self) -> np.ndarray:
        return self._entries()[0]

    @property
    def splits(self) -> np.ndarray:
        return self._entries()[1]

    @property
    def ends(self) -> np.ndarray:
        return self._entries()[2]

    def _entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Byte positions of every entry: where its name starts, its 0x01, its end."""
        if self._positions is None:
            t = self.template
            assert t is not None
            rows = np.repeat(np.arange(self.n, dtype=np.int64) * t.width + t.base, self.per_row)
            self._positions = tuple(rows + np.tile(np.array(column), self.n)  # type: ignore[assignment]
                                    for column in (t.starts, t.splits, t.ends))
        return self._positions

    def slot_names(self) -> list[bytes] | None:
        """The names of every row when all rows have the same names in the same order, else None."""
        if self._slots is False:
            self._slots = self._find_slot_names()
        return self._slots  # type: ignore[return-value]

    def _find_slot_names(self) -> list[bytes] | None:
        k = self.per_row
        if not k:
            return None
        if self.template is not None:
            return self.template.names if self.template.same_names else None
        starts, splits, size = self.starts, self.splits, self.size
        view = memoryview(self.buffer)
        first = [bytes(view[a:b]) for a, b in zip(starts[:k].tolist(), splits[:k].tolist())]
        for j, name in enumerate(first):
            at = starts[j::k]
            if not (splits[j::k] - at == len(name)).all():
                return None
            for c in range(0, len(name), 8):  # 8 bytes at a time, as integers (shifted near the buffer end)
                chunk = name[c : c + 8]
                if size < 8:
                    return None
                words = np.ndarray((size - 7,), dtype="<u8", buffer=self.buffer, strides=(1,))
                where = np.minimum(at + c, size - 8)
                found = words[where] >> ((at + c - where) * 8).astype(np.uint64)
                mask = np.uint64((1 << 8 * len(chunk)) - 1)
                if not ((found & mask) == np.uint64(int.from_bytes(chunk, "little"))).all():
                    return None
        return first

    def counts(self) -> np.ndarray:
        """Entries per row."""
        if self.per_row:
            return np.full(self.n, self.per_row)
        if self._counts is None:
            rows = np.searchsorted(self.row_offsets, self.starts, side="right") - 1
            self._counts = np.bincount(rows, minlength=self.n)
        return self._counts

    def matching(self, key: bytes) -> np.ndarray:
        """Entries whose name is `key`: their first 8 bytes as an integer, compared once for all."""
        size = self.size
        if size < 8:
            view = memoryview(self.buffer)
            return np.flatnonzero([bytes(view[s:p]) == key
                                   for s, p in zip(self.starts.tolist(), self.splits.tolist())])
        if self._prefix is None:
            # One little-endian 8-byte word per byte position; entries in the last 7 bytes are shifted down.
            words = np.ndarray((size - 7,), dtype="<u8", buffer=self.buffer, strides=(1,))
            at = np.minimum(self.starts, size - 8)
            self._prefix = words[at] >> ((self.starts - at) * 8).astype(np.uint64)
        head = key[:8]
        mask = np.uint64((1 << 8 * len(head)) - 1)
        hits = np.flatnonzero((self._prefix & mask == np.uint64(int.from_bytes(head, "little")))
                              & (self.splits - self.starts == len(key)))
        if len(key) > 8 and len(hits):
            names = np.ndarray((size - len(key) + 1,), dtype=f"S{len(key)}", buffer=self.buffer, strides=(1,))
            hits = hits[names[self.starts[hits]] == key]
        return hits
