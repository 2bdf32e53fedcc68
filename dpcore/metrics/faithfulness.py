"""Faithfulness of saliency maps (Grad-CAM): Average Drop, Increase in Confidence, masked-input
score, and the RISE deletion / insertion AUCs.

Shapes and conventions:

* ``x``: images [N, H, W, C], float in [0, 1] (channels last, whatever the backend's layout:
  a backend's ``predict_proba`` converts).
* ``saliency``: maps L [N, H, W] in [0, 1], one per image (Grad-CAM upsampled to the input
  size and scaled to [0, 1]); a pixel's saliency applies to all of its channels.
* ``predict_proba``: a callable [n, H, W, C] -> [n, K] of softmax probabilities; it is
  called on batches of at most ``batch_size`` images, with the dtype of ``x``.
* ``target``: class indices c [N] whose probability is scored (the label or the predicted
  class, as the caller decides).
* Y_i = predict_proba(x_i)[c_i] and O_i = predict_proba(x_i * L_i)[c_i] (Chattopadhay et al.
  2018, "Grad-CAM++", Sec. 5.1: Average Drop and Increase in Confidence).

Only the formulas are written by hand here: no maintained library computes them over an
arbitrary framework's ``predict_proba`` (Captum and tf-keras-vis are each tied to a
framework, and this module must import neither).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np
from scipy.integrate import trapezoid
from scipy.ndimage import gaussian_filter

from dpcore.errors import ConfigError, DataError
from dpcore.metrics._checks import as_labels, as_unit_vector, check_unit_range

PredictProba = Callable[[np.ndarray], np.ndarray]
#: A perturbation baseline: a constant pixel value, "blur" (a blurred copy of each image) or
#: an array shaped like ``x``.
Baseline = float | Literal["blur"] | np.ndarray

DEFAULT_SUBSET_SIZE = 500
DEFAULT_N_STEPS = 32
DEFAULT_BATCH_SIZE = 64


def seeded_subset(n_total: int, size: int = DEFAULT_SUBSET_SIZE, seed: int = 0) -> np.ndarray:
    """The fixed test subset on which faithfulness is measured: sorted indices.

    Draws ``size`` distinct indices of 0..n_total-1 uniformly with
    ``numpy.random.default_rng(seed)`` and sorts them; returns all of 0..n_total-1 when
    ``n_total <= size``. The same (n_total, size, seed) gives the same indices on every
    machine and in both backends.

    Raises:
        ConfigError: if ``n_total < 1`` or ``size < 1``.
    """
    if n_total < 1:
        raise ConfigError(f"n_total={n_total}: the test set is empty; need at least 1 example")
    if size < 1:
        raise ConfigError(f"size={size} is not a valid subset size; valid: >= 1")
    if n_total <= size:
        return np.arange(n_total, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_total, size=size, replace=False)).astype(np.int64)


def predict_in_batches(
    predict_proba: PredictProba, x: np.ndarray, batch_size: int = DEFAULT_BATCH_SIZE
) -> np.ndarray:
    """``predict_proba`` over ``x`` in batches of at most ``batch_size``: float64 [N, K]."""
    _check_batch_size(batch_size)
    parts = [
        _call(predict_proba, x[start:start + batch_size])
        for start in range(0, x.shape[0], batch_size)
    ]
    return np.concatenate(parts, axis=0)


def mask_inputs(x: np.ndarray, saliency: np.ndarray) -> np.ndarray:
    """The saliency-masked inputs x_i * L_i (L broadcast over channels), dtype of ``x``."""
    images, maps = _check_images(x, saliency)
    return (images * maps[..., None]).astype(images.dtype, copy=False)


def average_drop(Y: np.ndarray, O: np.ndarray) -> float:  # noqa: E741 (the paper's names)
    """Average Drop in %: 100 * mean_i( max(0, Y_i - O_i) / Y_i ), in [0, 100]; lower is better.

    Args:
        Y: probability of the target class on the original images [N], in [0, 1].
        O: the same on the saliency-masked images [N], in [0, 1].

    A term with Y_i = 0 (a float32 softmax can underflow) counts as 0: nothing can drop.
    """
    y_arr = as_unit_vector(Y, "Y")
    o_arr = as_unit_vector(O, "O", y_arr.shape[0])
    drop = np.maximum(0.0, y_arr - o_arr)
    ratio = np.divide(drop, y_arr, out=np.zeros_like(drop), where=y_arr > 0)
    return float(100.0 * np.mean(ratio))


def increase_in_confidence(Y: np.ndarray, O: np.ndarray) -> float:  # noqa: E741
    """Increase in Confidence in %: 100 * mean_i [Y_i < O_i] (strict), in [0, 100]; higher
    is better. Arguments as in :func:`average_drop`."""
    y_arr = as_unit_vector(Y, "Y")
    o_arr = as_unit_vector(O, "O", y_arr.shape[0])
    return float(100.0 * np.mean(y_arr < o_arr))


def saliency_rank(saliency: np.ndarray) -> np.ndarray:
    """Each pixel's position in the deletion / insertion order: int64 [N, H*W].

    Pixels are ordered by saliency, highest first; ties are broken by raster order (row-major
    pixel index, smaller first), using a stable sort of -L. ``rank[i, p] = r`` means pixel p
    (flat index h * W + w) of image i is the (r+1)-th to be removed (deletion) or inserted.
    """
    maps = np.asarray(saliency)
    flat = maps.astype(np.float64, copy=False).reshape(maps.shape[0], -1)
    order = np.argsort(-flat, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(flat.shape[1])[None, :], axis=1)
    return rank


def step_fractions(n_pixels: int, n_steps: int = DEFAULT_N_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Pixel counts k_s = floor(s * P / n_steps), s = 0..n_steps, and fractions k_s / P.

    The curve has n_steps + 1 points, from 0 to all P pixels perturbed; with n_steps dividing
    P the steps are exactly equal, otherwise they differ by at most one pixel.
    """
    if n_steps < 1:
        raise ConfigError(f"n_steps={n_steps} is not valid; valid: >= 1")
    counts = (np.arange(n_steps + 1, dtype=np.int64) * n_pixels) // n_steps
    return counts, counts / n_pixels


