"""Guided topics: the seed-words file, the prior it makes, its refusals and an lda run that follows it."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from flower_topics.errors import UserInputError
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server, synthetic_truth
from flower_topics.methods import METHODS
from flower_topics.models.lda import topic_word_distribution
from flower_topics.models.seed_words import (
    SeedPrior,
    dropped_line,
    read_seed_lines,
    seed_prior,
)
from flower_topics.run.config import parse_run_config
from flower_topics.strategies.lda import ADLDA
from flower_topics.topic_model.model_file import load_model
from flower_topics.wire import lda as wire
from tests.flower_harness import LoopbackGrid

VOCABULARY = ["apple", "bank", "cup", "dog", "egg", "film"]


def _file(tmp_path, text: str):
    path = tmp_path / "seeds.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_lines_are_topics_in_file_order(tmp_path):
    path = _file(tmp_path, "# business\nbank cup bank\n\n  film egg \n")
    assert read_seed_lines(path) == [["bank", "cup"], ["film", "egg"]]


@pytest.mark.parametrize("text", [None, "", "\n  \n# only a comment\n"])
def test_a_missing_or_empty_file_is_one_line(tmp_path, text):
    path = str(tmp_path / "absent.txt") if text is None else _file(tmp_path, text)
    with pytest.raises(UserInputError) as error:
        read_seed_lines(path)
    message = str(error.value)
    assert "\n" not in message and "seed-words" in message
    assert ("is not a file" if text is None else "holds no seed words") in message


def test_words_outside_the_vocabulary_are_named_and_dropped():
    prior, dropped = seed_prior([["bank", "zebra", "cup"], ["yak", "film"]], VOCABULARY, n_topics=4, weight=2.0)
    assert dropped == ["zebra", "yak"]
    assert prior.topics.tolist() == [0, 0, 1] and prior.words.tolist() == [1, 2, 5]
    line = dropped_line(dropped)
    assert "\n" not in line and "zebra, yak" in line and line.startswith("seed-words: 2 seed word(s)")


def test_no_seed_word_left_or_too_many_lines_is_refused():
    with pytest.raises(UserInputError, match="none of the 2 seed words is in the agreed vocabulary"):
        seed_prior([["zebra"], ["yak"]], VOCABULARY, n_topics=4, weight=1.0)
    with pytest.raises(UserInputError, match="seeds 3 topics but num-topics is 2"):
        seed_prior([["bank"], ["cup"], ["dog"]], VOCABULARY, n_topics=2, weight=1.0)


def test_the_prior_matches_a_hand_written_one():
    prior = SeedPrior([0, 0, 2], [1, 4, 1], weight=3.0, n_topics=3, n_words=6)
    beta = 0.5
    expected = np.full((3, 6), 0.5)
    expected[0, 1] = expected[0, 4] = expected[2, 1] = 3.5
    np.testing.assert_array_equal(prior.matrix(beta), expected)
    np.testing.assert_array_equal(prior.topic_sums(beta), [3.0 + 6.0, 3.0, 3.0 + 3.0])
    rows, priors = prior.word_rows(beta)
    assert rows.tolist() == [-1, 0, -1, -1, 1, -1]
    np.testing.assert_array_equal(priors, [[3.5, 0.5, 3.5], [3.5, 0.5, 0.5]])
    assert prior.seeded_topics == 3
    with pytest.raises(ValueError, match="listed twice"):
        SeedPrior([0, 0], [1, 1], weight=1.0, n_topics=3, n_words=6)


def test_topic_word_uses_the_seeded_prior():
    """phi_kw = (n_kw + beta_kw) / (n_k + B_k), by hand on a 2 x 3 count matrix."""
    counts = np.array([[3, 0, 1], [0, 2, 0]])
    prior = SeedPrior([1], [0], weight=2.0, n_topics=2, n_words=3)
    phi = topic_word_distribution(counts, 1.0, prior)
    np.testing.assert_allclose(phi, [[4 / 7, 1 / 7, 2 / 7], [3 / 7, 3 / 7, 1 / 7]])


def test_settings_carry_the_seed_pairs_to_the_parties():
    settings = wire.LDASettings(n_topics=4, alpha=0.1, beta=0.01)
    prior, _ = seed_prior([["bank", "cup"], ["film"]], VOCABULARY, n_topics=4, weight=5.0)
    seeded = settings.with_seeds(prior)
    record = seeded.to_record()
    assert record[wire.SEED_TOPICS_KEY] == [0, 0, 1] and record[wire.SEED_WORDS_KEY] == [1, 2, 5]
    back = wire.LDASettings.from_record(record)
    assert back == seeded
    np.testing.assert_array_equal(back.seed_prior(len(VOCABULARY)).matrix(0.01), prior.matrix(0.01))
    assert wire.SEED_TOPICS_KEY not in settings.to_record() and settings.seed_prior(6) is None


def test_lda_checks_the_file_before_the_run(tmp_path):
    with pytest.raises(UserInputError, match="is not a file"):
        parse_run_config({"method": "lda", "seed-words": str(tmp_path / "absent.txt")})
    with pytest.raises(UserInputError, match="holds no seed words"):
        parse_run_config({"method": "lda", "seed-words": _file(tmp_path, "\n")})
    with pytest.raises(UserInputError, match="seeds 3 topics but num-topics is 2"):
        parse_run_config({"method": "lda", "num-topics": 2, "seed-words": _file(tmp_path, "a\nb\nc\n")})
    assert parse_run_config({"method": "lda", "seed-words": _file(tmp_path, "bank\n")})["seed-weight"] == 100.0


@pytest.mark.parametrize("method", [name for name, spec in METHODS.items() if spec.seed_words])
def test_methods_without_seed_words_refuse_them_in_one_line(tmp_path, method):
    public = tmp_path / "vocabulary.txt"
    public.write_text("bank\ncup\n", encoding="utf-8")
    extra = {"vocabulary": str(public), "federated-eval": False} if method == "dplda" else {}
    with pytest.raises(UserInputError) as error:
        parse_run_config({"method": method, "seed-words": _file(tmp_path, "bank\n"), **extra})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"seed-words: {method} cannot take seed words: ")
    assert METHODS[method].seed_words in message
    parse_run_config({"method": method, **extra})  # without seeds the same config is accepted


def test_the_strategy_names_dropped_words_and_refuses_when_none_is_left(tmp_path, caplog):
    config = parse_run_config({"num-topics": 3, "seed-words": _file(tmp_path, "Bank zebra\nfilm\n"),
                               "seed-weight": 4.0})
    with caplog.at_level(logging.WARNING, logger="flower_topics"):
        strategy = ADLDA.from_config(config, VOCABULARY)
    assert [r.getMessage() for r in caplog.records if r.name == "flower_topics"] == [dropped_line(["zebra"])]
    assert strategy.lda.seed_topics == (0, 1) and strategy.lda.seed_words == (1, 5)  # "Bank" lowercased
    assert strategy.train_config()["seed-weight"] == 4.0
    report = strategy.privacy_report().to_dict()
    assert report["seed_words"].startswith("public: 2 seed word(s) for 2 topic(s)")
    assert "cost no privacy" in report["seed_words"]
    assert strategy.evaluation_counts(strategy.initial_arrays()) is None  # phi's prior is not one number
    none_left = parse_run_config({"num-topics": 3, "seed-words": _file(tmp_path, "zebra\nyak\n")})
    with pytest.raises(UserInputError, match="none of the 2 seed words"):
        ADLDA.from_config(none_left, VOCABULARY)


SMALL = {
    "dataset": "synthetic", "synthetic-nodes": 3, "synthetic-topics": 6, "synthetic-shared-topics": 3,
    "synthetic-vocab-size": 80, "synthetic-docs-per-node": 40, "synthetic-doc-min-length": 30,
    "synthetic-doc-max-length": 40, "num-topics": 6, "num-rounds": 6, "lda.local-sweeps": 5,
    "federated-eval": False, "min-df": 1,
}


def _similarity_to_truth(model, truth: np.ndarray, words) -> np.ndarray:
    """Bhattacharyya coefficients of the model's topics (rows) against the true topics (columns), over its words."""
    column = {w: j for j, w in enumerate(words)}
    true_phi = truth[:, [column[w] for w in model.vocabulary]]
    true_phi /= true_phi.sum(axis=1, keepdims=True)
    return np.sqrt(model.topic_word) @ np.sqrt(true_phi).T


