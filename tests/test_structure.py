"""Structure guards: the package's layout rules, checked on its source with ``ast``.

Nothing here imports ``torchrankboost``; every check parses the files under
``torchrankboost/`` and reports *all* offenders at once (file, line numbers, sizes).

Rules
-----
* **file size**: no ``.py`` file in the package over ``MAX_FILE_LINES`` lines.
* **import cycles**: the graph *module -> package modules it imports* has no cycle. Imports
  inside functions (lazy imports) count; imports under ``if TYPE_CHECKING:`` do not.
  ``pkg/__init__.py`` is the module ``pkg``. Edges, for an importing module ``m``:

  - ``import a.b.c`` / ``from a.b.c import name`` -> ``a.b.c`` and every package above it that
    is not ``m`` itself or a package containing ``m`` (Python runs those ``__init__`` files);
  - ``from a.b import name`` where ``a.b.name`` is a submodule -> ``a.b.name`` (and ``a.b``
    unless it contains ``m``); where ``name`` is not a submodule -> ``a.b`` itself, even
    when ``a.b`` contains ``m``: importing a name from one's own package ``__init__`` is
    the classic cycle (``pkg/__init__`` imports the submodule that imports ``pkg``);
  - relative imports are resolved against ``m``'s package; ``importlib.import_module`` with
    a constant absolute name counts as ``import name``.

  Every strongly connected component is reported, with one shortest cycle through each of
  its modules (the import's line number beside each step).
* **torch.distributed** (``import torch.distributed``, ``from torch import distributed``,
  ``from torch.distributed... import``, ``torch.distributed`` attribute use, or a string that
  names it such as ``"torch.distributed.run"`` for a launcher) only under
  ``torchrankboost/parallel/``.
* **no "is it distributed" tests outside parallel/**: no ``.enabled`` attribute (nor
  ``getattr(x, "enabled")``) read on a context or communicator -- a receiver whose last name
  contains ``ctx``, ``comm``, ``context`` or ``dist`` (``ctx.enabled``, ``self._comm.enabled``,
  ``run.comm.enabled``) -- outside ``torchrankboost/parallel/``.
* **function size in the new rooms** (``NEW_ROOMS``, those that exist): no function or method
  longer than ``MAX_FUNCTION_LINES`` lines, counted from its first body statement after the
  docstring to its last line (signature, decorators and docstring excluded; nested functions
  count within the enclosing one and on their own).
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG_DIR = ROOT / "torchrankboost"
PKG = PKG_DIR.name
PARALLEL_DIR = PKG_DIR / "parallel"

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 60
NEW_ROOMS = ["parallel", "data", "boosting/learners", "kernels",
             "boosting/papers/coordinate.py", "cli/training.py"]

_DIST_RECEIVER = re.compile(r"ctx|comm|context|dist", re.IGNORECASE)
_DIST_STRING = re.compile(r"^torch\.distributed(\.\w+)*$")


# --- reading the package -------------------------------------------------------------------

def _files(pkg_dir: Path = PKG_DIR) -> list[Path]:
    return sorted(p for p in pkg_dir.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


_TREES: dict[Path, ast.Module] = {}


def _tree(path: Path) -> ast.Module:
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return _TREES[path]


def _modules(pkg_dir: Path = PKG_DIR) -> dict[str, Path]:
    return {_module_name(p, pkg_dir.parent): p for p in _files(pkg_dir)}


def _under_parallel(path: Path) -> bool:
    return PARALLEL_DIR in path.parents


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those in the body of an ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


# --- import graph --------------------------------------------------------------------------

def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve_from(node: ast.ImportFrom, module: str, path: Path) -> str:
    if node.level == 0:
        return node.module or ""
    base = _package_of(module, path).split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _contains(pkg: str, module: str) -> bool:
    """``pkg`` is ``module`` or a package above it."""
    return module == pkg or module.startswith(pkg + ".")


def _with_parents(target: str, module: str, known: dict[str, Path]) -> list[str]:
    """``target`` and the packages above it that Python runs on the way (not ``module``'s own)."""
    out, parts = [], target.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name in known and name != module and not _contains(name, module):
            out.append(name)
    if target in known and target not in out and target != module:
        out.append(target)
    return out


def _imports_of(module: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """Package modules imported by ``module``: name -> line of the first such import."""
    found: dict[str, int] = {}

    def add(names, line):
        for name in names:
            found.setdefault(name, line)

    for node in _runtime_nodes(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_with_parents(alias.name, module, known), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(node, module, path)
            if not _contains(module.partition(".")[0], base):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    add(_with_parents(sub, module, known), node.lineno)
                else:
                    add(_with_parents(base, module, known), node.lineno)
                    if base in known and base != module:  # a name from one's own package
                        add([base], node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            add(_with_parents(node.args[0].value, module, known), node.lineno)
    return found


def import_graph(pkg_dir: Path = PKG_DIR) -> dict[str, dict[str, int]]:
    """module -> {imported package module: line of the import} over the whole package."""
    known = _modules(pkg_dir)
    return {m: _imports_of(m, p, known) for m, p in known.items()}


def _strong_components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def _shortest_cycle(graph, start: str, members: set[str]) -> list[str]:
    """Shortest path start -> ... -> start inside ``members`` (breadth first)."""
    prev = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return []


def import_cycles(graph=None) -> list[list[str]]:
    """Distinct cycles: one shortest cycle through each module of each component."""
    graph = import_graph() if graph is None else graph
    seen, cycles = set(), []
    for comp in _strong_components(graph):
        if len(comp) == 1:
            continue
        members = set(comp)
        for start in comp:
            cyc = _shortest_cycle(graph, start, members)
            body = cyc[:-1]
            k = body.index(min(body))
            key = tuple(body[k:] + body[:k])
            if key not in seen:
                seen.add(key)
                cycles.append(list(key) + [key[0]])
    return cycles


def _describe_cycle(graph, cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(steps + [cycle[-1]])


# --- the checks ----------------------------------------------------------------------------

def test_no_file_over_max_lines():
    too_long = []
    for path in _files():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            too_long.append(f"{_rel(path)}: {n} lines")
    if too_long:
        pytest.fail(f"{len(too_long)} file(s) over {MAX_FILE_LINES} lines:\n  "
                    + "\n  ".join(too_long), pytrace=False)


def test_no_import_cycles():
    graph = import_graph()
    comps = [c for c in _strong_components(graph) if len(c) > 1]
    cycles = import_cycles(graph)
    msg = [f"{len(comps)} group(s) of modules import each other (lazy imports included):"]
    for comp in comps:
        msg.append(f"  group of {len(comp)}: {', '.join(comp)}")
        for cyc in cycles:
            if cyc[0] in comp:
                msg.append(f"    {_describe_cycle(graph, cyc)}")
    if comps:
        pytest.fail("\n".join(msg), pytrace=False)


def _torch_aliases(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    names.add(alias.asname or "torch")
    return names


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                ids.add(id(body[0].value))
    return ids


def _distributed_uses(tree: ast.AST) -> list[tuple[int, str]]:
    torch_names = _torch_aliases(tree) | {"torch"}
    docstrings = _docstring_nodes(tree)
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            uses += [(node.lineno, f"import {a.name}") for a in node.names
                     if _contains("torch.distributed", a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _contains("torch.distributed", node.module):
                uses.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "torch" and any(a.name == "distributed" for a in node.names):
                uses.append((node.lineno, "from torch import distributed"))
        elif (isinstance(node, ast.Attribute) and node.attr == "distributed"
              and isinstance(node.value, ast.Name) and node.value.id in torch_names):
            uses.append((node.lineno, f"{node.value.id}.distributed"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and _DIST_STRING.match(node.value)):
            uses.append((node.lineno, repr(node.value)))
    return sorted(set(uses))


def test_torch_distributed_only_in_parallel():
    bad = []
    for path in _files():
        if _under_parallel(path):
            continue
        bad += [f"{_rel(path)}:{line}: {what}" for line, what in _distributed_uses(_tree(path))]
    if bad:
        pytest.fail("torch.distributed used outside torchrankboost/parallel/ "
                    f"({len(bad)} place(s)):\n  " + "\n  ".join(bad), pytrace=False)


def _receiver_name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""


def _enabled_tests(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "enabled"
                and isinstance(node.ctx, ast.Load)
                and _DIST_RECEIVER.search(_receiver_name(node.value))):
            found.append((node.lineno, f"{ast.unparse(node)}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "getattr" and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and node.args[1].value == "enabled"
              and _DIST_RECEIVER.search(_receiver_name(node.args[0]))):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(set(found))


def test_no_enabled_tests_outside_parallel():
    bad = []
    for path in _files():
        if _under_parallel(path):
            continue
        bad += [f"{_rel(path)}:{line}: {what}" for line, what in _enabled_tests(_tree(path))]
    if bad:
        pytest.fail("'is this distributed' tests (.enabled on a context/communicator) outside "
                    f"torchrankboost/parallel/ ({len(bad)} place(s)); call the context's "
                    "collectives unconditionally instead:\n  " + "\n  ".join(bad),
                    pytrace=False)


def function_lengths(tree: ast.AST):
    """(qualified name, first line, body lines without the docstring) for every function."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body
                if (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                        and isinstance(body[0].value.value, str)):
                    body = body[1:]
                n = child.end_lineno - body[0].lineno + 1 if body else 0
                out.append((prefix + child.name, child.lineno, n))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _room_files() -> list[Path]:
    files = []
    for room in NEW_ROOMS:
        p = PKG_DIR / room
        if p.is_dir():
            files += sorted(q for q in p.rglob("*.py") if "__pycache__" not in q.parts)
        elif p.is_file():
            files.append(p)
    return files


def test_no_long_functions_in_new_rooms():
    bad = []
    for path in _room_files():
        bad += [f"{_rel(path)}:{line}: {name} has {n} lines"
                for name, line, n in function_lengths(_tree(path)) if n > MAX_FUNCTION_LINES]
    if bad:
        pytest.fail(f"{len(bad)} function(s) over {MAX_FUNCTION_LINES} lines (docstring "
                    f"excluded) in {', '.join(NEW_ROOMS)}:\n  " + "\n  ".join(bad),
                    pytrace=False)


def test_the_checks_see_the_package():
    """Guard the guards: the files are found and the graph has the package's edges."""
    graph = import_graph()
    assert f"{PKG}" in graph and len(graph) > 10
    assert any(graph.values()), "no import edges found: the resolver is broken"


def test_the_cycle_finder_on_a_small_package(tmp_path):
    """The resolver's rules on a made-up package ``p`` (the classic trap among them)."""
    files = {
        "p/__init__.py": "from .a import f\nfrom .sub import thing\n",
        "p/a.py": "from . import b\ndef f():\n    from . import g  # a name of p/__init__\n",
        "p/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
                  "else:\n    import p.c\n",
        "p/c.py": "import os\n",
        "p/sub/__init__.py": "thing = 1\n",
        "p/sub/x.py": "from ..sub import thing\nfrom .. import c\nfrom ..sub import y\n",
        "p/sub/y.py": "from ..a import f\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path / "p")
    assert graph["p"] == {"p.a": 1, "p.sub": 2}
    assert graph["p.a"] == {"p.b": 1, "p": 3}           # the lazy import counts
    assert graph["p.b"] == {"p.c": 5}                   # TYPE_CHECKING does not
    assert graph["p.sub.x"] == {"p.sub": 1, "p.c": 2, "p.sub.y": 3}
    assert graph["p.sub.y"] == {"p.a": 1}
    assert import_cycles(graph) == [["p", "p.a", "p"]]
    assert _describe_cycle(graph, ["p", "p.a", "p"]) == "p (line 1) -> p.a (line 3) -> p"
