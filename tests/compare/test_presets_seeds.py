"""Seeds of the bundled presets: at least 5 wherever the grid finishes here in under
3 hours, and raising the seeds never changes the config hash of a run already committed."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import pytest

from compare.grid import expand_grid, load_preset, preset_names
from dpcore.config import LDP_TEST_INPUTS, RunConfig
from tests.committed_hashes import hash_before_noise_key

REPO = Path(__file__).resolve().parents[2]
#: The budget below which a preset must run at least MIN_SEEDS seeds (seconds of training).
BUDGET_SECONDS = 3 * 3600
MIN_SEEDS = 5
RETIRED = ("interpretability-vs-epsilon", "pneumonia-cnn4")


def _committed(preset: str) -> tuple[set[str], set[int]] | None:
    """(config hashes, seeds) of the runs in the preset's committed report, or None."""
    path = REPO / "reports" / preset / "runs.csv"
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return {r["config_hash"] for r in rows}, {int(float(r["seed"])) for r in rows}


def _training_seconds(preset: str) -> float | None:
    """The committed report's "training time summed over the N stored runs: S s"."""
    path = REPO / "reports" / preset / "report.md"
    if not path.is_file():
        return None
    match = re.search(r"training time summed over the \d+ stored runs: (\d+) s",
                      path.read_text(encoding="utf-8"))
    return float(match.group(1)) if match else None


def _as_committed(config: RunConfig) -> str:
    """The hash ``config`` had before the medical presets' local-DP runs were set to be
    evaluated on clean test images (``data.ldp_test_inputs``, a change of what is measured,
    not of the seeds): the option at its default, which the hash leaves out; under the hash
    rule before noise keys (:func:`tests.committed_hashes.hash_before_noise_key`)."""
    data = dataclasses.replace(config.data, ldp_test_inputs=LDP_TEST_INPUTS[0])
    return hash_before_noise_key(dataclasses.replace(config, data=data))


#: Presets whose committed report is not of the whole current grid (an interim report of a
#: grid still being trained from its committed records): their runs and times say nothing of
#: the whole grid, so the two tests below leave them out until the grid is complete.
STALE_REPORTS: dict[str, str] = {
    "interpretability-clip-sweep": "cnn4 retired from its cats vs dogs half: the scatter-linear "
                                   "runs that replace it await training",
    "medical-ldp-vs-dpsgd-cnn4": "retinopathy half retired and the non-private baseline "
                                 "re-tuned: the tuned baseline's runs await training",
}


def _matches_report(preset: str) -> bool:
    """The preset, expanded at its committed report's seeds, is exactly that report's runs:
    by their current hashes (a report regenerated since), by their hashes before noise keys
    (:func:`tests.committed_hashes.hash_before_noise_key`: a report written before them), or
    by the hashes they had before local-DP runs could be evaluated on clean test images (a
    report written before that)."""
    hashes, seeds = _committed(preset)  # type: ignore[misc]
    cells = [c for c in expand_grid(load_preset(preset)).cells if c.config.seed in seeds]
    return hashes in ({c.config.config_hash for c in cells},
                      {hash_before_noise_key(c.config) for c in cells},
                      {_as_committed(c.config) for c in cells})


@pytest.mark.parametrize("preset", preset_names())
def test_raising_the_seeds_keeps_every_existing_seeds_hash(preset: str) -> None:
    """The cells of the first seeds (up to 3, the former count) are the same configs
    whatever the preset's seed count."""
    raw = load_preset(preset)
    full = expand_grid(raw)
    k = min(3, len({c.config.seed for c in full.cells}))
    few = {c.config.config_hash for c in expand_grid(raw, seeds=k).cells}
    assert {c.config.config_hash for c in full.cells if c.config.seed < k} == few


@pytest.mark.parametrize("preset", [p for p in preset_names() if _committed(p)])
def test_the_committed_runs_keep_their_hashes(preset: str) -> None:
    """Expanded at its committed report's seeds, a preset gives exactly that report's runs
    (local-DP runs now evaluated on clean test images counted with their former hash), unless
    the preset changed for another reason since (:data:`STALE_REPORTS`)."""
    if not _matches_report(preset):
        assert preset in STALE_REPORTS, f"{preset}: the committed runs are not the preset's"
        return
    grid = expand_grid(load_preset(preset))
    unchanged = [c for c in grid.cells if c.config.data.ldp_test_inputs == LDP_TEST_INPUTS[0]]
    assert all(hash_before_noise_key(c.config) == _as_committed(c.config) for c in unchanged)


@pytest.mark.parametrize("preset", [p for p in preset_names() if _training_seconds(p)])
def test_every_preset_that_fits_in_three_hours_runs_five_seeds(preset: str) -> None:
    """Its committed training time, scaled from the committed seeds to 5, under 3 hours:
    then the preset runs at least 5 seeds (longer ones keep theirs: README says which). A
    report of an earlier version of the grid does not time it (README says how it was
    estimated)."""
    if preset in STALE_REPORTS and not _matches_report(preset):
        pytest.skip(f"{preset}: committed report of an earlier grid ({STALE_REPORTS[preset]})")
    seconds = _training_seconds(preset)
    _, committed_seeds = _committed(preset)  # type: ignore[misc]
    at_five = seconds * MIN_SEEDS / len(committed_seeds)  # type: ignore[operator]
    preset_seeds = {c.config.seed for c in expand_grid(load_preset(preset)).cells}
    if at_five < BUDGET_SECONDS:
        assert len(preset_seeds) >= MIN_SEEDS, f"{preset}: about {at_five / 3600:.1f} h at 5"


def test_retired_presets_and_their_reports_are_gone() -> None:
    for name in RETIRED:
        assert name not in preset_names()
        assert not (REPO / "reports" / name).exists()
        assert f"Retired: `{name}`" in (REPO / "README.md").read_text(encoding="utf-8")
