"""Run a grid on both backends with identical configurations, resumably.

For every (cell, backend) of a :class:`~compare.grid.Grid`:

* a run whose valid RunResult (status ``finished`` or ``diverged``) is already in the store is
  skipped (keyed by config hash + backend), so re-running the same command resumes the grid;
  a run that was interrupted has no final record and is redone from its start;
* otherwise the data set is prepared once per data spec (local DP applied, cached), the
  backend trains, faithfulness metrics of Grad-CAM are computed on a fixed seeded test subset,
  and the checkpoint then the RunResult are written atomically;
* a diverged run (NaN loss) is recorded as such and the grid goes on; a run that fails with an
  error is recorded as ``failed`` with the message, and the grid goes on;
* a stored result that does not read as a valid RunResult (e.g. truncated by a crash outside
  the atomic write) counts as not finished: a warning names it and the run is redone;
* Ctrl-C (KeyboardInterrupt) during a run stores an ``interrupted`` record for that run (not
  final: the next invocation redoes it) and re-raises; finished runs are never touched. A run
  killed outright (SIGKILL) has no record and is redone in the same way;
* a DP-SGD model holding a layer the accountant cannot cover (BatchNorm) is refused with the
  privacy reason (:func:`dpcore.privacy_checks.check_dp_model`), never stored as finished.

After the grid, a saliency montage per (data set, model) group is drawn from the stored
checkpoints (so it is complete after a resume too), and the report is written.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compare.grid import Grid, GridCell
from dpcore.config import RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import DpCompareError
from dpcore.results import (
    RESULT_FILE,
    ResultsStore,
    RunResult,
    library_versions,
    run_id,
    utc_now,
)

BACKEND_PACKAGES = {"tf": "tfpipe", "torch": "torchpipe"}
CONV_MODELS = ("cnn4", "resnet18", "vgg11", "vgg16", "alexnet")
#: Statuses of a stored run that is not redone (``ResultsStore.is_finished``).
FINAL_STATUSES = ("finished", "diverged")


@dataclass
class GridOutcome:
    """Counts of what a grid run did, and the wall time it took."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


def backend_module(backend: str, part: str) -> Any:
    """Import ``tfpipe.<part>`` / ``torchpipe.<part>`` lazily (frameworks load only when used)."""
    if backend not in BACKEND_PACKAGES:
        raise DpCompareError(f"backend {backend!r} is not known; valid: tf, torch")
    return importlib.import_module(f"{BACKEND_PACKAGES[backend]}.{part}")


class DatasetCache:
    """Prepared data sets of one grid run, one per (data spec, LDP seed)."""

    def __init__(self, data_dir: str | Path | None) -> None:
        self.data_dir = data_dir
        self._cache: dict[str, Dataset] = {}

    def get(self, config: RunConfig) -> Dataset:
        from dpcore.pipeline import prepare_dataset

        key = repr(config.data) + (f"|seed={config.seed}" if config.data.ldp_mechanism else "")
        if key not in self._cache:
            self._cache[key] = prepare_dataset(config, self.data_dir)
        return self._cache[key]


def faithfulness_of(
    backend: str, trained: Any, dataset: Dataset, subset_size: int, seed: int
) -> dict[str, Any] | None:
    """Grad-CAM faithfulness metrics on a fixed seeded test subset (image conv models only).

    None for text or non-convolutional models, and for a local-DP run whose privatised test
    images leave [0, 1] (unclipped noise): the metrics mask images by saliency maps, which is
    defined on [0, 1] images only (:func:`faithfulness_skip_reason` says why).
    """
    return _faithfulness(backend, trained, dataset, subset_size, seed)[0]


def record_faithfulness(result: RunResult, backend: str, trained: Any, dataset: Dataset,
                        subset_size: int, seed: int) -> None:
    """Store :func:`faithfulness_of` in ``result.faithfulness``; where it was skipped for the
    test images' range, the reason goes to ``result.metrics["faithfulness_note"]``."""
    result.faithfulness, reason = _faithfulness(backend, trained, dataset, subset_size, seed)
    if reason is not None:
        result.metrics["faithfulness_note"] = reason


def _faithfulness(backend: str, trained: Any, dataset: Dataset, subset_size: int, seed: int
                  ) -> tuple[dict[str, Any] | None, str | None]:
    """(metrics, None), or (None, why skipped) for images outside [0, 1], or (None, None)
    for models the metrics do not apply to."""
    if dataset.task != "image" or trained.config.model.name not in CONV_MODELS:
        return None, None
    from dpcore.data import as_float01
    from dpcore.metrics import faithfulness_metrics, seeded_subset

    explain = backend_module(backend, "explain")
    predict = backend_module(backend, "predict")
    idx = seeded_subset(len(dataset.x_test), subset_size, seed)
    x = as_float01(dataset.x_test[idx])
    reason = faithfulness_skip_reason(x)
    if reason is not None:
        return None, reason
    proba = predict.predict_proba(trained.model, x)
    target = proba.argmax(axis=1)
    saliency = explain.gradcam(trained.model, x, target)
    metrics = faithfulness_metrics(
        x, saliency, lambda batch: predict.predict_proba(trained.model, batch), target,
        labels=dataset.y_test[idx], curves=True,
    )
    metrics["subset_seed"] = seed
    return metrics, None


