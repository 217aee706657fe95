"""Federated evaluation: the parties score the global model on their own documents, the server sums.

Every ``eval-every`` rounds (by default ten times a run; and the last round) the strategy sends each node that can take part
an ``evaluate`` message with the global model only, in one of two forms:

- the topic-word matrix (float64, rows normalized, so the sums are exact; :data:`PHI_KEY`);
- for a model that is integer topic-word counts and a prior (``lda``), those counts in their
  smaller wire form (:mod:`flower_topics.wire.counts`, :data:`COUNTS_KEY`) with the prior and
  the number of topics in the config: the party computes the same float64 matrix from them
  (:func:`counts_phi`, bit for bit what the server scores), and the message is the size of the
  counts' nonzero cells instead of ``8 K V`` bytes.

The party checks that it is a K x V topic-word matrix over the agreed vocabulary (finite,
non-negative, each row summing to 1; or non-negative integer counts of at most
:data:`MAX_MODEL_CELLS` cells with a positive finite prior) and refuses it otherwise
(a ``BAD_INPUT`` error reply of one line); it computes each topic's top-10 words itself
(:func:`~flower_topics.metrics.coherence.coherence_word_ids`, as the server does), and
refuses a message that names word ids of its own. Each party replies with sums over its own
documents (:func:`party_scores`):

- over its held-out documents: the document-completion log-likelihood, the number of
  tokens scored and of out-of-vocabulary tokens (:func:`flower_topics.metrics.pooled_sums.heldout_loglik`);
- over its training documents: the number of documents, the document frequencies D(w) of
  the top words and the co-document frequencies D(wi, wj) of the pairs of words that are
  top words of one topic (:func:`topic_pairs`: what NPMI and UMass read, 45 pairs a topic at
  most; not the pairs of words from different topics);
- with labels, in the last round only (it needs a second fold-in, on all held-out tokens):
  its held-out documents' topic-by-label table (argmax theta against the label), with its
  label names (NMI, purity).

The server sums them (:func:`combine`): the perplexity, NPMI, UMass, NMI and purity equal
the pooled computation on the union of the parties' documents (a test checks it against
``flower-topics evaluate``). Diversity needs no data; the synthetic corpus' topic
similarity (TSS) is computed by the server from the seeded generator, a simulation-only
metric. Macro-F1 of a classifier on theta is not a sum over parties and is not reported.

What evaluation releases is outside the training mechanism's privacy guarantee: per
party, those sums (its held-out token count and log-likelihood, its number of training
documents, the document frequencies of the current top words and of their pairs within a
topic, and its label names with their counts per topic). ``federated-eval=false`` turns it off.

Carried with training: for a method whose strategy opts in
(:attr:`~flower_topics.strategies.base.TopicStrategy.evaluation_with_train`), an evaluation
round that is not the last sends no ``evaluate`` message. Its request (the same records, the
model of that round) travels in the next round's ``train.<method>`` message, under the record
names of :func:`carry_request` (:data:`CARRIED` then the request's name), whose global model
is that same model; the party scores it before its local step, and its train reply carries
the sums under the same prefix (:func:`carry_reply`), or, when it could not score them, one
line :data:`CARRIED_ERROR` with the reason, as an ``evaluate`` error reply says it. The
checks, the sums and what they release are those of an ``evaluate`` message.

What the top-words check does not stop: the party cannot tell the global model from a
crafted one. A hostile server that builds a valid phi whose rows put chosen words on top
still chooses which words' document frequencies and co-document frequencies it learns:
up to 10 per topic, 10 K words per evaluation (and other words at each further
evaluation). The check only stops it from naming ids directly or sending something that
is not a topic-word matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.metrics.coherence import coherence_word_ids, document_presence, presence_cooccurrence
from flower_topics.metrics.diversity import topic_diversity
from flower_topics.metrics.pooled_sums import (
    Cooccurrence,
    HeldOut,
    coherence_from_counts,
    label_contingency,
    nmi_purity_from_contingency,
)
from flower_topics.metrics.inference import fold_in
from flower_topics.metrics.perplexity import CompletionHalves, completion_halves
from flower_topics.models.topic_word import counts_model, counts_model_columns_t
from flower_topics.wire import counts as wire_counts
from flower_topics.wire.agreement import join_words, split_words
from flower_topics.wire.protocol import (
    ARRAYS,
    CARRIED,
    CONFIG,
    METRICS,
    SENDER,
    UPDATE,
    ArraySpec,
    ReplyError,
    ReplySpec,
    validate_reply,
)

MESSAGE_TYPE = str(MessageType.EVALUATE)
METHOD = "evaluation"
PHI_KEY = "topic-word"
#: The counts form of the model (:func:`counts_request`): the two arrays of :func:`flower_topics.wire.counts.keys`.
COUNTS_KEY = "topic-counts"
#: Config keys of the counts form: the topic-word prior and the number of topics (rows of the counts).
BETA = "model-beta"
TOPICS = "model-topics"
#: Most cells (topics x words) of a model a party builds from counts: the float64 matrix form is bounded by its
#: message's size, the counts form (whose sparse form can be small for any K) by this, 2 GiB of float64.
MAX_MODEL_CELLS = 1 << 28
#: How far a row of the model a party is sent may sum from 1 (the server normalizes it in float64).
ROW_SUM_TOLERANCE = 1e-6
DOC_FREQ = "doc-freq"
CO_DOC_FREQ = "co-doc-freq"
CONTINGENCY = "contingency"
LABELS = "labels"
SUMS = ("neg-loglik", "n-tokens", "n-oov", "n-docs")
#: The carried record (after :func:`split_carried`) of a training reply that says, in one line (key ``reason``), why
#: the party did not score the model.
ERROR_RECORD = "error"


@dataclass(frozen=True)
class EvaluationSettings:
    """When and how the parties score the model.

    Parameters
    ----------
    every : int
        Score every ``every`` rounds, and the last round.
    num_rounds : int
        The run's last round.
    alpha : float
        Fold-in pseudo-count.
    n_iter : int
        Fold-in EM iterations.
    seed : int
        Seed of the document-completion halves (public).
    labels : bool
        Also the topic-by-label tables, in the last round.
    with_train : bool
        A scored round other than the last may be scored by the next round's training messages
        (where the strategy allows it: :meth:`~flower_topics.strategies.base.TopicStrategy.carries_evaluation`).
    """

    every: int
    num_rounds: int
    alpha: float = 0.01
    n_iter: int = 100
    seed: int = 0
    labels: bool = True
    with_train: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "EvaluationSettings | None":
        """The run config's settings, or None with ``federated-eval=false``."""
        if not bool(config["federated-eval"]):
            return None
        return cls(every=eval_interval(config), num_rounds=int(config["num-rounds"]),
                   alpha=float(config["eval-alpha"]), n_iter=int(config["eval-iterations"]),
                   seed=int(config["seed"]), labels=bool(config["eval-labels"]),
                   with_train=bool(config["eval-with-train"]))

    def due(self, server_round: int) -> bool:
        """Whether round ``server_round`` is scored."""
        return server_round % self.every == 0 or server_round == self.num_rounds


