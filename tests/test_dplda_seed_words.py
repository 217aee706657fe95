"""Guided topics for dplda: the seeded prior eta_kw in the natural-gradient step and the public lambda, the
seeded public starts (public LDA, embedding, random), a report that says the seeds cost nothing and an
accounting they do not touch, dropped seed words, an unchanged wire and a resumed run with the same prior."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from flwr.app import ConfigRecord

from flower_topics.errors import UserInputError
from flower_topics.models import svi
from flower_topics.models.seed_words import SeedPrior
from flower_topics.models.svi_seeds import seed_order, seeded_start
from flower_topics.privacy.accountants import Budget
from flower_topics.run.config import parse_run_config
from flower_topics.wire.dplda import LAMBDA_KEY, DPLDASettings
from tests.flower_harness import dplda_round

VOCABULARY = ("apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel", "iris")


def _file(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _config(tmp_path, **extra):
    vocab = _file(tmp_path, "vocab.txt", "\n".join(VOCABULARY) + "\n")
    return parse_run_config({"method": "dplda", "vocabulary": vocab, "federated-eval": False, "num-topics": 3,
                             "stopwords": "none", "dplda.init": "random", **extra})


def _from_config(config):
    from flower_topics.strategies.dplda import DPLDA
    from tests.flower_harness import as_server

    as_server()
    return DPLDA.from_config(config, VOCABULARY)


def _raw(arrays):
    from flower_topics.strategies.dplda import RAW_KEY

    return arrays[RAW_KEY].numpy()


# ---------------------------------------------------------------- the prior in the step


def _strategy(seeds):
    from flower_topics.strategies.dplda import DPLDA
    from tests.flower_harness import as_server, vocabulary

    as_server()
    settings = DPLDASettings(n_topics=2, alpha=0.1, sample_rate=0.5, clip=2.0, noise_multiplier=1.5, epsilon=3.0,
                             delta=1e-5)
    return DPLDA(vocabulary(3), settings, budget=Budget(3.0, 1e-5), eta=0.1, tau0=1.0, kappa=0.5, threshold=1.0,
                 background=0.0, init="random", seed=0, seeds=seeds)


def test_the_step_and_the_public_lambda_use_the_seeded_prior_by_hand():
    # w2 seeds topic 0, w0 seeds topic 1, weight 5: eta_kw = [[0.1, 0.1, 5.1], [5.1, 0.1, 0.1]]
    strategy = _strategy(SeedPrior(np.array([0, 1]), np.array([2, 0]), 5.0, 2, 3))
    s1, s2 = np.array([[1.0, 2.0, -1.0], [0.0, 4.0, 3.0]]), np.array([[3.0, 0.0, 1.0], [2.0, -2.0, 1.0]])
    _, (arrays, _) = dplda_round(strategy, 1, strategy.initial_arrays(), [s1, s2])
    # rho_0 = 1: lambda = eta_kw + S / q, S = [[4, 2, 0], [2, 2, 4]], q = 0.5
    first = np.array([[8.1, 4.1, 5.1], [9.1, 4.1, 8.1]])
    np.testing.assert_allclose(_raw(arrays), first)
    _, (arrays2, _) = dplda_round(strategy, 2, arrays, [s1])
    rho = 2 ** -0.5
    prior = np.array([[0.1, 0.1, 5.1], [5.1, 0.1, 0.1]])
    np.testing.assert_allclose(_raw(arrays2), (1 - rho) * first + rho * (prior + s1 / 0.5))
    # the public lambda subtracts the same prior: noise variance 72 (two replies of (1.5 x 2 / 0.5)^2),
    # threshold 1 x sqrt(72) = 8.49; signal = first - eta_kw = [[8, 4, 0], [4, 4, 8]]: nothing above it
    np.testing.assert_allclose(strategy.public(arrays), prior)


def test_public_lambda_thresholds_the_signal_above_a_matrix_prior_by_hand():
    from flower_topics.models.svi import public_lambda

    prior = np.array([[0.1, 0.1, 5.1], [5.1, 0.1, 0.1]])
    average = prior + np.array([[10.0, 3.0, -5.1], [0.0, 8.0, 2.5]])
    # threshold 1 x sqrt(9) = 3: keep signal > 3; the seed cells keep their 5 whatever their signal
    np.testing.assert_allclose(public_lambda(average, 9.0, eta=prior, threshold=1.0, background=0.0),
                               [[10.1, 0.1, 5.1], [5.1, 8.1, 0.1]])


def test_a_party_receives_what_it_received_before_only_the_lambda_values_differ(tmp_path):
    """The wire does not change: the parties never see eta, only the public lambda and the same settings."""
    from tests.flower_harness import FixedNodesGrid

    seeded = _from_config(_config(tmp_path, **{"seed-words": _file(tmp_path, "seeds.txt", "cherry\napple\n")}))
    plain = _from_config(_config(tmp_path))
    sent = {}
    for name, strategy in (("seeded", seeded), ("plain", plain)):
        messages = list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), FixedNodesGrid([7])))
        sent[name] = messages[0].content
    assert list(sent["seeded"]["arrays"].keys()) == list(sent["plain"]["arrays"].keys()) == [LAMBDA_KEY]
    assert dict(sent["seeded"]["config"]) == dict(sent["plain"]["config"])  # no seed, no weight, no path
    assert seeded.reply_spec() == plain.reply_spec()
    ours, theirs = sent["seeded"]["arrays"][LAMBDA_KEY].numpy(), sent["plain"]["arrays"][LAMBDA_KEY].numpy()
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape and not np.array_equal(ours, theirs)


# ---------------------------------------------------------------- the public starts


def _groups_corpus(tmp_path) -> str:
    """60 public documents, each of one group's words: {apple, banana, cherry}, {damson, elder, fig},
    {grape, hazel, iris}, plus a word outside the vocabulary."""
    rng = np.random.default_rng(0)
    groups = [VOCABULARY[0:3], VOCABULARY[3:6], VOCABULARY[6:9]]
    texts = [" ".join(rng.choice(groups[i % 3], 12)) + " zebra" for i in range(60)]
    return _file(tmp_path, "public.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))


@pytest.mark.parametrize("weight", [0.0, 500.0])  # 0: the public corpus' evidence; 500: dplda.public-weight
def test_the_public_lda_puts_each_seeded_topic_first_in_file_order(tmp_path, weight):
    """One seed word a line, in two orders: topic i holds line i's seed and the rest of its group on top."""
    public = _groups_corpus(tmp_path)
    for lines, groups in (("grape\napple\n", (2, 0)), ("apple\ngrape\n", (0, 2))):
        config = _config(tmp_path, **{"dplda.public-corpus": public, "dplda.public-weight": weight,
                                      "seed-words": _file(tmp_path, "seeds.txt", lines)})
        lam = _raw(_from_config(config).initial_arrays())
        for topic, group in enumerate(groups):
            top = {VOCABULARY[w] for w in np.argsort(-lam[topic])[:3]}
            assert top == set(VOCABULARY[3 * group:3 * group + 3]), (lines, topic, top)
            assert VOCABULARY[np.argmax(lam[topic])] == lines.split()[topic]  # the seed itself is first
        if weight:  # the start's pseudo-counts plus the seed weight a seed, as every later lambda holds the prior
            np.testing.assert_allclose(lam.sum(axis=1), [weight + 100.0 + 1e-3 * 9] * 2 + [weight + 1e-3 * 9])


