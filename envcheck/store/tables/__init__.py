"""SQLModel tables of the result store. Migrations in ``migrations/versions`` mirror them.

Enumerated values (probe kind, status, reason, run state) are stored as plain strings, not
database enums: the reason vocabulary grows, and a new code must not need a migration.

One module per what the tables record: ``catalogue`` (environments and suites as last seen),
``runs`` (check runs, and the incidents judged of them), ``results`` (probe results),
``states`` (each environment's health and quarantine, and their transitions), ``shapes``
(data sources' answers), ``deliveries`` (webhooks and their notifications), ``rollups`` (what
pruned results leave behind), ``rollouts`` (the training run's rollouts, counted); ``columns``
holds what they share. Importing any of them runs this package first, which imports them all:
``SQLModel.metadata``, what Alembic compares the migrations with, always holds every table.
"""

from envcheck.store.tables import (
    catalogue,
    deliveries,
    results,
    rollouts,
    rollups,
    runs,
    shapes,
    states,
)

__all__ = ["catalogue", "deliveries", "results", "rollouts", "rollups", "runs", "shapes",
           "states"]
