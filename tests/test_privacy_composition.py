"""Basic composition, against hand-computed values."""

import pytest

from flower_topics.privacy.composition import compose, per_tuple_budget


def test_basic_composition_of_tuples_and_rounds():
    # 105 tuples per document (l = 0.7 x M, M = 150) at eps 7.5 / 105, delta' = 0.2, over 3 rounds
    eps = per_tuple_budget(7.5, 105)
    assert eps == pytest.approx(7.5 / 105)
    per_round = compose(eps, 0.2, 105)
    assert per_round.epsilon == pytest.approx(7.5) and per_round.delta == pytest.approx(21.0)
    total = compose(per_round.epsilon, per_round.delta, 3)
    assert total.epsilon == pytest.approx(22.5) and total.delta == pytest.approx(63.0)
    assert total.accountant == "basic composition"


@pytest.mark.parametrize("args", [(-1.0, 0.0, 1), (1.0, -0.1, 1), (1.0, 0.0, -1)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        compose(*args)
