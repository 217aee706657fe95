"""Score a model of a run with the run config's evaluation settings.

The one bridge from a run config to :func:`flower_topics.evaluation.evaluate_model`,
for benchmarks that train outside Flower and score a model on a whole corpus the way
``flower-topics evaluate`` does. Runs are scored by federated evaluation
(:mod:`flower_topics.evaluation.federated`).
"""

from __future__ import annotations

from typing import Any, Mapping

from flower_topics.data.prepare import RunData
from flower_topics.evaluation import evaluate_model
from flower_topics.topic_model.model_file import TopicModel


def score(model: TopicModel, data: RunData, config: Mapping[str, Any]) -> dict[str, float | int]:
    """Metrics of docs/architecture.md for ``model`` on the run's corpus.

    Perplexity on the test documents, coherence on train+val, topic similarity to
    the true topics of a synthetic corpus, and label scores when the corpus has
    labels and ``eval-labels`` is on.
    """
    return evaluate_model(
        model,
        data.corpus,
        truth=None if data.truth is None else (data.truth, data.corpus.vocabulary),
        use_labels=bool(config["eval-labels"]) and data.corpus.labels is not None,
        seed=int(config["seed"]),
        alpha=float(config["eval-alpha"]),
        n_iter=int(config["eval-iterations"]),
    )
