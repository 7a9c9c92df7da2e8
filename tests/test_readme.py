"""The README's test command is exactly what CI runs, its Python examples run, and they import
names that exist."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci_lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines()]
    cmd = [l for l in ci_lines if "pytest" in l]
    assert len(cmd) == 1, "CI must run exactly one test command"
    assert cmd[0] in readme, "README.md must show the exact command .ci/run runs"


def _python_blocks():
    import re

    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_python_examples():
    assert len(_python_blocks()) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_example_runs(index, tmp_path):
    """Every Python snippet of the README runs as is on a fresh install (built-in data)."""
    code = _python_blocks()[index]
    for peer in ("lightgbm", "xgboost", "sklearn"):
        if f"import {peer}" in code or f"from {peer}" in code:
            pytest.importorskip(peer)
    env = {k: v for k, v in os.environ.items() if k != "TORCHRANKBOOST_DATA"}
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"README example {index} failed:\n{code}\n{r.stderr[-2000:]}"


def test_readme_snippets_compile_and_import_real_names():
    """Every Python snippet of the README compiles and imports names that exist (the
    snippets themselves were run by hand; they take minutes together)."""
    import ast
    import importlib

    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    for b in blocks:
        tree = ast.parse(b)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("torchrankboost"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(mod, alias.name), f"{node.module}.{alias.name}"
