"""Integer count matrices on the wire: dense in the smallest integer dtype, or sparse, whichever is smaller.

A ``K x V`` integer matrix (topic-word counts, or a change of them) travels under a key
``<key>`` as two 1-D arrays, always both, always under these names:

- ``<key>.gaps`` (:func:`keys`): an unsigned integer array (uint8, uint16 or uint32);
- ``<key>.values``: an integer array (int8, int16, int32, int64, uint8, uint16 or uint32).

Two forms, told apart by the length of ``gaps``:

- **dense**: ``gaps`` is empty and ``values`` holds all ``K x V`` entries in row-major order,
  in the smallest dtype that holds the matrix's range (unsigned when no entry is negative);
- **sparse**: ``gaps`` and ``values`` have one entry per nonzero cell, in increasing order of
  the cell's flat (row-major) index ``i``: ``values`` the cell's value, in the smallest dtype
  that holds the nonzero values' range, and ``gaps`` the distance ``i - i_prev`` to the previous
  nonzero cell (``i_prev = -1`` before the first), in the smallest unsigned dtype that holds the
  largest distance. Every gap is at least 1, so the indices strictly increase (none repeats).

The all-zero matrix is the sparse form with no entry. :func:`encode` picks the form with fewer
bytes of array data (the dense form on a tie). No shape travels: the receiver decodes against
the shape it expects (K from the settings, V from the agreed vocabulary), so a sender cannot
make it build a matrix of another size.

:func:`decode` is strict, since the server decodes replies of parties it does not trust and a
party decodes what the server sends. It raises :class:`~flower_topics.wire.protocol.ReplyError`
(a :class:`ValueError`) naming the problem for: an array that is not 1-D, a dtype outside the
lists above (including byte-swapped ones), lengths that fit neither form, a zero gap (a repeated
index), an index beyond the matrix, an explicit zero in the sparse form, and a value outside the
receiver's bounds or its output dtype. What it returns is exactly the matrix that was encoded.

What the two forms reveal is the same: the sparse form lists the nonzero cells, which the dense
form shows as nonzero entries. The byte count of a reply does tell its number of nonzero
cells, which the dense form holds too. Under secure aggregation a party's update is masked
and must not be sparse (its support would show through the masks): that path sends the dense
matrix as it is (:mod:`flower_topics.secure_sum`), never this encoding.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

from flower_topics.wire.protocol import ArraySpec, ReplyError

#: Unsigned dtypes a gap may have, smallest first.
GAP_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32))
#: Dtypes the values may have.
VALUE_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32))
_UNSIGNED = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32))
_SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))


def counts_kernels() -> ModuleType:
    """The compiled kernels (:mod:`flower_topics.wire.counts_kernels`), imported on first use: numba is not
    imported by a process that only parses a config or handles messages without count matrices."""
    return import_module("flower_topics.wire.counts_kernels")


def keys(key: str) -> tuple[str, str]:
    """The two array names a matrix sent under ``key`` travels as: ``(<key>.gaps, <key>.values)``."""
    return f"{key}.gaps", f"{key}.values"


def smallest_dtype(low: int, high: int) -> np.dtype:
    """The smallest dtype of :data:`VALUE_DTYPES` that holds every integer in ``[low, high]``.

    Unsigned (uint8, uint16, uint32) when ``low >= 0``, then int64; signed otherwise.

    Raises
    ------
    ValueError
        When not even int64 holds the range.
    """
    low, high = int(low), int(high)
    for dtype in (_UNSIGNED + _SIGNED[-1:]) if low >= 0 else _SIGNED:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    raise ValueError(f"no integer dtype of the wire holds the range [{low}, {high}]")


def encode(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smaller wire form of an integer matrix: ``(gaps, values)`` (see the module docstring).

    Parameters
    ----------
    matrix : np.ndarray
        Integer array of any shape (flattened in row-major order); bool is refused.

    Returns
    -------
    (np.ndarray, np.ndarray)
        ``gaps`` (empty for the dense form) and ``values``.

    Raises
    ------
    ValueError
        For a non-integer array, or entries that not even int64 holds.
    """
    matrix = np.asarray(matrix)
    if not np.issubdtype(matrix.dtype, np.integer):
        raise ValueError(f"only integer matrices go on the wire, got dtype {matrix.dtype}")
    flat = matrix.ravel()
    if flat.size == 0:
        return np.zeros(0, GAP_DTYPES[0]), np.zeros(0, np.uint8)
    low, high, count = counts_kernels().range_and_nonzeros(flat)
    dense_dtype = smallest_dtype(low, high)
    if count == 0:
        return np.zeros(0, GAP_DTYPES[0]), np.zeros(0, np.uint8)
    nonzero, nonzero_values = _nonzero(flat, count)
    value_dtype = smallest_dtype(nonzero_values.min(), nonzero_values.max())
    gaps = np.diff(nonzero, prepend=-1)
    largest_gap = int(gaps.max())
    gap_dtype = next((d for d in GAP_DTYPES if largest_gap <= np.iinfo(d).max), None)
    dense_bytes = flat.size * dense_dtype.itemsize
    if gap_dtype is not None and nonzero.size * (gap_dtype.itemsize + value_dtype.itemsize) < dense_bytes:
        return gaps.astype(gap_dtype), nonzero_values.astype(value_dtype)
    return np.zeros(0, GAP_DTYPES[0]), flat.astype(dense_dtype)


