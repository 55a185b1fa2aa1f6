"""Attack algorithms and their evaluation, Flower-free (``fedleak.attacks``).

The attacks of the seed papers land here issue by issue; every module is
testable on plain arrays and tensors and imports no Flower code.
"""

__all__: list[str] = []
