"""One run-config option: its default, its one-line help and its valid range.

The global options (:mod:`flower_topics.run.config`) and every method's own options (its
wire module, registered in :mod:`flower_topics.methods`) are declared with
:class:`Option`; :func:`coerce` turns a value from the command line or a TOML file
into the option's type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from flower_topics.errors import UserInputError

ConfigValue = bool | int | float | str
Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Option:
    """One run-config key.

    Parameters
    ----------
    default : bool, int, float or str
        Value used when the key is not given; its type is the key's type.
    help : str
        One line shown in errors and in the README.
    check : callable, optional
        Returns an error text (what is wrong) for an invalid value, else None.
    infinite : bool, optional
        Whether ``inf`` is a meaningful value (a party refuses an infinity in a server's settings
        elsewhere, whatever ``check`` says).
    """

    default: ConfigValue
    help: str
    check: Check | None = None
    infinite: bool = False


def at_least(low: float) -> Check:
    """A check that the value is ``>= low``."""
    return lambda v: None if v >= low else f"must be >= {low}"


def positive(v: Any) -> str | None:
    """A check that the value is ``> 0``."""
    return None if v > 0 else "must be > 0"


def positive_finite(v: Any) -> str | None:
    """A check that the value is ``> 0`` and finite (a prior or a rate: ``inf`` has no meaning)."""
    return None if 0 < v < float("inf") else "must be > 0 and finite"


def in_range(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Check:
    """A check that the value lies in the interval from ``low`` to ``high``."""
    text = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    def check(v: Any) -> str | None:
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        return None if ok else f"must be in {text}"

    return check


def one_of(*choices: str) -> Check:
    """A check that the value is one of ``choices``."""
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


#: Integers a config value may hold: what numpy's int64 holds (seeds, counts and sizes end up there).
INT_RANGE = (-(2**63), 2**63 - 1)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a one-line message: no line breaks, cut to about ``limit`` characters.

    A hostile or broken input (a 50 MB header, a key with a newline) must not turn an error
    line into a wall of text.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def coerce(key: str, value: Any, option: Option, *, source: str = "run-config") -> ConfigValue:
    """``value`` as the type of ``option.default``, checked against its range.

    Parameters
    ----------
    key : str
        The key, for the message.
    value : Any
        The value as given (a string from the command line, or already typed).
    option : Option
        The key's declaration.
    source : str
        Where the key was set, for the message: ``"run-config"`` or ``"node-config"``.

    Raises
    ------
    UserInputError
        One line naming the key, the value and what is wrong.
    """
    kind = type(option.default)
    try:
        typed = _as_type(value, kind)
    except (TypeError, ValueError, OverflowError):
        raise UserInputError(
            f"{source} '{key}' = {shown(value)} is not a valid {kind.__name__}; e.g. {key}={option.default!r}"
        ) from None
    if kind is float and typed != typed:  # NaN: every comparison is False, so no range check can be trusted with it
        raise UserInputError(f"{source} '{key}' = {shown(value)} is not a number; e.g. {key}={option.default!r}")
    if kind is int and not INT_RANGE[0] <= typed <= INT_RANGE[1]:
        raise UserInputError(f"{source} '{key}' = {shown(value)} is out of the 64-bit integer range ({option.help})")
    problem = option.check(typed) if option.check else None
    if problem:
        raise UserInputError(f"{source} '{key}' = {shown(value)} {problem} ({option.help})")
    return typed


def _as_type(value: Any, kind: type) -> ConfigValue:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError(value)
    if kind is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)
    return str(value)
