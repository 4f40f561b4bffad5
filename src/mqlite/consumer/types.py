"""Consumer enums and listener contexts, named as RocketMQ's client names them."""

from __future__ import annotations

import enum
from typing import Any, Protocol

from ..message import MessageExt, MessageQueue

__all__ = ["MessageModel", "ConsumeFromWhere", "ConsumeConcurrentlyStatus", "ConsumeOrderlyStatus",
           "ConsumeConcurrentlyContext", "ConsumeOrderlyContext", "MessageListener", "MessageQueueListener"]


class MessageModel(enum.Enum):
    """CLUSTERING shares a group's queues among its members; BROADCASTING gives every member all of them."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    """Where a group with no stored offset starts (`ConsumeFromWhere`); a stored offset always wins."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    # Deprecated in RocketMQ; they behave like CONSUME_FROM_LAST_OFFSET.
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


class ConsumeConcurrentlyStatus(enum.Enum):
    """What a concurrent listener returns."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns (COMMIT and ROLLBACK are RocketMQ's deprecated manual-commit values)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class ConsumeConcurrentlyContext:
    """Handed to a concurrent listener with each batch.

    `ack_index`: on success, messages `[0..ack_index]` are acknowledged and the
    rest sent back (defaults to all). `delay_level_when_next_consume`: the
    retry delay level for messages sent back (0: the broker's `3 + reconsume_times`,
    -1: straight to the dead-letter topic).
    """

    __slots__ = ("message_queue", "ack_index", "delay_level_when_next_consume")

    def __init__(self, message_queue: MessageQueue) -> None:
        self.message_queue = message_queue
        self.ack_index = 2**31 - 1  # Integer.MAX_VALUE: everything
        self.delay_level_when_next_consume = 0

    def __repr__(self) -> str:
        return f"ConsumeConcurrentlyContext({self.message_queue}, ack_index={self.ack_index})"


class ConsumeOrderlyContext:
    """Handed to an orderly listener with each batch.

    `auto_commit` (default True) commits after SUCCESS; `suspend_current_queue_time_millis`
    (-1: the consumer's setting) is how long SUSPEND_CURRENT_QUEUE_A_MOMENT waits.
    """

    __slots__ = ("message_queue", "auto_commit", "suspend_current_queue_time_millis")

    def __init__(self, message_queue: MessageQueue) -> None:
        self.message_queue = message_queue
        self.auto_commit = True
        self.suspend_current_queue_time_millis = -1

    def __repr__(self) -> str:
        return f"ConsumeOrderlyContext({self.message_queue}, auto_commit={self.auto_commit})"


class MessageListener(Protocol):
    """`(msgs, context) -> status`; None means success, an exception means "later"."""

    def __call__(self, msgs: list[MessageExt], context: Any, /) -> Any: ...


class MessageQueueListener(Protocol):
    """Told the whole queue set of a topic and the part this consumer now owns, after each change."""

    def __call__(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue], /) -> None: ...
