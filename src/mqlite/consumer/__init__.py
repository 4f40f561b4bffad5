"""Consumers: `PushConsumer` (listener driven) and `LitePullConsumer` (poll driven).

Both follow RocketMQ's client: a group shares a topic's queues through an
allocation strategy (`mqlite.rebalance`), offsets are committed to the
broker (clustering) or a local file (broadcasting), and failed messages of a
push consumer go to `%RETRY%<group>` and then `%DLQ%<group>`.
"""

from .litepull import LitePullConsumer
from .processqueue import ProcessQueue
from .push import PushConsumer
from .types import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageModel,
)

__all__ = [
    "PushConsumer",
    "LitePullConsumer",
    "ProcessQueue",
    "MessageModel",
    "ConsumeFromWhere",
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
]
