"""The fast torch engine (torchpipe.fast) computes the reference engine's clipped-and-noised
update: the same clipped sum as Opacus's per-example gradients on every registered model
(L1 and L2, rel 1e-5), the same DP step (including chunks and a divisor), the same noise draws;
a model with an unsupported layer is named."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dpcore.config import ModelSpec, PerfSpec  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    check_a_route_the_layer_lacks_is_refused,
    check_padding_changes_nothing,
    check_routes_measured_recorded_replayed,
    chunks_of,
    cnn4_step,
    config,
    diff,
    mechanism,
    rel_error,
)

TOL = 1e-5
IMAGE_MODELS = ["cnn4", "resnet18", "vgg11", "vgg16", "alexnet", "scatter-linear",
                "scatter-cnn"]
ALL_MODELS = [*IMAGE_MODELS, "textcnn"]


def _model_and_batch(name: str) -> tuple[Any, Any, Any]:
    """A small instance of registered model ``name`` and a batch of 5 examples for it (token
    ids with repeats within an example for ``textcnn``, so rows of the table add up)."""
    from torchpipe.models import build_model
    from torchpipe.predict import to_tensor

    rng = np.random.default_rng(0)
    if name == "textcnn":
        model = build_model(ModelSpec(name=name, width=0.25), (12,), 2, seed=1, vocab_size=9)
        x = to_tensor(rng.integers(0, 9, (5, 12)), True)
        return model, x, torch.from_numpy(rng.integers(0, 2, 5))
    shape = (16, 16, 1) if name in ("cnn4", "scatter-cnn") else (32, 32, 3)
    width = 1.0 if name == "cnn4" else 0.125
    model = build_model(ModelSpec(name=name, width=width), shape, 10, seed=1)
    x = to_tensor(rng.uniform(size=(5, *shape)).astype(np.float32), False)
    return model, x, torch.from_numpy(rng.integers(0, 10, 5))


def _channels_last_inside(model: Any, x: Any) -> bool:
    """Some trainable Conv2d's input is a channels-last tensor in ``model(x)``."""
    from torchpipe import fast

    with fast._recording(model) as records:
        model(x)
    return any(a.dim() == 4 and not a.is_contiguous()
               and a.is_contiguous(memory_format=torch.channels_last)
               for m, a, _ in records if isinstance(m, torch.nn.Conv2d))


