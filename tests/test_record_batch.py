"""record.py's reads of many records at once (numpy, no pyarrow): what the Spark reader builds on.

The vectorised property parser must agree with `decode_properties` (RocketMQ's rules) on every
row, by both of its paths (one shared layout, the general separator scan), and the header and
length helpers with the record codec's own single-record reads.
"""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from mqlite.message import MessageExt, SysFlag, decode_properties
from mqlite.record import (
    BODY_LENGTH,
    BODY_LENGTH_POS,
    HEADER,
    MAGIC_V2,
    PROPERTIES_LENGTH,
    PropertyEntries,
    encode_record,
    encode_records,
    headers_at,
    properties_length_pos,
    properties_lengths,
    record_properties,
    unwritten_at,
)


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


def test_header_and_length_helpers_read_what_the_codec_wrote() -> None:
    msg = MessageExt("T" * 200, b"hello", properties={"TAGS": "a", "KEYS": "k1 k2"})  # a V2 topic
    msg.queue_id, msg.queue_offset, msg.commit_log_offset = 3, 7, 4096
    msg.born_host = msg.store_host = "127.0.0.1:10911"
    msg.born_timestamp, msg.store_timestamp = 1_000, 2_000
    msg.sys_flag = msg.reconsume_times = msg.prepared_transaction_offset = 0
    one = encode_record(msg)
    records, sizes = encode_records("Q", b"abcdef", [0, 2, 6], [b"TAGS\x01x\x02"], born_timestamp=7)
    data = one + bytes(records)
    starts = np.array([0, len(one), len(one) + int(sizes[0])])
    headers = headers_at(data, len(data), starts)
    assert headers["total"].tolist() == [len(one), *sizes.tolist()]
    assert headers["born_timestamp"].tolist()[1:] == [7, 7]
    body_end = starts + HEADER.size + headers["body_length"].astype(np.int64)
    assert BODY_LENGTH.unpack_from(data, BODY_LENGTH_POS)[0] == 5 and headers["magic"][0] == MAGIC_V2
    topic_lengths = [200, 1, 1]
    pos = np.array([properties_length_pos(int(e), t, int(m))
                    for e, t, m in zip(body_end, topic_lengths, headers["magic"].astype(np.int64))])
    lengths = properties_lengths(np.frombuffer(data, dtype=np.uint8), pos)
    ends = starts + headers["total"].astype(np.int64)
    assert (pos + PROPERTIES_LENGTH.size + lengths == ends).all()
    for start, end, length in zip(starts.tolist(), ends.tolist(), lengths.tolist()):
        props = data[end - length : end].decode()
        assert decode_properties(props) == record_properties(data[start:end])
    assert not SysFlag.BORNHOST_V6 & int(headers["sys_flag"][0])


def test_unwritten_at_tells_the_log_end_from_damage() -> None:
    with mmap.mmap(-1, 64) as mm:
        assert unwritten_at(mm, 0) and unwritten_at(mm, 60)
        mm[5] = 1
        assert not unwritten_at(mm, 0) and unwritten_at(mm, 8)
