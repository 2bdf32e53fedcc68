"""The report's privacy figures: claimed | proved | audited epsilon, side by side, per run.

*Claimed* and *proved* come from :func:`dpcore.proved.figures_of_result` (a record's own
figures when it stores them under the current rules, else recomputed from its config and
privacy plan, so every record shows them). *Audited* is the one-run audit's 95 % lower bound
(``audit.one_run``), where the run audited. An audited bound above the proved epsilon (above
the claim where nothing is proved) is a **privacy violation**; a run with ``factors.fault`` is
**deliberately broken**. Both are flagged in every table and figure through the setting's
label (:func:`flag_settings`: every run of the setting, so backends stay paired), in the
headline (:func:`privacy_sentence`) and in this section's table.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter

from compare.figdigest import note_figure
from compare.grid import setting_label
from compare.reporting.audited_column import (
    COMPANION_COLUMNS,
    CompanionView,
    audited_cell,
    companion_column,
    companion_note,
    companions_sentence,
    reference_figures,
)
from compare.reporting.section import (
    ReportData,
    ReportFigure,
    SectionOutput,
    drawn_figure,
    section,
)
from compare.reporting.selection_text import selection_lines
from compare.reporting.tables import fmt, markdown_table
from dpcore.audit.per_step import per_step_findings
from dpcore.mechanisms import is_non_private, noises_gradients
from dpcore.noise_key import noise_key_label
from dpcore.proved import figures_of_result, is_violation
from dpcore.results import RunResult

VIOLATION_FLAG = "PRIVACY VIOLATION"
BROKEN_FLAG = "deliberately broken"

#: Columns of :func:`privacy_columns` that hold text.
PRIVACY_TEXT_COLUMNS = ("epsilon_proved_reason", "epsilon_proved_relation", "fault",
                        "audit_kind", "privacy_violation", "noise_key", "per_step_flagged",
                        *COMPANION_COLUMNS)

#: The audited column: the largest of the seeds' one-run bounds (each a 95 % lower bound).
AUDITED_MAX = "audited (max over seeds)"
#: Beside it: each seed's one-run 95 % lower bound.
AUDITED_PER_SEED = "audited per seed (95% lower bounds)"
#: The RDP figure beside a proved epsilon computed by PLD.
PROVED_RDP = "proved by RDP"
#: The per-step canary audit's column (where some run has one).
PER_STEP = "per-step noise"

#: The flag of a run whose per-step canary audit found the noise not fresh at every step or
#: a canary not clipped as an honest step clips it.
PER_STEP_FLAG = "FLAGGED"


def per_step_columns(one_run: Mapping[str, Any]) -> dict[str, Any]:
    """The run-row columns of the per-step canary audit (:mod:`dpcore.audit.per_step`), in
    the tensor of the smallest p-value: ``per_step_ratio`` (S, the noise residuals' variance
    left after predicting each from the step before, over the configured noise variance),
    ``per_step_threshold``, ``per_step_rho`` (their lag-1 correlation), ``per_step_clip_z``
    (the clipping check's Z, NaN without one) and ``per_step_flagged`` ("yes" when either
    check flagged the run, :func:`dpcore.audit.per_step.per_step_findings`); none for a run
    without a per-step audit (a frame of such runs has no such columns)."""
    per_step = one_run.get("per_step")
    if not per_step:
        return {}
    clip = per_step.get("clip") or {}
    return {"per_step_ratio": float(per_step.get("value", math.nan)),
            "per_step_threshold": float(per_step.get("threshold", math.nan)),
            "per_step_rho": float(per_step.get("rho_1", math.nan)),
            "per_step_clip_z": float(clip.get("value", math.nan)),
            "per_step_flagged": "yes" if per_step_findings(per_step) else ""}


def privacy_columns(result: RunResult) -> dict[str, Any]:
    """The run-row columns of one RunResult: ``epsilon_claimed``, ``epsilon_proved`` (NaN when
    none is proved), its reason and relation, ``epsilon_audited`` (NaN without an audit),
    ``audit_kind``/``audit_m``/``audit_k``/``audit_correct``, ``fault`` ("" when honest) and
    ``privacy_violation`` ("yes"/"": the audited bound above the proved or claimed epsilon, or
    the per-step audit flagged, :func:`per_step_columns`), ``epsilon_proved_rdp`` (the RDP
    figure beside a proved epsilon by PLD, NaN otherwise) and ``noise_key`` (which key the
    DP-SGD noise had, :func:`dpcore.noise_key.noise_key_label`; "" without gradient noise);
    a run audited by an audit companion
    (:mod:`compare.reporting.audited_column`) also ``audit_companion`` and its status, and its
    violation is tested against the companion's own claimed and proved epsilon."""
    figures = figures_of_result(result)
    one_run = (result.audit or {}).get("one_run") or {}
    audited = one_run.get("epsilon_lower_bound")
    fault = str((result.config.get("factors") or {}).get("fault", "none"))
    claimed, proved = figures.get("epsilon_claimed"), figures.get("epsilon_proved")
    reference = reference_figures(one_run, claimed, proved)  # an audit companion's own
    proved_rdp = figures.get("epsilon_proved_rdp")
    privacy = result.privacy or {}
    per_step = per_step_columns(one_run)
    violation = is_violation(audited, *reference) or per_step.get("per_step_flagged") == "yes"
    return {
        "epsilon_claimed": math.nan if claimed is None else float(claimed),
        "epsilon_proved": math.nan if proved is None else float(proved),
        "epsilon_proved_rdp": math.nan if proved_rdp is None else float(proved_rdp),
        "noise_key": noise_key_label(privacy.get("noise_key"))
        if noises_gradients(privacy.get("mechanism")) else "",
        "epsilon_proved_reason": str(figures.get("epsilon_proved_reason") or ""),
        "epsilon_proved_relation": str(figures.get("epsilon_proved_relation") or ""),
        "epsilon_audited": math.nan if audited is None else float(audited),
        "audit_kind": str(one_run.get("kind", "")),
        "audit_m": one_run.get("m"),
        "audit_k": one_run.get("k"),
        "audit_correct": one_run.get("correct"),
        "fault": "" if fault == "none" else fault,
        "privacy_violation": "yes" if violation else "",
        **per_step,
        **companion_column(one_run),
    }


