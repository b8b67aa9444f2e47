"""What every stage shares and nothing of envcheck's own: results, errors, clock, logs."""
