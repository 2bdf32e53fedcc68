"""Pre-trained weights on both frameworks (``model.pretrained``: the neutral npz, a torch
``state_dict``, torchvision's resnet18 names) and frozen layers (``model.freeze``): same
probabilities after loading in both backends; frozen layers do not move under DP-SGD and are
left out of the clipping norm (every engine of both backends, against a naive loop)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore.architectures import architecture  # noqa: E402
from dpcore.backend import load_backend  # noqa: E402
from dpcore.config import ModelSpec, PerfSpec, RunConfig  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from dpcore.pipeline import factor_initial_weights  # noqa: E402
from dpcore.torchfile import read_state_dict  # noqa: E402
from dpcore.weights import init_weights, save_weights  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    SIDE,
    batch,
    chunks_of,
    config,
    digits16,
    mechanism,
)
from tfpipe import models as tfm  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

FROZEN = ("conv1", "conv2", "fc1")
SHAPE = (SIDE, SIDE, 1)


def _random_weights(spec: ModelSpec, shape: tuple[int, ...], n: int, seed: int = 7
                    ) -> dict[str, np.ndarray]:
    """Weights no initialiser makes (so a test can tell that they were loaded)."""
    rng = np.random.default_rng(seed)
    return {k: rng.normal(0.0, 0.2, s).astype(np.float32)
            for k, s in architecture(spec, shape, n).weight_shapes().items()}


def _both_probabilities(spec: ModelSpec, weights: dict[str, np.ndarray],
                        shape: tuple[int, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(1).uniform(0, 1, (6, *shape)).astype(np.float32)
    k, t = tfm.build_model(spec, shape, n), ptm.build_model(spec, shape, n)
    tfm.set_weights(k, weights)
    ptm.set_weights(t, weights)
    return (load_backend("tf").predict_proba(k, x), load_backend("torch").predict_proba(t, x))


def _pretrained_config(path: Path, **model: object) -> RunConfig:
    return config(noise=1.0, steps=2).replace(model=ModelSpec(name="cnn4", pretrained=str(path),
                                                              **model))


# ----------------------------------------------------------------------------- file formats
def test_torch_file_reader_matches_torch_save(tmp_path: Path) -> None:
    state = {"a.weight": torch.randn(4, 3, 2, 2), "b.bias": torch.arange(5, dtype=torch.int64),
             "t.weight": torch.randn(3, 4).t(), "h": torch.randn(2).half()}
    torch.save(state, tmp_path / "w.pt")
    read = read_state_dict(tmp_path / "w.pt")
    assert list(read) == list(state)
    for key, value in state.items():
        np.testing.assert_array_equal(read[key], value.numpy())
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")  # a pickled module: code
    with pytest.raises(ConfigError, match=r"module\.pt: holds torch\.nn\..*Linear, which a "
                                          r"tensor state_dict does not"):
        read_state_dict(tmp_path / "module.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=r"junk\.pt: not a torch.save zip file"):
        read_state_dict(tmp_path / "junk.pt")


def test_npz_and_state_dict_give_the_same_probabilities_in_both_backends(
        tmp_path: Path) -> None:
    spec = ModelSpec(name="cnn4")
    weights = _random_weights(spec, SHAPE, 10)
    source = ptm.build_model(spec, SHAPE, 10)
    ptm.set_weights(source, weights)
    torch.save(source.state_dict(), tmp_path / "zoo.pt")
    save_weights(tmp_path / "w.npz", weights)
    data = digits16()
    for path in (tmp_path / "w.npz", tmp_path / "zoo.pt"):
        loaded = factor_initial_weights(_pretrained_config(path), data)
        assert loaded is not None
        for key, value in weights.items():
            np.testing.assert_allclose(loaded[key], value, rtol=0, atol=0)
        p_tf, p_torch = _both_probabilities(spec, loaded, SHAPE, 10)
        np.testing.assert_allclose(p_tf, p_torch, atol=1e-5)


def test_pretrained_hash_is_the_content_not_the_path(tmp_path: Path) -> None:
    weights = _random_weights(ModelSpec(name="cnn4"), SHAPE, 10)
    save_weights(tmp_path / "a" / "w.npz", weights)
    save_weights(tmp_path / "b" / "copy.npz", weights)
    a, b = (_pretrained_config(tmp_path / p) for p in ("a/w.npz", "b/copy.npz"))
    assert a.config_hash == b.config_hash != config(noise=1.0, steps=2).config_hash
    weights["fc2.bias"] = weights["fc2.bias"] + 1
    save_weights(tmp_path / "b" / "copy.npz", weights)
    assert _pretrained_config(tmp_path / "b" / "copy.npz").config_hash != a.config_hash
    with pytest.raises(ConfigError, match=r"model.pretrained=.*absent.npz.* cannot be read"):
        _ = _pretrained_config(tmp_path / "absent.npz").config_hash


def test_weights_that_do_not_fit_are_named_unless_skipped(tmp_path: Path) -> None:
    weights = _random_weights(ModelSpec(name="cnn4"), SHAPE, 3)  # a 3-class head
    save_weights(tmp_path / "w.npz", weights)
    data = digits16()
    with pytest.raises(ConfigError, match=r"w\.npz.*weight 'fc2.kernel' has shape \(32, 3\); "
                                          r"the model expects \(32, 10\).*pretrained_skip"):
        factor_initial_weights(_pretrained_config(tmp_path / "w.npz"), data)
    cfg = _pretrained_config(tmp_path / "w.npz", pretrained_skip=("fc2",))
    loaded = factor_initial_weights(cfg, data)
    assert loaded is not None
    np.testing.assert_array_equal(loaded["conv1.kernel"], weights["conv1.kernel"])
    seeded = init_weights(architecture(cfg.model, SHAPE, 10).weight_shapes(), cfg.seed)
    np.testing.assert_array_equal(loaded["fc2.kernel"], seeded["fc2.kernel"])


# ----------------------------------------------------------------------------- resnet18
def _torchvision_resnet18_state(n_classes: int, stem: int, rng: np.random.Generator
                                ) -> dict[str, torch.Tensor]:
    """A state_dict under torchvision's ``resnet18`` names (BatchNorm with running stats),
    written key by key from torchvision's layout (conv OIHW, fc [out, in])."""
    state: dict[str, torch.Tensor] = {}

    def t(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.normal(0, 0.1, shape).astype(np.float32))

    def bn(prefix: str, c: int) -> None:
        state.update({f"{prefix}.weight": 1 + t(c), f"{prefix}.bias": t(c),
                      f"{prefix}.running_mean": t(c), f"{prefix}.running_var": 1 + t(c).abs(),
                      f"{prefix}.num_batches_tracked": torch.tensor(100)})

    state["conv1.weight"] = t(64, 3, stem, stem)
    bn("bn1", 64)
    c_in = 64
    for stage, c in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            p = f"layer{stage}.{block}"
            state[f"{p}.conv1.weight"] = t(c, c_in if block == 0 else c, 3, 3)
            bn(f"{p}.bn1", c)
            state[f"{p}.conv2.weight"] = t(c, c, 3, 3)
            bn(f"{p}.bn2", c)
            if block == 0 and c != c_in:
                state[f"{p}.downsample.0.weight"] = t(c, c_in, 1, 1)
                bn(f"{p}.downsample.1", c)
        c_in = c
    state["fc.weight"], state["fc.bias"] = t(n_classes, 512), t(n_classes)
    return state


