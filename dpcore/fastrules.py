"""What the two fast DP engines (:mod:`tfpipe.fast`, :mod:`torchpipe.fast`) share:
Book-Keeping's per-layer cost rule. Framework-neutral.

**Book-Keeping clipping** (Bu, Wang, Zha, Karypis, "Differentially private optimization on
large model at small cost", ICML 2023; the ``fastDP`` code): one forward and one backward
pass keep each trainable layer's input ``a`` [n, T, p] and output gradient ``g`` [n, T, d]
(T positions, p inputs and d outputs per position of a p x d weight; a convolution's ``a``
are its unfolded patches). From them, per layer,

* the per-example squared norm of the weight gradient ``a_i^T g_i``, either as the *ghost
  norm* ``sum_{t,t'} (a_i a_i^T)_{tt'} (g_i g_i^T)_{tt'}`` (two T x T Gram matrices per
  example: space 2 T^2) or from the *per-example gradient* ``a_i^T g_i`` itself (space p d);
  :func:`use_ghost_norm` takes the ghost norm exactly when ``2 T^2 < p d``, Book-Keeping's
  hybrid rule (it compares what each holds per example: two T x T Gram matrices or one
  p x d gradient). L1 norms have no ghost form and always take the per-example gradient;
* the clipped sum ``sum_i c_i a_i^T g_i``: from the kept per-example gradients where they
  were made (one contraction with the clip factors ``c``: n p d products, fewer than the
  weight-gradient op's n T p d), else as one weight-gradient op of
  the layer with output gradient ``c * g`` (``a^T (c g)``). Neither is a second backward
  pass: no gradient flows through any other layer again, only the layer's own weight
  gradient is formed from the kept ``a`` and ``g`` (the op the plain backward runs for it).

Each backend files its rules in its own :class:`dpcore.registry.Registry`, keyed by the exact
framework class a rule handles (``@FAST_RULES.register(nn.Conv2d)``; one rule may handle
several classes).
"""

from __future__ import annotations

#: The cost rule's name as recorded in a run's ``perf`` entry.
COST_RULE = "Book-Keeping (Bu et al. 2023): ghost norm where 2 T^2 < p d, else per-example"


def use_ghost_norm(positions: int, fan_in: int, fan_out: int, kind: str = "l2") -> bool:
    """Book-Keeping's per-layer choice: the ghost norm (True) or the per-example gradient.

    Args:
        positions: T, positions per example sharing the weight (output pixels of a
            convolution, tokens of a sequence; 1 for a dense layer on a vector).
        fan_in: p, the weight's inputs per position (a convolution's k_h k_w c_in).
        fan_out: d, the weight's outputs per position (output channels / units).
        kind: ``"l2"`` or ``"l1"``; an L1 norm has no ghost form (always False).

    Returns:
        ``2 T^2 < p d`` for L2 (Bu et al. 2023, ICML, Book-Keeping's hybrid rule).
    """
    return kind == "l2" and 2 * positions * positions < fan_in * fan_out
