"""Synthetic LDA corpora with known topics (gFedNTM paper's generator)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from flower_topics.data import (
    SyntheticConfig,
    load_truth,
    make_synthetic_corpus,
    partition_documents,
    save_truth,
)
from flower_topics.errors import UserInputError

CONFIG = SyntheticConfig()  # 5 nodes, K = 10 with K' = 5 shared, V = 500, 200 docs per node


@pytest.fixture(scope="module")
def synthetic():
    return make_synthetic_corpus(CONFIG, seed=0)


def test_shapes_and_distributions(synthetic):
    corpus = synthetic.corpus
    n_docs = CONFIG.n_nodes * CONFIG.docs_per_node
    assert synthetic.topic_word.shape == (CONFIG.n_topics, CONFIG.vocab_size)
    assert synthetic.doc_topic.shape == (n_docs, CONFIG.n_topics)
    assert np.allclose(synthetic.topic_word.sum(axis=1), 1.0) and (synthetic.topic_word >= 0).all()
    assert np.allclose(synthetic.doc_topic.sum(axis=1), 1.0)
    assert corpus.n_docs == n_docs and corpus.n_words == CONFIG.vocab_size
    assert corpus.vocabulary[:2] == ("w0000", "w0001") and corpus.vocabulary[-1] == "w0499"
    low, high = CONFIG.doc_length
    assert corpus.doc_lengths.min() >= low and corpus.doc_lengths.max() <= high
    assert corpus.split is None
    # small enough that a centralized LDA run on it takes seconds
    assert 50_000 < corpus.n_tokens < 100_000


def test_nodes_have_shared_and_private_topics(synthetic):
    shared = set(range(CONFIG.n_shared_topics))
    private = [set(t.tolist()) - shared for t in synthetic.node_topics]
    assert all(shared <= set(t.tolist()) for t in synthetic.node_topics)
    assert all(len(p) == (CONFIG.n_topics - CONFIG.n_shared_topics) // CONFIG.n_nodes for p in private)
    assert set().union(*private) == set(range(CONFIG.n_shared_topics, CONFIG.n_topics))
    assert sum(len(p) for p in private) == CONFIG.n_topics - CONFIG.n_shared_topics  # pairwise disjoint


def test_documents_only_use_their_node_topics(synthetic):
    labels = synthetic.corpus.labels
    for node, topics in enumerate(synthetic.node_topics):
        rows = synthetic.doc_topic[labels == f"node-{node}"]
        assert rows.shape[0] == CONFIG.docs_per_node
        others = np.setdiff1d(np.arange(CONFIG.n_topics), topics)
        assert (rows[:, others] == 0).all()
        assert (rows[:, topics] > 0).any(axis=0).all()


def test_label_partition_reproduces_the_nodes(synthetic):
    corpus = synthetic.corpus
    parts = partition_documents(corpus, CONFIG.n_nodes, "label", seed=0)
    for node, part in enumerate(parts):
        assert np.array_equal(part, np.arange(node * CONFIG.docs_per_node, (node + 1) * CONFIG.docs_per_node))
    many = make_synthetic_corpus(SyntheticConfig(n_nodes=12, n_topics=12, n_shared_topics=0, docs_per_node=2), seed=0)
    parts = partition_documents(many.corpus, 12, "label", seed=0)
    assert [set(many.corpus.labels[p]) for p in parts] == [{f"node-{n:02d}"} for n in range(12)]


def test_same_seed_same_corpus_other_seed_other_corpus(synthetic):
    again = make_synthetic_corpus(CONFIG, seed=0)
    other = make_synthetic_corpus(CONFIG, seed=1)
    assert np.array_equal(again.corpus.tokens, synthetic.corpus.tokens)
    assert np.array_equal(again.corpus.doc_ptr, synthetic.corpus.doc_ptr)
    assert np.array_equal(again.topic_word, synthetic.topic_word)
    assert not np.array_equal(other.topic_word, synthetic.topic_word)


def test_word_frequencies_follow_the_generative_model(synthetic):
    """Each node's word counts fit sum_d len_d * theta_d @ phi (chi-square), and not another node's."""
    corpus = synthetic.corpus
    counts = corpus.doc_term_matrix().toarray()
    lengths = corpus.doc_lengths[:, None]
    expected_per_doc = lengths * (synthetic.doc_topic @ synthetic.topic_word)

    def p_value(node_docs: np.ndarray, expected_docs: np.ndarray) -> float:
        observed = counts[node_docs].sum(axis=0).astype(float)
        expected = expected_per_doc[expected_docs].sum(axis=0)
        expected *= observed.sum() / expected.sum()
        big = expected >= 5  # pool rare words into one cell
        obs = np.append(observed[big], observed[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        statistic = ((obs - exp) ** 2 / exp).sum()
        return float(stats.chi2.sf(statistic, df=obs.size - 1))

    for node in range(CONFIG.n_nodes):
        docs = np.flatnonzero(corpus.labels == f"node-{node}")
        assert p_value(docs, docs) > 1e-3
        other = np.flatnonzero(corpus.labels == f"node-{(node + 1) % CONFIG.n_nodes}")
        assert p_value(docs, other) < 1e-12


def test_truth_round_trips(tmp_path, synthetic):
    path = save_truth(tmp_path / "run", synthetic)
    assert path.name == "truth.npz"
    topic_word, vocabulary = load_truth(path)
    assert np.array_equal(topic_word, synthetic.topic_word)
    assert vocabulary == synthetic.corpus.vocabulary
    assert load_truth(tmp_path / "run")[1] == vocabulary  # a folder works too
    with pytest.raises(UserInputError, match="does not exist"):
        load_truth(tmp_path / "missing.npz")
    np.savez(tmp_path / "wrong.npz", topic_word=np.ones((2, 3)))
    with pytest.raises(UserInputError, match="not a truth file"):
        load_truth(tmp_path / "wrong.npz")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_topics": 10, "n_shared_topics": 4, "n_nodes": 5}, "cannot be split evenly"),
        ({"n_topics": 5, "n_shared_topics": 6}, "exceeds n_topics"),
        ({"n_nodes": 0}, "n_nodes"),
        ({"vocab_size": 1}, "vocab_size"),
        ({"eta": 0.0}, "eta"),
        ({"alpha": -1.0}, "alpha"),
        ({"doc_length": (100, 50)}, "doc_length"),
        ({"docs_per_node": 0}, "docs_per_node"),
    ],
)
def test_bad_synthetic_config_is_a_user_error(options, message):
    with pytest.raises(UserInputError, match=message):
        SyntheticConfig(**options)
