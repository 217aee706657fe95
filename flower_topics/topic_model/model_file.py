"""The model file contract: ``model.npz`` with topic_word, vocabulary and metadata.

Every method writes its final model with :func:`save_model`; every scorer reads it
back with :func:`load_model` (see docs/architecture.md, "Contracts").
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from flower_topics.errors import UserInputError

#: A run's model file: ``topic_word``, ``vocabulary`` and ``metadata`` (:func:`save_model`).
MODEL_FILE = "model.npz"
#: Written beside it: the strategy's final global arrays (``ntm``'s network weights, the topic-word counts
#: of ``lda`` and ``fedlda``).
STATE_FILE = "state.npz"

if TYPE_CHECKING:
    from flower_topics.topic_model.document_topics import DocumentTopics


#: Top words in a topic's label (:meth:`TopicModel.labels`).
LABEL_WORDS = 3


@dataclass(frozen=True)
class TopicModel:
    """A trained topic model.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` float64 matrix, each row a distribution over the vocabulary.
    vocabulary : tuple of str
        The word of each column of ``topic_word``.
    metadata : dict
        Method, run config, rounds, privacy spent, wall time.
    """

    topic_word: np.ndarray
    vocabulary: tuple[str, ...]
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        phi = np.asarray(self.topic_word, dtype=np.float64)
        object.__setattr__(self, "topic_word", phi)
        object.__setattr__(self, "vocabulary", tuple(self.vocabulary))
        if phi.ndim != 2 or phi.shape[0] < 1:
            raise ValueError("topic_word must be a non-empty (K, V) matrix")
        if phi.shape[1] != len(self.vocabulary):
            raise ValueError(
                f"topic_word has {phi.shape[1]} columns but the vocabulary has {len(self.vocabulary)} words"
            )
        if not np.all(np.isfinite(phi)) or np.any(phi < 0):
            raise ValueError("topic_word must be finite and non-negative")
        if not np.allclose(phi.sum(axis=1), 1.0, atol=1e-8):
            raise ValueError("each row of topic_word must sum to 1")

    @property
    def n_topics(self) -> int:
        """Number of topics K."""
        return int(self.topic_word.shape[0])

    def top_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of each topic (ties to the lower column)."""
        order = np.argsort(-self.topic_word, axis=1, kind="stable")[:, :n]
        return [[self.vocabulary[j] for j in row] for row in order]

    def labels(self, n_words: int = LABEL_WORDS) -> list[str]:
        """Each topic's label: its index and its ``n_words`` most probable words, ``"3 · engine, car, race"``."""
        return [f"{k} \u00b7 {', '.join(words)}" for k, words in enumerate(self.top_words(n_words))]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "TopicModel":
        """Read a model file (:func:`load_model`)."""
        return load_model(path)

    def topic_terms(self, topic: int, n: int = 10) -> list[tuple[str, float]]:
        """The ``n`` most probable words of ``topic`` with their probabilities, largest first."""
        if not 0 <= topic < self.n_topics:
            raise UserInputError(f"topic {topic} is outside [0, {self.n_topics})")
        order = np.argsort(-self.topic_word[topic], kind="stable")[:n]
        return [(self.vocabulary[j], float(self.topic_word[topic, j])) for j in order]

    def document_topics(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> "DocumentTopics":
        """Fold in the topic mixtures of raw ``texts``, read with the run's preprocessing.

        Tokenized as the run read its documents (its lowercase and stopwords options, from
        ``metadata["run_config"]``); theta by the evaluation's fold-in EM with the run's
        ``eval-alpha`` and ``eval-iterations``. A text without a word of the vocabulary gets
        the uniform row and no top topic (``DocumentTopics.empty``).
        """
        from flower_topics.topic_model.document_topics import DocumentCounts, count_texts, document_topics, fold_in_options, \
            reading_options

        reading = reading_options(self)
        counts, n_oov = count_texts(texts, self.vocabulary, lowercase=bool(reading["lowercase"]),
                                    stopwords=str(reading["stopwords"]))
        names = tuple(str(i) for i in (range(len(texts)) if ids is None else ids))
        if len(names) != len(texts):
            raise UserInputError(f"got {len(names)} ids for {len(texts)} texts")
        alpha, n_iter = fold_in_options(self)
        return document_topics(self.topic_word, DocumentCounts(names, counts, n_oov), alpha=alpha, n_iter=n_iter)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """The ``(len(texts), K)`` topic mixtures of raw ``texts`` (see :meth:`document_topics`)."""
        return self.document_topics(texts).theta

    def read_documents(self, path: str | os.PathLike[str], **reading: Any) -> "DocumentTopics":
        """The topic mixtures of every document of a corpus, read as the run read its parties' files.

        ``path``: a corpus file or folder, ``"embedded"`` or ``"synthetic"`` (the synthetic corpus of this
        model's run), see :func:`flower_topics.topic_model.document_topics.model_documents`. ``reading``
        overrides the run's options: ``text_column``, ``id_column``, ``lowercase``, ``stopwords`` (see
        :func:`flower_topics.topic_model.document_topics.read_documents`).
        """
        from flower_topics.topic_model.document_topics import document_topics, fold_in_options, model_documents

        documents = model_documents(self, path, self.vocabulary, **reading)
        alpha, n_iter = fold_in_options(self)
        return document_topics(self.topic_word, documents, alpha=alpha, n_iter=n_iter)


def save_model(path: str | os.PathLike[str], model: TopicModel) -> Path:
    """Write ``model`` to ``path`` atomically (no half-written file on failure)."""
    return save_npz(path, topic_word=model.topic_word, vocabulary=np.asarray(model.vocabulary, dtype=str),
                    metadata=np.asarray(json.dumps(model.metadata, default=_json_default)))


def save_npz(path: str | os.PathLike[str], compress: bool = True, **arrays: np.ndarray) -> Path:
    """Write ``arrays`` to an ``.npz`` at ``path`` atomically (no half-written file on failure), compressed by default."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            (np.savez_compressed if compress else np.savez)(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_model(path: str | os.PathLike[str]) -> TopicModel:
    """Read a model: one a run wrote, or any ``.npz`` with ``topic_word`` (K x V) and ``vocabulary`` (V strings).

    ``metadata`` is optional (a model exported from tomotopy or gensim has none); rows that
    sum to 1 only up to float32 rounding (within 1e-4) are renormalized.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"model file {path} does not exist; pass the model.npz a run wrote")
    try:
        with np.load(path, allow_pickle=False) as data:
            phi = np.asarray(data["topic_word"], dtype=np.float64)
            vocabulary = tuple(str(w) for w in data["vocabulary"])
            metadata = json.loads(str(data["metadata"])) if "metadata" in data.files else {}
        rows = phi.sum(axis=1) if phi.ndim == 2 and np.all(np.isfinite(phi)) else None
        if rows is not None and not np.allclose(rows, 1.0, atol=1e-8) and np.allclose(rows, 1.0, atol=1e-4):
            phi = phi / rows[:, None]  # float32 exports
        return TopicModel(topic_word=phi, vocabulary=vocabulary, metadata=metadata)
    except (KeyError, ValueError, OSError) as exc:
        raise UserInputError(f"{path} is not a valid model file: it needs topic_word (K x V, rows summing to 1) "
                             f"and vocabulary (V words) ({exc})") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialize {type(obj).__name__} to JSON")
