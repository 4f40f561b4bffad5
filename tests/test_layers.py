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

Every L4 adapter (`ADAPTERS`: spark/, cli/, testing, the pytest plugin, aio, remoting/, dashboard/) imports no
private name of another mqlite module and reads private members only of `self`/`cls`: what it needs
is a public, documented name of the module it comes from. Spark, which runs in other processes
than the broker, imports only the names of `SPARK_MAY_IMPORT` (L0 basics, storage's public read
surface and offset-file API, the filter compiler), and its writer also `SPARK_WRITER_MAY_IMPORT`
(the public ingest entry points): no broker internals.
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
    "errors": 0, "config": 0, "message": 0, "clock": 0, "_service": 0, "compression": 0, "validators": 0,
    "propertybatch": 0, "wiring": 0,
    # L1 storage
    "mappedfile": 1, "record": 1, "commitlog": 1, "consumequeue": 1, "indexfile": 1, "checkpoint": 1, "store": 1,
    "storebase": 1, "storeservices": 1, "recovery": 1, "reader": 1, "verify": 1, "offsetfile": 1,
    "recoveryhistory": 1,
    # L2 broker
    "topics": 2, "offsets": 2, "delay": 2, "txn": 2, "sendback": 2, "groups": 2, "longpoll": 2, "broker": 2,
    "inbox": 2, "trace": 2, "traceview": 2,
    "admin": 2, "port": 2,
    "metrics": 2,
    # L3 clients (consumer/ and filter/ are packages)
    "producer": 3, "durablesends": 3, "consumer": 3, "rebalance": 3, "filter": 3,
    # L4 adapters (spark/ is a package)
    "spark": 4, "cli": 4, "testing": 4, "_pytest_plugin": 4, "aio": 4, "__main__": 4, "remoting": 4,
    "dashboard": 4,
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
PORT_CLIENTS = ("producer", "durablesends", "consumer", "rebalance", "filter", "aio", "testing", "_pytest_plugin")
#: A `Broker`'s internals: never read by a port client, whatever holds them.
BROKER_INTERNALS = frozenset({"store", "arrivals", "consumer_groups", "queue_locks", "topics", "offsets"})
#: Attributes too common to forbid everywhere (`os.path`), forbidden on anything named like a broker.
BROKER_ONLY_ATTRIBUTES = frozenset({"config", "path"})


#: Adapters that drive a `Broker` through its public methods: no `BROKER_INTERNALS`, no private imports
#: (and, as every adapter, no private member of another object: `private_reach`).
BROKER_ADAPTERS = ("remoting",)


def _is_port_client(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in PORT_CLIENTS


def _is_broker_adapter(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in BROKER_ADAPTERS


def _import_base(node: ast.ImportFrom, module: str, path: Path) -> str:
    return _resolve_relative(module, _is_package(path), node.level, node.module) if node.level else node.module or ""


def _private_imports(node: ast.ImportFrom, module: str, path: Path, root: Path) -> list[tuple[str, str]]:
    """(module, name) of each private name `node` imports from another mqlite module (not a private module).

    A dunder (`__version__`) is public by convention, as in `_is_private_member`."""
    base = _import_base(node, module, path)
    if base == module or (base != root.name and not base.startswith(root.name + ".")):
        return []
    return [(base, a.name) for a in node.names
            if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))
            and not _module_exists(f"{base}.{a.name}", root)]


def _is_private_member(node: ast.Attribute) -> bool:
    """A `_name` (not a dunder) read from anything but `self`, `cls` or `super()`."""
    owner = ast.unparse(node.value)
    return (node.attr.startswith("_") and not node.attr.startswith("__") and owner not in ("self", "cls")
            and not owner.startswith("super("))


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
                problems += [f"{where} {node.lineno}: imports the private name {name} from {base}"
                             for base, name in _private_imports(node, module, path, root)]
            elif isinstance(node, ast.Attribute):
                owner = ast.unparse(node.value)
                name = node.attr
                if adapters:
                    if name in BROKER_INTERNALS:
                        problems.append(f"{where} {node.lineno}: reads {owner}.{name}, a Broker internal; "
                                        "use a public Broker method (mqlite/broker.py) or add one")
                elif _is_private_member(node):
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
    "from .._service import close_at_exit\nfrom .frames import FrameDecoder",
])
def test_the_adapter_rule_allows_public_broker_methods(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"remoting/__init__.py": "", "remoting/send.py": source, "remoting/frames.py": "",
                               "_service.py": ""})
    assert port_violations(root, adapters=True) == []


