"""Markdown tables of the report keep one cell per column, whatever the values hold."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compare.report import markdown_table


def _cells(line: str) -> list[str]:
    """Cells of one Markdown table row, honouring escaped pipes."""
    return [c for c in line.strip().strip("|").replace("\\|", "\x00").split("|")]


def test_a_pipe_inside_a_value_does_not_add_a_column() -> None:
    frame = pd.DataFrame([{"setting": "15 epochs | DP", "backend": "tf", "accuracy": 0.5}])
    lines = markdown_table(frame).splitlines()
    header, rows = lines[0], lines[2:]
    assert len(rows) == 1
    assert len(_cells(rows[0])) == len(_cells(header)) == 3
    assert "15 epochs \\| DP" in rows[0]


def test_missing_and_infinite_values_have_their_marks() -> None:
    frame = pd.DataFrame([{"a": float("nan"), "b": float("inf"), "c": 0.123456}])
    row = markdown_table(frame).splitlines()[2]
    assert _cells(row) == [" – ", " ∞ ", " 0.1235 "]


def test_the_header_says_which_per_example_path_each_backend_used() -> None:
    from types import SimpleNamespace

    from compare.report import engines_used

    def run(backend: str, mechanism: str, perf: dict) -> SimpleNamespace:
        return SimpleNamespace(backend=backend, perf=perf,
                               config={"privacy": {"mechanism": mechanism}})

    runs = [run("tf", "dpsgd-gaussian", {"engine": "fast", "engine_used": "fast"}),
            run("tf", "dpsgd-laplace", {"engine": "fast", "engine_used": "reference",
                                        "fast_engine_fallback": "unsupported layers: Embedding"}),
            run("torch", "dpsgd-gaussian", {"grad_sample_mode": "hooks"}),
            run("torch", "none", {"grad_sample_mode": "hooks"}),
            run("torch", "dpsgd-gaussian", {"engine_used": "fast", "grad_sample_mode": None}),
            run("torch", "dpsgd-gaussian", {"engine_used": "reference",
                                            "grad_sample_mode": "hooks"}),
            run("torch", "dpsgd-gaussian", {"engine_used": "library",
                                            "trainer": "PrivacyEngine.make_private"})]
    text = engines_used(runs)
    assert text == ("tf: fast engine (1 run), reference engine (fast engine not used: "
                    "unsupported layers: Embedding) (1 run); "
                    "torch: Opacus grad-sample mode hooks (1 run), fast engine (1 run), "
                    "reference engine (Opacus grad-sample mode hooks) (1 run), "
                    "library recipe: PrivacyEngine.make_private (1 run)")
    assert engines_used([runs[3]]) == "no DP-SGD runs"


def test_the_time_table_never_shows_a_process_wide_peak_as_a_runs(tmp_path: Path) -> None:
    """Runs stored with ru_maxrss (the largest earlier run's peak in a grid) show '–'."""
    from compare.reporting.time_section import time_and_memory
    from tests.compare.report_fakes import fake_result, section_text

    runs = [fake_result(backend=b, point=p) for b in ("tf", "torch") for p in ("a", "b")]
    for run, (mb, scope) in zip(runs, ((900.0, "run"), (1200.0, "run"),
                                       (1466.0, None), (1466.0, "process")), strict=True):
        run.timing.update({"peak_memory_mb": mb, "peak_memory_scope": scope})
    text = section_text(time_and_memory, runs)
    rows = [_cells(line) for line in text.splitlines() if line.startswith("| ")]
    assert rows[0][-1].strip() == "median_peak_memory_mb"
    memory = {(row[0].strip()[-1], row[1].strip()): row[-1].strip() for row in rows[1:]}
    assert memory == {("a", "tf"): "900", ("b", "tf"): "1200", ("a", "torch"): "–",
                      ("b", "torch"): "–"}, rows  # row order follows the config hashes
    assert "2 of 4 runs recorded only the process-wide peak" in text


def test_the_faithfulness_table_shows_the_unmasked_score_that_bounds_it(tmp_path: Path) -> None:
    """A saturated model (score 0.99 on its unmasked images) cannot gain confidence: the table
    shows original_score beside Average Drop and says what it means."""
    from compare.reporting.faithfulness_section import FAITHFULNESS_COLUMNS_NOTE, faithfulness
    from tests.compare.report_fakes import fake_result, section_text

    faith = {"average_drop": 40.0, "increase_in_confidence": 1.5, "original_score": 0.991,
             "masked_score": 0.56, "deletion_auc": 0.7, "insertion_auc": 0.9}
    runs = [fake_result(backend=b, seed=s, faithfulness=dict(faith))
            for b in ("tf", "torch") for s in (0, 1)]
    text = section_text(faithfulness, runs)
    header = next(line for line in text.splitlines() if line.startswith("| setting"))
    columns = [c.strip() for c in _cells(header)]
    assert columns.index("average_drop") < columns.index("original_score") < \
        columns.index("masked_score")
    assert "0.991 [0.991, 0.991]" in text and FAITHFULNESS_COLUMNS_NOTE in text


def _front_end_runs() -> list:
    """The interpretability grid's case: PneumoniaMNIST runs of one model, the non-private
    and epsilon-1 ones recorded without the front-end cache (6 s per epoch), the epsilon-5 ones
    with it (0.1 s per epoch)."""
    from tests.compare.report_fakes import as_scatternet_run, fake_result

    runs = []
    for backend in ("tf", "torch"):
        for seed in (0, 1):
            for point, mechanism, seconds, cached in (("non-private", "none", 6.0, False),
                                                      ("eps=1", "dpsgd-gaussian", 8.0, False),
                                                      ("eps=5", "dpsgd-gaussian", 0.1, True)):
                run = fake_result(backend=backend, seed=seed, point=point, mechanism=mechanism,
                                  dataset="pneumoniamnist")
                run.timing = {"epoch_seconds": [20.0, seconds, seconds]}
                runs.append(as_scatternet_run(run, cached))
    return runs


def test_time_ratios_pair_runs_with_the_same_fixed_front_end_only() -> None:
    """A DP run that cached the scattering is not divided by a non-private run that computed
    it in every step (that gave ratios of 0.014 in interpretability-vs-epsilon-tuned)."""
    from compare.report import front_end_mismatches, time_ratio_table
    from compare.reporting.frames import results_frame

    frame = results_frame(_front_end_runs())
    mismatches = front_end_mismatches(frame)
    assert mismatches.to_dict("records") == [
        {"dataset": "pneumoniamnist", "model": "scatter-linear", "cached": 4, "every_step": 8}]
    table = time_ratio_table(frame)
    assert sorted(table["setting"].str.rsplit(" · ", n=1).str[-1]) == ["eps=1", "eps=1"]
    assert table["ratio_to_non_private"].tolist() == [8.0 / 6.0, 8.0 / 6.0]
    assert set(table["front_end"]) == {"every step"}


def test_the_time_section_says_when_epoch_times_differ_by_the_front_end(tmp_path: Path
                                                                        ) -> None:
    from compare.reporting.time_section import time_and_memory
    from tests.compare.report_fakes import fake_result, section_text

    text = section_text(time_and_memory, _front_end_runs())
    assert "Epoch times not comparable across the fixed front end" in text
    assert ("pneumoniamnist · scatter-linear: 8 runs computed it in every step, 4 once per "
            "data set") in text
    header = next(line for line in text.splitlines() if line.startswith("| setting"))
    assert "front_end" in [cell.strip() for cell in _cells(header)]
    # runs that all compute the front end the same way get neither the warning nor the column
    same = section_text(time_and_memory, [fake_result(backend=b) for b in ("tf", "torch")])
    assert "front end" not in same and "front_end" not in same


def test_front_end_says_cached_every_step_or_none() -> None:
    """Read from the run's perf record and its model: a ScatterNet run without the cache
    computed the scattering in every step; a model without a fixed front end has none."""
    from compare.reporting.frames import front_end
    from tests.compare.report_fakes import as_scatternet_run, fake_result

    assert front_end(as_scatternet_run(fake_result(), cached=True)) == "cached"
    assert front_end(as_scatternet_run(fake_result(), cached=False)) == "every step"
    cnn4 = fake_result()
    cnn4.dataset.update({"input_shape": [28, 28, 1], "n_classes": 2})
    assert front_end(cnn4) == ""
    assert front_end(fake_result()) == ""  # no input shape recorded: cannot tell


def test_faithfulness_tables_show_the_randomisation_check_and_calibrated_figures(
        tmp_path: Path) -> None:
    """A setting whose maps fail the randomisation check is tabled apart; every table has
    the check's column; raw and temperature-scaled Average Drop stand side by side."""
    from compare.reporting.faithfulness_section import RANDOMISATION_NOTE, faithfulness
    from compare.reporting.frames import results_frame
    from tests.compare.report_fakes import fake_result, section_text

    def faith(spearman: float) -> dict:
        return {"average_drop": 40.0, "increase_in_confidence": 1.5, "original_score": 0.99,
                "masked_score": 0.56,
                "randomisation_check": {"spearman_median": spearman, "ssim_median": 0.2,
                                        "passes": spearman <= 0.5},
                "calibrated": {"temperature": 2.5, "average_drop": 25.0,
                               "increase_in_confidence": 12.0}}

    runs = [fake_result(backend="tf", seed=s, point=p, epsilon=e, faithfulness=faith(rho))
            for s in (0, 1) for p, e, rho in (("eps=1", 1.0, 0.1), ("eps=8", 8.0, 0.9))]
    frame = results_frame(runs)
    assert list(frame["randomisation_check"]) == ["passes", "passes", "fails", "fails"]
    text = section_text(faithfulness, runs)
    passing, failing = text.split("**Explanations that fail the randomisation check**")
    assert "mnist5k · eps=1" in passing and "mnist5k · eps=8" not in passing.split(
        "Faithfulness as output")[0]
    assert "mnist5k · eps=8" in failing.split("Faithfulness as output")[0]
    assert "passes (2 of 2)" in passing and "fails (2 of 2)" in failing
    assert RANDOMISATION_NOTE in text
    header = next(line for line in text.splitlines()
                  if line.startswith("| setting") and "calibrated_average_drop" in line)
    columns = [c.strip() for c in _cells(header)]
    assert columns.index("average_drop") < columns.index("calibrated_average_drop")
    assert "temperature" in columns and "randomisation_spearman" in columns
    assert "25.00 [25.00, 25.00]" in text and "2.500 [2.500, 2.500]" in text


def test_the_epsilon_of_the_steps_that_ran_with_the_planned_figure_beside_it(
        tmp_path: Path) -> None:
    """A library recipe's loader ran 8 steps where 10 were planned: frame, epsilon table and
    plotted epsilon use what ran, the plan beside it."""
    from compare.report import ReportContext, write_report
    from compare.reporting.frames import results_frame
    from dpcore.results import ResultsStore
    from tests.compare.attribution_fakes import make_run

    ran = {"steps": 8, "sampling_rate": 0.0125, "steps_per_epoch": 8, "epsilon_rdp": 1.21,
           "epsilon_pld": 1.1}
    runs = [make_run("TF Privacy stock (library)", s, 0.9, privacy_extra={"as_run": ran})
            for s in (0, 1)] + [make_run("harmonised tf", s, 0.9) for s in (0, 1)]
    frame = results_frame(runs)
    stock = frame[frame["recipe"] == "library"].iloc[0]
    harmonised = frame[frame["recipe"] == "harmonised"].iloc[0]
    assert (stock["steps"], stock["steps_planned"], stock["epsilon"]) == (8, 10, 1.21)
    assert (stock["epsilon_rdp"], stock["epsilon_rdp_planned"]) == (1.21, 1.3)
    assert (harmonised["steps"], harmonised["steps_planned"], harmonised["epsilon"]) == (
        10, 10, 1.3)
    store = ResultsStore(tmp_path / "runs")
    for r in runs:
        store.save(r)
    report = write_report(store.root, tmp_path / "out", ReportContext(command="test"))
    section = report.read_text().split("## Epsilon side by side")[1].split("\n## ")[0]
    assert "ran other steps than planned in 1 row(s)" in section
    assert "| 8 | 10 |" in section
    epsilons = pd.read_csv(tmp_path / "out" / "epsilon.csv")
    assert {"steps_planned", "epsilon_rdp_planned"} <= set(epsilons.columns)


def test_the_audit_table_names_the_epsilon_its_bound_uses_and_its_accountant(
        tmp_path: Path) -> None:
    """The audit's bound is shown with the audit's own epsilon and accountant (never beside a
    row naming another accountant); a record without ``bound_accountant`` says 'not recorded'."""
    import dataclasses

    from compare.report import ReportContext, write_report
    from dpcore.metrics.audit import advantage_upper_bound
    from dpcore.results import ResultsStore
    from tests.compare.attribution_fakes import make_run

    def audit(**extra: object) -> dict:
        return {"epsilon": 1.2, "delta": 1e-5, "private": True,
                "bound": advantage_upper_bound(1.2, 1e-5), "attack_auc": 0.52,
                "advantage": 0.04, "loss_threshold": {"ci_low": 0.01},
                "suspected_privacy_bug": False, **extra}

    new, old = (make_run("harmonised tf", seed, 0.9) for seed in (0, 1))
    runs = [dataclasses.replace(new, audit=audit(epsilon_accountant="pld")),
            dataclasses.replace(old, audit=audit())]  # a record without its accountant
    store = ResultsStore(tmp_path / "runs")
    for r in runs:
        store.save(r)
    report = write_report(store.root, tmp_path / "out", ReportContext(command="test"))
    section = report.read_text().split("## Membership-inference audit")[1].split("\n## ")[0]
    header, _, *rows = (line for line in section.splitlines() if line.startswith("|"))
    columns = [c.strip() for c in _cells(header)]
    assert columns.index("epsilon") < columns.index("bound_epsilon") < columns.index(
        "bound_accountant") < columns.index("advantage_bound")
    by_seed = {cells[columns.index("seed")].strip(): cells for cells in map(_cells, rows)}
    assert set(by_seed) == {"0", "1"}
    for seed, accountant in (("0", "pld"), ("1", "not recorded")):
        cells = [c.strip() for c in by_seed[seed]]
        assert cells[columns.index("epsilon")] == "1.3"  # the run's RDP epsilon
        assert cells[columns.index("bound_epsilon")] == "1.2"  # what the bound used
        assert cells[columns.index("bound_accountant")] == accountant


def _runs_with_faithfulness() -> list:
    """A non-private tf and torch run, each with faithfulness figures."""
    from tests.compare.report_fakes import fake_result

    faith = {"average_drop": 40.0, "increase_in_confidence": 1.5, "original_score": 0.99,
             "masked_score": 0.56, "deletion_auc": 0.7, "insertion_auc": 0.9}
    return [fake_result(backend=b, point="non-private", mechanism="none",
                        faithfulness=dict(faith)) for b in ("tf", "torch")]


def test_runs_without_faithfulness_are_named_with_the_grid_that_evaluated_them() -> None:
    """A record shared with another grid (evaluated there without faithfulness) is reported
    as it is: the section says which runs have no figures and which grid trained them."""
    from compare.reporting.faithfulness_section import faithfulness
    from tests.compare.report_fakes import fake_result, section_text

    evaluated = _runs_with_faithfulness()
    shared = [fake_result(backend=b, point="eps=1") for b in ("tf", "torch")]
    for run in shared:
        run.grid = "other-grid"
    text = section_text(faithfulness, [*evaluated, *shared])
    assert ("2 finished run(s) have no faithfulness figures (`–` below): `mnist5k · eps=1`. "
            "They were trained by `other-grid` without faithfulness, and this report was "
            "written without retraining them") in text
    assert "have no faithfulness figures" not in section_text(faithfulness, evaluated)


def test_runs_whose_faithfulness_was_skipped_are_named_with_the_reason() -> None:
    """A local-DP run whose test images leave [0, 1] records why faithfulness was skipped:
    the section gives that reason, not another grid."""
    from compare.reporting.faithfulness_section import faithfulness
    from tests.compare.report_fakes import fake_result, section_text

    evaluated = _runs_with_faithfulness()
    skipped = [fake_result(backend=b, point="eps=1") for b in ("tf", "torch")]
    for run in skipped:
        run.metrics["faithfulness_note"] = "not computed: outside [0, 1]"
    text = section_text(faithfulness, [*evaluated, *skipped])
    assert ("2 finished run(s) have no faithfulness figures (`–` below): `mnist5k · eps=1`: "
            "not computed: outside [0, 1].") in text
    assert "without retraining" not in text
