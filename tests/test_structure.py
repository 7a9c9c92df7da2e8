"""Structure guards: the package's layout rules, checked on its source with ``ast``.

Nothing here imports ``torchrankboost``; every check parses the files under
``torchrankboost/`` and reports *all* offenders at once (file, line numbers, sizes).

Rules
-----
* **file size**: no ``.py`` file in the package over ``MAX_FILE_LINES`` lines.
* **import cycles**: the graph *module -> package modules it imports* has no cycle. Imports
  inside functions (lazy imports) and imports under ``if TYPE_CHECKING:`` count (a type-only
  circle is a circle of concerns: move the shared type or use a Protocol).
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
* **function size in the rooms** (``NEW_ROOMS``, those that exist): no function or method
  longer than ``MAX_FUNCTION_LINES`` lines, counted from its first body statement after the
  docstring to its last line (signature, decorators and docstring excluded; nested functions
  count within the enclosing one and on their own).
* **the round loop stays small**: ``boosting/booster.py`` at most ``MAX_BOOSTER_LINES`` lines.
* **Booster's privates are its own**: the private names ``Booster`` defines (``def _x``,
  ``self._x = ...``, class attributes ``_x``) are not read or written (``<expr>._x``,
  ``getattr(x, "_x")``) by any other module, except on ``self``/``cls`` inside a class that
  defines ``_x`` itself.
* **one place asks what a loss can do**: the optional hooks ``LossCapabilities`` looks up
  (``grad_hess``, ``bind``, ``bind_position``, ``preferred_step``, ``reduction``,
  ``round_diagnostics``, ``resample``, ``position_update``; with ``value_grad_hess`` and
  ``per_query``) are asked with ``getattr``/``hasattr`` only in ``boosting/objective.py`` (and
  the files of ``HOOK_LOOKUPS_ALLOWED``, each with its reason).
* **layers** (``LAYERS``): ``data/`` imports nothing from ``boosting/``; ``kernels/`` nothing
  from ``boosting/``, ``data/``, ``cli/`` (type-only imports count).
* **one kernel seam**: outside ``torchrankboost/kernels/`` nothing imports
  ``kernels.native_backend`` or names ``trees.c`` (docstrings aside).
* **a small package root**: at most ``MAX_ROOT_MODULES`` ``.py`` files in ``torchrankboost/``.
* **no private name used across files**: no ``from m import _x`` and no ``m._x`` where ``m``
  is another module of the package (a private *module*, ``from . import _common``, may be
  imported: the names used from it are public).
* **no silent broad handler**: no ``except Exception: pass`` (nor bare ``except: pass``).
* **no deprecation layer**: no ``DeprecationWarning`` / ``PendingDeprecationWarning`` /
  ``FutureWarning`` named in the package, no ``_LEGACY_*`` / ``_old_*`` / ``*_deprecated``
  names defined.
* **tests mirror the package**: every ``tests/<room>/test_<m>.py`` tests
  ``torchrankboost/<room>/<m>.py`` (or ``_<m>.py``, or a package ``<m>/__init__.py``; the
  room's own ``__init__.py`` when ``m`` is the room's name), ``tests/package/test_<m>.py`` a
  top-level module, ``tests/scripts/test_<s>.py`` ``scripts/<s>.py``; at ``tests/`` root only
  the files of ``TEST_ROOT_ALLOWED`` are tests, and at most ``MAX_TEST_ROOT_FILES`` ``.py``
  files (conftest and shared helpers included). Basenames repeat across folders (importlib
  mode).
* **typed public signatures**: every function and class a package ``__init__.py`` (the
  package's, a room's) imports from its modules has annotations on each parameter and on
  its return (``__init__`` aside), on each public method and ``__init__`` of such a class.
* **mypy passes** on the package at the level ``[tool.mypy]`` in ``pyproject.toml`` states
  (skipped where mypy is not installed: the test extra installs it). mypy runs as a
  subprocess on the files; nothing is imported.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG_DIR = ROOT / "torchrankboost"
PKG = PKG_DIR.name
PARALLEL_DIR = PKG_DIR / "parallel"

TESTS_DIR = ROOT / "tests"
SCRIPTS_DIR = ROOT / "scripts"

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 60
MAX_BOOSTER_LINES = 650
MAX_ROOT_MODULES = 15
MAX_TEST_ROOT_FILES = 7  # conftest, three shared helpers, the readme, docs and structure checks
NEW_ROOMS = ["boosting", "kernels", "cli", "estimator", "tensorboard", "clicks", "parallel",
             "data"]
# room -> the rooms it must not import (it sits below them)
LAYERS = {"data": ["boosting"], "kernels": ["boosting", "data", "cli"]}
# files besides boosting/objective.py that may look a loss's hook up with getattr/hasattr
HOOK_LOOKUPS_ALLOWED = {
    # is_per_query: the definition of the per_query declaration, read by the autograd
    # curvature of this file and by LossCapabilities.of (objective.py imports curvature.py)
    "boosting/curvature.py",
}
# what LossCapabilities reads that is not a hook: the bound form's wrapped loss
NOT_HOOKS = {"loss"}
# hooks a loss may have that LossCapabilities does not look up itself: the fused call of the
# bound form, and the per-query declaration (read through curvature.is_per_query)
EXTRA_HOOKS = {"value_grad_hess", "per_query"}
# test files at tests/ root: cross-cutting checks of the whole repository
TEST_ROOT_ALLOWED = {"test_docs.py", "test_readme.py", "test_structure.py"}

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

    for node in ast.walk(_tree(path)):
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
    msg = [f"{len(comps)} group(s) of modules import each other (lazy and type-only "
           "imports included):"]
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


# --- layers, sizes and seams ---------------------------------------------------------------

def _in_room(module: str, room: str) -> bool:
    return _contains(f"{PKG}.{room.replace('/', '.')}", module)


def test_booster_under_its_size():
    n = len((PKG_DIR / "boosting" / "booster.py").read_text(encoding="utf-8").splitlines())
    assert n <= MAX_BOOSTER_LINES, (
        f"torchrankboost/boosting/booster.py has {n} lines (at most {MAX_BOOSTER_LINES}): "
        "the round loop only; what it asks of the loss is the objective's, the step the "
        "step rules'")


def test_few_modules_at_the_package_root():
    root = sorted(p.name for p in PKG_DIR.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, (
        f"{len(root)} .py files at the package root (at most {MAX_ROOT_MODULES}); give new "
        f"code a room: {', '.join(root)}")


def test_layers():
    """``LAYERS``: a room imports nothing from the rooms above it (type-only imports count)."""
    graph = import_graph()
    bad = []
    for module, targets in sorted(graph.items()):
        for room, above in LAYERS.items():
            if not _in_room(module, room):
                continue
            bad += [f"{_rel(_modules()[module])}:{line}: imports {target} ({room}/ sits below "
                    f"{up}/)" for target, line in sorted(targets.items(), key=lambda x: x[1])
                    for up in above if _in_room(target, up)]
    if bad:
        pytest.fail(f"{len(bad)} import(s) against the layers:\n  " + "\n  ".join(bad),
                    pytrace=False)


def _strings(tree: ast.AST):
    docstrings = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield node


def test_compiled_tree_library_only_in_kernels():
    """The tree backend seam: only ``kernels/`` imports ``native_backend`` or names
    ``trees.c``, so a new backend is one file there plus one line in the chooser."""
    graph, modules = import_graph(), _modules()
    native = f"{PKG}.kernels.native_backend"
    bad = []
    for module, targets in sorted(graph.items()):
        if _in_room(module, "kernels"):
            continue
        path = modules[module]
        if native in targets:
            bad.append(f"{_rel(path)}:{targets[native]}: imports {native}")
        bad += [f"{_rel(path)}:{node.lineno}: names {node.value!r}"
                for node in _strings(_tree(path)) if "trees.c" in node.value]
    if bad:
        pytest.fail("the compiled tree library reached outside torchrankboost/kernels/ "
                    f"({len(bad)} place(s)):\n  " + "\n  ".join(bad), pytrace=False)


# --- private names -------------------------------------------------------------------------

def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_aliases(tree: ast.AST, module: str, path: Path, known, pkg: str) -> dict[str, str]:
    """Local names bound to package modules (``import a.b as x``, ``from a import b``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases[a.name.partition(".")[0]] = a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(node, module, path)
            for a in node.names:
                if f"{base}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
    return {k: v for k, v in aliases.items() if _contains(pkg, v)}


def _attribute_chain(node: ast.Attribute) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id] + parts[::-1] if isinstance(node, ast.Name) else []


