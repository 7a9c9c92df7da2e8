"""The README's test command is exactly what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci_lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines()]
    cmd = [l for l in ci_lines if "pytest" in l]
    assert len(cmd) == 1, "CI must run exactly one test command"
    assert cmd[0] in readme, "README.md must show the exact command .ci/run runs"
