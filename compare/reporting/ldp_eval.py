"""Local DP evaluated both ways: test accuracy on clean and on privatised test images, and the
ranking of local DP, DP-SGD and non-private training under each.

A local-DP run trains on privatised images; the medical benchmark it reproduces (Singh et al.)
evaluates on the clean test images, the bench's default on privatised ones
(``data.ldp_test_inputs``). Every local-DP run records both (``metrics.ldp_test_inputs``,
columns ``accuracy_clean_test`` / ``accuracy_privatised_test`` of
:func:`compare.reporting.frames.results_frame`), and the report shows both, so that its ranking
can be set beside the paper's.
"""

from __future__ import annotations

import pandas as pd

from compare.reporting.stats import INTERVAL_NAMES, bootstrap_interval, format_interval
from dpcore.mechanisms import is_non_private, noises_gradients, privatises_images

#: The two evaluations, in the order they are shown, with how a sentence names them.
EVALUATIONS = {"clean": "on clean test images", "privatised": "on privatised test images"}


def ldp_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The finished local-DP runs that recorded both evaluations."""
    if "accuracy_clean_test" not in frame:
        return frame[:0]
    done = frame[(frame["status"] == "finished")
                 & frame["mechanism"].map(privatises_images).astype(bool)]
    return done[done["accuracy_clean_test"].notna() & done["accuracy_privatised_test"].notna()]


def ldp_test_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per local-DP setting and backend: seeds, the headline's test images, and the test
    accuracy on clean and on privatised test images (mean [95% percentile bootstrap
    interval] over seeds)."""
    runs = ldp_runs(frame)
    rows = []
    for (setting, backend), group in runs.groupby(["setting", "backend"], sort=False):
        row = {"setting": setting, "backend": backend, "seeds": len(group),
               "headline metrics on": ", ".join(sorted(set(group["ldp_test_inputs"])))}
        for name in EVALUATIONS:
            interval = bootstrap_interval(group[f"accuracy_{name}_test"].to_numpy(float))
            row[f"accuracy, {name} test images"] = format_interval(interval)
        rows.append(row)
    return pd.DataFrame(rows)


def ranking_sentences(frame: pd.DataFrame) -> list[str]:
    """Per panel and backend, for each evaluation of the local-DP runs: the best local-DP
    setting, the best DP-SGD setting and the best non-private setting (mean test accuracy
    over seeds), ranked, e.g. ``"pneumonia · cnn4, tf, on clean test images: non-private
    0.862 > LDP b=1 0.840 > DP-SGD eps=8 0.801"``. Settings equal at the printed precision are
    joined by "=" (never ranked by digits not shown); a setting with a collapsed run (at chance
    or one class, on the test images of that evaluation) says "(collapsed)". Only panels with
    local-DP runs that recorded both evaluations; DP-SGD and non-private runs are scored on
    their (clean) test images."""
    ldp = ldp_runs(frame)
    done = frame[(frame["status"] == "finished") & frame["accuracy"].notna()]
    sentences = []
    for (panel, backend), group in ldp.groupby(["panel", "backend"], sort=False):
        others = done[(done["panel"] == panel) & (done["backend"] == backend)]
        references = []
        mechanisms = others["mechanism"]
        for kind, runs in (("DP-SGD", others[mechanisms.map(noises_gradients).astype(bool)]),
                           ("non-private", others[mechanisms.map(is_non_private).astype(bool)])):
            best = _best(runs, "accuracy")
            if best is not None:
                references.append(_ranked_entry(kind, runs, *best, collapse_known=True))
        for name, phrase in EVALUATIONS.items():
            best = _best(group, f"accuracy_{name}_test")
            if best is None:
                continue
            headline = set(group.loc[group["point"] == best[0], "ldp_test_inputs"])
            entry = _ranked_entry("LDP", group, *best, collapse_known=headline == {name})
            # ranked, and joined, by the printed value: never by digits the sentence hides
            ranked = sorted([entry, *references], key=lambda r: -float(f"{r[1]:.3f}"))
            text = ranked[0][0]
            for (_, previous), (label, value) in zip(ranked, ranked[1:], strict=False):
                text += f" {'=' if f'{value:.3f}' == f'{previous:.3f}' else '>'} {label}"
            sentences.append(f"{panel}, {backend}, {phrase}: {text}")
    return sentences


def _ranked_entry(kind: str, runs: pd.DataFrame, point: str, value: float,
                  collapse_known: bool) -> tuple[str, float]:
    """(how the ranking names the setting, its mean accuracy): the setting's name, prefixed
    by its kind unless the name starts with it ("LDP b=1", "DP-SGD eps=8", not "LDP LDP
    b=1"), its mean to 3 decimals, and "(collapsed)" when one of its runs collapsed on the
    test images scored (``collapse_known``: the run's collapse flag is of those images)."""
    name = point if point.lower().startswith(kind.lower()) else f"{kind} {point}"
    collapsed = collapse_known and bool(runs.loc[runs["point"] == point, "collapsed"].any())
    return f"{name} {value:.3f}{' (collapsed)' if collapsed else ''}", value


def _best(runs: pd.DataFrame, column: str) -> tuple[str, float] | None:
    """(point, mean over seeds) of the setting with the highest mean ``column``."""
    if runs.empty or not runs[column].notna().any():
        return None
    means = runs.groupby("point", sort=False)[column].mean().dropna()
    return str(means.idxmax()), float(means.max())


def ldp_evaluation_section(frame: pd.DataFrame) -> list[str]:
    """The accuracy section's lines on local DP evaluated both ways ([] without such runs)."""
    table = ldp_test_table(frame)
    if table.empty:
        return []
    from compare.reporting.tables import markdown_table

    return ["### Local DP on clean and on privatised test images", "",
            "Each local-DP model is trained on privatised images and tested on both the clean "
            "test images (as Singh et al. evaluate) and the privatised ones; `headline metrics "
            "on` says which the other tables use (`data.ldp_test_inputs`). Mean ["
            f"{INTERVAL_NAMES['bootstrap']}] over seeds:", "",
            markdown_table(table), "",
            "Ranking by mean test accuracy (best setting of each kind; DP-SGD and non-private "
            "models on the clean test images; '=' joins settings equal to 3 decimals; "
            "'(collapsed)': a run of the setting at chance or predicting one class, tested on "
            "the test images of its headline metrics only), for each evaluation of local DP:",
            "",
            *[f"- {s}" for s in ranking_sentences(frame)], ""]


__all__ = ["EVALUATIONS", "ldp_evaluation_section", "ldp_runs", "ldp_test_table",
           "ranking_sentences"]
