"""How much a saturated float32 softmax lowers a recorded test AUC: finished runs re-scored
by the softmax and by the logits.

A run's ``metrics["auc"]`` is scored as its ``metrics["scoring"]["auc"]`` says
(:mod:`dpcore.scoring`): ``logits`` (the per-class log-odds,
:func:`dpcore.metrics.roc_auc_from_logits`), or ``softmax_float32`` (scikit-learn's ROC AUC of
the float32 softmax; every record without the entry). An over-confident model rounds many of
its float32 probabilities to exactly 1; the tied examples then count as half-ordered, and the
AUC falls towards chance although the logits still rank them. Per run this script writes:

* ``source``: where the logits come from. A record that keeps its test outputs
  (:mod:`dpcore.outputs`) is re-scored from them: no checkpoint and no data are needed. Any
  other run is re-scored from its checkpoint in the store (its test logits by the backend's
  ``predict_outputs``, on the data set at ``DPCOMPARE_DATA_DIR``);
* ``saturated``: the share of test examples whose largest float32 probability is exactly 1;
* ``scored_by``: the record's AUC method; ``auc_recorded``: the record's AUC;
* ``auc_softmax``: the AUC of the float32 softmax (of the record's logits: numpy's float32
  softmax, :func:`dpcore.scoring.softmax_float32`); ``auc_logits``: the AUC of the per-class
  log-odds, the exact probabilities' ranking; ``difference``: ``auc_logits - auc_recorded``.

A run is compared only if the AUC recomputed by the record's own method is the recorded one
(to 1e-6): runs where it is not, such as local-DP runs scored on their privatised images or runs
scored on the training split, are listed as not comparable and left out.

Run: ``python -m benchmarks.auc_scoring --store runs/interp-tuned [--runs ID ...]
[--out FILE.md]``. Runs re-scored from their checkpoints need ``DPCOMPARE_DATA_DIR`` set to the
data the runs used (measured: about 24 s per cats vs dogs scatter-linear run on 2 cores); runs
whose records keep their logits take milliseconds. (A report's records that keep their logits
are re-scored by ``dpcompare report --records``, :func:`dpcore.scoring.rescored`.) Written by
hand: no library re-scores stored runs of this bench.
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
from dpcore.scoring import LOGITS, outputs_of, scoring_of, softmax_float32
from dpcore.trained import recorded_checkpoint

#: The AUC recomputed by the record's own method must equal the recorded one to this
#: tolerance for the run to be compared (else its test images are not the record's).
SAME_AUC_TOLERANCE = 1e-6
#: ``source`` of a run re-scored from the test outputs its record keeps / from its checkpoint.
FROM_RECORD = "record's logits"
FROM_CHECKPOINT = "checkpoint"
COLUMNS = ["run_id", "label", "source", "accuracy", "saturated", "scored_by", "auc_recorded",
           "auc_softmax", "auc_logits", "difference"]


def score_outputs(result: RunResult, logits: np.ndarray, proba: np.ndarray, y: np.ndarray,
                  source: str) -> dict[str, Any]:
    """One row of the table: ``result`` re-scored from its test ``logits`` and float32
    softmax ``proba`` (labels ``y``)."""
    recorded = result.metrics.get("auc")
    auc_logits = roc_auc_from_logits(logits, y)
    return {"run_id": result.run_id, "label": " · ".join(str(v) for v in result.labels.values()),
            "source": source, "accuracy": result.metrics.get("accuracy"),
            "saturated": float(np.mean(proba.max(axis=1) == np.float32(1.0))),
            "scored_by": scoring_of(result.metrics)["auc"], "auc_recorded": recorded,
            "auc_softmax": roc_auc(proba, y), "auc_logits": auc_logits,
            "difference": (auc_logits - recorded) if recorded is not None else None}


def score_run(store: ResultsStore, result: RunResult, datasets: DatasetCache
              ) -> dict[str, Any]:
    """One row of the table for a finished run: from the test outputs its record keeps (no
    checkpoint, no data), else from its checkpoint in ``store`` (on the data of
    ``datasets``)."""
    outputs = outputs_of(result)
    if outputs is not None:
        return score_outputs(result, outputs.logits, softmax_float32(outputs.logits),
                             outputs.labels, FROM_RECORD)
    dataset = datasets.get(RunConfig.from_dict(result.config))
    code = load_backend(result.backend)
    trained = code.load_checkpoint(recorded_checkpoint(store.root, result))  # digest checked
    logits, proba = code.predict_outputs(trained.model, dataset.x_test)
    return score_outputs(result, logits, proba, np.asarray(dataset.y_test), FROM_CHECKPOINT)


def scored_runs(store: ResultsStore, run_ids: Sequence[str] = ()) -> Iterable[RunResult]:
    """The finished runs of ``store`` that keep their test logits or have a checkpoint (only
    ``run_ids`` when given, in that order; an id that is not such a run is an error naming
    it)."""
    runs = {r.run_id: r for r in store.list_runs()
            if r.status == "finished" and (r.test_outputs is not None or (
                r.checkpoint and (store.root / r.checkpoint).exists()))}
    missing = [rid for rid in run_ids if rid not in runs]
    if missing:
        raise SystemExit(f"not a finished run with a checkpoint or kept test logits in "
                         f"{store.root}: {', '.join(missing)}")
    return [runs[rid] for rid in run_ids] if run_ids else [runs[k] for k in sorted(runs)]


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    recomputed = [logits if by == LOGITS else softmax for by, softmax, logits in zip(
        frame["scored_by"], frame["auc_softmax"], frame["auc_logits"], strict=True)]
    frame["comparable"] = [
        r is not None and not pd.isna(r) and abs(s - r) <= SAME_AUC_TOLERANCE
        for r, s in zip(frame["auc_recorded"], recomputed, strict=True)]
    return frame


def score_store(store_root: str | Path, run_ids: Sequence[str] = (),
                data_dir: str | None = None) -> pd.DataFrame:
    """The table of :func:`score_run` over :func:`scored_runs` (one progress line per run on
    stderr); column ``comparable``: the AUC recomputed by the record's method is the
    record's."""
    store = ResultsStore(store_root)
    datasets = DatasetCache(data_dir)
    runs = list(scored_runs(store, run_ids))
    rows = []
    for i, result in enumerate(runs, 1):
        print(f"[{i}/{len(runs)}] {result.run_id}", file=sys.stderr, flush=True)
        rows.append(score_run(store, result, datasets))
    return _frame(rows)


