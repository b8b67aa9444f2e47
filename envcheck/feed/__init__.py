"""From a cycle's results to states, quarantine, allowlists and exported files."""
