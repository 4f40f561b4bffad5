"""The remoting codec: frames in both header serializations, codes, fastjson bodies, batches, ACL signing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqlite.errors import (
    DiskFullError,
    IllegalStateError,
    MQClientError,
    MQLiteError,
    ProtocolError,
    SendTimeoutError,
    StoreCorruptedError,
)
from mqlite.message import MessageQueue
from mqlite.remoting.faults import ERROR_FIELD, EXCEPTION_CODES, PUT_EXCEPTION_CODES, exception_for, refusal
from mqlite.remoting.protocol import (
    BatchEntry,
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_batch,
    encode_batch,
    encode_frame,
    from_wire_json,
    message_queue_of,
    sign,
    to_wire_json,
    wire_key,
)


def java_binary_frame(code: int, language: int, version: int, opaque: int, flag: int, remark: str | None,
                      ext: dict[str, str], body: bytes) -> bytes:
    """A frame laid out as RocketMQSerializable.rocketMQProtocolEncode + RemotingCommand.encode write it."""
    header = struct.pack(">hbhii", code, language, version, opaque, flag)
    remark_bytes = remark.encode() if remark else b""
    header += struct.pack(">i", len(remark_bytes)) + remark_bytes
    fields = b"".join(struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
                      for k, v in ext.items())
    header += struct.pack(">i", len(fields)) + fields
    return struct.pack(">i", 4 + len(header) + len(body)) + bytes([1]) + len(header).to_bytes(3, "big") + header + body


def java_json_frame(header_text: str, body: bytes = b"") -> bytes:
    header = header_text.encode()
    return struct.pack(">i", 4 + len(header) + len(body)) + bytes([0]) + len(header).to_bytes(3, "big") + header + body


def test_a_java_binary_request_decodes() -> None:
    # SEND_MESSAGE_V2 as the Java client writes it with -Drocketmq.serialize.type=ROCKETMQ.
    frame = java_binary_frame(310, 0, 433, 7, 0, None, {"a": "pg", "b": "orders", "e": "1"}, b"hello")
    [cmd] = FrameDecoder().feed(frame)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (310, "JAVA", 433, 7, 0)
    assert cmd.ext_fields == {"a": "pg", "b": "orders", "e": "1"}
    assert cmd.body == b"hello" and cmd.remark is None and cmd.serialize_type is SerializeType.ROCKETMQ
    # A response in the request's serialization is laid out exactly as Java lays it out.
    reply = cmd.reply(ResponseCode.SUCCESS, {"queueId": "1"}, remark="ok")
    assert encode_frame(reply) == java_binary_frame(0, 0, 413, 7, 1, "ok", {"queueId": "1"}, b"")


def test_a_java_json_request_decodes() -> None:
    # fastjson's rendering of a GET_ROUTEINFO_BY_TOPIC request (properties sorted by name).
    text = ('{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":3,'
            '"serializeTypeCurrentRPC":"JSON","version":433}')
    [cmd] = FrameDecoder().feed(java_json_frame(text))
    assert (cmd.code, cmd.opaque, cmd.version, cmd.ext_fields) == (105, 3, 433, {"topic": "TopicTest"})
    assert cmd.serialize_type is SerializeType.JSON and cmd.body is None
    reply = cmd.reply(ResponseCode.TOPIC_NOT_EXIST, remark="No topic route info in name server for the topic")
    header = json.loads(encode_frame(reply)[8:])
    assert header == {"code": 17, "flag": 1, "language": "JAVA", "opaque": 3,
                      "remark": "No topic route info in name server for the topic",
                      "serializeTypeCurrentRPC": "JSON", "version": 413}


def test_json_ext_values_of_other_types_become_java_strings() -> None:
    text = '{"code":34,"extFields":{"n":5,"b":true,"s":"x","z":null},"opaque":1}'
    [cmd] = FrameDecoder().feed(java_json_frame(text))
    assert cmd.ext_fields == {"n": "5", "b": "true", "s": "x"}


@pytest.mark.parametrize("kind", list(SerializeType))
def test_round_trip_and_split_reads(kind: SerializeType) -> None:
    cmds = [RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "t", "queueId": 3, "x": True}, b"b" * 100,
                                    serialize_type=kind),
            RemotingCommand.request(RequestCode.HEART_BEAT, None, None, oneway=True, serialize_type=kind),
            RemotingCommand.response(ResponseCode.PULL_NOT_FOUND, 9, {"é": "ü"}, None, "no msg", serialize_type=kind)]
    stream = b"".join(encode_frame(c) for c in cmds)
    for step in (1, 3, 7, len(stream)):
        decoder = FrameDecoder()
        got = [c for i in range(0, len(stream), step) for c in decoder.feed(stream[i:i + step])]
        assert decoder.buffered == 0
        assert [(c.code, c.opaque, c.flag, c.remark, c.ext_fields, c.body, c.serialize_type) for c in got] == \
               [(c.code, c.opaque, c.flag, c.remark, c.ext_fields, c.body, kind) for c in cmds]
    assert got[0].ext_fields["x"] == "true" and got[1].is_oneway and got[2].is_response


def test_an_oversized_frame_is_refused_before_it_is_buffered() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(ProtocolError, match="max_frame_size"):
        decoder.feed(struct.pack(">i", 1021))  # 1025 bytes with its prefix: one too many
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError):
        decoder.feed(b"")  # a broken decoder stays broken
    assert len(FrameDecoder(max_frame_size=1024).feed(java_json_frame('{"code":1}', b"x" * 1000))) == 1


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 3) + b"abc",  # no room for the header length
    struct.pack(">ii", 4, 5),  # header longer than the frame
    struct.pack(">i", 6) + bytes([2, 0, 0, 2]) + b"{}",  # unknown serialize type
    java_json_frame("[1]"), java_json_frame("{bad"), java_json_frame('{"code":"x"}'),
    java_json_frame('{"code":4294967296}'), java_json_frame('{"extFields":[1]}'),
    java_json_frame('{"extFields":{"a":{"b":1}}}'), java_json_frame('{"remark":5}'),
    java_json_frame("[" * 100000 + "]" * 100000),
    struct.pack(">i", 4 + 12) + bytes([1, 0, 0, 12]) + bytes(12),  # a binary header shorter than its fixed part
], ids=range(12))
def test_malformed_frames_raise_protocol_error(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(frame)


def test_binary_lengths_that_lie_are_refused() -> None:
    good = java_binary_frame(1, 0, 0, 0, 0, "r", {"k": "v"}, b"")
    header_start = 8
    remark_at = header_start + 13
    for at, value in ((remark_at, 1 << 30), (remark_at, -1), (remark_at + 5, 99), (remark_at + 9, 300),
                      (remark_at + 9, -2)):
        bad = bytearray(good)
        fmt = ">h" if at == remark_at + 9 else ">i"
        struct.pack_into(fmt, bad, at, value)
        with pytest.raises(ProtocolError):
            FrameDecoder().feed(bytes(bad))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=8, max_value=512))
def test_fuzzed_input_raises_only_protocol_error(data: bytes, max_frame: int) -> None:
    decoder = FrameDecoder(max_frame_size=max_frame)
    try:
        for cmd in decoder.feed(data):
            assert isinstance(cmd, RemotingCommand)
    except ProtocolError:
        return
    assert decoder.buffered <= max_frame


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(SerializeType)), st.integers(-(1 << 15), (1 << 15) - 1), st.integers(0, (1 << 31) - 1),
       st.booleans(), st.one_of(st.none(), st.text(min_size=1, max_size=20)),
       st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=5),
       st.one_of(st.none(), st.binary(min_size=1, max_size=50)), st.binary(max_size=40))
def test_fuzzed_commands_round_trip_and_mutations_fail_cleanly(
        kind: SerializeType, code: int, opaque: int, response: bool, remark: str | None, ext: dict[str, str],
        body: bytes | None, noise: bytes) -> None:
    cmd = RemotingCommand(code, opaque, int(response), remark, ext, body, "JAVA", 0, kind)
    try:
        frame = encode_frame(cmd)
    except UnicodeEncodeError:
        return  # lone surrogates cannot be sent (neither can Java)
    [back] = FrameDecoder().feed(frame)
    assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields, back.body) == \
           (code, opaque, int(response), remark, ext, body)
    mutated = bytearray(frame)
    for i, b in enumerate(noise):
        mutated[(i * 7919 + b) % len(mutated)] = b
    try:
        FrameDecoder(max_frame_size=4096).feed(bytes(mutated))
    except ProtocolError:
        pass


def _json_header_by_encoder(cmd: RemotingCommand) -> bytes:
    """What fastjson writes for `cmd`'s header, through the json module (properties sorted, null remark left out)."""
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    header.update(flag=cmd.flag, language=cmd.language, opaque=cmd.opaque)
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header.update(serializeTypeCurrentRPC="JSON", version=cmd.version)
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


