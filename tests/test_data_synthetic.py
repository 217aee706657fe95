"""Synthetic LDA corpora with known topics (gFedNTM paper's generator)."""

from __future__ import annotations

import hashlib

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
from flower_topics.data.prepare import load_run_data
from flower_topics.data.synthetic import FALLING_TOPIC, RISING_TOPIC, TREND
from flower_topics.errors import UserInputError
from flower_topics.federation.party_ledger import documents_fingerprint
from flower_topics.run.config import parse_run_config

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
        ({"dates": (2024, 2020)}, "first year first"),
        ({"dates": (1900, 2024)}, "at most 100"),
        ({"dates": (2020, 2024), "n_shared_topics": 0}, "2 shared topics"),
    ],
)
def test_bad_synthetic_config_is_a_user_error(options, message):
    with pytest.raises(UserInputError, match=message):
        SyntheticConfig(**options)


def _digest(synthetic) -> str:
    digest = hashlib.sha256()
    for array in (synthetic.corpus.tokens, synthetic.corpus.doc_ptr, synthetic.doc_topic, synthetic.topic_word):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def test_without_dates_the_corpus_is_the_one_before_dates_existed(synthetic):
    """The digests were taken from the generator before it had dates: the default corpus is the same, array for
    array (documents, offsets, true proportions and topics), and has no dates."""
    assert _digest(synthetic) == "d641c6c4dbf10abaac2fdfdf563dcc9069824bc50bbf14c81b14d3fc4594c19a"
    assert _digest(make_synthetic_corpus(CONFIG, seed=7)) == (
        "11e3639673a2321682f3c0fed5c58f2ed440227d3c2f05d2460dfec60224bd28")
    assert synthetic.corpus.dates is None
    off = load_run_data(parse_run_config({"dataset": "synthetic", "synthetic-dates": ""}))
    assert off.corpus.dates is None and _digest(off.synthetic) == _digest(synthetic)
    # and a party's privacy ledger knows it as the same documents (the fingerprint taken before dates existed)
    node = {"partition-id": 0, "num-partitions": 2}
    assert documents_fingerprint(node, parse_run_config({"dataset": "synthetic"})) == (
        "synthetic:2dfa119bb5c8b31461fb5145abea33ac7659a5660a932c0a79f2f5792f060335")
    assert documents_fingerprint(node, parse_run_config({"dataset": "synthetic", "synthetic-dates": "2020-2024"})) != (
        documents_fingerprint(node, parse_run_config({"dataset": "synthetic"})))


DATED = SyntheticConfig(dates=(2020, 2024), docs_per_node=1000, doc_length=(5, 10))


def _year_means(synthetic, topic: int) -> np.ndarray:
    years = np.array([date[:4] for date in synthetic.corpus.dates])
    return np.array([synthetic.doc_topic[years == year, topic].mean() for year in sorted(set(years))])


def test_dated_documents_get_a_month_of_the_span_on_every_node():
    dated = make_synthetic_corpus(SyntheticConfig(dates=(2020, 2024)), seed=0)
    dates = dated.corpus.dates
    assert dates.shape == (dated.corpus.n_docs,)
    assert all(len(d) == 7 and d[4] == "-" and "2020" <= d[:4] <= "2024" and "01" <= d[5:] <= "12" for d in dates)
    for node in range(CONFIG.n_nodes):  # a label partition gives every party documents from every year
        assert {d[:4] for d in dates[dated.corpus.labels == f"node-{node}"]} == {"2020", "2021", "2022", "2023", "2024"}
    again = make_synthetic_corpus(SyntheticConfig(dates=(2020, 2024)), seed=0)
    assert np.array_equal(again.corpus.dates, dates) and np.array_equal(again.corpus.tokens, dated.corpus.tokens)
    assert not np.array_equal(make_synthetic_corpus(SyntheticConfig(dates=(2020, 2024)), seed=1).corpus.dates, dates)
    one_year = make_synthetic_corpus(SyntheticConfig(dates=(2023, 2023), docs_per_node=50), seed=0).corpus.dates
    assert {d[:4] for d in one_year} == {"2023"} and len(set(one_year)) == 12


@pytest.mark.parametrize("seed", range(5))
def test_the_planted_topics_true_share_rises_and_falls_year_by_year(seed):
    """The generator's own proportions: topic 0's mean share of each year's documents rises strictly from year to
    year and topic 1's falls, and each year's mean is the planted expectation (the Dirichlet mean
    ``a_k / sum(a)`` of each document's parameters, from its month) within sampling error."""
    dated = make_synthetic_corpus(DATED, seed=seed)
    rising, falling = _year_means(dated, RISING_TOPIC), _year_means(dated, FALLING_TOPIC)
    assert np.all(np.diff(rising) > 0) and np.all(np.diff(falling) < 0)
    assert rising[0] < 0.1 < 0.3 < rising[-1] and falling[0] > 0.3 > 0.1 > falling[-1]
    # the planted expectation, by hand: 6 topics a node at alpha, topic 0 times TREND^(2x-1), topic 1 the inverse
    months = np.array([(int(d[:4]) - 2020) * 12 + int(d[5:]) - 1 for d in dated.corpus.dates])
    place = months / 59
    up, down = TREND ** (2 * place - 1), TREND ** (1 - 2 * place)
    expected = np.column_stack([up, down]) / (up + down + 4)[:, None]
    years = months // 12
    for topic, observed in ((0, rising), (1, falling)):
        planted = np.array([expected[years == y, topic].mean() for y in range(5)])
        np.testing.assert_allclose(observed, planted, atol=0.06)  # 5 standard errors of a year's mean (<= 0.012)
        assert np.all(np.diff(planted) > 0) if topic == 0 else np.all(np.diff(planted) < 0)
    # the other shared topics hold no trend of their own beyond taking up the rest: none rises like topic 0
    assert all(_year_means(dated, k)[-1] - _year_means(dated, k)[0] < 0.1 for k in range(2, DATED.n_shared_topics))


def test_the_run_config_gives_the_corpus_its_dates():
    data = load_run_data(parse_run_config({"dataset": "synthetic", "synthetic-dates": "2020-2024"}))
    assert data.synthetic.corpus.dates is not None
    assert np.array_equal(data.corpus.dates, data.synthetic.corpus.dates)  # the split keeps them
    assert np.array_equal(data.train.dates, data.corpus.dates[data.corpus.split != "test"])


@pytest.mark.parametrize(("options", "message"), [
    ({"synthetic-dates": "2020"}, "span of years 'FIRST-LAST'"),
    ({"synthetic-dates": "2024-2020"}, "first year first"),
    ({"synthetic-dates": "2020-2024", "synthetic-shared-topics": 1}, "synthetic-shared-topics >= 2"),
    ({"prevalence-period": "year"}, "set synthetic-dates"),
])
def test_bad_dates_options_are_one_line(options, message):
    with pytest.raises(UserInputError, match=message):
        parse_run_config({"dataset": "synthetic", **options})
