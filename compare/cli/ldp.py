"""``dpcompare ldp``: write a locally-private copy of a data set and show what it costs.

Every image (train and test by default) is perturbed once with a local-DP mechanism (Laplace,
Gaussian, or DP-Pix pixelisation) and saved as an npz that training reuses. Prints the epsilon
of releasing one image, per pixel value and per image (the per-image one is what protects a
patient's image), and how visible the images still are (PSNR, SSIM against the originals), and
writes a montage PNG of a few images at one or several noise levels.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from compare.cli.common import add_data_dir_option, check_output_folder, print_json
from dpcore.config import DataSpec, default_delta
from dpcore.errors import ConfigError
from dpcore.ldp import (
    LDP_MECHANISMS,
    SPLITS,
    LdpMechanism,
    build_mechanism,
    cache_path_for,
    privatize_dataset,
)
from dpcore.ldp.cache import safe_name

#: Which command-line option sets which mechanism parameter.
_OPTION_PARAMS: dict[str, tuple[str, str]] = {
    "scale": ("--scale", "laplace"),
    "sigma": ("--sigma", "gaussian"),
    "k": ("--k", "dp_pix"),
    "m": ("--m", "dp_pix"),
    "epsilon": ("--epsilon", "dp_pix"),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ldp",
        help="write a local-DP (noised) copy of a data set; epsilon, PSNR/SSIM and a montage",
        description=__doc__,
    )
    parser.add_argument("--dataset", required=True,
                        help="data set name (see `dpcompare datasets`), e.g. digits, mnist")
    parser.add_argument("--mechanism", required=True, choices=sorted(LDP_MECHANISMS),
                        help="local-DP mechanism applied to every image in [0, 1]")
    parser.add_argument("--scale", type=float, default=None,
                        help="laplace: noise scale b in [0, 1] pixel units, > 0 (default 1)")
    parser.add_argument("--sigma", type=float, default=None,
                        help="gaussian: noise standard deviation in [0, 1] pixel units, > 0 "
                        "(default 1)")
    parser.add_argument("--k", type=int, default=None,
                        help="dp_pix: grid cell side in pixels, >= 1 (default 4)")
    parser.add_argument("--m", type=int, default=None,
                        help="dp_pix: protected neighbourhood, in changed pixel values, >= 1 "
                        "(default 1)")
    parser.add_argument("--epsilon", type=float, default=None,
                        help="dp_pix: epsilon for the m-neighbourhood, > 0 (default 1)")
    parser.add_argument("--clip", action="store_true",
                        help="clip the noised images to [0, 1] (post-processing: same epsilon)")
    parser.add_argument("--seed", type=int, default=0, help="noise seed, >= 0 (default 0)")
    parser.add_argument("--splits", default="train,test",
                        help="comma-separated splits to noise (default train,test: a deployment "
                        "perturbs every image; the others are kept clean, as float32 in [0, 1])")
    parser.add_argument("--delta", type=float, default=None,
                        help="delta of the Gaussian (epsilon, delta) figures, in (0, 1); default "
                        "1/N rounded down to a power of ten, N = number of noised images")
    parser.add_argument("--image-size", type=int, default=None,
                        help="resize the images to this side length first (default: as "
                        "`dpcompare train` loads the data set, e.g. digits at 16x16, so the "
                        "epsilon per image is the one of the images a run trains on)")
    parser.add_argument("--train-limit", type=int, default=None,
                        help="use a seeded subset of this many training images")
    parser.add_argument("--test-limit", type=int, default=None,
                        help="use a seeded subset of this many test images")
    parser.add_argument("--out", default=None,
                        help="output folder (default ldp_out/<dataset>-<mechanism>-<params>-"
                        "seed<seed>)")
    add_data_dir_option(parser)
    parser.add_argument("--montage-scales", default=None,
                        help="comma-separated extra noise levels for the montage columns "
                        "(laplace: b, gaussian: sigma, dp_pix: epsilon), e.g. 1,2,4")
    parser.add_argument("--montage-rows", type=int, default=4,
                        help="number of sample images in the montage (default 4, 0 = none)")
    parser.add_argument("--quality-images", type=int, default=500,
                        help="PSNR/SSIM on at most this many images per split (seeded subset)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def mechanism_from_args(args: argparse.Namespace) -> LdpMechanism:
    """The mechanism the options describe; options of another mechanism are an error."""
    params: dict[str, Any] = {}
    for key, (option, owner) in _OPTION_PARAMS.items():
        value = getattr(args, key)
        if value is None:
            continue
        if owner != args.mechanism:
            raise ConfigError(f"{option}={value!r} applies to --mechanism {owner}, "
                              f"not {args.mechanism}")
        params[key] = value
    params["clip"] = bool(args.clip)
    return build_mechanism(args.mechanism, params)


def _parse_splits(text: str) -> tuple[str, ...]:
    splits = tuple(s.strip() for s in text.split(",") if s.strip())
    if not splits or not set(splits) <= set(SPLITS) or len(set(splits)) != len(splits):
        raise ConfigError(f"--splits={text!r} is not valid; valid: train, test or train,test")
    return splits


def _parse_levels(text: str | None, option: str) -> list[float]:
    if not text:
        return []
    levels = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            levels.append(float(part))
        except ValueError:
            raise ConfigError(f"{option}={text!r}: {part!r} is not a number; "
                              "valid: comma-separated numbers > 0, e.g. 1,2,4") from None
    return levels


def data_spec(args: argparse.Namespace) -> DataSpec:
    """The data spec of the options: the image size of ``--image-size``, else the one ``train``
    uses for this data set (:data:`dpcore.defaults.DATA_DEFAULTS`: digits at 16x16), so that
    ``ldp`` and ``train`` state the same epsilon per image for the same images."""
    from dpcore.defaults import fill_defaults

    size = args.image_size
    if size is None:
        size = fill_defaults({"data": {"name": args.dataset}})[0]["data"].get("image_size")
    return DataSpec(name=args.dataset, image_size=size, train_limit=args.train_limit,
                    test_limit=args.test_limit)


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the mechanism, options, output folder and data set checked (the data set
    loaded); nothing noised or written."""
    from dpcore.data import load_dataset, resolve_data_root

    mechanism = mechanism_from_args(args)
    splits = _parse_splits(args.splits)
    if args.out:
        check_output_folder(args.out, "--out")
    ds = load_dataset(data_spec(args), resolve_data_root(args.data_dir))
    epsilons = mechanism.epsilons(ds.input_shape, args.delta if args.delta is not None
                                  else default_delta(len(ds.x_train)))
    per_image = (epsilons.get("per_image") or {}).get("epsilon")
    print(f"dry run: would privatise {ds.name} ({'x'.join(map(str, ds.input_shape))}; "
          f"splits {', '.join(splits)}) with {mechanism.label()}, seed {args.seed}: epsilon "
          f"per image {per_image:.6g}; nothing noised or written")
    return 0


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """Privatise the data set, write the files and return the figures ``run`` prints."""
    from dpcore.data import as_float01, load_dataset, resolve_data_root
    from dpcore.ldp.montage import column_header, level_columns, save_montage
    from dpcore.ldp.quality import image_quality

    mechanism = mechanism_from_args(args)
    splits = _parse_splits(args.splits)
    if args.seed < 0:
        raise ConfigError(f"--seed={args.seed} is not valid; valid: an integer >= 0")
    if args.montage_rows < 0:
        raise ConfigError(f"--montage-rows={args.montage_rows} is not valid; valid: >= 0")
    if args.quality_images < 1:
        raise ConfigError(f"--quality-images={args.quality_images} is not valid; valid: >= 1")
    # Validate every montage level before any work is done.
    extra_levels = [lvl for lvl in _parse_levels(args.montage_scales, "--montage-scales")
                    if mechanism.with_noise_level(lvl).noise_level() != mechanism.noise_level()]

    if args.out:
        check_output_folder(args.out, "--out")
    ds = load_dataset(data_spec(args), resolve_data_root(args.data_dir))
    out_dir = Path(args.out) if args.out else (
        Path("ldp_out") / f"{safe_name(ds.name)}-{mechanism.label()}-seed{args.seed}")
    check_output_folder(out_dir, "--out")
    npz_path = cache_path_for(ds, mechanism, args.seed, out_dir, splits)
    before = _file_identity(npz_path)
    private = privatize_dataset(ds, mechanism, args.seed, out_dir, splits=splits)
    record = private.ldp
    assert record is not None  # privatize_dataset always attaches its record
    # Reused iff the same file (inode, mtime) is still there: a rebuilt one was os.replace'd.
    reused = before is not None and before == _file_identity(npz_path)

    n_noised = sum(len(getattr(ds, f"x_{s}")) for s in splits)
    delta = args.delta if args.delta is not None else default_delta(n_noised)
    epsilons = mechanism.epsilons(ds.input_shape, delta)

    quality = {}
    for split in splits:
        quality[split] = image_quality(
            as_float01(getattr(ds, f"x_{split}")), getattr(private, f"x_{split}"),
            max_images=args.quality_images, seed=args.seed,
        )

    montage_path = None
    if args.montage_rows > 0:
        split = splits[0]
        originals = as_float01(getattr(ds, f"x_{split}"))
        n_rows = min(args.montage_rows, len(originals))
        rows = np.sort(np.random.default_rng(args.seed).choice(
            len(originals), size=n_rows, replace=False))
        columns = [(column_header(mechanism), getattr(private, f"x_{split}")[rows])]
        columns += level_columns(originals[rows], rows, split, mechanism, args.seed,
                                 extra_levels)
        montage_path = save_montage(
            out_dir / "montage.png", originals[rows], columns,
            title=f"{ds.name} ({split}), {mechanism.label()}, seed {args.seed}",
        )

    result: dict[str, Any] = {
        "dataset": ds.name,
        "n_images": {"train": int(len(ds.x_train)), "test": int(len(ds.x_test))},
        "image_shape": list(ds.input_shape),
        "source_fingerprint": record.source_fingerprint,
        "privatised_fingerprint": record.privatised_fingerprint,
        "mechanism": mechanism.name,
        "params": mechanism.params(),
        "seed": int(args.seed),
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
    from dpcore.io import atomic_write_json

    atomic_write_json(path, result)


def run(args: argparse.Namespace) -> int:
    result = compute(args)
    if args.json:
        print_json(result)
        return 0
    eps = result["epsilon"]
    params = ", ".join(f"{k}={v}" for k, v in result["params"].items())
    print(f"dataset            {result['dataset']}  ({result['n_images']['train']} train, "
          f"{result['n_images']['test']} test; {'x'.join(map(str, result['image_shape']))}; "
          f"fingerprint {result['source_fingerprint']})")
    print(f"mechanism          {result['mechanism']} ({params}), seed {result['seed']}, "
          f"noised splits: {', '.join(result['splits'])}")
    print("epsilon of releasing one image:")
    for key, entry in eps.items():
        if not key.startswith("per_"):
            continue
        level = key[len("per_"):].replace("_", " ")
        print(f"  per {level:<17} epsilon {entry['epsilon']:.6g}  delta {entry['delta']:.3g}  "
              f"({entry['norm']} sensitivity {entry['sensitivity']:.6g})")
    print(f"  {eps['protects']}")
    print(f"  method: {eps['method']}")
    for split, q in result["quality"].items():
        subset = " (seeded subset)" if q["subset"] else ""
        print(f"quality ({split:<5})    PSNR {q['psnr_db']:.2f} dB   SSIM {q['ssim']:.4f}   "
              f"over {q['n_images']} images{subset}")
    status = "reused" if result["reused_cache"] else "written"
    print(f"privatised copy    {result['files']['npz']} ({status}; fingerprint "
          f"{result['privatised_fingerprint']})")
    if result["files"]["montage"]:
        print(f"montage            {result['files']['montage']}")
    print(f"summary            {result['files']['summary']}")
    return 0
