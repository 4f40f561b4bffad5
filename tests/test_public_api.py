"""The public surface: what `import mqlite` exports is pinned, documented and type-checked.

A name added to or dropped from `mqlite.__all__` must be added to or dropped from
`EXPORTS` here too, on purpose: API.md names are a contract.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mqlite

ROOT = Path(__file__).resolve().parent.parent

EXPORTS = {
    # opening a store
    "open", "Broker", "MessageStore", "StoreReader", "StoreConfig",
    # messages and queues
    "Message", "MessageExt", "MessageQueue", "QueueStatus", "QueueProgress", "GetMessageResult", "GetMessageStatus",
    # producers
    "Producer", "TransactionProducer", "SendResult", "SendStatus", "SendMessageContext", "TransactionSendResult",
    "LocalTransactionState", "SelectMessageQueueByHash", "SelectMessageQueueByRandom",
    # consumers
    "PushConsumer", "LitePullConsumer", "MessageModel", "ConsumeFromWhere", "ConsumeConcurrentlyStatus",
    "ConsumeConcurrentlyContext", "ConsumeOrderlyStatus", "ConsumeOrderlyContext", "PullResult", "PullStatus",
    "MessageSelector", "ExpressionType", "rebalance",
    # message trace
    "TraceView", "MessageTrack", "TrackType",
    # other processes: a served broker
    "connect", "RemoteBroker",
    # errors
    "MQLiteError", "MQClientError", "FilterError", "ConfigError", "IllegalStateError", "StoreLockedError",
    "StoreCorruptedError", "MessageNotFoundError", "SendTimeoutError", "DiskFullError", "RemotingError",
    # serving
    "Server",
}

#: Modules users import by name besides the package itself (API.md, DESIGN.md).
PUBLIC_MODULES = ["mqlite.rebalance", "mqlite.testing", "mqlite.aio", "mqlite.cli", "mqlite.spark", "pyspark_mqlite"]


def test_the_exports_are_pinned() -> None:
    assert set(mqlite.__all__) == EXPORTS
    assert len(mqlite.__all__) == len(set(mqlite.__all__)), "a name is exported twice"
    for name in mqlite.__all__:
        assert getattr(mqlite, name, None) is not None, f"mqlite.{name} is in __all__ but missing"


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_export_has_a_docstring(name: str) -> None:
    obj = getattr(mqlite, name)
    assert inspect.getdoc(obj), f"mqlite.{name} has no docstring"
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not callable(member):
                continue
            assert inspect.getdoc(member), f"mqlite.{name}.{attr} has no docstring"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_public_modules_import_and_declare_their_exports(module: str) -> None:
    if module in ("mqlite.spark", "pyspark_mqlite"):
        pytest.importorskip("pyspark")
    mod = importlib.import_module(module)
    assert mod.__doc__, f"{module} has no module docstring"
    for name in getattr(mod, "__all__", []):
        assert hasattr(mod, name), f"{module}.{name} is in __all__ but missing"


def test_the_package_ships_its_type_marker() -> None:
    assert (Path(mqlite.__file__).parent / "py.typed").is_file()


def test_mypy_is_clean() -> None:
    """The whole package type-checks (mypy is in the dev extra that CI installs)."""
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", os.devnull,
         "src/mqlite", "src/pyspark_mqlite"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_import_on_a_platform_without_fcntl_says_why() -> None:
    # Windows has no fcntl: `import mqlite` must say what is missing, not fail deep inside the store.
    code = "import sys; sys.modules['fcntl'] = None\ntry:\n    import mqlite\nexcept ImportError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "mqlite runs on POSIX systems" in out and "fcntl" in out
