"""The method registry: one :class:`MethodSpec` per method, the only place a method is named.

The ServerApp, the ClientApp, run-config validation, the ``simulate`` command and the
README's table of options all read :data:`METHODS`. A spec names its strategy and its
party step by import path, so that the registry (and a ClientApp serving ``lda``) never
imports what another method needs (torch, opacus, sentence-transformers).

Adding a method: write ``wire/<name>.py`` (what :class:`~flower_topics.wire.method_wire.MethodWire`
reads: ``METHOD``, ``OPTIONS``, ``SETTINGS``, ``reply_spec`` and the flags it sets),
``clients/<name>.py`` (its :class:`~flower_topics.clients.base.LocalStep` as ``STEP``),
``strategies/<name>.py`` (a :class:`~flower_topics.strategies.base.TopicStrategy` with
``from_config``), and register one :class:`MethodSpec` below (a method of one's own, outside the package:
the same files in one's own package and one :func:`register_method` call; docs/adding-a-method.md walks
through one). The wire module is checked when the spec is made; the strategy class and the step are
checked against their types when first loaded (tests/test_method_interface.py loads every registered
method's) or registered.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from flower_topics.errors import UserInputError
from flower_topics.models.seed_words import check_seed_file
from flower_topics.options import Option
from flower_topics.privacy import dplda_calibration
from flower_topics.wire import dplda, fedlda, ftm, lda, ntm, pctd
from flower_topics.wire.method_wire import MethodWire

if TYPE_CHECKING:
    from flower_topics.clients.base import LocalStep
    from flower_topics.privacy.ledger import Release
    from flower_topics.strategies.base import TopicStrategy
    from flower_topics.wire.protocol import ReplySpec


def _no_check(config: Mapping[str, Any]) -> None:
    """The default :attr:`MethodSpec.check_config` and :attr:`MethodSpec.check_noise`: nothing beyond each key's
    range."""


def _no_notes(config: Mapping[str, Any]) -> Iterable[str]:
    """The default :attr:`MethodSpec.quality_notes`: none."""
    return ()


def _no_plan(config: Mapping[str, Any]) -> tuple[Release, ...] | None:
    """The default :attr:`MethodSpec.planned_releases`: not known from the run config (None)."""
    return None


@dataclass(frozen=True)
class MethodSpec:
    """One registered method: its name, its parts, and every hook of the method contract.

    Parameters
    ----------
    name : str
        The method's name: ``method`` in the run config, the ``train.<name>`` message
        type, the prefix of its options (``<name>.<option>``).
    title : str
        One line: what it is and where it comes from.
    wire : MethodWire
        Its wire module, read and checked: ``MethodWire.read(flower_topics.wire.<name>)``
        (its ``METHOD`` must be ``name``). What the wire module declares (its options, its settings,
        its replies, whether they are secure sums, its node options, its counts) is read from it
        here only: :attr:`options`, :meth:`reply_spec`, :attr:`secure_sum`, :attr:`node_options`,
        :attr:`topic_counts`.
    strategy : str
        ``"module:Class"`` of its strategy, a :class:`~flower_topics.strategies.base.TopicStrategy`;
        ``Class.from_config(config, vocabulary)`` builds it. Imported on first use, so that a
        party's process never imports a strategy.
    client : str
        ``"module:NAME"`` of its :class:`~flower_topics.clients.base.LocalStep`, imported on first
        use, so that a party's process imports only its own method's.
    private : bool
        Whether it has a privacy mechanism (its party's seed is then secret: OS entropy or
        the node's ``secret-seed``, never the run config).
    check_config : callable, default no check
        ``check_config(config)``: what a run of this method needs of a validated run config
        beyond each key's range; raises :class:`~flower_topics.errors.UserInputError`.
    check_noise : callable, default no check
        ``check_noise(config)``: what only calibrating the run's noise can tell (that its privacy target
        can be reached); raises :class:`~flower_topics.errors.UserInputError`. It imports an accountant
        and searches the noise, so it runs last (:func:`~flower_topics.run.config.parse_run_config`),
        after :attr:`check_config` and a launcher's checks of the run's files
        (:func:`~flower_topics.run.config.parse_run_options`).
    quality_notes : callable, default none
        ``quality_notes(config) -> lines``: console lines when this run config is known to
        give poor topics, each naming the option that changes it.
    fixed_on_resume : Mapping[str, str], default {}
        Run-config keys a resume of this method may not change, each with the reason,
        beyond those no resume may change.
    planned_releases : callable, default not known
        ``planned_releases(config) -> releases or None``: what one whole run of this run config releases
        of a party's documents (:class:`~flower_topics.privacy.ledger.Release`); a party with a privacy
        ledger refuses, before round 1, a run that alone would spend more than its lifetime cap.
    seed_words : str, default a refusal
        Why a run with ``seed-words`` (guided topics) is refused, in a few words; ``""``: the
        method takes seed words (its strategy reads the file).
    """

    name: str
    title: str
    wire: MethodWire
    strategy: str
    client: str
    private: bool
    check_config: Callable[[Mapping[str, Any]], None] = _no_check
    check_noise: Callable[[Mapping[str, Any]], None] = _no_check
    quality_notes: Callable[[Mapping[str, Any]], Iterable[str]] = _no_notes
    fixed_on_resume: Mapping[str, str] = field(default_factory=dict)
    planned_releases: Callable[[Mapping[str, Any]], tuple[Release, ...] | None] = _no_plan
    seed_words: str = "its strategy does not read seed words"

    def __post_init__(self) -> None:
        if self.wire.method != self.name:
            raise TypeError(f"method {self.name!r}: its wire module's METHOD is {self.wire.method!r}")
        for part, path in (("strategy", self.strategy), ("client", self.client)):
            module, colon, name = path.partition(":")
            if not (colon and module and name.isidentifier()):
                raise TypeError(f"method {self.name!r}: {part} must be 'module:Name', not {path!r}")

    @property
    def options(self) -> Mapping[str, Option]:
        """Its own options, without the prefix (the wire module's ``OPTIONS``)."""
        return self.wire.options

    @property
    def secure_sum(self) -> bool:
        """Whether its replies are sums the server can add under secure aggregation (``SECURE_SUM``)."""
        return self.wire.secure_sum

    @property
    def node_options(self) -> Mapping[str, Option]:
        """Node-config keys a party of this method may set for itself (``NODE_OPTIONS``)."""
        return self.wire.node_options

    @property
    def topic_counts(self) -> str | None:
        """The key of ``state.npz`` that holds the run's final integer ``K x V`` topic-word token counts
        (``COUNTS_KEY``; None: the method keeps no such counts)."""
        return self.wire.counts_key

    def reply_spec(self, train_config: Mapping[str, Any], vocab_size: int) -> "ReplySpec":
        """What a valid reply to a training message with ``train_config`` (its ConfigRecord) is."""
        return self.wire.reply_spec(self.wire.settings.from_record(train_config), vocab_size)

    def key(self, option: str) -> str:
        """The run-config key of one of its options: ``<name>.<option>``."""
        return f"{self.name}.{option}"

    def build_strategy(self, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "TopicStrategy":
        """Its strategy for a validated run config and the run's vocabulary.

        Raises
        ------
        TypeError
            One line when the strategy's ``from_config`` left out the run config's federation options
            (:meth:`~flower_topics.strategies.base.TopicStrategy.federation_options`: min-nodes, fraction-train,
            min-replies, seed, evaluation, secure aggregation, round-timeout), which would be silently ignored.
        """
        cls = self.strategy_class()
        strategy = cls.from_config(config, vocabulary)
        options = cls.federation_options(config)
        if ignored := [name for name, value in options.items() if getattr(strategy, name) != value]:
            raise TypeError(f"method {self.name!r}: {cls.__name__}.from_config ignores the run config's "
                            f"{', '.join(ignored)}: pass **cls.federation_options(config) to the base")
        return strategy

    def strategy_class(self) -> "type[TopicStrategy]":
        """Its strategy class (imported on first use).

        Raises
        ------
        TypeError
            It is not a :class:`~flower_topics.strategies.base.TopicStrategy`.
        """
        from flower_topics.strategies.base import TopicStrategy

        cls = _load(self.strategy)
        if not (isinstance(cls, type) and issubclass(cls, TopicStrategy)):
            raise TypeError(f"method {self.name!r}: strategy {self.strategy} is not a TopicStrategy subclass")
        return cls

    def check(self, config: Mapping[str, Any]) -> None:
        """Refuse, in one line, a validated run config this method cannot run: secure aggregation
        it does not support, seed words it does not take (:attr:`seed_words`), or what its
        :attr:`check_config` refuses (not its :attr:`check_noise`)."""
        if bool(config.get("secure-aggregation", False)) and not self.secure_sum:
            able = ", ".join(spec.name for spec in METHODS.values() if spec.secure_sum) or "none"
            raise UserInputError(f"secure-aggregation=true: {self.name}'s replies are not sums the server could add "
                                 f"under masks (methods that support it: {able}; docs/secure-aggregation.md)")
        if str(config.get("seed-words", "")) and self.seed_words:
            able = ", ".join(spec.name for spec in METHODS.values() if not spec.seed_words) or "none"
            raise UserInputError(f"seed-words: {self.name} cannot take seed words: {self.seed_words} (methods that "
                                 f"do: {able}; docs/topics-in-use.md)")
        check_seed_file(config)
        self.check_config(config)

    def notes(self, config: Mapping[str, Any]) -> list[str]:
        """Its :attr:`quality_notes` for ``config``, as a list."""
        return list(self.quality_notes(config))

    def local_step(self) -> "LocalStep":
        """Its party side (imported on first use).

        Raises
        ------
        TypeError
            It is not a :class:`~flower_topics.clients.base.LocalStep`.
        """
        from flower_topics.clients.base import LocalStep

        step = _load(self.client)
        if not isinstance(step, LocalStep):
            raise TypeError(f"method {self.name!r}: client {self.client} is not a LocalStep")
        return step

    def __reduce_ex__(self, protocol: Any) -> str | tuple[Any, ...]:
        """A built-in method's spec pickles as its name (looked up in :data:`METHODS` where it is unpickled), not
        as its parts: Flower's simulation engine pickles the ClientApp, which holds each method's, with every
        message. A spec of :func:`register_method` pickles as its parts: the process that unpickles it (a
        party's Ray actor) has not registered it."""
        if self.name in BUILT_IN and METHODS.get(self.name) is self:
            return get_method, (self.name,)
        return super().__reduce_ex__(protocol)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class NamedHook:
    """A hook named ``"module:function"``, imported when first called, so that the registry imports no strategy
    (a method's :attr:`MethodSpec.quality_notes` live next to its strategy)."""

    path: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _load(self.path)(*args, **kwargs)


#: The package's own methods, by name (pyproject.toml, docs/run-config.md and each one's docs page document
#: them); :func:`register_method` adds others.
_REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec("lda", "AD-LDA: collapsed Gibbs on each party's tokens, count changes summed (no privacy)",
               MethodWire.read(lda), "flower_topics.strategies.lda:ADLDA", "flower_topics.clients.lda:STEP",
               private=False, seed_words=""),
    MethodSpec("fedlda", "FedLDA (Wang, Tong and Shi, AAAI 2020): local sampling, RRP-perturbed update tuples",
               MethodWire.read(fedlda), "flower_topics.strategies.fedlda:FedLDA", "flower_topics.clients.fedlda:STEP",
               private=True, seed_words=""),
    MethodSpec("pctd", "PC-TD (Shi et al., IEEE Intelligent Systems 2020): EM over semantic units, Gaussian noise",
               MethodWire.read(pctd), "flower_topics.strategies.pctd:PCTD", "flower_topics.clients.pctd:STEP",
               private=True, quality_notes=NamedHook("flower_topics.strategies.pctd:quality_notes"), seed_words=""),
    MethodSpec("ftm", "FTM (Jiang et al., CIKM 2019): private MH on Laplace-thresholded counts, topic merging",
               MethodWire.read(ftm), "flower_topics.strategies.ftm:FTM", "flower_topics.clients.ftm:STEP",
               private=True, quality_notes=NamedHook("flower_topics.strategies.ftm:quality_notes"),
               seed_words="each party learns its own K_p topics and the server merges them by similarity, so no "
                          "topic index is shared for a seed line to name"),
    MethodSpec("ntm", "gFedNTM (Calvo-Bartolome and Arenas-Garcia 2023): Sync-Opt of ProdLDA/CTM, DP-SGD",
               MethodWire.read(ntm), "flower_topics.strategies.ntm:NTM", "flower_topics.clients.ntm:STEP",
               private=True, quality_notes=NamedHook("flower_topics.strategies.ntm:quality_notes"),
               seed_words="ProdLDA/CombinedTM have no topic-word Dirichlet prior (the decoder is learned by "
                          "gradient)"),
    MethodSpec("dplda", "DP-SVI (Park et al. 2016): Poisson-sampled documents, clipped expected counts, Gaussian "
               "noise; one whole-run accountant per document", MethodWire.read(dplda),
               "flower_topics.strategies.dplda:DPLDA", "flower_topics.clients.dplda:STEP", private=True,
               check_config=dplda_calibration.check_config, check_noise=dplda_calibration.check_noise,
               quality_notes=NamedHook("flower_topics.strategies.dplda:quality_notes"),
               planned_releases=dplda_calibration.planned_releases, seed_words="",
               fixed_on_resume={"num-rounds": "dplda calibrates its noise to num-rounds releases under the "
                                              "whole-run budget; another num-rounds would change the noise"}),
)}
#: The names of the package's own methods (what pyproject.toml and the docs' option tables list).
BUILT_IN: tuple[str, ...] = tuple(_REGISTRY)
#: Every registered method, by name: the built-in ones, then those :func:`register_method` added (a read-only view
#: that sees each registration).
METHODS: Mapping[str, MethodSpec] = MappingProxyType(_REGISTRY)


