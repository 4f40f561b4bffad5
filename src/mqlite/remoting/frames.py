"""RocketMQ's remoting frames: `RemotingCommand`, its two header serializations, the frame decoder.

One frame (`RemotingCommand.encode` / `NettyDecoder` of RocketMQ 5.0.0), big-endian:

| bytes | field | notes |
|---|---|---|
| 4 | length | of everything after this field; `length + 4 <= max_frame_size` (16 MiB) |
| 1 | serialize type | 0 JSON, 1 ROCKETMQ (binary) |
| 3 | header length | of the header that follows |
| header length | header | JSON text, or the binary layout below |
| rest | body | opaque bytes (a message, a JSON body, stored records) |

The binary header (`RocketMQSerializable.rocketMQProtocolEncode`):

| bytes | field |
|---|---|
| 2 | code (a Java short) |
| 1 | language (`LanguageCode`) |
| 2 | version |
| 4 | opaque (matches a response to its request) |
| 4 | flag (bit 0: response, bit 1: oneway) |
| 4 + n | remark, UTF-8 |
| 4 + n | ext fields: per entry a 2-byte key length, the key, a 4-byte value length, the value (UTF-8) |

A JSON header is fastjson's rendering of `RemotingCommand`: `{"code":..,"extFields":{..},"flag":..,
"language":"JAVA","opaque":..,"remark":..,"serializeTypeCurrentRPC":"JSON","version":..}`.
A server answers in the serialization the request used (`RemotingCommand.response(...,
serialize_type=request.serialize_type)`).

Bodies are opaque here: `wirejson` reads and writes their JSON, `batch` their batches.

Everything a peer sends is checked before it is used: a frame's length before anything is
buffered for it, every inner length against the bytes that are really there. A bad frame raises
`ProtocolError`, and only that connection is closed.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import MQClientError, ProtocolError
from .codes import ONEWAY_FLAG, RESPONSE_FLAG, SERVER_VERSION, LanguageCode, RequestCode, ResponseCode, SerializeType

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "RemotingCommand", "header_fields", "encode_frame", "FrameDecoder",
           "decode_command", "ProtocolError"]

#: `NettySystemConfig.frameMaxLength` / `com.rocketmq.remoting.frameMaxLength`: 16 MiB.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

_PREFIX = struct.Struct(">iI")  # length, serialize type << 24 | header length
_LENGTH = struct.Struct(">i")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_LANGUAGE_NAMES = {code.value: code.name for code in LanguageCode}
_OPAQUES = itertools.count(1)  # this process's request ids (`RemotingCommand.requestId`)


class RemotingCommand:
    """One request or response (`RemotingCommand`): a code, an `opaque` matching the response to its
    request, flag bits, an optional remark, string ext fields (the custom header) and a body.

    >>> req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
    >>> frame = encode_frame(req)
    >>> [back] = FrameDecoder().feed(frame)
    >>> (back.code, back.ext_fields, back.is_response, back.opaque == req.opaque)
    (105, {'topic': 't'}, False, True)
    """

    __slots__ = ("code", "opaque", "flag", "remark", "ext_fields", "body", "language", "version", "serialize_type")

    def __init__(self, code: int, opaque: int = 0, flag: int = 0, remark: str | None = None,
                 ext_fields: dict[str, str] | None = None, body: bytes | None = None, language: str = "JAVA",
                 version: int = 0, serialize_type: SerializeType = SerializeType.JSON) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields: dict[str, str] = ext_fields if ext_fields is not None else {}
        self.body = body
        self.language = language
        self.version = version
        self.serialize_type = serialize_type

    @classmethod
    def request(cls, code: int, ext_fields: Mapping[str, object] | None = None, body: bytes | None = None, *,
                oneway: bool = False, serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
        """A new request with the next opaque of this process (values of `ext_fields` become strings,
        as `makeCustomHeaderToNet` writes them; None values are left out)."""
        opaque = next(_OPAQUES) & 0x7FFFFFFF  # `next` on a count is atomic: threads never share an opaque
        return cls(int(code), opaque, ONEWAY_FLAG if oneway else 0, None, header_fields(ext_fields), body,
                   "PYTHON", 0, serialize_type)

    @classmethod
    def response(cls, code: int, opaque: int, ext_fields: Mapping[str, object] | None = None,
                 body: bytes | None = None, remark: str | None = None, *,
                 serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
        """A response to the request with `opaque` (answer in the request's `serialize_type`)."""
        return cls(int(code), opaque, RESPONSE_FLAG, remark, header_fields(ext_fields), body, "JAVA",
                   SERVER_VERSION, serialize_type)

    def reply(self, code: int, ext_fields: Mapping[str, object] | None = None, body: bytes | None = None,
              remark: str | None = None) -> RemotingCommand:
        """The response to this request: its opaque and serialization."""
        return RemotingCommand.response(code, self.opaque, ext_fields, body, remark,
                                        serialize_type=self.serialize_type)

    @property
    def is_response(self) -> bool:
        """Flag bit 0: a response (else a request)."""
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """Flag bit 1: a request that expects no response."""
        return bool(self.flag & ONEWAY_FLAG)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "oneway" if self.is_oneway else "request"
        name = _code_name(self.code, self.is_response)
        remark = f", remark={self.remark!r}" if self.remark else ""
        size = 0 if self.body is None else len(self.body)
        return f"<RemotingCommand {kind} {name} opaque={self.opaque} ext={self.ext_fields}{remark} body={size}B>"


def _code_name(code: int, response: bool) -> str:
    try:
        return (ResponseCode(code) if response else RequestCode(code)).name
    except ValueError:
        return str(code)


def header_fields(fields: Mapping[str, object] | None) -> dict[str, str]:
    """Ext fields as strings the way Java's `toString` writes them (`True` -> `"true"`); None dropped."""
    if not fields:
        return {}
    if type(fields) is dict and _only_str(map(type, fields.values())):
        return fields.copy()  # (already strings: what the handlers build)
    out: dict[str, str] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str):
            out[key] = value
        else:
            out[key] = str(value)
    return out


