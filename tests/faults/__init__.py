"""Fault injection: envcheck with its world broken on purpose (disk, engine, input, kills)."""
