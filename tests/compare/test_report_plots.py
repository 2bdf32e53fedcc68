"""Report figures: one panel per data set (never pooled), the swept variable on x, a
non-private and a majority-class line per panel; per_class.csv has its classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from compare.reporting import plots
from compare.reporting.frames import per_class_frame, results_frame
from compare.reporting.stats import Interval
from tests.compare.report_fakes import as_scatternet_run, fake_result


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    figures: list[Figure] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    return figures


def _two_datasets() -> list:
    runs = []
    for dataset, base in (("mnist5k", 0.9), ("pneumoniamnist", 0.7)):
        for backend in ("tf", "torch"):
            for point, eps, mechanism, acc in (("eps=1", 1.0, "dpsgd-gaussian", base - 0.1),
                                               ("eps=8", 8.0, "dpsgd-gaussian", base),
                                               ("non-private", 0.0, "none", base + 0.05)):
                runs.append(fake_result(dataset=dataset, backend=backend, point=point,
                                        epsilon=eps, mechanism=mechanism, accuracy=acc))
    return runs


def _line_data(ax) -> list[tuple[np.ndarray, np.ndarray]]:
    """(x, y) of the labelled lines of ``ax`` (error-bar caps are unlabelled)."""
    return [(np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float))
            for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_one_panel_per_data_set_and_no_pooled_line(saved: list[Figure]) -> None:
    frame = results_frame(_two_datasets())
    assert set(frame["panel"]) == {"mnist5k", "pneumoniamnist"}
    assert plots.plot_metric_vs_swept(frame, "accuracy", Path("x.png"), "test accuracy")
    axes = saved[0].axes
    assert [ax.get_title() for ax in axes] == ["mnist5k", "pneumoniamnist"]
    for ax, base in zip(axes, (0.9, 0.7), strict=True):
        lines = _line_data(ax)
        curves = [(np.asarray(c.lines[0].get_xdata(), float),
                   np.asarray(c.lines[0].get_ydata(), float)) for c in ax.containers]
        assert sorted(c.get_label() for c in ax.containers) == [  # one DP line per backend
            "tf dpsgd-gaussian", "torch dpsgd-gaussian"]
        for x, y in curves:
            assert x == pytest.approx([1.0, 8.0], rel=0.05)  # dodged by backend
            assert y == pytest.approx([base - 0.1, base])
        flat = sorted(round(float(y[0]), 6) for x, y in lines if list(x) == [0.0, 1.0])
        # per panel: tf and torch non-private lines at base + 0.05, the majority rate 0.5
        assert flat == pytest.approx([0.5, base + 0.05, base + 0.05])


def test_the_clip_sweep_puts_the_clip_norm_on_x(saved: list[Figure]) -> None:
    runs = [fake_result(backend=b, point=f"C={c}", clip=c, epsilon=1.0, accuracy=0.6 + c / 10,
                        labels={"data": "pneumonia", "clip": f"C={c}"})
            for b in ("tf", "torch") for c in (0.1, 1.0, 5.0)]
    frame = results_frame(runs)
    assert plots.swept_variable(frame) == "max_grad_norm"
    assert plots.plot_metric_vs_swept(frame, "accuracy", Path("x.png"), "test accuracy")
    ax = saved[0].axes[0]
    assert "clip norm" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.1", "1", "5"]


def test_other_grid_axes_make_their_own_panels(saved: list[Figure]) -> None:
    runs = [fake_result(dataset="mnist", backend="tf", point=p, epsilon=e, accuracy=0.9,
                        labels={"epochs": ep, "privacy": p})
            for ep in ("15 epochs", "45 epochs") for p, e in (("DP", 3.0),)]
    frame = results_frame(runs)
    assert sorted(frame["panel"]) == ["15 epochs", "45 epochs"]
    assert plots.plot_by_setting(frame, "accuracy", Path("x.png"), "accuracy")
    assert len(saved[0].axes) == 2


def test_per_class_table_has_the_class_names(saved: list[Figure]) -> None:
    per_class = per_class_frame(_two_datasets())
    assert set(per_class["class"]) == {"cat", "dog"}
    assert per_class["class"].notna().all()
    assert plots.plot_per_class(per_class, set(), Path("x.png"))
    labels = [t.get_text() for t in saved[0].axes[0].get_xticklabels()]
    assert labels == ["cat", "dog"]


def test_learning_curves_come_from_each_runs_history(saved: list[Figure]) -> None:
    from compare.reporting.frames import history_frame

    history = history_frame(_two_datasets())
    assert isinstance(history, pd.DataFrame) and len(history) == 12 * 3
    assert plots.plot_lines_per_run(history, "epoch", [("test_accuracy", "acc")],
                                    Path("x.png"), "epoch")
    assert [ax.get_title() for ax in saved[0].axes] == ["mnist5k", "pneumoniamnist"]


def test_one_swept_value_is_a_point_not_a_curve(saved: list[Figure]) -> None:
    """One epsilon only (one setting, or recipes whose epsilons differ in the third digit):
    no privacy-utility curve is drawn; the by-setting figure shows those runs."""
    single = [fake_result(backend=b, point="DP", epsilon=3.44, accuracy=0.87)
              for b in ("tf", "torch")]
    close = [fake_result(backend="tf", point=p, epsilon=e, accuracy=0.9)
             for p, e in (("a", 6.92), ("b", 6.93), ("c", 6.98))]
    for runs in (single, close):
        frame = results_frame(runs)
        assert not plots.plot_metric_vs_swept(frame, "accuracy", Path("x.png"), "test accuracy")
        assert plots.plot_by_setting(frame, "accuracy", Path("x.png"), "test accuracy")


def test_close_ticks_of_a_curve_are_not_labelled_on_top_of_each_other(
        saved: list[Figure]) -> None:
    runs = [fake_result(backend="tf", point=f"eps={e}", epsilon=e, accuracy=0.5 + e / 100)
            for e in (1.0, 1.05, 8.0)]
    assert plots.plot_metric_vs_swept(results_frame(runs), "accuracy", Path("x.png"),
                                      "test accuracy")
    labels = [t.get_text() for t in saved[0].axes[0].get_xticklabels()]
    assert labels == ["1", "", "8"]


def _faithfulness_runs(verdict_of_eps8: str) -> list:
    runs = []
    for backend in ("tf", "torch"):
        for point, eps, mechanism in (("eps=1", 1.0, "dpsgd-gaussian"),
                                      ("eps=8", 8.0, "dpsgd-gaussian"),
                                      ("non-private", 0.0, "none")):
            run = fake_result(backend=backend, point=point, epsilon=eps, mechanism=mechanism,
                              accuracy=0.8)
            verdict = verdict_of_eps8 if point != "eps=1" else "passes"
            spearman = 0.9 if verdict == "fails" else 0.1
            run.faithfulness = {"average_drop": 30.0 + eps, "increase_in_confidence": 10.0,
                                "randomisation_check": {"spearman_median": spearman,
                                                        "ssim_median": spearman,
                                                        "passes": verdict == "passes"}}
            runs.append(run)
    return runs


@pytest.mark.parametrize("draw", [plots.plot_metric_vs_swept, plots.plot_by_setting])
def test_explanations_that_fail_the_randomisation_check_are_circled(
        saved: list[Figure], draw) -> None:
    """A faithfulness point (and the non-private reference) whose explanations fail the
    model-randomisation check is circled and named in the legend; a passing one is not, and
    an accuracy figure never is."""
    frame = results_frame(_faithfulness_runs("fails"))
    assert set(frame["randomisation_check"]) == {"passes", "fails"}
    assert draw(frame, "average_drop", Path("x.png"), "Average Drop %")
    labels = saved[-1].legends[0].get_texts()
    assert plots.FAILS_CHECK_LABEL in [t.get_text() for t in labels]
    rings = [c for ax in saved[-1].axes for c in ax.collections
             if c.get_label() == plots.FAILS_CHECK_LABEL]
    # eps=8 of tf and of torch; the by-setting figure also has the non-private points
    expected = 2 if draw is plots.plot_metric_vs_swept else 4
    assert sum(len(c.get_offsets()) for c in rings) == expected
    if draw is plots.plot_metric_vs_swept:
        assert any("non-private (mean, fails the randomisation check)" in t.get_text()
                   for t in labels)
    for frame_without, metric in ((results_frame(_faithfulness_runs("passes")), "average_drop"),
                                  (frame, "accuracy")):
        assert draw(frame_without, metric, Path("x.png"), "y")
        assert plots.FAILS_CHECK_LABEL not in [t.get_text()
                                               for t in saved[-1].legends[0].get_texts()]


def test_panels_and_points_follow_the_preset_axis_order_not_the_alphabet() -> None:
    """Stored labels come back sorted by axis name ('clip' < 'data'); the report puts them in
    the grid's order, so the clip sweep has one panel per data set and the clip norm on x."""
    from compare.grid import in_axis_order

    runs = [fake_result(dataset=d, backend=b, point=f"C={c:g}", clip=c,
                        labels={"clip": f"C={c:g}", "data": d})
            for d in ("cats_vs_dogs", "pneumoniamnist") for b in ("tf", "torch")
            for c in (0.1, 1.0, 5.0)]
    stored = results_frame(runs)
    assert set(stored["panel"]) == {"C=0.1", "C=1", "C=5"}  # the bug: panels per clip norm
    frame = results_frame(in_axis_order(runs, ("data", "clip")))
    assert set(frame["panel"]) == {"cats_vs_dogs", "pneumoniamnist"}
    assert set(frame["point"]) == {"C=0.1", "C=1", "C=5"}
    assert "cats_vs_dogs · C=0.1" in set(frame["setting"])
    assert plots.swept_variable(frame) == "max_grad_norm"
    # without an order and without a bundled preset of that name, labels stay as stored
    assert results_frame(in_axis_order(runs, ()))["panel"].tolist() == stored["panel"].tolist()