def test_a_seeded_run_puts_each_seeded_topic_first_in_file_order(tmp_path):
    """Seeds from two true topics of a synthetic corpus, listed in the order (4, 1): the model's topics 0 and
    1 are those true topics, and its model file's topic_word is the seeded prior over its final counts."""
    truth, words = synthetic_truth(parse_run_config(SMALL))
    lines = [" ".join(words[j] for j in np.argsort(-truth[t])[:4]) for t in (4, 1)]
    config = {**SMALL, "seed-words": _file(tmp_path, "\n".join(lines) + "\n"), "seed-weight": 20.0,
              "output-dir": str(tmp_path / "run")}
    model = run_server(LoopbackGrid(make_client_app(config), 3, config), config)
    similarity = _similarity_to_truth(model, truth, words)
    assert similarity[0].argmax() == 4 and similarity[1].argmax() == 1
    assert similarity[0, 4] > 0.8 and similarity[1, 1] > 0.8
    counts = np.load(tmp_path / "run" / "state.npz")[wire.COUNTS_KEY]
    strategy = ADLDA.from_config(parse_run_config(config), model.vocabulary)
    np.testing.assert_allclose(load_model(tmp_path / "run" / "model.npz").topic_word,
                               topic_word_distribution(counts, 0.01, strategy.seeds))
    assert "cost no privacy" in model.metadata["privacy"]["seed_words"]


