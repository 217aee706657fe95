"""The membership-inference audit (benchmarks/membership_audit.py, benchmarks/membership_attack.py).

What a user relies on: the audit finds members where a model leaks them (so it can fail a
model), its epsilon lower bound never claims more than a mechanism's proven guarantee, and
its statistics are the textbook ones.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats
from sklearn.metrics import roc_auc_score

from flower_topics.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]
# the benchmarks import their helpers by name, as they do when run as scripts (``benchmarks`` itself is a package
# of opacus's, so it is not imported by that name)
sys.path.insert(0, str(ROOT / "benchmarks"))

from membership_audit import (auc_interval, clopper_pearson, epsilon_lower_bound, lira_scores,  # noqa: E402
                              log_likelihood_scores, tpr_at_fpr)



def _benchmark():
    """benchmarks/membership_attack.py as a module (``benchmarks`` is not a package of ours)."""
    name = "membership_attack"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "membership_attack.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# --- (3) the statistics against hand-computed values ---------------------------------------------------------

def test_clopper_pearson_matches_scipy_exact_interval():
    for k, n in [(0, 10), (3, 10), (10, 10), (1, 1000), (517, 1000)]:
        lower, upper = clopper_pearson(k, n)
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert lower == pytest.approx(ci.low, abs=1e-12) and upper == pytest.approx(ci.high, abs=1e-12)
    # k = 0 and k = n by hand: (alpha/2)^(1/n)
    assert clopper_pearson(0, 10)[1] == pytest.approx(1 - 0.025 ** (1 / 10))
    assert clopper_pearson(10, 10)[0] == pytest.approx(0.025 ** (1 / 10))
    with pytest.raises(ValueError):
        clopper_pearson(11, 10)


def test_auc_and_tpr_at_fpr_by_hand():
    members = np.array([False, False, True, True])
    scores = np.array([0.1, 0.4, 0.35, 0.8])
    # pairs (member, non-member) ranked correctly: (0.35 > 0.1), (0.8 > 0.1), (0.8 > 0.4); wrong: (0.35 < 0.4)
    auc, low, high = auc_interval(scores, members, n_boot=200)
    assert auc == pytest.approx(3 / 4) and low <= auc <= high
    assert auc_interval([1.0, 1.0], [True, False], n_boot=10)[0] == pytest.approx(0.5)  # a tie counts 1/2
    # 4 non-members, 4 members; thresholds: member if score >= t
    members = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=bool)
    scores = np.array([0.0, 0.1, 0.2, 0.9, 0.3, 0.5, 0.95, 1.0])
    assert tpr_at_fpr(scores, members, 0.0) == pytest.approx(2 / 4)  # t = 0.95: both top members, no non-member
    assert tpr_at_fpr(scores, members, 0.25) == pytest.approx(4 / 4)  # t = 0.3: FPR 1/4 (0.9)
    assert tpr_at_fpr(scores, members, 0.2) == pytest.approx(2 / 4)


def test_bootstrap_interval_covers_the_auc_of_a_known_gaussian_shift():
    rng = np.random.default_rng(1)
    members = rng.random(4000) < 0.5
    scores = rng.normal(size=4000) + members
    auc, low, high = auc_interval(scores, members, n_boot=400)
    assert auc == pytest.approx(roc_auc_score(members, scores))
    assert low < stats.norm.cdf(1 / np.sqrt(2)) < high  # the population AUC of a unit shift
    assert 0.01 < high - low < 0.06


def test_epsilon_bound_by_hand_and_bad_input():
    members = np.array([True] * 10 + [False] * 10)
    scores = members.astype(float)  # a perfect attack on 10 + 10 trials
    bound = epsilon_lower_bound(scores, members, delta=0.0, select_fraction=0.0)
    tpr_low, fpr_high = 0.025 ** (1 / 10), 1 - 0.025 ** (1 / 10)
    assert bound.lower == pytest.approx(np.log(tpr_low / fpr_high))
    assert bound.estimate == np.inf and bound.tpr == 1.0 and bound.fpr == 0.0
    with pytest.raises(ValueError, match="same number"):
        epsilon_lower_bound(scores[:-1], members)
    with pytest.raises(ValueError, match="member and one non-member"):
        epsilon_lower_bound(scores, np.ones(20, dtype=bool))


def test_log_likelihood_score_is_the_per_token_log_likelihood():
    import scipy.sparse as sp

    phi = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    counts = sp.csr_matrix(np.array([[2, 2, 0], [0, 0, 3], [1, 1, 2], [0, 0, 0]]))
    scores = log_likelihood_scores(phi, counts, alpha=0.0, n_iter=200)
    assert scores[0] == pytest.approx(np.log(0.5))  # theta = topic 0
    assert scores[1] == pytest.approx(0.0)  # theta = topic 1, p = 1
    assert scores[2] == pytest.approx((2 * np.log(0.25) + 2 * np.log(0.5)) / 4, abs=1e-6)  # theta = (1/2, 1/2)
    assert np.isnan(scores[3])


def test_lira_calibrates_per_document_difficulty():
    """Documents differ in how likely they are anyway; LiRA's per-document Gaussians remove that."""
    rng = np.random.default_rng(2)
    n_models, n_docs = 16, 2000
    members = np.argsort(rng.random((n_models, n_docs)), axis=0) < n_models // 2
    difficulty = rng.normal(0, 2.0, n_docs)  # large spread between documents
    scores = difficulty + 0.5 * members + rng.normal(0, 0.3, (n_models, n_docs))
    threshold_auc = roc_auc_score(members.ravel(), scores.ravel())
    online = lira_scores(scores, members, online=True)
    offline = lira_scores(scores, members, online=False)
    assert np.isfinite(online).all() and np.isfinite(offline).all()
    assert threshold_auc < 0.6
    assert roc_auc_score(members.ravel(), online.ravel()) > 0.85
    assert roc_auc_score(members.ravel(), offline.ravel()) > 0.85


