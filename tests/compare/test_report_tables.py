"""Markdown tables of the report keep one cell per column, whatever the values hold."""

from __future__ import annotations

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
