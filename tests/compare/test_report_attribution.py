"""The gap-attribution section on hand-made runs: arithmetic checked by hand, wording rules,
the chart, and bad input."""

from __future__ import annotations

import math
import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from compare.grid import load_preset
from compare.report import ReportContext, write_report
from compare.reporting.attribution import (
    REACH_TOLERANCE,
    AttributionError,
    attribute,
    configurations,
    difference,
    has_recipe_axis,
)
from compare.reporting.attribution_section import (
    attribution_section,
    configuration_table,
    effects_figure,
)
from compare.reporting.attribution_section import effects_table as attribution_effects
from compare.reporting.attribution_text import conclusion
from compare.reporting.stats import contrast_interval
from dpcore.accounting import dpsgd_event, epsilon_rdp
from dpcore.proved import PROVED_RULES
from dpcore.recipes import CLAIMED_NOT_PROVED, PROVED
from dpcore.results import ResultsStore
from tests.compare.attribution_fakes import (
    CANDIDATES,
    EXPLAINED,
    UNEXPLAINED,
    make_grid,
    make_run,
)

PUBLISHED = load_preset("mnist-gap-attribution")["published"]
T2 = stats.t.ppf(0.975, 2)  # 4.3027: the t quantile of a 3-seed interval


def by_label(effects, start):
    return next(e for e in effects if e.label.startswith(start))


def welch(parts):
    """Hand formula: sum(c * mean) with a Welch-Satterthwaite 95% t interval."""
    mean = sum(c * np.mean(x) for c, x in parts)
    shares = [c * c * np.var(x, ddof=1) / len(x) for c, x in parts]
    se2 = sum(shares)
    dof = se2 ** 2 / sum(s * s / (len(x) - 1) for s, (_, x) in zip(shares, parts, strict=True))
    half = stats.t.ppf(0.975, dof) * math.sqrt(se2)
    return mean, mean - half, mean + half


def test_a_factor_explains_most_of_the_gap_arithmetic_by_hand() -> None:
    a = attribute(configurations(make_grid(EXPLAINED)), PUBLISHED)
    shuffle = by_label(a.factor_effects, "flip: shuffled")
    flip, base = EXPLAINED["flip: shuffled fixed batches"], EXPLAINED["harmonised tf"]
    # a flip of the sampling draws other batches: unpaired (Welch), 0.90 - 0.81 = 0.09
    ci = stats.ttest_ind(flip, base, equal_var=False).confidence_interval()
    assert not shuffle.paired and shuffle.interval.mean == pytest.approx(0.09)
    assert (shuffle.interval.low, shuffle.interval.high) == pytest.approx((ci.low, ci.high))
    assert shuffle.direction == 1 and shuffle.significant
    init = by_label(a.factor_effects, "flip: PyTorch")
    assert not init.paired  # other initial weights: unpaired too
    assert init.direction == -1 and init.interval.mean == pytest.approx(0.0)
    assert not init.significant
    # the two libraries' stock recipes share nothing: unpaired, 0.91333 - 0.81
    assert a.gap is not None and not a.gap.paired
    assert a.gap.interval.mean == pytest.approx(0.31 / 3)
    assert [e.label for e in a.counted] == [shuffle.label]
    assert a.explained == pytest.approx(0.09)
    # unexplained = (TF stock - Opacus stock) - (flip - harmonised), four independent groups
    mean, low, high = welch([(1, EXPLAINED["TF Privacy stock (library)"]),
                             (-1, EXPLAINED["Opacus stock (library)"]), (-1, flip), (1, base)])
    assert a.unexplained is not None
    assert (a.unexplained.mean, a.unexplained.low, a.unexplained.high) == pytest.approx(
        (mean, low, high))
    text = "\n".join(conclusion(a))
    assert ("flip: shuffled fixed batches − harmonised (TF backend) accounts for +9.00 points"
            in text)
    assert "Together: +9.00 points (95% bootstrap interval " in text
    assert "a share of 87 % of the gap (95% bootstrap interval " in text  # 9 / 10.33
    assert "Additivity is assumed, not tested" in text  # no interaction run here
    assert (f"Left unexplained: +1.33 points (95% CI {100 * low:+.2f} to {100 * high:+.2f}, "
            "3 seeds)") in text
    assert "init" not in " ".join(re.findall(r"accounts for[^.;]*", text))


def test_only_runs_that_share_batches_and_initial_weights_are_paired() -> None:
    runs = make_grid({**EXPLAINED, "flip: standardised inputs": [0.83, 0.85, 0.85]})
    a = attribute(configurations(runs), PUBLISHED)
    scaling = by_label(a.factor_effects, "flip: standardised")
    # same sampler, same initial weights, per seed: 0.03, 0.03, 0.04
    assert scaling.paired and scaling.per_seed == pytest.approx({0: 0.03, 1: 0.03, 2: 0.04})
    assert all(not e.paired for e in a.stock_effects)
    table = attribution_effects(a)
    assert set(table["pairing"]) == {"paired by seed", "unpaired (Welch)"}


