"""A report is a pipeline of sections: each a pure function of the report data (it writes
nothing), one writer for every file, and a new section (with a table and a figure) is one
registered function."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from compare.report import render_report
from compare.report_context import ReportContext
from compare.reporting import pipeline
from compare.reporting.section import SECTIONS, ReportData, SectionOutput, add, section
from compare.reporting.writer import write_report_files
from dpcore.errors import ConfigError
from tests.compare.report_fakes import fake_result


def _runs() -> list:
    return [fake_result(backend=b, seed=s, point=p, epsilon=e, mechanism=m)
            for b in ("tf", "torch") for s in (0, 1)
            for p, e, m in (("eps=1", 1.0, "dpsgd-gaussian"), ("none", float("inf"), "none"))]


def test_every_section_follows_the_protocol_and_has_its_place_in_the_reading_order() -> None:
    sections = pipeline.report_sections()
    names = [s.name for s in sections]
    assert len(names) == len(set(names)) and all(names)
    assert all(callable(s.render) for s in sections)
    # every registered section has its place; the header is not one (it always comes first)
    assert sections == pipeline.READING_ORDER and set(SECTIONS) == set(names)
    assert names[:3] == ["headline", "published", "findings"] and names[-1] == "all runs"
    assert pipeline.section_named("time").name == "time" and "header" not in SECTIONS
    with pytest.raises(ConfigError, match=r"report section='tme' is not known to the report "
                                          r"sections \(did you mean 'time'\?\); valid: "):
        pipeline.section_named("tme")


def test_sections_write_nothing_and_return_tables_and_drawn_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = pipeline.report_data(_runs(), ReportContext(command="test"))
    outputs = pipeline.render_sections(data)
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere a section could reach
    tables = {name for out in outputs for name in out.tables}
    figures = [f.name for out in outputs for f in out.figures]
    assert {"runs.csv", "summary.csv", "epsilon.csv", "history.csv", "per_class.csv"} <= tables
    assert {"accuracy_by_setting.png", "learning_curves.png", "per_class.png"} <= set(figures)
    assert len(figures) == len(set(figures))
    text = "\n".join(line for out in outputs for line in out.lines)
    for name in figures:  # every figure drawn is shown, and only those
        assert f"]({name})" in text


@pytest.fixture
def unregister_toy() -> Iterator[str]:
    """The name of the toy section, unregistered after the test."""
    try:
        yield "toy"
    finally:
        SECTIONS.unregister("toy")


def test_a_new_section_is_one_registered_function(tmp_path: Path, unregister_toy: str) -> None:
    """A toy section with a table and a figure, registered by ``@section``, appears in
    report.md (after the sections of the reading order), its CSV and PNG are written by the
    writer, and its figure's digest goes into the records."""

    @section(unregister_toy)
    def toy(data: ReportData) -> SectionOutput:
        counts = data.frame.groupby("backend").size().rename("runs").reset_index()
        fig = Figure(figsize=(3, 2))
        FigureCanvasAgg(fig)
        fig.subplots().bar(counts["backend"], counts["runs"])
        figures: list = []
        assert add(figures, "toy.png", fig) and not add(figures, "none.png", None)
        return SectionOutput(["## Toy", "", "![toy](toy.png)", ""], {"toy.csv": counts},
                             figures)

    assert pipeline.report_sections()[-1] is toy
    path = render_report(_runs(), ReportContext(command="test"), tmp_path / "r")
    assert path.read_text().rstrip().endswith("## Toy\n\n![toy](toy.png)")
    assert pd.read_csv(tmp_path / "r" / "toy.csv").to_dict("list") == {
        "backend": ["tf", "torch"], "runs": [4, 4]}
    assert (tmp_path / "r" / "toy.png").stat().st_size > 0
    assert "toy.png" in json.loads((tmp_path / "r" / "records" / "figures.json").read_text())


def test_the_writer_writes_tables_figures_and_markdown_in_order(tmp_path: Path) -> None:
    written: list[Path] = []
    from compare.reporting.section import drawn_figure

    def draw(path: Path) -> None:
        path.write_bytes(b"png")
        written.append(path)

    outputs = [SectionOutput(["# Title", ""], {"a.csv": pd.DataFrame({"x": [1, 2]})}),
               SectionOutput(["## Part", "text"], {},
                             [drawn_figure("sub/fig.png", draw)])]
    path = write_report_files(tmp_path / "out", outputs)
    assert path.read_text(encoding="utf-8") == "# Title\n\n## Part\ntext\n"
    assert (tmp_path / "out" / "a.csv").read_text() == "x\n1\n2\n"
    assert written == [tmp_path / "out" / "sub" / "fig.png"]
    assert sorted(os.listdir(tmp_path / "out")) == ["a.csv", "report.md", "sub"]
