"""Tests for mqlite.checkpoint (RocketMQ StoreCheckpointTest plus layout and robustness)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from mqlite.checkpoint import CHECKPOINT, CHECKPOINT_FILE_SIZE, StoreCheckpoint
from mqlite.errors import StoreCorruptedError


def test_unit_sizes() -> None:
    assert CHECKPOINT.size == 40
    assert CHECKPOINT_FILE_SIZE == 4096


def test_write_and_read_like_rocketmq(tmp_path: Path) -> None:
    # StoreCheckpointTest.testWriteAndRead: the min timestamp keeps a 3 s margin and the
    # values survive a close and reopen.
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    physic, logics = 0xAABB, 0xCCDD
    cp.physic_msg_timestamp = physic
    cp.logics_msg_timestamp = logics
    cp.flush()
    assert physic - cp.min_timestamp() == 3000
    cp.close()

    again = StoreCheckpoint(path)
    assert again.physic_msg_timestamp == physic
    assert again.logics_msg_timestamp == logics
    again.close()


def test_min_timestamp_floors_at_zero_and_index_variant(tmp_path: Path) -> None:
    with StoreCheckpoint(str(tmp_path / "checkpoint")) as cp:
        assert cp.min_timestamp() == 0  # all zeros: max(0, 0 - 3000)
        cp.physic_msg_timestamp, cp.logics_msg_timestamp = 10_000, 20_000
        cp.index_msg_timestamp = 5_000
        assert cp.min_timestamp() == 7_000
        assert cp.min_timestamp_index() == 5_000
        cp.index_msg_timestamp = 9_000
        assert cp.min_timestamp_index() == 7_000


def test_layout_is_big_endian_longs_in_a_zeroed_page(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    values = (1, 2**40 + 3, -5, 0x0102030405060708, 7)
    (
        cp.physic_msg_timestamp,
        cp.logics_msg_timestamp,
        cp.index_msg_timestamp,
        cp.master_flushed_offset,
        cp.confirm_commit_log_offset,
    ) = values
    cp.close()
    cp.close()  # idempotent

    raw = path.read_bytes()
    assert len(raw) == 4096
    # Decoded independently of the module's struct, at the documented offsets.
    for offset, value in zip((0, 8, 16, 24, 32), values, strict=True):
        assert struct.unpack(">q", raw[offset : offset + 8])[0] == value
    assert raw[40:] == bytes(4096 - 40)


def test_new_file_is_one_zero_page(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    StoreCheckpoint(str(path)).close()
    assert path.read_bytes() == bytes(4096)


def test_flush_writes_without_close(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.confirm_commit_log_offset = 123
    assert StoreCheckpoint(str(path), read_only=True).confirm_commit_log_offset == 0  # not flushed
    cp.flush()
    reader = StoreCheckpoint(str(path), read_only=True)
    assert reader.confirm_commit_log_offset == 123
    cp.confirm_commit_log_offset = 456
    cp.flush()
    reader.reload()
    assert reader.confirm_commit_log_offset == 456
    cp.close()


@pytest.mark.parametrize(("content", "damage"), [
    pytest.param(struct.pack(">q", 99), "8 bytes long, not 4096", id="short"),
    pytest.param(b"", "0 bytes long, not 4096", id="empty"),
    pytest.param(struct.pack(">q", 99) + bytes(8192), "longer than 4096 bytes", id="long"),
    pytest.param(struct.pack(">q", -1) + bytes(4088), "a field is negative", id="negative"),
    pytest.param(bytes(range(256)) * 16, "bytes after its five fields are not zero", id="garbage"),
    pytest.param(struct.pack(">q", 99) + bytes(4087) + b"x", "bytes after its five fields are not zero",
                 id="tail"),
    pytest.param(None, "missing", id="missing"),
])
def test_writable_open_distrusts_a_damaged_file(tmp_path: Path, content: bytes | None, damage: str) -> None:
    # Nothing in a file neither mqlite nor RocketMQ could have written is trusted: it is
    # rewritten as a zero page, and the store recovers the whole commit log (test_recovery).
    path = tmp_path / "checkpoint"
    if content is not None:
        path.write_bytes(content)
    with StoreCheckpoint(str(path)) as cp:
        assert cp.damage == damage
        assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (0, 0, 0)
    assert path.read_bytes() == bytes(4096)
    with StoreCheckpoint(str(path)) as cp:
        assert cp.damage is None


def test_a_directory_in_place_of_the_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.mkdir()
    with pytest.raises(StoreCorruptedError, match="is a directory.*remove it"):
        StoreCheckpoint(str(path))
    assert StoreCheckpoint(str(path), read_only=True).physic_msg_timestamp == 0  # a reader reads zeros


def test_read_only_missing_file_is_zeros_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path), read_only=True)
    assert (cp.physic_msg_timestamp, cp.confirm_commit_log_offset, cp.min_timestamp()) == (0, 0, 0)
    cp.flush()
    cp.close()
    assert not path.exists()


@pytest.mark.parametrize("content", [b"", b"\x01\x02\x03", bytes(range(256)) * 3, b"\xff" * 5000])
def test_read_only_short_or_garbage_file_does_not_crash(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(content)
    cp = StoreCheckpoint(str(path), read_only=True)
    padded = content[:40].ljust(40, b"\0")
    assert cp.physic_msg_timestamp == struct.unpack(">q", padded[:8])[0]
    cp.min_timestamp_index()
    cp.close()
    assert path.read_bytes() == content  # untouched


def test_read_only_needs_no_write_access(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    with StoreCheckpoint(str(path)) as cp:
        cp.index_msg_timestamp = 42
    os.chmod(path, 0o444)
    try:
        assert StoreCheckpoint(str(path), read_only=True).index_msg_timestamp == 42
    finally:
        os.chmod(path, 0o644)
