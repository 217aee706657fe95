"""Local side of plain federated LDA (approximate distributed LDA, no privacy).

Each round the client receives the global topic-word counts ``n_kw`` (summed over
all clients), runs collapsed Gibbs sweeps over its own tokens conditioned on them
(updating its copy in place as its tokens move), and replies with the change of its
own counts. This is AD-LDA (Newman, Asuncion, Smyth and Welling, JMLR 2009) with
the server as the only place the counts are summed.

What leaves the client: the ``K x V`` count difference, dense in the smallest integer
dtype or sparse, whichever is smaller (:mod:`flower_topics.wire.counts`; under secure
aggregation dense, then masked). Token ids, topic assignments and document-topic counts stay
in the client's state. The global counts it receives are decoded and checked the same way.

Consistency protocol: the global counts contain, for each client, the counts of
the assignments of its last *applied* update (the last-applied-round protocol of
:mod:`flower_topics.clients.base`); if the client's last reply was not applied (it
timed out or was rejected), the client rolls its assignments back to the last applied
ones, so that the counts it conditions on and the counts the server holds never drift
apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.base import LocalStep, Update, acknowledge
from flower_topics.data.corpus import Corpus
from flower_topics.models.lda import CollapsedGibbs, word_topic_buffer
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts
from flower_topics.wire import lda as wire


@dataclass
class LDAClientState:
    """What a client keeps between rounds (``context.state`` in Flower).

    Parameters
    ----------
    applied : np.ndarray or None
        Topic of each token as of the client's last update the server applied (the smallest unsigned
        integer type that holds K - 1).
    pending : np.ndarray or None
        Topic of each token as sent in the client's last reply (same type).
    pending_round : int
        Round of that reply (0 = none).
    """

    applied: np.ndarray | None = None
    pending: np.ndarray | None = None
    pending_round: int = 0


def train_round(
    corpus: Corpus,
    global_counts: np.ndarray,
    state: LDAClientState,
    *,
    server_round: int,
    last_applied_round: int,
    settings: wire.LDASettings,
    seed: int,
) -> np.ndarray:
    """Run one round of local sampling and return the count update.

    Parameters
    ----------
    corpus : Corpus
        This client's training documents.
    global_counts : np.ndarray
        ``(V, K)`` int32 global counts from the server, word-major (the transpose of the server's ``K x V``
        matrix, as :func:`~flower_topics.wire.lda.decode_counts` gives them with ``word_major``); swept in place,
        so they hold the counts after the round on return. Decoded into
        :func:`~flower_topics.models.lda.word_topic_buffer`, they are swept without a copy.
    state : LDAClientState
        Assignments kept between rounds; updated in place.
    server_round : int
        Current round (>= 1); with ``seed`` it seeds this round's random stream.
    last_applied_round : int
        Round of this client's last update the server applied (0 = none).
    settings : LDASettings
        K, the priors (with the seed pairs of guided topics, if any) and the sweeps per round.
    seed : int
        Seed of this client.

    Returns
    -------
    np.ndarray
        ``(K, V)`` int32 change of this client's topic-word counts, to be added to
        the global counts by the server: the counts after the round minus those received, taken as that
        difference when the counts have fewer cells than the party has tokens, else from its assignments
        before and after the sweeps (:meth:`~flower_topics.models.lda.CollapsedGibbs.topic_word_change`).
    """
    expected = (corpus.n_words, settings.n_topics)
    if global_counts.shape != expected:
        raise ValueError(f"global counts have shape {global_counts.shape}, expected {expected} (word-major)")
    rng = np.random.default_rng([seed, server_round])
    base_z = acknowledge(state, last_applied_round)
    sampler = CollapsedGibbs(corpus, settings.n_topics, settings.alpha, settings.beta, rng,
                             z=None if base_z is None else base_z.copy(), seeds=settings.seed_prior(corpus.n_words))
    if base_z is None:  # first update: the server does not hold this client's counts yet
        global_counts += sampler.topic_word_counts().T
    # the change, from whichever is smaller: the counts before the sweeps (their difference) or the topics
    # before them (one pass over the tokens); the same integers either way
    from_counts = global_counts.size < corpus.n_tokens
    before = global_counts.copy() if from_counts else sampler.z.copy()
    sampler.sweep_word_topic(global_counts, n_sweeps=settings.local_sweeps)
    # kept in the smallest unsigned type that holds K - 1 (uint8 up to 256 topics): context.state serializes
    # it at every message, and the sampler takes it back as int32
    state.pending = sampler.z.astype(np.min_scalar_type(settings.n_topics - 1))
    state.pending_round = server_round
    if base_z is None:
        return sampler.topic_word_counts()
    if from_counts:
        return np.ascontiguousarray(np.subtract(global_counts, before, dtype=np.int32).T)
    return sampler.topic_word_change(before)


def secure_headroom(corpus: Corpus, limit: int) -> str | None:
    """Why this party's count changes could wrap the secure sum, or None.

    An entry of a change moves tokens of one word into or out of one topic, so its magnitude is
    at most the party's count of that word (reached when it first enters its counts).
    """
    largest = corpus.largest_word_count()
    if largest <= limit:
        return None
    return (f"secure sum: a word occurs {largest} times in this party's documents, and a count change of that size "
            f"exceeds {limit}, the most each party may add without the sum wrapping; use a larger "
            f"secure-aggregation-bits")


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: LDAClientState,
               seed: int, party: PartyFacts = NO_PARTY) -> Update:
    """One round of ``lda`` from a training message: the count change (in its wire form,
    :func:`~flower_topics.wire.lda.delta_arrays`) and the token count."""
    settings = wire.LDASettings.from_record(config)
    if party.secure is not None and not settings.secure:  # the masked reply must be the dense change
        raise ValueError("this round's reply is masked (secure sum), but the server's settings say "
                         "secure-aggregation is off")
    global_counts = wire.decode_counts(arrays, settings, corpus.n_words, word_major=True,
                                       out=word_topic_buffer(corpus.n_words, settings.n_topics))
    delta = train_round(corpus, global_counts, state, server_round=int(config["server-round"]),
                        last_applied_round=int(config["last-applied-round"]), settings=settings, seed=seed)
    return wire.delta_arrays(delta, settings), {"num-tokens": corpus.n_tokens}


#: The party side of ``lda``.
STEP = LocalStep(state=LDAClientState, run=local_step,
                 secure_headroom=lambda corpus, config, secure: secure_headroom(corpus, secure.entry_limit))
