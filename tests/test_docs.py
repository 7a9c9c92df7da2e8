"""The docs site (``mkdocs.yml``, ``docs/``): every page in the nav (every page of
``docs/guide/`` by the nav hook, no list to keep), the site built in strict mode (skipped
without MkDocs: ``pip install -e ".[docs]"``), and every code block of the docs and the README
run as a reader would, page by page.

A page's blocks run in order in one fresh folder (so a block may use the files an earlier one
wrote): ```` ```python ```` with this Python, ```` ```bash ```` with ``bash -e`` where
``torchrankboost`` and ``python`` are this Python's (a block of ``torchrankboost`` lines
only: each line as ``torchrankboost.cli.main(argv)`` in one process). A block right after
``<!-- norun: why -->`` is not run (what it needs: a new virtual environment, several
processes, your own files; the reason says which test runs the same instead); after
``<!-- needs-data -->`` it runs only with the real data sets (``TORCHRANKBOOST_DATA``). A
block importing an optional package that is missing skips its page."""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
BLOCK = re.compile(r"(?:<!--\s*(norun|needs-data)\b[^>]*-->\s*\n)?```(python|bash)\n(.*?)```",
                   re.S)
OPTIONAL = ("lightgbm", "xgboost", "onnx", "onnxruntime", "treelite", "shap", "catboost",
            "matplotlib", "pandas", "sklearn", "triton")


def blocks(page: Path):
    """``[(mark, language, code)]`` of a page, in order; mark ``""``, ``norun`` or
    ``needs-data``."""
    return [(m or "", lang, code) for m, lang, code in BLOCK.findall(page.read_text())]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------- the nav
def test_every_guide_page_is_in_the_nav_in_reading_order():
    config = (ROOT / "mkdocs.yml").read_text()
    assert "  - docs/_hooks.py" in config and "  - Guide: []" in config
    nav = _hooks().guide_nav(DOCS)
    pages = [next(iter(e.values())) for e in nav]
    assert sorted(pages) == sorted(f"guide/{p.name}" for p in (DOCS / "guide").glob("*.md"))
    assert pages[:3] == ["guide/install.md", "guide/losses.md", "guide/boosting.md"]
    titles = [next(iter(e)) for e in nav]
    assert "Plots" in titles and all(t and not t.startswith("#") for t in titles)


def test_a_new_guide_page_joins_the_nav_with_its_title(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "zeta.md").write_text("Intro\n\n# Zeta things\n")
    (tmp_path / "guide" / "losses.md").write_text("# Losses\n")
    (tmp_path / "guide" / "alpha.md").write_text("no heading\n")
    assert _hooks().guide_nav(tmp_path) == [{"Losses": "guide/losses.md"},
                                            {"Alpha": "guide/alpha.md"},
                                            {"Zeta things": "guide/zeta.md"}]


def test_every_other_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$|^\s*-\s*([\w/.-]+\.md)\s*$", config, re.M))
    listed = {a or b for a, b in listed}
    others = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")
              if p.parent != DOCS / "guide"}
    assert others <= listed, f"pages missing from mkdocs.yml's nav: {sorted(others - listed)}"


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path):
    """Broken links, anchors and references (mkdocstrings' ``::: name`` included) fail."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs tools: pip install -e '.[docs]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    # no -q: MkDocs counts only the warnings it logs, so a quiet strict build passes them
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                        str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "guide" / "plots" / "index.html").is_file()


# ------------------------------------------------------------------------------- the blocks
def test_runnable_lines_hold_no_placeholders():
    """No ``[--flag]`` in a runnable line; LETOR folds named so that ``TORCHRANKBOOST_DATA``
    finds them (``--data mq2008/Fold1``, not ``data/mq2008/Fold1``)."""
    bad = []
    for page in PAGES:
        for mark, lang, code in blocks(page):
            for line in code.splitlines():
                cmd = line.split("#", 1)[0]
                if lang == "bash" and (re.search(r"\[--", cmd) or "<" in cmd):
                    bad.append(f"{_name(page)}: {line}")
                if re.search(r"--data\s+data/(mq200|mslr|istella)", cmd, re.I):
                    bad.append(f"{_name(page)}: {line}")
    assert not bad, "\n".join(bad)


def test_python_blocks_compile_and_import_real_names():
    import ast

    for page in PAGES:
        for _, lang, code in blocks(page):
            if lang != "python":
                continue
            for node in ast.walk(ast.parse(code, filename=_name(page))):
                if isinstance(node, ast.ImportFrom) and node.module and \
                        node.module.startswith("torchrankboost"):
                    mod = importlib.import_module(node.module)
                    for alias in node.names:
                        assert hasattr(mod, alias.name), f"{_name(page)}: {node.module}." \
                                                         f"{alias.name}"


def _runnable_pages():
    return [p for p in PAGES if any(m != "norun" for m, _, _ in blocks(p))]


def _missing_optional(code: str):
    for name in OPTIONAL:
        if re.search(rf"^\s*(import|from)\s+{name}\b", code, re.M) and \
                importlib.util.find_spec(name) is None:
            return name
    return None


def _cli_lines(code: str):
    """The commands of a block made only of ``torchrankboost ...`` lines (run in one Python
    process, as ``main(argv)`` each: the same command without a start per line), else
    ``None``."""
    import shlex

    joined = code.replace("\\\n", " ")  # a line continued by a backslash
    lines = [shlex.split(l, comments=True) for l in joined.splitlines()]
    lines = [l for l in lines if l]
    return lines if lines and all(l[0] == "torchrankboost" for l in lines) else None


def _command(lang: str, code: str):
    if lang == "python":
        return [sys.executable, "-c", code]
    cli = _cli_lines(code)
    if cli is None:
        return ["bash", "-c", _bash_script(code)]
    runner = ("import sys\nfrom torchrankboost.cli import main\n"
              f"for argv in {[l[1:] for l in cli]!r}:\n"
              "    print('$ torchrankboost', *argv, flush=True)\n"
              "    rc = main(argv)\n"
              "    if rc: sys.exit(rc)\n")
    return [sys.executable, "-c", runner]


def _bash_script(code: str) -> str:
    py = sys.executable
    return (f'set -euo pipefail\ntorchrankboost() {{ "{py}" -m torchrankboost "$@"; }}\n'
            f'python() {{ "{py}" "$@"; }}\n{code}')


@pytest.mark.slow
@pytest.mark.parametrize("page", _runnable_pages(), ids=_name)
def test_the_code_blocks_of_a_page_run(page, tmp_path):
    """A page's blocks, in order, in one folder, as a reader on a fresh install would."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    from torchrankboost.data.sources import dataset_path

    has_data = dataset_path("mq2008", "Fold1").is_dir()  # the LETOR folds the pages use
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")
    for i, (mark, lang, code) in enumerate(blocks(page)):
        if mark == "norun" or (mark == "needs-data" and not has_data):
            continue
        missing = _missing_optional(code) if lang == "python" else None
        if missing:
            pytest.skip(f"{_name(page)} block {i} needs {missing}")
        r = subprocess.run(_command(lang, code), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"{_name(page)} block {i} ({lang}) failed:\n{code}\n" \
                                  f"{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
