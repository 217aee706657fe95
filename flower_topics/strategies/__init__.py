"""Flower strategies, one per method (the aggregation side).

Each is a :class:`flwr.serverapp.strategy.Strategy` and can be plugged into any ServerApp::

    from flower_topics.strategies import FederatedLDA
    strategy = FederatedLDA(n_topics=20, vocab_size=V, alpha=0.1, beta=0.01)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=100)
"""

from flower_topics.strategies.base import TopicStrategy
from flower_topics.strategies.fedlda import FedLDA
from flower_topics.strategies.lda import FederatedLDA
from flower_topics.strategies.pctd import PCTD

__all__ = ["FedLDA", "FederatedLDA", "PCTD", "TopicStrategy"]
