"""Party side of ``expected_counts``: the E-step of LDA on the party's documents against the server's topics
(:func:`flower_topics.models.svi.e_step`; Hoffman, Blei and Bach 2010, eqs. 2-3, without clipping)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from examples.expected_counts import wire
from flower_topics.clients.base import LocalStep, Update
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.models import svi
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts


@dataclass
class ExpectedCountsState:
    """What a party keeps between rounds.

    Parameters
    ----------
    rounds : int
        Rounds this party has answered.
    """

    rounds: int = 0


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: ExpectedCountsState, seed: int,
               party: PartyFacts = NO_PARTY) -> Update:
    """One round: the expected topic-word counts of this party's training documents under the server's topics.

    Raises
    ------
    UserInputError
        One line when the server's topic parameters are not ``K x V``, finite and positive.
    """
    settings = wire.SETTINGS.from_record(config)
    lam = arrays[wire.LAMBDA_KEY].numpy()
    if lam.shape != (settings.n_topics, corpus.n_words) or not np.all(np.isfinite(lam) & (lam > 0)):
        raise UserInputError(f"the server's topic parameters (shape {lam.shape}) are not {settings.n_topics} x "
                             f"{corpus.n_words}, finite and positive")
    expected = svi.e_step(lam, svi.document_counts(corpus), alpha=settings.alpha, clip=None,
                          max_iter=settings.max_iterations)
    state.rounds += 1
    return {wire.STATISTIC_KEY: expected.statistic}, {}


STEP = LocalStep(state=ExpectedCountsState, run=local_step)