def test_fedlda_smooths_phi_with_the_seeded_prior(tmp_path):
    """fedlda's natural equivalent: the phi it sends the parties (and writes) is (max(n, 0) + beta_kw) / row sum."""
    from flwr.app import Array, ArrayRecord

    from flower_topics.strategies.fedlda import FedLDA
    from flower_topics.wire import fedlda as fedlda_wire

    config = parse_run_config({"method": "fedlda", "num-topics": 2, "beta": 0.5, "seed-weight": 3.0,
                               "seed-words": _file(tmp_path, "cup\n")})
    strategy = FedLDA.from_config(config, VOCABULARY)
    counts = np.array([[2, -1, 0, 1, 0, 0], [0, 0, 4, 0, 0, 1]], dtype=np.int64)
    phi = strategy.topic_word(ArrayRecord({fedlda_wire.COUNTS_KEY: Array(counts)}))
    by_hand = np.array([[2.5, 0.5, 3.5, 1.5, 0.5, 0.5], [0.5, 0.5, 4.5, 0.5, 0.5, 1.5]])
    np.testing.assert_allclose(phi, by_hand / by_hand.sum(axis=1, keepdims=True))
    assert "cost no privacy" in strategy.privacy_report().details["seed_words"]


def test_a_seeded_fedlda_run_puts_the_seeded_topics_first(tmp_path):
    """As for lda, through fedlda's phi (mechanism none: the prior's effect, not the noise's, is under test)."""
    truth, words = synthetic_truth(parse_run_config(SMALL))
    lines = [" ".join(words[j] for j in np.argsort(-truth[t])[:4]) for t in (4, 1)]
    config = {**SMALL, "method": "fedlda", "fedlda.mechanism": "none", "fedlda.local-sweeps": 5,
              "seed-words": _file(tmp_path, "\n".join(lines) + "\n"), "seed-weight": 20.0,
              "output-dir": str(tmp_path / "run")}
    config.pop("lda.local-sweeps")
    model = run_server(LoopbackGrid(make_client_app(config), 3, config), config)
    similarity = _similarity_to_truth(model, truth, words)
    assert similarity[0].argmax() == 4 and similarity[1].argmax() == 1


def test_pctd_normalizes_with_the_seeded_pseudo_count(tmp_path):
    """pctd's natural equivalent: eq. (11)'s pseudo-count becomes pctd.pseudo-count + seed-weight at the seeds."""
    from flower_topics.strategies.pctd import PCTD

    config = parse_run_config({"method": "pctd", "num-topics": 2, "pctd.pseudo-count": 0.5, "pctd.consistency": 0.0,
                               "seed-weight": 3.0, "seed-words": _file(tmp_path, "\ndog\n")})
    strategy = PCTD.from_config(config, VOCABULARY)
    total = np.array([[2.0, -1.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 4.0, 0.0, 0.0, 1.0]])
    by_hand = np.array([[2.5, 0.5, 0.5, 1.5, 0.5, 0.5], [0.5, 0.5, 4.5, 0.5, 0.5, 1.5]])
    by_hand[0, 3] += 3.0  # "dog" seeds topic 0 (the blank line is skipped)
    np.testing.assert_allclose(strategy.merge(total), by_hand / by_hand.sum(axis=1, keepdims=True))
    assert "cost no privacy" in strategy.privacy_report().details["seed_words"]


def test_a_seeded_pctd_run_puts_the_seeded_topics_first(tmp_path):
    """As for lda, through pctd's EM (no noise, no consistency step). EM starts from a random p(w|z) and keeps
    its mode, so the pull must outweigh the start: on this corpus seed-weight 20 leaves the topics where the
    start put them and 200 reorders them."""
    truth, words = synthetic_truth(parse_run_config(SMALL))
    lines = [" ".join(words[j] for j in np.argsort(-truth[t])[:4]) for t in (4, 1)]
    config = {**{k: v for k, v in SMALL.items() if k != "lda.local-sweeps"}, "method": "pctd", "pctd.sigma": 0.0,
              "pctd.consistency": 0.0, "num-rounds": 10, "seed-words": _file(tmp_path, "\n".join(lines) + "\n"),
              "seed-weight": 200.0, "output-dir": str(tmp_path / "run")}
    model = run_server(LoopbackGrid(make_client_app(config), 3, config), config)
    similarity = _similarity_to_truth(model, truth, words)
    assert similarity[0].argmax() == 4 and similarity[1].argmax() == 1
