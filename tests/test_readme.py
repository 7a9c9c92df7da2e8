"""The README: a page, not a manual (the manual is the docs site, ``tests/test_docs.py`` runs
its code blocks and the README's); its test command is exactly what CI runs; its two commands
are the ones a new user needs; its links lead to pages that exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 200


def test_the_readme_is_a_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; the manual is docs/"


def test_ci_runs_the_readme_test_command():
    readme = README.read_text()
    ci_lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines()]
    cmd = [l for l in ci_lines if "pytest" in l]
    assert len(cmd) == 1, "CI must run exactly one test command"
    assert cmd[0] in readme, "README.md must show the exact command .ci/run runs"


def test_the_two_commands_set_up_and_run():
    readme = README.read_text()
    setup = "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && "
    commands = [l for l in readme.splitlines() if l.startswith(setup)]
    assert len(commands) == 2, commands
    assert commands[0].endswith("pip install -e . && torchrankboost train")
    assert commands[1].endswith("&& python -m pytest -n 2")


def test_three_examples_and_the_link_to_the_docs():
    readme = README.read_text()
    blocks = re.findall(r"```(python|bash)\n(.*?)```", readme, re.S)
    examples = [code for lang, code in blocks if "pip install" not in code]
    assert len(examples) == 3
    assert "PNormPushLoss" in examples[0] and "torchrankboost train" in examples[1] \
        and "BoostedRanker" in examples[2]
    assert "mkdocs serve" in readme


def test_every_relative_link_leads_to_a_file_and_its_anchor():
    readme = README.read_text()
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#([^)]+))?\)", readme)
    assert links
    for path, anchor in links:
        target = ROOT / path
        assert target.is_file(), path
        if anchor:
            headings = [re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                        for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)]
            assert anchor in headings, f"{path}#{anchor}"
