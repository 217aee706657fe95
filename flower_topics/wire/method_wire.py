"""What a method's wire module provides, declared once and checked when the method is registered.

A method's wire module (``flower_topics.wire.<name>``) defines the names of :class:`WireModule`;
it may also define the flags of :class:`MethodWire` that have a default (``SECURE_SUM``,
``NODE_OPTIONS``, ``COUNTS_KEY``), and a flag it does not define takes the default declared
here. :meth:`MethodWire.read` reads a module into a :class:`MethodWire`, checking every name
against its declared type, and refuses a module that lacks one or gets one wrong in one line;
:class:`~flower_topics.methods.MethodSpec` reads its wire module only through it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol

from flower_topics.options import Option
from flower_topics.wire.protocol import ReplySpec


class WireSettings(Protocol):
    """A method's settings class (its wire module's ``SETTINGS``): what every party receives of a round."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Any:
        """The settings from a training message's ConfigRecord (or a validated run config)."""

    def to_record(self) -> Mapping[str, Any]:
        """The settings as the entries of a ConfigRecord."""


class WireModule(Protocol):
    """The names every method's wire module defines (a module satisfies it by defining them)."""

    #: The method's registered name.
    METHOD: str
    #: Its own run-config options, without the ``<method>.`` prefix.
    OPTIONS: Mapping[str, Option]
    #: Its settings class.
    SETTINGS: type[WireSettings]

    def reply_spec(self, settings: Any, vocab_size: int) -> ReplySpec:
        """What a valid reply to a training message with these settings (a ``SETTINGS``) is."""


@dataclass(frozen=True)
class MethodWire:
    """A method's wire module, read and checked: each field is the module's name in capitals
    (``reply_spec`` as it is); a field with a default is a flag the module may leave out.

    Parameters
    ----------
    method : str
        ``METHOD``: the method's registered name.
    options : Mapping[str, Option]
        ``OPTIONS``: its own run-config options, without the prefix.
    settings : type
        ``SETTINGS``: its settings class (:class:`WireSettings`: ``from_record`` and ``to_record``).
    reply_spec : callable
        ``reply_spec(settings, vocab_size) -> ReplySpec``: what a valid reply is.
    secure_sum : bool, default False
        ``SECURE_SUM``: whether its replies are sums the server can add under secure aggregation.
    node_options : Mapping[str, Option], default {}
        ``NODE_OPTIONS``: node-config keys a party of this method may set for itself
        (``flower-supernode --node-config``); its local step finds each in ``party.policy.options``.
    counts_key : str or None, default None
        ``COUNTS_KEY``: the key of the global model (and of ``state.npz``) that holds the integer
        ``K x V`` topic-word token counts, from which the report shows each topic's share of the
        training tokens (None: the method keeps no such counts).
    """

    method: str
    options: Mapping[str, Option]
    settings: type[WireSettings]
    reply_spec: Callable[[Any, int], ReplySpec]
    secure_sum: bool = False
    node_options: Mapping[str, Option] = field(default_factory=lambda: MappingProxyType({}))
    counts_key: str | None = None

    @classmethod
    def read(cls, module: Any) -> "MethodWire":
        """The wire parts of ``module`` (a :class:`WireModule`, with any of the optional flags).

        Raises
        ------
        TypeError
            One line naming the module and the name it lacks or whose value has the wrong type.
        """
        where = getattr(module, "__name__", repr(module))
        values: dict[str, Any] = {}
        for part in dataclasses.fields(cls):
            name = _module_name(part.name)
            if hasattr(module, name):
                value = getattr(module, name)
            elif part.default is dataclasses.MISSING and part.default_factory is dataclasses.MISSING:
                raise TypeError(f"wire module {where} does not define {name} (flower_topics.wire.method_wire)")
            else:
                continue
            if problem := _CHECKS[part.name](value):
                raise TypeError(f"wire module {where}: {name} {problem} (flower_topics.wire.method_wire)")
            values[part.name] = value
        return cls(**values)


def _module_name(part: str) -> str:
    """The module-level name of a :class:`MethodWire` field: its functions as they are, the rest in capitals."""
    return part if part == "reply_spec" else part.upper()


def _options(value: Any) -> str | None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, Option)
                                                 for k, v in value.items()):
        return "must map option names to Option"
    return None


def _settings(value: Any) -> str | None:
    if not isinstance(value, type) or not callable(getattr(value, "from_record", None)) \
            or not callable(getattr(value, "to_record", None)):
        return "must be a class with from_record and to_record"
    return None


_CHECKS: Mapping[str, Callable[[Any], str | None]] = MappingProxyType({
    "method": lambda v: None if isinstance(v, str) and v else "must be a non-empty str",
    "options": _options,
    "settings": _settings,
    "reply_spec": lambda v: None if callable(v) else "must be a function",
    "secure_sum": lambda v: None if isinstance(v, bool) else "must be a bool",
    "node_options": _options,
    "counts_key": lambda v: None if v is None or isinstance(v, str) and v else "must be a non-empty str or None",
})
