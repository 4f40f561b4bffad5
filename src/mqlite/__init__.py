"""mqlite: Apache RocketMQ as a Python library.

>>> import mqlite, tempfile
>>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
...     broker.broker_name
'mqlite'
"""

from __future__ import annotations

try:  # the store's lock is an fcntl lock: without fcntl (Windows) nothing below could work
    import fcntl as _fcntl  # noqa: F401
except ImportError:
    import sys as _sys

    raise ImportError(f"mqlite runs on POSIX systems (Linux, macOS): it locks a store directory with fcntl, "
                      f"which this platform ({_sys.platform}) does not have") from None

from . import rebalance
from .broker import Broker, QueueProgress, QueueStatus, set_remote_connector
from .config import StoreConfig
from .consumer import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    MessageModel,
    PushConsumer,
)
from .errors import (
    ConfigError,
    DiskFullError,
    FilterError,
    IllegalStateError,
    MessageNotFoundError,
    MQClientError,
    MQLiteError,
    RemotingError,
    SendTimeoutError,
    StoreCorruptedError,
    StoreLockedError,
)
from .filter import ExpressionType, MessageSelector
from .longpoll import PullResult, PullStatus
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
from .remoting.holder import connect_to_holder
from .remoting.holder import open_store as open
from .remoting.remote import RemoteBroker, connect
from .store import MessageStore
from .storebase import GetMessageResult, GetMessageStatus
from .traceview import MessageTrack, TraceView, TrackType
from .broker import set_server_factory as _set_server_factory
from .remoting import serve_broker as _serve_broker

# Clients given the path of a store another process holds and serves connect to that process.
set_remote_connector(connect_to_holder)

__version__ = "0.1.0"

_set_server_factory(_serve_broker)  # Broker.serve (layer L2) builds servers of mqlite.remoting (L4)


def __getattr__(name: str) -> object:
    # `mqlite.Server` without importing asyncio for every `import mqlite`.
    if name == "Server":
        from .remoting.server import Server

        return Server
    raise AttributeError(f"module 'mqlite' has no attribute {name!r}")

__all__ = [
    "Broker",
    "connect",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ExpressionType",
    "LitePullConsumer",
    "MessageModel",
    "MessageSelector",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "RemoteBroker",
    "QueueProgress",
    "rebalance",
    "ConfigError",
    "DiskFullError",
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
    "RemotingError",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendMessageContext",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "Server",
    "StoreConfig",
    "StoreCorruptedError",
    "StoreLockedError",
    "StoreReader",
    "MessageTrack",
    "TraceView",
    "TrackType",
    "TransactionProducer",
    "TransactionSendResult",
    "open",
]