@settings(max_examples=300, deadline=None)
@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, 3), st.one_of(st.none(), st.text(max_size=20)),
       st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=20), st.integers()), max_size=5),
       st.sampled_from(["JAVA", "PYTHON", 'a"\\\x01\u00e9']))
def test_json_headers_are_written_as_the_json_encoder_writes_them(
        code: int, flag: int, remark: str | None, ext: dict[str, object], language: str) -> None:
    # The header is built as text (a response costs less); it must be the encoder's bytes, quoting and
    # escapes included, and a value that is not a string (a command built by hand) still written as a number.
    cmd = RemotingCommand(code, 7, flag, remark, ext, b"body", language, 413)  # type: ignore[arg-type]
    frame = encode_frame(cmd)
    header_length = int.from_bytes(frame[5:8], "big")
    assert frame[8:8 + header_length] == _json_header_by_encoder(cmd)


def test_codes_have_rocketmq_numbers() -> None:
    assert (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT) == (10, 11, 34)
    assert (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE) == \
           (105, 310, 320)
    assert (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.NO_PERMISSION, ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_OFFSET_MOVED) == (3, 16, 19, 21)


def test_fastjson_bodies_with_object_and_number_keys() -> None:
    mq = MessageQueue("t", "b", 2)
    body = {"offsetTable": {mq: {"brokerOffset": 5, "consumerOffset": 3}}, "brokerAddrs": {0: "h:1"}, "ok": True}
    text = to_wire_json(body)
    assert text == (b'{"offsetTable":{{"brokerName":"b","queueId":2,"topic":"t"}:{"brokerOffset":5,'
                    b'"consumerOffset":3}},"brokerAddrs":{0:"h:1"},"ok":true}')
    back = from_wire_json(text)
    [key] = back["offsetTable"]
    assert message_queue_of(key) == mq and key == wire_key({"topic": "t", "brokerName": "b", "queueId": 2})
    assert back["brokerAddrs"] == {0: "h:1"} and back["ok"] is True
    assert to_wire_json(back) == text  # object and number keys round trip
    assert from_wire_json(b' {"a" : [1, 2.5, null, "x\\u00e9"]} ') == {"a": [1, 2.5, None, "xé"]}
    for bad in (b"{", b"{1}", b'{"a":1', b"[1,]", b"nul", b"\xff", b"[" * 100000 + b"]" * 100000, b"{[1]:2}", b"1 2"):
        with pytest.raises(MQClientError):
            from_wire_json(bad)


