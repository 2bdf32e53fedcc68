"""Models declared in YAML (``model: {name: custom, layers: [...]}``): parsed once, built
identically by both backends, trained on both, weights ported with the same probabilities,
the same Grad-CAM maps; BatchNorm refused with the privacy reason; the layers in the hash."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore.architectures import architecture  # noqa: E402
from dpcore.backend import load_backend  # noqa: E402
from dpcore.config import ModelSpec, RunConfig  # noqa: E402
from dpcore.data import load_dataset  # noqa: E402
from dpcore.errors import ConfigError, PrivacyConfigError  # noqa: E402
from dpcore.trained import TrainedModel  # noqa: E402
from tfpipe import explain as tfe  # noqa: E402
from tfpipe import fast as tf_fast  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from torchpipe import explain as pte  # noqa: E402
from torchpipe import fast as pt_fast  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom-model.yaml"


def _config() -> RunConfig:
    """The example, shortened to 6 steps (the test checks porting, not accuracy)."""
    return RunConfig.from_file(EXAMPLE).with_overrides(["train.epochs=null", "train.steps=6"])


@cache
def _trained(backend: str) -> tuple[TrainedModel, np.ndarray]:
    config = _config()
    data = load_dataset(config.data)
    trained = load_backend(backend).train(config, data, progress=False)
    return trained, data.x_test[:16].astype(np.float32) / np.float32(255.0)


def test_example_builds_the_described_layers_in_both_backends() -> None:
    spec = _config().model
    arch = architecture(spec, (16, 16, 1), 10)
    keras_model = tfm.build_model(spec, (16, 16, 1), 10, seed=0)
    torch_model = ptm.build_model(spec, (16, 16, 1), 10, seed=0)
    shapes = arch.weight_shapes()
    assert {k: v.shape for k, v in tfm.get_weights(keras_model).items()} == shapes
    assert {k: v.shape for k, v in ptm.get_weights(torch_model).items()} == shapes
    assert shapes["head.kernel"] == (16, 10)  # a Dense without units: one per class
    assert tfm.gradcam_layer_name(keras_model) == ptm.gradcam_layer_name(torch_model) == "conv2"
    assert tf_fast.unsupported_layers(keras_model) == []
    assert pt_fast.unsupported_layers(torch_model) == []


@pytest.mark.parametrize(("source", "target"), [("tf", "torch"), ("torch", "tf")])
def test_example_trains_and_ports_weights_with_the_same_outputs(source: str,
                                                                target: str) -> None:
    trained, x = _trained(source)
    assert trained.result.status == "finished"
    spec, shape = trained.config.model, (16, 16, 1)
    build, other = (tfm, ptm) if target == "tf" else (ptm, tfm)
    ported = build.build_model(spec, shape, 10)
    build.set_weights(ported, trained.weights)
    p_source = load_backend(source).predict_proba(trained.model, x)
    p_target = load_backend(target).predict_proba(ported, x)
    np.testing.assert_allclose(p_target, p_source, atol=1e-5)
    keras_model, torch_model = (ported, trained.model) if target == "tf" else \
        (trained.model, ported)
    for layer in (None, "block1_conv1"):  # the default (last conv) and a named layer
        a = tfe.gradcam(keras_model, x, layer=layer)
        b = pte.gradcam(torch_model, x, layer=layer)
        varying = [i for i in range(len(x)) if a[i].std() > 0 and b[i].std() > 0]
        assert len(varying) >= len(x) // 2
        for i in varying:
            assert np.corrcoef(a[i].ravel(), b[i].ravel())[0, 1] > 0.99


def test_batchnorm_and_bad_layers_are_refused_in_one_line() -> None:
    base = {"name": "custom", "layers": [{"type": "Conv2D", "filters": 4, "kernel": 3},
                                         {"type": "Flatten"}, {"type": "Dense"}]}
    with pytest.raises(PrivacyConfigError, match=r"layers\[1\]: layer type 'BatchNorm2d' is "
                       r"refused: .*BatchNorm mixes the examples of a batch"):
        ModelSpec(**{**base, "layers": [base["layers"][0], {"type": "BatchNorm2d"}]})
    cases = [
        ([{"type": "Dropout"}], r"layer type 'Dropout' is not known; valid: Conv2D"),
        ([{"type": "Conv2D", "kernel": 3}], r"layers\[0\]: Conv2D needs 'filters'"),
        ([{"type": "Conv2D", "filters": 4, "kernel": 3, "padding": "full"}],
         r"layers\[0\].padding='full' is not valid; valid: same, valid"),
        ([{"type": "Dense", "units": 0}], r"layers\[0\].units=0 is not valid"),
        ([{"type": "Dense", "size": 3}], r"unknown key\(s\) size for Dense"),
        ([], r"model.layers=\[\] is not valid"),
    ]
    for layers, pattern in cases:
        with pytest.raises(ConfigError, match=pattern) as info:
            ModelSpec(name="custom", layers=layers)
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="name 'custom' with a list of layers"):
        ModelSpec(name="cnn4", layers=base["layers"])
    with pytest.raises(ConfigError, match="name 'custom' with a list of layers"):
        ModelSpec(name="custom")
    spec = ModelSpec(**base, freeze=("nope",))
    with pytest.raises(ConfigError, match=r"model.freeze: 'nope' is not a layer with weights"):
        architecture(spec, (8, 8, 1), 3)


def test_layers_enter_the_hash_and_named_models_keep_theirs() -> None:
    """Literal hashes were computed with the code before custom models existed."""
    assert RunConfig.from_dict({"model": {"name": "resnet18"}}).config_hash == "ed419a1d58f702b9"
    a = _config()
    wider = a.to_dict()
    wider["model"]["layers"][0]["filters"] = 12
    assert RunConfig.from_dict(wider).config_hash != a.config_hash
    assert RunConfig.from_dict(a.to_dict()).config_hash == a.config_hash


def test_example_runs_from_the_cli_with_grad_cam_faithfulness(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.main import main
    from dpcore.results import read_result

    code = main(["train", "--backend", "torch", "--config", str(EXAMPLE), "--steps", "2",
                 "--faithfulness-subset", "8", "--quiet", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    (run,) = (tmp_path / "runs").glob("*-torch")
    result = read_result(run / "result.json")
    assert result is not None and result.config["model"]["name"] == "custom"
    assert result.faithfulness is not None and result.faithfulness["n"] == 8


def test_a_custom_text_model_is_the_same_function_in_both_backends() -> None:
    spec = ModelSpec(name="custom", layers=[
        {"type": "Embedding", "name": "emb", "dim": 8},  # vocab_size: the data set's
        {"type": "Conv1D", "name": "conv", "filters": 6, "kernel": 3, "padding": "same"},
        {"type": "Activation", "name": "act"},
        {"type": "GlobalMaxPool1D", "name": "pool"},
        {"type": "Dense", "name": "out"},
    ])
    keras_model = tfm.build_model(spec, (12,), 2, seed=3, vocab_size=50)
    torch_model = ptm.build_model(spec, (12,), 2, seed=3, vocab_size=50)
    tokens = np.random.default_rng(0).integers(0, 50, (5, 12)).astype(np.int32)
    np.testing.assert_allclose(load_backend("tf").predict_proba(keras_model, tokens),
                               load_backend("torch").predict_proba(torch_model, tokens),
                               atol=1e-6)
    with pytest.raises(ConfigError, match=r"layer 'emb' \(Embedding\) needs vocab_size"):
        tfm.build_model(spec, (12,), 2)