# -- the adapter rule: no private names of other modules or objects (every L4 adapter) -------------------------------
#: The L4 adapters (top-level names under the package; a package stands for all its modules).
ADAPTERS = ("spark", "cli", "testing", "_pytest_plugin", "aio", "remoting", "__main__", "dashboard")


def _is_adapter(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in ADAPTERS


def private_reach(root: Path) -> list[str]:
    """Every place an adapter imports a private name of another mqlite module or reads a private member
    of an object other than `self`/`cls` (`super()`'s too: that is `self`)."""
    problems = []
    for path in modules(root):
        module = _module_name(path, root)
        if not _is_adapter(module):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                problems += [f"{module} line {node.lineno}: imports the private name {name} from {base}; give "
                             f"{base} a public, documented name for what is needed"
                             for base, name in _private_imports(node, module, path, root)]
            elif isinstance(node, ast.Attribute) and _is_private_member(node):
                problems.append(f"{module} line {node.lineno}: reads the private member {ast.unparse(node)}; "
                                f"give that class a public method or attribute for it")
    return problems


def test_adapters_use_only_public_names() -> None:
    problems = private_reach(PACKAGE_DIR)
    assert not problems, "adapters use public names only (DESIGN.md, Layers):\n" + "\n".join(problems)


def test_the_adapter_rule_covers_every_adapter() -> None:
    checked = {name for name in (_module_name(p, PACKAGE_DIR) for p in modules(PACKAGE_DIR)) if _is_adapter(name)}
    assert {"mqlite.spark.writer", "mqlite.spark.arrowread", "mqlite.cli.commands", "mqlite.testing",
            "mqlite._pytest_plugin", "mqlite.aio", "mqlite.remoting.server", "mqlite.remoting.client"} <= checked


@pytest.mark.parametrize(("where", "source"), [
    ("spark/writer.py", "def f(self):\n    return self._validator._validate(None)"),
    ("spark/arrowread.py", "from ..store import _locked"),
    ("cli/commands.py", "def f(broker):\n    return broker._writer()"),
    ("testing.py", "from .message import _local_ip"),
    ("aio.py", "def f(consumer):\n    return consumer._take(1.0)"),
    ("remoting/server.py", "def f(self):\n    return self.server._loop"),
    ("remoting/client.py", "def f(self, cmd):\n    self.client._handle_request(self, cmd)"),
    ("_pytest_plugin.py", "from mqlite.broker import _SHARED"),
])
def test_the_adapter_rule_catches_private_reach(tmp_path: Path, where: str, source: str) -> None:
    root = _package(tmp_path, {where: source, "store.py": "", "message.py": "", "broker.py": "",
                               "spark/__init__.py": "", "cli/__init__.py": "", "remoting/__init__.py": ""})
    problems = private_reach(root)
    module = "mqlite." + where.removesuffix(".py").replace("/", ".")
    assert len(problems) == 1 and problems[0].startswith(f"{module} line"), problems


@pytest.mark.parametrize("source", [
    "from .._service import Service\nfrom ..store import MessageStore",
    "def f(self):\n    return self._x, super()._y, self.__class__",
    "class C:\n    @classmethod\n    def m(cls):\n        return cls._made",
    "from ._helpers import _private_of_my_own_package_module",  # a module (private by name), not a private name
])
def test_the_adapter_rule_allows_public_names_and_own_members(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"cli/__init__.py": "", "cli/commands.py": source, "_service.py": "", "store.py": "",
                               "cli/_helpers/__init__.py": "", "cli/_helpers/_private_of_my_own_package_module.py": ""})
    assert private_reach(root) == []


def test_the_adapter_rule_leaves_lower_layers_alone(tmp_path: Path) -> None:
    root = _package(tmp_path, {"broker.py": "def f(self, x):\n    return x._store\nfrom .store import _locked\n",
                               "store.py": ""})
    assert private_reach(root) == []