def test_batch_bodies() -> None:
    entries = [(0, b"one", {"TAGS": "a", "UNIQ_KEY": "X"}), (7, b"", {})]
    data = encode_batch(entries)
    # MessageDecoder.encodeMessage's layout: size, magic 0, crc 0, flag, body length, body, short props length.
    assert struct.unpack_from(">iiiii", data, 0) == (20 + 3 + 2 + len("TAGS\x01a\x02UNIQ_KEY\x01X\x02"), 0, 0, 0, 3)
    assert decode_batch(data) == [BatchEntry(0, b"one", {"TAGS": "a", "UNIQ_KEY": "X"}), BatchEntry(7, b"", {})]
    for cut in (5, 21, len(data) - 1):
        with pytest.raises(MQClientError):
            decode_batch(data[:cut])
    bad = bytearray(data)
    struct.pack_into(">i", bad, 16, -1)
    with pytest.raises(MQClientError):
        decode_batch(bytes(bad))


def test_acl_signature_is_hmac_sha1_of_sorted_values_then_body() -> None:
    fields = {"topic": "t", "AccessKey": "rocketmq2", "Signature": "old", "a": "1"}
    expected = base64.b64encode(hmac.new(b"12345678", b"rocketmq21t" + b"body", hashlib.sha1).digest()).decode()
    assert sign(fields, b"body", "12345678") == expected
    assert sign({"AccessKey": "x"}, None, "k") == base64.b64encode(hmac.new(b"k", b"x", hashlib.sha1).digest()).decode()


# Two frames RocketMQ 5.0.0's Java client sent to a real 5.0.0 name server and broker (recorded by a proxy):
# a route request signed by AclClientRPCHook (ak RocketMQ, sk 12345678), and a SEND_MESSAGE_V2 with the
# binary header (-Drocketmq.serialize.type=ROCKETMQ).
JAVA_SIGNED_ROUTE = bytes.fromhex(
    "000000c6000000c27b22636f6465223a3130352c226578744669656c6473223a7b225369676e6174757265223a226f534752473674"
    "724c786966496845416476716165767535666b553d222c22746f706963223a22544257313032222c224163636573734b6579223a22"
    "526f636b65744d51227d2c22666c6167223a302c226c616e6775616765223a224a415641222c226f7061717565223a302c22736572"
    "69616c697a655479706543757272656e74525043223a224a534f4e222c2276657273696f6e223a3431337d")
