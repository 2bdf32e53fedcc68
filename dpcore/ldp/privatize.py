"""Write a locally-private copy of a data set once, then reuse it.

:func:`privatize_dataset` perturbs every image with an :class:`~dpcore.ldp.mechanisms.
LdpMechanism` and returns a :class:`~dpcore.data.dataset.Dataset` whose images are ``float32``.

Both splits are noised by default: in a local-DP deployment every image is perturbed on the
patient's side before it reaches anyone, so a model is trained *and* evaluated on perturbed
images, and the test accuracy measures what the deployment would see. ``splits=("train",)``
keeps the test images clean (they are only converted to ``float32`` in [0, 1]), e.g. to ask
how well a model trained on noised data does on clean ones.

Determinism: the noise of image ``i`` of a split comes from its own numpy Generator,
``PCG64(SeedSequence(seed, spawn_key=(split_index, i)))`` (train 0, test 1). It depends only
on (seed, split, i), never on how the images are batched, which other splits are noised, or
the order they are processed in.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpcore.data import Dataset, as_float01
from dpcore.errors import ConfigError, DataError
from dpcore.io import read_npz, write_npz
from dpcore.ldp.cache import cache_file, cache_key
from dpcore.ldp.mechanisms import LdpMechanism
from dpcore.ldp.record import LdpRecord

#: The splits a data set has, in the order of their stream index in the noise seed.
SPLITS: tuple[str, ...] = ("train", "test")


def image_rng(seed: int, split: str, index: int) -> np.random.Generator:
    """The Generator that draws the noise of image ``index`` of ``split``."""
    stream = SPLITS.index(split)
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(int(seed), spawn_key=(stream, int(index))))
    )


def privatize_images(
    x01: np.ndarray,
    mechanism: LdpMechanism,
    seed: int,
    split: str,
    indices: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Perturb images one by one, each with its own Generator (see the module docstring).

    Args:
        x01: NHWC images in [0, 1].
        mechanism: the local-DP mechanism.
        seed: noise seed (>= 0).
        split: ``train`` or ``test`` (selects the noise stream).
        indices: the position of each image of ``x01`` in its split (default 0..N-1); lets a
            subset (e.g. a montage) get exactly the noise the whole split gets.

    Returns:
        ``float32`` array of the same shape.
    """
    idx = np.arange(len(x01)) if indices is None else np.asarray(indices)
    if len(idx) != len(x01):
        raise DataError(f"{len(idx)} indices for {len(x01)} images; counts must match")
    out = np.empty(x01.shape, dtype=np.float32)
    for row, i in enumerate(idx):
        out[row] = mechanism.apply(x01[row:row + 1], image_rng(seed, split, int(i)))[0]
    return out


def _check_args(ds: Dataset, mechanism: LdpMechanism, seed: int,
                splits: Sequence[str]) -> tuple[str, ...]:
    if ds.task != "image":
        raise DataError(f"data set {ds.name!r} is {ds.task!r}; local DP here perturbs images only")
    if not isinstance(mechanism, LdpMechanism):
        raise ConfigError(f"mechanism={mechanism!r} is not an LdpMechanism; "
                          "build one with dpcore.ldp.build_mechanism")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"seed={seed!r} is not valid; valid: an integer >= 0")
    chosen = tuple(splits)
    if not chosen or len(set(chosen)) != len(chosen) or not set(chosen) <= set(SPLITS):
        raise ConfigError(f"splits={chosen!r} is not valid; valid: a non-empty subset of "
                          f"{', '.join(SPLITS)} without repeats")
    return tuple(s for s in SPLITS if s in chosen)


def cache_path_for(
    ds: Dataset,
    mechanism: LdpMechanism,
    seed: int,
    cache_dir: str | Path,
    splits: Sequence[str] = SPLITS,
) -> Path:
    """Where :func:`privatize_dataset` keeps (or would keep) this privatised copy."""
    chosen = _check_args(ds, mechanism, seed, splits)
    key = cache_key(ds.fingerprint, mechanism.name, mechanism.params(), int(seed), chosen)
    return cache_file(cache_dir, ds.name, mechanism.label(), int(seed), key)


