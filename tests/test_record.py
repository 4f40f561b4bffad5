"""The record codec's own names: field positions, the record key, positions behind IPv6 hosts, properties."""

from __future__ import annotations

import struct

import pytest

from mqlite import record
from mqlite.errors import StoreCorruptedError
from mqlite.message import MessageExt, SysFlag


def test_field_positions_are_rocketmqs() -> None:
    """The positions derived from HEADER_DTYPE are those of RocketMQ's record table (IPv4 hosts)."""
    assert (record.TOTAL_SIZE_POS, record.MAGIC_POS, record.BODY_CRC_POS, record.QUEUE_ID_POS, record.FLAG_POS,
            record.QUEUE_OFFSET_POS, record.COMMIT_LOG_OFFSET_POS, record.SYSFLAG_POS, record.BORN_TIMESTAMP_POS,
            record.BORN_HOST_POS, record.STORE_TIMESTAMP_POS, record.STORE_HOST_POS, record.RECONSUME_TIMES_POS,
            record.PREPARED_TRANSACTION_OFFSET_POS, record.BODY_LENGTH_POS, record.BODY_POS) == (
        0, 4, 8, 12, 16, 20, 28, 36, 40, 48, 56, 64, 72, 76, 84, 88)
    assert record.SYSFLAG_LOW_POS == 39 and record.MIN_RECORD_SIZE == 91 and record.HOST_V6_EXTRA == 12
    assert record.HEADER_DTYPE.itemsize == record.HEADER.size == 88
    assert record.HEADER_DTYPE_BORN_V6.itemsize == 100
    assert record.MAGIC_BYTES == (struct.pack(">i", record.MAGIC_V1), struct.pack(">i", record.MAGIC_V2))


def _message(born_host: str, store_host: str, topic: str = "T") -> MessageExt:
    msg = MessageExt(topic, b"body!", properties={"TAGS": "a", "KEYS": "k1 k2"})
    msg.queue_id, msg.queue_offset, msg.commit_log_offset = 3, 7, 4096
    msg.born_host, msg.store_host = born_host, store_host
    msg.born_timestamp, msg.store_timestamp = 1_000, 2_000
    msg.sys_flag = msg.reconsume_times = msg.prepared_transaction_offset = 0
    return msg


@pytest.mark.parametrize("born, stored", [("10.0.0.1:1", "10.0.0.2:2"), ("[::1]:1", "10.0.0.2:2"),
                                          ("10.0.0.1:1", "[fe80::2]:2"), ("[::1]:1", "[fe80::2]:2")])
def test_positions_behind_the_hosts_follow_the_sys_flag(born: str, stored: str) -> None:
    msg = _message(born, stored)
    raw = record.encode_record(msg)
    (sys_flag,) = struct.unpack_from(">i", raw, record.SYSFLAG_POS)
    assert raw[record.SYSFLAG_LOW_POS] == sys_flag & 0xFF
    assert struct.unpack_from(">q", raw, record.store_timestamp_pos(sys_flag)) == (2_000,)
    pos = record.body_length_pos(sys_flag)
    assert struct.unpack_from(">i", raw, pos) == (5,) and raw[pos + 4 : pos + 9] == b"body!"
    assert record.record_body(raw) == b"body!"
    assert record.host_shift(sys_flag) == 12 * ((sys_flag & SysFlag.BORNHOST_V6 != 0)
                                                + (sys_flag & SysFlag.STOREHOSTADDRESS_V6 != 0))
    total, magic, queue_id, queue_offset = record.RECORD_KEY.unpack_from(raw)
    assert (total, magic, queue_id, queue_offset) == (len(raw), record.MAGIC_BYTES[0], 3, 7)
    assert struct.unpack_from(">q", raw, record.COMMIT_LOG_OFFSET_POS) == (4096,)
    assert record.record_properties(raw) == msg.properties == record.decode_message(raw, "").properties
    assert record.check_record(raw, 0, len(raw), True)[0] == len(raw)


def test_record_properties_of_a_v2_topic_and_of_damage() -> None:
    msg = _message("10.0.0.1:1", "[::1]:2", topic="\u00e9" * 70)
    raw = record.encode_record(msg)
    assert struct.unpack_from(">i", raw, record.MAGIC_POS) == (record.MAGIC_V2,)
    assert record.record_properties(raw) == msg.properties and msg.properties["KEYS"] == "k1 k2"
    with pytest.raises(StoreCorruptedError, match="properties"):
        record.record_properties(raw[:-3])