def test_the_published_gap_is_set_against_every_pair_of_candidate_recipes() -> None:
    runs = make_grid(CANDIDATES)
    proved = {"TF Privacy, 2 microbatches (library)": (22.5, "add/remove one example"),
              "TF Privacy stock (library)": (None, "shuffled batches: no bound known")}
    runs = [make_run(r.labels["run"], r.seed, r.metrics["accuracy"], privacy_extra={
        "epsilon_proved": proved[r.labels["run"]][0],
        "epsilon_proved_reason": proved[r.labels["run"]][1],
        "epsilon_proved_rules": PROVED_RULES})  # stored under the current rules: kept
        if r.labels["run"] in proved else r for r in runs]
    a = attribute(configurations(runs), PUBLISHED)
    (gap,) = a.published_gaps
    assert gap.value == pytest.approx(0.9672 - 0.8547)
    # TF candidates: stock, stock on the training set, 2 microbatches; Opacus: stock and
    # standardised: 3 x 2 pairs, each unpaired
    assert len(gap.pairs) == 6 and not any(p.gap.paired for p in gap.pairs)
    assert gap.closest("tf").setting == "TF Privacy stock, train accuracy"  # 0.9677
    assert gap.closest("torch").setting == "Opacus, standardised inputs (library)"
    micro = next(p for p in gap.pairs if p.tf.setting.startswith("TF Privacy, 2 micro")
                 and p.torch.setting.startswith("Opacus, standardised"))
    ci = stats.ttest_ind(CANDIDATES["TF Privacy, 2 microbatches (library)"],
                         CANDIDATES["Opacus, standardised inputs (library)"],
                         equal_var=False).confidence_interval()
    assert (micro.gap.interval.low, micro.gap.interval.high) == pytest.approx((ci.low, ci.high))
    assert micro.consistent == (ci.low <= gap.value <= ci.high) and micro.consistent
    assert micro.tf.epsilon_proved == 22.5
    text = "\n".join(conclusion(a))
    assert "**The published gap**" in text and "= +11.25 points" in text
    assert ("TF Privacy, 2 microbatches (library) − Opacus, standardised inputs (library): "
            in text)
    table, _ = configuration_table(a)
    rows = table.set_index(["configuration", "what ran"])
    assert rows.loc[("TF Privacy, 2 microbatches (library)", "TF Privacy's own recipe"),
                    "epsilon proved"] == "22.5"
    assert rows.loc[("TF Privacy stock (library)", "TF Privacy's own recipe"),
                    "epsilon proved"] == "none (shuffled batches: no bound known)"
    # a record without the figure: computed from its stored plan (Poisson, per example, fixed
    # divisor: the RDP epsilon of noise 1.0, q 0.01, 10 steps, delta 1e-5)
    event = dpsgd_event("dpsgd-gaussian", 1.0, 0.01, 10)
    assert rows.loc[("harmonised", "harmonised step, torch backend"), "epsilon proved"] == \
        f"{epsilon_rdp(event, 1e-5):.4g}"


def test_a_contrast_of_two_groups_is_welchs_interval() -> None:
    x, y = {0: 0.9, 1: 0.92, 2: 0.95}, {0: 0.8, 1: 0.83, 2: 0.81, 3: 0.85}
    got = contrast_interval([(1.0, x), (-1.0, y)])
    ci = stats.ttest_ind(list(x.values()), list(y.values()), equal_var=False
                         ).confidence_interval()
    assert (got.low, got.high) == pytest.approx((ci.low, ci.high))
    # one group given twice counts once, with its coefficients added
    twice = contrast_interval([(1.0, x), (-0.5, y), (-0.5, y)])
    assert (twice.mean, twice.low, twice.high) == pytest.approx((got.mean, got.low, got.high))


def test_nothing_explains_the_gap_never_says_explains() -> None:
    a = attribute(configurations(make_grid(UNEXPLAINED)), PUBLISHED)
    shuffle = by_label(a.factor_effects, "flip: shuffled")
    # per seed: +0.05, -0.04, +0.02: the interval crosses 0
    assert shuffle.interval.low < 0 < shuffle.interval.high and not shuffle.significant
    scaling = by_label(a.factor_effects, "flip: standardised")
    assert scaling.significant and scaling.direction == 0
    assert scaling.why_not == "neither stock recipe uses input_scaling=standardised"
    assert a.counted == () and a.explained == 0.0
    assert a.unexplained is not None and a.unexplained.mean == pytest.approx(0.31 / 3)
    text = "\n".join(conclusion(a))
    assert " explains " not in text and " accounts for " not in text
    assert "no part of the gap is explained" in text
    assert "No effect shown: flip: shuffled" in text
    assert "init (neutral in TF Privacy's, torch in Opacus's)" in text  # not isolated here


