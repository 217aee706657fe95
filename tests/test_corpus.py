"""The Corpus container."""

import numpy as np
import pytest

from flower_topics.data.corpus import Corpus


def _corpus() -> Corpus:
    return Corpus.from_documents([[2, 0, 2, 1], [1, 1], []], ["a", "b", "c"], labels=["x", "y", "x"],
                                 split=["train", "test", "val"])


def test_doc_term_matrix_counts_and_leaves_tokens_untouched():
    corpus = _corpus()
    before = corpus.tokens.copy()
    m = corpus.doc_term_matrix()
    np.testing.assert_array_equal(m.toarray(), [[1, 1, 2], [0, 2, 0], [0, 0, 0]])
    np.testing.assert_array_equal(corpus.tokens, before)  # regression: scipy sorted it in place once


def test_the_largest_word_count_is_the_most_times_one_word_occurs():
    assert _corpus().largest_word_count() == 3  # b: once in the first document, twice in the second
    assert Corpus.from_documents([[], []], ["a"]).largest_word_count() == 0


def test_subset_and_split_selection():
    corpus = _corpus()
    sub = corpus.subset([1, 0])
    assert sub.words(0) == ["b", "b"] and sub.words(1) == ["c", "a", "c", "b"]
    assert list(sub.labels) == ["y", "x"] and list(sub.split) == ["test", "train"]
    assert corpus.select_split("train", "val").n_docs == 2
    np.testing.assert_array_equal(corpus.doc_ids, [0, 0, 0, 0, 1, 1])


@pytest.mark.parametrize("kwargs", [dict(tokens=[0, 3], doc_ptr=[0, 2]), dict(tokens=[0, 1], doc_ptr=[0, 1]),
                                    dict(tokens=[0, 1], doc_ptr=[0, 2], split=["bad"])])
def test_invalid_corpus_rejected(kwargs):
    with pytest.raises(ValueError):
        Corpus(vocabulary=("a", "b", "c"), **kwargs)


def test_sentence_offsets_refine_documents_and_follow_a_subset():
    corpus = Corpus(tokens=np.array([0, 1, 2, 0, 1, 2, 2]), doc_ptr=np.array([0, 4, 4, 7]), vocabulary=("a", "b", "c"),
                    sentence_start=np.array([1, 0, 1, 0, 1, 1, 0], dtype=bool))
    np.testing.assert_array_equal(corpus.sentence_ptr, [0, 2, 4, 5, 7])  # the empty document adds no sentence
    sub = corpus.subset([2, 0])
    np.testing.assert_array_equal(sub.tokens, [1, 2, 2, 0, 1, 2, 0])
    np.testing.assert_array_equal(sub.sentence_start, [1, 1, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(sub.sentence_ptr, [0, 1, 3, 5, 7])
    assert Corpus.from_documents([[0, 1]], ("a", "b")).sentence_ptr is None


@pytest.mark.parametrize("starts, match", [
    ([1, 0], "one entry per token"),
    ([1, 0, 0], "first token of every document"),
])
def test_invalid_sentence_starts_rejected(starts, match):
    with pytest.raises(ValueError, match=match):
        Corpus(tokens=np.array([0, 1, 0]), doc_ptr=np.array([0, 2, 3]), vocabulary=("a", "b"),
               sentence_start=np.array(starts, dtype=bool))


def test_sentence_starts_coerced_and_empty_documents_at_the_ends():
    corpus = Corpus(tokens=[0, 1, 1], doc_ptr=[0, 0, 2, 3, 3], vocabulary=("a", "b"), sentence_start=[1, 1, 2])
    assert corpus.sentence_start.dtype == bool and corpus.sentence_start.flags.c_contiguous
    np.testing.assert_array_equal(corpus.sentence_ptr, [0, 1, 2, 3])
    assert corpus.sentence_ptr.dtype == np.int64
    empty = Corpus(tokens=np.zeros(0, dtype=np.int32), doc_ptr=[0, 0, 0], vocabulary=("a",),
                   sentence_start=np.zeros(0, dtype=bool))
    np.testing.assert_array_equal(empty.sentence_ptr, [0])
    np.testing.assert_array_equal(empty.subset([]).sentence_ptr, [0])
