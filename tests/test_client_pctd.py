"""PC-TD party side: semantic units, one private EM round, what leaves the party."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from flower_topics.clients.pctd import PCTDClientState, PCTDSettings, semantic_units, train_round
from flower_topics.data.corpus import Corpus
from flower_topics.data.preprocessing import PreprocessConfig, preprocess
from flower_topics.errors import UserInputError
from flower_topics.models.pctd import local_em_step, random_topic_word

VOCAB = ("a", "b", "c", "d")


def _corpus() -> Corpus:
    return Corpus.from_documents([[0, 1, 2, 3, 0, 1, 2], [3, 3], [1, 2, 0, 1]], VOCAB)


def _units_as_lists(corpus, units):
    dense = units.counts.toarray()
    return [(int(d), dense[j].tolist()) for j, d in enumerate(units.unit_doc)]


def test_ngram_units_chunk_each_document_when_there_are_no_sentences():
    units = semantic_units(_corpus(), PCTDSettings(n_topics=2, unit="ngram", ngram=3))
    assert _units_as_lists(_corpus(), units) == [
        (0, [1, 1, 1, 0]), (0, [1, 1, 0, 1]), (0, [0, 0, 1, 0]),  # "a b c", "d a b", "c"
        (1, [0, 0, 0, 2]),  # "d d"
        (2, [1, 1, 1, 0]), (2, [0, 1, 0, 0]),  # "b c a", "b"
    ]


def test_ngram_units_stay_inside_sentences_and_sentence_units_are_sentences():
    corpus, _ = preprocess(["Apple berry cherry date. Elder fig!\nGrape", "Apple apple berry"],
                           PreprocessConfig(stopwords=None))
    words = {w: i for i, w in enumerate(corpus.vocabulary)}

    def row(*ws):
        out = [0] * corpus.n_words
        for w in ws:
            out[words[w]] += 1
        return out

    ngrams = semantic_units(corpus, PCTDSettings(n_topics=2, unit="ngram", ngram=3))
    assert _units_as_lists(corpus, ngrams) == [
        (0, row("apple", "berry", "cherry")), (0, row("date")), (0, row("elder", "fig")), (0, row("grape")),
        (1, row("apple", "apple", "berry")),
    ]
    sentences = semantic_units(corpus, PCTDSettings(n_topics=2, unit="sentence"))
    assert _units_as_lists(corpus, sentences) == [
        (0, row("apple", "berry", "cherry", "date")), (0, row("elder", "fig")), (0, row("grape")),
        (1, row("apple", "apple", "berry")),
    ]


def test_sentence_units_need_a_corpus_with_sentences():
    with pytest.raises(UserInputError, match="unit='ngram'"):
        semantic_units(_corpus(), PCTDSettings(n_topics=2, unit="sentence"))


def test_a_round_is_one_local_em_step_from_the_seeded_state():
    corpus, settings = _corpus(), PCTDSettings(n_topics=2, sigma=0.3, ngram=2)
    phi = random_topic_word(2, 4, np.random.default_rng(1))
    state = PCTDClientState()
    upload = train_round(corpus, phi, state, server_round=1, settings=settings, seed=11)
    assert upload.dtype == np.float32 and upload.shape == (2, 4)
    # the same computation by hand: theta from the [seed, 0] stream, noise from [seed, round]
    theta0 = np.random.default_rng([11, 0]).dirichlet(np.ones(2), size=3)
    step = local_em_step(semantic_units(corpus, settings), phi, theta0, 0.3, np.random.default_rng([11, 1]))
    np.testing.assert_array_equal(upload, step.statistic.astype(np.float32))
    np.testing.assert_array_equal(state.doc_topic, step.doc_topic)
    # round 2 continues from the kept p(z|d), with fresh noise
    again = train_round(corpus, phi, state, server_round=2, settings=settings, seed=11)
    step2 = local_em_step(semantic_units(corpus, settings), phi, step.doc_topic, 0.3, np.random.default_rng([11, 2]))
    np.testing.assert_array_equal(again, step2.statistic.astype(np.float32))


def test_without_noise_the_upload_redistributes_exactly_the_partys_tokens():
    corpus = _corpus()
    phi = random_topic_word(3, 4, np.random.default_rng(2))
    upload = train_round(corpus, phi, PCTDClientState(), server_round=1,
                         settings=PCTDSettings(n_topics=3, sigma=0.0), seed=0)
    np.testing.assert_allclose(upload.sum(axis=0), np.bincount(corpus.tokens, minlength=4), rtol=1e-6)


def test_noise_is_on_every_unit_and_every_word_with_variance_sigma_squared():
    """sum_kw M_t = sum_j sum_w N^_jw (each r^_j sums to 1): N(n_tokens, sigma^2 U V) exactly.

    Noise only on the words a unit contains would give variance sigma^2 * (non-zero entries);
    both the mean and the variance are checked over 600 independent rounds.
    """
    corpus, settings = _corpus(), PCTDSettings(n_topics=2, sigma=0.7, ngram=2)
    n_units = semantic_units(corpus, settings).n_units
    phi = random_topic_word(2, 4, np.random.default_rng(3))
    totals = np.array([train_round(corpus, phi, PCTDClientState(), server_round=r, settings=settings,
                                   seed=5).astype(np.float64).sum() for r in range(1, 601)])
    variance = 0.7**2 * n_units * 4
    z = (totals.mean() - corpus.n_tokens) / np.sqrt(variance / totals.size)
    assert abs(z) < 4
    chi2 = (totals.size - 1) * totals.var(ddof=1) / variance  # ~ chi^2(599) under the paper's noise
    assert stats.chi2.sf(chi2, totals.size - 1) > 1e-4 and stats.chi2.cdf(chi2, totals.size - 1) > 1e-4


def test_topic_word_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="expected"):
        train_round(_corpus(), np.full((2, 5), 0.2), PCTDClientState(), server_round=1,
                    settings=PCTDSettings(n_topics=2), seed=0)
