"""MkDocs hook: the nav's ``Guide`` section is every page of ``docs/guide/``.

A new guide page needs no edit of ``mkdocs.yml``: the pages named in :data:`GUIDE_ORDER` come
first in that order, every other page of the folder follows in alphabetical order, each titled
by its first ``# `` heading. ``guide_nav`` is plain Python (the tests call it without MkDocs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

#: the guide pages a reader meets first, in reading order (file stems); the rest alphabetical
GUIDE_ORDER = ("install", "losses", "boosting", "papers", "estimator", "cli", "tensorboard",
               "plots", "export", "peers", "clicks", "big-data", "parallel", "gpu", "layout")
#: the nav entry the hook fills
SECTION = "Guide"


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.replace("-", " ").capitalize()


def guide_nav(docs_dir) -> List[Dict[str, str]]:
    """``[{title: "guide/<page>.md"}, ...]``: every page of ``<docs_dir>/guide``."""
    pages = sorted(Path(docs_dir, "guide").glob("*.md"))
    rank = {stem: i for i, stem in enumerate(GUIDE_ORDER)}
    pages.sort(key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    return [{_title(p): f"guide/{p.name}"} for p in pages]


def on_config(config, **kwargs):
    """Fill the ``Guide`` entry of the nav (``- Guide: []`` in ``mkdocs.yml``)."""
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = guide_nav(config["docs_dir"])
            return config
    raise ValueError(f"mkdocs.yml: the nav has no '{SECTION}' entry for docs/guide/")
