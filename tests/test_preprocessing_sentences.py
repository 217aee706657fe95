"""Raw text keeps its sentence boundaries through preprocessing (PC-TD's sentence units)."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np

from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.data.preprocessing import PreprocessConfig, preprocess


def test_sentences_end_at_punctuation_and_line_breaks():
    corpus, _ = preprocess(["Alpha beta. Gamma delta!\nEpsilon zeta", "Eta? Theta"], PreprocessConfig(stopwords=None))
    assert [corpus.vocabulary[t] for t in corpus.tokens] == [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    np.testing.assert_array_equal(corpus.sentence_ptr, [0, 2, 4, 6, 7, 8])


def test_dropped_words_move_a_sentence_start_and_empty_sentences_vanish():
    corpus, _ = preprocess(["The alpha beta. And. Of gamma", "beta"], PreprocessConfig(stopwords="english"))
    assert [corpus.vocabulary[t] for t in corpus.tokens] == ["alpha", "beta", "gamma", "beta"]
    np.testing.assert_array_equal(corpus.sentence_ptr, [0, 2, 3, 4])


def test_debian_descriptions_tokens_are_unchanged_and_have_sentences():
    with EMBEDDED_PATH.open(encoding="utf-8") as lines:  # the embedded corpus: Debian descriptions
        texts = [json.loads(line)["text"] for line in itertools.islice(lines, 200)]
    config = PreprocessConfig(stopwords=None)
    corpus, _ = preprocess(texts, config)
    pattern = re.compile(config.token_pattern)
    whole = [w for t in texts for w in pattern.findall(t.lower())]  # tokenizing each text as a whole
    assert [corpus.vocabulary[t] for t in corpus.tokens] == whole
    n_sentences = corpus.sentence_ptr.size - 1
    assert n_sentences > 2 * corpus.n_docs


def test_a_vanished_first_sentence_and_a_dropped_document():
    corpus, _ = preprocess(["The. Of alpha beta", "and the", "Gamma.\n\nDelta"], PreprocessConfig(stopwords="english"))
    assert [corpus.vocabulary[t] for t in corpus.tokens] == ["alpha", "beta", "gamma", "delta"]
    np.testing.assert_array_equal(corpus.doc_ptr, [0, 2, 4])
    np.testing.assert_array_equal(corpus.sentence_start, [True, False, True, True])
    np.testing.assert_array_equal(corpus.sentence_ptr, [0, 2, 3, 4])
