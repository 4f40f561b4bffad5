"""The read options of the Spark source, parsed and checked on the driver.

Spark hands a data source its options as strings in a case-insensitive map.
`parse_read_options` turns them into a frozen, picklable `ReadOptions` and
refuses anything it does not understand with a `ConfigError` that names the
option and the accepted values; Spark shows that text in the exception it
raises on the driver, before any task runs. The names and meanings follow
Spark's Kafka source:

| option               | values                                                       | default               |
|----------------------|--------------------------------------------------------------|-----------------------|
| subscribe            | topics, comma-separated                                      | (one of the three)    |
| subscribePattern     | a regular expression a whole topic name must match           |                       |
| assign               | JSON `{"orders": [0, 1]}`                                    |                       |
| startingOffsets      | `earliest`, `latest`, JSON `{"orders": {"0": 10, "1": -2}}`  | batch earliest, stream latest |
| endingOffsets        | `latest`, JSON (batch only; exclusive)                       | `latest`              |
| startingTimestamp    | epoch ms: first message stored at or after it                |                       |
| endingTimestamp      | epoch ms, exclusive (batch only)                             |                       |
| subExpression        | tags, `TagA || TagB` (`*` for all)                           | `*`                   |
| filter               | SQL92 over message properties                                |                       |
| minPartitions        | a positive int                                               | one per queue         |
| failOnDataLoss       | `true`, `false`                                              | `true`                |
| includeProperties    | `true`, `false`                                              | rocketmq true, kafka false |
| schema               | `rocketmq`, `kafka`                                          | `rocketmq`            |
| maxOffsetsPerTrigger | a positive int (streaming only)                              | no limit              |
| group                | consumer group that records the query's progress (streaming) |                       |

In offset JSON, -2 means earliest and -1 latest; the flat form
`{"orders/0": 10}` (the stream's own offsets) is accepted too. Queues the
JSON leaves out take the default.

>>> o = parse_read_options({"path": "/tmp/mq", "subscribe": "a, b", "startingoffsets": '{"a": {"0": 5}}'},
...                        streaming=False)
>>> o.topics, o.starting.offset_for("a", 0), o.starting.offset_for("a", 1)
(('a', 'b'), 5, -2)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, FilterError, MQClientError
from ..filter import MessageSelector
from ..validators import check_group, check_topic, is_system_topic

__all__ = ["EARLIEST", "LATEST", "OffsetSpec", "ReadOptions", "parse_read_options", "parse_schema_options",
           "parse_bool", "queue_key", "split_queue_key", "SCHEMAS"]

EARLIEST = -2
LATEST = -1
SCHEMAS = ("rocketmq", "kafka")

_BATCH_ONLY = ("endingoffsets", "endingtimestamp")
_STREAM_ONLY = ("maxoffsetspertrigger", "group")
_KNOWN = ("path", "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
          "startingtimestamp", "endingtimestamp", "subexpression", "filter", "minpartitions", "failondataloss",
          "includeproperties", "schema", "maxoffsetspertrigger", "group")
# Spark lower-cases option names; error messages use the documented spelling.
_SPELLING = {name.lower(): name for name in (
    "path", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets", "startingTimestamp",
    "endingTimestamp", "subExpression", "filter", "minPartitions", "failOnDataLoss", "includeProperties", "schema",
    "maxOffsetsPerTrigger", "group")}


def queue_key(topic: str, queue_id: int) -> str:
    """The stream offset key of a queue: `"topic/queueId"`.

    >>> queue_key("orders", 3), split_queue_key("orders/3")
    ('orders/3', ('orders', 3))
    """
    return f"{topic}/{queue_id}"


def split_queue_key(key: str) -> tuple[str, int]:
    """The inverse of `queue_key` (RocketMQ topic names never hold a `/`)."""
    topic, _, qid = key.rpartition("/")
    return topic, int(qid)


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts (or ends) in each queue: a default, per-queue offsets, or a time.

    Offsets are queue offsets, `EARLIEST` (-2) or `LATEST` (-1). `timestamp`
    (epoch ms), when set, wins: each queue's offset is the first message stored
    at or after it.
    """

    default: int
    per_queue: tuple[tuple[str, int, int], ...] = ()
    timestamp: int | None = None

    def offset_for(self, topic: str, queue_id: int) -> int:
        """The offset asked for `(topic, queue_id)`: a queue offset, `EARLIEST` or `LATEST`."""
        for t, q, offset in self.per_queue:
            if t == topic and q == queue_id:
                return offset
        return self.default

    @property
    def topics(self) -> frozenset[str]:
        """Topics the per-queue offsets name."""
        return frozenset(t for t, _, _ in self.per_queue)


