"""LZ4 and ZSTD message bodies, as RocketMQ 5 clients write them (`compressType` LZ4 / ZSTD).

`JAVA_LZ4` and `JAVA_ZSTD` are the bytes RocketMQ 5.0.0's `Lz4Compressor.compress` and
`ZstdCompressor.compress(body, 5)` produce for `BODY` (their code run on lz4-java 1.8.0 and zstd-jni
1.5.2-5, the versions RocketMQ 5.0.0 ships with): `new LZ4FrameOutputStream(out)` /
`new ZstdOutputStream(out, level)`, then write, flush, close. `java_lz4` and `java_zstd` write the same
format with the Python packages, byte for byte, so the tests can make bodies of any size.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite.compression import compression_type, decompress
from mqlite.errors import MQLiteError, StoreCorruptedError
from mqlite.message import SysFlag
from mqlite.reader import StoreReader

lz4_frame = pytest.importorskip("lz4.frame")
zstandard = pytest.importorskip("zstandard")

BODY = b"".join(b"order-%05d;" % i for i in range(40))
JAVA_LZ4 = bytes.fromhex(
    "04224d18607073ac000000706f726465722d300100163b0c0017310c0017320c0017330c0017340c0017350c0017360c0017"
    "370c0017380c0016390c002731300c0007780017317800173178001731780017317800173178001731780017317800173178"
    "0017327800173278001732780017327800173278001732780017327800173278001732780017327800173378001733780017"
    "33780017337800173378001733780017337800173378001533780050303033393b00000000")
JAVA_ZSTD = bytes.fromhex(
    "28b52ffd0058a40300e4036f726465722d303b31323334353637383931303132333435363738393230313233343536373839"
    "333031323334353637383b6f726465722d30303033393b2720e0d746cc1966c49c614618dccc8839c38c9833cc88b9063763"
    "c49c6146cc1966c45c839b1931679811738619c1e6becc5a5b010000")
JAVA_LZ4_EMPTY = bytes.fromhex("04224d1860707300000000")  # an empty body still makes a frame
JAVA_ZSTD_EMPTY = bytes.fromhex("28b52ffd0058010000")

# Stored by `mqlite serve` from RocketMQ 5.0.0's DefaultMQProducer run with -Drocketmq.message.compressType=LZ4
# (sys flag 0x101) and =ZSTD (0x201, compressLevel 5), sending "Zip-2-" padded with 'x' to 6000 bytes.
JAVA_CLIENT_BODY = b"Zip-2-" + b"x" * 5994
JAVA_CLIENT_LZ4 = bytes.fromhex(
    "04224d18607073280000007f5a69702d322d780100ffffffffffffffffffffffffffffffffffffffffffffff6850787878787800000000")
JAVA_CLIENT_ZSTD = bytes.fromhex("28b52ffd0058740000385a69702d322d78010066d70323010000")

LZ4 = SysFlag.COMPRESSED | SysFlag.COMPRESSION_LZ4_TYPE
ZSTD = SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZSTD_TYPE


def java_lz4(body: bytes) -> bytes:
    """`LZ4FrameOutputStream`'s frame: 4 MiB independent blocks, no content size, no checksums."""
    compressor = lz4_frame.LZ4FrameCompressor(block_size=lz4_frame.BLOCKSIZE_MAX4MB, block_linked=False,
                                              content_checksum=False, auto_flush=True)
    # Streaming (begin / compress / flush), not lz4.frame.compress: given the whole input, LZ4F
    # shrinks the block size to fit it and the frame header no longer matches lz4-java's.
    return bytes(compressor.begin() + compressor.compress(body) + compressor.flush())


def java_zstd(body: bytes, level: int = 5) -> bytes:
    """`ZstdOutputStream`'s frame: streamed (no content size), no checksum, one block flush."""
    stream = zstandard.ZstdCompressor(level=level).compressobj()
    return stream.compress(body) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK) + stream.flush()


def test_the_python_writers_make_javas_bytes() -> None:
    assert java_lz4(BODY) == JAVA_LZ4 and java_lz4(b"") == JAVA_LZ4_EMPTY
    assert java_zstd(BODY) == JAVA_ZSTD and java_zstd(b"") == JAVA_ZSTD_EMPTY
    assert java_lz4(JAVA_CLIENT_BODY) == JAVA_CLIENT_LZ4 and java_zstd(JAVA_CLIENT_BODY) == JAVA_CLIENT_ZSTD


@pytest.mark.parametrize(("stored", "sys_flag", "plain"), [
    (JAVA_LZ4, LZ4, BODY), (JAVA_ZSTD, ZSTD, BODY), (JAVA_LZ4_EMPTY, LZ4, b""), (JAVA_ZSTD_EMPTY, ZSTD, b""),
    (JAVA_CLIENT_LZ4, LZ4, JAVA_CLIENT_BODY), (JAVA_CLIENT_ZSTD, ZSTD, JAVA_CLIENT_BODY),
    (zlib.compress(BODY, 5), SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB_TYPE, BODY),
    (zlib.compress(BODY, 5), SysFlag.COMPRESSED, BODY),  # no type bits: a client before RocketMQ 5
])
def test_java_bodies_decompress(stored: bytes, sys_flag: int, plain: bytes) -> None:
    assert decompress(stored, sys_flag) == plain


def test_frames_are_read_until_the_input_ends() -> None:
    # LZ4FrameInputStream and ZstdInputStream go on to the next frame after an end mark.
    assert decompress(JAVA_LZ4 + java_lz4(b"tail"), LZ4) == BODY + b"tail"
    assert decompress(JAVA_ZSTD + java_zstd(b"tail"), ZSTD) == BODY + b"tail"