def test_seed_order_gives_each_line_the_start_topic_holding_most_of_its_seeds_by_hand():
    start = np.array([[1.0, 1.0, 8.0, 1.0],   # topic 0: mostly w2 (line 1's seed)
                      [4.0, 4.0, 1.0, 1.0],   # topic 1: free
                      [1.0, 1.0, 1.0, 9.0],   # topic 2: mostly w3 (line 0's seeds: w3, w0)
                      [3.0, 3.0, 2.0, 2.0]])  # topic 3: free
    seeds = SeedPrior(np.array([0, 0, 1]), np.array([3, 0, 2]), 10.0, 4, 4)
    # shares on line 0's seeds {w0, w3}: 2/11, 5/10, 10/12, 5/10; on line 1's {w2}: 8/11, 1/10, 1/12, 2/10
    np.testing.assert_array_equal(seed_order(start, seeds), [2, 0, 1, 3])  # free topics 1, 3 keep their order
    by_hand = start[[2, 0, 1, 3]].copy()
    by_hand[0, [3, 0]] += 10.0
    by_hand[1, 2] += 10.0
    np.testing.assert_allclose(seeded_start(start, seeds), by_hand)
    np.testing.assert_allclose(seeded_start(start, seeds, reorder=False) - start, seeds.matrix(0.0))


def test_the_embedding_start_gives_each_seed_line_the_cluster_of_its_words():
    """Two clusters of word embeddings; whichever line names a word of a cluster gets that cluster's topic."""
    rng = np.random.default_rng(1)
    embeddings = np.vstack([rng.normal([5, 0, 0], 0.1, (4, 3)), rng.normal([0, 5, 0], 0.1, (4, 3))])
    start = svi.embedding_lambda(embeddings, 2, seed=0)
    for first, second in ((1, 6), (6, 1)):  # line 0 names a word of cluster A, then of cluster B
        seeds = SeedPrior(np.array([0, 1]), np.array([first, second]), 100.0, 2, 8)
        lam = seeded_start(start, seeds)
        for topic, word in enumerate((first, second)):
            cluster = np.arange(8) // 4 == word // 4
            start_mass = lam[topic] - seeds.matrix(0.0)[topic]
            assert start_mass[cluster].sum() > 0.99 * start_mass.sum()  # the topic is its seed's cluster
            assert lam[topic, word] >= 100.0  # plus the seed's weight