@dataclass(frozen=True)
class ReadOptions:
    """Every read option, checked (see the module docstring for their meaning)."""

    path: str
    streaming: bool
    topics: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    starting: OffsetSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec = OffsetSpec(LATEST)
    sub_expression: str | None = None
    sql_filter: str | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_properties: bool = True
    schema_name: str = "rocketmq"
    max_offsets_per_trigger: int | None = None
    group: str | None = None

    def tag_selector(self) -> MessageSelector | None:
        """The `subExpression` selector, or None when every tag is wanted."""
        if self.sub_expression is None:
            return None
        selector = MessageSelector.by_tag(self.sub_expression)
        return None if selector.match_all else selector

    def sql_selector(self) -> MessageSelector | None:
        """The `filter` selector, or None."""
        return MessageSelector.by_sql(self.sql_filter) if self.sql_filter else None

    def subscribes(self, topic: str) -> bool:
        """Whether the subscription takes `topic` (patterns skip RocketMQ's system topics)."""
        if self.topics is not None:
            return topic in self.topics
        if self.assign is not None:
            return any(topic == t for t, _ in self.assign)
        assert self.pattern is not None
        return re.fullmatch(self.pattern, topic) is not None and not is_system_topic(topic)

    def assigned_queues(self, topic: str) -> tuple[int, ...] | None:
        """The queue ids `assign` names for `topic`, or None when every queue is taken."""
        if self.assign is None:
            return None
        for t, qids in self.assign:
            if t == topic:
                return qids
        return ()


def _name(key: str) -> str:
    return _SPELLING.get(key, key)


def parse_bool(options: Mapping[str, str], key: str, default: bool, *, spelling: str | None = None) -> bool:
    """The boolean option `key` (lower-cased, as Spark hands it over): `true` or `false`, any case.

    `ConfigError` names the option (as `spelling`, else the reader's documented spelling) and
    the value. Shared by the reader and the writer.

    >>> parse_bool({"failondataloss": "FALSE"}, "failondataloss", True)
    False
    """
    text = options.get(key)
    if text is None:
        return default
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {spelling or _name(key)} must be 'true' or 'false', got {text!r}")
    return value == "true"


def _int_option(options: Mapping[str, str], key: str, minimum: int, what: str) -> int | None:
    """Option `key` as an integer of at least `minimum` (None when absent); else a `ConfigError` saying `what`."""
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"option {_name(key)} must be {what}, got {text!r}")
    return value


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    return _int_option(options, key, 1, "a positive integer")


def _timestamp(options: Mapping[str, str], key: str) -> int | None:
    return _int_option(options, key, 0, "epoch milliseconds (a non-negative integer)")


def _json(options: Mapping[str, str], key: str, example: str) -> Any:
    text = options[key]
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"option {_name(key)} is not valid JSON ({exc}); for example {example}") from None


def parse_schema_options(options: Mapping[str, str]) -> tuple[str, bool]:
    """`(schema name, include properties)`: the only options that shape the schema.

    Writes share the data source, so this reads nothing else (the writer's options are its own).
    """
    name = str(options.get("schema", "rocketmq")).strip().lower()
    if name not in SCHEMAS:
        raise ConfigError(f"option schema must be one of {', '.join(SCHEMAS)}, got {options.get('schema')!r}")
    return name, parse_bool(options, "includeproperties", name == "rocketmq")