def test_lira_on_models_without_signal_is_a_coin_flip():
    """Leaving the target out must not tilt LiRA: with a balanced assignment its own side has one shadow fewer,
    which without equal-size fits scored members lower on models that carry no membership signal at all."""
    rng = np.random.default_rng(3)
    n_models, n_docs = 8, 4000
    members = np.argsort(rng.random((n_models, n_docs)), axis=0) < n_models // 2
    scores = rng.normal(0, 2.0, n_docs) + rng.normal(0, 1.0, (n_models, n_docs))
    for online in (True, False):
        value = lira_scores(scores, members, online=online)
        assert np.isfinite(value).all()
        assert abs(roc_auc_score(members.ravel(), value.ravel()) - 0.5) < 0.015
        assert epsilon_lower_bound(value, members, delta=1e-5).lower == 0.0


# --- (2) the bound never exceeds a proven guarantee ----------------------------------------------------------

@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_bound_never_exceeds_randomized_response_epsilon(epsilon):
    """Randomized response on the membership bit is exactly eps-DP; sampled many times, the bound stays below
    eps and comes close to it (so the bound is not vacuous)."""
    keep = np.exp(epsilon) / (1 + np.exp(epsilon))
    bounds = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        members = rng.random(50_000) < 0.5
        released = np.where(rng.random(members.size) < keep, members, ~members).astype(float)
        bounds.append(epsilon_lower_bound(released, members, delta=0.0, seed=seed).lower)
    assert max(bounds) <= epsilon
    assert min(bounds) > 0.85 * epsilon


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism with sensitivity / sigma = mu (Balle and Wang 2018, Thm. 8)."""
    def excess(eps: float) -> float:
        return stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    return optimize.brentq(excess, 0.0, 100.0)


@pytest.mark.parametrize("mu", [0.5, 2.0])
def test_bound_never_exceeds_gaussian_mechanism_epsilon(mu):
    delta = 1e-5
    epsilon = _gaussian_epsilon(mu, delta)
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        members = rng.random(100_000) < 0.5
        released = mu * members + rng.normal(size=members.size)
        bound = epsilon_lower_bound(released, members, delta=delta, seed=seed)
        assert 0 < bound.lower <= epsilon


# --- (1) the attack finds members of a model that memorizes, trained by the federated code path -------------

@pytest.fixture(scope="module")
def text_pool():
    """400 of the embedded corpus' 1,346 Debian descriptions; the vocabulary from the other 946."""
    return _benchmark().make_pool("embedded", size=400, vocab_size=2000, seed=0)


