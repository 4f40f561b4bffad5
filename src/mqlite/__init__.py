"""mqlite: Apache RocketMQ as a Python library.

>>> import mqlite, tempfile
>>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
...     broker.broker_name
'mqlite'
"""

from __future__ import annotations

from .broker import Broker, QueueStatus, open
from .config import StoreConfig
from .errors import (
    ConfigError,
    FilterError,
    IllegalStateError,
    MessageNotFoundError,
    MQClientError,
    MQLiteError,
    SendTimeoutError,
    StoreCorruptedError,
    StoreLockedError,
)
from .message import Message, MessageExt, MessageQueue
from .producer import (
    LocalTransactionState,
    Producer,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
    SendMessageContext,
    SendResult,
    SendStatus,
    TransactionProducer,
    TransactionSendResult,
)
from .reader import StoreReader
from .store import MessageStore
from .storebase import GetMessageResult, GetMessageStatus

__version__ = "0.1.0"

__all__ = [
    "Broker",
    "ConfigError",
    "FilterError",
    "GetMessageResult",
    "GetMessageStatus",
    "IllegalStateError",
    "LocalTransactionState",
    "MQClientError",
    "MQLiteError",
    "Message",
    "MessageExt",
    "MessageNotFoundError",
    "MessageQueue",
    "MessageStore",
    "Producer",
    "QueueStatus",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendMessageContext",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "StoreConfig",
    "StoreCorruptedError",
    "StoreLockedError",
    "StoreReader",
    "TransactionProducer",
    "TransactionSendResult",
    "open",
]