def test_bundled_preset_gives_the_axis_order_when_the_report_has_none() -> None:
    from dataclasses import replace

    from compare.grid import in_axis_order

    run = replace(fake_result(labels={"clip": "C=1", "data": "cats_vs_dogs"}),
                  grid="interpretability-clip-sweep")
    (ordered,) = in_axis_order([run], ())
    assert list(ordered.labels) == ["data", "clip"]


def test_learning_curves_give_a_point_the_same_colour_in_every_panel(
        saved: list[Figure]) -> None:
    """The legend is shared by the panels, so a point's colour must not depend on the order
    its runs appear in within a panel (it did: the pneumonia panel of the clip sweep showed
    the collapsed C=0.1 curve in C=1's colour)."""
    from compare.reporting.frames import history_frame

    first = [fake_result(dataset="a", point=p, labels={"data": "a", "clip": p}, accuracy=acc)
             for p, acc in (("C=0.1", 0.5), ("C=1", 0.9))]
    second = [fake_result(dataset="b", point=p, labels={"data": "b", "clip": p}, accuracy=acc)
              for p, acc in (("C=1", 0.8), ("C=0.1", 0.6))]  # the other order
    assert plots.plot_lines_per_run(history_frame(first + second), "epoch",
                                    [("test_accuracy", "test accuracy")], Path("x.png"), "epoch")
    colour = {}
    for ax in saved[0].axes[:2]:
        for line in ax.get_lines():
            label = line.get_label()
            assert colour.setdefault(label, line.get_color()) == line.get_color(), label
        labels = [line.get_label() for line in ax.get_lines()]
        assert labels == ["C=0.1 (tf)", "C=1 (tf)"]  # natural order, not the runs' order
    assert colour["C=0.1 (tf)"] != colour["C=1 (tf)"]


