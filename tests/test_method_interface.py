"""The method interface is declared and checked.

Every registered method's parts have their declared types: its wire module is read through
:class:`~flower_topics.wire.method_wire.MethodWire` (each name of the declared type), its strategy is a
concrete :class:`~flower_topics.strategies.base.TopicStrategy` that implements ``from_config``, its party
side is a :class:`~flower_topics.clients.base.LocalStep`, and both live in the layers import-linter checks.
A wire module that lacks a name every wire module defines, or gets one's type wrong, is refused in one
line when its method is registered; a flag a wire module sets is the flag its spec reads, a wire module defines
no registry hook (it holds message formats only), and a registry hook its home module defines (``quality_notes``
next to the strategy, dplda's budget hooks in :mod:`flower_topics.privacy.dplda_calibration`) is the one its spec
calls.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from types import ModuleType

import pytest

from flower_topics.clients.base import LocalStep
from flower_topics.methods import BUILT_IN, METHODS, MethodSpec, NamedHook
from flower_topics.options import Option, at_least
from flower_topics.run.config import parse_run_config
from flower_topics.privacy import dplda_calibration
from flower_topics.strategies.base import TopicStrategy
from flower_topics.strategies.dplda import calibrated_settings
from flower_topics.wire import lda as lda_wire
from flower_topics.wire.method_wire import MethodWire
from flower_topics.wire.protocol import ArraySpec, ReplySpec

#: What a method's run config needs beyond its defaults to parse (no file is read).
NEEDS = {"dplda": {"vocabulary": "/x/v.txt", "federated-eval": False, "num-rounds": 5}}
#: How a method's strategy makes its settings from a run config, where it is more than ``SETTINGS.from_record``
#: (dplda calibrates its noise multiplier first).
SETTINGS_OF = {"dplda": calibrated_settings}


def _toy_wire(**names) -> ModuleType:
    """A wire module of a method ``toy`` with lda's names (less those given as None, replaced by those given)."""
    module = ModuleType("toy_wire")
    parts = {"METHOD": "toy", "OPTIONS": lda_wire.OPTIONS, "SETTINGS": lda_wire.SETTINGS,
             "reply_spec": lda_wire.reply_spec, **names}
    for name, value in parts.items():
        if value is not None:
            setattr(module, name, value)
    return module


def _toy_spec(wire: ModuleType, **parts) -> MethodSpec:
    return MethodSpec("toy", "a toy method", MethodWire.read(wire), parts.pop("strategy", "flower_topics.strategies"
                      ".lda:ADLDA"), parts.pop("client", "flower_topics.clients.lda:STEP"), private=False, **parts)


@pytest.mark.parametrize("name", list(METHODS))
def test_every_registered_method_has_each_part_of_its_declared_type(name):
    spec = METHODS[name]
    assert isinstance(spec.wire, MethodWire) and spec.wire.method == name
    config = parse_run_config({"method": name, **NEEDS.get(name, {})})
    settings = SETTINGS_OF.get(name, spec.wire.settings.from_record)(config)
    assert isinstance(settings, spec.wire.settings)
    assert isinstance(spec.wire.reply_spec(settings, 30), ReplySpec)
    assert spec.reply_spec(dict(settings.to_record()), 30) == spec.wire.reply_spec(settings, 30)
    assert set(spec.options) and all(isinstance(option, Option) for option in spec.options.values())

    cls = spec.strategy_class()
    assert issubclass(cls, TopicStrategy) and not inspect.isabstract(cls), cls.__abstractmethods__
    assert inspect.ismethod(cls.from_config) and cls.from_config.__self__ is cls  # a classmethod
    assert cls.from_config.__func__ is not TopicStrategy.from_config.__func__
    assert isinstance(spec.local_step(), LocalStep)
    assert cls.__module__ == spec.strategy.partition(":")[0]
    if name in BUILT_IN:  # the string references name modules of the layers import-linter checks
        assert cls.__module__.startswith("flower_topics.strategies.")
        assert spec.client.startswith("flower_topics.clients.")


@pytest.mark.parametrize("name", list(METHODS))
def test_a_registry_hook_its_home_module_defines_is_the_one_its_spec_calls(name):
    module = importlib.import_module(METHODS[name].wire.settings.__module__)  # the wire module defines SETTINGS
    assert MethodWire.read(module) == METHODS[name].wire
    hooks = ("check_config", "check_noise", "quality_notes", "planned_releases")
    assert [hook for hook in hooks if hasattr(module, hook)] == []  # a wire module holds message formats only
    strategy = importlib.import_module(METHODS[name].strategy.partition(":")[0])
    if hasattr(strategy, "quality_notes"):  # named, imported when called: the registry imports no strategy
        assert METHODS[name].quality_notes == NamedHook(f"{strategy.__name__}:quality_notes")
    budget = {"check_config", "check_noise", "planned_releases"} if name == "dplda" else set()
    defined = {hook: getattr(dplda_calibration, hook) for hook in budget}
    assert {hook: getattr(METHODS[name], hook) for hook in defined} == defined  # none defined and left unused