def _per_example_gradients(model: Any, x: Any, y: Any) -> list[np.ndarray]:
    """Per-example gradients [n, *shape] by a naive loop (float64), in parameter order."""
    out: list[list[np.ndarray]] = []
    for i in range(len(y)):
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1],
                                                 reduction="sum")
        loss.backward()
        out.append([p.grad.detach().double().numpy().copy() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return [np.stack(parts) for parts in zip(*out, strict=True)]


def _clipped_sum(records: list[np.ndarray], clip: float, kind: str) -> list[np.ndarray]:
    """Opacus's clipping (factor ``min(1, C / (norm + 1e-6))``) of the records, summed."""
    flat = np.concatenate([r.reshape(len(r), -1) for r in records], axis=1)
    norms = np.linalg.norm(flat, axis=1) if kind == "l2" else np.abs(flat).sum(axis=1)
    factors = np.minimum(1.0, clip / (norms + 1e-6))
    return [np.tensordot(factors, r, axes=1) for r in records]


def _norms(records: list[np.ndarray], kind: str) -> np.ndarray:
    flat = np.concatenate([r.reshape(len(r), -1) for r in records], axis=1)
    return np.linalg.norm(flat, axis=1) if kind == "l2" else np.abs(flat).sum(axis=1)


def _as_weights(tensors: list[Any]) -> dict[str, np.ndarray]:
    return {str(i): np.asarray(t, np.float64) for i, t in enumerate(tensors)}


@pytest.mark.parametrize("memory_format", ["default", "channels_last"])
@pytest.mark.parametrize("name", ALL_MODELS)
def test_clipped_sum_equals_the_reference_on_every_registered_model(
        name: str, memory_format: str) -> None:
    from dpcore.architectures import model_names
    from torchpipe import fast

    assert sorted(ALL_MODELS) == sorted(model_names())  # a newly registered model is tested too
    model, x, y = _model_and_batch(name)
    if memory_format == "channels_last":
        # In float64: torch's channels-last float32 kernels round differently (forward rel
        # ~1e-5 on resnet18, 10x the NCHW kernels'), which flips ReLU signs of near-zero
        # pre-activations and moves single gradient entries by O(1) in the naive loop and the
        # engine alike; float64 tests what this is about, the rules on channels-last strides.
        model.double().to(memory_format=torch.channels_last)
        if x.dim() == 4:
            x = x.double().contiguous(memory_format=torch.channels_last)
            # (kymatio's scattering makes its output NCHW-contiguous again)
            assert _channels_last_inside(model, x) or name.startswith("scatter")
    model.train()
    assert fast.unsupported_layers(model) == []
    records = _per_example_gradients(model, x, y)
    for kind in ("l2", "l1"):
        clip = float(np.median(_norms(records, kind)))  # clipping active for some examples
        expected = _clipped_sum(records, clip, kind)
        losses, actual = fast.clipped_gradient_sum(model, x, y, clip, kind)
        assert losses.shape == (5,)
        assert rel_error(_as_weights([a.double().numpy() for a in actual]),
                         _as_weights(expected)) < TOL, (name, kind)


def _engine_step(fast_engine: bool, cfg: Any, mech: Any, start: dict[str, np.ndarray],
                 chunks: list[Any], divisor: float | None = None,
                 memory_format: str = "default") -> dict[str, np.ndarray]:
    from torchpipe.engine import TorchStepEngine
    from torchpipe.fast import FastTorchStepEngine
    from torchpipe.models import build_model, get_weights, set_weights

    model = build_model(ModelSpec(name="cnn4"), (16, 16, 1), 10, seed=0)
    set_weights(model, start)
    cls = FastTorchStepEngine if fast_engine else TorchStepEngine
    engine = cls(model, cfg, mech, PerfSpec(memory_format=memory_format))
    kernels = [p for p in model.parameters() if p.dim() == 4]
    assert kernels and all(p.is_contiguous(memory_format=engine.memory_format)
                           for p in kernels)
    engine.train_step(chunks, divisor=divisor)
    engine.close()
    return get_weights(model)


@pytest.fixture(scope="module")
def start() -> dict[str, np.ndarray]:
    from torchpipe.models import build_model, get_weights

    return get_weights(build_model(ModelSpec(name="cnn4"), (16, 16, 1), 10, seed=3))


@pytest.mark.parametrize(("kind", "clip", "divisor"),
                         [("l2", 2.0, None), ("l1", 90.0, None), ("l2", 2.0, 35.0)])
def test_one_dp_step_is_the_reference_update(kind: str, clip: float, divisor: float | None,
                                             start: dict[str, np.ndarray]) -> None:
    cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                 noise=0.0, clip=clip, lr=1.0)
    mech = mechanism(kind, clip, 0.0, 40)
    chunks = chunks_of(np.arange(40, 75), 16)
    fast_w = _engine_step(True, cfg, mech, start, chunks, divisor)
    ref_w = _engine_step(False, cfg, mech, start, chunks, divisor)
    assert rel_error(diff(fast_w, start), diff(ref_w, start)) < TOL


@pytest.mark.parametrize("private", [True, False])
def test_channels_last_steps_are_the_default_format_update(
        private: bool, start: dict[str, np.ndarray]) -> None:
    """perf.memory_format=channels_last: the fast and reference DP steps and the plain step
    give the NCHW reference update (noise 0, L2, a divisor), so the bench's 'at its best'
    tier computes what the default tier does."""
    cfg = config(mechanism="dpsgd-gaussian" if private else "none", noise=0.0, clip=2.0,
                 lr=1.0)
    mech = mechanism("l2", 2.0, 0.0, 40) if private else mechanism(None, float("inf"), 0.0, 40)
    chunks = chunks_of(np.arange(40, 75), 16)
    expected = diff(_engine_step(False, cfg, mech, start, chunks, 35.0), start)
    for fast_engine in (True, False) if private else (False,):
        got = diff(_engine_step(fast_engine, cfg, mech, start, chunks, 35.0,
                                memory_format="channels_last"), start)
        assert rel_error(got, expected) < TOL, fast_engine


def test_channels_last_inputs_keep_the_nhwc_memory() -> None:
    from torchpipe.predict import to_tensor

    images = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    cl = to_tensor(images, False, memory_format=torch.channels_last)
    default = to_tensor(images, False)
    assert cl.shape == default.shape == (2, 5, 3, 4) and torch.equal(cl, default)
    assert cl.is_contiguous(memory_format=torch.channels_last) and default.is_contiguous()


def test_a_bad_memory_format_is_refused_naming_the_valid_ones() -> None:
    from dpcore.errors import ConfigError

    with pytest.raises(ConfigError, match=r"perf.memory_format='nhwc'.*default, channels_last"):
        PerfSpec(memory_format="nhwc")


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_noise_is_the_reference_noise(kind: str, start: dict[str, np.ndarray]) -> None:
    """Same seeded generator, same draws: a noisy step of both engines is the same update
    (the noise dominates the clipped sum here, so a different draw would show at rel ~1)."""
    sigma, clip = 1.3, 0.7
    cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                 noise=sigma, clip=clip, lr=1.0)
    mech = mechanism(kind, clip, sigma * clip, 10)
    for chunks in ([], chunks_of(np.arange(0, 20), 16)):
        fast_w = diff(_engine_step(True, cfg, mech, start, chunks), start)
        ref_w = diff(_engine_step(False, cfg, mech, start, chunks), start)
        assert rel_error(fast_w, ref_w) < TOL


