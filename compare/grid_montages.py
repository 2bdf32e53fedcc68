"""The arrays of a grid's saliency montages (:func:`store_montages`), computed after the grid
from the stored checkpoints (so they are complete after a resume too; a run known only from
its committed record contributes its committed montage column) and kept in the grid's own
montage folder of the store (:func:`compare.montage_data.grid_montage_folder`). The report
layer draws each montage's PNG from these arrays (:mod:`compare.reporting.montage`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from compare.cellrun import DatasetCache
from compare.grid import Grid, GridCell
from compare.montage_data import (
    MontageData,
    grid_montage_folder,
    safe_file_name,
    save_montage_data,
)
from compare.records import committed_montage_columns
from compare.reporting.collapse import collapse_reason
from dpcore.backend import load_backend
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01
from dpcore.errors import DpCompareError
from dpcore.evaluation.explain import explain_sample
from dpcore.evaluation.faithfulness import CONV_MODELS
from dpcore.mechanisms import is_non_private, privatises_images
from dpcore.metrics import seeded_subset
from dpcore.results import ResultsStore, RunResult, run_id
from dpcore.trained import recorded_checkpoint


def montage_column_title(setting: str, result: RunResult) -> str:
    """A montage column's title: the setting, its epsilon when the setting does not say it,
    and "(collapsed)" when the model predicts (almost) one class (its maps explain a
    near-constant model; see :func:`compare.reporting.collapse.collapse_reason`)."""
    eps = result.privacy.get("epsilon_rdp") or result.privacy.get("epsilon_pld")
    eps_text = "non-private" if is_non_private(result.privacy.get("mechanism")) else (
        f"eps={eps:.2g}" if eps is not None and math.isfinite(eps) else setting)
    same = eps_text in setting or setting in eps_text
    title = setting if same else f"{setting} ({eps_text})"
    return title + (" (collapsed)" if collapse_reason(result.metrics) else "")


def _has_checkpoint(store: ResultsStore, result: RunResult | None) -> bool:
    """Whether ``result`` is a finished run of ``store`` whose checkpoint file is there."""
    return (result is not None and result.status == "finished" and bool(result.checkpoint)
            and (store.root / str(result.checkpoint)).is_file())


def _montage_sample(dataset: Dataset, n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """The montage's sample of ``dataset``'s test split: its images in [0, 1] and their true
    classes (the same seeded indices wherever a montage is drawn or labelled)."""
    idx = seeded_subset(len(dataset.x_test), n_images, 1)
    return as_float01(dataset.x_test[idx]), np.asarray(dataset.y_test[idx]).astype(np.int64)


def _true_labels(members: Sequence[tuple[GridCell, str]], datasets: DatasetCache,
                 shown: np.ndarray, n_images: int,
                 log: Callable[[str], None]) -> np.ndarray | None:
    """The true classes of the montage images ``shown`` (for committed montage arrays without
    their true labels): the test labels at the montage's sample indices of
    the first member's data set whose images there are ``shown``; None (logged) when the data
    set cannot be loaded here or shows other images."""
    # runs without local DP first: their data set is not privatised for this
    clean_first = sorted(members, key=lambda m: privatises_images(m[0].config.privacy.mechanism))
    reasons = []
    for cell, _backend in clean_first:
        try:
            x, y = _montage_sample(datasets.get(cell.config), n_images)
            if np.array_equal(np.asarray(x, np.float16), np.asarray(shown, np.float16)):
                return y
            reasons.append("the committed images are not the data set's montage sample here")
        except DpCompareError as exc:
            reasons.append(str(exc))
    log(f"montage {members[0][0].config.data.name}: no true labels "
        f"({'; '.join(dict.fromkeys(reasons))})")
    return None


def store_montages(grid: Grid, store: ResultsStore, datasets: DatasetCache,
                   *, log: Callable[[str], None] = print,
                   records: Mapping[str, RunResult] | None = None,
                   records_from: Sequence[str | Path] = ()) -> list[Path]:
    """The arrays of one saliency montage per (data set, model), kept in the grid's montage
    folder of the store (``NAME.npz``, :func:`compare.montage_data.save_montage_data`), from
    which a report draws the PNG: rows = sample test images, columns = the input then the
    Grad-CAM overlay of every setting (first seed), one block per backend.

    A run with its checkpoint in this store is explained from it
    (:func:`dpcore.evaluation.explain.explain_sample`), also when a committed record reports
    it (e.g. a run another grid trained into the same store, whose own report drew no
    montage); a run without a checkpoint here but with a committed record (``records``) takes
    its column from the committed montage arrays of ``records_from`` when they show the same
    images. Returns the npz paths.
    """
    records = records or {}
    committed = committed_montage_columns(records_from) if records else {}
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
        # (None, None, column) of a run explained here, (the images it showed, their true
        # classes or None, column) of a column taken from committed montage arrays; in the
        # grid's order
        entries: list[tuple[np.ndarray | None, np.ndarray | None, dict]] = []
        images = clean = None  # the first run's test images; those of a run without local DP
        images_labels = clean_labels = None  # their true classes (from the same data set)
        class_names: tuple[str, ...] = ()
        for cell, backend in sorted(members, key=lambda m: m[1]):
            rid = run_id(cell.config.config_hash, backend)
            result = store.load(cell.config.config_hash, backend)
            if rid in records and not _has_checkpoint(store, result):
                result = records[rid]
                if rid in committed:
                    data, column = committed[rid]
                    entries.append((data.images, data.labels, {
                        **column, "title": montage_column_title(cell.setting, result),
                        "inputs": column["inputs"] if column["inputs"] is not None
                        else data.images}))
                    class_names = class_names or tuple(data.class_names)
                continue
            if not _has_checkpoint(store, result):
                continue
            stored = result  # the record that names the checkpoint and its SHA-256
            result = records.get(rid, result)  # the record is the one reported
            try:
                dataset = datasets.get(cell.config)
                # The run's own test images (privatised for local-DP runs: a run whose
                # noise leaves [0, 1] is skipped with the reason logged).
                x, y = _montage_sample(dataset, n_images)
                if images is None:
                    images, images_labels = x, y
                    class_names = tuple(dataset.class_names)
                if clean is None and not privatises_images(cell.config.privacy.mechanism):
                    clean, clean_labels = x, y
                code = load_backend(backend)
                # refused (one line, the column left out) if not the file the run stored;
                # each model is explained on the inputs it is evaluated on
                trained = code.load_checkpoint(recorded_checkpoint(store.root, stored))
                seen = explain_sample(code, trained, x)
            except DpCompareError as exc:
                log(f"montage {data_name}/{model_name}: skipped {backend}: {exc}")
                continue
            entries.append((None, None, {"title": montage_column_title(cell.setting, result),
                                   "backend": backend, "run_id": rid, "inputs": x,
                                   "maps": seen.maps, "pred_class": seen.pred_class,
                                   "confidence": seen.confidence}))
        base, labels = (clean, clean_labels) if clean is not None else (images, images_labels)
        columns = []
        for shown, shown_labels, column in entries:  # committed columns showing these images
            if shown is not None and base is None:
                base = shown
            if shown is None or np.array_equal(np.asarray(shown, np.float16),
                                               np.asarray(base, np.float16)):
                columns.append(column)
                if labels is None and shown_labels is not None:  # the labels of these images
                    labels = shown_labels
            else:
                log(f"montage {data_name}/{model_name}: committed column of "
                    f"{column['run_id']} shows other images; left out")
        if base is None or not columns:
            continue
        if labels is None:  # no column keeps its true labels
            labels = _true_labels(members, datasets, base, n_images, log)
        name = safe_file_name(f"{data_name}-{model_name}")
        folder = grid_montage_folder(store.root, grid.name)
        folder.mkdir(parents=True, exist_ok=True)
        data = MontageData(f"{name}.png", base, tuple(columns), class_names,
                           title=f"Grad-CAM, {data_name} / {model_name}", labels=labels)
        written.append(save_montage_data(folder / f"{name}.npz", data))
    return written


__all__ = ["montage_column_title", "store_montages"]
