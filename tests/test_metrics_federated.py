"""Federated metric sums (flower_topics.metrics.pooled_sums) reproduce the pooled metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import normalized_mutual_info_score

from flower_topics.data import load_corpus
from flower_topics.data.corpus import Corpus
from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.data.splits import ensure_split
from flower_topics.data.synthetic import SyntheticConfig, make_synthetic_corpus
from flower_topics.evaluation import evaluate_model
from flower_topics.metrics import (
    align_corpus,
    clustering_scores,
    completion_split,
    infer_theta,
    npmi_coherence,
    perplexity,
    umass_coherence,
)
from flower_topics.metrics.pooled_sums import (
    Cooccurrence,
    HeldOut,
    coherence_from_counts,
    coherence_word_ids,
    cooccurrence,
    heldout_loglik,
    label_contingency,
    nmi_purity_from_contingency,
    pooled_perplexity,
)
from flower_topics.topic_model.model_file import TopicModel

REL = 1e-9
SEED, ALPHA, N_ITER = 5, 0.01, 100


def _three_parts(n_docs: int, seed: int) -> list[np.ndarray]:
    """Disjoint document indices covering ``range(n_docs)``: 15%, 30% and 55%, shuffled."""
    order = np.random.default_rng(seed).permutation(n_docs)
    cuts = [int(0.15 * n_docs), int(0.45 * n_docs)]
    return [np.sort(part) for part in np.split(order, cuts)]


def _federated(model: TopicModel, parties: list[Corpus], label_names: list[str]) -> dict[str, float | int]:
    """What a server gets by summing the parties' parts (each party sees only its corpus)."""
    top_ids, word_ids = coherence_word_ids(model.topic_word)
    k = model.topic_word.shape[0]
    held_out, counts, table = [], [], np.zeros((k, len(label_names)), dtype=np.int64)
    for party in parties:
        is_test = party.split == "test"
        test, train = party.subset(np.flatnonzero(is_test)), party.subset(np.flatnonzero(~is_test))
        held_out.append(
            heldout_loglik(model.topic_word, test, alpha=ALPHA, n_iter=N_ITER, seed=SEED, vocabulary=model.vocabulary)
        )
        counts.append(cooccurrence(train, word_ids, vocabulary=model.vocabulary))
        theta = infer_theta(model.topic_word, align_corpus(test, model.vocabulary)[0], alpha=ALPHA, n_iter=N_ITER)
        table += label_contingency(theta, test.labels, k, label_names)
    total = sum(held_out)
    npmi, umass = coherence_from_counts(top_ids, word_ids, sum(counts))
    nmi, purity = nmi_purity_from_contingency(table)
    return {
        "perplexity": pooled_perplexity(held_out),
        "n_eval_tokens": total.n_tokens,
        "n_oov": total.n_oov,
        "npmi": npmi,
        "umass": umass,
        "nmi": nmi,
        "purity": purity,
    }


def _assert_federated_equals_pooled(model: TopicModel, corpus: Corpus) -> None:
    pooled = evaluate_model(model, corpus, use_labels=True, seed=SEED, alpha=ALPHA, n_iter=N_ITER)
    parties = [corpus.subset(part) for part in _three_parts(corpus.n_docs, seed=11)]
    assert len({p.n_docs for p in parties}) == 3
    federated = _federated(model, parties, sorted(set(corpus.labels.astype(str))))
    for name in ("perplexity", "npmi", "umass", "nmi", "purity"):
        assert federated[name] == pytest.approx(pooled[name], rel=REL, abs=1e-12), name
    assert (federated["n_eval_tokens"], federated["n_oov"]) == (pooled["n_eval_tokens"], pooled["n_oov"])
    assert pooled["n_oov"] > 0  # the model vocabulary leaves words out, so OOV counting is exercised
    assert 0 < pooled["nmi"] < 1


def _model_over_a_shuffled_subvocabulary(topic_word: np.ndarray, vocabulary: tuple[str, ...], seed: int) -> TopicModel:
    """The model on 90% of the words, columns in another order, rows renormalized."""
    rng = np.random.default_rng(seed)
    keep = rng.permutation(len(vocabulary))[: int(0.9 * len(vocabulary))]
    phi = topic_word[:, keep] + 1e-4
    return TopicModel(phi / phi.sum(axis=1, keepdims=True), tuple(vocabulary[j] for j in keep))


