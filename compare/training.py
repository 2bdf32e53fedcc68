"""The one record path of a run: train, evaluate, checkpoint, store (:func:`train_and_record`).

Both ``dpcompare train`` (:mod:`compare.cli.train`) and the grid runner
(:func:`compare.cellrun.run_one`) call :func:`train_and_record`, so a stored RunResult always went
through the same steps, in this order:

1. the backend trains (:func:`dpcore.backend.load_backend` ``(backend).train``, which is
   :func:`dpcore.assembly.train`: the data factors applied, a DP-SGD model holding a layer the
   accountant cannot cover (BatchNorm) refused before the first step, the one-run audit's
   canaries inserted and scored);
2. for a finished run: Grad-CAM faithfulness on a fixed seeded test subset (image conv models;
   the reason is recorded where it is skipped) with the model-randomisation sanity check of
   its maps and its figures after temperature scaling; a local-DP run's test metrics on clean
   and on privatised test images; then the empirical audit if asked;
3. the checkpoint is written, then the RunResult (both atomically) with its path relative to
   the store root.

Ctrl-C (KeyboardInterrupt) during any of these stores an ``interrupted`` record (not final:
the next invocation redoes the run) and is re-raised, never swallowed: the CLI exits 130.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compare.calibrators import load_config_calibrator
from dpcore.architectures import IMAGE_ARCHITECTURES, explainable
from dpcore.backend import load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import DpCompareError
from dpcore.metrics.sanity import RANDOMISATION_SEED
from dpcore.results import ResultsStore, RunResult, library_versions, run_id, utc_now
from dpcore.trained import CHECKPOINT_FILE
from dpcore.trainloop import EpochCallback

#: The models Grad-CAM faithfulness applies to: every image (convolutional) architecture.
CONV_MODELS: tuple[str, ...] = tuple(IMAGE_ARCHITECTURES)
INTERRUPTED_MESSAGE = "interrupted (KeyboardInterrupt); redone by the next invocation"


@dataclass(frozen=True)
class Evaluation:
    """What is measured after a finished run.

    Attributes:
        faithfulness_subset: Grad-CAM faithfulness on this many seeded test images (0 skips).
        audit: run the empirical membership-inference audit (:mod:`compare.audit`).
    """

    faithfulness_subset: int = 500
    audit: bool = False

    @property
    def asks_faithfulness(self) -> bool:
        """Whether Grad-CAM faithfulness is measured (a subset of at least one image)."""
        return self.faithfulness_subset > 0

    @classmethod
    def of_grid(cls, evaluation: Mapping[str, Any]) -> Evaluation:
        """The options of a grid's ``evaluation`` mapping (``faithfulness: false`` skips)."""
        subset = int(evaluation.get("faithfulness_subset", 500))
        if not evaluation.get("faithfulness", True):
            subset = 0
        return cls(faithfulness_subset=subset, audit=bool(evaluation.get("audit", False)))


def epoch_line_logger(total_epochs: int | None, log: Callable[[str], None], *,
                      indent: str = "") -> EpochCallback:
    """A training callback that logs one line per epoch, for output that is not a terminal
    (a log file, a notebook), where the per-epoch bar is not shown: the epoch (of
    ``total_epochs``, left out when None), the mean training loss in nats, the test accuracy
    as a fraction, the epsilon spent so far (``n/a`` without DP accounting, ``inf`` without
    DP), the optimizer step reached and the seconds of training. Never asks training to stop.
    The one line format of ``dpcompare train`` and of grids logging to a file."""
    of_total = "" if total_epochs is None else f"/{total_epochs}"

    def show(record: dict[str, Any]) -> None:
        eps = record.get("epsilon_spent")
        log(f"{indent}epoch {record['epoch']}{of_total}: loss {record['loss']:.4f}, test "
            f"accuracy {record['test_accuracy']:.4f}, epsilon "
            f"{'n/a' if eps is None else f'{eps:.3g}'}, step {record['step']}, "
            f"{record['seconds']:.1f} s")
    return show


