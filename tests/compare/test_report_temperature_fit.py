"""The report's calibrated table says which split each setting's temperature was fitted on
(``fit_split`` of the faithfulness record; read from ``fit_on`` for a record without it)."""

from __future__ import annotations

from pathlib import Path

from tests.compare.report_fakes import fake_result


def _faith(calibrated: dict) -> dict:
    return {"average_drop": 40.0, "increase_in_confidence": 1.5, "original_score": 0.99,
            "masked_score": 0.56,
            "randomisation_check": {"spearman_median": 0.1, "ssim_median": 0.2, "passes": True},
            "calibrated": {"temperature": 2.5, "average_drop": 25.0,
                           "increase_in_confidence": 12.0, **calibrated}}


def test_the_calibrated_table_names_the_split_t_was_fitted_on(tmp_path: Path) -> None:
    from compare.reporting.faithfulness_section import CALIBRATED_NOTE, faithfulness
    from compare.reporting.frames import temperature_fit
    from tests.compare.report_fakes import section_text

    val = {"fit_split": "validation", "fit_on": "the validation split"}
    old = {"fit_on": "test images outside the faithfulness subset"}  # before fit_split
    runs = [fake_result(backend="tf", seed=s, point=p, epsilon=e, faithfulness=_faith(c))
            for s in (0, 1) for p, e, c in (("eps=1", 1.0, val), ("eps=8", 8.0, old))]
    assert [temperature_fit(r) for r in runs] == ["validation", "test"] * 2
    assert temperature_fit(fake_result()) == ""
    text = section_text(faithfulness, runs)
    table = text.split("Faithfulness as output")[1].splitlines()
    header = next(line for line in table if line.startswith("| setting"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns.index("temperature_fit") == columns.index("temperature") + 1
    rows = {line.split("|")[1].strip(): line for line in table if "mnist5k ·" in line}
    assert "| validation |" in rows["mnist5k · eps=1"]
    assert "| test |" in rows["mnist5k · eps=8"]
    assert "validation split" in CALIBRATED_NOTE and CALIBRATED_NOTE in text


def test_a_temperature_at_the_bound_of_the_fit_is_named_per_setting(tmp_path: Path) -> None:
    """Runs whose fitted T is the fit's upper bound stay over-confident after scaling: the
    report names them (setting, backend, how many of its seeds), and says nothing when no
    run is there."""
    from compare.reporting.faithfulness_section import faithfulness
    from dpcore.metrics.calibration import TEMPERATURE_BOUNDS
    from tests.compare.report_fakes import section_text

    high = TEMPERATURE_BOUNDS[1]

    def run(seed: int, point: str, temperature: float) -> object:
        return fake_result(backend="tf", seed=seed, point=point,
                           epsilon=1.0 if point == "eps=1" else 8.0,
                           faithfulness=_faith({"temperature": temperature}))

    below = [run(s, p, 2.5) for s in (0, 1) for p in ("eps=1", "eps=8")]
    assert "upper bound" not in section_text(faithfulness, below)
    # the bounded minimiser stops just short of the bound: 19.9996 counts as at it
    mixed = [run(0, "eps=1", 2.5), run(1, "eps=1", 2.5),
             run(0, "eps=8", high * (1 - 2e-5)), run(1, "eps=8", 3.0)]
    text = section_text(faithfulness, mixed)
    note = next(line for line in text.splitlines() if "upper bound" in line)
    assert f"(T = {high:g}) for 1 run(s)" in note
    assert "`mnist5k · eps=8` tf (1 of 2)" in note and "eps=1" not in note