def faithfulness_skip_reason(images: np.ndarray) -> str | None:
    """Why Grad-CAM faithfulness is not computed on ``images`` (float), or None if it is: the
    metrics (saliency-masked inputs, deletion / insertion) are defined on [0, 1] images, and
    the test images of a local-DP run with unclipped noise leave that range."""
    if images.size and (float(images.min()) < 0.0 or float(images.max()) > 1.0):
        return (f"not computed: the (locally privatised) test images have values in "
                f"[{float(images.min()):.3g}, {float(images.max()):.3g}], outside [0, 1]; "
                "set data.ldp_params.clip: true to clip them (post-processing)")
    return None


def _failed_result(config: RunConfig, backend: str, grid: Grid, cell: GridCell,
                   dataset: Dataset | None, error: str, started: str,
                   status: str = "failed") -> RunResult:
    """A schema-valid record of a run that raised an error (so the grid can go on), or of one
    that was interrupted (``status="interrupted"``)."""
    return RunResult(
        run_id=run_id(config.config_hash, backend), config=config.to_dict(),
        config_hash=config.config_hash, backend=backend, seed=config.seed, status=status,
        versions=library_versions(),
        dataset={"name": config.data.name,
                 "fingerprint": dataset.fingerprint if dataset else "",
                 "n_train": len(dataset.x_train) if dataset else 1,
                 "n_test": len(dataset.x_test) if dataset else 1},
        privacy={"mechanism": config.privacy.mechanism, "noise_multiplier": None,
                 "delta": None, "steps": None, "sampling_rate": None, "epsilon_rdp": None,
                 "epsilon_pld": None, "dp_event": {}},
        error=error, labels=dict(cell.labels), grid=grid.name, started_at=started,
        finished_at=utc_now(),
    )


def run_one(
    cell: GridCell, backend: str, grid: Grid, store: ResultsStore, datasets: DatasetCache,
    *, progress: bool = True, log: Callable[[str], None] = print,
) -> RunResult:
    """Train, evaluate and store one (cell, backend); returns the stored RunResult."""
    config = cell.config
    started = utc_now()
    dataset: Dataset | None = None
    try:
        dataset = datasets.get(config)
        train = backend_module(backend, "train")
        trained = train.train(config, dataset, grid.perf, progress=progress)
        if config.privacy.is_dpsgd:
            from dpcore.privacy_checks import check_dp_model

            check_dp_model(trained.model, model_name=f"model {config.model.name!r}")
        result: RunResult = trained.result
        if result.status == "finished" and grid.evaluation.get("faithfulness", True):
            record_faithfulness(result, backend, trained, dataset,
                                int(grid.evaluation["faithfulness_subset"]), seed=0)
        if result.status == "finished" and grid.evaluation.get("audit", False):
            from compare.audit import audit_trained

            result.audit = audit_trained(trained, dataset, result.privacy)
        run_dir = store.run_dir(config.config_hash, backend)
        checkpoint = train.save_checkpoint(trained, run_dir / "checkpoint.npz")
        result.checkpoint = str(Path(checkpoint).relative_to(store.root))
    except KeyboardInterrupt:
        _store_interrupted(store, config, backend, grid, cell, dataset, started)
        raise
    except SystemExit:
        raise
    except DpCompareError as exc:
        log(f"  {backend} {cell.setting}: error: {exc}")
        result = _failed_result(config, backend, grid, cell, dataset, str(exc), started)
    except Exception as exc:  # a bug in one run must not lose the rest of the grid
        log(f"  {backend} {cell.setting}: failed: {type(exc).__name__}: {exc}")
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        result = _failed_result(config, backend, grid, cell, dataset, detail, started)
    result.labels = dict(cell.labels)
    result.grid = grid.name
    store.save(result)
    return result


def _store_interrupted(store: ResultsStore, config: RunConfig, backend: str, grid: Grid,
                      cell: GridCell, dataset: Dataset | None, started: str) -> None:
    """Record that this run was interrupted (best effort: the write is atomic, and a second
    Ctrl-C during it only loses this marker, never a finished result)."""
    record = _failed_result(config, backend, grid, cell, dataset,
                            "interrupted (KeyboardInterrupt); redone by the next invocation",
                            started, status="interrupted")
    record.labels = dict(cell.labels)
    record.grid = grid.name
    store.save(record)


