"""Privacy-preserving synthetic data (seed 003)."""
