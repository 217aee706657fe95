"""Continue an interrupted run from its checkpoint: what a resume may change, the strategy brought back to the
checkpoint's state, and Flower's round loop started after the rounds already completed.

A resume is a new Flower run (``resume=<output-dir>`` in the run config) that reads the
interrupted run's ``checkpoint.npz`` (:mod:`flower_topics.run.checkpoint`) and its release journal
(:mod:`flower_topics.run.release_journal`). It may change only :data:`RESUMABLE_KEYS`; the
vocabulary agreement is not run again (it would spend the parties' privacy a second time).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from flower_topics.errors import UserInputError
from flower_topics.methods import get_method
from flower_topics.run.checkpoint import Checkpoint, load_strategy_state
from flower_topics.run.release_journal import write_release

if TYPE_CHECKING:
    from flower_topics.strategies.base import TopicStrategy

#: Run-config keys a resume may change; any other change (method, data, vocabulary, privacy) is refused.
RESUMABLE_KEYS = frozenset({"num-rounds", "output-dir", "resume", "verbose", "eval-every", "checkpoint-interval"})


def check_resume_config(saved: Mapping[str, Any], new: Mapping[str, Any], completed: int) -> None:
    """Refuse, in one line, a resume whose run config changes more than :data:`RESUMABLE_KEYS`.

    Also refused: ``num-rounds`` below the rounds already completed, and a change of any key
    the method fixes for its resumes (:attr:`~flower_topics.methods.MethodSpec.fixed_on_resume`;
    ``dplda``'s ``num-rounds``: its noise multiplier is calibrated to spend the whole-run budget
    over exactly ``num-rounds`` releases).
    """
    changed = sorted(k for k in set(saved) | set(new)
                     if k not in RESUMABLE_KEYS and _differs(saved.get(k), new.get(k)))
    if changed:
        shown = ", ".join(f"{k} ({saved.get(k)!r} -> {new.get(k)!r})" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise UserInputError(f"resume refused: the run config changes {shown}{more}; a resume may change only "
                             f"{', '.join(sorted(RESUMABLE_KEYS))}")
    rounds = int(new["num-rounds"])
    if rounds < completed:
        raise UserInputError(f"resume refused: num-rounds {rounds} is below the {completed} round(s) already completed")
    for key, why in get_method(str(new["method"])).fixed_on_resume.items():
        if _differs(saved.get(key), new.get(key)):
            raise UserInputError(f"resume refused: {key}={new.get(key)!r} (was {saved.get(key)!r}): {why}")


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) != float(b)
    return a != b


def resume_strategy(strategy: "TopicStrategy", checkpoint: Checkpoint) -> None:
    """Bring a freshly built strategy to the checkpoint's state, ready for round ``checkpoint.round + 1``.

    Restores the state, counts the releases lost to the crash, then calls the strategy's
    ``on_resume(global_arrays)`` where it has one (what a method does because the parties
    of a new Flower run start without their ``context.state``; see the README).
    """
    load_strategy_state(strategy, checkpoint.strategy_arrays, checkpoint.strategy_meta)
    for release in checkpoint.lost_releases:
        strategy.count_lost_release(release)
    strategy.on_resume(dict(checkpoint.global_arrays))


class RoundOffset(Strategy):
    """Flower's :meth:`~flwr.serverapp.strategy.Strategy.start` loop on a strategy whose rounds begin after ``offset``.

    ``Strategy.start`` always counts rounds from 1. Wrapping the run's strategy, this
    strategy's ``start(grid, checkpoint arrays, num_rounds=total - offset, ...)`` hands the
    inner strategy round ``r + offset`` for the loop's round ``r``, so round numbers in
    ``metrics.jsonl``, the node-sampling seeds ``[seed, round]``, ``server-round`` in every
    message and the privacy counts continue where the checkpoint stopped. Before each
    round's messages go out it appends the round to ``checkpoint-release.json`` (see the module docstring).
    With ``offset=0`` it is a transparent wrapper.

    Parameters
    ----------
    inner : TopicStrategy
        The run's strategy.
    offset : int
        The rounds already completed.
    directory : str or Path, optional
        Where ``checkpoint-release.json`` goes (None: not written).
    """

    def __init__(self, inner: "TopicStrategy", offset: int = 0,
                 directory: str | os.PathLike[str] | None = None) -> None:
        self.inner = inner
        self.offset = int(offset)
        self.directory = None if directory is None else Path(directory)

    def summary(self) -> None:  # noqa: D102
        self.inner.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """The inner strategy's messages for round ``server_round + offset``, recorded as released."""
        messages = list(self.inner.configure_train(server_round + self.offset, arrays, config, grid))
        if self.directory is not None and messages:
            write_release(self.directory, server_round + self.offset, [m.metadata.dst_node_id for m in messages],
                          self.inner.release_details())
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:  # noqa: D102
        return self.inner.aggregate_train(server_round + self.offset, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                           ) -> Iterable[Message]:  # noqa: D102
        return self.inner.configure_evaluate(server_round + self.offset, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:  # noqa: D102
        return self.inner.aggregate_evaluate(server_round + self.offset, replies)

    def evaluate_fn(self, fn: Callable[[int, ArrayRecord], MetricRecord | None]
                    ) -> Callable[[int, ArrayRecord], MetricRecord | None]:
        """``fn`` called with the inner round numbers (the loop's round 0, the starting model, is not passed on)."""
        def shifted(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            return None if server_round == 0 else fn(server_round + self.offset, arrays)

        return shifted


def array_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of numpy arrays (the checkpoint's global arrays)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
