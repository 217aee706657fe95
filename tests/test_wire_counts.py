"""Count matrices on the wire (flower_topics.wire.counts): exact round trip, the smaller form, strict decoding."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_topics.wire import counts
from flower_topics.wire.protocol import ReplyError

SHAPE = (3, 5)


@st.composite
def matrices(draw) -> np.ndarray:
    """Integer matrices of random shape, density and range (negative included), in any input dtype."""
    k, v = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    low = draw(st.sampled_from([0, -1, -100, -40_000, -(2 ** 31), -(2 ** 40)]))
    high = draw(st.sampled_from([1, 2, 255, 256, 70_000, 2 ** 32, 2 ** 40]))
    density = draw(st.floats(0.0, 1.0))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    matrix = rng.integers(low, high, size=(k, v), endpoint=True) * (rng.random((k, v)) < density)
    return matrix.astype(draw(st.sampled_from([np.int64, np.int32])) if abs(matrix).max(initial=0) < 2 ** 31
                         else np.int64)


def _nbytes(gaps: np.ndarray, values: np.ndarray) -> int:
    return gaps.nbytes + values.nbytes


@settings(max_examples=300, deadline=None)
@given(matrices())
def test_round_trip_is_exact_and_the_smaller_form_is_chosen(matrix):
    gaps, values = counts.encode(matrix)
    np.testing.assert_array_equal(counts.decode(gaps, values, matrix.shape), matrix)
    index, entries = counts.decode_entries(gaps, values, matrix.shape)  # the changed cells only, either form
    np.testing.assert_array_equal(index, np.flatnonzero(matrix))
    np.testing.assert_array_equal(entries, matrix.ravel()[index])
    assert index.dtype == entries.dtype == np.int64
    # the choice: no smaller of the two forms, each in its smallest dtypes, was left
    dense = matrix.size * counts.smallest_dtype(matrix.min(), matrix.max()).itemsize
    nonzero = np.flatnonzero(matrix)
    if nonzero.size:
        largest_gap = int(np.diff(nonzero, prepend=-1).max())
        gap_size = next(d.itemsize for d in counts.GAP_DTYPES if largest_gap <= np.iinfo(d).max)
        nz = matrix.ravel()[nonzero]
        sparse = nonzero.size * (gap_size + counts.smallest_dtype(nz.min(), nz.max()).itemsize)
    else:
        sparse = 0
    assert _nbytes(gaps, values) == min(dense, sparse)
    # and through a Flower record, as a message carries it
    record = counts.encode_record(matrix, "m")
    np.testing.assert_array_equal(counts.decode_record(record, "m", matrix.shape), matrix)


def test_the_smallest_dtype_holds_the_range():
    assert counts.smallest_dtype(0, 255) == np.uint8 and counts.smallest_dtype(0, 256) == np.uint16
    assert counts.smallest_dtype(0, 2 ** 32 - 1) == np.uint32 and counts.smallest_dtype(0, 2 ** 32) == np.int64
    assert counts.smallest_dtype(-128, 127) == np.int8 and counts.smallest_dtype(-129, 0) == np.int16
    assert counts.smallest_dtype(-1, 2 ** 31 - 1) == np.int32 and counts.smallest_dtype(-1, 2 ** 31) == np.int64
    with pytest.raises(ValueError):
        counts.smallest_dtype(0, 2 ** 64)


def test_forms_on_examples():
    zero = np.zeros((4, 1000), np.int32)
    gaps, values = counts.encode(zero)
    assert gaps.size == values.size == 0
    np.testing.assert_array_equal(counts.decode(gaps, values, zero.shape), zero)
    huge = zero.astype(np.int64)
    huge[3, 999] = 2 ** 40  # one huge value: sparse, one int64 entry, a uint16 gap
    gaps, values = counts.encode(huge)
    assert (gaps.dtype, values.dtype, gaps.tolist(), values.tolist()) == (np.uint16, np.int64, [4000], [2 ** 40])
    np.testing.assert_array_equal(counts.decode(gaps, values, huge.shape), huge)
    full = np.arange(-50, 50).reshape(4, 25)  # every cell but one nonzero: dense int8
    gaps, values = counts.encode(full)
    assert gaps.size == 0 and values.dtype == np.int8 and values.size == 100
    single = np.zeros((1, 1), np.int64)
    single[0, 0] = -7
    np.testing.assert_array_equal(counts.decode(*counts.encode(single), (1, 1)), single)


def test_refuses_non_integer_input():
    with pytest.raises(ValueError, match="integer"):
        counts.encode(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="integer"):
        counts.encode(np.zeros((2, 2), bool))


MATRIX = np.array([[0, 3, 0, 0, 1], [0, 0, 0, 0, 0], [2, 0, 0, 0, 0]])  # flat nonzero cells 1, 4, 10


def test_the_sparse_form_is_gaps_between_nonzero_cells():
    gaps, values = counts.encode(MATRIX)
    assert (gaps.dtype, gaps.tolist(), values.dtype, values.tolist()) == (np.uint8, [2, 3, 6], np.uint8, [3, 1, 2])
    for gap_dtype in counts.GAP_DTYPES:  # any unsigned gap dtype of the list decodes the same
        np.testing.assert_array_equal(counts.decode(gaps.astype(gap_dtype), values, SHAPE), MATRIX)


@pytest.mark.parametrize("gaps, values, problem", [
    (np.array([2, 3, 12], np.uint8), np.array([3, 1, 2], np.uint8), "beyond"),             # index 16 of 15 cells
    (np.array([2, 0, 6], np.uint8), np.array([3, 1, 2], np.uint8), "zero gap"),            # a repeated index
    (np.array([2, 3], np.uint8), np.array([3, 1, 2], np.uint8), "fit neither"),            # lengths disagree
    (np.zeros(0, np.uint8), np.zeros(14, np.uint8), "fit neither"),                        # dense of the wrong size
    (np.zeros(0, np.uint8), np.zeros(16, np.uint8), "fit neither"),
    (np.array([2, 3, 6], np.int8), np.array([3, 1, 2], np.uint8), "gaps have dtype"),      # signed gaps
    (np.array([2, 3, 6], np.uint64), np.array([3, 1, 2], np.uint8), "gaps have dtype"),
    (np.array([2, 3, 6], np.uint8), np.array([3, 1, 2], np.float32), "values have dtype"),
    (np.array([2, 3, 6], np.uint8), np.array([3, 1, 2], np.uint64), "values have dtype"),
    (np.array([2, 3, 6], np.uint8), np.array([3, 1, 2], ">i4"), "values have dtype"),     # byte-swapped
    (np.array([2, 3, 6], np.uint8), np.array([True, True, True]), "values have dtype"),
    (np.array([2, 3, 6], np.uint8), np.array([3, 0, 2], np.uint8), "explicit zero"),
    (np.array([[2, 3, 6]], np.uint8), np.array([3, 1, 2], np.uint8), "1-D"),               # a 2-D array
    (np.array([2, 3, 6], np.uint8), np.array([[3, 1, 2]], np.uint8), "1-D"),
    (np.ones(16, np.uint8), np.ones(16, np.uint8), "16 sparse entries for 15 cells"),
])
def test_decode_refuses_hostile_input(gaps, values, problem):
    with pytest.raises(ReplyError, match=problem):
        counts.decode(gaps, values, (3, 5))
    with pytest.raises(ReplyError, match=problem):
        counts.decode_entries(gaps, values, (3, 5))


def test_decode_refuses_values_out_of_bounds_instead_of_wrapping():
    gaps, values = counts.encode(np.array([[0, -5], [2 ** 31, 0]]))
    with pytest.raises(ReplyError, match="outside"):
        counts.decode(gaps, values, (2, 2), dtype=np.int32)  # 2^31 does not fit int32
    with pytest.raises(ReplyError, match="outside"):
        counts.decode(gaps, values, (2, 2), minimum=0)  # counts may not be negative
    np.testing.assert_array_equal(counts.decode(gaps, values, (2, 2)), [[0, -5], [2 ** 31, 0]])
    dense_gaps, dense_values = np.zeros(0, np.uint8), np.array([0, 300, 1, 2], np.uint16)
    with pytest.raises(ReplyError, match="outside"):
        counts.decode(dense_gaps, dense_values, (2, 2), maximum=299)


@pytest.mark.parametrize("density", [0.05, 1.0])  # the sparse form, then the dense one
def test_decode_into_a_work_array_overwrites_what_it_held(density):
    rng = np.random.default_rng(3)
    matrix = (rng.integers(1, 300, size=(4, 50)) * (rng.random((4, 50)) < density)).astype(np.int32)
    gaps, values = counts.encode(matrix)
    assert (gaps.size > 0) == (density < 1)
    out = np.full((4, 50), -7, np.int32)  # a stale work array
    assert counts.decode(gaps, values, (4, 50), dtype=np.int32, out=out) is out
    np.testing.assert_array_equal(out, matrix)
    with pytest.raises(ValueError, match="C-contiguous int64 array of shape"):
        counts.decode(gaps, values, (4, 50), out=out)  # the default dtype is int64
    hostile = np.concatenate([gaps, [0]]).astype(gaps.dtype), np.concatenate([values, [1]]).astype(values.dtype)
    out[...] = 5
    with pytest.raises(ReplyError):
        counts.decode(*hostile, (4, 50), dtype=np.int32, out=out)
    assert (out == 5).all()  # a refused form writes nothing


@pytest.mark.parametrize("density", [0.05, 1.0])  # the sparse form, then the dense one
def test_decode_transposed_gives_the_exact_transpose(density):
    """A receiver that works on the columns (an lda party's word-major counts) gets the matrix's transpose, also
    written into a stale work array, and a refused form writes nothing there either."""
    rng = np.random.default_rng(5)
    matrix = (rng.integers(1, 70_000, size=(5, 37)) * (rng.random((5, 37)) < density)).astype(np.int32)
    gaps, values = counts.encode(matrix)
    assert (gaps.size > 0) == (density < 1)
    fresh = counts.decode(gaps, values, (5, 37), dtype=np.int32, transposed=True)
    assert fresh.shape == (37, 5) and fresh.flags.c_contiguous and fresh.dtype == np.int32
    np.testing.assert_array_equal(fresh, matrix.T)
    out = np.full((37, 5), -7, np.int32)
    assert counts.decode(gaps, values, (5, 37), dtype=np.int32, out=out, transposed=True) is out
    np.testing.assert_array_equal(out, matrix.T)
    with pytest.raises(ValueError, match=r"shape \(37, 5\)"):
        counts.decode(gaps, values, (5, 37), dtype=np.int32, out=np.zeros((5, 37), np.int32), transposed=True)
    hostile = np.concatenate([gaps, [0]]).astype(gaps.dtype), np.concatenate([values, [1]]).astype(values.dtype)
    out[...] = 5
    with pytest.raises(ReplyError):
        counts.decode(*hostile, (5, 37), dtype=np.int32, out=out, transposed=True)
    assert (out == 5).all()


def test_decoding_against_a_lying_shape_is_refused():
    """No shape travels: a matrix encoded for one shape does not decode as another, except when it fits."""
    gaps, values = counts.encode(np.arange(15).reshape(3, 5))  # dense uint8, 15 values
    with pytest.raises(ReplyError):
        counts.decode(gaps, values, (4, 5))
    gaps, values = counts.encode(MATRIX)  # sparse, last index 10
    with pytest.raises(ReplyError, match="beyond"):
        counts.decode(gaps, values, (2, 5))


def test_decode_record_refuses_wrong_keys_metadata_and_malformed_bytes():
    record = counts.encode_record(MATRIX, "m")
    with pytest.raises(ReplyError, match="exactly the arrays"):
        counts.decode_record(record, "other", SHAPE)
    extra = ArrayRecord({**dict(record.items()), "m": Array(MATRIX)})
    with pytest.raises(ReplyError, match="exactly the arrays"):
        counts.decode_record(extra, "m", SHAPE)
    with pytest.raises(ReplyError, match="exactly the arrays"):
        counts.decode_record(ArrayRecord({"m": Array(MATRIX)}), "m", SHAPE)  # the old dense int32 form
    gaps_key, values_key = counts.keys("m")
    good = record[values_key]
    lying = Array(dtype="int64", shape=(3,), stype=good.stype, data=good.data)  # metadata that disagrees
    with pytest.raises(ReplyError, match="says dtype"):
        counts.decode_record(ArrayRecord({gaps_key: record[gaps_key], values_key: lying}), "m", SHAPE)
    lying_shape = Array(dtype=good.dtype, shape=(99,), stype=good.stype, data=good.data)
    with pytest.raises(ReplyError, match="says dtype"):
        counts.decode_record(ArrayRecord({gaps_key: record[gaps_key], values_key: lying_shape}), "m", SHAPE)
    truncated = Array(dtype=good.dtype, shape=good.shape, stype=good.stype, data=good.data[:-1])
    with pytest.raises(ReplyError, match="not a numpy array"):
        counts.decode_record(ArrayRecord({gaps_key: record[gaps_key], values_key: truncated}), "m", SHAPE)
    garbage = Array(dtype=good.dtype, shape=good.shape, stype=good.stype, data=b"\x00" * 40)
    with pytest.raises(ReplyError, match="not a numpy array"):
        counts.decode_record(ArrayRecord({gaps_key: record[gaps_key], values_key: garbage}), "m", SHAPE)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=64), st.sampled_from(["uint8", "uint16", "uint32", "int8"]),
       st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint32", "float64"]))
def test_random_bytes_decode_to_a_valid_matrix_or_a_reply_error(gaps_bytes, values_bytes, gaps_dtype, values_dtype):
    """Whatever arrays a sender builds: a ReplyError, or a matrix of the shape, entries within bounds."""
    gaps_dtype, values_dtype = np.dtype(gaps_dtype), np.dtype(values_dtype)
    gaps = np.frombuffer(gaps_bytes[: len(gaps_bytes) // gaps_dtype.itemsize * gaps_dtype.itemsize], gaps_dtype)
    values = np.frombuffer(values_bytes[: len(values_bytes) // values_dtype.itemsize * values_dtype.itemsize],
                           values_dtype)
    try:
        matrix = counts.decode(gaps, values, (2, 4), dtype=np.int32, minimum=-1000, maximum=1000)
    except ReplyError:
        return
    assert matrix.shape == (2, 4) and matrix.dtype == np.int32
    assert matrix.min() >= -1000 and matrix.max() <= 1000
    assert np.count_nonzero(matrix) == (values.size if gaps.size else np.count_nonzero(values))
    np.testing.assert_array_equal(counts.decode(*counts.encode(matrix), (2, 4)), matrix)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
def test_every_integer_input_dtype_encodes_its_nonzero_cells_in_order(dtype):
    """The compiled scan (range, nonzero count, then the nonzero cells without a branch) against numpy's
    flatnonzero, for each integer dtype a caller may hand in; a last cell nonzero and zero both."""
    rng = np.random.default_rng(5)
    for last in (0, 1):
        matrix = (rng.integers(0, 100, size=(7, 300)) * (rng.random((7, 300)) < 0.05)).astype(dtype)
        if np.issubdtype(dtype, np.signedinteger):
            matrix[0, :5] = -np.arange(1, 6, dtype=dtype)
        matrix[-1, -1] = last
        gaps, values = counts.encode(matrix)
        nonzero = np.flatnonzero(matrix)
        assert gaps.size == nonzero.size  # sparse at this density
        np.testing.assert_array_equal(np.cumsum(gaps.astype(np.int64)) - 1, nonzero)
        np.testing.assert_array_equal(values.astype(np.int64), matrix.ravel()[nonzero].astype(np.int64))
        np.testing.assert_array_equal(counts.decode(gaps, values, matrix.shape), matrix.astype(np.int64))
