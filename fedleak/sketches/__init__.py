"""Sketch statistics and private aggregation (seed 000 Ch. 2.2 and Ch. 4)."""
