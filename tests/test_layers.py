"""Imports point down the layers of DESIGN.md, never up.

Every module under src/mqlite is parsed (not imported) and every import of an mqlite
module is checked: absolute and relative, at module level or inside functions, under
`if TYPE_CHECKING:` too, and `importlib.import_module("mqlite....")` with a constant name.
A module may import its own layer or lower ones. A module missing from `LAYERS` fails
the test: classify new modules here.

The broker port rule (DESIGN.md, "Layers") is checked the same way: the client modules and
the adapters that drive them (`PORT_CLIENTS`) reach a broker only through `mqlite.port.BrokerPort`
(no `.store`, `.arrivals`, `.consumer_groups`, `.queue_locks`, `.topics` ... of a `Broker`),
import no private name from another mqlite module, and touch private members only of `self`/`cls`.
The serving adapter (`BROKER_ADAPTERS`: mqlite/remoting/) drives a `Broker` itself, not the port, but
through the broker's public methods all the same (its `config`, `path` and `clock` are public): no
internal of a broker, and no private name imported from another module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import mqlite

PACKAGE_DIR = Path(mqlite.__file__).resolve().parent

#: Top-level module or subpackage of mqlite -> layer (DESIGN.md, "Layers").
LAYERS: dict[str, int] = {
    # L0 basics
    "errors": 0, "config": 0, "message": 0, "clock": 0, "_service": 0, "compression": 0,
    # L1 storage
    "mappedfile": 1, "record": 1, "commitlog": 1, "consumequeue": 1, "indexfile": 1, "checkpoint": 1, "store": 1,
    "storebase": 1, "storeservices": 1, "recovery": 1, "reader": 1, "verify": 1,
    # L2 broker
    "topics": 2, "offsets": 2, "delay": 2, "txn": 2, "sendback": 2, "groups": 2, "longpoll": 2, "broker": 2,
    "inbox": 2, "trace": 2, "traceview": 2,
    "admin": 2, "port": 2,
    # L3 clients (consumer/ and filter/ are packages)
    "producer": 3, "consumer": 3, "rebalance": 3, "filter": 3,
    # L4 adapters (spark/ is a package)
    "spark": 4, "cli": 4, "testing": 4, "_pytest_plugin": 4, "aio": 4, "__main__": 4, "remoting": 4,
}
#: `mqlite/__init__.py` may import anything; importing the package itself counts as importing
#: its top (what it re-exports), so only L4 adapters may do it.
PACKAGE_LAYER = 4


@dataclass(frozen=True)
class Import:
    module: str  # dotted name of the importing module, e.g. "mqlite.store"
    line: int
    target: str  # dotted name of the imported mqlite module, e.g. "mqlite.commitlog"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _module_exists(dotted: str, root: Path) -> bool:
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    base = root / rel
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{name}" if name else package


def find_imports(path: Path, root: Path) -> list[Import]:
    """Every import of an mqlite module in the file at `path` (package directory `root`)."""
    module = _module_name(path, root)
    top = root.name
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def add(target: str, line: int) -> None:
        if target == top or target.startswith(top + "."):
            found.append(Import(module, line, target))

    for node in ast.walk(tree):  # every node: module level, functions, TYPE_CHECKING blocks
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, _is_package(path), node.level, node.module)
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                # `from . import x` / `from mqlite import x` imports module x when it exists.
                add(candidate if alias.name != "*" and _module_exists(candidate, root) else base, node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                add(node.args[0].value, node.lineno)
    return found


def layer_of(dotted: str) -> int | None:
    """The layer of an mqlite module (by its top-level name under the package), None if unknown."""
    parts = dotted.split(".")
    if len(parts) == 1:
        return PACKAGE_LAYER
    return LAYERS.get(parts[1])


def modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def upward_imports(root: Path) -> list[str]:
    problems = []
    for path in modules(root):
        if path == root / "__init__.py":
            continue  # the package's front door may import anything
        for imp in find_imports(path, root):
            here, there = layer_of(imp.module), layer_of(imp.target)
            if here is None or there is None:
                continue  # reported by the classification check
            if there > here:
                problems.append(f"{imp.module} (L{here}) imports {imp.target} (L{there}) at line {imp.line}")
    return problems


def unclassified(root: Path) -> list[str]:
    names = [_module_name(p, root) for p in modules(root)]
    return [n for n in names if "." in n and layer_of(n) is None]


# -- the real package ----------------------------------------------------------------------------------
def test_every_module_is_classified() -> None:
    missing = unclassified(PACKAGE_DIR)
    assert not missing, f"add these modules to LAYERS in tests/test_layers.py (see DESIGN.md): {missing}"


def test_no_import_points_up() -> None:
    problems = upward_imports(PACKAGE_DIR)
    assert not problems, "imports must point down the layers:\n" + "\n".join(problems)


def test_walker_sees_the_package() -> None:
    # Guard against a walker that silently finds nothing.
    imports = find_imports(PACKAGE_DIR / "store.py", PACKAGE_DIR)
    assert {"mqlite.commitlog", "mqlite.errors"} <= {i.target for i in imports}
    assert len(modules(PACKAGE_DIR)) >= 15


# -- the checker itself, on a synthetic package -----------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "mqlite"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("source", [
    "from .broker import Broker",
    "from . import broker",
    "import mqlite.broker",
    "from mqlite import broker",
    "from mqlite.broker import Broker as B",
    "import mqlite",
    "from mqlite import Broker",
    "def f():\n    from .broker import Broker\n    return Broker",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .broker import Broker",
    "import importlib\nmod = importlib.import_module('mqlite.broker')",
    "class C:\n    def m(self):\n        import mqlite.consumer.pull",
])
def test_checker_catches_upward_imports(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"store.py": source, "broker.py": "", "consumer/__init__.py": "",
                               "consumer/pull.py": ""})
    problems = upward_imports(root)
    assert problems and all(p.startswith("mqlite.store (L1)") for p in problems), problems


@pytest.mark.parametrize("source", [
    "from .errors import MQLiteError",
    "from . import commitlog",
    "from .commitlog import CommitLog",  # same layer
    "import mqlite.errors",
    "import os\nimport numpy",
    "from .config import StoreConfig",
])
def test_checker_allows_downward_and_same_layer_imports(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"store.py": source, "errors.py": "", "commitlog.py": "", "config.py": ""})
    assert upward_imports(root) == []


def test_checker_resolves_relative_imports_in_subpackages(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "consumer/__init__.py": "from .pull import PullLoop\nfrom .. import broker\n",
        "consumer/pull.py": "from ..spark import source\nfrom ..store import MessageStore\n",
        "spark/__init__.py": "", "spark/source.py": "", "store.py": "", "broker.py": "",
    })
    problems = upward_imports(root)
    assert problems == ["mqlite.consumer.pull (L3) imports mqlite.spark.source (L4) at line 1"]


def test_checker_reports_unclassified_modules(tmp_path: Path) -> None:
    root = _package(tmp_path, {"store.py": "", "newthing.py": "", "spark/__init__.py": "", "plugins/x.py": ""})
    assert sorted(unclassified(root)) == ["mqlite.newthing", "mqlite.plugins.x"]


def test_package_init_may_import_anything(tmp_path: Path) -> None:
    root = _package(tmp_path, {"errors.py": "", "cli.py": "import mqlite\n"})
    (root / "__init__.py").write_text("from .cli import main\nfrom .errors import MQLiteError\n")
    assert upward_imports(root) == []


# -- the broker port rule ---------------------------------------------------------------------------------
#: Modules that must reach a broker only through `BrokerPort` (dotted names under the package; a
#: package stands for all its modules): the L3 clients and the adapters built on them.
PORT_CLIENTS = ("producer", "consumer", "rebalance", "filter", "aio", "testing", "_pytest_plugin")
#: A `Broker`'s internals: never read by a port client, whatever holds them.
BROKER_INTERNALS = frozenset({"store", "arrivals", "consumer_groups", "queue_locks", "topics", "offsets"})
#: Attributes too common to forbid everywhere (`os.path`), forbidden on anything named like a broker.
BROKER_ONLY_ATTRIBUTES = frozenset({"config", "path"})


#: Adapters that drive a `Broker` through its public methods: no `BROKER_INTERNALS`, no private imports
#: (their classes may share private members within a module: a server and its connections).
BROKER_ADAPTERS = ("remoting",)


def _is_port_client(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in PORT_CLIENTS


def _is_broker_adapter(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in BROKER_ADAPTERS


def port_violations(root: Path, *, adapters: bool = False) -> list[str]:
    """Every place a port client reaches past the port (see the module notes); with `adapters`, every
    place a broker adapter reaches into a broker's internals or imports a private name."""
    problems = []
    for path in modules(root):
        module = _module_name(path, root)
        if not (_is_broker_adapter(module) if adapters else _is_port_client(module)):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = f"{module} line"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = (_resolve_relative(module, _is_package(path), node.level, node.module) if node.level
                        else node.module or "")
                if base != root.name and not base.startswith(root.name + "."):
                    continue
                for alias in node.names:
                    private = alias.name.startswith("_") and not _module_exists(f"{base}.{alias.name}", root)
                    if private and base != module:
                        problems.append(f"{where} {node.lineno}: imports the private name {alias.name} from {base}")
            elif isinstance(node, ast.Attribute):
                owner = ast.unparse(node.value)
                name = node.attr
                if adapters:
                    if name in BROKER_INTERNALS:
                        problems.append(f"{where} {node.lineno}: reads {owner}.{name}, a Broker internal; "
                                        "use a public Broker method (mqlite/broker.py) or add one")
                elif name.startswith("_") and not name.startswith("__") and owner not in ("self", "cls") \
                        and not owner.startswith("super("):
                    problems.append(f"{where} {node.lineno}: reads the private member {owner}.{name}")
                elif name in BROKER_INTERNALS or (name in BROKER_ONLY_ATTRIBUTES and "broker" in owner.lower()):
                    problems.append(f"{where} {node.lineno}: reads {owner}.{name}, a Broker internal; "
                                    "use a BrokerPort method (mqlite/port.py) or add one")
    return problems


