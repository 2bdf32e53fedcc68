"""Classification metrics over predicted probabilities: accuracy, ROC AUC, per-class.

An AUC ranks per-class scores: the probabilities themselves, or, given the logits whose
softmax they are, the per-class log-odds of those logits (:func:`auc_scores`,
:func:`log_odds`), which keep the ranking a saturated float32 softmax loses to ties.

Shapes and conventions used throughout:

* ``proba``: float array [N, K], K >= 2, row i = the predicted class probabilities of
  example i (softmax output; rows need not sum to exactly 1, see :func:`roc_auc`).
* ``y``: integer labels [N] in 0..K-1.
* The predicted class is ``argmax(proba, axis=1)``; ties go to the lowest class index
  (numpy's argmax).

All functions return plain Python floats / lists / dicts. An undefined value (a class with no
examples, an AUC with one class present) is ``float("nan")``, never an exception; the results
store writes NaN as JSON ``null`` (see :func:`dpcore.io.json_safe`). The summary of a run
(these plus the per-group gaps) is :func:`dpcore.metrics.summary.classification_summary`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import logsumexp
from sklearn.metrics import roc_auc_score

from dpcore.errors import DataError
from dpcore.metrics._checks import as_labels, as_proba

NAN = float("nan")


def accuracy(proba: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy: fraction (in [0, 1], not %) of i with argmax_k proba[i, k] == y[i].

    Args:
        proba: predicted probabilities [N, K].
        y: integer labels [N] in 0..K-1.
    """
    p = as_proba(proba)
    labels = as_labels(y, p.shape[0], p.shape[1])
    return float(np.mean(np.argmax(p, axis=1) == labels))


def _missing_classes(labels: np.ndarray, n_classes: int) -> list[int]:
    """The classes 0..n_classes-1 with no example in ``labels`` (sorted)."""
    return sorted(set(range(n_classes)) - set(np.unique(labels).tolist()))


def _auc_of_scores(scores: np.ndarray, labels: np.ndarray) -> float:
    """The AUC of per-class scores [N, K] (every class present in ``labels``): binary, the
    score of class 1; K > 2, the macro mean of the one-vs-rest AUCs of each class's score."""
    if scores.shape[1] == 2:
        return float(roc_auc_score(labels, scores[:, 1]))
    return float(np.mean([roc_auc_score(labels == k, scores[:, k])
                          for k in range(scores.shape[1])]))


