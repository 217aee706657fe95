"""Partitioners: how the training documents are split among the nodes."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.data import Corpus, parse_sizes, partition_documents
from flower_topics.errors import UserInputError

LABELS = ("arts", "business", "science", "sport")


def labeled_corpus(n_per_label: int = 50, labels: tuple[str, ...] = LABELS) -> Corpus:
    """One one-token document per (label, i); label blocks interleaved to catch order bugs."""
    doc_labels = [labels[i % len(labels)] for i in range(n_per_label * len(labels))]
    return Corpus.from_documents([[i % 3] for i in range(len(doc_labels))], ["a", "b", "c"], labels=doc_labels)


def unlabeled_corpus(n_docs: int) -> Corpus:
    return Corpus.from_documents([[0]] * n_docs, ["a"])


def assert_disjoint_cover(parts: list[np.ndarray], n_docs: int, complete: bool = True) -> None:
    joined = np.concatenate(parts)
    assert joined.dtype == np.int64
    assert len(set(joined.tolist())) == joined.size, "partitions overlap"
    assert all(p.size > 0 and np.all(np.diff(p) > 0) for p in parts), "partitions must be non-empty and sorted"
    if complete:
        assert sorted(joined.tolist()) == list(range(n_docs))


@pytest.mark.parametrize(
    ("scheme", "options"),
    [
        ("iid", {}),
        ("label", {}),
        ("dirichlet", {"dirichlet_alpha": 0.5}),
        ("sizes", {"sizes": [0.25, 0.25, 0.5]}),
    ],
)
def test_every_scheme_is_a_deterministic_disjoint_cover(scheme, options):
    corpus = labeled_corpus()
    parts = partition_documents(corpus, 3, scheme, seed=7, **options)
    assert len(parts) == 3
    assert_disjoint_cover(parts, corpus.n_docs)
    again = partition_documents(corpus, 3, scheme, seed=7, **options)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    if scheme != "label":  # the label scheme has nothing random with fewer partitions than labels
        other = partition_documents(corpus, 3, scheme, seed=8, **options)
        assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


def test_iid_sizes_are_equal_up_to_one_and_labels_are_mixed():
    corpus = labeled_corpus()
    parts = partition_documents(corpus, 3, "iid", seed=0)
    assert sorted(p.size for p in parts) == [66, 67, 67]
    assert all(len(set(corpus.labels[p])) == len(LABELS) for p in parts)


def test_label_scheme_deals_sorted_labels_round_robin():
    corpus = labeled_corpus()
    parts = partition_documents(corpus, 2, "label", seed=0)
    assert [sorted(set(corpus.labels[p])) for p in parts] == [["arts", "science"], ["business", "sport"]]
    parts = partition_documents(corpus, 4, "label", seed=0)
    assert [set(corpus.labels[p]) for p in parts] == [{label} for label in LABELS]


def test_label_scheme_splits_a_label_shared_by_several_partitions():
    corpus = labeled_corpus(labels=("x", "y"))  # 50 documents each
    parts = partition_documents(corpus, 5, "label", seed=0)
    assert_disjoint_cover(parts, corpus.n_docs)
    # partitions 0, 2, 4 share label x; 1, 3 share label y
    assert [set(corpus.labels[p]) for p in parts] == [{"x"}, {"y"}, {"x"}, {"y"}, {"x"}]
    assert [p.size for p in parts] == [17, 25, 17, 25, 16]


def test_label_groups_put_each_label_in_its_partition():
    corpus = labeled_corpus()
    groups = [["sport"], ["arts", "science"], ["business"]]
    parts = partition_documents(corpus, 3, "label", seed=0, label_groups=groups)
    assert_disjoint_cover(parts, corpus.n_docs)
    for part, group in zip(parts, groups):
        assert set(corpus.labels[part]) == set(group)
        assert part.size == 50 * len(group)


def test_label_groups_may_leave_labels_out():
    corpus = labeled_corpus()
    parts = partition_documents(corpus, 2, "label", seed=0, label_groups=[["sport"], [" arts "]])
    assert_disjoint_cover(parts, corpus.n_docs, complete=False)
    assert [set(corpus.labels[p]) for p in parts] == [{"sport"}, {"arts"}]


def test_dirichlet_small_alpha_is_label_skewed_large_alpha_is_not():
    corpus = labeled_corpus(n_per_label=250)

    def mean_max_label_share(alpha: float) -> float:
        parts = partition_documents(corpus, 4, "dirichlet", seed=1, dirichlet_alpha=alpha)
        assert_disjoint_cover(parts, corpus.n_docs)
        shares = []
        for part in parts:
            _, counts = np.unique(corpus.labels[part], return_counts=True)
            shares.append(counts.max() / part.size)
        return float(np.mean(shares))

    # IID would give each partition about 1/4 of each label.
    assert mean_max_label_share(0.05) > 0.7
    assert mean_max_label_share(1000.0) < 0.3


def test_dirichlet_meets_min_partition_size_or_says_why():
    corpus = labeled_corpus()
    parts = partition_documents(corpus, 4, "dirichlet", seed=0, dirichlet_alpha=0.3, min_partition_size=20)
    assert min(p.size for p in parts) >= 20
    with pytest.raises(UserInputError, match="raise dirichlet-alpha"):
        partition_documents(corpus, 8, "dirichlet", seed=0, dirichlet_alpha=0.01, min_partition_size=24)


def test_sizes_counts_are_exact_and_leave_the_rest_out():
    corpus = unlabeled_corpus(600)
    parts = partition_documents(corpus, 3, "sizes", seed=0, sizes=[85, 165, 252])
    assert [p.size for p in parts] == [85, 165, 252]
    assert_disjoint_cover(parts, corpus.n_docs, complete=False)


def test_sizes_ratios_cover_every_document():
    corpus = unlabeled_corpus(101)
    parts = partition_documents(corpus, 3, "sizes", seed=0, sizes=[0.2, 0.3, 0.5])
    assert [p.size for p in parts] == [20, 30, 51]
    assert_disjoint_cover(parts, corpus.n_docs)


def test_parse_sizes():
    assert parse_sizes("85,165,252") == [85.0, 165.0, 252.0]
    assert parse_sizes("85:165:252") == [85.0, 165.0, 252.0]
    assert parse_sizes(" 0.2, 0.3 ,0.5") == [0.2, 0.3, 0.5]
    for text in ("", "85,,165", "a,b", "1,-2", "1,inf"):
        with pytest.raises(UserInputError):
            parse_sizes(text)


@pytest.mark.parametrize(
    ("corpus", "args", "options", "message"),
    [
        (labeled_corpus(), (0, "iid"), {}, "num-partitions 0"),
        (labeled_corpus(), (201, "iid"), {}, "num-partitions 201"),
        (labeled_corpus(), (2, "random"), {}, "scheme 'random' is unknown"),
        (unlabeled_corpus(10), (2, "label"), {}, "needs document labels"),
        (unlabeled_corpus(10), (2, "dirichlet"), {}, "needs document labels"),
        (labeled_corpus(), (2, "dirichlet"), {"dirichlet_alpha": 0.0}, "dirichlet-alpha"),
        (labeled_corpus(), (2, "sizes"), {}, "needs partition sizes"),
        (labeled_corpus(), (2, "sizes"), {"sizes": [10, 20, 30]}, "3 partition sizes given for 2"),
        (labeled_corpus(), (2, "sizes"), {"sizes": [150, 100]}, "add up to 250"),
        (labeled_corpus(), (3, "sizes"), {"sizes": [85.0, 165.5, 252.0]}, "neither whole document counts nor ratios"),
        (labeled_corpus(), (2, "sizes"), {"sizes": [0.5, -0.5]}, "positive"),
        (labeled_corpus(), (2, "label"), {"label_groups": [["sport"]]}, "1 label groups given for 2"),
        (labeled_corpus(), (2, "label"), {"label_groups": [["sport"], ["chess"]]}, "unknown labels"),
        (labeled_corpus(), (2, "label"), {"label_groups": [["sport"], ["sport", "arts"]]}, "more than one label group"),
        (labeled_corpus(), (2, "label"), {"label_groups": [["sport"], []]}, "empty"),
        (
            Corpus.from_documents([[0]] * 4, ["a"], labels=["x", "y", "y", "y"]),
            (4, "label"),
            {},
            "label 'x' has 1 documents but 2 partitions",
        ),
        (labeled_corpus(), (2, "iid"), {"min_partition_size": 150}, "fewer than 150"),
    ],
)
def test_bad_partition_inputs_are_user_errors(corpus, args, options, message):
    with pytest.raises(UserInputError, match=message) as error:
        partition_documents(corpus, *args, seed=0, **options)
    assert "\n" not in str(error.value)