def test_clients_reach_a_broker_only_through_the_port() -> None:
    problems = port_violations(PACKAGE_DIR)
    assert not problems, "clients must use the broker port (DESIGN.md, Layers):\n" + "\n".join(problems)


def test_the_port_rule_covers_the_clients() -> None:
    # Guard against a rule that silently checks nothing (a renamed package, say).
    checked = {name for name in (_module_name(p, PACKAGE_DIR) for p in modules(PACKAGE_DIR))
               if _is_port_client(name)}
    assert {"mqlite.producer", "mqlite.consumer.push", "mqlite.consumer.litepull", "mqlite.aio",
            "mqlite.testing"} <= checked


@pytest.mark.parametrize("source", [
    "def f(broker):\n    return broker.store.clock",
    "def f(self):\n    self._broker.arrivals.watch(self, [])",
    "def f(broker):\n    return broker.consumer_groups.members('g')",
    "def f(broker, mq):\n    return broker.queue_locks.try_lock('g', [mq], 'c')",
    "def f(b):\n    return b.topics.version",
    "def f(broker):\n    return broker.offsets",
    "def f(broker):\n    return broker.config.max_message_size",
    "def f(self):\n    return self.broker.path",
    "from ..store import _locked",
    "from mqlite.consumer.litepull import _ConsumeRequest",
    "from ..message import _local_ip",
    "def f(consumer):\n    return consumer._take(1.0)",
])
def test_the_port_rule_catches_a_client_reaching_past_the_port(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"consumer/__init__.py": "", "consumer/push.py": source, "store.py": "",
                               "message.py": "", "consumer/litepull.py": ""})
    problems = port_violations(root)
    assert len(problems) == 1 and problems[0].startswith("mqlite.consumer.push line"), problems


