"""Experiment files bundled with fedleak (``fedleak quickstart`` reads them)."""
