"""Compute a model's fixed front end once per data set instead of once per training step.

A ScatterNet model (``scatter-linear``, ``scatter-cnn``: Tramer & Boneh, ICLR 2021) starts
with a wavelet scattering transform and a GroupNorm without weights: a fixed function of each
image, never trained. Recomputing it in every training step is most of the step's cost
(``scatter-cnn`` on MNIST: ~190 s per 60,000-image epoch on 2 cores, almost all of it the
scattering). Tramer & Boneh's own code computes the scattering features once and trains on
them; this module does the same, for both backends:

* :func:`fixed_front_names` finds the cached prefix of an architecture;
* a backend splits its model into that prefix (a numpy function) and the *head*, a model over
  the features that shares the full model's layer objects, hence its weights;
* :func:`cache_inputs` maps the training and test images to features once, in batches;
* the shared loop then trains and evaluates the head on the features
  (:func:`dpcore.trainloop.run_training`'s ``inputs``).

The result does not depend on the cache beyond float tolerance: per-example gradients of the
head's weights are the same whether the fixed front runs inside the step or before it
(nothing before the head has a weight), and the trained weights are the full model's weights
(tested on both backends). ``perf.cache_fixed_front=false`` switches it off; a run with
``augment`` never caches (the features of augmented images change in every step) and records
why (:func:`front_not_cached_reason`).

Within one process the features are also kept between runs (:data:`FEATURE_MEMO`): a grid
whose runs share a data set and a front (seeds, epsilons, backends in turn) computes them once
per backend, not once per run (``scatter-linear`` on PneumoniaMNIST: about 40 s of a run's
50 s here). The key is the backend, the front's layer specs and a digest of the images'
bytes (an LDP-privatised set, new per seed, gets its own entry); a hit returns the arrays that
a new computation would give (the front is a deterministic function), and the run records
``fixed_front_reused``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from dpcore.architectures import Architecture, GroupNorm, Residual, Scattering2D, architecture
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01

#: Images per batch when computing features (memory only; results do not depend on it).
FEATURE_BATCH_SIZE = 256


@dataclass(frozen=True)
class FixedFront:
    """A backend model split at the end of its fixed front end.

    Attributes:
        names: neutral names of the front's layers (e.g. ``("scatter", "scatter_gn")``).
        features: model inputs (NHWC float32 images, a batch) -> NHWC float32 features, the
            front's output.
        head: the framework model from the features to the logits; it shares its layer
            objects (and so its weights) with the full model.
    """

    names: tuple[str, ...]
    features: Callable[[np.ndarray], np.ndarray]
    head: Any


@dataclass(frozen=True)
class CachedInputs:
    """The front's output for both splits of a data set.

    Attributes:
        x_train, x_test: NHWC float32 features, in the data set's example order.
        seconds: wall-clock seconds taken to compute them.
        front: the names of the cached layers.
    """

    x_train: np.ndarray
    x_test: np.ndarray
    seconds: float
    front: tuple[str, ...]

    #: True when the features were taken from :data:`FEATURE_MEMO` (an earlier run of this
    #: process computed them; ``seconds`` is then the look-up's).
    reused: bool = False

    def record(self) -> dict[str, Any]:
        """What the run's ``perf`` entry records about the cache."""
        out: dict[str, Any] = {"fixed_front_cached": ", ".join(self.front),
                               "fixed_front_seconds": round(self.seconds, 3),
                               "fixed_front_feature_shape": list(self.x_train.shape[1:])}
        if self.reused:
            out["fixed_front_reused"] = True
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of both feature arrays."""
        return int(self.x_train.nbytes + self.x_test.nbytes)


class FeatureMemo:
    """Features kept between runs of one process, least recently used first out.

    Bounded by ``max_bytes`` of feature arrays in total (an entry larger than the bound is not
    kept). Keys are :func:`memo_key` tuples.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, ...], CachedInputs] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> CachedInputs | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: tuple[str, ...], inputs: CachedInputs) -> None:
        """Keep ``inputs`` under ``key``; its arrays become read-only (a run that changed them
        in place would change the next run's inputs: it fails instead)."""
        if inputs.nbytes > self.max_bytes:
            return
        inputs.x_train.setflags(write=False)
        inputs.x_test.setflags(write=False)
        self._entries[key] = inputs
        self._entries.move_to_end(key)
        while sum(e.nbytes for e in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


#: The process's memo: up to 3 GiB of features (MNIST's scattering features of both splits,
#: J=2 L=8 at 28x28, take about 1.1 GB; a grid alternating two backends keeps both).
FEATURE_MEMO = FeatureMemo(max_bytes=3 << 30)


def memo_key(backend: str, front_spec: str, dataset: Dataset) -> tuple[str, ...]:
    """The memo key of a front on a data set: the backend, the front's layer specs
    (``repr`` of the architecture's layers) and a BLAKE2 digest of both splits' image bytes,
    shapes and dtypes."""
    digest = hashlib.blake2b(digest_size=16)
    for x in (dataset.x_train, dataset.x_test):
        array = np.ascontiguousarray(x)
        digest.update(f"{array.shape}{array.dtype}".encode())
        digest.update(memoryview(array).cast("B"))
    return (backend, front_spec, digest.hexdigest())


def fixed_front_names(arch: Architecture) -> tuple[str, ...]:
    """Names of the leading layers of ``arch`` that form a fixed per-image function, or ``()``.

    The prefix is a :class:`~dpcore.architectures.Scattering2D` followed by any GroupNorm
    without weights (``affine=False``): no weights, and each image's output depends on that
    image only. ``()`` when the architecture does not start with a scattering, or when a
    later top-level layer is a residual block (the backends build the head as a chain of the
    remaining top-level layers).
    """
    layers = arch.layers
    if not layers or not isinstance(layers[0], Scattering2D):
        return ()
    n = 1
    while n < len(layers) and isinstance(layers[n], GroupNorm) and not layers[n].affine:
        n += 1
    if any(isinstance(layer, Residual) for layer in layers[n:]):
        return ()
    return tuple(layer.name for layer in layers[:n])


def cache_inputs(dataset: Dataset, front: FixedFront, *, progress: bool = True,
                 batch_size: int = FEATURE_BATCH_SIZE,
                 memo: tuple[FeatureMemo, tuple[str, ...]] | None = None) -> CachedInputs:
    """The front's features of ``dataset``'s training and test images, computed once.

    Args:
        dataset: an image data set (``uint8`` 0..255 or float32, as the models take it).
        front: the backend's split model.
        progress: a tqdm bar (only when stderr is a terminal).
        batch_size: images per forward pass of the front (memory only).
        memo: a memo and this front's key in it (:func:`memo_key`): features found there are
            returned (``reused``), features computed are put there.
    """
    start = time.perf_counter()
    if memo is not None and (found := memo[0].get(memo[1])) is not None:
        return dataclasses.replace(found, seconds=time.perf_counter() - start, reused=True)
    total = math.ceil(len(dataset.x_train) / batch_size) + math.ceil(
        len(dataset.x_test) / batch_size)
    bar = tqdm(total=total, desc=f"features ({', '.join(front.names)})", unit="batch",
               disable=not (progress and sys.stderr.isatty()), file=sys.stderr, leave=False)

    def featurise(x: np.ndarray) -> np.ndarray:
        parts = []
        for i in range(0, len(x), batch_size):
            # the model inputs of images (dpcore.trainloop.model_inputs, not imported: cycle)
            parts.append(np.asarray(front.features(as_float01(x[i:i + batch_size])),
                                    dtype=np.float32))
            bar.update(1)
        return np.concatenate(parts, axis=0)

    try:
        x_train, x_test = featurise(dataset.x_train), featurise(dataset.x_test)
    finally:
        bar.close()
    inputs = CachedInputs(x_train=x_train, x_test=x_test,
                          seconds=time.perf_counter() - start, front=front.names)
    if memo is not None:
        memo[0].put(memo[1], inputs)
    return inputs


def front_to_cache(config: RunConfig, perf: PerfSpec, dataset: Dataset) -> tuple[str, ...]:
    """Names of the layers a harmonised run computes once per data set (``()``: none).

    Non-empty only when ``perf.cache_fixed_front`` is on, the recipe is the harmonised one
    (a library recipe runs the library's own loop on the full model), the data are images,
    no ``augment`` is set (each step's augmented images have new features) and the model
    starts with a fixed front (:func:`fixed_front_names`).
    """
    if not perf.cache_fixed_front or config.recipe != "harmonised" or dataset.task != "image":
        return ()
    if config.augment.active:
        return ()
    return _front_names(config, dataset)


def front_not_cached_reason(config: RunConfig, perf: PerfSpec, dataset: Dataset) -> str | None:
    """Why a model with a fixed front that would be cached is not, or ``None``.

    ``"augment"`` when only the run's augmentation keeps :func:`front_to_cache` from caching
    (recorded in the run's ``perf`` as ``fixed_front_not_cached_because``); ``None`` for a
    cached front, a model without one, or the cache switched off by ``perf`` or the recipe.
    """
    if not config.augment.active or not perf.cache_fixed_front or (
            config.recipe != "harmonised" or dataset.task != "image"):
        return None
    return "augment" if _front_names(config, dataset) else None


def _front_layers(config: RunConfig, dataset: Dataset) -> tuple[Any, ...]:
    """The architecture's fixed-front layer objects (``()``: none)."""
    arch = architecture(config.model, dataset.input_shape, dataset.n_classes,
                        dataset.vocabulary_size)
    return tuple(arch.layers[:len(fixed_front_names(arch))])


def _front_names(config: RunConfig, dataset: Dataset) -> tuple[str, ...]:
    return tuple(layer.name for layer in _front_layers(config, dataset))


def front_spec(config: RunConfig, dataset: Dataset) -> str:
    """The specs of the model's fixed-front layers (``repr`` of the architecture's layer
    objects, which hold every parameter of the front, e.g. the scattering's J and L)."""
    return repr(_front_layers(config, dataset))
