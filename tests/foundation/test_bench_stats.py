"""bench/'s one percentile definition, on inputs whose quantiles are known by hand."""

from __future__ import annotations

import math
import statistics

import pytest

from bench.report import percentile


def test_interpolates_between_closest_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 4.0
    # Rank (n - 1) * q = 1.5: halfway between the second and third values.
    assert percentile(values, 0.5) == 2.5
    # Rank 2.7: 3 + 0.7 * (4 - 3).
    assert percentile(values, 0.9) == pytest.approx(3.7)
    # Nearest rank would give 4.0 (round(2.7) = 3, the fourth value).
    assert percentile(values, 0.9) != 4.0


def test_order_of_input_does_not_matter() -> None:
    assert percentile([15.0, 20.0, 35.0, 40.0, 50.0], 0.4) == pytest.approx(29.0)
    assert percentile([50.0, 35.0, 15.0, 40.0, 20.0], 0.4) == pytest.approx(29.0)


def test_median_matches_statistics_median() -> None:
    for values in ([7.0], [3.0, 1.0], [5.0, 1.0, 4.0], [0.2, 9.5, 1.25, 3.0, 8.0, 2.0]):
        assert percentile(values, 0.5) == pytest.approx(statistics.median(values))


def test_one_value_and_no_values() -> None:
    assert percentile([2.5], 0.99) == 2.5
    assert math.isnan(percentile([], 0.5))


@pytest.mark.parametrize("q", [-0.1, 1.5, 90.0])
def test_quantile_outside_zero_to_one_is_refused(q: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0, 2.0], q)
