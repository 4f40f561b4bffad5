"""The README's code, the code of docs/guide.md and docs/migration.md, and every file in examples/ run as tests.

Each example runs as a script (`python examples/X.py STORE`), as a user would run it. The
examples that start Spark run one after another in a single Python process (`_run_scripts`
below, each as `__main__` with its own argv), so they share one JVM: a JVM start costs
5-15 s on two cores, more than the examples themselves. Each still gets its own test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
README_BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
DOC_PAGES = ["docs/guide.md", "docs/migration.md"]


def _uses_spark(path: Path) -> bool:
    return re.search(r"^\s*(from|import) pyspark", path.read_text(), flags=re.M) is not None


SCRIPTS = sorted(EXAMPLES.glob("*.py"))
SPARK_SCRIPTS = [p.name for p in SCRIPTS if _uses_spark(p)]
PLAIN_SCRIPTS = [p.name for p in SCRIPTS if not _uses_spark(p)]

# `python -c _RUN_SCRIPTS RESULTS SCRIPT STORE [SCRIPT STORE ...]` runs each script as `__main__` with
# argv [script, store], in this one process, and writes to RESULTS one JSON document: per script its
# stdout, exit status and traceback (a file, because the JVM also writes to this process's stdout).
_RUN_SCRIPTS = r"""
import contextlib, io, json, runpy, sys, traceback
results, path = {}, sys.argv[1]
for script, store in zip(sys.argv[2::2], sys.argv[3::2]):
    out, status, error = io.StringIO(), 0, ""
    sys.argv = [script, store]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        error = "" if status == 0 else f"SystemExit: {exc.code}"
    except BaseException:
        status, error = 1, traceback.format_exc()
    results[script] = {"stdout": out.getvalue(), "status": status, "error": error}
with open(path, "w") as f:
    json.dump(results, f)
"""


@pytest.mark.parametrize("index", range(len(README_BLOCKS)))
def test_readme_code_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the snippets use relative store paths such as ./mq
    code = "\n".join(line[2:] if line.startswith("  ") else line for line in README_BLOCKS[index].splitlines())
    exec(compile(code, f"README block {index}", "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("page", DOC_PAGES)
def test_doc_code_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's `python` blocks run in order as one script (`py` blocks are fragments, not run)."""
    import mqlite

    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)
    namespace: dict[str, Any] = {"__name__": "__doc__"}
    try:
        for index, block in enumerate(blocks):
            exec(compile(block, f"{page} block {index}", "exec"), namespace)
    finally:  # a failed block must not leave a broker's threads running
        for value in list(namespace.values()):
            if isinstance(value, mqlite.Broker):
                value.close()


@pytest.mark.parametrize("script", PLAIN_SCRIPTS)
def test_example_runs(script: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / script), str(tmp_path / "store")],
                            capture_output=True, text=True, timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), "an example says what it did"


@pytest.fixture(scope="module")
def spark_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every Spark example, run once in one process; their results by script name."""
    tmp = tmp_path_factory.mktemp("spark-examples")
    argv = [str(tmp / "results.json")]
    for name in SPARK_SCRIPTS:
        argv += [str(EXAMPLES / name), str(tmp / Path(name).stem / "store")]
    result = subprocess.run([sys.executable, "-c", _RUN_SCRIPTS, *argv], capture_output=True, text=True,
                            timeout=600, env={**os.environ}, cwd=tmp)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads((tmp / "results.json").read_text())
    return {Path(script).name: run for script, run in runs.items()}


@pytest.mark.parametrize("script", SPARK_SCRIPTS)
def test_spark_example_runs(script: str, spark_runs: dict[str, Any]) -> None:
    run = spark_runs[script]
    assert run["status"] == 0, run["error"][-3000:]
    assert run["stdout"].strip(), "an example says what it did"


def test_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    commands = re.findall(r"^    ((?:apt-get .* && )?python3 -m venv .*)$", text, flags=re.M)[:2]
    assert commands and "examples/demo.py" in commands[0] and "pytest" in commands[1]
    # The test command sets up what the browser tests drive: Debian's chromium and its driver.
    assert commands[1].startswith("apt-get update -q && apt-get install -y -q chromium chromium-driver && ")
    assert (ROOT / ".ci" / "run").read_text().strip().endswith(commands[1])
