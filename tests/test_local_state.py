"""A party's state between rounds comes back exactly, every declared type (:mod:`flower_topics.clients.state`).

A state field of a type that cannot be kept is refused in one line where the step is defined, and
every registered method's state class is accepted. The state also survives the party's disk
(:mod:`flower_topics.federation.party_state`): written, read into an empty ``context.state``, and
loaded again, it is the same, type for type.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from flower_topics.clients.base import LocalStep
from flower_topics.clients.state import field_types, load_state, save_state
from flower_topics.federation import party_state
from flower_topics.methods import METHODS


@dataclass
class EveryType:
    counts: np.ndarray = field(default_factory=lambda: np.zeros(2, dtype=np.int64))
    maybe: np.ndarray | None = None
    gone: np.ndarray | None = field(default_factory=lambda: np.ones(3))
    steps: int = 0
    rate: float = 0.5
    open: bool = False
    shut: bool = True
    label: str = "none"
    limit: int | None = 7
    spent: float | None = None


def filled() -> EveryType:
    return EveryType(counts=np.array([[3, -1], [2**40, 0]], dtype=np.int64),
                     maybe=np.array([0.25, np.nan], dtype=np.float32), gone=None, steps=12, rate=1e-300,
                     open=True, shut=False, label="a b\tc", limit=None, spent=2.0)


def assert_same(got: EveryType, want: EveryType) -> None:
    for item in fields(EveryType):
        a, b = getattr(got, item.name), getattr(want, item.name)
        assert type(a) is type(b), item.name
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), item.name
        else:
            assert a == b, item.name


def context(tmp_path=None) -> Context:
    node_config = {"state-dir": str(tmp_path)} if tmp_path is not None else {}
    return Context(run_id=5, node_id=11, node_config=node_config, state=RecordDict(), run_config={})


def test_every_supported_type_comes_back_exactly():
    ctx = context()
    save_state(ctx, "s", filled())
    assert_same(load_state(ctx, "s", EveryType()), filled())


def test_a_bool_comes_back_a_bool_and_a_float_a_float():
    ctx = context()
    save_state(ctx, "s", EveryType(open=True, rate=3.0, steps=np.int64(4)))
    back = load_state(ctx, "s", EveryType())
    assert back.open is True and back.shut is True
    assert type(back.rate) is float and back.rate == 3.0
    assert type(back.steps) is int and back.steps == 4


def test_nothing_kept_leaves_the_defaults():
    assert_same(load_state(context(), "s", EveryType()), EveryType())


def test_the_party_disk_keeps_every_type(tmp_path):
    ctx = context(tmp_path)
    save_state(ctx, "s", filled())
    assert party_state.persist(ctx) is not None
    restarted = context(tmp_path)
    assert party_state.restore(restarted)
    assert_same(load_state(restarted, "s", EveryType()), filled())


def test_an_unsupported_field_type_is_refused_where_the_step_is_defined():
    @dataclass
    class Listed:
        fine: int = 0
        weights: list = field(default_factory=list)

    with pytest.raises(TypeError, match=r"^Listed\.weights: type <class 'list'> cannot be kept") as caught:
        LocalStep(state=Listed, run=lambda *args: ({}, {}))
    assert "\n" not in str(caught.value)


def test_a_union_of_two_kinds_is_refused():
    @dataclass
    class Either:
        value: int | str = 0

    with pytest.raises(TypeError, match=r"^Either\.value: "):
        field_types(Either)


def test_a_value_not_of_its_declared_type_is_refused_on_save():
    with pytest.raises(TypeError, match=r"^EveryType\.open is declared bool but holds int$"):
        save_state(context(), "s", EveryType(open=1))
    with pytest.raises(TypeError, match=r"^EveryType\.steps is declared int but holds bool$"):
        save_state(context(), "s", EveryType(steps=True))
    with pytest.raises(TypeError, match=r"^EveryType\.counts is declared ndarray but holds NoneType$"):
        save_state(context(), "s", EveryType(counts=None))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_registered_method_state_round_trips(name):
    state_class = METHODS[name].local_step().state
    declared = field_types(state_class)
    assert declared
    ctx = context()
    save_state(ctx, "s", state_class())
    back = load_state(ctx, "s", state_class())
    for item, want in zip(fields(back), fields(state_class())):
        got, default = getattr(back, item.name), getattr(state_class(), item.name)
        assert type(got) is type(default), item.name
        if isinstance(default, np.ndarray):
            assert got.dtype == default.dtype and np.array_equal(got, default), item.name
