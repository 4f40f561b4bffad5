"""record.py's reads of many records at once (numpy, no pyarrow): what the Spark reader builds on.

The header and length helpers must agree with the record codec's own single-record reads.
"""

from __future__ import annotations

import mmap

import numpy as np

from mqlite.message import MessageExt, SysFlag, decode_properties
from mqlite.record import (
    BODY_LENGTH,
    BODY_LENGTH_POS,
    HEADER,
    MAGIC_V2,
    PROPERTIES_LENGTH,
    encode_record,
    encode_records,
    headers_at,
    properties_length_pos,
    properties_lengths,
    record_properties,
    unwritten_at,
)


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