def private_imports(module: str, path: Path, known, pkg: str = PKG) -> list[tuple[int, str]]:
    """``from m import _x`` and ``m._x`` where ``m`` is another package module and ``m._x``
    is not itself a module (a private *module* may be imported; its public names used)."""
    tree, found = _tree(path), []
    aliases = _module_aliases(tree, module, path, known, pkg)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve_from(node, module, path)
            if not _contains(pkg, base) or base == module:
                continue
            found += [(node.lineno, f"from {base} import {a.name}") for a in node.names
                      if _is_private(a.name) and f"{base}.{a.name}" not in known]
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Load, ast.Store)):
            chain = _attribute_chain(node)
            if not chain or chain[0] not in aliases:
                continue
            mod = aliases[chain[0]]
            for part in chain[1:]:
                if f"{mod}.{part}" in known:
                    mod = f"{mod}.{part}"
                    continue
                if _is_private(part) and mod != module and part == node.attr:
                    found.append((node.lineno, f"{mod}.{part}"))
                break
    return sorted(set(found))


def test_no_private_name_used_across_files():
    known, bad = _modules(), []
    for module, path in sorted(known.items()):
        bad += [f"{_rel(path)}:{line}: {what}"
                for line, what in private_imports(module, path, known)]
    if bad:
        pytest.fail(f"{len(bad)} private name(s) used from another module; give each a public "
                    "name in the module that owns it:\n  " + "\n  ".join(bad), pytrace=False)


