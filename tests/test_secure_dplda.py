"""dplda under secure aggregation: the Skellam accountant against exact divergences and dp-accounting,
the noise shares' distribution, a party's release against its per-round bound, and whole runs where
the server sees only sums (exactly the parties' sum) and a party drops out after masking."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord
from scipy.special import logsumexp
from scipy.stats import chisquare, skellam

from flower_topics.clients import dplda as client
from flower_topics.run.config import parse_run_config
from flower_topics.errors import UserInputError
from flower_topics.models import svi
from flower_topics.privacy import skellam_mechanism as skellam_dp
from tests import accounting
from flower_topics.privacy.party_policy import PartyFacts, SecureFacts
from flower_topics.wire.dplda import LAMBDA_KEY, STATISTIC_KEY, DPLDASettings
from tests.test_dplda import _corpus, _exceedance


@pytest.mark.parametrize("mu, slack", [(2.0, 6.0), (10.0, 2.5), (100.0, 1.1)])
def test_the_skellam_rdp_bound_holds_for_the_exact_divergence(mu, slack):
    """Agarwal et al.'s Theorem 3.5 against D_alpha(Sk(mu) + shift || Sk(mu)) summed from scipy's pmf."""
    support = np.arange(-int(20 * np.sqrt(mu) + 40), int(20 * np.sqrt(mu) + 40))  # the rest is below 1e-30
    log_p = skellam.logpmf(support, mu / 2, mu / 2)
    for shift in (1, 2, 3):
        log_shifted = skellam.logpmf(support - shift, mu / 2, mu / 2)
        for alpha in (2, 4, 8, 16):
            exact = logsumexp(alpha * log_shifted + (1 - alpha) * log_p) / (alpha - 1)
            bound = skellam_dp.skellam_rdp(alpha, shift, shift, mu)
            assert exact <= bound + 1e-9
            assert bound <= exact * slack  # loose at a few units of noise, within 10% at mu = 100
    assert skellam_dp.skellam_rdp(4, 1, 1, 1e6) == pytest.approx(4 / 2e6, rel=1e-3)  # Gaussian in the limit



def test_a_noisy_entry_is_given_40_noise_standard_deviations_and_100_units_of_room():
    assert skellam_dp.largest_entry(7, 2.0) == 7 + 40 * 2.0 + 100
    assert skellam_dp.largest_entry(7, 2.0, slack=0.0) == 87.0  # continuous (Gaussian) noise: no slack
    for variance in (0.01, 1.0, 50.0, 1e4):  # the Skellam tail beyond the room is below 2^-60 (its docstring)
        room = skellam_dp.largest_entry(0, np.sqrt(variance))
        assert 2 * skellam.sf(room, variance / 2, variance / 2) < 2.0 ** -60

def test_subsampled_skellam_costs_at_least_the_gaussian_and_more_at_coarse_quanta():
    """The Skellam figures against dp-accounting's RDP of the subsampled Gaussian (exact for the Gaussian): never
    below it (within the 1% the two libraries' orders and conversions differ by), equal to it without subsampling
    at fine quanta (the discretization term vanishes), above it with subsampling (Zhu and Wang's general bound, not
    the Gaussian's exact formula) and at coarse quanta. The Gaussian path's own accountant (PLD) spends less."""
    import dp_accounting
    from dp_accounting import rdp

    for sigma, q, rounds in ((1.0, 0.2, 40), (2.0, 0.05, 300), (0.8, 1.0, 3)):
        gaussian_rdp = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        gaussian_rdp.compose(accounting.round_event(sigma, q), rounds)
        gaussian = gaussian_rdp.get_epsilon(1e-5)
        fine = accounting.skellam_epsilon(sigma, q, rounds, 1e-5, 512.0)
        coarse = accounting.skellam_epsilon(sigma, q, rounds, 1e-5, 2.0)
        assert fine >= gaussian * 0.99
        assert fine <= gaussian * 1.01 if q == 1.0 else fine > gaussian * 1.05
        assert coarse > fine  # coarse units pay the discretization term
        assert accounting.pld_epsilon(sigma, q, rounds, 1e-5) < fine
    sigma = accounting.skellam_noise_multiplier(3.0, 1e-5, 0.2, 40, 512.0)
    assert accounting.skellam_epsilon(sigma, 0.2, 40, 1e-5, 512.0) <= 3.0
    assert accounting.skellam_epsilon(sigma * 0.99, 0.2, 40, 1e-5, 512.0) > 3.0


def test_the_surviving_shares_sum_to_the_central_skellam_noise():
    """n = 5 parties, T = 1: each adds Sk(mu / 4); any 4 of them carry exactly Sk(mu)."""
    mu, n = 12.0, 40_000
    rng = np.random.default_rng(3)
    shares = np.stack([skellam_dp.skellam_noise((n,), mu / 4, rng) for _ in range(5)])
    total = shares[:4].sum(axis=0)
    values, counts = np.unique(np.clip(total, -12, 12), return_counts=True)
    expected = np.array([skellam.cdf(-12, mu / 2, mu / 2) if v == -12 else skellam.sf(11, mu / 2, mu / 2) if v == 12
                         else skellam.pmf(v, mu / 2, mu / 2) for v in values]) * n
    assert chisquare(counts, expected * counts.sum() / expected.sum()).pvalue > 1e-3
    assert shares.sum(axis=0).var() == pytest.approx(5 * mu / 4, rel=0.03)


def _settings(**kw) -> DPLDASettings:
    values = dict(n_topics=2, alpha=0.1, sample_rate=0.5, clip=1.0, noise_multiplier=1.0, epsilon=3.0, delta=1e-5,
                  secure=True, quantum=4.0)
    values.update(kw)
    return DPLDASettings(**values)


def _violations(settings: DPLDASettings, release_settings: DPLDASettings, n: int = 4000) -> float:
    """Largest significant excess of P[M(D') in S] over e^eps P[M(D) in S] + delta (and back), S half-lines of
    the projection on the document's direction; the party adds the whole noise (noise share 1)."""
    lam = np.array([[5.0, 1.0, 1.0], [1.0, 1.0, 5.0]])
    one, empty = _corpus([[0, 0, 2, 1]], 3), _corpus([], 3)
    stat = svi.e_step(lam, svi.document_counts(one), alpha=settings.alpha, clip=settings.clip).statistic
    direction = stat / np.linalg.norm(stat)

    def project(corpus, seed):
        rng = np.random.default_rng(seed)
        return np.array([np.vdot(client.secure_release(corpus, lam, release_settings, rng, 1.0), direction)
                         for _ in range(n)])

    with_doc, without = project(one, 11), project(empty, 12)
    delta = 1e-3
    eps = accounting.skellam_epsilon(settings.noise_multiplier, settings.sample_rate, 1, delta,
                                    settings.sensitivity_units)
    thresholds = np.quantile(np.concatenate([with_doc, without]), np.linspace(0.5, 0.995, 40))
    lo1, up1 = _exceedance(with_doc, thresholds, 0.999)
    lo0, up0 = _exceedance(without, thresholds, 0.999)
    upper = lo1 - (np.exp(eps) * up0 + delta)
    lower = (1 - up0) - (np.exp(eps) * (1 - lo1) + delta)
    return float(np.concatenate([upper, lower]).max())


def _numpy_integer_rounding(entries, rows, uniforms, quantum, bound):
    """The integer encoding written with numpy (the formulation before the compiled one)."""
    scaled = entries * quantum
    low = np.floor(scaled)
    rounded = low + (uniforms < scaled - low)
    if bound is None:
        return rounded
    norms = np.sqrt(np.bincount(rows, weights=np.einsum("nk,nk->n", rounded, rounded), minlength=rows.max() + 1))
    return np.where((norms <= bound)[rows][:, None], rounded, low)


@pytest.mark.parametrize("bound", [None, 3.0, 6.5])
def test_the_compiled_integer_encoding_is_the_numpy_formulation_and_never_exceeds_its_bound(bound):
    rng = np.random.default_rng(0 if bound is None else int(bound * 10))
    lengths = rng.integers(1, 9, size=200)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.repeat(np.arange(lengths.size), lengths)
    entries = rng.exponential(0.3, size=(indptr[-1], 5))
    if bound is not None:  # clipped first, as in the E-step: norm at most bound / quantum
        norms = np.sqrt(np.bincount(rows, weights=(entries ** 2).sum(axis=1)))
        entries *= np.minimum(1.0, bound / 4.0 / norms)[rows][:, None]
    uniforms = rng.random(entries.shape)
    expected = _numpy_integer_rounding(entries, rows, uniforms, 4.0, bound)
    got = entries.copy()
    svi._integer_rounding(got, indptr, uniforms, 4.0, -1.0 if bound is None else bound)
    assert np.array_equal(got, expected) and np.all(got == np.round(got))
    if bound is not None:
        norms = np.sqrt(np.bincount(rows, weights=(got ** 2).sum(axis=1)))
        assert norms.max() <= bound and (np.floor(entries * 4.0) != got).any()  # some rounded up, none over
        assert (_numpy_integer_rounding(entries, rows, uniforms, 4.0, None) != got).any()  # some docs held down


def test_a_secure_release_respects_its_per_round_bound_and_a_weaker_noise_fails_the_check():
    settings = _settings()
    assert _violations(settings, settings) <= 0.0
    assert _violations(settings, _settings(noise_multiplier=0.25)) > 0.05


def test_a_party_refuses_a_secure_round_without_its_share_and_an_update_that_could_wrap():
    corpus = _corpus([[0, 1], [1, 2, 2]] * 10, 3)
    settings = _settings(epsilon=50.0)
    arrays = ArrayRecord({LAMBDA_KEY: Array(np.ones((2, 3), dtype=np.float32))})
    with pytest.raises(UserInputError, match="no secure-sum round"):
        client.STEP.train(arrays, ConfigRecord(settings.to_record()), corpus, client.DPLDAClientState(), seed=1)
    request = ConfigRecord(settings.to_record())
    tight = PartyFacts(secure=SecureFacts(noise_share=1.0, entry_limit=50))
    with pytest.raises(UserInputError, match="could reach"):
        client.STEP.train(arrays, request, corpus, client.DPLDAClientState(), seed=1, party=tight)
    roomy = PartyFacts(secure=SecureFacts(noise_share=0.5, entry_limit=1 << 30))
    update, metrics = client.STEP.train(arrays, request, corpus, client.DPLDAClientState(), seed=1, party=roomy)
    assert update[STATISTIC_KEY].dtype == np.int64 and metrics == {}


def test_secure_aggregation_is_refused_for_methods_whose_replies_are_not_sums():
    with pytest.raises(UserInputError, match="fedlda's replies are not sums"):
        parse_run_config({"method": "fedlda", "secure-aggregation": "true"})


def _secure_run(tmp_path, parties, drop=None, **extra):
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from flower_topics.simulations.inprocess import InProcessGrid
    from flower_topics.strategies.dplda import DPLDA
    from tests.test_method_contract import NEEDS, TINY

    config = {**TINY, **NEEDS["dplda"], "method": "dplda", "synthetic-docs-per-node": 200,
              "federated-eval": False, "dplda.epsilon": 20.0, "dplda.sample-rate": 0.5, "num-rounds": 3,
              "output-dir": str(tmp_path / "run"), "dplda.init": "random", "secure-aggregation": True, **extra}
    released: dict[int, list[np.ndarray]] = {}
    summed: dict[int, np.ndarray] = {}
    original_release, original_aggregate = client.secure_release, DPLDA.aggregate

    def recording_release(corpus, lam, settings, rng, share):
        out = original_release(corpus, lam, settings, rng, share)
        released.setdefault(len(summed) + 1, []).append(out)
        return out

    def recording_aggregate(self, server_round, arrays, replies):
        summed[server_round] = replies[0].arrays[STATISTIC_KEY]
        return original_aggregate(self, server_round, arrays, replies)

    client.secure_release, DPLDA.aggregate = recording_release, recording_aggregate
    try:
        model = run_server(InProcessGrid.partitions(make_client_app(config), parties, config, drop), config)
    finally:
        client.secure_release, DPLDA.aggregate = original_release, original_aggregate
    return model, released, summed


def test_the_unmasked_sum_is_the_parties_sum_exactly(tmp_path):
    model, released, summed = _secure_run(tmp_path, 3)
    assert sorted(summed) == [1, 2, 3]
    for server_round, total in summed.items():
        np.testing.assert_array_equal(total * 256.0, np.sum(released[server_round], axis=0))
    report = model.metadata["privacy"]
    assert "Skellam" in report["accountant"] and report["epsilon"] <= 20.0 + 1e-9 and report["rounds"] == 3


def test_a_party_that_drops_after_masking_leaves_the_sum_of_the_others(tmp_path):
    lost = 103  # its round-2 training reply (its masked update) never reaches the server
    model, released, summed = _secure_run(tmp_path, 4, drop=lambda r, node: r == 2 and node == lost)
    assert sorted(summed) == [1, 2, 3]
    kept = [out for i, out in enumerate(released[2]) if i != lost - 101]  # parties answer in node order
    np.testing.assert_array_equal(summed[2] * 256.0, np.sum(kept, axis=0))


def test_fewer_survivors_than_the_threshold_keep_the_model_and_say_so(tmp_path, caplog):
    model, _, summed = _secure_run(tmp_path, 3, drop=lambda r, node: r == 2 and node in (101, 102))
    assert sorted(summed) == [1, 3]
    assert "threshold is 2" in caplog.text
    assert model.metadata["privacy"]["rounds"] == 3  # the round was released into, it still counts