# -- encoding -------------------------------------------------------------------------------------------
def encode_frame(cmd: RemotingCommand, serialize_type: SerializeType | None = None) -> bytes:
    """The whole frame of `cmd` (length prefix included), its header in `serialize_type`
    (default: `cmd.serialize_type`)."""
    kind = cmd.serialize_type if serialize_type is None else serialize_type
    header = _encode_binary_header(cmd) if kind == SerializeType.ROCKETMQ else _encode_json_header(cmd)
    body = cmd.body or b""
    if len(header) > 0xFFFFFF:
        raise MQClientError(f"a remoting header is {len(header)} bytes; the frame has 3 bytes for its length")
    return b"".join((_PREFIX.pack(4 + len(header) + len(body), (int(kind) << 24) | len(header)), header, body))


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # fastjson writes a bean's properties sorted by name and leaves a null remark out. Built as text
    # (measured: 2.5 us a response less than the encoder over a dict); the same bytes as the encoder.
    ext, remark = cmd.ext_fields, cmd.remark
    if type(cmd.code) is int and type(cmd.flag) is int and type(cmd.opaque) is int and type(cmd.version) is int \
            and type(cmd.language) is str and (remark is None or type(remark) is str):
        try:
            fields = ",".join([f"{_quote(k)}:{_quote(v)}" for k, v in ext.items()]) if ext else None
        except TypeError:  # a value that is not a string: the encoder writes it
            pass
        else:
            text = (f'{{"code":{cmd.code},' + (f'"extFields":{{{fields}}},' if fields is not None else "")
                    + f'"flag":{cmd.flag},"language":{_quote(cmd.language)},"opaque":{cmd.opaque},'
                    + (f'"remark":{_quote(remark)},' if remark is not None else "")
                    + f'"serializeTypeCurrentRPC":"JSON","version":{cmd.version}}}')
            return text.encode("utf-8", "surrogatepass")
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    header["flag"] = cmd.flag
    header["language"] = cmd.language
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return _JSON_ENCODER.encode(header).encode("utf-8", "surrogatepass")


