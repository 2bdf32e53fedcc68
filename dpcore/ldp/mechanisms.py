"""Local-DP mechanisms on images: each perturbs every image on its own, before any training.

Every mechanism works on images normalised to [0, 1] (NHWC, ``float32``), so one pixel value
(one channel of one pixel) can change by at most 1 between any two images: that is the
sensitivity all epsilons below are computed from. Each mechanism states its guarantee at
several *levels* (which pairs of images count as neighbours):

* ``value``: the two images differ in one pixel value, by at most 1;
* ``m_neighbourhood`` (``dp_pix`` only): they differ in at most ``m`` pixel values (Fan 2018);
* ``image``: any two images of the same shape (the whole image may differ).

The per-image epsilon is what protects a patient's image (see :data:`PROTECTS`). Each level
has its dp_accounting :class:`~dp_accounting.DpEvent` (:meth:`LdpMechanism.dp_event`) so that
the one privacy ledger holds local DP too.

Registry: :data:`LDP_MECHANISMS` maps ``laplace``, ``gaussian`` and ``dp_pix`` to frozen,
validated dataclasses (each decorated ``@LDP_MECHANISMS.register()``, filed under its
``name``); :func:`build_mechanism` builds one from a name and a parameter mapping (e.g.
``DataSpec.ldp_mechanism`` / ``DataSpec.ldp_params``). A leaf module (numpy, dp_accounting,
:mod:`dpcore.registry`): the configs read the registered names from it.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_mechanism

from dpcore.errors import ConfigError, DataError, PrivacyError
from dpcore.registry import Registry

#: The sentence every epsilon report carries: which of the levels protects a person.
PROTECTS = (
    "The per-image epsilon is what protects a patient's image: it bounds what the released "
    "copy reveals about the whole image, whereas the per-value epsilon only covers a change "
    "of a single pixel value."
)

#: How the Gaussian epsilons are computed (stated in every Gaussian report).
GAUSSIAN_METHOD = (
    "exact analytic Gaussian mechanism (Balle & Wang 2018): delta(epsilon) from dp_accounting's "
    "GaussianPrivacyLoss.get_delta_for_epsilon, inverted for epsilon by binary search "
    "(tolerance 1e-9)"
)

#: How the Laplace epsilons (``laplace`` and ``dp_pix``) are computed.
LAPLACE_METHOD = (
    "closed form: epsilon = L1 sensitivity / Laplace scale (pure epsilon-DP, delta = 0)"
)


def _positive_finite(mechanism: str, key: str, value: Any, why: str = "") -> float:
    """``value`` as a float, or ConfigError naming the parameter and the valid range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"ldp {mechanism}: {key}={value!r} is not a number; "
                          "valid: a finite number > 0")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"ldp {mechanism}: {key}={value!r} is out of range; "
                          f"valid: a finite number > 0{why}")
    return value


def _positive_int(mechanism: str, key: str, value: Any) -> int:
    """``value`` as an int >= 1 (integral floats such as 4.0 from YAML accepted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"ldp {mechanism}: {key}={value!r} is not valid; valid: an integer >= 1")
    if isinstance(value, numbers.Integral) or (
        math.isfinite(float(value)) and float(value).is_integer()
    ):
        as_int = int(value)
    else:
        raise ConfigError(f"ldp {mechanism}: {key}={value!r} is not valid; valid: an integer >= 1")
    if as_int < 1:
        raise ConfigError(f"ldp {mechanism}: {key}={value!r} is out of range; "
                          "valid: an integer >= 1")
    return as_int


def _check_bool(mechanism: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"ldp {mechanism}: {key}={value!r} is not valid; valid: true, false")
    return bool(value)


def _image_shape(image_shape: tuple[int, ...] | list[int]) -> tuple[int, int, int]:
    """Validate one image's (H, W, C) shape."""
    shape = tuple(int(d) for d in image_shape)
    if len(shape) != 3 or min(shape) < 1 or shape[-1] not in (1, 3):
        raise DataError(f"image_shape={tuple(image_shape)!r} is not valid; "
                        "valid: (H, W, C) with H, W >= 1 and C in (1, 3)")
    return shape  # type: ignore[return-value]


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ConfigError(f"delta={delta!r} is not valid; valid: a number in (0, 1)")
    return float(delta)


