"""The math shared by clients, strategies and centralized runners.

The names below are imported on first use (PEP 562), so that importing one numba-free module of
this package (the samplers' names, the update tuples) does not import numba.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "FixedPhiSampler": "flower_topics.models.fixed_phi",
    "build_alias_tables": "flower_topics.models.fixed_phi",
    "CollapsedGibbs": "flower_topics.models.lda",
    "fit_lda": "flower_topics.models.lda",
    "topic_word_distribution": "flower_topics.models.lda",
}

__all__ = ["CollapsedGibbs", "FixedPhiSampler", "build_alias_tables", "fit_lda", "topic_word_distribution"]


def __getattr__(name: str) -> Any:
    """Import ``name`` from its module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
