"""Neural rankers over the library's losses: models, normalisation stored in the model, and
a trainer of the ranker contract.

* :mod:`.models` — :class:`MLPScorer` and the context-aware :class:`ListwiseTransformer`
  (self-attention within each query), over flat ``(X, Groups)`` batches or padded
  ``(B, L, F)`` queries with a mask;
* :mod:`.layers` — :class:`QueryNorm` (per query), :class:`GlobalNorm` (training
  statistics), the attention block, padding helpers;
* :mod:`.ranker` — :class:`NeuralRanker`, the trainer (early stopping on validation
  NDCG, callbacks and TensorBoard as boosting, devices, mixed precision, several processes,
  checkpoints and exact resume); :func:`train` its one-call form;
* :mod:`.model` — :class:`NeuralModel`, the fitted model: ``predict``, ``save``/``load``
  (safetensors + JSON, no pickle; :func:`torchrankboost.factory.load_model` reads it),
  ``to_onnx`` and ``export`` (``torch.export``).
"""

from .layers import GlobalNorm, QueryNorm, pad_queries, unpad_scores
from .model import NeuralModel
from .models import ARCHITECTURES, ListwiseTransformer, MLPScorer, build_network
from .ranker import NeuralRanker

__all__ = ["ARCHITECTURES", "GlobalNorm", "ListwiseTransformer", "MLPScorer", "NeuralModel",
           "NeuralRanker", "QueryNorm", "build_network", "pad_queries", "train",
           "unpad_scores"]


def train(X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
          early_stopping_rounds=None, callbacks=(), **options) -> NeuralModel:
    """Train a neural ranker in one call: ``NeuralRanker(**options).fit(X, labels, groups,
    ...)`` (the options of :class:`NeuralRanker`: ``model``, ``loss``, ``epochs``,
    ``device``, ``precision``...); returns the :class:`NeuralModel`."""
    return NeuralRanker(**options).fit(X, labels, groups, eval_set=eval_set,
                                       eval_metric=eval_metric,
                                       early_stopping_rounds=early_stopping_rounds,
                                       callbacks=callbacks)
