"""The sweep that chose the defaults of ``dpcompare train`` (:mod:`dpcore.defaults`).

``python -m benchmarks.defaults_sweep [--backend torch] [--datasets digits,mnist5k]
[--data-dir DIR] [--quick] [--out FILE.md]`` trains cnn4 with harmonised Gaussian DP-SGD at
epsilon 8 (delta 1e-5; the noise multiplier calibrated by the shared accountant, dp_accounting)
over a small staged grid of DP-sane settings (:func:`staged_sweep`): stage 1 crosses activation
(relu, tanh, a tempered sigmoid), (momentum, learning rate) in {(0, 1), (0, 4), (0.9, 0.1),
(0.9, 0.4)} and expected batch size {64, 256} at 10 epochs on the first data set (24 runs);
stage 2 runs its 3 best points at 5 and 20 epochs there and at 5 and 10 epochs on the others.
The full grid (72 points per data set) would not fit the ~25 CPU minutes this sweep may take on
a shared 2-core machine.

Each setting is scored on a VALIDATION split carved (seeded, stratified, 20 %) from the data
set's training split; the model trains on the remaining 80 %. The data set's own test split is
never loaded into the score, so choosing the defaults from this table does not look at any test
set. The script prints one JSON line per run and writes a Markdown table (``--out``) whose
header holds the exact command.

``--quick`` runs a 2-point grid for one epoch on a few hundred digits (the test's smoke run);
its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpcore.backend import BACKENDS, load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.data.splits import keyed_split, stratified_split
from dpcore.pipeline import prepare_dataset

#: Share of the training split held out to score each setting.
VALIDATION_FRACTION = 0.2
EPSILON = 8.0
DELTA = 1e-5
#: Data sets swept by default: those that ship with an installed package (no data root).
DEFAULT_DATASETS = ("digits", "mnist5k")
#: Per data set: the data section and a seeded training subset for the large ones (the sweep
#: must stay within ~25 CPU minutes on a shared machine).
DATA_SECTIONS: dict[str, dict[str, Any]] = {
    "digits": {"name": "digits", "image_size": 16},   # cnn4 needs >= 13x13; digits are 8x8
    "mnist5k": {"name": "mnist5k"},
    "mnist": {"name": "mnist", "train_limit": 10000},
    "pneumoniamnist": {"name": "pneumoniamnist"},
}
#: Activations of the grid: name -> model section keys. Papernot et al. (2021) found the
#: tempered sigmoid s=2, T=2, o=1 (= tanh) best on MNIST; the third point is a flatter one.
ACTIVATIONS: dict[str, dict[str, Any]] = {
    "relu": {"activation": "relu"},
    "tanh": {"activation": "tanh"},
    "tsig(s=2,T=1,o=1)": {"activation": "tempered_sigmoid", "tempered_scale": 2.0,
                          "tempered_inverse_temperature": 1.0, "tempered_offset": 1.0},
}


@dataclasses.dataclass(frozen=True)
class Point:
    """One setting of the grid."""

    activation: str
    lr: float
    batch_size: int
    momentum: float
    epochs: float


#: (momentum, lr) pairs of stage 1: two step sizes per momentum, spanning an effective step
#: lr / (1 - momentum) of 1 and 4 (clipped mean gradients have norm <= 1 times the clip norm).
STEP_SIZES = ((0.0, 1.0), (0.0, 4.0), (0.9, 0.1), (0.9, 0.4))


def stage1_grid(epochs: float = 10.0) -> list[Point]:
    """Stage 1 (digits): 3 activations x 4 (momentum, lr) x batch {64, 256} = 24 points."""
    return [Point(act, lr, batch, momentum, epochs) for act, (momentum, lr), batch
            in itertools.product(ACTIVATIONS, STEP_SIZES, (64, 256))]


def with_epochs(points: Iterable[Point], epochs: Iterable[float]) -> list[Point]:
    """Each point at each number of epochs."""
    return [dataclasses.replace(p, epochs=e) for p in points for e in epochs]


def quick_grid() -> list[Point]:
    """Two points, one epoch: the smoke run of the test."""
    return [Point("relu", 0.1, 64, 0.0, 1.0), Point("tanh", 0.1, 64, 0.9, 1.0)]


def validation_split(dataset: Dataset, seed: int = 0,
                     fraction: float = VALIDATION_FRACTION) -> Dataset:
    """``dataset`` whose train split is 1 - ``fraction`` of its training split and whose test
    split is the held-out ``fraction`` (seeded, stratified). The real test split is dropped."""
    fit, val = stratified_split(dataset.y_train, fraction, seed)
    return _carved(dataset, fit, val, f"validation: {fraction:g} of the training split")


def keyed_validation_split(dataset: Dataset, fraction: float = VALIDATION_FRACTION) -> Dataset:
    """As :func:`validation_split`, but each training example is held out by a keyed hash of
    the example itself (:func:`dpcore.data.splits.keyed_split`; about ``fraction`` of them,
    not stratified): removing or adding one example moves no other between the fit and the
    validation part, which a private selection scored on the validation part needs
    (:mod:`benchmarks.tuning_protocol`). The real test split is dropped."""
    fit, val = keyed_split(dataset.x_train, dataset.y_train, fraction)
    return _carved(dataset, fit, val,
                   f"validation: keyed hash of each example, {fraction:g} of the training split "
                   "expected")


def _carved(dataset: Dataset, fit: np.ndarray, val: np.ndarray, description: str) -> Dataset:
    def pick(values: np.ndarray | None, idx: np.ndarray) -> np.ndarray | None:
        return None if values is None else values[idx]

    return dataclasses.replace(
        dataset, x_train=dataset.x_train[fit], y_train=dataset.y_train[fit],
        x_test=dataset.x_train[val], y_test=dataset.y_train[val],
        groups_train=pick(dataset.groups_train, fit), groups_test=pick(dataset.groups_train, val),
        extra={**dataset.extra, "split": description})


def run_config(data: dict[str, Any], point: Point, seed: int = 0) -> RunConfig:
    """The RunConfig of one grid point (epsilon 8, delta 1e-5, clip norm 1, Poisson)."""
    return RunConfig.from_dict({
        "data": data,
        "model": {"name": "cnn4", **ACTIVATIONS[point.activation]},
        "privacy": {"mechanism": "dpsgd-gaussian", "target_epsilon": EPSILON, "delta": DELTA,
                    "max_grad_norm": 1.0},
        "train": {"epochs": point.epochs, "batch_size": point.batch_size, "lr": point.lr,
                  "momentum": point.momentum},
        "seed": seed,
    })


def balanced_accuracy(metrics: Mapping[str, Any]) -> float | None:
    """The mean recall over the classes with test examples (scikit-learn's
    ``balanced_accuracy_score``), from a run's ``per_class`` metrics; None without them (a
    diverged run)."""
    recalls = [c["recall"] for c in metrics.get("per_class") or () if c.get("support")]
    if not recalls or any(r is None or not np.isfinite(r) for r in recalls):
        return None
    return float(np.mean(recalls))


def validation_scores(backend: Any, config: RunConfig, dataset: Dataset) -> dict[str, Any]:
    """Train ``config`` on ``dataset`` (a :func:`validation_split`) with the given backend
    module: status, validation accuracy, balanced accuracy (the mean of the per-class
    recalls: what the accuracy would be with every class equally frequent) and AUC, noise
    multiplier, epsilon and seconds."""
    start = time.perf_counter()
    result = backend.train(config, dataset, PerfSpec(), progress=False).result
    assert result is not None
    return {"status": result.status, "val_accuracy": result.metrics.get("accuracy"),
            "val_balanced_accuracy": balanced_accuracy(result.metrics),
            "val_auc": result.metrics.get("auc"),
            "noise_multiplier": result.privacy.get("noise_multiplier"),
            "epsilon_rdp": result.privacy.get("epsilon_rdp"),
            "seconds": round(time.perf_counter() - start, 1)}


def sweep(backend_name: str, datasets: Iterable[str], grid: Sequence[Point],
          data_dir: str | None, train_limit: int | None = None) -> list[dict[str, Any]]:
    """Train every grid point on every data set's validation split; one row per run."""
    backend = load_backend(backend_name)
    rows = []
    for name in datasets:
        data = dict(DATA_SECTIONS.get(name, {"name": name}))
        if train_limit is not None:
            data["train_limit"] = train_limit
        base = prepare_dataset(run_config(data, grid[0]), data_dir)
        dataset = validation_split(base)
        majority = float(np.bincount(dataset.y_test).max() / len(dataset.y_test))
        for point in grid:
            row = {"dataset": name, "n_fit": len(dataset.x_train),
                   "n_validation": len(dataset.x_test), "majority": majority,
                   **dataclasses.asdict(point),
                   **validation_scores(backend, run_config(data, point), dataset)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


KEYS = ("activation", "lr", "batch_size", "momentum", "epochs")


def ranked_points(rows: Sequence[dict[str, Any]]) -> list[tuple[float, tuple[Any, ...]]]:
    """(mean validation accuracy, point) of the points run on every data set, best first; a
    diverged run counts as accuracy 0."""
    names = {r["dataset"] for r in rows}
    scores: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in rows:
        scores.setdefault(tuple(r[k] for k in KEYS), {})[r["dataset"]] = r["val_accuracy"] or 0.0
    return sorted(((sum(v.values()) / len(v), k) for k, v in scores.items()
                   if set(v) == names), key=lambda item: -item[0])


def staged_sweep(backend: str, names: Sequence[str], data_dir: str | None
                 ) -> list[dict[str, Any]]:
    """Stage 1: :func:`stage1_grid` on the first data set (the cheapest). Stage 2: its 3 best
    points at 5 and 10 epochs on the other data sets, and at 5 and 20 epochs on the first."""
    rows = sweep(backend, names[:1], stage1_grid(), data_dir)
    best = [Point(*k) for _acc, k in ranked_points(rows)[:3]]
    rows += sweep(backend, names[:1], with_epochs(best, (5.0, 20.0)), data_dir)
    rows += sweep(backend, names[1:], with_epochs(best, (5.0, 10.0)), data_dir)
    return rows


def markdown(rows: Sequence[dict[str, Any]], command: str, backend: str) -> str:
    """The sweep table, best first per data set, with a mean-rank summary over data sets."""
    lines = [
        "# Sweep of the defaults of `dpcompare train`",
        "",
        f"Command: `{command}` (backend `{backend}`, harmonised recipe, cnn4, Gaussian DP-SGD "
        f"at epsilon {EPSILON:g}, delta {DELTA:g}, clip norm 1, Poisson sampling, seed 0). "
        "Accuracy is on a validation split (20 %, seeded, stratified) carved from each data "
        "set's training split; the model trains on the other 80 %. No test set is used.",
        "",
    ]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = sorted((r for r in rows if r["dataset"] == name),
                      key=lambda r: -(r["val_accuracy"] or 0.0))
        lines += [f"## {name} ({mine[0]['n_fit']} fit / {mine[0]['n_validation']} validation, "
                  f"majority class {mine[0]['majority']:.3f})", "",
                  "| activation | lr | batch | momentum | epochs | noise | val. accuracy | s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in mine:
            acc = r["val_accuracy"]
            lines.append(f"| {r['activation']} | {r['lr']:g} | {r['batch_size']} | "
                         f"{r['momentum']:g} | {r['epochs']:g} | {r['noise_multiplier']:.3f} | "
                         f"{'diverged' if acc is None else f'{acc:.3f}'} | {r['seconds']:.0f} |")
        lines.append("")
    lines += ["## Mean validation accuracy over the data sets (points run on all of them)",
              "", "| activation | lr | batch | momentum | epochs | mean val. accuracy |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {k[0]} | {k[1]:g} | {k[2]} | {k[3]:g} | {k[4]:g} | {acc:.3f} |"
              for acc, k in ranked_points(rows)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=BACKENDS, default="torch",
                        help="backend that trains (the harmonised step is the same on both)")
    parser.add_argument("--datasets", default=",".join(DEFAULT_DATASETS),
                        help="comma-separated data set names (default: digits,mnist5k)")
    parser.add_argument("--data-dir", help="data root for data sets that are not built in")
    parser.add_argument("--quick", action="store_true",
                        help="2 points, 1 epoch, 300 digits: a smoke run, numbers mean nothing")
    parser.add_argument("--out", help="write the Markdown table here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    if args.quick:
        rows = sweep(args.backend, names, quick_grid(), args.data_dir, train_limit=300)
    else:
        rows = staged_sweep(args.backend, names, args.data_dir)
    if args.out:
        command = "python -m benchmarks.defaults_sweep " + " ".join(
            sys.argv[1:] if argv is None else argv)
        Path(args.out).write_text(markdown(rows, command.strip(), args.backend),
                                  encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