def _defined_privates(cls: ast.ClassDef) -> set[str]:
    """Private names a class defines: its methods, class attributes and ``self._x = ...``."""
    names = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for tgt in targets for n in ast.walk(tgt) if isinstance(n, ast.Name)}
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
    return {n for n in names if _is_private(n)}


def _class_of(tree: ast.AST, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _private_uses(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """``<expr>._x`` (and ``getattr(x, "_x")``) for ``_x`` in ``names``, except on
    ``self``/``cls`` inside a class that defines ``_x`` itself."""
    found = []

    def visit(node, own: set[str]):
        for child in ast.iter_child_nodes(node):
            mine = _defined_privates(child) if isinstance(child, ast.ClassDef) else own
            if isinstance(child, ast.Attribute) and child.attr in names:
                on_self = isinstance(child.value, ast.Name) and child.value.id in ("self", "cls")
                if not (on_self and child.attr in own):
                    found.append((child.lineno, ast.unparse(child)))
            elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                  and child.func.id in ("getattr", "setattr", "hasattr", "delattr")
                  and len(child.args) >= 2 and isinstance(child.args[1], ast.Constant)
                  and child.args[1].value in names):
                found.append((child.lineno, ast.unparse(child)))
            visit(child, mine)

    visit(tree, set())
    return sorted(set(found))


def test_no_module_but_booster_touches_booster_privates():
    booster = PKG_DIR / "boosting" / "booster.py"
    names = _defined_privates(_class_of(_tree(booster), "Booster"))
    assert names, "no private names found in Booster: the collector is broken"
    bad = []
    for path in _files():
        if path != booster:
            bad += [f"{_rel(path)}:{line}: {what}"
                    for line, what in _private_uses(_tree(path), names)]
    if bad:
        pytest.fail(f"{len(bad)} use(s) of Booster's private names outside boosting/booster.py "
                    f"(give Booster a public method or attribute):\n  " + "\n  ".join(bad),
                    pytrace=False)


# --- the loss's optional hooks -------------------------------------------------------------

def _hook_names() -> set[str]:
    """The optional hooks ``LossCapabilities`` (``boosting/objective.py``) asks a loss for:
    the names its lookups (``_hook(x, "name")``, ``getattr(x, "name", ...)``) pass, and
    ``EXTRA_HOOKS``."""
    caps = _class_of(_tree(PKG_DIR / "boosting" / "objective.py"), "LossCapabilities")
    names = {node.args[1].value for node in ast.walk(caps)
             if isinstance(node, ast.Call) and len(node.args) >= 2
             and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)}
    return (names - NOT_HOOKS) | EXTRA_HOOKS