def train_and_record(
    config: RunConfig, dataset: Dataset, backend: str, store: ResultsStore, *,
    perf: PerfSpec | None = None, evaluation: Evaluation | None = None,
    progress: bool = True, callbacks: Sequence[EpochCallback] = (),
    labels: Mapping[str, str] | None = None, grid_name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> tuple[RunResult, Path]:
    """Train one run, evaluate it, write its checkpoint and store its RunResult.

    Args:
        config: the run's configuration.
        dataset: the prepared data (privatised already for a local-DP run).
        backend: ``tf`` or ``torch``.
        store: where ``runs/<config_hash>-<backend>/`` is written.
        perf: performance switches (never change the result beyond float tolerance).
        evaluation: what to measure after training (default :class:`Evaluation`).
        progress: tqdm bars (only on a terminal).
        callbacks: per-epoch callbacks, passed to the backend.
        labels: the grid's labels of this run (recorded).
        grid_name: the grid's name (recorded).
        defaults: the config keys the bench's defaults filled in (recorded as ``defaults``).

    Returns:
        The stored RunResult (status ``finished`` or ``diverged``) and the path of its file.

    Raises:
        PrivacyError: the model holds a layer DP-SGD cannot account for (nothing stored).
        KeyboardInterrupt: after an ``interrupted`` record was stored.
    """
    started = utc_now()
    evaluation = evaluation or Evaluation()
    load_config_calibrator(config)  # the backend registering its accountant (e.g. prv)
    try:
        train = load_backend(backend)
        trained = train.train(config, dataset, perf or PerfSpec(), progress=progress,
                              callbacks=list(callbacks))
        result: RunResult | None = trained.result
        if result is None or trained.dataset is None:  # pragma: no cover - the contract
            raise DpCompareError(f"backend {backend!r} returned no RunResult or data set")
        # the inputs as the model was trained on them (factors.input_scaling / eval_split):
        # the evaluations below see them too
        dataset = trained.dataset
        if result.status == "finished" and evaluation.asks_faithfulness:
            record_faithfulness(result, backend, trained, dataset,
                                evaluation.faithfulness_subset, seed=0)
        if result.status == "finished" and dataset.ldp_test_images is not None:
            result.metrics["ldp_test_inputs"] = ldp_test_metrics(backend, trained, dataset,
                                                                 config.data.ldp_test_inputs)
        if result.status == "finished" and evaluation.audit:
            from compare.audit import audit_trained

            result.audit = {**(result.audit or {}),
                            **audit_trained(trained, dataset, result.privacy)}
        record_privacy_figures(result)
        checkpoint = Path(train.save_checkpoint(
            trained, store.run_dir(config.config_hash, backend) / CHECKPOINT_FILE))
        result.checkpoint = str(checkpoint.relative_to(store.root))
        result.labels = dict(labels or {})
        result.grid = grid_name
        result.defaults = dict(defaults or {})
        return result, store.save(result)
    except KeyboardInterrupt:
        store_interrupted(store, config, backend, dataset, started, labels=labels,
                          grid_name=grid_name)
        raise


def record_privacy_figures(result: RunResult) -> None:
    """Put the claimed and proved epsilon (:mod:`dpcore.proved`) in ``result.privacy`` and,
    for an audited run, whether its audited bound is a privacy violation (above the proved
    epsilon, or above the claim where nothing is proved) in ``result.audit["one_run"]``; a
    run with ``factors.fault`` is marked ``deliberately_broken`` in both."""
    from dpcore.audit.faults import BROKEN_LABEL
    from dpcore.proved import is_violation, privacy_figures

    result.privacy.update(privacy_figures(result.config, result.backend, result.privacy))
    fault = (result.config.get("factors") or {}).get("fault", "none")
    if fault != "none":
        result.privacy["deliberately_broken"] = f"{BROKEN_LABEL}: factors.fault={fault}"
    one_run = (result.audit or {}).get("one_run")
    if one_run is not None:
        one_run["violation"] = is_violation(one_run.get("epsilon_lower_bound"),
                                            result.privacy.get("epsilon_claimed"),
                                            result.privacy.get("epsilon_proved"))
        if fault != "none":
            one_run["deliberately_broken"] = fault


def incomplete_record(
    config: RunConfig, backend: str, dataset: Dataset | None, *, status: str, error: str,
    started: str, labels: Mapping[str, str] | None = None, grid_name: str | None = None,
) -> RunResult:
    """A schema-valid record of a run that did not finish: ``failed`` (with its error) or
    ``interrupted``. Neither is final: the runner redoes such a run."""
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
        error=error, labels=dict(labels or {}), grid=grid_name, started_at=started,
        finished_at=utc_now(),
    )