def privatize_dataset(
    ds: Dataset,
    mechanism: LdpMechanism,
    seed: int,
    cache_dir: str | Path | None,
    *,
    splits: Sequence[str] = SPLITS,
) -> Dataset:
    """The data set with its images perturbed by ``mechanism``, cached as one npz.

    Args:
        ds: an image data set (``uint8`` 0..255 or ``float32`` in [0, 1]).
        mechanism: the local-DP mechanism.
        seed: noise seed (>= 0); the same seed gives byte-identical images and cache file.
        cache_dir: folder of the cache; ``None`` computes without reading or writing a file.
        splits: which splits to perturb (default both, see the module docstring).

    Returns:
        A Dataset with ``float32`` images (labels, groups, class names and ``extra``
        unchanged) whose ``ldp`` is an :class:`~dpcore.ldp.record.LdpRecord`: mechanism,
        parameters, seed, splits, source and privatised fingerprints, cache file (empty
        without a cache) and the mechanism's per-image DpEvent.

    Raises:
        DataError: a text data set. ConfigError: bad seed or splits.
        PrivacyError: float images outside [0, 1] (the sensitivity would not hold).

    A cache file is reused only if its metadata matches the key and its arrays hash to the
    recorded privatised fingerprint; a missing, truncated or altered file is rebuilt.
    """
    chosen = _check_args(ds, mechanism, seed, splits)
    source_fp = ds.fingerprint
    key = cache_key(source_fp, mechanism.name, mechanism.params(), int(seed), chosen)
    path = (None if cache_dir is None
            else cache_file(cache_dir, ds.name, mechanism.label(), int(seed), key))
    record = LdpRecord(
        mechanism=mechanism.name, params=mechanism.params(), seed=int(seed), splits=chosen,
        source_fingerprint=source_fp, privatised_fingerprint="",
        cache_file="" if path is None else str(path),
        dp_event=mechanism.dp_event(ds.input_shape, "image"),
    )

    if path is not None:
        cached = _load_cached(path, ds, key, record)
        if cached is not None:
            return cached

    images = {}
    for split in SPLITS:
        x01 = as_float01(getattr(ds, f"x_{split}"))
        if split in chosen:
            images[split] = privatize_images(x01, mechanism, int(seed), split)
        else:
            images[split] = np.array(x01, dtype=np.float32, copy=True)
    out = _with_images(ds, images, record)
    if path is not None:
        meta = {"key": key, "source_fingerprint": source_fp, "mechanism": mechanism.name,
                "params": mechanism.params(), "seed": int(seed), "splits": list(chosen),
                "privatised_fingerprint": out.fingerprint}
        write_npz(path, {f"x_{s}": images[s] for s in SPLITS}, meta)
    return out


def _with_images(ds: Dataset, images: dict[str, np.ndarray], record: LdpRecord) -> Dataset:
    out = dataclasses.replace(ds, x_train=images["train"], x_test=images["test"],
                              extra=dict(ds.extra), ldp=None)
    return dataclasses.replace(out, ldp=dataclasses.replace(
        record, privatised_fingerprint=out.fingerprint))


def _load_cached(path: Path, ds: Dataset, key: str, record: LdpRecord) -> Dataset | None:
    loaded = read_npz(path)
    if loaded is None:
        return None
    arrays, meta = loaded
    images = {}
    for split in SPLITS:
        x = arrays.get(f"x_{split}")
        source = getattr(ds, f"x_{split}")
        if x is None or x.dtype != np.float32 or x.shape != source.shape:
            return None
        images[split] = x
    if meta.get("key") != key:
        return None
    try:
        out = _with_images(ds, images, record)
    except DataError:  # e.g. NaN written into the file
        return None
    if out.fingerprint != meta.get("privatised_fingerprint"):
        return None
    return out
