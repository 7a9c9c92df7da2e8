"""XGBoost's JSON and UBJSON models read by our own code: real models of every supported
objective (base score through the objective's link) and early-stopped models import with
XGBoost's own ``output_margin`` (within 1e-6 relative), and what cannot be imported is one
``ValueError`` naming the tree and node."""

import json
import re

import numpy as np
import pytest

from torchrankboost.export import from_xgboost
from torchrankboost.export.import_xgboost import LINKS

xgb = pytest.importorskip("xgboost")


def _data(seed=0, n=240, F=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, F)).astype(np.float32)
    X[rng.random((n, F)) < 0.1] = np.nan
    z = np.nan_to_num(X[:, 0]) - 0.5 * np.nan_to_num(X[:, 1]) + 0.3 * rng.normal(size=n)
    return X, z


def _labels(objective, z):
    if objective.startswith(("binary:", "reg:logistic")) or objective == "rank:map":
        return (z > 0).astype(np.float32)
    if objective.startswith("rank:"):
        return np.digitize(z, [-0.5, 0.5, 1.2]).astype(np.float32)
    if objective in ("count:poisson", "reg:tweedie"):
        return np.floor(np.exp(np.clip(z, -3, 2))).astype(np.float32)
    if objective in ("reg:gamma", "survival:aft"):
        return np.exp(np.clip(z, -3, 2)).astype(np.float32) + 0.1
    if objective == "survival:cox":
        return np.where(z > 0, 1.0, -1.0).astype(np.float32) * (1 + np.abs(z))
    if objective == "reg:squaredlogerror":
        return np.abs(z).astype(np.float32)
    return z.astype(np.float32)


