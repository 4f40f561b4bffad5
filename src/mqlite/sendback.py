"""Retry and dead-letter rewrites: where a message a consumer failed goes next.

RocketMQ's broker (`AbstractSendMessageProcessor.consumerSendMsgBack`) copies
the stored original into `%RETRY%<group>` with delay level `3 + reconsume_times`
(or the level the listener asked for), so it comes back after 10 s, 30 s,
1 min, ... 2 h; once it has been consumed `max_reconsume_times` times (or the
level is negative) the copy goes to `%DLQ%<group>` instead, with no delay. The
copy keeps `UNIQ_KEY` (so `msg_id` stays the same), records the first topic in
`RETRY_TOPIC` and the first record in `ORIGIN_MESSAGE_ID`.

This module only plans the copy; the broker stores it (through the delay
rewrite, like any delayed message).
"""

from __future__ import annotations

from dataclasses import dataclass

from .message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    MessageExt,
)

__all__ = ["RETRY_GROUP_TOPIC_PREFIX", "DLQ_GROUP_TOPIC_PREFIX", "retry_topic", "dlq_topic", "is_retry_topic",
           "is_dlq_topic", "SendBackPlan", "plan_send_back", "DEFAULT_MAX_RECONSUME_TIMES"]

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"  # MixAll.DLQ_GROUP_TOPIC_PREFIX
#: `SubscriptionGroupConfig.retryMaxTimes` and the client's default for concurrent consumers.
DEFAULT_MAX_RECONSUME_TIMES = 16
#: The delay of the first retry is level 3 (10 s); each further retry moves one level on.
_FIRST_RETRY_LEVEL = 3
_DELAY_PROPERTIES = (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS,
                     PROPERTY_TIMER_DELAY_SEC)


def retry_topic(group: str) -> str:
    """`MixAll.getRetryTopic`: the retry topic of a consumer group."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """`MixAll.getDLQTopic`: the dead-letter topic of a consumer group."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    """True for `%RETRY%<group>` topics."""
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    """True for `%DLQ%<group>` topics."""
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class SendBackPlan:
    """The copy to store: topic (queue 0 of it), properties and the new reconsume count."""

    topic: str
    properties: dict[str, str]
    reconsume_times: int
    to_dlq: bool


def plan_send_back(original: MessageExt, group: str, delay_level: int = 0,
                   max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES) -> SendBackPlan:
    """Where `original` (as stored) goes after a failed consumption by `group`.

    `delay_level` 0 lets the broker choose (`3 + reconsume_times`); a negative
    level sends the message straight to the dead-letter topic, as RocketMQ does.
    """
    properties = dict(original.properties)
    properties.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
    # On the broker the original's msgId is its offset id (MessageExt, not MessageClientExt).
    properties.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, original.offset_msg_id)
    for name in _DELAY_PROPERTIES:
        properties.pop(name, None)
    reconsume_times = original.reconsume_times
    if reconsume_times >= max_reconsume_times or delay_level < 0:
        properties[PROPERTY_DLQ_ORIGIN_TOPIC] = properties[PROPERTY_RETRY_TOPIC]
        properties[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = original.msg_id
        return SendBackPlan(dlq_topic(group), properties, reconsume_times + 1, True)
    level = delay_level if delay_level > 0 else _FIRST_RETRY_LEVEL + reconsume_times
    properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    return SendBackPlan(retry_topic(group), properties, reconsume_times + 1, False)
