"""Empirical privacy audit: membership-inference scores, ROC, and the epsilon they imply.

A trained model's privacy report states what its mechanism guarantees; this module
measures what an attacker can actually do. Given membership trials (one score per
(model, document) pair, higher = "more likely a member") and the truth, it gives

- the ROC curve, its AUC with a bootstrap interval (:func:`auc_interval`) and the true
  positive rate at a fixed false positive rate (:func:`tpr_at_fpr`);
- the empirical epsilon lower bound those rates imply (:func:`epsilon_lower_bound`):
  any (eps, delta)-DP training run satisfies ``TPR <= exp(eps) FPR + delta`` and
  ``1 - FPR <= exp(eps) (1 - TPR) + delta`` for every test, so a test with measured rates
  bounds eps from below (Jagielski, Ullman and Oprea 2020; Nasr et al. 2021). Rates are
  replaced by their Clopper-Pearson bounds so that the bound holds with the stated
  confidence (:func:`clopper_pearson`).

Two attacks on topic models produce the scores:

- the likelihood-threshold attack (:func:`log_likelihood_scores`): a document's
  per-token log-likelihood under the model, theta folded in on the whole document;
- LiRA (Carlini et al. 2022, "Membership inference attacks from first principles"),
  as Manzonelli, Zhang and Vadhan 2024 (arXiv 2403.04451) apply it to LDA
  (:func:`lira_scores`): per document, Gaussians fitted to its score under shadow models
  trained with (IN) and without (OUT) it; the score is the log likelihood ratio (online)
  or the one-sided OUT tail (offline).

The attacker's randomness here (bootstrap, threshold selection) is the auditor's own and
public; it never touches a mechanism's noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from scipy import stats
from sklearn.metrics import roc_auc_score, roc_curve

from flower_topics.metrics.inference import check_topic_word, fold_in

#: Floor of p(w | theta, phi) in :func:`log_likelihood_scores` (a post-processed model may have zero cells).
MIN_PROBABILITY = 1e-12


def _trials(scores: np.ndarray | Sequence[float], members: np.ndarray | Sequence[bool]
            ) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    m = np.asarray(members).ravel()
    if s.shape != m.shape:
        raise ValueError(f"scores ({s.size}) and members ({m.size}) must have the same number of trials")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    m = m.astype(bool)
    if m.all() or not m.any():
        raise ValueError("need at least one member and one non-member trial")
    return s, m


def clopper_pearson(successes: np.ndarray | int, trials: np.ndarray | int, confidence: float = 0.95
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper-Pearson) two-sided interval of a binomial proportion.

    The same interval as ``scipy.stats.binomtest(k, n).proportion_ci(confidence, method='exact')``,
    vectorized over arrays of counts.

    Parameters
    ----------
    successes : int or np.ndarray
        Number of successes ``k`` (``0 <= k <= n``).
    trials : int or np.ndarray
        Number of trials ``n >= 1`` (broadcast against ``successes``).
    confidence : float, default 0.95
        Two-sided confidence level in (0, 1).

    Returns
    -------
    lower, upper : np.ndarray
        The interval ends (0 when ``k = 0``, 1 when ``k = n``).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= successes <= trials and trials >= 1")
    tail = (1 - confidence) / 2
    with np.errstate(invalid="ignore"):
        lower = np.where(k > 0, stats.beta.ppf(tail, k, n - k + 1), 0.0)
        upper = np.where(k < n, stats.beta.ppf(1 - tail, k + 1, n - k), 1.0)
    return lower, upper


def tpr_at_fpr(scores: np.ndarray | Sequence[float], members: np.ndarray | Sequence[bool], fpr: float) -> float:
    """The largest true positive rate of a threshold test whose false positive rate is at most ``fpr``.

    Parameters
    ----------
    scores : array-like
        One score per trial, higher = more likely a member.
    members : array-like of bool
        Whether each trial's document was a member.
    fpr : float
        False positive rate allowed, in [0, 1].

    Returns
    -------
    float
        ``max {TPR(t) : FPR(t) <= fpr}`` over thresholds ``t`` (``predict member if score >= t``).
    """
    if not 0 <= fpr <= 1:
        raise ValueError(f"fpr must lie in [0, 1], got {fpr}")
    s, m = _trials(scores, members)
    false_pos, true_pos, _ = roc_curve(m, s, drop_intermediate=False)
    return float(true_pos[false_pos <= fpr].max())


def auc_interval(scores: np.ndarray | Sequence[float], members: np.ndarray | Sequence[bool], *,
                 groups: np.ndarray | Sequence[int] | None = None, n_boot: int = 1000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """ROC AUC with a percentile bootstrap interval.

    Parameters
    ----------
    scores, members : array-like
        One score and the truth per trial.
    groups : array-like of int, optional
        A cluster id per trial (e.g. the document: LiRA scores every document under many
        models). Resampling then draws whole clusters, which keeps the interval honest
        when a cluster's trials are correlated; without it trials are resampled.
    n_boot : int, default 1000
        Bootstrap replicates.
    confidence : float, default 0.95
        Interval level.
    seed : int, default 0
        Seed of the auditor's resampling.

    Returns
    -------
    auc, lower, upper : float
    """
    s, m = _trials(scores, members)
    if n_boot < 1:
        raise ValueError("n_boot must be >= 1")
    auc = float(roc_auc_score(m, s))
    rng = np.random.default_rng(seed)
    if groups is None:
        cluster = np.arange(s.size)
    else:
        cluster = np.unique(np.asarray(groups).ravel(), return_inverse=True)[1].ravel()
        if cluster.size != s.size:
            raise ValueError("groups must have one id per trial")
    n_clusters = int(cluster.max()) + 1
    level = np.unique(s, return_inverse=True)[1].ravel()  # tied scores share a level
    values = []
    for _ in range(n_boot):  # a replicate weights each trial by how often its cluster was drawn
        weight = np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)[cluster]
        value = _weighted_auc(level, m, weight)
        if np.isfinite(value):
            values.append(value)
    tail = (1 - confidence) / 2
    lower, upper = np.quantile(values, [tail, 1 - tail])
    return auc, float(lower), float(upper)


def _weighted_auc(level: np.ndarray, members: np.ndarray, weight: np.ndarray) -> float:
    """Mann-Whitney AUC with trial weights (ties count 1/2): ``level`` ranks the scores, ties equal."""
    n_levels = int(level.max()) + 1
    pos = np.bincount(level, weights=weight * members, minlength=n_levels)
    neg = np.bincount(level, weights=weight * ~members, minlength=n_levels)
    total = pos.sum() * neg.sum()
    if total <= 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float(np.dot(pos, below + 0.5 * neg) / total)


@dataclass(frozen=True)
class EpsilonBound:
    """Outcome of :func:`epsilon_lower_bound`.

    Parameters
    ----------
    lower : float
        The empirical lower bound on epsilon at the stated confidence (0 when the rates give
        no evidence): ``log((TPR_lo - delta) / FPR_hi)`` for a test in the ``members``
        direction, ``log((1 - FPR_hi - delta) / (1 - TPR_lo))`` in the ``non-members`` one,
        with Clopper-Pearson bounds on the evaluation trials.
    estimate : float
        The same expression with the measured rates (the point estimate at that test).
    upper : float
        The expression with the opposite interval ends (``inf`` when a bound rate is 0).
    threshold : float
        The chosen score threshold (member if ``score >= threshold``).
    direction : str
        ``"members"`` (``TPR <= e^eps FPR + delta``) or ``"non-members"``
        (``TNR <= e^eps FNR + delta``).
    tpr, fpr : float
        Measured rates of the chosen test on the evaluation trials.
    n_members, n_nonmembers : int
        Evaluation trials.
    delta : float
        The delta the bound is for.
    confidence : float
        Confidence of each Clopper-Pearson interval.
    """

    lower: float
    estimate: float
    upper: float
    threshold: float
    direction: str
    tpr: float
    fpr: float
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float


def _log_ratio(numerator: np.ndarray, denominator: np.ndarray, delta: float) -> np.ndarray:
    """``log((numerator - delta) / denominator)``, ``-inf`` without evidence, ``inf`` over a zero rate."""
    num = np.asarray(numerator, dtype=np.float64) - delta
    den = np.asarray(denominator, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(num) - np.log(den)
    return np.where(num <= 0, -np.inf, np.where(den <= 0, np.inf, out))


def _rates(s: np.ndarray, m: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """True and false positive counts of ``score >= t`` for each threshold ``t``."""
    pos, neg = np.sort(s[m]), np.sort(s[~m])
    tp = pos.size - np.searchsorted(pos, thresholds, side="left")
    fp = neg.size - np.searchsorted(neg, thresholds, side="left")
    return tp, fp, pos.size, neg.size


def _bounds(tp: np.ndarray, fp: np.ndarray, n_pos: int, n_neg: int, delta: float, confidence: float
            ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per direction: (lower, estimate, upper) of the epsilon each test implies."""
    tpr_lo, tpr_hi = clopper_pearson(tp, n_pos, confidence)
    fpr_lo, fpr_hi = clopper_pearson(fp, n_neg, confidence)
    tpr, fpr = tp / n_pos, fp / n_neg
    return {
        "members": (_log_ratio(tpr_lo, fpr_hi, delta), _log_ratio(tpr, fpr, delta), _log_ratio(tpr_hi, fpr_lo, delta)),
        "non-members": (_log_ratio(1 - fpr_hi, 1 - tpr_lo, delta), _log_ratio(1 - fpr, 1 - tpr, delta),
                        _log_ratio(1 - fpr_lo, 1 - tpr_hi, delta)),
    }


