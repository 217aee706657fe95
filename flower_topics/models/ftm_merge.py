"""FTM master computation: weighted Jaccard similarity, integration of local models, composition.

Federated Topic Modeling (Jiang et al., CIKM 2019), Section 3.2, eq. 17, Algorithms 2-4. Pure
math on row-stochastic topic-word matrices (the parties' topic-wise normalized replies); no Flower.

- :func:`weighted_jaccard` / :func:`pairwise_weighted_jaccard`: eq. 17 on the top-L words.
- :func:`integrate_local_models`: Algorithm 2 applied to the parties in turn (Algorithm 4),
  union-find (connected components) over the pairs with similarity ``>= xi``, data-weighted
  averages. Incremental: each merge compares only the pairs with a new or just-merged topic (the
  others were compared by an earlier merge and found below ``xi``), with the same result, bit for
  bit, as comparing every pair each time (tests/test_ftm_merge.py keeps that loop as reference).
- :func:`compose_local_model`: Algorithm 3, one composed K_p x V model per party.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from flower_topics.models.topic_word import normalize_rows


# --------------------------------------------------------------------------- eq. 17
def top_words(topic_word: np.ndarray, top_l: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``top_l`` word ids (largest probability first, ties to the lower column) and values.

    Exactly the first ``top_l`` columns of a stable sort of ``-topic_word`` along each row, found
    in O(V) a row: a partition gives each row's ``top_l``-th largest value, the columns at or above
    it (``top_l`` of them, more on a tie at that value) are the candidates, ranked by a stable sort
    over ascending columns; a row with a tie at the boundary is ranked by a full stable sort.
    """
    topic_word = np.ascontiguousarray(topic_word, dtype=np.float64)
    n_rows, n_words = topic_word.shape
    if not 1 <= top_l <= n_words:
        raise ValueError(f"top_l must be in [1, V={n_words}], got {top_l}")
    if n_rows == 0 or top_l == n_words:
        idx = np.argsort(-topic_word, axis=1, kind="stable")[:, :top_l]
        return idx, np.take_along_axis(topic_word, idx, axis=1)
    nth = np.partition(topic_word, n_words - top_l, axis=1)[:, n_words - top_l]
    candidate = topic_word >= nth[:, None]
    tied = np.flatnonzero(candidate.sum(axis=1) > top_l)
    candidate[tied] = False
    candidate[tied, :top_l] = True  # placeholders, replaced below
    cols = np.nonzero(candidate)[1].reshape(n_rows, top_l)  # ascending columns within each row
    idx = np.take_along_axis(cols, np.argsort(-np.take_along_axis(topic_word, cols, axis=1), axis=1,
                                               kind="stable"), axis=1)
    if tied.size:
        idx[tied] = np.argsort(-topic_word[tied], axis=1, kind="stable")[:, :top_l]
    return idx, np.take_along_axis(topic_word, idx, axis=1)


def _sums(values: np.ndarray) -> np.ndarray:
    """Each row's sum of its top-L values (one row at a time, the same bits whatever the batch)."""
    return np.ascontiguousarray(values).sum(axis=1)


