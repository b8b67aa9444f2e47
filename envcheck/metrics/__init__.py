"""Prometheus metrics over the store: what :class:`StoreMetrics` serves at ``/metrics``.

Cardinality is bounded by the fleet: per-environment series carry (env, suite) and nothing
that grows with time, and can be turned off for per-suite ones; everything else is per
suite, kind, status or data source.

The names are the contract of ``alerts.yaml`` (top level); ``tests/test_alerts.py`` lints a
scrape with ``promtool check metrics`` and checks every name the rules use is exported.
"""

from envcheck.metrics.collector import LiveSchedule, StoreMetrics

__all__ = ["LiveSchedule", "StoreMetrics"]
