"""The split of a batch of documents over threads: every document in exactly one run, in order."""

import numpy as np
import pytest

from flower_topics.numeric.document_threads import over_documents


@pytest.mark.parametrize("lengths", [[], [0], [0, 0, 0], [5, 0, 0], [0, 0, 7], [3, 1, 4, 1, 5, 9, 2, 6], [100, 1, 1]])
@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_every_document_is_in_exactly_one_run_even_when_documents_are_empty(lengths, threads):
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    runs = []
    over_documents(indptr, lambda first, last: runs.append((first, last)), threads)
    covered = [d for first, last in sorted(runs) for d in range(first, last)]
    assert covered == list(range(len(lengths)))  # before, a batch of empty documents was never run
    assert all(last > first for first, last in runs) and len(runs) <= max(1, threads)
