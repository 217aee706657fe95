"""dplda: the E-step against a per-document reference, the clipping bound, the accountant against
an independent implementation, the party's release distribution against its per-round bound, and
the party's refusals (as a hostile server would test them)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from flwr.app import Array, ArrayRecord, ConfigRecord
from scipy.special import digamma
from scipy.stats import beta as beta_dist

from flower_topics.privacy.ledger import APPROX_DP, Release
from flower_topics.privacy.party_policy import (VOCABULARY, AccountedRelease, PartyAccount, PartyFacts,
                                                PartyPolicy)
from flower_topics.clients import dplda as client
from flower_topics.run.config import parse_run_config
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.models import svi
from flower_topics.privacy.accountants import Budget
from tests.accounting import pld_epsilon as rounds_epsilon, pld_noise as noise_multiplier
from tests.accounting import pld_releases_epsilon as releases_epsilon
from flower_topics.wire.dplda import LAMBDA_KEY, STATISTIC_KEY, DPLDASettings
from tests.flower_harness import dplda_round


def _corpus(docs: list[list[int]], n_words: int) -> Corpus:
    tokens = np.concatenate([np.asarray(d, dtype=np.int32) for d in docs]) if docs else np.zeros(0, np.int32)
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    return Corpus(tokens, ptr, tuple(f"w{i}" for i in range(n_words)))


def _reference_e_step(lam, doc_counts, alpha, n_iter):
    """One document at a time, as Hoffman et al.'s Algorithm 2 writes it (dense, a loop over iterations)."""
    elog_beta = digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))
    words = np.flatnonzero(doc_counts)
    n = doc_counts[words]
    gamma = np.full(lam.shape[0], alpha + n.sum() / lam.shape[0])
    for _ in range(n_iter):
        elog_theta = digamma(gamma) - digamma(gamma.sum())
        log_phi = elog_theta[:, None] + elog_beta[:, words]
        phi = np.exp(log_phi - log_phi.max(axis=0))
        phi /= phi.sum(axis=0)
        gamma = alpha + phi @ n
    elog_theta = digamma(gamma) - digamma(gamma.sum())
    log_phi = elog_theta[:, None] + elog_beta[:, words]
    phi = np.exp(log_phi - log_phi.max(axis=0))
    phi /= phi.sum(axis=0)
    stat = np.zeros_like(lam)
    stat[:, words] = phi * n
    return gamma, stat


def test_the_batched_e_step_equals_the_per_document_algorithm():
    rng = np.random.default_rng(0)
    lam = rng.gamma(2.0, 1.0, size=(3, 8)) + 0.1
    counts = sp.csr_matrix(rng.poisson(0.8, size=(6, 8)).astype(float))
    counts[4] = 0  # an empty document contributes nothing
    got = svi.e_step(lam, counts, alpha=0.3, clip=None, max_iter=60, tol=0.0)
    for d in range(6):
        gamma, stat = _reference_e_step(lam, counts[d].toarray().ravel(), 0.3, 60)
        np.testing.assert_allclose(got.gamma[d], gamma, rtol=1e-8)
        single = svi.e_step(lam, counts[d], alpha=0.3, clip=None, max_iter=60, tol=0.0)
        np.testing.assert_allclose(single.statistic, stat, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(single.norms[0], np.linalg.norm(stat), rtol=1e-10)
    # the statistic of the batch is the sum of the documents' and carries every token once
    assert got.statistic.sum() == pytest.approx(counts.sum())


def test_the_vectorized_exp_digamma_agrees_with_scipy_over_its_whole_range():
    x = np.concatenate([np.geomspace(svi.SHIFTED_MIN, 1e4, 20001), np.geomspace(1e4, svi.SHIFTED_MAX, 301)])
    got = np.empty_like(x)
    svi._exp_digamma_shifted(x, got)
    np.testing.assert_allclose(got, np.exp(digamma(x)), rtol=1e-10)
    scalar = np.array([svi._exp_digamma(v) for v in x[::97]])
    np.testing.assert_allclose(got[::97], scalar, rtol=1e-10)


def test_a_prior_below_the_vectorized_range_takes_the_scalar_path_and_stays_exact():
    rng = np.random.default_rng(5)
    lam = rng.gamma(2.0, 1.0, size=(3, 8)) + 0.1
    counts = sp.csr_matrix(rng.poisson(0.8, size=(4, 8)).astype(float))
    alpha = svi.SHIFTED_MIN / 10  # a gamma_k near alpha is outside the vectorized range
    got = svi.e_step(lam, counts, alpha=alpha, clip=None, max_iter=40, tol=0.0)
    assert got.gamma.min() < svi.SHIFTED_MIN
    for d in range(4):
        gamma, _ = _reference_e_step(lam, counts[d].toarray().ravel(), alpha, 40)
        np.testing.assert_allclose(got.gamma[d], gamma, rtol=1e-8)


def test_exp_expected_log_beta_takes_either_path_per_topic_and_equals_scipy():
    rng = np.random.default_rng(6)
    lam = rng.gamma(0.5, 1.0, size=(4, 50)) + 0.02
    lam[2, 7] = svi.SHIFTED_MIN / 3  # this topic takes the scalar path, the others the vectorized one
    got = np.empty((50, 4))
    svi._exp_expected_log_beta_t(lam, lam.sum(axis=1), got)
    expected = np.exp(digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))).T
    np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_a_rounds_sample_has_the_counts_of_its_documents_built_once_per_corpus():
    corpus = _corpus([[0, 1, 1], [2], [], [3, 0, 3, 3], [1, 2]], 4)
    for included in (np.array([0, 3, 4]), np.array([2]), np.array([], dtype=np.int64), np.arange(5)):
        got, expected = svi.sampled_counts(corpus, included), svi.document_counts(corpus.subset(included))
        assert got.dtype == expected.dtype == np.float64 and got.shape == expected.shape
        for part in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(got, part), getattr(expected, part))
    other = _corpus([[3, 3], [0]], 4)  # another corpus has its own counts
    np.testing.assert_array_equal(svi.sampled_counts(other, np.array([0])).toarray(), [[0, 0, 0, 2]])