def _train(objective, X, z, rounds=12, **extra):
    y = _labels(objective, z)
    dm = xgb.DMatrix(X, y, missing=np.nan)
    if objective.startswith("rank:"):
        dm.set_group([24] * (len(y) // 24))
    if objective == "survival:aft":
        dm.set_float_info("label_lower_bound", y)
        dm.set_float_info("label_upper_bound", np.where(z > 0, y, np.inf))
    params = dict(dict(objective=objective, nthread=1, max_depth=3, eta=0.3, seed=0), **extra)
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = 0.3
    return xgb.train(params, dm, rounds)


def _margins(b, X, **kw):
    return b.predict(xgb.DMatrix(X, missing=np.nan), output_margin=True, **kw)


def _close(ours, theirs):
    scale = max(1.0, float(np.abs(theirs).max()))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("objective", [o for o in LINKS if o != "reg:linear"])
def test_every_supported_objective_imports_with_its_margins(objective, tmp_path):
    """A real model of each objective, from the booster, its JSON file and its UBJSON file:
    the margins equal XGBoost's output_margin (the base score through the link)."""
    X, z = _data()
    b = _train(objective, X, z)
    theirs = _margins(b, X)
    b.save_model(str(tmp_path / "m.json"))
    b.save_model(str(tmp_path / "m.ubj"))
    for src in (b, tmp_path / "m.json", tmp_path / "m.ubj",
                (tmp_path / "m.json").read_bytes()):
        ens = from_xgboost(src)
        assert ens.info["objective"] == objective
        _close(ens.predict(X).numpy(), theirs)
        _close(ens.predict(X.astype(np.float64)).numpy(), theirs)


def test_an_early_stopped_model_keeps_its_best_iteration(tmp_path):
    """Early stopping: the import keeps the rounds up to best_iteration, as XGBRanker's
    predict and iteration_range do; all_trees=True keeps every tree (Booster.predict's
    default). Also through a file and the scikit-learn ranker."""
    X, z = _data(1, n=480)
    y = _labels("rank:ndcg", z)
    tr, va = slice(0, 240), slice(240, 480)
    dtr, dva = (xgb.DMatrix(X[s], y[s], missing=np.nan) for s in (tr, va))
    dtr.set_group([24] * 10)
    dva.set_group([24] * 10)
    b = xgb.train(dict(objective="rank:ndcg", nthread=1, max_depth=4, eta=0.6, seed=0),
                  dtr, 200, evals=[(dva, "va")], early_stopping_rounds=3, verbose_eval=False)
    best = b.best_iteration
    assert best + 1 < b.num_boosted_rounds()
    b.save_model(str(tmp_path / "m.json"))
    for src in (b, tmp_path / "m.json"):
        ens = from_xgboost(src)
        assert ens.n_rounds == best + 1 and ens.info["best_iteration"] == best
        _close(ens.predict(X).numpy(), _margins(b, X, iteration_range=(0, best + 1)))
        every = from_xgboost(src, all_trees=True)
        assert every.n_rounds == b.num_boosted_rounds()
        _close(every.predict(X).numpy(), _margins(b, X, iteration_range=(0, 0)))
    ranker = xgb.XGBRanker(n_estimators=200, max_depth=4, learning_rate=0.6, n_jobs=1,
                           early_stopping_rounds=3, objective="rank:ndcg")
    qid = np.repeat(np.arange(20), 24)
    ranker.fit(X[tr], y[tr], qid=qid[tr], eval_set=[(X[va], y[va])], eval_qid=[qid[va]],
               verbose=False)
    _close(from_xgboost(ranker).predict(X).numpy(), ranker.predict(X, output_margin=True))


def _doc(objective="reg:squarederror"):
    X, z = _data(2, n=120)
    return json.loads(bytes(_train(objective, X, z, rounds=3).save_raw("json")))


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"]
     .__setitem__(0, 10 ** 9), "tree 0, node 0: split feature 1000000000 outside"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"]
     .__setitem__(0, -2), "tree 0, node 0: child index -2 outside"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][1]["right_children"]
     .__setitem__(0, 0), "tree 1, node 0: right child 0 is not left child 1 + 1"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"]
     .__setitem__(0, 1.5), "not an integer"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"]
     .__setitem__(0, True), "not an integer"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_conditions"]
     .__setitem__(0, float("nan")), "tree 0, node 0: threshold nan is not finite"),
    (lambda d: d["learner"]["objective"].__setitem__("name", "multi:softprob"), "multi-class"),
    (lambda d: d["learner"]["objective"].__setitem__("name", "reg:mystery"), "not supported"),
    (lambda d: d["learner"]["learner_model_param"].__setitem__("num_target", "2"),
     "multi-target"),
    (lambda d: d["learner"]["gradient_booster"].__setitem__("name", "gblinear"), "gblinear"),
    (lambda d: d["learner"]["attributes"].__setitem__("best_iteration", "7"),
     "best_iteration 7 outside"),
])
def test_damaged_models_are_one_valueerror(edit, says):
    doc = _doc()
    doc["learner"].setdefault("attributes", {})
    edit(doc)
    with pytest.raises(ValueError, match=re.escape(says)) as err:
        from_xgboost(doc)
    assert "\n" not in str(err.value) and str(err.value).startswith("from_xgboost: ")


# ----------------------------------------------------------------------------- fuzz
SPECIAL32 = [0.0, -0.0, 1e-38, -1e-38, 1e-45, -1e-45, 3.4e38, -3.4e38, 0.5, -1.5, 1.0,
             float(np.float32(0.1)), 16777217.0, 1e30]


def _trees(doc):
    return doc["learner"]["gradient_booster"]["model"]["trees"]


def _some_split(doc, rng):
    trees = [t for t in _trees(doc) if any(c != -1 for c in t["left_children"])]
    t = trees[rng.integers(len(trees))]
    splits = [i for i, c in enumerate(t["left_children"]) if c != -1]
    return t, splits[rng.integers(len(splits))]


def _set_split(key, value):
    def edit(doc, rng):
        t, i = _some_split(doc, rng)
        t[key][i] = value(t, i) if callable(value) else value
    return edit


