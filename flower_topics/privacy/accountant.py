"""One accountant for a whole run, on one document: subsampled Gaussian rounds plus earlier releases.

The DP methods whose releases are sums over a Poisson sample of a party's documents (each
document included with probability ``q``, its contribution clipped to L2 norm ``C``, Gaussian
noise of standard deviation ``sigma C`` added by the party) are accounted here with Google's
``dp-accounting`` RDP accountant (Mironov 2017; Mironov, Talwar and Zhang 2019 for the
Poisson-subsampled Gaussian), under the add-or-remove-one-document relation. A document
lives at exactly one party and enters only that party's releases, and every party adds the
full noise on its own, so the guarantee holds against the server and every other party
without trusting any of them (the other parties' noise only helps and is not counted).

Releases of the same documents before training that are not Gaussian events (the
``private`` vocabulary agreement, an (eps, delta)-DP set union) are composed with the
rounds by basic composition: ``eps = eps_rounds + eps_before``, ``delta = delta_rounds +
delta_before`` (Dwork and Roth 2014, Theorem 3.16).

:func:`noise_multiplier` derives ``sigma`` from a whole-run target, as Opacus's
``make_private_with_epsilon`` does: the smallest ``sigma`` whose ``rounds`` subsampled
Gaussian releases spend at most the target minus what the earlier releases spent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting import rdp

from flower_topics.errors import UserInputError

#: RDP orders of the accountant. Fractional orders below 2 are left out: dp-accounting's series for
#: them does not converge at large sampling rates and it drops them anyway (with a warning per order).
ORDERS: tuple[float, ...] = tuple(
    [2.0 + x / 4.0 for x in range(0, 40)] + list(range(12, 64)) + [64, 80, 96, 128, 192, 256, 384, 512, 768, 1024]
)
ACCOUNTANT = "RDP (dp-accounting), Poisson-subsampled Gaussian, add/remove one document"


def _round_event(noise_multiplier: float, sample_rate: float) -> dp_accounting.DpEvent:
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    return gaussian if sample_rate >= 1.0 else dp_accounting.PoissonSampledDpEvent(sample_rate, gaussian)


def rounds_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``rounds`` Poisson-subsampled Gaussian releases (RDP, dp-accounting).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma``: noise standard deviation over the L2 sensitivity ``C``, > 0.
    sample_rate : float
        ``q`` in (0, 1]: each document's inclusion probability in a round.
    rounds : int
        Releases composed, >= 0.
    delta : float
        In (0, 1).
    """
    if rounds < 0:
        raise ValueError("rounds must be >= 0")
    return releases_epsilon(np.tile([noise_multiplier, sample_rate], (int(rounds), 1)), delta)


def releases_epsilon(releases: np.ndarray, delta: float) -> float:
    """Epsilon at ``delta`` of a sequence of subsampled Gaussian releases, one ``(sigma, q)`` row each.

    Rows with the same ``(sigma, q)`` are composed as one self-composed event; results are
    cached (the report and every party ask for the same figures each round).
    """
    releases = np.asarray(releases, dtype=np.float64).reshape(-1, 2)
    if not 0 < delta < 1 or np.any(releases[:, 0] <= 0) or np.any((releases[:, 1] <= 0) | (releases[:, 1] > 1)):
        raise ValueError("need 0 < delta < 1, sigma > 0 and 0 < q <= 1 in every release")
    if releases.size == 0:
        return 0.0
    kinds, counts = np.unique(releases, axis=0, return_counts=True)
    return _composed_epsilon(tuple((float(s), float(q), int(c)) for (s, q), c in zip(kinds, counts)), float(delta))


@functools.lru_cache(maxsize=256)
def _event_rdp(sigma: float, rate: float) -> np.ndarray:
    """The RDP curve (at :data:`ORDERS`) of one ``(sigma, q)`` release, from dp-accounting's accountant.

    Computing it is the expensive part (about 0.05 s); a run composes the same release every
    round, so it is computed once per ``(sigma, q)``.
    """
    accountant = rdp.RdpAccountant(list(ORDERS), dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(_round_event(sigma, rate))
    curve = np.array(accountant.rdp, dtype=np.float64)
    curve.flags.writeable = False
    return curve


@functools.lru_cache(maxsize=4096)
def _composed_epsilon(events: tuple[tuple[float, float, int], ...], delta: float) -> float:
    """RDP composes by adding curves (what ``RdpAccountant.compose`` does with ``count``); the
    conversion to ``(eps, delta)`` is dp-accounting's ``compute_epsilon``, as ``get_epsilon``'s."""
    curve = sum(count * _event_rdp(sigma, rate) for sigma, rate, count in events)
    return float(rdp.rdp_privacy_accountant.compute_epsilon(ORDERS, curve, delta)[0])


def noise_multiplier(target_epsilon: float, target_delta: float, sample_rate: float, rounds: int) -> float:
    """The smallest ``sigma`` (to 0.1%) whose ``rounds`` releases spend at most ``target_epsilon`` at ``target_delta``.

    Raises
    ------
    UserInputError
        When no finite ``sigma`` reaches the target (one line, with the settings).
    """
    if not target_epsilon > 0 or not 0 < target_delta < 1 or rounds < 1 or not 0 < sample_rate <= 1:
        raise UserInputError(f"cannot calibrate noise for eps {target_epsilon}, delta {target_delta}, "
                             f"q {sample_rate}, {rounds} rounds: need eps > 0, 0 < delta < 1, q in (0, 1], rounds >= 1")
    low, high = 1e-2, 1.0
    while rounds_epsilon(high, sample_rate, rounds, target_delta) > target_epsilon:
        low, high = high, high * 2.0
        if high > 1e5:
            raise UserInputError(f"no noise level reaches eps {target_epsilon:g} at delta {target_delta:g} with q "
                                 f"{sample_rate:g} over {rounds} rounds")
    while high / low > 1.001:
        mid = (low * high) ** 0.5
        if rounds_epsilon(mid, sample_rate, rounds, target_delta) > target_epsilon:
            low = mid
        else:
            high = mid
    return high


@dataclass(frozen=True)
class Budget:
    """A whole-run target split between the releases before training and the training rounds.

    Parameters
    ----------
    epsilon, delta : float
        The whole run's target, per document.
    before_epsilon, before_delta : float
        What releases before round 1 spent (the ``private`` vocabulary; 0 for a public file).
    """

    epsilon: float
    delta: float
    before_epsilon: float = 0.0
    before_delta: float = 0.0

    def for_rounds(self) -> tuple[float, float]:
        """The (eps, delta) left for the training rounds.

        Raises
        ------
        UserInputError
            When the releases before training already spend the whole target.
        """
        eps, delta = self.epsilon - self.before_epsilon, self.delta - self.before_delta
        if eps <= 0 or delta <= 0:
            raise UserInputError(
                f"the vocabulary agreement spends eps {self.before_epsilon:g}, delta {self.before_delta:g} per "
                f"document, which leaves nothing of the whole-run target eps {self.epsilon:g}, delta "
                f"{self.delta:g} for training: lower vocabulary-epsilon/vocabulary-delta or use a public "
                "vocabulary file")
        return eps, delta
