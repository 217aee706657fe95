"""The interface every privacy accountant of the package implements (after Opacus's ``IAccountant``).

An accountant is told of each release of one party's documents (:meth:`Accountant.step`: the
noise multiplier ``sigma``, the Poisson sample rate ``q``, how many such releases), and of any
earlier release of the same documents that has its own ``(eps, delta)`` guarantee
(:meth:`Accountant.spend`: the ``private`` vocabulary agreement); :meth:`Accountant.get_epsilon`
gives epsilon at a delta of everything it was told, unit one document (add or remove one),
unless the method says otherwise.
"""

from __future__ import annotations

import abc
from typing import ClassVar


class Accountant(abc.ABC):
    """A privacy accountant: releases in, epsilon at a delta out.

    Attributes
    ----------
    history : list of tuple
        ``(noise_multiplier, sample_rate, steps)`` per :meth:`step` call, in order.
    spent : list of tuple
        ``(epsilon, delta)`` per :meth:`spend` call, in order.
    description : str
        How the back-end composes (the ``accountant`` of a privacy report).
    noise_ceiling, noise_floor : float
        The range the calibration search (:func:`~flower_topics.privacy.accountants.calibration.get_noise_multiplier`)
        tries: no multiplier above the ceiling; below the floor it stops halving.
    """

    description: ClassVar[str] = ""
    noise_ceiling: ClassVar[float] = 1e5
    noise_floor: ClassVar[float] = 1e-2

    def __init__(self) -> None:
        self.history: list[tuple[float, float, int]] = []
        self.spent: list[tuple[float, float]] = []

    @classmethod
    @abc.abstractmethod
    def mechanism(cls) -> str:
        """The name the accountant is registered under (:func:`~flower_topics.privacy.accountants.registry.create_accountant`)."""

    def step(self, *, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Record ``steps`` releases with noise multiplier ``sigma`` at Poisson sample rate ``q``.

        Parameters
        ----------
        noise_multiplier : float
            ``sigma``: the noise's standard deviation over the L2 sensitivity, > 0.
        sample_rate : float
            ``q`` in (0, 1]: each document's inclusion probability in a release (1: no sampling).
        steps : int, default 1
            Releases of these settings, >= 0.
        """
        if steps < 0 or int(steps) != steps:
            raise ValueError("steps must be a non-negative integer")
        self.history.append((float(noise_multiplier), float(sample_rate), int(steps)))

    def spend(self, epsilon: float, delta: float) -> None:
        """Record an earlier ``(epsilon, delta)``-DP release of the same documents, composed with the rest by basic
        composition (Dwork and Roth 2014, Theorem 3.16): epsilons and deltas add up.

        Parameters
        ----------
        epsilon : float
            >= 0.
        delta : float
            In [0, 1).
        """
        if not epsilon >= 0 or not 0 <= delta < 1:
            raise ValueError("a release spends epsilon >= 0 and delta in [0, 1)")
        self.spent.append((float(epsilon), float(delta)))

    def get_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta`` of every release recorded: the :meth:`spend` releases' epsilons plus the
        :meth:`step` releases' epsilon at what their deltas leave of ``delta``.

        Parameters
        ----------
        delta : float
            In (0, 1), more than the :meth:`spend` releases' deltas together.

        Returns
        -------
        float
        """
        spent_epsilon, spent_delta = 0.0, 0.0
        for eps, dlt in self.spent:
            spent_epsilon, spent_delta = spent_epsilon + eps, spent_delta + dlt
        if not self.spent:
            return self.steps_epsilon(delta)
        if not delta > spent_delta:
            raise ValueError(f"delta {delta:g} leaves nothing after the earlier releases' {spent_delta:g}")
        return spent_epsilon + self.steps_epsilon(delta - spent_delta)

    @abc.abstractmethod
    def steps_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta`` of the :meth:`step` releases alone (0 without one).

        Parameters
        ----------
        delta : float
            In (0, 1).
        """

    def grouped_releases(self, delta: float) -> tuple[tuple[float, float, int], ...]:
        """The :meth:`step` releases as ``(sigma, q, count)``, one per distinct ``(sigma, q)``, sorted: what a
        back-end that composes identical releases at once (PLD, Skellam) accounts.

        Raises
        ------
        ValueError
            Unless ``0 < delta < 1`` and every release has ``sigma > 0`` and ``0 < q <= 1``.
        """
        if not 0 < delta < 1 or any(s <= 0 or not 0 < q <= 1 for s, q, _ in self.history):
            raise ValueError("need 0 < delta < 1, sigma > 0 and 0 < q <= 1 in every release")
        counts: dict[tuple[float, float], int] = {}
        for sigma, rate, steps in self.history:
            if steps:
                counts[(sigma, rate)] = counts.get((sigma, rate), 0) + steps
        return tuple((s, q, c) for (s, q), c in sorted(counts.items()))

    def __len__(self) -> int:
        """The number of releases recorded by :meth:`step`."""
        return sum(steps for _, _, steps in self.history)
