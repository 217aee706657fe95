"""Sparse word-similarity matrix R (PC-TD eq. 12): cosine, top-n neighbours, threshold, cache, real model."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.models import word_similarity
from flower_topics.models.word_similarity import embed_vocabulary, similarity_from_embeddings, word_similarity_matrix

# a = (1, 0), b = (1, 1), c = (0, 1), d = (-1, 0.2). Cosines by hand:
# ab = bc = 1/sqrt(2); ac = 0; cd = 0.2/sqrt(1.04); ad = -1/sqrt(1.04); bd = -0.8/sqrt(2.08)
VECTORS = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.2]])
S = 1 / np.sqrt(2)
CD = 0.2 / np.sqrt(1.04)


def test_top1_positive_neighbours_by_hand_ties_to_the_lower_column():
    r = similarity_from_embeddings(VECTORS, top_n=1, symmetric=False).toarray()
    expected = np.array([
        [0, S, 0, 0],   # a -> b (c has cosine 0: not positive)
        [S, 0, 0, 0],   # b -> a (tie with c, lower column wins)
        [0, S, 0, 0],   # c -> b
        [0, 0, CD, 0],  # d -> c, its only positive similarity
    ])
    np.testing.assert_allclose(r, expected, rtol=1e-14, atol=0)


def test_symmetrized_union_of_neighbourhoods_and_the_diagonal():
    r = similarity_from_embeddings(VECTORS, top_n=1).toarray()
    np.testing.assert_allclose(r, [[0, S, 0, 0], [S, 0, S, 0], [0, S, 0, CD], [0, 0, CD, 0]], rtol=1e-14)
    with_self = similarity_from_embeddings(VECTORS, top_n=1, include_self=True).toarray()
    np.testing.assert_allclose(with_self, r + np.eye(4), rtol=1e-14)


def test_threshold_and_top_n_limit_each_row():
    r = similarity_from_embeddings(VECTORS, top_n=3, min_similarity=0.5, symmetric=False).toarray()
    np.testing.assert_allclose(r, [[0, S, 0, 0], [S, 0, S, 0], [0, S, 0, 0], [0, 0, 0, 0]], rtol=1e-14)
    r = similarity_from_embeddings(VECTORS, top_n=2, min_similarity=-1.0, symmetric=False).toarray()
    bd = -0.8 / np.sqrt(2.08)
    np.testing.assert_allclose(r[3], [0, bd, CD, 0], rtol=1e-12)  # d's two largest: c, then b


def test_blocks_do_not_change_the_result():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((57, 8))
    big = similarity_from_embeddings(e, top_n=5, block_size=1024)
    small = similarity_from_embeddings(e, top_n=5, block_size=7)
    np.testing.assert_array_equal(big.indptr, small.indptr)
    np.testing.assert_array_equal(big.indices, small.indices)
    np.testing.assert_allclose(big.data, small.data, rtol=1e-12)  # BLAS may round blocks differently
    assert np.diff(similarity_from_embeddings(e, top_n=5, symmetric=False).indptr).max() <= 5


WORDS = ["doctor", "nurse", "hospital", "patient", "medicine", "banana", "apple", "fruit", "orange", "mango",
         "football", "soccer", "goal", "match", "player", "computer", "software", "internet", "data", "network"]


def test_real_model_neighbours_and_the_embedding_cache(tmp_path, monkeypatch):
    embeddings = embed_vocabulary(WORDS, cache_dir=tmp_path, batch_size=8)
    assert embeddings.shape == (20, 384)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    i = {w: k for k, w in enumerate(WORDS)}
    assert unit[i["doctor"]] @ unit[i["nurse"]] > unit[i["doctor"]] @ unit[i["banana"]] + 0.1
    r = word_similarity_matrix(WORDS, top_n=3, symmetric=False, cache_dir=tmp_path)
    assert i["nurse"] in r[i["doctor"]].indices and i["banana"] not in r[i["doctor"]].indices
    assert i["soccer"] in r[i["football"]].indices
    # a cache hit never loads the model
    import sentence_transformers

    def refuse(*args, **kwargs):
        raise AssertionError("model loaded despite the cache")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", refuse)
    np.testing.assert_array_equal(embed_vocabulary(WORDS, cache_dir=tmp_path), embeddings)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    with pytest.raises(AssertionError, match="despite the cache"):  # another vocabulary is another key
        embed_vocabulary(WORDS[:5], cache_dir=tmp_path)


def test_default_model_is_the_offline_package():
    from pathlib import Path

    assert (Path(word_similarity.default_model_path()) / "model.safetensors").exists()
