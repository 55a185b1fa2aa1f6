"""How fedleak drives Flower's simulation engine, whatever the experiment.

``engine``
    Replies wake the server instead of Flower's 0.1 s polls, the clients'
    timing mod, Ray's backend settings (``[federation] engine``).
``actor_batches``
    Several messages per Ray actor call (``[federation] actor_batch``).
``actor_channels``
    Those batches through a socket to a thread of an actor on the server's
    node instead of a Ray call (``[federation] actor_channels``).
``lifecycle``
    Stop between rounds on SIGINT/SIGTERM, the watcher that removes Ray's
    processes however the run ends, the Ray address and CPU checks.
``checkpoint``
    The global model, strategy state, noise state and clients' states of a
    round, for ``fedleak run --resume``.
``noise``
    The generator Flower's DP wrappers draw from (private unless
    ``[privacy] noise_seed``).
``logs``
    Flower's and Ray's output trimmed to what a user needs.

:mod:`fedleak.experiments` and :mod:`fedleak.bench` build on it; it imports
Flower and the core only.
"""
