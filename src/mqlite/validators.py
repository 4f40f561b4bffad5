"""RocketMQ's client `Validators` and `TopicValidator`: names and messages checked before anything is stored.

Pure functions over L0 values (no broker, no store), so every layer can call them:
`Producer` validates each message with `validate_message`, the broker checks topic and
group names, and the Spark writer checks rows in its tasks (other processes, no broker)
with the same rules and messages.

>>> from mqlite.message import Message
>>> validate_message(Message("orders", b"hello", tags="TagA"), 4 * 1024 * 1024)
>>> validate_message(Message("orders", b""), 4 * 1024 * 1024)
Traceback (most recent call last):
mqlite.errors.MQClientError: the message body is empty; RocketMQ refuses empty bodies
"""

from __future__ import annotations

import re
from collections.abc import Container

from .config import JAVA_INT_MAX
from .errors import MQClientError
from .message import NAME_VALUE_SEPARATOR, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_SEPARATOR, Message, check_int32

__all__ = [
    "check_topic",
    "check_group",
    "check_send_topic",
    "is_system_topic",
    "validate_message",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "NOT_ALLOWED_SEND_TOPICS",
    "MAX_TOPIC_LENGTH",
    "MAX_PROPERTIES_BYTES",
]

MAX_TOPIC_LENGTH = 127  # Validators.TOPIC_MAX_LENGTH
_MAX_GROUP_LENGTH = 255  # Validators.CHARACTER_MAX_LENGTH
#: Java's `matches()` of `^[%|a-zA-Z0-9_-]+$`: always `fullmatch` (with `match`, `$` lets a trailing newline through).
_NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: Encoded properties a message may carry: a signed short, less room for UNIQ_KEY and WAIT added on send.
MAX_PROPERTIES_BYTES = 32767 - 64
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")
_INT32_MIN = -JAVA_INT_MAX - 1

#: `TopicValidator.SYSTEM_TOPIC_SET`: topics a user may not create, delete or send to by name.
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC", "rmq_sys_wheel_timer",
})
#: `TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`.
NOT_ALLOWED_SEND_TOPICS = frozenset({
    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})


def is_system_topic(topic: str) -> bool:
    """`TopicValidator.isSystemTopic`: a name of `SYSTEM_TOPICS` or one starting with `rmq_sys_`.

    Retry (`%RETRY%<group>`) and dead-letter (`%DLQ%<group>`) topics are not system topics.

    >>> is_system_topic("SCHEDULE_TOPIC_XXXX"), is_system_topic("rmq_sys_wheel_timer"), is_system_topic("%DLQ%cg")
    (True, True, False)
    """
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_topic(topic: object, *, max_length: int | None = MAX_TOPIC_LENGTH) -> str:
    """`Validators.checkTopic`: a non-blank name of [%|a-zA-Z0-9_-], at most 127 characters.

    Returns the topic; raises `MQClientError` saying what to change. Readers pass
    `max_length=None`: a broker's store may hold longer topics (MAGIC_V2 records).
    """
    if not isinstance(topic, str) or not topic.strip():
        raise MQClientError(f"topic must be a non-blank string, got {topic!r}")
    if max_length is not None and len(topic) > max_length:
        raise MQClientError(f"topic {topic[:40]!r}... is {len(topic)} characters; the limit is {max_length}")
    if not _NAME_PATTERN.fullmatch(topic):
        raise MQClientError(f"topic {topic!r} may only contain letters, digits and % | _ - (RocketMQ's rule)")
    return topic


def check_send_topic(topic: object) -> str:
    """`check_topic`, then the broker's refusal of system topics (`NOT_ALLOWED_SEND_TOPICS`, `is_system_topic`).

    What a send to `topic` must pass before any queue is looked up; returns the topic.

    >>> check_send_topic("SCHEDULE_TOPIC_XXXX")
    Traceback (most recent call last):
    mqlite.errors.MQClientError: sending to the system topic 'SCHEDULE_TOPIC_XXXX' is not allowed
    """
    name = check_topic(topic)
    if name in NOT_ALLOWED_SEND_TOPICS or is_system_topic(name):
        raise MQClientError(f"sending to the system topic {name!r} is not allowed")
    return name