def test_from_config_is_declared_abstract_on_the_strategy_base():
    assert "from_config" in TopicStrategy.__abstractmethods__
    assert list(inspect.signature(TopicStrategy.from_config).parameters) == ["config", "vocabulary"]


def test_a_wire_module_without_settings_is_refused_in_one_line():
    with pytest.raises(TypeError) as refused:
        _toy_spec(_toy_wire(SETTINGS=None))
    assert str(refused.value) == "wire module toy_wire does not define SETTINGS (flower_topics.wire.method_wire)"


@pytest.mark.parametrize("names, message", [
    ({"METHOD": None}, "does not define METHOD"),
    ({"OPTIONS": None}, "does not define OPTIONS"),
    ({"reply_spec": None}, "does not define reply_spec"),
    ({"SETTINGS": dict}, "SETTINGS must be a class with from_record and to_record"),
    ({"OPTIONS": {"x": 1}}, "OPTIONS must map option names to Option"),
    ({"reply_spec": "lda"}, "reply_spec must be a function"),
    ({"SECURE_SUM": "yes"}, "SECURE_SUM must be a bool"),
    ({"NODE_OPTIONS": {"x": 1}}, "NODE_OPTIONS must map option names to Option"),
    ({"COUNTS_KEY": 3}, "COUNTS_KEY must be a non-empty str or None"),
])
def test_a_wire_module_missing_a_name_or_with_a_wrong_type_is_refused(names, message):
    with pytest.raises(TypeError, match=message) as refused:
        MethodWire.read(_toy_wire(**names))
    assert "\n" not in str(refused.value)


def test_a_flag_the_wire_module_sets_is_what_the_spec_reads_and_one_it_leaves_out_takes_its_default():
    node = {"depth": Option(1, "a toy node option", at_least(1))}
    flagged = _toy_spec(_toy_wire(SECURE_SUM=True, NODE_OPTIONS=node, COUNTS_KEY="counts"))
    assert flagged.secure_sum and dict(flagged.node_options) == node and flagged.topic_counts == "counts"
    flagged.check({"secure-aggregation": True})  # SECURE_SUM alone lets the method run under secure aggregation
    plain = _toy_spec(_toy_wire())
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(MethodWire) if f.name in ("secure_sum", "node_options", "counts_key")}
    assert (plain.secure_sum, dict(plain.node_options), plain.topic_counts) == (
        defaults["secure_sum"], dict(defaults["node_options"]), defaults["counts_key"]) == (False, {}, None)
    with pytest.raises(Exception, match="secure-aggregation=true: toy's replies are not sums"):
        plain.check({"secure-aggregation": True})


def test_a_spec_refuses_a_wire_module_of_another_method_and_malformed_or_mistyped_references():
    with pytest.raises(TypeError, match="its wire module's METHOD is 'lda'"):
        MethodSpec("toy", "a toy method", MethodWire.read(lda_wire), "flower_topics.strategies.lda:ADLDA",
                   "flower_topics.clients.lda:STEP", private=False)
    with pytest.raises(TypeError, match="strategy must be 'module:Name'"):
        _toy_spec(_toy_wire(), strategy="flower_topics.strategies.lda.ADLDA")
    with pytest.raises(TypeError, match="is not a TopicStrategy subclass"):
        _toy_spec(_toy_wire(), strategy="flower_topics.wire.lda:LDASettings").strategy_class()
    with pytest.raises(TypeError, match="is not a LocalStep"):
        _toy_spec(_toy_wire(), client="flower_topics.wire.lda:OPTIONS").local_step()


def test_an_array_spec_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="^ArraySpec kind must be one of integer, floating, not 'float'$"):
        ArraySpec("float", (1,))  # would otherwise be checked as floating


def test_importing_every_wire_module_imports_no_mechanism_accountant_or_heavy_library():
    """The wire holds message formats only: its modules load no strategy, client, accountant, torch or numba."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; from flower_topics.methods import METHODS; import importlib; "
            "[importlib.import_module(f'flower_topics.wire.{name}') for name in METHODS]; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'opacus', 'numba', 'dp_accounting', 'sentence_transformers') or m.startswith("
            "('flower_topics.strategies', 'flower_topics.clients', 'flower_topics.privacy.accountants')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == []

