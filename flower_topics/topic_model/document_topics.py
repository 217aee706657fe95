"""Using a trained model on a party's own documents: their topic mixtures, on the party.

A model file holds the topics (``topic_word``) and the run config the run read its
documents with (``metadata["run_config"]``). Here a party folds in theta for its own
documents against those topics, read with the run's own preprocessing:

- :func:`read_documents` reads a corpus file (OCTIS folder, ``.jsonl``, ``.csv``, folder of
  ``.txt`` files) as the run read its parties' files, and counts each document's words over
  the model's vocabulary. Every document of the file keeps its row, also one with no word
  of the vocabulary (it is marked, never dropped), and its id (an id column, the file path
  in a folder, else its 0-based index).
- :func:`document_topics` folds in theta (:func:`flower_topics.metrics.inference.fold_in`,
  the EM the evaluation uses, with the run's ``eval-alpha`` and ``eval-iterations``).
- :class:`DocumentTopics` holds the result: theta, top topic, the documents of a topic, CSV.

In a federated run a party whose node config sets ``theta-out`` writes its documents'
topics with these functions (:mod:`flower_topics.federation.party_theta`).

:class:`flower_topics.topic_model.model_file.TopicModel` has the same as methods (``TopicModel.load``,
``transform``, ``read_documents``).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import scipy.sparse as sp

from flower_topics.errors import UserInputError


logger = logging.getLogger("flower_topics")

class HasRunConfig(Protocol):
    """A trained model as the functions here read it: its ``metadata`` (with the run's ``run_config``)
    (:class:`~flower_topics.topic_model.model_file.TopicModel`)."""

    metadata: Mapping[str, Any]


#: Reading options a run config holds, with the defaults of a model without one.
READING_DEFAULTS: Mapping[str, Any] = {"text-column": "text", "lowercase": True, "stopwords": "english"}
#: Fold-in settings a run config holds (the evaluation's), with their defaults.
FOLD_IN_DEFAULTS: Mapping[str, Any] = {"eval-alpha": 0.01, "eval-iterations": 100}


@dataclass(frozen=True)
class DocumentCounts:
    """Documents as word counts over a model's vocabulary, one row per document of the source.

    Parameters
    ----------
    ids : tuple of str
        Each document's id (an id column, a file path, or its 0-based index).
    counts : scipy.sparse.csr_matrix
        ``(D, V)`` counts of the model's words.
    n_oov : np.ndarray
        ``int64``: each document's tokens that are not in the model's vocabulary.
    dates : np.ndarray or None
        Each document's date as read (object array of str, ``""``: no date), for the same
        documents as ``ids``; None when the documents were read without a date column.
    """

    ids: tuple[str, ...]
    counts: sp.csr_matrix
    n_oov: np.ndarray
    dates: np.ndarray | None = None

    @property
    def n_words(self) -> np.ndarray:
        """``int64``: each document's tokens in the model's vocabulary."""
        return np.asarray(self.counts.sum(axis=1)).ravel().astype(np.int64)


@dataclass(frozen=True)
class DocumentTopics:
    """Documents' topic mixtures.

    Parameters
    ----------
    ids : tuple of str
        Each document's id.
    theta : np.ndarray
        ``(D, K)`` float64, each row a distribution over topics. A document with no word
        of the vocabulary has the uniform row and no top topic (see :attr:`empty`).
    n_words : np.ndarray
        ``int64``: tokens of each document that the model knows (the fold-in used them).
    n_oov : np.ndarray
        ``int64``: tokens the model does not know (skipped).
    """

    ids: tuple[str, ...]
    theta: np.ndarray
    n_words: np.ndarray
    n_oov: np.ndarray

    @property
    def empty(self) -> np.ndarray:
        """``bool``: documents without a word of the vocabulary (their theta is the prior's, not a result)."""
        return self.n_words == 0

    @property
    def top_topic(self) -> np.ndarray:
        """``int64``: each document's most probable topic (ties to the lower index); -1 for an empty document."""
        top = np.argmax(self.theta, axis=1).astype(np.int64)
        top[self.empty] = -1
        return top

    def documents_of(self, topic: int, n: int | None = None) -> np.ndarray:
        """Indices of the documents whose top topic is ``topic``, largest share of it first.

        Parameters
        ----------
        topic : int
            A topic index in ``[0, K)``.
        n : int, optional
            At most this many (all by default).
        """
        n_topics = self.theta.shape[1]
        if not 0 <= topic < n_topics:
            raise UserInputError(f"topic {topic} is outside [0, {n_topics})")
        members = np.flatnonzero(self.top_topic == topic)
        ranked = members[np.argsort(-self.theta[members, topic], kind="stable")]
        return ranked if n is None else ranked[:n]

    def to_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write one row per document, atomically: ``id, top_topic, top_share, n_words, n_oov, topic_0..topic_K-1``.

        A document with no word of the vocabulary has ``n_words`` 0 and empty topic cells.
        """
        path = Path(path).expanduser()
        n_topics = self.theta.shape[1]
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["id", "top_topic", "top_share", "n_words", "n_oov", *(f"topic_{k}" for k in range(n_topics))])
        top = self.top_topic
        shares = np.char.mod("%.6g", self.theta)
        for d, doc_id in enumerate(self.ids):
            if top[d] < 0:
                writer.writerow([doc_id, "", "", 0, int(self.n_oov[d]), *([""] * n_topics)])
            else:
                writer.writerow([doc_id, int(top[d]), shares[d, top[d]], int(self.n_words[d]), int(self.n_oov[d]),
                                 *shares[d]])
        return _write_atomic(path, buffer.getvalue())


def reading_options(model: HasRunConfig, **overrides: Any) -> dict[str, Any]:
    """How the model's run read its documents (``text-column``, ``lowercase``, ``stopwords``), with ``overrides``.

    A model without a run config gets the defaults (:data:`READING_DEFAULTS`); an override of
    None is ignored.
    """
    trained = model.metadata.get("run_config", {}) if isinstance(model.metadata, Mapping) else {}
    options = {key: trained.get(key, default) for key, default in READING_DEFAULTS.items()}
    options.update({key.replace("_", "-"): value for key, value in overrides.items() if value is not None})
    return options


def fold_in_options(model: HasRunConfig) -> tuple[float, int]:
    """The run's fold-in settings (``eval-alpha``, ``eval-iterations``), or the defaults."""
    trained = model.metadata.get("run_config", {}) if isinstance(model.metadata, Mapping) else {}
    return (float(trained.get("eval-alpha", FOLD_IN_DEFAULTS["eval-alpha"])),
            int(trained.get("eval-iterations", FOLD_IN_DEFAULTS["eval-iterations"])))


def count_texts(texts: Sequence[str], vocabulary: Sequence[str], *, lowercase: bool = True,
                stopwords: str | None = "english") -> tuple[sp.csr_matrix, np.ndarray]:
    """Tokenize raw texts as the run's preprocessing did and count the words of ``vocabulary``.

    The same steps as :func:`flower_topics.data.preprocessing.preprocess`: optional
    lowercasing, sentences cut at :data:`~flower_topics.data.preprocessing.SENTENCE_BREAK`, the
    default token pattern, stopwords matched case-insensitively. Document-frequency filters
    do not apply: the vocabulary is the model's.

    Returns
    -------
    counts : scipy.sparse.csr_matrix
        ``(len(texts), len(vocabulary))`` word counts.
    n_oov : np.ndarray
        Each text's tokens outside the vocabulary (stopwords included).
    """
    from flower_topics.data.preprocessing import SENTENCE_BREAK, PreprocessConfig, stopword_list

    config = PreprocessConfig(lowercase=bool(lowercase), stopwords=None if stopwords in (None, "none") else stopwords)
    for d, text in enumerate(texts):
        if not isinstance(text, str):
            raise UserInputError(f"document {d} is {type(text).__name__}, not text; pass one string per document")
    pattern = re.compile(config.token_pattern)
    per_doc = [list(itertools.chain.from_iterable(pattern.findall(s) for s in SENTENCE_BREAK.split(
        t.lower() if config.lowercase else t))) for t in texts]
    stop = stopword_list(config.stopwords) if config.stopwords else frozenset()
    column = {w: j for j, w in enumerate(vocabulary) if w.lower() not in stop}
    return _count(per_doc, column, len(vocabulary))


def count_tokens(token_lists: Sequence[Sequence[str]], vocabulary: Sequence[str]) -> tuple[sp.csr_matrix, np.ndarray]:
    """Count already preprocessed tokens (an OCTIS corpus) over ``vocabulary``; see :func:`count_texts`."""
    return _count(token_lists, {w: j for j, w in enumerate(vocabulary)}, len(vocabulary))


def count_corpus(corpus: Any, vocabulary: Sequence[str]) -> DocumentCounts:
    """A :class:`~flower_topics.data.corpus.Corpus` counted over ``vocabulary`` (ids: 0-based indices)."""
    column = {w: j for j, w in enumerate(vocabulary)}
    lookup = np.fromiter((column.get(w, -1) for w in corpus.vocabulary), dtype=np.int64, count=corpus.n_words)
    ids = lookup[corpus.tokens]
    doc_ids = corpus.doc_ids
    known = ids >= 0
    counts = sp.csr_matrix((np.ones(int(known.sum())), (doc_ids[known], ids[known])),
                           shape=(corpus.n_docs, len(vocabulary)))
    counts.sum_duplicates()
    n_oov = np.bincount(doc_ids[~known], minlength=corpus.n_docs).astype(np.int64)
    return DocumentCounts(tuple(str(i) for i in range(corpus.n_docs)), counts, n_oov,
                          None if corpus.dates is None else np.asarray(corpus.dates, dtype=object))


def _count(token_lists: Sequence[Sequence[str]], column: Mapping[str, int], n_words: int
           ) -> tuple[sp.csr_matrix, np.ndarray]:
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    ids = np.fromiter((column.get(w, -1) for w in itertools.chain.from_iterable(token_lists)), dtype=np.int64,
                      count=int(lengths.sum()))
    doc_ids = np.repeat(np.arange(len(token_lists), dtype=np.int64), lengths)
    known = ids >= 0
    counts = sp.csr_matrix((np.ones(int(known.sum())), (doc_ids[known], ids[known])),
                           shape=(len(token_lists), n_words))
    counts.sum_duplicates()
    n_oov = np.bincount(doc_ids[~known], minlength=len(token_lists)).astype(np.int64)
    return counts, n_oov


def read_documents(path: str | os.PathLike[str], vocabulary: Sequence[str], *, text_column: str = "text",
                   id_column: str = "id", lowercase: bool = True, stopwords: str | None = "english",
                   date_column: str = "") -> DocumentCounts:
    """Every document of a corpus file, counted over ``vocabulary`` (see the module docstring).

    Parameters
    ----------
    path : str or path-like
        An OCTIS folder (its tokens used as they are), a ``.jsonl`` or ``.csv`` file, or a
        folder of ``.txt`` files.
    vocabulary : sequence of str
        The model's vocabulary, in column order.
    text_column : str
        Field of the text in a ``.jsonl`` / ``.csv`` file.
    id_column : str
        Field of the document id in a ``.jsonl`` / ``.csv`` file; used when every document has
        one, else the 0-based index is the id. In a folder of ``.txt`` files the id is the file's
        path relative to the folder; in an OCTIS corpus its line index.
    lowercase, stopwords
        The run's reading options (:func:`reading_options`).
    date_column : str
        Field of each document's date in a ``.jsonl`` / ``.csv`` file (read and checked as
        :func:`flower_topics.data.readers.read_jsonl` does), kept as ``DocumentCounts.dates``;
        ``""`` (the default) reads none. Refused for an OCTIS folder or a folder of ``.txt`` files.

    Raises
    ------
    UserInputError
        For a missing, unreadable or malformed corpus, or a date column that no document has
        or with a value that is not a date.
    """
    from flower_topics.data import readers

    path = Path(path).expanduser()
    if not path.exists():
        raise UserInputError(f"corpus path {str(path)!r} does not exist; pass {readers.FORMATS_HINT}")
    if path.is_file() and path.name == readers.OCTIS_CORPUS:
        path = path.parent
    if path.is_dir() and (path / readers.OCTIS_CORPUS).is_file():
        readers._no_dates(path, "an OCTIS folder", date_column)
        lines = readers._lines(readers._read_text(path / readers.OCTIS_CORPUS))
        counts, n_oov = count_tokens([line.split("\t")[0].split() for line in lines], vocabulary)
        return DocumentCounts(tuple(str(i) for i in range(len(lines))), counts, n_oov)
    suffix = path.suffix.lower()
    dates = None
    if path.is_dir():
        readers._no_dates(path, "a folder of .txt files", date_column)
        texts, _ = readers.read_text_folder(path)
        ids = [p.relative_to(path).as_posix() for p in sorted(p for p in path.rglob("*.txt") if p.is_file())]
    elif suffix == ".jsonl":
        texts, _, dates = readers.read_jsonl(path, text_column=text_column, label_column="\0",
                                             date_column=date_column)
        records = [json.loads(line) for line in readers._lines(readers._read_text(path)) if line.strip()]
        ids = [r.get(id_column) for r in records]
    elif suffix == ".csv":
        texts, _, dates = readers.read_csv(path, text_column=text_column, label_column="\0",
                                           date_column=date_column)
        with open(path, encoding="utf-8-sig", newline="") as fh:
            rows = [row for row in csv.reader(fh) if row]
        header = [name.strip() for name in rows[0]]
        ids = [row[header.index(id_column)] for row in rows[1:]] if id_column in header else []
    else:
        raise UserInputError(f"corpus {str(path)!r} has an unknown format; pass {readers.FORMATS_HINT}")
    if len(ids) != len(texts) or any(i is None or i == "" for i in ids):
        ids = [str(i) for i in range(len(texts))]
    counts, n_oov = count_texts(texts, vocabulary, lowercase=lowercase, stopwords=stopwords)
    return DocumentCounts(tuple(str(i) for i in ids), counts, n_oov,
                          None if dates is None else np.asarray(dates, dtype=object))


#: ``--corpus`` names of the corpora a run trains on without a file of its own: the embedded corpus, and the
#: synthetic corpus regenerated from the model's run config.
CORPUS_NAMES = ("embedded", "synthetic")


def model_documents(model: HasRunConfig, source: str | os.PathLike[str], vocabulary: Sequence[str],
                    **reading: Any) -> DocumentCounts:
    """The documents ``source`` names, counted over ``vocabulary`` (the model's), read as the model's run read them.

    Parameters
    ----------
    model : HasRunConfig
        The trained model (its ``metadata["run_config"]`` gives the reading options).
    source : str or path-like
        A corpus path (:func:`read_documents`), ``"embedded"`` (the corpus shipped with the package) or
        ``"synthetic"`` (the synthetic corpus of the model's run, regenerated from its run config: every
        document, ids their 0-based index).
    vocabulary : sequence of str
        The model's vocabulary, in column order.
    **reading
        Overrides of the run's reading options (``text_column``, ``id_column``, ``lowercase``, ``stopwords``;
        None keeps the run's).

    Raises
    ------
    UserInputError
        For a corpus that cannot be read, or ``"synthetic"`` for a model not trained on the synthetic corpus.
    """
    from flower_topics.data.embedded import EMBEDDED, resolve_dataset

    if str(source) == "synthetic":
        from flower_topics.data.prepare import load_run_data

        trained = model.metadata.get("run_config", {}) if isinstance(model.metadata, Mapping) else {}
        if trained.get("dataset") != "synthetic":
            raise UserInputError("--corpus synthetic regenerates the synthetic corpus of the model's run, but this "
                                 f"model was trained on {str(trained.get('dataset') or 'an unknown corpus')!r}; "
                                 "pass that corpus")
        return count_corpus(load_run_data(trained).corpus, vocabulary)
    options = reading_options(model, **reading)
    return read_documents(resolve_dataset(str(source)) if str(source) == EMBEDDED else source, vocabulary,
                          text_column=str(options["text-column"]), id_column=str(options.get("id-column", "id")),
                          lowercase=bool(options["lowercase"]), stopwords=str(options["stopwords"]))


def document_topics(topic_word: np.ndarray, documents: DocumentCounts, *, alpha: float = 0.01,
                    n_iter: int = 100) -> DocumentTopics:
    """Fold in each document's theta against ``topic_word`` (the evaluation's EM, :func:`fold_in`).

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix over the vocabulary ``documents`` was counted on.
    documents : DocumentCounts
        The documents.
    alpha : float
        Symmetric pseudo-count of the fold-in (the run's ``eval-alpha``).
    n_iter : int
        EM iterations (the run's ``eval-iterations``).
    """
    from flower_topics.metrics.inference import check_topic_word, fold_in

    phi = check_topic_word(topic_word, documents.counts.shape[1])
    theta = fold_in(phi, documents.counts, alpha=alpha, n_iter=n_iter)
    return DocumentTopics(documents.ids, theta, documents.n_words, documents.n_oov)


def _write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the file gets the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
