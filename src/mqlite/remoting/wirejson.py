"""fastjson's JSON, as RocketMQ's bodies use it: maps keyed by numbers or objects with unquoted keys.

fastjson writes `Map<MessageQueue, Long>` as `{{"brokerName":"b","queueId":0,"topic":"t"}:5}`, which
standard JSON cannot read; `to_wire_json` writes that form and `from_wire_json` reads it (plain JSON
takes the C parser, the rest a small recursive reader bounded in depth). An object used as a key
decodes to a `WireKey`, hashable and sorted by name.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import MQClientError
from ..message import MessageQueue

__all__ = ["to_wire_json", "from_wire_json", "WireKey", "wire_key", "message_queue_of", "mq_wire"]

WireKey = tuple[tuple[str, Any], ...]


def mq_wire(mq: MessageQueue) -> dict[str, object]:
    """`MessageQueue` as fastjson writes it (properties sorted by name)."""
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def wire_key(obj: Mapping[str, Any]) -> WireKey:
    """The hashable key `from_wire_json` gives an object used as a map key."""
    return tuple(sorted((k, _hashable(v)) for k, v in obj.items()))


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return wire_key(value)
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def message_queue_of(obj: Mapping[str, Any] | WireKey) -> MessageQueue:
    """A `MessageQueue` from its wire object (a dict, or a `WireKey`); `MQClientError` when it is not one."""
    fields = dict(obj) if not isinstance(obj, Mapping) else obj
    topic, broker, queue_id = fields.get("topic"), fields.get("brokerName"), fields.get("queueId")
    if not isinstance(topic, str) or not isinstance(broker, str) or type(queue_id) is not int:
        raise MQClientError(f"not a MessageQueue (topic, brokerName, queueId): {dict(fields)!r}")
    return MessageQueue(topic, broker, queue_id)


def to_wire_json(value: Any) -> bytes:
    """`value` as fastjson writes it: maps keyed by numbers or objects (a `MessageQueue`, a `WireKey`)
    get unquoted keys, `MessageQueue` values become their objects, bytes become base64 strings.

    >>> to_wire_json({MessageQueue("t", "b", 0): 5, 0: "a"})
    b'{{"brokerName":"b","queueId":0,"topic":"t"}:5,0:"a"}'
    """
    out: list[str] = []
    _write_json(value, out)
    return "".join(out).encode("utf-8", "surrogatepass")


def _write_json(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(json.dumps(value))
    elif isinstance(value, MessageQueue):
        _write_json(mq_wire(value), out)
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            _write_key(key, out)
            out.append(":")
            _write_json(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write_json(item, out)
        out.append("]")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append('"' + base64.b64encode(bytes(value)).decode("ascii") + '"')
    else:
        raise TypeError(f"cannot write {type(value).__name__} {value!r} as wire JSON")


def _write_key(key: Any, out: list[str]) -> None:
    if isinstance(key, str):
        out.append(json.dumps(key, ensure_ascii=False))
    elif isinstance(key, bool) or not isinstance(key, (int, MessageQueue, tuple)):
        raise TypeError(f"cannot write {type(key).__name__} {key!r} as a wire JSON key")
    elif isinstance(key, tuple):  # a WireKey
        _write_json({k: _unhashable(v) for k, v in key}, out)
    else:
        _write_json(key, out)  # an int unquoted, a MessageQueue as its object (fastjson's non-string keys)


def _unhashable(value: Any) -> Any:
    if isinstance(value, tuple) and value and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                                 for p in value):
        return {k: _unhashable(v) for k, v in value}
    if isinstance(value, tuple):
        return [_unhashable(v) for v in value]
    return value


_MAX_JSON_DEPTH = 64
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


def from_wire_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a fastjson body: standard JSON plus maps with unquoted number keys (-> int) and object
    keys (-> `WireKey`). `MQClientError` when it is not that.

    >>> from_wire_json(b'{{"brokerName":"b","queueId":0,"topic":"t"}:5,0:"a"}')
    {(('brokerName', 'b'), ('queueId', 0), ('topic', 't')): 5, 0: 'a'}
    """
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MQClientError(f"a JSON body is not UTF-8 ({exc})") from None
    try:
        return json.loads(text)  # the common case: plain JSON, at C speed
    except RecursionError:
        raise MQClientError("a JSON body is nested too deeply") from None
    except ValueError:
        pass
    try:
        value, pos = _parse_value(text, _WS.match(text, 0).end(), 0)  # type: ignore[union-attr]
    except (ValueError, IndexError, RecursionError) as exc:
        raise MQClientError(f"a JSON body cannot be parsed ({exc})") from None
    if _WS.match(text, pos).end() != len(text):  # type: ignore[union-attr]
        raise MQClientError(f"a JSON body has extra text at character {pos}")
    return value


def _parse_value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_JSON_DEPTH}")
    ch = text[pos]
    if ch == "{":
        return _parse_object(text, pos + 1, depth + 1)
    if ch == "[":
        items: list[Any] = []
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        if text[pos] == "]":
            return items, pos + 1
        while True:
            item, pos = _parse_value(text, pos, depth + 1)
            items.append(item)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos] == "]":
                return items, pos + 1
            if text[pos] != ",":
                raise ValueError(f"expected , or ] at {pos}")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
    if ch == '"':
        return json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined,no-any-return]
    for word, literal in _LITERALS.items():
        if text.startswith(word, pos):
            return literal, pos + len(word)
    match = _NUMBER.match(text, pos)
    if match is None:
        raise ValueError(f"unexpected {ch!r} at {pos}")
    number = match.group()
    return (float(number) if match.group(1) or match.group(2) else int(number)), match.end()


def _parse_object(text: str, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
    result: dict[Any, Any] = {}
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if text[pos] == "}":
        return result, pos + 1
    while True:
        key, pos = _parse_value(text, pos, depth)
        if isinstance(key, dict):
            key = wire_key(key)
        elif isinstance(key, list):
            raise ValueError(f"an array cannot be a key (at {pos})")
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] != ":":
            raise ValueError(f"expected : at {pos}")
        value, pos = _parse_value(text, _WS.match(text, pos + 1).end(), depth)  # type: ignore[union-attr]
        result[key] = value
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] == "}":
            return result, pos + 1
        if text[pos] != ",":
            raise ValueError(f"expected , or }} at {pos}")
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]

