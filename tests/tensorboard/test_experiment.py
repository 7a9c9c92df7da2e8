"""One HParams experiment definition per log folder: the union of the columns of every run,
rewritten only when it grows, as TensorBoard itself reads it."""

import pytest

from torchrankboost.tensorboard import TensorBoardLogger

pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _tensorboard_experiment(logdir):
    """``(experiment, {run: session start hparams}, runs holding an experiment)`` as
    TensorBoard itself finds them over a log folder (its multiplexer and the hparams
    plugin's own experiment lookup)."""
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import backend_context, metadata

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    content = mux.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    exp = backend_context.Context(None)._find_experiment_tag(content, include_metrics=True)
    sessions = {run: metadata.parse_session_start_info_plugin_data(
        tags[metadata.SESSION_START_INFO_TAG]).hparams
        for run, tags in content.items() if metadata.SESSION_START_INFO_TAG in tags}
    holders = [run for run, tags in content.items() if metadata.EXPERIMENT_TAG in tags]
    return exp, sessions, holders


def test_runs_of_different_algorithms_share_one_experiment_with_the_union_of_columns(tmp_path):
    """Two runs under one log folder (RankBoost with its default weak rankers, the generic
    booster with a p-norm loss) hold the same experiment, each in its own folder (no run
    ``.`` of the log folder in TensorBoard's run lists), whose columns are both runs'
    hyper-parameters and no other algorithm's; ``data`` is a column shown by default;
    RankBoost's learner is the stumps it used, not ``None``; test NDCG@10 is the first
    metric column."""
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    from torchrankboost.data import load_data, slice_queries
    from torchrankboost.factory import make_ranker
    from torchrankboost.tensorboard.experiment import read_experiment

    tr = slice_queries(load_data("synthetic", seed=0)[0], 0, 8)
    runs = {"rb": make_ranker("rankboost", n_rounds=2),
            "pnorm": make_ranker("boost", loss="pnorm_push", loss_params={"p": 3},
                                 learner="tree", learner_params={"max_leaves": 3},
                                 n_rounds=2)}
    for name, ranker in runs.items():
        with TensorBoardLogger(tmp_path / name, hparams={"data": f"data-{name}"}) as lg:
            ranker.fit(tr.X, tr.labels, tr.groups, callbacks=[lg])
    exp, sessions, holders = _tensorboard_experiment(tmp_path)
    assert sorted(holders) == ["pnorm", "rb"]  # in the runs, the same in both
    assert read_experiment(tmp_path / "rb") == read_experiment(tmp_path / "pnorm")
    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(tmp_path))
    assert sorted(mux.Runs()) == ["pnorm", "rb"]  # no phantom run "."
    columns = {h.name for h in exp.hparam_infos}
    assert set(sessions) == {"rb", "pnorm"}
    for run, hp in sessions.items():
        assert set(hp) <= columns, (run, set(hp) - columns)
    assert {"loss.p", "variant", "learner.max_leaves"} <= columns
    assert not {"C", "learner.depth", "loss.num_permutations"} & columns  # not in the folder
    assert sessions["pnorm"]["loss.p"].number_value == 3
    assert sessions["rb"]["learner"].string_value == "stump"
    assert sessions["rb"]["data"].string_value == "data-rb"
    shown = sorted(h.name for h in exp.hparam_infos if h.differs)  # TensorBoard shows 5
    assert len(shown) == 5 and "data" in shown and "algorithm" in shown
    assert exp.metric_infos[0].name.tag == "summary/test/ndcg@10"


def test_experiment_definition_is_rewritten_only_when_its_columns_grow(tmp_path):
    from torchrankboost.tensorboard.experiment import (EXPERIMENT_FILE, read_experiment,
                                                       update_experiment)

    a, b = tmp_path / "a", tmp_path / "b"
    assert update_experiment(tmp_path, {"algorithm": "boost", "data": "a"}, ["summary/x"], run=a)
    cols, metrics = read_experiment(a)
    assert list(cols)[:3] == ["algorithm", "loss", "learner"]
    assert "summary/x" in metrics and metrics[0] == "summary/test/ndcg@10"
    # nothing new: the file is left alone, and the second run gets the same definition
    assert update_experiment(tmp_path, {"algorithm": "rankboost"}, run=b)
    assert not update_experiment(tmp_path, {"algorithm": "rankboost"}, run=b)
    assert read_experiment(b) == read_experiment(a)
    # a run's own column (a script's setting), a type learnt: both runs' copies grow
    assert update_experiment(tmp_path, {"learner.hidden": 64, "learner.max_depth": 4}, run=b)
    cols2, metrics2 = read_experiment(a)
    assert cols2["learner.hidden"] == cols2["learner.max_depth"] == cols2["learning_rate"]
    assert set(cols) <= set(cols2) and "summary/x" in metrics2  # nothing dropped
    assert read_experiment(b) == (cols2, metrics2)
    assert len([p for p in a.iterdir() if "tfevents" in p.name]) == 1
    (a / EXPERIMENT_FILE).write_bytes(b"not an event file")  # damaged: rewritten
    assert update_experiment(tmp_path, {}, run=b) and read_experiment(a) == (cols2, metrics2)


def test_a_definition_older_versions_wrote_in_the_log_folder_is_merged_and_removed(tmp_path):
    """The phantom run ``.``: a definition in the log folder itself (older versions) gives
    its columns to the runs' copies and goes."""
    from torchrankboost.tensorboard.experiment import (EXPERIMENT_FILE, read_experiment,
                                                       update_experiment)

    update_experiment(tmp_path, {"loss.p": 4.0}, ["summary/old"])  # as older versions did
    assert (tmp_path / EXPERIMENT_FILE).is_file()
    assert update_experiment(tmp_path, {"algorithm": "boost"}, run=tmp_path / "r")
    assert not (tmp_path / EXPERIMENT_FILE).exists()
    cols, metrics = read_experiment(tmp_path / "r")
    assert "loss.p" in cols and "summary/old" in metrics
