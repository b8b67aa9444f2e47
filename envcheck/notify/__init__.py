"""Alerts on transitions and incidents, delivered to webhooks exactly once."""