def _hook_lookups(tree: ast.AST, hooks: set[str]) -> list[tuple[int, str]]:
    return sorted({(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                   and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                   and isinstance(node.args[1], ast.Constant) and node.args[1].value in hooks})


def test_loss_hooks_asked_only_by_the_objective():
    hooks = _hook_names()
    assert {"grad_hess", "bind", "preferred_step", "resample"} <= hooks, hooks
    allowed = {PKG_DIR / "boosting" / "objective.py"} | {PKG_DIR / p for p in HOOK_LOOKUPS_ALLOWED}
    bad = []
    for path in _files():
        if path not in allowed:
            bad += [f"{_rel(path)}:{line}: {what}"
                    for line, what in _hook_lookups(_tree(path), hooks)]
    if bad:
        pytest.fail(f"{len(bad)} lookup(s) of a loss's optional hooks outside "
                    "boosting/objective.py (use LossCapabilities):\n  " + "\n  ".join(bad),
                    pytrace=False)


# --- failures and deprecation --------------------------------------------------------------

def test_no_broad_exception_handler_swallows_silently():
    """No ``except Exception: pass`` (nor bare ``except:``): what goes wrong is raised or
    announced."""
    bad = []
    for path in _files():
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ExceptHandler):
                continue
            broad = node.type is None or (isinstance(node.type, ast.Name)
                                          and node.type.id in ("Exception", "BaseException"))
            if broad and all(isinstance(b, ast.Pass) for b in node.body):
                bad.append(f"{_rel(path)}:{node.lineno}")
    if bad:
        pytest.fail(f"{len(bad)} broad exception handler(s) that swallow silently:\n  "
                    + "\n  ".join(bad), pytrace=False)


_DEPRECATION_WARNINGS = {"DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"}
_LEGACY_NAME = re.compile(r"(^|_)(legacy|deprecated|old)_|_(legacy|deprecated)$", re.IGNORECASE)