def _candidate_thresholds(scores: np.ndarray, tail: int = 1000, middle: int = 2000) -> np.ndarray:
    """Thresholds to try: every distinct score in each tail (where small rates live), quantiles between."""
    values = np.unique(scores)
    if values.size <= 2 * tail + middle:
        return values
    return np.unique(np.concatenate([values[:tail], values[-tail:],
                                     np.quantile(values, np.linspace(0, 1, middle), method="nearest")]))


def epsilon_lower_bound(scores: np.ndarray | Sequence[float], members: np.ndarray | Sequence[bool], *,
                        delta: float = 1e-5, confidence: float = 0.95, select_fraction: float = 0.5,
                        seed: int = 0) -> EpsilonBound:
    """The empirical epsilon lower bound a membership attack's rates imply.

    Every threshold test ``score >= t`` of an (eps, delta)-DP mechanism's output satisfies
    ``TPR <= e^eps FPR + delta`` and ``1 - FPR <= e^eps (1 - TPR) + delta``, so

    ``eps >= log((TPR_lo - delta) / FPR_hi)``  and  ``eps >= log((1 - FPR_hi - delta) / (1 - TPR_lo))``

    with ``TPR_lo``, ``FPR_hi`` the Clopper-Pearson bounds at ``confidence`` (each rate's
    two-sided interval; one-sided coverage ``(1 + confidence) / 2``). Choosing the best of
    many thresholds on the same trials would overstate the bound, so the test (threshold
    and direction) is chosen on a random ``select_fraction`` of the trials and the bound is
    computed on the others only. Candidate thresholds are every distinct score of the 1000
    lowest and highest, and 2000 quantiles between.

    Parameters
    ----------
    scores, members : array-like
        One score (higher = member) and the truth per trial.
    delta : float, default 1e-5
        The delta of the guarantee being audited, in [0, 1).
    confidence : float, default 0.95
        Level of each Clopper-Pearson interval.
    select_fraction : float, default 0.5
        Share of the trials used to choose the test, in [0, 1); 0 uses all trials for both
        (the maximum over thresholds, optimistic).
    seed : int, default 0
        Seed of the auditor's selection split.

    Returns
    -------
    EpsilonBound
        ``lower`` is the bound (clipped at 0: no evidence says eps >= 0 only).
    """
    s, m = _trials(scores, members)
    if not 0 <= delta < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta}")
    if not 0 <= select_fraction < 1:
        raise ValueError(f"select_fraction must lie in [0, 1), got {select_fraction}")
    if select_fraction > 0:
        rng = np.random.default_rng(seed)
        select = np.zeros(s.size, dtype=bool)
        for group in (np.flatnonzero(m), np.flatnonzero(~m)):  # stratified: both halves keep both classes
            chosen = rng.permutation(group)[: int(round(select_fraction * group.size))]
            select[chosen] = True
        if m[~select].all() or not m[~select].any() or m[select].all() or not m[select].any():
            raise ValueError("too few trials to split into a selection and an evaluation part")
    else:
        select = np.ones(s.size, dtype=bool)
    evaluate = ~select if select_fraction > 0 else select
    thresholds = _candidate_thresholds(s[select])
    tp, fp, n_pos, n_neg = _rates(s[select], m[select], thresholds)
    candidates = {name: lower for name, (lower, _, _) in _bounds(tp, fp, n_pos, n_neg, delta, confidence).items()}
    direction = max(candidates, key=lambda name: candidates[name].max())
    threshold = float(thresholds[int(np.argmax(candidates[direction]))])
    tp, fp, n_pos, n_neg = _rates(s[evaluate], m[evaluate], np.array([threshold]))
    lower, estimate, upper = (float(v[0]) for v in _bounds(tp, fp, n_pos, n_neg, delta, confidence)[direction])
    return EpsilonBound(lower=max(lower, 0.0), estimate=max(estimate, 0.0), upper=max(upper, 0.0),
                        threshold=threshold, direction=direction, tpr=float(tp[0] / n_pos),
                        fpr=float(fp[0] / n_neg), n_members=int(n_pos), n_nonmembers=int(n_neg), delta=delta,
                        confidence=confidence)