def flag_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Append ``[deliberately broken]`` / ``[PRIVACY VIOLATION]`` to the ``setting`` (tables)
    and ``point`` (figures) labels of every run of a setting with a faulty run / an audited
    violation (all its backends and seeds, so tables and figures keep them together)."""
    if frame.empty or "setting" not in frame:
        return frame
    return apply_flags(frame, setting_flags(frame))


def setting_flags(frame: pd.DataFrame) -> dict[str, str]:
    """Setting label -> the suffix its runs get ("" for none), from a frame with ``setting``,
    ``fault`` and ``privacy_violation`` columns."""
    broken = set(frame.loc[frame["fault"].astype(str) != "", "setting"])
    violated = set(frame.loc[frame["privacy_violation"] == "yes", "setting"])
    return {s: "".join(f" [{t}]" for t, on in ((BROKEN_FLAG, s in broken),
                                                (VIOLATION_FLAG, s in violated)) if on)
            for s in set(frame["setting"])}


def flags_of_results(results: Sequence[RunResult]) -> dict[str, str]:
    """:func:`setting_flags` of RunResults (for the frames built from them directly)."""
    rows = [{"setting": setting_label(r.labels) if r.labels else r.config_hash,
             **privacy_columns(r)} for r in results]
    return setting_flags(pd.DataFrame(rows)) if rows else {}


def apply_flags(frame: pd.DataFrame, flags: Mapping[str, str]) -> pd.DataFrame:
    """``frame`` with each run's ``setting`` and ``point`` label followed by its setting's
    flag (:func:`setting_flags`)."""
    if frame.empty or not any(flags.values()):
        return frame
    frame = frame.copy()
    suffix = [flags.get(s, "") for s in frame["setting"]]
    if "point" in frame:  # figures label runs by their point along the swept axis
        frame["point"] = [str(p) + f for p, f in zip(frame["point"], suffix, strict=True)]
    frame["setting"] = [str(s) + f for s, f in zip(frame["setting"], suffix, strict=True)]
    return frame


def honest(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs without ``factors.fault`` (a deliberately broken run is nobody's result)."""
    return frame[frame["fault"].astype(str) == ""] if "fault" in frame else frame


