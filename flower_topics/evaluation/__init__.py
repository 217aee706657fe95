"""Scoring a model: federated (the parties score their own documents, the server sums) or on a whole corpus.

:mod:`~flower_topics.evaluation.federated` is the stage of a run that scores the global model
on the parties' documents; :func:`evaluate_model` scores a model on a corpus in one process
(``flower-topics evaluate``). Both compute the metrics of :mod:`flower_topics.metrics`.
``evaluate_model`` is imported on first use, so that a party that only scores federated
does not import the centralized scorer's dependencies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate_model"]


def __getattr__(name: str) -> Any:
    if name == "evaluate_model":
        from flower_topics.evaluation.centralized import evaluate_model
        return evaluate_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