# ------------------------------------------------------------ pooled == summed
def test_federated_sums_equal_pooled_metrics_on_a_synthetic_corpus() -> None:
    config = SyntheticConfig(n_nodes=3, n_topics=6, n_shared_topics=3, vocab_size=300, docs_per_node=60)
    synthetic = make_synthetic_corpus(config, seed=2)
    corpus = ensure_split(synthetic.corpus, seed=3)
    model = _model_over_a_shuffled_subvocabulary(synthetic.topic_word, corpus.vocabulary, seed=4)
    _assert_federated_equals_pooled(model, corpus)


def test_federated_sums_equal_pooled_metrics_on_real_text() -> None:
    """The embedded corpus (1,346 Debian descriptions of 8 sections), split 80/10/10 at random (seed 1: the split
    with seed 0 draws the same permutation as the subset below, whose 700 documents would all be train)."""
    full = ensure_split(load_corpus(EMBEDDED_PATH), seed=1)
    corpus = full.subset(np.sort(np.random.default_rng(0).permutation(full.n_docs)[:700]))
    assert set(corpus.split) == {"train", "val", "test"}
    # One topic per label (smoothed word frequencies of its training documents: from all of them, every test
    # document would be clustered to its own label, NMI 1) plus one random topic.
    names = sorted(set(corpus.labels))
    counts = corpus.doc_term_matrix()
    train = corpus.split == "train"
    per_label = np.vstack([np.asarray(counts[train & (corpus.labels == name)].sum(axis=0)).ravel() for name in names])
    topics = np.vstack([per_label + 0.1, np.random.default_rng(1).dirichlet(np.full(corpus.n_words, 0.5))])
    topics /= topics.sum(axis=1, keepdims=True)
    model = _model_over_a_shuffled_subvocabulary(topics, corpus.vocabulary, seed=6)
    _assert_federated_equals_pooled(model, corpus)


# ------------------------------------------------------------------ perplexity
def test_completion_split_of_a_document_ignores_the_other_documents() -> None:
    rng = np.random.default_rng(0)
    corpus = Corpus.from_documents([rng.integers(0, 30, n) for n in (0, 3, 40, 1, 17, 40)], [str(w) for w in range(30)])
    observed = completion_split(corpus, seed=9)
    reordered = [4, 0, 2, 5, 1, 3]
    observed_reordered = completion_split(corpus.subset(reordered), seed=9)
    for position, d in enumerate(reordered):
        alone = completion_split(corpus.subset([d]), seed=9)
        mine = observed[corpus.doc_ptr[d] : corpus.doc_ptr[d + 1]]
        np.testing.assert_array_equal(alone, mine)
        lo = int(corpus.doc_lengths[reordered[:position]].sum())
        np.testing.assert_array_equal(observed_reordered[lo : lo + mine.size], mine)
    assert not np.array_equal(observed, completion_split(corpus, seed=10))
    # Different documents of the same length get different splits.
    same_length = Corpus.from_documents([np.arange(40) % 30, (np.arange(40) + 1) % 30], [str(w) for w in range(30)])
    halves = completion_split(same_length, seed=9).reshape(2, 40)
    assert not np.array_equal(halves[0], halves[1])


def test_heldout_parts_add_up_and_an_empty_party_scores_nothing() -> None:
    rng = np.random.default_rng(1)
    phi = rng.dirichlet(np.full(20, 0.3), size=3)
    corpus = Corpus.from_documents([rng.integers(0, 20, n) for n in (12, 1, 30, 7)], [str(w) for w in range(20)])
    parts = [heldout_loglik(phi, corpus.subset(idx)) for idx in ([0, 3], [1], [2])]
    assert parts[1] == HeldOut(0.0, 0, 0)
    pooled = perplexity(phi, corpus)
    assert pooled_perplexity(parts) == pytest.approx(pooled.perplexity, rel=REL)
    assert sum(parts).n_tokens == pooled.n_eval_tokens
    with pytest.raises(ValueError):
        pooled_perplexity([parts[1]])


