"""HTTP sessions and secrets, shared by data-source probes and webhook notifiers."""
