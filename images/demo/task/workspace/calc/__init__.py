"""calc: tiny statistics helpers (envcheck demo task)."""

from calc.stats import mean, median, mode

__all__ = ["mean", "median", "mode"]