def store_interrupted(
    store: ResultsStore, config: RunConfig, backend: str, dataset: Dataset | None,
    started: str, *, labels: Mapping[str, str] | None = None, grid_name: str | None = None,
) -> Path:
    """Store that this run was interrupted; returns the record's path.

    Best effort by design: the write is atomic, so a second Ctrl-C during it loses only this
    marker, never a finished result of another run.
    """
    return store.save(incomplete_record(
        config, backend, dataset, status="interrupted", error=INTERRUPTED_MESSAGE,
        started=started, labels=labels, grid_name=grid_name))


def ldp_test_metrics(backend: str, trained: Any, dataset: Dataset, headline: str
                     ) -> dict[str, Any]:
    """A local-DP run's test metrics on its test images both ways (``dataset``'s
    ``ldp_test_images``): ``{"headline": "clean" | "privatised", "clean": {...},
    "privatised": {...}}``, each with ``n``, ``accuracy``, ``auc`` and ``per_class``
    (:func:`dpcore.metrics.classification_summary`). ``headline`` names the set the run's
    own ``metrics`` use (``data.ldp_test_inputs``)."""
    from dpcore.metrics import classification_summary

    api = load_backend(backend)
    out: dict[str, Any] = {"headline": headline}
    for name, images in (dataset.ldp_test_images or {}).items():
        summary = classification_summary(api.predict_proba(trained.model, images),
                                         dataset.y_test, dataset.class_names)
        out[name] = {key: summary[key] for key in ("n", "accuracy", "auc", "per_class")}
    return out


# ------------------------------------------------------------------------ Grad-CAM faithfulness
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
    if not faithfulness_applies(dataset.task, trained.config.model):
        return None, None
    from dpcore.data import as_float01
    from dpcore.metrics import faithfulness_metrics, seeded_subset

    predict = explain = load_backend(backend)
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
    metrics["randomisation_check"] = randomisation_check_of(backend, trained, x, target,
                                                            saliency)
    metrics["calibrated"] = calibrated_faithfulness_of(backend, trained, dataset, idx, x,
                                                       saliency, target, seed)
    return metrics, None


def randomisation_check_of(backend: str, trained: Any, x: np.ndarray, target: np.ndarray,
                           saliency: np.ndarray, seed: int = RANDOMISATION_SEED
                           ) -> dict[str, Any]:
    """The model-randomisation sanity check (:mod:`dpcore.metrics.sanity`) of ``trained``'s
    Grad-CAM maps ``saliency`` of ``x`` for the classes ``target``.

    The same architecture is built by the backend, loaded with ``trained``'s weights in the
    neutral layout where the explained layer (the Grad-CAM layer) and every weighted layer
    above it are re-initialised with ``seed``, and explained by the backend's ``gradcam`` on
    the same images and classes. One code path for both backends (the backend contract)."""
    from dpcore.architectures import architecture
    from dpcore.metrics.sanity import cascade_layers, randomisation_check, randomised_weights

    api = load_backend(backend)
    arch = architecture(trained.config.model, trained.input_shape, trained.n_classes,
                        trained.vocab_size)
    layers = cascade_layers([layer.name for layer in arch.walk()], list(arch.weight_kinds()),
                            arch.gradcam_layer())
    model = api.build_model(trained.config.model, trained.input_shape, trained.n_classes,
                            vocab_size=trained.vocab_size)
    api.set_weights(model, randomised_weights(trained.weights, layers, seed))
    random_maps = api.gradcam(model, x, target)
    return randomisation_check(saliency, random_maps, layers=layers, seed=seed)


#: Fewest test images outside the faithfulness subset that temperature scaling is fitted on;
#: with fewer, the subset itself is split in two (fit on one half, measure on the other).
MIN_CALIBRATION_IMAGES = 100


