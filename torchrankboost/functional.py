"""Functional twins of the loss modules: ``f(scores, labels, groups=None, *, ...)``.

Every loss the library exports has one (:data:`TWINS`: class name → function). Each takes
the module's options and the call's ``pairs`` / ``weights`` / ``mask`` as keyword
arguments, builds the module and calls it: the same code, the same reduced loss.
"""

# --- exponential family (exponential pairwise, AdaBoost/F-skew, p-norm push, smooth margin) ---
from .losses.exponential import (  # noqa: E402,F401
    AdaBoostLoss as _AdaBoostLoss,
    ExponentialPairwiseLoss as _ExponentialPairwiseLoss,
    f_skew,
    relative_f_skew,
    zero_skew_intercept,
)
from .losses.margin import SmoothMarginLoss as _SmoothMarginLoss, smooth_margin  # noqa: E402,F401
from .losses.pnorm import PNormPushLoss as _PNormPushLoss  # noqa: E402


def exponential_pairwise_loss(scores, labels=None, groups=None, *, pairs=None, weights=None,
                              mask=None, log=False, normalize=False, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.ExponentialPairwiseLoss`."""
    return _ExponentialPairwiseLoss(log=log, normalize=normalize, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


def pnorm_push_loss(scores, labels=None, groups=None, *, p=2.0, pairs=None, weights=None,
                    mask=None, log=False, normalize=False, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.PNormPushLoss`."""
    return _PNormPushLoss(p, log=log, normalize=normalize, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


def adaboost_loss(scores, labels, groups=None, *, threshold=0.0, pairs=None, weights=None,
                  mask=None, log=False, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.AdaBoostLoss`."""
    return _AdaBoostLoss(threshold=threshold, log=log, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


def smooth_margin_loss(scores, labels=None, groups=None, *, scale, pairs=None, weights=None,
                       mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.SmoothMarginLoss` (``ln F̃ / scale``)."""
    return _SmoothMarginLoss(scale, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


# --- quadratic family (pairwise hinge, QBRank) ---
from .losses.hinge import PairwiseHingeLoss as _PairwiseHingeLoss  # noqa: E402
from .losses.qbrank import QBRankLoss as _QBRankLoss  # noqa: E402


def pairwise_hinge_loss(scores, labels=None, groups=None, *, margin=1.0, squared=False,
                        pairs=None, weights=None, mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.PairwiseHingeLoss`:
    ``Σ_pairs c_ij max(0, margin − (s_i − s_j))`` (squared with ``squared=True``)."""
    return _PairwiseHingeLoss(margin=margin, squared=squared, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


def qbrank_loss(scores, labels=None, groups=None, *, w=0.5, tau=1.0, c=1.0, pairs=None,
                weights=None, mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.QBRankLoss`:
    ``w/2 Σ_pairs max(0, s_lo − s_hi + τ)² + (1 − w)/2 Σ_docs (l − s)²``."""
    return _QBRankLoss(w=w, tau=tau, c=c, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


# --- pointwise ---
from .losses.pointwise import SquaredErrorLoss as _SquaredErrorLoss  # noqa: E402


def squared_error_loss(scores, labels, groups=None, *, weights=None, mask=None,
                       reduction="sum"):
    """Functional :class:`~torchrankboost.losses.SquaredErrorLoss`: ``½ Σ_docs (l − s)²``."""
    return _SquaredErrorLoss(reduction=reduction)(scores, labels, groups, weights=weights,
                                                  mask=mask)


# --- listwise and RankNet ---
from .losses.listwise import (  # noqa: E402
    ListMLELoss as _ListMLELoss,
    ListNetLoss as _ListNetLoss,
    RankNetLoss as _RankNetLoss,
)


def listnet_loss(scores, labels, groups=None, *, targets="softmax", mask=None,
                 reduction="sum"):
    """Functional :class:`~torchrankboost.losses.ListNetLoss`: per query, the cross-entropy
    ``−Σ_i P_y(i) log softmax(s)_i`` of the labels' and the scores' top-one probabilities
    (listwise: no pairs, no weights)."""
    return _ListNetLoss(targets=targets, reduction=reduction)(scores, labels, groups, mask=mask)


def listmle_loss(scores, labels, groups=None, *, mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.ListMLELoss`: the negative Plackett-Luce
    log-likelihood of the label order (listwise: no pairs, no weights)."""
    return _ListMLELoss(reduction=reduction)(scores, labels, groups, mask=mask)


def ranknet_loss(scores, labels=None, groups=None, *, sigma=1.0, block_pairs=1 << 20,
                 pairs=None, weights=None, mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.RankNetLoss`:
    ``Σ_pairs c_ij log(1 + exp(−σ (s_i − s_j)))``."""
    return _RankNetLoss(sigma=sigma, block_pairs=block_pairs, reduction=reduction)(
        scores, labels, groups, pairs=pairs, weights=weights, mask=mask)


# --- YetiRank ---
from .losses.yetirank import YetiRankLoss as _YetiRankLoss  # noqa: E402


def yetirank_loss(scores, labels, groups=None, *, num_permutations=10, decay=0.85,
                  noise="logistic", noise_power=1.0, seed=0, weights=None, mask=None,
                  reduction="sum"):
    """Functional :class:`~torchrankboost.losses.YetiRankLoss` (one draw from ``seed``):
    ``Σ_pairs c_wl log(1 + exp(−(s_w − s_l)))``, ``c`` from the perturbed orderings."""
    return _YetiRankLoss(num_permutations=num_permutations, decay=decay, noise=noise,
                         noise_power=noise_power, seed=seed, reduction=reduction)(
        scores, labels, groups, weights=weights, mask=mask)


from .losses.approx import ApproxNDCGLoss as _ApproxNDCGLoss  # noqa: E402
from .losses.approx import NeuralNDCGLoss as _NeuralNDCGLoss  # noqa: E402


def approx_ndcg_loss(scores, labels, groups=None, *, alpha=1.0, block_pairs=1 << 20,
                     mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.approx.ApproxNDCGLoss`: minus NDCG at
    sigmoid-smoothed ranks (listwise: no pairs, no weights)."""
    return _ApproxNDCGLoss(alpha=alpha, block_pairs=block_pairs, reduction=reduction)(
        scores, labels, groups, mask=mask)


def neural_ndcg_loss(scores, labels, groups=None, *, temperature=1.0,
                     powered_relevancies=True, k=None, n_iter=50, tol=1e-6,
                     max_bytes=2 << 30, mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.approx.NeuralNDCGLoss`: minus NDCG@k under
    the Sinkhorn-scaled NeuralSort matrix (listwise: no pairs, no weights)."""
    return _NeuralNDCGLoss(temperature=temperature, powered_relevancies=powered_relevancies,
                           k=k, n_iter=n_iter, tol=tol, max_bytes=max_bytes,
                           reduction=reduction)(scores, labels, groups, mask=mask)


#: every exported loss class (by name) → its functional twin
TWINS = {
    "ExponentialPairwiseLoss": exponential_pairwise_loss, "PNormPushLoss": pnorm_push_loss,
    "AdaBoostLoss": adaboost_loss, "SmoothMarginLoss": smooth_margin_loss,
    "PairwiseHingeLoss": pairwise_hinge_loss, "QBRankLoss": qbrank_loss,
    "SquaredErrorLoss": squared_error_loss, "ListNetLoss": listnet_loss,
    "ListMLELoss": listmle_loss, "RankNetLoss": ranknet_loss, "YetiRankLoss": yetirank_loss,
    "ApproxNDCGLoss": approx_ndcg_loss, "NeuralNDCGLoss": neural_ndcg_loss,
}


# --- metric-weighted pairwise losses ---
from .losses.lambda_loss import LambdaLoss as _LambdaLoss  # noqa: E402
from .losses.lambdarank_exp import LambdaRankExpLoss as _LambdaRankExpLoss  # noqa: E402


def lambda_loss(scores, labels, groups=None, *, scheme="ndcgLoss2++", sigma=1.0, mu=10.0,
                k=None, log="binary", block_pairs=1 << 20, weights=None, mask=None,
                reduction="sum"):
    """Functional :class:`~torchrankboost.losses.LambdaLoss` (allRank's ``lambdaLoss``):
    ``Σ_pairs ρ_ij · −log σ(σ (s_i − s_j))`` with the scheme's weights at the current
    ranks."""
    return _LambdaLoss(scheme=scheme, sigma=sigma, mu=mu, k=k, log=log,
                       block_pairs=block_pairs, reduction=reduction)(
        scores, labels, groups, weights=weights, mask=mask)


def lambdarank_exp_loss(scores, labels, groups=None, *, sigma=1.0, normalize=True,
                        weights=None, mask=None, reduction="sum"):
    """Functional :class:`~torchrankboost.losses.LambdaRankExpLoss`:
    ``Σ_{y_i > y_j} |ΔG| |ΔD| e^{−σ (s_i − s_j)} / Z`` over all pairs, O(n log n)."""
    return _LambdaRankExpLoss(sigma=sigma, normalize=normalize, reduction=reduction)(
        scores, labels, groups, weights=weights, mask=mask)


TWINS.update({"LambdaLoss": lambda_loss, "LambdaRankExpLoss": lambdarank_exp_loss})
