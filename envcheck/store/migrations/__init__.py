"""Alembic migrations of the result store; :func:`envcheck.store.open_store` runs them."""
