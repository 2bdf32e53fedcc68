"""Validation-split sweep that chooses a tuned preset's hyper-parameters.

``python -m benchmarks.tuning_sweep --dataset pneumoniamnist --epsilons 1,8
--candidates benchmarks/tuning/pneumoniamnist.yaml [--backend torch] [--data-dir DIR]
[--seeds 0,1,2] [--rank-by auc|accuracy|balanced_accuracy] [--out FILE.md]`` trains every
candidate setting (a YAML list of ``{label, model, train}`` sections, optionally ``data``,
``privacy`` and ``augment``, laid over the base below) with harmonised Gaussian DP-SGD at each
target epsilon
(delta 1e-5, clip norm 1 unless a candidate sets ``privacy.max_grad_norm``, Poisson sampling,
the noise multiplier calibrated by the shared accountant) and scores it on a VALIDATION split:
20 % of the data set's training split, seeded and stratified
(:func:`benchmarks.defaults_sweep.validation_split`); the model trains on the other 80 %. The
test split is never scored, so a preset chosen from this table has not looked at its test set.

A candidate whose ``privacy.mechanism`` adds no gradient noise (``none``: non-private; ``ldp``:
trained on images privatised before training, a post-processing of their release) is trained
once, whatever ``--epsilons`` says, and tabled under "without DP-SGD": choosing among such
candidates on a validation split spends no privacy (a non-private model promises none; a
local-DP model's hyper-parameters are a function of the privatised images alone). The data
set is prepared once, with the first candidate's ``data`` section, so the candidates of one
file share their (privatised) images.

One JSON line per run on stdout; ``--out`` writes a Markdown table per epsilon (best
validation AUC first for binary tasks, best accuracy otherwise, or as ``--rank-by`` says;
with several ``--seeds`` the mean over seeds) whose header holds the exact command. The
harmonised step is the same update on both backends (tests/backends), so one backend sweeps
for both.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.defaults_sweep import validation_scores, validation_split
from benchmarks.tuning_candidates import load_candidates, run_config
from dpcore.backend import BACKENDS, load_backend
from dpcore.errors import ConfigError
from dpcore.mechanisms import noises_gradients
from dpcore.pipeline import prepare_dataset

#: ``--rank-by`` name -> how the table names it.
RANK_BY = {"auc": "AUC", "accuracy": "accuracy",
           "balanced_accuracy": "balanced accuracy (mean per-class recall)"}


def is_dpsgd(candidate: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` trains with DP-SGD (the base's mechanism unless it sets another
    one): only then does its target epsilon matter."""
    mechanism = (candidate.get("privacy") or {}).get("mechanism", "dpsgd-gaussian")
    return bool(noises_gradients(mechanism))


