"""FedLDA's local sampling (Wang, Tong and Shi, AAAI 2020, Algorithm 1).

Each round a client receives the global topic-word distribution phi^(t) and, for
each of its documents:

1. resamples the topics of the document's words against phi^(t) with the
   document-topic counts collapsed (Gibbs or alias Metropolis-Hastings, Algorithm 1
   lines 1-4, :class:`~flower_topics.models.fixed_phi.FixedPhiSampler`);
2. writes the updating vector in its dense representation, the tuples
   ``(w, k_old, k_new)`` of the words whose topic changed (line 5);
3. pads it to M tuples with dummies and samples l of them uniformly without
   replacement (line 6, "Padding & Sampling");
4. perturbs the word of every sampled tuple with the configured randomizer (lines
   7-8; RRP is Algorithm 3).

Documents are the paper's users: each has its own budget and sends exactly its l
tuples per round. A client holding many documents shuffles all its documents'
tuples together before sending, so the server does not see which document a tuple
came from. What the tuples do reveal (their topics are unperturbed, no-op dummies
are recognisable and carry draws from theta, entry tuples add up to the party's
token count, l to document lengths unless ``pad-length`` is public) is listed in the
README; no token ids, topic assignments or per-document counts are sent. The reply
carries the tuples and, unless ``pad-length`` is public, the number of documents and
the largest l, which the accounting needs.

What the server knows. A document's tuples describe changes relative to the topic
the server currently counts each of its words under, its *server view*: a word whose
change was not among the l sampled tuples stays pending and is sent in a later
round, instead of being lost. A move (not an entry) whose word the randomizer replaced is kept
pending too (``resend-replaced``, default): the server received a change of another
word, skips it when that word's topic holds none (see
:func:`~flower_topics.models.update_tuples.apply_tuples`), and gets the true change,
perturbed afresh, later. The server's counts then follow the clients' server views
up to the replaced words still in them, and sampling does not make them drift. Only
the server view is rolled back when a reply was not applied (the server tells each
client the round of its last applied reply); the topic assignments themselves never
need to be.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.base import LocalStep, Update, acknowledge
from flower_topics.data.corpus import Corpus
from flower_topics.models.fixed_phi import FixedPhiSampler
from flower_topics.models.update_tuples import (Tuples, cancelling_dummies, changed_tuples, pad_and_sample,
                                                public_sample_size, sample_sizes)
from flower_topics.privacy import RRP
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts
from flower_topics.privacy.word_randomizers import round_randomizer
from flower_topics.wire import fedlda as wire
from flower_topics.wire.fedlda import FedLDASettings


@dataclass(frozen=True)
class ClientUpdate:
    """One round's reply.

    Parameters
    ----------
    tuples : np.ndarray
        ``(n, 3)`` rows ``(w, k_old, k_new)``, perturbed and shuffled; uint16 when the
        vocabulary and topics fit (6 bytes a tuple), else int32.
    n_docs : int
        Documents that contributed.
    max_tuples_per_doc : int
        The largest l among them (the accounting's per-document count).
    """

    tuples: np.ndarray
    n_docs: int
    max_tuples_per_doc: int


def perturb_words(settings: FedLDASettings, words: np.ndarray, docs: np.ndarray, theta: np.ndarray,
                  phi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The configured randomizer applied to the words of the sampled tuples.

    RRP draws replacements from the document's theta and phi; the baselines rank words
    by phi's word marginal (public: every client and the server hold phi).
    """
    randomizer = round_randomizer(settings, phi)
    if randomizer is None:
        return np.asarray(words, dtype=np.int64)
    if isinstance(randomizer, RRP):
        return randomizer.perturb(words, docs, theta, phi, rng)
    return randomizer.perturb(words, rng)


def _capacity(view: np.ndarray, tokens: np.ndarray, sampled: Tuples, source: np.ndarray, opened: np.ndarray,
              n_topics: int, n_words: int) -> np.ndarray:
    """How many words each cell of the server can still give up to this reply's new dummies.

    The party's own part of the server's counts (its server view, less what its open dummies
    took out) less what the reply's real moves take out of each cell.
    """
    counts = np.zeros((n_topics + 1, n_words), dtype=np.int64)
    np.add.at(counts, (view, tokens), 1)
    counts = counts[:n_topics]
    # an open dummy took a word out of (a, w); the +1 it put in (b, w) is for its own reversal
    opened = np.asarray(opened, dtype=np.int64).reshape(-1, 4)
    np.subtract.at(counts, (opened[:, 2], opened[:, 1]), 1)
    leaving = (source >= 0) & (sampled.k_old < n_topics)
    np.subtract.at(counts, (sampled.k_old[leaving], sampled.words[leaving]), 1)
    return counts


@dataclass
class FedLDAClientState:
    """What a client keeps between rounds (``context.state`` in Flower).

    Parameters
    ----------
    z : np.ndarray or None
        Current topic of each token.
    applied : np.ndarray or None
        The *server view*: the topic the server counts each token under (K = not
        counted yet), as of the client's last applied reply.
    pending : np.ndarray or None
        The server view if the last reply is applied.
    pending_round : int
        Round of that reply (0 = none).
    open_dummies : np.ndarray or None
        ``cancelling`` dummies ``(doc, w, a, b)`` the server applied and no reversal undid yet.
    pending_dummies : np.ndarray or None
        The open dummies if the last reply is applied.
    """

    z: np.ndarray | None = None
    applied: np.ndarray | None = None
    pending: np.ndarray | None = None
    pending_round: int = 0
    open_dummies: np.ndarray | None = None
    pending_dummies: np.ndarray | None = None


def train_round(
    corpus: Corpus,
    phi: np.ndarray,
    state: FedLDAClientState,
    *,
    server_round: int,
    last_applied_round: int,
    settings: FedLDASettings,
    seed: int,
) -> ClientUpdate:
    """Run Algorithm 1 for every document of the client.

    Parameters
    ----------
    corpus : Corpus
        This client's training documents.
    phi : np.ndarray
        ``(K, V)`` global topic-word distribution phi^(t) (rows sum to 1, positive).
    state : FedLDAClientState
        Topic assignments and server view kept between rounds; updated in place.
    server_round : int
        Current round (>= 1); with ``seed`` it seeds this round's random stream.
    last_applied_round : int
        Round of this client's last reply the server applied (0 = none).
    settings : FedLDASettings
        The round's settings.
    seed : int
        Seed of this client.

    Returns
    -------
    ClientUpdate
        The perturbed, shuffled tuples and the counts the accounting needs.
    """
    expected = (settings.n_topics, corpus.n_words)
    if phi.shape != expected:
        raise ValueError(f"phi has shape {phi.shape}, expected {expected}")
    phi = np.asarray(phi, dtype=np.float64)
    rng = np.random.default_rng([seed, server_round])
    view = acknowledge(state, last_applied_round, also=(("open_dummies", "pending_dummies"),))
    if view is None:
        view = state.applied = np.full(corpus.n_tokens, settings.n_topics, dtype=np.int32)
    sampler = FixedPhiSampler(corpus, settings.n_topics, settings.alpha, rng, z=state.z)
    sampler.sweep(phi, method=settings.sampler, n_sweeps=settings.n_sweeps)
    state.z = sampler.z

    positions = np.flatnonzero(view != sampler.z)
    doc_of, real = changed_tuples(corpus.tokens, corpus.doc_ids, view, sampler.z)
    theta = sampler.theta()
    pad, size = sample_sizes(np.diff(corpus.doc_ptr), settings.pad_length, settings.sample_ratio)
    docs, sampled, source = pad_and_sample(doc_of, real, pad_lengths=pad, sample_sizes=size, theta=theta,
                                           phi=phi, rng=rng, dummies=settings.dummies)
    words = perturb_words(settings, sampled.words, docs, theta, phi, rng)
    delivered = source >= 0
    if settings.resend_replaced:  # an entry is never resent: a second entry would count the token twice
        delivered &= (words == sampled.words) | (sampled.k_old == settings.n_topics)
    k_old, k_new = sampled.k_old, sampled.k_new
    if settings.dummies == "cancelling":
        opened = state.open_dummies if state.open_dummies is not None else np.zeros((0, 4), dtype=np.int64)
        filled, _, state.pending_dummies = cancelling_dummies(
            docs, Tuples(words, k_old, k_new), source < 0, opened, theta, phi, rng,
            capacity=_capacity(view, corpus.tokens, sampled, source, opened, settings.n_topics, corpus.n_words))
        words, k_old, k_new = filled.words, filled.k_old, filled.k_new
    sent = positions[source[delivered]]
    state.pending = view.copy()
    state.pending[sent] = sampler.z[sent]
    state.pending_round = server_round

    wire = np.uint16 if max(corpus.n_words, settings.n_topics + 1) <= np.iinfo(np.uint16).max else np.int32
    rows = np.stack([words, k_old, k_new], axis=1).astype(wire)
    rows = rows[rng.permutation(rows.shape[0])]
    return ClientUpdate(rows, int(corpus.n_docs), int(size.max(initial=0)))


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: FedLDAClientState,
               seed: int, party: PartyFacts = NO_PARTY) -> Update:
    """One round of ``fedlda`` from a training message: the perturbed tuples, and two integers unless M is public."""
    settings = FedLDASettings.from_record(config)
    update = train_round(corpus, arrays[wire.PHI_KEY].numpy(), state, server_round=int(config["server-round"]),
                         last_applied_round=int(config["last-applied-round"]), settings=settings, seed=seed)
    if public_sample_size(settings.pad_length, settings.sample_ratio) is not None:  # the server knows l: no size leaves the party
        return {wire.TUPLES_KEY: update.tuples}, {}
    return ({wire.TUPLES_KEY: update.tuples},
            {"num-documents": update.n_docs, "max-tuples-per-document": update.max_tuples_per_doc})


#: The party side of ``fedlda``.
STEP = LocalStep(state=FedLDAClientState, run=local_step)
