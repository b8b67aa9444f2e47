import os

from calc import mean


def test_mean_cache_warm() -> None:
    """Fails about one run in three, like a test racing a cache warm-up.

    The chance comes from os.urandom: no seed, no clock, a fresh draw in every process.
    """
    lost_race = int.from_bytes(os.urandom(4), "big") % 3 == 0
    assert not lost_race, "cache was not warm yet"
    assert mean([2, 4]) == 3
