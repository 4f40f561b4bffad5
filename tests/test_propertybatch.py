"""propertybatch.py: properties strings split with numpy (no pyarrow), what the Spark reader builds on.

The vectorised parser must agree with `decode_properties` (RocketMQ's rules) on every row, by
both of its paths (one shared layout, the general separator scan).
"""

from __future__ import annotations

import numpy as np
import pytest

from mqlite.message import decode_properties
from mqlite.propertybatch import PropertyEntries


def _parsed(rows: list[bytes]) -> tuple[PropertyEntries, list[dict[str, str]]]:
    """The rows parsed by `PropertyEntries`, as one dict per row (the last of a repeated name)."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    data = b"".join(rows)
    entries = PropertyEntries(data, offsets)
    result: list[dict[str, str]] = [{} for _ in rows]
    row_of = np.searchsorted(offsets, entries.starts, side="right") - 1
    for row, start, split, end in zip(row_of.tolist(), entries.starts.tolist(), entries.splits.tolist(),
                                      entries.ends.tolist()):
        result[row][data[start:split].decode()] = data[split + 1 : end].decode()
    return entries, result


@pytest.mark.parametrize("rows", [
    # One layout (one producer's messages): the arithmetic path.
    [b"UNIQ_KEY\x01%032d\x02WAIT\x01true\x02" % i for i in range(50)],
    # Layouts that differ: the separator scan.
    [b"TAGS\x01t%d\x02KEYS\x01k%s\x02" % (i, b"x" * i) for i in range(20)],
    # Java 5 writes no trailing separator; empty names and values are dropped; a name repeated.
    [b"a\x01b", b"\x01x\x02y\x01\x02z\x01w\x02", b"", b"k\x011\x02k\x012\x02", b"LONG_NAME_12345\x01v\x02"],
    [b"x\x01y"],  # smaller than one 8-byte word
])
def test_property_entries_agree_with_decode_properties(rows: list[bytes]) -> None:
    _, parsed = _parsed(rows)
    assert parsed == [decode_properties(r.decode()) for r in rows]


def test_property_entries_find_a_name_in_every_row() -> None:
    rows = [b"TAGS\x01t%d\x02LONG_NAME_12345\x01v%d\x02" % (i, i) for i in range(3)] + [b"OTHER\x01o\x02"]
    entries, _ = _parsed(rows)
    data = b"".join(rows)
    for name in (b"TAGS", b"LONG_NAME_12345"):
        hits = entries.matching(name)
        assert [data[s:p] for s, p in zip(entries.starts[hits].tolist(), entries.splits[hits].tolist())] == [name] * 3
    assert len(entries.matching(b"NONE")) == 0


def test_property_entries_see_one_layout_and_its_names() -> None:
    rows = [b"UNIQ_KEY\x01%032d\x02WAIT\x01true\x02" % i for i in range(4)]
    entries, _ = _parsed(rows)
    assert entries.template is not None and entries.slot_names() == [b"UNIQ_KEY", b"WAIT"]
    varied, _ = _parsed([b"A\x01b\x02", b"C\x01dd\x02"])
    assert varied.template is None and varied.slot_names() is None