def test_torchvision_resnet18_state_dict_loads_into_both_backends(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    state = _torchvision_resnet18_state(4, 3, rng)
    torch.save(state, tmp_path / "resnet18.pt")
    spec = ModelSpec(name="resnet18", pretrained=str(tmp_path / "resnet18.pt"))
    shape = (8, 8, 3)
    arch = architecture(spec, shape, 4)
    from dpcore.pretrained import pretrained_weights

    weights = pretrained_weights(spec.pretrained, arch, init_weights(arch.weight_shapes(), 0))
    # BatchNorm's scale and shift become GroupNorm's gamma and beta; its statistics go
    np.testing.assert_array_equal(weights["layer2_0_gn1.gamma"],
                                  state["layer2.0.bn1.weight"].numpy())
    np.testing.assert_array_equal(weights["layer3_0_down_gn.beta"],
                                  state["layer3.0.downsample.1.bias"].numpy())
    np.testing.assert_array_equal(weights["layer4_0_down.kernel"],
                                  state["layer4.0.downsample.0.weight"].numpy()
                                  .transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(weights["fc.kernel"], state["fc.weight"].numpy().T)
    p_tf, p_torch = _both_probabilities(spec, weights, shape, 4)
    np.testing.assert_allclose(p_tf, p_torch, atol=1e-5)
    # torchvision's own 7x7 stem and 1000-class head: kept at the seeded init when skipped
    torch.save(_torchvision_resnet18_state(1000, 7, rng), tmp_path / "imagenet.pt")
    with pytest.raises(ConfigError, match=r"weight 'conv1.kernel' has shape \(7, 7, 3, 64\)"):
        pretrained_weights(tmp_path / "imagenet.pt", arch, init_weights(arch.weight_shapes(), 0))
    skipped = pretrained_weights(tmp_path / "imagenet.pt", arch,
                                 init_weights(arch.weight_shapes(), 0), ("conv1", "fc"))
    assert skipped["conv1.kernel"].shape == (3, 3, 3, 64)


# ----------------------------------------------------------------------------- freezing
def _head_only_reference(start: dict[str, np.ndarray], indices: np.ndarray, clip: float,
                         lr: float, batch_size: int) -> dict[str, np.ndarray]:
    """fc2 after one noise-free DP-SGD step whose per-example norm is fc2's gradient only:
    a naive per-example loop (torch autograd on fc2's parameters alone, float64)."""
    model = ptm.build_model(ModelSpec(name="cnn4"), SHAPE, 10).double()
    ptm.set_weights(model, start)
    fc2 = ptm.get_layer(model, "fc2")
    x, y = batch(indices)
    total = [torch.zeros_like(fc2.weight), torch.zeros_like(fc2.bias)]
    for i in range(len(indices)):
        xi = torch.from_numpy(x[i:i + 1].transpose(0, 3, 1, 2).astype(np.float64))
        loss = torch.nn.functional.cross_entropy(model(xi), torch.from_numpy(y[i:i + 1]),
                                                 reduction="sum")
        grads = torch.autograd.grad(loss, [fc2.weight, fc2.bias])
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        factor = min(1.0, clip / float(norm))
        total = [t + factor * g for t, g in zip(total, grads, strict=True)]
    return {"fc2.kernel": start["fc2.kernel"] - lr * total[0].numpy().T / batch_size,
            "fc2.bias": start["fc2.bias"] - lr * total[1].numpy() / batch_size}


@pytest.mark.parametrize("backend", ["tf", "torch"])
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_frozen_layers_do_not_move_and_are_not_clipped(backend: str, engine: str) -> None:
    spec = ModelSpec(name="cnn4", freeze=FROZEN)
    cfg = dataclasses.replace(config(noise=0.0, clip=0.05), model=spec)
    code = load_backend(backend)
    models = tfm if backend == "tf" else ptm
    model = models.build_model(spec, SHAPE, 10, seed=0)
    start = models.get_weights(model)
    step = code.ENGINES[engine](model, cfg, mechanism("l2", 0.05, 0.0, 32), PerfSpec(engine=engine))
    indices = np.arange(32)
    step.train_step(chunks_of(indices, 16))
    after = step.get_weights()
    step.close()
    for key, value in start.items():
        if key.split(".")[0] in FROZEN:
            np.testing.assert_array_equal(after[key], value, err_msg=key)
    expected = _head_only_reference(start, indices, 0.05, cfg.train.lr, 32)
    for key, value in expected.items():
        assert not np.allclose(value, start[key])  # the head moved
        np.testing.assert_allclose(after[key], value, rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_dp_fine_tuning_from_a_pretrained_file_trains_only_the_head(
        backend: str, tmp_path: Path) -> None:
    spec = ModelSpec(name="cnn4")
    weights = _random_weights(spec, SHAPE, 10)
    save_weights(tmp_path / "w.npz", weights)
    cfg = _pretrained_config(tmp_path / "w.npz", freeze=FROZEN)
    trained = load_backend(backend).train(cfg, digits16(), progress=False)
    assert trained.result.status == "finished"
    for key, value in weights.items():
        if key.split(".")[0] in FROZEN:
            np.testing.assert_array_equal(trained.weights[key], value, err_msg=key)
        else:
            assert not np.array_equal(trained.weights[key], value), key


def test_freeze_and_pretrained_are_refused_under_the_library_recipe(tmp_path: Path) -> None:
    save_weights(tmp_path / "w.npz", _random_weights(ModelSpec(name="cnn4"), SHAPE, 10))
    raw = _pretrained_config(tmp_path / "w.npz").to_dict()
    with pytest.raises(ConfigError, match=r"model.pretrained applies to recipe=harmonised"):
        RunConfig.from_dict({**raw, "recipe": "library"})
