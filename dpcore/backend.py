"""The backend contract, typed, and the one place that maps a backend name to its code.

A backend (``tfpipe`` for ``tf``, ``torchpipe`` for ``torch``) is a package whose ``backend``
module satisfies :class:`Backend`. :func:`load_backend` imports it lazily with importlib, so
that importing :mod:`dpcore` never imports a framework; nothing else in the project maps a
backend name to a package. A run is assembled once, over this contract, by
:func:`dpcore.assembly.train`; a backend's ``train`` is that function bound to the backend.

The engine choice of ``perf.engine`` (:func:`choose_engine`) is framework-neutral and lives
here too: ``None`` means "the fast engine where the model supports it, else the reference
one, recorded"; an explicit ``"fast"`` is strict (a model layer without a rule is an error
naming it); ``"reference"`` is the library's documented per-example path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from dpcore.config.choices import ENGINES
from dpcore.errors import ConfigError, DpCompareError
from dpcore.results import BACKENDS

if TYPE_CHECKING:  # type-only: these modules import no framework either, but keep it light
    from dpcore.accounting import PrivacyPlan
    from dpcore.config import ModelSpec, PerfSpec, RunConfig
    from dpcore.data.dataset import Dataset
    from dpcore.epochlog import EpochCallback
    from dpcore.frontcache import FixedFront
    from dpcore.libraryloop import LibraryRecipe
    from dpcore.stepengine import StepEngine, StepMechanism
    from dpcore.trained import TrainedModel
    from dpcore.verify.steppers import LibraryStep

#: Backend name (one of :data:`dpcore.results.BACKENDS`, the names a result may hold) ->
#: package. The only mapping from a backend name to code in the project.
BACKEND_PACKAGES: dict[str, str] = {"tf": "tfpipe", "torch": "torchpipe"}

#: Engine names a backend offers (``perf.engine``): the fast layer-wise engine and the
#: library's reference per-example engine.
#: Declared once, as the values ``perf.engine`` accepts (:data:`dpcore.config.ENGINES`).
ENGINE_NAMES: tuple[str, ...] = ENGINES

#: Builds one step engine: ``(model, config, mechanism, perf) -> StepEngine``.
EngineFactory = Callable[[Any, "RunConfig", "StepMechanism", "PerfSpec"], "StepEngine"]


class Backend(Protocol):
    """What a backend package's ``backend`` module provides (modules satisfy protocols)."""

    #: The backend's name (``tf`` / ``torch``).
    NAME: str
    #: One factory per engine name of :data:`ENGINE_NAMES` (tests run every one).
    ENGINES: Mapping[str, EngineFactory]
    #: Whether several open step engines may drive one model, each setting the weights
    #: before its step: true where engines attach nothing to the model (``verify`` then
    #: builds one model for all its steppers), false where they attach what ``close``
    #: removes.
    ENGINES_SHARE_MODELS: bool
    #: From how many trained weights on ``dpcompare verify --processes auto`` checks the
    #: engines at the same time, each in a process of its own (None: never): worth it where
    #: building a step costs Python time that one process cannot spread over the cores (a
    #: traced step, a large model), not where a second process's import costs more.
    VERIFY_PARALLEL_MIN_WEIGHTS: int | None

    def train(self, config: RunConfig, dataset: Dataset, perf: PerfSpec | None = None, *,
              initial_weights: Mapping[str, np.ndarray] | None = None, progress: bool = True,
              callbacks: Sequence[EpochCallback] = ()) -> TrainedModel:
        """Train ``config.model`` on ``dataset``: :func:`dpcore.assembly.train` with this
        backend (:func:`dpcore.assembly.backend_train`; the contract is in
        :mod:`dpcore.assembly`)."""

    def configure(self, seed: int, perf: PerfSpec) -> None:
        """Seed the framework's generators with ``seed`` and apply ``perf``'s process-wide
        switches (deterministic kernels, threads), before anything of the run is built.

        Raises:
            ConfigError: a ``perf`` combination the framework cannot run.
        """

    def place_model(self, model: Any) -> dict[str, Any]:
        """Put a freshly built ``model`` where it trains (the GPU when one is visible) and
        return what the result's ``perf`` records of that place (``device``...)."""

    def describe(self, engine: str, config: RunConfig, perf: PerfSpec) -> dict[str, Any]:
        """What the result's ``perf`` records of a harmonised run on step engine ``engine``
        (``per_example_gradients`` and the library parts it uses) and of the runtime in
        effect after :meth:`configure` (memory layout, threads)."""

    def split_fixed_front(self, model: Any, names: Sequence[str]) -> FixedFront:
        """``model`` split after its leading layers ``names`` (see :mod:`dpcore.frontcache`).

        Raises:
            ConfigError: ``names`` are not the model's leading layers.
        """

    def library_recipe(self, model: Any, config: RunConfig, perf: PerfSpec) -> LibraryRecipe:
        """How ``recipe: library`` trains ``model`` the way the library's tutorials do."""

    def eval_mode(self, model: Any) -> None:
        """Put a trained ``model`` in the framework's inference mode (a no-op where the
        framework has none)."""

    def save_checkpoint(self, trained: TrainedModel, path: str | Path) -> Path:
        """Write the evaluation weights + metadata as one framework-neutral ``.npz``."""

    def load_checkpoint(self, path: str | Path) -> TrainedModel:
        """This backend's model rebuilt from a checkpoint written by either backend."""

    def build_model(self, spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int,
                    seed: int | None = None, *, vocab_size: int | None = None) -> Any:
        """This backend's model of ``spec`` (logits out; weights of ``seed`` when given)."""

    def get_weights(self, model: Any) -> dict[str, np.ndarray]:
        """The model's weights in the neutral layout (:mod:`dpcore.weights`)."""

    def set_weights(self, model: Any, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights into ``model`` (all or nothing)."""

    def predict_proba(self, model: Any, x: np.ndarray, batch_size: int = ...) -> np.ndarray:
        """Softmax probabilities [N, K] of ``x`` (raw images or token ids)."""

    def predict_logits(self, model: Any, x: np.ndarray, batch_size: int = ...) -> np.ndarray:
        """Logits [N, K] of ``x``, whose softmax is :meth:`predict_proba` (they keep the
        ranking of examples a saturated float32 softmax loses)."""

    def predict_outputs(self, model: Any, x: np.ndarray, batch_size: int = ...
                        ) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`predict_logits`, :meth:`predict_proba`) of ``x`` from one forward pass,
        each bit for bit what that method gives."""

    def gradcam(self, model: Any, x: np.ndarray, class_idx: Any = ..., **kwargs: Any
                ) -> np.ndarray:
        """Grad-CAM maps of ``x`` for ``class_idx`` (see the backend's ``explain``)."""

    def library_epsilon(self, plan: PrivacyPlan) -> dict[str, float | None]:
        """The library's own epsilon(s) of ``plan``."""

    def accountant_epsilons(self, noise_multiplier: float, sampling_rate: float, steps: int,
                            delta: float, *, n: int, batch_size: int, epochs: float
                            ) -> dict[str, float | None]:
        """The library's own epsilon(s) of one Gaussian DP-SGD setting as ``dpcompare
        epsilon`` shows them, keyed as in its output (``opacus_rdp``, ``opacus_prv``;
        ``tf_privacy``, ``tf_privacy_user``); None where a library cannot compute one."""

    def unsupported_fast_layers(self, model: Any) -> list[str]:
        """Trainable layers of ``model`` the fast engine has no rule for (empty: all)."""

    def library_step(self, config: RunConfig, dataset: Dataset, plan: PrivacyPlan,
                     perf: PerfSpec) -> LibraryStep:
        """The ``recipe: library`` step of ``config``, built as the library recipe builds it
        (noise multiplier from ``plan``), for ``dpcompare verify`` to step on batches it
        gives (:class:`dpcore.verify.steppers.LibraryStep`)."""


def load_backend(name: str) -> Backend:
    """The backend called ``name``, imported now (``<package>.backend``).

    Raises:
        DpCompareError: an unknown name (the message lists the valid ones).
    """
    if name not in BACKEND_PACKAGES:
        raise DpCompareError(f"backend {name!r} is not known; valid: {', '.join(BACKENDS)}")
    return cast(Backend, importlib.import_module(f"{BACKEND_PACKAGES[name]}.backend"))


@dataclass(frozen=True)
class EngineChoice:
    """The engine a run uses and why (recorded in the result's ``perf``).

    Attributes:
        engine: ``fast`` or ``reference``.
        fallback: why the fast engine was not used although it was the default, or None.
    """

    engine: str
    fallback: str | None = None

    def details(self) -> dict[str, str]:
        """The ``perf_details`` entries of this choice."""
        out = {"engine_used": self.engine}
        if self.fallback:
            out["fast_engine_fallback"] = self.fallback
        return out


def choose_engine(requested: str | None, unsupported: Sequence[str], microbatch_size: int
                  ) -> EngineChoice:
    """Which engine runs, for ``perf.engine = requested``.

    Args:
        requested: ``None`` (default: fast where supported), ``"fast"`` (strict) or
            ``"reference"``.
        unsupported: the model's layers the fast engine has no rule for (named).
        microbatch_size: ``factors.microbatch_size``; > 1 runs on the reference engine
            (the fast engines clip per example), recorded, whether asked for or not.

    Raises:
        ConfigError: ``requested == "fast"`` and the model has layers without a rule (one
            line naming them and saying what would work).
    """
    if requested not in (None, *ENGINE_NAMES):
        raise ConfigError(f"perf.engine={requested!r} is not known; valid: "
                          f"{', '.join(ENGINE_NAMES)} or null (fast where supported)")
    if requested == "reference":
        return EngineChoice("reference")
    if microbatch_size > 1:
        return EngineChoice("reference", "factors.microbatch_size > 1 (reference only)")
    if unsupported:
        if requested == "fast":
            raise ConfigError("--engine fast: the fast engine has no rule for layer "
                              + ", ".join(unsupported) + "; use --engine reference")
        return EngineChoice("reference", "unsupported layers: " + ", ".join(unsupported))
    return EngineChoice("fast")