def analytic_gaussian_epsilon(noise_std: float, sensitivity: float, delta: float) -> float:
    """Smallest epsilon for which the Gaussian mechanism is (epsilon, delta)-DP (exact).

    This is the analytic Gaussian mechanism of Balle & Wang (2018): the mechanism adding
    N(0, noise_std^2) to a query of L2 sensitivity ``sensitivity`` is (eps, delta)-DP iff
    ``delta >= Phi(s/2 - eps/s) - e^eps Phi(-s/2 - eps/s)`` with ``s = sensitivity/noise_std``.
    dp_accounting evaluates that hockey-stick divergence (in log space, so it stays finite for
    very large epsilon); we invert it by binary search.

    Args:
        noise_std: standard deviation of the Gaussian noise, > 0 (same units as the sensitivity).
        sensitivity: L2 sensitivity of the released vector, > 0.
        delta: target delta in (0, 1).

    Returns:
        epsilon (>= 0), to within 1e-9.
    """
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(
        standard_deviation=noise_std, sensitivity=sensitivity
    )
    search = pld_common.BinarySearchParameters(
        lower_bound=0.0, upper_bound=math.inf, initial_guess=1.0, tolerance=1e-9
    )
    epsilon = pld_common.inverse_monotone_function(loss.get_delta_for_epsilon, delta, search)
    if epsilon is None:  # pragma: no cover - the divergence always reaches delta for finite s
        raise PrivacyError(
            f"no finite epsilon reaches delta={delta} for noise std {noise_std} "
            f"and sensitivity {sensitivity}"
        )
    return float(epsilon)


def _level_entry(
    *,
    epsilon: float,
    delta: float,
    sensitivity: float,
    norm: str,
    noise_scale: float,
    neighbours: str,
) -> dict[str, Any]:
    return {
        "epsilon": epsilon,
        "delta": delta,
        "sensitivity": sensitivity,
        "norm": norm,
        "noise_multiplier": noise_scale / sensitivity,
        "neighbours": neighbours,
    }


_VALUE_NEIGHBOURS = "images that differ in one pixel value (one channel of one pixel), by <= 1"
_IMAGE_NEIGHBOURS = "any two images of this shape (every value may differ, by <= 1)"