JAVA_BINARY_SEND = bytes.fromhex(
    "0000011a0100010d013600019d000000060000000000000000000000f8000161000000106861726e6573735f70726f647563657200"
    "01620000000643617042696e000163000000065442573130320001640000000134000165000000013100016600000001300001670000"
    "000d3137393536353437373230313300016800000001300001690000006c7001762d30024b455953016b65792d3002554e49515f4b45"
    "59014644303030303030303030303030303030303030303030303030303030303032304342423330393436453039383046353744324230"
    "303030025741495401747275650254414753015461674102736571013000016a000000013000016b0000000566616c736500016d000000"
    "0566616c736543617042696e2d302d")


def test_frames_recorded_from_the_java_client() -> None:
    [route] = FrameDecoder().feed(JAVA_SIGNED_ROUTE)
    assert (route.code, route.version, route.serialize_type) == (RequestCode.GET_ROUTEINFO_BY_TOPIC, 413,
                                                                 SerializeType.JSON)
    assert route.ext_fields["Signature"] == sign(route.ext_fields, route.body, "12345678")
    [send] = FrameDecoder().feed(JAVA_BINARY_SEND)
    assert (send.code, send.opaque, send.serialize_type, send.body) == (RequestCode.SEND_MESSAGE_V2, 6,
                                                                        SerializeType.ROCKETMQ, b"CapBin-0-")
    assert send.ext_fields["b"] == "CapBin" and send.ext_fields["i"].startswith("p\x01v-0\x02KEYS\x01key-0")
    assert encode_frame(send) == JAVA_BINARY_SEND  # the binary layout, byte for byte


# -- exceptions and response codes (faults) -------------------------------------------------------------------------
@pytest.mark.parametrize("table", [EXCEPTION_CODES, PUT_EXCEPTION_CODES])
def test_every_exception_a_server_answers_comes_back_as_itself_at_the_client(table: object) -> None:
    for kind, code in table:  # type: ignore[attr-defined]
        exc = kind("x")
        answer = refusal(exc, table)  # type: ignore[arg-type]
        assert answer is not None and answer[0] == code
        assert exception_for(answer[0], answer[1]) is kind
    assert refusal(StoreCorruptedError("x")) is None  # the store's own words: SYSTEM_ERROR, logged by the server


def test_the_client_reads_the_code_and_the_named_exception_never_the_remarks_prose() -> None:
    assert refusal(DiskFullError("full")) == (ResponseCode.SERVICE_NOT_AVAILABLE, {ERROR_FIELD: "DiskFullError"})
    assert refusal(IllegalStateError("closed")) == (ResponseCode.SERVICE_NOT_AVAILABLE, {})
    assert refusal(SendTimeoutError("slow"), PUT_EXCEPTION_CODES) == (ResponseCode.FLUSH_DISK_TIMEOUT, {})
    assert refusal(MQClientError("big"), PUT_EXCEPTION_CODES) == (ResponseCode.MESSAGE_ILLEGAL, {})
    # A real RocketMQ broker's answer (handlePutMessageResult's remark names the disk whatever the cause).
    assert exception_for(ResponseCode.SERVICE_NOT_AVAILABLE, {}) is IllegalStateError
    assert exception_for(ResponseCode.SYSTEM_ERROR, {}) is MQClientError
    assert exception_for(ResponseCode.TOPIC_NOT_EXIST, {}) is MQClientError
    assert exception_for(ResponseCode.SYSTEM_ERROR, {ERROR_FIELD: "NoSuchError"}) is MQClientError
    assert issubclass(exception_for(ResponseCode.SERVICE_NOT_AVAILABLE, {ERROR_FIELD: "DiskFullError"}), MQLiteError)


def test_protocol_re_exports_every_public_name_of_the_modules_it_was_split_into() -> None:
    from mqlite.remoting import acl, batch, codes, frames, protocol, wirejson

    for module in (acl, batch, codes, frames, wirejson):
        for name in module.__all__:
            assert getattr(protocol, name) is getattr(module, name), f"{module.__name__}.{name}"
    assert set(protocol.__all__) == {n for m in (acl, batch, codes, frames, wirejson) for n in m.__all__}
