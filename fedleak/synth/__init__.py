"""Privacy-preserving synthetic data (seed 003).

:mod:`fedleak.synth.latent` is seed 003's framework: a VAE extractor and
reconstructor, d_x-privacy noise on the latent codes and label transfer.
"""

from .latent import (
    LabelTransfer,
    LatentSynthesizer,
    SyntheticData,
    dx_noise,
    dx_privatize,
    empirical_sensitivity,
    synthesize,
)

__all__ = [
    "LabelTransfer",
    "LatentSynthesizer",
    "SyntheticData",
    "dx_noise",
    "dx_privatize",
    "empirical_sensitivity",
    "synthesize",
]