def test_a_public_corpus_for_dplda_is_drawn_from_outside_the_pool(text_pool, tmp_path):
    """Its documents are public: never in the pool, so never counted as members or non-members."""
    bench = _benchmark()
    source = text_pool.source
    assert text_pool.outside.size == source.n_docs - 400  # the pool's 400 documents, the rest outside it
    chosen = bench.public_documents(text_pool, 100, seed=0)
    assert chosen.size == 100 and np.isin(chosen, text_pool.outside).all()
    lines = bench.write_public(text_pool, 100, tmp_path / "public.jsonl", seed=0).read_text().splitlines()
    assert [json.loads(line)["text"] for line in lines] == [" ".join(source.words(int(d))) for d in chosen]
    with pytest.raises(UserInputError, match="--public-docs"):
        bench.public_documents(text_pool, text_pool.outside.size + 1, seed=0)


def _train(pool, members, tmp: Path, run_config: dict, seed: int):
    bench = _benchmark()
    vocabulary = tmp / "vocabulary.txt"
    if not vocabulary.exists():
        vocabulary.write_text("\n".join(pool.vocabulary) + "\n", encoding="utf-8")
    data = bench.write_octis(tmp / f"corpus-{seed}", pool, members)
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.WARNING)  # quiet while it trains; restored, later tests read Flower's INFO lines
    try:
        return bench.train_federated({**bench.BASE, **run_config, "dataset": str(data),
                                      "vocabulary": str(vocabulary), "seed": seed}, tmp / f"run-{seed}")
    finally:
        flwr_logger.setLevel(level)


def test_attack_finds_members_of_an_overfitted_model(text_pool, tmp_path):
    """Many topics and many sweeps over 200 documents: the model memorizes its documents; the audit fails it."""
    bench = _benchmark()
    members = bench.balanced_membership(2, text_pool.corpus.n_docs, seed=0)[0]
    model = _train(text_pool, members, tmp_path, {"method": "lda", "num-topics": 50, "num-rounds": 20,
                                                 "lda.local-sweeps": 10}, seed=0)
    scores = bench.model_scores(model, text_pool, text_pool.counts)
    auc, low, _ = auc_interval(scores, members)
    bound = epsilon_lower_bound(scores, members, delta=1e-5)
    assert auc > 0.8 and low > 0.7
    assert bound.lower > 0.5  # the 95% lower end of the bound's interval excludes 0 (lda accounts no eps)
    assert model.metadata["privacy"]["epsilon"] is None


def test_bound_stays_below_the_accounted_epsilon_of_a_dplda_run(text_pool, tmp_path):
    bench = _benchmark()
    pool = bench.Pool(text_pool.corpus.subset(np.arange(200)), text_pool.vocabulary, "first 200 of the test pool")
    n_models = 4  # LiRA with a pooled variance needs one IN and one OUT shadow per trial
    members = bench.balanced_membership(n_models, pool.corpus.n_docs, seed=1)
    scores = np.empty(members.shape)
    accounted = []
    for i in range(n_models):
        model = _train(pool, members[i], tmp_path, {"method": "dplda", "num-topics": 5, "num-rounds": 3,
                                                    "dplda.epsilon": 1.0, "dplda.sample-rate": 0.5,
                                                    "dplda.init": "random"}, seed=i)
        report = model.metadata["privacy"]
        assert report["unit"] == "document"
        accounted.append(report["epsilon"])
        scores[i] = bench.model_scores(model, pool, pool.counts)
    for value in (scores, lira_scores(scores, members), lira_scores(scores, members, online=False)):
        ok = np.isfinite(value)
        bound = epsilon_lower_bound(value[ok], members[ok], delta=1e-5)
        assert bound.lower <= min(accounted) <= 1.0 + 1e-9


def test_methods_option_parsing():
    bench = _benchmark()
    settings = bench.parse_methods(["lda", "dplda:eps=1,2:num-rounds=10"])
    assert settings[0] == ("lda", "default", {})
    assert [s[2] for s in settings[1:]] == [{"dplda.epsilon": "1", "num-rounds": "10"},
                                            {"dplda.epsilon": "2", "num-rounds": "10"}]
    with pytest.raises(Exception, match="neither"):
        bench.parse_methods(["lda:bogus=1"])
