"""The health model and the quarantine policy: pure functions of stored history."""
