"""Membership inference: which records were in a model's training data.

Modules (Flower-free, testable on plain arrays and tensors):

``embedding``
    From the embedding-layer updates of collaborative learning (seed 000
    Ch. 7.1.3, Table 7.2).
``classifier``
    Shadow-model and loss-threshold attacks on classifiers, LDP vs CDP
    (seed 004 Ch. 4).
``generative``
    White-box, black-box and auxiliary-knowledge attacks on GANs (seed 000
    Ch. 6).
``montecarlo``
    Monte Carlo and reconstruction attacks on generative models (seed 004
    Ch. 4.4).
``metrics``
    The common interface: scores, single and set MI decisions, top-n
    accuracy, membership advantage.
``false_flags``
    Which non-members the embedding attack flags, by their record's size.
``simulation``
    Two-party synchronized SGD in one process with the embedding adversary
    (Table 7.2; the target optionally defended, Ch. 7.3).
``gradient_norm``
    White-box scores from per-record loss-gradient norms (seed 003 Section
    5.3.2).

Every public name of those modules is importable from this package.
"""

from fedleak._lazy import lazy_exports

_WHERE = {
    "AttackEvaluation": "classifier",
    "AttackerConfig": "generative",
    "AuxiliaryKnowledge": "generative",
    "BlackBoxAttack": "generative",
    "ColorHistogramFeatures": "montecarlo",
    "DEFAULT_ULPS": "embedding",
    "DPSGDProcedure": "classifier",
    "DiscriminativeAttack": "generative",
    "EmbeddingMembership": "embedding",
    "FEATURE_NAMES": "montecarlo",
    "FeatureMap": "montecarlo",
    "HOGFeatures": "montecarlo",
    "LocallyRandomizedProcedure": "classifier",
    "LossThresholdAttack": "classifier",
    "MIMetrics": "metrics",
    "MembershipScores": "embedding",
    "MembershipSetup": "simulation",
    "MonteCarloAttack": "montecarlo",
    "PCAFeatures": "montecarlo",
    "PixelFeatures": "montecarlo",
    "SGDProcedure": "classifier",
    "SIZE_EDGES": "false_flags",
    "ScoreFunction": "metrics",
    "ShadowModelAttack": "classifier",
    "SimulationOutcome": "simulation",
    "TorchClassifier": "classifier",
    "TrainProcedure": "classifier",
    "TrainedModel": "classifier",
    "changed_rows": "embedding",
    "class_averaged_precision_recall": "classifier",
    "contribution_scale": "embedding",
    "evaluate_membership": "classifier",
    "evaluate_scores": "metrics",
    "false_flags_by_size": "false_flags",
    "gradient_norm_scores": "gradient_norm",
    "inputs_and_model": "simulation",
    "loss_scores": "classifier",
    "make_feature_map": "montecarlo",
    "max_membership_advantage": "metrics",
    "mc_distance_scores": "montecarlo",
    "mc_epsilon_scores": "montecarlo",
    "median_heuristic": "montecarlo",
    "membership_advantage": "metrics",
    "mi_trials": "metrics",
    "mitigation_efficiency": "classifier",
    "model_auc": "simulation",
    "pairwise_distances": "montecarlo",
    "percentile_heuristic": "montecarlo",
    "precision_recall": "metrics",
    "reconstruction_scores": "montecarlo",
    "record_bag": "embedding",
    "rounding_tolerance": "embedding",
    "score_membership": "embedding",
    "server_step": "simulation",
    "set_mi_accuracy": "metrics",
    "set_mi_decision": "metrics",
    "simulate_membership": "simulation",
    "single_mi_accuracy": "metrics",
    "threshold_decision": "metrics",
    "top_n_accuracy": "metrics",
    "top_n_decision": "metrics",
    "white_box_scores": "generative",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
__all__ = sorted(_WHERE)
