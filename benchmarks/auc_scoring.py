"""How much a saturated float32 softmax lowers the recorded test AUC: stored runs re-scored
from their checkpoints, by the softmax as recorded and by the logits.

A run's recorded ``metrics["auc"]`` is scikit-learn's ROC AUC of the float32 softmax output
(:func:`dpcore.metrics.roc_auc`). An over-confident model rounds many of those probabilities
to exactly 1; the tied examples then count as half-ordered, and the AUC falls towards chance
although the logits still rank them. This script loads each finished run's checkpoint from a
store, computes its test logits (the backend's ``predict_logits``), and writes, per run:

* ``saturated``: the share of test examples whose largest float32 probability is exactly 1;
* ``auc_recorded``: the record's AUC; ``auc_softmax``: the same AUC recomputed here from the
  float32 softmax (a check that the test images are the record's: runs where the two differ
  by more than 1e-6, such as local-DP runs scored on their privatised images or runs scored
  on the training split, are listed as not comparable and left out);
* ``auc_logits``: the AUC of the per-class log-odds (:func:`dpcore.metrics.roc_auc_from_logits`),
  the exact probabilities' ranking; ``difference``: ``auc_logits - auc_recorded``.

Run: ``python -m benchmarks.auc_scoring --store runs/interp-tuned [--runs ID ...]
[--out FILE.md]`` with ``DPCOMPARE_DATA_DIR`` set to the data the runs used (measured: about
24 s per cats vs dogs scatter-linear run on 2 cores, the test set's scattering computed for the
logits and again for the softmax). Written by hand: no library re-scores stored runs of this
bench.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.render import md_table
from dpcore.backend import load_backend
from dpcore.config import RunConfig
from dpcore.metrics import roc_auc, roc_auc_from_logits
from dpcore.pipeline import DatasetCache
from dpcore.results import ResultsStore, RunResult
from dpcore.trained import recorded_checkpoint

#: The recomputed softmax AUC must equal the recorded one to this tolerance for the run to be
#: compared (else its test images are not the record's).
SAME_AUC_TOLERANCE = 1e-6
COLUMNS = ["run_id", "label", "accuracy", "saturated", "auc_recorded", "auc_softmax",
           "auc_logits", "difference"]


def score_run(store: ResultsStore, result: RunResult, datasets: DatasetCache
              ) -> dict[str, Any]:
    """One row of the table for a finished run with a checkpoint in ``store``."""
    config = RunConfig.from_dict(result.config)
    dataset = datasets.get(config)
    code = load_backend(result.backend)
    trained = code.load_checkpoint(recorded_checkpoint(store.root, result))  # digest checked
    logits = code.predict_logits(trained.model, dataset.x_test)
    proba = code.predict_proba(trained.model, dataset.x_test)
    y = np.asarray(dataset.y_test)
    auc_softmax = roc_auc(proba, y)
    auc_logits = roc_auc_from_logits(logits, y)
    recorded = result.metrics.get("auc")
    label = " · ".join(str(v) for v in result.labels.values())
    return {"run_id": result.run_id, "label": label,
            "accuracy": result.metrics.get("accuracy"),
            "saturated": float(np.mean(proba.max(axis=1) == np.float32(1.0))),
            "auc_recorded": recorded, "auc_softmax": auc_softmax, "auc_logits": auc_logits,
            "difference": (auc_logits - recorded) if recorded is not None else None}


def scored_runs(store: ResultsStore, run_ids: Sequence[str] = ()) -> Iterable[RunResult]:
    """The finished runs of ``store`` with a checkpoint (only ``run_ids`` when given, in that
    order; an id that is not such a run is an error naming it)."""
    runs = {r.run_id: r for r in store.list_runs()
            if r.status == "finished" and r.checkpoint
            and (store.root / r.checkpoint).exists()}
    missing = [rid for rid in run_ids if rid not in runs]
    if missing:
        raise SystemExit(f"not a finished run with a checkpoint in {store.root}: "
                         f"{', '.join(missing)}")
    return [runs[rid] for rid in run_ids] if run_ids else [runs[k] for k in sorted(runs)]


def score_store(store_root: str | Path, run_ids: Sequence[str] = (),
                data_dir: str | None = None) -> pd.DataFrame:
    """The table of :func:`score_run` over :func:`scored_runs` (one progress line per run on
    stderr); column ``comparable``: the recomputed softmax AUC is the record's."""
    store = ResultsStore(store_root)
    datasets = DatasetCache(data_dir)
    runs = list(scored_runs(store, run_ids))
    rows = []
    for i, result in enumerate(runs, 1):
        print(f"[{i}/{len(runs)}] {result.run_id}", file=sys.stderr, flush=True)
        rows.append(score_run(store, result, datasets))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["comparable"] = [
        r is not None and abs(s - r) <= SAME_AUC_TOLERANCE
        for r, s in zip(frame["auc_recorded"], frame["auc_softmax"], strict=True)]
    return frame


def _cell(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def render(frame: pd.DataFrame, command: str) -> str:
    """The Markdown write-up: the command, the comparable runs, those left out."""
    comparable = frame[frame["comparable"]].sort_values("difference", ascending=False)
    left_out = frame[~frame["comparable"]]
    lines = ["# Test AUC from the float32 softmax (recorded) and from the logits", "",
             f"Command: `{command}`", "",
             f"{len(comparable)} run(s) compared; `saturated`: share of test examples whose "
             "largest float32 probability is exactly 1; `difference`: AUC from the logits "
             "minus the recorded AUC.", ""]
    if not comparable.empty:
        diff = comparable["difference"].astype(float)
        lines += [f"Difference: mean {diff.mean():+.4f}, largest {diff.max():+.4f}; "
                  f"{int((diff > 0.001).sum())} run(s) gain more than 0.001.", "",
                  *md_table(COLUMNS, [[_cell(v) for v in row]
                                      for row in comparable[COLUMNS].itertuples(index=False)],
                            ), ""]
    if not left_out.empty:
        lines += [f"{len(left_out)} run(s) not comparable (their softmax AUC recomputed on the "
                  "clean test images is not the recorded one: another evaluation set): "
                  + ", ".join(f"`{r}`" for r in left_out["run_id"]) + ".", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.auc_scoring",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a run store (a --out folder)")
    parser.add_argument("--runs", nargs="*", default=(), help="run ids (default: every "
                        "finished run with a checkpoint)")
    parser.add_argument("--data-dir", default=None,
                        help="data root (default: $DPCOMPARE_DATA_DIR)")
    parser.add_argument("--out", default=None, help="write the Markdown here (default: stdout)")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.auc_scoring " + " ".join(
        ["--store", args.store, *(["--runs", *args.runs] if args.runs else [])])
    text = render(score_store(args.store, args.runs, args.data_dir), command)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