def test_panels_are_in_natural_order(saved: list[Figure]) -> None:
    """'15 epochs' before '45 epochs' whatever order the runs come in (the learning curves of
    the library benchmark showed 45, 60, 15)."""
    from compare.reporting.frames import history_frame

    runs = [fake_result(dataset="mnist", point="DP", labels={"epochs": e, "privacy": "DP"})
            for e in ("45 epochs", "60 epochs", "15 epochs")]
    assert plots.plot_lines_per_run(history_frame(runs), "epoch",
                                    [("test_accuracy", "test accuracy")], Path("x.png"), "epoch")
    titles = [ax.get_title() for ax in saved[0].axes if ax.get_title()]
    assert titles == ["15 epochs", "45 epochs", "60 epochs"]


def test_the_results_table_names_settings_in_the_preset_axis_order(tmp_path: Path) -> None:
    """``compare.api.results`` (dpcompare results) reads the store through the same ordering
    as the report, so a clip-sweep run is 'cats_vs_dogs · C=1' in both, not 'C=1 · ...'."""
    from dataclasses import replace

    from compare import tidy
    from dpcore.results import ResultsStore
    from tests.compare.attribution_fakes import make_run

    store = ResultsStore(tmp_path)  # a schema-valid run, labelled as the clip sweep's
    store.save(replace(make_run("harmonised tf", 0, 0.8),
                       labels={"clip": "C=1", "data": "cats_vs_dogs"},
                       grid="interpretability-clip-sweep"))
    (run,) = tidy.load_results(tmp_path)
    assert list(run.labels) == ["data", "clip"]
    assert tidy.results_table([run])["setting"].tolist() == ["cats_vs_dogs · C=1"]


