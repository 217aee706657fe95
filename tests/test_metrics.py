"""Metrics of docs/architecture.md ("Metric definitions") against hand-computed values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.evaluation import evaluate_model
from flower_topics.metrics import (
    align_corpus,
    align_topics,
    classification_f1,
    clustering_scores,
    completion_split,
    fold_in,
    infer_theta,
    npmi_coherence,
    perplexity,
    top_word_indices,
    topic_diversity,
    topic_similarity_score,
    umass_coherence,
)
from flower_topics.topic_model.model_file import TopicModel

VOCAB = ("a", "b", "c", "d", "e")

# Document sets: d0 {a,b,c}, d1 {a,b}, d2 {a,d}, d3 {c,e}  (N = 4).
# D(a)=3, D(b)=2, D(c)=2, D(d)=1, D(e)=1;
# D(a,b)=2, D(a,c)=1, D(b,c)=1, D(e,d)=0, D(e,c)=1, D(d,c)=0.
REFERENCE_DOCS = [[0, 1, 2], [0, 1, 0], [0, 3], [2, 4]]

# Topic A ranks a > b > c; topic B ranks e > d > c.
TOPICS = np.array(
    [
        [0.40, 0.30, 0.20, 0.05, 0.05],
        [0.10, 0.05, 0.15, 0.30, 0.40],
    ]
)


@pytest.fixture
def reference() -> Corpus:
    return Corpus.from_documents(REFERENCE_DOCS, VOCAB)


# --------------------------------------------------------------------- top words
def test_top_words_rank_by_phi_and_break_ties_to_lower_column() -> None:
    phi = np.array([[0.3, 0.3, 0.2, 0.2], [0.2, 0.3, 0.3, 0.2]])
    assert top_word_indices(phi, 2).tolist() == [[0, 1], [1, 2]]
    assert top_word_indices(phi, 4).tolist() == [[0, 1, 2, 3], [1, 2, 0, 3]]
    assert top_word_indices(TOPICS, 3).tolist() == [[0, 1, 2], [4, 3, 2]]


def test_top_words_equal_a_full_stable_sort_with_many_ties() -> None:
    """The one-pass ranking (and the sort used for large n) is the full stable sort, ties included."""
    rng = np.random.default_rng(3)
    for _ in range(60):
        k, v = int(rng.integers(1, 6)), int(rng.integers(1, 40 if _ < 50 else 200))
        phi = rng.integers(0, 4, size=(k, v)).astype(float)  # few values: ties at every rank
        phi[phi.sum(axis=1) == 0, 0] = 1.0
        for n in {1, v, int(rng.integers(1, v + 1))}:
            expected = np.argsort(-phi, axis=1, kind="stable")[:, :n]
            np.testing.assert_array_equal(top_word_indices(phi, n), expected)


def test_top_words_reject_more_words_than_the_vocabulary() -> None:
    with pytest.raises(ValueError):
        top_word_indices(TOPICS, 6)


# -------------------------------------------------------------------- coherence
def test_npmi_by_hand(reference: Corpus) -> None:
    topic_a = (
        math.log((2 / 4) / ((3 / 4) * (2 / 4))) / -math.log(2 / 4)  # (a, b)
        + math.log((1 / 4) / ((3 / 4) * (2 / 4))) / -math.log(1 / 4)  # (a, c)
        + math.log((1 / 4) / ((2 / 4) * (2 / 4))) / -math.log(1 / 4)  # (b, c) = 0
    ) / 3
    topic_b = (
        -1.0  # (e, d) never co-occur
        + math.log((1 / 4) / ((1 / 4) * (2 / 4))) / -math.log(1 / 4)  # (e, c)
        - 1.0  # (d, c) never co-occur
    ) / 3
    result = npmi_coherence(TOPICS, reference, top_n=3)
    np.testing.assert_allclose(result.per_topic, [topic_a, topic_b])
    assert result.mean == pytest.approx((topic_a + topic_b) / 2)
    assert topic_b == pytest.approx(-0.5)
    assert result.n_absent == 0


def test_npmi_is_one_when_the_pair_is_in_every_document() -> None:
    corpus = Corpus.from_documents([[0, 1], [1, 0, 0]], ("a", "b", "c"))
    result = npmi_coherence(np.array([[0.5, 0.4, 0.1]]), corpus, top_n=2)
    assert result.mean == 1.0


def test_npmi_is_minus_one_for_a_word_absent_from_the_reference() -> None:
    corpus = Corpus.from_documents([[0], [0, 1]], ("a", "b", "c"))
    result = npmi_coherence(np.array([[0.1, 0.2, 0.7]]), corpus, top_n=2)
    assert result.mean == -1.0
    assert result.n_absent == 1


def test_umass_by_hand_with_the_higher_ranked_word_in_the_denominator(reference: Corpus) -> None:
    topic_a = (
        math.log((2 + 1) / 3)  # (a, b): D(a) = 3; the swapped orientation would give log(3/2)
        + math.log((1 + 1) / 3)  # (a, c)
        + math.log((1 + 1) / 2)  # (b, c)
    )
    topic_b = (
        math.log((0 + 1) / 1)  # (e, d): D(e) = 1
        + math.log((1 + 1) / 1)  # (e, c)
        + math.log((0 + 1) / 1)  # (d, c): D(d) = 1
    )
    result = umass_coherence(TOPICS, reference, top_n=3)
    np.testing.assert_allclose(result.per_topic, [topic_a, topic_b])
    assert result.mean == pytest.approx((math.log(2 / 3) + math.log(2)) / 2)


def test_umass_pair_with_an_absent_higher_ranked_word_contributes_zero() -> None:
    corpus = Corpus.from_documents([[0], [0, 1]], ("a", "b", "c"))
    # Top words c (absent, D = 0 clamped to 1), b, a.
    result = umass_coherence(np.array([[0.1, 0.2, 0.7]]), corpus, top_n=3)
    expected = 0.0 + 0.0 + math.log((1 + 1) / 1)  # (c, b), (c, a), (b, a): D(b) = 1
    assert result.mean == pytest.approx(expected)
    assert result.n_absent == 1


def test_coherence_uses_all_words_of_a_small_vocabulary(reference: Corpus) -> None:
    assert npmi_coherence(TOPICS, reference).per_topic.shape == (2,)


# -------------------------------------------------------------------- diversity
def test_topic_diversity_by_hand() -> None:
    # Top 3: {a, b, c} and {e, d, c} -> 5 distinct words among 3 * 2.
    assert topic_diversity(TOPICS, top_n=3) == pytest.approx(5 / 6)
    assert topic_diversity(TOPICS[[0, 0]], top_n=3) == pytest.approx(3 / 6)
    assert topic_diversity(TOPICS, top_n=25) == pytest.approx(5 / 10)


# ------------------------------------------------------------------- similarity
def test_tss_by_hand() -> None:
    truth = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]])
    inferred = np.array([[0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 0.5, 0.5]])
    # True topic 1 vs inferred 1: 2 sqrt(0.5 * 0.25) = sqrt(0.5); vs inferred 2: 0.
    # True topic 2 vs inferred 2: 1.
    result = topic_similarity_score(truth, inferred)
    assert result.score == pytest.approx(math.sqrt(0.5) + 1.0)
    assert result.normalized == pytest.approx((math.sqrt(0.5) + 1.0) / 2)
    # 1 - H^2 with H^2 = 1/2 sum (sqrt p - sqrt q)^2.
    half_squared = 0.5 * (2 * (math.sqrt(0.5) - 0.5) ** 2 + 2 * 0.5**2)
    assert topic_similarity_score(truth[:1], inferred[:1]).score == pytest.approx(1 - half_squared)


def test_tss_is_k_for_identical_topics_and_invariant_to_permutation() -> None:
    rng = np.random.default_rng(3)
    truth = rng.dirichlet(np.full(40, 0.2), size=6)
    assert topic_similarity_score(truth, truth).score == pytest.approx(6.0)
    permuted = topic_similarity_score(truth, truth[[4, 2, 0, 5, 1, 3]])
    assert permuted.score == pytest.approx(6.0)
    assert permuted.normalized == pytest.approx(1.0)
    other = rng.dirichlet(np.full(40, 0.2), size=4)
    assert topic_similarity_score(truth, other).score == pytest.approx(
        topic_similarity_score(truth[::-1], other[[3, 1, 0, 2]]).score
    )


def test_align_topics_drops_unknown_true_words_and_renormalizes() -> None:
    truth = np.array([[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]])
    aligned = align_topics(truth, ("x", "a", "b"), ("b", "a", "c"))
    np.testing.assert_allclose(aligned, [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    only_unknown = align_topics(np.array([[1.0, 0.0]]), ("x", "a"), ("a",))
    np.testing.assert_array_equal(only_unknown, [[0.0]])


# ------------------------------------------------------------ vocabulary, theta
def test_align_corpus_maps_columns_and_counts_oov() -> None:
    corpus = Corpus.from_documents([[0, 2, 1], [2, 2], [1]], ("a", "b", "zz"), labels=["x", "y", "x"])
    aligned, n_oov = align_corpus(corpus, ("b", "a"))
    assert n_oov == 3
    assert aligned.vocabulary == ("b", "a")
    assert [aligned.words(d) for d in range(3)] == [["a", "b"], [], ["b"]]
    assert aligned.labels.tolist() == ["x", "y", "x"]
    same, none = align_corpus(corpus, corpus.vocabulary)
    assert same is corpus and none == 0


def test_infer_theta_recovers_a_known_mixture() -> None:
    rng = np.random.default_rng(0)
    phi = rng.dirichlet(np.full(30, 0.1), size=3)
    true_theta = np.array([0.6, 0.3, 0.1])
    tokens = rng.choice(30, size=20_000, p=true_theta @ phi)
    corpus = Corpus.from_documents([tokens, []], [str(w) for w in range(30)])
    theta = infer_theta(phi, corpus, n_iter=300)
    np.testing.assert_allclose(theta[0], true_theta, atol=0.02)
    np.testing.assert_allclose(theta[1], [1 / 3, 1 / 3, 1 / 3])


def test_infer_theta_with_separable_topics_is_alpha_plus_counts() -> None:
    # Words a, b belong only to topic 1, c only to topic 2: responsibilities are exact.
    phi = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    corpus = Corpus.from_documents([[0, 1, 0, 2]], ("a", "b", "c"))
    theta = infer_theta(phi, corpus, alpha=0.5, n_iter=5)
    np.testing.assert_allclose(theta, [[(0.5 + 3) / 5, (0.5 + 1) / 5]])


# ------------------------------------------------------------------- perplexity
def test_completion_split_observes_floor_half_of_each_document() -> None:
    corpus = Corpus.from_documents([list(range(n)) for n in (0, 1, 2, 5, 8, 9)], [str(w) for w in range(9)])
    observed = completion_split(corpus, seed=1)
    per_doc = np.add.reduceat(observed.astype(int), corpus.doc_ptr[:-1])[corpus.doc_lengths > 0]
    assert per_doc.tolist() == [0, 1, 2, 4, 4]
    np.testing.assert_array_equal(observed, completion_split(corpus, seed=1))
    big = Corpus.from_documents([np.arange(200) % 9], [str(w) for w in range(9)])
    assert not np.array_equal(completion_split(big, seed=0), completion_split(big, seed=1))


def test_perplexity_with_one_topic_by_hand() -> None:
    phi = np.array([[0.5, 0.3, 0.2]])
    # Held out: 2 of the 4 a's, 2 of the 3 b's; the one-token document is skipped.
    corpus = Corpus.from_documents([[0, 0, 0, 0], [1, 1, 1], [2]], ("a", "b", "c"))
    result = perplexity(phi, corpus, seed=7, n_oov=3)
    assert result.perplexity == pytest.approx(math.exp(-(2 * math.log(0.5) + 2 * math.log(0.3)) / 4))
    assert (result.n_eval_tokens, result.n_oov, result.n_docs) == (4, 3, 2)


def test_perplexity_folds_in_theta_on_the_first_half() -> None:
    alpha = 0.1
    phi = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]])
    # Doc 1 (topic-1 words only): 3 observed, theta_1 = (alpha + 3) / (3 + 2 alpha), 3 held out.
    # Doc 2 (topic-2 words only): 1 observed, theta_2 = (alpha + 1) / (1 + 2 alpha), 2 held out.
    corpus = Corpus.from_documents([[0, 1, 0, 1, 0, 1], [2, 3, 2]], ("a", "b", "c", "d"))
    log_p = 3 * math.log(0.5 * (alpha + 3) / (3 + 2 * alpha)) + 2 * math.log(0.5 * (alpha + 1) / (1 + 2 * alpha))
    result = perplexity(phi, corpus, alpha=alpha, n_iter=10)
    assert result.perplexity == pytest.approx(math.exp(-log_p / 5))
    assert result.n_eval_tokens == 5


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size() -> None:
    rng = np.random.default_rng(0)
    corpus = Corpus.from_documents([rng.integers(0, 50, 20) for _ in range(10)], [str(w) for w in range(50)])
    assert perplexity(np.full((4, 50), 1 / 50), corpus).perplexity == pytest.approx(50.0)


def test_a_held_out_word_of_probability_zero_makes_the_perplexity_infinite() -> None:
    # Topic 1 cannot emit "c": the document's observed half is all "a", its held-out half has a "c".
    phi = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    corpus = Corpus.from_documents([[0, 0, 0, 2]], ("a", "b", "c"))
    seed = next(s for s in range(100) if list(corpus.tokens[~completion_split(corpus, seed=s)]) in ([0, 2], [2, 0]))
    assert perplexity(phi, corpus, seed=seed, alpha=0.0).perplexity == math.inf


def test_perplexity_needs_a_document_with_two_tokens() -> None:
    corpus = Corpus.from_documents([[0], []], ("a", "b"))
    with pytest.raises(ValueError):
        perplexity(np.array([[0.5, 0.5]]), corpus)


# --------------------------------------------------------------- label scores
def test_clustering_scores_by_hand() -> None:
    theta = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.3, 0.7], [0.5, 0.5 + 1e-9]])
    labels = ["x", "x", "x", "y", "y"]
    # Clusters (0, 0, 1, 1, 1). Joint counts: (0, x) = 2, (1, x) = 1, (1, y) = 2.
    mutual_information = (
        2 / 5 * math.log((2 / 5) / ((2 / 5) * (3 / 5)))
        + 1 / 5 * math.log((1 / 5) / ((3 / 5) * (3 / 5)))
        + 2 / 5 * math.log((2 / 5) / ((3 / 5) * (2 / 5)))
    )
    entropy = -(2 / 5 * math.log(2 / 5) + 3 / 5 * math.log(3 / 5))  # same for clusters and labels
    scores = clustering_scores(theta, labels)
    assert scores["purity"] == pytest.approx((2 + 2) / 5)
    assert scores["nmi"] == pytest.approx(mutual_information / entropy)


def test_classification_f1_by_hand() -> None:
    theta_train = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.8]])
    labels_train = ["x", "x", "y", "y"]
    theta_test = np.array([[0.95, 0.05], [0.05, 0.95], [0.9, 0.1]])
    labels_test = ["x", "y", "y"]
    # Predicted (x, y, x): F1(x) = 2 (1/2)(1) / (1/2 + 1) = 2/3; F1(y) = 2 (1)(1/2) / (1 + 1/2) = 2/3.
    assert classification_f1(theta_train, labels_train, theta_test, labels_test) == pytest.approx(2 / 3)
    assert classification_f1(theta_train, labels_train, theta_test[:2], labels_test[:2]) == 1.0


def test_classification_f1_needs_two_training_labels() -> None:
    with pytest.raises(ValueError):
        classification_f1(np.eye(2), ["x", "x"], np.eye(2), ["x", "y"])


# -------------------------------------------------------------- evaluate_model
def _evaluation_corpus() -> Corpus:
    vocabulary = VOCAB + ("zz",)
    documents = REFERENCE_DOCS + [[0, 0, 0, 0], [1, 5, 1, 1]]
    return Corpus.from_documents(
        documents,
        vocabulary,
        labels=["x", "x", "y", "x", "x", "y"],
        split=["train", "train", "val", "train", "test", "test"],
    )


def test_evaluate_model_by_hand() -> None:
    corpus = _evaluation_corpus()
    tokens_before = corpus.tokens.copy()
    phi = np.array([[0.4, 0.3, 0.2, 0.06, 0.04]])
    model = TopicModel(phi[:, ::-1].copy(), VOCAB[::-1])  # columns in another order than the corpus
    true_vocabulary = ("zz", "a", "b", "c", "d", "e")
    truth = np.concatenate([[0.5], phi[0] / 2])[None, :]
    metrics = evaluate_model(model, corpus, truth=(truth, true_vocabulary), use_labels=True)

    assert set(metrics) == {
        "perplexity", "n_eval_tokens", "n_oov", "npmi", "umass", "diversity",
        "tss", "tss_normalized", "nmi", "purity", "macro_f1",
    }  # fmt: skip
    json.dumps(metrics)
    assert all(type(v) in (int, float) for v in metrics.values())
    # K = 1: held out 2 of the four a's and 2 of the three b's ("zz" dropped, counted).
    assert metrics["perplexity"] == pytest.approx(math.exp(-(2 * math.log(0.4) + 2 * math.log(0.3)) / 4))
    assert (metrics["n_eval_tokens"], metrics["n_oov"]) == (4, 1)
    assert metrics["diversity"] == 1.0  # 5 words, top 25 clamped to the 5 of them
    # Coherence on train + val (the four reference documents), top 10 clamped to 5 words.
    reference = Corpus.from_documents(REFERENCE_DOCS, VOCAB)
    assert metrics["npmi"] == pytest.approx(npmi_coherence(phi, reference).mean)
    assert metrics["umass"] == pytest.approx(umass_coherence(phi, reference).mean)
    # "zz" dropped from the true topic and the rest renormalized: identical to the model.
    assert metrics["tss"] == pytest.approx(1.0)
    assert metrics["tss_normalized"] == pytest.approx(1.0)
    # K = 1: one cluster; test labels (x, y) -> purity 1/2, NMI 0. The classifier sees a
    # constant feature and predicts the training majority x: F1(x) = 2/3, F1(y) = 0.
    assert metrics["purity"] == pytest.approx(0.5)
    assert metrics["nmi"] == pytest.approx(0.0)
    assert metrics["macro_f1"] == pytest.approx(1 / 3)
    np.testing.assert_array_equal(corpus.tokens, tokens_before)


def test_evaluate_model_uses_the_given_reference() -> None:
    model = TopicModel(TOPICS, VOCAB)
    other = Corpus.from_documents([[0, 1], [1, 0]], ("b", "a"))
    metrics = evaluate_model(model, _evaluation_corpus(), reference=other)
    aligned, _ = align_corpus(other, VOCAB)
    assert metrics["npmi"] == pytest.approx(npmi_coherence(TOPICS, aligned).mean)
    assert "tss" not in metrics and "nmi" not in metrics


def test_evaluate_model_rejects_bad_inputs() -> None:
    model = TopicModel(TOPICS, VOCAB)
    corpus = _evaluation_corpus()
    with pytest.raises(ValueError):
        evaluate_model(model, Corpus.from_documents(REFERENCE_DOCS, VOCAB))
    unlabeled = Corpus(corpus.tokens, corpus.doc_ptr, corpus.vocabulary, split=corpus.split)
    with pytest.raises(UserInputError):
        evaluate_model(model, unlabeled, use_labels=True)
    no_test = Corpus(corpus.tokens, corpus.doc_ptr, corpus.vocabulary, split=["train"] * 6)
    with pytest.raises(UserInputError):
        evaluate_model(model, no_test)


def test_fold_in_is_the_em_over_all_documents_at_once() -> None:
    """The compiled EM, document by document, equals the update written over the whole matrix with numpy
    (theta <- alpha + theta * (counts / (theta phi)) phi^T, normalized), zero-probability words included."""
    rng = np.random.default_rng(5)
    phi = rng.dirichlet(np.full(30, 0.3), size=6)
    phi[:, 7] = 0.0  # a word no topic can emit: it carries no responsibility
    phi /= phi.sum(axis=1, keepdims=True)
    counts = sp.random(40, 30, density=0.2, random_state=6, format="csr", data_rvs=lambda n: rng.integers(1, 4, n))
    counts[3] = 0  # an empty document keeps the uniform theta
    counts.eliminate_zeros()
    dense = counts.toarray()
    theta = np.full((40, 6), 1 / 6)
    for _ in range(25):
        p = theta @ phi
        ratio = np.divide(dense, p, out=np.zeros_like(dense), where=p > 0)
        theta = 0.05 + theta * (ratio @ phi.T)
        theta /= theta.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(fold_in(phi, counts, alpha=0.05, n_iter=25), theta, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fold_in(phi, counts, alpha=0.05, n_iter=25)[3], 1 / 6)
    one = fold_in(phi, counts, alpha=0.05, n_iter=25, threads=1)
    for threads in (2, 3, 7, 64):  # documents split over threads (more threads than documents too): the same bits
        assert np.array_equal(fold_in(phi, counts, alpha=0.05, n_iter=25, threads=threads), one)


def test_fold_in_leaves_the_callers_matrix_alone() -> None:
    counts = sp.csr_matrix(np.array([[2.0, 0.0, 1.0]]))
    fold_in(np.array([[0.5, 0.25, 0.25], [0.2, 0.4, 0.4]]), counts, alpha=0.01, n_iter=3)
    np.testing.assert_array_equal(counts.toarray(), [[2.0, 0.0, 1.0]])


def test_row_normalizer_by_hand_and_its_input_untouched() -> None:
    from flower_topics.models.topic_word import normalize_rows

    counts = np.array([[1, 3, 0], [0, 0, 0], [-2, 4, 2]])
    got = normalize_rows(counts, 1.0)
    np.testing.assert_array_equal(got[0], np.array([2.0, 4.0, 1.0]) / 7.0)
    np.testing.assert_array_equal(got[1], np.full(3, 1.0 / 3.0))
    np.testing.assert_array_equal(got[2], np.array([-1.0, 5.0, 3.0]) / 7.0)
    clamped = normalize_rows(counts, 0.0, clamp=True)
    np.testing.assert_array_equal(clamped[1], np.full(3, 1.0 / 3.0))  # no mass: uniform
    np.testing.assert_array_equal(clamped[2], np.array([0.0, 4.0, 2.0]) / 6.0)
    assert counts[2, 0] == -2  # the caller's array is not written
    weights = np.array([[2.0, -5.0]])
    assert np.array_equal(normalize_rows(weights), np.array([[1.0, 1.0]]) / 2)  # negative total: uniform
    for bad in (np.array([[1.0, np.nan]]), np.array([[np.inf, 1.0]]), np.ones(3)):
        with pytest.raises(ValueError, match="finite"):
            normalize_rows(bad)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1e-300])
def test_a_topic_word_matrix_with_one_bad_entry_is_refused(bad: float) -> None:
    from flower_topics.metrics.inference import check_topic_word

    phi = np.full((3, 50), 0.02)
    phi[2, 49] = bad  # the last entry: the single pass reads them all
    with pytest.raises(ValueError, match="finite and non-negative"):
        check_topic_word(phi)
    phi[2, 49] = 0.0
    assert check_topic_word(phi) is not None


@pytest.mark.parametrize("n_words", [1, 7, 8, 127, 128, 129, 1000, 8193, 40_001])
def test_the_compiled_counts_model_is_numpys_to_the_last_bit(n_words: int) -> None:
    """The evaluation's one-pass model builder reproduces ``normalize_rows`` then a second division by the row
    sums, numpy's pairwise summation included (block sizes around 8 and 128, halves above), and so do its
    columns taken alone, transposed (what a party's evaluation reads)."""
    from flower_topics.models.topic_word import counts_model, counts_model_columns_t, normalize_rows

    rng = np.random.default_rng(n_words)
    for dtype, scale in ((np.int32, 1), (np.int64, 997), (np.uint16, 3)):
        counts = (rng.poisson(0.8, size=(11, n_words)) * scale).astype(dtype)
        expected = normalize_rows(counts, 0.013)
        expected /= expected.sum(axis=1, keepdims=True)
        phi_t = counts_model_columns_t(counts, 0.013, np.arange(n_words))
        assert np.array_equal(counts_model(counts, 0.013), expected)
        assert np.array_equal(phi_t, expected.T) and phi_t.flags.c_contiguous
    with pytest.raises(ValueError, match="positive prior"):
        counts_model(np.ones((2, 3), dtype=np.int64), 0.0)


def test_a_completion_loglik_refuses_a_transpose_that_is_not_the_models() -> None:
    from flower_topics.metrics.perplexity import completion_halves

    corpus = Corpus(tokens=np.array([0, 1, 2, 1, 0, 2, 2], dtype=np.int32), doc_ptr=np.array([0, 4, 7]),
                    vocabulary=("a", "b", "c"))
    halves = completion_halves(corpus, seed=0)
    phi = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    given = halves.loglik(phi, phi_t=np.ascontiguousarray(phi.T))
    assert given.loglik == halves.loglik(phi).loglik
    with pytest.raises(ValueError, match="transpose"):
        halves.loglik(phi, phi_t=np.asfortranarray(phi.T))  # phi itself, viewed transposed: not C-contiguous


def test_skipping_the_check_of_a_checked_model_changes_no_result() -> None:
    """A party checks the model as it receives it and then ranks and folds in without checking it again."""
    from flower_topics.metrics.coherence import coherence_word_ids
    from flower_topics.metrics.inference import top_word_indices
    from flower_topics.metrics.perplexity import completion_halves

    rng = np.random.default_rng(4)
    phi = rng.dirichlet(np.full(30, 0.3), size=4)
    assert np.array_equal(top_word_indices(phi, 7, check_input=False), top_word_indices(phi, 7))
    for a, b in zip(coherence_word_ids(phi, 10, check_input=False), coherence_word_ids(phi, 10)):
        assert np.array_equal(a, b)
    corpus = Corpus(tokens=rng.integers(0, 30, size=200).astype(np.int32), doc_ptr=np.arange(0, 201, 20),
                    vocabulary=tuple(f"w{i}" for i in range(30)))
    halves = completion_halves(corpus, seed=1)
    assert halves.loglik(phi, check_input=False).loglik == halves.loglik(phi).loglik
    with pytest.raises(ValueError, match="columns"):
        halves.loglik(phi[:, :20], check_input=False)