def test_a_layer_without_a_rule_is_named() -> None:
    from torchpipe import fast

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Linear(4, 2), torch.nn.Conv1d(1, 1, 1,
                                                                       padding_mode="circular"))
    assert fast.unsupported_layers(model) == ["1 (BatchNorm1d: no per-example rule)",
                                              "3 (circular padding)"]


def test_tied_weights_are_refused() -> None:
    from dpcore.errors import ConfigError
    from torchpipe import fast

    layer = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(layer, torch.nn.ReLU(), layer)
    with pytest.raises(ConfigError, match="tied weights"):
        fast.clipped_gradient_sum(model, torch.ones(3, 4), torch.tensor([0, 1, 2]), 1.0, "l2")


def test_train_records_the_fast_engine() -> None:
    from tests.backends.train_helpers import digits16
    from torchpipe.train import train

    trained = train(config(noise=1.0, steps=2), digits16(),
                    PerfSpec(engine="fast", memory_format="channels_last", threads=2),
                    progress=False)
    assert trained.extra["engine_used"] == "fast"
    assert trained.extra["memory_format_used"] == "channels_last (NHWC memory)"
    assert trained.extra["threads_in_effect"] == 2  # not the suite's default of 1
    perf = trained.result.to_dict()["perf"]  # the run record's perf section
    assert (perf["engine_used"], perf["memory_format"], perf["threads"]) == (
        "fast", "channels_last", 2)
    assert not any(hasattr(p, "grad_sample") and p.grad_sample is not None
                   for p in trained.model.parameters())


def test_microbatches_fall_back_to_the_reference_engine_and_say_why() -> None:
    import dataclasses

    from tests.backends.train_helpers import digits16
    from torchpipe.train import train

    cfg = config(noise=1.0, steps=2)
    cfg = dataclasses.replace(
        cfg, privacy=dataclasses.replace(cfg.privacy, sampling="shuffle"),
        factors=dataclasses.replace(cfg.factors, microbatch_size=2))
    trained = train(cfg, digits16(), PerfSpec(engine="fast"), progress=False)
    assert trained.extra["engine_used"] == "reference"
    assert trained.extra["fast_engine_fallback"] == "factors.microbatch_size > 1 (reference only)"


def test_default_engine_is_fast_and_falls_back_only_when_not_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dpcore.errors import ConfigError
    from tests.backends.train_helpers import digits16
    from torchpipe import fast
    from torchpipe.train import train

    cfg = config(noise=1.0, steps=1)
    assert train(cfg, digits16(), PerfSpec(), progress=False).extra["engine_used"] == "fast"
    monkeypatch.setattr(fast, "unsupported_layers", lambda model: ["ln (LayerNorm)"])
    trained = train(cfg, digits16(), PerfSpec(), progress=False)
    assert trained.extra["engine_used"] == "reference"
    assert trained.extra["fast_engine_fallback"] == "unsupported layers: ln (LayerNorm)"
    with pytest.raises(ConfigError, match=r"no rule for layer ln \(LayerNorm\)"):
        train(cfg, digits16(), PerfSpec(engine="fast"), progress=False)