def _offsets(options: Mapping[str, str], key: str, *, streaming: bool, default: int) -> OffsetSpec:
    text = options.get(key)
    starting = key == "startingoffsets"
    allowed = "'earliest', 'latest'" if starting else "'latest'"
    if text is None:
        return OffsetSpec(default)
    word = str(text).strip().lower()
    if word in ("earliest", "latest"):
        value = EARLIEST if word == "earliest" else LATEST
        if not streaming and ((starting and value == LATEST) or (not starting and value == EARLIEST)):
            raise ConfigError(f"option {_name(key)}={word!r} is not allowed for a batch read "
                              f"(it would read nothing); use {'earliest' if starting else 'latest'} or JSON")
        return OffsetSpec(value)
    example = '{"orders": {"0": 10, "1": -2}}'
    document = _json(options, key, example)
    if not isinstance(document, dict):
        raise ConfigError(f"option {_name(key)} must be {allowed} or a JSON object such as {example}, got {text!r}")
    entries: dict[tuple[str, int], int] = {}
    for outer, inner in document.items():
        if isinstance(inner, dict):
            items = [(outer, qid, offset) for qid, offset in inner.items()]
        elif "/" in outer:
            topic, _, qid = outer.rpartition("/")
            items = [(topic, qid, inner)]
        else:
            raise ConfigError(f"option {_name(key)}: {outer!r} must map to {{queueId: offset}}; "
                              f"for example {example}")
        for topic, qid, offset in items:
            if not str(qid).isdigit():
                raise ConfigError(f"option {_name(key)}: queue id {qid!r} of topic {topic!r} is not a "
                                  f"non-negative integer")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise ConfigError(f"option {_name(key)}: offset {offset!r} of {topic}/{qid} must be an integer "
                                  f">= 0, -2 (earliest) or -1 (latest)")
            if not streaming and ((starting and offset == LATEST) or (not starting and offset == EARLIEST)):
                raise ConfigError(f"option {_name(key)}: offset {offset} of {topic}/{qid} is not allowed for "
                                  f"a batch read (it would read nothing)")
            entries[(_topic_name(topic, _name(key)), int(qid))] = offset
    per_queue = tuple((t, q, o) for (t, q), o in sorted(entries.items()))
    return OffsetSpec(default, per_queue)


def _topic_name(topic: str, option: str) -> str:
    """`topic`, checked as RocketMQ's `Validators.checkTopic` does (a bad name could only read nothing);
    longer names than a client may send are allowed, as a broker's store can hold them."""
    try:
        return check_topic(topic, max_length=None)
    except MQClientError as exc:
        raise ConfigError(f"option {option}: {exc}") from None


def _group_name(group: str) -> str:
    """`group` as RocketMQ's `Validators.checkGroup` allows it (no `@` either): the stream's progress
    becomes the group's offsets, which `Broker.consumer_progress` and consumers look up by that rule."""
    try:
        return check_group(group, "option group")
    except MQClientError as exc:
        raise ConfigError(str(exc)) from None


