"""A preset's ``selection:`` block: checked by the grid, outside every config hash, carried in
the report's context and records, and said in the headline and the privacy section (the
epsilon including the selection, or that the selection is not accounted)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from compare import records as rec
from compare.grid import expand_grid, load_preset
from compare.report_context import ReportContext
from compare.reporting.headline import headline_section
from compare.reporting.privacy_section import privacy
from compare.reporting.selection_text import final_run_totals
from dpcore.accounting import dpsgd_event
from dpcore.errors import ConfigError
from dpcore.results import RunResult
from dpcore.tuning import (
    CandidateSteps,
    RepetitionLaw,
    ScoreMechanism,
    parse_selection,
    parse_selections,
    selection_epsilon,
    selection_for,
)
from dpcore.tuning.bound import candidate_events, epsilon_of_curve, rdp_curve, selection_curve
from tests.compare.report_fakes import fake_result, section_text

NOT_ACCOUNTED = {"accounted": False, "candidates": 11,
                 "scored_on": "exact validation AUC of 20 % of the private training split",
                 "table": "reports/tuning/pneumoniamnist.md"}
LAW = RepetitionLaw.truncated_negative_binomial(1, 0.1)
SCORE = ScoreMechanism("accuracy", 0.01, 1 / 942)
REPS = [(CandidateSteps(0.068, 148), 1.9), (CandidateSteps(0.017, 590), 1.2)]


def accounted_block() -> dict[str, Any]:
    events = candidate_events([c for c, _ in REPS], [nm for _, nm in REPS], SCORE)
    return {"accounted": True, "candidates": 11, "scored_on": "noised validation accuracy",
            "law": LAW.to_dict(), "score": SCORE.to_dict(),
            "repetitions": [{"sampling_rate": c.sampling_rate, "steps": c.steps,
                             "noise_multiplier": nm} for c, nm in REPS],
            "delta": 1e-5, "epsilon": selection_epsilon(events, LAW, 1e-5)}


def test_blocks_are_checked() -> None:
    assert parse_selection(NOT_ACCOUNTED).to_dict() == NOT_ACCOUNTED
    block = accounted_block()
    assert parse_selection(block).to_dict() == block
    cases = [
        ({**NOT_ACCOUNTED, "epsilon": 1}, r"unknown keys \['epsilon'\]; valid: accounted"),
        ({**NOT_ACCOUNTED, "accounted": "no"}, "'accounted' must be true or false"),
        ({"accounted": False}, "needs 'scored_on'"),
        ({**block, "candidates": 0}, "'candidates' must be an integer >= 1"),
        ({k: v for k, v in block.items() if k != "law"}, "needs law"),
        ({**block, "law": {"kind": "geometric"}}, "selection law 'geometric' is not known"),
        ({**block, "score": {"metric": "accuracy", "noise_std": 0.01}}, "'score' must map"),
        ({**block, "repetitions": [{"sampling_rate": 2, "steps": 3, "noise_multiplier": 1}]},
         "sampling rate q=2.0"),
        ({**block, "epsilon": block["epsilon"] * 0.9}, "is not what its facts give"),
    ]
    for raw, message in cases:
        with pytest.raises(ConfigError, match=message):
            parse_selection(raw)
    # the unaccounted selection of others may leave the number of candidates out
    assert parse_selection({"accounted": False, "scored_on": "x"}).candidates is None


def test_the_block_moves_no_config_hash_and_is_checked_by_the_grid() -> None:
    raw = load_preset("pneumonia-tuned")
    assert raw["selection"]["accounted"] is False
    without = copy.deepcopy(raw)
    del without["selection"]
    with_block, plain = expand_grid(raw), expand_grid(without)
    assert [c.config.config_hash for c in with_block.cells] == [
        c.config.config_hash for c in plain.cells]
    assert with_block.selection == raw["selection"] and plain.selection is None
    accounted = expand_grid({**without, "selection": accounted_block()})
    assert accounted.selection == accounted_block()
    with pytest.raises(ConfigError, match="grid 'selection': unknown keys"):
        expand_grid({**without, "selection": {**NOT_ACCOUNTED, "eta": 1}})


@pytest.mark.parametrize("name", ["pneumonia-tuned", "cats-vs-dogs-tuned", "mnist-tuned",
                                  "interpretability-vs-epsilon-tuned"])
def test_tuned_presets_say_their_selection_is_not_accounted(name: str) -> None:
    selection = expand_grid(load_preset(name)).selection
    assert selection is not None and selection["accounted"] is False


def test_the_context_carries_the_block_through_the_records(tmp_path: Path) -> None:
    runs = [private_run("tf", 0)]
    for selection, folder in ((NOT_ACCOUNTED, "a"), (None, "b")):
        context = ReportContext(command="test", selection=selection)
        rec.write_records(tmp_path / folder, runs, context, [], {})
        assert rec.read_records(tmp_path / folder).context.selection == selection
    text = (tmp_path / "b" / rec.RECORDS_FOLDER / rec.CONTEXT_FILE).read_text("utf-8")
    assert "selection" not in text  # a grid without the block writes the context as before


def private_run(backend: str, seed: int, noise: float = 1.5) -> RunResult:
    run = fake_result(backend=backend, seed=seed, point="eps=1", labels={"privacy": "eps=1"})
    run.privacy.update({"noise_multiplier": noise, "sampling_rate": 0.054, "steps": 185,
                        "delta": 1e-5, "epsilon_rdp": 0.9876, "epsilon_pld": 0.9,
                        "dp_event": {"name": "gaussian"}})
    run.dataset.update(name="mnist5k", source="test")
    run.config["seed"] = seed
    for row in run.history:
        row["step"] = 10 * row["epoch"]
    run.versions = {"numpy": "1.26.4"}
    return run


def test_headline_and_privacy_section_give_the_total_with_the_selection() -> None:
    runs = [private_run(b, s) for b in ("tf", "torch") for s in (0, 1)]
    runs.append(fake_result(backend="tf", point="non-private", mechanism="none"))
    block = accounted_block()
    # independently: the selection's RDP curve plus the final run's, then converted
    events = candidate_events([c for c, _ in REPS], [nm for _, nm in REPS], SCORE)
    import numpy as np

    curve = selection_curve(np.max([rdp_curve(e) for e in events], axis=0), LAW)
    total = epsilon_of_curve(curve + rdp_curve(dpsgd_event("dpsgd-gaussian", 1.5, 0.054, 185)),
                             1e-5)
    assert total > block["epsilon"] and total > 0.9876
    [(setting, _, own, got)] = final_run_totals([parse_selection(block)], runs)
    assert setting == "eps=1" and own == 0.9876 and got == pytest.approx(total)
    head = section_text(headline_section, runs, selection=block)
    expected = (f"epsilon 0.988 for the final run; {total:.3g} including the selection of its "
                "hyper-parameters (Papernot & Steinke 2022, truncated negative binomial, "
                "eta=1, E[K]=10: 11 candidates")
    assert expected in head
    assert f"the selection alone costs epsilon {block['epsilon']:.3g} at delta 1e-05" in head
    section = section_text(privacy, runs, selection=block)
    assert "### Selection of the hyper-parameters" in section and expected in section


def test_reports_say_an_unaccounted_selection_is_unbounded() -> None:
    runs = [private_run(b, 0) for b in ("tf", "torch")]
    for section in (headline_section, privacy):
        text = section_text(section, runs, selection=NOT_ACCOUNTED)
        assert ("Epsilon including the selection of these hyper-parameters: unbounded. The "
                "selection is not accounted: chosen on exact validation AUC of 20 % of the "
                "private training split among 11 candidates (reports/tuning/pneumoniamnist.md),"
                " and a choice made on the private data without a DP mechanism has no finite "
                "epsilon (one example can change it); every epsilon in this report is the "
                "final run's alone.") in text
        plain = section_text(section, runs)
        assert "selection" not in plain.lower()


def test_a_run_rdp_cannot_bound_gets_no_total() -> None:
    run = private_run("tf", 0)
    run.privacy["mechanism"] = "dpsgd-laplace"
    run.config["privacy"]["mechanism"] = "dpsgd-laplace"
    [(_, _, _, total)] = final_run_totals([parse_selection(accounted_block())], [run])
    assert total is None
    assert math.isfinite(parse_selection(accounted_block()).epsilon or math.nan)


def test_several_blocks_each_name_their_settings() -> None:
    one = {**accounted_block(), "settings": ["eps=1"]}
    eight = {**NOT_ACCOUNTED, "settings": ["eps=8"]}
    parsed = parse_selections([one, eight], ["eps=1", "eps=8", "non-private"])
    assert selection_for(parsed, "eps=1") is parsed[0]
    assert selection_for(parsed, "eps=8") is parsed[1]
    assert selection_for(parsed, "non-private") is None
    cases = [
        ([one, {**eight, "settings": ["eps=1"]}], r"settings \['eps=1'\] are named by more"),
        ([one, NOT_ACCOUNTED], "each must name its 'settings'"),
        ([{**one, "settings": ["eps=2"]}], r"settings \['eps=2'\] are not in the grid; valid"),
        ([{**one, "settings": "eps=1"}], "'settings' must be a list"),
        ([], "non-empty list"),
    ]
    for raw, message in cases:
        with pytest.raises(ConfigError, match=message):
            parse_selections(raw, ["eps=1", "eps=8", "non-private"])
    raw = load_preset("pneumonia-tuned")
    del raw["selection"]
    grid = expand_grid({**raw, "selection": [one, eight]})
    assert grid.selection == [one, eight]
    with pytest.raises(ConfigError, match="not in the grid"):
        expand_grid({**raw, "selection": [{**one, "settings": ["eps=3"]}]})


def _two_selections() -> tuple[dict[str, Any], dict[str, Any], list[RunResult]]:
    """An accounted block for 'eps=1', an unaccounted one for 'eps=8', one run of each."""
    one = {**accounted_block(), "settings": ["eps=1"]}
    eight = {**NOT_ACCOUNTED, "settings": ["eps=8"]}
    other = private_run("tf", 1)
    other.labels = {"privacy": "eps=8"}
    return one, eight, [private_run("tf", 0), other]


def test_each_setting_is_totalled_with_its_own_selection() -> None:
    one, eight, runs = _two_selections()
    [row] = final_run_totals(parse_selections([one, eight]), runs)
    assert row[0] == "eps=1" and row[1].accounted
    text = section_text(headline_section, runs, selection=[one, eight])
    assert "including the selection of its hyper-parameters" in text
    assert "Epsilon including the selection of 'eps=8': unbounded" in text


def test_the_committed_pneumonia_selection_is_what_its_facts_give() -> None:
    import json

    root = Path(__file__).resolve().parents[2] / "reports" / "tuning"
    blocks = json.loads((root / "pneumoniamnist-protocol-selection.json").read_text("utf-8"))
    table = (root / "pneumoniamnist-protocol.md").read_text("utf-8")
    assert sorted(blocks) == ["1", "8"]
    for total, block in blocks.items():
        selection = parse_selection(block)  # recomputes the epsilon from the facts
        assert selection.accounted and selection.candidates == 11
        assert selection.epsilon is not None
        assert 0.99 * float(total) <= selection.epsilon <= float(total)
        assert f"## total epsilon {total}" in table
        assert f"**{selection.epsilon:.3f}** at delta 1e-05" in table
        assert (root.parents[1] / selection.table).is_file()


def test_the_readme_summary_gives_each_total_or_says_not_accounted() -> None:
    from compare.reporting.selection_text import selection_summary

    one, eight, runs = _two_selections()
    [(_, _, _, total)] = final_run_totals(parse_selections([one]), runs)
    assert selection_summary([one, eight], runs) == (
        "epsilon including the hyper-parameter selection (Papernot & Steinke 2022): "
        f"eps=1 {total:.3g}; epsilon including the hyper-parameter selection unbounded for "
        "'eps=8' (not accounted; the epsilons are the final runs' alone)")
    assert selection_summary(None, runs) is None
    assert selection_summary(NOT_ACCOUNTED, runs) == (
        "epsilon including the hyper-parameter selection unbounded (not accounted; the "
        "epsilons are the final runs' alone)")


#: The accounted presets: (preset, data set, committed protocol files' stem, candidates file,
#: the winner's candidate label per total epsilon).
SELECTED = [
    ("pneumonia-selected", "pneumoniamnist", "pneumoniamnist-protocol", "pneumoniamnist",
     {"1": "cnn4 tanh lr0.1 b64 e10", "8": "scatter-cnn tanh lr0.1 b64 e10"}),
    ("cats-vs-dogs-selected", "cats_vs_dogs", "cats_vs_dogs-protocol", "cats_vs_dogs",
     {"8": "scatter-linear lr0.1 b256 e20"}),
]


@pytest.mark.parametrize(("preset", "dataset", "stem", "candidates", "winners"), SELECTED)
def test_an_accounted_preset_retrains_the_committed_protocol_winners(
        preset: str, dataset: str, stem: str, candidates: str,
        winners: dict[str, str]) -> None:
    """Each setting of an accounted preset is its selection's winner (the committed table
    names it), configured as the sweep's candidate, at the winner's noise; its block is the
    committed selection's."""
    import json

    from benchmarks.tuning_candidates import load_candidates, run_config

    root = Path(__file__).resolve().parents[2]
    blocks = json.loads((root / "reports" / "tuning" / f"{stem}-selection.json")
                        .read_text("utf-8"))
    table = (root / "reports" / "tuning" / f"{stem}.md").read_text("utf-8")
    by_label = {c["label"]: c for c in load_candidates(
        root / "benchmarks" / "tuning" / f"{candidates}.yaml")}
    grid = expand_grid(load_preset(preset))
    selections = parse_selections(grid.selection, [c.setting for c in grid.cells])
    assert sorted(blocks) == sorted(winners) and len(selections) == len(winners)
    for total, selection in zip(sorted(winners, key=float), selections, strict=True):
        assert selection.settings == (f"selection eps={total}",)
        assert {k: v for k, v in selection.to_dict().items() if k != "settings"} == blocks[total]
    assert {c.setting for c in grid.cells} == {f"selection eps={t}" for t in winners}
    for cell in grid.cells:
        total = cell.setting.rsplit("=", 1)[1]
        label = winners[total]
        section = table.split(f"## total epsilon {total}\n")[1].split("\n## ")[0]  # its own
        assert f"Winner: **{label}**" in section
        candidate = run_config(dataset, by_label[label], float(total))
        assert (cell.config.model, cell.config.train) == (candidate.model, candidate.train)
        noise = next(float(row.strip("| ").split(" | ")[3]) for row in section.splitlines()
                     if row.startswith(f"| {label} |"))
        assert cell.config.privacy.noise_multiplier == pytest.approx(noise, abs=5e-4)
        assert cell.config.privacy.noise_multiplier in {
            r["noise_multiplier"] for r in blocks[total]["repetitions"]}