def sweep(backend_name: str, dataset_name: str, candidates: Sequence[Mapping[str, Any]],
          epsilons: Sequence[float], data_dir: str | None,
          seeds: Sequence[int] = (0,)) -> list[dict[str, Any]]:
    """Train every candidate at every epsilon (a candidate without DP-SGD once, its row's
    ``epsilon`` None) and seed on the validation split; one row per run."""
    backend = load_backend(backend_name)
    base = prepare_dataset(run_config(dataset_name, candidates[0], epsilons[0]), data_dir)
    dataset = validation_split(base)
    majority = float(np.bincount(dataset.y_test).max() / len(dataset.y_test))
    rows = []
    plans = [(epsilon, candidate) for epsilon in epsilons for candidate in candidates
             if is_dpsgd(candidate)]
    plans += [(None, candidate) for candidate in candidates if not is_dpsgd(candidate)]
    for epsilon, candidate in plans:
        for seed in seeds:
            config = run_config(dataset_name, candidate,
                                epsilons[0] if epsilon is None else epsilon, seed)
            row = {"dataset": dataset_name, "epsilon": epsilon, "label": candidate["label"],
                   "seed": seed, "mechanism": config.privacy.mechanism,
                   "n_fit": len(dataset.x_train), "n_validation": len(dataset.x_test),
                   "majority": majority, **validation_scores(backend, config, dataset),
                   "candidate": {k: v for k, v in candidate.items() if k != "label"}}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _score(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    return -1.0 if value is None else float(value)


def _mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """Mean of ``key`` over ``rows`` (a diverged seed counts as None: the mean is None)."""
    values = [r.get(key) for r in rows]
    if not values or any(v is None for v in values):
        return None
    return float(np.mean([float(v) for v in values]))


def aggregate(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (epsilon, candidate): the mean validation accuracy and AUC over its seeds
    (None when a seed diverged), the seeds, the noise multiplier and the summed seconds."""
    groups: dict[tuple[Any, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["epsilon"], r["label"]), []).append(r)
    return [{**group[0], "val_accuracy": _mean(group, "val_accuracy"),
             "val_balanced_accuracy": _mean(group, "val_balanced_accuracy"),
             "val_auc": _mean(group, "val_auc"), "seeds": [g.get("seed", 0) for g in group],
             "seconds": float(sum(g["seconds"] for g in group))}
            for group in groups.values()]


def markdown(rows: Sequence[Mapping[str, Any]], command: str, backend: str,
             rank_by: str | None = None) -> str:
    """One table per epsilon (candidates without DP-SGD in one table of their own), best
    first by ``rank_by`` (a :data:`RANK_BY` name; default: AUC for binary tasks)."""
    first = rows[0]
    binary = first["majority"] is not None and all(r.get("val_auc") is not None
                                                   for r in rows if r["status"] == "finished")
    rank_by = rank_by or ("auc" if binary else "accuracy")
    key = f"val_{rank_by}"
    seeds = sorted({r.get("seed", 0) for r in rows})
    rows = aggregate(rows)
    private = [r for r in rows if r["epsilon"] is not None]
    mechanisms = sorted({str(r.get("mechanism", "none")) for r in rows
                         if r["epsilon"] is None})
    what = []
    if private:
        what.append("Gaussian DP-SGD, delta 1e-05, Poisson sampling, noise multiplier "
                    "calibrated to each epsilon by the shared RDP accountant")
    if mechanisms:
        what.append(f"candidates without DP-SGD (mechanism {', '.join(mechanisms)}) trained "
                    "once, whatever the epsilons")
    seeds_text = (f"seed {seeds[0]}" if len(seeds) == 1 else
                  f"mean over seeds {', '.join(map(str, seeds))}")
    lines = [
        f"# Tuning sweep: {first['dataset']}", "",
        f"Command: `{command}` (backend `{backend}`, harmonised recipe; "
        f"{'; '.join(what)}; {seeds_text}). Scores are on a validation split (20 %, "
        f"seeded, stratified: {first['n_validation']} images) carved from the training split; "
        f"the model trains on the other {first['n_fit']}. No test image is scored. Majority "
        f"class of the validation split: {first['majority']:.3f}. Sorted by "
        f"validation {RANK_BY[rank_by]}.", ""]
    for epsilon in dict.fromkeys(r["epsilon"] for r in rows):
        mine = sorted((r for r in rows if r["epsilon"] == epsilon),
                      key=lambda r: -_score(r, key))
        heading = "without DP-SGD" if epsilon is None else f"epsilon {epsilon:g}"
        lines += [f"## {heading}", "",
                  "| candidate | noise | val. accuracy | val. balanced accuracy | val. AUC | s |",
                  "|---|---|---|---|---|---|"]
        for r in mine:
            acc, auc = r["val_accuracy"], r["val_auc"]
            balanced = r.get("val_balanced_accuracy")
            noise = r.get("noise_multiplier")
            lines.append(f"| {r['label']} | {'–' if noise is None else f'{noise:.3f}'} | "
                         f"{'diverged' if acc is None else f'{acc:.3f}'} | "
                         f"{'–' if balanced is None else f'{balanced:.3f}'} | "
                         f"{'–' if auc is None else f'{auc:.3f}'} | {r['seconds']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="registered data set name")
    parser.add_argument("--candidates", required=True, help="YAML file of candidate settings")
    parser.add_argument("--epsilons", default="1", help="comma-separated target epsilons")
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    parser.add_argument("--data-dir", help="data root for data sets that are not built in")
    parser.add_argument("--only", help="comma-separated candidate labels to run (default all)")
    parser.add_argument("--seeds", default="0",
                        help="comma-separated seeds; the table shows the mean over them")
    parser.add_argument("--rank-by", choices=tuple(RANK_BY),
                        help="the validation score the table sorts by (default: AUC for "
                             "binary tasks, else accuracy; balanced_accuracy: the mean "
                             "per-class recall, blind to the classes' proportions)")
    parser.add_argument("--out", help="write the Markdown tables here")
    parser.add_argument("--jsonl", help="append the JSON lines here too")
    parser.add_argument("--protocol", metavar="LAW",
                        help="run a private selection (Papernot & Steinke 2022) whose K follows "
                             "LAW: tnb:ETA:GAMMA or poisson:MU; --epsilons are then totals")
    parser.add_argument("--score", choices=("accuracy", "auc"), default="accuracy",
                        help="the validation score the protocol noises (default accuracy)")
    parser.add_argument("--score-noise", type=float, default=0.01,
                        help="std of the Gaussian noise on the score, in score units "
                             "(default 0.01)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the protocol's draws (K, candidates, score noises)")
    parser.add_argument("--selection-out",
                        help="with --protocol: write each total's preset selection block here "
                             "(JSON)")
    args = parser.parse_args(argv)
    try:
        epsilons = [float(e) for e in args.epsilons.split(",") if e.strip()]
    except ValueError:
        parser.error(f"--epsilons={args.epsilons!r}: valid: comma-separated numbers > 0")
    if not epsilons or min(epsilons) <= 0:
        parser.error(f"--epsilons={args.epsilons!r}: valid: comma-separated numbers > 0")
    try:
        seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
    except ValueError:
        parser.error(f"--seeds={args.seeds!r}: valid: comma-separated integers")
    if not seeds:
        parser.error(f"--seeds={args.seeds!r}: valid: comma-separated integers")
    candidates = load_candidates(args.candidates)
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = set(wanted) - {c["label"] for c in candidates}
        if unknown:
            parser.error(f"--only: unknown labels {sorted(unknown)}")
        candidates = [c for c in candidates if c["label"] in wanted]
    command = "python -m benchmarks.tuning_sweep " + shlex.join(  # quoted: copy-pasteable
        sys.argv[1:] if argv is None else argv)
    if args.protocol:
        from dpcore.tuning import parse_law

        try:
            parse_law(args.protocol)
        except ConfigError as exc:
            parser.error(f"--protocol: {exc}")
        try:
            return _run_protocol(args, candidates, epsilons, command.strip())
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    rows = sweep(args.backend, args.dataset, candidates, epsilons, args.data_dir, seeds)
    if args.jsonl:
        with open(args.jsonl, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(markdown(rows, command.strip(), args.backend, args.rank_by),
                                  encoding="utf-8")
    return 0


def _run_protocol(args: argparse.Namespace, candidates: Sequence[Mapping[str, Any]],
                  totals: Sequence[float], command: str) -> int:
    """``--protocol``: the private selection of :mod:`benchmarks.tuning_protocol`."""
    from benchmarks import tuning_protocol
    from dpcore.tuning import parse_law

    law = parse_law(args.protocol)
    summaries = tuning_protocol.protocol_sweep(
        args.backend, args.dataset, candidates, totals, args.data_dir, law,
        metric=args.score, score_noise=args.score_noise, seed=args.seed)
    if args.jsonl:
        with open(args.jsonl, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for s in summaries for r in s["repetitions"])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(tuning_protocol.markdown(summaries, command, args.backend),
                                  encoding="utf-8")
    if args.selection_out:
        table = args.out or ""
        blocks = {f"{s['total_epsilon']:g}": tuning_protocol.selection_block(s, table)
                  for s in summaries}
        Path(args.selection_out).write_text(json.dumps(blocks, indent=2) + "\n",
                                            encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
