"""The shared evaluation machinery (``boosting/evaluation.py``): the best-round rule (NaN
never improves; a NaN validation metric stops the run, a NaN report metric is recorded as
NaN and shown as ``nan``; large labels keep improving rounds), the early stopping callback,
metric specs, and the partial model: a loss turning NaN keeps the last good round."""

import math
import warnings

import pytest
import torch

from torchrankboost.boosting import Booster, EarlyStopping, RegressionTree
from torchrankboost.boosting.evaluation import BestTracker, resolve_metrics
from torchrankboost.contract import NumericalError
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss


def test_best_tracker_ignores_nan_and_keeps_the_first_best():
    b = BestTracker(greater_is_better=True)
    assert not b.update(1, float("nan")) and b.round is None
    assert b.update(2, 0.5) and not b.update(3, 0.5) and not b.update(4, float("nan"))
    assert (b.round, b.score) == (2, 0.5) and b.rounds_since_best(6) == 4
    low = BestTracker(greater_is_better=False)
    assert low.update(1, 2.0) and low.update(2, 1.0) and not low.update(3, 1.5)
    assert low.round == 2


def test_nan_validation_metric_stops_the_run_with_an_error_naming_it():
    from torchrankboost.contract import NumericalError

    X, y, g = make_letor(10, 10, 5, n_grades=3, seed=0, noise=1.5)
    values = iter([0.3, 0.4, float("nan"), 0.9])

    def flaky(s, labels, groups):
        return next(values)

    b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=7)
    with pytest.raises(NumericalError, match="valid_0 flaky is NaN") as err:
        b.fit(X, y, g, eval_set=[(X, y, g)], eval_metric=flaky, early_stopping_rounds=4)
    # never "no improvement": the run stops at once, keeping the last good round's model
    assert err.value.round == 3 and len(b.history_) == 2
    assert b.model_ is not None and b.model_.n_rounds == 2 and b.model_.info["partial"]
    assert "valid_0 flaky is NaN" in b.stop_reason_


def test_early_stopping_callback_on_its_own_key_only_stops():
    X, y, g = make_letor(10, 10, 5, n_grades=3, seed=0, noise=1.5)
    vals = iter([1.0, 2.0, 1.5, 1.5, 1.5, 1.5])
    b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=6)
    es = EarlyStopping(2, key=("valid_0", "m"))
    model = b.fit(X, y, g, eval_set=[(X, y, g)], callbacks=[es],
                  eval_metric=[("ndcg", lambda s, yy, gg: 0.5, True),
                               ("m", lambda s, yy, gg: next(vals), True)])
    assert len(b.history_) == 4 and "valid_0 m has not improved for 2 rounds" in es.reason
    assert model.n_rounds == 4  # no early_stopping_rounds: the model is not cut back
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(0)


def test_resolve_metrics_lists_and_tuples():
    fn = lambda s, y, g: 0.0  # noqa: E731
    assert [m.name for m in resolve_metrics(("x", fn, False))] == ["x"]
    assert [m.name for m in resolve_metrics(["map", ("x", fn, False)])] == ["map", "x"]
    assert resolve_metrics("loss", loss=lambda s, y, g: torch.ones(2))[0](
        torch.zeros(2), torch.zeros(2)) == 2.0
    with pytest.raises(ValueError, match="eval_metric: unknown metric"):
        resolve_metrics(["ndcg@10", "bleu"])


def _data(seed=0):
    return make_letor(20, 10, 5, n_grades=3, seed=seed)


def _nan_metric(s, y, g):
    return float("nan")


def test_nan_report_metric_is_recorded_as_nan_and_does_not_stop_the_run():
    X, y, g = _data()
    b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=3)
    b.fit(X, y, g, eval_set=[(X, y, g)], early_stopping_rounds=2,
          eval_metric=["ndcg@5", ("nanmetric", _nan_metric, True)])
    assert len(b.history_) == 3 and b.model_.n_rounds >= 1
    values = b.evals_result_["valid_0"]["nanmetric"]
    assert len(values) == 3 and all(v != v for v in values)


def test_nan_early_stopping_metric_still_stops_the_run_naming_it():
    X, y, g = _data()
    b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=3)
    with pytest.raises(NumericalError, match="valid_0 nanmetric is NaN"):
        b.fit(X, y, g, eval_set=[(X, y, g)], early_stopping_rounds=2,
              eval_metric=[("nanmetric", _nan_metric, True), "ndcg@5"])


def test_cli_report_metric_undefined_on_validation_is_shown_as_nan(tmp_path, capsys):
    """``-m map`` on a validation set without positives: AUC (a report metric) is undefined
    there, and the run finishes with ``nan`` in its table."""
    from torchrankboost import cli

    g = torch.Generator().manual_seed(0)
    for name, positives in (("train.txt", True), ("valid.txt", False)):
        with open(tmp_path / name, "w") as fh:
            for q in range(8):
                for _ in range(5):
                    x = torch.rand(3, generator=g)
                    label = int(positives and float(x[0]) > 0.5)
                    fh.write(f"{label} qid:{q} " + " ".join(f"{j + 1}:{float(x[j]):.4f}"
                                                            for j in range(3)) + "\n")
    rc = cli.main(["train", "--data", str(tmp_path / "train.txt"), "--valid",
                   str(tmp_path / "valid.txt"), "-m", "map", "--report", "map", "auc",
                   "--rounds", "2", "-q", "--no-tensorboard", "-o", str(tmp_path / "m.st")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "nan" in out and "auc" in out


def test_early_stopping_with_large_labels_keeps_improving_rounds():
    X, y, g = _data()
    Xv, yv, gv = _data(seed=1)
    b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # separable: the driver stops early
        b.fit(X, y * 1000, g, eval_set=[(Xv, yv * 1000, gv)], early_stopping_rounds=3)
    vals = b.evals_result_["valid_0"]["ndcg@10"]
    assert len(vals) > 1 and all(math.isfinite(v) for v in vals)
    assert b.best_score_ == max(vals) and b.best_round_ == vals.index(max(vals)) + 1


def test_loss_turning_nan_keeps_the_model_of_the_last_good_round():
    X, y, g = _data()

    class Flaky(torch.nn.Module):
        calls = 0

        def forward(self, s, labels, groups=None):
            v = ExponentialPairwiseLoss()(s, labels, groups)
            return v if float(s.abs().max()) < 1e-9 or Flaky.calls < 3 else v * float("nan")

    class Count:
        def on_round_end(self, ranker, record):
            Flaky.calls += 1

    b = Booster(Flaky(), RegressionTree(max_leaves=4), n_rounds=10, curvature="none",
                step="fixed", learning_rate=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NumericalError):
            b.fit(X, y, g, callbacks=[Count()])
    assert b.ensemble_ is not None and b.ensemble_.n_rounds == 3
    assert "NaN" in b.stop_reason_ or "nan" in b.stop_reason_