@pytest.mark.parametrize("source", [
    "import os\ndef f(self):\n    return os.path.join(self.path, self._x)",
    "def f(broker):\n    return broker.clock.now_ms(), broker.routes_version",
    "from ._service import Service\nfrom . import _helpers\nfrom .store import MessageStore",
    "def f(self):\n    return super()._remove(self), self.__class__",
    "class C:\n    @classmethod\n    def m(cls):\n        return cls._made",
])
def test_the_port_rule_allows_the_port_and_own_members(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"consumer/__init__.py": "", "consumer/push.py": source, "store.py": "",
                               "_service.py": "", "consumer/_helpers.py": ""})
    assert port_violations(root) == []


def test_the_port_rule_leaves_the_broker_layer_alone(tmp_path: Path) -> None:
    root = _package(tmp_path, {"broker.py": "def f(self):\n    return self.store, self._store, x._y\n",
                               "cli/__init__.py": "def f(broker):\n    return broker.store\n"})
    assert port_violations(root) == []


# -- the broker adapter rule (mqlite/remoting/) ------------------------------------------------------------
def test_the_serving_adapter_uses_only_public_broker_methods() -> None:
    problems = port_violations(PACKAGE_DIR, adapters=True)
    assert not problems, "remoting/ must use a Broker's public methods (DESIGN.md, Layers):\n" + "\n".join(problems)


def test_the_adapter_rule_covers_the_remoting_package() -> None:
    checked = {name for name in (_module_name(p, PACKAGE_DIR) for p in modules(PACKAGE_DIR))
               if _is_broker_adapter(name)}
    assert {"mqlite.remoting.server", "mqlite.remoting.send", "mqlite.remoting.admin", "mqlite.remoting.clients",
            "mqlite.remoting.offsets", "mqlite.remoting.pull", "mqlite.remoting.frames"} <= checked


@pytest.mark.parametrize("source", [
    "def f(request):\n    return request.broker.store.look_message_by_offset(0)",
    "def f(self):\n    self._broker.consumer_groups.notify('g')",
    "def f(broker):\n    return broker.topics.ensure_system('RMQ_SYS_TRACE_TOPIC', 1)",
    "def f(broker):\n    return broker.offsets.snapshot()",
    "def f(broker, w):\n    broker.arrivals.watch(w, [])",
    "def f(broker):\n    return broker.queue_locks",
    "from ..message import _local_ip",
    "from .frames import _encode_json_header",
])
def test_the_adapter_rule_catches_a_handler_reaching_into_a_broker(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"remoting/__init__.py": "", "remoting/send.py": source, "remoting/frames.py": "",
                               "message.py": ""})
    problems = port_violations(root, adapters=True)
    assert len(problems) == 1 and problems[0].startswith("mqlite.remoting.send line"), problems


@pytest.mark.parametrize("source", [
    "def f(broker):\n    return broker.config.max_message_size, broker.path, broker.clock.now_ms()",
    "def f(request):\n    return request.broker.look_message_by_offset(0), request.broker.consumer_members('g')",
    "def f(self):\n    return self.server._loop",  # a server and its connections share one module's privates
    "from .._service import close_at_exit\nfrom .frames import FrameDecoder",
])
def test_the_adapter_rule_allows_public_broker_methods(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"remoting/__init__.py": "", "remoting/send.py": source, "remoting/frames.py": "",
                               "_service.py": ""})
    assert port_violations(root, adapters=True) == []
