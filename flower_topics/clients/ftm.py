"""FTM's party side (Jiang et al., CIKM 2019, Algorithm 1 and Section 3.1).

1. Once, the first time the party takes part: every token's one-hot count vector is
   perturbed with Laplace(1/eps) noise on all V entries and thresholded at ``tau``
   (eq. 8-10, :func:`flower_topics.models.ftm.privatize_tokens`, an exact sparse draw). The
   noisy vectors are kept in the party's state and reused every round; nothing later
   touches the raw counts, so every release after it is post-processing.
2. Every round: private Metropolis-Hastings on the noisy vectors (Algorithm 1, eq. 11-16,
   :class:`~flower_topics.models.ftm.PrivateMHSampler`), ``local-iterations`` of it, started
   in the first round from random topics and afterwards from the local model the master
   composed for this party (Algorithm 1's else branch).
3. The reply: the topic-wise normalized local model (Section 3.1.3), ``K_p x V``, and the
   party's number of tokens (its data amount, by which Algorithm 2 weights its topics).

``K_p`` is the party's own: its node config ``local-topics``, else its entry of the run's
``ftm.local-topics``, else the run's ``num-topics``; it stays fixed for the run.
The noise, the threshold's survivors and the sampler's coins come from the party's secret
seed (:func:`flower_topics.federation.client_app.party_seed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.base import LocalStep, Update
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.models.ftm import NoisyStatistics, PrivateMHSampler, privatize_tokens
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts
from flower_topics.wire import ftm as wire


@dataclass
class FTMClientState:
    """What a party keeps between rounds (never sent).

    Parameters
    ----------
    indptr, indices, values, proxy : np.ndarray or None
        The noisy statistics (:class:`~flower_topics.models.ftm.NoisyStatistics`), drawn once.
    mechanism : np.ndarray or None
        ``[epsilon, tau]`` they were drawn with.
    n_topics : int
        This party's K_p (0 before the first round).
    """

    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    values: np.ndarray | None = None
    proxy: np.ndarray | None = None
    mechanism: np.ndarray | None = None
    n_topics: int = 0

    def statistics(self, corpus: Corpus, settings: wire.FTMSettings, rng: np.random.Generator) -> NoisyStatistics:
        """The noisy statistics: drawn now the first time, else those drawn before (same eps and tau)."""
        if self.indptr is None:
            stats = privatize_tokens(corpus.tokens, corpus.n_words, settings.epsilon, settings.tau, rng)
            self.indptr, self.indices, self.values, self.proxy = stats.indptr, stats.indices, stats.values, stats.proxy
            self.mechanism = np.array([settings.epsilon, settings.tau])
        elif not np.allclose(self.mechanism, [settings.epsilon, settings.tau]):
            raise UserInputError(f"this party drew its noisy statistics with eps, tau = {self.mechanism.tolist()}; "
                                 "a new draw would spend its budget again, so ftm.epsilon and ftm.tau cannot change")
        if self.indptr.size - 1 != corpus.n_tokens:
            raise UserInputError("this party's documents changed since its noisy statistics were drawn")
        return NoisyStatistics(self.indptr, self.indices, self.values, self.proxy, corpus.n_words,
                               float(self.mechanism[0]), float(self.mechanism[1]))


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: FTMClientState,
               seed: int, party: PartyFacts = NO_PARTY) -> Update:
    """One FTM round of a party: its local model after ``local-iterations`` of private MH, and its token count."""
    settings = wire.FTMSettings.from_record(config)
    own = party.policy.options
    partition = int(own["partition-id"]) if "partition-id" in own else None
    k_p = state.n_topics or settings.party_topics(partition, int(own.get("local-topics", 0)))
    rng = np.random.default_rng([seed, int(config["server-round"])])
    stats = state.statistics(corpus, settings, rng)
    init = arrays[wire.LOCAL_MODEL_KEY].numpy().astype(np.float64) if wire.LOCAL_MODEL_KEY in arrays else None
    if init is not None and init.shape != (k_p, corpus.n_words):
        raise UserInputError(f"the composed local model is {init.shape}, this party has K_p = {k_p}")
    sampler = PrivateMHSampler(stats, corpus.doc_ptr, k_p, settings.alpha, settings.beta, rng, init_model=init)
    sampler.run(settings.local_iterations)
    state.n_topics = k_p
    return {wire.TOPIC_WORD_KEY: sampler.local_model().astype(np.float32)}, {"num-tokens": corpus.n_tokens}


#: The party side of ``ftm``.
STEP = LocalStep(state=FTMClientState, run=local_step)
