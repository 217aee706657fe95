"""Work arrays a hot path reuses from call to call, so that it does not map a fresh large array every time.

Flower's processes run with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 4 MiB
(:data:`flower_topics.simulations.local_superlink.MALLOC_MMAP_THRESHOLD`, which keeps freed memory from piling up
in the heap), so every array above it is a fresh ``mmap``: its pages are faulted in and zeroed
by the kernel at first touch and unmapped when it is freed, at every call of a hot path that
makes ``K x V`` arrays (an ``lda`` round makes several per party). A hot path
instead asks :func:`array` for its work arrays by name: the same memory is handed back at the
next call with the same name, shape and dtype in the same thread.

The contents of an array from :func:`array` are whatever its last user left: a caller writes
every element it reads, and never hands the array out of the call that asked for it (the
next call with the name overwrites it).
"""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


def array(name: str, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A C-contiguous, uninitialized work array kept for this thread under ``name``.

    Parameters
    ----------
    name : str
        Who uses it (one name per use; two arrays alive at once need two names).
    shape : tuple of int
        Its shape; a call with another shape or dtype replaces the kept array.
    dtype : numpy dtype
        Its dtype.

    Returns
    -------
    np.ndarray
        The kept array, holding whatever its last user wrote.
    """
    kept: dict[str, np.ndarray] = _local.__dict__.setdefault("arrays", {})
    current = kept.get(name)
    dtype = np.dtype(dtype)
    if current is None or current.shape != tuple(shape) or current.dtype != dtype:
        kept.pop(name, None)  # freed before the new one is made
        current = kept[name] = np.empty(shape, dtype)
    return current
