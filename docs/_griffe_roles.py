"""A griffe extension for the docs site: the package's docstrings use Sphinx roles
(:class:`Booster`, :mod:`.objective`, :func:`~torchrankboost.metrics.ndcg_at_k`), which
Markdown would show as text. They render as code: the role and a leading ``~`` or ``.`` go,
the name stays (``Booster``, ``objective``, ``ndcg_at_k``)."""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|attr|data|exc|obj|const|ref|doc):"
                   r"`(?:[^`<]*<)?~?\.?([^`>]+)>?`")


def _plain(match: re.Match) -> str:
    name = match.group(1)
    return f"`{name}`"


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring's Sphinx roles as inline code."""

    def on_object(self, *, obj, **kwargs) -> None:  # griffe >= 1.0
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