def test_the_random_start_keeps_its_rows_and_adds_the_seed_weight(tmp_path):
    config = _config(tmp_path, **{"seed-words": _file(tmp_path, "seeds.txt", "fig hazel\napple\n"), "seed-weight": 50.0,
                                  "seed": 4})
    strategy = _from_config(config)
    lam = _raw(strategy.initial_arrays())
    plain = svi.initial_lambda(3, len(VOCABULARY), 4)  # what the unseeded run starts from (same seed)
    excess = np.zeros_like(plain)
    excess[0, [5, 7]] = excess[1, 0] = 50.0
    order = seed_order(plain, strategy.seeds)
    assert sorted(order) == [0, 1, 2]
    np.testing.assert_allclose(lam, plain[order] + excess)
    assert lam.sum() == pytest.approx(plain.sum() + 150.0)


# ---------------------------------------------------------------- privacy, bad input, resume


def test_the_report_says_seeds_cost_nothing_and_the_accounting_is_unchanged(tmp_path):
    seeded = _from_config(_config(tmp_path, **{"seed-words": _file(tmp_path, "seeds.txt", "cherry fig\napple\n")}))
    plain = _from_config(_config(tmp_path))
    ours, theirs = seeded.privacy_report(), plain.privacy_report()
    assert ours.details["seed_words"] == ("public: 3 seed word(s) for 2 topic(s), read by the server from the "
                                          "seed-words file; they depend on no party's documents and cost no privacy")
    assert "seed_words" not in theirs.details
    assert seeded.dplda == plain.dplda and seeded.train_config() == plain.train_config()  # sigma, q, C: the same
    assert ours.details["noise_multiplier"] == theirs.details["noise_multiplier"]
    assert (ours.epsilon, ours.delta, ours.epsilon_round) == (theirs.epsilon, theirs.delta, theirs.epsilon_round)


def test_dplda_takes_seed_words_and_checks_the_file_before_the_run(tmp_path):
    with pytest.raises(UserInputError, match="is not a file"):
        _config(tmp_path, **{"seed-words": str(tmp_path / "absent.txt")})
    with pytest.raises(UserInputError, match="seeds 4 topics but num-topics is 3"):
        _config(tmp_path, **{"seed-words": _file(tmp_path, "seeds.txt", "a\nb\nc\nd\n")})
    assert _config(tmp_path, **{"seed-words": _file(tmp_path, "seeds.txt", "apple\n")})["method"] == "dplda"


def test_a_seed_outside_the_vocabulary_is_named_and_dropped(tmp_path, caplog):
    config = _config(tmp_path, **{"seed-words": _file(tmp_path, "seeds.txt", "Cherry zebra\napple\n")})
    with caplog.at_level(logging.WARNING, logger="flower_topics"):
        strategy = _from_config(config)
    assert "seed-words: 1 seed word(s) not in the agreed vocabulary, dropped: zebra" in caplog.text
    assert strategy.seeds.topics.tolist() == [0, 1] and strategy.seeds.words.tolist() == [2, 0]  # lowercased
    with pytest.raises(UserInputError, match="none of the 2 seed words"):
        _from_config(_config(tmp_path, **{"seed-words": _file(tmp_path, "none.txt", "zebra\nyak\n")}))


def test_a_resumed_run_rebuilds_the_same_seeded_prior(tmp_path):
    """Crash in round 3 of a seeded run, resume on fresh parties: the strategy is rebuilt from the run config over
    the checkpoint's vocabulary, and the final topics are the public lambda of the final state under that prior."""
    from flower_topics.federation.server_app import run_server
    from flower_topics.run.checkpoint import load_checkpoint
    from flower_topics.models.svi import public_lambda
    from flower_topics.strategies.dplda import (
        DPLDA,
        RAW_KEY,
        VARIANCE_KEY,
    )
    from tests.test_checkpoint_resume import Crash, _grid
    from tests.test_checkpoint_resume import _config as resume_config

    seeds = _file(tmp_path, "seeds.txt", "w0001 w0002 w0003\nw0010 w0011\n")
    config = resume_config("dplda", tmp_path / "run", **{"num-rounds": 4, "seed-words": seeds, "seed-weight": 30.0})
    with pytest.raises(Crash):
        run_server(_grid(config, crash_round=3), config)
    assert load_checkpoint(tmp_path / "run").round == 2
    model = run_server(_grid(config), {**config, "resume": str(tmp_path / "run")})
    rebuilt = DPLDA.from_config(parse_run_config(config), model.vocabulary)
    with np.load(tmp_path / "run" / "state.npz") as state:
        average, variance = state[RAW_KEY], float(state[VARIANCE_KEY][0])
    expected = public_lambda(average, variance, eta=rebuilt.prior, threshold=0.0, background=0.2)
    np.testing.assert_allclose(model.topic_word, expected / expected.sum(axis=1, keepdims=True), rtol=1e-6)
    unseeded = public_lambda(average, variance, eta=rebuilt.eta, threshold=0.0, background=0.2)
    assert not np.allclose(model.topic_word, unseeded / unseeded.sum(axis=1, keepdims=True), rtol=1e-3)
    column = {w: i for i, w in enumerate(model.vocabulary)}
    assert rebuilt.prior[0, column["w0001"]] == rebuilt.prior[1, column["w0010"]] == pytest.approx(30.01)
    assert "cost no privacy" in model.metadata["privacy"]["seed_words"]
