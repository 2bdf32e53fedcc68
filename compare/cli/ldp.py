"""``dpcompare ldp``: write a locally-private copy of a data set and show what it costs.

Every image (train and test by default) is perturbed once with a local-DP mechanism (Laplace,
Gaussian, or DP-Pix pixelisation) and saved as an npz that training reuses. Prints the epsilon
of releasing one image, per pixel value and per image (the per-image one is what protects a
patient's image), and how visible the images still are (PSNR, SSIM against the originals), and
writes a montage PNG of a few images at one or several noise levels.
"""

from __future__ import annotations

import argparse
from typing import Any

from compare.cli.common import add_data_dir_option, print_json
from dpcore.errors import ConfigError
from dpcore.ldp import LDP_MECHANISMS
from dpcore.ldp.privatize import SPLITS

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
                        "the largest power of ten below 1/(10 N), N = number of noised images")
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


#: How the options name the values :func:`compare.api.privatise` checks.
_OPTION_NAMES: dict[str, str] = {"seed": "--seed", "montage_rows": "--montage-rows",
                                 "quality_images": "--quality-images", "out": "--out",
                                 "splits": "--splits"}


def mechanism_params(args: argparse.Namespace) -> dict[str, Any]:
    """The mechanism parameters the options give; options of another mechanism are an
    error."""
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
    return params


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


def _privatise(args: argparse.Namespace, *, dry_run: bool) -> Any:
    """:func:`compare.api.privatise` of the options."""
    from compare import api

    params = mechanism_params(args)
    splits = _parse_splits(args.splits)
    levels = [] if dry_run else _parse_levels(args.montage_scales, "--montage-scales")
    return api.privatise(
        args.dataset, args.mechanism, params, seed=args.seed, splits=splits, delta=args.delta,
        image_size=args.image_size, train_limit=args.train_limit, test_limit=args.test_limit,
        out=args.out, data_dir=args.data_dir, montage_levels=levels,
        montage_rows=args.montage_rows, quality_images=args.quality_images, dry_run=dry_run,
        names=_OPTION_NAMES)


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the mechanism, options, output folder and data set checked (the data set
    loaded); nothing noised or written."""
    print(_privatise(args, dry_run=True))
    return 0


def run(args: argparse.Namespace) -> int:
    result = _privatise(args, dry_run=False)
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
