"""The daemon's timing: interval jobs feeding a bounded, prioritised work queue."""