#: One encoder for every header (`json.dumps` with options builds a new one per call).
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: A JSON string literal as that encoder writes it (ensure_ascii=False); C code.
_quote: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _java_short(value: int) -> int:
    """`(short) value`: Java truncates a code above 32767 (the pop codes) to 16 bits."""
    return ((value + 0x8000) & 0xFFFF) - 0x8000


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        language = LanguageCode[cmd.language].value
    except KeyError:
        language = LanguageCode.OTHER.value
    parts = [_BINARY_FIXED.pack(_java_short(cmd.code), language, _java_short(cmd.version), cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts += [_I32.pack(len(remark)), remark]
    fields = []
    for key, value in cmd.ext_fields.items():
        k, v = key.encode("utf-8"), value.encode("utf-8")
        fields += [_I16.pack(len(k)), k, _I32.pack(len(v)), v]
    ext = b"".join(fields)
    parts += [_I32.pack(len(ext)), ext]
    return b"".join(parts)


# -- decoding -------------------------------------------------------------------------------------------
class FrameDecoder:
    """Splits a byte stream into `RemotingCommand`s; one per connection.

    `feed` takes whatever the socket returned and gives back the commands it completed. A frame's
    4-byte length is checked against `max_frame_size` as soon as it has arrived, before any byte of
    the frame is kept, so a peer cannot make the decoder buffer more than one frame's worth.
    Malformed input raises `ProtocolError`; the decoder is then unusable (close the connection).
    Not thread-safe (one reader per connection).
    """

    __slots__ = ("max_frame_size", "_head", "_frame", "_expected", "_broken")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not isinstance(max_frame_size, int) or isinstance(max_frame_size, bool) or max_frame_size < 8:
            raise MQClientError(f"max_frame_size must be an int >= 8 (bytes), got {max_frame_size!r}")
        self.max_frame_size = max_frame_size
        self._head = b""  # the length prefix, while it is incomplete
        self._frame = bytearray()  # the frame being received, without its length prefix
        self._expected = -1  # its length once the prefix was read and checked, else -1
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._head) + len(self._frame)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """The commands completed by `data` (possibly none); `ProtocolError` on a bad frame."""
        if self._broken:
            raise ProtocolError("this connection already sent a malformed frame")
        try:
            return self._feed(memoryview(data).cast("B"))
        except ProtocolError:
            self._broken = True
            raise

    def _feed(self, data: memoryview) -> list[RemotingCommand]:
        out: list[RemotingCommand] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._expected < 0:
                if not self._head and n - pos >= 4:
                    length = _LENGTH.unpack_from(data, pos)[0]
                    pos += 4
                else:
                    take = min(4 - len(self._head), n - pos)
                    self._head += bytes(data[pos:pos + take])
                    pos += take
                    if len(self._head) < 4:
                        break
                    length = _LENGTH.unpack(self._head)[0]
                    self._head = b""
                self._check_length(length)
                if not self._frame and n - pos >= length:  # the whole frame is here: no copy to a buffer
                    out.append(decode_command(data[pos:pos + length]))
                    pos += length
                    continue
                self._expected = length
            take = min(self._expected - len(self._frame), n - pos)
            self._frame += data[pos:pos + take]
            pos += take
            if len(self._frame) == self._expected:
                frame, self._frame, self._expected = self._frame, bytearray(), -1
                out.append(decode_command(memoryview(frame)))
        return out

    def _check_length(self, length: int) -> None:
        if length < 4:
            raise ProtocolError(f"a frame says it is {length} bytes long; it needs at least 4 (its header length)")
        if length + 4 > self.max_frame_size:
            raise ProtocolError(f"a frame of {length + 4} bytes is over max_frame_size {self.max_frame_size}")


def decode_command(frame: memoryview | bytes) -> RemotingCommand:
    """One command from a frame without its length prefix (`RemotingCommand.decode`)."""
    view = memoryview(frame).cast("B") if not isinstance(frame, memoryview) else frame
    if len(view) < 4:
        raise ProtocolError(f"a frame of {len(view)} bytes has no header length")
    mark = _I32.unpack_from(view, 0)[0] & 0xFFFFFFFF
    kind, header_length = mark >> 24, mark & 0xFFFFFF
    if header_length > len(view) - 4:
        raise ProtocolError(f"a header of {header_length} bytes does not fit a frame of {len(view)} bytes")
    header = view[4:4 + header_length]
    if kind == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif kind == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise ProtocolError(f"unknown header serialize type {kind} (0 is JSON, 1 ROCKETMQ)")
    body = view[4 + header_length:]
    cmd.body = bytes(body) if len(body) else None
    return cmd


def _int_field(header: Mapping[str, Any], name: str) -> int:
    value = header.get(name, 0)
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:
        return value
    if value is None:
        return 0
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,10}", value):
        value = int(value)  # fastjson reads "12" into an int field too
        if _INT32_MIN <= value <= _INT32_MAX:
            return value
    raise ProtocolError(f"header field {name!r} must be a Java int, got {value!r}")


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        obj = _json_decode(str(header, "utf-8"))  # (str first: json.loads of bytes detects the encoding)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"a JSON header is not valid JSON ({exc})") from None
    if type(obj) is not dict:
        raise ProtocolError(f"a JSON header must be an object, got {type(obj).__name__}")
    code, opaque, flag, version = obj.get("code", 0), obj.get("opaque", 0), obj.get("flag", 0), obj.get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int
            and _INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= opaque <= _INT32_MAX
            and _INT32_MIN <= flag <= _INT32_MAX and _INT32_MIN <= version <= _INT32_MAX):  # (the common case)
        code, opaque = _int_field(obj, "code"), _int_field(obj, "opaque")
        flag, version = _int_field(obj, "flag"), _int_field(obj, "version")
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        raise ProtocolError(f"header field 'remark' must be a string, got {remark!r}")
    language = obj.get("language", "JAVA")
    if type(language) is not str:
        if type(language) is not int:
            raise ProtocolError(f"header field 'language' must be a string, got {language!r}")
        language = _LANGUAGE_NAMES.get(language, "OTHER")
    ext = obj.get("extFields")
    if ext is None:
        fields: dict[str, str] = {}
    elif type(ext) is not dict:
        raise ProtocolError(f"header field 'extFields' must be an object, got {type(ext).__name__}")
    elif _only_str(map(type, ext.values())):
        fields = ext  # what RocketMQ's Java client sends: strings only
    else:  # other clients (ali-ons) send numbers and booleans: Java's toString of each
        fields = {}
        for key, value in ext.items():
            if value is None:
                continue
            if isinstance(value, (dict, list)):
                raise ProtocolError(f"ext field {key!r} must be a string, got {type(value).__name__}")
            fields[key] = value if isinstance(value, str) else header_fields({key: value})[key]
    return RemotingCommand(code, opaque, flag, remark, fields, None, language, version, SerializeType.JSON)