def run_grid(
    grid: Grid, out_dir: str | Path, *, data_dir: str | Path | None = None,
    progress: bool = True, log: Callable[[str], None] = print,
) -> GridOutcome:
    """Run every (cell, backend) not yet finished in ``out_dir``; returns what happened."""
    from tqdm import tqdm

    store = ResultsStore(out_dir)
    store.ensure_writable()
    datasets = DatasetCache(data_dir)
    outcome = GridOutcome()
    start = time.perf_counter()
    runs = grid.runs()
    show = progress and sys.stderr.isatty()
    bar = tqdm(total=len(runs), desc=f"{grid.name}: runs", unit="run", disable=not show)
    for cell, backend in runs:
        rid = run_id(cell.config.config_hash, backend)
        stored = store.load(cell.config.config_hash, backend)  # unreadable: warns, gives None
        if stored is not None and stored.status in FINAL_STATUSES:
            outcome.skipped.append(rid)
            bar.update(1)
            continue
        if (store.run_dir(cell.config.config_hash, backend) / RESULT_FILE).is_file():
            previous = "unreadable" if stored is None else stored.status
            log(f"  {rid}: stored record is {previous}, not final; redoing the run")
        bar.set_postfix_str(f"{backend} {cell.setting} seed {cell.config.seed}")
        if not show:
            log(f"[{len(outcome.ran) + len(outcome.skipped) + 1}/{len(runs)}] {backend} "
                f"{cell.setting} seed {cell.config.seed} ({rid})")
        result = run_one(cell, backend, grid, store, datasets, progress=show, log=log)
        outcome.ran.append(rid)
        if result.status == "failed":
            outcome.failed.append(rid)
        elif result.status == "diverged":
            outcome.diverged.append(rid)
        bar.update(1)
    bar.close()
    if grid.evaluation.get("montage_images", 0):
        write_montages(grid, store, datasets, log=log)
    outcome.wall_seconds = time.perf_counter() - start
    return outcome


def write_montages(grid: Grid, store: ResultsStore, datasets: DatasetCache,
                   *, log: Callable[[str], None] = print) -> list[Path]:
    """One saliency montage per (data set, model): rows = sample test images, columns = the
    input then the Grad-CAM overlay of every setting (first seed), one block per backend."""
    from compare.montage import saliency_montage
    from dpcore.data import as_float01
    from dpcore.metrics import seeded_subset

    groups: dict[tuple[str, str], list[tuple[GridCell, str]]] = {}
    first_seed = min((c.config.seed for c in grid.cells), default=0)
    for cell, backend in grid.runs():
        if cell.config.seed != first_seed or cell.config.model.name not in CONV_MODELS:
            continue
        key = (cell.config.data.name, cell.config.model.name)
        groups.setdefault(key, []).append((cell, backend))
    written = []
    n_images = int(grid.evaluation.get("montage_images", 4))
    for (data_name, model_name), members in groups.items():
        columns = []
        images = clean = None  # the first run's test images; those of a run without local DP
        class_names: tuple[str, ...] = ()
        for cell, backend in sorted(members, key=lambda m: m[1]):
            result = store.load(cell.config.config_hash, backend)
            if result is None or result.status != "finished" or not result.checkpoint:
                continue
            try:
                dataset = datasets.get(cell.config)
                # The run's own test images (privatised for local-DP runs: a run whose
                # noise leaves [0, 1] is skipped with the reason logged).
                idx = seeded_subset(len(dataset.x_test), n_images, 1)
                x = as_float01(dataset.x_test[idx])
                if images is None:
                    images = x
                    class_names = tuple(dataset.class_names)
                if clean is None and cell.config.privacy.mechanism != "ldp":
                    clean = x
                train = backend_module(backend, "train")
                trained = train.load_checkpoint(store.root / result.checkpoint)
                # Each model is explained on the inputs it is evaluated on.
                proba = backend_module(backend, "predict").predict_proba(trained.model, x)
                pred = proba.argmax(axis=1)
                maps = backend_module(backend, "explain").gradcam(trained.model, x, pred)
            except DpCompareError as exc:
                log(f"montage {data_name}/{model_name}: skipped {backend}: {exc}")
                continue
            eps = result.privacy.get("epsilon_rdp") or result.privacy.get("epsilon_pld")
            eps_text = "non-private" if result.privacy.get("mechanism") in ("none",) else (
                f"eps={eps:.2g}" if eps is not None and math.isfinite(eps) else cell.setting)
            same = eps_text in cell.setting or cell.setting in eps_text
            title = cell.setting if same else f"{cell.setting} ({eps_text})"
            columns.append({"title": title, "backend": backend, "inputs": x,
                            "maps": maps, "pred_class": pred,
                            "confidence": proba[np.arange(len(pred)), pred]})
        if images is None or not columns:
            continue
        safe_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{data_name}-{model_name}")
        path = store.root / "montages" / f"{safe_name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        saliency_montage(path, clean if clean is not None else images, columns, class_names,
                         title=f"Grad-CAM, {data_name} / {model_name}")
        written.append(path)
    return written