def test_settings_that_share_an_epsilon_are_not_pooled_into_one_point(
        saved: list[Figure]) -> None:
    """Factor flips at one epsilon (mnist-gap-attribution) or two models at epsilon 3
    (mnist-tuned) are no curve of epsilon: their panel is left out, not averaged into a point."""
    flips = [fake_result(dataset="mnist", backend="tf", point=p, epsilon=3.44, accuracy=acc,
                         labels={"configuration": p})
             for p, acc in (("harmonised", 0.88), ("flip: k=32", 0.95))]
    assert not plots.plot_metric_vs_swept(results_frame(flips), "accuracy", Path("x.png"),
                                          "test accuracy")
    assert not saved
    # beside a panel that is a curve, only that panel is drawn
    curve = [fake_result(dataset="pneumoniamnist", backend="tf", point=p, epsilon=e,
                         accuracy=0.8, labels={"data": "pneumonia", "privacy": p})
             for p, e in (("eps=1", 1.0), ("eps=8", 8.0))]
    # the epsilons mnist-tuned's two models were calibrated to (target 3): one value
    pooled = [fake_result(dataset="mnist", backend="tf", point=p, epsilon=e, accuracy=0.9,
                          labels={"data": "mnist", "privacy": p})
              for p, e in (("cnn4 eps=3", 2.9999505970506304),
                           ("scatter eps=3", 2.9999941849228247))]
    assert plots.plot_metric_vs_swept(results_frame(curve + pooled), "accuracy", Path("x.png"),
                                      "test accuracy")
    assert [ax.get_title() for ax in saved[0].axes if ax.get_visible()] == ["pneumonia"]


def test_two_non_private_settings_get_a_line_each_not_a_pooled_one(saved: list[Figure]) -> None:
    """cats-vs-dogs-tuned has a non-private run with the private settings and a tuned one."""
    from compare.reporting.headline import privacy_cost_sentence

    runs = [fake_result(dataset="cats_vs_dogs", backend=b, point=p, epsilon=e, mechanism=m,
                        accuracy=acc, labels={"privacy": p})
            for b in ("tf", "torch")
            for p, e, m, acc in (("eps=1", 1.0, "dpsgd-gaussian", 0.60),
                                 ("eps=8", 8.0, "dpsgd-gaussian", 0.69),
                                 ("non-private", 0.0, "none", 0.70),
                                 ("non-private (tuned)", 0.0, "none", 0.80))]
    frame = results_frame(runs)
    assert plots.plot_metric_vs_swept(frame, "accuracy", Path("x.png"), "test accuracy")
    flat = sorted((line.get_label(), round(float(line.get_ydata()[0]), 6))
                  for line in saved[0].axes[0].get_lines()
                  if "non-private" in str(line.get_label()))
    assert flat == [("tf non-private (mean)", 0.7), ("tf non-private (tuned) (mean)", 0.8),
                    ("torch non-private (mean)", 0.7),
                    ("torch non-private (tuned) (mean)", 0.8)]
    sentence = privacy_cost_sentence(frame)
    assert sentence is not None
    assert "tf 0.690 vs 0.700 (non-private), 0.800 (non-private (tuned))" in sentence


def test_a_collapsed_non_private_reference_says_so_in_the_legend(saved: list[Figure]) -> None:
    """A non-private cnn4 that predicts one class has Average Drop 0: its reference line must
    not read as a perfectly faithful model."""
    one_class = [{"index": k, "name": n, "support": 50, "recall": r, "precision": p,
                  "auc": 0.5} for k, (n, r, p) in enumerate((("cat", 1.0, 0.5),
                                                             ("dog", 0.0, float("nan"))))]
    runs = [fake_result(backend=b, point=p, epsilon=e, mechanism=m,
                        accuracy=0.9 if m == "none" and b == "torch" else a,
                        classes=one_class if m == "none" and b == "tf" else None)
            for b in ("tf", "torch")
            for p, e, m, a in (("eps=1", 1.0, "dpsgd-gaussian", 0.7),
                               ("eps=8", 8.0, "dpsgd-gaussian", 0.8),
                               ("non-private", 0.0, "none", 0.5))]
    frame = results_frame(runs)
    assert plots.plot_metric_vs_swept(frame, "accuracy", Path("x.png"), "test accuracy")
    labels = {line.get_label() for line in saved[0].axes[0].get_lines()}
    assert "tf non-private (mean, collapsed)" in labels
    assert "torch non-private (mean)" in labels


