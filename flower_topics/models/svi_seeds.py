"""Guided topics for DP-SVI: a public initial ``lambda`` that starts the seeded topics on their seed words.

With seed words (:mod:`flower_topics.models.seed_words`) the prior of every step is the matrix
``eta_kw`` (``eta`` plus ``seed-weight`` at each seed word of its topic), and every ``lambda`` of the
iteration has the form ``eta_kw`` plus (scaled) expected counts. A start that was not itself drawn
with the seeds (the embedding or random start, or a public start given a fixed ``public-weight``) is
brought to that form here:

1. **Order.** Seeded topic ``i`` takes the start's topic that puts the largest share of its mass on
   line ``i``'s seed words (one assignment over all seeded topics, :func:`seed_order`); the other
   topics follow in their order. For the embedding start this gives each seed line the cluster of
   the vocabulary nearest its words; for the random start it only permutes random rows.
2. **Seed mass.** The seed prior's excess, ``seed-weight`` at each seed word of its topic, is added
   (:func:`seeded_start`): the amount every step's ``eta_kw`` holds there, so the raw average
   starts as prior plus pseudo-counts, as every later ``lambda`` is, and the parties' first E-step
   already sees each seed word in its topic.

The start stays public: the seeds are a public file and the start's own inputs are public.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from flower_topics.models.seed_words import SeedPrior


def seed_order(start: np.ndarray, seeds: SeedPrior) -> np.ndarray:
    """The order of the start's topics that puts, for each seed line ``i``, the topic holding the largest share of
    its mass on line ``i``'s words at position ``i`` (maximum total share over all lines at once).

    Parameters
    ----------
    start : numpy.ndarray
        ``(K, V)`` positive initial ``lambda``.
    seeds : SeedPrior
        The seed pairs (over the same K and V).

    Returns
    -------
    numpy.ndarray
        ``(K,)`` int64 permutation: ``start[order]`` is the reordered start.
    """
    share = np.asarray(start, dtype=np.float64)
    share = share / share.sum(axis=1, keepdims=True)
    lines = seeds.seeded_topics
    on_seeds = np.zeros((lines, share.shape[0]))
    np.add.at(on_seeds, seeds.topics, share[:, seeds.words].T)  # (line, start topic): its share on the line's seeds
    _, chosen = linear_sum_assignment(on_seeds, maximize=True)
    rest = np.setdiff1d(np.arange(share.shape[0]), chosen)  # sorted: the free topics keep their order
    return np.concatenate([chosen, rest]).astype(np.int64)


def seeded_start(start: np.ndarray, seeds: SeedPrior, *, reorder: bool = True) -> np.ndarray:
    """A start with the seeded topics first (:func:`seed_order`, unless ``reorder`` is False: a start already
    drawn with the seeds) and ``seed-weight`` added at each seed word of its topic.

    Parameters
    ----------
    start : numpy.ndarray
        ``(K, V)`` positive initial ``lambda``.
    seeds : SeedPrior
        The seed pairs and their weight (over the same K and V).
    reorder : bool, default True
        Reorder the topics first.

    Returns
    -------
    numpy.ndarray
        ``(K, V)`` float64 seeded start.
    """
    start = np.asarray(start, dtype=np.float64)
    if start.shape != (seeds.n_topics, seeds.n_words):
        raise ValueError(f"the start has shape {start.shape}, the seeds are for {seeds.n_topics} topics and "
                         f"{seeds.n_words} words")
    if reorder:
        start = start[seed_order(start, seeds)]
    return start + seeds.matrix(0.0)
