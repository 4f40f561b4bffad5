"""What `import mqlite` costs: the package and the pytest plugin import no numpy until a name needs it.

Every pytest run of a project that installs mqlite loads the plugin, and `import mqlite` happens in
processes that never open a store; so both import the store (and numpy) only on first use of a name
that needs it (PEP 562 `__getattr__` in mqlite/__init__.py). Each check runs in a fresh interpreter:
this one imported everything long ago. Costs are measured in bench/bench_imports.py, not here.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mqlite
from support import SMALL_STORE, broker_fixture, no_leftover_threads  # noqa: F401 - autouse

SRC = Path(mqlite.__file__).resolve().parent.parent

broker = broker_fixture()


def fresh(code: str) -> str:
    """stdout of `code` run by a fresh interpreter on this checkout's mqlite."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


LOADED = "\nimport sys; print(sorted(m for m in ('numpy', 'asyncio', 'sortedcontainers') if m in sys.modules))"


@pytest.mark.parametrize("statement", ["import mqlite", "import mqlite._pytest_plugin",
                                       "import mqlite; mqlite.__version__; dir(mqlite)"])
def test_importing_the_package_or_the_pytest_plugin_imports_no_numpy(statement: str) -> None:
    assert fresh(statement + LOADED).strip() == "[]"


def test_messages_and_errors_need_no_numpy() -> None:
    code = ("import mqlite\nmsg = mqlite.Message('T', b'x', keys=['k'])\nmqlite.MessageQueue('T', 'b', 0)\n"
            "mqlite.StoreConfig(); mqlite.MQLiteError; mqlite.rebalance" + LOADED)
    assert fresh(code).strip() == "[]"


def test_a_name_imports_its_module_once_and_is_then_a_plain_attribute() -> None:
    code = ("import mqlite\nassert 'Producer' not in vars(mqlite)\nfrom mqlite.producer import Producer\n"
            "assert mqlite.Producer is Producer and vars(mqlite)['Producer'] is Producer\n"
            "assert set(mqlite.__all__) <= set(dir(mqlite))\nprint('numpy' in __import__('sys').modules)")
    assert fresh(code).strip() == "True"


def test_a_submodule_name_imports_the_submodule() -> None:
    # `mqlite.errors.X` after a plain `import mqlite` works whatever ran before (eager imports bound every
    # submodule once); the errors need no numpy, a subpackage is found as well.
    code = ("import mqlite, sys\nassert mqlite.errors.MQLiteError is mqlite.MQLiteError\n"
            "print('numpy' in sys.modules)\nassert mqlite.metrics.collect\n"
            "assert mqlite.dashboard.__name__ == 'mqlite.dashboard'")
    assert fresh(code).strip() == "False"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        mqlite.Nope  # noqa: B018
    assert not hasattr(mqlite, "Nope")


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """`{name: (module, attribute)}` of the `if TYPE_CHECKING:` block of mqlite/__init__.py."""
    tree = ast.parse(Path(mqlite.__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    found = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            found[alias.asname or alias.name] = (node.module or alias.name, alias.name if node.module else "")
    return found


def test_what_the_type_checker_sees_is_what_the_package_imports() -> None:
    # mypy reads the TYPE_CHECKING imports, the interpreter the `_LAZY` table: the same names from the same places.
    table = {**mqlite._LAZY, "rebalance": ("rebalance", "")}
    assert _type_checking_imports() == table
    assert set(table) == set(mqlite.__all__)


def test_serve_works_in_a_process_that_imported_only_the_broker_module(tmp_path: Path) -> None:
    # `import mqlite` wires Broker.serve to mqlite.remoting without importing the broker: the broker
    # takes the factory when it is imported, by whatever name.
    code = (f"from mqlite.broker import open\nwith open({str(tmp_path / 'mq')!r}, **{SMALL_STORE!r}) as b:\n"
            "    s = b.serve('127.0.0.1:0')\n    print(type(s).__name__)\n    s.close()")
    assert fresh(code).strip() == "Server"


def test_a_client_given_a_held_path_reaches_the_holder_from_a_process_that_imported_only_the_producer(
        broker: mqlite.Broker) -> None:
    server = broker.serve("127.0.0.1:0")
    try:
        code = ("from mqlite.message import Message\nfrom mqlite.producer import Producer\n"
                f"p = Producer({broker.path!r}, 'pg')\np.start()\n"
                "print(p.send(Message('Imported', b'from-the-child')).msg_id)\np.shutdown()")
        msg_id = fresh(code).strip()
    finally:
        server.close()
    assert broker.view_message(msg_id).body == b"from-the-child"
