"""Every figure quoted in prose is computed from what is committed, or is a setting.

The prose checked: every preset's ``notes``, the README's regions between
``<!-- checked-figures -->`` and ``<!-- /checked-figures -->`` (its findings, the presets
table, what the grids cost) and the top-level ``docs/*.md``. Every number in it that reads as
a result (a decimal, a percentage, "N of M", "N right") must lie inside a quoted snippet of
:data:`QUOTES`, which this test recomputes (from the committed records, the tuning tables, the
bench's results or the accountants), or inside an :data:`ALLOWED` snippet, a setting, a
target or a paper's printed figure, with the reason it is not a result. A figure that drifts
from its source, or a new one that nobody checks, fails here.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from compare.grid import load_preset, preset_names

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*\.\d+|\d+(?:\.\d+)? ?%"
                    r"|\b\d+ of (?:its |the )?\d+\b|\b\d+(?: to \d+)? right\b")
CHECKED = re.compile(r"<!-- checked-figures -->\n(.*?)<!-- /checked-figures -->", re.S)


def _flat(text: str) -> str:
    return " ".join(text.split())


def sources() -> dict[str, str]:
    """Source name -> its prose, whitespace folded."""
    out = {f"preset {name}": _flat(str(load_preset(name).get("notes", "")))
           for name in preset_names()}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    out["README"] = _flat(" ".join(CHECKED.findall(readme)))
    for doc in sorted((ROOT / "docs").glob("*.md")):
        out[f"docs/{doc.name}"] = _flat(doc.read_text(encoding="utf-8"))
    return out


# -- recomputations ------------------------------------------------------------------------------
@functools.cache
def frame(report: str):  # noqa: ANN201 - a pandas DataFrame
    from compare.records import read_records
    from compare.reporting.frames import results_frame

    return results_frame(read_records(REPORTS / report).results)


def paired_mean(report: str, setting: str) -> float:
    from compare.reporting.stats import seed_pairs

    (pair,) = (p for p in seed_pairs(frame(report)) if p.setting == setting)
    return 100 * float(pair.differences.mean())


def seed_accuracy(report: str, setting: str, backend: str, seed: int) -> float:
    f = frame(report)
    row = f[(f["setting"] == setting) & (f["backend"] == backend) & (f["seed"] == seed)]
    return float(row["accuracy"].iloc[0])


@functools.cache
def tuning_table(name: str) -> dict[tuple[str, str], tuple[str, ...]]:
    """(section heading, candidate) -> (validation accuracy, AUC, balanced accuracy or "")
    as the table prints them, found by the header's column names; also ("", "majority") ->
    the validation split's majority rate."""
    text = (REPORTS / "tuning" / name).read_text(encoding="utf-8")
    out: dict[tuple[str, str], tuple[str, ...]] = {
        ("", "majority"): (re.search(r"Majority class of the validation split: (\d+\.\d+)",
                                     text).group(1), "")}  # type: ignore[union-attr]
    heading, columns = "", {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("## "):
            heading = line[3:]
        elif line.startswith("| candidate"):
            columns = {c: i for i, c in enumerate(cells)}
        elif line.startswith("| ") and not line.startswith("|---"):
            balanced = columns.get("val. balanced accuracy")
            out[(heading, cells[0])] = (cells[columns["val. accuracy"]],
                                        cells[columns["val. AUC"]],
                                        "" if balanced is None else cells[balanced])
    return out


def val(name: str, heading: str, candidate: str, which: int) -> str:
    return tuning_table(name)[(heading, candidate)][which]


def accountant(noise: float, batch: int, n: int, epochs: int, delta: float) -> float:
    """The shared RDP epsilon of Poisson DP-SGD as the bench runs it: round(N / B) steps per
    epoch at q = B / N."""
    from dpcore.accounting import dpsgd_event, epsilon_rdp

    steps = epochs * round(n / batch)
    return epsilon_rdp(dpsgd_event("dpsgd-gaussian", noise, batch / n, steps), delta)


def audit_ceiling(m: int, k: int, delta: float) -> float:
    from dpcore.audit.one_run import epsilon_lower_bound

    return epsilon_lower_bound(m, k, k, delta)


def first_right(m: int, k: int, delta: float, above: float) -> int:
    """The fewest right guesses of k whose one-run bound exceeds ``above``."""
    from dpcore.audit.one_run import epsilon_lower_bound

    return next(c for c in range(k + 1) if epsilon_lower_bound(m, k, c, delta) > above)


def audit_ranges(select: Callable) -> tuple[str, str]:
    """"A to B right" and "bounds C to D" of the audit-check runs ``select`` picks."""
    f = frame("audit-check")
    runs = f[select(f)]
    low_right, high_right = int(runs["audit_correct"].min()), int(runs["audit_correct"].max())
    right = (f"{low_right} to {high_right} right" if low_right != high_right
             else f"{low_right} right")
    low, high = runs["epsilon_audited"].min(), runs["epsilon_audited"].max()
    bounds = (f"{low:.2f}" if low > 0 else "0") + f" to {high:.2f}"
    return right, bounds


def grid_cost_hours(preset: str, model: str | None = None) -> str:
    results = json.loads((REPORTS / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    (cost,) = (c for c in results["preset_costs"] if c["preset"] == preset)
    return f"{sum(g['hours'] for g in cost['groups'] if model in (None, g['model'])):.1f}"


def share_of_test(report: str, setting: str, class_index: int) -> float:
    from compare.records import read_records

    for r in read_records(REPORTS / report).results:
        if r.labels and " · ".join(r.labels.values()).endswith(setting):
            classes = r.metrics["per_class"]
            return 100 * classes[class_index]["support"] / sum(c["support"] for c in classes)
    raise AssertionError(setting)


def protocol_row(name: str, total: str, repetition: str) -> tuple[str, str]:
    """(exact accuracy, exact AUC) of one repetition in a protocol table, as it prints them."""
    text = (REPORTS / "tuning" / name).read_text(encoding="utf-8")
    section = text.split(f"## total epsilon {total}\n", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] == repetition:
            return cells[5], cells[6]
    raise AssertionError(f"{name}: no repetition {repetition} at total {total}")


def selection_noise(stem: str, total: str) -> float:
    """The winner's noise multiplier of a committed protocol run at one total: the final
    runs' noise in the accounted preset (the first repetition kind of the block is the
    winner's only where the preset says so; here read from the preset's own axis)."""
    blocks = json.loads((REPORTS / "tuning" / f"{stem}-protocol-selection.json")
                        .read_text(encoding="utf-8"))
    table = (REPORTS / "tuning" / f"{stem}-protocol.md").read_text(encoding="utf-8")
    section = table.split(f"## total epsilon {total}\n", 1)[1].split("\n## ", 1)[0]
    winner = re.search(r"Winner: \*\*(.+?)\*\* \(repetition (\d+)", section)
    assert winner is not None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] == winner.group(2):
            noise = float(cells[2])
            assert any(abs(r["noise_multiplier"] - noise) < 5e-4
                       for r in blocks[total]["repetitions"])
            return noise
    raise AssertionError(f"{stem}: no winner row at total {total}")


def _round2_range() -> tuple[str, str]:
    """Lowest and highest validation accuracy of the medical baseline's second round."""
    scores = sorted((v[0] for (heading, _), v in tuning_table(MEDICAL_2).items() if heading),
                    key=float)
    return scores[0], scores[-1]


def setting_mean(report: str, setting: str, backend: str, column: str) -> float:
    f = frame(report)
    rows = f[(f["setting"] == setting) & (f["backend"] == backend)]
    assert len(rows) == 5, (report, setting, backend, len(rows))
    return float(rows[column].mean())


@dataclass(frozen=True)
class Quote:
    """A quoted snippet of ``source`` and how to compute it."""

    source: str
    text: str
    compute: Callable[[], str]


IVE = "interpretability-vs-epsilon-tuned"
PNEU = "pneumoniamnist.md"
CATS = "cats_vs_dogs.md"
AUGMENT = "cats_vs_dogs_augment.md"
CHOSEN_NP = "np cnn4 relu width2 adam lr3e-4 b64 e100 hflip crop4"
MEDICAL_EPS8 = "pneumonia · cnn4 · DP-SGD eps=8"
MEDICAL_NP_SETTING = "pneumonia · cnn4 · non-private"
MEDICAL = "medical-ldp-vs-dpsgd-cnn4"
MEDICAL_1 = "medical_pneumonia_cnn4.md"
MEDICAL_2 = "medical_pneumonia_cnn4_round2.md"
MEDICAL_3 = "medical_pneumonia_cnn4_round3.md"
MEDICAL_NP = "sgd lr0.01 m0.9 b64 e20"


def _pneumonia_aucs() -> tuple[str, str, str, str]:
    """The sweep's validation AUCs: scatter-linear at epsilon 1 and 8, the best cnn4 at each."""
    return (val(PNEU, "epsilon 1", "scatter-linear lr0.4 b256 e10", 1),
            val(PNEU, "epsilon 8", "scatter-linear lr0.4 b256 e10", 1),
            val(PNEU, "epsilon 1", "cnn4 tanh lr0.4 b256 e10", 1),
            val(PNEU, "epsilon 8", "cnn4 relu lr0.1 b64 e10", 1))


def _no_noise(f):  # noqa: ANN001, ANN202 - a pandas mask
    return f["fault"].isin(["no_noise", "noise_div10"])


def _no_clip(f):  # noqa: ANN001, ANN202
    return f["fault"] == "no_clip"


def _honest_gradient(f):  # noqa: ANN001, ANN202
    return (f["fault"] == "") & (f["audit_kind"] == "gradient")


def _input_private(f):  # noqa: ANN001, ANN202
    return (f["audit_kind"] == "input") & (f["mechanism"] != "none")


def _input_public(f):  # noqa: ANN001, ANN202
    return (f["audit_kind"] == "input") & (f["mechanism"] == "none")


def _setting_value(report: str, setting: str, column: str) -> float:
    f = frame(report)
    return float(f.loc[f["setting"] == setting, column].iloc[0])


def _imdb_rdp() -> str:
    e15, e45, e60 = (accountant(0.56, 64, 25000, e, 1e-5) for e in (15, 45, 60))
    return f"(dp_accounting RDP: {e15:.2f} / {e45:.2f} / {e60:.2f} at 15 / 45 / 60 epochs)"


def _imdb_subset() -> str:
    return (f"gave q = {64 / 6000:.4f} and epsilon {accountant(0.56, 64, 6000, 15, 1e-5):.2f} "
            "at 15 epochs")


QUOTES: list[Quote] = [
    # pneumonia-noise-draws: why it was run (interpretability-vs-epsilon-tuned's records)
    Quote("preset pneumonia-noise-draws", "torch minus TF +3.33 points over 5 seeds",
          lambda: f"torch minus TF {paired_mean(IVE, 'pneumonia · gauss eps=0.5'):+.2f} "
                  "points over 5 seeds"),
    Quote("preset pneumonia-noise-draws", "(+2.28 points over 5 seeds)",
          lambda: f"({paired_mean(IVE, 'pneumonia · gauss eps=1'):+.2f} points over 5 seeds)"),
    # the tuning tables (reports/tuning)
    Quote("preset pneumonia-tuned", "validation AUC 0.968 at epsilon 1, 0.993 at epsilon 8; "
          "the best cnn4, 0.919 and 0.966",
          lambda: "validation AUC {} at epsilon 1, {} at epsilon 8; the best cnn4, {} and "
                  "{}".format(*_pneumonia_aucs())),
    Quote("docs/tuned-presets.md", "(0.968 at epsilon 1 and 0.993 at epsilon 8, against 0.919 "
          "and 0.966 for the best cnn4)",
          lambda: "({} at epsilon 1 and {} at epsilon 8, against {} and {} for the best "
                  "cnn4)".format(*_pneumonia_aucs())),
    Quote("docs/tuned-presets.md", "62.5 % pneumonia against 74 % in training",
          lambda: f"{share_of_test('pneumonia-tuned', 'eps=1', 1):.1f} % pneumonia against "
                  f"{100 * float(tuning_table(PNEU)[('', 'majority')][0]):.0f} % in training"),
    *[Quote(src, text, compute)
      for src in ("preset cats-vs-dogs-tuned", "docs/tuned-presets.md")
      for text, compute in (
          ("accuracy 0.713, AUC 0.770", lambda: "accuracy {}, AUC {}".format(
              *tuning_table(CATS)[("epsilon 8", "scatter-linear lr0.1 b256 e20")])),
          ("cnn4 reached 0.590",
           lambda: f"cnn4 reached {val(CATS, 'epsilon 8', 'cnn4 tanh lr0.4 b256 e20', 0)}"),
          ("scatter-cnn 0.667",
           lambda: f"scatter-cnn {val(CATS, 'epsilon 8', 'scatter-cnn tanh lr0.4 b256 e10', 0)}"),
      )],
    Quote("preset cats-vs-dogs-tuned", "scatter-linear lr 0.4, 0.698",
          lambda: "scatter-linear lr 0.4, "
                  + val(CATS, "epsilon 8", "non-private scatter-linear lr0.4 b256 e10", 0)),
    Quote("docs/tuned-presets.md", "(best 0.698;",
          lambda: "(best "
                  + val(CATS, "epsilon 8", "non-private scatter-linear lr0.4 b256 e10", 0) + ";"),
    Quote("preset cats-vs-dogs-tuned", "validation accuracy 0.800, AUC 0.869",
          lambda: "validation accuracy {}, AUC {}".format(
              *tuning_table(AUGMENT)[("epsilon 8", CHOSEN_NP)])),
    Quote("docs/tuned-presets.md", "(0.800)",
          lambda: f"({val(AUGMENT, 'epsilon 8', CHOSEN_NP, 0)})"),
    # the accounted selections (reports/tuning/*-protocol*)
    *[Quote(src, "accuracy 0.769, AUC 0.415", lambda: "accuracy {}, AUC {}".format(
        *protocol_row("pneumoniamnist-protocol.md", "1", "1")))
      for src in ("preset pneumonia-selected", "docs/tuned-presets.md")],
    Quote("preset pneumonia-selected", "(noise multiplier 8.446;",
          lambda: f"(noise multiplier {selection_noise('pneumoniamnist', '1'):.3f};"),
    Quote("preset pneumonia-selected", "(noise multiplier 0.844)",
          lambda: f"(noise multiplier {selection_noise('pneumoniamnist', '8'):.3f})"),
    Quote("preset cats-vs-dogs-selected", "(noise multiplier 2.165)",
          lambda: f"(noise multiplier {selection_noise('cats_vs_dogs', '8'):.3f})"),
    # the medical grid's non-private baseline: two tuning rounds and its test figures
    Quote("docs/tuned-presets.md", "(validation accuracy 0.961)",
          lambda: f"(validation accuracy {val(MEDICAL_1, 'without DP-SGD', MEDICAL_NP, 0)})"),
    Quote("docs/tuned-presets.md", "(from 0.949 to 0.962)",
          lambda: "(from {} to {})".format(*_round2_range())),
    Quote("docs/tuned-presets.md", "(0.962 against 0.961)",
          lambda: f"({val(MEDICAL_2, 'without DP-SGD', MEDICAL_NP + ' ema0.999', 0)} against "
                  f"{val(MEDICAL_2, 'without DP-SGD', MEDICAL_NP, 0)})"),
    *[Quote(src, "(0.957 against 0.950 for the round-2 setting)",
            lambda: "({} against {} for the round-2 setting)".format(
                val(MEDICAL_3, "without DP-SGD", MEDICAL_NP + " balanced", 2),
                val(MEDICAL_3, "without DP-SGD", MEDICAL_NP + " ema0.999", 2)))
      for src in ("preset medical-ldp-vs-dpsgd-cnn4", "docs/tuned-presets.md")],
    Quote("preset medical-ldp-vs-dpsgd-cnn4", "74 % pneumonia where the test split is 62.5 %",
          lambda: f"{100 * float(tuning_table(MEDICAL_3)[('', 'majority')][0]):.0f} % "
                  f"pneumonia where the test split is "
                  f"{share_of_test(MEDICAL, 'DP-SGD eps=8', 1):.1f} %"),
    Quote("docs/tuned-presets.md", "it scores 0.868 (tf) and 0.868 (torch), 5 seeds each, "
          "against DP-SGD epsilon 8's 0.848 and 0.848",
          lambda: "it scores {:.3f} (tf) and {:.3f} (torch), 5 seeds each, against DP-SGD "
                  "epsilon 8's {:.3f} and {:.3f}".format(*(
                      setting_mean(MEDICAL, s, b, "accuracy") for s in (MEDICAL_NP_SETTING,
                                                                        MEDICAL_EPS8)
                      for b in ("tf", "torch")))),
    # the shared accountant (dpcore.accounting)
    *[Quote(f"preset {p}", "(dp_accounting RDP: 6.84 / 10.32 / 11.75 at 15 / 45 / 60 epochs)",
            _imdb_rdp) for p in ("imdb-library-benchmark", "imdb-library-benchmark-15")],
    *[Quote(f"preset {p}", "gave q = 0.0107 and epsilon 12.92 at 15 epochs", _imdb_subset)
      for p in ("imdb-library-benchmark", "imdb-library-benchmark-15")],
    *[Quote(f"preset {p}", "1024 / 60000 = 0.01707", lambda: f"1024 / 60000 = {1024 / 60000:.5f}")
      for p in ("mnist-library-benchmark", "mnist-library-benchmark-15",
                "mnist-gap-attribution")],
    Quote("preset mnist-tuned", "spends epsilon 2.87 (delta 1e-5) in 30 epochs",
          lambda: f"spends epsilon {accountant(1.35, 1024, 60000, 30, 1e-5):.2f} (delta 1e-5) "
                  "in 30 epochs"),
    # the one-run audit's bounds (dpcore.audit.one_run) and what audit-check measured
    Quote("preset audit-check",
          "bounds at most 3.47 with k = 100 (all right) but only 2.76 with k = 50",
          lambda: f"bounds at most {audit_ceiling(1000, 100, 1e-5):.2f} with k = 100 (all "
                  f"right) but only {audit_ceiling(1000, 50, 1e-5):.2f} with k = 50"),
    Quote("preset audit-check", "it exceeds epsilon 1 from 81 right guesses on",
          lambda: f"it exceeds epsilon 1 from {first_right(1000, 100, 1e-5, 1.0)} right "
                  "guesses on"),
    Quote("preset audit-check", "k = 50 exceeds 1 only from 43 right guesses on",
          lambda: f"k = 50 exceeds 1 only from {first_right(500, 50, 1e-5, 1.0)} right "
                  "guesses on"),
    Quote("preset audit-check", "(no noise and noise / 10: 74 to 93 right, bounds 0.65 to 1.92,",
          lambda: "(no noise and noise / 10: {}, bounds {},".format(*audit_ranges(_no_noise))),
    Quote("preset audit-check", "no clipping: 97 to 99 right, 3.00)",
          lambda: "no clipping: {}, {})".format(audit_ranges(_no_clip)[0],
                                               audit_ranges(_no_clip)[1].split(" to ")[-1])),
    Quote("preset audit-check", "(51 to 64 right, bounds 0 to 0.21)",
          lambda: "({}, bounds {})".format(*audit_ranges(_honest_gradient))),
    Quote("preset audit-check", "(22 to 35 right, bounds 0 to 0.31)",
          lambda: "({}, bounds {})".format(*audit_ranges(_input_private))),
    Quote("preset audit-check", "(31 to 43 right, bounds 0 to 1.11)",
          lambda: "({}, bounds {})".format(*audit_ranges(_input_public))),
    Quote("preset mnist-gap-attribution", "k = 100 bounds at most 3.465 (all 100 right)",
          lambda: f"k = 100 bounds at most {audit_ceiling(1000, 100, 1e-5):.3f} (all 100 right)"),
    Quote("preset mnist-gap-attribution", "the harmonised claim of 3.442 violated",
          lambda: "the harmonised claim of {:.3f} violated".format(
              _setting_value("mnist-gap-attribution", "harmonised", "epsilon_claimed"))),
    Quote("preset mnist-gap-attribution", "bounds at most 4.98 and exceeds 3.442 from 492 right "
          "guesses on (epsilon 1 from 383)",
          lambda: f"bounds at most {audit_ceiling(5000, 500, 1e-5):.2f} and exceeds 3.442 from "
                  f"{first_right(5000, 500, 1e-5, 3.442)} right guesses on (epsilon 1 from "
                  f"{first_right(5000, 500, 1e-5, 1.0)})"),
    Quote("preset mnist-gap-attribution", "the ceiling only to 5.53",
          lambda: f"the ceiling only to {audit_ceiling(10000, 1000, 1e-5):.2f}"),
    Quote("preset mnist-gap-attribution", "5000 is 19 % of cnn4's 26 010",
          lambda: f"5000 is {100 * 5000 / 26010:.0f} % of cnn4's 26 010"),
    Quote("preset mnist-gap-attribution", "(the shuffled-batch and microbatch settings, 62.2)",
          lambda: "(the shuffled-batch and microbatch settings, {:.1f})".format(
              _setting_value("mnist-gap-attribution", "flip: shuffled fixed batches",
                             "epsilon_proved"))),
    # the README
    Quote("README", "whose seed 0 reached test accuracy 0.8654 on torch and 0.8606 on tf",
          lambda: "whose seed 0 reached test accuracy {:.4f} on torch and {:.4f} on tf".format(
              seed_accuracy("medical-ldp-vs-dpsgd-cnn4", MEDICAL_EPS8, "torch", 0),
              seed_accuracy("medical-ldp-vs-dpsgd-cnn4", MEDICAL_EPS8, "tf", 0))),
    Quote("README", "estimates its training here at 6.9 h",
          lambda: f"estimates its training here at {grid_cost_hours('medical-ldp-vs-dpsgd')} h"),
    Quote("README", "with ResNet-18 at 6.9 h of training",
          lambda: f"with ResNet-18 at {grid_cost_hours('medical-ldp-vs-dpsgd')} h of training"),
]

#: Snippets whose numbers are settings, targets, a paper's printed figures or a level, not
#: results: source -> snippets (each must occur in the source).
SETTINGS = "a setting, a target or a paper's printed figure"
ALLOWED: dict[str, list[str]] = {
    "preset cats-vs-dogs-tuned": ["(20 % of", "lr 0.1 for 20", "lr 0.4,", ">= 0.80", ">= 0.70"],
    "preset cats-vs-dogs-selected": ["tnb:1:0.1", "--score-noise 0.01", "std 0.01",
                                     "lr 0.1 with momentum 0.9", "momentum 0.9, expected"],
    "preset pneumonia-selected": ["tnb:1:0.1", "--score-noise 0.01", "gamma 0.1",
                                  "std 0.01", "lr 0.1 with momentum 0.9"],
    "preset pneumonia-tuned": ["lr 0.1 / 0.4", "(20 % of", "lr 0.4 collapsed", "used lr 0.1",
                               ">= 0.87", ">= 0.95", "0.854 / 0.944"],
    "preset imdb-library-benchmark": ["(sampling rate 0.00256 = 64 / 25000)"],
    "preset imdb-library-benchmark-15": ["(sampling rate 0.00256 = 64 / 25000)"],
    "preset medical-ldp-vs-dpsgd": ["uses lr 0.1: at the DP-SGD rate 0.5"],
    "preset medical-ldp-vs-dpsgd-cnn4": ["at lr 0.1 (at the DP-SGD rate 0.5",
                                         "(SGD lr 0.1, no momentum)",
                                         "SGD lr 0.01 with momentum 0.9",
                                         "(decay 0.999)"],
    "preset medical-ldp-vs-dpsgd-resnet18-short": ["(lr 0.1,", "with lr 0.1."],
    "preset mnist-gap-attribution": ["rate is 0.0169", "(96.72 - 85.47 = 11.25 points)",
                                     "exceeds 3.442 from", "a 95 % lower bound"],
    "preset mnist-library-benchmark": ["rate is 0.0169"],
    "preset mnist-library-benchmark-15": ["rate is 0.0169"],
    "preset mnist-tuned": ["lr 0.5, noise 1.23", "noise 1.35;", "momentum 0.9, clip norm 0.1",
                           "Noise 1.35 at", ">= 98.0 %", ">= 98.5 %"],
    "preset pneumonia-noise-draws": ["at epsilon 0.5 ("],
    "README": ["momentum 0.9 is tuned", "sgd lr 0.1 (default), momentum 0.9 (default)",
               "its 95% interval", "(adjusted p below 0.05)", "with a 95% percentile",
               "SGD 0.4 momentum 0.9", "lr 0.5, momentum 0.9, clip 0.1", "the published "
               "98.1 % and 98.7 %", "SGD 0.1 momentum 0.9", "SGD 0.1, noise 1.0", "lr 0.25, "
               "noise 0.56", "for epsilon 0.5, 1,", "epsilon 0.5) with 20 seeds"],
    "docs/defaults-sweep.md": ["| `train.lr` | 0.1 | 0.1 |", "| `train.momentum` | 0.9 | 0 |",
                               "| `privacy.max_grad_norm` | 1.0 | 1.0 |",
                               "about 45 % of one core", "20 % of each", "other 80 %",
                               "(0.9, 0.1), (0.9, 0.4)"],
    "docs/tuned-presets.md": ["20 % of the data set's", "other 80 %", "lr 0.4, batch 256",
                              "--protocol tnb:1:0.1 --score accuracy --score-noise 0.01",
                              "SGD lr 0.1 / 0.4 with momentum 0.9",
                              "accuracy >= 0.87 and AUC >= 0.95", "0.854 / 0.944",
                              "SGD lr 0.5 with momentum 0.9, clip norm 0.1",
                              "SGD lr 1 with momentum 0.9, clip norm 0.1", ">= 98.0 %",
                              ">= 98.5 %", "SGD lr 0.1 with momentum 0.9", ">= 0.80",
                              ">= 0.70", "SGD lr 0.1 without momentum",
                              "SGD lr 0.01, momentum 0.9, batch 64", "(decay 0.999)"],
    "docs/ARCHITECTURE.md": ["[[.9, .1], [.8, .2], [.3, .7]], y [0, 1, 1] -> (1/1 + 1/2) / 2 "
                             "= 0.75"],
}


def _defaults_table_quotes() -> list[Quote]:
    """docs/defaults-sweep.md's result table, row by row, from the sweep's runs.jsonl."""
    runs = [json.loads(line) for line in (REPORTS / "defaults-sweep" / "runs.jsonl")
            .read_text(encoding="utf-8").splitlines() if line.strip()]
    text = (ROOT / "docs" / "defaults-sweep.md").read_text(encoding="utf-8")
    quotes = []
    for line in text.splitlines():
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if len(cells) != 8 or cells[0] not in ("tanh", "relu"):
            continue
        activation, lr, batch, momentum, epochs = cells[0], *map(float, cells[1:5])

        def score(dataset: str, key=(activation, lr, batch, momentum, epochs)) -> float:
            (hit,) = (r["val_accuracy"] for r in runs if r["dataset"] == dataset and (
                r["activation"], r["lr"], r["batch_size"], r["momentum"], r["epochs"]) == key)
            return hit

        def expected(line: str = line, score: Callable = score) -> str:
            digits, mnist = score("digits"), score("mnist5k")
            out = line
            for old, new in zip(re.findall(r"0\.\d{3}", line)[-3:],
                                (f"{digits:.3f}", f"{mnist:.3f}", f"{(digits + mnist) / 2:.3f}"),
                                strict=True):
                out = out.replace(old, new, 1)
            return _flat(out)

        quotes.append(Quote("docs/defaults-sweep.md", _flat(line), expected))
    relu_256 = sorted(r["val_accuracy"] for r in runs if r["dataset"] == "digits"
                      and r["activation"] == "relu" and r["batch_size"] == 256
                      and r["epochs"] == 10)
    quotes.append(Quote("docs/defaults-sweep.md", "falls to 0.38-0.77 with batch 256",
                        lambda: f"falls to {relu_256[0]:.2f}-{relu_256[-1]:.2f} with batch 256"))
    means = {}
    for r in runs:
        key = (r["activation"], r["lr"], r["batch_size"], r["momentum"], r["epochs"])
        means.setdefault(key, {})[r["dataset"]] = r["val_accuracy"]
    ranked = sorted((sum(v.values()) / 2, k) for k, v in means.items() if len(v) == 2)[::-1]
    best_relu = max(m for m, k in ranked if k[0] == "relu")
    quotes.append(Quote("docs/defaults-sweep.md", "whose best is 0.838",
                        lambda: f"whose best is {best_relu:.3f}"))
    quotes.append(Quote("docs/defaults-sweep.md", "the first four are within 0.7 points",
                        lambda: "the first four are within "
                                f"{100 * (ranked[0][0] - ranked[3][0]):.1f} points"))
    return quotes


def all_quotes() -> list[Quote]:
    return [*QUOTES, *_defaults_table_quotes()]


@pytest.mark.parametrize("quote", all_quotes(), ids=lambda q: f"{q.source}: {q.text[:40]}")
def test_a_quoted_figure_is_what_its_source_computes(quote: Quote) -> None:
    text = sources()[quote.source]
    assert quote.text in text, f"{quote.source} no longer says {quote.text!r}"
    assert quote.compute() == quote.text, (
        f"{quote.source} says {quote.text!r}; its source gives {quote.compute()!r}")


@pytest.mark.parametrize("source", sorted(sources()))
def test_every_figure_in_prose_is_checked_or_a_setting(source: str) -> None:
    text = sources()[source]
    spans = []
    for snippet in [q.text for q in all_quotes() if q.source == source] + ALLOWED.get(source, []):
        assert snippet in text, f"{source}: the listed snippet {snippet!r} is not in it"
        start = 0
        while (i := text.find(snippet, start)) >= 0:
            spans.append((i, i + len(snippet)))
            start = i + 1
    unchecked = [m for m in NUMBER.finditer(text)
                 if not any(a <= m.start() and m.end() <= b for a, b in spans)]
    assert not unchecked, (
        f"{source}: figures neither recomputed (QUOTES) nor settings (ALLOWED, {SETTINGS}): "
        + "; ".join(f"{m.group(0)!r} in '...{text[max(0, m.start() - 40):m.end() + 20]}...'"
                    for m in unchecked))