def _nonzero(flat: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The flat indices (int64, increasing) and the values of the ``count`` nonzero entries of 1-D ``flat``."""
    index, values = np.empty(count + 1, np.int64), np.empty(count + 1, flat.dtype)
    counts_kernels().nonzero_cells(flat, index, values)
    return index[:count], values[:count]


def decode(gaps: np.ndarray, values: np.ndarray, shape: tuple[int, ...], *, dtype: np.dtype | type = np.int64,
           minimum: int | None = None, maximum: int | None = None, what: str = "matrix",
           out: np.ndarray | None = None, transposed: bool = False) -> np.ndarray:
    """The exact matrix of a wire form, after checking it (see the module docstring).

    Parameters
    ----------
    gaps, values : np.ndarray
        The two arrays as received.
    shape : tuple of int
        The shape the receiver expects (not taken from the sender).
    dtype : numpy integer dtype
        Dtype of the returned matrix; a value it cannot hold is refused, never wrapped.
    minimum, maximum : int, optional
        Bounds (inclusive) every entry must meet; must admit 0. Default: ``dtype``'s range.
    what : str
        What the matrix is, for error messages.
    out : np.ndarray, optional
        A C-contiguous array of ``shape`` (reversed when ``transposed``) and ``dtype`` to write the matrix into
        (it is written only once the wire form has passed every check); a new one by default.
    transposed : bool
        Return the matrix's transpose instead, C-contiguous (a receiver that reads the matrix by columns);
        the sparse form's cells are written there directly.

    Returns
    -------
    np.ndarray
        The matrix (or its transpose), of ``dtype`` (``out`` when given).

    Raises
    ------
    ReplyError
        Naming the first problem (see the module docstring).
    """
    dtype = np.dtype(dtype)
    out_shape = tuple(shape)[::-1] if transposed else tuple(shape)
    if out is not None and (out.shape != out_shape or out.dtype != dtype or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous {dtype} array of shape {out_shape}")
    index, entries = _checked(gaps, values, shape, dtype, minimum, maximum, what)
    if index is None:  # the dense form
        matrix = entries.reshape(shape).T if transposed else entries.reshape(shape)
        if out is None:
            return matrix.astype(dtype, order="C")
        np.copyto(out, matrix, casting="unsafe")  # every value checked to fit dtype
        return out
    if out is None:
        out = np.zeros(out_shape, dtype)
    else:
        out.fill(0)
    if transposed:
        counts_kernels().scatter_transposed(index, entries, shape[0], shape[1], out.reshape(-1))
    else:
        out.reshape(-1)[index] = entries
    return out


def decode_entries(gaps: np.ndarray, values: np.ndarray, shape: tuple[int, ...], *,
                   dtype: np.dtype | type = np.int64, minimum: int | None = None, maximum: int | None = None,
                   what: str = "matrix") -> tuple[np.ndarray, np.ndarray]:
    """The nonzero cells of a wire form, after the checks of :func:`decode`: their flat row-major indices
    (int64, strictly increasing) and their values (``dtype``).

    For a receiver that adds a sparse change to a matrix it holds: the work is in the number of cells the sender
    changed, not in the matrix's size (a dense form costs one pass over it, as :func:`decode` does).
    Parameters and errors as :func:`decode`.
    """
    dtype = np.dtype(dtype)
    index, entries = _checked(gaps, values, shape, dtype, minimum, maximum, what)
    if index is None:
        index, entries = _nonzero(entries, int(np.count_nonzero(entries)))
    return index.astype(np.int64, copy=False), entries.astype(dtype)


def _checked(gaps: np.ndarray, values: np.ndarray, shape: tuple[int, ...], dtype: np.dtype,
             minimum: int | None, maximum: int | None, what: str) -> tuple[np.ndarray | None, np.ndarray]:
    """``(None, values)`` of a valid dense form, ``(flat indices, values)`` of a valid sparse one (see
    :func:`decode`)."""
    info = np.iinfo(dtype)
    low = info.min if minimum is None else max(int(minimum), info.min)
    high = info.max if maximum is None else min(int(maximum), info.max)
    if not low <= 0 <= high:
        raise ValueError("the bounds of a count matrix must admit 0")
    size = int(np.prod(shape, dtype=np.int64))
    for name, array in (("gaps", gaps), ("values", values)):
        if not isinstance(array, np.ndarray) or array.ndim != 1:
            raise ReplyError(f"{what}: '{name}' must be a 1-D array, got shape {getattr(array, 'shape', None)}")
    if gaps.dtype not in GAP_DTYPES:
        raise ReplyError(f"{what}: gaps have dtype {gaps.dtype}, expected one of uint8, uint16, uint32")
    if values.dtype not in VALUE_DTYPES:
        raise ReplyError(f"{what}: values have dtype {values.dtype}, expected a native int8-int64 or uint8-uint32")
    if gaps.size == 0 and values.size == size:  # dense
        _check_range(values, low, high, what)
        return None, values
    if gaps.size != values.size:
        raise ReplyError(f"{what}: {gaps.size} gaps and {values.size} values fit neither the dense form "
                         f"({size} values, no gap) nor the sparse one (as many gaps as values)")
    if gaps.size == 0:
        return np.zeros(0, np.int64), values
    if gaps.size > size:
        raise ReplyError(f"{what}: {gaps.size} sparse entries for {size} cells")
    if gaps.min() == 0:
        raise ReplyError(f"{what}: a zero gap (a cell listed twice)")
    index = np.cumsum(gaps, dtype=np.int64) - 1  # strictly increasing: gaps >= 1, at most size * 2^32 < 2^63
    if index[-1] >= size:
        raise ReplyError(f"{what}: a cell index {int(index[-1])} beyond the {size} cells of a {shape} matrix")
    if not np.all(values):
        raise ReplyError(f"{what}: an explicit zero in the sparse form")
    _check_range(values, low, high, what)
    return index, values


def _check_range(values: np.ndarray, low: int, high: int, what: str) -> None:
    if values.size and (int(values.min()) < low or int(values.max()) > high):
        raise ReplyError(f"{what}: entries in [{int(values.min())}, {int(values.max())}], outside [{low}, {high}]")


def encode_arrays(matrix: np.ndarray, key: str) -> dict[str, np.ndarray]:
    """``{<key>.gaps: gaps, <key>.values: values}`` of :func:`encode`."""
    return dict(zip(keys(key), encode(matrix)))


def decode_arrays(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...], **bounds: object
                  ) -> np.ndarray:
    """:func:`decode` of ``arrays``, which must hold exactly the two arrays of ``key`` (``bounds``: its keywords)."""
    return decode(*_pair(arrays, key), shape, **bounds)  # type: ignore[arg-type]


def decode_arrays_entries(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...], **bounds: object
                          ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decode_entries` of ``arrays``, which must hold exactly the two arrays of ``key``."""
    return decode_entries(*_pair(arrays, key), shape, **bounds)  # type: ignore[arg-type]


def _pair(arrays: Mapping[str, np.ndarray], key: str) -> tuple[np.ndarray, np.ndarray]:
    expected = set(keys(key))
    if set(arrays) != expected:
        raise ReplyError(f"expected exactly the arrays {sorted(expected)}, got {sorted(arrays)}")
    gaps_key, values_key = keys(key)
    return arrays[gaps_key], arrays[values_key]


def encode_record(matrix: np.ndarray, key: str) -> ArrayRecord:
    """:func:`encode_arrays` as an :class:`~flwr.app.ArrayRecord`."""
    return ArrayRecord({name: Array(array) for name, array in encode_arrays(matrix, key).items()})


def decode_record(record: ArrayRecord, key: str, shape: tuple[int, ...], **bounds: object) -> np.ndarray:
    """:func:`decode_arrays` of a received :class:`~flwr.app.ArrayRecord`.

    Each Array's bytes carry their own dtype and shape (numpy's format), which are what count;
    an Array whose separate dtype or shape metadata disagrees with them, or whose bytes are not a
    numpy array, is refused as well.
    """
    arrays = {}
    for name, array in record.items():
        try:
            loaded = array.numpy()
        except Exception as exc:  # np.load of untrusted bytes: malformed header, truncated data, pickles
            raise ReplyError(f"'{name}' is not a numpy array ({type(exc).__name__})") from None
        if array.dtype != str(loaded.dtype) or tuple(array.shape) != loaded.shape:
            raise ReplyError(f"'{name}' says dtype {array.dtype} shape {tuple(array.shape)}, its data holds "
                             f"{loaded.dtype} {loaded.shape}")
        arrays[name] = loaded
    return decode_arrays(arrays, key, shape, **bounds)


def array_specs(key: str, what: str) -> dict[str, ArraySpec]:
    """The :class:`~flower_topics.wire.protocol.ArraySpec` of both arrays of ``key``, for a ReplySpec.

    They check only what a spec can (integer, 1-D, gaps >= 1); :func:`decode` checks the rest.
    """
    gaps_key, values_key = keys(key)
    return {gaps_key: ArraySpec("integer", (None,), low=1, what=f"{what}: gaps between nonzero cells"),
            values_key: ArraySpec("integer", (None,), what=f"{what}: values")}


def max_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Most bytes of array data an encoding chosen by :func:`encode` takes, with entries of at most ``itemsize``
    bytes: the dense form's (the sparse form is only chosen when smaller)."""
    return int(np.prod(shape, dtype=np.int64)) * itemsize