# -- the Spark rule: an explicit allow-list ---------------------------------------------------------------------------
#: Every public name of the module may be imported (L0 basics, the codecs, the filter compiler).
ANY_PUBLIC = None
#: What `mqlite.spark` may import from the rest of mqlite (module -> names; `ANY_PUBLIC`: every public name).
#: Spark runs in executor and driver processes beside (not inside) the broker, so it reads files through
#: storage's public read surface and writes through the broker's public ingest entry points, nothing else.
SPARK_MAY_IMPORT: dict[str, frozenset[str] | None] = {
    # L0 basics
    "mqlite.errors": ANY_PUBLIC, "mqlite.config": ANY_PUBLIC, "mqlite.message": ANY_PUBLIC,
    "mqlite.clock": ANY_PUBLIC, "mqlite.compression": ANY_PUBLIC,
    "mqlite.propertybatch": ANY_PUBLIC,  # PropertyEntries: the Spark reader's property columns
    "mqlite.validators": ANY_PUBLIC,  # validate_message, check_topic, check_send_topic, ... (RocketMQ's Validators)
    # storage's public read surface: the reader, where the files lie, the record and unit codecs
    "mqlite.reader": frozenset({"StoreReader", "StoreLayout", "store_config"}),
    "mqlite.record": ANY_PUBLIC,  # the record codec: HEADER, HEADER_DTYPE, MAGIC_V1, decode_message, ...
    "mqlite.consumequeue": frozenset({"CQ_DTYPE", "BLANK_UNIT"}),
    # the filter compiler
    "mqlite.filter": ANY_PUBLIC,
    # storage's offset files: a group's offsets from a process beside the store's owner (a stream's `group`)
    "mqlite.offsetfile": frozenset({"commit_group_offsets", "read_group_offsets", "side_offset_path"}),
}
#: The writer's ingest entry points besides: the broker's `append_staged` (through `Broker` and `open`),
#: and what tasks and the driver do without a broker (encode a chunk, check and hand off a job).
SPARK_WRITER_MAY_IMPORT: dict[str, frozenset[str] | None] = {
    "mqlite.broker": frozenset({"Broker", "open"}),
    "mqlite.inbox": frozenset({"write_chunk", "check_staged", "hand_off", "already_committed", "STAGING_DIR",
                               "ROUND_ROBIN"}),
}
SPARK_WRITER = "mqlite.spark.writer"
_SPARK_FIX = ("Spark may use only storage's public read surface, the filter compiler and the public ingest, "
              "validation and group-offset entry points (SPARK_MAY_IMPORT in tests/test_layers.py, DESIGN.md "
              "Layers). If what you need is not there, give the owning module a public, documented function "
              "(e.g. on mqlite.reader, mqlite.validators, mqlite.offsetfile or Broker) and add that name here")