def _set_leaf(value):
    def edit(doc, rng):
        t = _trees(doc)[rng.integers(len(_trees(doc)))]
        leaves = [i for i, c in enumerate(t["left_children"]) if c == -1]
        t["split_conditions"][leaves[rng.integers(len(leaves))]] = value
    return edit


def _learner(path, value):
    def edit(doc, rng):
        node = doc["learner"]
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return edit


XGB_DAMAGE = [  # (edit, what the refusal says; None: a valid model, XGBoost is the oracle)
    (_set_split("split_indices", 10 ** 9), "split feature"),
    (_set_split("split_indices", 2 ** 40), "split feature"),
    (_set_split("split_indices", -1), "split feature"),
    (_set_split("split_indices", "3"), "not an integer"),
    (_set_split("split_indices", 1.5), "not an integer"),
    (_set_split("split_indices", True), "not an integer"),
    (_set_split("left_children", -2), "outside"), (_set_split("right_children", -3), "outside"),
    (_set_split("left_children", 0), "+ 1"),
    (_set_split("right_children", lambda t, i: t["left_children"][i]), "+ 1"),
    (_set_split("right_children", lambda t, i: t["left_children"][i] + 2), "+ 1"),
    (_set_split("left_children", 10 ** 6), "outside"),
    (_set_split("split_conditions", float("nan")), "not finite"),
    (_set_split("split_conditions", float("inf")), "not finite"),
    (_set_split("split_conditions", "0.5"), "not a number"),
    (_set_leaf(float("nan")), "not finite"), (_set_leaf(float("-inf")), "not finite"),
    (_set_leaf(1e39), "not finite"),  # beyond float32
    (_set_split("split_type", 1), "categorical"),
    (_set_split("default_left", 2), "0 / 1"),
    (_set_split("parents", lambda t, i: i), "parents do not match"),
    (lambda d, r: _trees(d)[0].pop("categories_segments"), "categories_segments"),
    (lambda d, r: _trees(d)[0].pop("sum_hessian"), "sum_hessian"),
    (_learner(["objective", "name"], "multi:softprob"), "multi-class"),
    (_learner(["objective", "name"], "rank:unknown"), "not supported"),
    (_learner(["learner_model_param", "num_class"], "3"), "multi-class"),
    (_learner(["learner_model_param", "num_feature"], "0"), "features"),
    (_learner(["learner_model_param", "base_score"], "nan"), "base_score"),
    (_learner(["gradient_booster", "name"], "dart"), "dart"),
    (_learner(["attributes", "best_iteration"], "99"), "best_iteration"),
    (lambda d, r: d["learner"].pop("gradient_booster"), "gradient_booster"),
] + [(_set_split("split_conditions", v), None) for v in SPECIAL32] \
  + [(_set_leaf(v), None) for v in (0.0, -0.0, 1e-38, 5.0)]


