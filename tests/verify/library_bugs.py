"""The catalogue's ``skip-clip`` and ``noise-once-per-run`` placed in the libraries' own
code, not the bench's backends: TF Privacy's ``GaussianSumQuery`` and Opacus's ``DPOptimizer``
(patches applied with pytest's ``MonkeyPatch``). Under ``--recipe library`` the gradient
canaries go through these very classes, so the audit that flags them is white-box on the
libraries themselves. :data:`LIBRARY_BUGS` maps (catalogue bug name, backend) to the patch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def _tf_privacy_no_clip(mp: pytest.MonkeyPatch) -> None:
    """TF Privacy's ``GaussianSumQuery.preprocess_record`` returns the record unclipped."""
    from tensorflow_privacy.privacy.dp_query.gaussian_query import GaussianSumQuery

    mp.setattr(GaussianSumQuery, "preprocess_record", lambda self, params, record: record)


def _tf_privacy_fixed_noise(mp: pytest.MonkeyPatch) -> None:
    """TF Privacy's ``GaussianSumQuery.get_noised_result`` draws from a stateless generator
    of a fixed seed: the same noise at every (physical) step."""
    import dp_accounting
    import tensorflow as tf
    from tensorflow_privacy.privacy.dp_query.gaussian_query import GaussianSumQuery

    def get_noised_result(self: Any, sample_state: Any, global_state: Any) -> Any:
        flat = tf.nest.flatten(sample_state)
        noised = [v + tf.random.stateless_normal(tf.shape(v), seed=[7, i],
                                                 stddev=global_state.stddev, dtype=v.dtype)
                  for i, v in enumerate(flat)]
        event = dp_accounting.GaussianDpEvent(global_state.stddev / global_state.l2_norm_clip)
        return tf.nest.pack_sequence_as(sample_state, noised), global_state, event
    mp.setattr(GaussianSumQuery, "get_noised_result", get_noised_result)


def _opacus_no_clip(mp: pytest.MonkeyPatch) -> None:
    """Opacus's ``DPOptimizer.clip_and_accumulate`` clips at an infinite norm (factors 1)."""
    from opacus.optimizers.optimizer import DPOptimizer

    orig = DPOptimizer.clip_and_accumulate

    def clip_and_accumulate(self: Any) -> None:
        saved, self.max_grad_norm = self.max_grad_norm, 1e30
        try:
            orig(self)
        finally:
            self.max_grad_norm = saved
    mp.setattr(DPOptimizer, "clip_and_accumulate", clip_and_accumulate)


def _opacus_fixed_noise(mp: pytest.MonkeyPatch) -> None:
    """Opacus's ``DPOptimizer.add_noise`` with its generator reset to its first state before
    every draw: the same noise at every step."""
    from opacus.optimizers.optimizer import DPOptimizer

    orig = DPOptimizer.add_noise

    def add_noise(self: Any) -> None:
        if not hasattr(self, "_bug_state"):
            self._bug_state = self.generator.get_state()
        self.generator.set_state(self._bug_state)
        orig(self)
    mp.setattr(DPOptimizer, "add_noise", add_noise)


#: (bug, backend) -> the patch of the library's own code.
LIBRARY_BUGS: dict[tuple[str, str], Callable[[pytest.MonkeyPatch], None]] = {
    ("skip-clip", "tf"): _tf_privacy_no_clip, ("skip-clip", "torch"): _opacus_no_clip,
    ("noise-once-per-run", "tf"): _tf_privacy_fixed_noise,
    ("noise-once-per-run", "torch"): _opacus_fixed_noise}
