"""The strategy is a template: the base runs the stages of a round, a method fills in hooks.

No registered method's strategy overrides a stage of Flower's ``Strategy``; a method counts its
parties' releases in one hook, :meth:`~flower_topics.strategies.releases.ReleaseHooks.released`,
which the base calls once per round that sends training messages, with the nodes it sent them to.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from flwr.app import ConfigRecord

from flower_topics.methods import METHODS
from flower_topics.strategies.base import TopicStrategy
from flower_topics.strategies.pctd import PCTD
from flower_topics.strategies.releases import PartyReleases
from flower_topics.wire.pctd import STATISTIC_KEY, PCTDSettings
from tests.flower_harness import FixedNodesGrid, as_server, reply_content, reply_from, vocabulary

STAGES = ("configure_train", "aggregate_train", "configure_evaluate", "aggregate_evaluate", "start")


def _strategy_class(name: str) -> type:
    module, _, cls = METHODS[name].strategy.partition(":")
    return getattr(importlib.import_module(module), cls)


@pytest.mark.parametrize("name", list(METHODS))
def test_no_method_overrides_a_stage_of_the_round(name):
    cls = _strategy_class(name)
    assert issubclass(cls, TopicStrategy)
    overridden = [stage for stage in STAGES if getattr(cls, stage) is not getattr(TopicStrategy, stage)]
    assert not overridden, f"{cls.__name__} overrides {overridden}: a method implements hooks, not stages"


class _Counting(PCTD):
    """PC-TD that records every call of the release hook."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, list[int]]] = []

    def released(self, server_round, nodes):
        self.calls.append((server_round, list(nodes)))
        super().released(server_round, nodes)


def test_the_release_hook_is_called_once_a_round_with_the_nodes_sent_to():
    as_server()
    strategy = _Counting(vocabulary(3), PCTDSettings(n_topics=2, sigma=1.0, unit="ngram", ngram=2), seed=0,
                         fraction_train=0.5)
    arrays = strategy.initial_arrays()
    for server_round in (1, 2, 3):
        msgs = list(strategy.configure_train(server_round, arrays, ConfigRecord(), FixedNodesGrid([4, 5, 6, 7])))
        sent = sorted(m.metadata.dst_node_id for m in msgs)
        assert len(sent) == 2 and strategy.calls[-1] == (server_round, sent)
        replies = [reply_from(m.metadata.dst_node_id, m, reply_content("pctd", {STATISTIC_KEY: np.ones((2, 3),
                                                                                                    np.float32)}))
                   for m in msgs[:1]]  # one reply: a party that does not reply released all the same
        strategy.aggregate_train(server_round, replies)
    assert len(strategy.calls) == 3
    counts = {}
    for _, nodes in strategy.calls:
        for node in nodes:
            counts[node] = counts.get(node, 0) + 1
    assert strategy.releases.counts == counts and strategy.party_rounds == max(counts.values())
    assert strategy.rounds_released() == 3  # rounds sent; PC-TD accounts the party asked most often:
    assert strategy.privacy_report().rounds == strategy.party_rounds == max(counts.values())


def test_a_stopped_strategy_sends_nothing_and_counts_no_release():
    as_server()
    strategy = _Counting(vocabulary(3), PCTDSettings(n_topics=2, sigma=1.0, unit="ngram", ngram=2), seed=0)
    strategy.stopped = "a test's stop"
    assert list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), FixedNodesGrid([4]))) == []
    assert strategy.aggregate_train(1, []) == (None, strategy.traffic_metrics(1))
    assert strategy.calls == [] and strategy.rounds_released() == 0


def test_party_releases_count_the_worst_party_across_resumes_and_lost_rounds():
    releases = PartyReleases()
    releases.add([1, 2])
    releases.add([2])
    assert releases.counts == {1: 1, 2: 2} and releases.worst == 2
    releases.lost()  # one more for every party
    assert releases.worst == 3
    restored = PartyReleases.from_state(releases.state())
    assert restored == releases
    restored.fold()  # a resume: node ids may change, the worst count so far is kept
    assert restored.counts == {} and restored.before == 3
    restored.add([9])
    assert restored.worst == 4