def test_the_e_step_gives_the_same_bits_on_any_number_of_threads():
    rng = np.random.default_rng(3)
    lam = rng.gamma(2.0, 1.0, size=(7, 40)) + 0.1
    counts = sp.random(300, 40, density=0.2, random_state=4, format="csr")
    counts.data = np.ceil(counts.data * 4)
    one = svi.e_step(lam, counts, alpha=0.1, clip=1.5, threads=1)
    for threads in (2, 3, 512):  # more threads than documents too
        many = svi.e_step(lam, counts, alpha=0.1, clip=1.5, threads=threads)
        assert np.array_equal(many.statistic, one.statistic) and np.array_equal(many.gamma, one.gamma)
        assert np.array_equal(many.norms, one.norms)


def test_one_document_moves_the_clipped_sum_by_at_most_c():
    rng = np.random.default_rng(1)
    lam = rng.gamma(1.0, 1.0, size=(4, 30)) + 0.01
    counts = sp.csr_matrix(rng.poisson(2.0, size=(20, 30)).astype(float))
    counts[3] = 0
    counts[3, 5] = 400.0  # one very long document of a single word
    for clip in (0.5, 2.0, 50.0):
        full = svi.e_step(lam, counts, alpha=0.1, clip=clip).statistic
        for d in range(20):
            rest = sp.vstack([counts[:d], counts[d + 1:]]).tocsr()
            without = svi.e_step(lam, rest, alpha=0.1, clip=clip).statistic
            assert np.linalg.norm(full - without) <= clip * (1 + 1e-9)
    stats = svi.e_step(lam, counts, alpha=0.1, clip=2.0)
    assert stats.clipped_fraction == pytest.approx(np.mean(stats.norms > 2.0)) and stats.clipped_fraction > 0.5


