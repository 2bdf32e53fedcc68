"""A locally-private copy of a data set, with what it costs (``dpcompare ldp``,
:func:`compare.api.privatise` is :func:`privatise`).

Every image of the chosen splits is perturbed once with a local-DP mechanism and saved as an
npz that training reuses (:func:`dpcore.ldp.privatize.privatize_dataset`); the summary states
the epsilon of releasing one image (per pixel value and per image), how visible the images
still are (PSNR, SSIM against the originals) and where the files are, and is written as
``summary.json`` beside them, with a montage PNG of a few images at one or several noise
levels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from compare.folders import check_output_folder
from dpcore.config import DataSpec, default_delta
from dpcore.data import as_float01, load_dataset, resolve_data_root
from dpcore.defaults import fill_defaults
from dpcore.errors import ConfigError
from dpcore.io import atomic_write_json
from dpcore.ldp import LdpMechanism, build_mechanism
from dpcore.ldp.cache import safe_name
from dpcore.ldp.montage import column_header, level_columns, save_montage
from dpcore.ldp.privatize import SPLITS, cache_path_for, privatize_dataset
from dpcore.ldp.quality import image_quality

#: How each checked parameter is spelled in error messages by default (Python names; the CLI
#: passes its option names).
PYTHON_NAMES: dict[str, str] = {"seed": "seed", "montage_rows": "montage_rows",
                                "quality_images": "quality_images", "out": "out"}


def data_spec(dataset: str, image_size: int | None = None, train_limit: int | None = None,
              test_limit: int | None = None) -> DataSpec:
    """The data spec of a privatised copy: ``image_size`` (pixels a side) when given, else the
    one ``train`` uses for this data set (:data:`dpcore.defaults.DATA_DEFAULTS`: digits at
    16x16), so that ``ldp`` and ``train`` state the same epsilon per image for the same
    images."""
    size = image_size
    if size is None:
        size = fill_defaults({"data": {"name": dataset}})[0]["data"].get("image_size")
    return DataSpec(name=dataset, image_size=size, train_limit=train_limit,
                    test_limit=test_limit)


def check_splits(splits: Sequence[str], name: str = "splits") -> tuple[str, ...]:
    """``splits`` as a tuple if it names each of ``train``/``test`` at most once (at least one),
    else ConfigError naming ``name``."""
    chosen = tuple(splits)
    if not chosen or not set(chosen) <= set(SPLITS) or len(set(chosen)) != len(chosen):
        raise ConfigError(f"{name}={','.join(map(str, chosen))!r} is not valid; valid: train, "
                          "test or train,test")
    return chosen


def dry_run_line(mechanism: LdpMechanism, spec: DataSpec, *, seed: int,
                 splits: Sequence[str], delta: float | None, out: str | Path | None,
                 data_dir: str | Path | None, names: Mapping[str, str] = PYTHON_NAMES) -> str:
    """The mechanism, output folder and data set checked (the data set loaded); nothing noised
    or written. Returns the line ``dpcompare ldp --dry-run`` prints."""
    if out:
        check_output_folder(out, names["out"])
    ds = load_dataset(spec, resolve_data_root(data_dir))
    epsilons = mechanism.epsilons(ds.input_shape, delta if delta is not None
                                  else default_delta(len(ds.x_train)))
    per_image = (epsilons.get("per_image") or {}).get("epsilon")
    return (f"dry run: would privatise {ds.name} ({'x'.join(map(str, ds.input_shape))}; "
            f"splits {', '.join(splits)}) with {mechanism.label()}, seed {seed}: epsilon "
            f"per image {per_image:.6g}; nothing noised or written")


def privatise(
    dataset: str, mechanism: str, params: Mapping[str, Any] | None = None, *, seed: int = 0,
    splits: Sequence[str] = ("train", "test"), delta: float | None = None,
    image_size: int | None = None, train_limit: int | None = None,
    test_limit: int | None = None, out: str | Path | None = None,
    data_dir: str | Path | None = None, montage_levels: Sequence[float] = (),
    montage_rows: int = 4, quality_images: int = 500, dry_run: bool = False,
    names: Mapping[str, str] | None = None,
) -> dict[str, Any] | str:
    """A locally-private copy of a data set and what it costs (``dpcompare ldp``): every image
    of ``splits`` perturbed once with the local-DP ``mechanism`` (``laplace``, ``gaussian``,
    ``dp_pix``; ``params`` e.g. ``{"scale": 1.0, "clip": True}``) and saved as an npz that
    training reuses, with a montage PNG (``montage_rows`` images at the mechanism's noise
    level and at ``montage_levels``) and ``summary.json`` in ``out`` (default
    ``ldp_out/<dataset>-<mechanism>-seed<seed>``).

    Args:
        delta: delta of the Gaussian (epsilon, delta) figures; default the largest power of
            ten below 1/(10 N), N = number of noised images.
        image_size: pixels a side (default: as ``train`` loads the data set).
        quality_images: PSNR/SSIM on at most this many images per split (seeded subset).
        dry_run: check everything and load the data set, noise and write nothing.
        names: how error messages spell ``seed``, ``montage_rows``, ``quality_images``,
            ``out`` (the CLI passes its option names).

    Returns:
        The summary (epsilon per value and per image, PSNR/SSIM per split, fingerprints,
        files, whether the cached npz was reused); with ``dry_run`` the line that says what
        would be done.

    Raises:
        ConfigError: a bad mechanism, parameter or value. DataError: a missing data set.
    """
    names = {**PYTHON_NAMES, **(names or {})}
    chosen = build_mechanism(mechanism, params)
    chosen_splits = check_splits(splits, names.get("splits", "splits"))
    spec = data_spec(dataset, image_size, train_limit, test_limit)
    if dry_run:
        return dry_run_line(chosen, spec, seed=seed, splits=chosen_splits, delta=delta, out=out,
                            data_dir=data_dir, names=names)
    return write_privatised(chosen, spec, seed=seed, splits=chosen_splits, delta=delta,
                            out=out, data_dir=data_dir, montage_levels=montage_levels,
                            montage_rows=montage_rows, quality_images=quality_images,
                            names=names)


def write_privatised(
    mechanism: LdpMechanism, spec: DataSpec, *, seed: int = 0,
    splits: Sequence[str] = ("train", "test"), delta: float | None = None,
    out: str | Path | None = None, data_dir: str | Path | None = None,
    montage_levels: Sequence[float] = (), montage_rows: int = 4, quality_images: int = 500,
    names: Mapping[str, str] = PYTHON_NAMES,
) -> dict[str, Any]:
    """Privatise the data set of ``spec`` with ``mechanism``, write the npz, the montage and
    ``summary.json`` into ``out`` (default ``ldp_out/<dataset>-<mechanism>-seed<seed>``) and
    return the summary (see :func:`privatise`). Every value is checked before any
    work is done; ``names`` spells the checked parameters in error messages.

    Raises:
        ConfigError: a bad seed, montage level, row or image count, or output folder.
        DataError: the data set is missing or malformed.
    """
    if seed < 0:
        raise ConfigError(f"{names['seed']}={seed} is not valid; valid: an integer >= 0")
    if montage_rows < 0:
        raise ConfigError(f"{names['montage_rows']}={montage_rows} is not valid; valid: >= 0")
    if quality_images < 1:
        raise ConfigError(f"{names['quality_images']}={quality_images} is not valid; "
                          "valid: >= 1")
    # Validate every montage level before any work is done.
    extra_levels = [lvl for lvl in montage_levels
                    if mechanism.with_noise_level(lvl).noise_level() != mechanism.noise_level()]

    if out:
        check_output_folder(out, names["out"])
    ds = load_dataset(spec, resolve_data_root(data_dir))
    out_dir = Path(out) if out else (
        Path("ldp_out") / f"{safe_name(ds.name)}-{mechanism.label()}-seed{seed}")
    check_output_folder(out_dir, names["out"])
    npz_path = cache_path_for(ds, mechanism, seed, out_dir, splits)
    before = _file_identity(npz_path)
    private = privatize_dataset(ds, mechanism, seed, out_dir, splits=splits)
    record = private.ldp
    assert record is not None  # privatize_dataset always attaches its record
    # Reused iff the same file (inode, mtime) is still there: a rebuilt one was os.replace'd.
    reused = before is not None and before == _file_identity(npz_path)

    n_noised = sum(len(getattr(ds, f"x_{s}")) for s in splits)
    delta = delta if delta is not None else default_delta(n_noised)
    epsilons = mechanism.epsilons(ds.input_shape, delta)

    quality = {}
    for split in splits:
        quality[split] = image_quality(
            as_float01(getattr(ds, f"x_{split}")), getattr(private, f"x_{split}"),
            max_images=quality_images, seed=seed,
        )

    montage_path = None
    if montage_rows > 0:
        split = splits[0]
        originals = as_float01(getattr(ds, f"x_{split}"))
        n_rows = min(montage_rows, len(originals))
        rows = np.sort(np.random.default_rng(seed).choice(
            len(originals), size=n_rows, replace=False))
        columns = [(column_header(mechanism), getattr(private, f"x_{split}")[rows])]
        columns += level_columns(originals[rows], rows, split, mechanism, seed, extra_levels)
        montage_path = save_montage(
            out_dir / "montage.png", originals[rows], columns,
            title=f"{ds.name} ({split}), {mechanism.label()}, seed {seed}",
        )

    result: dict[str, Any] = {
        "dataset": ds.name,
        "n_images": {"train": int(len(ds.x_train)), "test": int(len(ds.x_test))},
        "image_shape": list(ds.input_shape),
        "source_fingerprint": record.source_fingerprint,
        "privatised_fingerprint": record.privatised_fingerprint,
        "mechanism": mechanism.name,
        "params": mechanism.params(),
        "seed": int(seed),
        "splits": list(splits),
        "epsilon": epsilons,
        "quality": quality,
        "montage_levels": [mechanism.noise_level(), *extra_levels] if montage_path else [],
        "files": {
            "npz": str(npz_path),
            "montage": None if montage_path is None else str(montage_path),
            "summary": str(out_dir / "summary.json"),
        },
        "reused_cache": bool(reused),
    }
    _write_summary(out_dir / "summary.json", result)
    return result


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _write_summary(path: Path, result: dict[str, Any]) -> None:
    atomic_write_json(path, result)
