"""PC-TD's party side (Shi et al., IEEE Intelligent Systems 2020, Algorithm 1, lines 4-10).

Each round a party receives the global ``p(w|z)`` and runs one private EM iteration on
its own semantic units (:func:`flower_topics.models.pctd.local_em_step`):

- eq. (4), line 6: ``N^_ijw = N_ijw + N(0, sigma^2)`` on every unit and every word of the
  vocabulary, fresh each round (drawn exactly, in ``U K + K V`` normals);
- eq. (5), line 7: the perturbed posteriors ``r^_ijk``, in log space;
- eq. (7), line 8: the local ``p(z|d)``, kept in the party's state;
- eq. (10), lines 9-10: the upload ``M_t(w, z_k) = sum_ij N^_ijw r^_ijk``.

Only ``M_t`` (a ``K x V`` float32 array) leaves the party: no ``p(z|d)``, no unit counts, no
document or unit sizes. ``p(z|d)`` starts random (line 2) from the party's seed.

Semantic units (section "Model Assumptions") are ``unit="ngram"``: consecutive chunks
of ``ngram`` words inside each sentence when the corpus keeps sentences (the paper's
"each three words in these sentences"), inside each document otherwise (OCTIS corpora
have no punctuation); or ``unit="sentence"``: whole sentences (raw-text corpora only).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.base import LocalStep, Update
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.models.pctd import SemanticUnits, boundary_units, chunk_offsets, local_em_step, random_doc_topic
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts
from flower_topics.privacy.skellam_mechanism import largest_entry
from flower_topics.secure_sum.protocol import quantize
from flower_topics.wire import pctd as wire
from flower_topics.wire.pctd import PCTDSettings


def semantic_units(corpus: Corpus, settings: PCTDSettings) -> SemanticUnits:
    """The party's semantic units and their word counts ``N_ijw``.

    Raises
    ------
    UserInputError
        For ``unit="sentence"`` on a corpus without sentence boundaries.
    """
    sentences = corpus.sentence_ptr
    if settings.unit == "sentence":
        if sentences is None:
            raise UserInputError(
                "unit='sentence' needs a raw-text corpus (.jsonl, .csv or .txt) with punctuation; this corpus has "
                "no sentence boundaries (OCTIS corpora have none): use unit='ngram'"
            )
        return boundary_units(corpus, sentences)
    segments = corpus.doc_ptr if sentences is None else sentences
    return boundary_units(corpus, chunk_offsets(segments, settings.ngram))


@dataclass
class PCTDClientState:
    """What a party keeps between rounds (never sent).

    Parameters
    ----------
    doc_topic : np.ndarray or None
        ``(D, K)`` local ``p(z|d)`` of eq. (7); None before the first round.
    """

    doc_topic: np.ndarray | None = None


def train_round(
    corpus: Corpus,
    topic_word: np.ndarray,
    state: PCTDClientState,
    *,
    server_round: int,
    settings: PCTDSettings,
    seed: int,
) -> np.ndarray:
    """One private local EM iteration (Algorithm 1, lines 4-10); returns the upload ``M_t``.

    Parameters
    ----------
    corpus : Corpus
        The party's documents.
    topic_word : np.ndarray
        ``(K, V)`` global ``p(w|z)``, strictly positive.
    state : PCTDClientState
        The party's ``p(z|d)``; updated in place (eq. 7).
    server_round : int
        Current round (>= 1); with ``seed`` it seeds this round's noise.
    settings : PCTDSettings
        Round settings.
    seed : int
        The party's seed (``p(z|d)`` initialization and every round's noise).

    Returns
    -------
    np.ndarray
        ``(K, V)`` float32 ``M_t(w, z_k)`` of eq. (10) (noisy; may hold negative entries).
    """
    phi = np.asarray(topic_word, dtype=np.float64)
    if phi.shape != (settings.n_topics, corpus.n_words):
        raise ValueError(f"topic_word is {phi.shape}, expected ({settings.n_topics}, {corpus.n_words})")
    if state.doc_topic is None or state.doc_topic.shape != (corpus.n_docs, settings.n_topics):
        state.doc_topic = random_doc_topic(corpus.n_docs, settings.n_topics, np.random.default_rng([seed, 0]))
    step = local_em_step(semantic_units(corpus, settings), phi, state.doc_topic, settings.sigma,
                         np.random.default_rng([seed, server_round]))
    state.doc_topic = step.doc_topic
    return step.statistic.astype(np.float32)


def secure_headroom(corpus: Corpus, settings: PCTDSettings, limit: int) -> str | None:
    """Why this party's quantized ``M_t`` could be clipped by the secure sum's range, or None.

    An entry of ``M_t`` is at most the word's count plus the noise ``sum_u r_uk Omega_uw``,
    whose standard deviation is at most ``sigma sqrt(U)`` over the ``U`` units; the check asks
    for room for 40 of them (:func:`~flower_topics.privacy.skellam_mechanism.largest_entry`). (An entry beyond it is clipped to the range, post-processing:
    it costs accuracy, never privacy, and never wraps.)
    """
    units = semantic_units(corpus, settings)
    bound = largest_entry(corpus.largest_word_count(), settings.sigma * np.sqrt(units.counts.shape[0]), slack=0.0
                          ) * settings.quantum
    if bound <= limit:
        return None
    return (f"secure sum: an entry of this party's statistic could reach {bound:.3g} units, over {limit}, the most "
            f"each party may add without the sum wrapping; use a larger secure-aggregation-bits or a smaller "
            f"pctd.quantum")


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: PCTDClientState,
               seed: int, party: PartyFacts = NO_PARTY) -> Update:
    """One private EM iteration of ``pctd`` from a training message: ``M_t`` only.

    Under secure aggregation (a secure-sum round of the party's: its facts give its entry limit) ``M_t`` is
    sent as integers in units of ``1 / pctd.quantum``, randomly rounded with the party's secret
    randomness (:func:`flower_topics.secure_sum.protocol.quantize`); refused before anything is
    computed when the range could not hold it (:func:`secure_headroom`, checked by :meth:`LocalStep.train`).
    """
    settings = PCTDSettings.from_record(config)
    limit = party.secure.entry_limit if party.secure is not None else None
    server_round = int(config["server-round"])
    statistic = train_round(corpus, arrays[wire.PHI_KEY].numpy(), state, server_round=server_round,
                            settings=settings, seed=seed)
    if limit is not None:
        statistic = quantize(statistic, settings.quantum, limit, np.random.default_rng([seed, server_round, 1]))
    return {wire.STATISTIC_KEY: statistic}, {}


#: The party side of ``pctd``.
STEP = LocalStep(state=PCTDClientState, run=local_step,
                 secure_headroom=lambda corpus, config, secure: secure_headroom(
                     corpus, PCTDSettings.from_record(config), secure.entry_limit))
