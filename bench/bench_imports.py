"""What `import mqlite` and the pytest plugin cost a process (issue 15): `-X importtime` and wall time.

Each source tree (``name=SRC``, default: this checkout's ``src``) runs every statement in a fresh
interpreter; rounds interleave the trees and statements so a noisy machine hits them alike. Printed
per tree and statement: the median of `-X importtime`'s cumulative microseconds of the top-level
mqlite imports (what mqlite adds to that process), the median wall milliseconds of the whole ``python -c`` (interpreter start included; the
``pass`` row is that floor), and whether numpy was loaded.

    python3 bench/bench_imports.py [--rounds 20] [base=/tmp/base/src head=src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: What each fresh interpreter runs. `import pytest` first: a pytest run has pytest loaded when it loads the plugin.
STATEMENTS = [
    "pass",
    "import pytest",
    "import mqlite",
    "import pytest, mqlite._pytest_plugin",
    "import mqlite; mqlite.Message",
    "import mqlite; mqlite.Producer",
]
PROBE = "\nimport sys; print('numpy' in sys.modules)"


def run_once(python: str, src: str, statement: str) -> tuple[float, int | None, bool]:
    """(wall ms, cumulative us of the top-level mqlite imports or None, numpy loaded) of one fresh interpreter.

    `-X importtime` nests what an import pulls in under it; the top-level rows named mqlite or mqlite.*
    (the package, then a submodule such as the plugin) add up to what mqlite costs that process.
    """
    env = dict(os.environ, PYTHONPATH=src)
    start = time.perf_counter()
    subprocess.run([python, "-c", statement], env=env, check=True)
    wall_ms = (time.perf_counter() - start) * 1000
    out = subprocess.run([python, "-X", "importtime", "-c", statement + PROBE], env=env, check=True,
                         capture_output=True, text=True)
    cumulative = None
    for line in out.stderr.splitlines():  # "import time:  self |  cumulative | name", nested names indented
        fields = line.removeprefix("import time:").split("|")
        top = len(fields) == 3 and fields[2].startswith(" ") and not fields[2].startswith("  ")
        if top and (fields[2].strip() == "mqlite" or fields[2].strip().startswith("mqlite.")):
            cumulative = (cumulative or 0) + int(fields[1])
    return wall_ms, cumulative, out.stdout.strip().endswith("True")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("trees", nargs="*", help="name=SRC (default: head=<this checkout>/src)")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees) or {"head": str(Path(__file__).resolve().parent.parent / "src")}
    walls: dict[tuple[str, str], list[float]] = {}
    cumulatives: dict[tuple[str, str], list[int]] = {}
    numpy: dict[tuple[str, str], bool] = {}
    for _ in range(args.rounds):
        for name, src in trees.items():
            for statement in STATEMENTS:
                wall, cumulative, loaded = run_once(args.python, os.path.abspath(src), statement)
                walls.setdefault((name, statement), []).append(wall)
                if cumulative is not None:
                    cumulatives.setdefault((name, statement), []).append(cumulative)
                numpy[name, statement] = loaded
    print(f"{args.rounds} rounds, {args.python}, medians")
    print("| tree | statement | mqlite importtime cumulative (us) | wall (ms) | numpy loaded |")
    print("|---|---|---:|---:|---|")
    for (name, statement), values in walls.items():
        cum = cumulatives.get((name, statement))
        print(f"| {name} | `{statement}` | {statistics.median(cum) if cum else '-':} | "
              f"{statistics.median(values):.1f} | {numpy[name, statement]} |")


if __name__ == "__main__":
    main()