def _subscription(options: Mapping[str, str]) -> dict[str, Any]:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k) is not None]
    if len(given) != 1:
        got = "none" if not given else ", ".join(_name(k) for k in given)
        raise ConfigError(f"set exactly one of the options subscribe, subscribePattern and assign (got {got}); "
                          f"for example .option(\"subscribe\", \"orders\")")
    key = given[0]
    if key == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in str(options[key]).split(",") if t.strip()))
        if not topics:
            raise ConfigError("option subscribe needs at least one topic name (comma-separated)")
        return {"topics": tuple(_topic_name(t, "subscribe") for t in topics)}
    if key == "subscribepattern":
        pattern = str(options[key])
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"option subscribePattern is not a valid regular expression: {exc}") from None
        return {"pattern": pattern}
    example = '{"orders": [0, 1]}'
    document = _json(options, key, example)
    if not isinstance(document, dict) or not document:
        raise ConfigError(f"option assign must be a JSON object of topics to queue ids, such as {example}")
    assign = []
    for topic, qids in document.items():
        if (not isinstance(qids, list) or not qids
                or not all(isinstance(q, int) and not isinstance(q, bool) and q >= 0 for q in qids)):
            raise ConfigError(f"option assign: {topic!r} must map to a non-empty list of queue ids, "
                              f"such as {example}")
        assign.append((_topic_name(str(topic), "assign"), tuple(sorted(set(qids)))))
    return {"assign": tuple(sorted(assign))}


def _selector(options: Mapping[str, str], key: str) -> str | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        if key == "subexpression":
            MessageSelector.by_tag(str(text))
        else:
            MessageSelector.by_sql(str(text))
    except FilterError as exc:
        kind = "a tag expression such as 'TagA || TagB'" if key == "subexpression" else "a SQL92 expression"
        raise ConfigError(f"option {_name(key)} must be {kind}: {exc}") from None
    return str(text)


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check every read option; raises `ConfigError` naming the first bad one."""
    options = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in options if k not in _KNOWN)
    if unknown:
        accepted = ", ".join(_name(k) for k in _KNOWN if k != "path")
        raise ConfigError(f"unknown read option(s) {', '.join(unknown)}; the mqlite source accepts {accepted}")
    kind = "streaming" if streaming else "batch"
    for key in _STREAM_ONLY if not streaming else _BATCH_ONLY:
        if key in options:
            other = "batch reads (spark.read)" if streaming else "streaming reads (spark.readStream)"
            raise ConfigError(f"option {_name(key)} applies to {other} only, not to a {kind} read")
    path = options.get("path")
    if not path:
        raise ConfigError("no store path: pass the store directory to load(path) or .option(\"path\", ...)")
    fields: dict[str, Any] = {"path": str(path), "streaming": streaming}
    fields.update(_subscription(options))
    starting = _offsets(options, "startingoffsets", streaming=streaming, default=LATEST if streaming else EARLIEST)
    ending = _offsets(options, "endingoffsets", streaming=streaming, default=LATEST)
    start_ts = _timestamp(options, "startingtimestamp")
    end_ts = _timestamp(options, "endingtimestamp")
    if start_ts is not None:
        if "startingoffsets" in options:
            raise ConfigError("set only one of the options startingOffsets and startingTimestamp")
        starting = OffsetSpec(starting.default, timestamp=start_ts)
    if end_ts is not None:
        if "endingoffsets" in options:
            raise ConfigError("set only one of the options endingOffsets and endingTimestamp")
        if start_ts is not None and end_ts < start_ts:
            raise ConfigError(f"option endingTimestamp ({end_ts}) is before startingTimestamp ({start_ts})")
        ending = OffsetSpec(ending.default, timestamp=end_ts)
    subscription = ReadOptions(**fields)
    for spec, key in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        outside = sorted(t for t in spec.topics if not subscription.subscribes(t))
        if outside:
            raise ConfigError(f"option {key} names topic(s) {', '.join(outside)} that the subscription does not "
                              f"include")
    schema_name, include_properties = parse_schema_options(options)
    group = options.get("group")
    if group is not None:
        group = _group_name(str(group).strip())
    return ReadOptions(
        starting=starting, ending=ending,
        sub_expression=_selector(options, "subexpression"), sql_filter=_selector(options, "filter"),
        min_partitions=_positive_int(options, "minpartitions"),
        fail_on_data_loss=parse_bool(options, "failondataloss", True),
        include_properties=include_properties, schema_name=schema_name,
        max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger"),
        group=group,
        **fields,
    )