def test_cli_engine_fast_on_a_layer_without_a_rule_is_one_line_exit_2_nothing_written(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from compare.cli.main import main
    from torchpipe import fast

    monkeypatch.setattr(fast, "unsupported_layers",
                        lambda model: ["blocks.0.ln (LayerNorm: no per-example rule)"])
    out = tmp_path / "out"
    status = main(["train", "--backend", "torch", "--dataset", "digits", "--steps", "1",
                   "--set", "data.image_size=16",
                   "--noise-multiplier", "1.0", "--engine", "fast", "--out", str(out),
                   "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "blocks.0.ln (LayerNorm" in err
    assert not list(out.rglob("result.json")) and not list(out.rglob("*.npz"))


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_opacus_ghost_mode_gets_a_norm_for_every_layer_type() -> None:
    """The norm samplers registered for Conv/GroupNorm make Opacus's own ghost clipping give
    the per-example norms of a naive loop on resnet18 (Conv2d, GroupNorm, Linear)."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    from torchpipe import fast

    model, x, y = _model_and_batch("resnet18")
    model.train()
    types = {type(m) for _, m in fast._trainable_modules(model)}
    assert types >= {torch.nn.Conv2d, torch.nn.GroupNorm, torch.nn.Linear}
    assert all(t in GradSampleModuleFastGradientClipping.NORM_SAMPLERS for t in types)
    expected = _norms(_per_example_gradients(model, x, y), "l2")
    ghost = GradSampleModuleFastGradientClipping(model, batch_first=True, loss_reduction="sum",
                                                 max_grad_norm=1.0, use_ghost_clipping=True)
    torch.nn.functional.cross_entropy(ghost(x), y, reduction="sum").backward()
    np.testing.assert_allclose(ghost.get_norm_sample().double().numpy(), expected, rtol=1e-5)
    ghost._close()


def _norm_model() -> tuple[Any, Any, Any]:
    """LayerNorm (over the last axis and over the last two) and GroupNorm (random affine
    parameters), with a rank-3 Linear (positions: it has routes) between them; 7 examples."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8),
                                torch.nn.Tanh(), torch.nn.LayerNorm([5, 8]),
                                torch.nn.Flatten(), torch.nn.Unflatten(1, (8, 5)),
                                torch.nn.GroupNorm(2, 8), torch.nn.Flatten(),
                                torch.nn.Linear(40, 3))
    for m in model:
        if isinstance(m, torch.nn.LayerNorm | torch.nn.GroupNorm):
            torch.nn.init.normal_(m.weight)
            torch.nn.init.normal_(m.bias)
    return model, torch.randn(7, 5, 6), torch.tensor([0, 1, 2, 0, 1, 2, 0])


@pytest.mark.parametrize("route", ["ghost", "per_example", "unfold"])
def test_each_route_forced_on_every_layer_type_it_applies_to_gives_the_naive_sum(
        route: str) -> None:
    """Every route of dpcore.fastrules.ROUTES, forced on every module whose rule has it (for
    the norm kind), on models that hold every registered module type: the naive loop's
    clipped sums, L2 and L1."""
    from dpcore.fastrules import ROUTES
    from torchpipe import fast

    assert route in ROUTES
    covered: set[str] = set()
    for label, (model, x, y) in [*((n, _model_and_batch(n)) for n in
                                   ("cnn4", "resnet18", "textcnn")), ("norms", _norm_model())]:
        model.train()
        records = _per_example_gradients(model, x, y)
        _, layers = fast.record_layers(model, x, y)
        names = fast.module_names(model)
        for kind in ("l2", "l1"):
            forced = {names[id(m)]: route for m, a, _ in layers
                      if route in fast.FAST_RULES.get(type(m)).routes(m, a, kind)}
            covered |= {type(m).__name__ for m, _, _ in layers if names[id(m)] in forced}
            clip = float(np.median(_norms(records, kind)))
            _, actual = fast.clipped_gradient_sum(model, x, y, clip, kind, forced)
            assert rel_error(_as_weights([a.double().numpy() for a in actual]),
                             _as_weights(_clipped_sum(records, clip, kind))) < TOL, (
                label, route, kind)
    assert covered == {t.__name__ for t in fast.FAST_RULES
                       if route in fast.FAST_RULES.get(t).ROUTES}, covered


def test_the_ghost_norm_is_chosen_by_the_book_keeping_rule() -> None:
    """Ghost norm exactly where 2 T^2 < p d (L2 only): a wide conv on a 4x4 output takes it,
    cnn4's first conv (14x14 output, p d = 64 x 16) keeps per-example gradients."""
    from torchpipe import fast

    wide = torch.nn.Conv2d(256, 256, 3, padding=1)  # 2 * 16^2 < 2304 * 256
    narrow = torch.nn.Conv2d(1, 16, 8, stride=2, padding=3)  # 2 * 196^2 > 1024
    rule = fast.FAST_RULES.get(torch.nn.Conv2d)
    a, g = torch.randn(2, 256, 4, 4), torch.randn(2, 256, 4, 4)
    assert rule.norms(wide, a, g, "l2").kept is None
    assert rule.norms(wide, a, g, "l1").kept is not None  # L1 has no ghost form
    a, g = torch.randn(2, 1, 28, 28), torch.randn(2, 16, 14, 14)
    assert set(rule.norms(narrow, a, g, "l2").kept) == {narrow.weight, narrow.bias}


def test_the_rule_s_routes_compute_the_opacus_kernels_bits() -> None:
    """Under Book-Keeping's rule (the default) every layer's norms and kept per-example
    gradients are Opacus's own kernels' bits, so that a run's bits do not depend on the
    faster routes that measurement may pick: a dense layer's L2 ghost norm, a convolution's
    unfold (its grad sampler) and the embedding's L2 norms (hand-written: the same sorted
    pairs, additions and square root as Opacus's norm sampler)."""
    from opacus.grad_sample.embedding import compute_embedding_norm_sample
    from opacus.grad_sample.grad_sample_module import GradSampleModule
    from opacus.grad_sample.linear import compute_linear_norm_sample

    from torchpipe import fast

    gen = torch.Generator().manual_seed(0)
    dense = torch.nn.Linear(32, 10)
    a, g = torch.randn(6, 32, generator=gen), torch.randn(6, 10, generator=gen)
    norms = compute_linear_norm_sample(dense, [a], g)
    expected = torch.stack([n * n for n in norms.values()]).sum(dim=0)
    assert torch.equal(fast.FAST_RULES.get(torch.nn.Linear).norms(dense, a, g, "l2").sums,
                       expected)

    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    a, g = torch.randn(6, 3, 28, 28, generator=gen), torch.randn(6, 8, 28, 28, generator=gen)
    rule = fast.FAST_RULES.get(torch.nn.Conv2d)
    assert rule.default_route(conv, a, g, "l2") == "unfold"
    kept = rule.norms(conv, a, g, "l2").kept
    reference = GradSampleModule.GRAD_SAMPLERS[torch.nn.Conv2d](conv, [a], g)
    assert kept is not None and all(torch.equal(kept[p], reference[p]) for p in reference)

    table = torch.nn.Embedding(50, 16)
    ids = torch.randint(0, 50, (6, 40), generator=gen)  # repeats within an example
    g = torch.randn(6, 40, 16, generator=gen)
    expected = compute_embedding_norm_sample(table, [ids], g)[table.weight] ** 2
    assert torch.equal(fast.FAST_RULES.get(torch.nn.Embedding).norms(table, ids, g, "l2").sums,
                       expected)


def test_every_rule_is_registered_by_type_with_the_decorator() -> None:
    from torchpipe import fast

    assert set(fast.FAST_RULES) == {torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d,
                                    torch.nn.Conv2d, torch.nn.GroupNorm, torch.nn.LayerNorm}
    assert all(isinstance(fast.FAST_RULES.get(t), fast.FastRule) for t in fast.FAST_RULES)
    assert fast.FAST_RULES.get(torch.nn.BatchNorm1d) is None


def test_layernorm_and_groupnorm_sums_equal_the_naive_loop() -> None:
    """LayerNorm (over the last axis and over the last two) and GroupNorm, in a small model
    with a rank-3 Linear (positions: the ghost/per-example rule applies) between them."""
    from torchpipe import fast

    model, x, y = _norm_model()
    assert fast.unsupported_layers(model) == []
    records = _per_example_gradients(model, x, y)
    for kind in ("l2", "l1"):
        clip = float(np.median(_norms(records, kind)))
        _, actual = fast.clipped_gradient_sum(model, x, y, clip, kind)
        assert rel_error(_as_weights([a.double().numpy() for a in actual]),
                         _as_weights(_clipped_sum(records, clip, kind))) < TOL, kind


def test_groupnorm_weighted_sums_survive_channels_last_inputs() -> None:
    """Grayscale NHWC images become channels-last tensors (a size-1 channel axis keeps the
    permuted strides), and torch 2.13's CPU GroupNorm backward for the affine parameters
    alone segfaults on them. With every other layer on the ghost route (weighted sums from
    weight-gradient ops, as ResNet-18's wide convolutions are), GroupNorm's weighted sums must
    still come from its grad samples and equal the all-per-example route. In a subprocess:
    the defect is a segfault."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import numpy as np, torch
        from dpcore.config import ModelSpec
        from torchpipe import fast
        from torchpipe.models import build_model
        from torchpipe.predict import to_tensor
        model = build_model(ModelSpec(name="resnet18", width=0.125), (16, 16, 1), 2, seed=1)
        model.train()
        rng = np.random.default_rng(0)
        x = to_tensor(rng.uniform(size=(6, 16, 16, 1)).astype(np.float32), False)
        assert x.is_contiguous(memory_format=torch.channels_last)
        y = torch.from_numpy(rng.integers(0, 2, 6))
        names = fast.module_names(model)
        _, layers = fast.record_layers(model, x, y)
        def forced(route):
            return {names[id(m)]: route for m, a, _ in layers
                    if route in fast.FAST_RULES.get(type(m)).routes(m, a, "l2")}
        _, kept = fast.clipped_gradient_sum(model, x, y, 0.5, "l2", forced("unfold"))
        _, autograd = fast.clipped_gradient_sum(model, x, y, 0.5, "l2", forced("ghost"))
        for a, b in zip(kept, autograd, strict=True):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-6)
        print("same sums")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and "same sums" in done.stdout, (done.returncode,
                                                                 done.stderr[-2000:])


def _cnn4_step(fast_engine: bool, perf: PerfSpec, start: dict[str, np.ndarray], *,
               private: bool = True, pad: bool = False) -> tuple[Any, dict[str, np.ndarray]]:
    from torchpipe.engine import TorchStepEngine
    from torchpipe.fast import FastTorchStepEngine

    return cnn4_step("torch", FastTorchStepEngine if fast_engine else TorchStepEngine, perf,
                     start, private=private, pad=pad)


def test_routes_are_measured_recorded_and_replayed(start: dict[str, np.ndarray]) -> None:
    check_routes_measured_recorded_replayed(
        lambda perf: _cnn4_step(True, perf, start),
        PerfSpec(engine="fast", physical_batch_size=16, memory_format="channels_last",
                 route_choice="measure"), start,
        ["layers.conv1", "layers.conv2", "layers.fc1", "layers.fc2"], TOL)


def test_a_route_a_layer_does_not_have_is_refused_naming_the_valid_ones(
        start: dict[str, np.ndarray]) -> None:
    check_a_route_the_layer_lacks_is_refused(lambda perf: _cnn4_step(True, perf, start),
                                             "layers.fc1")


@pytest.mark.parametrize("private", [True, False])
def test_padded_chunks_give_the_unpadded_update(private: bool,
                                                start: dict[str, np.ndarray]) -> None:
    """Chunks padded to their size class with zero-weight rows, as compiled steps run them,
    change nothing but float rounding (:func:`check_padding_changes_nothing`)."""
    perf = PerfSpec(engine="fast", memory_format="channels_last")
    check_padding_changes_nothing(
        lambda pad: _cnn4_step(private, perf, start, private=private, pad=pad), start, private)


@pytest.mark.slow
@pytest.mark.parametrize("private", [True, False])
def test_compiled_steps_give_the_eager_update(private: bool,
                                              start: dict[str, np.ndarray]) -> None:
    """perf.compile (torch.compile: the plain step's loss, the fast step's clip_records) on
    padded chunks: the eager update to float rounding (rel 1e-6), the same loss. About a
    minute each: inductor compiles C++ kernels."""
    perf = PerfSpec(engine="fast", memory_format="channels_last")
    eager_engine, eager = _cnn4_step(private, perf, start, private=private)
    import dataclasses

    engine, compiled = _cnn4_step(private, dataclasses.replace(perf, compile=True), start,
                                  private=private, pad=True)
    assert engine.perf_record()["compiled"].startswith("torch.compile")
    assert rel_error(diff(compiled, start), diff(eager, start)) < 1e-6
    assert engine.last_loss == pytest.approx(eager_engine.last_loss, rel=1e-6)
