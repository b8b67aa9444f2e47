"""The HTTP API over the store (FastAPI)."""