def auc_scores(proba: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
    """The per-class scores [N, K] (float64) an AUC of these predictions ranks.

    Without ``logits``: ``proba`` itself (checked by :func:`~dpcore.metrics._checks.as_proba`).
    With them (the logits whose softmax ``proba`` is, same shape): their :func:`log_odds`,
    per class monotone in the exact probability, so that examples a float32 softmax rounds to
    the same value (0 or 1 for a saturated model) are still ranked.

    Raises:
        DataError: ``proba`` or ``logits`` malformed, or of different shapes.
    """
    p = as_proba(proba)
    if logits is None:
        return p
    scores = log_odds(logits)
    if scores.shape != p.shape:
        raise DataError(f"logits have shape {scores.shape} but proba {p.shape}; give the "
                        "logits whose softmax proba is")
    return scores


def roc_auc_of_scores(scores: np.ndarray, y: np.ndarray) -> float:
    """:func:`roc_auc` of any per-class scores [N, K] (e.g. :func:`auc_scores`: real values,
    larger = more likely that class); NaN when some class 0..K-1 is absent from ``y``."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 2:
        raise DataError(f"scores must have shape [N, K] with N >= 1 and K >= 2; got {s.shape}")
    labels = as_labels(y, s.shape[0], s.shape[1])
    if _missing_classes(labels, s.shape[1]):
        return NAN
    return _auc_of_scores(s, labels)


def roc_auc_undefined_reason(proba: np.ndarray, y: np.ndarray) -> str | None:
    """Why :func:`roc_auc` is NaN for these inputs, or None when it is defined.

    The AUC is undefined when some class 0..K-1 has no example in ``y``: one-vs-rest AUC of
    that class has no positives (and, for K = 2, the binary AUC has only one class).
    """
    p = as_proba(proba)
    labels = as_labels(y, p.shape[0], p.shape[1])
    missing = _missing_classes(labels, p.shape[1])
    if missing:
        return (
            f"class(es) {missing} have no example in y (N={labels.size}); "
            "one-vs-rest ROC AUC needs at least one positive and one negative per class"
        )
    return None


def roc_auc(proba: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve, in [0, 1] (0.5 = chance).

    * K = 2: the AUC of the score ``proba[:, 1]`` for the positive class 1
      (``sklearn.metrics.roc_auc_score(y, proba[:, 1])``).
    * K > 2: the macro (unweighted) mean over classes k of the one-vs-rest AUCs
      ``roc_auc_score(y == k, proba[:, k])``, which is what
      ``roc_auc_score(y, proba, multi_class="ovr", average="macro")`` computes; calling it
      per class avoids that function's check that rows sum to 1 (float32 softmax rows
      often miss its tolerance, and renormalising them would break ties).

    Returns:
        The AUC, or NaN when some class 0..K-1 is absent from ``y``;
        :func:`roc_auc_undefined_reason` then says which.
    """
    return roc_auc_of_scores(as_proba(proba), y)


def log_odds(logits: np.ndarray) -> np.ndarray:
    """Per-class log-odds ``log(p_k / (1 - p_k))`` of ``p = softmax(logits)``, float64 [N, K],
    computed from the logits as ``z_k - logsumexp(z_j, j != k)`` without forming ``p``.

    Monotone in ``p_k`` per class, so an AUC of these scores is the AUC of the exact
    probabilities; unlike a float32 softmax, they do not round to 0 or 1 (and tie) when a
    model is over-confident. For K = 2, ``log_odds[:, 1] = z_1 - z_0``.

    Raises:
        DataError: ``logits`` not a finite [N, K] array with N >= 1, K >= 2.
    """
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 2:
        raise DataError(f"logits must have shape [N, K] with N >= 1 and K >= 2; got {z.shape}")
    if not np.all(np.isfinite(z)):
        raise DataError("logits must be finite; got NaN or infinite values")
    others = np.empty_like(z)
    for k in range(z.shape[1]):
        others[:, k] = logsumexp(np.delete(z, k, axis=1), axis=1)
    return z - others


def roc_auc_from_logits(logits: np.ndarray, y: np.ndarray) -> float:
    """:func:`roc_auc` of ``softmax(logits)`` ranked exactly: the same AUC (binary, or the
    macro one-vs-rest mean) of the per-class :func:`log_odds` scores. NaN when some class is
    absent from ``y`` (as :func:`roc_auc`)."""
    return roc_auc_of_scores(log_odds(logits), y)


def one_vs_rest_auc(proba: np.ndarray, y: np.ndarray, k: int) -> float:
    """AUC of the score ``proba[:, k]`` for "y == k" against "y != k"; NaN if either is empty."""
    return one_vs_rest_auc_of_scores(as_proba(proba), y, k)


def one_vs_rest_auc_of_scores(scores: np.ndarray, y: np.ndarray, k: int) -> float:
    """:func:`one_vs_rest_auc` of any per-class scores [N, K] (e.g. :func:`auc_scores`)."""
    s = np.asarray(scores, dtype=np.float64)
    labels = as_labels(y, s.shape[0], s.shape[1])
    positive = labels == k
    if positive.all() or not positive.any():
        return NAN
    return float(roc_auc_score(positive, s[:, k]))


def per_class_metrics(
    proba: np.ndarray, y: np.ndarray, class_names: Sequence[str] | None = None, *,
    logits: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Metrics of each class k, one dict per class in index order.

    Each dict holds:

    * ``index`` (int), ``name`` (str: ``class_names[k]`` or ``str(k)``);
    * ``support``: number of examples with y == k;
    * ``recall``: per-class accuracy, #{y == k and pred == k} / #{y == k} (NaN if support 0);
    * ``precision``: #{y == k and pred == k} / #{pred == k} (NaN if k is never predicted);
    * ``auc``: one-vs-rest AUC of class k's score (:func:`one_vs_rest_auc_of_scores` of
      :func:`auc_scores`: ``proba[:, k]``, or the log-odds of ``logits`` when given).

    Args:
        proba: predicted probabilities [N, K].
        y: integer labels [N].
        class_names: K names, or None for "0".."K-1".
        logits: the logits whose softmax ``proba`` is, or None: the AUCs then rank them.
    """
    p = as_proba(proba)
    scores = auc_scores(p, logits)
    n_classes = p.shape[1]
    labels = as_labels(y, p.shape[0], n_classes)
    names = class_name_list(class_names, n_classes)
    pred = np.argmax(p, axis=1)
    out: list[dict[str, Any]] = []
    for k in range(n_classes):
        true_k, pred_k = labels == k, pred == k
        hits = int(np.sum(true_k & pred_k))
        support, predicted = int(true_k.sum()), int(pred_k.sum())
        out.append({
            "index": k,
            "name": names[k],
            "support": support,
            "recall": hits / support if support else NAN,
            "precision": hits / predicted if predicted else NAN,
            "auc": one_vs_rest_auc_of_scores(scores, labels, k),
        })
    return out


def class_name_list(class_names: Sequence[str] | None, n_classes: int) -> list[str]:
    """``class_names`` as a list of str, or ``["0", ..., "K-1"]`` when None.

    Raises:
        DataError: if the number of names is not ``n_classes``.
    """
    if class_names is None:
        return [str(k) for k in range(n_classes)]
    names = [str(n) for n in class_names]
    if len(names) != n_classes:
        raise DataError(
            f"class_names has {len(names)} names but proba has {n_classes} classes; "
            "give one name per class"
        )
    return names
