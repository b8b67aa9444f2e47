import pytest

from calc import mean, median, mode


# fail-to-pass: median of an even number of values is the mean of the two middle values


def test_median_even_length() -> None:
    assert median([1, 2, 3, 4]) == 2.5


def test_median_even_unsorted() -> None:
    assert median([10, 1, 7, 3]) == 5.0


# pass-to-pass


def test_median_odd_length() -> None:
    assert median([3, 1, 2]) == 2


def test_median_single() -> None:
    assert median([7]) == 7


def test_median_empty_raises() -> None:
    with pytest.raises(ValueError):
        median([])


def test_mean() -> None:
    assert mean([1, 2, 3, 4]) == 2.5


def test_mode() -> None:
    assert mode([1, 2, 2, 3]) == 2
