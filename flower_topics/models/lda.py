"""Collapsed Gibbs sampling for LDA at compiled speed (numba).

The full conditional of a token's topic (Griffiths & Steyvers 2004, eq. 5)::

    p(z_i = k | z_-i, w) ∝ (n_dk + alpha) (n_kw + beta) / (n_k + V beta)

with every count taken without token i. With seed words (guided topics,
:mod:`flower_topics.models.seed_words`) the prior is asymmetric: ``beta`` becomes ``beta_kw``
and ``V beta`` the topic's prior mass ``B_k = sum_w beta_kw``; both kernels draw from that
conditional exactly, and a corpus without seeds takes the same code path as before (one
branch per token on an empty array). The same kernels serve the centralized
trainer (counts of one corpus) and the federated client, which conditions on the
*global* counts of all clients and updates its copy in place as its own tokens
move (AD-LDA, Newman et al. 2009, eq. 1-3).

Two exact kernels draw from that conditional (:data:`KERNELS`; ``"auto"`` picks by K
and the mean document length, see :func:`choose_kernel`):

- ``"dense"``: the conditional of all K topics, O(K) per token, in document order,
  with float32 probabilities summed in SIMD lanes (:func:`_make_dense_kernel`).
  Fastest at small K.
- ``"sparse"``: the two-bucket decomposition of F+LDA (Yu et al. 2015, word-by-word
  order; the same split SparseLDA, Yao, Mimno and McCallum 2009, makes into buckets)::

      p(k) ∝ n_dk q_w(k) + alpha q_w(k),   q_w(k) = (n_kw + beta) / (n_k + V beta)

  The first bucket is non-zero only on the document's own topics (at most its
  length) and is summed over the document's sparse topic list; the second, dense
  in K, lives in a sum tree (F+ tree) over ``q_w`` that is built once per word and
  updated in O(log K) when a token of that word moves. Tokens are visited grouped by
  word (each word's tokens in document order), so the tree is rebuilt once per
  distinct word. O(min(K, doc length) + log K) per token; still an exact Gibbs
  draw, only the visiting order of the (systematic-scan) sweep differs.

Randomness comes from a :class:`numpy.random.Generator`: one uniform per token and
sweep is drawn in numpy and handed to the kernel, so a run is reproducible from its
seed and kernel, and independent of numba's global generator.
"""

from __future__ import annotations

import functools
from typing import Callable, Literal

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from flower_topics.numeric import work_arrays as scratch
from flower_topics.data.corpus import Corpus
from flower_topics.models.seed_words import SeedPrior
from flower_topics.models.topic_word import normalize_rows

#: The sampling kernels; both draw every token from its exact full conditional.
KERNELS = ("auto", "dense", "sparse")

#: ``kernel="auto"`` uses the sparse kernel from ``max(SPARSE_MIN_TOPICS,
#: SPARSE_PER_DOC_LENGTH x mean document length)`` topics on: the sparse kernel's work per
#: token grows with the topics a document holds (at most its length), the dense kernel's
#: with K. The crossover is measured by ``benchmarks/bench_sampler.py --kernels dense sparse``.
SPARSE_MIN_TOPICS = 500
SPARSE_PER_DOC_LENGTH = 8.0


#: Reassociation lets LLVM vectorize the sums over topics; every draw still comes from the
#: exact conditional (only the rounding of the sums differs from a left-to-right loop).
_FASTMATH = {"reassoc", "contract", "nsz"}

#: How many tokens ahead the kernels prefetch the memory a token will read at random.
_AHEAD = 8


@intrinsic
def _prefetch(typingctx, array, index):  # pragma: no cover - numba
    """Hint the CPU to fetch ``array[index]`` into cache (LLVM's prefetch; no effect on results)."""
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]], wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0")
        # read access, high temporal locality, data cache
        builder.call(function, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0),
                                ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


#: Lanes of the dense kernel: topic j is in lane ``j % lanes``, and a token's probabilities
#: are summed per lane (one SIMD vector of float32: 8 for AVX2), so that the sums vectorize.
#: Up to ``_FEW_TOPICS`` topics 4 lanes pad less and search fewer lane sums, and K is a
#: compile-time constant (:func:`_dense_kernel_for`); ``benchmarks/bench_sampler.py`` measures both.
_LANES = 8
_FEW_TOPICS = 32


@njit(inline="always")
def _recip(x):  # pragma: no cover - numba
    """``1 / x`` rounded to float32, 0 where ``x <= 0`` (a topic no token can leave)."""
    return np.float32(1.0 / x) if x > 0 else np.float32(0.0)