def register_method(spec: MethodSpec) -> None:
    """Register a method of your own, so that everything that reads :data:`METHODS` runs it.

    Registration holds in this process: the in-process engine
    (:class:`~flower_topics.simulations.inprocess.InProcessGrid`, ``simulate(..., engine="inprocess")``) runs the method on its parties and its server; the ``flower-topics``
    command and a deployment's ServerApp and ClientApp processes know only the built-in methods. Its options are
    run-config keys ``<name>.<option>`` with their defaults (:data:`flower_topics.run.config.OPTIONS`).

    Parameters
    ----------
    spec : MethodSpec
        The method's spec (its wire module read by :meth:`MethodWire.read
        <flower_topics.wire.method_wire.MethodWire.read>`, its strategy and its step by ``"module:Name"``).

    Raises
    ------
    TypeError
        One line: ``spec`` is not a :class:`MethodSpec`, its name is not a Python identifier (a Flower
        message type is ``train.<name>``), one of its options is not a plain name, or its strategy or step
        cannot be imported or is not of its type.
    ValueError
        One line: a method of that name is registered already.
    """
    if not isinstance(spec, MethodSpec):
        raise TypeError(f"register_method takes a MethodSpec, not {type(spec).__name__}")
    if not spec.name.isidentifier():
        raise TypeError(f"method {spec.name!r}: a method's name must be a Python identifier (its messages are "
                        f"train.<name>)")
    if bad := [name for name in spec.options if not name or "." in name]:
        raise TypeError(f"method {spec.name!r}: option {bad[0]!r} must be a name without a dot (users set "
                        f"{spec.name}.<name>)")
    if spec.name in _REGISTRY:
        raise ValueError(f"method {spec.name!r} is registered already ({_REGISTRY[spec.name].title})")
    try:  # a wrong "module:Name" is refused here, not in the middle of a run
        spec.strategy_class(), spec.local_step()
    except (ImportError, AttributeError) as exc:
        raise TypeError(f"method {spec.name!r}: {type(exc).__name__}: {exc}") from None
    _REGISTRY[spec.name] = spec


def all_node_options() -> dict[str, Option]:
    """Every node-config key a party may set: the data and federation keys, its ledger and policy, then each
    method's own."""
    from flower_topics.data.node_data import NODE_OPTIONS
    from flower_topics.privacy.ledger import LEDGER_OPTIONS
    from flower_topics.privacy.party_policy import POLICY_OPTIONS

    table = {**NODE_OPTIONS, **LEDGER_OPTIONS, **POLICY_OPTIONS}
    for spec in METHODS.values():
        table.update(spec.node_options)
    return table


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