def check_group(group: object, what: str = "consumer group") -> str:
    """`Validators.checkGroup`: a non-blank name of [%|a-zA-Z0-9_-], at most 255 characters.

    Returns the group; raises `MQClientError` saying what to change (`what` names the
    kind of group in the message). Such a name never holds a path separator or `..`
    alone, so it is safe as a directory name too (broadcasting offsets).

    >>> check_group("cg-1")
    'cg-1'
    >>> check_group("")
    Traceback (most recent call last):
    mqlite.errors.MQClientError: consumer group must be a non-blank string, got ''
    """
    if not isinstance(group, str) or not group.strip():
        raise MQClientError(f"{what} must be a non-blank string, got {group!r}")
    if len(group) > _MAX_GROUP_LENGTH:
        raise MQClientError(f"{what} {group[:40]!r}... is {len(group)} characters; the limit is "
                            f"{_MAX_GROUP_LENGTH}")
    if not _NAME_PATTERN.fullmatch(group):
        raise MQClientError(f"{what} {group!r} may only contain letters, digits and % | _ - "
                            "(RocketMQ's rule)")
    return group


def validate_message(msg: Message, max_message_size: int, known_topics: Container[str] = ()) -> None:
    """`Validators.checkMessage`: what `Producer` checks before a send; raises `MQClientError` saying what to change.

    The topic (`check_topic`; skipped for a topic in `known_topics`, names already checked:
    a producer's cache), the body (bytes, not empty, at most `max_message_size` bytes), the
    flag (a Java int), the properties (non-empty str names, str values, no \\x01 or \\x02,
    `MAX_PROPERTIES_BYTES` encoded) and the delay level. Does not look at queues or at
    whether the topic exists: that is the broker's. Any thread; no I/O; costs a pass over
    the properties.
    """
    if not isinstance(msg, Message):
        raise MQClientError(f"expected an mqlite.Message, got {type(msg).__name__}")
    if msg.topic not in known_topics:
        check_topic(msg.topic)
    body = msg.body
    if not isinstance(body, (bytes, bytearray)):
        raise MQClientError(f"message body must be bytes, got {type(body).__name__}")
    if not body:
        raise MQClientError("the message body is empty; RocketMQ refuses empty bodies")
    if len(body) > max_message_size:
        raise MQClientError(
            f"message body is {len(body)} bytes; max_message_size is {max_message_size} "
            f"(raise it with mqlite.open(..., max_message_size=...))")
    flag = msg.flag
    if type(flag) is not int or not _INT32_MIN <= flag <= JAVA_INT_MAX:  # the usual flag costs no call
        check_int32("message flag", flag)
    chars = 0
    separator, end = NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR  # locals: looked up once, not four times a property
    for name, value in msg.properties.items():
        if type(name) is not str or type(value) is not str or not name:
            raise MQClientError(f"message properties must map non-empty str to str, got {name!r}: {value!r}")
        if separator in name or separator in value or end in name or end in value:
            raise MQClientError(f"property {name!r} contains a \\x01 or \\x02 separator character")
        chars += len(name) + len(value) + 2
    # UTF-8 takes at most 3 bytes per character here: count bytes only when it could matter.
    encoded = chars if chars * 3 <= MAX_PROPERTIES_BYTES else sum(
        len(k.encode()) + len(v.encode()) + 2 for k, v in msg.properties.items())
    if encoded > MAX_PROPERTIES_BYTES:
        raise MQClientError(
            f"message properties are {encoded} bytes encoded; the limit is {MAX_PROPERTIES_BYTES} "
            f"(RocketMQ's PROPERTIES_SIZE_EXCEEDED): move large values into the body")
    level = msg.properties.get(PROPERTY_DELAY_TIME_LEVEL)
    if level is not None and not (_INT_TEXT.fullmatch(level) and 0 <= int(level) <= JAVA_INT_MAX):
        raise MQClientError(f"delay_time_level must be an int from 0 to {JAVA_INT_MAX}, got {level!r}")