def _spark_imports(path: Path, root: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None for the module itself) of every mqlite import in a spark module."""
    module = _module_name(path, root)
    top = root.name
    found: list[tuple[int, str, str | None]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name == top or a.name.startswith(top + ".")]
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, module, path)
            if base != top and not base.startswith(top + "."):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if alias.name != "*" and _module_exists(candidate, root):
                    found.append((node.lineno, candidate, None))
                else:
                    found.append((node.lineno, base, alias.name))
    return found + [(i.line, i.target, None) for i in find_imports(path, root)
                    if i.target not in {f for _, f, _ in found}]  # importlib.import_module("mqlite....")


def spark_violations(root: Path) -> list[str]:
    """Every import of `mqlite.spark` outside its allow-list, and every read of a broker internal there."""
    problems = []
    spark = f"{root.name}.spark"
    for path in modules(root):
        module = _module_name(path, root)
        if module != spark and not module.startswith(spark + "."):
            continue
        allowed = {**SPARK_MAY_IMPORT, **(SPARK_WRITER_MAY_IMPORT if module == SPARK_WRITER else {})}
        for line, target, name in _spark_imports(path, root):
            if target == spark or target.startswith(spark + "."):
                continue
            what = f"{name} from {target}" if name else f"the module {target}"
            if target not in allowed:
                problems.append(f"{module} line {line}: imports {what}, which is not on Spark's allow-list. "
                                f"{_SPARK_FIX}")
                continue
            names = allowed[target]
            if name is None and names is not ANY_PUBLIC:
                problems.append(f"{module} line {line}: imports {what} whole; import the allowed names "
                                f"({', '.join(sorted(names))}). {_SPARK_FIX}")
            elif name is not None and (name.startswith("_") or (names is not ANY_PUBLIC and name not in names)):
                problems.append(f"{module} line {line}: imports {what}, which is not on Spark's allow-list. "
                                f"{_SPARK_FIX}")
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in BROKER_INTERNALS \
                    and "broker" in ast.unparse(node.value).lower():
                problems.append(f"{module} line {node.lineno}: reads {ast.unparse(node)}, a Broker internal; "
                                f"use a public Broker method ({_SPARK_FIX})")
    return problems


def test_spark_imports_only_its_allow_list() -> None:
    problems = spark_violations(PACKAGE_DIR)
    assert not problems, "mqlite.spark reaches past its allow-list:\n" + "\n".join(problems)


def test_the_spark_rule_covers_spark() -> None:
    # Guard against a rule that silently checks nothing, and against allow-list entries that name nothing.
    checked = {name for name in (_module_name(p, PACKAGE_DIR) for p in modules(PACKAGE_DIR))
               if name.startswith("mqlite.spark")}
    assert {"mqlite.spark.writer", "mqlite.spark.arrowread", "mqlite.spark.options", "mqlite.spark.plan",
            "mqlite.spark.stream", "mqlite.spark.groupoffsets"} <= checked
    import importlib

    for target, names in {**SPARK_MAY_IMPORT, **SPARK_WRITER_MAY_IMPORT}.items():
        exported = set(getattr(importlib.import_module(target), "__all__", ()))
        assert names is ANY_PUBLIC or names <= exported, f"{target}: {sorted(names - exported)} are not public"


@pytest.mark.parametrize(("where", "source"), [
    ("spark/arrowread.py", "from ..mappedfile import offset_to_file_name"),
    ("spark/arrowread.py", "from ..recovery import load_set_aside"),
    ("spark/arrowread.py", "from ..storebase import config_for"),
    ("spark/arrowread.py", "from ..commitlog import CommitLog"),  # the record's bytes: mqlite.record
    ("spark/options.py", "def f():\n    from ..topics import check_topic"),
    ("spark/groupoffsets.py", "from ..store import try_lock_store"),
    ("spark/groupoffsets.py", "from ..offsetfile import load_side_file"),
    ("spark/groupoffsets.py", "from ..offsets import commit_group_offsets"),  # offsets is L2: use offsetfile
    ("spark/writer.py", "from mqlite.producer import Producer"),
    ("spark/writer.py", "from mqlite.inbox import append_staged"),
    ("spark/writer.py", "from mqlite.inbox import mark_committed"),
    ("spark/writer.py", "import mqlite"),
    ("spark/writer.py", "import mqlite.inbox"),
    ("spark/writer.py", "from mqlite import inbox"),
    ("spark/writer.py", "from mqlite.reader import _something"),
    ("spark/writer.py", "def f(broker):\n    return broker.store.put(1)"),
    ("spark/stream.py", "from ..inbox import write_chunk"),  # the ingest names are the writer's only
    ("spark/stream.py", "from ..broker import Broker"),
    ("spark/plan.py", "import importlib\nm = importlib.import_module('mqlite.storebase')"),
])
def test_the_spark_rule_catches_a_reach_in(tmp_path: Path, where: str, source: str) -> None:
    files = {name: "" for name in ("mappedfile.py", "recovery.py", "storebase.py", "topics.py", "store.py",
                                   "commitlog.py",
                                   "offsets.py", "offsetfile.py", "producer.py", "inbox.py", "reader.py", "broker.py",
                                   "spark/__init__.py")}
    root = _package(tmp_path, {**files, where: source})
    problems = spark_violations(root)
    module = "mqlite." + where.removesuffix(".py").replace("/", ".")
    assert len(problems) == 1 and problems[0].startswith(f"{module} line"), problems
    assert "SPARK_MAY_IMPORT" in problems[0]  # the message says what to do


@pytest.mark.parametrize(("where", "source"), [
    ("spark/arrowread.py", "from ..reader import StoreLayout\nfrom ..consumequeue import CQ_DTYPE\n"
                           "from ..filter import MessageSelector\nfrom ..message import SysFlag"),
    ("spark/options.py", "from ..validators import check_topic\nfrom ..errors import ConfigError"),
    ("spark/groupoffsets.py", "from ..offsetfile import commit_group_offsets, read_group_offsets"),
    ("spark/writer.py", "from mqlite.broker import Broker, open as open_broker\n"
                        "from mqlite.inbox import write_chunk, hand_off\n"
                        "from mqlite.validators import validate_message"),
    ("spark/source.py", "from .plan import plan_batch\nfrom . import writer\nfrom mqlite.spark.options import x"),
    ("spark/writer.py", "def f(broker):\n    return broker.append_staged([]), broker.path"),
])
def test_the_spark_rule_allows_the_public_surface(tmp_path: Path, where: str, source: str) -> None:
    files = {name: "" for name in ("reader.py", "consumequeue.py", "message.py", "validators.py", "errors.py",
                                   "offsetfile.py", "broker.py", "inbox.py", "spark/__init__.py", "spark/plan.py",
                                   "spark/writer.py", "spark/options.py", "filter/__init__.py")}
    root = _package(tmp_path, {**files, where: source})
    assert spark_violations(root) == []