def _cell(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def render(frame: pd.DataFrame, command: str) -> str:
    """The Markdown write-up: the command, the runs re-scored from their records' logits, the
    comparable runs, those left out."""
    comparable = frame[frame["comparable"]].sort_values("difference", ascending=False)
    left_out = frame[~frame["comparable"]]
    from_records = int((frame["source"] == FROM_RECORD).sum())
    lines = ["# Test AUC from the float32 softmax and from the logits", "",
             f"Command: `{command}`", "",
             f"{len(comparable)} run(s) compared; `saturated`: share of test examples whose "
             "largest float32 probability is exactly 1; `scored_by`: how the recorded AUC was "
             "scored; `difference`: AUC from the logits minus the recorded AUC.", ""]
    if from_records:
        lines += [f"{from_records} run(s) re-scored from the test logits their records keep "
                  "(`source`: record's logits): no checkpoint or data needed.", ""]
    if not comparable.empty:
        diff = comparable["difference"].astype(float)
        lines += [f"Difference: mean {diff.mean():+.4f}, largest {diff.max():+.4f}; "
                  f"{int((diff > 0.001).sum())} run(s) gain more than 0.001.", "",
                  *md_table(COLUMNS, [[_cell(v) for v in row]
                                      for row in comparable[COLUMNS].itertuples(index=False)],
                            ), ""]
    if not left_out.empty:
        lines += [f"{len(left_out)} run(s) not comparable (their AUC recomputed on the clean "
                  "test images by the record's method is not the recorded one: another "
                  "evaluation set): " + ", ".join(f"`{r}`" for r in left_out["run_id"]) + ".",
                  ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.auc_scoring",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a run store (a --out folder)")
    parser.add_argument("--runs", nargs="*", default=(), help="run ids (default: every "
                        "finished run with a checkpoint or kept test logits)")
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
