"""The report's claimed | proved | audited privacy figures, on synthetic records of the
``mnist-gap-attribution`` configurations (harmonised, both stock recipes, the flips), so that
its rebuild shows all three columns (no training: the records are made from the preset's
configs and their privacy plans)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
from dp_accounting import dp_event as dpe

from compare.grid import expand_grid, load_preset, setting_label
from compare.reporting.frames import results_frame
from compare.reporting.headline import headline
from compare.reporting.privacy_section import (
    AUDITED_MAX,
    AUDITED_PER_SEED,
    PROVED_RDP,
    VIOLATION_FLAG,
    noise_key_lines,
    privacy,
    privacy_section,
    privacy_table,
)
from compare.reporting.stats import paired_backend_table
from dpcore.accounting import dpsgd_event, epsilon_pld, epsilon_rdp
from dpcore.results import RunResult
from dpcore.sampling import plan_batches
from tests.compare.report_fakes import render_section

N = 60000
AS_RUN = {"tf": {"sampling_rate": 1024 / N, "steps": 15 * 58, "steps_per_epoch": 58},
          "torch": {"sampling_rate": 1 / 59, "steps": 15 * 59, "steps_per_epoch": 59}}


@functools.cache
def _privacy_of(sampling: str) -> tuple[tuple[str, object], ...]:
    """The privacy entry of a gap-attribution run (RDP only: PLD takes seconds)."""
    batches = plan_batches(N, 1024, epochs=15, steps=None, sampling=sampling)
    event = dpsgd_event("dpsgd-gaussian", 1.0, batches.sampling_rate, batches.steps)
    return (("mechanism", "dpsgd-gaussian"), ("noise_multiplier", 1.0), ("delta", 1e-5),
            ("steps", batches.steps), ("steps_completed", batches.steps),
            ("sampling_rate", batches.sampling_rate), ("expected_batch_size", 1024),
            ("n_examples", N), ("epsilon_rdp", epsilon_rdp(event, 1e-5)),
            ("epsilon_pld", None), ("dp_event", {}))


def _privacy(sampling: str) -> dict[str, object]:
    return dict(_privacy_of(sampling))


def gap_records(seed: int = 0, audited: float | None = None) -> list[RunResult]:
    """One finished record per (setting, backend) of the preset, seed ``seed``."""
    grid = expand_grid(load_preset("mnist-gap-attribution"), seeds=1)
    out = []
    for cell, backend in grid.runs():
        config = cell.config
        privacy = _privacy(config.privacy.sampling)
        if config.recipe == "library":
            privacy["as_run"] = AS_RUN[backend]
        audit = None if audited is None else {"one_run": {
            "kind": "input", "m": 1000, "k": 100, "correct": 95,
            "epsilon_lower_bound": audited}}
        out.append(RunResult(
            run_id=f"{config.config_hash}-{backend}", config=config.to_dict(),
            config_hash=config.config_hash, backend=backend, seed=seed, status="finished",
            privacy=privacy, metrics={"accuracy": 0.9, "auc": 0.99}, labels=dict(cell.labels),
            dataset={"n_train": N, "n_test": 10000}, timing={"epoch_seconds": [1.0]},
            audit=audit))
    return out


def per_epoch_bound(epochs: int = 15, accountant: str = "pld") -> float:
    """The shuffled rule's bound: one release at sigma / 2 per epoch, composed (PLD, the
    proved figure; RDP, the figure beside it)."""
    compute = epsilon_pld if accountant == "pld" else epsilon_rdp
    value = compute(dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), epochs), 1e-5)
    assert value is not None
    return value


def test_every_gap_attribution_configuration_has_claimed_and_proved() -> None:
    table = privacy_table(results_frame(gap_records())).set_index(["setting", "backend"])
    rows = {s.split(" [")[0]: row for (s, b), row in table.iterrows() if b == "tf"}
    harmonised = table.loc[("harmonised", "tf")]
    assert harmonised["proved"] == pytest.approx(harmonised["claimed"])
    assert table.loc[("harmonised", "torch")]["proved"] == pytest.approx(
        harmonised["claimed"])
    shuffle, by_rdp = per_epoch_bound(), per_epoch_bound(accountant="rdp")
    assert shuffle == pytest.approx(62.24, abs=0.01) and by_rdp == pytest.approx(65.42, abs=0.01)
    for name in ("flip: shuffled fixed batches", "flip: 32 microbatches (k=32)",
                 "TF Privacy stock (library)"):
        assert rows[name]["proved"] == pytest.approx(shuffle)
        assert rows[name][PROVED_RDP] == pytest.approx(by_rdp)
    assert math.isnan(harmonised[PROVED_RDP])  # proved by RDP already: nothing beside
    for unproved in ("flip: divide by actual batch size", "flip: standardised inputs",
                     "flip: training-set accuracy"):
        assert math.isnan(rows[unproved]["proved"]), unproved
        assert "no bound" in rows[unproved]["proved: basis or why none"]
    if "TF Privacy, 32 microbatches (library)" in rows:  # candidate recipes
        assert rows["TF Privacy, 32 microbatches (library)"]["proved"] == pytest.approx(shuffle)
    opacus = table.loc[("Opacus stock (library)", "torch")]
    assert opacus["proved"] == pytest.approx(opacus["claimed"], rel=0.05)
    assert all(math.isnan(v) for v in table[AUDITED_MAX])  # nothing audited
    assert (table[AUDITED_PER_SEED] == "").all()


def test_audited_columns_and_violation_flags(tmp_path: Path) -> None:
    frame = results_frame(gap_records(audited=5.0))
    table = privacy_table(frame)
    assert (table[AUDITED_MAX] == 5.0).all()
    flagged = table[table["violation"] != ""]
    # a violation exactly where 5.0 is above the proved epsilon (the claim where none is)
    for _, row in table.iterrows():
        reference = row["proved"] if not math.isnan(row["proved"]) else row["claimed"]
        assert (row["violation"] != "") == (reference < 5.0), row["setting"]
        assert (VIOLATION_FLAG in row["setting"]) == (row["violation"] != "")
    out = render_section(privacy, gap_records(audited=5.0))
    assert list(out.tables) == ["privacy.csv"] and not out.tables["privacy.csv"].empty
    assert [f.name for f in out.figures] == ["privacy.png"]
    assert ("| setting | backend | seeds | claimed | proved | proved by RDP | audited (max over "
            "seeds) | audited per seed (95% lower bounds) |") in "\n".join(out.lines)
    assert not [line for line in out.lines if "No run here ran the one-run" in line]
    assert list(tmp_path.iterdir()) == []  # a section writes nothing: the writer does
    out.figures[0].write(tmp_path / "privacy.png")  # releases the pyplot figure
    assert (tmp_path / "privacy.png").stat().st_size > 0
    text = " ".join(headline(frame, paired_backend_table(frame)))
    assert "Proved epsilon of the DP-SGD runs" in text
    assert not flagged.empty and VIOLATION_FLAG in text  # Poisson claims ~3.4 < 5


def test_headline_states_the_proved_range_and_the_unproved_settings() -> None:
    frame = results_frame(gap_records())
    text = " ".join(headline(frame, paired_backend_table(frame)))
    low = frame["epsilon_proved"].min()
    assert f"Proved epsilon of the DP-SGD runs: {low:.3g} to {per_epoch_bound():.3g}" in text
    unproved = frame.loc[frame["epsilon_proved"].isna(), "setting"].nunique()
    assert unproved >= 3  # actual divisor, standardised inputs, training-set accuracy
    assert f"{unproved} settings claim an epsilon no bound proves" in text


def test_a_proved_range_whose_ends_print_alike_is_one_figure() -> None:
    """Calibrated runs prove 2.99999... and 3.00001...: the headline says "3", not "3 to 3"."""
    from compare.reporting.privacy_section import privacy_sentence

    frame = results_frame(gap_records())
    frame = frame[frame["epsilon_proved"].notna()].copy()
    frame["epsilon_proved"] = [3.0 + (-1) ** i * 1e-6 for i in range(len(frame))]
    sentence = privacy_sentence(frame)
    assert sentence is not None and sentence.startswith("Proved epsilon of the DP-SGD runs: 3;")
    assert "3 to 3" not in sentence


def test_the_privacy_plot_does_not_magnify_a_spread_of_calibration_error(
        tmp_path: Path) -> None:
    """Runs calibrated to epsilon 3 prove 3 +- 1e-5: the x axis shows about 3 with plain
    tick labels (no "1e-5 + 2.9999" offset), not a spread of 1e-5 across the panel."""
    from compare.reporting.privacy_section import privacy_figure

    frame = results_frame(gap_records())
    frame = frame[frame["epsilon_proved"].notna()].copy()
    frame["epsilon_proved"] = [3.0 + (-1) ** i * 1e-5 for i in range(len(frame))]
    frame["epsilon_claimed"] = 3.0
    frame["epsilon_audited"] = math.nan
    import matplotlib.pyplot as plt

    figure = privacy_figure(frame)
    assert figure is not None
    drawn = plt.figure(plt.get_fignums()[-1])  # drawn, open until written
    drawn.canvas.draw()  # the tick labels as saved
    assert len(drawn.axes) == 2  # one panel per backend
    for ax in drawn.axes:
        low, high = ax.get_xlim()
        assert high - low >= 0.5 and low < 3 < high
        assert ax.xaxis.get_major_formatter().get_offset() == ""
    figure.write(tmp_path / "privacy.png")
    assert (tmp_path / "privacy.png").stat().st_size > 0


def test_the_privacy_plot_takes_a_log_axis_for_epsilons_orders_of_magnitude_apart(
        tmp_path: Path) -> None:
    """DP-SGD at epsilon 1 beside a local-DP epsilon of 2352: a linear axis squeezes every
    DP-SGD point into its 0, so the axis is logarithmic, says so, and keeps plain labels;
    a narrow spread keeps the linear axis."""
    import matplotlib.pyplot as plt

    from compare.reporting.privacy_section import privacy_figure

    def axes_of(low: float, high: float, audited: float = math.nan) -> list:
        frame = results_frame(gap_records())
        frame = frame[frame["epsilon_proved"].notna()].copy()
        frame["epsilon_proved"] = [low if i % 2 else high for i in range(len(frame))]
        frame["epsilon_claimed"] = frame["epsilon_proved"]
        frame["epsilon_audited"] = audited
        figure = privacy_figure(frame)
        assert figure is not None
        drawn = plt.figure(plt.get_fignums()[-1])
        drawn.canvas.draw()
        figure.write(tmp_path / "privacy.png")
        return drawn.axes

    wide = axes_of(1.0, 2352.0)
    assert [ax.get_xscale() for ax in wide] == ["log", "log"]
    assert wide[0].get_xlabel() == "epsilon (log scale)"
    assert "1000" in {t.get_text() for t in wide[0].get_xticklabels()}
    with_zero = axes_of(1.0, 2352.0, audited=0.0)  # an audited bound of 0: symlog, not linear
    assert [ax.get_xscale() for ax in with_zero] == ["symlog", "symlog"]
    assert with_zero[0].get_xlabel() == "epsilon (log scale above 1, linear below)"
    assert with_zero[0].get_xlim()[0] < 0 < with_zero[0].get_xlim()[1]  # 0 drawn whole
    assert {"0", "1", "1000"} <= {t.get_text() for t in with_zero[0].get_xticklabels()}
    narrow = axes_of(1.0, 8.0)
    assert [ax.get_xscale() for ax in narrow] == ["linear", "linear"]
    assert narrow[0].get_xlabel() == "epsilon"


def test_without_an_audit_the_section_says_how_to_run_one_and_draws_no_lone_dots() -> None:
    """Nothing audited and every proved epsilon equal to its claim: no privacy.png (two dots
    per setting would repeat the table), and the section says how to switch the one-run
    canary audit on and that membership inference is another audit."""
    from compare.reporting.privacy_section import HOW_TO_AUDIT, privacy_sentence

    honest = [r for r in gap_records() if setting_label(r.labels) == "harmonised"]
    assert len(honest) == 2  # tf and torch
    frame = results_frame(honest)
    assert (frame["epsilon_proved"] - frame["epsilon_claimed"]).abs().max() < 1e-6
    out = render_section(privacy, honest)
    assert out.figures == [] and HOW_TO_AUDIT in out.lines
    assert "--audit-canaries M" in HOW_TO_AUDIT and "audit_companions:" in HOW_TO_AUDIT
    assert "membership inference" in HOW_TO_AUDIT
    assert "No figure: every setting's proved epsilon is its claim" in "\n".join(out.lines)
    assert "no run audited (the one-run canary audit was not run" in privacy_sentence(frame)
    # a proved epsilon apart from its claim is worth a figure even without an audit
    everything = render_section(privacy, gap_records())
    assert [f.name for f in everything.figures] == ["privacy.png"]
    assert HOW_TO_AUDIT in everything.lines
    plt_close(everything.figures[0])
    assert "audited (one-run canary audit)" in privacy_sentence(
        results_frame(gap_records(audited=5.0)))


def plt_close(figure: object) -> None:
    """Release a drawn privacy.png without writing it (seaborn keeps a pyplot figure)."""
    import matplotlib.pyplot as plt

    plt.close("all")
    assert figure is not None


def test_the_train_command_says_how_to_audit_an_unaudited_run() -> None:
    from compare.cli.train import privacy_figure_rows

    result = {"privacy": {"epsilon_claimed": 1.0, "epsilon_proved": 1.0,
                          "epsilon_proved_reason": "proved"}, "audit": None}
    rows = dict(privacy_figure_rows(result))
    assert rows["epsilon audited"].startswith("not audited (--audit-canaries M")


def test_the_audited_maximum_is_labelled_so_with_each_seed_s_bound_beside_it() -> None:
    """Two seeds audited at 5.0 and 0.5: the table's audited cell is their maximum, named
    "max over seeds", and each seed's 95 % lower bound stands beside it."""
    records = gap_records(seed=0, audited=5.0) + gap_records(seed=1, audited=0.5)
    table = privacy_table(results_frame(records))
    assert (table[AUDITED_MAX] == 5.0).all()
    assert (table[AUDITED_PER_SEED] == "seed 0: 5, seed 1: 0.5").all()
    assert (table["seeds"] == 2).all()


