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
    from compare.report import _time_section
    from compare.reporting.frames import results_frame
    from tests.compare.report_fakes import fake_result

    runs = [fake_result(backend=b, point=p) for b in ("tf", "torch") for p in ("a", "b")]
    for run, (mb, scope) in zip(runs, ((900.0, "run"), (1200.0, "run"),
                                       (1466.0, None), (1466.0, "process")), strict=True):
        run.timing.update({"peak_memory_mb": mb, "peak_memory_scope": scope})
    text = "\n".join(_time_section(results_frame(runs), tmp_path))
    rows = [_cells(line) for line in text.splitlines() if line.startswith("| ")]
    assert rows[0][-1].strip() == "median_peak_memory_mb"
    memory = {(row[0].strip()[-1], row[1].strip()): row[-1].strip() for row in rows[1:]}
    assert memory == {("a", "tf"): "900", ("b", "tf"): "1200", ("a", "torch"): "–",
                      ("b", "torch"): "–"}, rows  # row order follows the config hashes
    assert "2 of 4 runs recorded only the process-wide peak" in text


def test_the_faithfulness_table_shows_the_unmasked_score_that_bounds_it(tmp_path: Path) -> None:
    """A saturated model (score 0.99 on its unmasked images) cannot gain confidence: the table
    shows original_score beside Average Drop and says what it means."""
    from compare.report import FAITHFULNESS_COLUMNS_NOTE, _faithfulness_section, summary_table
    from compare.reporting.frames import results_frame
    from tests.compare.report_fakes import fake_result

    faith = {"average_drop": 40.0, "increase_in_confidence": 1.5, "original_score": 0.991,
             "masked_score": 0.56, "deletion_auc": 0.7, "insertion_auc": 0.9}
    runs = [fake_result(backend=b, seed=s, faithfulness=dict(faith))
            for b in ("tf", "torch") for s in (0, 1)]
    frame = results_frame(runs)
    text = "\n".join(_faithfulness_section(runs, frame, summary_table(frame), tmp_path,
                                           tmp_path, None))
    header = next(line for line in text.splitlines() if line.startswith("| setting"))
    columns = [c.strip() for c in _cells(header)]
    assert columns.index("average_drop") < columns.index("original_score") < \
        columns.index("masked_score")
    assert "0.991 ± 0.000" in text and FAITHFULNESS_COLUMNS_NOTE in text
