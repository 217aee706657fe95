"""A whole-run target split between the releases before training and the training rounds."""

from __future__ import annotations

from dataclasses import dataclass

from flower_topics.errors import UserInputError


@dataclass(frozen=True)
class Budget:
    """A whole-run target per document, and what releases before round 1 spent of it (basic composition).

    Releases of the same documents before training that are not steps of the training accountant
    (the ``private`` vocabulary agreement, an (eps, delta)-DP set union) are composed with the
    rounds by basic composition (Dwork and Roth 2014, Theorem 3.16), as
    :meth:`~flower_topics.privacy.accountants.base.Accountant.spend` composes them: the rounds
    may spend what they leave.

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
