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

import importlib as _importlib
import typing as _typing

from . import wiring
from .remoting import serve_broker as _serve_broker

if _typing.TYPE_CHECKING:
    from . import rebalance
    from .broker import Broker, QueueProgress, QueueStatus
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
    from .remoting.holder import open_store as open
    from .remoting.remote import RemoteBroker, connect
    from .remoting.server import Server
    from .store import MessageStore
    from .storebase import GetMessageResult, GetMessageStatus
    from .traceview import MessageTrack, TraceView, TrackType

__version__ = "0.1.0"


def _connect_to_holder(path: str) -> RemoteBroker:
    """`mqlite.remoting.holder.connect_to_holder`, imported when a client first meets a store another process holds."""
    from .remoting.holder import connect_to_holder

    return connect_to_holder(path)


# Clients given the path of a store another process holds connect to that process, and Broker.serve (layer L2)
# builds servers of mqlite.remoting (L4): installed before mqlite.broker is imported, which takes them from here.
wiring.remote_connector = _connect_to_holder
wiring.server_factory = _serve_broker

#: Public name -> the module that defines it (and the name there). `import mqlite` imports none of them:
#: the broker pulls in the store and numpy, the server asyncio, and a process that only loads the
#: pytest plugin or reads `mqlite.__version__` needs neither. The first `mqlite.NAME` imports the module
#: (PEP 562) and binds NAME here, so later lookups are plain attribute reads.
_LAZY: dict[str, tuple[str, str]] = {
    "Broker": ("broker", "Broker"), "QueueProgress": ("broker", "QueueProgress"),
    "QueueStatus": ("broker", "QueueStatus"),
    "StoreConfig": ("config", "StoreConfig"),
    **{name: ("consumer", name) for name in (
        "ConsumeConcurrentlyContext", "ConsumeConcurrentlyStatus", "ConsumeFromWhere", "ConsumeOrderlyContext",
        "ConsumeOrderlyStatus", "LitePullConsumer", "MessageModel", "PushConsumer")},
    **{name: ("errors", name) for name in (
        "ConfigError", "DiskFullError", "FilterError", "IllegalStateError", "MessageNotFoundError",
        "MQClientError", "MQLiteError", "RemotingError", "SendTimeoutError", "StoreCorruptedError",
        "StoreLockedError")},
    "ExpressionType": ("filter", "ExpressionType"), "MessageSelector": ("filter", "MessageSelector"),
    "PullResult": ("longpoll", "PullResult"), "PullStatus": ("longpoll", "PullStatus"),
    "Message": ("message", "Message"), "MessageExt": ("message", "MessageExt"),
    "MessageQueue": ("message", "MessageQueue"),
    **{name: ("producer", name) for name in (
        "LocalTransactionState", "Producer", "SelectMessageQueueByHash", "SelectMessageQueueByRandom",
        "SendMessageContext", "SendResult", "SendStatus", "TransactionProducer", "TransactionSendResult")},
    "StoreReader": ("reader", "StoreReader"),
    "open": ("remoting.holder", "open_store"),
    "RemoteBroker": ("remoting.remote", "RemoteBroker"), "connect": ("remoting.remote", "connect"),
    "Server": ("remoting.server", "Server"),
    "MessageStore": ("store", "MessageStore"),
    "GetMessageResult": ("storebase", "GetMessageResult"), "GetMessageStatus": ("storebase", "GetMessageStatus"),
    "MessageTrack": ("traceview", "MessageTrack"), "TraceView": ("traceview", "TraceView"),
    "TrackType": ("traceview", "TrackType"),
}


def __getattr__(name: str) -> object:
    """`mqlite.NAME` for a public name not imported yet: import its module (PEP 562) and bind NAME here.
    A submodule's name (`mqlite.errors`, `mqlite.rebalance`) imports it, as a plain `import mqlite` once did."""
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value: object = getattr(_importlib.import_module(f".{module}", __name__), attribute)
    elif not name.startswith("__") and _is_submodule(name):
        value = _importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'mqlite' has no attribute {name!r}")
    globals()[name] = value
    return value


def _is_submodule(name: str) -> bool:
    """True when `mqlite.<name>` is a module or subpackage of this package (looked up, not imported)."""
    import importlib.util  # on this rare path only: `import mqlite` stays lean

    return importlib.util.find_spec(f"{__name__}.{name}") is not None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