# ------------------------------------------------------------------- coherence
def test_coherence_from_counts_by_hand_with_the_npmi_edge_cases() -> None:
    # Documents (as sets): d0 {a, b}, d1 {a, b, c}, d2 {a, b}; N = 3.
    # D(a) = D(b) = D(a, b) = 3, D(c) = D(a, c) = D(b, c) = 1.
    corpus = Corpus.from_documents([[0, 1, 1], [2, 1, 0], [0, 0, 1]], ("a", "b", "c"))
    # Second reference: d0 {a}, d1 {b, c}, d2 {a, c}: D(a) = D(c) = 2, D(b) = 1;
    # D(a, b) = 0, D(a, c) = D(b, c) = 1.
    other = Corpus.from_documents([[0], [1, 2], [0, 2, 2]], ("a", "b", "c"))
    top_ids = np.array([[0, 1, 2], [2, 1, 0]])  # topic 1 ranks a > b > c, topic 2 c > b > a
    word_ids = np.array([0, 1, 2])

    counts = cooccurrence(corpus, word_ids)
    assert counts.n_docs == 3
    np.testing.assert_array_equal(counts.doc_freq, [3, 3, 1])
    np.testing.assert_array_equal(counts.co_doc_freq, [[3, 3, 1], [3, 3, 1], [1, 1, 1]])
    # (a, b): P(a, b) = 1 -> +1; (a, c), (b, c): log((1/3) / (1 * 1/3)) = 0.
    npmi, umass = coherence_from_counts(top_ids, word_ids, counts)
    assert npmi == pytest.approx((1.0 + 0.0 + 0.0) / 3)
    umass_1 = math.log(4 / 3) + math.log(2 / 3) + math.log(2 / 3)  # D(a) = 3, D(a) = 3, D(b) = 3
    umass_2 = math.log(2 / 1) + math.log(2 / 1) + math.log(4 / 3)  # D(c) = 1, D(c) = 1, D(b) = 3
    assert umass == pytest.approx((umass_1 + umass_2) / 2)

    counts = cooccurrence(other, word_ids)
    np.testing.assert_array_equal(counts.co_doc_freq, [[2, 0, 1], [0, 1, 1], [1, 1, 2]])
    ab = -1.0  # never co-occur
    ac = math.log((1 / 3) / ((2 / 3) * (2 / 3))) / -math.log(1 / 3)
    bc = math.log((1 / 3) / ((1 / 3) * (2 / 3))) / -math.log(1 / 3)
    npmi, umass = coherence_from_counts(top_ids, word_ids, counts)
    assert npmi == pytest.approx((ab + ac + bc) / 3)  # both topics hold the same three pairs
    umass_1 = math.log(1 / 2) + math.log(2 / 2) + math.log(2 / 1)  # (a,b), (a,c): D(a) = 2; (b,c): D(b) = 1
    umass_2 = math.log(2 / 2) + math.log(2 / 2) + math.log(1 / 1)  # (c,b), (c,a): D(c) = 2; (b,a): D(b) = 1
    assert umass == pytest.approx((umass_1 + umass_2) / 2)
    # The pooled functions agree, and so do the counts of two parties summed.
    topic_word = np.array([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    assert npmi == pytest.approx(npmi_coherence(topic_word, other, top_n=3).mean)
    assert umass == pytest.approx(umass_coherence(topic_word, other, top_n=3).mean)
    summed = cooccurrence(other.subset([0, 2]), word_ids) + cooccurrence(other.subset([1]), word_ids)
    assert coherence_from_counts(top_ids, word_ids, summed) == (npmi, umass)


def test_cooccurrence_counts_in_the_order_of_word_ids_and_checks_its_inputs() -> None:
    corpus = Corpus.from_documents([[0, 1, 3], [3, 3], []], ("a", "b", "c", "d"))
    counts = cooccurrence(corpus, np.array([3, 0]))
    assert counts.n_docs == 3
    np.testing.assert_array_equal(counts.co_doc_freq, [[2, 1], [1, 1]])
    with pytest.raises(ValueError):
        cooccurrence(corpus, np.array([0, 0]))
    with pytest.raises(ValueError):
        counts + cooccurrence(corpus, np.array([0, 1, 2]))
    with pytest.raises(ValueError):
        coherence_from_counts(np.array([[0, 2]]), np.array([3, 0]), counts)  # 2 is not counted
    with pytest.raises(ValueError):
        coherence_from_counts(np.array([[0, 3]]), np.array([3, 0]), Cooccurrence(0, [0, 0], [[0, 0], [0, 0]]))


# ----------------------------------------------------------------------- labels
def test_nmi_and_purity_from_contingency_equal_sklearn_and_clustering_scores() -> None:
    rng = np.random.default_rng(7)
    cases = [(rng.integers(0, 4, 50), rng.integers(0, 3, 50)) for _ in range(20)]
    cases += [
        (np.zeros(6, dtype=int), np.zeros(6, dtype=int)),  # one cluster, one label: 1.0
        (np.zeros(6, dtype=int), np.array([0, 1] * 3)),  # one cluster: 0.0
        (np.array([0, 0, 3, 3]), np.array([1, 1, 0, 0])),  # empty clusters 1, 2: perfect
    ]
    for clusters, labels in cases:
        names = ["l0", "l1", "l2", "l3"]  # l3 is never used: a zero column
        table = label_contingency(clusters, [names[i] for i in labels], 4, names)
        nmi, purity = nmi_purity_from_contingency(table)
        assert nmi == pytest.approx(normalized_mutual_info_score(labels, clusters), rel=REL, abs=1e-15)
        theta = np.eye(4)[clusters]
        scores = clustering_scores(theta, [names[i] for i in labels])
        assert (nmi, purity) == (scores["nmi"], scores["purity"])


def test_label_contingency_takes_theta_or_clusters_and_checks_labels() -> None:
    theta = np.array([[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]])  # argmax 1, 0 (tie to the lower), 0
    expected = [[0, 1, 1], [1, 0, 0]]
    names = ["x", "y", "z"]
    np.testing.assert_array_equal(label_contingency(theta, ["x", "y", "z"], 2, names), expected)
    np.testing.assert_array_equal(label_contingency(np.array([1, 0, 0]), ["x", "y", "z"], 2, names), expected)
    np.testing.assert_array_equal(label_contingency(np.zeros((0, 2)), [], 2, names), np.zeros((2, 3)))
    with pytest.raises(ValueError):
        label_contingency(theta, ["x", "y", "w"], 2, names)
    with pytest.raises(ValueError):
        label_contingency(np.array([0, 2, 1]), ["x", "y", "z"], 2, names)


# ---------------------------------------------------------------- party scorer
def test_a_party_scorer_kept_across_evaluations_answers_as_a_fresh_one() -> None:
    """The halves and word index a party keeps between ``evaluate`` messages change nothing: models,
    seeds and the last round's label tables in any order give the sums of a scorer built for that message."""
    from flower_topics.evaluation import federated as evaluation

    config = SyntheticConfig(n_nodes=1, n_topics=5, n_shared_topics=5, vocab_size=120, docs_per_node=80)
    corpus = ensure_split(make_synthetic_corpus(config, seed=8).corpus, seed=1)
    training, heldout = corpus.select_split("train", "val"), corpus.select_split("test")
    kept = evaluation.PartyScorer(training, heldout)
    rng = np.random.default_rng(2)
    for server_round, seed in ((1, 3), (2, 4), (3, 3), (4, 3)):
        phi = rng.dirichlet(np.full(corpus.n_words, 0.2), size=5)
        settings = evaluation.EvaluationSettings(every=1, num_rounds=4, seed=seed)
        request = evaluation.request(phi, settings, "test", server_round)
        again, fresh = kept.scores(request), evaluation.party_scores(request, training, heldout)
        assert dict(again["metrics"]) == dict(fresh["metrics"])
        assert again["config"][evaluation.LABELS] == fresh["config"][evaluation.LABELS]
        for key in (evaluation.DOC_FREQ, evaluation.CO_DOC_FREQ, evaluation.CONTINGENCY):
            np.testing.assert_array_equal(again["update"][key].numpy(), fresh["update"][key].numpy())
        expected = heldout_loglik(phi, heldout, seed=seed)
        assert -float(again["metrics"]["neg-loglik"]) == pytest.approx(expected.loglik, rel=REL)
        labelled = again["update"][evaluation.CONTINGENCY].numpy().shape[1] > 0
        assert labelled == (server_round == 4)  # the label table in the last round only


# ---------------------------------------------------------------- the counts form of the model
def _lda_strategy_with_counts(counts: np.ndarray, beta: float = 0.01):
    from flwr.app import Array, ArrayRecord

    from flower_topics.evaluation.federated import EvaluationSettings
    from flower_topics.strategies.lda import ADLDA
    from flower_topics.wire import lda as lda_wire

    settings = lda_wire.LDASettings(n_topics=counts.shape[0], alpha=0.1, beta=beta, local_sweeps=1)
    strategy = ADLDA([f"w{i}" for i in range(counts.shape[1])], settings,
                     evaluation=EvaluationSettings(every=1, num_rounds=3))
    return strategy, ArrayRecord({lda_wire.COUNTS_KEY: Array(counts)})


def test_lda_evaluates_with_its_counts_and_the_party_scores_the_servers_matrix_bit_for_bit() -> None:
    """An ``lda`` evaluate message carries the global counts (sparse here) and beta, not 8 K V bytes of phi; the
    matrix a party computes from them is the one the server scores, to the last bit."""
    from flwr.app import ConfigRecord

    from flower_topics.evaluation import federated as evaluation
    from tests.flower_harness import FixedNodesGrid, as_server

    as_server()
    rng = np.random.default_rng(5)
    counts = np.zeros((20, 3000), dtype=np.int32)
    cells = rng.choice(counts.size, size=4000, replace=False)
    counts.flat[cells] = rng.integers(1, 500, size=cells.size)
    strategy, arrays = _lda_strategy_with_counts(counts, beta=0.013)
    (message, _) = strategy.configure_evaluate(3, arrays, ConfigRecord(), FixedNodesGrid([7, 8]))  # the last round: its own message
    sent = message.content["arrays"]
    assert evaluation.PHI_KEY not in sent and set(sent.keys()) == set(evaluation.wire_counts.keys(evaluation.COUNTS_KEY))
    nbytes = sum(a.numpy().nbytes for a in sent.values())
    assert nbytes < counts.size  # the nonzero cells: under 1 byte a cell here, against 8 for float64 phi
    got = evaluation.received_model(message.content, counts.shape[1])
    expected = evaluation.model_phi(strategy.topic_word(arrays))
    assert got.dtype == np.float64 and np.array_equal(got, expected)
    assert np.array_equal(strategy.evaluation_stage.sent.phi, expected)
    assert np.array_equal(strategy.evaluation_stage.sent.top[0], evaluation.coherence_word_ids(got, 10)[0])


def test_the_server_pools_with_exactly_the_matrix_and_top_words_a_party_holds() -> None:
    """Sent as a matrix (a method without counts) the model is not normalized again on the way: the party's
    matrix, and so its top words, are the server's to the last bit; the pooled NPMI is computed over them."""
    from flwr.app import ConfigRecord

    from flower_topics.evaluation import federated as evaluation
    from tests.flower_harness import FixedNodesGrid, as_server

    as_server()
    rng = np.random.default_rng(6)
    counts = rng.integers(0, 40, size=(6, 500)).astype(np.int32)
    strategy, arrays = _lda_strategy_with_counts(counts, beta=0.37)
    strategy.evaluation_counts = lambda arrays: None  # as a method that sends its matrix
    (message, _) = strategy.configure_evaluate(3, arrays, ConfigRecord(), FixedNodesGrid([7, 8]))  # the last round: its own message
    got = evaluation.received_model(message.content, counts.shape[1])
    assert evaluation.PHI_KEY in message.content["arrays"] and np.array_equal(got, strategy.evaluation_stage.sent.phi)
    assert np.array_equal(strategy.evaluation_stage.sent.top[0], evaluation.coherence_word_ids(got, 10)[0])
    assert np.array_equal(strategy.evaluation_stage.sent.top[1], evaluation.coherence_word_ids(got, 10)[1])


def test_a_party_refuses_counts_that_are_not_a_model() -> None:
    """Negative counts, a number of topics that is not a positive int or would make the party build more than
    MAX_MODEL_CELLS cells, a prior that is not positive and finite, the model twice, no prior: one line each,
    before anything is computed."""
    from flwr.app import Array

    from flower_topics.evaluation import federated as evaluation
    from flower_topics.errors import UserInputError

    settings = evaluation.EvaluationSettings(every=1, num_rounds=1)
    counts = np.arange(12, dtype=np.int64).reshape(3, 4)
    honest = evaluation.counts_request(counts, 0.1, settings, "v", 1)
    assert np.array_equal(evaluation.received_model(honest, 4), evaluation.counts_phi(counts, 0.1))
    cases = [(evaluation.counts_request(counts - 1, 0.1, settings, "v", 1), "outside")]
    cases.append((evaluation.counts_request(counts + 2 ** 31, 0.1, settings, "v", 1), "outside"))  # over int32
    for topics in (0, -3, 2.0, True, evaluation.MAX_MODEL_CELLS // 4 + 1):
        wrong = evaluation.counts_request(counts, 0.1, settings, "v", 1)
        wrong["config"][evaluation.TOPICS] = topics
        cases.append((wrong, "topics"))
    for beta in (0.0, -1.0, float("nan"), float("inf")):
        cases.append((evaluation.counts_request(counts, beta, settings, "v", 1), "prior"))
    both = evaluation.counts_request(counts, 0.1, settings, "v", 1)
    both["arrays"][evaluation.PHI_KEY] = Array(evaluation.counts_phi(counts, 0.1))
    cases.append((both, "twice"))
    no_prior = evaluation.counts_request(counts, 0.1, settings, "v", 1)
    del no_prior["config"][evaluation.BETA]
    cases.append((no_prior, "without"))
    for content, reason in cases:
        with pytest.raises(UserInputError, match=reason):
            evaluation.received_model(content, 4)


_DTYPES = ["uint8", "uint16", "uint32", "int8", "int16", "int32", "int64", "float64", ">i4", "bool"]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(gaps=st.lists(st.integers(-5, 300), max_size=12), values=st.lists(st.integers(-(2**40), 2**40), max_size=40),
       gap_dtype=st.sampled_from(_DTYPES), value_dtype=st.sampled_from(_DTYPES),
       topics=st.one_of(st.integers(-2, 6), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3)),
       beta=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 2), st.text(max_size=3)))
