"""A catalogue of DP-SGD implementation bugs, each a patch of a backend's own code (a method
or function of ``tfpipe`` / ``torchpipe``; never ``factors.fault``, which dpcore applies).

Every :class:`Bug` says what it breaks, where real bugs of its kind sat (cited), which checks
of ``dpcompare verify`` must catch it, the configuration that exercises its code path, and one
patch per (backend, step) where that code path exists; a step without it carries the reason.
``Bug.applied(backend, step)`` is a context manager that installs the patch (with pytest's
``MonkeyPatch``, undone on exit), so any test can run any check (``verify``, a later audit)
against the catalogue: :data:`BUGS` is the registry, :func:`cases` its (bug, backend, step)
triples.

Steps: ``fast`` and ``reference`` (the harmonised engines), ``library`` (the library recipe's
own step on that backend). The patches touch the Gaussian sampler's code (the configurations
here are Gaussian DP-SGD); the Laplace sampler has the same structure.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

#: Steps a bug may sit in.
STEPS = ("fast", "reference", "library")
BACKENDS = ("tf", "torch")

#: A patch: installs the bug with the given MonkeyPatch.
Patch = Callable[[pytest.MonkeyPatch], None]

#: Steps between two noise draws of the "once per epoch" bug (an epoch of the test configs'
#: Poisson batches on digits is 22 steps; verify's noise test takes 8 steps from one start).
EPOCH_STEPS = 22
#: Clip norm the "default clip norm" bug clips at (Opacus's default ``max_grad_norm``).
DEFAULT_CLIP = 1.0
#: Clip norm standing for "no clipping" (every clip factor is then exactly 1).
NO_CLIP = 1e30
#: Microbatch size of the microbatch bug's configuration.
MICROBATCH = 4


@dataclass(frozen=True)
class Bug:
    """One implementation bug.

    Attributes:
        name: short name.
        breaks: what it breaks, in words.
        where: where bugs of this kind sat in real code (cited).
        caught_by: the verify checks that must fail when it is installed (at least one).
        patches: (backend, step) -> the patch, where the code path exists.
        skips: (backend, step) -> why the code path does not exist there.
        settings: ``--set`` style overrides of the configuration that exercises it.
        perf: PerfSpec fields it needs (e.g. TF Privacy's gradient accumulation).
    """

    name: str
    breaks: str
    where: str
    caught_by: tuple[str, ...]
    patches: Mapping[tuple[str, str], Patch]
    skips: Mapping[tuple[str, str], str] = field(default_factory=dict)
    settings: tuple[str, ...] = ()
    perf: Mapping[str, Any] = field(default_factory=dict)

    @contextmanager
    def applied(self, backend: str, step: str) -> Iterator[None]:
        """The bug installed in ``backend``'s ``step`` for the duration of the block."""
        patch = self.patches[(backend, step)]
        with pytest.MonkeyPatch.context() as mp:
            patch(mp)
            yield

    def skip_reason(self, backend: str, step: str) -> str | None:
        """Why the bug's code path does not exist on that step (None: it does)."""
        if (backend, step) in self.patches:
            return None
        return self.skips.get((backend, step), "no patch of this step")


# -- shared pieces ---------------------------------------------------------------------------
def _fast_sum(backend: str, transform: Callable[[Callable[[Any], Any], Any], Any]) -> Patch:
    """Patch the fast engine's ``clip_records`` (``tfpipe.fast`` / ``torchpipe.fast``: where
    each layer's input and output gradient become norms and the chunk's clipped sum) with
    ``transform(clipped, clip)``: ``clipped(c)`` is the true clipped sum at clip norm ``c``,
    ``clip`` the configured one."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        fast = importlib.import_module(f"{backend}pipe.fast")
        orig = fast.clip_records

        def clip_records(records: Any, variables: Any, clip: Any, kind: str,
                         routes: Any = None, weights: Any = None) -> Any:
            return transform(lambda c: orig(records, variables, c, kind, routes, weights), clip)
        mp.setattr(fast, "clip_records", clip_records)
    return patch


def _torch_clip_with(max_grad_norm: float) -> Patch:
    """Opacus's ``clip_and_accumulate`` of the reference engine run at another clip norm
    (the noise keeps the configured one)."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        from torchpipe.dp import SharedStepDPOptimizer

        orig = SharedStepDPOptimizer.clip_and_accumulate

        def clip_and_accumulate(self: Any) -> None:
            saved, self.max_grad_norm = self.max_grad_norm, max_grad_norm
            try:
                orig(self)
            finally:
                self.max_grad_norm = saved
        mp.setattr(SharedStepDPOptimizer, "clip_and_accumulate", clip_and_accumulate)
    return patch


def _torch_increment(change: Callable[[Any, list[Any]], list[Any]]) -> Patch:
    """Opacus's ``clip_and_accumulate`` of the reference engine, its increment of
    ``summed_grad`` (one chunk's clipped sum) rewritten by ``change(optimizer, increments)``.
    """
    def patch(mp: pytest.MonkeyPatch) -> None:
        from torchpipe.dp import SharedStepDPOptimizer

        orig = SharedStepDPOptimizer.clip_and_accumulate

        def clip_and_accumulate(self: Any) -> None:
            before = [None if p.summed_grad is None else p.summed_grad.clone()
                      for p in self.params]
            orig(self)
            increments = [p.summed_grad - (0 if b is None else b)
                          for p, b in zip(self.params, before, strict=True)]
            for p, b, inc in zip(self.params, before, change(self, increments), strict=True):
                p.summed_grad = inc if b is None else b + inc
        mp.setattr(SharedStepDPOptimizer, "clip_and_accumulate", clip_and_accumulate)
    return patch


def _clip_whole(parts: list[Any], clip: float, module: Any) -> list[Any]:
    """``parts`` scaled by ``min(1, clip / ||parts||)`` (the flat L2 norm), in the framework
    of ``module`` (``tf`` or ``torch``)."""
    if module.__name__ == "tensorflow":
        norm = module.sqrt(module.add_n([module.reduce_sum(module.square(p)) for p in parts]))
        factor = module.minimum(1.0, clip / (norm + 1e-12))
        return [p * factor for p in parts]
    norm = module.sqrt(sum((p * p).sum() for p in parts))
    factor = (clip / (norm + 1e-6)).clamp(max=1.0)
    return [p * factor for p in parts]


def _tf_noise(noise_of: Callable[[Any, list[Any], Any], list[Any]]) -> Patch:
    """``SeededGaussianSumQuery.get_noised_result`` with the noise of each tensor given by
    ``noise_of(query, tensors, global_state)`` (both TF engines use it)."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        import dp_accounting
        import tensorflow as tf

        from tfpipe.dp import SeededGaussianSumQuery

        def get_noised_result(self: Any, sample_state: Any, global_state: Any) -> Any:
            flat = tf.nest.flatten(sample_state)
            noised = [v + tf.cast(n, v.dtype)
                      for v, n in zip(flat, noise_of(self, flat, global_state), strict=True)]
            event = dp_accounting.GaussianDpEvent(self._stddev / self._l2_norm_clip)
            return tf.nest.pack_sequence_as(sample_state, noised), global_state, event
        mp.setattr(SeededGaussianSumQuery, "get_noised_result", get_noised_result)
    return patch


def _tf_own_noise(keep: Callable[[int, int, Any], bool]) -> Patch:
    """The query's own noise, added only to tensors where ``keep(index, count, tensor)``."""
    def noise_of(query: Any, flat: list[Any], state: Any) -> list[Any]:
        import tensorflow as tf

        return [query._generator.normal(tf.shape(v), stddev=state.stddev)
                if keep(i, len(flat), v) else tf.zeros_like(v) for i, v in enumerate(flat)]
    return _tf_noise(noise_of)


def _torch_noise(after: Callable[[Any], None] | None = None,
                 before: Callable[[Any], None] | None = None) -> Patch:
    """``SharedStepDPOptimizer.noise_sum`` (Opacus's ``add_noise``, both torch engines) with
    ``before(optimizer)`` run before it and ``after(optimizer)`` after it."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        from torchpipe.dp import SharedStepDPOptimizer

        orig = SharedStepDPOptimizer.noise_sum

        def noise_sum(self: Any) -> None:
            if before is not None:
                before(self)
            orig(self)
            if after is not None:
                after(self)
        mp.setattr(SharedStepDPOptimizer, "noise_sum", noise_sum)
    return patch


def _torch_unnoised(select: Callable[[int, int, Any], bool]) -> Callable[[Any], None]:
    """After the noise: the selected parameters get their clipped sum without noise."""
    def after(optimizer: Any) -> None:
        params = list(optimizer.params)
        for i, p in enumerate(params):
            if select(i, len(params), p):
                p.grad = p.summed_grad.view_as(p).clone()
    return after


def _engine_train_step(backend: str, engine: str,
                       wrap: Callable[[Callable[..., float]], Callable[..., float]]) -> Patch:
    """Patch the ``train_step`` of one engine class with ``wrap(orig)``."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        from tfpipe.engine import TfStepEngine
        from torchpipe.engine import TorchStepEngine
        from torchpipe.fast import FastTorchStepEngine

        owner: type = (TfStepEngine if backend == "tf" else
                       FastTorchStepEngine if engine == "fast" else TorchStepEngine)
        mp.setattr(owner, "train_step", wrap(owner.train_step))
    return patch


HARMONISED = [(b, e) for b in BACKENDS for e in ("fast", "reference")]
LIBRARY_CODE = ("the library recipe's {what} is the library's own code ({lib}), not the "
                "backend's")
NOT_LIBRARY = {("tf", "library"): LIBRARY_CODE.format(what="{what}", lib="TF Privacy"),
               ("torch", "library"): LIBRARY_CODE.format(what="{what}", lib="Opacus")}


def _library_skips(what: str) -> dict[tuple[str, str], str]:
    return {key: text.format(what=what) for key, text in NOT_LIBRARY.items()}


# -- the bugs --------------------------------------------------------------------------------
def _tf_reference_no_clip(mp: pytest.MonkeyPatch) -> None:
    from tfpipe.dp import SeededGaussianSumQuery

    mp.setattr(SeededGaussianSumQuery, "preprocess_batch", lambda self, params, records:
               list(records))


SKIP_CLIP = Bug(
    name="skip-clip",
    breaks="the step clips nothing: every example's clip factor is 1 (the fast engines: the "
           "layer-wise clipped sum computed at an infinite clip norm; the reference engines: "
           "TF Privacy's query preprocessing / Opacus's clip_and_accumulate skipped)",
    where="tensorflow/privacy#72 (the DP optimizer ran as a plain one under TF 2 Keras: no "
          "clipping, no noise, silently); meta-pytorch/opacus#664 (fast gradient clipping did "
          "not use max_grad_norm); a fast engine that clips nothing passed the one-run audit "
          "when canaries were added after the backend's clipping",
    caught_by=("sensitivity", "divisor"),
    patches={("tf", "reference"): _tf_reference_no_clip,
             ("tf", "fast"): _fast_sum("tf", lambda clipped, clip: clipped(NO_CLIP)),
             ("torch", "reference"): _torch_clip_with(NO_CLIP),
             ("torch", "fast"): _fast_sum("torch", lambda clipped, clip: clipped(NO_CLIP))},
    skips=_library_skips("clipping"),
)


def _tf_reference_clip_sum(mp: pytest.MonkeyPatch) -> None:
    import tensorflow as tf

    from tfpipe.dp import ChunkedDPSGDOptimizer

    def accumulate_chunk(self: Any, sample_state: Any, records: Any) -> Any:
        query = self._dp_sum_query
        params = query.derive_sample_params(self._global_state)
        summed = [tf.reduce_sum(r, axis=0, keepdims=True) for r in records]
        clipped = query.preprocess_batch(params, summed)
        return list(query.accumulate_preprocessed_record(sample_state, [c[0] for c in clipped]))
    mp.setattr(ChunkedDPSGDOptimizer, "accumulate_chunk", accumulate_chunk)


def _tf_fast_clip_sum(clipped: Callable[[Any], Any], clip: Any) -> Any:
    import tensorflow as tf

    return _clip_whole(clipped(NO_CLIP), float(clip), tf)


def _torch_fast_clip_sum(clipped: Callable[[Any], Any], clip: Any) -> Any:
    import torch

    return _clip_whole(clipped(NO_CLIP), float(clip), torch)


def _torch_clip_sum(mp: pytest.MonkeyPatch) -> None:
    import torch

    _torch_clip_with(NO_CLIP)(mp)  # per-example factors 1, then the chunk's sum clipped
    _torch_increment(lambda opt, inc: _clip_whole(inc, float(opt.max_grad_norm), torch))(mp)


CLIP_AFTER_SUM = Bug(
    name="clip-after-sum",
    breaks="the clip factor applied after summing: each physical chunk's summed gradient is "
           "clipped to C as one unit, instead of each example's gradient",
    where="tensorflow/privacy#171 and #287 (num_microbatches=1, the documented workaround "
          "for a batch not divisible by it, clips the whole batch's gradient as one record); "
          "tensorflow/privacy#153 (num_microbatches=1: noise on the average, not the sum)",
    caught_by=("divisor",),
    patches={("tf", "reference"): _tf_reference_clip_sum,
             ("tf", "fast"): _fast_sum("tf", _tf_fast_clip_sum),
             ("torch", "reference"): _torch_clip_sum,
             ("torch", "fast"): _fast_sum("torch", _torch_fast_clip_sum)},
    skips=_library_skips("clipping"),
)


def _tf_fixed_noise(epoch_steps: int | None) -> Patch:
    """Noise from a stateless generator of a fixed seed: the same draw every step
    (``epoch_steps`` None) or every ``epoch_steps`` steps a new one."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        import tensorflow as tf

        from tfpipe.dp import SeededGaussianSumQuery

        orig_init = SeededGaussianSumQuery.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            orig_init(self, *args, **kwargs)
            self._bug_calls = tf.Variable(0, dtype=tf.int64, trainable=False)
        mp.setattr(SeededGaussianSumQuery, "__init__", init)

        def noise_of(query: Any, flat: list[Any], state: Any) -> list[Any]:
            draw = tf.constant(0, tf.int64)
            if epoch_steps is not None:
                draw = query._bug_calls // epoch_steps
                query._bug_calls.assign_add(1)
            return [tf.random.stateless_normal(tf.shape(v), seed=tf.stack(
                [tf.constant(7 + i, tf.int64), draw]), stddev=state.stddev)
                for i, v in enumerate(flat)]
        _tf_noise(noise_of)(mp)
    return patch


def _torch_fixed_noise(epoch_steps: int | None) -> Patch:
    """The noise generator reset to its first state before every draw (``epoch_steps``
    None), or advanced only once every ``epoch_steps`` steps."""
    def before(optimizer: Any) -> None:
        calls = getattr(optimizer, "_bug_calls", 0)
        if calls == 0 or (epoch_steps is not None and calls % epoch_steps == 0):
            optimizer._bug_state = optimizer.generator.get_state()
        else:
            optimizer.generator.set_state(optimizer._bug_state)
        optimizer._bug_calls = calls + 1
    return _torch_noise(before=before)


NOISE_ONCE_PER_RUN = Bug(
    name="noise-once-per-run",
    breaks="one noise vector drawn once and reused at every step (the generator is re-seeded "
           "with the same seed before every draw)",
    where="one noise vector reused at every step passed the one-run audit that scores the "
          "final weights only; a noise generator re-created from the same seed at every step "
          "(Opacus's DPOptimizer and TF Privacy's query keep one generator for the whole run "
          "for this reason)",
    caught_by=("noise-fresh",),
    patches={(b, e): (_tf_fixed_noise(None) if b == "tf" else _torch_fixed_noise(None))
             for b, e in HARMONISED},
    skips=_library_skips("noise generator"),
)

NOISE_ONCE_PER_EPOCH = Bug(
    name="noise-once-per-epoch",
    breaks=f"the noise redrawn only once per epoch ({EPOCH_STEPS} steps): every step of an "
           "epoch adds the same vector",
    where="noise cached outside the step (a noise vector drawn per epoch with the data "
          "loader's shuffle, a common hand-written DP-SGD mistake); same class as "
          "noise-once-per-run",
    caught_by=("noise-fresh",),
    patches={(b, e): (_tf_fixed_noise(EPOCH_STEPS) if b == "tf"
                      else _torch_fixed_noise(EPOCH_STEPS)) for b, e in HARMONISED},
    skips=_library_skips("noise generator"),
)


def _is_bias(index: int, count: int, tensor: Any) -> bool:
    return len(tensor.shape) <= 1


def _is_last_layer(index: int, count: int, tensor: Any) -> bool:
    return index >= count - 2


NOISE_SKIP_BIASES = Bug(
    name="noise-skip-biases",
    breaks="noise on only some parameters: the biases (and GroupNorm's 1-D parameters) get "
           "their clipped sum without noise",
    where="meta-pytorch/opacus#436 and #542 (parameters handled per layer, frozen/learnable "
          "mixes left out of Opacus's per-sample machinery); per-parameter noise loops that "
          "skip parameters (meta-pytorch/opacus#615: noise on some layers only)",
    caught_by=("noise-scale", "noise-coordinates", "accounting-sigma"),
    patches={(b, e): (_tf_own_noise(lambda i, n, v: not _is_bias(i, n, v)) if b == "tf"
                      else _torch_noise(after=_torch_unnoised(_is_bias)))
             for b, e in HARMONISED},
    skips=_library_skips("noise"),
)

NOISE_SKIP_LAST_LAYER = Bug(
    name="noise-skip-last-layer",
    breaks="noise on only some parameters: the last layer (its kernel and bias, the last two "
           "parameter tensors) gets its clipped sum without noise",
    where="meta-pytorch/opacus#615 (DP applied to some layers only, the rest trained by a "
          "non-private optimizer)",
    caught_by=("noise-scale", "noise-coordinates"),
    patches={(b, e): (_tf_own_noise(lambda i, n, v: not _is_last_layer(i, n, v)) if b == "tf"
                      else _torch_noise(after=_torch_unnoised(_is_last_layer)))
             for b, e in HARMONISED},
    skips=_library_skips("noise"),
)


def _actual_size(orig: Callable[..., float]) -> Callable[..., float]:
    def train_step(self: Any, chunks: Any, divisor: float | None = None,
                   extra: Any = None, **rest: Any) -> float:
        if divisor is None:
            divisor = float(max(1, sum(len(c[1]) for c in chunks)))
        return orig(self, chunks, divisor, extra, **rest)
    return train_step


def _opacus_actual_size(mp: pytest.MonkeyPatch) -> None:
    from torchpipe.library import OpacusRunner

    orig = OpacusRunner.train_batch

    def train_batch(self: Any, x: Any, y: Any) -> float:
        self.optimizer.expected_batch_size = max(1, len(y))
        return orig(self, x, y)
    mp.setattr(OpacusRunner, "train_batch", train_batch)


ACTUAL_DIVISOR = Bug(
    name="actual-divisor",
    breaks="the noised sum divided by the batch's actual size under Poisson sampling (a "
           "divisor that depends on who is in the batch)",
    where="meta-pytorch/opacus#420 (a user asks Opacus to divide by the actual batch size), "
          "meta-pytorch/opacus#571 and #819 (Opacus's data-dependent normalisation leaks "
          "membership at small N)",
    caught_by=("divisor",),
    patches={**{(b, e): _engine_train_step(b, e, _actual_size) for b, e in HARMONISED},
             ("torch", "library"): _opacus_actual_size},
    skips={("tf", "library"): "TF Privacy's recipe takes fixed-size batches only: the actual "
                              "size is B"},
)


def _opacus_half_rate(mp: pytest.MonkeyPatch) -> None:
    from torchpipe.library import OpacusRunner

    orig = OpacusRunner.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        self.sampling_rate = self.sampling_rate / 2
    mp.setattr(OpacusRunner, "__init__", init)


def _keras_physical_rate(mp: pytest.MonkeyPatch) -> None:
    from tfpipe.library import KerasFitRunner

    orig = KerasFitRunner.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        self.sampling_rate = self.sampling_rate / self.accumulation
    mp.setattr(KerasFitRunner, "__init__", init)


ACCOUNTANT_RATE = Bug(
    name="accountant-rate",
    breaks="the accountant given another sampling rate than the sampler uses (Opacus: half "
           "the rate its Poisson loader samples at; TF Privacy: the rate of one physical batch "
           "of the gradient accumulation, B / k / N, not the logical batch's B / N)",
    where="meta-pytorch/opacus#813 (a WeightedRandomSampler made make_private compute "
          "q = 1 / len(data_loader) from the wrong length; fixes #814, #815); TF Privacy's "
          "DPKerasSGDOptimizer docstring (with gradient_accumulation_steps the effective batch "
          "is k times the one-step batch, which the privacy computation must use)",
    caught_by=("accounting-sampling",),
    patches={("torch", "library"): _opacus_half_rate, ("tf", "library"): _keras_physical_rate},
    skips={key: "the harmonised step does not sample: dpcore.sampling draws its batches and "
                "dpcore.accounting builds its event, no backend code between them"
           for key in HARMONISED},
    perf={"library_jacobian_batch_size": 16},
)


def _tf_noise_per_chunk(mp: pytest.MonkeyPatch) -> None:
    import tensorflow as tf

    from tfpipe.dp import SeededGaussianSumQuery

    orig = SeededGaussianSumQuery.accumulate_preprocessed_record

    def accumulate_preprocessed_record(self: Any, sample_state: Any, record: Any) -> Any:
        state = orig(self, sample_state, record)
        return tf.nest.map_structure(
            lambda v: v + tf.cast(self._generator.normal(tf.shape(v), stddev=self._stddev),
                                  v.dtype), state)
    mp.setattr(SeededGaussianSumQuery, "accumulate_preprocessed_record",
               accumulate_preprocessed_record)


def _torch_no_skip(mp: pytest.MonkeyPatch) -> None:
    from torchpipe.dp import SharedStepDPOptimizer

    mp.setattr(SharedStepDPOptimizer, "signal_skip_step", lambda self, do_skip=True: None)


def _per_chunk_steps(orig: Callable[..., float]) -> Callable[..., float]:
    def train_step(self: Any, chunks: Any, divisor: float | None = None,
                   extra: Any = None, **rest: Any) -> float:
        divisor = float(self.mechanism.expected_batch_size) if divisor is None else divisor
        parts = list(chunks) or [None]
        return sum(orig(self, [] if c is None else [c], divisor, extra if i == 0 else None,
                        **(rest if i == 0 else {}))
                   for i, c in enumerate(parts))
    return train_step


def _keras_full_scale_accumulation(mp: pytest.MonkeyPatch) -> None:
    from tfpipe import library

    orig = library.make_optimizer

    def make_optimizer(config: Any, noise_multiplier: float, accumulation: int = 1,
                       *rest: Any) -> Any:
        return orig(config, noise_multiplier * math.sqrt(accumulation), accumulation, *rest)
    mp.setattr(library, "make_optimizer", make_optimizer)


NOISE_PER_CHUNK = Bug(
    name="noise-per-chunk",
    breaks="noise added at every accumulation sub-step (physical chunk) at full scale: "
           "sqrt(chunks) sigma C on the logical batch (TF: the query's accumulation adds "
           "noise; Opacus: no skipped steps, so each chunk is noised and stepped; the fast "
           "torch engine: each chunk run as its own step; TF Privacy's recipe: its "
           "gradient_accumulation_steps noise not rescaled)",
    where="TF Privacy's DPKerasSGDOptimizer docstring (with gradient_accumulation_steps every "
          "step adds noise of noise_multiplier: the effective multiplier is sqrt(k) times "
          "it); Opacus's virtual steps and BatchMemoryManager (meta-pytorch/opacus#54, #93, "
          "#143: zero_grad / virtual_step misuse across physical batches)",
    caught_by=("noise-scale", "accounting-sigma"),
    patches={("tf", "fast"): _tf_noise_per_chunk, ("tf", "reference"): _tf_noise_per_chunk,
             ("torch", "reference"): _torch_no_skip,
             ("torch", "fast"): _engine_train_step("torch", "fast", _per_chunk_steps),
             ("tf", "library"): _keras_full_scale_accumulation},
    skips={("torch", "library"): "Opacus's recipe takes each batch whole (no accumulation)"},
    perf={"library_jacobian_batch_size": 16},
)


def _tf_microbatch_scaled(mp: pytest.MonkeyPatch) -> None:
    from tfpipe.dp import ChunkedDPSGDOptimizer

    orig = ChunkedDPSGDOptimizer.accumulate_chunk

    def accumulate_chunk(self: Any, sample_state: Any, records: Any) -> Any:
        new = orig(self, sample_state, records)
        return [old + MICROBATCH * (n - old) for old, n in zip(sample_state, new, strict=True)]
    mp.setattr(ChunkedDPSGDOptimizer, "accumulate_chunk", accumulate_chunk)


MICROBATCH_SCALED = Bug(
    name="microbatch-clip-scaled",
    breaks=f"a microbatch's mean gradient clipped as if it were one example's, then counted "
           f"for its k = {MICROBATCH} examples (multiplied by k after clipping): one example "
           "moves the clipped sum by up to 2kC instead of 2C",
    where="tensorflow/privacy#620 and TF Privacy's compute_dp_sgd_privacy deprecation note "
          "(microbatching doubles the sensitivity, which a microbatch treated as one "
          "example's gradient does not account for)",
    caught_by=("sensitivity", "divisor"),
    patches={("tf", "reference"): _tf_microbatch_scaled,
             ("torch", "reference"): _torch_increment(
                 lambda opt, inc: [MICROBATCH * i for i in inc])},
    skips={("tf", "fast"): "the fast engines clip per example (microbatches run on the "
                           "reference engine)",
           ("torch", "fast"): "the fast engines clip per example (microbatches run on the "
                              "reference engine)",
           ("tf", "library"): "TF Privacy's microbatching is the library's own code",
           ("torch", "library"): "Opacus's recipe clips per example (no microbatches)"},
    settings=("privacy.sampling=shuffle", f"factors.microbatch_size={MICROBATCH}"),
)


def _tf_reference_default_clip(mp: pytest.MonkeyPatch) -> None:
    from tfpipe.dp import SeededGaussianSumQuery, clip_per_example

    mp.setattr(SeededGaussianSumQuery, "preprocess_batch", lambda self, params, records:
               clip_per_example(records, DEFAULT_CLIP, "l2"))


def _default_clip_config(config: Any) -> Any:
    return dataclasses.replace(config, privacy=dataclasses.replace(
        config.privacy, max_grad_norm=DEFAULT_CLIP))


def _opacus_default_clip(mp: pytest.MonkeyPatch) -> None:
    from torchpipe.library import OpacusRunner

    orig = OpacusRunner.__init__

    def init(self: Any, model: Any, config: Any, *args: Any) -> None:
        orig(self, model, _default_clip_config(config), *args)
    mp.setattr(OpacusRunner, "__init__", init)


def _keras_default_clip(mp: pytest.MonkeyPatch) -> None:
    from tfpipe import library

    orig = library.make_optimizer
    mp.setattr(library, "make_optimizer", lambda config, *args:
               orig(_default_clip_config(config), *args))


CLIP_NORM_DEFAULT = Bug(
    name="clip-norm-default",
    breaks=f"the examples clipped at the default clip norm {DEFAULT_CLIP:g} instead of the "
           "configured C (here 0.5); the library recipes: the library given the default",
    where="meta-pytorch/opacus#664 (PrivacyEngine's fast gradient clipping did not use the "
          "max_grad_norm argument that sets the clip norm)",
    caught_by=("sensitivity", "divisor"),
    patches={("tf", "reference"): _tf_reference_default_clip,
             ("tf", "fast"): _fast_sum("tf", lambda clipped, clip: clipped(DEFAULT_CLIP)),
             ("torch", "reference"): _torch_clip_with(DEFAULT_CLIP),
             ("torch", "fast"): _fast_sum("torch",
                                          lambda clipped, clip: clipped(DEFAULT_CLIP)),
             ("torch", "library"): _opacus_default_clip,
             ("tf", "library"): _keras_default_clip},
    settings=("privacy.max_grad_norm=0.5",),
)


def _fixed_key(mp: pytest.MonkeyPatch, backend: str) -> None:
    if backend == "tf":
        from tfpipe import engine
    else:
        from torchpipe import engine  # type: ignore[no-redef]
    from dpcore.noise_key import NoiseKey

    mp.setattr(engine, "noise_key", lambda config, stream, bits=64: NoiseKey(
        "seed", 12345, bits, hardened=False))


NOISE_KEY_FIXED = Bug(
    name="noise-key-fixed",
    breaks="the noise generator keyed with a constant: every run, whatever its seed and "
           "config, adds the same noise",
    where="a key derived from the run seed alone lets runs with one seed share their draws, "
          "and anyone holding a released model and its printed seed rebuild the noise; "
          "Opacus's secure_mode (a CSPRNG noise source) exists so that the noise cannot be "
          "rebuilt",
    caught_by=("noise-keys",),
    patches={(b, e): (lambda mp, b=b: _fixed_key(mp, b)) for b, e in HARMONISED},
    skips=_library_skips("noise seeding"),
)

#: The catalogue, by name.
BUGS: dict[str, Bug] = {bug.name: bug for bug in (
    SKIP_CLIP, CLIP_AFTER_SUM, NOISE_ONCE_PER_RUN, NOISE_ONCE_PER_EPOCH, NOISE_SKIP_BIASES,
    NOISE_SKIP_LAST_LAYER, ACTUAL_DIVISOR, ACCOUNTANT_RATE, NOISE_PER_CHUNK, MICROBATCH_SCALED,
    CLIP_NORM_DEFAULT, NOISE_KEY_FIXED)}


def cases() -> list[tuple[str, str, str]]:
    """Every (bug, backend, step) of the catalogue, skipped ones included."""
    return [(name, b, s) for name in BUGS for b in BACKENDS for s in STEPS]
