"""DPGM: differentially private mixture of generative models (seed 001, seed 000 Ch. 5)."""
