"""The README's code and every file in examples/ run as tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(README_BLOCKS)))
def test_readme_code_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the snippets use relative store paths such as ./mq
    code = "\n".join(line[2:] if line.startswith("  ") else line for line in README_BLOCKS[index].splitlines())
    exec(compile(code, f"README block {index}", "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_example_runs(script: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), str(tmp_path / "store")],
                            capture_output=True, text=True, timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), "an example says what it did"


def test_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    commands = re.findall(r"^    (python3 -m venv .*)$", text, flags=re.M)[:2]
    assert commands and "examples/demo.py" in commands[0] and "pytest" in commands[1]
    assert (ROOT / ".ci" / "run").read_text().strip().endswith(commands[1])
