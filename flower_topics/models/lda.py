"""Collapsed Gibbs sampling for LDA at compiled speed (numba).

The full conditional of a token's topic (Griffiths & Steyvers 2004, eq. 5)::

    p(z_i = k | z_-i, w) ∝ (n_dk + alpha) (n_kw + beta) / (n_k + V beta)

with every count taken without token i. The same kernels serve the centralized
trainer (counts of one corpus) and the federated client, which conditions on the
*global* counts of all clients and updates its copy in place as its own tokens
move (AD-LDA, Newman et al. 2009, eq. 1-3).

Two exact kernels draw from that conditional (:data:`KERNELS`; ``"auto"`` picks by K
and the mean document length, see :func:`choose_kernel`):

- ``"dense"``: the conditional of all K topics, O(K) per token, in document order.
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

from typing import Callable, Literal

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from flower_topics.data.corpus import Corpus
from flower_topics.models.topic_word import normalize_rows

#: The sampling kernels; both draw every token from its exact full conditional.
KERNELS = ("auto", "dense", "sparse")

#: ``kernel="auto"`` uses the sparse kernel from ``max(SPARSE_MIN_TOPICS,
#: SPARSE_PER_DOC_LENGTH x mean document length)`` topics on: the sparse kernel's work per
#: token grows with the topics a document holds (at most its length), the dense kernel's
#: with K. Measured crossovers (``benchmarks/bench_sampler.py --kernels dense sparse``,
#: docs/results.md): M10 (6 tokens a document) between K 50 and 100, debian_large (40)
#: about 100, BBC_News (120) between 200 and 300.
SPARSE_MIN_TOPICS = 64
SPARSE_PER_DOC_LENGTH = 2.0


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


#: Topics per block of the dense kernel's two-level inverse-CDF search (a compile-time
#: constant, so that the block sums vectorize).
_BLOCK = 16


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _dense_kernel(tokens, doc_ids, z, dk, wk, nk, v_beta, uniforms):  # pragma: no cover - numba
    """Resample ``z[t]`` (word ``tokens[t]`` of document ``doc_ids[t]``) for every t in turn.

    Each draw is from the full conditional over all K topics. The counts arrive
    with their priors added, as float64, so that the loop over topics is three
    loads and two multiplications (it vectorizes): ``dk = n_dk + alpha`` (D x K),
    ``wk = n_wk + beta`` (V x K, word-major: a token reads one contiguous row) and
    ``nk = n_k`` (K). Adding and subtracting 1.0 keeps them exact (integers plus a
    constant) and the caller rounds them back to integers. The inverse-CDF search
    first walks sums of ``block`` topics, then the topics of one block.
    ``uniforms[t]`` drives the draw of token t.
    """
    n_topics = wk.shape[1]
    inv = np.empty(n_topics)
    for k in range(n_topics):
        inv[k] = 1.0 / (nk[k] + v_beta)
    p = np.empty(n_topics)
    block = _BLOCK
    n_blocks = (n_topics + block - 1) // block
    block_sum = np.empty(n_blocks)
    n_tokens = tokens.shape[0]
    flat = wk.reshape(-1)
    for t in range(n_tokens):
        if t + _AHEAD < n_tokens:  # the next tokens' word rows are random accesses
            ahead = tokens[t + _AHEAD] * n_topics
            for j in range(0, n_topics, 8):
                _prefetch(flat, ahead + j)
        w = tokens[t]
        d = doc_ids[t]
        k = z[t]
        dk[d, k] -= 1.0
        wk[w, k] -= 1.0
        nk[k] -= 1.0
        inv[k] = 1.0 / (nk[k] + v_beta)
        d_row = dk[d]
        w_row = wk[w]
        for j in range(n_topics):
            p[j] = d_row[j] * w_row[j] * inv[j]
        total = 0.0
        for b in range(n_blocks):
            acc = 0.0
            for j in range(b * block, min(n_topics, (b + 1) * block)):
                acc += p[j]
            block_sum[b] = acc
            total += acc
        u = uniforms[t] * total
        b = 0
        while b < n_blocks - 1 and u >= block_sum[b]:
            u -= block_sum[b]
            b += 1
        k = b * block
        last = min(n_topics, (b + 1) * block) - 1
        while k < last and u >= p[k]:
            u -= p[k]
            k += 1
        z[t] = k
        dk[d, k] += 1.0
        wk[w, k] += 1.0
        nk[k] += 1.0
        inv[k] = 1.0 / (nk[k] + v_beta)


@njit(cache=True, nogil=True)
def _tree_set(tree, leaf, value):  # pragma: no cover - numba
    """Set a leaf of the sum tree and recompute its ancestors from their children."""
    tree[leaf] = value
    j = leaf >> 1
    while j >= 1:
        tree[j] = tree[2 * j] + tree[2 * j + 1]
        j >>= 1


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _sparse_kernel(words, offsets, z, wk, nk, lists, alpha, beta, v_beta, uniforms, max_len):  # pragma: no cover
    """Resample ``z[t]`` (word ``words[t]`` of the document whose topic list starts at ``offsets[t]``) for every t.

    Each draw is from the full conditional, split into the document bucket
    ``sum_k n_dk q_w(k)`` over the document's own topics and the prior bucket
    ``alpha sum_k q_w(k)`` held in a sum tree. ``wk`` is ``n_wk`` (V x K int32,
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
        inv[k] = 1.0 / (nk[k] + v_beta)
    p = np.empty(max(max_len, 1))
    cur_w = -1
    for t in range(n_tokens):
        if t + _AHEAD < n_tokens:  # the next documents' lists are random accesses
            _prefetch(lists, offsets[t + _AHEAD])
        w = words[t]
        o = offsets[t]
        old = z[t]
        if w != cur_w:
            for k in range(n_topics):
                tree[size + k] = (wk[w, k] + beta) * inv[k]
            for j in range(size - 1, 0, -1):
                tree[j] = tree[2 * j] + tree[2 * j + 1]
            cur_w = w
        # take the token out of every count
        wk[w, old] -= 1
        nk[old] -= 1
        inv[old] = 1.0 / (nk[old] + v_beta)
        _tree_set(tree, size + old, (wk[w, old] + beta) * inv[old])
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
        inv[new] = 1.0 / (nk[new] + v_beta)
        _tree_set(tree, size + new, (wk[w, new] + beta) * inv[new])


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

    def _sweep(self, n_kw: np.ndarray, n_sweeps: int, positions: np.ndarray | None) -> None:
        """``sweep`` over the tokens at ``positions`` in that order (all, in the kernel's order, when None).

        A single position draws that token once from its full conditional given all
        others: the exactness tests use it.
        """
        corpus = self.corpus
        nk = n_kw.sum(axis=1, dtype=np.int64)
        v_beta = corpus.n_words * self.beta
        wk = np.ascontiguousarray(n_kw.T)  # word-major int32 copy
        if self.kernel == "dense":
            if not _holds_own_counts(wk, corpus.tokens, self.z):
                raise ValueError(_NOT_OWN)
            if positions is None:
                tokens, doc_ids, z = corpus.tokens, self._doc_ids, self.z
            else:
                tokens, doc_ids, z = corpus.tokens[positions], self._doc_ids[positions], self.z[positions]
            wk = wk + self.beta
            dk = self.n_dk + self.alpha
            nkf = nk.astype(np.float64)
            for _ in range(n_sweeps):
                _dense_kernel(tokens, doc_ids, z, dk, wk, nkf, v_beta, self.rng.random(tokens.shape[0]))
            n_kw[...] = np.rint(wk - self.beta).T
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
                _sparse_kernel(words, offsets, z, wk, nk, lists, self.alpha, self.beta, v_beta,
                               self.rng.random(words.shape[0]), max_len)
            n_kw[...] = wk.T
        if positions is not None:
            self.z[positions] = z


def topic_word_distribution(n_kw: np.ndarray, beta: float) -> np.ndarray:
    """phi_kw = (n_kw + beta) / (n_k + V beta), float64 (Griffiths & Steyvers 2004, eq. 6)."""
    return normalize_rows(n_kw, beta)


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

    Returns
    -------
    numpy.ndarray
        ``(K, V)`` topic-word distribution phi.
    """
    sampler = CollapsedGibbs(corpus, n_topics, alpha, beta, seed, kernel=kernel)
    n_kw = sampler.topic_word_counts()
    for iteration in range(1, n_iter + 1):
        sampler.sweep(n_kw)
        if callback is not None:
            callback(iteration, n_kw)
    return topic_word_distribution(n_kw, beta)
