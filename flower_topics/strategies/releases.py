"""What a method's parties release, counted once: the hook a strategy implements when a round's training
messages go out (:meth:`ReleaseHooks.released`), the rounds released, the privacy report, and how the
counts continue across a resume (:mod:`flower_topics.run.checkpoint`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from flower_topics.evaluation.federated import EvaluationSettings
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.strategies import traffic as round_traffic
from flower_topics.strategies.traffic import RoundTraffic


@dataclass
class PartyReleases:
    """How many rounds each party was asked to release in, and the worst party's count before a resume.

    Parameters
    ----------
    counts : dict
        Node id -> rounds it was sent a training message in, since the last resume.
    before : int
        The worst party's count before it (node ids may change across a resume, so the two are added:
        never fewer).
    """

    counts: dict[int, int] = field(default_factory=dict)
    before: int = 0

    @property
    def worst(self) -> int:
        """The most rounds any one party was asked to release in, the rounds before a resume included."""
        return self.before + max(self.counts.values(), default=0)

    def add(self, nodes: Sequence[int]) -> None:
        """One more release for each of ``nodes``."""
        for node in nodes:
            self.counts[node] = self.counts.get(node, 0) + 1

    def lost(self) -> None:
        """A release lost to a crash: one more for every party (its nodes may have new ids after the resume)."""
        self.before += 1

    def fold(self) -> None:
        """At a resume: the worst count so far goes into :attr:`before`, the per-node counts start again."""
        self.before += max(self.counts.values(), default=0)
        self.counts = {}

    def state(self) -> dict[str, Any]:
        """The checkpoint's numbers (``releases``, ``releases_before``)."""
        return {"releases": {str(n): c for n, c in self.counts.items()}, "releases_before": self.before}

    @classmethod
    def from_state(cls, meta: Mapping[str, Any]) -> "PartyReleases":
        """The counts of :meth:`state`."""
        return cls({int(n): int(c) for n, c in meta["releases"].items()}, int(meta["releases_before"]))


class ReleaseHooks:
    """The hooks of what a method releases: counting, the privacy report, the prevalence release, resume."""

    method: ClassVar[str]
    evaluation: EvaluationSettings | None
    traffic: dict[int, RoundTraffic]
    prevalence_parties: int

    def released(self, server_round: int, nodes: Sequence[int]) -> None:
        """Round ``server_round``'s training messages went out to ``nodes`` (at least one): each of those
        parties releases when it computes its update, whether or not its reply arrives. The one place a
        method counts its releases; nothing by default (:meth:`rounds_released` counts the rounds)."""

    def rounds_released(self) -> int:
        """Rounds in which parties were asked to release, lost ones included
        (:func:`~flower_topics.strategies.traffic.rounds_released`)."""
        return round_traffic.rounds_released(self.traffic)

    def privacy_report(self) -> PrivacyReport:
        """Privacy spent so far (none by default: the update is sent as it is)."""
        return PrivacyReport.no_mechanism(rounds=self.rounds_released(),
                                          reason=f"no privacy mechanism: each party's {self.method} "
                                          "update is sent as it is computed from its documents")

    def unaccounted_evaluation(self) -> str | None:
        """The federated evaluation as a release outside every accountant, or None when it is off.

        The parties' evaluation sums (held-out log-likelihoods, token counts, co-document
        counts of the top words) are computed from their documents and sent without noise.
        """
        if self.evaluation is None:
            return None
        return ("federated evaluation (each party's held-out log-likelihood sums and the co-document counts of the "
                "top words, sent without noise; federated-eval=false turns it off)")

    def prevalence_config(self) -> dict[str, Any]:
        """What the prevalence request carries of the method's release rule, beside the periods and the fold-in
        (:mod:`flower_topics.wire.prevalence`); empty (the default): the parties send their exact tables."""
        return {}

    def prevalence_released(self, parties: int) -> None:
        """Record that ``parties`` were asked for their topic prevalence (a release of their documents)."""
        self.prevalence_parties = parties

    def prevalence_noise_variance(self, parties: int) -> float:
        """The noise variance in each cell of the summed prevalence table of ``parties`` (0: none, the default)."""
        return 0.0

    # ------------------------------------------------------------ resume (flower_topics.run.checkpoint)
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, numbers)``: the method's own state that ``aggregate`` and ``privacy_report`` need to
        continue after a resume, beyond the base's accumulators (traffic, last applied rounds,
        excluded nodes, metrics, evaluations); written to every checkpoint. Numbers must be JSON
        values. None by default."""
        return {}, {}

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state` into this strategy, freshly built from the same run config and
        vocabulary (nothing to restore by default)."""

    def release_details(self) -> dict[str, Any] | None:
        """What ``checkpoint-release.json`` records of a round about to be released beyond its nodes (e.g. how
        many tuples each party sends), so that a resume can count a release lost to a crash; None by default."""
        return None

    def count_lost_release(self, release: Mapping[str, Any]) -> None:
        """Count a release that went out after the last checkpoint and was lost to a crash (a line of
        ``checkpoint-release.json``): a round to its nodes in the traffic (:meth:`record_lost_round`), and
        what the method counts of it (:meth:`lost_release`)."""
        self.record_lost_round(release.get("nodes", []))
        self.lost_release(release)

    def lost_release(self, release: Mapping[str, Any]) -> None:
        """What a method adds to its own counters for a release lost to a crash (a line of
        ``checkpoint-release.json``); nothing by default."""

    def record_lost_round(self, nodes: Sequence[int]) -> None:
        """Count a round released to ``nodes`` and lost to a crash in the traffic
        (:func:`~flower_topics.strategies.traffic.record_lost_round`)."""
        round_traffic.record_lost_round(self.traffic, len(nodes))

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Called once a resumed strategy holds the checkpoint's state, with the checkpoint's global arrays:
        what the method does because the parties of a new Flower run start without their ``context.state``
        (nothing by default)."""
