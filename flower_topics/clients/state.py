"""What a party keeps between rounds, kept in ``context.state`` field by field, every type exactly.

A method's state is a dataclass (:attr:`~flower_topics.clients.base.LocalStep.state`) whose
fields each declare one of the types :data:`SUPPORTED` names, or that type ``| None``; every
field has a default. :func:`save_state` writes its arrays to an
:class:`~flwr.app.ArrayRecord` (``context.state[name]``) and its numbers, flags and strings
to a :class:`~flwr.app.ConfigRecord` (``context.state[name + "-meta"]``), and
:func:`load_state` gives back every field as it was, of its declared type (a ``bool`` comes
back a ``bool``, a ``float`` a ``float``, a field that was None is None). A state class
with a field of any other type is refused where its step is defined, in one line naming the
field and its type (:func:`field_types`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context

S = TypeVar("S")
#: The types a state field may declare (each also ``| None``).
SUPPORTED: tuple[type, ...] = (np.ndarray, int, float, bool, str)
#: The meta record's key that lists the fields that are None (a hyphen: no field can be named so).
NONE_KEY = "none-fields"
#: What each declared type takes (a numpy scalar of its kind; an integer for a float field), never a bool otherwise.
_ACCEPTS: dict[type, tuple[type, ...]] = {int: (int, np.integer), float: (float, np.floating, int, np.integer),
                                         bool: (bool, np.bool_), str: (str,)}


@dataclasses.dataclass(frozen=True)
class FieldType:
    """A state field's declared type: one of :data:`SUPPORTED`, and whether it may be None."""

    kind: type
    optional: bool


@functools.cache
def field_types(state_class: type) -> dict[str, FieldType]:
    """Every field of the dataclass ``state_class`` with its declared type.

    Raises
    ------
    TypeError
        When ``state_class`` is not a dataclass, or a field declares a type that is not one of
        :data:`SUPPORTED` (alone or ``| None``): one line naming the class, the field and its type.
    """
    if not (isinstance(state_class, type) and dataclasses.is_dataclass(state_class)):
        raise TypeError(f"a method's state must be a dataclass, not {state_class!r}")
    hints = typing.get_type_hints(state_class)
    declared: dict[str, FieldType] = {}
    for item in dataclasses.fields(state_class):
        hint = hints[item.name]
        members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        kinds = [m for m in members if m is not type(None)]
        if len(kinds) != 1 or kinds[0] not in SUPPORTED:
            names = ", ".join(t.__name__ if isinstance(t, type) else str(t) for t in SUPPORTED)
            raise TypeError(f"{state_class.__name__}.{item.name}: type {hint} cannot be kept between rounds "
                            f"(a state field is one of {names}, or one of them | None)")
        declared[item.name] = FieldType(kinds[0], len(kinds) < len(members))
    return declared


def _checked(state_class: type, name: str, declared: FieldType, value: Any) -> Any:
    """``value`` as its declared type (a numpy scalar of its kind becomes the Python one, an integer in a float
    field a float); TypeError otherwise."""
    kind = declared.kind
    if value is None and declared.optional:
        return None
    if kind is np.ndarray and isinstance(value, np.ndarray):
        return value
    if kind is not np.ndarray and isinstance(value, _ACCEPTS[kind]) and \
            (kind is bool or not isinstance(value, (bool, np.bool_))):
        return kind(value)
    raise TypeError(f"{state_class.__name__}.{name} is declared {kind.__name__}"
                    f"{' | None' if declared.optional else ''} but holds {type(value).__name__}")


def save_state(context: Context, name: str, state: Any) -> None:
    """Keep the dataclass ``state`` in ``context.state``: its arrays in ``[name]``, its other fields in
    ``[name-meta]``, and which fields are None.

    Raises
    ------
    TypeError
        When the state class is not supported (:func:`field_types`) or a field holds a value that is not
        of its declared type.
    """
    arrays: dict[str, Array] = {}
    meta: dict[str, Any] = {}
    absent: list[str] = []
    for field, declared in field_types(type(state)).items():
        value = _checked(type(state), field, declared, getattr(state, field))
        if value is None:
            absent.append(field)
        elif declared.kind is np.ndarray:
            arrays[field] = Array(value)
        else:
            meta[field] = value
    if absent:
        meta[NONE_KEY] = absent
    context.state[name] = ArrayRecord(arrays)
    context.state[f"{name}-meta"] = ConfigRecord(meta)


def load_state(context: Context, name: str, state: S) -> S:
    """Fill the dataclass ``state`` from what :func:`save_state` kept under ``name``, each field of its declared
    type; ``state`` as it is (its defaults) when nothing is kept there yet."""
    if name not in context.state.array_records:
        return state
    arrays, meta = context.state[name], context.state[f"{name}-meta"]
    absent = set(meta[NONE_KEY]) if NONE_KEY in meta else set()
    for field, declared in field_types(type(state)).items():
        if field in absent:
            setattr(state, field, None)
        elif field in arrays:
            setattr(state, field, arrays[field].numpy())
        elif field in meta and declared.kind is not np.ndarray:
            setattr(state, field, declared.kind(meta[field]))
    return state