def per_step_cell(group: pd.DataFrame) -> str:
    """The per-step audit of one (setting, backend)'s runs: the smallest S over seeds with
    its threshold and lag-1 correlation, the clipping Z largest in size where runs have one,
    and how many runs either check flagged ("" when no run has a per-step audit)."""
    if "per_step_ratio" not in group:
        return ""
    ratio = group["per_step_ratio"].astype(float)
    if not ratio.notna().any():
        return ""
    worst = group.loc[ratio.idxmin()]
    flagged = int((group["per_step_flagged"] == "yes").sum())
    text = (f"S {fmt(worst['per_step_ratio'], 3)} (threshold "
            f"{fmt(worst['per_step_threshold'], 3)}, rho_1 {fmt(worst['per_step_rho'], 3)})")
    clip = (group["per_step_clip_z"].astype(float) if "per_step_clip_z" in group
            else pd.Series(dtype=float))
    if clip.notna().any():
        text += f", clip Z {fmt(float(clip.loc[clip.abs().idxmax()]), 3)}"
    if flagged:
        return f"{PER_STEP_FLAG} ({flagged} of {int(ratio.notna().sum())} runs): {text}"
    return f"passed: {text}"


def per_seed_bounds(group: pd.DataFrame) -> str:
    """Each audited seed's one-run 95 % lower bound, ``"seed 0: 0.19, seed 1: 0.07"`` in seed
    order ("" when none audited); an audit companion's bound under the companion's seed."""
    audited = group[group["epsilon_audited"].astype(float).notna()]
    seeds = [int(row["audit_companion_seed"]) if pd.notna(row.get("audit_companion_seed"))
             else int(row["seed"]) for _, row in audited.iterrows()]
    bounds = sorted(zip(seeds, audited["epsilon_audited"].astype(float), strict=True))
    return ", ".join(f"seed {seed}: {fmt(bound)}" for seed, bound in bounds)


def over_seeds(values: pd.Series) -> float | str:
    """A setting's claimed or proved epsilon over its seeds: the value when every seed gives
    it (at 4 significant digits), else ``"low to high"`` (a per-seed calibration: a library
    recipe's own loader or an audit's canaries change what each seed trains on); NaN when no
    seed has one."""
    known = values.dropna().astype(float)
    if known.empty:
        return float("nan")
    if len({f"{v:.4g}" for v in known}) == 1:
        return float(known.iloc[0])
    return f"{fmt(float(known.min()))} to {fmt(float(known.max()))}"