def test_paired_differences_show_every_seed_and_the_agreement_band(
        saved: list[Figure]) -> None:
    """One panel per data set, one row per setting: a dot per seed at torch minus tf (points),
    the mean with its interval, and the ±1 point band."""
    runs = [fake_result(dataset=d, backend=b, seed=s, point=p,
                        accuracy=0.8 + (0.01 * (s % 3 + 1) if b == "torch" and p == "eps=1"
                                        else 0))
            for d in ("a", "b") for b in ("tf", "torch") for s in range(6)
            for p in ("eps=1", "eps=8")]
    frame = results_frame(runs)
    assert plots.plot_paired_differences(frame, Path("x.png"), 0.01)
    axes = saved[0].axes[:2]
    assert [ax.get_title() for ax in axes] == ["a", "b"]
    for ax in axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == ["eps=1", "eps=8"]
        dots = [c for c in ax.collections if c.get_label() == "one seed"]
        assert [sorted(np.round(c.get_offsets()[:, 0], 6)) for c in dots] == [
            [1.0, 1.0, 2.0, 2.0, 3.0, 3.0], [0.0] * 6]
        means = [c.lines[0].get_xdata()[0] for c in ax.containers]
        assert means == pytest.approx([2.0, 0.0])
        band = [p for p in ax.patches if p.get_label().startswith("agreement band")]
        assert len(band) == 1
    assert not plots.plot_paired_differences(results_frame(runs[:12]), Path("y.png"), 0.01)


def test_fewer_than_five_seeds_show_no_interval_and_the_axis_keeps_the_seeds(
        saved: list[Figure]) -> None:
    """A 2-seed grid: differences of -1 and +1.2 points give a 95% t interval of about
    -14 to +14 points (t = 12.7), which squeezed the seeds and the ±1-point band into a line.
    Below 5 seeds the mean is drawn without an interval, and the axis spans the seeds."""
    runs = [fake_result(backend=b, seed=s,
                        accuracy=0.8 + ({0: -0.01, 1: 0.012}[s] if b == "torch" else 0))
            for b in ("tf", "torch") for s in range(2)]
    assert plots.plot_paired_differences(results_frame(runs), Path("x.png"), 0.01)
    ax = saved[0].axes[0]
    assert not ax.containers  # no error bar
    hollow = [c for c in ax.collections if c.get_label() == plots.FEW_SEEDS_LABEL]
    assert len(hollow) == 1 and hollow[0].get_offsets()[0, 0] == pytest.approx(0.1)
    low, high = ax.get_xlim()
    assert -1.3 < low < -1.0 and 1.2 < high < 1.5
    saved.clear()  # one seed: its dot alone, no mean drawn on top of it
    assert plots.plot_paired_differences(results_frame([runs[0], runs[2]]), Path("y.png"), 0.01)
    ax = saved[0].axes[0]
    assert not ax.containers and [c.get_label() for c in ax.collections] == ["one seed"]


def test_an_interval_far_beyond_the_seeds_is_drawn_off_scale() -> None:
    """The axis spans the seeds and the band, and an interval as far as half that range
    beyond; a wider one is cut at the edge, with an arrow and its bound written there."""
    wide = Interval(8.0, -300.0, 316.0, 5)
    low, high = plots.paired_axis_limits([np.array([0.0, 0.0, 0.0, 0.0, 40.0])], [wide], 1.0)
    assert (low, high) == pytest.approx((-21.5 - 4.1, 60.5 + 4.1))
    inside = Interval(1.0, -2.0, 3.0, 5)
    assert plots.paired_axis_limits([np.array([-1.0, 2.0])], [inside], 1.0) == \
        pytest.approx((-2.25, 3.25))
    fig = Figure()
    ax = fig.subplots()
    plots._clipped_interval(ax, wide, 0.0, low, high)
    arrows = [c for c in ax.collections if c.get_label() == plots.OFF_SCALE_LABEL]
    assert [tuple(c.get_offsets()[0]) for c in arrows] == [(low, 0.0), (high, 0.0)]
    assert [t.get_text() for t in ax.texts] == ["-300.0", "+316.0"]
    bar = ax.containers[0].lines[2][0].get_segments()[0]  # the error bar stops at the edges
    assert bar[0][0] == pytest.approx(low) and bar[1][0] == pytest.approx(high)