def make_baseline(x: np.ndarray, baseline: Baseline, blur_sigma: float | None = None) -> np.ndarray:
    """The baseline images [N, H, W, C] (dtype of ``x``) that perturbed pixels take.

    * a number b: every pixel set to b (RISE's deletion uses 0);
    * ``"blur"``: each image blurred by a Gaussian over H and W (not across channels or
      images), ``scipy.ndimage.gaussian_filter`` with mode "reflect" and its default 4-sigma
      truncation. RISE's reference code blurs 224-px images with sigma 5 px (an 11-tap
      kernel); the default here scales that to the image: sigma = max(1, 5 * max(H, W) / 224)
      pixels. ``blur_sigma`` overrides it (pixels).
    * an array shaped like ``x``: used as is.
    """
    images = np.asarray(x)
    if isinstance(baseline, str):
        if baseline != "blur":
            raise ConfigError(f"baseline={baseline!r} is not known; valid: a number, 'blur', "
                              "or an array shaped like x")
        sigma = default_blur_sigma(images.shape[1:3]) if blur_sigma is None else blur_sigma
        if sigma <= 0:
            raise ConfigError(f"blur_sigma={sigma} is not valid; valid: > 0 pixels")
        return gaussian_filter(images, sigma=(0, sigma, sigma, 0), mode="reflect")
    if np.isscalar(baseline):
        return np.full_like(images, float(baseline))
    arr = np.asarray(baseline, dtype=images.dtype)
    if arr.shape != images.shape:
        raise DataError(f"baseline array has shape {arr.shape}; it must match x, {images.shape}")
    return arr


def default_blur_sigma(image_hw: tuple[int, ...]) -> float:
    """Default insertion blur in pixels: max(1, 5 * max(H, W) / 224) (RISE's 5 px at 224 px)."""
    return max(1.0, 5.0 * max(image_hw) / 224.0)