def _make_dense_kernel(lanes: int, topics: int = 0, seeded: bool = False) -> Callable[..., None]:
    """The dense kernel with ``lanes`` lanes and, if ``topics`` > 0, that many topics, both compile-time
    constants (numba caches each kernel by them); ``topics=0``: K taken from the counts at run time.
    ``seeded``, a compile-time constant too: whether ``seed_rows`` may name seed words; without, the
    kernel compiles without the seed words' branch (as fast as the symmetric prior's own kernel)."""

    @njit(cache=True, nogil=True, fastmath=_FASTMATH)
    def dense_kernel(tokens, doc_ids, z, dk, wk, nk, alpha, beta, v_beta, seed_rows, seed_beta,
                     uniforms):  # pragma: no cover - numba
        """Resample ``z[t]`` (word ``tokens[t]`` of document ``doc_ids[t]``) for every t in turn.

        Each draw is from the full conditional over all K topics,
        ``p(k) ∝ (n_dk + alpha)(n_kw + beta_kw) / (n_k + B_k)``, with the token's own
        count taken out. The prior: ``beta_kw = beta`` for a word with ``seed_rows[w] < 0`` (every word
        when ``seed_rows`` is empty), else ``seed_beta[seed_rows[w], k]`` (float32, ``width`` columns, see
        :mod:`flower_topics.models.seed_words`); ``B_k = v_beta[k]`` (float64, K).
        The counts are exact integers, updated in place: ``dk`` is
        ``n_dk`` (D x K int32), ``wk`` is ``n_wk`` (V x K int32, word-major: a token reads
        one contiguous row), ``nk`` is ``n_k`` (K int64). Both int32 arrays must be followed
        in memory by at least ``lanes - 1`` more entries (any values, see :func:`_with_slack`):
        rows are read up to the next multiple of ``lanes`` topics, where a zero reciprocal
        makes the extra terms exactly 0.

        Precision: each term is computed in float32 (counts converted exactly below 2**24,
        ``1 / (n_k + V beta)`` computed in float64 and rounded to float32) and summed in
        float32; ``uniforms[t]`` (float32 in [0, 1), 24 random bits) drives the draw of
        token t. So every draw is exact up to float32 rounding of the probabilities and
        their sums (about 1e-7 of the total each).

        The sums run per lane (topic j in lane ``j % lanes``): ``cum[lanes + j]`` is the
        sum of the terms of lane ``j % lanes`` up to topic j, a loop with dependence
        distance ``lanes`` that vectorizes. The search takes the lane by its share of the total, then the
        topic within the lane, each by counting cumulative sums <= u (no branches). The
        reciprocals of ``n_k - 1``, ``n_k`` and ``n_k + 1`` (plus V beta) are kept per topic,
        so that a token's move needs no division before its probabilities: the divisions
        that refill them are off the path to the next draw. The document's factor
        ``(n_dk + alpha) / (n_k + V beta)`` is kept per topic too (``weight``): made in full
        when the document changes, and for the token's old and new topic at each move, so
        that a token's loop over topics reads one row of counts, not two.
        """
        n_topics = topics if topics else nk.shape[0]
        width = (n_topics + lanes - 1) // lanes * lanes
        inv = np.zeros(width, np.float32)  # 1 / (n_k + B_k), 0 on the padding topics
        inv_less = np.zeros(n_topics, np.float32)  # 1 / (n_k - 1 + B_k)
        inv_more = np.zeros(n_topics, np.float32)  # 1 / (n_k + 1 + B_k)
        for k in range(n_topics):
            inv[k] = _recip(nk[k] + v_beta[k])
            inv_less[k] = _recip(nk[k] - 1 + v_beta[k])
            inv_more[k] = _recip(nk[k] + 1 + v_beta[k])
        weight = np.zeros(width, np.float32)  # (n_dk + alpha) / (n_k + V beta) of the current document
        cum = np.zeros(width + lanes, np.float32)
        before = np.zeros(lanes, np.float32)  # before[l]: sum of the lanes before l
        a = np.float32(alpha)
        b = np.float32(beta)
        last_lane = min(n_topics, lanes) - 1
        n_tokens = tokens.shape[0]
        current = -1
        flat = wk.reshape(-1)
        for t in range(n_tokens):
            if t + _AHEAD < n_tokens:  # the next tokens' word rows are random accesses
                ahead = tokens[t + _AHEAD] * n_topics
                for j in range(0, n_topics, 16):
                    _prefetch(flat, ahead + j)
            w = tokens[t]
            d = doc_ids[t]
            k = z[t]
            d_row = dk[d]
            w_row = wk[w]
            if d != current:
                current = d
                for j in range(n_topics):
                    weight[j] = (np.float32(d_row[j]) + a) * inv[j]
            d_row[k] -= 1
            w_row[k] -= 1
            nk[k] -= 1
            inv_more[k] = inv[k]
            inv[k] = inv_less[k]
            inv_less[k] = _recip(nk[k] - 1 + v_beta[k])
            weight[k] = (np.float32(d_row[k]) + a) * inv[k]
            r = seed_rows[w] if seeded else -1
            if r < 0:
                for j in range(width):
                    cum[j + lanes] = cum[j] + weight[j] * (np.float32(w_row[j]) + b)
            else:  # a seed word: its own prior per topic
                b_row = seed_beta[r]
                for j in range(width):
                    cum[j + lanes] = cum[j] + weight[j] * (np.float32(w_row[j]) + b_row[j])
            total = np.float32(0.0)
            for lane in range(lanes):
                before[lane] = total
                total += cum[width + lane]
            u = uniforms[t] * total
            lane = 0
            for j in range(1, lanes):
                lane += before[j] <= u
            lane = min(lane, last_lane)  # only rounding can pass the last lane of K < lanes topics
            u -= before[lane]
            row = 0
            for r in range(width // lanes - 1):
                row += cum[lanes + r * lanes + lane] <= u
            k = row * lanes + lane
            if k >= n_topics:  # a padding topic (weight 0): only rounding lands there
                k -= lanes
            z[t] = k
            d_row[k] += 1
            w_row[k] += 1
            nk[k] += 1
            inv_less[k] = inv[k]
            inv[k] = inv_more[k]
            inv_more[k] = _recip(nk[k] + 1 + v_beta[k])
            weight[k] = (np.float32(d_row[k]) + a) * inv[k]

    return dense_kernel


_DENSE_KERNEL_ANY_K = _make_dense_kernel(_LANES)
_SEEDED_DENSE_KERNEL_ANY_K = _make_dense_kernel(_LANES, seeded=True)


@functools.cache
def _dense_kernel_for(n_topics: int, seeded: bool = False) -> Callable[..., None]:
    """The dense kernel for K topics: up to ``_FEW_TOPICS``, 4 lanes and K fixed at compile time (its loops
    unrolled), compiled once per K and then loaded from numba's cache; above, ``_LANES`` lanes for any K
    (unrolling does not pay there: ``benchmarks/bench_sampler.py``). ``seeded``: the kernel that reads seed
    words' priors (:func:`_make_dense_kernel`)."""
    if n_topics <= _FEW_TOPICS:
        return _make_dense_kernel(4, n_topics, seeded)
    return _SEEDED_DENSE_KERNEL_ANY_K if seeded else _DENSE_KERNEL_ANY_K


def _dense_kernel(tokens, doc_ids, z, dk, wk, nk, alpha, beta, v_beta, seed_rows, seed_beta, uniforms):
    """The dense kernel for ``nk``'s number of topics and ``seed_rows`` (:func:`_dense_kernel_for`)."""
    kernel = _dense_kernel_for(nk.shape[0], seed_rows.shape[0] > 0)
    kernel(tokens, doc_ids, z, dk, wk, nk, alpha, beta, v_beta, seed_rows, seed_beta, uniforms)


def _with_slack(name: str, shape: tuple[int, int]) -> np.ndarray:
    """The int32 work array ``name`` (:func:`flower_topics.numeric.work_arrays.array`) of ``shape``, C-contiguous and followed
    in memory by ``_LANES`` more entries (see :func:`_dense_kernel`); its contents are left as they were."""
    size = shape[0] * shape[1]
    return scratch.array(name, (size + _LANES,), np.int32)[:size].reshape(shape)


def word_topic_buffer(n_words: int, n_topics: int) -> np.ndarray:
    """This thread's ``(V, K)`` int32 word-major counts, the array the kernels sweep: counts written here (a
    federated party decodes the server's counts into it) are swept in place by
    :meth:`CollapsedGibbs.sweep_word_topic`, with no copy in or out. Its contents are whatever was last written."""
    return _with_slack("lda.word-topic", (n_words, n_topics))


@njit(cache=True, nogil=True)
def _topic_totals(wk):  # pragma: no cover - numba
    """``n_k`` (int64) of the word-major counts ``wk`` (V x K): one pass (numpy's ``sum(axis=0)`` of int32 into
    int64 converts and strides)."""
    nk = np.zeros(wk.shape[1], np.int64)
    for w in range(wk.shape[0]):
        for k in range(wk.shape[1]):
            nk[k] += wk[w, k]
    return nk


@njit(cache=True, nogil=True)
def _count_change(tokens, before, after, change):  # pragma: no cover - numba
    """Add to ``change`` (K x V) the topic-word counts of ``after`` minus those of ``before`` (one topic per token)."""
    for t in range(tokens.shape[0]):
        if before[t] != after[t]:
            change[before[t], tokens[t]] -= 1
            change[after[t], tokens[t]] += 1


@njit(cache=True, nogil=True)
def _holds_own_counts_and_doc_topics(wk, tokens, doc_ids, z, dk, own):  # pragma: no cover - numba
    """Whether ``wk`` (V x K) is at least the counts of ``z`` in every cell; sets ``dk`` (D x K) to the
    document-topic counts of ``z``. ``own`` (V x K int32) is a work array, overwritten.

    One pass over the tokens into the zeroed V x K table ``own`` and one streaming comparison:
    half the time of :func:`_holds_own_counts`'s two passes of random updates.
    """
    own[:] = 0
    dk[:] = 0
    for t in range(tokens.shape[0]):
        own[tokens[t], z[t]] += 1
        dk[doc_ids[t], z[t]] += 1
    n_topics = wk.shape[1]
    for w in range(wk.shape[0]):
        for k in range(n_topics):
            if wk[w, k] < own[w, k]:
                return False
    return True


@njit(cache=True, nogil=True)
def _tree_set(tree, leaf, value):  # pragma: no cover - numba
    """Set a leaf of the sum tree and recompute its ancestors from their children."""
    tree[leaf] = value
    j = leaf >> 1
    while j >= 1:
        tree[j] = tree[2 * j] + tree[2 * j + 1]
        j >>= 1


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _sparse_kernel(words, offsets, z, wk, nk, lists, alpha, beta, v_beta, seed_rows, seed_beta, uniforms,
                   max_len):  # pragma: no cover
    """Resample ``z[t]`` (word ``words[t]`` of the document whose topic list starts at ``offsets[t]``) for every t.

    Each draw is from the full conditional, split into the document bucket
    ``sum_k n_dk q_w(k)`` over the document's own topics and the prior bucket
    ``alpha sum_k q_w(k)`` held in a sum tree, ``q_w(k) = (n_kw + beta_kw) / (n_k + B_k)``
    (the prior as in the dense kernel: ``seed_rows``, ``seed_beta`` float64 ``R x K``, ``v_beta``).
    ``wk`` is ``n_wk`` (V x K int32,
    word-major, including every count conditioned on), ``nk`` is ``n_k`` (K int64);
    both are updated in place. A document's topic list (see :func:`_doc_topic_lists`)
    is ``lists[o]`` = its number of distinct topics n, then n (topic, count) pairs,
    kept up to date as tokens move (room for as many pairs as the document has
    tokens, ``max_len`` at most). The tree over ``q_w`` is rebuilt whenever the word
    changes from one token to the next, so any order is exact; tokens grouped by
    word make the rebuilds rare. ``uniforms[t]`` drives the draw of token t.
    """
    n_topics = wk.shape[1]
    n_tokens = words.shape[0]
    size = 1
    while size < n_topics:
        size *= 2
    tree = np.zeros(2 * size)  # leaf size + k holds q_w(k); node j = node 2j + node 2j+1
    inv = np.empty(n_topics)
    for k in range(n_topics):
        inv[k] = 1.0 / (nk[k] + v_beta[k])
    p = np.empty(max(max_len, 1))
    seeded = seed_rows.shape[0] > 0
    cur_w = -1
    r = -1
    for t in range(n_tokens):
        if t + _AHEAD < n_tokens:  # the next documents' lists are random accesses
            _prefetch(lists, offsets[t + _AHEAD])
        w = words[t]
        o = offsets[t]
        old = z[t]
        if w != cur_w:
            r = seed_rows[w] if seeded else -1
            if r < 0:
                for k in range(n_topics):
                    tree[size + k] = (wk[w, k] + beta) * inv[k]
            else:
                for k in range(n_topics):
                    tree[size + k] = (wk[w, k] + seed_beta[r, k]) * inv[k]
            for j in range(size - 1, 0, -1):
                tree[j] = tree[2 * j] + tree[2 * j + 1]
            cur_w = w
        # take the token out of every count
        wk[w, old] -= 1
        nk[old] -= 1
        inv[old] = 1.0 / (nk[old] + v_beta[old])
        _tree_set(tree, size + old, (wk[w, old] + (beta if r < 0 else seed_beta[r, old])) * inv[old])
        n = lists[o]
        e = o + 1
        while lists[e] != old:
            e += 2
        lists[e + 1] -= 1
        if lists[e + 1] == 0:  # move the last pair into the hole
            n -= 1
            lists[e] = lists[o + 1 + 2 * n]
            lists[e + 1] = lists[o + 2 + 2 * n]
            lists[o] = n
        # document bucket: n_dk q_w(k) over the document's topics
        for i in range(n):
            p[i] = lists[o + 2 + 2 * i] * tree[size + lists[o + 1 + 2 * i]]
        s = 0.0
        for i in range(n):
            s += p[i]
        u = uniforms[t] * (s + alpha * tree[1])
        if u < s:
            i = 0
            while i < n - 1 and u >= p[i]:
                u -= p[i]
                i += 1
            new = lists[o + 1 + 2 * i]
            lists[o + 2 + 2 * i] += 1
        else:  # prior bucket: descend the tree
            u = (u - s) / alpha
            j = 1
            while j < size:
                left = tree[2 * j]
                if u < left:
                    j = 2 * j
                else:
                    u -= left
                    j = 2 * j + 1
            new = min(j - size, n_topics - 1)  # padding leaves weigh 0; only rounding lands there
            e = o + 1
            end = o + 1 + 2 * n
            while e < end and lists[e] != new:
                e += 2
            if e == end:
                lists[e] = new
                lists[e + 1] = 1
                lists[o] = n + 1
            else:
                lists[e + 1] += 1
        z[t] = new
        wk[w, new] += 1
        nk[new] += 1
        inv[new] = 1.0 / (nk[new] + v_beta[new])
        _tree_set(tree, size + new, (wk[w, new] + (beta if r < 0 else seed_beta[r, new])) * inv[new])


@njit(cache=True, nogil=True)
def _doc_topic_lists(doc_ptr, z, n_topics):  # pragma: no cover - numba
    """Sparse document-topic counts of ``z`` (tokens in document order).

    Returns ``lists``: document d's list starts at ``2 doc_ptr[d] + d`` and holds its
    number of distinct topics n, then n (topic, count) pairs, with room for as many
    pairs as the document has tokens.
    """
    n_docs = doc_ptr.shape[0] - 1
    lists = np.zeros(2 * z.shape[0] + n_docs, dtype=np.int32)
    slot = np.full(n_topics, -1, dtype=np.int64)
    for d in range(n_docs):
        o = 2 * doc_ptr[d] + d
        n = 0
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            k = z[i]
            if slot[k] < 0:
                slot[k] = n
                lists[o + 1 + 2 * n] = k
                n += 1
            lists[o + 2 + 2 * slot[k]] += 1
        for i in range(n):
            slot[lists[o + 1 + 2 * i]] = -1
        lists[o] = n
    return lists


@njit(cache=True, nogil=True)
def _group_by_word(tokens, doc_ptr, n_words):  # pragma: no cover - numba
    """The sparse kernel's visiting order (a counting sort by word, O(N + V)).

    Returns ``(order, words, offsets)``: token positions grouped by word, each word's
    tokens in corpus order; their words; and the offsets of their documents' topic
    lists (:func:`_doc_topic_lists`).
    """
    n_tokens = tokens.shape[0]
    start = np.zeros(n_words + 1, dtype=np.int64)
    for t in range(n_tokens):
        start[tokens[t] + 1] += 1
    for w in range(n_words):
        start[w + 1] += start[w]
    order = np.empty(n_tokens, dtype=np.int64)
    words = np.empty(n_tokens, dtype=np.int32)
    offsets = np.empty(n_tokens, dtype=np.int64)
    for d in range(doc_ptr.shape[0] - 1):
        offset = 2 * doc_ptr[d] + d
        for t in range(doc_ptr[d], doc_ptr[d + 1]):
            w = tokens[t]
            i = start[w]
            order[i] = t
            words[i] = w
            offsets[i] = offset
            start[w] = i + 1
    return order, words, offsets


@njit(cache=True, nogil=True)
def _holds_own_counts(wk, tokens, z):  # pragma: no cover - numba
    """Whether ``wk`` (V x K, word-major) is at least the counts of ``z`` in every cell; ``wk`` is left as it was."""
    ok = True
    for t in range(tokens.shape[0]):
        wk[tokens[t], z[t]] -= 1
        if wk[tokens[t], z[t]] < 0:
            ok = False
    for t in range(tokens.shape[0]):
        wk[tokens[t], z[t]] += 1
    return ok


_NOT_OWN = ("n_kw does not contain this corpus's own topic-word counts; "
            "the counts the sampler conditions on must include its current assignments")


def choose_kernel(n_topics: int, mean_doc_length: float = 0.0) -> str:
    """The kernel ``"auto"`` picks: ``"sparse"`` from ``max(SPARSE_MIN_TOPICS, SPARSE_PER_DOC_LENGTH * mean_doc_length)`` topics on, else ``"dense"``.

    Parameters
    ----------
    n_topics : int
        Number of topics K.
    mean_doc_length : float
        Mean number of tokens of the corpus's documents.

    Returns
    -------
    str
        ``"dense"`` or ``"sparse"``.
    """
    threshold = max(SPARSE_MIN_TOPICS, SPARSE_PER_DOC_LENGTH * mean_doc_length)
    return "sparse" if n_topics >= threshold else "dense"


class CollapsedGibbs:
    """Collapsed Gibbs state for the tokens of one corpus (one client, or the pooled corpus).

    Parameters
    ----------
    corpus : Corpus
        The documents whose tokens are sampled.
    n_topics : int
        Number of topics K.
    alpha : float
        Symmetric document-topic Dirichlet prior.
    beta : float
        Symmetric topic-word Dirichlet prior.
    seed : int or numpy.random.Generator
        Source of all randomness (initial topics and every sweep).
    z : numpy.ndarray, optional
        Topic of each token to start from; drawn uniformly when omitted.
    kernel : {"auto", "dense", "sparse"}
        Sampling kernel (:data:`KERNELS`); both are exact. ``"auto"`` takes
        :func:`choose_kernel` of ``n_topics`` and the corpus's mean document length.
    seeds : SeedPrior, optional
        Seed words (guided topics): the topic-word prior becomes ``beta_kw`` of
        :meth:`SeedPrior.matrix`; None keeps it symmetric.

    Attributes
    ----------
    z : numpy.ndarray
        ``int32`` topic of every token.
    rng : numpy.random.Generator
        The generator the sweeps draw from.
    kernel : str
        The kernel in use, ``"dense"`` or ``"sparse"``.
    """

    def __init__(
        self,
        corpus: Corpus,
        n_topics: int,
        alpha: float,
        beta: float,
        seed: int | np.random.Generator,
        z: np.ndarray | None = None,
        kernel: Literal["auto", "dense", "sparse"] = "auto",
        seeds: SeedPrior | None = None,
    ) -> None:
        if n_topics < 1:
            raise ValueError(f"n_topics must be >= 1, got {n_topics}")
        if not (alpha > 0 and beta > 0):
            raise ValueError(f"alpha and beta must be > 0, got alpha={alpha}, beta={beta}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.corpus = corpus
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self._n_topics = int(n_topics)
        mean_length = corpus.n_tokens / max(corpus.n_docs, 1)
        self.kernel = choose_kernel(self._n_topics, mean_length) if kernel == "auto" else kernel
        if z is None:
            z = self.rng.integers(0, n_topics, size=corpus.n_tokens, dtype=np.int32)
        z = np.ascontiguousarray(z, dtype=np.int32)
        if z.shape != (corpus.n_tokens,) or (z.size and (z.min() < 0 or z.max() >= n_topics)):
            raise ValueError(f"z must hold one topic in [0, {n_topics}) per token ({corpus.n_tokens})")
        self.z = z
        self._doc_ids = corpus.doc_ids
        self._by_word: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # built on first sparse sweep
        self._uniforms: np.ndarray | None = None  # the dense kernel's float32 uniforms, one per token
        self.seeds = seeds
        self._prior = _kernel_prior(seeds, self.beta, self._n_topics, corpus.n_words)

    @property
    def n_dk(self) -> np.ndarray:
        """``(D, K)`` ``int32`` document-topic counts of ``z``."""
        flat = np.bincount(self._doc_ids.astype(np.int64) * self.n_topics + self.z,
                           minlength=self.corpus.n_docs * self.n_topics)
        return flat.reshape(self.corpus.n_docs, self.n_topics).astype(np.int32)

    @property
    def n_topics(self) -> int:
        """Number of topics K."""
        return self._n_topics

    def topic_word_counts(self) -> np.ndarray:
        """``(K, V)`` ``int32`` topic-word counts of this corpus's own assignments."""
        flat = np.bincount(self.z.astype(np.int64) * self.corpus.n_words + self.corpus.tokens,
                           minlength=self.n_topics * self.corpus.n_words)
        return flat.reshape(self.n_topics, self.corpus.n_words).astype(np.int32)

    def topic_word_change(self, z_before: np.ndarray) -> np.ndarray:
        """``(K, V)`` ``int32``: the topic-word counts of the current assignments minus those of ``z_before``
        (one topic per token), in one pass over the tokens: what the sweeps since ``z_before`` added to the
        counts they conditioned on.

        Raises
        ------
        ValueError
            If ``z_before`` does not hold one topic in ``[0, K)`` per token.
        """
        z_before = np.ascontiguousarray(z_before, dtype=np.int32)
        if z_before.shape != self.z.shape or (z_before.size and (z_before.min() < 0
                                                                 or z_before.max() >= self.n_topics)):
            raise ValueError(f"z_before must hold one topic in [0, {self.n_topics}) per token ({self.z.size})")
        change = np.zeros((self.n_topics, self.corpus.n_words), np.int32)
        _count_change(self.corpus.tokens, z_before, self.z, change)
        return change

    def _word_major(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sparse kernel's visiting order: token positions, their words and their documents' list offsets."""
        if self._by_word is None:
            self._by_word = _group_by_word(self.corpus.tokens, self.corpus.doc_ptr, self.corpus.n_words)
        return self._by_word

    def sweep(self, n_kw: np.ndarray, n_sweeps: int = 1) -> None:
        """Resample every token's topic ``n_sweeps`` times.

        The dense kernel visits the tokens in document order, the sparse kernel grouped
        by word (each word's tokens in document order); either way every draw is from
        the token's exact full conditional.

        Parameters
        ----------
        n_kw : numpy.ndarray
            ``(K, V)`` ``int32`` C-contiguous counts to condition on: the global
            counts, which must include this corpus's current assignments. Updated in
            place as tokens move.
        n_sweeps : int
            Number of full passes.

        Raises
        ------
        ValueError
            If ``n_kw`` has the wrong shape or dtype, or does not contain this
            corpus's own counts (some entry would go negative).
        """
        expected = (self.n_topics, self.corpus.n_words)
        if n_kw.shape != expected or n_kw.dtype != np.int32 or not n_kw.flags.c_contiguous:
            raise ValueError(f"n_kw must be a C-contiguous int32 array of shape {expected}, "
                             f"got {n_kw.dtype}{n_kw.shape}")
        if n_sweeps < 1:
            raise ValueError("n_sweeps must be >= 1")
        self._sweep(n_kw, n_sweeps, None)

    def sweep_word_topic(self, n_wk: np.ndarray, n_sweeps: int = 1) -> None:
        """:meth:`sweep` on word-major counts: ``n_wk`` is the ``(V, K)`` transpose of ``sweep``'s ``n_kw``
        (any layout), updated in place. The array of :func:`word_topic_buffer` is swept without a copy: a
        federated party's round (:func:`flower_topics.clients.lda.train_round`) then never builds its counts
        topic-major.

        Raises
        ------
        ValueError
            As :meth:`sweep`.
        """
        expected = (self.corpus.n_words, self.n_topics)
        if n_wk.shape != expected or n_wk.dtype != np.int32:
            raise ValueError(f"n_wk must be an int32 array of shape {expected}, got {n_wk.dtype}{n_wk.shape}")
        if n_sweeps < 1:
            raise ValueError("n_sweeps must be >= 1")
        wk = word_topic_buffer(*expected)
        in_place = n_wk.ctypes.data == wk.ctypes.data and n_wk.strides == wk.strides
        if not in_place:
            np.copyto(wk, n_wk)
        self._sweep_buffer(wk, n_sweeps, None)
        if not in_place:
            np.copyto(n_wk, wk)

    def _sweep(self, n_kw: np.ndarray, n_sweeps: int, positions: np.ndarray | None) -> None:
        """``sweep`` over the tokens at ``positions`` in that order (all, in the kernel's order, when None).

        A single position draws that token once from its full conditional given all
        others: the exactness tests use it.
        """
        wk = word_topic_buffer(self.corpus.n_words, self.n_topics)
        wk[...] = n_kw.T  # word-major copy
        self._sweep_buffer(wk, n_sweeps, positions)
        n_kw[...] = wk.T

    def _sweep_buffer(self, wk: np.ndarray, n_sweeps: int, positions: np.ndarray | None) -> None:
        """:meth:`_sweep` on :func:`word_topic_buffer`'s array ``wk``, in place."""
        corpus = self.corpus
        nk = _topic_totals(wk)
        v_beta, seed_rows, dense_beta, sparse_beta = self._prior
        if self.kernel == "dense":
            dk = _with_slack("lda.doc-topic", (corpus.n_docs, self.n_topics))
            own = scratch.array("lda.own-word-topic", wk.shape, np.int32)
            if not _holds_own_counts_and_doc_topics(wk, corpus.tokens, self._doc_ids, self.z, dk, own):
                raise ValueError(_NOT_OWN)
            if positions is None:
                tokens, doc_ids, z = corpus.tokens, self._doc_ids, self.z
            else:
                tokens, doc_ids, z = corpus.tokens[positions], self._doc_ids[positions], self.z[positions]
            if self._uniforms is None or self._uniforms.shape[0] != tokens.shape[0]:
                self._uniforms = np.empty(tokens.shape[0], dtype=np.float32)  # kept from call to call
            uniforms = self._uniforms
            for _ in range(n_sweeps):
                self.rng.random(out=uniforms, dtype=np.float32)
                _dense_kernel(tokens, doc_ids, z, dk, wk, nk, self.alpha, self.beta, v_beta, seed_rows, dense_beta,
                              uniforms)
        else:
            order, all_words, all_offsets = self._word_major()
            z = self.z[order]
            if not _holds_own_counts(wk, all_words, z):  # in word order: a row at a time
                raise ValueError(_NOT_OWN)
            if positions is None:
                positions, words, offsets = order, all_words, all_offsets
            else:
                doc_ids = self._doc_ids[positions].astype(np.int64)
                words, offsets = corpus.tokens[positions], 2 * corpus.doc_ptr[doc_ids] + doc_ids
                z = self.z[positions]
            lists = _doc_topic_lists(corpus.doc_ptr, self.z, self.n_topics)
            max_len = int(corpus.doc_lengths.max(initial=0))
            for _ in range(n_sweeps):
                _sparse_kernel(words, offsets, z, wk, nk, lists, self.alpha, self.beta, v_beta, seed_rows,
                               sparse_beta, self.rng.random(words.shape[0]), max_len)
        if positions is not None:
            self.z[positions] = z


def _kernel_prior(seeds: SeedPrior | None, beta: float, n_topics: int, n_words: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The prior as the kernels take it: ``B_k`` (K float64), the seed row of each word (V int32, empty
    without seeds), the seed words' ``beta_kw`` for the dense kernel (float32, padded with zeros to a
    multiple of ``_LANES`` topics) and for the sparse kernel (float64)."""
    if seeds is None:
        return (np.full(n_topics, n_words * beta), np.empty(0, np.int32), np.zeros((0, _LANES), np.float32),
                np.zeros((0, n_topics)))
    if (seeds.n_topics, seeds.n_words) != (n_topics, n_words):
        raise ValueError(f"the seed prior is for {seeds.n_topics} topics and {seeds.n_words} words, the sampler "
                         f"has {n_topics} and {n_words}")
    rows, priors = seeds.word_rows(beta)
    width = (n_topics + _LANES - 1) // _LANES * _LANES
    dense = np.zeros((priors.shape[0], width), np.float32)
    dense[:, :n_topics] = priors
    return seeds.topic_sums(beta), rows, dense, np.ascontiguousarray(priors)


def topic_word_distribution(n_kw: np.ndarray, beta: float, seeds: SeedPrior | None = None) -> np.ndarray:
    """phi_kw = (n_kw + beta_kw) / (n_k + B_k), float64 (Griffiths & Steyvers 2004, eq. 6): ``beta_kw = beta``
    without seeds, else :meth:`SeedPrior.matrix`."""
    return normalize_rows(n_kw, beta if seeds is None else seeds.matrix(beta))


def fit_lda(
    corpus: Corpus,
    n_topics: int,
    *,
    alpha: float,
    beta: float,
    n_iter: int,
    seed: int,
    callback: Callable[[int, np.ndarray], None] | None = None,
    kernel: Literal["auto", "dense", "sparse"] = "auto",
    seeds: SeedPrior | None = None,
) -> np.ndarray:
    """Centralized collapsed Gibbs LDA.

    Parameters
    ----------
    corpus : Corpus
        Training documents.
    n_topics : int
        Number of topics K.
    alpha, beta : float
        Symmetric Dirichlet priors.
    n_iter : int
        Number of sweeps.
    seed : int
        Seed of all randomness.
    callback : callable, optional
        ``callback(iteration, n_kw)`` after each sweep (iteration from 1).
    kernel : {"auto", "dense", "sparse"}
        Sampling kernel of :class:`CollapsedGibbs`.
    seeds : SeedPrior, optional
        Seed words (guided topics) of :class:`CollapsedGibbs`.

    Returns
    -------
    numpy.ndarray
        ``(K, V)`` topic-word distribution phi.
    """
    sampler = CollapsedGibbs(corpus, n_topics, alpha, beta, seed, kernel=kernel, seeds=seeds)
    n_kw = sampler.topic_word_counts()
    for iteration in range(1, n_iter + 1):
        sampler.sweep(n_kw)
        if callback is not None:
            callback(iteration, n_kw)
    return topic_word_distribution(n_kw, beta, seeds)