def eval_interval(config: Mapping[str, Any]) -> int:
    """Rounds between evaluations: ``eval-every``, or with 0 (the default) a tenth of the run (10 evaluations)."""
    every = int(config["eval-every"])
    return every if every > 0 else max(1, -(-int(config["num-rounds"]) // 10))


def is_eval_round(server_round: int, config: Mapping[str, Any]) -> bool:
    """Whether round ``server_round`` is scored (every :func:`eval_interval` rounds, and the last)."""
    return server_round % eval_interval(config) == 0 or server_round == int(config["num-rounds"])


def model_phi(topic_word: np.ndarray) -> np.ndarray:
    """The model as the parties are sent it and the server scores it: float64, each row divided by its sum."""
    phi = np.array(topic_word, dtype=np.float64, order="C")
    phi /= phi.sum(axis=1, keepdims=True)
    return phi


def counts_phi(counts: np.ndarray, beta: float) -> np.ndarray:
    """The model of integer topic-word ``counts`` and prior ``beta``, as the parties and the server score it:
    :func:`model_phi` of ``(n_kw + beta) / (n_k + V beta)``, the same bits in one compiled pass
    (:func:`~flower_topics.models.topic_word.counts_model`)."""
    return counts_model(counts, beta)


def _request_config(settings: EvaluationSettings, fingerprint: str, server_round: int) -> dict[str, Any]:
    labels = settings.labels and server_round == settings.num_rounds
    return {"eval-alpha": settings.alpha, "eval-iterations": settings.n_iter, "seed": settings.seed,
            "labels": labels, "vocabulary": fingerprint}


def request(phi: np.ndarray, settings: EvaluationSettings, fingerprint: str, server_round: int) -> RecordDict:
    """The content of an ``evaluate`` message: the model ``phi`` as the parties are to hold it (the strategy's
    :func:`model_phi`, sent as it is) and the settings, no word ids."""
    return RecordDict({
        ARRAYS: ArrayRecord({PHI_KEY: Array(np.ascontiguousarray(phi, dtype=np.float64))}),
        CONFIG: ConfigRecord(_request_config(settings, fingerprint, server_round)),
    })


def counts_request(counts: np.ndarray, beta: float, settings: EvaluationSettings, fingerprint: str,
                   server_round: int) -> RecordDict:
    """An ``evaluate`` message whose model is integer ``counts`` (``K x V``) and prior ``beta``: the counts in their
    smaller wire form, ``beta`` and ``K`` in the config; it stands for :func:`counts_phi` of them."""
    return RecordDict({
        ARRAYS: wire_counts.encode_record(np.asarray(counts), COUNTS_KEY),
        CONFIG: ConfigRecord({**_request_config(settings, fingerprint, server_round), BETA: float(beta),
                              TOPICS: int(counts.shape[0])}),
    })


def carry_request(train: RecordDict, request: RecordDict) -> None:
    """Add an ``evaluate`` request's records to a training message's ``train``, each under :data:`CARRIED`."""
    for name, record in request.items():
        train[f"{CARRIED}{name}"] = record


def split_carried(content: RecordDict) -> tuple[RecordDict, RecordDict | None]:
    """``(the rest, the carried records)`` of a training message or reply: its records without the
    :data:`CARRIED` prefix's, and those, named as in an ``evaluate`` message or reply (None when there are none)."""
    rest, carried = RecordDict(), RecordDict()
    for name, record in content.items():
        if name.startswith(CARRIED):
            carried[name[len(CARRIED):]] = record
        else:
            rest[name] = record
    return rest, (carried if len(carried) else None)


def carry_reply(train: RecordDict, sums: RecordDict | None, reason: str = "") -> None:
    """Add a party's evaluation ``sums`` (:meth:`PartyScorer.scores`) to its training reply ``train``, each record
    under :data:`CARRIED`; with ``sums`` None, the one-line ``reason`` it could not score the model instead."""
    if sums is None:
        train[f"{CARRIED}{ERROR_RECORD}"] = ConfigRecord({"reason": reason})
    else:
        carry_request(train, sums)


def received_model(content: RecordDict, n_words: int) -> np.ndarray:
    """The model of an ``evaluate`` message as a ``(K, V)`` float64 topic-word matrix, checked by the party before
    it computes anything from it (for the counts form, :func:`counts_phi` of the counts).

    Parameters
    ----------
    content : RecordDict
        The message's content.
    n_words : int
        The size of the vocabulary the party agreed to.

    Raises
    ------
    UserInputError
        One line, when the message carries arrays other than the model (word ids the server
        chose), or the model is not a K x V matrix over the agreed vocabulary that is finite,
        non-negative and whose rows sum to 1 (within :data:`ROW_SUM_TOLERANCE`), or not
        non-negative integer counts of at most :data:`MAX_MODEL_CELLS` cells with a positive finite prior.
    """
    phi, counts, beta = _checked_model(content, n_words)
    return phi if counts is None else counts_phi(counts, beta)


def received_ranking_and_columns(content: RecordDict, n_words: int, columns: np.ndarray
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """The model of an ``evaluate`` message, checked as :func:`received_model` checks it, as what a
    party's scores read of it: a ``(K, V)`` array whose rows rank each topic's words as ``phi``'s do (``phi``
    itself, or for the counts form the counts: within a topic ``phi`` grows with the count, so the order and the
    ties are the same), and ``phi``'s columns ``columns`` transposed (``len(columns) x K``, C-contiguous, the
    same bits as the rows of ``phi.T``), without building the ``K x V`` matrix from counts.

    Raises
    ------
    UserInputError
        As :func:`received_model`.
    """
    phi, counts, beta = _checked_model(content, n_words)
    if counts is not None:
        return counts, counts_model_columns_t(counts, beta, columns)
    return phi, np.ascontiguousarray(phi[:, columns].T)


def _checked_model(content: RecordDict, n_words: int) -> tuple[np.ndarray | None, np.ndarray | None, float]:
    """``(phi, None, 0)`` for the matrix form, ``(None, counts, beta)`` for the counts form, checked (see
    :func:`received_model`)."""
    arrays = content[ARRAYS] if ARRAYS in content.array_records else ArrayRecord()
    counts_keys = set(wire_counts.keys(COUNTS_KEY))
    stray = sorted(set(arrays.keys()) - {PHI_KEY} - counts_keys)  # arrays besides the model
    if stray:
        raise UserInputError(f"the evaluate message carries {', '.join(repr(k) for k in stray)} besides the model; a "
                             "party computes the top words itself from the model and answers nothing else")
    if counts_keys & set(arrays.keys()):
        if PHI_KEY in arrays:
            raise UserInputError("the evaluate message carries the model twice (a matrix and counts)")
        counts, beta = _received_counts(content, arrays, n_words)
        return None, counts, beta
    if PHI_KEY not in arrays:
        raise UserInputError(f"the evaluate message has no model ('{PHI_KEY}')")
    phi = np.asarray(arrays[PHI_KEY].numpy())
    if phi.ndim != 2 or phi.shape[0] < 1:
        raise UserInputError(f"the evaluate message's model of shape {phi.shape} is not a K x V topic-word matrix")
    if phi.shape[1] != n_words:
        raise UserInputError(f"the evaluate message's model has {phi.shape[1]} columns but the agreed vocabulary has "
                             f"{n_words} words")
    if not np.issubdtype(phi.dtype, np.floating):
        raise UserInputError(f"the evaluate message's model is of dtype {phi.dtype}, not a float topic-word matrix")
    phi = np.ascontiguousarray(phi, dtype=np.float64)
    smallest, largest = phi.min(), phi.max()  # reductions, no temporaries: a NaN shows in both
    if not (np.isfinite(smallest) and np.isfinite(largest)):
        raise UserInputError("the evaluate message's model has entries that are not finite")
    if smallest < 0:
        raise UserInputError("the evaluate message's model has negative entries")
    error = float(np.abs(phi.sum(axis=1) - 1.0).max())
    if error > ROW_SUM_TOLERANCE:
        raise UserInputError(f"the evaluate message's model rows do not sum to 1 (off by up to {error:.3g}): it is "
                             "not a topic-word matrix")
    return phi, None, 0.0


def _received_counts(content: RecordDict, arrays: ArrayRecord, n_words: int) -> tuple[np.ndarray, float]:
    """The counts form of an ``evaluate`` message and its prior, after checking them (see
    :func:`received_model`)."""
    config = content[CONFIG] if CONFIG in content.config_records else ConfigRecord()
    if BETA not in config or TOPICS not in config:
        raise UserInputError(f"the evaluate message's counts come without '{BETA}' and '{TOPICS}'")
    beta, k = config[BETA], config[TOPICS]
    if not isinstance(beta, float) or not (np.isfinite(beta) and beta > 0):
        raise UserInputError(f"the evaluate message's prior {beta!r} is not a positive finite number")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_MODEL_CELLS // max(n_words, 1):
        raise UserInputError(f"the evaluate message's counts have {k!r} topics: need 1 to "
                             f"{MAX_MODEL_CELLS // max(n_words, 1)} over {n_words} words")
    try:
        counts = wire_counts.decode_record(arrays, COUNTS_KEY, (k, n_words), dtype=np.int32, minimum=0,
                                           what="the evaluate message's counts")  # int32: half the bytes of int64
    except ValueError as exc:
        raise UserInputError(str(exc)) from None
    return counts, float(beta)


class PartyScorer:
    """A party's documents, prepared once for all of its evaluations.

    The completion halves of its held-out documents (per public seed), the words its held-out
    documents use and which training documents hold each word are computed at the first
    ``evaluate`` message and kept: each later message only folds in the model and counts its
    top words' documents. Everything the held-out documents are scored with reads only the
    model's columns of their own words (:func:`received_ranking_and_columns`), so a model sent
    as counts is never built as a ``K x V`` matrix here.

    Parameters
    ----------
    training : Corpus
        The party's training documents (the coherence reference), over the agreed vocabulary.
    heldout : Corpus
        Its held-out documents, over the same vocabulary.
    """

    def __init__(self, training: Corpus, heldout: Corpus) -> None:
        self.training = training
        self.heldout = heldout
        #: the held-out documents' distinct word ids, sorted: local word j is agreed word ``_words[j]``
        self._words = np.unique(heldout.tokens).astype(np.int64)
        self._halves: dict[int, CompletionHalves] = {}
        self._label_counts: sp.csr_matrix | None = None
        self._presence: sp.csr_matrix | None = None

    def _local(self, word_ids: np.ndarray) -> np.ndarray:
        """Agreed word ids of held-out tokens as local ids (an order-keeping map: rows stay in word order)."""
        return np.searchsorted(self._words, word_ids)

    def _local_halves(self, seed: int) -> CompletionHalves:
        """:func:`completion_halves` of the held-out documents (split on their agreed word ids, as every party and
        ``flower-topics evaluate`` split them), over local word ids."""
        halves = completion_halves(self.heldout, seed=seed)
        observed = halves.observed
        local = sp.csr_matrix((observed.data, self._local(observed.indices), observed.indptr),
                              shape=(observed.shape[0], self._words.size))
        return CompletionHalves(local, halves.held_doc, self._local(halves.held_word), halves.n_docs)

    def scores(self, content: RecordDict) -> RecordDict:
        """The party's sums for an ``evaluate`` message (see the module docstring).

        The model is checked first (:func:`received_ranking_and_columns`); the co-document counts are those
        of its own top words (:func:`~flower_topics.metrics.coherence.coherence_word_ids`), never of words the
        server names.

        Raises
        ------
        UserInputError
            For a message that is not an honest ``evaluate`` request (:func:`received_model`).
        """
        config = content[CONFIG]
        ranking, phi_t = received_ranking_and_columns(content, self.training.n_words, self._words)
        top_ids, word_ids = coherence_word_ids(ranking, 10, check_input=False)  # checked as it was received
        n_topics = ranking.shape[0]
        phi = phi_t.T  # the model's columns of the held-out words: all the fold-in and the scores read
        alpha, n_iter, seed = float(config["eval-alpha"]), int(config["eval-iterations"]), int(config["seed"])
        if seed not in self._halves:
            self._halves[seed] = self._local_halves(seed)
        held = self._halves[seed].loglik(phi, alpha=alpha, n_iter=n_iter, phi_t=phi_t, check_input=False)
        if self._presence is None:
            self._presence = document_presence(self.training)
        co_doc_freq = presence_cooccurrence(self._presence, word_ids)
        pairs = topic_pairs(top_ids, word_ids)
        arrays = {DOC_FREQ: np.diag(co_doc_freq).copy(), CO_DOC_FREQ: co_doc_freq[pairs[:, 0], pairs[:, 1]]}
        names: list[str] = []
        if bool(config["labels"]) and self.heldout.labels is not None:
            names = sorted({str(x) for x in self.heldout.labels})
            if self._label_counts is None:  # infer_theta's document-term counts, over local word ids
                self._label_counts = sp.csr_matrix(
                    (np.ones(self.heldout.n_tokens), (self.heldout.doc_ids, self._local(self.heldout.tokens))),
                    shape=(self.heldout.n_docs, self._words.size))
            theta = fold_in(phi, self._label_counts, alpha=alpha, n_iter=n_iter, phi_t=phi_t)
            arrays[CONTINGENCY] = label_contingency(theta, self.heldout.labels, n_topics, names)
        else:
            arrays[CONTINGENCY] = np.zeros((n_topics, 0), dtype=np.int64)
        return RecordDict({
            UPDATE: ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()}),
            METRICS: MetricRecord({"neg-loglik": -float(held.loglik), "n-tokens": held.n_eval_tokens, "n-oov": 0,
                                   "n-docs": self.training.n_docs}),
            SENDER: ConfigRecord({"method": METHOD}),
            CONFIG: ConfigRecord({LABELS: join_words(names)}),
        })


def party_scores(content: RecordDict, training: Corpus, heldout: Corpus) -> RecordDict:
    """One ``evaluate`` message's sums (:meth:`PartyScorer.scores`), preparing the documents for it alone."""
    return PartyScorer(training, heldout).scores(content)


def topic_pairs(top_ids: np.ndarray, word_ids: np.ndarray) -> np.ndarray:
    """The pairs of top words that NPMI and UMass read: two top words of one topic.

    Parameters
    ----------
    top_ids : np.ndarray
        ``(K, n)`` each topic's top word ids (:func:`~flower_topics.metrics.coherence.coherence_word_ids`).
    word_ids : np.ndarray
        ``(m,)`` their sorted distinct ids (the same function's second result).

    Returns
    -------
    np.ndarray
        ``(P, 2)`` int64 positions ``a < b`` in ``word_ids``, distinct and in lexicographic order: the order of an
        ``evaluate`` reply's co-document counts (at most ``K n (n - 1) / 2`` pairs, fewer when topics share them).
    """
    m = max(int(np.size(word_ids)), 1)
    columns = np.searchsorted(np.asarray(word_ids), np.asarray(top_ids, dtype=np.int64)).astype(np.int64)
    first, second = np.triu_indices(columns.shape[1], 1)
    a, b = columns[:, first].ravel(), columns[:, second].ravel()
    codes = np.unique(np.minimum(a, b) * m + np.maximum(a, b))  # a pair as one number: sorted as (a, b) is
    return np.stack([codes // m, codes % m], axis=1)


def reply_spec(n_topics: int, n_words: int, n_pairs: int) -> ReplySpec:
    """A valid ``evaluate`` reply for a model of ``n_topics`` topics scored on ``n_words`` top words forming
    ``n_pairs`` :func:`topic_pairs`."""
    counts = dict(low=0, what="document frequencies")
    return ReplySpec(METHOD, {
        DOC_FREQ: ArraySpec("integer", (n_words,), **counts),
        CO_DOC_FREQ: ArraySpec("integer", (n_pairs,), **counts),
        CONTINGENCY: ArraySpec("integer", (n_topics, None), **counts),
    }, metrics=SUMS, config=(LABELS,), max_bytes=8 * (n_words + n_pairs + n_topics * 4096) + (1 << 20))


@dataclass(frozen=True)
class PartyScores:
    """One party's validated sums: held-out log-likelihood, its training documents' count, the top words'
    document frequencies and their :func:`topic_pairs`' co-document frequencies, and its label table."""

    held: HeldOut
    n_docs: int
    doc_freq: np.ndarray
    pair_freq: np.ndarray
    contingency: np.ndarray
    labels: tuple[str, ...]


def parse_reply(reply: Message, n_topics: int, n_words: int, n_pairs: int) -> PartyScores:
    """A reply's sums, validated (raises :class:`~flower_topics.wire.protocol.ReplyError`)."""
    return parse_sums(reply.content, n_topics, n_words, n_pairs)


def parse_sums(content: RecordDict, n_topics: int, n_words: int, n_pairs: int) -> PartyScores:
    """:func:`parse_reply` of a reply's content (an ``evaluate`` reply's, or the carried records of a training
    reply, :func:`split_carried`)."""
    arrays, metrics = validate_reply(content, reply_spec(n_topics, n_words, n_pairs))
    labels = split_words(str(content[CONFIG][LABELS]))
    if arrays[CONTINGENCY].shape[1] != len(labels):
        raise ReplyError(f"{arrays[CONTINGENCY].shape[1]} label columns but {len(labels)} label names")
    return PartyScores(HeldOut(-float(metrics["neg-loglik"]), int(metrics["n-tokens"]), int(metrics["n-oov"])),
                       int(metrics["n-docs"]), np.asarray(arrays[DOC_FREQ], dtype=np.int64),
                       np.asarray(arrays[CO_DOC_FREQ], dtype=np.int64), arrays[CONTINGENCY], labels)


def _pooled_cooccurrence(parts: Sequence[PartyScores], n_words: int, pairs: np.ndarray) -> Cooccurrence:
    """The parties' counts summed, as the ``(m, m)`` table coherence reads: the diagonal the document
    frequencies, the :func:`topic_pairs` their co-document frequencies (both ways), every other cell 0."""
    table = np.zeros((n_words, n_words), dtype=np.int64)
    pair_freq = sum((p.pair_freq for p in parts), np.zeros(len(pairs), dtype=np.int64))
    table[pairs[:, 0], pairs[:, 1]] = pair_freq
    table[pairs[:, 1], pairs[:, 0]] = pair_freq
    doc_freq = sum((p.doc_freq for p in parts), np.zeros(n_words, dtype=np.int64))
    table[np.arange(n_words), np.arange(n_words)] = doc_freq
    return Cooccurrence(sum(p.n_docs for p in parts), doc_freq, table)


def combine(parts: Sequence[PartyScores], phi: np.ndarray, top: tuple[np.ndarray, np.ndarray] | None = None,
            pairs: np.ndarray | None = None) -> dict[str, float | int]:
    """The pooled metrics from the parties' sums (and diversity, from the model alone).

    ``phi`` is the matrix the parties hold (sent, or built from the counts sent) and took their
    top words from; ``top`` its :func:`coherence_word_ids` at 10 words and ``pairs`` their
    :func:`topic_pairs`, when the caller has them.
    """
    top_ids, word_ids = coherence_word_ids(phi, 10) if top is None else top
    held = sum((p.held for p in parts), HeldOut(0.0, 0, 0))
    co = _pooled_cooccurrence(parts, word_ids.size, topic_pairs(top_ids, word_ids) if pairs is None else pairs)
    metrics: dict[str, float | int] = {"n_eval_tokens": held.n_tokens, "n_oov": held.n_oov,
                                       "diversity": topic_diversity(phi), "eval_parties": len(parts)}
    if held.n_tokens:
        metrics["perplexity"] = held.perplexity
    if co.n_docs and top_ids.shape[1] >= 2:
        metrics["npmi"], metrics["umass"] = coherence_from_counts(top_ids, word_ids, co)
    names = sorted({name for p in parts for name in p.labels})
    if names:
        table = np.zeros((phi.shape[0], len(names)), dtype=np.int64)
        column = {name: j for j, name in enumerate(names)}
        for p in parts:
            for j, name in enumerate(p.labels):
                table[:, column[name]] += p.contingency[:, j]
        metrics["nmi"], metrics["purity"] = nmi_purity_from_contingency(table)
    return metrics


def evaluation_keys() -> tuple[str, ...]:
    """The keys :func:`combine` may return (what a ``metrics.jsonl`` line holds of a federated evaluation)."""
    return ("n_eval_tokens", "n_oov", "diversity", "eval_parties", "perplexity", "npmi", "umass", "nmi", "purity")


def numeric(metrics: Mapping[str, Any]) -> Iterable[tuple[str, float]]:
    """The metrics that fit a MetricRecord."""
    return ((k, float(v)) for k, v in metrics.items() if isinstance(v, (int, float)))
