"""The model-randomisation sanity check of saliency maps (Adebayo et al. 2018, "Sanity checks
for saliency maps", Sec. 3.1, cascading randomisation).

An explanation that explains the *model* must change when the model's learned weights are
replaced by random ones. The check compares the saliency maps of the trained model with those
of the same architecture whose explained layer and every weighted layer above it, up to the
output, are re-initialised (seeded), the layers below keeping their trained weights:

* :func:`cascade_layers`: the re-initialised layers (forward order, explained layer first);
* :func:`randomised_weights`: the trained weights with those layers re-initialised, in the
  framework-neutral layout of :mod:`dpcore.weights` (so one code path serves both backends);
* :func:`randomisation_check`: per-image similarity of the two sets of maps, by Spearman rank
  correlation (the paper's main measure) and SSIM, and the verdict.

**Threshold.** An explanation *fails* when the median Spearman correlation over images
exceeds :data:`FAIL_SPEARMAN` = 0.5. Two unrelated maps have rank correlation near 0; at 0.5
the randomised model still orders the pixels largely as the trained one does (a correlation
of 0.5 is what shares a quarter of the rank variance: more than chance can give for maps of
hundreds of pixels, less than "the same map"). In the paper, Gradient and Grad-CAM maps
change substantially under cascading randomisation while Guided Backprop and Guided Grad-CAM
stay similar to the trained model's; 0.5 lies between "unrelated" (about 0) and "the same"
(1), separating the two; the SSIM is reported beside it, not used for the verdict.

numpy, scipy and scikit-image only (no framework). The Spearman correlation is computed
row-wise from scipy's ``rankdata`` (one call for all images, ties averaged) rather than with
one ``spearmanr`` call per image; the two are the same number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

from dpcore.errors import ConfigError, DataError
from dpcore.ldp.quality import ssim
from dpcore.weights import Weights, init_weights

#: Median Spearman correlation above which the maps "did not change": the check fails.
FAIL_SPEARMAN = 0.5
#: Seed of the re-initialisation (fixed: the check is reproducible, and independent of the run
#: seed that drew the model's own initial weights only by the generator's key).
RANDOMISATION_SEED = 1_000_003
#: Verdicts stored in ``sanity["verdict"]``.
PASSES = "passes the randomisation check"
FAILS = "fails the randomisation check"


def cascade_layers(layer_order: Sequence[str], weighted: Sequence[str], explained: str
                   ) -> list[str]:
    """The layers the cascading randomisation re-initialises: the explained layer and every
    later layer in forward order, restricted to the layers that have weights.

    Args:
        layer_order: every layer name in forward order (``Architecture.walk``).
        weighted: the names of the layers that have weights.
        explained: the layer whose output Grad-CAM explains.

    Raises:
        ConfigError: ``explained`` is not in ``layer_order`` (the message names the layers),
            or no weighted layer is at or above it (nothing to randomise).
    """
    order = list(layer_order)
    if explained not in order:
        raise ConfigError(f"explained layer {explained!r} is not a layer of the model; valid: "
                          f"{', '.join(order)}")
    have = set(weighted)
    layers = [name for name in order[order.index(explained):] if name in have]
    if not layers:
        raise ConfigError(f"no layer with weights at or above {explained!r}: the model "
                          "randomisation check has nothing to re-initialise")
    return layers


def randomised_weights(weights: Mapping[str, np.ndarray], layers: Sequence[str],
                       seed: int = RANDOMISATION_SEED) -> Weights:
    """``weights`` (neutral layout, keys ``"<layer>.<parameter>"``) with every parameter of
    ``layers`` re-initialised by :func:`dpcore.weights.init_weights` (Glorot-uniform kernels,
    zero biases, unit GroupNorm scales: the bench's neutral initialisation) of ``seed``; the
    other layers' arrays are copied unchanged.

    Raises:
        ConfigError: a layer of ``layers`` has no key in ``weights``.
    """
    prefixes = {name: [k for k in weights if k.rsplit(".", 1)[0] == name] for name in layers}
    missing = [name for name, keys in prefixes.items() if not keys]
    if missing:
        raise ConfigError(f"layers {', '.join(missing)} have no weights to re-initialise")
    keys = [k for ks in prefixes.values() for k in ks]
    fresh = init_weights({k: tuple(np.shape(weights[k])) for k in keys}, seed)
    return {k: (fresh[k] if k in fresh else np.array(v, dtype=np.float32, copy=True))
            for k, v in weights.items()}


def spearman_per_map(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman rank correlation of each pair of maps ``a[i]``, ``b[i]`` ([N, H, W] each):
    float64 [N]. Ties get their average rank. A pair where both maps are constant is 1.0 (no
    pixel is ranked above another in either: the ranking did not change); where one is
    constant and the other is not, 0.0 (the ranking was lost or created)."""
    x, y = _pair(a, b)
    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    nx, ny = np.sqrt((rx ** 2).sum(axis=1)), np.sqrt((ry ** 2).sum(axis=1))
    flat_x, flat_y = nx == 0, ny == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(axis=1) / (nx * ny)
    rho[flat_x & flat_y] = 1.0
    rho[flat_x ^ flat_y] = 0.0
    return np.clip(rho, -1.0, 1.0)


def ssim_per_map(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SSIM of each pair of maps (data range 1: Grad-CAM maps are in [0, 1]) with
    :func:`dpcore.ldp.quality.ssim` (scikit-image; window shrunk for small maps): [N]."""
    _pair(a, b)
    return np.array([ssim(m[..., None], n[..., None]) for m, n in zip(a, b, strict=True)])


def randomisation_check(trained_maps: np.ndarray, random_maps: np.ndarray, *,
                        layers: Sequence[str] = (), seed: int = RANDOMISATION_SEED,
                        threshold: float = FAIL_SPEARMAN) -> dict[str, Any]:
    """Compare the trained model's maps with the randomised model's ([N, H, W], in [0, 1]).

    Returns (JSON-able):

    * ``spearman_median`` / ``ssim_median``: medians over the N images (the verdict reads
      the Spearman one); ``spearman_mean`` / ``ssim_mean`` beside them;
    * ``n``: images compared; ``threshold``: :data:`FAIL_SPEARMAN` by default;
    * ``passes`` (bool) and ``verdict`` (:data:`PASSES` / :data:`FAILS`): fails when the
      median Spearman exceeds ``threshold`` (the maps did not change);
    * ``randomised_layers`` and ``seed``: what was re-initialised, with which seed;
    * ``method``: one line naming the test.
    """
    rho = spearman_per_map(trained_maps, random_maps)
    structural = ssim_per_map(trained_maps, random_maps)
    median = float(np.median(rho))
    passes = not median > threshold
    return {
        "method": ("model randomisation (Adebayo et al. 2018), cascading from the explained "
                   "layer to the output; Spearman rank correlation and SSIM of the maps"),
        "n": int(rho.size),
        "spearman_median": median,
        "spearman_mean": float(np.mean(rho)),
        "ssim_median": _finite_median(structural),
        "ssim_mean": _finite_mean(structural),
        "threshold": float(threshold),
        "passes": bool(passes),
        "verdict": PASSES if passes else FAILS,
        "randomised_layers": list(layers),
        "seed": int(seed),
    }


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 3 or a.shape != b.shape or a.shape[0] < 1:
        raise DataError(f"maps of shapes {a.shape} and {b.shape}: need two equal [N, H, W] "
                        "arrays with N >= 1")
    return a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)


def _finite_median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else math.nan


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.mean(finite)) if finite.size else math.nan


__all__ = ["FAILS", "FAIL_SPEARMAN", "PASSES", "RANDOMISATION_SEED", "cascade_layers",
           "randomisation_check", "randomised_weights", "spearman_per_map", "ssim_per_map"]