def test_one_seed_judges_nothing() -> None:
    runs = make_grid({k: v[:1] for k, v in EXPLAINED.items()})
    a = attribute(configurations(runs), PUBLISHED)
    assert all(not e.significant for e in a.factor_effects) and a.counted == ()
    text = "\n".join(conclusion(a))
    assert "no interval" in text and " explains " not in text


def test_published_figure_reached_or_closest() -> None:
    a = attribute(configurations(make_grid(EXPLAINED)), PUBLISHED)
    tf = next(t for t in a.targets if "tf_privacy" in t.description)
    assert tf.value == pytest.approx(0.9672)
    # TF stock on the training set: mean 0.96767 >= 0.9672 - 0.005
    assert [c.setting for c in tf.reached_by] == ["TF Privacy stock, train accuracy"]
    runs = make_grid({k: v for k, v in EXPLAINED.items() if "train" not in k})
    tf = next(t for t in attribute(configurations(runs), PUBLISHED).targets
              if "tf_privacy" in t.description)
    assert tf.reached_by == () and tf.closest is not None
    assert tf.closest.setting == "TF Privacy stock (library)"
    text = "\n".join(conclusion(attribute(configurations(runs), PUBLISHED)))
    assert (f"The published 96.72 % ({tf.description}) is not reached by any TF Privacy "
            f"run, on the test or the training set (tolerance {100 * REACH_TOLERANCE:g} point); "
            "the closest is TF Privacy stock (library): 91.33") in text
    assert "5.39 points below" in text  # 96.72 - 91.333


def test_unpaired_difference_uses_welch() -> None:
    interval, paired, per_seed = difference({0: 0.9, 1: 0.92}, {5: 0.8, 6: 0.83, 7: 0.81})
    assert not paired and per_seed is None
    ci = stats.ttest_ind([0.9, 0.92], [0.8, 0.83, 0.81], equal_var=False).confidence_interval()
    assert (interval.low, interval.high) == pytest.approx((ci.low, ci.high))
    assert interval.mean == pytest.approx(0.91 - 0.81333333)


def test_table_records_privacy_claims_and_epsilons() -> None:
    a = attribute(configurations(make_grid(EXPLAINED)), PUBLISHED)
    table, reasons = configuration_table(a)
    rows = table.set_index(["configuration", "what ran"])
    assert rows.loc[("harmonised", "harmonised step, TF backend"), "privacy"] == PROVED
    tf_stock = rows.loc[("TF Privacy stock (library)", "TF Privacy's own recipe")]
    assert tf_stock["privacy"].startswith(CLAIMED_NOT_PROVED + " [1]")
    assert reasons[0].startswith("privacy.sampling=shuffle")
    assert "tf_privacy_compute_dp_sgd_privacy: 1.31" in tf_stock["library's own epsilon"]
    assert tf_stock["factors changed (vs harmonised)"] == "sampling: poisson → shuffle"
    assert tf_stock["accuracy %"] == "91.33"
    train = rows.loc[("TF Privacy stock, train accuracy", "TF Privacy's own recipe")]
    assert train["split"] == "train" and "[2]" in train["privacy"]
    assert any(r.startswith("factors.eval_split=train") for r in reasons)


def test_chart_labels_do_not_overlap() -> None:
    runs = make_grid({**EXPLAINED, **{k: v for k, v in UNEXPLAINED.items()
                                      if k.startswith("flip: standardised")}})
    fig = effects_figure(attribute(configurations(runs), PUBLISHED))
    assert fig is not None
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_text()]
    assert len(boxes) == 3 + 2 + 1  # three factors, two stock comparisons, the gap
    for b1, b2 in combinations(boxes, 2):
        assert not b1.overlaps(b2)
    figure_box = fig.bbox
    assert all(b.x0 >= figure_box.x0 and b.y0 >= figure_box.y0 for b in boxes)


def test_missing_baseline_is_a_clear_message(tmp_path: Path) -> None:
    runs = make_grid({k: v for k, v in EXPLAINED.items() if k != "harmonised tf"})
    with pytest.raises(AttributionError, match=r"no harmonised baseline on tf .*flip: "):
        attribute(configurations(runs), PUBLISHED)
    lines = attribution_section(runs, PUBLISHED).lines
    assert any(line.startswith("**Not computed:** no harmonised baseline on tf") for line in
               lines)


