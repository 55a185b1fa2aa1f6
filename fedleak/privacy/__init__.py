"""Differential-privacy toolkit: mechanisms, accountants, DP-SGD, audits (seeds 001, 002, 004)."""