def _chain_doc(doc, depth):
    """``doc`` with its first tree replaced by a chain ``depth`` splits deep in XGBoost's
    layout: split ``k`` is node ``2k``, its left child the leaf ``2k + 1``, its right child
    node ``2k + 2`` (split ``k + 1``, or the last leaf)."""
    n = 2 * depth + 1
    left = [2 * (j // 2) + 1 if j % 2 == 0 and j < n - 1 else -1 for j in range(n)]
    right = [c + 1 if c != -1 else -1 for c in left]
    parents = [2147483647] + [2 * ((j - 1) // 2) for j in range(1, n)]
    tree = dict(_trees(doc)[0])
    tree.update(left_children=left, right_children=right, parents=parents,
                split_indices=[0] * n, split_conditions=[float(k) / 7 for k in range(n)],
                default_left=[0] * n, split_type=[0] * n, loss_changes=[0.0] * n,
                sum_hessian=[1.0] * n, base_weights=[0.0] * n, categories=[],
                categories_nodes=[], categories_segments=[], categories_sizes=[])
    tree["tree_param"] = dict(tree["tree_param"], num_nodes=str(n))
    _trees(doc)[0] = tree
    return doc


def xgb_eval_rows(doc, rng, F, n=48):
    pool = [float(v) for t in _trees(doc) for v, c in zip(t["split_conditions"],
                                                           t["left_children"])
            if c != -1 and isinstance(v, float) and np.isfinite(v)][:60]
    pool += [float(np.nextafter(np.float32(v), np.float32(d))) for v in pool
             for d in (-np.inf, np.inf)]
    pool += SPECIAL32 + [np.nan]  # XGBoost's DMatrix refuses ±inf: float32's extremes
    return np.array([[pool[rng.integers(len(pool))] if rng.random() < 0.85 else rng.normal()
                      for _ in range(F)] for _ in range(n)], dtype=np.float32)


def check_xgb_case(case, mark):
    """Fuzz child: our import (one-line ValueError, or a model equal after save and load),
    then XGBoost's own load and output margins of the same file as the oracle."""
    import torch
    import xgboost

    from torchrankboost import load_model
    from torchrankboost.export import from_xgboost as imp

    X = np.load(case["X"])
    mark("ours")
    try:
        ens = imp(case["path"])
    except ValueError as exc:
        return {"outcome": "refused", "message": str(exc)}
    ours = ens.predict(torch.from_numpy(X)).numpy()
    ens.save(case["path"] + ".safetensors")
    again = load_model(case["path"] + ".safetensors").predict(torch.from_numpy(X)).numpy()
    if not np.array_equal(again, ours):
        return {"outcome": "different after save and load"}
    mark("peer")
    best = ens.info["best_iteration"]

    def margins(path):
        b = xgboost.Booster(model_file=path)
        return b.predict(xgboost.DMatrix(X, missing=np.nan), output_margin=True,
                         iteration_range=(0, 0 if best is None else best + 1))

    try:
        theirs = margins(case["path"])
    except Exception as exc:  # noqa: BLE001 - the peer refusing what we accept is a finding
        if case.get("clean") is None:
            return {"outcome": "peer refused", "message": str(exc)[:200]}
        # damage XGBoost refuses in a field the import does not read (an objective's
        # parameter, say): the import must then be exactly the undamaged model
        theirs = margins(case["clean"])
        mark("clean")
    scale = max(1.0, float(np.abs(theirs[np.isfinite(theirs)]).max(initial=0.0)))
    if theirs.shape == ours.shape and np.allclose(ours, theirs, rtol=0, atol=1e-6 * scale):
        return {"outcome": "equal"}
    bad = np.flatnonzero(~np.isclose(ours, theirs, rtol=0, atol=1e-6 * scale))
    return {"outcome": "different", "row": X[bad[0]].tolist(), "ours": float(ours[bad[0]]),
            "theirs": float(theirs[bad[0]])}


def _byte_damage(data: bytes, rng) -> bytes:
    b = bytearray(data)
    kind = int(rng.integers(4))
    pos = int(rng.integers(len(b)))
    if kind == 0:
        b[pos] ^= 1 << int(rng.integers(8))
    elif kind == 1:
        return bytes(b[:pos])
    elif kind == 2:
        b[pos:pos] = bytes([int(rng.integers(256))])
    else:
        del b[pos]
    return bytes(b)


def _xgb_cases(tmp, seed=37):
    from torchrankboost.export.ubjson import read_ubjson  # noqa: F401 - imported to fail early

    rng = np.random.default_rng(seed)
    X, z = _data(5, n=240)
    bases = []
    for k, objective in enumerate(["rank:ndcg", "reg:squarederror", "binary:logistic",
                                   "count:poisson", "rank:pairwise", "reg:absoluteerror"]):
        b = _train(objective, X, z, rounds=4 + k, max_depth=2 + k % 3)
        bases.append(json.loads(bytes(b.save_raw("json"))))
    cases = []

    def add(doc_or_bytes, expect, suffix, clean=None):
        i = len(cases)
        path = tmp / f"x{i}{suffix}"
        if isinstance(doc_or_bytes, dict):
            if suffix == ".json":
                data = json.dumps(doc_or_bytes).encode()
            else:
                b = xgb.Booster()
                b.load_model(bytearray(json.dumps(doc_or_bytes).encode()))
                data = bytes(b.save_raw("ubj"))
        else:
            data = doc_or_bytes
        path.write_bytes(data)
        doc = doc_or_bytes if isinstance(doc_or_bytes, dict) and \
            "gradient_booster" in doc_or_bytes["learner"] else bases[0]
        np.save(tmp / f"x{i}.npy", xgb_eval_rows(doc, rng, X.shape[1]))
        cases.append({"path": str(path), "X": str(tmp / f"x{i}.npy"), "expect": expect,
                      "clean": clean})

    for doc in bases:
        for suffix in (".json", ".ubj"):
            add(doc, "equal", suffix)
    clean = [c["path"] for c in cases]
    for rep in range(3):
        for edit, says in XGB_DAMAGE:
            doc = json.loads(json.dumps(bases[int(rng.integers(len(bases)))]))
            edit(doc, rng)
            add(doc, says or "equal", ".json" if says or rep % 2 == 0 else ".ubj")
    add(_chain_doc(json.loads(json.dumps(bases[1])), 1500), "equal", ".json")
    add(_chain_doc(json.loads(json.dumps(bases[1])), 5000), "deeper than", ".json")
    for k in range(60):  # random byte damage of both forms
        doc = bases[k % len(bases)]
        data = json.dumps(doc).encode()
        if k % 2:
            b = xgb.Booster()
            b.load_model(bytearray(data))
            data = bytes(b.save_raw("ubj"))
        add(_byte_damage(data, rng), "either", ".json" if k % 2 == 0 else ".ubj",
            clean[2 * (k % len(bases)) + k % 2])
    return cases


@pytest.mark.slow
def test_fuzzed_xgboost_models_import_exactly_or_are_one_valueerror(tmp_path):
    """Seeded fuzz (over 150 cases, JSON and UBJSON, each in a child process): real models,
    targeted damage (features out of range or not integers, child indices -2 / -3, cycles,
    shared children, NaN / inf values, categorical splits, several classes, DART, a bad
    best_iteration, ...), valid edits (thresholds at float32's extremes, subnormals, ±0),
    a 1,500-level and a 5,000-level tree, and random byte damage. No case crashes; each is
    one ValueError (saying what the damage is), or equals XGBoost's own output margins on
    NaN, float32's extremes (its DMatrix refuses ±inf) and values at and beside every
    threshold, and the same after save and load. Byte damage that XGBoost refuses in a field
    the import does not read (an objective's parameter) must import the undamaged model."""
    from fuzz_runner import run_cases

    cases = _xgb_cases(tmp_path)
    results = run_cases(f"{__file__}:check_xgb_case", cases)
    assert len(cases) >= 150
    tally, bad = {}, []
    for case, r in zip(cases, results):
        outcome = r.get("outcome", "crash" if "crash" in r else "exception")
        tally[outcome] = tally.get(outcome, 0) + 1
        expect = case["expect"]
        if outcome == "refused":
            msg = r["message"]
            ok = ("\n" not in msg and msg.startswith("from_xgboost: ") and expect != "equal"
                  and (expect == "either" or expect in msg))
        else:
            ok = outcome == "equal" and expect in ("equal", "either")
        if not ok:
            bad.append((case["path"].rsplit("/", 1)[-1], expect, r))
    print("xgboost import fuzz:", len(cases), "cases", tally)
    assert not bad, [(name, expect, str(r)[:300]) for name, expect, r in bad[:40]]
    assert tally["equal"] >= 50 and tally["refused"] >= 90