def perturbation_curve(
    x: np.ndarray,
    saliency: np.ndarray,
    predict_proba: PredictProba,
    target: np.ndarray,
    *,
    mode: Literal["deletion", "insertion"],
    n_steps: int = DEFAULT_N_STEPS,
    baseline: Baseline | None = None,
    blur_sigma: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> tuple[np.ndarray, np.ndarray]:
    """The RISE deletion or insertion curve of each image (Petsiuk et al. 2018, BMVC).

    At step s = 0..n_steps the k_s most salient pixels (:func:`step_fractions`, order of
    :func:`saliency_rank`) are

    * ``"deletion"``: replaced by the baseline (default 0) in the original image;
    * ``"insertion"``: copied from the original image into the baseline (default "blur").

    and the probability of the target class is recorded. Deletion runs from Y_i (s = 0) to
    the baseline's score; insertion from the baseline's score to Y_i.

    Calls ``predict_proba`` N * (n_steps + 1) times in batches of ``batch_size`` images,
    never holding more than ``batch_size`` perturbed images (plus the baselines of
    ``batch_size`` images) in memory.

    Returns:
        (fractions [n_steps + 1] in [0, 1], increasing; probabilities [N, n_steps + 1]).
    """
    if mode not in ("deletion", "insertion"):
        raise ConfigError(f"mode={mode!r} is not known; valid: 'deletion', 'insertion'")
    _check_batch_size(batch_size)
    images, maps = _check_images(x, saliency)
    n, height, width = maps.shape
    classes = as_labels(target, n, name="target")
    counts, fractions = step_fractions(height * width, n_steps)
    if baseline is None:
        baseline = 0.0 if mode == "deletion" else "blur"
    n_points = n_steps + 1
    probs = np.empty((n, n_points), dtype=np.float64)
    # Chunks of `batch_size` images give n_points full predict calls each.
    for start in range(0, n, batch_size):
        stop = min(n, start + batch_size)
        chunk = images[start:stop]
        rank = saliency_rank(maps[start:stop]).reshape(stop - start, height, width)
        if isinstance(baseline, np.ndarray):
            base = make_baseline(chunk, baseline[start:stop])
        else:
            base = make_baseline(chunk, baseline, blur_sigma)
        for flat in _batches((stop - start) * n_points, batch_size):
            local, step = np.divmod(flat, n_points)
            perturbed = rank[local] < counts[step][:, None, None]
            mask = perturbed[..., None]
            if mode == "deletion":
                batch = np.where(mask, base[local], chunk[local])
            else:
                batch = np.where(mask, chunk[local], base[local])
            out = _call(predict_proba, batch.astype(images.dtype, copy=False))
            probs[start + local, step] = out[np.arange(flat.size), classes[start + local]]
    return fractions, probs


def curve_auc(fractions: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Area under each curve by the trapezoidal rule over the fractions (x in [0, 1]): [N]."""
    return trapezoid(np.asarray(probs, dtype=np.float64), np.asarray(fractions), axis=-1)


def deletion_auc(
    x: np.ndarray,
    saliency: np.ndarray,
    predict_proba: PredictProba,
    target: np.ndarray,
    *,
    n_steps: int = DEFAULT_N_STEPS,
    baseline: Baseline = 0.0,
    blur_sigma: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> float:
    """Mean over images of the deletion-curve AUC, in [0, 1]; lower = more faithful.

    See :func:`perturbation_curve` (mode "deletion", baseline 0 by default).
    """
    fractions, probs = perturbation_curve(
        x, saliency, predict_proba, target, mode="deletion", n_steps=n_steps,
        baseline=baseline, blur_sigma=blur_sigma, batch_size=batch_size,
    )
    return float(np.mean(curve_auc(fractions, probs)))


def insertion_auc(
    x: np.ndarray,
    saliency: np.ndarray,
    predict_proba: PredictProba,
    target: np.ndarray,
    *,
    n_steps: int = DEFAULT_N_STEPS,
    baseline: Baseline = "blur",
    blur_sigma: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> float:
    """Mean over images of the insertion-curve AUC, in [0, 1]; higher = more faithful.

    See :func:`perturbation_curve` (mode "insertion", blurred-copy baseline by default).
    """
    fractions, probs = perturbation_curve(
        x, saliency, predict_proba, target, mode="insertion", n_steps=n_steps,
        baseline=baseline, blur_sigma=blur_sigma, batch_size=batch_size,
    )
    return float(np.mean(curve_auc(fractions, probs)))


def faithfulness_metrics(
    x: np.ndarray,
    saliency: np.ndarray,
    predict_proba: PredictProba,
    target: np.ndarray,
    labels: np.ndarray | None = None,
    *,
    n_steps: int = DEFAULT_N_STEPS,
    deletion_baseline: Baseline = 0.0,
    insertion_baseline: Baseline = "blur",
    blur_sigma: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    curves: bool = True,
) -> dict[str, Any]:
    """All faithfulness metrics of one set of saliency maps, as one JSON-able dict.

    Keys (floats unless said):

    * ``n`` (int): number of images N;
    * ``average_drop`` (%), ``increase_in_confidence`` (%): see those functions;
    * ``original_score``: mean_i Y_i; ``masked_score``: mean_i O_i (the "average score on
      saliency-masked inputs"), both in [0, 1];
    * ``accuracy`` / ``masked_accuracy``: fraction with argmax == labels on the original /
      masked inputs, or None without ``labels``;
    * ``deletion_auc``, ``insertion_auc``: :func:`deletion_auc`, :func:`insertion_auc`
      (None when ``curves`` is False, which skips the N * (n_steps + 1) * 2 extra calls);
    * ``curve_fractions``, ``deletion_curve``, ``insertion_curve``: the x grid and the mean
      curves over images (lists; None when ``curves`` is False), for plots;
    * ``settings``: n_steps, the baselines (as text), blur sigma in pixels, batch size.
    """
    images, maps = _check_images(x, saliency)
    n = images.shape[0]
    proba = predict_in_batches(predict_proba, images, batch_size)
    classes = as_labels(target, n, proba.shape[1], name="target")
    masked = predict_in_batches(predict_proba, mask_inputs(images, maps), batch_size)
    rows = np.arange(n)
    Y, O = proba[rows, classes], masked[rows, classes]  # noqa: E741
    out: dict[str, Any] = {
        "n": int(n),
        "average_drop": average_drop(Y, O),
        "increase_in_confidence": increase_in_confidence(Y, O),
        "original_score": float(np.mean(Y)),
        "masked_score": float(np.mean(O)),
        "accuracy": None,
        "masked_accuracy": None,
        "deletion_auc": None,
        "insertion_auc": None,
        "curve_fractions": None,
        "deletion_curve": None,
        "insertion_curve": None,
    }
    if labels is not None:
        truth = as_labels(labels, n, proba.shape[1], name="labels")
        out["accuracy"] = float(np.mean(np.argmax(proba, axis=1) == truth))
        out["masked_accuracy"] = float(np.mean(np.argmax(masked, axis=1) == truth))
    if curves:
        common = {"n_steps": n_steps, "blur_sigma": blur_sigma, "batch_size": batch_size}
        fractions, deletion = perturbation_curve(
            images, maps, predict_proba, classes, mode="deletion",
            baseline=deletion_baseline, **common,
        )
        _, insertion = perturbation_curve(
            images, maps, predict_proba, classes, mode="insertion",
            baseline=insertion_baseline, **common,
        )
        out["deletion_auc"] = float(np.mean(curve_auc(fractions, deletion)))
        out["insertion_auc"] = float(np.mean(curve_auc(fractions, insertion)))
        out["curve_fractions"] = fractions.tolist()
        out["deletion_curve"] = deletion.mean(axis=0).tolist()
        out["insertion_curve"] = insertion.mean(axis=0).tolist()
    uses_blur = any(isinstance(b, str) for b in (deletion_baseline, insertion_baseline))
    out["settings"] = {
        "n_steps": int(n_steps),
        "deletion_baseline": _describe(deletion_baseline),
        "insertion_baseline": _describe(insertion_baseline),
        "blur_sigma": (
            float(default_blur_sigma(images.shape[1:3]) if blur_sigma is None else blur_sigma)
            if uses_blur else None
        ),
        "batch_size": int(batch_size),
    }
    return out


def _describe(baseline: Baseline) -> str:
    if isinstance(baseline, str):
        return baseline
    if np.isscalar(baseline):
        return f"constant {float(baseline):g}"
    return "array"


def _check_images(x: np.ndarray, saliency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    images = np.asarray(x)
    if images.ndim != 4 or images.shape[0] < 1:
        raise DataError(f"x must have shape [N, H, W, C] with N >= 1; got {images.shape}")
    if not np.issubdtype(images.dtype, np.floating):
        raise DataError(f"x must be float in [0, 1]; got dtype {images.dtype}")
    check_unit_range(images, "x")
    maps = np.asarray(saliency)
    if not np.issubdtype(maps.dtype, np.floating):
        maps = maps.astype(np.float64)
    if maps.shape != images.shape[:3]:
        raise DataError(
            f"saliency must have shape [N, H, W] = {images.shape[:3]} to match x; "
            f"got {maps.shape}"
        )
    check_unit_range(maps, "saliency")
    return images, maps


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} is not valid; valid: >= 1")


def _batches(total: int, batch_size: int) -> Iterator[np.ndarray]:
    for start in range(0, total, batch_size):
        yield np.arange(start, min(total, start + batch_size))


def _call(predict_proba: PredictProba, batch: np.ndarray) -> np.ndarray:
    out = np.asarray(predict_proba(batch), dtype=np.float64)
    if out.ndim != 2 or out.shape[0] != batch.shape[0] or out.shape[1] < 2:
        raise DataError(
            f"predict_proba returned shape {out.shape} for {batch.shape[0]} images; "
            "expected [n, K] with K >= 2"
        )
    check_unit_range(out, "predict_proba output")
    return out