def test_a_hostile_counts_model_gets_one_line_or_a_valid_matrix(gaps, values, gap_dtype, value_dtype, topics, beta):
    """Whatever counts form a server sends, the party answers with a topic-word matrix (finite, non-negative, rows
    summing to 1, K x V) or one UserInputError line, never another exception."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    from flower_topics.evaluation import federated as evaluation
    from flower_topics.errors import UserInputError

    gaps_key, values_key = evaluation.wire_counts.keys(evaluation.COUNTS_KEY)
    with np.errstate(over="ignore", invalid="ignore"):
        arrays = {gaps_key: np.asarray(gaps).astype(gap_dtype), values_key: np.asarray(values).astype(value_dtype)}
    content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                          "config": ConfigRecord({evaluation.BETA: beta, evaluation.TOPICS: topics})})
    try:
        phi = evaluation.received_model(content, 7)
    except UserInputError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600
        return
    assert phi.ndim == 2 and phi.shape[1] == 7 and np.all(np.isfinite(phi)) and phi.min() >= 0
    np.testing.assert_allclose(phi.sum(axis=1), 1.0, atol=1e-12)


def test_topic_pairs_are_the_pairs_within_each_topics_top_words_once_each():
    from flower_topics.evaluation.federated import topic_pairs

    top_ids = np.array([[7, 3, 9], [3, 7, 20], [5, 11, 2]])  # topics 0 and 1 share the pair (3, 7)
    word_ids = np.unique(top_ids)  # [2, 3, 5, 7, 9, 11, 20]
    pairs = topic_pairs(top_ids, word_ids)
    as_words = {(int(word_ids[a]), int(word_ids[b])) for a, b in pairs}
    assert as_words == {(3, 7), (7, 9), (3, 9), (3, 20), (7, 20), (5, 11), (2, 5), (2, 11)}
    assert len(pairs) == len(as_words) and np.all(pairs[:, 0] < pairs[:, 1])
    assert pairs.tolist() == sorted(pairs.tolist())  # the order both sides use for the counts
    # words of different topics never pair: (9, 11) and (2, 20) are not asked for
    assert (4, 5) not in {tuple(p) for p in pairs.tolist()} and (0, 6) not in {tuple(p) for p in pairs.tolist()}


def test_a_party_scores_counts_as_their_matrix_bit_for_bit_reading_only_its_held_out_words() -> None:
    """The counts form is scored without building the K x V matrix (the top words ranked on the counts, the
    fold-in on the held-out words' columns), and gives the bits the matrix form gives, which are those of the
    full computation: completion on all of phi and the label round's infer_theta. Equal counts (ties) included."""
    from flower_topics.evaluation import federated as evaluation
    from flower_topics.metrics.pooled_sums import label_contingency
    from flower_topics.metrics.inference import infer_theta
    from flower_topics.metrics.perplexity import completion_halves

    config = SyntheticConfig(n_nodes=1, n_topics=6, n_shared_topics=6, vocab_size=150, docs_per_node=90)
    corpus = ensure_split(make_synthetic_corpus(config, seed=11).corpus, seed=2)
    training, heldout = corpus.select_split("train", "val"), corpus.select_split("test")
    assert np.unique(heldout.tokens).size < corpus.n_words  # some words only in training: the local map matters
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 4, size=(6, corpus.n_words)).astype(np.int32)  # many ties within a topic
    beta = 0.05
    phi = evaluation.counts_phi(counts, beta)
    settings = evaluation.EvaluationSettings(every=1, num_rounds=2, seed=9)
    for server_round in (1, 2):  # round 2 also answers the label table
        by_counts = evaluation.PartyScorer(training, heldout).scores(
            evaluation.counts_request(counts, beta, settings, "v", server_round))
        by_matrix = evaluation.PartyScorer(training, heldout).scores(
            evaluation.request(phi, settings, "v", server_round))
        assert dict(by_counts["metrics"]) == dict(by_matrix["metrics"])
        for key in (evaluation.DOC_FREQ, evaluation.CO_DOC_FREQ, evaluation.CONTINGENCY):
            np.testing.assert_array_equal(by_counts["update"][key].numpy(), by_matrix["update"][key].numpy())
        full = completion_halves(heldout, seed=9).loglik(phi, alpha=settings.alpha, n_iter=settings.n_iter)
        assert -float(by_counts["metrics"]["neg-loglik"]) == full.loglik
        top_ids, word_ids = evaluation.coherence_word_ids(phi, 10)
        co = cooccurrence(training, word_ids).co_doc_freq
        pairs = evaluation.topic_pairs(top_ids, word_ids)
        np.testing.assert_array_equal(by_counts["update"][evaluation.CO_DOC_FREQ].numpy(), co[pairs[:, 0], pairs[:, 1]])
    names = sorted({str(x) for x in heldout.labels})
    theta = infer_theta(phi, heldout, alpha=settings.alpha, n_iter=settings.n_iter)
    np.testing.assert_array_equal(by_counts["update"][evaluation.CONTINGENCY].numpy(),
                                  label_contingency(theta, heldout.labels, 6, names))


def test_the_columns_of_a_counts_model_are_its_matrix_columns_to_the_last_bit() -> None:
    from flower_topics.models.topic_word import counts_model, counts_model_columns_t

    rng = np.random.default_rng(6)
    for n_topics, n_words, prior in ((1, 1, 1.0), (3, 7, 0.5), (9, 1000, 0.013), (20, 3001, 0.01)):
        counts = rng.poisson(rng.dirichlet(np.full(n_words, 0.1), size=n_topics) * 500).astype(np.int32)
        columns = np.sort(rng.choice(n_words, size=max(1, n_words // 3), replace=False))
        got = counts_model_columns_t(counts, prior, columns)
        assert got.flags.c_contiguous and np.array_equal(got, counts_model(counts, prior)[:, columns].T)
    with pytest.raises(ValueError, match="columns must lie"):
        counts_model_columns_t(counts, 0.1, np.array([n_words]))
