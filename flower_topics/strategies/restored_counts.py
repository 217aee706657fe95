"""Global counts restored from a checkpoint on a resume whose parties restarted without their state (``lda``,
``fedlda``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np


@dataclass
class RestoredCounts:
    """Global counts restored from a checkpoint on a resume whose parties restarted without their state (``lda``,
    ``fedlda``).

    The checkpointed counts hold every party's tokens, but a party that lost its
    ``context.state`` enters its tokens again. Until they have re-entered, the model the
    parties are sent is ``own + floor(restored * remaining)``, ``own`` the counts entered
    since the resume and ``remaining = 1 - entered / total`` the share of the restored
    tokens not re-entered yet; once every token is back, the restored counts are gone and
    no token is counted twice.

    Parameters
    ----------
    restored : np.ndarray
        The counts at the resume (every party's old tokens).
    total : int
        Tokens in them.
    entered : int
        Tokens re-entered since.
    """

    restored: np.ndarray
    total: int
    entered: int = 0

    @property
    def remaining(self) -> float:
        """The share of the restored tokens not re-entered yet, in [0, 1]."""
        return 0.0 if self.total <= 0 else min(1.0, max(0.0, 1.0 - self.entered / self.total))

    def mix(self, own: np.ndarray) -> np.ndarray:
        """``own + floor(restored * remaining)`` (``own`` once nothing remains)."""
        if self.remaining <= 0:
            return own.copy()
        return own + np.floor(np.maximum(self.restored, 0) * self.remaining).astype(own.dtype)

    def state(self, prefix: str) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Arrays and numbers for a checkpoint (the counts under ``<prefix>restored``)."""
        return {f"{prefix}restored": self.restored}, {f"{prefix}total": int(self.total),
                                                      f"{prefix}entered": int(self.entered)}

    @classmethod
    def from_state(cls, prefix: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
                   ) -> "RestoredCounts | None":
        """The restored counts of a checkpoint (None when it has none); an older checkpoint holds them under
        ``<prefix>carried``."""
        key = next((f"{prefix}{name}" for name in ("restored", "carried") if f"{prefix}{name}" in arrays), None)
        if key is None:
            return None
        return cls(np.array(arrays[key]), int(meta[f"{prefix}total"]), int(meta[f"{prefix}entered"]))
