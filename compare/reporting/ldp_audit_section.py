"""The report's local-DP and membership-inference audit tables."""

from __future__ import annotations

from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.tables import markdown_table
from dpcore.mechanisms import privatises_images


@section("local DP and audit")
def local_dp_and_audit(data: ReportData) -> SectionOutput:
    """The local-DP table (epsilons per value and per image, PSNR/SSIM) and the
    membership-inference audit table, each when some run has it."""
    frame = data.frame
    lines: list[str] = []
    first_seed = frame.sort_values("seed", kind="stable").drop_duplicates(["setting", "backend"])
    if frame["ldp_epsilon_per_image"].notna().any():
        lines += ["## Local DP", "",
                  "Per-value epsilon protects one pixel value; **the per-image epsilon is the "
                  "one that protects a patient's image**. PSNR/SSIM of the first seed's "
                  "privatised test images.", ""]
        ldp_cols = ["setting", "backend", "ldp_epsilon_per_value", "ldp_epsilon_per_image",
                    "ldp_psnr", "ldp_ssim"]
        ldp_rows = first_seed[first_seed["mechanism"].map(privatises_images).astype(bool)]
        lines += [markdown_table(ldp_rows, ldp_cols), ""]
    if "attack_auc" in frame and frame["attack_auc"].notna().any():
        lines += ["## Membership-inference audit", "",
                  "TF Privacy's membership-inference attacks (threshold and logistic regression "
                  "on losses), training examples vs the same number of held-out examples "
                  "(`evaluation.audit: true` or `dpcompare audit`; not the one-run canary "
                  "audit of the privacy section, and no audited epsilon). "
                  "`advantage_bound` = (e^eps - 1 + 2 delta) / (e^eps + 1) with eps = "
                  "`bound_epsilon`, the smaller of the run's RDP and PLD epsilons (its "
                  "accountant in `bound_accountant`; it may differ from `epsilon`); a run whose "
                  "held-out advantage has a confidence interval entirely above the bound is "
                  "marked as a suspected privacy bug.", ""]
        audit_cols = ["setting", "backend", "seed", "epsilon", "bound_epsilon",
                      "bound_accountant", "attack_auc", "attack_advantage",
                      "heldout_advantage_ci_low", "advantage_bound", "suspected_privacy_bug"]
        lines += [markdown_table(frame[frame["attack_auc"].notna()], audit_cols), ""]
        flags = frame.get("suspected_privacy_bug")
        suspects = frame[flags.fillna(False).astype(bool)] if flags is not None else frame[:0]
        if not suspects.empty:
            lines += ["**Suspected privacy bug** in: "
                      + ", ".join(suspects["run_id"]) + ".", ""]
    return SectionOutput(lines)


__all__ = ["local_dp_and_audit"]
