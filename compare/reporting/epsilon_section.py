"""The report's epsilon table: the shared accountant beside each library's own."""

from __future__ import annotations

import pandas as pd

from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.tables import markdown_table
from dpcore.mechanisms import noises_gradients

#: Columns whose value may differ between the seeds of a setting (a per-seed calibration).
SEED_DEPENDENT = ("noise_multiplier", "sampling_rate", "epsilon_rdp", "epsilon_pld",
                  "epsilon_opacus_rdp", "epsilon_opacus_prv", "epsilon_tf_privacy",
                  "epsilon_proved", "epsilon_rdp_planned")


def varying_settings(rows: pd.DataFrame) -> list[str]:
    """The settings (``setting (backend)``) whose seeds differ in some
    :data:`SEED_DEPENDENT` column at 4 significant digits (the table's precision)."""
    out = []
    for (setting, backend), group in rows.groupby(["setting", "backend"], sort=False):
        for column in SEED_DEPENDENT:
            if column in group and group[column].notna().any() and len(
                    {f"{float(v):.4g}" for v in group[column].dropna()}) > 1:
                out.append(f"{setting} ({backend})")
                break
    return out


@section("epsilon")
def epsilon(data: ReportData) -> SectionOutput:
    """Epsilon side by side (``epsilon.csv``): per DP-SGD setting and backend (first seed),
    the shared accountant's RDP and PLD epsilons, the libraries' own and the proved one; a
    library recipe whose loader ran other steps than planned shows both."""
    frame = data.frame
    dp_all = frame[frame["mechanism"].map(noises_gradients).astype(bool)]
    varying = varying_settings(dp_all)
    seeds_note = ("every seed of a setting gives the same figures" if not varying else
                  f"the seeds of {len(varying)} setting(s) give different figures, because the "
                  "noise is calibrated per seed on what that seed's run trains on (a library "
                  "recipe's own loader, an audit's canaries): "
                  + "; ".join(varying) + "; `epsilon.csv` has every seed's")
    lines = ["## Epsilon side by side", "",
             "Shared accountant (dp_accounting, from each run's DpEvent) next to the "
             "library's own accountant for the same run (Opacus: RDP, PRV; TF Privacy: "
             f"`compute_dp_sgd_privacy`, RDP); first seed ({seeds_note}).",
             ""]
    eps_cols = ["setting", "backend", "noise_multiplier", "steps", "sampling_rate", "delta",
                "epsilon_rdp", "epsilon_pld", "epsilon_opacus_rdp", "epsilon_opacus_prv",
                "epsilon_tf_privacy", "epsilon_proved"]
    first_seed = frame.sort_values("seed", kind="stable").drop_duplicates(["setting", "backend"])
    dp_rows = first_seed[first_seed["mechanism"].map(noises_gradients).astype(bool)]
    planned_differs = (dp_rows["steps"] != dp_rows["steps_planned"]) & \
        dp_rows["steps_planned"].notna()
    if planned_differs.any():  # a library's loader ran other steps than planned: both shown
        eps_cols = [*eps_cols[:4], "steps_planned", *eps_cols[4:7], "epsilon_rdp_planned",
                    *eps_cols[7:]]
        lines[-1:] = ["`steps` and `epsilon_*` are those of the steps that ran; a library "
                      "recipe's own loader ran other steps than planned in "
                      f"{int(planned_differs.sum())} row(s), whose planned figures are in "
                      "`steps_planned` and `epsilon_rdp_planned`.", ""]
    lines += [markdown_table(dp_rows, eps_cols), ""]
    return SectionOutput(lines, {"epsilon.csv": frame[eps_cols]})


__all__ = ["epsilon"]
