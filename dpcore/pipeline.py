"""The steps of one training run that do not depend on the framework.

* :func:`prepare_dataset`: load the configured data set and, for local-DP runs, privatise it
  (the one seam where the LDP layer plugs into training);
* :func:`apply_data_factors`, :func:`factor_initial_weights`: the data set and the initial
  weights as the config's factors ask;
* :func:`privacy_plan`: the run's privacy plan, computed once per process;
* :func:`fit` / :func:`fit_library`: resolve the privacy plan, run the shared loop with a
  backend's step engine (or the library's own loop), and assemble the
  :class:`~dpcore.trained.TrainedModel` with its RunResult.

The one assembly of a run over the backend contract, which calls these, is
:func:`dpcore.assembly.train`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpcore.accounting import PrivacyPlan, plan_privacy
from dpcore.architectures import architecture
from dpcore.audit.gradient_run import gradient_audit_record, run_gradient_canaries
from dpcore.class_weights import loss_class_weights
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.frontcache import (
    FEATURE_MEMO,
    FixedFront,
    cache_inputs,
    front_not_cached_reason,
    front_spec,
    memo_key,
)
from dpcore.ldp.record import LdpRecord
from dpcore.libraryloop import canary_runner
from dpcore.mechanisms import get_mechanism, privatises_images
from dpcore.recipes import recipe_record
from dpcore.results import json_safe, utc_now
from dpcore.runrecord import build_run_result
from dpcore.shared_noise import framework_mechanism, shared_noise_for, uses_shared_noise
from dpcore.trained import TrainedModel
from dpcore.trainloop import (
    EpochCallback,
    LibraryRecipe,
    StepEngine,
    StepMechanism,
    dataclass_replace_rate,
    library_epochs,
    run_library_training,
    run_training,
    step_mechanism,
)
from dpcore.weights import Weights, init_weights


def prepare_dataset(config: RunConfig, data_dir: str | Path | None = None) -> Dataset:
    """The data set a run trains on: loaded, and privatised when ``data.ldp_mechanism`` is set.

    The local-DP noise is seeded by ``config.seed`` (both backends of one configuration see
    byte-identical images) and cached under the data cache folder (``ldp/``). A privatised
    data set carries its typed :class:`~dpcore.ldp.record.LdpRecord` in ``Dataset.ldp``,
    completed with the epsilons at the run's delta and the image quality (:func:`ldp_details`).

    Raises:
        DataError / ConfigError: from the loader or the LDP layer, naming the bad value.
    """
    from dpcore.data import load_dataset, resolve_data_root

    root = resolve_data_root(data_dir)
    dataset = load_dataset(config.data, root)
    if config.data.ldp_mechanism is None:
        return dataset
    from dpcore.data.cache import cache_dir
    from dpcore.ldp import build_mechanism
    from dpcore.ldp.privatize import privatize_dataset

    mechanism = build_mechanism(config.data.ldp_mechanism, config.data.ldp_params)
    noisy = privatize_dataset(dataset, mechanism, config.seed, cache_dir(root) / "ldp")
    noisy = dataclasses.replace(noisy, ldp=ldp_details(config, mechanism, dataset, noisy))
    return with_ldp_test_inputs(config, dataset, noisy)


class DatasetCache:
    """Prepared data sets (:func:`prepare_dataset`), one per data spec and, for local DP, per
    seed (its noise is seeded by the run): the runs of one grid share a few."""

    def __init__(self, data_dir: str | Path | None) -> None:
        self.data_dir = data_dir
        self._cache: dict[str, Dataset] = {}

    def get(self, config: RunConfig) -> Dataset:
        key = repr(config.data) + (f"|seed={config.seed}" if config.data.ldp_mechanism else "")
        if key not in self._cache:
            self._cache[key] = prepare_dataset(config, self.data_dir)
        return self._cache[key]


def with_ldp_test_inputs(config: RunConfig, clean: Dataset, noisy: Dataset) -> Dataset:
    """``noisy`` (both splits privatised) carrying its test images both ways
    (``ldp_test_images``), with ``x_test`` the ones ``data.ldp_test_inputs`` names: the
    privatised ones (the default) or the clean originals (float32 in [0, 1]; recorded in
    ``extra["ldp_test_inputs"]``). The training images are the same either way."""
    import numpy as np

    from dpcore.data import as_float01

    originals = np.asarray(as_float01(clean.x_test), dtype=np.float32)
    images = {"clean": originals, "privatised": noisy.x_test}
    if config.data.ldp_test_inputs == "clean":
        extra = {**noisy.extra, "ldp_test_inputs": "clean (the original test images; the "
                                                   "training images are privatised)"}
        return dataclasses.replace(noisy, x_test=originals, extra=extra,
                                   ldp_test_images=images)
    return dataclasses.replace(noisy, ldp_test_images=images)


def ldp_details(config: RunConfig, mechanism: Any, clean: Dataset, noisy: Dataset
                ) -> LdpRecord:
    """``noisy.ldp`` completed with the epsilons of the mechanism at the run's delta (per
    pixel value, per image: the one that protects a patient's image, ...) and how visible the
    images still are: PSNR (dB) and SSIM of the privatised test images against the originals
    (seeded subset of at most 500)."""
    from dpcore.data import as_float01
    from dpcore.ldp.quality import image_quality
    from dpcore.ldp.record import LdpQuality

    assert noisy.ldp is not None  # privatize_dataset always attaches it
    delta = config.privacy.resolved_delta(len(clean.x_train))
    quality = image_quality(as_float01(clean.x_test), noisy.x_test, max_images=500, seed=0)
    return dataclasses.replace(
        noisy.ldp, epsilons=json_safe(mechanism.epsilons(clean.input_shape, delta)),
        quality=LdpQuality(psnr=float(quality["psnr_db"]), ssim=float(quality["ssim"]),
                           n_images=int(quality["n_images"])),
    )


def apply_data_factors(config: RunConfig, dataset: Dataset) -> Dataset:
    """The data set as ``factors.input_scaling`` and ``factors.eval_split`` ask.

    * ``standardised``: images become float32 ``(x/255 - mean) / std`` with the per-channel
      pixel mean and std of the *training* set (recorded in ``extra["input_scaling"]``; their
      release is not covered by epsilon, see :mod:`dpcore.recipes`);
    * ``eval_split=train``: the "test" arrays are the training arrays, so every reported
      metric is a training-set metric (``extra["eval_split"] = "train"``).

    Idempotent: a data set that carries those marks is returned unchanged, so a caller that
    evaluates the trained model afterwards (faithfulness, audit) can apply it too and see the
    inputs the model was trained on.

    Raises:
        ConfigError: ``standardised`` on a text data set (token ids have no pixel scale).
    """
    import dataclasses

    import numpy as np

    from dpcore.data import as_float01

    factors = config.factors
    scale_it = factors.input_scaling == "standardised" and "input_scaling" not in dataset.extra
    swap_it = factors.eval_split == "train" and "eval_split" not in dataset.extra
    if not (scale_it or swap_it):  # nothing asked, or already applied (idempotent)
        return dataset
    changes: dict[str, Any] = {}
    extra = dict(dataset.extra)
    if scale_it:
        if dataset.task != "image":
            raise ConfigError(f"factors.input_scaling='standardised' needs an image data set; "
                              f"{dataset.name!r} is {dataset.task}; valid: unit")
        train = as_float01(dataset.x_train)
        mean = train.mean(axis=(0, 1, 2), dtype=np.float64)
        std = np.maximum(train.std(axis=(0, 1, 2), dtype=np.float64), 1e-6)

        def scale(x: np.ndarray) -> np.ndarray:
            return ((as_float01(x) - mean) / std).astype(np.float32)

        changes.update(x_train=scale(dataset.x_train), x_test=scale(dataset.x_test))
        if dataset.x_val is not None:
            changes["x_val"] = scale(dataset.x_val)
        if dataset.ldp_test_images is not None:
            changes["ldp_test_images"] = {k: scale(v) for k, v in
                                          dataset.ldp_test_images.items()}
        extra["input_scaling"] = json.dumps({"mean": mean.tolist(), "std": std.tolist(),
                                             "computed_on": "training set"})
    if swap_it:  # the test images are the training ones: no second test evaluation
        changes.update(x_test=changes.get("x_train", dataset.x_train), y_test=dataset.y_train,
                       groups_test=dataset.groups_train, ldp_test_images=None)
        extra["eval_split"] = "train"
    return dataclasses.replace(dataset, extra=extra, **changes)


def factor_initial_weights(config: RunConfig, dataset: Dataset) -> Weights | None:
    """Initial weights that ``factors.init`` and ``model.pretrained`` ask for, or None for
    the backend's default (the neutral seeded initialisation, Keras' scheme).

    With ``model.pretrained`` the weights are the file's (:mod:`dpcore.pretrained`), the
    layers of ``model.pretrained_skip`` keeping the seeded initialisation of ``factors.init``.
    """
    if config.factors.init == "neutral" and config.model.pretrained is None:
        return None
    arch = architecture(config.model, dataset.input_shape, dataset.n_classes,
                        dataset.vocabulary_size)
    scheme = "keras" if config.factors.init == "neutral" else config.factors.init
    initial = init_weights(arch.weight_shapes(), config.seed, scheme=scheme)
    if config.model.pretrained is None:
        return initial
    from dpcore.pretrained import pretrained_weights

    return pretrained_weights(config.model.pretrained, arch, initial,
                              config.model.pretrained_skip)


_PLANS: dict[tuple[str, int, str], PrivacyPlan] = {}

#: Why a local-DP plan has no PLD epsilon.
LDP_PLD_NOTE = ("local DP: the event is releasing one privatised image (per-image level); "
                "epsilon_pld is not computed for it (dp_accounting's PLD takes tens of seconds "
                "at the large per-image epsilons of local DP); epsilon_rdp is the shared "
                "accountant's epsilon of that event")


def privacy_plan(config: RunConfig, n_train: int, ldp: LdpRecord | None = None
                 ) -> PrivacyPlan:
    """``plan_privacy(config, n_train)``, computed once per (config hash, N, LDP event) in a
    process.

    For a local-DP run given its data set's :class:`~dpcore.ldp.record.LdpRecord`, the plan
    carries the mechanism's per-image DpEvent (one ledger: the run's epsilon is computed from
    it by the shared accountant, see :data:`LDP_PLD_NOTE`) instead of a no-op event.

    Calibration and the PLD epsilon take seconds; the CLI (which prints the plan before
    training) and the trainer then share one computation. A PrivacyPlan is immutable.
    """
    event = ldp.dp_event if ldp is not None and privatises_images(config.privacy.mechanism) \
        else None
    key = (config.config_hash, int(n_train), repr(event))
    if key not in _PLANS:
        plan = plan_privacy(config, n_train)
        if event is not None:
            from dpcore.accounting import epsilon_rdp

            plan = dataclasses.replace(
                plan, event=event, epsilon_rdp=epsilon_rdp(event, plan.delta),
                epsilon_pld=None, accounting_note=f"{plan.accounting_note}; {LDP_PLD_NOTE}")
        _PLANS[key] = plan
    return _PLANS[key]


def library_epsilon_or_empty(
    compute: Callable[[PrivacyPlan], Mapping[str, float | None]], plan: PrivacyPlan,
) -> dict[str, float | None]:
    """The library's own epsilon for a mechanism the libraries account
    (:attr:`~dpcore.mechanisms.DpSgdMechanism.library_accountant`: Gaussian DP-SGD) with
    noise > 0, else ``{}``.

    Neither Opacus nor TF Privacy accounts Laplace DP-SGD, and a non-private or local-DP run
    has no training epsilon to cross-check.
    """
    if not get_mechanism(plan.mechanism).library_accountant or plan.noise_multiplier <= 0:
        return {}
    return dict(compute(plan))


def fit(
    config: RunConfig, dataset: Dataset, perf: PerfSpec, *, backend: str, model: Any,
    make_engine: Callable[[PrivacyPlan, StepMechanism], StepEngine],
    library_epsilon: Callable[[PrivacyPlan], Mapping[str, float | None]],
    progress: bool = True, callbacks: Sequence[EpochCallback] = (),
    perf_details: Mapping[str, Any] | None = None, front: FixedFront | None = None,
) -> TrainedModel:
    """Train ``model`` with a backend's engine and return the trained-model record.

    Args:
        config: the run's configuration.
        dataset: the data it trains on (privatised already for LDP; the config's data factors
            applied, :func:`train` does both).
        perf: performance switches (chunk size...).
        backend: ``tf`` or ``torch``.
        model: the framework model the engine trains (it holds the evaluation weights after).
        make_engine: builds the backend's step engine from the plan and mechanism.
        library_epsilon: the library's own accountant, called with the plan (Gaussian only).
        progress: tqdm bar per epoch (only on a terminal).
        callbacks: per-epoch callbacks (see :func:`dpcore.trainloop.run_training`).
        perf_details: backend facts to record in the result's ``perf`` entry.
        front: ``model`` split at the end of its fixed front end (:mod:`dpcore.frontcache`):
            the front is applied once to both splits and ``make_engine`` must build the
            engine on ``front.head``; the time it took is recorded in ``perf``. Without one,
            ``perf`` records ``fixed_front_not_cached_because`` when ``augment`` is why.
    """
    started = utc_now()
    plan = privacy_plan(config, len(dataset.x_train), dataset.ldp)
    details = dict(perf_details or {})
    inputs = None
    if front is not None:
        key = memo_key(backend, front_spec(config, dataset), dataset)
        inputs = cache_inputs(dataset, front, progress=progress, memo=(FEATURE_MEMO, key))
        details.update(inputs.record())
    elif (reason := front_not_cached_reason(config, perf, dataset)) is not None:
        details["fixed_front_not_cached_because"] = reason
    mechanism = step_mechanism(config, plan)
    class_weights = loss_class_weights(config.train.class_weights, dataset.y_train,
                                       dataset.n_classes)
    if class_weights is not None:  # train.class_weights (non-private runs only)
        mechanism = dataclasses.replace(mechanism, class_weights=class_weights)
        details["class_weights"] = list(class_weights)
    engine = make_engine(plan, framework_mechanism(config, mechanism))
    # privacy.noise_source shared: the noise of each step drawn here, once, for both backends
    shared = shared_noise_for(config, mechanism, {
        k: v.shape for k, v in engine.get_weights().items()}) if uses_shared_noise(
            config, mechanism) else None
    initial = engine.get_weights()
    canaries = run_gradient_canaries(config, dataset, {k: v.shape for k, v in initial.items()},
                                     plan.batches, config.privacy.sampling)
    try:
        outcome = run_training(config, dataset, perf, plan, engine, progress=progress,
                               callbacks=callbacks, inputs=inputs, canaries=canaries,
                               noise=shared)
    finally:  # also on divergence, a callback's exception or Ctrl-C
        engine.close()
    details.update(getattr(engine, "perf_record", dict)())  # e.g. the fast engines' routes
    del inputs  # the features can be large (MNIST, scatter: ~1 GB); the model needs none
    result = build_run_result(
        config, backend, dataset, plan, outcome, perf=perf,
        library_epsilon=library_epsilon_or_empty(library_epsilon, plan),
        started_at=started, perf_details=details, recipe=recipe_record(config, backend),
    )
    if canaries is not None:
        result.audit = {"one_run": gradient_audit_record(canaries, config, plan, initial,
                                                         outcome.weights)}
    return _trained_model(backend, model, config, dataset, perf, result, outcome.weights,
                          details)


def fit_library(
    config: RunConfig, dataset: Dataset, perf: PerfSpec, *, backend: str, model: Any,
    recipe: LibraryRecipe, callbacks: Sequence[EpochCallback] = (),
    perf_details: Mapping[str, Any] | None = None,
) -> TrainedModel:
    """Train with a library's own loop (``recipe: library``) and record it like any run.

    The noise multiplier comes from the shared plan (calibrated there if a target epsilon is
    given); the library then runs its own sampling and steps. The result records the shared
    accountant's epsilon of the config's plan (``epsilon_rdp``/``epsilon_pld``), the shared
    accountant's epsilon *of what ran* (``as_run``: the library's sampling rate and step
    count) and the library's own epsilon (``library_epsilon``, its accountant named).

    Args:
        recipe: the backend's way of training (:class:`~dpcore.trainloop.LibraryRecipe`);
            its runner is closed once training ends, however it ends.
        perf_details: what the result's ``perf`` records of the run.
    """
    from dpcore.accounting import dpsgd_event, epsilon_pld, epsilon_rdp

    started = utc_now()
    plan = privacy_plan(config, len(dataset.x_train))
    runner = recipe.make_runner(plan, dataset)
    initial = runner.get_weights()
    canaries = None
    try:
        spec = config.audit_canaries
        if spec.active and spec.kind == "gradient":  # white-box: the library's own clipping
            taker = canary_runner(runner, recipe.trainer)
            canaries = run_gradient_canaries(  # sampled as the library samples its batches
                config, dataset, {k: v.shape for k, v in initial.items()},
                dataclasses.replace(plan.batches, sampling_rate=runner.sampling_rate,
                                    steps_per_epoch=runner.steps_per_epoch), taker.sampling)
            taker.use_canaries(canaries)
        outcome = run_library_training(dataset, plan, runner, n_epochs=library_epochs(plan),
                                       callbacks=callbacks)
        own: dict[str, float | None] = {}
        as_run: dict[str, Any] = {"sampling_rate": runner.sampling_rate,
                                  "steps": outcome.steps_completed,
                                  "steps_per_epoch": runner.steps_per_epoch}
        if get_mechanism(plan.mechanism).library_accountant and plan.noise_multiplier > 0 and \
                outcome.steps_completed > 0:
            own = dict(runner.own_epsilon(plan, outcome.steps_completed))
            event = dpsgd_event(plan.mechanism, plan.noise_multiplier, runner.sampling_rate,
                                outcome.steps_completed)
            as_run.update(epsilon_rdp=epsilon_rdp(event, plan.delta),
                          epsilon_pld=epsilon_pld(event, plan.delta))
    finally:
        runner.close()
    result = build_run_result(
        config, backend, dataset, dataclass_replace_rate(plan, runner.sampling_rate),
        outcome, perf=perf, library_epsilon=own, started_at=started,
        perf_details=perf_details, recipe=recipe_record(config, backend, recipe.trainer),
    )
    result.privacy["as_run"] = json_safe(as_run)
    if canaries is not None:
        result.audit = {"one_run": gradient_audit_record(canaries, config, plan, initial,
                                                         outcome.weights)}
    return _trained_model(backend, model, config, dataset, perf, result, outcome.weights,
                          dict(perf_details or {}))


def _trained_model(backend: str, model: Any, config: RunConfig, dataset: Dataset,
                   perf: PerfSpec, result: Any, weights: Weights,
                   details: dict[str, Any]) -> TrainedModel:
    """The :class:`~dpcore.trained.TrainedModel` of a fitted run."""
    return TrainedModel(
        backend=backend, model=model, config=config, weights=weights,
        input_shape=dataset.input_shape, n_classes=dataset.n_classes, task=dataset.task,
        class_names=tuple(dataset.class_names), vocab_size=dataset.vocabulary_size,
        perf=perf, result=result, extra=details,
    )
