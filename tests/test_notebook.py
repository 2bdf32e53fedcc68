"""``examples/quickstart.ipynb`` cannot rot: its code cells run in order on the smoke grid.

No Jupyter kernel is needed: the cells are read with nbformat and executed in one namespace,
in a temporary folder (the notebook writes ``runs/smoke`` and ``reports/smoke`` there).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


def test_notebook_is_stored_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, "the notebook has no code cells"
    assert all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.slow
def test_notebook_code_cells_run_in_order(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")  # plt.show() draws nothing and does not block
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        try:
            exec(compile(cell.source, f"{NOTEBOOK.name}[cell {index}]", "exec"), namespace)
        except Exception as exc:  # name the cell that broke
            raise AssertionError(f"cell {index} failed: {type(exc).__name__}: {exc}\n"
                                 f"{cell.source}") from exc
    plt.close("all")

    # What the notebook promises: the grid ran, one row per run, a cross-framework model.
    df = namespace["df"]
    assert namespace["PRESET"] == "smoke"
    assert len(df) == 4 and set(df["backend"]) == {"tf", "torch"}
    assert (df["status"] == "finished").all()
    assert (tmp_path / "runs" / "smoke" / "runs").is_dir()
    assert (tmp_path / "reports" / "smoke" / "report.md").is_file()
    assert namespace["in_tf"].backend == "tf" and namespace["in_torch"].backend == "torch"
    np.testing.assert_allclose(namespace["p_tf"], namespace["p_torch"], atol=1e-4)
    maps = namespace["maps"]
    x = namespace["x"]
    assert maps.shape == x.shape[:3] and maps.min() >= 0.0 and maps.max() <= 1.0