def test_the_epoch_time_figure_labels_settings_that_computed_the_front_end_every_step(
        saved: list[Figure]) -> None:
    runs = []
    for point, cached, seconds in (("non-private", False, 6.0), ("eps=5", True, 0.1)):
        run = fake_result(point=point, mechanism="none" if point == "non-private" else
                          "dpsgd-gaussian")
        run.timing = {"epoch_seconds": [20.0, seconds, seconds]}
        runs.append(as_scatternet_run(run, cached))
    assert plots.plot_epoch_time(results_frame(runs), Path("unused.png"))
    labels = [t.get_text() for t in saved[0].axes[0].get_yticklabels()]
    assert [label.replace("\n", " ") for label in labels] == [
        "eps=5", "non-private" + plots.EVERY_STEP_SUFFIX]
    saved.clear()
    for run in runs:
        as_scatternet_run(run, cached=False)
    assert plots.plot_epoch_time(results_frame(runs), Path("unused.png"))
    assert [t.get_text() for t in saved[0].axes[0].get_yticklabels()] == ["eps=5", "non-private"]


def test_error_bars_stay_inside_the_metrics_range(saved: list[Figure]) -> None:
    """Increase in Confidence 100, 100, 15 over 3 seeds: a t interval drew bars from -50 to
    190; the percentile bootstrap bars stay within the seeds' values, so within [0, 100]."""
    runs = [fake_result(backend=b, seed=s, point=f"eps={e}", epsilon=e,
                        faithfulness={"increase_in_confidence": v})
            for b in ("tf", "torch") for e in (1.0, 8.0)
            for s, v in enumerate((100.0, 100.0, 15.0))]
    frame = results_frame(runs)
    for draw in (plots.plot_metric_vs_swept, plots.plot_by_setting):
        saved.clear()
        assert draw(frame, "increase_in_confidence", Path("x.png"), "IC %")
        ends = [value for container in saved[0].axes[0].containers
                for segment in container.lines[2][0].get_segments()
                for value in segment[:, 1 if draw is plots.plot_metric_vs_swept else 0]]
        assert ends and min(ends) >= 15.0 and max(ends) <= 100.0
        assert min(ends) < 70.0 < max(ends)  # a real interval, not a zero-width bar


def test_the_curve_caption_names_only_the_reference_lines_the_panels_have() -> None:
    from compare.reporting.accuracy_section import curve_caption

    with_public = results_frame(_two_datasets())
    assert curve_caption(with_public).startswith("Privacy-utility curve")
    assert "dashed: non-private" in curve_caption(with_public)
    private_only = with_public[with_public["mechanism"] != "none"]
    assert "dashed" not in curve_caption(private_only)
    clip_sweep = results_frame([
        fake_result(backend=b, point=f"C={c}", clip=c, epsilon=1.0, accuracy=0.6,
                    labels={"data": "pneumonia", "clip": f"C={c}"})
        for b in ("tf", "torch") for c in (0.1, 1.0, 5.0)])
    assert "clip norm" in curve_caption(clip_sweep)
    assert "Privacy-utility" not in curve_caption(clip_sweep)


def test_a_data_set_without_a_curve_is_drawn_setting_by_setting(saved: list[Figure]) -> None:
    """Every data set is in one of the two figures: mnist5k (epsilon 1 and 8) against
    epsilon, cats_vs_dogs (one epsilon) by setting; none in both."""
    runs = [r for r in _two_datasets() if r.labels["data"] == "mnist5k"]
    runs += [fake_result(dataset="cats_vs_dogs", backend=b, point=p, epsilon=e, mechanism=m)
             for b in ("tf", "torch")
             for p, e, m in (("eps=0.5", 0.5, "dpsgd-gaussian"), ("non-private", 0.0, "none"))]
    frame = results_frame(runs)
    assert plots.curve_panels(frame, "accuracy") == ["mnist5k"]
    rest = plots.not_curve_rows(frame, "accuracy")
    assert set(rest["panel"]) == {"cats_vs_dogs"}
    assert plots.plot_metric_vs_swept(frame, "accuracy", Path("x.png"), "test accuracy")
    assert plots.plot_by_setting(rest, "accuracy", Path("x.png"), "test accuracy")
    assert [ax.get_title() for ax in saved[0].axes] == ["mnist5k"]
    assert [ax.get_title() for ax in saved[1].axes] == ["cats_vs_dogs"]