@pytest.mark.parametrize(("stored", "sys_flag"), [
    (JAVA_LZ4[:-4], LZ4), (JAVA_LZ4[:40], LZ4), (JAVA_ZSTD[:-3], ZSTD), (JAVA_ZSTD[:30], ZSTD),
    (b"not a frame at all", LZ4), (b"not a frame at all", ZSTD), (JAVA_ZSTD, LZ4), (JAVA_LZ4, ZSTD),
])
def test_a_cut_or_garbled_body_is_damage_not_bytes(stored: bytes, sys_flag: int) -> None:
    with pytest.raises(StoreCorruptedError, match="does not decompress"):
        decompress(stored, sys_flag)


def test_type_values_rocketmq_does_not_define_are_refused() -> None:
    assert [compression_type(SysFlag.COMPRESSED | t << 8) for t in range(4)] == ["ZLIB", "LZ4", "ZSTD", "ZLIB"]
    with pytest.raises(StoreCorruptedError, match="compression type 5"):
        decompress(b"x", SysFlag.COMPRESSED | 5 << 8)


def _put_java_bodies(broker: Any, topic: str) -> list[bytes]:
    big = bytes(range(256)) * 40 + BODY
    bodies = [BODY, big, BODY + b"!"]
    broker.put_message(topic, 0, java_lz4(BODY), {"KEYS": "k-lz4", "TAGS": "A"}, sys_flag=LZ4)
    broker.put_message(topic, 0, java_zstd(big), {"KEYS": "k-zstd", "TAGS": "B"}, sys_flag=ZSTD)
    broker.put_message(topic, 0, java_lz4(BODY + b"!"), {"KEYS": "k-lz4-2"}, sys_flag=LZ4)
    return bodies


def test_consumers_and_readers_get_the_plain_bodies(tmp_path: Path) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path) as broker:
        bodies = _put_java_bodies(broker, "Zipped")
        got = broker.store.get_messages("Zipped", 0, 0, 32).messages
        assert [m.body for m in got] == bodies
        assert [m.sys_flag & 0x701 for m in got] == [LZ4, ZSTD, LZ4]  # the stored flags are kept
        assert got[1].body_crc == zlib.crc32(java_zstd(bodies[1])) & 0x7FFFFFFF  # ... and the stored bytes
        assert [m.body for m in broker.query_message("Zipped", "k-zstd")] == [bodies[1]]
        assert broker.view_message(got[0].msg_id).body == BODY
        with mqlite.LitePullConsumer(broker, "cg", consume_from_where=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                     auto_commit=False) as consumer:
            consumer.subscribe("Zipped", "A || B")
            polled = consumer.poll(timeout=5.0)
        assert [m.body for m in polled] == bodies[:2]  # tag filtering reads the properties, not the body
    with StoreReader(path) as reader:  # a second process reading the files
        assert [m.body for m in reader.get_messages("Zipped", 0, 0, 32).messages] == bodies
    with mqlite.open(path, read_only=True) as broker:
        assert [m.body for m in broker.query_message("Zipped", "k-lz4-2")] == [bodies[2]]


@pytest.mark.parametrize(("module", "package", "sys_flag", "stored"), [
    ("lz4", "lz4", LZ4, JAVA_LZ4), ("zstandard", "zstandard", ZSTD, JAVA_ZSTD)])
def test_a_missing_codec_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 module: str, package: str, sys_flag: int, stored: bytes) -> None:
    with mqlite.open(str(tmp_path / "mq")) as broker:
        broker.put_message("Zipped", 0, stored, sys_flag=sys_flag)
        for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
        (msg,) = broker.store.get_messages("Zipped", 0, 0, 32).messages
        with pytest.raises(MQLiteError, match=rf"needs the '{package}' package: pip install 'mqlite\[codecs\]'") as err:
            msg.body  # noqa: B018 - the body is decoded on first access
        assert not isinstance(err.value, StoreCorruptedError)
        monkeypatch.undo()
        assert msg.body == BODY  # nothing was cached: with the package back, the body reads


def _spark_rows(path: str, topic: str) -> list[bytes]:
    """What the Spark source's partition reader gives for `topic`, read in this process."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql.pandas.types import to_arrow_schema

    from mqlite.spark.arrowread import read_range
    from mqlite.spark.options import parse_read_options
    from mqlite.spark.plan import plan_batch
    from mqlite.spark.schema import default_schema

    opts = parse_read_options({"path": path, "subscribe": topic}, streaming=False)
    arrow_schema = to_arrow_schema(default_schema(opts.schema_name, opts.include_properties), timezone="UTC")
    with StoreReader(path) as store:
        parts = plan_batch(store, opts)
    return [body for part in parts for batch in read_range(opts, arrow_schema, part)
            for body in batch.column("body").to_pylist()]


def test_the_spark_source_reads_them_and_a_missing_codec_is_not_data_loss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path) as broker:
        bodies = _put_java_bodies(broker, "Zipped")
    assert _spark_rows(path, "Zipped") == bodies
    monkeypatch.setitem(sys.modules, "zstandard", None)
    # The record is whole: a reader without the package says what to install; it does not count
    # the message as lost (or skip it under failOnDataLoss=false).
    with pytest.raises(MQLiteError, match=r"pip install 'mqlite\[codecs\]'"):
        _spark_rows(path, "Zipped")