def _defined_names(tree: ast.AST):
    """Functions, classes, and names and attributes assigned at module or class level."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
    for scope in [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for node in scope.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for tgt in targets:
                    for n in ast.walk(tgt):
                        if isinstance(n, ast.Name):
                            yield node.lineno, n.id


def test_no_deprecation_layer():
    """The 0.x package keeps no deprecated path: no deprecation warning raised, no
    ``_LEGACY_*`` / ``_old_*`` names."""
    bad = []
    for path in _files():
        tree = _tree(path)
        bad += [f"{_rel(path)}:{n.lineno}: {n.id}" for n in ast.walk(tree)
                if isinstance(n, ast.Name) and n.id in _DEPRECATION_WARNINGS]
        bad += [f"{_rel(path)}:{line}: {name}" for line, name in _defined_names(tree)
                if _LEGACY_NAME.search(name)]
    if bad:
        pytest.fail(f"{len(bad)} piece(s) of a deprecation layer:\n  " + "\n  ".join(bad),
                    pytrace=False)


# --- typed public signatures, mypy ---------------------------------------------------------

def _exported(init: Path) -> dict[str, Path]:
    """Public name -> the module file it is imported from, for ``from .m import ...`` lines of
    a package ``__init__.py``."""
    out = {}
    module = _module_name(init)
    for node in _tree(init).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            target = _modules().get(_resolve_from(node, module, init))
            for alias in node.names:
                name = alias.asname or alias.name
                if target is not None and not name.startswith("_"):
                    out[name] = target
    return out


def _definition(name: str, path: Path, depth: int = 0):
    """The ``def`` / ``class`` node of ``name`` in ``path``, following re-exports."""
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name == name:
            return node
    if depth < 3:
        again = _exported(path) if path.name == "__init__.py" else {}
        if name in again:
            return _definition(name, again[name], depth + 1)
        for node in _tree(path).body:
            if isinstance(node, ast.ImportFrom) and node.level \
                    and any((a.asname or a.name) == name for a in node.names):
                target = _modules().get(_resolve_from(node, _module_name(path), path))
                if target is not None:
                    return _definition(name, target, depth + 1)
    return None


def _unannotated(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = fn.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    if params and params[0].arg in ("self", "cls"):
        params = params[1:]
    missing = [p.arg for p in params if p.annotation is None]
    missing += [f"*{a.arg}" for a in (args.vararg, args.kwarg) if a is not None
                and a.annotation is None]
    if fn.returns is None and fn.name != "__init__":
        missing.append("return")
    return missing


def test_public_signatures_are_annotated():
    bad, seen = [], set()
    for init in sorted(PKG_DIR.rglob("__init__.py")):
        for name, path in sorted(_exported(init).items()):
            node = _definition(name, path)
            if node is None or (path, name) in seen:
                continue
            seen.add((path, name))
            fns = [node] if not isinstance(node, ast.ClassDef) else [
                m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                and (not m.name.startswith("_") or m.name in ("__init__", "__call__"))]
            for fn in fns:
                missing = _unannotated(fn)
                if missing:
                    where = name if fn is node else f"{name}.{fn.name}"
                    bad.append(f"{_rel(path)}:{fn.lineno} {where}: {', '.join(missing)}")
    assert len(seen) > 100, "the export finder found too few public names"
    if bad:
        pytest.fail(f"{len(bad)} public signature(s) without type hints:\n  "
                    + "\n  ".join(bad), pytrace=False)


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="needs mypy (the test extra)")
def test_mypy_passes_on_the_package():
    """``mypy`` at the level of ``[tool.mypy]`` (pyproject.toml): about 15 s of CPU cold,
    a second or two with its cache (``.mypy_cache/``, ignored by git)."""
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                          str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        pytest.fail(f"mypy failed (rc {out.returncode}):\n{out.stdout[-6000:]}{out.stderr[-2000:]}",
                    pytrace=False)


# --- tests mirror the package --------------------------------------------------------------

def _tested_module(test: Path) -> list[Path]:
    """Where ``tests/<room>/test_<m>.py`` may point: ``torchrankboost/<room>/<m>.py`` (or
    ``_<m>.py``, or a package ``<m>/__init__.py``), the room's own ``__init__.py`` when ``m``
    is the room's name; ``tests/package/``: the package's top-level modules."""
    rel = test.relative_to(TESTS_DIR)
    name = rel.stem[len("test_"):]
    room = PKG_DIR.joinpath(*rel.parts[:-1]) if rel.parts[0] != "package" else PKG_DIR
    options = [room / f"{m}.py" for m in (name, f"_{name}")]
    options += [room / m / "__init__.py" for m in (name, f"_{name}")]
    if room != PKG_DIR and room.name.lstrip("_") == name:
        options.append(room / "__init__.py")
    return options


def test_tests_mirror_the_package():
    """Every ``tests/**/test_<m>.py`` names the module it tests; ``tests/`` root holds
    ``conftest.py``, shared helpers and the cross-cutting checks of ``TEST_ROOT_ALLOWED``;
    ``tests/scripts/test_<s>.py`` tests ``scripts/<s>.py``."""
    bad = []
    for test in sorted(TESTS_DIR.rglob("test_*.py")):
        rel = test.relative_to(TESTS_DIR)
        if len(rel.parts) == 1:
            ok = rel.name in TEST_ROOT_ALLOWED
        elif rel.parts[0] == "scripts":
            ok = len(rel.parts) == 2 and (SCRIPTS_DIR / rel.name[len("test_"):]).is_file()
        else:
            ok = any(p.is_file() for p in _tested_module(test))
        if not ok:
            bad.append(f"{_rel(test)}: no module it mirrors")
    root = sorted(p.name for p in TESTS_DIR.glob("*.py"))
    if len(root) > MAX_TEST_ROOT_FILES:
        bad.append(f"tests/: {len(root)} .py files at the root (at most {MAX_TEST_ROOT_FILES}):"
                   f" {', '.join(root)}")
    if bad:
        pytest.fail(f"{len(bad)} test file(s) that do not mirror the package (name a test "
                    "file after the module it tests, not after a change):\n  "
                    + "\n  ".join(bad), pytrace=False)


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
    assert graph["p.b"] == {"p.a": 3, "p.c": 5}         # and so does TYPE_CHECKING
    assert graph["p.sub.x"] == {"p.sub": 1, "p.c": 2, "p.sub.y": 3}
    assert graph["p.sub.y"] == {"p.a": 1}
    assert import_cycles(graph) == [["p", "p.a", "p"], ["p.a", "p.b", "p.a"]]
    assert _describe_cycle(graph, ["p", "p.a", "p"]) == "p (line 1) -> p.a (line 3) -> p"


def test_the_private_name_finders_on_a_small_package(tmp_path):
    """Private imports, ``m._x`` on a module, and a class's privates used elsewhere."""
    files = {
        "p/__init__.py": "",
        "p/_priv.py": "def helper():\n    pass\ndef _hidden():\n    pass\n",
        "p/a.py": "class A:\n    _k = 1\n    def __init__(self):\n        self._x = 0\n"
                  "    def _m(self):\n        return self._x\n",
        "p/b.py": "from . import _priv\nfrom ._priv import helper, _hidden\nimport p.a as pa\n"
                  "def f(a):\n    _priv.helper()\n    _priv._hidden()\n    return a._x + pa._y\n",
        "p/c.py": "class C:\n    def __init__(self):\n        self._x = 1\n"
                  "    def g(self, other):\n"
                  "        return self._x, other._m(), getattr(other, '_k')\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    known, b = _modules(tmp_path / "p"), tmp_path / "p" / "b.py"
    found = [what for _, what in private_imports("p.b", b, known, pkg="p")]
    assert found == ["from p._priv import _hidden", "p._priv._hidden", "p.a._y"]
    names = _defined_privates(_class_of(_tree(tmp_path / "p" / "a.py"), "A"))
    assert names == {"_k", "_x", "_m"}
    uses = {what for _, what in _private_uses(_tree(tmp_path / "p" / "c.py"), names)}
    assert uses == {"other._m", "getattr(other, '_k')"}  # self._x: C defines _x itself
    assert [w for _, w in _private_uses(_tree(b), names)] == ["a._x"]


def test_the_mirror_rule_on_names():
    """Where a test file may point (the rules of ``_tested_module``)."""
    def targets(rel):
        return [p.relative_to(ROOT).as_posix() for p in _tested_module(TESTS_DIR / rel)]

    assert "torchrankboost/boosting/booster.py" in targets("boosting/test_booster.py")
    assert "torchrankboost/boosting/_round_sums.py" in targets("boosting/test_round_sums.py")
    assert "torchrankboost/kernels/__init__.py" in targets("kernels/test_kernels.py")
    assert "torchrankboost/_native/__init__.py" in targets("_native/test_native.py")
    assert "torchrankboost/groups.py" in targets("package/test_groups.py")
    assert "torchrankboost/_io.py" in targets("package/test_io.py")
    assert not any(Path(ROOT / t).is_file() for t in targets("boosting/test_weights_more.py"))
