"""Framework-neutral post-processing of class activation maps (Grad-CAM), shared by both backends.

Both ``tfpipe.explain.gradcam`` and ``torchpipe.explain.gradcam`` compute only the *raw* map at
the target layer's resolution, ``cam = sum_k w_k A_k`` with ``w_k`` the spatial mean of
``d score / d A_k`` (no ReLU, no resizing, no scaling: tf-keras-vis is called with
``activation_modifier=None, expand_cam=False, normalize_cam=False`` and Captum's
``LayerGradCam`` with ``relu_attributions=False``). Everything after that happens here, once,
in this order (:func:`postprocess_cam`):

1. **ReLU** on the coarse map (Selvaraju et al. 2017, Eq. 2), as tf-keras-vis and Captum do;
2. **bilinear upsampling** to the input size with ``align_corners=False`` (half-pixel centres)
   semantics, the convention of ``torch.nn.functional.interpolate(mode="bilinear",
   align_corners=False)`` and ``tf.image.resize(method="bilinear")``: output pixel ``i``
   samples the input at ``(i + 0.5) * h / H - 0.5``, clamped to the border (edge values are
   repeated, no extrapolation). Implemented by ``scipy.ndimage.zoom(order=1, grid_mode=True,
   mode="nearest")``;
3. **per-map scaling to [0, 1]**: ``(m - min) / (max - min)``, the min-max scaling of
   tf-keras-vis' ``normalize`` (without its epsilon). A map whose range is negligible
   (see :func:`scale_to_unit`) -- e.g. a dead ReLU map -- becomes all zeros, never NaN.

The argument checks both backends share (images, target classes, batch size) live here
too. This module imports neither TensorFlow nor torch.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.ndimage import zoom

from dpcore.architectures import IMAGE_ARCHITECTURES
from dpcore.errors import ConfigError

#: Relative range below which a map counts as constant (float32 round-off is about 1e-7).
CONSTANT_RTOL = 1e-6


def _as_maps(maps: np.ndarray, name: str = "maps") -> np.ndarray:
    """``maps`` as float64 [N, h, w], finite; ConfigError otherwise."""
    arr = np.asarray(maps, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[1] < 1 or arr.shape[2] < 1:
        raise ConfigError(f"{name} have shape {arr.shape}; need [N, h, w] with h, w >= 1")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name} contain NaN or infinite values; need finite numbers")
    return arr


def relu(maps: np.ndarray) -> np.ndarray:
    """``max(maps, 0)`` elementwise, float64 (any shape)."""
    return np.maximum(np.asarray(maps, dtype=np.float64), 0.0)


def upsample_bilinear(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize each map [N, h, w] to ``size = (H, W)`` bilinearly, half-pixel centres.

    Same values as ``torch.nn.functional.interpolate(..., mode="bilinear",
    align_corners=False)`` and ``tf.image.resize(..., "bilinear")`` (no anti-aliasing) up to
    float round-off; a map already of size (H, W) is returned unchanged (as float64).

    Raises:
        ConfigError: ``maps`` not [N, h, w] or not finite, or ``size`` not two positive ints.
    """
    arr = _as_maps(maps)
    if len(size) != 2 or any(int(s) != s or s < 1 for s in size):
        raise ConfigError(f"size={size!r} is not valid; need (H, W) with positive integers")
    height, width = int(size[0]), int(size[1])
    if arr.shape[1:] == (height, width):
        return arr.copy()
    factors = (1.0, height / arr.shape[1], width / arr.shape[2])
    out = zoom(arr, factors, order=1, mode="nearest", grid_mode=True)
    if out.shape != (arr.shape[0], height, width):  # pragma: no cover - zoom rounds exactly
        raise ConfigError(f"upsampling gave shape {out.shape}; expected {(len(arr), *size)}")
    return out


def scale_to_unit(
    maps: np.ndarray, rtol: float = CONSTANT_RTOL, magnitude: np.ndarray | None = None
) -> np.ndarray:
    """Min-max scale each map [N, ...] to [0, 1]; a (numerically) constant map becomes zeros.

    A map counts as constant when ``max - min <= rtol * magnitude`` (this includes the
    all-zero map): such differences are float round-off, not structure.

    Args:
        maps: [N, ...] finite values.
        rtol: relative range below which a map is constant.
        magnitude: per-map size [N] of the values the map was computed from (e.g. the largest
            ``|cam|`` before the ReLU); default ``max(|max|, |min|)`` of the map itself.

    Returns:
        float64 maps of the input shape, each with min 0 and max 1, or all 0.
    """
    arr = np.asarray(maps, dtype=np.float64)
    axes = tuple(range(1, arr.ndim))
    low = arr.min(axis=axes, keepdims=True)
    high = arr.max(axis=axes, keepdims=True)
    span = high - low
    if magnitude is None:
        size = np.maximum(np.abs(high), np.abs(low))
    else:
        size = np.asarray(magnitude, dtype=np.float64).reshape(low.shape)
    constant = span <= rtol * size
    scaled = np.divide(arr - low, span, out=np.zeros_like(arr), where=~constant & (span > 0))
    return np.clip(scaled, 0.0, 1.0)