def privacy_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, backend) of finished runs: claimed and proved epsilon (one value, or the
    range over the seeds where they differ: :func:`over_seeds`; the RDP figure beside a PLD
    proved one), the largest audited bound over seeds with its audit and each seed's bound
    beside it, the per-step noise check where a run has one (:func:`per_step_cell`),
    violations, fault."""
    done = frame[frame["status"] == "finished"]
    rows = []
    for (setting, backend), group in done.groupby(["setting", "backend"], sort=False):
        audited = group["epsilon_audited"].astype(float)
        best = group.loc[audited.idxmax()] if audited.notna().any() else None
        rows.append({
            "setting": setting, "backend": backend, "seeds": len(group),
            "claimed": over_seeds(group["epsilon_claimed"]),
            "proved": over_seeds(group["epsilon_proved"]),
            PROVED_RDP: over_seeds(group["epsilon_proved_rdp"])
            if "epsilon_proved_rdp" in group else math.nan,
            AUDITED_MAX: audited_cell(group),
            AUDITED_PER_SEED: per_seed_bounds(group),
            "audit (kind, correct/k of m)": "" if best is None else (
                f"{best['audit_kind']}, {fmt(best['audit_correct'])}/{fmt(best['audit_k'])} of "
                f"{fmt(best['audit_m'])}{companion_note(best)}"),
            **({PER_STEP: per_step_cell(group)} if "per_step_ratio" in group
               else {}),
            "violation": (f"{VIOLATION_FLAG} ({int((group['privacy_violation'] == 'yes').sum())}"
                          f" of {int(audited.notna().sum())} runs)"
                          if (group["privacy_violation"] == "yes").any() else ""),
            "fault": group["fault"].iloc[0],
            "proved: relation": group["epsilon_proved_relation"].iloc[0],
            "proved: basis or why none": group["epsilon_proved_reason"].iloc[0],
        })
    return pd.DataFrame(rows)


#: Largest over smallest plotted epsilon from which :func:`privacy_figure` draws a log axis
#: (a linear axis up to a local-DP epsilon of 2352 squeezes every DP-SGD point into its 0).
LOG_AXIS_SPAN = 20.0
#: Marker of each privacy figure in :func:`plot_privacy`.
FIGURE_MARKERS = {"claimed": "o", "proved": "s", "audited": "X"}


def privacy_long(frame: pd.DataFrame) -> pd.DataFrame:
    """Tidy table of the finished runs' privacy figures: setting, backend, seed, figure
    (claimed / proved / audited), epsilon; infinite and missing values left out."""
    done = frame.loc[frame["status"] == "finished", ["setting", "backend", "seed",
                                                      "epsilon_claimed", "epsilon_proved",
                                                      "epsilon_audited"]]
    long = done.melt(id_vars=["setting", "backend", "seed"],
                     value_vars=["epsilon_claimed", "epsilon_proved", "epsilon_audited"],
                     var_name="figure", value_name="epsilon")
    long["figure"] = long["figure"].str.replace("epsilon_", "", regex=False)
    long["epsilon"] = pd.to_numeric(long["epsilon"], errors="coerce")
    return long[long["epsilon"].notna() & ~long["epsilon"].isin([math.inf])]


def privacy_figure(frame: pd.DataFrame) -> ReportFigure | None:
    """Claimed, proved and audited epsilon per setting (y), one panel per backend (seaborn
    ``catplot``, col=backend), as ``privacy.png``; flagged settings carry their flag in the
    label. None when no finite figure exists. Drawn now, written by the report writer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from dpcore.io import atomic_path

    long = privacy_long(frame)
    if long.empty:
        return None
    long = long.assign(setting=long["setting"].map(lambda t: "\n".join(
        textwrap.wrap(str(t), 44))))
    with warnings.catch_warnings():
        # many long setting labels: seaborn's tight_layout gives up and warns; the figure is
        # still drawn with every label (the margins grow instead)
        warnings.filterwarnings("ignore", message="Tight layout not applied")
        grid = _catplot(sns, long)
    low, high = float(long["epsilon"].min()), float(long["epsilon"].max())
    positive = long.loc[long["epsilon"] > 0, "epsilon"]
    logarithmic = len(positive) > 0 and high / float(positive.min()) >= LOG_AXIS_SPAN
    scale = ("" if not logarithmic else " (log scale)" if low > 0
             else f" (log scale above {float(positive.min()):.2g}, linear below)")
    grid.set_axis_labels(f"epsilon{scale}", "")
    pad = 0.1 * max(abs(high), 1.0)  # calibrated runs differ by 1e-5: no magnified spread
    for ax in grid.axes.flat:
        ax.grid(axis="x", alpha=0.3)
        if logarithmic:  # epsilon 1 beside 2352 (a local-DP image): both readable
            smallest = float(positive.min())
            if low > 0:
                ax.set_xscale("log")
                ax.set_xlim(smallest / 1.6, high * 1.6)  # room for the end markers
            else:  # an audited lower bound of 0: linear from 0 to the smallest positive value
                ax.set_xscale("symlog", linthresh=smallest)
                ax.set_xlim(-0.4 * smallest, high * 1.6)  # 0's markers whole, no negatives
                decades = range(math.ceil(math.log10(smallest)),
                                math.floor(math.log10(1.6 * high)) + 1)
                ax.xaxis.set_major_locator(FixedLocator([0.0, *(10.0 ** k for k in decades)]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
            continue
        ax.ticklabel_format(axis="x", style="plain", useOffset=False)
        if high - low < pad:
            ax.set_xlim(low - pad, high + pad)

    def write(path: Path) -> None:
        try:
            with atomic_path(path) as tmp, warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Tight layout not applied")
                grid.savefig(tmp, format="png", dpi=110)
            note_figure(grid.figure, path)  # the plotted data's digest, for the records
        finally:
            plt.close(grid.figure)

    return drawn_figure("privacy.png", write)


def plot_privacy(frame: pd.DataFrame, path: Path) -> bool:
    """:func:`privacy_figure` written to ``path``; False (nothing written) when it is None."""
    figure = privacy_figure(frame)
    if figure is None:
        return False
    figure.write(path)
    return True


def _catplot(sns: Any, long: pd.DataFrame) -> Any:
    return sns.catplot(data=long, x="epsilon", y="setting", hue="figure", col="backend",
                       kind="strip", jitter=False, dodge=True,
                       height=max(2.8, 0.5 + 0.55 * long["setting"].nunique()), aspect=1.4,
                       s=60, alpha=0.8,
                       hue_order=[f for f in FIGURE_MARKERS if f in set(long["figure"])])


#: How to switch on the one-run canary audit where no run audited (the ``audited`` column
#: reads "–"), and what the other audit is.
HOW_TO_AUDIT = (
    "No run here ran the one-run canary audit, so `audited` is `–`. To audit: `dpcompare "
    "train ... --audit-canaries M` (M canaries; gradient canaries by default, `--set "
    "audit_canaries.kind=input` for mislabelled training images); in a grid, an "
    "`audit_companions:` section (one extra audited run per configuration with canaries per "
    "recipe, the grid's own runs, configs and hashes unchanged) or `audit_canaries: {count: "
    "M}` in a setting or the `base` (those runs audit themselves: their configs and hashes "
    "change; gradient canaries need DP-SGD). `evaluation.audit: true` (or `dpcompare audit` on a "
    "stored run) runs the other audit, membership inference, which gives an attack's AUC and "
    "advantage, not an audited epsilon.")


#: What the per-step column says (shown where some run has a per-step audit).
PER_STEP_TEXT = (
    "*Per-step noise*: gradient canaries are per-example records that each backend clips, "
    "sums and noises with its own examples, and the step engine reports the noised sum at "
    "the canaries' coordinates every step, before the optimizer. The residual there "
    "(observed minus the canaries' clipped contribution an honest step adds) is the step's "
    "fresh noise plus the real gradients. S is the residuals' variance left after predicting "
    "each from the step before (with their lag-1 correlation rho_1), over the configured "
    "noise variance sigma^2 C^2 (dpcore/audit/per_step.py): fresh noise cannot be predicted, "
    "so S >= 1 whatever the real gradients do, while noise reused across steps (or far "
    "smaller than sigma C, or strongly correlated from step to step) leaves S near 0. A run "
    "is flagged when S is below a threshold that an honest run passes with probability "
    "0.999 (family-wise over the parameter tensors; the smallest S over seeds is shown). "
    "*Clip Z* compares each canary's residual in the steps that sampled it with the others: "
    "about standard normal when the engine clips the canaries as an honest step does, large "
    "when a canary's 100 C norm goes through, negative when canaries are clipped with other "
    "examples; flagged when |Z| is above 3.29 (false-alarm rate 0.001; the largest |Z| over "
    "seeds is shown). A flagged run counts as a privacy violation.")


def is_informative_plot(frame: pd.DataFrame) -> bool:
    """Whether :func:`privacy_figure` shows more than the table: some run has an audited
    bound, or some setting's proved epsilon differs from its claim (or none is proved).
    Claimed equal to proved everywhere and nothing audited is two dots per setting saying
    what the table says."""
    done = frame[frame["status"] == "finished"]
    if done["epsilon_audited"].notna().any():
        return True
    claimed = done["epsilon_claimed"].astype(float)
    proved = done["epsilon_proved"].astype(float)
    finite = claimed.notna() & ~claimed.isin([math.inf])
    differs = (proved - claimed).abs() > 1e-3 * claimed.abs()
    return bool((finite & (proved.isna() | differs)).any())


def _present(value: Any) -> bool:
    """Whether a cell of :func:`privacy_table` holds a figure (a number, or the text of a
    range over seeds), not a missing value."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def privacy_section(frame: pd.DataFrame) -> SectionOutput:
    """The section of the run table ``frame``: its lines, ``privacy.csv`` and ``privacy.png``
    (only when :func:`is_informative_plot`); empty without private or audited runs (a
    non-private run shows here when it audited: its audit's ceiling). Where no run audited it
    says how to switch the one-run canary audit on, and that the membership-inference audit
    is another one (:data:`HOW_TO_AUDIT`)."""
    dp = frame[~frame["mechanism"].map(is_non_private).astype(bool)
               | frame["epsilon_audited"].notna()]
    table = privacy_table(dp)
    if table.empty:
        return SectionOutput()
    audited = table[AUDITED_MAX].map(_present)
    by_rdp = table[PROVED_RDP].map(_present).any()  # a figure, or a range "a to b" over seeds
    per_seed = (table[AUDITED_PER_SEED] != "").any()
    per_step = PER_STEP in table and table[PER_STEP].astype(str).str.len().gt(0).any()
    columns = ["setting", "backend", "seeds", "claimed", "proved",
               *([PROVED_RDP] if by_rdp else []), AUDITED_MAX,
               *([AUDITED_PER_SEED] if per_seed else []), "audit (kind, correct/k of m)",
               *([PER_STEP] if per_step else []), "violation", "fault"]
    lines = ["## Privacy: claimed, proved, audited", "",
             "*Claimed*: the shared accountant's epsilon for the setting (local DP: the "
             "per-image epsilon). *Proved*: the tightest bound known for what actually ran "
             "(dpcore/proved.py; `–` where none is known, with the reason"
             + ("; where it is computed by PLD, `proved by RDP` gives the RDP accountant's "
                "figure of the same releases, also valid, looser" if by_rdp else "")
             + "). *Audited*: the one-run canary audit's 95% lower bound (Steinke, Nasr, "
             "Jagielski 2023) from canaries in the same run, where the run audited: `"
             + AUDITED_MAX + "` is the largest of the seeds' bounds"
             + (", each seed's own beside it" if per_seed else "")
             + "; not the membership-inference audit, which gives no epsilon. An audited "
             "bound above the proved epsilon (the claimed one where nothing is proved) is a "
             "privacy violation; `fault` marks a deliberately broken step (an audit check).",
             "", *([PER_STEP_TEXT, ""] if per_step else []), markdown_table(table, columns),
             ""]
    lines += noise_key_lines(dp)
    if not audited.any():
        lines += [HOW_TO_AUDIT, ""]
    figure = privacy_figure(dp) if is_informative_plot(dp) else None
    if figure is not None:
        lines += ["Claimed, proved and audited (the one-run canary audit's 95% lower bound) "
                  "epsilon of every run (one dot per seed; infinite values are not drawn):", "",
                  "![claimed, proved and audited epsilon](privacy.png)", ""]
    elif not audited.any():
        lines += ["No figure: every setting's proved epsilon is its claim and no run "
                  "audited, so a plot would repeat the table.", ""]
    reasons = table[["setting", "backend", "proved: relation", "proved: basis or why none"]]
    lines += ["Basis of each proved epsilon (neighbouring relation; how it was bounded, or why "
              "no bound is known):", "", markdown_table(reasons), ""]
    return SectionOutput(lines, {"privacy.csv": table}, [figure] if figure else [])


def noise_key_lines(frame: pd.DataFrame) -> list[str]:
    """One line on the noise keys of the finished DP-SGD runs of ``frame``: which key, for
    how many runs (a record without one: :data:`dpcore.noise_key.LEGACY_NOISE_KEY`), and
    that a run with a secret key is not bit-reproducible; empty without DP-SGD runs."""
    if "noise_key" not in frame:
        return []
    done = frame[(frame["status"] == "finished") & (frame["noise_key"].astype(str) != "")]
    if done.empty:
        return []
    counts = done["noise_key"].value_counts(sort=False)
    keys = "; ".join(f"{key} ({n} run{'s' if n != 1 else ''})" for key, n in counts.items())
    text = f"Noise key of the DP-SGD runs: {keys}."
    if done["noise_key"].str.startswith("secret").any():
        text += (" A run with a secret key cannot be rebuilt, its noise included: a rerun "
                 "draws other noise, so a difference from a rerun is no failure.")
    return [text, ""]


@section("privacy")
def privacy(data: ReportData) -> SectionOutput:
    """Claimed | proved | audited epsilon (:func:`privacy_section` of the run table), what
    the grid's audit companions are (:func:`~compare.reporting.audited_column.
    companions_sentence`; nothing without companions), and how the hyper-parameters were
    selected (:func:`~compare.reporting.selection_text.selection_lines`; nothing without a
    selection block)."""
    output = privacy_section(data.frame)
    view = CompanionView(list(data.results), data.context, list(data.companions))
    extra = [*companions_sentence(view), *selection_lines(data.context.selection,
                                                          data.results)]
    if not extra:
        return output
    return dataclasses.replace(output, lines=[*output.lines, *extra])


def privacy_sentence(frame: pd.DataFrame) -> str | None:
    """The headline's privacy sentence: the proved epsilon range of the DP-SGD runs, how many
    have no proved bound, the audits and every violation; None without DP-SGD runs."""
    done = frame[(frame["status"] == "finished")
                 & frame["mechanism"].map(noises_gradients).astype(bool)]
    if done.empty:
        return None
    proved = done["epsilon_proved"].astype(float)
    parts = []
    if proved.notna().any():
        low, high = proved.min(), proved.max()
        low_text, high_text = fmt(low, 3), fmt(high, 3)  # one figure when they print alike
        parts.append(f"Proved epsilon of the DP-SGD runs: {low_text}" +
                     (f" to {high_text}" if high_text != low_text else ""))
    else:
        parts.append("No DP-SGD run has a proved epsilon")
    unproved = sorted(set(done.loc[proved.isna(), "setting"]))
    if unproved:
        parts.append(f"{len(unproved)} setting{'s' if len(unproved) != 1 else ''} claim an "
                     "epsilon no bound proves")
    gap = done[(proved > done["epsilon_claimed"].astype(float) * 1.001)]
    if not gap.empty:
        parts.append(f"{gap['setting'].nunique()} setting(s) have a proved epsilon above their "
                     "claim")
    audited = done[done["epsilon_audited"].notna()]
    if not audited.empty:
        bad = audited[audited["privacy_violation"] == "yes"]
        text = (f"{len(audited)} run{'s' if len(audited) != 1 else ''} audited (one-run "
                f"canary audit): "
                f"{len(bad)} {VIOLATION_FLAG}{'S' if len(bad) != 1 else ''}")
        if not bad.empty:
            text += (f" (audited above the proved or claimed epsilon, in "
                     f"{bad['setting'].nunique()} setting(s) on "
                     f"{', '.join(sorted(set(bad['backend'])))}; flagged in every table)")
        parts.append(text)
    else:
        parts.append("no run audited (the one-run canary audit was not run; the privacy "
                     "section says how to run it)")
    broken = done[done["fault"].astype(str) != ""]
    if not broken.empty:
        faults = ", ".join(sorted(set(broken["fault"].astype(str))))
        caught = int((broken["privacy_violation"] == "yes").sum())
        parts.append(f"{len(broken)} of these runs are {BROKEN_FLAG} on purpose to test the "
                     f"audit ({faults}); it caught {caught} of them")
    return "; ".join(parts) + "."


__all__ = ["AUDITED_MAX", "AUDITED_PER_SEED", "BROKEN_FLAG", "HOW_TO_AUDIT", "PER_STEP",
           "PER_STEP_FLAG", "PER_STEP_TEXT", "PRIVACY_TEXT_COLUMNS", "PROVED_RDP",
           "VIOLATION_FLAG",
           "apply_flags", "flag_settings", "flags_of_results", "honest",
           "is_informative_plot", "noise_key_lines", "per_seed_bounds", "per_step_cell",
           "per_step_columns", "setting_flags",
           "plot_privacy", "privacy", "privacy_columns", "privacy_figure", "privacy_long",
           "privacy_section",
           "privacy_sentence", "privacy_table"]
