"""Flower strategies, one per method (the aggregation side).

Each is a :class:`flwr.serverapp.strategy.Strategy` and can be plugged into any ServerApp
that runs the package's ClientApp (see the README, "Plugging a strategy into your own
ServerApp")::

    from flower_topics.federation.vocabulary_agreement import agree_vocabulary
    from flower_topics.strategies import FedLDA
    from flower_topics.wire.fedlda import FedLDASettings

    vocabulary = agree_vocabulary(grid, context.run_config).vocabulary
    strategy = FedLDA(vocabulary, FedLDASettings(n_topics=20, alpha=0.1), beta=0.01)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=100)

The classes are imported on first use, so that importing one strategy does not import
what another needs (PC-TD's accountant imports torch through opacus).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "TopicStrategy": "flower_topics.strategies.base",
    "ADLDA": "flower_topics.strategies.lda",
    "FedLDA": "flower_topics.strategies.fedlda",
    "PCTD": "flower_topics.strategies.pctd",
    "FTM": "flower_topics.strategies.ftm",
    "NTM": "flower_topics.strategies.ntm",
}

__all__ = ["ADLDA", "FTM", "FedLDA", "NTM", "PCTD", "TopicStrategy"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
