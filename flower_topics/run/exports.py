"""``flower-topics export``: a model in the formats the topic-model tools read.

- ``gensim``: ``dictionary.txt`` in the text format of gensim's ``Dictionary.save_as_text``
  (first line the number of documents, then ``id<TAB>word<TAB>document frequency``, read by
  ``gensim.corpora.Dictionary.load_from_text``) and ``topic_term.npy``, the ``(K, V)``
  topic-word matrix in the layout of gensim's ``LdaModel.get_topics()`` (row = topic,
  column = dictionary id). A model file holds no document counts: without a corpus the
  document frequencies and the document count are 0; with ``--corpus`` they are those of
  the given documents (counted on the machine that holds them).
- ``pyldavis``: the arguments of ``pyLDAvis.prepare`` as JSON (``pyldavis_input.json``:
  ``topic_term_dists``, ``doc_topic_dists``, ``doc_lengths``, ``vocab``,
  ``term_frequency``) and, when pyLDAvis is installed, its prepared data
  (``pyldavis_prepared.json``, ``PreparedData.to_json()``, what LDAvis' page reads).
  ``prepare`` needs document lengths, term frequencies and each document's topics, which
  a model file does not hold: this export needs ``--corpus`` (a party's own documents);
  theta is folded in as ``flower-topics infer`` does. Documents without a word of the
  vocabulary are left out (pyLDAvis needs positive lengths), and so are the words the
  corpus never uses (their relevance is undefined), the topics renormalized over the
  words kept; both counts are written in ``export.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from flower_topics.errors import UserInputError
from flower_topics.topic_model.model_file import TopicModel
from flower_topics.topic_model.document_topics import DocumentCounts, _write_atomic, document_topics, fold_in_options

FORMATS = ("gensim", "pyldavis")
DICTIONARY_FILE = "dictionary.txt"
TOPIC_TERM_FILE = "topic_term.npy"
PYLDAVIS_INPUT = "pyldavis_input.json"
PYLDAVIS_PREPARED = "pyldavis_prepared.json"
SUMMARY_FILE = "export.json"


def export_gensim(model: TopicModel, out: str | os.PathLike[str], documents: DocumentCounts | None = None
                  ) -> list[Path]:
    """Write ``dictionary.txt`` and ``topic_term.npy`` (see the module docstring); returns the paths."""
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    if any(any(c in word for c in "\t\n\r") for word in model.vocabulary):
        raise UserInputError("a vocabulary word holds a tab or a line break; gensim's dictionary text format "
                             "cannot store it")
    if documents is None:
        n_docs, doc_freq = 0, np.zeros(len(model.vocabulary), dtype=np.int64)
    else:
        n_docs = documents.counts.shape[0]
        doc_freq = np.asarray((documents.counts > 0).sum(axis=0)).ravel().astype(np.int64)
    lines = [f"{n_docs}\n"] + [f"{j}\t{word}\t{int(doc_freq[j])}\n" for j, word in enumerate(model.vocabulary)]
    dictionary = _write_atomic(out / DICTIONARY_FILE, "".join(lines))
    matrix = out / TOPIC_TERM_FILE
    np.save(matrix, model.topic_word)
    return [dictionary, matrix, _summary(out, model, "gensim", documents)]


def pyldavis_input(model: TopicModel, documents: DocumentCounts) -> tuple[dict[str, list], dict[str, int]]:
    """The keyword arguments of ``pyLDAvis.prepare`` from the model and a corpus, and what was left out.

    Returns
    -------
    data : dict
        ``topic_term_dists`` (K x V'), ``doc_topic_dists`` (D' x K), ``doc_lengths`` (D'),
        ``vocab`` (V'), ``term_frequency`` (V'), as JSON-ready lists.
    dropped : dict
        ``documents_without_words`` and ``unused_words``: what was left out, and why in the
        module docstring.
    """
    alpha, n_iter = fold_in_options(model)
    topics = document_topics(model.topic_word, documents, alpha=alpha, n_iter=n_iter)
    keep_docs = ~topics.empty
    if not keep_docs.any():
        raise UserInputError("no document of the corpus has a word of the model's vocabulary; is it the corpus the "
                             "model was trained on, read with the same options?")
    term_frequency = np.asarray(documents.counts.sum(axis=0)).ravel()
    used = term_frequency > 0
    phi = model.topic_word[:, used]
    mass = phi.sum(axis=1, keepdims=True)
    if np.any(mass <= 0):
        raise UserInputError("a topic has no weight on any word the corpus uses; pyLDAvis cannot show it")
    data = {
        "topic_term_dists": (phi / mass).tolist(),
        "doc_topic_dists": topics.theta[keep_docs].tolist(),
        "doc_lengths": topics.n_words[keep_docs].astype(int).tolist(),
        "vocab": [w for w, u in zip(model.vocabulary, used) if u],
        "term_frequency": term_frequency[used].astype(int).tolist(),
    }
    return data, {"documents_without_words": int((~keep_docs).sum()), "unused_words": int((~used).sum())}


def export_pyldavis(model: TopicModel, out: str | os.PathLike[str], documents: DocumentCounts | None) -> list[Path]:
    """Write ``pyldavis_input.json`` and, with pyLDAvis installed, ``pyldavis_prepared.json``; returns the paths."""
    if documents is None:
        raise UserInputError("pyLDAvis needs document lengths, term frequencies and each document's topics, which a "
                             "model file does not hold; pass --corpus with documents you hold (they stay here)")
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    data, dropped = pyldavis_input(model, documents)
    written = [_write_atomic(out / PYLDAVIS_INPUT, json.dumps(data))]
    try:
        import pyLDAvis
    except ImportError:
        pyLDAvis = None
    if pyLDAvis is not None:
        prepared = pyLDAvis.prepare(**data, sort_topics=False, start_index=0)
        written.append(_write_atomic(out / PYLDAVIS_PREPARED, prepared.to_json()))
    written.append(_summary(out, model, "pyldavis", documents, dropped))
    return written


def _summary(out: Path, model: TopicModel, fmt: str, documents: DocumentCounts | None,
             dropped: dict[str, int] | None = None) -> Path:
    metadata = model.metadata if isinstance(model.metadata, dict) else {}
    summary = {"format": fmt, "topics": model.n_topics, "words": len(model.vocabulary),
               "method": metadata.get("method"), "documents": None if documents is None else documents.counts.shape[0],
               **(dropped or {})}
    return _write_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")


def export(model: TopicModel, fmt: str, out: str | os.PathLike[str], documents: DocumentCounts | None = None
           ) -> list[Path]:
    """Export ``model`` in format ``fmt`` (one of :data:`FORMATS`) into the folder ``out``."""
    if fmt == "gensim":
        return export_gensim(model, out, documents)
    if fmt == "pyldavis":
        return export_pyldavis(model, out, documents)
    raise UserInputError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