def _presets_with_a_selection() -> list[str]:
    import yaml

    root = Path(__file__).resolve().parents[2]
    names = []
    for path in sorted((root / "compare" / "presets").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(raw, dict) and raw.get("selection") is not None:
            names.append(path.stem)
    return names


@pytest.mark.parametrize("preset", _presets_with_a_selection())
def test_every_tuned_preset_prints_the_epsilon_including_its_selection(preset: str) -> None:
    """Accounted: the total per setting; not accounted: "unbounded", with what it was chosen
    on. A committed report older than its preset's wording waits for its regeneration."""
    from tests.compare.test_report_contract import AWAITING_REGENERATION

    root = Path(__file__).resolve().parents[2]
    report = root / "reports" / preset / "report.md"
    if not report.is_file():
        pytest.skip(f"{preset}: no committed report")
    head = report.read_text(encoding="utf-8").split("\n## Headline\n", 1)[-1].split("\n## ")[0]
    blocks = parse_selections(load_preset(preset)["selection"])
    printed = [("including the selection of its hyper-parameters" in head) if s.accounted
               else ("Epsilon including the selection" in head and ": unbounded." in head)
               for s in blocks]
    if preset in AWAITING_REGENERATION and not all(printed):
        pytest.xfail(f"{preset} awaits regeneration: {AWAITING_REGENERATION[preset][:80]}")
    assert all(printed), (f"{preset}: the headline does not give the epsilon including "
                          "each selection")
