"""The method registry: one :class:`MethodSpec` per method, the only place a method is named.

The ServerApp, the ClientApp, run-config validation, the ``simulate`` command and the
README's table of options all read :data:`METHODS`. A spec names its strategy and its
party step by import path, so that the registry (and a ClientApp serving ``lda``) never
imports what another method needs (torch, opacus, sentence-transformers).

Adding a method: write ``wire/<name>.py`` (keys, ``SETTINGS``, ``OPTIONS``, ``reply_spec``),
``clients/<name>.py`` (its :class:`~flower_topics.clients.base.LocalStep` as ``STEP``),
``strategies/<name>.py`` (a :class:`~flower_topics.strategies.base.TopicStrategy` with
``from_config``), and register one :class:`MethodSpec` below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from flower_topics.errors import UserInputError
from flower_topics.options import Option
from flower_topics.wire import dplda, fedlda, ftm, lda, ntm, pctd

if TYPE_CHECKING:
    from flower_topics.clients.base import LocalStep
    from flower_topics.strategies.base import TopicStrategy
    from flower_topics.wire.protocol import ReplySpec


@dataclass(frozen=True)
class MethodSpec:
    """One registered method.

    Parameters
    ----------
    name : str
        The method's name: ``method`` in the run config, the ``train.<name>`` message
        type, the prefix of its options (``<name>.<option>``).
    title : str
        One line: what it is and where it comes from.
    protocol : module
        Its wire module (``flower_topics.wire.<name>``): record keys, ``OPTIONS``,
        ``SETTINGS`` (the settings class, with ``from_record``) and ``reply_spec``.
    strategy : str
        ``"module:Class"`` of its strategy; ``Class.from_config(config, vocabulary)`` builds it.
    client : str
        ``"module:NAME"`` of its :class:`~flower_topics.clients.base.LocalStep`.
    private : bool
        Whether it has a privacy mechanism.
    """

    name: str
    title: str
    protocol: ModuleType
    strategy: str
    client: str
    private: bool

    @property
    def options(self) -> Mapping[str, Option]:
        """Its own options, without the prefix (the wire module's ``OPTIONS``)."""
        return self.protocol.OPTIONS

    def reply_spec(self, settings: Mapping[str, Any], vocab_size: int) -> "ReplySpec":
        """What a valid reply to a training message with ``settings`` (its ConfigRecord) is."""
        return self.protocol.reply_spec(self.protocol.SETTINGS.from_record(settings), vocab_size)

    def key(self, option: str) -> str:
        """The run-config key of one of its options: ``<name>.<option>``."""
        return f"{self.name}.{option}"

    def build_strategy(self, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "TopicStrategy":
        """Its strategy for a validated run config and the run's vocabulary."""
        return _load(self.strategy).from_config(config, vocabulary)

    def check(self, config: Mapping[str, Any]) -> None:
        """What a run of this method needs of a validated run config beyond each key's range
        (the wire module's ``check_config``, when it has one); raises UserInputError."""
        if bool(config.get("secure-aggregation", False)) and not self.secure_sum:
            able = ", ".join(spec.name for spec in METHODS.values() if spec.secure_sum) or "none"
            raise UserInputError(f"secure-aggregation=true: {self.name}'s replies are not sums the server could add "
                                 f"under masks (methods that support it: {able}; docs/secure-aggregation.md)")
        check_config = getattr(self.protocol, "check_config", None)
        if check_config is not None:
            check_config(config)

    @property
    def secure_sum(self) -> bool:
        """Whether its replies can go through secure aggregation (its wire module's ``SECURE_SUM``)."""
        return bool(getattr(self.protocol, "SECURE_SUM", False))

    def quality_notes(self, config: Mapping[str, Any]) -> list[str]:
        """Lines for the console when this run config is known to give poor topics: why, and the option that
        changes it (the wire module's ``quality_notes``, when it has one)."""
        notes = getattr(self.protocol, "quality_notes", None)
        return [] if notes is None else list(notes(config))

    def local_step(self) -> "LocalStep":
        """Its party side (imported on first use)."""
        return _load(self.client)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


#: Every registered method, by name.
METHODS: Mapping[str, MethodSpec] = MappingProxyType({spec.name: spec for spec in (
    MethodSpec("lda", "AD-LDA: collapsed Gibbs on each party's tokens, count changes summed (no privacy)",
               lda, "flower_topics.strategies.lda:ADLDA", "flower_topics.clients.lda:STEP", private=False),
    MethodSpec("fedlda", "FedLDA (Wang, Tong and Shi, AAAI 2020): local sampling, RRP-perturbed update tuples",
               fedlda, "flower_topics.strategies.fedlda:FedLDA", "flower_topics.clients.fedlda:STEP",
               private=True),
    MethodSpec("pctd", "PC-TD (Shi et al., IEEE Intelligent Systems 2020): EM over semantic units, Gaussian noise",
               pctd, "flower_topics.strategies.pctd:PCTD", "flower_topics.clients.pctd:STEP", private=True),
    MethodSpec("ftm", "FTM (Jiang et al., CIKM 2019): private MH on Laplace-thresholded counts, topic merging",
               ftm, "flower_topics.strategies.ftm:FTM", "flower_topics.clients.ftm:STEP", private=True),
    MethodSpec("ntm", "gFedNTM (Calvo-Bartolome and Arenas-Garcia 2023): Sync-Opt of ProdLDA/CTM, DP-SGD",
               ntm, "flower_topics.strategies.ntm:NTM", "flower_topics.clients.ntm:STEP", private=True),
    MethodSpec("dplda", "DP-SVI (Park et al. 2016): Poisson-sampled documents, clipped expected counts, Gaussian "
               "noise; one whole-run accountant per document", dplda, "flower_topics.strategies.dplda:DPLDA",
               "flower_topics.clients.dplda:STEP", private=True),
)})


def get_method(name: str) -> MethodSpec:
    """The spec of a registered method.

    Raises
    ------
    UserInputError
        One line naming the registered methods.
    """
    try:
        return METHODS[name]
    except KeyError:
        raise UserInputError(f"unknown method {name!r}; registered: {', '.join(METHODS)}") from None
