"""Split a batch of documents over threads for a compiled kernel that releases the GIL.

Kernels that treat each document on its own (the fold-in EM, the SVI E-step) give the same bits
for any split: each thread runs the kernel on a contiguous run of documents, with about as many
nonzero document-term counts in each run.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

#: Fewest nonzero document-term counts for which a batch is split over threads by default.
PARALLEL_MIN_ENTRIES = 4_000


def over_documents(indptr: np.ndarray, run: Callable[[int, int], None], threads: int | None = None) -> None:
    """Call ``run(first, last)`` on contiguous runs of documents, on ``threads`` threads at once.

    Parameters
    ----------
    indptr : np.ndarray
        The CSR row pointer of the ``D x V`` counts (``D + 1`` entries).
    run : callable
        ``run(first, last)`` treats documents ``first`` to ``last - 1``; it must release the GIL
        to run in parallel and write only to those documents' outputs.
    threads : int, optional
        Default numba's thread count (the cores, or ``NUMBA_NUM_THREADS``), one for fewer than
        :data:`PARALLEL_MIN_ENTRIES` nonzero counts.
    """
    n_docs, nnz = indptr.size - 1, int(indptr[-1])
    if threads is None:
        threads = numba.get_num_threads() if nnz >= PARALLEL_MIN_ENTRIES else 1
    inner = np.searchsorted(indptr, np.linspace(0, nnz, max(1, threads) + 1)[1:-1], side="left")
    bounds = np.unique(np.concatenate([[0], inner, [n_docs]]))  # every document in one run
    chunks = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    if len(chunks) <= 1:
        for first, last in chunks:
            run(first, last)
        return
    with ThreadPoolExecutor(len(chunks)) as pool:
        for future in [pool.submit(run, first, last) for first, last in chunks]:
            future.result()
