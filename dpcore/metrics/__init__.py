"""The metrics contract: numpy functions written once and used for both backends.

* :mod:`~dpcore.metrics.classification`: accuracy, ROC AUC, per-class metrics, summary;
* :mod:`~dpcore.metrics.fairness`: per-group metrics and their gaps;
* :mod:`~dpcore.metrics.faithfulness`: Grad-CAM faithfulness (Average Drop, Increase in
  Confidence, masked-input score, RISE deletion / insertion AUC) and the seeded test subset;
* :mod:`~dpcore.metrics.audit`: membership-advantage bound of (epsilon, delta)-DP and an
  empirical advantage with a confidence interval.

numpy, scipy and scikit-learn only: this package never imports TensorFlow or PyTorch. Every
function returns plain Python floats / lists / dicts (undefined values are NaN floats, which
the results store writes as JSON null).
"""

from dpcore.metrics.audit import advantage_upper_bound, empirical_advantage, exceeds_bound
from dpcore.metrics.classification import (
    accuracy,
    auc_scores,
    log_odds,
    one_vs_rest_auc,
    one_vs_rest_auc_of_scores,
    per_class_metrics,
    roc_auc,
    roc_auc_from_logits,
    roc_auc_of_scores,
    roc_auc_undefined_reason,
)
from dpcore.metrics.fairness import per_group_metrics
from dpcore.metrics.faithfulness import (
    average_drop,
    curve_auc,
    deletion_auc,
    faithfulness_metrics,
    increase_in_confidence,
    insertion_auc,
    make_baseline,
    mask_inputs,
    perturbation_curve,
    predict_in_batches,
    saliency_rank,
    seeded_subset,
    step_fractions,
)
from dpcore.metrics.summary import classification_summary

__all__ = [
    "accuracy",
    "advantage_upper_bound",
    "auc_scores",
    "average_drop",
    "classification_summary",
    "curve_auc",
    "deletion_auc",
    "empirical_advantage",
    "exceeds_bound",
    "faithfulness_metrics",
    "increase_in_confidence",
    "insertion_auc",
    "log_odds",
    "make_baseline",
    "mask_inputs",
    "one_vs_rest_auc",
    "one_vs_rest_auc_of_scores",
    "per_class_metrics",
    "per_group_metrics",
    "perturbation_curve",
    "predict_in_batches",
    "roc_auc",
    "roc_auc_from_logits",
    "roc_auc_of_scores",
    "roc_auc_undefined_reason",
    "saliency_rank",
    "seeded_subset",
    "step_fractions",
]
