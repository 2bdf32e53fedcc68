"""A run's gradient canaries and their audit record, for either recipe's loop
(:func:`dpcore.pipeline.fit` and :func:`dpcore.pipeline.fit_library`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcore.architectures import architecture
from dpcore.audit.canaries import GradientCanaries
from dpcore.mechanisms import get_mechanism

if TYPE_CHECKING:
    from dpcore.accounting import PrivacyPlan
    from dpcore.config import RunConfig
    from dpcore.data.dataset import Dataset
    from dpcore.sampling import BatchPlan


def run_gradient_canaries(config: RunConfig, dataset: Dataset,
                          shapes: Mapping[str, tuple[int, ...]], batches: BatchPlan,
                          sampling: str) -> GradientCanaries | None:
    """The gradient canaries of ``config``'s run (None unless ``audit_canaries`` asks for
    gradient canaries): over the weights ``shapes`` the step trains (those of layers in
    ``model.freeze`` left out) of the config's model on ``dataset``, sampled as the run's
    batches ``batches`` are (``sampling``: ``poisson`` or ``shuffle``), of norm 100 C in the
    mechanism's clip norm."""
    spec = config.audit_canaries
    if not (spec.active and spec.kind == "gradient"):
        return None
    arch = architecture(config.model, dataset.input_shape, dataset.n_classes,
                        dataset.vocabulary_size)
    frozen = set(config.model.freeze)  # no gradient there: no canary either
    shapes = {k: v for k, v in shapes.items() if k.rsplit(".", 1)[0] not in frozen}
    sampler = get_mechanism(config.privacy.mechanism).sampler
    kind = "l2" if sampler is None else str(sampler.clip_norm)
    return GradientCanaries.for_run(spec, config.seed, shapes, arch, batches, sampling,
                                    config.privacy.max_grad_norm, kind)


def gradient_audit_record(canaries: GradientCanaries, config: RunConfig, plan: PrivacyPlan,
                          initial: Mapping[str, np.ndarray], final: Mapping[str, np.ndarray]
                          ) -> dict[str, Any]:
    """The ``one_run`` entry of a gradient-canary run: the one-run bound of the final
    weights and, under ``per_step``, the per-step audit of the engine's reports against the
    configured noise (sigma C of the plan; None with fewer than three reported steps)."""
    one_run = canaries.audit(config.audit_canaries, initial, final, plan.delta).to_dict()
    sampler = get_mechanism(config.privacy.mechanism).sampler
    scale = plan.noise_multiplier * config.privacy.max_grad_norm
    per_step = (canaries.trace.audit(sampler.name, scale)
                if sampler is not None and scale > 0 else None)
    one_run["per_step"] = None if per_step is None else per_step.to_dict()
    return one_run
