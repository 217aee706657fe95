"""The FedLDA paper's baselines (Section 6): t-kRR (:class:`TruncatedKRR`), its pure eps-LDP
variant (:class:`TailToUniformKRR`) and Wang et al.'s hybrid mechanism (:class:`HM`) on
word ranks. Sampled frequencies against the exact output distributions, the set-level
privacy delta from the exact distributions, hand-computed distributions for V = 4, and
the Piecewise Mechanism's density ratio."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from scipy.stats import chi2

from flower_topics.privacy import HM, TailToUniformKRR, TruncatedKRR

DRAWS = 200_000
V = 30
ALPHA = 1e-6  # false-alarm probability of each goodness-of-fit check


def _zipf_prior(v: int = V, s: float = 1.1, seed: int = 0) -> np.ndarray:
    """A Zipf-like word marginal with the ranks shuffled over the word ids."""
    prior = np.random.default_rng(seed).permutation(np.arange(1, v + 1) ** -s)
    return prior / prior.sum()


def _fits(samples: np.ndarray, p: np.ndarray) -> bool:
    """Do the sampled words fit distribution ``p``?

    No sample may fall where ``p`` is 0; Pearson's chi-square over the cells with
    ``p > 0`` must stay below its ``1 - ALPHA`` quantile; and every cell's frequency
    must lie within 5 standard errors of ``p`` (each false alarm below 1e-6).
    """
    counts = np.bincount(samples, minlength=p.size)
    if counts[p == 0].any():
        return False
    support = p > 0
    expected = samples.size * p[support]
    stat = float(((counts[support] - expected) ** 2 / expected).sum())
    if support.sum() > 1 and stat > chi2.isf(ALPHA, int(support.sum()) - 1):
        return False
    se = np.sqrt(p * (1 - p) / samples.size)
    return bool(np.all(np.abs(counts / samples.size - p) <= 5 * se + 1e-12))


def _set_delta(mech, eps: float) -> np.ndarray:
    """``delta[w, w'] = sum_v max(0, P(v | w) - e^eps P(v | w'))`` from the exact distributions."""
    p = np.stack([mech.output_distribution(w) for w in range(np.asarray(mech.prior).size)])
    return np.maximum(0.0, p[:, None, :] - math.exp(eps) * p[None, :, :]).sum(axis=2)


def _cases():
    prior = _zipf_prior()
    tkrr = TruncatedKRR(2.0, 0.2, prior)
    domain = tkrr.domain
    tail = np.setdiff1d(np.arange(V), domain)
    for name, mech in (("tkrr", tkrr), ("tail_to_uniform", TailToUniformKRR(2.0, 0.2, prior))):
        # (input word, a different word whose distribution the samples must NOT fit)
        yield f"{name}-top", mech, int(domain[0]), int(domain[1])
        yield f"{name}-tail", mech, int(tail[0]), int(domain[0])
    for eps in (0.5, 2.0, 5.0):
        hm = HM(eps, prior)
        order = hm.order
        for rank in (0, 14, V - 1):
            other = rank + 3 if rank + 3 < V else rank - 3
            yield f"hm{eps}-rank{rank}", hm, int(order[rank]), int(order[other])


CASES = list(_cases())


@pytest.mark.parametrize("name, mech, word, other", CASES, ids=[c[0] for c in CASES])
def test_sampled_frequencies_match_exact_distribution(name, mech, word, other):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    samples = mech.perturb(np.full(DRAWS, word), rng)
    assert _fits(samples, mech.output_distribution(word))
    # the check has the power to reject a wrong distribution: another word's
    assert not _fits(samples, mech.output_distribution(other))


def test_truncated_krr_leaves_tail_words_of_a_mixed_batch_unchanged():
    prior = _zipf_prior()
    tkrr = TruncatedKRR(1.0, 0.2, prior)
    words = np.random.default_rng(3).integers(0, V, size=50_000)
    out = tkrr.perturb(words, np.random.default_rng(4))
    in_t = np.isin(words, tkrr.domain)
    assert np.array_equal(out[~in_t], words[~in_t]) and (~in_t).any()
    assert np.isin(out[in_t], tkrr.domain).all()
    changed = float(np.mean(out[in_t] != words[in_t]))
    assert abs(changed - tkrr.eta) <= 5 * math.sqrt(tkrr.eta * (1 - tkrr.eta) / in_t.sum())


@pytest.mark.parametrize("eps", [0.3, 0.61, 0.62, 2.0, 7.5])
def test_output_distributions_sum_to_one(eps):
    prior = _zipf_prior()
    for mech in (TruncatedKRR(eps, 0.1, prior), TailToUniformKRR(eps, 0.1, prior), HM(eps, prior)):
        p = np.stack([mech.output_distribution(w) for w in range(V)])
        assert np.all(p >= 0)
        assert np.allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("eps", [0.5, 2.0, 5.0, 7.5])
def test_hm_is_pure_eps_ldp_on_words(eps):
    hm = HM(eps, _zipf_prior())
    assert _set_delta(hm, eps).max() <= 1e-12
    assert _set_delta(hm, 0.8 * eps).max() > 1e-3  # the bound is tight enough to fail below eps


def test_truncated_krr_delta_is_zero_inside_t_and_one_for_the_tail():
    prior = _zipf_prior()
    tkrr = TruncatedKRR(2.0, 0.2, prior)
    domain = tkrr.domain
    tail = np.setdiff1d(np.arange(V), domain)
    assert tail.size >= 2 and prior[tail].sum() == pytest.approx(tkrr.tail_mass) and tkrr.tail_mass <= 0.2
    delta = _set_delta(tkrr, 2.0)
    assert delta[np.ix_(domain, domain)].max() <= 1e-12
    assert _set_delta(tkrr, 1.6)[np.ix_(domain, domain)].max() > 1e-3
    # A tail word is output as itself with probability 1, which no other input ever outputs
    # (and a word of T is never output as a tail word), so delta is exactly 1 in both
    # directions, and between two tail words.
    assert np.all(delta[np.ix_(tail, domain)] == 1.0)
    assert np.allclose(delta[np.ix_(domain, tail)], 1.0, rtol=0, atol=1e-12)
    off_diagonal = ~np.eye(tail.size, dtype=bool)
    assert np.all(delta[np.ix_(tail, tail)][off_diagonal] == 1.0)


def test_tail_to_uniform_krr_is_pure_eps_ldp_for_all_words():
    mech = TailToUniformKRR(2.0, 0.2, _zipf_prior())
    assert _set_delta(mech, 2.0).max() <= 1e-12
    assert _set_delta(mech, 1.6).max() > 1e-3


# V = 4 by hand. prior [0.05, 0.5, 0.15, 0.3]: sorted 0.5 (word 1), 0.3 (word 3), 0.15 (word 2)
# reach 0.95 >= 1 - 0.1, so T = {1, 3, 2} and the tail is {0}.
PRIOR4 = np.array([0.05, 0.5, 0.15, 0.3])


def test_truncated_krr_by_hand():
    tkrr = TruncatedKRR(1.0, 0.1, PRIOR4)
    keep, other = math.e / (math.e + 2), 1 / (math.e + 2)
    assert list(tkrr.domain) == [1, 3, 2]
    assert tkrr.eta == pytest.approx(2 / (math.e + 2), rel=1e-12)
    assert tkrr.tail_mass == pytest.approx(0.05, rel=1e-12)
    np.testing.assert_allclose(tkrr.output_distribution(1), [0, keep, other, other], rtol=1e-12, atol=0)
    np.testing.assert_allclose(tkrr.output_distribution(2), [0, other, keep, other], rtol=1e-12, atol=0)
    np.testing.assert_array_equal(tkrr.output_distribution(0), [1, 0, 0, 0])


def test_tail_to_uniform_krr_by_hand():
    mech = TailToUniformKRR(1.0, 0.1, PRIOR4)
    keep, other = math.e / (math.e + 2), 1 / (math.e + 2)
    np.testing.assert_allclose(mech.output_distribution(3), [0, other, other, keep], rtol=1e-12, atol=0)
    # tail word 0: uniform word of T, then kRR over T: uniform over T
    np.testing.assert_allclose(mech.output_distribution(0), [0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-12, atol=0)


def test_hm_by_hand():
    """prior [0.1, 0.4, 0.2, 0.3]: ranks word 1 -> 0, word 3 -> 1, word 2 -> 2, word 0 -> 3,
    t = -1, -1/3, 1/3, 1; rank bins in y: [-C, -2/3), [-2/3, 0), [0, 2/3), [2/3, C]."""
    prior = np.array([0.1, 0.4, 0.2, 0.3])
    eps = 2.0
    hm = HM(eps, prior)
    e_half, e = math.exp(eps / 2), math.exp(eps)
    c = (e_half + 1) / (e_half - 1)
    high = (e - e_half) / (2 * e_half + 2)
    low = high / e
    beta = 1 - math.exp(-eps / 2)
    assert hm.beta == pytest.approx(beta, rel=1e-12) and hm.pm.bound == pytest.approx(c, rel=1e-12)

    # word 3, rank 1, t = -1/3
    t = -1 / 3
    l = (c + 1) / 2 * t - (c - 1) / 2
    r = l + c - 1
    assert -c < l < -2 / 3 and 0 < r < 2 / 3  # so [l, r] covers bin 1 and parts of bins 0 and 2
    pm = [low * (c - 2 / 3) + (high - low) * (-2 / 3 - l),
          high * 2 / 3,
          low * 2 / 3 + (high - low) * r,
          low * (c - 2 / 3)]
    plus = 0.5 + t * (e - 1) / (2 * e + 2)  # Duchi's +C_D, beyond y = 1: rank 3
    by_rank = [beta * pm[0] + (1 - beta) * (1 - plus), beta * pm[1], beta * pm[2], beta * pm[3] + (1 - beta) * plus]
    expected = [by_rank[3], by_rank[0], by_rank[2], by_rank[1]]  # word ids 0, 1, 2, 3
    np.testing.assert_allclose(hm.output_distribution(3), expected, rtol=1e-12, atol=0)

    # word 1, rank 0, t = -1: [l, r] = [-C, -1] lies inside bin 0
    pm = [high * (c - 1) + low * (1 / 3), low * 2 / 3, low * 2 / 3, low * (c - 2 / 3)]
    plus = 1 / (e + 1)
    by_rank = [beta * pm[0] + (1 - beta) * (1 - plus), beta * pm[1], beta * pm[2], beta * pm[3] + (1 - beta) * plus]
    expected = [by_rank[3], by_rank[0], by_rank[2], by_rank[1]]
    np.testing.assert_allclose(hm.output_distribution(1), expected, rtol=1e-12, atol=0)

    # eps <= 0.61: beta = 0, Duchi only, which reports the rank-0 or the rank-3 word
    small = HM(0.5, prior)
    assert small.beta == 0.0
    plus = 0.5 - (math.exp(0.5) - 1) / (6 * (math.exp(0.5) + 1))
    np.testing.assert_allclose(small.output_distribution(3), [plus, 1 - plus, 0, 0], rtol=1e-12, atol=0)


def test_hm_eta_is_prior_weighted_change_probability():
    prior = _zipf_prior()
    hm = HM(2.0, prior)
    diag = np.array([hm.output_distribution(w)[w] for w in range(V)])
    np.testing.assert_allclose(hm.keep_probabilities(), diag, rtol=1e-12, atol=1e-15)
    assert hm.eta == pytest.approx(float(prior @ (1 - diag)), rel=1e-12)


@pytest.mark.parametrize("eps", [0.7, 2.0, 5.0])
def test_hm_piecewise_density_ratio_is_e_to_the_eps(eps):
    hm = HM(eps, _zipf_prior())
    c = hm.pm.bound
    t = np.linspace(-1, 1, 41)[:, None]
    y = np.linspace(-c, c, 4001)[None, :]
    density = hm.pm.density(t, y)
    assert density.max() / density.min() == pytest.approx(math.exp(eps), rel=1e-12)
    # each row is a probability density on [-C, C] (the pieces' lengths: C - 1 inside, C + 1 outside)
    high, low = density.max(), density.min()
    assert high * (c - 1) + low * (c + 1) == pytest.approx(1.0, rel=1e-12)
    assert high * (c - 1) == pytest.approx(math.exp(eps / 2) / (math.exp(eps / 2) + 1), rel=1e-12)
    # the high piece contains the input (PM's output is centred near t)
    assert np.all(hm.pm.density(t, t) == high)
    assert np.all(hm.pm.density(t, np.full_like(t, c + 1e-9)) == 0)
