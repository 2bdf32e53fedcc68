"""Per-class weights of the training loss (``train.class_weights``), one entry per rule.

A rule maps the training labels to one weight per class; the non-private step multiplies
each example's cross-entropy by its class's weight (both backends, every engine: the weight
joins the row weights that already mark padding rows). Registered like every extension point
(:class:`dpcore.registry.Registry`)::

    @CLASS_WEIGHTINGS.register("balanced")
    def _balanced(labels, n_classes): ...

* ``none``: every class weighs 1 (the default; no weights are applied at all).
* ``balanced``: ``n / (K * n_c)``, scikit-learn's ``compute_class_weight("balanced")`` (a
  class with half the examples of another weighs twice as much): the loss of each class
  sums to the same total, as if the training classes were equally frequent. Meant for a
  non-private baseline on a data set whose test classes are not in the training split's
  proportions (PneumoniaMNIST: 74 % pneumonia in training, 62.5 % in test).

The weights are a statistic of the training labels, which no privacy mechanism of the bench
accounts for: the configs allow them on non-private runs only
(:func:`dpcore.config.recipe_rules.check_class_weights_combination`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dpcore.errors import DataError
from dpcore.registry import Registry

#: A rule: ``(training labels [n] int, number of classes K) -> weights [K] float64`` or
#: ``None`` (every class weighs 1: no weights applied).
ClassWeighting = Callable[[np.ndarray, int], "np.ndarray | None"]

#: ``train.class_weights`` name -> its rule.
CLASS_WEIGHTINGS: Registry[str, ClassWeighting] = Registry(
    "class weightings of the training loss", key="train.class_weights")


@CLASS_WEIGHTINGS.register("none")
def _unweighted(labels: np.ndarray, n_classes: int) -> np.ndarray | None:
    """Every class weighs 1."""
    return None


@CLASS_WEIGHTINGS.register("balanced")
def _balanced(labels: np.ndarray, n_classes: int) -> np.ndarray | None:
    """``n / (K * n_c)`` per class c (scikit-learn's ``compute_class_weight``).

    Raises:
        DataError: a class in ``range(n_classes)`` has no training example (its weight would
            be infinite), naming the classes present.
    """
    from sklearn.utils.class_weight import compute_class_weight  # deferred: slow to import

    labels = np.asarray(labels, np.int64)
    present = np.unique(labels)
    missing = sorted(set(range(n_classes)) - {int(c) for c in present})
    if missing:
        raise DataError(
            f"train.class_weights='balanced' needs an example of every class, but the "
            f"training labels have none of class(es) {missing} (classes present: "
            f"{[int(c) for c in present]}); valid: train.class_weights='none'")
    return compute_class_weight("balanced", classes=np.arange(n_classes), y=labels)


def loss_class_weights(rule: str, labels: np.ndarray, n_classes: int
                       ) -> tuple[float, ...] | None:
    """The weight of each class under ``rule`` (a :data:`CLASS_WEIGHTINGS` name), or ``None``
    when every class weighs 1. Raises ConfigError naming an unknown rule."""
    weights = CLASS_WEIGHTINGS[rule](np.asarray(labels), int(n_classes))
    return None if weights is None else tuple(float(w) for w in weights)


def row_weights(class_weights: tuple[float, ...] | None, labels: np.ndarray,
                weights: np.ndarray) -> np.ndarray:
    """``weights`` (float32 [n], 0 on padding rows) times each row's class weight; itself
    when ``class_weights`` is None."""
    if class_weights is None:
        return weights
    table = np.asarray(class_weights, np.float32)
    return (weights * table[np.asarray(labels, np.int64)]).astype(np.float32)


__all__ = ["CLASS_WEIGHTINGS", "ClassWeighting", "loss_class_weights", "row_weights"]