def postprocess_cam(raw_cam: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Raw Grad-CAM maps [N, h, w] -> saliency maps [N, H, W], float32 in [0, 1].

    ReLU, then :func:`upsample_bilinear` to ``size``, then :func:`scale_to_unit`, with the
    constant-map test relative to the raw map's largest ``|value|`` (so round-off that
    survives the ReLU does not become a full-scale spot). A map with no positive value (or a
    constant one) is all zeros.
    """
    raw = _as_maps(raw_cam, "raw_cam")
    magnitude = np.abs(raw).max(axis=(1, 2))
    return scale_to_unit(upsample_bilinear(relu(raw), size), magnitude=magnitude).astype(
        np.float32
    )


# ------------------------------------------------------------------ argument checks
def check_images(x: np.ndarray, input_shape: tuple[int, ...], model_name: str) -> np.ndarray:
    """Grad-CAM inputs as float32 NHWC in [0, 1] (``uint8`` is divided by 255).

    Args:
        x: images [N, H, W, C], ``uint8`` 0..255 or float in [0, 1].
        input_shape: the model's per-example shape ``(H, W, C)``.
        model_name: for the error message.

    Raises:
        ConfigError: a text model (``input_shape`` of rank 1), or ``x`` of another shape, an
            empty batch, or a dtype that is not an image dtype.
    """
    if len(input_shape) != 3:
        raise ConfigError(
            f"Grad-CAM is defined here for image models only; model {model_name!r} takes "
            f"inputs of shape {tuple(input_shape)} (token ids), valid: an image model "
            f"({', '.join(IMAGE_ARCHITECTURES)})"
        )
    arr = np.asarray(x)
    if arr.ndim != 4 or tuple(arr.shape[1:]) != tuple(input_shape) or len(arr) == 0:
        raise ConfigError(
            f"Grad-CAM inputs have shape {arr.shape}; model {model_name!r} needs "
            f"[N, {', '.join(str(d) for d in input_shape)}] with N >= 1 (NHWC)"
        )
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / np.float32(255.0)
    if not np.issubdtype(arr.dtype, np.floating):
        raise ConfigError(f"Grad-CAM inputs are {arr.dtype}; valid: uint8 or float in [0, 1]")
    return arr.astype(np.float32, copy=False)


def resolve_targets(
    class_idx: np.ndarray | int | None, n: int, n_classes: int,
    predicted: Callable[[], np.ndarray],
) -> np.ndarray:
    """The class whose score each map explains: int64 [n].

    Args:
        class_idx: ``None`` (the predicted class, ``predicted()``), one int for every image,
            or one int per image [n].
        n: number of images.
        n_classes: number of model outputs K; every target must lie in 0..K-1.
        predicted: returns the predicted classes [n] (called only when ``class_idx`` is None).

    Raises:
        ConfigError: a target outside 0..K-1, a non-integer, or a length other than n.
    """
    if class_idx is None:
        targets = np.asarray(predicted())
    else:
        raw = np.asarray(class_idx)
        if raw.dtype == bool or not np.issubdtype(raw.dtype, np.integer):
            raise ConfigError(f"class_idx has dtype {raw.dtype}; valid: int or int array [N]")
        if raw.ndim == 0:
            targets = np.full(n, int(raw))
        elif raw.shape == (n,):
            targets = raw
        else:
            raise ConfigError(f"class_idx has shape {raw.shape}; valid: an int or shape ({n},)")
    targets = targets.astype(np.int64)
    bad = (targets < 0) | (targets >= n_classes)
    if np.any(bad):
        raise ConfigError(
            f"class_idx {targets[bad][0]} is out of range; valid: 0..{n_classes - 1}"
        )
    return targets


def check_batch_size(batch_size: int) -> int:
    """``batch_size`` if it is a positive int; ConfigError otherwise."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) \
            or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} is not valid; valid: an int >= 1")
    return int(batch_size)


def is_constant(maps: np.ndarray) -> np.ndarray:
    """Per map [N, ...]: True where every value equals the first one (bool [N])."""
    arr = np.asarray(maps).reshape(len(maps), -1)
    return np.all(arr == arr[:, :1], axis=1)


__all__ = [
    "CONSTANT_RTOL", "check_batch_size", "check_images", "is_constant", "postprocess_cam",
    "relu", "resolve_targets", "scale_to_unit", "upsample_bilinear",
]
