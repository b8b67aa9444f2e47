"""Sandboxes: the runtime protocol and its Docker implementation."""
