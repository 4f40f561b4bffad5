"""Compressed message bodies: RocketMQ's `CompressionType` as a record's SYSFLAG names it.

A record with `SysFlag.COMPRESSED` (0x1) stores its body compressed, and bits 8-10 of the
SYSFLAG (`MessageSysFlag.COMPRESSION_TYPE_COMPARATOR`, 0x700) say how:

    | bits 8-10 | codec | written by                                                     |
    |-----------|-------|----------------------------------------------------------------|
    | 0         | ZLIB  | clients before RocketMQ 5 (no type bits), ali-ons              |
    | 1         | LZ4   | RocketMQ 5 `Lz4Compressor`: lz4-java's `LZ4FrameOutputStream`,  |
    |           |       | the LZ4 *frame* format (4 MiB independent blocks, no checksum) |
    | 2         | ZSTD  | RocketMQ 5 `ZstdCompressor`: zstd-jni's `ZstdOutputStream`, a   |
    |           |       | zstd frame without a content size                              |
    | 3         | ZLIB  | RocketMQ 5 `ZlibCompressor` (`Deflater`, zlib format), mqlite   |

Java's decoders (`LZ4FrameInputStream`, `ZstdInputStream`) read frame after frame until the
input ends, and so does `decompress`. LZ4 and ZSTD need the `lz4` and `zstandard` packages
(`pip install 'mqlite[codecs]'`); they are imported on the first such body, and without them
`decompress` raises `MQLiteError` naming the extra rather than hand back compressed bytes.

>>> import zlib
>>> decompress(zlib.compress(b"hello"), SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB_TYPE)
b'hello'
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .errors import MQLiteError, StoreCorruptedError
from .message import SysFlag

__all__ = ["CODECS_EXTRA", "compression_type", "decompress"]

#: The optional-dependency group that brings the LZ4 and ZSTD codecs.
CODECS_EXTRA = "codecs"

_NAMES = {0: "ZLIB", 1: "LZ4", 2: "ZSTD", 3: "ZLIB"}  # CompressionType.findByValue


def compression_type(sys_flag: int) -> str:
    """The codec name ("ZLIB", "LZ4" or "ZSTD") of a compressed record's SYSFLAG.

    >>> compression_type(SysFlag.COMPRESSED | 0x100)
    'LZ4'

    Raises `StoreCorruptedError` for the type values RocketMQ does not define (4-7).
    """
    value = (sys_flag & SysFlag.COMPRESSION_TYPE_MASK) >> 8
    try:
        return _NAMES[value]
    except KeyError:
        raise StoreCorruptedError(
            f"the record's sys flag {sys_flag:#x} names compression type {value}, which RocketMQ does not "
            "define (1 LZ4, 2 ZSTD, 0 and 3 ZLIB)") from None


def decompress(body: bytes, sys_flag: int) -> bytes:
    """The plain body of a record whose SYSFLAG has `COMPRESSED` set; CPU only, no I/O.

    A ZLIB body that does not inflate is returned as stored (mqlite always did; some old
    writers set the flag on plain bodies). An LZ4 or ZSTD body that does not decode, or is cut
    short, raises `StoreCorruptedError`; a missing codec package raises `MQLiteError`.
    """
    kind = compression_type(sys_flag)
    if kind == "ZLIB":
        try:
            return zlib.decompress(body)
        except zlib.error:
            return body
    if kind == "LZ4":
        return _lz4_frames(body)
    return _zstd_frames(body)


def _codec(module: str, package: str, kind: str) -> ModuleType:
    try:
        return importlib.import_module(module)  # cached in sys.modules after the first body
    except ImportError:
        raise MQLiteError(
            f"a message body is {kind}-compressed (a RocketMQ 5 client with compressType {kind} wrote it) and "
            f"reading it needs the {package!r} package: pip install 'mqlite[{CODECS_EXTRA}]'") from None


def _damaged(kind: str, what: object) -> StoreCorruptedError:
    return StoreCorruptedError(f"a message body marked {kind}-compressed does not decompress: {what}")


def _lz4_frames(body: bytes) -> bytes:
    frame = _codec("lz4.frame", "lz4", "LZ4")
    # python-lz4 reports every LZ4F error as RuntimeError.
    return _frames(body, "LZ4", frame.LZ4FrameDecompressor, RuntimeError)


def _zstd_frames(body: bytes) -> bytes:
    zstandard = _codec("zstandard", "zstandard", "ZSTD")
    # One decompressobj per frame: its `eof` tells a complete frame from a cut one (a streamed
    # frame has no content size to check against).
    return _frames(body, "ZSTD", lambda: zstandard.ZstdDecompressor().decompressobj(), zstandard.ZstdError)


def _frames(body: bytes, kind: str, new_decompressor: Callable[[], Any],
            errors: type[Exception]) -> bytes:
    """Decode frame after frame until the input ends, as `LZ4FrameInputStream` and
    `ZstdInputStream` do; a frame that does not decode or is cut short is damage."""
    parts = []
    rest = body
    while rest:
        decompressor = new_decompressor()
        try:
            parts.append(decompressor.decompress(rest))
        except errors as exc:
            raise _damaged(kind, exc) from None
        if not decompressor.eof:
            raise _damaged(kind, f"the frame is cut short ({len(rest)} bytes left)")
        rest = decompressor.unused_data
    return b"".join(parts)