def _word_blocks(words: np.ndarray, n_words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``words`` grouped by word id: the entries in word order (stable), each word's first place and count."""
    order = np.argsort(words, kind="stable")
    count = np.bincount(words, minlength=n_words)
    return order, np.cumsum(count) - count, count


def _join(words_a: np.ndarray, order_b: np.ndarray, start_b: np.ndarray, count_b: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """Every (entry of a, entry of b) with the same word id, in the order of a's entries (then b's)."""
    lo, count = start_b[words_a], count_b[words_a]
    ent_a = np.repeat(np.arange(words_a.size), count)
    offsets = np.arange(ent_a.size) - np.repeat(np.cumsum(count) - count, count)
    return ent_a, order_b[np.repeat(lo, count) + offsets]


def _intersections(ia: np.ndarray, va: np.ndarray, ib: np.ndarray, vb: np.ndarray) -> np.ndarray:
    """``sum_{w in T_i ∩ T_j} min(p^{z_i}_w, p^{z_j}_w)`` for every (row of a, row of b), summed in the
    order of row i's top-L list (a join of the two lists on word id)."""
    na, nb = ia.shape[0], ib.shape[0]
    top_l = ia.shape[1]
    words_a, words_b = ia.ravel(), ib.ravel()
    n_words = int(max(words_a.max(initial=-1), words_b.max(initial=-1))) + 1
    ent_a, ent_b = _join(words_a, *_word_blocks(words_b, n_words))
    mins = np.minimum(va.ravel()[ent_a], vb.ravel()[ent_b])
    pair = (ent_a // top_l) * nb + ent_b // top_l
    # bincount adds in array order, i.e. in the order of a's lists; astype: no matches gives integers
    return np.bincount(pair, weights=mins, minlength=na * nb).astype(np.float64).reshape(na, nb)


def _rho(inter: np.ndarray, sum_a: np.ndarray, sum_b: np.ndarray) -> np.ndarray:
    """Eq. 17's second line from the intersections and the two rows' top-L sums (broadcast)."""
    denom = sum_a + sum_b - inter
    return np.divide(inter, denom, out=np.zeros_like(inter), where=denom > 0)


def pairwise_weighted_jaccard(a: np.ndarray, b: np.ndarray, top_l: int) -> np.ndarray:
    """Eq. 17 for every pair (row of ``a``, row of ``b``): an ``(len(a), len(b))`` matrix.

    With ``T_i`` the top-L words of topic ``z_i`` and ``p^{z_i}_w`` its probability of ``w`` (the
    topic's own value, not renormalized over its top L; the paper's ``P_{z_i}`` is "the top-L words
    distribution"), ::

        rho(z_i, z_j) = sum_{w in T_i ∩ T_j} min(p^{z_i}_w, p^{z_j}_w)
                        / (sum_{w in T_i} p^{z_i}_w + sum_{w in T_j} p^{z_j}_w - sum_{w in T_i ∩ T_j} min(...))

    (the second line of eq. 17; the upper limit ``T`` of its sums is the ``L`` of the text). This is
    the weighted Jaccard index ``sum min(x, y) / sum max(x, y)`` of the two topics truncated to their
    own top-L words. It lies in [0, 1]; 1 iff the truncated vectors coincide.

    Vectorized as a join of the two top-L lists on word id: O(len(a) L + len(b) L + matches).
    """
    ia, va = top_words(a, top_l)
    ib, vb = top_words(b, top_l)
    return _rho(_intersections(ia, va, ib, vb), _sums(va)[:, None], _sums(vb)[None, :])


def weighted_jaccard(p: np.ndarray, q: np.ndarray, top_l: int) -> float:
    """Eq. 17 for two topics (1-D word distributions); see :func:`pairwise_weighted_jaccard`."""
    return float(pairwise_weighted_jaccard(np.atleast_2d(p), np.atleast_2d(q), top_l)[0, 0])


# --------------------------------------------------------------------------- Algorithm 2
@dataclass
class GlobalModel:
    """The master's global model M* with each topic's weight and provenance.

    Parameters
    ----------
    topic_word : numpy.ndarray
        ``(K*, V)``, rows sum to 1.
    weight : numpy.ndarray
        ``(K*,)``: total data amount behind each topic (sum of the weights merged into it).
    members : list of list of tuple of int
        Per global topic, the ``(party, local topic)`` pairs merged into it, in merge order.
    """

    topic_word: np.ndarray
    weight: np.ndarray
    members: list[list[tuple[int, int]]] = field(default_factory=list)

    @classmethod
    def empty(cls, n_words: int) -> "GlobalModel":
        """A global model with no topics (the start of each round's integration)."""
        return cls(np.zeros((0, n_words)), np.zeros(0), [])

    @property
    def n_topics(self) -> int:
        """K*."""
        return int(self.topic_word.shape[0])


def _normalize_rows(m: np.ndarray, name: str) -> np.ndarray:
    """The package's row normalizer, for topics that must be non-negative with positive mass."""
    m = np.asarray(m, dtype=np.float64)
    if m.ndim != 2 or not np.all(np.isfinite(m)) or np.any(m < 0) or np.any(m.sum(axis=1) <= 0):
        raise ValueError(f"{name} must be a finite non-negative 2-D matrix whose every topic has positive mass")
    return normalize_rows(m)


class _Integration:
    """Algorithm 2 applied party after party, comparing only the pairs whose similarity is not yet known.

    The rows of ``M^B`` live in the slots of a growing buffer, in ``M^B`` order (a merged set keeps
    the slot of its first member, the other members' slots die, a party's topics take new slots at
    the end), each with its top-L words, values and their sum cached. A slot is *dirty* when its
    row's similarity to some other row is not known: a new local topic, a row that a merge just
    changed, and every row of the model the integration starts from. After a merge every row that
    stayed a singleton set was compared with every other row of ``M^B`` and found below ``xi`` with
    all of them (else it would share a set), and its row is kept bit for bit, so a pair of clean rows
    is below ``xi`` and is not compared again: each merge compares (dirty) x (all) pairs only, which
    gives the pairs of Algorithm 2's full loop that are ``>= xi``, hence the same sets. With
    ``merge_within_party=False`` only (global, local) pairs link, so only those are compared.
    Each pair's eq. 17 is summed in the order of the earlier row's top-L list, as the full loop
    does, so the similarities, and the decisions at ``xi``, are the same bits.
    """

    def __init__(self, start: GlobalModel, *, xi: float, top_l: int, merge_within_party: bool) -> None:
        if not 0.0 <= xi <= 1.0:
            raise ValueError("xi must lie in [0, 1]")
        topic_word = np.asarray(start.topic_word, dtype=np.float64)
        if topic_word.ndim != 2:
            raise ValueError("the global model's topic_word must be a 2-D (K*, V) matrix")
        n, n_words = topic_word.shape
        if not 1 <= top_l <= n_words:
            raise ValueError(f"top_l must be in [1, V={n_words}], got {top_l}")
        self.xi, self.top_l, self.within = float(xi), int(top_l), bool(merge_within_party)
        self.n_words = n_words
        self._allocate(max(64, 2 * n), n)
        self.rows[:n] = topic_word
        self.weight[:n] = np.asarray(start.weight, dtype=np.float64)
        self.members: list[list[tuple[int, int]] | None] = [list(m) for m in start.members]
        self.live[:n] = True
        self.dirty[:n] = True  # no pair of the starting model is known to be below xi
        self.size = n
        self._refresh(np.arange(n))

    def _allocate(self, capacity: int, keep: int) -> None:
        """Fresh buffers of ``capacity`` slots (the caller fills the first ``keep``)."""
        self.rows = np.empty((capacity, self.n_words))
        self.weight = np.empty(capacity)
        self.top_idx = np.empty((capacity, self.top_l), dtype=np.int64)
        self.top_val = np.empty((capacity, self.top_l))
        self.top_sum = np.empty(capacity)
        self.live = np.zeros(capacity, dtype=bool)
        self.dirty = np.zeros(capacity, dtype=bool)

    def _reserve(self, k: int) -> None:
        """Room for ``k`` more slots: when full, move the live slots (in order) to buffers twice their need."""
        if self.size + k <= self.rows.shape[0]:
            return
        keep = np.flatnonzero(self.live[:self.size])
        old = (self.rows, self.weight, self.top_idx, self.top_val, self.top_sum, self.dirty)
        self._allocate(max(64, 2 * (keep.size + k)), keep.size)
        for new, previous in zip((self.rows, self.weight, self.top_idx, self.top_val, self.top_sum, self.dirty), old):
            new[:keep.size] = previous[keep]
        self.live[:keep.size] = True
        self.members = [self.members[s] for s in keep]
        self.size = keep.size

    def _refresh(self, slots: np.ndarray) -> None:
        """Recompute the cached top-L words, values and sums of ``slots``."""
        if slots.size:
            idx, val = top_words(self.rows[slots], self.top_l)
            self.top_idx[slots], self.top_val[slots], self.top_sum[slots] = idx, val, _sums(val)

    def _links(self, queries: np.ndarray, first_new: int) -> tuple[np.ndarray, np.ndarray]:
        """The pairs ``(query slot, other slot)`` to link: eq. 17 ``>= xi`` over the pairs still unknown."""
        n, top_l = self.size, self.top_l
        q_idx, q_val = self.top_idx[queries], self.top_val[queries]
        # join every slot's top-L entries with the queries' entries on word id
        ent_all, ent_q = _join(self.top_idx[:n].ravel(), *_word_blocks(q_idx.ravel(), self.n_words))
        other, other_pos = np.divmod(ent_all, top_l)
        query, query_pos = np.divmod(ent_q, top_l)
        mins = np.minimum(self.top_val[:n].ravel()[ent_all], q_val.ravel()[ent_q])
        # sum each pair in the order of its earlier row's list (what the full loop does): a stable sort
        # on that position keeps, within a pair, the positions increasing
        earlier_pos = np.where(other < queries[query], other_pos, query_pos)
        order = np.argsort(earlier_pos.astype(np.uint16) if top_l < 2 ** 16 else earlier_pos, kind="stable")
        inter = np.bincount((query * n + other)[order], weights=mins[order],
                            minlength=queries.size * n).astype(np.float64).reshape(queries.size, n)
        rho = _rho(inter, self.top_sum[queries][:, None], self.top_sum[:n][None, :])
        slots = np.arange(n)
        if self.within:  # a pair of two queries is taken once, from its earlier row
            unknown = self.live[:n][None, :] & ~(self.dirty[:n][None, :] & (slots[None, :] <= queries[:, None]))
        else:  # (global, local) pairs only
            unknown = np.broadcast_to(self.live[:n] & (slots < first_new), rho.shape)
        qq, other_slot = np.nonzero(unknown & (rho >= self.xi))
        return queries[qq], other_slot

    def merge(self, local_model: np.ndarray, weight: float, party: int) -> None:
        """Algorithm 2 for one party's local model (see :func:`merge_into_global`)."""
        if not weight > 0:
            raise ValueError("weight (the party's data amount) must be > 0")
        local = _normalize_rows(local_model, "local_model")
        if local.shape[1] != self.n_words:
            raise ValueError("local model and global model must share the vocabulary")
        k = local.shape[0]
        self._reserve(k)
        first_new, self.size = self.size, self.size + k
        new = np.arange(first_new, self.size)
        self.rows[new] = local
        self.weight[new] = float(weight)
        self.members.extend([(party, j)] for j in range(k))
        self.live[new] = True
        self.dirty[new] = True
        self._refresh(new)
        queries = np.flatnonzero(self.dirty[:self.size]) if self.within else new
        a, b = self._links(queries, first_new)
        self.dirty[:self.size] = False  # every row that stays a singleton set is now known below xi to all others
        if a.size == 0:
            return
        nodes, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)  # ascending slots = M^B order
        graph = coo_matrix((np.ones(a.size), (inverse[:a.size], inverse[a.size:])), shape=(nodes.size, nodes.size))
        n_sets, labels = connected_components(graph, directed=False)
        # lines 12-16, as the full loop's sums: each set's rows added in M^B order, then normalized
        merged = np.zeros((n_sets, self.n_words))
        np.add.at(merged, labels, self.weight[nodes][:, None] * self.rows[nodes])
        merged /= merged.sum(axis=1, keepdims=True)
        set_weight = np.bincount(labels, weights=self.weight[nodes], minlength=n_sets)
        set_members: list[list[tuple[int, int]]] = [[] for _ in range(n_sets)]
        for slot, label in zip(nodes.tolist(), labels.tolist()):
            set_members[label].extend(self.members[slot])
            self.members[slot] = None
        first = nodes[np.unique(labels, return_index=True)[1]]  # each set's first member keeps its slot
        self.live[nodes] = False
        self.live[first] = True
        self.rows[first] = merged
        self.weight[first] = set_weight
        for slot, members in zip(first.tolist(), set_members):
            self.members[slot] = members
        self.dirty[first] = True
        self._refresh(first)

    def result(self) -> GlobalModel:
        """The global model M*: the live slots in order."""
        slots = np.flatnonzero(self.live[:self.size])
        return GlobalModel(self.rows[slots], self.weight[slots], [list(self.members[s]) for s in slots.tolist()])


def merge_into_global(global_model: GlobalModel, local_model: np.ndarray, weight: float, party: int, *,
                      xi: float, top_l: int, merge_within_party: bool = True) -> GlobalModel:
    """Algorithm 2: integrate one party's local model M_p into the global model M, giving M*.

    ``M^B`` = rows of M followed by rows of M_p (each M_p row with weight ``weight``, the party's
    data amount; each M row with its accumulated weight). Every pair ``i < j`` of ``M^B`` with
    ``rho >= xi`` (eq. 17) is redundant; the redundant sets are the connected components of those
    pairs (Union-Find, lines 2-11). Each set becomes one topic at the position of its first member,
    ``sum_s w_s z_s / sum_s w_s`` (then normalized, lines 12-16), with weight ``sum_s w_s``; the other
    members are removed. A topic in no redundant pair is kept as it is (the paper normalizes the
    sets' representatives only). Carrying the summed weight makes every global topic the
    data-weighted average of all the local topics merged into it, over all parties so far. The
    *grouping* does depend on the order (a later topic is compared with the merged representative,
    not with its members), as in the paper's sequential merge.

    ``merge_within_party=True`` (default) is the paper's loop over all pairs of ``M^B``, which links
    two topics of the same local model (and two global topics) when they are similar: redundancy is
    defined by similarity only, and union-find merges such a pair anyway as soon as a third topic is
    similar to both, so excluding direct links would only make the result depend on which third
    topics happen to exist. ``False`` links only (global, local) pairs.

    Deterministic: the output order is that of the first members in ``M^B``. One call compares
    every pair of ``M^B``; :func:`integrate_local_models` merges many parties without comparing a
    pair twice.
    """
    integration = _Integration(global_model, xi=xi, top_l=top_l, merge_within_party=merge_within_party)
    integration.merge(local_model, weight, party)
    return integration.result()


def integrate_local_models(local_models: Sequence[np.ndarray], data_amounts: Sequence[float], *, xi: float,
                           top_l: int, merge_within_party: bool = True,
                           initial: GlobalModel | None = None) -> GlobalModel:
    """Algorithm 4's master step: merge the parties' local models in turn (Algorithm 2 each).

    The result is that of :func:`merge_into_global` applied party after party, computed without
    comparing a pair of global topics twice: a pair of topics that the previous merge left as they
    were was compared then and found below ``xi``, so each merge compares only the pairs with a
    new or just-merged topic (with ``merge_within_party=False``, only the (global, new) pairs), and
    keeps each topic's top-L words from one party to the next. For P parties of K topics that stay
    apart this is about ``sum_p (10 K) (K p)`` pair checks instead of ``sum_p (K p)^2``.

    Parameters
    ----------
    local_models : sequence of numpy.ndarray
        Party ``p``'s ``(K_p, V)`` reply; K_p may differ between parties.
    data_amounts : sequence of float
        Party ``p``'s data amount ``n_p`` (e.g. its number of tokens): the weight of its topics.
    xi : float
        Similarity threshold of eq. 17 for redundancy.
    top_l : int
        L of eq. 17.
    merge_within_party : bool
        See :func:`merge_into_global`.
    initial : GlobalModel, optional
        The model M to start from; empty by default (each round integrates that round's local
        models, which already carry the previous global knowledge through Algorithm 3).

    Returns
    -------
    GlobalModel
        M* after the last party.
    """
    if len(local_models) != len(data_amounts) or not local_models:
        raise ValueError("need one data amount per local model, and at least one model")
    if any(np.asarray(m).shape[0] < 1 for m in local_models):
        raise ValueError("every local model needs at least one topic")
    model = initial if initial is not None else GlobalModel.empty(np.asarray(local_models[0]).shape[1])
    integration = _Integration(model, xi=xi, top_l=top_l, merge_within_party=merge_within_party)
    for party, (local, amount) in enumerate(zip(local_models, data_amounts)):
        integration.merge(local, amount, party)
    return integration.result()


# --------------------------------------------------------------------------- Algorithm 3
@dataclass
class _GlobalTop:
    """A normalized global model with its top-L lists, sorted by word for the join (built once a round)."""

    topic_word: np.ndarray
    idx: np.ndarray
    val: np.ndarray
    sums: np.ndarray
    word_order: np.ndarray
    word_start: np.ndarray
    word_count: np.ndarray

    @classmethod
    def of(cls, topic_word: np.ndarray, top_l: int) -> "_GlobalTop":
        idx, val = top_words(topic_word, top_l)
        return cls(topic_word, idx, val, _sums(val), *_word_blocks(idx.ravel(), topic_word.shape[1]))

    def similarity(self, local: np.ndarray, top_l: int) -> np.ndarray:
        """Eq. 17 of every (local topic, global topic): ``pairwise_weighted_jaccard(local, topic_word)``."""
        li, lv = top_words(local, top_l)
        na, nb = li.shape[0], self.idx.shape[0]
        ent_a, ent_b = _join(li.ravel(), self.word_order, self.word_start, self.word_count)
        mins = np.minimum(lv.ravel()[ent_a], self.val.ravel()[ent_b])
        pair = (ent_a // top_l) * nb + ent_b // top_l
        inter = np.bincount(pair, weights=mins, minlength=na * nb).astype(np.float64).reshape(na, nb)
        return _rho(inter, _sums(lv)[:, None], self.sums[None, :])


def _compose(glob: _GlobalTop, local: np.ndarray, *, xi: float, top_l: int,
             consume_unmatched: bool) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 3 for one normalized local model against a prepared global model."""
    composed = local.copy()
    source = np.full(local.shape[0], -1, dtype=np.int64)
    sim = glob.similarity(local, top_l)
    available = np.ones(glob.topic_word.shape[0], dtype=bool)
    for k in range(local.shape[0]):
        if not available.any():
            break
        row = np.where(available, sim[k], -np.inf)
        best = int(np.argmax(row))
        if row[best] >= xi:
            composed[k] = glob.topic_word[best]
            source[k] = best
            available[best] = False
        elif consume_unmatched:
            available[best] = False
    return composed, source


def compose_local_model(global_topic_word: np.ndarray, local_model: np.ndarray, *, xi: float, top_l: int,
                        consume_unmatched: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 3: the new local model M^'_p for one party.

    Scanning the party's topics in order, each local topic ``z_p`` is replaced by the most similar
    (eq. 17) global topic not yet used for this party if that similarity is ``>= xi``; otherwise it
    is kept. A used global topic is removed from the candidates (ties: the lowest index). The
    pseudo-code's ``remove z from M*`` sits after the ``if``; read literally it also removes the best
    candidate when it was *not* used: ``consume_unmatched=True`` gives that reading, the default
    removes only used topics ("the most similar unused global topic").

    Returns
    -------
    composed : numpy.ndarray
        ``(K_p, V)``, rows sum to 1.
    source : numpy.ndarray
        ``(K_p,)`` int: the global topic placed at each row, -1 where the local topic was kept.
    """
    local = _normalize_rows(local_model, "local_model")
    glob = np.asarray(global_topic_word, dtype=np.float64)
    if glob.ndim != 2 or glob.shape[1] != local.shape[1]:
        raise ValueError("global and local models must share the vocabulary")
    if glob.shape[0] == 0:
        return local.copy(), np.full(local.shape[0], -1, dtype=np.int64)
    prepared = _GlobalTop.of(_normalize_rows(glob, "global_topic_word"), top_l)
    return _compose(prepared, local, xi=xi, top_l=top_l, consume_unmatched=consume_unmatched)


def compose_local_models(global_model: GlobalModel, local_models: Sequence[np.ndarray], *, xi: float, top_l: int,
                         consume_unmatched: bool = False) -> list[np.ndarray]:
    """Algorithm 3 for every party (Algorithm 4, last loop): one composed model per party.

    The same as :func:`compose_local_model` for each party, with the global model's top-L lists
    computed once.
    """
    glob = np.asarray(global_model.topic_word, dtype=np.float64)
    if glob.ndim != 2 or glob.shape[0] == 0:
        return [compose_local_model(glob, m, xi=xi, top_l=top_l, consume_unmatched=consume_unmatched)[0]
                for m in local_models]
    prepared = _GlobalTop.of(_normalize_rows(glob, "global_topic_word"), top_l)
    out = []
    for m in local_models:
        local = _normalize_rows(m, "local_model")
        if local.shape[1] != glob.shape[1]:
            raise ValueError("global and local models must share the vocabulary")
        out.append(_compose(prepared, local, xi=xi, top_l=top_l, consume_unmatched=consume_unmatched)[0])
    return out
