"""PromptGrid: replies are collected within a poll interval of their arrival, the timeout holds, nothing is lost."""

from __future__ import annotations

import time

import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from flower_topics.federation.grids import IN_MEMORY_POLL_INTERVAL, PromptGrid, with_fast_polling
from flower_topics.simulations.inprocess import InProcessGrid


def echo(msg, context):
    return Message(content=RecordDict({"config": ConfigRecord({"node": context.node_id})}), reply_to=msg)


class SlowLink(InProcessGrid):
    """Replies reach the 'SuperLink' ``delay[node]`` seconds after the push (never, for a node not in it)."""

    def __init__(self, delay):
        super().__init__(echo, [{} for _ in delay], {})
        self.delay = dict(zip(self.contexts, delay))
        self.pulls = 0

    def push_messages(self, messages):
        self.pushed_at = time.monotonic()
        return super().push_messages(messages)

    def pull_messages(self, message_ids):
        self.pulls += 1
        elapsed = time.monotonic() - self.pushed_at
        ready = [i for i in message_ids if i in self._held
                 and self.delay[self._held[i].metadata.src_node_id] is not None
                 and self.delay[self._held[i].metadata.src_node_id] <= elapsed]
        return [self._held.pop(i) for i in ready]


def messages(grid):
    return [Message(content=RecordDict(), message_type="query", dst_node_id=n) for n in grid.get_node_ids()]


def test_replies_are_collected_as_they_arrive_not_every_three_seconds():
    link = SlowLink([0.0, 0.3, 0.6])
    started = time.monotonic()
    replies = PromptGrid(link, poll_interval=0.05).send_and_receive(messages(link), timeout=10)
    waited = time.monotonic() - started
    assert sorted(int(r.content["config"]["node"]) for r in replies) == sorted(link.contexts)
    assert 0.6 <= waited < 2.5  # the last reply came at 0.6 s; Flower's HttpGrid returns at 3 s (slack for load)


def test_the_timeout_holds_and_the_missing_reply_stays_behind():
    link = SlowLink([0.0, None])
    started = time.monotonic()
    replies = PromptGrid(link, poll_interval=0.05).send_and_receive(messages(link), timeout=0.5)
    waited = time.monotonic() - started
    assert [int(r.content["config"]["node"]) for r in replies] == [101]
    assert 0.5 <= waited < 2.5 and link.pulls >= 3
    assert len(link._held) == 1  # the silent node's reply is never handed out: a later pull may find it


def test_everything_but_waiting_is_the_wrapped_grids():
    link = SlowLink([0.0])
    grid = PromptGrid(link)
    assert list(grid.get_node_ids()) == list(link.get_node_ids()) and grid.run is link.run
    with pytest.raises(ValueError):
        PromptGrid(link, poll_interval=0)


def test_prompt_wraps_the_http_grid_and_speeds_up_the_simulation_engines_own_grid():
    from flwr.superlink.grid.http_grid import HttpGrid
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    class StateFactory:  # what InMemoryGrid's constructor reads of a LinkStateFactory
        def state(self):
            return object()

    simulation = InMemoryGrid(StateFactory())
    assert simulation.pull_interval == 0.1  # Flower's default: every round would wait up to 0.1 s for its replies
    assert with_fast_polling(simulation) is simulation and simulation.pull_interval == IN_MEMORY_POLL_INTERVAL < 0.1
    patient = InMemoryGrid(StateFactory(), pull_interval=0.001)
    assert with_fast_polling(patient).pull_interval == 0.001  # a faster setting is kept
    deployment = HttpGrid.__new__(HttpGrid)  # no connection: with_fast_polling only looks at the type
    wrapped = with_fast_polling(deployment)
    assert isinstance(wrapped, PromptGrid) and wrapped.grid is deployment
    link = SlowLink([0.0])
    assert with_fast_polling(link) is link  # any other grid as it is