def log_likelihood_scores(topic_word: np.ndarray, counts: sp.spmatrix, *, alpha: float = 0.01,
                          n_iter: int = 100) -> np.ndarray:
    """Per-token log-likelihood of each document under a model: the threshold attack's score.

    Theta is folded in on the whole document against the fixed ``topic_word`` (the EM of
    :func:`flower_topics.metrics.inference.fold_in`); the score is
    ``sum_w n_dw log p(w | theta_d, phi) / n_d`` with ``p`` floored at
    :data:`MIN_PROBABILITY`. A member, whose words the model was fitted to, tends to
    score higher.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix.
    counts : scipy.sparse matrix
        ``(D, V)`` document-term counts over the model's vocabulary (columns aligned).
    alpha : float, default 0.01
        Fold-in pseudo-count.
    n_iter : int, default 100
        Fold-in EM iterations.

    Returns
    -------
    np.ndarray
        ``(D,)`` scores; ``nan`` for an empty document.
    """
    counts = sp.csr_matrix(counts, dtype=np.float64)
    phi = check_topic_word(topic_word, counts.shape[1])
    counts.sum_duplicates()
    theta = fold_in(phi, counts, alpha=alpha, n_iter=n_iter)
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    p = np.einsum("nk,kn->n", theta[rows], phi[:, counts.indices])
    per_doc = np.bincount(rows, weights=counts.data * np.log(np.maximum(p, MIN_PROBABILITY)),
                          minlength=counts.shape[0])
    length = np.asarray(counts.sum(axis=1)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(length > 0, per_doc / length, np.nan)


def lira_scores(scores: np.ndarray, members: np.ndarray, *, online: bool = True, global_variance: bool = True,
                min_std: float = 1e-6, seed: int = 0) -> np.ndarray:
    """LiRA membership scores of every (model, document) trial, each model attacked with the others as shadows.

    ``scores[i, d]`` is document ``d``'s score under model ``i`` and ``members[i, d]`` whether
    ``d`` trained model ``i``. For target model ``i`` and document ``d``, the other models
    give the document's IN scores (those that trained on it) and OUT scores; Gaussians
    fitted to them give

    - online: ``log N(s; mu_in, sd_in) - log N(s; mu_out, sd_out)`` (Carlini et al. 2022, Alg. 1);
    - offline: ``log Phi((s - mu_out) / sd_out)``, the one-sided test against OUT only.

    Both sides are fitted to the same number of shadows, ``n = min(IN others, OUT others)``
    (the shadows kept on the larger side drawn at random, by ``seed``). Without this, leaving
    the target out makes its own side one shadow smaller (with a balanced assignment), and the
    statistic drifts with membership even when the models carry no signal at all (e.g. AUC
    0.46 instead of 0.5 with 8 models). With few shadow models a per-document variance is
    noisy; ``global_variance`` uses one variance per side pooled over all trials (Carlini et
    al.'s recommendation below about 64 shadows) while keeping per-document means.

    Parameters
    ----------
    scores : np.ndarray
        ``(M, D)`` scores (e.g. :func:`log_likelihood_scores` under each of ``M`` models), ``M >= 3``.
    members : np.ndarray
        ``(M, D)`` bool membership.
    online : bool, default True
        Online (IN and OUT) or offline (OUT only) variant.
    global_variance : bool, default True
        One pooled variance per side instead of one per trial.
    min_std : float, default 1e-6
        Floor of every fitted standard deviation.
    seed : int, default 0
        Seed of the auditor's choice of shadows on the larger side.

    Returns
    -------
    np.ndarray
        ``(M, D)`` LiRA scores, higher = more likely a member; ``nan`` where ``n`` is 0
        (below 2 without ``global_variance``).
    """
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(members, dtype=bool)
    if s.ndim != 2 or s.shape != m.shape or s.shape[0] < 3:
        raise ValueError("scores and members must both be (M, D) with M >= 3 models")
    n_models = s.shape[0]
    priority = np.random.default_rng(seed).random(s.shape)
    in_count = m.sum(axis=0)
    own = np.where(m, in_count, n_models - in_count) - 1  # shadows on the target's side
    other = np.where(m, n_models - in_count, in_count)  # shadows on the other side
    n = np.minimum(own, other)
    fitted = {}
    for side in (True, False):
        mask = m if side else ~m
        # within each document, this side's models first, in priority order: prefix sums give the
        # sums over its n highest-priority shadows
        order = np.argsort(np.where(mask, -priority, np.inf), axis=0, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.broadcast_to(np.arange(n_models)[:, None], s.shape), axis=0)
        sums = [np.vstack([np.zeros((1, s.shape[1])), np.cumsum(np.take_along_axis(np.where(mask, x, 0.0), order,
                                                                                   axis=0), axis=0)])
                for x in (s, s * s)]
        # target on this side: its n others of highest priority (skip the target itself)
        skip = mask & (rank < n)
        take = np.where(skip, n + 1, n)
        total, square = (np.take_along_axis(c, take, axis=0) - np.where(skip, x, 0.0) for c, x in zip(sums, (s, s * s)))
        mu = total / np.maximum(n, 1)
        var = np.maximum(square / np.maximum(n, 1) - mu * mu, 0.0) * n / np.maximum(n - 1, 1)
        if global_variance:
            valid = n >= 2
            pooled = np.average(var[valid], weights=(n - 1)[valid]) if valid.any() else 0.0
            var = np.full(s.shape, pooled)
        fitted[side] = (mu, np.maximum(np.sqrt(var), min_std))
    ok = n >= (1 if global_variance else 2)
    mu_out, sd_out = fitted[False]
    if online:
        mu_in, sd_in = fitted[True]
        value = stats.norm.logpdf(s, mu_in, sd_in) - stats.norm.logpdf(s, mu_out, sd_out)
    else:
        value = stats.norm.logcdf(s, mu_out, sd_out)
    return np.where(ok, value, np.nan)


__all__ = ["EpsilonBound", "MIN_PROBABILITY", "auc_interval", "clopper_pearson", "epsilon_lower_bound",
           "lira_scores", "log_likelihood_scores", "tpr_at_fpr"]