class LdpMechanism(abc.ABC):
    """Base of the local-DP mechanisms: frozen dataclasses holding validated parameters.

    Class attributes:
        name: registry name.
        noise_param: the parameter that sets the noise level (the one a montage varies).
        levels: the neighbour relations the mechanism reports an epsilon for.
    """

    name: ClassVar[str]
    noise_param: ClassVar[str]
    levels: ClassVar[tuple[str, ...]]
    clip: bool

    # -- perturbation ------------------------------------------------------------------------
    def apply(self, x01: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb a batch of images.

        Args:
            x01: NHWC images in [0, 1] (any float or uint8-free dtype; not modified).
            rng: the numpy Generator the noise is drawn from.

        Returns:
            ``float32`` NHWC images of the same shape; in [0, 1] if ``clip`` (clipping is
            post-processing and keeps the guarantee), else unbounded.

        Raises:
            DataError: if ``x01`` is not a finite 4-D NHWC array.
            PrivacyError: if values leave [0, 1] (the sensitivity, hence epsilon, assumes it).
        """
        x = _check_images(x01)
        out = self._perturb(x.astype(np.float64, copy=False), rng)
        if self.clip:
            np.clip(out, 0.0, 1.0, out=out)
        return out.astype(np.float32)

    @abc.abstractmethod
    def _perturb(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The noised images (float64), before optional clipping."""

    # -- privacy -------------------------------------------------------------------------------
    def dp_event(
        self, image_shape: tuple[int, ...], level: str = "image"
    ) -> dp_accounting.DpEvent:
        """dp_accounting event of releasing ONE perturbed image, at one neighbour level.

        Args:
            image_shape: (H, W, C) of one image.
            level: one of :attr:`levels`; ``image`` (default) is the one that protects a person.

        Returns:
            A ``LaplaceDpEvent`` or ``GaussianDpEvent`` whose noise multiplier is the noise
            scale divided by the sensitivity at that level.
        """
        entry = self._levels(_image_shape(image_shape), delta=None)[self._check_level(level)]
        return self._event(entry["noise_multiplier"])

    @abc.abstractmethod
    def _event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        """The DpEvent for a given noise-to-sensitivity ratio."""

    def epsilons(self, image_shape: tuple[int, ...], delta: float) -> dict[str, Any]:
        """Epsilon of releasing one perturbed image, at every level of :attr:`levels`.

        Args:
            image_shape: (H, W, C) of one image.
            delta: target delta in (0, 1); used by ``gaussian``, the Laplace-based mechanisms
                are pure epsilon-DP and report delta 0.

        Returns:
            ``{"mechanism", "params", "image_shape", "delta", "per_<level>": {"epsilon",
            "delta", "sensitivity", "norm", "noise_multiplier", "neighbours"}, ...,
            "protects", "method"}``.
        """
        shape = _image_shape(image_shape)
        delta = _check_delta(delta)
        out: dict[str, Any] = {
            "mechanism": self.name,
            "params": self.params(),
            "image_shape": list(shape),
            "delta": delta,
        }
        for level, entry in self._levels(shape, delta=delta).items():
            out[f"per_{level}"] = entry
        out["protects"] = PROTECTS
        out["method"] = self.method
        return out

    @property
    @abc.abstractmethod
    def method(self) -> str:
        """How the epsilons are computed."""

    @abc.abstractmethod
    def _levels(
        self, shape: tuple[int, int, int], delta: float | None
    ) -> dict[str, dict[str, Any]]:
        """One entry per level (epsilon is NaN when ``delta`` is None and one is needed)."""

    def _check_level(self, level: str) -> str:
        if level not in self.levels:
            raise ConfigError(
                f"ldp {self.name}: level={level!r} is not known; valid: {', '.join(self.levels)}"
            )
        return level

    # -- description ---------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """The parameters as a plain JSON-able mapping (what ``build_mechanism`` accepts)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def label(self) -> str:
        """Short file-name-safe description, e.g. ``laplace-scale1`` or ``dp_pix-k4-m1-eps1``."""
        parts = [self.name]
        for key, value in self.params().items():
            if key == "clip":
                if value:
                    parts.append("clip")
                continue
            parts.append(f"{_SHORT.get(key, key)}{value:g}")
        return "-".join(parts)

    def noise_level(self) -> float:
        """The value of :attr:`noise_param`."""
        return float(getattr(self, self.noise_param))

    def with_noise_level(self, value: float) -> LdpMechanism:
        """A copy with :attr:`noise_param` set to ``value`` (validated)."""
        return dataclasses.replace(self, **{self.noise_param: value})  # type: ignore[type-var]


_SHORT = {"scale": "scale", "sigma": "sigma", "epsilon": "eps"}


def _check_images(x01: np.ndarray) -> np.ndarray:
    if not isinstance(x01, np.ndarray) or x01.ndim != 4 or x01.shape[-1] not in (1, 3):
        shape = getattr(x01, "shape", None)
        raise DataError(f"images have shape {shape}; valid: NHWC with 1 or 3 channels")
    if not np.issubdtype(x01.dtype, np.floating):
        raise DataError(f"images are {x01.dtype}; valid: floats in [0, 1] (use as_float01)")
    if x01.size == 0:
        return x01
    lo, hi = float(np.min(x01)), float(np.max(x01))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise DataError("images contain NaN or inf pixel values")
    if lo < 0.0 or hi > 1.0:
        raise PrivacyError(
            f"image values range over [{lo:.4g}, {hi:.4g}]; valid: [0, 1]. The sensitivity "
            "(1 per value), hence every epsilon, assumes images normalised to [0, 1]"
        )
    return x01


#: ``data.ldp_mechanism`` name -> its class, in registration order (the allowed values of
#: ``data.ldp_mechanism``, :func:`dpcore.config.ldp_mechanism_names`).
LDP_MECHANISMS: Registry[str, type[LdpMechanism]] = Registry(
    "local-DP mechanisms", key="data.ldp_mechanism", key_of=lambda cls: cls.name)


@LDP_MECHANISMS.register()
@dataclass(frozen=True)
class LaplaceMechanism(LdpMechanism):
    """Laplace noise of scale ``b`` added to every pixel value in [0, 1].

    Guarantee: per value epsilon = 1/b (sensitivity 1); per image epsilon = H*W*C/b (L1
    sensitivity H*W*C), both pure (delta = 0). The per-image epsilon is what protects a
    patient's image; e.g. 28x28x1 at b = 1 gives 784.

    Attributes:
        scale: Laplace scale b in [0, 1] pixel units, > 0 (std = sqrt(2) * b).
        clip: clip the output to [0, 1] (post-processing: keeps the guarantee).
    """

    name: ClassVar[str] = "laplace"
    noise_param: ClassVar[str] = "scale"
    levels: ClassVar[tuple[str, ...]] = ("value", "image")

    scale: float = 1.0
    clip: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive_finite(
            self.name, "scale", self.scale, " (scale 0 adds no noise: not private)"))
        object.__setattr__(self, "clip", _check_bool(self.name, "clip", self.clip))

    def _perturb(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return x + rng.laplace(0.0, self.scale, size=x.shape)

    def _event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(noise_multiplier)

    @property
    def method(self) -> str:
        return LAPLACE_METHOD

    def _levels(self, shape: tuple[int, int, int], delta: float | None) -> dict[str, Any]:
        hwc = float(math.prod(shape))
        return {
            "value": _level_entry(epsilon=1.0 / self.scale, delta=0.0, sensitivity=1.0,
                                  norm="L1", noise_scale=self.scale,
                                  neighbours=_VALUE_NEIGHBOURS),
            "image": _level_entry(epsilon=hwc / self.scale, delta=0.0, sensitivity=hwc,
                                  norm="L1", noise_scale=self.scale,
                                  neighbours=_IMAGE_NEIGHBOURS),
        }


@LDP_MECHANISMS.register()
@dataclass(frozen=True)
class GaussianMechanism(LdpMechanism):
    """Gaussian noise of standard deviation ``sigma`` added to every pixel value in [0, 1].

    Guarantee, (epsilon, delta) for a given delta: per value with sensitivity 1, per image with
    L2 sensitivity sqrt(H*W*C), each computed exactly (analytic Gaussian mechanism, Balle &
    Wang 2018, evaluated with dp_accounting). The per-image epsilon is what protects a
    patient's image.

    Attributes:
        sigma: noise standard deviation in [0, 1] pixel units, > 0.
        clip: clip the output to [0, 1] (post-processing: keeps the guarantee).
    """

    name: ClassVar[str] = "gaussian"
    noise_param: ClassVar[str] = "sigma"
    levels: ClassVar[tuple[str, ...]] = ("value", "image")

    sigma: float = 1.0
    clip: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _positive_finite(
            self.name, "sigma", self.sigma, " (sigma 0 adds no noise: not private)"))
        object.__setattr__(self, "clip", _check_bool(self.name, "clip", self.clip))

    def _perturb(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return x + self.sigma * rng.standard_normal(size=x.shape)

    def _event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        return dp_accounting.GaussianDpEvent(noise_multiplier)

    @property
    def method(self) -> str:
        return GAUSSIAN_METHOD

    def _levels(self, shape: tuple[int, int, int], delta: float | None) -> dict[str, Any]:
        out = {}
        for level, sensitivity, neighbours in (
            ("value", 1.0, _VALUE_NEIGHBOURS),
            ("image", math.sqrt(math.prod(shape)), _IMAGE_NEIGHBOURS),
        ):
            epsilon = (math.nan if delta is None
                       else analytic_gaussian_epsilon(self.sigma, sensitivity, delta))
            out[level] = _level_entry(
                epsilon=epsilon, delta=math.nan if delta is None else delta,
                sensitivity=sensitivity, norm="L2", noise_scale=self.sigma,
                neighbours=neighbours,
            )
        return out


@LDP_MECHANISMS.register()
@dataclass(frozen=True)
class DpPixMechanism(LdpMechanism):
    """DP-Pix (Fan 2018, "Image pixelization with differential privacy", DBSec).

    The image is cut into a grid of ``k x k`` cells; each cell is replaced by its mean (per
    channel) plus Laplace noise, and the noisy means are written back over the whole cell
    (output H x W, same shape as the input). The paper adds Lap(255 m / (k^2 eps)) in 0..255
    units, i.e. scale ``m / (k^2 eps)`` in [0, 1] units, which makes the release eps-DP for
    images that differ in at most ``m`` pixels (the m-neighbourhood).

    Derivation (checked against the paper's definition): a cell mean over n = k^2 values moves
    by at most 1/n per changed value (in [0, 1] units), so m changed values move the vector of
    cell means by at most m/k^2 in L1; Laplace noise of scale m/(k^2 eps) gives eps. Edge cells
    of an image whose side is not a multiple of k hold n < k^2 values; we give each cell the
    scale m/(n eps) (= the paper's for full cells), so every changed value costs exactly eps/m
    wherever it lies and the m-neighbourhood guarantee stays eps for any H, W (hand-written
    generalisation; the paper crops instead).

    Levels (all pure, delta = 0):

    * ``value``: one changed value costs eps/m;
    * ``m_neighbourhood``: eps for at most m changed pixel values. The paper's images are
      grayscale, where that is m pixels; for RGB (noise per channel) m whole pixels cost C*eps;
    * ``image``: every cell mean may move by 1 per channel, so epsilon = sum over cells and
      channels of n eps / m = H*W*C*eps/m (independent of k). This is what protects a patient's
      image.

    Attributes:
        k: cell side in pixels, >= 1 (the paper's b).
        m: size of the protected neighbourhood, in pixel values, >= 1.
        epsilon: epsilon for the m-neighbourhood, > 0.
        clip: clip the output to [0, 1] (post-processing: keeps the guarantee).
    """

    name: ClassVar[str] = "dp_pix"
    noise_param: ClassVar[str] = "epsilon"
    levels: ClassVar[tuple[str, ...]] = ("value", "m_neighbourhood", "image")

    k: int = 4
    m: int = 1
    epsilon: float = 1.0
    clip: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", _positive_int(self.name, "k", self.k))
        object.__setattr__(self, "m", _positive_int(self.name, "m", self.m))
        object.__setattr__(self, "epsilon", _positive_finite(
            self.name, "epsilon", self.epsilon, " (infinite epsilon is not private)"))
        object.__setattr__(self, "clip", _check_bool(self.name, "clip", self.clip))

    def cell_sizes(self, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Row heights and column widths of the grid (the last ones short if k does not divide)."""
        rows = np.diff(np.append(np.arange(0, height, self.k), height))
        cols = np.diff(np.append(np.arange(0, width, self.k), width))
        return rows, cols

    def cell_scales(self, height: int, width: int) -> np.ndarray:
        """Laplace scale of each cell mean in [0, 1] units, m / (n_cell * epsilon), [rows, cols]."""
        rows, cols = self.cell_sizes(height, width)
        return self.m / (np.outer(rows, cols).astype(np.float64) * self.epsilon)

    def pixelate(self, x: np.ndarray) -> np.ndarray:
        """Cell means (per channel), shape [N, rows, cols, C], float64."""
        _, height, width, _ = x.shape
        rows, cols = self.cell_sizes(height, width)
        starts_r = np.concatenate([[0], np.cumsum(rows)[:-1]])
        starts_c = np.concatenate([[0], np.cumsum(cols)[:-1]])
        sums = np.add.reduceat(np.add.reduceat(x.astype(np.float64), starts_r, axis=1),
                               starts_c, axis=2)
        return sums / np.outer(rows, cols)[None, :, :, None]

    def _perturb(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _, height, width, _ = x.shape
        means = self.pixelate(x)
        scales = self.cell_scales(height, width)[None, :, :, None]
        noisy = means + scales * rng.laplace(0.0, 1.0, size=means.shape)
        rows, cols = self.cell_sizes(height, width)
        return np.repeat(np.repeat(noisy, rows, axis=1), cols, axis=2)

    def _event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(noise_multiplier)

    @property
    def method(self) -> str:
        return (LAPLACE_METHOD + "; DP-Pix noise scale per cell m/(n_cell*epsilon) "
                "(Fan 2018: 255*m/(k^2*epsilon) in 0..255 units)")

    def _levels(self, shape: tuple[int, int, int], delta: float | None) -> dict[str, Any]:
        height, width, channels = shape
        full_cell_scale = self.m / (self.k * self.k * self.epsilon)
        # Sensitivities are stated in units where the (per-cell) noise scale is m/(k^2 eps);
        # epsilon = sensitivity / scale holds at every level.
        per_value = self.epsilon / self.m
        per_m = self.epsilon
        per_image = height * width * channels * self.epsilon / self.m
        m_entry = _level_entry(
            epsilon=per_m, delta=0.0, sensitivity=per_m * full_cell_scale, norm="L1",
            noise_scale=full_cell_scale,
            neighbours=f"images that differ in at most m={self.m} pixel values (Fan 2018's "
            f"m-neighbourhood; for RGB, m whole pixels cost C*epsilon = "
            f"{channels * per_m:g})",
        )
        m_entry["epsilon_m_whole_pixels"] = channels * per_m
        return {
            "value": _level_entry(epsilon=per_value, delta=0.0,
                                  sensitivity=per_value * full_cell_scale, norm="L1",
                                  noise_scale=full_cell_scale, neighbours=_VALUE_NEIGHBOURS),
            "m_neighbourhood": m_entry,
            "image": _level_entry(epsilon=per_image, delta=0.0,
                                  sensitivity=per_image * full_cell_scale, norm="L1",
                                  noise_scale=full_cell_scale, neighbours=_IMAGE_NEIGHBOURS),
        }


def build_mechanism(name: str, params: Mapping[str, Any] | None = None) -> LdpMechanism:
    """Build a mechanism from its registry name and parameters (validated).

    Args:
        name: ``laplace``, ``gaussian`` or ``dp_pix``.
        params: e.g. ``{"scale": 1.0}``, ``{"sigma": 0.5, "clip": True}``,
            ``{"k": 4, "m": 1, "epsilon": 1.0}``; missing ones take the class defaults.

    Raises:
        ConfigError: unknown name (:meth:`dpcore.registry.Registry.missing`), unknown
            parameter key, or a value out of range.
    """
    cls = LDP_MECHANISMS[name]
    params = dict(params or {})
    valid = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ConfigError(f"ldp {name}: unknown parameter(s) {', '.join(unknown)}; "
                          f"valid: {', '.join(valid)}")
    return cls(**params)