def test_the_accountant_agrees_with_opacus_and_calibrates_to_the_target():
    from opacus.accountants import PRVAccountant, RDPAccountant

    for sigma, q, rounds in [(1.1, 0.01, 1000), (2.2, 0.2, 40), (5.0, 1.0, 10), (0.9, 0.05, 1), (0.3, 0.5, 3)]:
        # Opacus's PRV accountant (Gopi et al. 2021) computes the same privacy curve independently, to its own
        # eps_error of 0.01 (an upper estimate); its RDP accountant is a looser bound that ours must not exceed
        prv, rdp = PRVAccountant(), RDPAccountant()
        prv.history = rdp.history = [(sigma, q, rounds)]
        ours = rounds_epsilon(sigma, q, rounds, 1e-5)
        assert ours == pytest.approx(prv.get_epsilon(1e-5), rel=0.01)
        assert ours < rdp.get_epsilon(1e-5)
    sigma = noise_multiplier(3.0, 1e-5, 0.2, 40)
    assert rounds_epsilon(sigma, 0.2, 40, 1e-5) <= 3.0
    assert rounds_epsilon(sigma * 0.99, 0.2, 40, 1e-5) > 3.0
    # releases of several kinds compose; more releases never spend less
    mixed = np.array([[sigma, 0.2]] * 20 + [[2 * sigma, 0.1]] * 20)
    assert rounds_epsilon(sigma, 0.2, 20, 1e-5) < releases_epsilon(mixed, 1e-5) < rounds_epsilon(sigma, 0.2, 40, 1e-5)
    with pytest.raises(UserInputError, match="no noise level reaches"):
        noise_multiplier(1e-7, 1e-12, 1.0, 10_000)
    assert Budget(3.0, 1e-5, 1.0, 1e-6).for_rounds() == pytest.approx((2.0, 9e-6))
    with pytest.raises(UserInputError, match="leaves nothing"):
        Budget(3.0, 1e-5, 4.0, 1e-6).for_rounds()


def _settings(**kw) -> DPLDASettings:
    values = dict(n_topics=2, alpha=0.1, sample_rate=0.5, clip=1.0, noise_multiplier=1.0, epsilon=3.0, delta=1e-5)
    values.update(kw)
    return DPLDASettings(**values)


