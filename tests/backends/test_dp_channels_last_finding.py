"""The script of docs/findings/opacus-channels-last-conv.md shows the Opacus error it documents,
and the bench's workaround (``torchpipe.dp``) removes it.

The first test runs the script as a user would (its own process: Opacus's grad samplers, not
the bench's). While Opacus has the error it prints a large channels-last error and a
round-off contiguous one and exits 1; once a new Opacus fixes ``unfold2d`` the script exits 0
and this test fails, saying so: then the finding and the workaround can go.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "findings" / "opacus_channels_last_conv.py"
#: Relative errors: below ROUND_OFF is float32 round-off, above WRONG is a wrong gradient.
ROUND_OFF = 1e-5
WRONG = 0.1


def _errors(output: str) -> dict[str, float]:
    """The relative errors the script printed, by case."""
    found = {
        "contiguous": re.search(r"contiguous input:\s+relative error (\S+)", output),
        "channels_last": re.search(r"channels-last input:\s+relative error (\S+)", output),
        "cnn4_front": re.search(r"conv2 relative error (\S+)", output),
    }
    missing = [name for name, match in found.items() if match is None]
    assert not missing, f"the script printed no {missing} error:\n{output}"
    return {name: float(match.group(1)) for name, match in found.items() if match}


def test_the_script_shows_the_error_on_channels_last_input() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=600, check=False)
    output = done.stdout
    errors = _errors(output)
    if done.returncode == 0:
        pytest.fail("Opacus now computes Conv2d per-sample gradients right on channels-last "
                    f"input ({errors}): update docs/findings/opacus-channels-last-conv.md "
                    "(fixed in this Opacus) and drop torchpipe.dp.contiguous_conv_grad_sample")
    assert done.returncode == 1, done.stderr
    assert errors["contiguous"] < ROUND_OFF
    assert errors["channels_last"] > WRONG
    assert errors["cnn4_front"] > WRONG
    assert "conv2 input channels-last: True" in output
    assert "WRONG on channels-last input" in output


def _script_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opacus_channels_last_conv", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_workaround_gives_the_right_per_sample_gradients() -> None:
    import torch

    import torchpipe.dp  # noqa: F401  (registers contiguous_conv_grad_sample for Conv2d)

    script = _script_module()
    assert script.one_conv(torch.channels_last) < ROUND_OFF
    assert script.one_conv(torch.contiguous_format) < ROUND_OFF
    front_error, conv2_input_channels_last = script.cnn4_front_on_nhwc_images()
    assert conv2_input_channels_last and front_error < ROUND_OFF