def test_the_error_bar_label_says_one_seed_has_no_interval() -> None:
    from compare.reporting.stats import ERROR_BARS, error_bars_phrase

    one_seed = results_frame(_two_datasets())
    assert error_bars_phrase(one_seed) == "one seed: no interval"
    three = results_frame([fake_result(backend=b, seed=s, point=p, epsilon=e)
                           for b in ("tf", "torch") for s in range(3)
                           for p, e in (("eps=1", 1.0), ("eps=8", 8.0))])
    assert error_bars_phrase(three) == ERROR_BARS
    mixed = results_frame([*(fake_result(backend="tf", seed=s) for s in range(3)),
                           fake_result(backend="tf", point="eps=8", epsilon=8.0)])
    assert error_bars_phrase(mixed) == f"{ERROR_BARS}; none for a setting of one seed"


def test_local_dp_runs_of_a_curve_panel_are_drawn_setting_by_setting() -> None:
    """Local-DP runs spend no central epsilon, so the curve cannot place them: the by-setting
    figure has them (and only them) for a panel whose DP-SGD runs form a curve."""
    runs = _two_datasets() + [
        fake_result(dataset="mnist5k", backend=b, point="LDP b=1", epsilon=0.0,
                    mechanism="ldp") for b in ("tf", "torch")]
    frame = results_frame(runs)
    assert plots.curve_panels(frame, "accuracy") == ["mnist5k", "pneumoniamnist"]
    assert set(plots.not_curve_rows(frame, "accuracy")["point"]) == {"LDP b=1"}


def test_the_error_bar_label_counts_seeds_per_panel_not_per_setting_name() -> None:
    """'non-private' with 3 seeds on one data set and 1 on another: one setting has no
    interval, although the name alone has 3 seeds."""
    from compare.reporting.stats import ERROR_BARS, error_bars_phrase

    runs = [fake_result(dataset="a", seed=s, point="non-private", mechanism="none")
            for s in range(3)]
    runs.append(fake_result(dataset="b", seed=0, point="non-private", mechanism="none"))
    assert (error_bars_phrase(results_frame(runs))
            == f"{ERROR_BARS}; none for a setting of one seed")


def test_rows_of_long_wrapped_labels_are_taller(saved: list[Figure]) -> None:
    """Settings named in four wrapped lines (audit-check's '[deliberately broken] [PRIVACY
    VIOLATION]') get taller rows than one-line names, in both figures of settings on y."""
    long_name = "harmonised, fault: no clipping [deliberately broken] [PRIVACY VIOLATION]"
    heights = []
    for name in ("honest", long_name):
        runs = [fake_result(backend=b, seed=s, point=name, accuracy=0.8 + 0.01 * s * (b == "tf"))
                for b in ("tf", "torch") for s in range(3)]
        frame = results_frame(runs)
        assert plots.plot_by_setting(frame, "accuracy", Path("x.png"), "accuracy")
        assert plots.plot_paired_differences(frame, Path("x.png"), 1.0)
        heights.append([fig.get_size_inches()[1] for fig in saved[-2:]])
    assert all(tall > short for short, tall in zip(*heights, strict=True))


def test_a_training_set_figure_is_never_read_off_a_test_accuracy_axis() -> None:
    """A gap attribution's "training-set accuracy" flip reports training-set figures: in the
    by-setting figure its setting is marked and the axis names both splits; a grid measured
    on the test set alone keeps "test"."""
    from compare.reporting.frames import TRAINING_SET_MARK, marked_splits

    runs = [fake_result(backend="tf", point=p, epsilon=1.0) for p in ("harmonised", "flip")]
    runs[1].dataset["extra"] = {"eval_split": "train"}
    frame = results_frame(runs)
    assert dict(zip(frame["point"], frame["eval_split"], strict=True)) == {
        "harmonised": "test", "flip": "train"}
    on_test, on_train = frame[frame["point"] == "harmonised"], frame[frame["point"] == "flip"]
    marked, split = marked_splits(frame)
    assert set(marked["setting"]) == {on_test["setting"].iloc[0],
                                      on_train["setting"].iloc[0] + TRAINING_SET_MARK}
    assert set(marked["point"]) == {"harmonised", "flip" + TRAINING_SET_MARK}
    assert split.startswith("test-set") and "training set where marked" in split
    same, split = marked_splits(on_test)
    assert split == "test" and same["setting"].equals(on_test["setting"])
    assert marked_splits(on_train)[1] == "training-set"