_json_decode = json.JSONDecoder().decode  # (json.loads checks its argument's type and options first)
_STR_ONLY = frozenset({str})


def _only_str(types: Iterable[type]) -> bool:
    """True when every type is `str` (none: true as well)."""
    return _STR_ONLY.issuperset(types)


def _utf8(data: memoryview, what: str) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"the {what} of a binary header is not UTF-8") from None


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    n = len(header)
    if n < _BINARY_FIXED.size + 8:
        raise ProtocolError(f"a binary header of {n} bytes is shorter than its fixed part ({_BINARY_FIXED.size + 8})")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    pos = _BINARY_FIXED.size
    remark_length = _I32.unpack_from(header, pos)[0]
    pos += 4
    if remark_length < 0 or remark_length > n - pos - 4:
        raise ProtocolError(f"a binary header's remark of {remark_length} bytes does not fit its {n} bytes")
    remark = _utf8(header[pos:pos + remark_length], "remark") if remark_length else None
    pos += remark_length
    ext_length = _I32.unpack_from(header, pos)[0]
    pos += 4
    if ext_length < 0 or ext_length != n - pos:
        raise ProtocolError(f"a binary header's ext fields of {ext_length} bytes do not match the {n - pos} "
                            "bytes left")
    fields: dict[str, str] = {}
    while pos < n:
        if n - pos < 2:
            raise ProtocolError("a binary header's ext field is cut off in its key length")
        key_length = _I16.unpack_from(header, pos)[0]
        pos += 2
        if key_length < 0 or key_length > n - pos - 4:
            raise ProtocolError(f"a binary header's ext key of {key_length} bytes does not fit")
        key = _utf8(header[pos:pos + key_length], "ext field key")
        pos += key_length
        value_length = _I32.unpack_from(header, pos)[0]
        pos += 4
        if value_length < 0 or value_length > n - pos:
            raise ProtocolError(f"a binary header's ext value of {value_length} bytes does not fit")
        fields[key] = _utf8(header[pos:pos + value_length], "ext field value")
        pos += value_length
    return RemotingCommand(code, opaque, flag, remark, fields, None, _LANGUAGE_NAMES.get(language, "OTHER"),
                           version, SerializeType.ROCKETMQ)


