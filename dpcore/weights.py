"""The framework-neutral weight layout shared by both backends (numpy only).

A model's weights are a ``dict[str, np.ndarray]`` keyed ``"<layer>.<parameter>"``, in the
layout Keras uses:

=============  =========================  ==========================  =========================
layer kind     neutral key(s)             neutral shape               PyTorch parameter
=============  =========================  ==========================  =========================
conv2d         ``.kernel`` / ``.bias``    ``[kh, kw, in, out]`` (HWIO) ``weight [out, in, kh, kw]``
conv1d         ``.kernel`` / ``.bias``    ``[width, in, out]``        ``weight [out, in, width]``
dense          ``.kernel`` / ``.bias``    ``[in, out]``               ``weight [out, in]``
groupnorm      ``.gamma`` / ``.beta``     ``[channels]``              ``weight`` / ``bias``
embedding      ``.embeddings``            ``[vocab, dim]``            ``weight [vocab, dim]``
=============  =========================  ==========================  =========================

Layers without weights have no key: activations, pooling, a GroupNorm without affine
parameters, and the ScatterNet models' scattering (kymatio's fixed filters are rebuilt from
``J``, ``L`` and the image size, identically in both frameworks, never stored or ported).

Because PyTorch models flatten in channels-last order too, a dense kernel after a flatten has
the same meaning in both frameworks, and ``set_weights(torch_model, get_weights(keras_model))``
gives the same function.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from dpcore.architectures import architecture
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError
from dpcore.io import atomic_path

Weights = dict[str, np.ndarray]

# neutral parameter name -> PyTorch attribute name, per layer kind
TORCH_PARAM_NAMES: dict[str, dict[str, str]] = {
    "conv2d": {"kernel": "weight", "bias": "bias"},
    "conv1d": {"kernel": "weight", "bias": "bias"},
    "dense": {"kernel": "weight", "bias": "bias"},
    "groupnorm": {"gamma": "weight", "beta": "bias"},
    "embedding": {"embeddings": "weight"},
}

# axis permutation taking the neutral array to the PyTorch one (None: same layout)
_TO_TORCH_AXES: dict[tuple[str, str], tuple[int, ...]] = {
    ("conv2d", "kernel"): (3, 2, 0, 1),  # HWIO -> OIHW
    ("conv1d", "kernel"): (2, 1, 0),  # WIO -> OIW
    ("dense", "kernel"): (1, 0),  # [in, out] -> [out, in]
}


def to_torch_layout(kind: str, param: str, array: np.ndarray) -> np.ndarray:
    """Convert one neutral array to the layout of the matching PyTorch parameter."""
    _check_kind(kind, param)
    axes = _TO_TORCH_AXES.get((kind, param))
    return np.ascontiguousarray(array if axes is None else np.transpose(array, axes))


def from_torch_layout(kind: str, param: str, array: np.ndarray) -> np.ndarray:
    """Convert one PyTorch parameter array to the neutral layout (inverse of the above)."""
    _check_kind(kind, param)
    axes = _TO_TORCH_AXES.get((kind, param))
    if axes is None:
        return np.ascontiguousarray(array)
    return np.ascontiguousarray(np.transpose(array, np.argsort(axes)))


def _check_kind(kind: str, param: str) -> None:
    if kind not in TORCH_PARAM_NAMES or param not in TORCH_PARAM_NAMES[kind]:
        valid = ", ".join(f"{k}.{p}" for k, ps in TORCH_PARAM_NAMES.items() for p in ps)
        raise ConfigError(f"weight {kind}.{param} is not a known layer parameter; valid: {valid}")


def check_weights(
    expected: Mapping[str, tuple[int, ...]], weights: Mapping[str, np.ndarray]
) -> Weights:
    """Validate ``weights`` against the expected key -> shape map; return float32 copies.

    Args:
        expected: the model's neutral keys and shapes.
        weights: candidate weights.

    Returns:
        The weights as contiguous float32 arrays, in ``expected``'s key order.

    Raises:
        ConfigError: naming every missing key, every extra key, or the first shape mismatch.
    """
    missing = [k for k in expected if k not in weights]
    extra = [k for k in weights if k not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing key(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected key(s) {', '.join(extra)}")
        raise ConfigError(
            f"weights do not fit the model: {'; '.join(parts)} "
            f"(the model has {len(expected)} keys, e.g. {', '.join(list(expected)[:3])})"
        )
    out: Weights = {}
    for key, shape in expected.items():
        array = np.asarray(weights[key])
        if tuple(array.shape) != tuple(shape):
            raise ConfigError(
                f"weight {key!r} has shape {tuple(array.shape)}; the model expects {tuple(shape)}"
            )
        if not np.issubdtype(array.dtype, np.number):
            raise ConfigError(f"weight {key!r} has dtype {array.dtype}; expected a float array")
        out[key] = np.ascontiguousarray(array, dtype=np.float32)
    return out


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """Keras' fan_in / fan_out: receptive field x in / out channels for conv kernels."""
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return receptive * shape[-2], receptive * shape[-1]