def test_two_baselines_on_one_framework_is_a_clear_message() -> None:
    runs = make_grid(EXPLAINED)
    second = make_run("harmonised tf", 0, 0.8)
    second.labels = {"run": "harmonised, 45 epochs"}
    with pytest.raises(AttributionError, match=r"several harmonised baselines on tf "
                                               r"\(harmonised; harmonised, 45 epochs\)"):
        attribute(configurations([*runs, second]), PUBLISHED)


def test_unknown_factor_is_a_clear_message(tmp_path: Path) -> None:
    runs = make_grid(EXPLAINED)
    runs.append(make_run("flip: PyTorch default init", 7, 0.8, factors={"warp_drive": 1}))
    with pytest.raises(AttributionError, match="factor 'warp_drive' is not known; valid: "
                                               "normalisation, microbatch_size"):
        configurations(runs)
    lines = attribution_section(runs, PUBLISHED).lines
    assert any("**Not computed:** run " in line and "warp_drive" in line for line in lines)


def test_section_only_for_a_recipe_axis(tmp_path: Path) -> None:
    plain = make_grid({"harmonised tf": [0.8, 0.81]})
    assert not has_recipe_axis(plain)
    assert not attribution_section(plain, PUBLISHED).lines
    assert has_recipe_axis(make_grid(EXPLAINED))


def test_write_report_has_the_section(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "runs")
    for run in make_grid(EXPLAINED):
        store.save(run)
    report = write_report(tmp_path / "runs", tmp_path / "report",
                          ReportContext(command="test", published=tuple(PUBLISHED)))
    text = report.read_text()
    assert "## Gap attribution" in text and "![gap attribution](attribution.png)" in text
    assert "### Conclusion" in text and "a share of 87 % of the gap" in text
    assert "## Privacy claims" not in text  # the attribution table carries the claims
    for name in ("attribution.png", "attribution.csv", "attribution_effects.csv"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    runs = pd.read_csv(tmp_path / "report" / "runs.csv").set_index(["setting", "backend"])
    assert set(runs.loc[("TF Privacy stock (library)", "tf"), "privacy_claim"]) == {
        CLAIMED_NOT_PROVED}
    assert set(runs.loc[("harmonised", "torch"), "privacy_claim"]) == {PROVED}
    assert set(runs["recipe"]) == {"library", "harmonised"}


def test_collapsed_configurations_are_marked() -> None:
    runs = make_grid({**EXPLAINED, "flip: PyTorch default init": [0.5, 0.83, 0.80]})
    a = attribute(configurations(runs), PUBLISHED)
    init = next(c for c in a.configurations if c.setting == "flip: PyTorch default init")
    assert init.collapsed == 1  # accuracy 0.5 = the majority rate of a 50/50 test set
    table, _ = configuration_table(a)
    assert table.set_index("configuration").loc["flip: PyTorch default init",
                                                "collapsed seeds"] == 1
    assert "flip: PyTorch default init (TF backend) (1 of 3 seeds)" in "\n".join(conclusion(a))


def test_a_library_variant_is_not_the_stock_recipe() -> None:
    """A TF Privacy library run with 32-example microbatches beside the stock one: the stock
    recipe stays the per-example one; the variant is tabled."""
    variant = make_run("TF Privacy stock (library)", 0, 0.7)
    raw = {**variant.config, "factors": {"microbatch_size": 32}}
    variant.config = raw
    variant.labels = {"run": "TF Privacy, 32 microbatches"}
    a = attribute(configurations([*make_grid(EXPLAINED), variant]), PUBLISHED)
    assert a.stock["tf"].setting == "TF Privacy stock (library)"
    assert "TF Privacy, 32 microbatches" in {c.setting for c in a.configurations}
    assert a.gap is not None and a.gap.interval.mean == pytest.approx(0.31 / 3)


def test_library_recipe_epsilons_reach_the_epsilon_table() -> None:
    from compare.reporting.frames import results_frame
    from compare.tidy import library_accountant_epsilon as library_epsilon

    assert library_epsilon({"tf_privacy_compute_dp_sgd_privacy": 1.31}, "tf_privacy") == 1.31
    assert library_epsilon({"opacus_prv (PrivacyEngine.accountant)": 1.2}, "opacus_prv") == 1.2
    assert library_epsilon({"opacus_prv": 1.2}, "opacus_rdp") is None
    frame = results_frame(make_grid({"TF Privacy stock (library)": [0.9],
                                     "Opacus stock (library)": [0.8]}))
    by = frame.set_index("backend")
    assert by.loc["tf", "epsilon_tf_privacy"] == 1.31
    assert by.loc["torch", "epsilon_opacus_prv"] == 1.2
