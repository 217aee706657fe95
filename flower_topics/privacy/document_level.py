"""What a per-token guarantee gives one document of L tokens (PC-TD's Gaussian, FTM's Laplace).

PC-TD and FTM protect one word occurrence. A document of ``L`` tokens is ``L`` of them, and
neither method bounds ``L`` (the server never sees a document's length), so neither gives
a document-level guarantee for every document. What a document of a *given* length gets is
still worth stating, and is computed here under the zero-out relation the papers use for a
token (the document's counts set to 0; the unit structure stays):

- **FTM** (Laplace, L1 sensitivity 1 per token, drawn once): each token's count vector is
  perturbed on its own, so removing a document changes ``L`` independent releases, each
  ``eps``-DP: ``L eps``, pure (group privacy; tight for the Laplace mechanism, whose L1
  sensitivity on the ``L`` vectors together is ``L``).
- **PC-TD** (Gaussian, noise ``sigma`` on every unit word count ``N_uw``, every round): the
  document's L2 change is ``||N_d||_2 = sqrt(sum_u sum_w N_uw^2)`` over its units ``u``. It is
  ``sqrt(L)`` exactly when no word repeats inside a unit (every ``N_uw`` is 0 or 1), and at
  most ``sqrt(sum_u n_u^2)`` with ``n_u`` the unit's length: for ``n``-word units the worst
  document of ``L`` tokens (each unit one word repeated ``n`` times) has
  ``sqrt(floor(L / n) n^2 + (L mod n)^2)``, about ``sqrt(n L)``; for sentence units (a
  sentence may be the whole document) it is ``L``. T rounds of the Gaussian mechanism with
  sensitivity ``Delta`` are T rounds at noise multiplier ``sigma / Delta``
  (:func:`flower_topics.privacy.gaussian.gaussian_epsilon`, Opacus RDP).
"""

from __future__ import annotations

import math

from flower_topics.privacy.gaussian import gaussian_epsilon

#: Document lengths (tokens) at which the per-token methods' reports state a document's figure.
EXAMPLE_LENGTHS: tuple[int, ...] = (10, 100, 1000)


def _check_length(length: int) -> None:
    if length < 1 or int(length) != length:
        raise ValueError("a document length must be a positive integer")


def laplace_document_epsilon(epsilon_per_token: float, length: int) -> float:
    """``L eps``: the pure eps of a document of ``length`` tokens under a per-token eps-DP Laplace release."""
    _check_length(length)
    if not epsilon_per_token >= 0:
        raise ValueError("epsilon must be >= 0")
    return float(length * epsilon_per_token)


def unit_count_sensitivity(length: int, unit: str, ngram: int = 3, distinct_words: bool = False) -> float:
    """The largest L2 change of a party's unit word counts when one document of ``length`` tokens is zeroed.

    Parameters
    ----------
    length : int
        The document's tokens ``L``.
    unit : {"ngram", "sentence"}
        PC-TD's semantic units.
    ngram : int
        Words per n-gram unit.
    distinct_words : bool
        Only documents in which no word repeats inside a unit: then ``sqrt(L)`` exactly.
    """
    _check_length(length)
    if distinct_words:
        return math.sqrt(length)
    if unit == "sentence":
        return float(length)
    if unit != "ngram" or ngram < 1:
        raise ValueError(f"unknown semantic unit {unit!r} (ngram with ngram >= 1, or sentence)")
    full, rest = divmod(int(length), int(ngram))
    return math.sqrt(full * ngram**2 + rest**2)


def gaussian_document_epsilon(sigma: float, rounds: int, delta: float, sensitivity: float) -> float:
    """eps at ``delta`` of ``rounds`` Gaussian releases with noise ``sigma`` and L2 ``sensitivity`` (Opacus RDP)."""
    if not sensitivity > 0:
        raise ValueError("sensitivity must be > 0")
    return gaussian_epsilon(sigma / sensitivity, rounds, delta).epsilon