def _exceedance(samples: np.ndarray, thresholds: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson (lower, upper) bounds of P[X > t] for each threshold."""
    n = samples.size
    k = (samples[None, :] > thresholds[:, None]).sum(axis=1)
    a = (1 - confidence) / 2
    lower = np.where(k > 0, beta_dist.ppf(a, k, n - k + 1), 0.0)
    upper = np.where(k < n, beta_dist.ppf(1 - a, k + 1, n - k), 1.0)
    return lower, upper


def _projected_releases(settings: DPLDASettings, corpus: Corpus, lam, direction, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([np.vdot(client.release(corpus, lam, settings, rng), direction) for _ in range(n)])


def _violations(settings: DPLDASettings, n: int = 6000) -> float:
    """Largest significant excess of P[M(D') in S] over e^eps P[M(D) in S] + delta (and back) on half-lines S.

    D' holds one document, D none; the outputs are projected on the direction of that document's
    clipped statistic, where its presence shows most. (eps, delta) is the accountant's per-round bound.
    """
    lam = np.array([[5.0, 1.0, 1.0], [1.0, 1.0, 5.0]])
    one, empty = _corpus([[0, 0, 2, 1]], 3), _corpus([], 3)
    stat = svi.e_step(lam, svi.document_counts(one), alpha=settings.alpha, clip=settings.clip).statistic
    direction = stat / np.linalg.norm(stat)
    with_doc = _projected_releases(settings, one, lam, direction, n, 11)
    without = _projected_releases(settings, empty, lam, direction, n, 12)
    delta = 1e-3
    eps = rounds_epsilon(settings.noise_multiplier, settings.sample_rate, 1, delta)
    thresholds = np.quantile(np.concatenate([with_doc, without]), np.linspace(0.5, 0.995, 40))
    lo1, up1 = _exceedance(with_doc, thresholds, 0.999)
    lo0, up0 = _exceedance(without, thresholds, 0.999)
    # the document pushes mass up: P_D'[X > t] <= e^eps P_D[X > t] + delta and P_D[X <= t] <= e^eps P_D'[X <= t] + delta
    upper = lo1 - (np.exp(eps) * up0 + delta)
    lower = (1 - up0) - (np.exp(eps) * (1 - lo1) + delta)
    excess = np.concatenate([upper, lower])
    return float(excess.max())


def test_the_cached_composition_equals_dp_accountings_own_accountant_exactly():
    import dp_accounting
    from dp_accounting import pld

    from flower_topics.privacy.accountants.pld import VALUE_DISCRETIZATION
    from tests.accounting import round_event as _round_event

    releases = np.array([[1.3, 0.2]] * 7 + [[0.8, 0.05]] * 30 + [[4.0, 0.5]] * 2)
    fresh = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                              value_discretization_interval=VALUE_DISCRETIZATION / 0.8 ** 2)
    for sigma, rate in releases:  # one event at a time, as a party makes them
        fresh.compose(_round_event(float(sigma), float(rate)))
    for delta in (1e-5, 1e-8):
        assert releases_epsilon(releases, delta) == pytest.approx(fresh.get_epsilon(delta), rel=1e-6)
    assert releases_epsilon(releases[:-1], 1e-5) < releases_epsilon(releases, 1e-5)
    # rounds without subsampling are one Gaussian of the combined sigma (GDP composition), checked numerically
    whole = np.array([[4.0, 1.0]] * 2 + [[2.0, 1.0]])
    numeric = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    for sigma, _ in whole:
        numeric.compose(dp_accounting.GaussianDpEvent(float(sigma)))
    assert releases_epsilon(whole, 1e-5) == pytest.approx(numeric.get_epsilon(1e-5), rel=1e-3)


def test_the_party_guard_answers_every_count_as_the_accountant_does_with_few_epsilons():
    from flower_topics.privacy.guard import within_budget

    computed = []
    sigma = noise_multiplier(3.0, 1e-5, 0.2, 40)

    def epsilon_of(n):
        computed.append(n)
        return rounds_epsilon(sigma, 0.2, n, 1e-5)

    budget = rounds_epsilon(sigma, 0.2, 40, 1e-5)  # exactly the 40th release's epsilon: 40 fit, 41 do not
    kind = ("test", sigma, 0.2, 1e-5, "in order")
    answers = [within_budget(epsilon_of, n, budget, kind=kind) for n in range(1, 61)]
    assert answers == [n <= 40 for n in range(1, 61)]
    assert len(computed) <= 14  # doubling to 64, then bisection: not one epsilon per round
    # asked out of order, at another budget, the same as the accountant's own comparison
    for n in np.random.default_rng(0).permutation(np.arange(0, 90)):
        assert within_budget(epsilon_of, int(n), 2.0, kind=kind) == (rounds_epsilon(sigma, 0.2, int(n), 1e-5) <= 2.0)


def test_a_server_that_changes_the_noise_mid_run_is_accounted_release_by_release():
    corpus = _corpus([[0, 1], [1, 2, 2], [0, 0, 1]] * 5, 3)
    lam = np.ones((2, 3))
    sigma = noise_multiplier(3.0, 1e-5, 0.5, 3)
    state = client.DPLDAClientState()
    for noise in (sigma, sigma, 0.8 * sigma):  # the third release has less noise than planned
        arrays, config = _message(_settings(noise_multiplier=noise, sample_rate=0.5), lam)
        if noise < sigma:
            with pytest.raises(UserInputError, match="after 2 releases"):
                client.local_step(arrays, config, corpus, state, seed=1)
        else:
            client.local_step(arrays, config, corpus, state, seed=1)
    assert releases_epsilon(np.array([[sigma, 0.5]] * 2 + [[0.8 * sigma, 0.5]]), 1e-5) > 3.0


def test_a_run_composing_one_more_release_a_round_gets_the_self_composed_epsilon():
    from flower_topics.privacy.accountants import pld as accountant

    for sigma, rate in ((2.06, 0.2), (0.9, 0.05)):
        interval = accountant.VALUE_DISCRETIZATION * max(1.0, sigma ** -2)
        single = accountant._release_pld(sigma, rate, interval)
        accountant._LATEST.clear()
        accountant._composed_epsilon.cache_clear()
        for count in [*range(1, 46), 52, 51]:  # one a round, then a jump (self-composed) and a step back
            stepwise = rounds_epsilon(sigma, rate, count, 1e-5)
            assert accountant._LATEST[(sigma, rate, interval)][0] == count
            assert stepwise == pytest.approx(single.self_compose(count).get_epsilon_for_delta(1e-5), rel=1e-9)


def test_a_release_respects_its_per_round_bound_and_a_weaker_noise_fails_the_check():
    settings = _settings(sample_rate=0.5, clip=1.0, noise_multiplier=1.0)
    assert _violations(settings) <= 0.0
    # the same check catches a party that adds a quarter of the noise its report assumes
    weak = _settings(sample_rate=0.5, clip=1.0, noise_multiplier=0.25)
    honest_report = _settings(sample_rate=0.5, clip=1.0, noise_multiplier=1.0)

    def leaky_release(corpus, lam, settings, rng):
        return client_release(corpus, lam, weak, rng)

    client_release = client.release
    try:
        client.release = leaky_release
        assert _violations(honest_report) > 0.05
    finally:
        client.release = client_release


def _message(settings: DPLDASettings, lam, **extra):
    return ArrayRecord({LAMBDA_KEY: Array(np.asarray(lam, dtype=np.float32))}), ConfigRecord(
        {**settings.to_record(), **extra})


def test_every_release_gets_fresh_secret_randomness_even_when_the_server_repeats_a_round():
    corpus = _corpus([[0, 1], [1, 2, 2], [0, 0, 1]] * 5, 3)
    lam = np.ones((2, 3))
    arrays, config = _message(_settings(epsilon=50.0), lam, **{"server-round": 4})
    state = client.DPLDAClientState()
    first, _ = client.local_step(arrays, config, corpus, state, seed=123)
    second, _ = client.local_step(arrays, config, corpus, state, seed=123)
    assert not np.array_equal(first[STATISTIC_KEY], second[STATISTIC_KEY])
    again, metrics = client.local_step(arrays, config, corpus, client.DPLDAClientState(), seed=123)
    np.testing.assert_array_equal(first[STATISTIC_KEY], again[STATISTIC_KEY])  # reproducible from the secret only
    assert metrics == {} and set(first) == {STATISTIC_KEY} and first[STATISTIC_KEY].dtype == np.float32
    assert len(state.releases) == 2


def test_the_party_refuses_releases_over_its_own_accountant():
    corpus = _corpus([[0, 1], [1, 2, 2], [0, 0, 1]] * 5, 3)
    lam = np.ones((2, 3))
    # a hostile server states a large target but sends little noise: the party's own cap holds
    greedy = _settings(noise_multiplier=0.3, epsilon=1000.0)
    arrays, config = _message(greedy, lam)
    capped = PartyFacts(policy=PartyPolicy(max_epsilon=3.0))  # the party's own cap, beside the server's request
    with pytest.raises(UserInputError, match="over its cap 3") as refused:
        client.local_step(arrays, config, corpus, client.DPLDAClientState(), seed=1, party=capped)
    assert "3" not in refused.value.reply and "eps" not in refused.value.reply  # the server gets the reason only
    # an honest sigma for 3 rounds: the 4th round is refused (the server asked for more rounds than it planned)
    sigma = noise_multiplier(3.0, 1e-5, 0.5, 3)
    arrays, config = _message(_settings(noise_multiplier=sigma, sample_rate=0.5), lam)
    state = client.DPLDAClientState()
    for _ in range(3):
        client.local_step(arrays, config, corpus, state, seed=1)
    with pytest.raises(UserInputError, match="after 3 releases"):
        client.local_step(arrays, config, corpus, state, seed=1)
    # what its own vocabulary release spent counts too
    arrays, config = _message(_settings(noise_multiplier=sigma, sample_rate=0.5), lam)
    spent = PartyAccount((AccountedRelease(VOCABULARY, "vocabulary", Release(APPROX_DP, epsilon=2.5, delta=1e-6)),))
    with pytest.raises(UserInputError, match="over its cap"):
        client.local_step(arrays, config, corpus, client.DPLDAClientState(), seed=1, party=PartyFacts(account=spent))


def test_a_party_account_keeps_its_release_kinds_typed_through_its_state():
    from flwr.app import RecordDict

    from flower_topics.federation.party_side import ACCOUNT_STATE, party_account, record_release
    from flower_topics.privacy.party_policy import ReleaseKind

    state = RecordDict()
    record_release(state, AccountedRelease(VOCABULARY, "vocabulary", Release(APPROX_DP, epsilon=2.5, delta=1e-6)))
    record_release(state, AccountedRelease("round", "dplda", Release("gaussian", 1.2, 0.2)))
    kinds = [item.kind for item in party_account(state).releases]
    assert kinds == [ReleaseKind.VOCABULARY, ReleaseKind.ROUND] and all(type(k) is ReleaseKind for k in kinds)
    stored = list(state[ACCOUNT_STATE]["kind"])  # the state keeps the kinds' values, as before
    assert stored == ["vocabulary", "round"] and all(type(k) is str for k in stored)
    assert party_account(state).vocabulary_spent == (2.5, 1e-6)
    with pytest.raises(ValueError, match="'rounds' is not a valid ReleaseKind"):
        AccountedRelease("rounds", "dplda", Release("gaussian", 1.2, 0.2))


def test_the_party_refuses_a_bad_model_and_a_round_that_samples_no_document():
    corpus = _corpus([[0, 1], [1, 2]], 3)
    arrays, config = _message(_settings(sample_rate=0.2), np.ones((2, 3)))
    with pytest.raises(UserInputError, match="samples 0.40 on average"):
        client.local_step(arrays, config, corpus, client.DPLDAClientState(), seed=1)
    for bad in (np.ones((3, 3)), -np.ones((2, 3)), np.full((2, 3), np.nan)):
        arrays, config = _message(_settings(sample_rate=1.0), bad)
        with pytest.raises(UserInputError, match="topic parameters"):
            client.local_step(arrays, config, corpus, client.DPLDAClientState(), seed=1)


def test_run_config_errors_are_one_line_before_round_1(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n")
    good = {"method": "dplda", "vocabulary": str(vocab), "federated-eval": False}
    parse_run_config(good)
    cases = [
        ({"vocabulary": "union"}, "needs an accounted vocabulary"),
        ({"federated-eval": True}, "federated-eval=true"),
        ({"vocabulary": "private", "vocabulary-epsilon": 4.0}, "leaves nothing"),
        ({"dplda.epsilon": 1e-7, "dplda.delta": 1e-12, "dplda.sample-rate": 1.0, "num-rounds": 10_000},
         "no noise level reaches"),
        ({"dplda.clip": 0.0}, "must be > 0"),
        ({"dplda.sample-rate": 0.0}, "must be in"),
        ({"dplda.delta": 1.0}, "must be in"),
    ]
    for change, message in cases:
        with pytest.raises(UserInputError, match=message):
            parse_run_config({**good, **change})


# ---------------------------------------------------------------- the strategy


def _strategy(**kw):
    from flower_topics.strategies.dplda import DPLDA
    from tests.flower_harness import as_server, vocabulary

    as_server()
    settings = _settings(n_topics=2, sample_rate=0.5, clip=2.0, noise_multiplier=1.5, epsilon=3.0)
    options = dict(budget=Budget(3.0, 1e-5), eta=0.1, tau0=1.0, kappa=0.5, threshold=1.0, background=0.0,
                   init="random", seed=0)
    options.update(kw)
    return DPLDA(vocabulary(3), settings, **options)


def test_the_natural_gradient_step_and_the_noise_variance_by_hand():
    from flower_topics.strategies.dplda import RAW_KEY, VARIANCE_KEY

    strategy = _strategy()
    arrays = strategy.initial_arrays()
    s1, s2 = [[1.0, 2.0, -1.0], [0.0, 4.0, 3.0]], [[3.0, 0.0, 1.0], [2.0, -2.0, 1.0]]
    msgs, (arrays, metrics) = dplda_round(strategy, 1, arrays, [s1, s2])
    # rho_0 = (1 + 0)^-0.5 = 1: lambda = eta + S / q; two replies of noise (sigma C / q)^2 = (1.5 * 2 / 0.5)^2 = 36
    expected = 0.1 + (np.array(s1) + np.array(s2)) / 0.5
    np.testing.assert_allclose(arrays[RAW_KEY].numpy(), expected)
    assert arrays[VARIANCE_KEY].numpy()[0] == pytest.approx(72.0)
    sent = msgs[0].content["arrays"]
    assert list(sent.keys()) == [LAMBDA_KEY] and sent[LAMBDA_KEY].numpy().dtype == np.float32
    assert DPLDASettings.from_record(msgs[0].content["config"]) == strategy.dplda
    # round 2: rho_1 = 2^-0.5; one reply
    _, (arrays2, _) = dplda_round(strategy, 2, arrays, [s1])
    rho = 2 ** -0.5
    np.testing.assert_allclose(arrays2[RAW_KEY].numpy(), (1 - rho) * expected + rho * (0.1 + np.array(s1) / 0.5))
    assert arrays2[VARIANCE_KEY].numpy()[0] == pytest.approx((1 - rho) ** 2 * 72 + rho ** 2 * 36)
    assert metrics["noise-std"] == pytest.approx(np.sqrt(72.0))


def test_every_node_of_a_round_gets_the_public_lambda_of_that_rounds_state():
    strategy = _strategy()
    first = strategy.initial_arrays()
    sent = [strategy.node_arrays(1, node, first)[LAMBDA_KEY].numpy() for node in (1, 2)]
    expected = strategy.public(first).astype(np.float32)
    assert all(np.array_equal(a, expected) for a in sent)
    _, (second, _) = dplda_round(strategy, 1, first, [[[1.0, 2.0, 5.0], [4.0, 0.5, 3.0]]])
    after = strategy.node_arrays(2, 1, second)[LAMBDA_KEY].numpy()  # computed once a round: never a stale state
    assert np.array_equal(after, strategy.public(second).astype(np.float32)) and not np.array_equal(after, expected)


def test_public_lambda_thresholds_and_spreads_the_background_by_hand():
    from flower_topics.models.svi import public_lambda

    average = np.array([[10.1, 3.1, -5.0], [0.1, 8.1, 2.6]])
    # signal = average - 0.1 = [[10, 3, -5.1], [0, 8, 2.5]]; threshold 1 * sqrt(9) = 3: keep > 3
    np.testing.assert_allclose(public_lambda(average, 9.0, eta=0.1, threshold=1.0, background=0.0),
                               [[10.1, 0.1, 0.1], [0.1, 8.1, 0.1]])
    # background 0.5: each row gets its kept mass again, spread by u = positive column sums (10, 11, 0) / 21
    got = public_lambda(average, 9.0, eta=0.1, threshold=1.0, background=0.5)
    u = np.array([10.0, 11.0, 1e-12]) / (21.0 + 1e-12)
    np.testing.assert_allclose(got, [[10.1, 0.1, 0.1], [0.1, 8.1, 0.1]] + np.outer([10.0, 8.0], u), rtol=1e-9)


def test_the_report_counts_every_round_a_party_was_asked_and_stays_within_the_target():
    strategy = _strategy()
    arrays = strategy.initial_arrays()
    dplda_round(strategy, 1, arrays, [np.zeros((2, 3))])
    strategy.configure_train(2, arrays, ConfigRecord(), __import__("tests.flower_harness").flower_harness
                             .FixedNodesGrid([7]))  # asked, the reply never came: the round still counts
    report = strategy.privacy_report()
    assert report.unit == "document" and report.rounds == 2
    assert report.epsilon == pytest.approx(rounds_epsilon(1.5, 0.5, 2, 1e-5))
    # a run calibrated to its target ends at it (not above) after num-rounds
    sigma = noise_multiplier(3.0, 1e-5, 0.5, 5)
    assert rounds_epsilon(sigma, 0.5, 5, 1e-5) <= 3.0


def test_a_small_dplda_run_end_to_end_reports_the_whole_run_on_the_document(tmp_path):
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from flower_topics.simulations.inprocess import InProcessGrid
    from tests.test_method_contract import TINY

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"w{i:04d}" for i in range(40)) + "\n")
    config = {**TINY, "method": "dplda", "vocabulary": "private", "vocabulary-epsilon": 4.0,
              "vocabulary-delta": 1e-6, "vocabulary-max-words": 3, "synthetic-docs-per-node": 300,
              "federated-eval": False, "dplda.epsilon": 20.0,
              "dplda.sample-rate": 0.5, "num-rounds": 4, "output-dir": str(tmp_path / "run"),
              "dplda.init": "random"}
    model = run_server(InProcessGrid.partitions(make_client_app(config), 2, config), config)
    report = model.metadata["privacy"]
    # vocabulary (4, 1e-6) composed with the rounds, whose share is what the vocabulary left of the target
    assert report["unit"] == "document" and report["rounds"] == 4
    assert report["epsilon"] == pytest.approx(20.0, abs=0.05) and report["epsilon"] <= 20.0 + 1e-9
    assert report["delta"] == pytest.approx(1e-5)
    np.testing.assert_allclose(model.topic_word.sum(axis=1), 1.0)


def test_the_console_says_what_a_dplda_run_can_give():
    from flower_topics.methods import get_method

    notes = get_method("dplda").quality_notes({"dplda.epsilon": 3.0})
    assert len(notes) == 1 and "eps 3" in notes[0] and "dplda.epsilon" in notes[0]
