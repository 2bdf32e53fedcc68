"""The one assembly of a training run, written once over the backend contract
(:class:`dpcore.backend.Backend`): :func:`train`, which every backend's ``train`` is
(:func:`backend_train`).

The backend contract's ``train`` (``load_backend(name).train``)::

    train(config, dataset, perf=None, *, initial_weights=None, progress=True, callbacks=())
        -> TrainedModel

* ``config``: data, model, privacy, training settings and seed (:class:`RunConfig`);
* ``dataset``: images NHWC ``uint8`` or ``float32`` in [0, 1], or int token ids;
* ``perf``: performance switches (``physical_batch_size`` chunks, determinism, threads...),
  default :class:`PerfSpec`; they never change the result beyond float tolerance;
* ``initial_weights``: neutral-layout weights to start from; default
  :func:`dpcore.pipeline.factor_initial_weights`, else the seeded neutral initialisation of
  ``config.seed`` (identical in both frameworks); not used by ``recipe: library`` (the
  library's own initialisers);
* ``progress``: a tqdm bar per epoch, shown only when stderr is a terminal;
* ``callbacks``: called after each epoch with its history record; returning True stops;
* returns the trained model (holding the evaluation weights, EMA when configured; in the
  framework's inference mode) with its RunResult and the data set it was evaluated on; a run
  whose loss became NaN/inf has status ``diverged`` (no exception).

plus ``predict_proba(model, x)``, ``save_checkpoint(trained, path)`` and
``load_checkpoint(path)`` (one framework-neutral ``.npz`` format, see :mod:`dpcore.trained`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from dpcore.audit.canaries import InputCanaries
from dpcore.audit.plan import check_audit_inputs
from dpcore.backend import Backend, choose_engine, load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01
from dpcore.epochlog import EpochCallback
from dpcore.frontcache import front_to_cache
from dpcore.pipeline import apply_data_factors, factor_initial_weights, fit, fit_library
from dpcore.privacy_checks import check_dp_model
from dpcore.recipes import check_backend_recipe
from dpcore.trained import TrainedModel


class TrainFunction(Protocol):
    """The backend contract's ``train`` (see this module's docstring)."""

    def __call__(self, config: RunConfig, dataset: Dataset, perf: PerfSpec | None = None, *,
                 initial_weights: Mapping[str, np.ndarray] | None = None,
                 progress: bool = True, callbacks: Sequence[EpochCallback] = ()
                 ) -> TrainedModel: ...


def backend_train(name: str) -> TrainFunction:
    """The backend contract's ``train`` of backend ``name``: :func:`train` over
    :func:`dpcore.backend.load_backend` ``(name)`` (loaded when it is called)."""

    def train_on_backend(config: RunConfig, dataset: Dataset, perf: PerfSpec | None = None, *,
                         initial_weights: Mapping[str, np.ndarray] | None = None,
                         progress: bool = True, callbacks: Sequence[EpochCallback] = ()
                         ) -> TrainedModel:
        return train(load_backend(name), config, dataset, perf,
                     initial_weights=initial_weights, progress=progress, callbacks=callbacks)

    train_on_backend.__doc__ = (
        f"Train ``config.model`` on ``dataset`` with the {name!r} backend "
        "(:func:`dpcore.assembly.train`; arguments and result: the backend contract of "
        ":mod:`dpcore.assembly`).")
    return train_on_backend


def train(
    backend: Backend, config: RunConfig, dataset: Dataset, perf: PerfSpec | None = None, *,
    initial_weights: Mapping[str, np.ndarray] | None = None, progress: bool = True,
    callbacks: Sequence[EpochCallback] = (),
) -> TrainedModel:
    """Train ``config.model`` on ``dataset`` with ``backend``, as ``config`` asks.

    The one assembly of a run, in this order: what the backend's library recipe cannot run is
    refused (:func:`dpcore.recipes.check_backend_recipe`); the backend is configured for the
    seed and ``perf``; the data factors are applied
    (:func:`dpcore.pipeline.apply_data_factors`) and the
    audit's inputs checked (:func:`dpcore.audit.plan.check_audit_inputs`), its input canaries
    (``audit_canaries.kind: input``) appended to the training split; the model is built and,
    for DP-SGD, refused if the accountant cannot cover it
    (:func:`dpcore.privacy_checks.check_dp_model`: nothing trained, no privacy spent); then
    the recipe trains it (:func:`dpcore.pipeline.fit` with the engine of
    :func:`dpcore.backend.choose_engine` and the fixed front end of
    :func:`dpcore.frontcache.front_to_cache`, or :func:`dpcore.pipeline.fit_library`), the
    model is put in inference mode and the input canaries are scored
    (``result.audit["one_run"]``).

    Arguments and result: the backend contract (this module's docstring); the returned
    model's ``dataset`` is the data set it was evaluated on (factors applied, canaries not
    appended).

    Raises:
        ConfigError: a setting the backend or the data cannot run (one line, naming it).
        PrivacyError: a DP-SGD model the accountant cannot cover.
    """
    check_backend_recipe(config, backend.NAME)
    perf = perf or PerfSpec()
    backend.configure(config.seed, perf)
    dataset = apply_data_factors(config, dataset)
    check_audit_inputs(config, dataset)
    canaries = (InputCanaries.for_dataset(config.audit_canaries, config.seed, dataset)
                if config.audit_canaries.active and config.audit_canaries.kind == "input"
                else None)
    train_set = dataset if canaries is None else canaries.training_set(dataset)
    library = config.recipe == "library"
    model = backend.build_model(config.model, dataset.input_shape, dataset.n_classes,
                                seed=None if library else config.seed,
                                vocab_size=dataset.vocabulary_size)
    if config.privacy.is_dpsgd:  # refuse before any privacy is spent (and before Opacus wraps)
        check_dp_model(model, model_name=f"model {config.model.name!r}")
    if library:
        trained = _train_library(backend, model, config, train_set, perf, callbacks)
    else:
        trained = _train_harmonised(backend, model, config, train_set, perf, initial_weights,
                                    progress, callbacks)
    backend.eval_mode(trained.model)
    if canaries is not None and trained.result is not None:
        proba = backend.predict_proba(trained.model, as_float01(canaries.images(dataset)))
        trained.result.audit = {"one_run": canaries.audit(
            config.audit_canaries, proba, float(trained.result.privacy["delta"])).to_dict()}
    trained.dataset = dataset
    return trained


def _train_harmonised(
    backend: Backend, model: Any, config: RunConfig, dataset: Dataset, perf: PerfSpec,
    initial_weights: Mapping[str, np.ndarray] | None, progress: bool,
    callbacks: Sequence[EpochCallback],
) -> TrainedModel:
    """The harmonised recipe on ``model``: initial weights, device, engine, front end, fit."""
    if initial_weights is None:
        initial_weights = factor_initial_weights(config, dataset)
    if initial_weights is not None:
        backend.set_weights(model, initial_weights)
    device = backend.place_model(model)
    unsupported = (backend.unsupported_fast_layers(model)
                   if perf.engine != "reference" and config.privacy.is_dpsgd else [])
    choice = choose_engine(perf.engine, unsupported, config.factors.microbatch_size)
    build_engine = backend.ENGINES[choice.engine]
    details = {**backend.describe(choice.engine, config, perf), **choice.details(), **device}
    names = front_to_cache(config, perf, dataset)
    front = backend.split_fixed_front(model, names) if names else None
    trained_model = model if front is None else front.head  # shares the model's weights
    return fit(
        config, dataset, perf, backend=backend.NAME, model=model,
        make_engine=lambda plan, mechanism: build_engine(trained_model, config, mechanism, perf),
        library_epsilon=backend.library_epsilon, progress=progress, callbacks=callbacks,
        perf_details=details, front=front,
    )


def _train_library(backend: Backend, model: Any, config: RunConfig, dataset: Dataset,
                   perf: PerfSpec, callbacks: Sequence[EpochCallback]) -> TrainedModel:
    """``recipe: library`` on ``model`` (built with the framework's default initialisers):
    the backend's :class:`~dpcore.libraryloop.LibraryRecipe` through
    :func:`dpcore.pipeline.fit_library`."""
    device = backend.place_model(model)
    recipe = backend.library_recipe(model, config, perf)
    return fit_library(config, dataset, perf, backend=backend.NAME, model=model, recipe=recipe,
                       callbacks=callbacks,
                       perf_details={"engine_used": "library", **recipe.details, **device})
