"""``load_dataset``: DataSpec -> located source -> cached decode -> resize/channels -> limits.

Order of operations (each step is deterministic):

1. look the name up in the registry (``medmnist:PATH`` for any MedMNIST npz);
2. locate the source: ``DataSpec.path``, else the first candidate under the data root
   (built-in sets need no data root);
3. return the cached arrays if a trustworthy cache entry exists for the same source files and
   options (limits included), else:

   a. decode the native format (folder loaders decode each file straight to ``image_size``);
   b. apply ``train_limit`` / ``test_limit``: a seeded (``split_seed``), stratified-where-
      possible subset that keeps the source order (before resizing, so a small subset of a
      large set is cheap);
   c. resize to ``image_size`` and convert to ``channels`` (Pillow, see
      :mod:`dpcore.data.images`), validate, and cache the result;

4. optionally scale images to ``float32`` [0, 1] (``normalize=True``, via :func:`as_float01`).

The local-DP fields of DataSpec (``ldp_*``) are not applied here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType
from typing import Any

from dpcore.config import DataSpec
from dpcore.data.cache import (
    cache_dir,
    cache_file,
    cache_key,
    read_cached,
    source_fingerprint,
    write_cached,
)
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01, conform_images
from dpcore.data.loaders import get_loader
from dpcore.data.loaders.base import Decoded, DecodeRequest
from dpcore.data.loaders.groups import resolve_groups_csv
from dpcore.data.paths import resolve_data_root, resolve_source
from dpcore.data.splits import subset_indices
from dpcore.datasets import DatasetInfo, get_info
from dpcore.errors import ConfigError, DataError


def load_dataset(
    spec: DataSpec,
    data_dir: str | Path | None = None,
    *,
    cache: bool = True,
    normalize: bool = False,
    **options: Any,
) -> Dataset:
    """Load the data set described by ``spec``.

    Args:
        spec: name, path, image size, channels, split seed and limits (``ldp_*`` ignored).
        data_dir: the data root (``--data-dir``); ``None`` uses ``$DPCOMPARE_DATA_DIR``, else
            ``~/.dpcompare/data``.
        cache: read and write the decoded-array cache (see :mod:`dpcore.data.cache`).
        normalize: return images as ``float32`` in [0, 1] instead of ``uint8`` 0..255.
        **options: loader options (over ``spec.options``), e.g. ``resample='lanczos'``,
            ``val='train'`` (MedMNIST),
            ``vocab_size=20000, max_length=128`` (imdb), ``group_column='site'`` (aptos);
            ``dpcompare datasets --json`` and ``DATASETS[name].options`` list them.

    Returns:
        A validated :class:`Dataset`: images NHWC ``uint8`` (``float32`` if the source or
        ``normalize`` says so), labels ``int64``; text as ``int32`` token ids [N, L].

    Raises:
        DataError: unknown name, missing or malformed data (the message names the file and
            what would be valid).
        ConfigError: an unknown loader option or an image option on a text data set.
    """
    info = get_info(spec.name)
    opts = _resolve_options(info, {**spec.options, **options})
    if info.task == "text" and (spec.image_size is not None or spec.channels is not None):
        raise ConfigError(
            f"data.image_size={spec.image_size!r} / data.channels={spec.channels!r} do not "
            f"apply to the text data set {info.name!r}; set them to null"
        )
    if info.builtin:
        if spec.path:
            raise ConfigError(
                f"data.path={spec.path!r} does not apply to the built-in data set "
                f"{info.name!r}; set it to null"
            )
        path, candidate, root = None, None, _optional_root(data_dir)
        source = info.how_to_get.removeprefix("built in: ")
    else:
        path, candidate, root = resolve_source(info, spec.path, data_dir)
        source = str(path)
    if root is None and not info.builtin:
        root = _optional_root(data_dir)
    loader = get_loader(info.loader)
    request = DecodeRequest(info, spec.image_size, spec.channels, spec.split_seed, opts)

    ds: Dataset | None = None
    key = location = None
    if cache:
        key = cache_key({
            "name": info.name,
            "sources": source_fingerprint(_sources(loader, path, info, opts)),
            "image_size": spec.image_size,
            "channels": spec.channels,
            "split_seed": spec.split_seed if _seed_matters(info, spec) else None,
            "limits": [spec.train_limit, spec.test_limit],
            "options": opts,
        })
        cache_name = info.prefix or info.name
        location = cache_file(cache_dir(root), cache_name, key)
        ds = read_cached(location, key)
    if ds is None:
        decoded = _limit(loader.decode(path, request), spec)
        ds = _build(info, decoded, request, source, candidate)
        if location is not None and key is not None:
            write_cached(location, ds, key)
    if normalize and ds.task == "image":
        ds = dataclasses.replace(ds, x_train=as_float01(ds.x_train), x_test=as_float01(ds.x_test),
                                 x_val=None if ds.x_val is None else as_float01(ds.x_val))
    return ds


def _sources(loader: ModuleType, path: Path | None, info: DatasetInfo,
             opts: dict[str, Any]) -> list[Path]:
    """Every file the decode reads, including a ``groups_csv`` side file."""
    files = list(loader.source_files(path, info))
    if opts.get("groups_csv") and path is not None:
        files.append(resolve_groups_csv(opts["groups_csv"], path if path.is_dir() else path.parent))
    return files


def _seed_matters(info: DatasetInfo, spec: DataSpec) -> bool:
    return info.uses_split_seed or spec.train_limit is not None or spec.test_limit is not None


def _limit(decoded: Decoded, spec: DataSpec) -> Decoded:
    """``decoded`` reduced to the seeded subsets asked for by the limits (in place)."""
    keep_train = subset_indices(decoded.y_train, spec.train_limit, spec.split_seed)
    keep_test = subset_indices(decoded.y_test, spec.test_limit, spec.split_seed)
    n_train, n_test = len(decoded.y_train), len(decoded.y_test)
    if len(keep_train) == n_train and len(keep_test) == n_test:
        return decoded
    decoded.extra["limits"] = (
        f"seeded subset (split_seed={spec.split_seed}): train {len(keep_train)} of {n_train}, "
        f"test {len(keep_test)} of {n_test}"
    )
    decoded.x_train, decoded.y_train = decoded.x_train[keep_train], decoded.y_train[keep_train]
    decoded.x_test, decoded.y_test = decoded.x_test[keep_test], decoded.y_test[keep_test]
    if decoded.groups_train is not None:
        decoded.groups_train = decoded.groups_train[keep_train]
    if decoded.groups_test is not None:
        decoded.groups_test = decoded.groups_test[keep_test]
    return decoded


def _resolve_options(info: DatasetInfo, given: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(info.options))
    if unknown:
        raise ConfigError(
            f"unknown loader option(s) {', '.join(unknown)} for data set {info.name!r}; "
            f"valid: {', '.join(sorted(info.options)) or 'none'}"
        )
    return {**info.options, **given}


def _optional_root(data_dir: str | Path | None) -> Path | None:
    """The data root if one resolves (only used for the cache location), else None."""
    try:
        return resolve_data_root(data_dir)
    except DataError:
        return None


def _build(
    info: DatasetInfo, decoded: Decoded, request: DecodeRequest, source: str,
    candidate: str | None,
) -> Dataset:
    x_train, x_test, x_val = decoded.x_train, decoded.x_test, decoded.x_val
    extra = dict(decoded.extra)
    if info.task == "image":
        x_train = conform_images(x_train, request.image_size, request.channels, request.resample)
        x_test = conform_images(x_test, request.image_size, request.channels, request.resample)
        if x_val is not None:
            x_val = conform_images(x_val, request.image_size, request.channels, request.resample)
        if request.image_size is not None:
            extra["resize"] = (
                f"{request.image_size}x{request.image_size}, Pillow {request.resample}, "
                "aspect ratio not kept"
            )
    if candidate is not None and candidate in info.candidate_notes:
        extra["note"] = info.candidate_notes[candidate]
    return Dataset(
        name=info.name,
        task=info.task,
        x_train=x_train,
        y_train=decoded.y_train,
        x_test=x_test,
        y_test=decoded.y_test,
        class_names=decoded.class_names or info.class_names,
        groups_train=decoded.groups_train,
        groups_test=decoded.groups_test,
        group_names=decoded.group_names,
        source=source,
        vocabulary_size=decoded.vocabulary_size,
        extra=extra,
        x_val=x_val,
        y_val=decoded.y_val,
    )
