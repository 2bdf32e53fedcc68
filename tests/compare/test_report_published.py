"""Published figures beside ours: rendering, and a `published:` entry that does not match the
grid rejected before any training (one line, exit 2, nothing written)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from compare.grid import expand_grid, load_preset
from compare.reporting.frames import results_frame
from compare.reporting.published import paper_names, paper_table
from compare.reporting.published_section import comparison_rows, published_section
from dpcore.errors import ConfigError
from tests.compare.report_fakes import fake_result

ROOT = Path(__file__).resolve().parents[2]
DP, NP = "15 epochs · DP (noise 1.0)", "15 epochs · non-private"


def _mnist_runs() -> list:
    runs = []
    for seed, (tf_acc, torch_acc) in enumerate([(0.90, 0.88), (0.92, 0.90), (0.91, 0.89)]):
        labels = {"epochs": "15 epochs", "privacy": "DP (noise 1.0)"}
        runs.append(fake_result(dataset="mnist", backend="tf", seed=seed, accuracy=tf_acc,
                                epsilon=3.5, labels=labels))
        runs.append(fake_result(dataset="mnist", backend="torch", seed=seed,
                                accuracy=torch_acc, epsilon=3.5, labels=labels))
    return runs


def test_the_bundled_papers_are_package_data_with_citations() -> None:
    assert {"library_benchmark_kotevska", "medical_resnet_singh",
            "interpretability_dp_gradcam"} <= set(paper_names())
    table = paper_table("library_benchmark_kotevska", "mnist_table_I")
    assert "Kotevska" in table.source and table.columns[-1] == "accuracy_pct"


def test_mnist_preset_sets_the_papers_figures_beside_ours() -> None:
    grid = expand_grid(load_preset("mnist-library-benchmark-15"))
    frame = results_frame(_mnist_runs())
    rows = comparison_rows(grid.published[0], frame)
    dp_acc = rows[(rows["our setting"] == f"{DP} (harmonised step, torch backend)")
                  & (rows["paper column"] == "accuracy_pct")].iloc[0]
    assert dp_acc["published"] == "85.47"
    # ours: torch 88, 90, 89 -> mean 89.00; percentile bootstrap of 3 values: a resample of
    # three 88s (or three 90s) has probability 1/27 = 3.7% > 2.5%, so the 2.5% and 97.5%
    # quantiles of the resampled means are 88 and 90
    assert dp_acc["ours"] == "89.00 [88.00, 90.00] (3 seeds)"
    assert dp_acc["ours − published"] == "3.53"
    tf_row = rows[(rows["our setting"] == f"{DP} (harmonised step, TF backend)")
                  & (rows["paper column"] == "accuracy_pct")].iloc[0]
    assert tf_row["published"] == "96.72" and tf_row["ours"].startswith("91.00 [")
    # the non-private settings were not among these runs
    assert (rows[rows["our setting"].str.startswith(NP)]["ours"] == "not run").all()
    # a verdict per row: 3 seeds of a measured figure give none; an epsilon needs no seeds
    assert dp_acc["verdict"] == "not comparable: 3 seeds, fewer than the 5 a verdict needs"
    assert (rows[rows["our setting"].str.startswith(NP)]["verdict"]
            .str.startswith("not comparable: ")).all()
    text = "\n".join(published_section(grid.published, frame))
    assert "Verdict per row: *reproduced* when" in text and "\nVerdict: " in text
    assert text.startswith("## Published vs ours")
    assert "85.47" in text and "96.72" in text and "Kotevska" in text
    assert "Deviations" in text and "Assumed where the paper is ambiguous" in text
    assert "0.0169" in text  # the sampling-rate deviation


def test_the_issues_saturated_example_stays_in_range() -> None:
    """Increase in Confidence 100, 100, 15 % over 3 seeds was printed "71.67 ± 120.62"
    (a t interval from -49 to 192 on a 0-100 metric); the bootstrap interval stays inside."""
    entry = {"paper": "interpretability_dp_gradcam", "table": "gaussian_table_1",
             "cells": [{"row": {"metric": "increase_in_confidence_pct"}, "column": "eps_1",
                        "setting": "cats_vs_dogs · gauss eps=1",
                        "metric": "increase_in_confidence", "backend": "tf"}]}
    runs = [fake_result(dataset="cats_vs_dogs", seed=s, point="gauss eps=1",
                        labels={"data": "cats_vs_dogs", "privacy": "gauss eps=1"},
                        faithfulness={"increase_in_confidence": v})
            for s, v in enumerate((100.0, 100.0, 15.0))]
    ours = comparison_rows(entry, results_frame(runs)).iloc[0]["ours"]
    mean, low, high = (float(v) for v in re.findall(r"[\d.]+", ours)[:3])
    assert mean == 71.67 and 0.0 <= low <= mean <= high <= 100.0


def test_a_paper_without_a_table_says_so() -> None:
    grid = expand_grid(load_preset("interpretability-clip-sweep"))
    text = "\n".join(published_section(grid.published, results_frame(_mnist_runs())))
    assert "has no table" in text and "Figure 6b" in text


def test_every_preset_reproducing_a_paper_names_its_table() -> None:
    for name in ("mnist-library-benchmark", "mnist-library-benchmark-15",
                 "imdb-library-benchmark", "imdb-library-benchmark-15",
                 "medical-ldp-vs-dpsgd", "medical-ldp-vs-dpsgd-cnn4",
                 "medical-ldp-vs-dpsgd-resnet18-short",
                 "interpretability-vs-epsilon-tuned", "interpretability-clip-sweep"):
        grid = expand_grid(load_preset(name))
        assert grid.published, name
        assert all(entry.get("deviations") for entry in grid.published), name


def _bad(change: str) -> dict:
    raw = copy.deepcopy(load_preset("mnist-library-benchmark-15"))
    cell = raw["published"][0]["cells"][0]
    if change == "setting":
        cell["setting"] = "15 epochs · DP (noise 9)"
    elif change == "column":
        cell["column"] = "accuracy_top5"
    elif change == "row":
        cell["row"] = {"library": "opacus", "epochs": 16, "private": True}
    elif change == "table":
        raw["published"][0]["table"] = "cifar_table"
    elif change == "metric":
        cell["metric"] = "f1"
    return raw


@pytest.mark.parametrize("change, fragment", [
    ("setting", "setting '15 epochs · DP (noise 9)' is not in the grid"),
    ("column", "column 'accuracy_top5' is not in the table"),
    ("row", "matches 0 rows"),
    ("table", "has no table 'cifar_table'"),
    ("metric", "metric 'f1' is not known"),
])
def test_a_published_entry_that_does_not_match_the_grid_is_one_line(change: str,
                                                                    fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand_grid(_bad(change))
    message = str(info.value)
    assert "\n" not in message and fragment in message
    assert message.startswith("published entry 0 (library_benchmark_kotevska/")


def test_the_cli_rejects_it_before_any_training(tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(_bad("column"), allow_unicode=True))
    out, report = tmp_path / "runs", tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "compare.cli.main", "compare", "--config", str(grid_file),
         "--out", str(out), "--report", str(report), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "published entry 0" in lines[0] and "accuracy_top5" in lines[0]
    assert not out.exists() and not report.exists()


def test_dpcompare_report_finds_the_presets_published_figures_from_the_runs() -> None:
    from compare.report import preset_published

    runs = _mnist_runs()
    for r in runs:
        r.grid = "mnist-library-benchmark-15"
    entries = preset_published(runs)
    assert entries and entries[0]["table"] == "mnist_table_I"
    runs[0].grid = "some-other-grid"
    assert preset_published(runs) == ()


def test_a_run_shared_with_another_preset_is_named_as_the_reported_grid_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """interpretability-vs-epsilon's 'gauss eps=1' cats runs are the clip sweep's 'C=1' runs
    (same config hash, stored once, with the labels of the sweep that trained them first):
    its report must name them 'gauss eps=1', and its published cells must find them."""
    from compare.report import ReportContext, write_report
    from dpcore.results import ResultsStore

    shared = [fake_result(dataset="cats_vs_dogs", backend=b, seed=s, point="C=1",
                          labels={"clip": "C=1", "data": "cats_vs_dogs"}, accuracy=0.6)
              for b in ("tf", "torch") for s in range(2)]
    own = [fake_result(dataset="cats_vs_dogs", backend=b, seed=s, point="gauss eps=5",
                       epsilon=5.0, labels={"data": "cats_vs_dogs", "privacy": "gauss eps=5"})
           for b in ("tf", "torch") for s in range(2)]
    # the fakes are not schema-complete RunResults: the store lists them as if read
    monkeypatch.setattr(ResultsStore, "list_runs", lambda self: [*shared, *own])
    labels = {r.run_id: {"data": "cats_vs_dogs", "privacy": "gauss eps=1"} for r in shared}
    labels.update({r.run_id: dict(r.labels) for r in own})
    published = ({"paper": "interpretability_dp_gradcam", "table": "gaussian_table_1",
                  "cells": [{"row": {"metric": "average_drop_pct"}, "column": "eps_1",
                             "setting": "cats_vs_dogs · gauss eps=1", "metric": "accuracy"}]},)
    context = ReportContext(command="test", labels=labels, published=published,
                            axis_order=("data", "privacy"))
    report = write_report(tmp_path / "runs", tmp_path / "report", context).read_text()
    summary = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert set(summary["setting"]) == {"cats_vs_dogs · gauss eps=1", "cats_vs_dogs · gauss eps=5"}
    assert "C=1" not in report
    row = next(line for line in report.splitlines()
               if line.startswith("| metric=average_drop_pct | eps_1 |") and "TF backend" in line)
    assert "not run" not in row and "60.00" in row
    # without the grid's labels the shared runs keep the sweep's name (what the bug showed)
    write_report(tmp_path / "runs", tmp_path / "plain", ReportContext(command="test"))
    assert "C=1 · cats_vs_dogs" in set(pd.read_csv(tmp_path / "plain" / "summary.csv")["setting"])