def test_the_accuracy_section_draws_a_training_set_run_on_a_marked_axis(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the accuracy section: the by-setting figure's x label names both splits and
    the training-set setting's row label carries the mark."""
    from compare.reporting.accuracy_section import accuracy
    from compare.reporting.frames import TRAINING_SET_MARK
    from tests.compare.report_fakes import render_section

    runs = [fake_result(backend="tf", seed=s, point=p, labels={"data": "mnist", "run": p})
            for p in ("harmonised", "flip") for s in range(2)]
    for run in runs[2:]:
        run.dataset["extra"] = {"eval_split": "train"}
    drawn: list[Figure] = []
    real = plots.by_setting_figure
    monkeypatch.setattr(plots, "by_setting_figure",
                        lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    render_section(accuracy, runs)
    ax = drawn[0].axes[0]
    assert "training set where marked" in ax.get_xlabel().replace("\n", " ")
    assert not ax.get_xlabel().startswith("test accuracy")
    rows = [t.get_text().replace("\n", " ") for t in ax.get_yticklabels()]
    assert any(row.endswith(TRAINING_SET_MARK.strip()) for row in rows), rows


def test_the_by_setting_figure_shows_every_seed_behind_its_mean() -> None:
    """20 seeds of one setting (pneumonia-noise-draws): the figure draws each seed's value
    as a dot beside the mean and its interval, with one legend entry for them; a one-seed
    setting draws no dots."""
    accuracies = [0.70 + 0.01 * s for s in range(20)]
    runs = [fake_result(backend=b, seed=s, accuracy=a)
            for b in ("tf", "torch") for s, a in enumerate(accuracies)]
    fig = plots.by_setting_figure(results_frame(runs), "accuracy", "test accuracy")
    assert fig is not None
    from matplotlib.collections import PathCollection

    dots = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
    drawn = sorted(round(float(x), 6) for c in dots for x in c.get_offsets()[:, 0])
    assert drawn == sorted(round(a, 6) for a in accuracies * 2)
    assert "one seed (small dots)" in [t.get_text() for t in fig.legends[0].get_texts()]
    single = plots.by_setting_figure(results_frame(runs[:1]), "accuracy", "test accuracy")
    assert single is not None
    assert not [c for c in single.axes[0].collections if isinstance(c, PathCollection)]


def test_twelve_learning_curves_are_told_apart_by_colour_or_marker(
        saved: list[Figure]) -> None:
    """mnist-gap-attribution has 11 settings: with tab20 two of them were light and dark
    shades of one hue. Now no two settings share both colour and marker."""
    from compare.reporting.frames import history_frame

    names = [f"s{i:02d}" for i in range(12)]
    runs = [fake_result(dataset="mnist", point=p, labels={"data": "mnist", "run": p})
            for p in names]
    assert plots.plot_lines_per_run(history_frame(runs), "epoch",
                                    [("test_accuracy", "test accuracy")], Path("x.png"), "epoch")
    styles = [(line.get_color(), line.get_marker()) for line in saved[0].axes[0].get_lines()]
    assert len(styles) == 12 and len(set(styles)) == 12
    assert len({colour for colour, _marker in styles}) == 10  # tab10's distinct hues


def test_the_learning_curves_mark_a_training_set_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that reports training-set figures (eval_split: train) is marked in the legend
    and the section says what the mark means; history.csv keeps the setting's own name."""
    from compare.reporting.curves_section import learning_curves
    from compare.reporting.frames import TRAINING_SET_MARK
    from tests.compare.report_fakes import render_section

    runs = [fake_result(backend="tf", point=p, labels={"data": "mnist", "run": p})
            for p in ("harmonised", "flip")]
    runs[1].dataset["extra"] = {"eval_split": "train"}
    drawn: list[Figure] = []
    real = plots.lines_per_run_figure
    monkeypatch.setattr(plots, "lines_per_run_figure",
                        lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    out = render_section(learning_curves, runs)
    assert any(TRAINING_SET_MARK.strip() in line and "training set" in line
               for line in out.lines)
    assert not out.tables["history.csv"]["setting"].str.contains("training set").any()
    labels = [line.get_label() for line in drawn[0].axes[0].get_lines()]
    assert sorted(labels) == sorted(["flip" + TRAINING_SET_MARK + " (tf)", "harmonised (tf)"])
    assert drawn[0].axes[0].get_ylabel() == "accuracy"
