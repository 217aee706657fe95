"""Work arrays reused from call to call (flower_topics.numeric.work_arrays)."""

from __future__ import annotations

import threading

import numpy as np

from flower_topics.numeric import work_arrays as scratch


def test_the_same_name_shape_and_dtype_get_the_same_memory_back():
    first = scratch.array("test.a", (3, 4), np.int32)
    first[...] = 9
    again = scratch.array("test.a", (3, 4), np.int32)
    assert again is first and (again == 9).all()  # contents are what the last user left
    assert scratch.array("test.b", (3, 4), np.int32) is not first  # another name: another array


def test_another_shape_or_dtype_replaces_the_kept_array():
    first = scratch.array("test.c", (3, 4), np.int32)
    other = scratch.array("test.c", (4, 3), np.int32)
    assert other.shape == (4, 3) and not np.shares_memory(first, other)
    wider = scratch.array("test.c", (4, 3), np.int64)
    assert wider.dtype == np.int64 and wider.flags.c_contiguous


def test_each_thread_has_its_own_arrays():
    mine = scratch.array("test.d", (5,), np.float64)
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(scratch.array("test.d", (5,), np.float64)))
    thread.start()
    thread.join()
    assert not np.shares_memory(mine, theirs[0])