def test_the_report_says_which_noise_key_the_runs_used() -> None:
    """A record without ``privacy.noise_key`` says so; a secret key is named, with
    what it means for a rerun."""
    old = results_frame(gap_records())
    line = noise_key_lines(old)[0]
    n = int((old["noise_key"] != "").sum())
    assert n == len(old)  # every run of the preset is DP-SGD
    assert (f"Noise key of the DP-SGD runs: seed (run seed only, before config hashes were "
            f"mixed in) ({n} runs).") == line
    records = gap_records()
    records[0].privacy["noise_key"] = "seed"
    records[1].privacy["noise_key"] = "secret"
    line = noise_key_lines(results_frame(records))[0]
    assert "seed (derived from the seed and the config hash) (1 run)" in line
    assert "secret (OS entropy, kept nowhere; not bit-reproducible) (1 run)" in line
    assert "a difference from a rerun is no failure" in line
    out = render_section(privacy, records)
    assert "Noise key of the DP-SGD runs" in "\n".join(out.lines)
    plt_close(out.figures[0])


def test_a_proved_by_rdp_figure_that_differs_between_seeds_is_shown_as_a_range() -> None:
    """Seeds whose RDP figures differ give the table a range ("a to b") in `proved by RDP`,
    which the section keeps (a column of text and numbers, not a float column)."""
    frame = results_frame(gap_records(seed=0) + gap_records(seed=1))
    frame["epsilon_proved_rdp"] = [11.77 if seed == 0 else 11.94 for seed in frame["seed"]]
    table = privacy_table(frame)
    assert (table[PROVED_RDP] == "11.77 to 11.94").all()
    out = privacy_section(frame)
    text = "\n".join(out.lines)
    assert PROVED_RDP in text and "11.77 to 11.94" in text
    for figure in out.figures:
        plt_close(figure)
