"""Property inference: what the other participants' data have in common.

Modules (Flower-free):

``classifier``
    The passive attack: Alg. 7's batch property classifier on gradient
    features, the observation log, AUC and scores (seed 000 Ch. 7.1.4).
``gradients``
    The adversary's local computations: aggregate derivation, emulated
    updates, the active attack's multi-task gradient (Ch. 7.1.5).
``text``
    The text analogue on real short texts (Debian fortunes).
``simulation``
    Two-party synchronized SGD in one process with the passive attack on
    its updates, several classifiers on the same rounds (the target
    optionally defended, Ch. 7.3).
``scoring``
    Offline scoring of a finished Flower run from the adversary's
    observation log and the target's truth.

Every public name of those modules is importable from this package.
"""

from fedleak._lazy import lazy_exports

_WHERE = {
    "AuxiliaryPools": "gradients",
    "BatchPropertyClassifier": "classifier",
    "CLASSIFIER_KINDS": "classifier",
    "DEFAULT_TEXT_CATEGORIES": "text",
    "ObservationLog": "classifier",
    "POOLINGS": "classifier",
    "PropertyHead": "gradients",
    "PropertyObservations": "classifier",
    "TextAttackResult": "text",
    "TextPropertyTask": "text",
    "analyse_run": "scoring",
    "apply_head_step": "gradients",
    "dataset_score": "classifier",
    "derive_averaging_aggregate": "gradients",
    "derive_sgd_aggregate": "gradients",
    "emulated_averaging_pair": "gradients",
    "emulated_sgd_pair": "gradients",
    "fortunes_property_task": "text",
    "gradient_features": "classifier",
    "last_linear": "gradients",
    "load_observations": "classifier",
    "load_truth": "scoring",
    "local_update": "gradients",
    "multitask_gradient": "gradients",
    "recorded_rows": "text",
    "run_text_property_attack": "text",
    "score_series": "classifier",
    "simulate_property": "simulation",
    "simulate_property_attacks": "simulation",
    "single_batch_auc": "classifier",
    "summed_batch_gradient": "gradients",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
__all__ = sorted(_WHERE)