def weight_shapes(
    spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int, vocab_size: int | None = None
) -> dict[str, tuple[int, ...]]:
    """Neutral key -> shape of the model ``build_model`` makes from the same arguments.

    Needs neither framework (see :mod:`dpcore.architectures`).
    """
    return architecture(spec, input_shape, n_classes, vocab_size).weight_shapes()


def init_weights(shapes: Mapping[str, tuple[int, ...]], seed: int, scheme: str = "keras"
                 ) -> Weights:
    """One seeded initialisation in the neutral layout, to load into either framework.

    ``scheme="keras"`` (the default, the bench's neutral initialisation) is Keras' default, so
    a seeded model is a plain Keras-initialised model: ``kernel`` Glorot-uniform (limit
    ``sqrt(6 / (fan_in + fan_out))``), ``bias`` and ``beta`` zeros, ``gamma`` ones,
    ``embeddings`` uniform in [-0.05, 0.05].

    ``scheme="torch"`` is PyTorch's default for ``nn.Linear`` / ``nn.Conv*`` /
    ``nn.Embedding`` / ``nn.GroupNorm``: ``kernel`` kaiming-uniform with a = sqrt(5), i.e.
    uniform in +-1/sqrt(fan_in); ``bias`` uniform in +-1/sqrt(fan_in) of its layer's kernel;
    ``embeddings`` standard normal; ``gamma`` ones, ``beta`` zeros (hand-written: torch's
    initialisers draw from torch's generator, which dpcore does not import).

    Each array draws from its own generator seeded by ``(seed, crc32(key))``, so an array
    depends only on the seed, its key and its shape (not on the other layers).

    Args:
        shapes: neutral key -> shape (e.g. ``Architecture.weight_shapes()``).
        seed: non-negative integer seed.

    Raises:
        ConfigError: for a bad seed or a key whose parameter name has no known rule.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed={seed!r} is not valid; valid: an integer >= 0")
    if scheme == "torch":
        return _torch_default_weights(shapes, int(seed))
    if scheme != "keras":
        raise ConfigError(f"initialisation scheme={scheme!r} is not known; valid: keras, torch")
    out: Weights = {}
    for key, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        param = key.rsplit(".", 1)[-1]
        rng = np.random.default_rng([int(seed), zlib.crc32(key.encode("utf-8"))])
        if param == "kernel":
            fan_in, fan_out = _fans(shape)
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            array = rng.uniform(-limit, limit, size=shape)
        elif param in ("bias", "beta"):
            array = np.zeros(shape)
        elif param == "gamma":
            array = np.ones(shape)
        elif param == "embeddings":
            array = rng.uniform(-0.05, 0.05, size=shape)
        else:
            raise ConfigError(
                f"no initialiser for weight {key!r}; valid parameter names: "
                "kernel, bias, gamma, beta, embeddings"
            )
        out[key] = array.astype(np.float32)
    return out


def _torch_default_weights(shapes: Mapping[str, tuple[int, ...]], seed: int) -> Weights:
    """PyTorch's default initialisation scheme in the neutral layout (see init_weights)."""
    out: Weights = {}
    for key, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        prefix, param = key.rsplit(".", 1) if "." in key else ("", key)
        rng = np.random.default_rng([seed, zlib.crc32(key.encode("utf-8")), 1])
        kernel = shapes.get(f"{prefix}.kernel" if prefix else "kernel")
        if param == "kernel":
            bound = 1.0 / np.sqrt(_fans(shape)[0])
            array = rng.uniform(-bound, bound, size=shape)
        elif param == "bias" and kernel is not None:
            bound = 1.0 / np.sqrt(_fans(tuple(int(d) for d in kernel))[0])
            array = rng.uniform(-bound, bound, size=shape)
        elif param in ("bias", "beta"):
            array = np.zeros(shape)
        elif param == "gamma":
            array = np.ones(shape)
        elif param == "embeddings":
            array = rng.standard_normal(size=shape)
        else:
            raise ConfigError(
                f"no initialiser for weight {key!r}; valid parameter names: "
                "kernel, bias, gamma, beta, embeddings"
            )
        out[key] = array.astype(np.float32)
    return out


def save_weights(path: str | Path, weights: Mapping[str, np.ndarray]) -> Path:
    """Write neutral weights to an ``.npz`` file (keys kept as they are; ``numpy.savez``'s
    format, so ``numpy.load`` reads it), atomically (:func:`dpcore.io.atomic_path`; its folder
    created); returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        np.savez(fh, **{k: np.asarray(v) for k, v in weights.items()})
    return path


def load_weights(path: str | Path) -> Weights:
    """Read neutral weights written by :func:`save_weights`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"weights file {path} does not exist")
    with np.load(path, allow_pickle=False) as data:
        return {k: np.asarray(data[k]) for k in data.files}
