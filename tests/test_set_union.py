"""Tests of flower_topics.privacy.set_union (DP set union, Gopi et al. 2020, count policy, per-party)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import integrate
from scipy.stats import norm

from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.privacy.set_union import (analytic_gaussian_delta, analytic_gaussian_sigma, bound_contributions,
                                             calibrate, merge_releases, private_histogram, privacy_summary,
                                             release_vocabulary, secret_rng, single_document_release_probability)

# --------------------------------------------------------------------------------------------
# (a) contribution bounding
# --------------------------------------------------------------------------------------------


def _disjoint_docs(n_docs: int, rng: np.random.Generator, width: int = 100) -> list[np.ndarray]:
    """Document i uses words in [i*width, (i+1)*width) only, with repeats, so the histogram shows each document."""
    docs = []
    for i in range(n_docs):
        length = int(rng.integers(0, 40))
        docs.append(i * width + rng.integers(0, 25, size=length))
    return docs


@pytest.mark.parametrize("delta0", [1, 3, 10, 30])
def test_each_document_contributes_at_most_delta0_distinct_words_once(delta0):
    rng = np.random.default_rng(1)
    docs = _disjoint_docs(300, rng)
    ids, counts = bound_contributions(docs, delta0, np.random.default_rng(2))
    assert np.all(counts == 1)  # a word of one document only: counted once, however often it occurs
    assert np.all(np.diff(ids) > 0)
    owner = ids // 100
    per_doc = np.bincount(owner, minlength=len(docs))
    distinct = np.array([np.unique(d).size for d in docs])
    np.testing.assert_array_equal(per_doc, np.minimum(distinct, delta0))
    for i, d in enumerate(docs):  # contributed words are words of the document
        assert set(ids[owner == i]).issubset(set(d.tolist()))


def test_csr_and_list_inputs_agree_and_values_are_ignored():
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60, size=int(rng.integers(0, 50))) for _ in range(200)]
    lengths = [d.size for d in docs]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    data = rng.integers(1, 5, size=indptr[-1]).astype(float)
    m = sp.csr_matrix((data, np.concatenate(docs), indptr), shape=(200, 60))  # non-canonical (duplicates)
    a = bound_contributions(docs, 7, np.random.default_rng(9))
    b = bound_contributions(m, 7, np.random.default_rng(9))
    c = bound_contributions(m.tocoo(), 7, np.random.default_rng(9))
    for x in (b, c):
        np.testing.assert_array_equal(a[0], x[0])
        np.testing.assert_array_equal(a[1], x[1])
    # explicit zeros are absent words
    z = sp.csr_matrix((np.array([0.0, 1.0, 2.0]), np.array([0, 1, 2]), np.array([0, 3])), shape=(1, 3))
    ids, counts = bound_contributions(z, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(ids, [1, 2])
    np.testing.assert_array_equal(counts, [1, 1])


def test_selection_is_uniform_among_distinct_words():
    """One document (10 distinct words, repeats) 30,000 times: each word kept w.p. Delta_0 / 10 per copy."""
    doc = np.array([0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9])
    n, delta0 = 30_000, 3
    _, counts = bound_contributions([doc] * n, delta0, np.random.default_rng(5))
    assert counts.sum() == n * delta0
    expected = n * delta0 / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 35.0  # chi-square with 9 dof: P(> 35) ~ 6e-5


def test_rng_must_be_a_generator():
    with pytest.raises(TypeError):
        bound_contributions([np.array([1, 2])], 1, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        private_histogram(np.array([1]), np.array([1]), 1.0, 1.0, "gaussian", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        bound_contributions([np.array([1, 2])], 0, np.random.default_rng())
    assert isinstance(secret_rng(), np.random.Generator)


def test_empty_inputs():
    ids, counts = bound_contributions([], 3, np.random.default_rng(0))
    assert ids.size == 0 and counts.size == 0
    ids, counts = bound_contributions([np.array([], dtype=int)], 3, np.random.default_rng(0))
    assert ids.size == 0
    r = private_histogram(ids, counts, 1.0, 2.0, "laplace", np.random.default_rng(0))
    assert r[0].size == 0 and r[1].size == 0


# --------------------------------------------------------------------------------------------
# (b) calibration
# --------------------------------------------------------------------------------------------

#: Noise multipliers (sigma / sensitivity) from dp_accounting 0.6.0:
#: mechanism_calibration.calibrate_dp_mechanism(PLDAccountant, GaussianDpEvent, eps, delta/2, tol=1e-9).
DP_ACCOUNTING_PLD_MULTIPLIERS = {(1.0, 1e-5): 3.884140804629103, (0.5, 1e-6): 8.348320409333922,
                                 (3.0, 1e-3): 1.0954983144455277}


def _delta_by_integration(sigma: float, eps: float, sens: float) -> float:
    """Privacy profile by numerical integration: E_{x ~ N(sens, sigma^2)} [(1 - e^{eps - L(x)})_+]."""
    def integrand(x: float) -> float:
        loss = (sens * x - sens**2 / 2.0) / sigma**2  # log N(x; sens, s)/N(x; 0, s)
        return norm.pdf(x, loc=sens, scale=sigma) * max(0.0, 1.0 - math.exp(eps - loss))
    x0 = eps * sigma**2 / sens + sens / 2.0  # loss = eps here
    return integrate.quad(integrand, x0, x0 + 40 * sigma, epsabs=1e-15, epsrel=1e-10, limit=200)[0]


@pytest.mark.parametrize("eps,delta", sorted(DP_ACCOUNTING_PLD_MULTIPLIERS))
def test_gaussian_sigma_reproduces_dp_accounting_and_is_minimal(eps, delta):
    for delta0 in (1, 10, 50):
        sigma, _ = calibrate(eps, delta, delta0, "gaussian")
        mult = sigma / math.sqrt(delta0)
        assert mult == pytest.approx(DP_ACCOUNTING_PLD_MULTIPLIERS[(eps, delta)], rel=1e-8)
        assert analytic_gaussian_delta(sigma, eps, math.sqrt(delta0)) <= delta / 2
        assert _delta_by_integration(sigma, eps, math.sqrt(delta0)) == pytest.approx(delta / 2, rel=1e-6)
        assert _delta_by_integration(sigma * 0.999, eps, math.sqrt(delta0)) > delta / 2


def test_gaussian_sigma_against_installed_dp_accounting():
    import dp_accounting  # a test dependency (pyproject [test])
    from dp_accounting.pld import privacy_loss_mechanism as plm
    for eps, delta, delta0 in [(1.0, 1e-5, 10), (0.3, 1e-7, 3), (5.0, 1e-4, 100)]:
        sigma, _ = calibrate(eps, delta, delta0, "gaussian")
        pl = plm.GaussianPrivacyLoss(standard_deviation=sigma, sensitivity=math.sqrt(delta0))
        assert pl.get_delta_for_epsilon(eps) == pytest.approx(delta / 2, rel=1e-6)
        pl_small = plm.GaussianPrivacyLoss(standard_deviation=sigma * 0.999, sensitivity=math.sqrt(delta0))
        assert pl_small.get_delta_for_epsilon(eps) > delta / 2
    assert dp_accounting is not None


def test_threshold_formulas():
    eps, delta, d0 = 1.0, 1e-5, 10
    sigma, rho = calibrate(eps, delta, d0, "gaussian")
    assert sigma == pytest.approx(analytic_gaussian_sigma(eps, delta / 2, math.sqrt(d0)))
    assert rho == pytest.approx(1 + sigma * norm.ppf((1 - delta / 2) ** (1 / d0)), rel=1e-9)
    b, rho_l = calibrate(eps, delta, d0, "laplace")
    assert b == d0 / eps
    assert rho_l == pytest.approx(1 + (d0 / eps) * math.log(1 / (2 * (1 - (1 - delta) ** (1 / d0)))), rel=1e-9)
    with pytest.raises(ValueError):
        calibrate(0.0, delta, d0)
    with pytest.raises(ValueError):
        calibrate(eps, 0.0, d0)
    with pytest.raises(ValueError):
        calibrate(eps, delta, d0, "uniform")  # type: ignore[arg-type]


# ---- statistical audit of (eps, delta)-DP on neighbouring datasets --------------------------

EPS, DELTA, D0 = 1.0, 0.02, 4
REPLICAS = 400_000
Z = 4.5  # one-sided margin in standard errors (fixed seeds; many events)


def _simulate(hist: dict[int, int], vocab: list[int], scale: float, threshold: float, noise: str,
              seed: int) -> np.ndarray:
    """REPLICAS independent runs of private_histogram (one call on REPLICAS disjoint copies of ``hist``).

    Returns the released noisy counts, shape (REPLICAS, len(vocab)), NaN where not released.
    """
    v = len(vocab)
    col = {w: j for j, w in enumerate(vocab)}
    base_ids = np.array([col[w] for w in hist], dtype=np.int64)
    base_counts = np.array(list(hist.values()), dtype=np.int64)
    offsets = (np.arange(REPLICAS, dtype=np.int64) * v)[:, None]
    ids = (offsets + base_ids[None, :]).ravel()
    counts = np.tile(base_counts, REPLICAS)
    rel_ids, noisy = private_histogram(ids, counts, scale, threshold, noise, np.random.default_rng(seed))  # type: ignore[arg-type]
    out = np.full(REPLICAS * v, np.nan)
    out[rel_ids] = noisy
    return out.reshape(REPLICAS, v)


def _events(out: np.ndarray, shared: list[int], new: list[int], grid: np.ndarray) -> np.ndarray:
    """Indicators of output events, shape (REPLICAS, n_events)."""
    released = ~np.isnan(out)
    vals = np.nan_to_num(out, nan=0.0)
    ev = []
    any_new = released[:, new].any(axis=1) if new else np.zeros(out.shape[0], dtype=bool)
    ev.append(any_new)
    ev.append(~any_new)
    if shared:
        s = vals[:, shared].sum(axis=1)  # the likelihood-ratio direction of the Gaussian part
        for c in grid:
            ev.append(s > c)
            ev.append((s > c) | any_new)
            ev.append((s <= c) & ~any_new)
        for j in shared:  # noisy count of one word in a bin (or not released)
            ev.append(~released[:, j])
            edges = np.quantile(vals[released[:, j], j], np.linspace(0, 1, 11)) if released[:, j].any() else []
            for lo, hi in zip(edges[:-1], edges[1:]):
                ev.append(released[:, j] & (vals[:, j] >= lo) & (vals[:, j] < hi))
    return np.stack(ev, axis=1)


def _audit(scale: float, threshold: float, noise: str, d_hist: dict[int, int], doc: list[int],
           seed: int = 0) -> float:
    """Largest ``(P[A(X) in S] - e^eps P[A(Y) in S]) - margin`` over events and both orders of (D, D + doc)."""
    d2_hist = dict(d_hist)
    for w in doc:
        d2_hist[w] = d2_hist.get(w, 0) + 1
    vocab = sorted(d2_hist)
    col = {w: j for j, w in enumerate(vocab)}
    shared = [col[w] for w in doc if w in d_hist]
    new = [col[w] for w in doc if w not in d_hist]
    out_d = _simulate(d_hist, vocab, scale, threshold, noise, seed)
    out_d2 = _simulate(d2_hist, vocab, scale, threshold, noise, seed + 1)
    both = np.concatenate([np.nan_to_num(out_d), np.nan_to_num(out_d2)])
    s_all = both[:, shared].sum(axis=1) if shared else np.zeros(1)
    grid = np.quantile(s_all, np.linspace(0.001, 0.999, 60))
    p = _events(out_d, shared, new, grid).mean(axis=0)
    q = _events(out_d2, shared, new, grid).mean(axis=0)
    worst = -np.inf
    for a, b in ((p, q), (q, p)):
        margin = Z * np.sqrt((a * (1 - a) + math.exp(2 * EPS) * b * (1 - b)) / REPLICAS)
        worst = max(worst, float(np.max(a - math.exp(EPS) * b - margin)))
    return worst


# the party's other documents: some words frequent, some rare (near the threshold)
D_HIST = {10: 60, 11: 45, 12: 30, 13: 3, 14: 1, 15: 2, 16: 80, 17: 70}
NEIGHBOUR_DOCS = {
    "all shared (tight Gaussian part)": [10, 11, 16, 17],
    "shared and rare shared and new": [12, 14, 100, 101],
    "all new (tight threshold part)": [100, 101, 102, 103],
}


#: Where the audit must come close to the budget (it has power): the noise's share of delta
#: (Gaussian: delta/2 on each part) or all of it (Laplace threshold). Excess is net of the margin.
TIGHT = {("gaussian", "all shared (tight Gaussian part)"): DELTA / 2,
         ("gaussian", "all new (tight threshold part)"): DELTA / 2,
         ("laplace", "all new (tight threshold part)"): DELTA}


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
@pytest.mark.parametrize("case", sorted(NEIGHBOUR_DOCS))
def test_statistical_audit_calibrated_mechanism_is_dp(noise, case):
    scale, threshold = calibrate(EPS, DELTA, D0, noise)  # type: ignore[arg-type]
    excess = _audit(scale, threshold, noise, D_HIST, NEIGHBOUR_DOCS[case])
    assert excess <= DELTA, f"{noise}/{case}: P[A(D) in S] - e^eps P[A(D') in S] exceeds delta by {excess - DELTA}"
    if (noise, case) in TIGHT:
        assert excess > TIGHT[(noise, case)] - 0.005


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_statistical_audit_rejects_threshold_one(noise):
    scale, _ = calibrate(EPS, DELTA, D0, noise)  # type: ignore[arg-type]
    excess = _audit(scale, 1.0, noise, D_HIST, NEIGHBOUR_DOCS["all new (tight threshold part)"])
    assert excess > DELTA + 0.5  # a new word is released about half of the time


def test_statistical_audit_rejects_single_word_threshold():
    """``rho = 1 + sigma Phi^{-1}(1 - delta/2)`` covers one new word, not Delta_0 of them (~Delta_0 delta/2)."""
    sigma, _ = calibrate(EPS, DELTA, D0, "gaussian")
    rho_single = 1 + sigma * norm.isf(DELTA / 2)
    excess = _audit(sigma, rho_single, "gaussian", D_HIST, NEIGHBOUR_DOCS["all new (tight threshold part)"])
    assert excess > DELTA + 0.005  # 1 - (1 - delta/2)^4 ~ 0.039 > 0.02


def test_statistical_audit_rejects_too_little_noise():
    """20% less Gaussian noise than the analytic sigma already fails the audit."""
    sigma, rho = calibrate(EPS, DELTA, D0, "gaussian")
    excess = _audit(0.8 * sigma, rho, "gaussian", D_HIST, NEIGHBOUR_DOCS["all shared (tight Gaussian part)"])
    assert excess > DELTA


# --------------------------------------------------------------------------------------------
# (c) a word held by a single document
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
@pytest.mark.parametrize("delta0", [1, 4, 20])
def test_single_document_word_released_with_probability_at_most_bound(noise, delta0):
    delta, n = 0.02, 2_000_000
    scale, rho = calibrate(1.0, delta, delta0, noise)
    ids, _ = private_histogram(np.arange(n), np.ones(n, dtype=np.int64), scale, rho, noise, np.random.default_rng(11))
    rate = ids.size / n
    p = single_document_release_probability(delta, delta0, noise)
    assert p == pytest.approx(-math.expm1(math.log1p(-(delta / 2 if noise == "gaussian" else delta)) / delta0))
    se = math.sqrt(p * (1 - p) / n)
    assert abs(rate - p) < 5 * se  # the threshold is exact, not just a bound
    assert rate <= (delta / 2 if noise == "gaussian" else delta) + 5 * se
    if noise == "gaussian":
        assert p <= delta / 2


# --------------------------------------------------------------------------------------------
# server side, report, trade-off
# --------------------------------------------------------------------------------------------


def test_merge_and_report():
    ids, vals = merge_releases([(np.array([3, 1]), np.array([10.0, 5.0])), (np.array([1, 7]), np.array([2.5, 1.0]))])
    np.testing.assert_array_equal(ids, [1, 3, 7])
    np.testing.assert_allclose(vals, [7.5, 10.0, 1.0])
    report = PrivacyReport(**privacy_summary(1.0, 1e-5, 10, "gaussian"))
    d = report.to_dict()
    assert d["unit"] == "document" and d["epsilon"] == 1.0 and d["delta"] == 1e-5
    assert d["set_union_threshold"] == pytest.approx(calibrate(1.0, 1e-5, 10)[1])
    assert "Balle" in d["accountant"]
    assert PrivacyReport(**privacy_summary(1.0, 1e-5, 10, "laplace")).to_dict()["set_union_noise"] == "laplace"


def test_thin_words_are_lost_by_per_party_thresholds():
    """A word in 5 documents of each of 20 parties (100 in all) clears rho centrally, not in any party."""
    eps, delta, d0 = 1.0, 1e-5, 5
    _, rho = calibrate(eps, delta, d0)
    assert 5 < rho < 100  # ~42.3
    rng = np.random.default_rng(0)
    docs = [np.array([0, k]) for k in range(1, 6)]
    releases = [release_vocabulary(docs, eps, delta, d0, rng) for _ in range(20)]
    ids, _ = merge_releases(releases)
    assert 0 not in ids


# --------------------------------------------------------------------------------------------
# (d) speed
# --------------------------------------------------------------------------------------------


def test_vectorized_speed_100k_documents_of_100_words():
    rng = np.random.default_rng(0)
    n, length, vocab = 100_000, 100, 50_000
    words = rng.integers(0, vocab, size=n * length)
    m = sp.csr_matrix((np.ones(n * length), words, np.arange(0, n * length + 1, length)), shape=(n, vocab))
    docs = np.split(words, n)
    scale, rho = calibrate(1.0, 1e-5, 20)
    for x in (m, docs):
        t0 = time.perf_counter()
        ids, counts = bound_contributions(x, 20, np.random.default_rng(1))
        released = private_histogram(ids, counts, scale, rho, "gaussian", np.random.default_rng(2))
        elapsed = time.perf_counter() - t0
        assert counts.sum() == n * 20  # every document has > 20 distinct words
        assert released[0].size > 0
        assert elapsed < 6.0, f"{type(x).__name__}: {elapsed:.2f}s"
