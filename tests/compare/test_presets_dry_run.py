"""Every bundled preset passes ``dpcompare compare --dry-run`` on the real data sets: the check a
grid runs before training (names, recipes, data, models, privacy plans) accepts every run, so
no committed preset fails at its start. Skipped, with the reason, for presets whose
data sets are not in ``$DPCOMPARE_DATA_DIR``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compare.cli.main import main
from compare.grid import expand_grid, load_preset, preset_names
from dpcore.data.paths import locate
from dpcore.datasets import get_info


def _missing_data(preset: str) -> list[str]:
    """The preset's data sets that need files under $DPCOMPARE_DATA_DIR and are not there."""
    root = os.environ.get("DPCOMPARE_DATA_DIR")
    names = {cell.config.data.name for cell in expand_grid(load_preset(preset)).cells}
    missing = []
    for name in sorted(names):
        info = get_info(name)
        if not info.builtin and (not root or locate(info, Path(root)) is None):
            missing.append(name)
    return missing


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_passes_its_dry_run(preset: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    missing = _missing_data(preset)
    if missing:
        pytest.skip(f"{preset}: needs {', '.join(missing)} in $DPCOMPARE_DATA_DIR")
    assert main(["compare", "--preset", preset, "--dry-run",
                 "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "all checked" in out and "nothing trained or written" in out
    # where every run comes from, and what the runs to train cost (or why not)
    assert "\nfrom where: " in out and "trained here into" in out
    assert "\nestimated training time of the " in out, out[-2000:]
