"""The accountants by name: :func:`register_accountant` adds a back-end, :func:`create_accountant` makes one."""

from __future__ import annotations

from typing import Any, TypeVar

from flower_topics.privacy.accountants.base import Accountant

A = TypeVar("A", bound=type[Accountant])

_ACCOUNTANTS: dict[str, type[Accountant]] = {}


def register_accountant(cls: A) -> A:
    """Register an :class:`Accountant` subclass under its :meth:`~Accountant.mechanism` name (a class decorator).

    Raises
    ------
    ValueError
        When another class has that name.
    """
    name = cls.mechanism()
    if _ACCOUNTANTS.get(name, cls) is not cls:
        raise ValueError(f"an accountant is already registered as {name!r}")
    _ACCOUNTANTS[name] = cls
    return cls


def accountant_names() -> tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(_ACCOUNTANTS))


def create_accountant(mechanism: str, **options: Any) -> Accountant:
    """A new accountant of the back-end registered as ``mechanism``, built with ``options``.

    Parameters
    ----------
    mechanism : str
        A registered name (:func:`accountant_names`).
    **options
        The back-end's own settings (e.g. ``sensitivity`` of ``"skellam"``).

    Raises
    ------
    ValueError
        For an unknown name (one line, with the registered ones).
    """
    if mechanism not in _ACCOUNTANTS:
        raise ValueError(f"no accountant {mechanism!r}: the registered ones are {', '.join(accountant_names())}")
    return _ACCOUNTANTS[mechanism](**options)