def calibrated_faithfulness_of(backend: str, trained: Any, dataset: Dataset, idx: np.ndarray,
                               x: np.ndarray, saliency: np.ndarray, target: np.ndarray,
                               seed: int) -> dict[str, Any]:
    """Average Drop and Increase in Confidence after temperature scaling (Guo et al. 2017),
    fitted on images disjoint from the ones they are measured on.

    The split: the data set's validation split when it has one (``Dataset.x_val``, e.g.
    ``imagefolder:`` with ``val: validation``; ``fit_split`` ``"validation"``), else the test
    images *outside* the faithfulness subset ``idx`` (disjoint from the measured images; for
    the data sets without a validation split, holding one out of train would change every
    stored run, and T, one scalar that changes no prediction's class, is fitted on no
    image the model trained on). When fewer than :data:`MIN_CALIBRATION_IMAGES` remain (a
    small test set), the subset is split by a seeded permutation: T is fitted on one half and
    the calibrated figures are measured on the other (``n`` says how many). The result says
    which in ``fit_on`` (text) and ``fit_split`` (``validation``, ``test`` or
    ``faithfulness subset``), with ``n_fit``, the NLL before and after (nats) and
    ``temperature``.
    """
    from dpcore.data import as_float01
    from dpcore.metrics import mask_inputs, predict_in_batches
    from dpcore.metrics.calibration import (
        calibrated_faithfulness,
        fit_temperature,
        negative_log_likelihood,
    )

    api = load_backend(backend)

    def predict(batch: np.ndarray) -> np.ndarray:
        return api.predict_proba(trained.model, batch)

    rest = np.setdiff1d(np.arange(len(dataset.x_test)), idx)
    measured = np.arange(len(idx))
    if dataset.x_val is not None and dataset.y_val is not None:
        fit_x, fit_y = as_float01(dataset.x_val), dataset.y_val
        fit_split, fit_on = "validation", "the validation split"
    elif rest.size >= MIN_CALIBRATION_IMAGES:
        fit_x, fit_y = as_float01(dataset.x_test[rest]), dataset.y_test[rest]
        fit_split, fit_on = "test", "test images outside the faithfulness subset"
    else:
        order = np.random.default_rng(seed).permutation(len(idx))
        half = len(idx) // 2
        fit, measured = np.sort(order[:half]), np.sort(order[half:])
        fit_x, fit_y = x[fit], dataset.y_test[idx][fit]
        fit_split = "faithfulness subset"
        fit_on = ("half of the faithfulness subset (seeded); the calibrated figures are "
                  "measured on the other half")
    fit_proba = predict_in_batches(predict, fit_x)
    temperature = fit_temperature(fit_proba, fit_y)
    xs, maps = x[measured], saliency[measured]
    out = calibrated_faithfulness(predict_in_batches(predict, xs),
                                  predict_in_batches(predict, mask_inputs(xs, maps)),
                                  target[measured], temperature)
    out.update({"fit_on": fit_on, "fit_split": fit_split, "n_fit": int(len(fit_y)),
                "n": int(len(measured)),
                "nll_before": negative_log_likelihood(fit_proba, fit_y),
                "nll_after": negative_log_likelihood(fit_proba, fit_y, temperature),
                "method": "temperature scaling (Guo et al. 2017), NLL fitted by scipy's "
                          "bounded scalar minimiser"})
    return out


def faithfulness_applies(task: str | None, model: Any) -> bool:
    """Whether Grad-CAM faithfulness is defined for ``model`` (a ModelSpec) on data of
    ``task``: image data and an explainable model (:func:`dpcore.architectures.explainable`)."""
    return task == "image" and explainable(model)


def faithfulness_skip_reason(images: np.ndarray) -> str | None:
    """Why Grad-CAM faithfulness is not computed on ``images`` (float), or None if it is: the
    metrics (saliency-masked inputs, deletion / insertion) are defined on [0, 1] images, and
    the test images of a local-DP run with unclipped noise leave that range."""
    if images.size and (float(images.min()) < 0.0 or float(images.max()) > 1.0):
        return (f"not computed: the (locally privatised) test images have values in "
                f"[{float(images.min()):.3g}, {float(images.max()):.3g}], outside [0, 1]; "
                "set data.ldp_params.clip: true to clip them (post-processing)")
    return None
